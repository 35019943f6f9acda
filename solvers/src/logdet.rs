//! The exact dense path for Newton and REML: one Cholesky factor of
//! `A = H + S_lambda` gives `log|A|`, solves, `A^{-1}` and the traces
//! `tr(A^{-1} S_k)`. The factor is the backend's ([`Backend::dense_factor`]):
//! faer on the host, or a device factorisation where the backend has one
//! and p is large enough for it to pay.

use std::cell::OnceCell;

use crate::backend::Backend;
use crate::dense::Cholesky;
use crate::operator::{expect_len, LinearOperator};
use crate::penalty::Penalty;
use crate::Result;

/// A factor of a dense symmetric positive definite matrix A: its
/// log-determinant and solves, wherever it lives. A matrix that is not
/// positive definite fails to factor with
/// [`crate::SolverError::NotPositiveDefinite`] on every backend.
pub trait DenseFactor {
    /// The dimension p.
    fn dim(&self) -> usize;
    /// log|A|.
    fn logdet(&self) -> f64;
    /// Solve A X = B for `k` right-hand sides stored back to back.
    fn solve(&self, b: &[f64], k: usize) -> Result<Vec<f64>>;
}

impl DenseFactor for Cholesky {
    fn dim(&self) -> usize {
        Cholesky::dim(self)
    }
    fn logdet(&self) -> f64 {
        Cholesky::logdet(self)
    }
    fn solve(&self, b: &[f64], k: usize) -> Result<Vec<f64>> {
        Cholesky::solve(self, b, k)
    }
}

/// faer's Cholesky of a dense row-major `p x p` matrix, as a
/// [`DenseFactor`]: the host's factor, every backend's default.
pub fn host_factor(p: usize, a: &[f64]) -> Result<Box<dyn DenseFactor>> {
    Ok(Box::new(Cholesky::factor(p, a)?))
}

/// A Cholesky factor of the penalised Hessian `A = H + S_lambda`.
pub struct PenalisedFactor {
    chol: Box<dyn DenseFactor>,
    inverse: OnceCell<Vec<f64>>,
}

impl PenalisedFactor {
    /// Factor a dense row-major `p x p` symmetric positive definite matrix
    /// on the host.
    pub fn new(p: usize, a: &[f64]) -> Result<Self> {
        Ok(Self::of(host_factor(p, a)?))
    }

    /// Factor it with `backend`'s dense factorisation.
    pub fn on<B: Backend>(backend: &B, p: usize, a: &[f64]) -> Result<Self> {
        Ok(Self::of(backend.dense_factor(p, a)?))
    }

    fn of(chol: Box<dyn DenseFactor>) -> Self {
        Self {
            chol,
            inverse: OnceCell::new(),
        }
    }

    /// Factor an operator through its dense form (e.g. a
    /// [`crate::penalty::Penalised`]).
    pub fn from_operator<B: Backend>(op: &dyn LinearOperator<B>) -> Result<Self> {
        Self::new(op.dim(), &op.to_dense()?)
    }

    /// The dimension p.
    pub fn dim(&self) -> usize {
        self.chol.dim()
    }

    /// log|A|.
    pub fn logdet(&self) -> f64 {
        self.chol.logdet()
    }

    /// Solve A X = B for `k` right-hand sides stored back to back.
    pub fn solve(&self, b: &[f64], k: usize) -> Result<Vec<f64>> {
        self.chol.solve(b, k)
    }

    /// A^{-1}, row-major (computed once, on first use).
    pub fn inverse(&self) -> Result<&[f64]> {
        if let Some(inv) = self.inverse.get() {
            return Ok(inv);
        }
        let p = self.dim();
        let eye: Vec<f64> = (0..p * p).map(|i| f64::from(i / p == i % p)).collect();
        // A^{-1} is symmetric, so its columns are also its rows.
        let inv = self.solve(&eye, p)?;
        Ok(self.inverse.get_or_init(|| inv))
    }

    /// tr(A^{-1} M) for a dense row-major `p x p` matrix M.
    pub fn trace_inv(&self, m: &[f64]) -> Result<f64> {
        let p = self.dim();
        expect_len("trace matrix", m.len(), p * p)?;
        let inv = self.inverse()?;
        // tr(A^{-1} M) = sum_ij Ainv_ij M_ji.
        Ok((0..p)
            .map(|i| (0..p).map(|j| inv[i * p + j] * m[j * p + i]).sum::<f64>())
            .sum())
    }

    /// tr(A^{-1} S_k) for each (unscaled) block of a penalty: only the
    /// block's columns of A^{-1} are needed.
    pub fn penalty_traces(&self, penalty: &Penalty) -> Result<Vec<f64>> {
        let p = self.dim();
        expect_len("penalty dimension", penalty.dim(), p)?;
        penalty
            .blocks()
            .iter()
            .map(|b| {
                let mut e = vec![0.0; p * b.dim];
                for j in 0..b.dim {
                    e[j * p + b.start + j] = 1.0;
                }
                let x = self.solve(&e, b.dim)?;
                // Column j of x is A^{-1} e_{start + j}.
                Ok((0..b.dim)
                    .map(|j| {
                        (0..b.dim)
                            .map(|i| x[j * p + b.start + i] * b.s[i * b.dim + j])
                            .sum::<f64>()
                    })
                    .sum())
            })
            .collect()
    }
}
