//! mgcv's P-spline, `s(x, bs = "ps", m = c(2, m2))`: cubic B-splines on
//! evenly spaced knots over the range of x widened by 0.1% at each end,
//! with a difference penalty of order m2 on the coefficients
//! (`smooth.construct.ps.smooth.spec`). The B-splines are [`PSpline`]'s.

use crate::{Error, PSpline, Result};

/// The basis: the B-splines and the order of the difference penalty.
#[derive(Clone, Debug, PartialEq)]
pub struct PsBasis {
    spline: PSpline,
    /// m = (m1, m2): B-splines of degree m1 + 1 (cubic: m1 = 2), a penalty
    /// on m2-th differences (0: a ridge penalty).
    m: [usize; 2],
}

impl PsBasis {
    /// The basis of `k >= 4` cubic B-splines over the range of `x` (finite
    /// values, checked by the caller; not all equal), widened by 0.1% of it at both ends as mgcv widens.
    /// Only cubic splines are built (`m[0] = 2`); `m[1]` is 0 ..= 3.
    pub fn new(label: &str, x: &[f64], k: usize, m: [usize; 2]) -> Result<Self> {
        let (lo, hi) = super::range(x);
        if lo >= hi {
            return Err(Error::invalid(
                label,
                format!("range {lo}..{hi}"),
                "a ps basis needs at least 2 distinct covariate values",
            ));
        }
        let widen = 0.001 * (hi - lo);
        Self::over(label, (lo - widen, hi + widen), k, m)
    }

    /// The basis of `k >= 4` cubic B-splines over `range` (already
    /// widened: [`PsBasis::range`] of a basis gives it back, to the bit).
    pub fn over(label: &str, range: (f64, f64), k: usize, m: [usize; 2]) -> Result<Self> {
        if m[0] != 2 || m[1] > 3 {
            return Err(Error::invalid(
                format!("{label}: m"),
                format!("{m:?}"),
                "only cubic P-splines (m[0] = 2) with a penalty of order m[1] in 0..=3 are built",
            ));
        }
        if k < 4 {
            return Err(Error::invalid(
                format!("{label}: k"),
                k,
                "a cubic ps basis needs k >= 4",
            ));
        }
        let spline = PSpline::new(range.0, range.1, k).map_err(|e| e.within(label))?;
        Ok(Self { spline, m })
    }

    /// The range the B-splines span: the covariate's, widened by 0.1%.
    pub fn range(&self) -> (f64, f64) {
        self.spline.range()
    }

    /// m = (m1, m2) as given.
    pub fn m(&self) -> [usize; 2] {
        self.m
    }

    /// Number of functions k.
    pub fn dim(&self) -> usize {
        self.spline.dim()
    }

    /// The k + 4 knots.
    pub fn knots(&self) -> &[f64] {
        self.spline.knots()
    }

    /// The order m2 of the difference penalty: its null space dimension.
    pub fn penalty_order(&self) -> usize {
        self.m[1]
    }

    /// The penalty D^T D (k x k) of the m2-th differences (the identity for
    /// m2 = 0).
    pub fn penalty(&self) -> Result<Vec<f64>> {
        let k = self.dim();
        match self.m[1] {
            0 => Ok(super::identity(k)),
            order => self.spline.penalty(order),
        }
    }

    /// The design (n x k) at finite x, linear beyond the knots' inner range.
    pub fn design(&self, x: &[f64]) -> Vec<f64> {
        self.spline.design_extended(x)
    }
}
