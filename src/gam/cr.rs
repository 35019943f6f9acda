//! mgcv's cubic regression spline, `s(x, bs = "cr")`: a natural cubic
//! spline parametrised by its values at k knots (the quantiles of the
//! unique x), with the penalty the integrated squared second derivative
//! (Wood 2017, section 5.3.1; mgcv's `smooth.construct.cr.smooth.spec`
//! and the C routines `crspl` and `getFS`).

use rayon::prelude::*;

use crate::{Error, Result};

/// The basis: the knots and F, the k x k map from the spline's values at
/// the knots to its second derivatives there (first and last rows zero:
/// a natural spline).
#[derive(Clone, Debug, PartialEq)]
pub struct CrBasis {
    knots: Vec<f64>,
    /// F, row-major k x k.
    f: Vec<f64>,
    /// The penalty D^T B^-1 D, row-major k x k.
    s: Vec<f64>,
}

impl CrBasis {
    /// The basis of `k >= 3` functions with knots at the quantiles of the
    /// unique values of `x` (finite; at least k unique values), as mgcv's
    /// `quantile(unique(x), seq(0, 1, length = k))` places them.
    pub fn new(label: &str, x: &[f64], k: usize) -> Result<Self> {
        if k < 3 {
            return Err(Error::invalid(format!("{label}: k"), k, "a cr basis needs k >= 3"));
        }
        let mut xu = x.to_vec();
        xu.par_sort_unstable_by(f64::total_cmp);
        xu.dedup();
        if xu.len() < k {
            return Err(Error::invalid(
                label,
                format!("{} unique values", xu.len()),
                format!("k = {k} knots need at least k unique covariate values: reduce k"),
            ));
        }
        let knots = (0..k).map(|i| quantile7(&xu, probability(i, k))).collect();
        Self::with_knots(knots)
    }

    /// The basis on the given knots (strictly increasing, at least 3).
    pub fn with_knots(knots: Vec<f64>) -> Result<Self> {
        if knots.len() < 3 || knots.iter().any(|v| !v.is_finite()) || knots.windows(2).any(|w| w[0] >= w[1]) {
            return Err(Error::invalid(
                "knots",
                format!("{knots:?}"),
                "need at least 3 finite, strictly increasing knots",
            ));
        }
        let (f, s) = second_derivative_map(&knots);
        Ok(Self { knots, f, s })
    }

    /// Number of functions k.
    pub fn dim(&self) -> usize {
        self.knots.len()
    }

    /// The k knots.
    pub fn knots(&self) -> &[f64] {
        &self.knots
    }

    /// The penalty (k x k, rank k - 2: the linear functions are unpenalised).
    pub fn penalty(&self) -> &[f64] {
        &self.s
    }

    /// The design (n x k, row-major) at finite x; beyond the knots the
    /// spline continues linearly, as mgcv's does.
    pub fn design(&self, x: &[f64]) -> Vec<f64> {
        let k = self.dim();
        let mut out = vec![0.0; x.len() * k];
        out.par_chunks_mut(k * 4096)
            .zip(x.par_chunks(4096))
            .for_each(|(rows, xs)| {
                for (row, &v) in rows.chunks_mut(k).zip(xs) {
                    self.row(v, row);
                }
            });
        out
    }

    /// One row of the design (`crspl`'s loop body).
    fn row(&self, x: f64, row: &mut [f64]) {
        let (t, k) = (&self.knots, self.dim());
        let (j, cm, cp, am, ap) = if x < t[0] {
            let (h, d) = (t[1] - t[0], x - t[0]);
            (0, -d * h / 3.0, -d * h / 6.0, 1.0 - d / h, d / h)
        } else if x > t[k - 1] {
            let (h, d) = (t[k - 1] - t[k - 2], x - t[k - 1]);
            (k - 2, d * h / 6.0, d * h / 3.0, -d / h, 1.0 + d / h)
        } else {
            let j = interval(t, x);
            let h = t[j + 1] - t[j];
            let (am, ap) = (t[j + 1] - x, x - t[j]);
            (
                j,
                am * (am * am / h - h) / 6.0,
                ap * (ap * ap / h - h) / 6.0,
                am / h,
                ap / h,
            )
        };
        let (fj, fj1) = (&self.f[j * k..(j + 1) * k], &self.f[(j + 1) * k..(j + 2) * k]);
        for (c, (a, b)) in row.iter_mut().zip(fj.iter().zip(fj1)) {
            *c = cm * a + cp * b;
        }
        row[j] += am;
        row[j + 1] += ap;
    }
}

