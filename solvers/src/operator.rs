//! The `LinearOperator` trait (SciPy's name) and a dense operator for tests
//! and small problems.

use crate::backend::Backend;
use crate::cpu::CpuBackend;
use crate::{Result, SolverError};

/// A symmetric linear operator on vectors of a backend.
///
/// Multi-vector arguments hold `k` columns of length `dim()` back to back
/// (column `j` at `j * dim .. (j + 1) * dim`).
pub trait LinearOperator<B: Backend> {
    /// The operator's dimension (it is square).
    fn dim(&self) -> usize;
    /// y = A x.
    fn apply(&self, x: &B::Vector, y: &mut B::Vector) -> Result<()>;
    /// Y = A X for `k` right-hand sides at once.
    fn apply_multi(&self, x: &B::Vector, k: usize, y: &mut B::Vector) -> Result<()>;
    /// out = diag(A).
    fn diagonal(&self, out: &mut B::Vector) -> Result<()>;
    /// A as a dense row-major `dim x dim` host matrix.
    fn to_dense(&self) -> Result<Vec<f64>>;
}

/// Check that a vector argument has the length an operation needs.
pub fn expect_len(field: &str, got: usize, want: usize) -> Result<()> {
    if got != want {
        return Err(SolverError::invalid(field, got, format!("length must equal {want}")));
    }
    Ok(())
}

/// A dense symmetric matrix held on the host, row-major.
#[derive(Clone, Debug)]
pub struct DenseOperator {
    n: usize,
    a: Vec<f64>,
}

impl DenseOperator {
    /// Wrap a row-major `n x n` matrix; it must be finite and symmetric.
    pub fn new(n: usize, a: Vec<f64>) -> Result<Self> {
        expect_len("dense matrix", a.len(), n * n)?;
        for i in 0..n {
            for j in 0..n {
                let v = a[i * n + j];
                if !v.is_finite() {
                    return Err(SolverError::invalid(format!("a[{i},{j}]"), v, "must be finite"));
                }
                if v != a[j * n + i] {
                    return Err(SolverError::invalid(
                        format!("a[{i},{j}]"),
                        v,
                        "matrix must be symmetric",
                    ));
                }
            }
        }
        Ok(Self { n, a })
    }

    /// The row-major entries.
    pub fn as_slice(&self) -> &[f64] {
        &self.a
    }

    fn matvec(&self, x: &[f64], y: &mut [f64]) {
        for (i, yi) in y.iter_mut().enumerate() {
            *yi = self.a[i * self.n..(i + 1) * self.n]
                .iter()
                .zip(x)
                .map(|(a, b)| a * b)
                .sum();
        }
    }
}

impl LinearOperator<CpuBackend> for DenseOperator {
    fn dim(&self) -> usize {
        self.n
    }
    fn apply(&self, x: &Vec<f64>, y: &mut Vec<f64>) -> Result<()> {
        expect_len("x", x.len(), self.n)?;
        expect_len("y", y.len(), self.n)?;
        self.matvec(x, y);
        Ok(())
    }
    fn apply_multi(&self, x: &Vec<f64>, k: usize, y: &mut Vec<f64>) -> Result<()> {
        expect_len("x", x.len(), self.n * k)?;
        expect_len("y", y.len(), self.n * k)?;
        for j in 0..k {
            let cols = j * self.n..(j + 1) * self.n;
            self.matvec(&x[cols.clone()], &mut y[cols]);
        }
        Ok(())
    }
    fn diagonal(&self, out: &mut Vec<f64>) -> Result<()> {
        expect_len("diagonal", out.len(), self.n)?;
        for (i, o) in out.iter_mut().enumerate() {
            *o = self.a[i * self.n + i];
        }
        Ok(())
    }
    fn to_dense(&self) -> Result<Vec<f64>> {
        Ok(self.a.clone())
    }
}
