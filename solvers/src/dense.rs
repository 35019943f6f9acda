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
    /// read). A matrix that is not positive definite is an error naming the
    /// failing pivot and the value found there.
    pub fn factor(n: usize, a: &[f64]) -> Result<Self> {
        expect_len("dense matrix", a.len(), n * n)?;
        if let Some(i) = a.iter().position(|v| !v.is_finite()) {
            return Err(SolverError::invalid(
                format!("a[{},{}]", i / n, i % n),
                a[i],
                "must be finite",
            ));
        }
        let m = Mat::from_fn(n, n, |i, j| a[i * n + j]);
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