/// mgcv's bisection: the j with t[j] < x <= t[j + 1] (j = 0 at t[0]).
fn interval(t: &[f64], x: f64) -> usize {
    let (mut j, mut up) = (0, t.len() - 1);
    while up - j > 1 {
        let mid = (j + up) / 2;
        if x > t[mid] {
            j = mid;
        } else {
            up = mid;
        }
    }
    j
}

/// R's `seq(0, 1, length = k)[i]`.
fn probability(i: usize, k: usize) -> f64 {
    if i + 1 == k {
        1.0
    } else {
        i as f64 / (k - 1) as f64
    }
}

/// R's `quantile(x, p, type = 7)` of sorted x.
fn quantile7(x: &[f64], p: f64) -> f64 {
    let index = (x.len() - 1) as f64 * p;
    let lo = index.floor() as usize;
    let h = index - lo as f64;
    if h > 0.0 && x[lo + 1] != x[lo] {
        (1.0 - h) * x[lo] + h * x[lo + 1]
    } else {
        x[lo]
    }
}

/// `getFS`: F (rows 1..k-1 are B^-1 D) and S = D^T B^-1 D, with D the
/// (k - 2) x k second-difference operator of the knot spacings and B the
/// tridiagonal (k - 2) x (k - 2) matrix of Wood (2017, 5.3.1).
fn second_derivative_map(t: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let k = t.len();
    let h: Vec<f64> = t.windows(2).map(|w| w[1] - w[0]).collect();
    let mut d = vec![0.0; (k - 2) * k];
    for i in 0..k - 2 {
        d[i * k + i] = 1.0 / h[i];
        d[i * k + i + 2] = 1.0 / h[i + 1];
        d[i * k + i + 1] = -1.0 / h[i] - 1.0 / h[i + 1];
    }
    let diag: Vec<f64> = (0..k - 2).map(|i| (h[i] + h[i + 1]) / 3.0).collect();
    let off: Vec<f64> = (1..k - 2).map(|i| h[i] / 6.0).collect();
    let bd = tridiagonal_solve(&diag, &off, &d, k);
    let mut f = vec![0.0; k * k];
    f[k..(k - 1) * k].copy_from_slice(&bd);
    let s = super::matmul(&super::transpose(&d, k - 2, k), &bd, k, k - 2, k);
    let s = (0..k * k).map(|t| 0.5 * (s[t] + s[(t % k) * k + t / k])).collect();
    (f, s)
}

/// B^-1 R for B symmetric positive definite tridiagonal (diagonal `diag`,
/// off-diagonal `off`) and R row-major m x c: LAPACK's `dptsv` (B = L D L^T).
fn tridiagonal_solve(diag: &[f64], off: &[f64], r: &[f64], c: usize) -> Vec<f64> {
    let m = diag.len();
    let mut dd = diag.to_vec();
    let mut l = vec![0.0; m.saturating_sub(1)];
    for i in 1..m {
        l[i - 1] = off[i - 1] / dd[i - 1];
        dd[i] -= l[i - 1] * off[i - 1];
    }
    let mut x = r.to_vec();
    for i in 1..m {
        for j in 0..c {
            x[i * c + j] -= l[i - 1] * x[(i - 1) * c + j];
        }
    }
    for i in (0..m).rev() {
        for j in 0..c {
            let next = if i + 1 < m { l[i] * x[(i + 1) * c + j] } else { 0.0 };
            x[i * c + j] = x[i * c + j] / dd[i] - next;
        }
    }
    x
}
