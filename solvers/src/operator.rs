//! The `LinearOperator` trait (SciPy's name) and a dense operator for tests
//! and small problems.

use crate::backend::Backend;
use crate::cpu::CpuBackend;
use crate::{Result, SolverError};

/// A symmetric linear operator on vectors of a backend (SciPy's
/// `LinearOperator`, faer's `LinOp`): `dim` and `apply` are all an operator
/// must give; the rest have defaults, which an operator overrides where it
/// knows better (all of this crate's operators do: theirs are faster).
///
/// Multi-vector arguments hold `k` columns of length `dim()` back to back
/// (column `j` at `j * dim .. (j + 1) * dim`).
///
/// The defaults work through a backend made on the spot
/// ([`Backend::standalone`]; the CPU's): on a device backend they are a
/// named error, and a device operator gives `apply_multi` and `to_dense`.
pub trait LinearOperator<B: Backend> {
    /// The operator's dimension (it is square).
    fn dim(&self) -> usize;
    /// y = A x.
    fn apply(&self, x: &B::Vector, y: &mut B::Vector) -> Result<()>;
    /// Y = A X for `k` right-hand sides at once. The default applies `apply`
    /// to each column in turn (the same bits as `k` single applies).
    fn apply_multi(&self, x: &B::Vector, k: usize, y: &mut B::Vector) -> Result<()> {
        apply_by_columns(self, x, k, y)
    }
    /// out = diag(A). The default is an error naming the rule: an operator
    /// without its diagonal is solved unpreconditioned
    /// ([`crate::precond::Identity`]).
    fn diagonal(&self, _out: &mut B::Vector) -> Result<()> {
        Err(SolverError::invalid("diagonal()", "not provided", NO_DIAGONAL_RULE))
    }
    /// A as a dense row-major `dim x dim` host matrix. The default builds it
    /// from `dim` applications to unit vectors, for `dim <=`
    /// [`DEFAULT_DENSE_MAX_DIM`]; above that it is an error naming the rule.
    fn to_dense(&self) -> Result<Vec<f64>> {
        dense_by_columns(self)
    }
}

/// The rule a default `diagonal()` names.
pub const NO_DIAGONAL_RULE: &str =
    "this operator does not provide its diagonal; use an unpreconditioned solve (Identity) or give diagonal()";

/// The largest dimension the default `to_dense` builds (a 4096 x 4096
/// matrix: 128 MiB, and 4096 applications).
pub const DEFAULT_DENSE_MAX_DIM: usize = 4096;

/// The backend a default method works through, or an error naming the
/// method that needs one.
fn standalone<B: Backend>(method: &str) -> Result<B> {
    B::standalone().ok_or_else(|| {
        SolverError::invalid(
            format!("{method} (default)"),
            std::any::type_name::<B>(),
            "the default needs a backend made on the spot (the CPU's); an operator on this backend must give its own",
        )
    })
}

/// Y = A X column by column through `apply` (the default `apply_multi`).
fn apply_by_columns<B: Backend, O: LinearOperator<B> + ?Sized>(
    op: &O,
    x: &B::Vector,
    k: usize,
    y: &mut B::Vector,
) -> Result<()> {
    let be = standalone::<B>("apply_multi")?;
    let n = op.dim();
    expect_len("x", be.len(x), n * k)?;
    expect_len("y", be.len(y), n * k)?;
    if n == 0 {
        return Ok(());
    }
    let host_x = be.download(x)?;
    let mut host_y = Vec::with_capacity(n * k);
    let mut column = be.zeros(n)?;
    for xj in host_x.chunks(n) {
        op.apply(&be.upload(xj)?, &mut column)?;
        host_y.extend(be.download(&column)?);
    }
    *y = be.upload(&host_y)?;
    Ok(())
}

/// A from its applications to the unit vectors (the default `to_dense`).
fn dense_by_columns<B: Backend, O: LinearOperator<B> + ?Sized>(op: &O) -> Result<Vec<f64>> {
    let n = op.dim();
    if n > DEFAULT_DENSE_MAX_DIM {
        return Err(SolverError::invalid(
            "dim",
            n,
            format!(
                "the default to_dense() builds the matrix from dim applications and needs dim <= \
                 {DEFAULT_DENSE_MAX_DIM}; give to_dense() for larger operators"
            ),
        ));
    }
    let be = standalone::<B>("to_dense")?;
    let (mut unit, mut column) = (vec![0.0; n], be.zeros(n)?);
    let mut a = vec![0.0; n * n];
    for j in 0..n {
        unit[j] = 1.0;
        op.apply(&be.upload(&unit)?, &mut column)?;
        unit[j] = 0.0;
        for (i, v) in be.download(&column)?.into_iter().enumerate() {
            a[i * n + j] = v;
        }
    }
    Ok(a)
}

/// Check that a vector argument has the length an operation needs.
pub fn expect_len(field: &str, got: usize, want: usize) -> Result<()> {
    if got != want {
        return Err(SolverError::invalid(field, got, format!("length must equal {want}")));
    }
    Ok(())
}

/// A dense symmetric `n x n` matrix resident on a backend: what an
/// objective's evaluation keeps where every use of its Hessian is through
/// the dense matrix (`CostEstimate::always_dense`), so that the per-row
/// Hessians it was summed from are freed at once. The host copy answers
/// `to_dense`; products are the backend's `gemm_acc` on its copy (fixed
/// order), the diagonal a copy of its own.
pub struct ResidentDense<B: Backend> {
    backend: B,
    n: usize,
    host: Vec<f64>,
    a: B::Vector,
    diag: B::Vector,
    zero: B::Vector,
}

impl<B: Backend> ResidentDense<B> {
    /// Upload the row-major matrix `a` (`n x n`, symmetric as a row
    /// operator's `to_dense` gives it) to `backend`.
    pub fn new(backend: B, n: usize, a: Vec<f64>) -> Result<Self> {
        expect_len("dense matrix", a.len(), n * n)?;
        let diag: Vec<f64> = (0..n).map(|i| a[i * n + i]).collect();
        Ok(Self {
            a: backend.upload(&a)?,
            diag: backend.upload(&diag)?,
            zero: backend.zeros(n)?,
            backend,
            n,
            host: a,
        })
    }
}

impl<B: Backend> LinearOperator<B> for ResidentDense<B> {
    fn dim(&self) -> usize {
        self.n
    }
    fn apply(&self, x: &B::Vector, y: &mut B::Vector) -> Result<()> {
        expect_len("x", self.backend.len(x), self.n)?;
        expect_len("y", self.backend.len(y), self.n)?;
        self.backend.copy(&self.zero, y)?;
        self.backend.gemm_acc(&self.a, self.n, x, y)
    }
    fn apply_multi(&self, x: &B::Vector, k: usize, y: &mut B::Vector) -> Result<()> {
        expect_len("x", self.backend.len(x), self.n * k)?;
        expect_len("y", self.backend.len(y), self.n * k)?;
        self.backend.copy(&self.backend.zeros(self.n * k)?, y)?;
        self.backend.gemm_acc(&self.a, self.n, x, y)
    }
    fn diagonal(&self, out: &mut B::Vector) -> Result<()> {
        expect_len("diagonal", self.backend.len(out), self.n)?;
        self.backend.copy(&self.diag, out)
    }
    fn to_dense(&self) -> Result<Vec<f64>> {
        Ok(self.host.clone())
    }
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
