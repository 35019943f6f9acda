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
    /// A backend (e.g. the GPU) failed to run an operation.
    #[error("backend: {0}")]
    Backend(String),
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

/// Result alias for the solvers.
pub type Result<T> = std::result::Result<T, SolverError>;
