//! Penalised GLMs and GAMs as mgcv fits them:
//! [`Gam`] fits a formula on named columns by REML as mgcv's
//! `gam(method = "REML")` does ([`GamFit`]); its parts are
//! model formulas ([`formula`]), the GLM families and their links
//! ([`family`], [`link`]: row evaluators of the generic core, r = 1), and
//! mgcv's model terms: the smooths
//! `s(x, bs = "cr")`, `s(x, bs = "ps")`, the tensor product `te(x1, x2)`
//! and the random effect `s(f, bs = "re")`,
//! with their penalties and identifiability constraints, and the
//! parametric terms (an intercept, a numeric column, a factor with
//! treatment contrasts), so that a formula gives the columns and penalties
//! mgcv gives.
//!
//! The definitions followed are mgcv 1.8-41's (`R/smooth.r`:
//! `smooth.construct.{cr,ps,tensor,re}.smooth.spec`, `smoothCon` with
//! `absorb.cons = TRUE, scale.penalty = TRUE`, `PredictMat`; `src/mgcv.c`:
//! `crspl`, `getFS`). `tests/gam_bases.rs` compares every matrix with
//! mgcv's (`tests/mgcv/bases.R`).
//!
//! Matrices are row-major `Vec<f64>`: a design is n x p, a penalty p x p
//! (ndarray views of a fit's vectors, and columns borrowed from ndarray
//! arrays: `arrays.rs`).
//! A term keeps what it needs to rebuild its columns at new data (knots,
//! constraint, factor levels), as mgcv's `PredictMat` does.

mod arrays;
mod cr;
mod data;
#[cfg(feature = "cuda")]
mod device;
mod factor;
pub mod family;
mod fit;
pub mod formula;
pub mod link;
mod on_device;
mod parametric;
mod ps;
mod re;
mod report;
pub mod saved;
mod setup;
mod smooth;
mod special;
pub mod summary;
mod tensor;
mod term;
mod term_predict;

pub use cr::CrBasis;
pub use data::TableColumns;
#[cfg(feature = "cuda")]
pub use device::{DeviceGlmRows, GLM_KERNELS};
pub use factor::Factor;
pub use family::{Distribution, Family, GlmData, GlmRows};
pub use fit::{Gam, GamFit, GamModel, GamOptions, Prediction, PredictionType, ScaleCell, ScaledRows};
pub use formula::{Formula, Response};
pub use link::Link;
pub use parametric::Parametric;
pub use ps::PsBasis;
pub use re::ReBasis;
pub use saved::SavedGam;
pub use setup::ModelTerm;
pub use smooth::{Basis, Smooth, Spec};
pub use summary::{summarize, GamSummary, SummaryInput};
pub use tensor::TensorBasis;
pub use term::{model_matrix, Term};
pub use term_predict::{SmoothPanels, TermPrediction, PLOT_POINTS};

use crate::{Error, Result};

/// One covariate column of a data set, as a term reads it.
#[derive(Clone, Copy, Debug)]
pub enum Column<'a> {
    /// A numeric covariate.
    Numeric(&'a [f64]),
    /// A factor, one level name per row.
    Factor(&'a [String]),
}

impl<'a> Column<'a> {
    /// The number of rows.
    pub fn len(&self) -> usize {
        match self {
            Column::Numeric(x) => x.len(),
            Column::Factor(f) => f.len(),
        }
    }

    /// Whether the column has no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The numeric values of term `label`'s covariate, all finite.
    pub(crate) fn numeric(&self, label: &str) -> Result<&'a [f64]> {
        let Column::Numeric(x) = *self else {
            return Err(Error::invalid(
                label,
                "a factor column",
                "this term needs a numeric covariate",
            ));
        };
        if let Some(i) = x.iter().position(|v| !v.is_finite()) {
            return Err(Error::invalid(
                format!("{label}: x[{i}]"),
                x[i],
                "covariates must be finite",
            ));
        }
        Ok(x)
    }

    /// The level names of term `label`'s factor covariate.
    pub(crate) fn factor(&self, label: &str) -> Result<&'a [String]> {
        match *self {
            Column::Factor(f) => Ok(f),
            Column::Numeric(_) => Err(Error::invalid(
                label,
                "a numeric column",
                "this term needs a factor covariate",
            )),
        }
    }
}

/// The columns a term of `want` covariates was given, checked for count
/// and a common, non-zero length.
pub(crate) fn expect_columns<'a, 'b>(label: &str, columns: &'b [Column<'a>], want: usize) -> Result<&'b [Column<'a>]> {
    if columns.len() != want {
        return Err(Error::invalid(
            label,
            format!("{} columns", columns.len()),
            format!("this term takes {want} covariate column(s)"),
        ));
    }
    let n = columns[0].len();
    if n == 0 || columns.iter().any(|c| c.len() != n) {
        let lens: Vec<usize> = columns.iter().map(Column::len).collect();
        return Err(Error::invalid(
            label,
            format!("rows {lens:?}"),
            "columns must share one non-zero length",
        ));
    }
    Ok(columns)
}

/// `a b` for row-major a (n x m) and b (m x p).
pub(crate) fn matmul(a: &[f64], b: &[f64], n: usize, m: usize, p: usize) -> Vec<f64> {
    let prod = faer::MatRef::from_row_major_slice(a, n, m) * faer::MatRef::from_row_major_slice(b, m, p);
    (0..n * p).map(|t| prod[(t / p, t % p)]).collect()
}

/// The transpose of a row-major n x p matrix.
pub(crate) fn transpose(a: &[f64], n: usize, p: usize) -> Vec<f64> {
    (0..n * p).map(|t| a[(t % n) * p + t / n]).collect()
}

/// The p x p identity.
pub(crate) fn identity(p: usize) -> Vec<f64> {
    (0..p * p).map(|t| f64::from(t / p == t % p)).collect()
}

/// The smallest and largest of x.
pub(crate) fn range(x: &[f64]) -> (f64, f64) {
    x.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &v| (l.min(v), h.max(v)))
}
