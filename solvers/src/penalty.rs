//! Quadratic penalties: the block-diagonal `S_lambda = sum_k lambda_k S_k`
//! ([`Penalty`]), its dense copy on a backend ([`PenaltyMatrix`]) and the
//! penalised Hessian operator `H + S_lambda + ridge I` ([`Penalised`]).
//!
//! Each block `S_k` is a dense symmetric positive semi-definite matrix placed
//! at a contiguous range of beta; blocks do not overlap. A block may have a
//! null space (a P-spline's difference penalty leaves the polynomials it
//! does not penalise): its rank r_k and the log of its pseudo-determinant
//! (the product of its positive eigenvalues) are found once, by an eigen
//! decomposition, so `log|S_lambda|_+ = sum_k (r_k ln lambda_k + log|S_k|_+)`
//! and its derivative in `ln lambda_k` is `r_k`, exactly, at any lambda.
//! (Overlapping blocks, as tensor products have, need mgcv's stable
//! re-parametrisation and are not accepted yet.)

use serde::{Deserialize, Serialize};

use crate::backend::Backend;
use crate::dense::Cholesky;
use crate::operator::{expect_len, LinearOperator};
use crate::{Result, SolverError};

/// Largest accepted asymmetry of a block, relative to its largest entry;
/// blocks within it are symmetrised (averaged), beyond it rejected.
pub const SYMMETRY_TOL: f64 = 1e-10;

/// One penalty block: `S_k` acting on `beta[start..start + dim]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PenaltyBlock {
    /// First coefficient the block acts on.
    pub start: usize,
    /// Number of coefficients it acts on.
    pub dim: usize,
    /// The `dim x dim` symmetric positive semi-definite matrix, row-major.
    pub s: Vec<f64>,
}

impl PenaltyBlock {
    /// The coefficient range of the block.
    pub fn range(&self) -> std::ops::Range<usize> {
        self.start..self.start + self.dim
    }

    /// beta_k^T S_k beta_k for the block's slice of a full beta.
    pub fn quadratic(&self, beta: &[f64]) -> f64 {
        let b = &beta[self.range()];
        (0..self.dim)
            .map(|i| b[i] * dot(&self.s[i * self.dim..(i + 1) * self.dim], b))
            .sum()
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(u, v)| u * v).sum()
}

/// A validated block-diagonal penalty on `p` coefficients. Blocks do not
/// overlap; coefficients outside every block are unpenalised. Block `k` is
/// scaled by `lambda[k]`.
#[derive(Clone, Debug)]
pub struct Penalty {
    p: usize,
    blocks: Vec<PenaltyBlock>,
    logdets: Vec<f64>,
    ranks: Vec<usize>,
}

impl Penalty {
    /// Validate and store the blocks: each must be non-empty, lie inside
    /// `0..p`, be finite, symmetric (to [`SYMMETRY_TOL`]), positive
    /// semi-definite and not zero (to [`RANK_TOL`]), and no two may overlap.
    pub fn new(p: usize, blocks: Vec<PenaltyBlock>) -> Result<Self> {
        let mut blocks = blocks;
        let (mut logdets, mut ranks) = (Vec::with_capacity(blocks.len()), Vec::with_capacity(blocks.len()));
        for (k, b) in blocks.iter_mut().enumerate() {
            let (logdet, rank) = validate_block(k, p, b)?;
            logdets.push(logdet);
            ranks.push(rank);
        }
        let mut order: Vec<usize> = (0..blocks.len()).collect();
        order.sort_by_key(|&k| blocks[k].start);
        for w in order.windows(2) {
            let (a, b) = (&blocks[w[0]], &blocks[w[1]]);
            if a.start + a.dim > b.start {
                return Err(SolverError::invalid(
                    format!("blocks[{}].start", w[1]),
                    b.start,
                    format!("blocks must not overlap (blocks[{}] ends at {})", w[0], a.start + a.dim),
                ));
            }
        }
        Ok(Self {
            p,
            blocks,
            logdets,
            ranks,
        })
    }

