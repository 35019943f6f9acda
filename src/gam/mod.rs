//! Generalised additive models: the GLM families and their links (smooth
//! terms join them here).

pub mod family;
pub mod link;
mod special;

pub use family::{Distribution, Family, GlmData, GlmRows};
pub use link::Link;
