//! Penalised GLMs and GAMs as mgcv fits them: formulas, smooth terms,
//! families, and the fit on the generic row core (issue #40, in progress).

pub mod formula;

pub use formula::{Basis, Formula, Response, Smooth, Term};