    /// Number of coefficients.
    pub fn dim(&self) -> usize {
        self.p
    }

    /// Number of blocks (smoothing parameters).
    pub fn n_blocks(&self) -> usize {
        self.blocks.len()
    }

    /// The blocks, in the order of their smoothing parameters.
    pub fn blocks(&self) -> &[PenaltyBlock] {
        &self.blocks
    }

    /// log|S_k|_+ of each unscaled block (log|S_k| where it has full rank).
    pub fn block_logdets(&self) -> &[f64] {
        &self.logdets
    }

    /// The rank of each block (its dimension where it is positive definite).
    pub fn ranks(&self) -> &[usize] {
        &self.ranks
    }

    /// Check that `lambda` has one finite positive entry per block.
    pub fn check_lambda(&self, lambda: &[f64]) -> Result<()> {
        expect_len("lambda", lambda.len(), self.blocks.len())?;
        for (k, &l) in lambda.iter().enumerate() {
            if !(l.is_finite() && l > 0.0) {
                return Err(SolverError::invalid(
                    format!("lambda[{k}]"),
                    l,
                    "must be finite and > 0",
                ));
            }
        }
        Ok(())
    }

    /// S_lambda as a dense row-major `p x p` matrix.
    pub fn dense(&self, lambda: &[f64]) -> Result<Vec<f64>> {
        self.check_lambda(lambda)?;
        let p = self.p;
        let mut s = vec![0.0; p * p];
        for (b, &l) in self.blocks.iter().zip(lambda) {
            for i in 0..b.dim {
                for j in 0..b.dim {
                    s[(b.start + i) * p + b.start + j] = l * b.s[i * b.dim + j];
                }
            }
        }
        Ok(s)
    }

    /// S_lambda beta.
    pub fn apply(&self, lambda: &[f64], beta: &[f64]) -> Result<Vec<f64>> {
        self.check_lambda(lambda)?;
        expect_len("beta", beta.len(), self.p)?;
        let mut out = vec![0.0; self.p];
        for (b, &l) in self.blocks.iter().zip(lambda) {
            let x = &beta[b.range()];
            for i in 0..b.dim {
                out[b.start + i] = l * dot(&b.s[i * b.dim..(i + 1) * b.dim], x);
            }
        }
        Ok(out)
    }

    /// beta^T S_lambda beta.
    pub fn quadratic(&self, lambda: &[f64], beta: &[f64]) -> Result<f64> {
        self.check_lambda(lambda)?;
        expect_len("beta", beta.len(), self.p)?;
        Ok(self
            .blocks
            .iter()
            .zip(lambda)
            .map(|(b, &l)| l * b.quadratic(beta))
            .sum())
    }

    /// log|S_lambda|_+, the log pseudo-determinant: the blocks do not
    /// overlap, so it is `sum_k (r_k ln lambda_k + log|S_k|_+)` and its
    /// derivative in `ln lambda_k` is the rank `r_k`.
    pub fn log_pseudo_det(&self, lambda: &[f64]) -> Result<f64> {
        self.check_lambda(lambda)?;
        Ok(self
            .ranks
            .iter()
            .zip(lambda)
            .zip(&self.logdets)
            .map(|((&r, &l), ld)| r as f64 * l.ln() + ld)
            .sum())
    }
}

/// Check one block and symmetrise it; returns (log|S_k|_+, rank).
fn validate_block(k: usize, p: usize, b: &mut PenaltyBlock) -> Result<(f64, usize)> {
    let field = |name: &str| format!("blocks[{k}].{name}");
    if b.dim == 0 {
        return Err(SolverError::invalid(field("dim"), 0, "must be >= 1"));
    }
    if b.start.checked_add(b.dim).is_none_or(|end| end > p) {
        return Err(SolverError::invalid(
            field("start"),
            b.start,
            format!("start + dim ({}) must be <= p = {p}", b.dim),
        ));
    }
    expect_len(&field("s"), b.s.len(), b.dim * b.dim)?;
    if let Some(i) = b.s.iter().position(|v| !v.is_finite()) {
        return Err(SolverError::invalid(field("s"), b.s[i], "entries must be finite"));
    }
    let scale = b.s.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let n = b.dim;
    for i in 0..n {
        for j in 0..i {
            let (u, v) = (b.s[i * n + j], b.s[j * n + i]);
            if (u - v).abs() > SYMMETRY_TOL * scale {
                return Err(SolverError::invalid(
                    format!("blocks[{k}].s[{i},{j}]"),
                    u,
                    format!("must equal s[{j},{i}] = {v} (symmetric)"),
                ));
            }
            let m = 0.5 * (u + v);
            b.s[i * n + j] = m;
            b.s[j * n + i] = m;
        }
    }
    rank_and_logdet(k, n, &b.s)
}

