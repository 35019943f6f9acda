//! Errors shared by every solver.

use thiserror::Error;

/// Errors raised by the solvers and by the backends they run on.
#[derive(Debug, Error)]
pub enum SolverError {
    /// A user-supplied input broke a shape, range or finiteness rule.
    #[error("invalid input: {field} = {value}: {rule}")]
    InvalidInput {
        /// The offending field.
        field: String,
        /// The value seen, rendered for the message.
        value: String,
        /// The rule it broke.
        rule: String,
    },
    /// A dense factorisation met a pivot that is not positive.
    #[error("matrix is not positive definite: pivot {pivot} = {value:e}")]
    NotPositiveDefinite {
        /// Zero-based index of the failing pivot (or diagonal entry).
        pivot: usize,
        /// The value found there (the Schur complement's diagonal entry).
        value: f64,
    },
    /// An iterative solver stopped before its tolerance was met, with the
    /// history of its convergence measure (as faer's
    /// `CgError::NoConvergence` carries its residual).
    #[error("{solver} did not converge after {iterations} iterations ({termination}); last measure {last:e}", last = history.last().copied().unwrap_or(f64::NAN))]
    NoConvergence {
        /// Which solver (e.g. `inner Newton`).
        solver: String,
        /// Iterations taken.
        iterations: usize,
        /// Why it stopped.
        termination: String,
        /// The convergence measure at each iteration (for Newton, the
        /// gradient's inf-norm; for PCG, the residual norm).
        history: Vec<f64>,
    },
    /// A computation met a value it cannot go on from (an overflow, a
    /// breakdown, a matrix that stayed indefinite): not the input's shape
    /// but the numbers it led to.
    #[error("numerical failure in {what}: {value}: {reason}")]
    NumericalFailure {
        /// Where (e.g. `pcg Breakdown`, `hessian diagonal[3]`).
        what: String,
        /// The value met, rendered.
        value: String,
        /// What it means.
        reason: String,
    },
    /// A backend (e.g. the GPU) failed to run an operation.
    #[error("backend: {0}")]
    Backend(String),
    /// The solve's observer asked it to stop ([`crate::observer::Observer::interrupted`]:
    /// a user's Ctrl-C, say) before an evaluation of the objective.
    #[error("interrupted: the solve's observer asked it to stop")]
    Interrupted,
}

impl SolverError {
    /// Shorthand for [`SolverError::InvalidInput`].
    pub fn invalid(field: impl Into<String>, value: impl std::fmt::Display, rule: impl Into<String>) -> Self {
        SolverError::InvalidInput {
            field: field.into(),
            value: value.to_string(),
            rule: rule.into(),
        }
    }
}

impl SolverError {
    /// Shorthand for [`SolverError::NumericalFailure`].
    pub fn numerical(what: impl Into<String>, value: impl std::fmt::Display, reason: impl Into<String>) -> Self {
        SolverError::NumericalFailure {
            what: what.into(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}

/// Result alias for the solvers.
pub type Result<T> = std::result::Result<T, SolverError>;
