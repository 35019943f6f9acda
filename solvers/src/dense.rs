//! Exact dense path: Cholesky factorisation (faer), log-determinant, solves.

use faer::linalg::solvers::Solve;
use faer::{Mat, Side};

use crate::operator::expect_len;
use crate::{Result, SolverError};

/// The Cholesky factor L (A = L L^T) of a symmetric positive definite matrix.
pub struct Cholesky {
    llt: faer::linalg::solvers::Llt<f64>,
    n: usize,
}

impl Cholesky {
    /// Factor a row-major `n x n` symmetric matrix (its lower triangle is
    /// read, after checking that it mirrors the upper one: see
    /// [`symmetry_error`]). A matrix that is not positive definite is an
    /// error naming the failing pivot and the value found there.
    pub fn factor(n: usize, a: &[f64]) -> Result<Self> {
        let m = dense_matrix(n, a)?;
        if let Some((i, j, rule)) = symmetry_error(n, a) {
            return Err(SolverError::invalid(format!("a[{i},{j}]"), a[i * n + j], rule));
        }
        match m.llt(Side::Lower) {
            Ok(llt) => Ok(Self { llt, n }),
            Err(faer::linalg::cholesky::llt::factor::LltError::NonPositivePivot { index }) => {
                Err(SolverError::NotPositiveDefinite {
                    pivot: index,
                    value: schur_pivot(n, a, index),
                })
            }
        }
    }

    /// log det A = 2 sum ln L_ii.
    pub fn logdet(&self) -> f64 {
        let l = self.llt.L();
        2.0 * (0..self.n).map(|i| l[(i, i)].ln()).sum::<f64>()
    }

    /// Solve A X = B for `k` right-hand sides stored back to back.
    pub fn solve(&self, b: &[f64], k: usize) -> Result<Vec<f64>> {
        expect_len("rhs", b.len(), self.n * k)?;
        let mut rhs = Mat::from_fn(self.n, k, |i, j| b[j * self.n + i]);
        self.llt.solve_in_place(rhs.as_mut());
        Ok((0..k)
            .flat_map(|j| (0..self.n).map(move |i| (j, i)))
            .map(|(j, i)| rhs[(i, j)])
            .collect())
    }

    /// The dimension.
    pub fn dim(&self) -> usize {
        self.n
    }
}

/// The diagonal entry of the Schur complement at `pivot` (what Cholesky
/// found not positive), recomputed on the leading block for the message.
fn schur_pivot(n: usize, a: &[f64], pivot: usize) -> f64 {
    let k = pivot + 1;
    let mut l = vec![0.0; k * k];
    for j in 0..k {
        let d = a[j * n + j] - (0..j).map(|t| l[j * k + t] * l[j * k + t]).sum::<f64>();
        if j == pivot {
            return d;
        }
        let ljj = d.sqrt();
        l[j * k + j] = ljj;
        for i in j + 1..k {
            let s = a[i * n + j] - (0..j).map(|t| l[i * k + t] * l[j * k + t]).sum::<f64>();
            l[i * k + j] = s / ljj;
        }
    }
    f64::NAN
}

/// Relative tolerance of the symmetry checks: rounding in sums of products
/// leaves asymmetry near 1e-16 relative; 1e-10 is far above it and far
/// below any real asymmetry.
pub const SYMMETRY_TOL: f64 = 1e-10;

/// The first entry of a row-major `n x n` matrix that breaks symmetry,
/// `|a_ij - a_ji| > SYMMETRY_TOL * max(|a_ij|, |a_ji|, sqrt(|a_ii a_jj|))`,
/// as (i, j, the rule with both values), or `None`.
pub fn symmetry_error(n: usize, a: &[f64]) -> Option<(usize, usize, String)> {
    for i in 0..n {
        for j in 0..i {
            let (x, y) = (a[i * n + j], a[j * n + i]);
            // Mirrored entries (the usual case) pass without the scale's
            // square root: a model's rows are checked at every evaluation.
            if x == y {
                continue;
            }
            let scale = x.abs().max(y.abs()).max((a[i * n + i] * a[j * n + j]).abs().sqrt());
            if (x - y).abs() > SYMMETRY_TOL * scale {
                let rule = format!("must equal [{j},{i}] = {y} (symmetric to within {SYMMETRY_TOL:e} relative)");
                return Some((i, j, rule));
            }
        }
    }
    None
}

/// A row-major `n x n` matrix checked (length, finiteness) into faer's.
fn dense_matrix(n: usize, a: &[f64]) -> Result<Mat<f64>> {
    expect_len("dense matrix", a.len(), n * n)?;
    if let Some(i) = a.iter().position(|v| !v.is_finite()) {
        return Err(SolverError::invalid(
            format!("a[{},{}]", i / n, i % n),
            a[i],
            "must be finite",
        ));
    }
    Ok(Mat::from_fn(n, n, |i, j| a[i * n + j]))
}

/// The eigen decomposition of a row-major symmetric `n x n` matrix (its
/// lower triangle is read): eigenvalues ascending, and the eigenvectors as
/// the columns of a row-major `n x n` matrix.
pub fn symmetric_eigen(n: usize, a: &[f64]) -> Result<(Vec<f64>, Vec<f64>)> {
    let evd = dense_matrix(n, a)?
        .self_adjoint_eigen(Side::Lower)
        .map_err(|e| SolverError::invalid("symmetric eigen", format!("{e:?}"), "did not converge"))?;
    let (s, u) = (evd.S().column_vector(), evd.U());
    let values = (0..n).map(|i| s[i]).collect();
    let vectors = (0..n * n).map(|k| u[(k / n, k % n)]).collect();
    Ok((values, vectors))
}

/// `V max(L, floor) V^T`: a symmetric matrix with its eigenvalues below
/// `floor` raised to it (0 gives the positive part).
pub fn clip_eigenvalues(n: usize, a: &[f64], floor: f64) -> Result<Vec<f64>> {
    let (values, v) = symmetric_eigen(n, a)?;
    let mut out = vec![0.0; n * n];
    for (k, &l) in values.iter().enumerate() {
        let l = l.max(floor);
        for i in 0..n {
            let vik = l * v[i * n + k];
            for j in 0..n {
                out[i * n + j] += vik * v[j * n + k];
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eigen_reconstructs_and_clips() {
        let a = [4.0, 1.0, 0.5, 1.0, -2.0, 0.3, 0.5, 0.3, 1.0];
        let (vals, v) = symmetric_eigen(3, &a).unwrap();
        assert!(vals.windows(2).all(|w| w[0] <= w[1]));
        let back = clip_eigenvalues(3, &a, f64::NEG_INFINITY).unwrap();
        for (x, y) in back.iter().zip(&a) {
            assert!((x - y).abs() < 1e-12);
        }
        // V^T V = I
        for i in 0..3 {
            for j in 0..3 {
                let d: f64 = (0..3).map(|k| v[k * 3 + i] * v[k * 3 + j]).sum();
                assert!((d - f64::from(i == j)).abs() < 1e-12);
            }
        }
        let pos = clip_eigenvalues(3, &a, 0.0).unwrap();
        let (pv, _) = symmetric_eigen(3, &pos).unwrap();
        assert!(pv[0].abs() < 1e-12 && pv[0] >= -1e-12, "{pv:?}");
        assert!((pv[2] - vals[2]).abs() < 1e-12);
    }
}