/// An eigenvalue at most this fraction of a block's largest is zero (its
/// null space); below minus this fraction the block is not positive
/// semi-definite. The rounding of an exact null space is about 1e-15 of the
/// largest eigenvalue; the smallest positive eigenvalue of a 40-column
/// second-difference penalty is about 1e-5 of it, the BMS blocks' 3.7e-4.
pub const RANK_TOL: f64 = 1e-10;

/// A block's (log|S|_+, rank). A block of full rank takes its log
/// determinant from a Cholesky factor, as it always did; one with a null
/// space from its positive eigenvalues.
fn rank_and_logdet(k: usize, n: usize, s: &[f64]) -> Result<(f64, usize)> {
    let field = format!("blocks[{k}].s");
    let (values, _) = crate::dense::symmetric_eigen(n, s)?;
    let top = values[n - 1];
    if top <= 0.0 {
        return Err(SolverError::invalid(
            field,
            format!("largest eigenvalue {top:e}"),
            "must not be zero",
        ));
    }
    if values[0] < -RANK_TOL * top {
        return Err(SolverError::invalid(
            field,
            format!("eigenvalue {:e} (largest {top:e})", values[0]),
            format!("must be positive semi-definite (to {RANK_TOL:e} of its largest eigenvalue)"),
        ));
    }
    let positive: Vec<f64> = values.into_iter().filter(|&v| v > RANK_TOL * top).collect();
    if positive.len() == n {
        return match Cholesky::factor(n, s) {
            Ok(c) => Ok((c.logdet(), n)),
            Err(SolverError::NotPositiveDefinite { pivot, value }) => Err(SolverError::invalid(
                field,
                format!("pivot {pivot} = {value:e}"),
                "must be positive semi-definite (its Cholesky factor failed)",
            )),
            Err(e) => Err(e),
        };
    }
    Ok((positive.iter().map(|v| v.ln()).sum(), positive.len()))
}

/// A dense `p x p` penalty held both on the host and on a backend.
pub struct PenaltyMatrix<B: Backend> {
    p: usize,
    host: Vec<f64>,
    device: B::Vector,
}

impl<B: Backend> PenaltyMatrix<B> {
    /// Upload a dense row-major `p x p` matrix.
    pub fn new(backend: &B, p: usize, host: Vec<f64>) -> Result<Self> {
        expect_len("penalty matrix", host.len(), p * p)?;
        let device = backend.upload(&host)?;
        Ok(Self { p, host, device })
    }

    /// S_lambda of a [`Penalty`], uploaded.
    pub fn from_penalty(backend: &B, penalty: &Penalty, lambda: &[f64]) -> Result<Self> {
        Self::new(backend, penalty.dim(), penalty.dense(lambda)?)
    }

    /// The dimension p.
    pub fn dim(&self) -> usize {
        self.p
    }

    /// The host copy, row-major.
    pub fn host(&self) -> &[f64] {
        &self.host
    }

    /// The backend copy.
    pub fn device(&self) -> &B::Vector {
        &self.device
    }
}

/// Slots of a [`Penalised`] operator's scalar bank.
const RIDGE_SLOT: usize = 0;
const ONE_SLOT: usize = 1;

