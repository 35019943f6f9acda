//! The crate's error type: every rejected input names the field, the value and
//! the rule it broke.

use thiserror::Error;

/// Errors raised by `matfree`.
#[derive(Debug, Error)]
pub enum Error {
    /// A user-supplied input broke a shape, range or finiteness rule.
    #[error("invalid input: {field} = {value}: {rule}")]
    InvalidInput {
        /// The offending field (e.g. `x_m[17]`, `layout.p_total`).
        field: String,
        /// The value seen, rendered for the message.
        value: String,
        /// The rule it broke.
        rule: String,
    },
    /// A row of the model could not be evaluated (e.g. F_a <= 0).
    #[error("row {row} rejected: {reason}")]
    RowRejected {
        /// Row index.
        row: usize,
        /// Why it was rejected.
        reason: String,
    },
    /// NVRTC could not compile a kernel source: the file, the architecture,
    /// NVRTC's result code, the options and the compiler's log, as fields.
    #[error("NVRTC compile of kernels/{file} for {arch} failed ({code}) with options {options:?}:\n{log}")]
    Compile {
        /// The kernel source file.
        file: String,
        /// The target architecture (e.g. `sm_90`).
        arch: String,
        /// NVRTC's result code, or the step that failed.
        code: String,
        /// The options passed to NVRTC.
        options: Vec<String>,
        /// The compiler's log (empty when the failure came before compiling).
        log: String,
    },
    /// The CUDA backend is unavailable or failed.
    #[error("cuda: {0}")]
    Cuda(String),
    /// A solver failed.
    #[error(transparent)]
    Solver(#[from] matfree_solvers::SolverError),
}

impl Error {
    /// Shorthand for [`Error::InvalidInput`].
    pub fn invalid(field: impl Into<String>, value: impl std::fmt::Display, rule: impl Into<String>) -> Self {
        Error::InvalidInput {
            field: field.into(),
            value: value.to_string(),
            rule: rule.into(),
        }
    }

    /// An invalid input's field placed under `outer` (`model.json:
    /// terms[1]: knots`); any other error as it is.
    pub fn within(self, outer: impl std::fmt::Display) -> Self {
        match self {
            Error::InvalidInput { field, value, rule } => Error::invalid(format!("{outer}: {field}"), value, rule),
            other => other,
        }
    }
}

/// Result alias for `matfree`.
pub type Result<T> = std::result::Result<T, Error>;

impl From<Error> for matfree_solvers::SolverError {
    /// Input and solver errors keep their structure; others become backend errors.
    fn from(e: Error) -> Self {
        match e {
            Error::InvalidInput { field, value, rule } => Self::InvalidInput { field, value, rule },
            // A solver's own error (a pivot that is not positive, say) stays itself.
            Error::Solver(e) => e,
            other => Self::Backend(other.to_string()),
        }
    }
}

/// An error naming the first entry that is not finite (`vp[3]`) among the
/// named vectors.
pub(crate) fn all_finite(fields: &[(&str, &[f64])]) -> Result<()> {
    for (field, v) in fields {
        if let Some(i) = v.iter().position(|x| !x.is_finite()) {
            return Err(Error::invalid(format!("{field}[{i}]"), v[i], "must be finite"));
        }
    }
    Ok(())
}
