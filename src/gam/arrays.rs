//! ndarray in and out for GAM fits: numeric columns borrowed from
//! one-dimensional arrays, and a fit's coefficients, covariances, edf and
//! predictions as ndarray views over the fit's own vectors (no copies
//! either way), as `bms::io::arrays` does for the BMS model.

use ndarray::{ArrayView1, ArrayView2};

use super::{Column, GamFit, Prediction};
use crate::{Error, Result};

impl<'a> Column<'a> {
    /// A numeric column borrowed from `values` (named `name` in errors):
    /// any one-dimensional array or view whose elements are contiguous in
    /// order (standard layout), without a copy. A strided or reversed view
    /// has no such slice: it is refused with the rule (copy it with
    /// `.to_owned()` first).
    pub fn from_view(name: &str, values: ArrayView1<'a, f64>) -> Result<Self> {
        let len = values.len();
        let stride = values.strides().first().copied().unwrap_or(1);
        match values.to_slice() {
            Some(slice) => Ok(Column::Numeric(slice)),
            None => Err(Error::invalid(
                format!("column '{name}'"),
                format!("{len} values with stride {stride}"),
                "must be contiguous in order (standard layout): copy it with .to_owned() first",
            )),
        }
    }
}

/// A p x p row-major matrix as a view.
fn square<'m>(name: &str, m: &'m [f64], p: usize) -> Result<ArrayView2<'m, f64>> {
    ArrayView2::from_shape((p, p), m)
        .map_err(|e| Error::invalid(name, format!("{} values", m.len()), format!("must be {p} x {p}: {e}")))
}

impl GamFit {
    /// The coefficients (mgcv's `coef`), in [`GamFit::names`]' order.
    ///
    /// [`GamFit::names`]: GamFit#structfield.names
    pub fn coefficients_view(&self) -> ArrayView1<'_, f64> {
        ArrayView1::from(&self.coefficients)
    }

    /// The Bayesian covariance Vp (p x p).
    pub fn vp_view(&self) -> Result<ArrayView2<'_, f64>> {
        square("vp", &self.vp, self.coefficients.len())
    }

    /// The frequentist covariance Ve (p x p).
    pub fn ve_view(&self) -> Result<ArrayView2<'_, f64>> {
        square("ve", &self.ve, self.coefficients.len())
    }

    /// The effective degrees of freedom of each coefficient (mgcv's `edf`).
    pub fn edf_view(&self) -> ArrayView1<'_, f64> {
        ArrayView1::from(&self.edf)
    }

    /// The smoothing parameters (mgcv's `sp`).
    pub fn sp_view(&self) -> ArrayView1<'_, f64> {
        ArrayView1::from(&self.sp)
    }
}

impl Prediction {
    /// The predictions (mgcv's `fit`).
    pub fn fit_view(&self) -> ArrayView1<'_, f64> {
        ArrayView1::from(&self.fit)
    }

    /// Their standard errors (mgcv's `se.fit`).
    pub fn se_view(&self) -> ArrayView1<'_, f64> {
        ArrayView1::from(&self.se)
    }
}
