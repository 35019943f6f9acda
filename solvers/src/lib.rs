//! Backend-agnostic solvers for matfree: preconditioned conjugate gradients,
//! preconditioners, the exact dense path, penalties, the penalised Newton
//! driver and REML/LAML smoothing-parameter selection, written once against
//! the [`Backend`] and [`LinearOperator`] traits.
//!
//! The CPU backend here is the reference oracle; the CUDA backend in the
//! `matfree` crate implements the same traits with device-resident vectors
//! and scalars.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod backend;
pub mod cpu;
pub mod dense;
mod error;
pub mod logdet;
pub mod newton;
pub mod observer;
pub mod operator;
pub mod pcg;
pub mod pcg_kernels;
pub mod penalty;
pub mod precond;
pub mod reml;
pub mod stats;

pub use backend::{Backend, Slot};
pub use cpu::CpuBackend;
pub use dense::{clip_eigenvalues, symmetric_eigen, symmetry_error, Cholesky, SYMMETRY_TOL};
pub use error::{Result, SolverError};
pub use logdet::{DenseFactor, PenalisedFactor};
pub use newton::{
    fd_hessian_derivative, newton, newton_from, newton_observed, resolution, CostEstimate, Evaluation, Forcing,
    NewtonFit, NewtonIteration, NewtonOptions, NewtonReport, Objective, StepSolver, Termination, RESOLVED_DECREMENT,
};
pub use observer::{EvaluationKind, EvaluationRecord, Observer};
pub use operator::{DenseOperator, LinearOperator, ResidentDense, DEFAULT_DENSE_MAX_DIM, NO_DIAGONAL_RULE};
pub use pcg::{cg, BreakdownQuantity, Pcg, PcgInfo, PcgOptions, PcgSolution, StopReason};
pub use pcg_kernels::{PcgKernels, PcgVectors};
pub use penalty::{Constraint, LogPseudoDet, Penalised, Penalty, PenaltyBlock, PenaltyMatrix};
pub use precond::{precondition, Identity, Jacobi, Preconditioner};
pub use reml::{
    evaluate_laml, fellner_schall_step, reference_rho, reml, reml_observed, EvaluationCounts, LamlEvaluation,
    OuterStep, RemlFit, RemlIteration, RemlOptions, RemlReport, RemlTermination, STALL_STEPS,
};
pub use stats::{effective_df, Edf, FitStatistics};