/// The penalised Hessian `H + S + ridge I` as a [`LinearOperator`]: one
/// operator apply plus one dense gemv on the backend, never a host round trip.
pub struct Penalised<'a, B: Backend> {
    backend: &'a B,
    h: &'a dyn LinearOperator<B>,
    s: &'a PenaltyMatrix<B>,
    ridge: f64,
    extra_diag: B::Vector,
    scalars: B::Scalars,
}

impl<'a, B: Backend> Penalised<'a, B> {
    /// Combine a Hessian, a penalty of the same dimension and a ridge
    /// (finite, >= 0).
    pub fn new(backend: &'a B, h: &'a dyn LinearOperator<B>, s: &'a PenaltyMatrix<B>, ridge: f64) -> Result<Self> {
        expect_len("penalty dimension", s.dim(), h.dim())?;
        if !(ridge.is_finite() && ridge >= 0.0) {
            return Err(SolverError::invalid("ridge", ridge, "must be finite and >= 0"));
        }
        let p = s.dim();
        let diag: Vec<f64> = (0..p).map(|i| s.host[i * p + i] + ridge).collect();
        let mut scalars = backend.scalars(2)?;
        backend.write_scalars(&mut scalars, RIDGE_SLOT, &[ridge, 1.0])?;
        Ok(Self {
            backend,
            h,
            s,
            ridge,
            extra_diag: backend.upload(&diag)?,
            scalars,
        })
    }

    /// The ridge added to the diagonal.
    pub fn ridge(&self) -> f64 {
        self.ridge
    }

    /// diag(S) + ridge on the backend (the Jacobi preconditioner's extra).
    pub fn extra_diagonal(&self) -> &B::Vector {
        &self.extra_diag
    }

    /// The penalty-plus-ridge part on multi-vectors: Y += (S + ridge I) X.
    fn add_penalty(&self, x: &B::Vector, y: &mut B::Vector) -> Result<()> {
        self.backend.gemm_acc(self.s.device(), self.s.dim(), x, y)?;
        if self.ridge > 0.0 {
            self.backend.axpy(&self.scalars, RIDGE_SLOT, x, y)?;
        }
        Ok(())
    }
}

