//! matfree: matrix-free Newton/REML fitting of large penalised models on the
//! CPU and on NVIDIA GPUs.
//!
//! The central object is a per-row Hessian, H = sum_i P_i^T H_i P_i, with
//! each H_i a small dense r x r block pulled back to the p coefficients
//! through each row's designs (any number of linear predictors, plus
//! coefficients that enter a row directly: [`Layout`]). [`RowHessian`]
//! holds it on the CPU and implements [`matfree_solvers::LinearOperator`],
//! so the solvers of `matfree-solvers` (PCG, Jacobi, the dense Cholesky
//! path) run on it unchanged; a model implements [`RowEvaluator`] (its
//! rows) and [`RowObjective`] makes it an objective for Newton and REML.
//! [`gam`] builds mgcv's model terms (smooths `cr`, `ps`, `te`, `re` with
//! their penalties and constraints; parametric terms) for penalised GLMs.
//!
//! The GPU backend (module `cuda`, through cudarc) is the `cuda` feature,
//! on by default; a build without it (`--no-default-features`) runs on the
//! CPU alone, and a request for the GPU there is an error ([`device`]).
#![warn(missing_docs)]

pub mod bms;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod data;
pub mod designs;
pub mod device;
mod dispatch;
mod error;
pub mod files;
#[cfg(feature = "testing")]
pub mod fixture;
pub mod gam;
pub mod layout;
pub mod plot;
pub mod pool;
pub mod pspline;
pub mod rng;
pub mod row_hessian;
pub mod row_objective;
pub mod table;

pub use designs::Designs;
pub use error::{Error, Result};
pub use layout::{Block, Layout};
pub use matfree_solvers as solvers;
/// The ndarray this crate takes and returns (`matfree::bms::io::arrays`).
pub use ndarray;
pub use pspline::PSpline;
pub use row_hessian::{joint_gradient, JointGradient, RowHessian};
pub use row_objective::{HessianStorage, RowEvaluator, RowObjective};

/// The README's library example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The design notes' example (several GPUs), compiled as a doctest.
#[cfg(all(doctest, feature = "cuda"))]
#[doc = include_str!("../docs/design.md")]
pub struct DesignDoctests;