impl<B: Backend> LinearOperator<B> for Penalised<'_, B> {
    fn dim(&self) -> usize {
        self.s.dim()
    }
    fn apply(&self, x: &B::Vector, y: &mut B::Vector) -> Result<()> {
        self.h.apply(x, y)?;
        self.add_penalty(x, y)
    }
    fn apply_multi(&self, x: &B::Vector, k: usize, y: &mut B::Vector) -> Result<()> {
        self.h.apply_multi(x, k, y)?;
        self.add_penalty(x, y)
    }
    fn diagonal(&self, out: &mut B::Vector) -> Result<()> {
        self.h.diagonal(out)?;
        self.backend.axpy(&self.scalars, ONE_SLOT, &self.extra_diag, out)
    }
    fn to_dense(&self) -> Result<Vec<f64>> {
        let p = self.s.dim();
        let mut a = self.h.to_dense()?;
        expect_len("dense Hessian", a.len(), p * p)?;
        for (ai, si) in a.iter_mut().zip(&self.s.host) {
            *ai += si;
        }
        for i in 0..p {
            a[i * p + i] += self.ridge;
        }
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CpuBackend, DenseOperator};

    fn spd(n: usize, seed: f64) -> Vec<f64> {
        let g: Vec<f64> = (0..n * n).map(|i| ((i as f64 + seed) * 0.7).sin()).collect();
        let mut a = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..n {
                a[i * n + j] = (0..n).map(|t| g[i * n + t] * g[j * n + t]).sum::<f64>();
            }
            a[i * n + i] += 0.5;
        }
        a
    }

    fn penalty() -> Penalty {
        let blocks = vec![
            PenaltyBlock {
                start: 4,
                dim: 3,
                s: spd(3, 1.0),
            },
            PenaltyBlock {
                start: 1,
                dim: 2,
                s: spd(2, 2.0),
            },
        ];
        Penalty::new(8, blocks).unwrap()
    }

    #[test]
    fn gemm_acc_accumulates_multi_columns() {
        let be = CpuBackend::new();
        let a = vec![1.0, 2.0, 3.0, 4.0];
        let x = vec![1.0, -1.0, 0.5, 2.0];
        let mut y = vec![10.0, 20.0, 30.0, 40.0];
        be.gemm_acc(&a, 2, &x, &mut y).unwrap();
        assert_eq!(y, vec![9.0, 19.0, 34.5, 49.5]);
        assert!(be.gemm_acc(&a, 2, &vec![1.0; 3], &mut vec![0.0; 3]).is_err());
        assert!(be.gemm_acc(&a, 3, &x, &mut y).is_err());
    }

    #[test]
    fn dense_apply_and_quadratic_agree() {
        let pen = penalty();
        let lambda = [2.0, 0.25];
        let s = pen.dense(&lambda).unwrap();
        let beta: Vec<f64> = (0..8).map(|i| (i as f64 * 1.3).cos()).collect();
        let sb = pen.apply(&lambda, &beta).unwrap();
        for i in 0..8 {
            let want: f64 = (0..8).map(|j| s[i * 8 + j] * beta[j]).sum();
            assert!((sb[i] - want).abs() < 1e-14);
        }
        let q = pen.quadratic(&lambda, &beta).unwrap();
        assert!((q - dot(&beta, &sb)).abs() < 1e-13);
        assert_eq!(s[0], 0.0);
        assert_eq!(s[4 * 8 + 4], 2.0 * pen.blocks()[0].s[0]);
    }

    #[test]
    fn invalid_blocks_name_field_and_rule() {
        let bad = |blocks, needle: &str| {
            let e = Penalty::new(8, blocks).unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
        };
        bad(
            vec![PenaltyBlock {
                start: 7,
                dim: 2,
                s: spd(2, 0.0),
            }],
            "blocks[0].start",
        );
        bad(
            vec![PenaltyBlock {
                start: 0,
                dim: 2,
                s: vec![1.0; 3],
            }],
            "blocks[0].s",
        );
        bad(
            vec![PenaltyBlock {
                start: 0,
                dim: 2,
                s: vec![1.0, 2.0, 2.0, 1.0],
            }],
            "positive semi-definite",
        );
        bad(
            vec![PenaltyBlock {
                start: 0,
                dim: 2,
                s: vec![1.0, 0.5, 0.0, 1.0],
            }],
            "symmetric",
        );
        bad(
            vec![
                PenaltyBlock {
                    start: 0,
                    dim: 3,
                    s: spd(3, 0.0),
                },
                PenaltyBlock {
                    start: 2,
                    dim: 2,
                    s: spd(2, 0.0),
                },
            ],
            "overlap",
        );
        let pen = penalty();
        assert!(pen.dense(&[1.0, -1.0]).unwrap_err().to_string().contains("lambda[1]"));
        assert!(pen.dense(&[1.0]).is_err());
    }

    #[test]
    fn penalised_operator_matches_dense_sum() {
        let be = CpuBackend::new();
        let pen = penalty();
        let lambda = [3.0, 0.5];
        let h = DenseOperator::new(8, spd(8, 5.0)).unwrap();
        let s = PenaltyMatrix::from_penalty(&be, &pen, &lambda).unwrap();
        let op = Penalised::new(&be, &h, &s, 0.125).unwrap();
        let a = op.to_dense().unwrap();
        let x: Vec<f64> = (0..16).map(|i| (i as f64).sin()).collect();
        let mut y = vec![0.0; 16];
        op.apply_multi(&x, 2, &mut y).unwrap();
        for c in 0..2 {
            for i in 0..8 {
                let want: f64 = (0..8).map(|j| a[i * 8 + j] * x[c * 8 + j]).sum();
                assert!((y[c * 8 + i] - want).abs() < 1e-12);
            }
        }
        let mut d = vec![0.0; 8];
        op.diagonal(&mut d).unwrap();
        for i in 0..8 {
            assert!((d[i] - a[i * 8 + i]).abs() < 1e-12);
        }
        assert!(Penalised::new(&be, &h, &s, -1.0).is_err());
    }
}
