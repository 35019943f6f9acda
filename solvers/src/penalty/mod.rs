//! Quadratic penalties: `S_lambda = sum_k lambda_k S_k` ([`Penalty`]), its
//! dense copy on a backend ([`PenaltyMatrix`]), the penalised Hessian
//! operator `H + S_lambda + ridge I` ([`Penalised`]) and identifiability
//! constraints absorbed into a smooth's basis ([`Constraint`]).
//!
//! Each block `S_k` is a dense symmetric positive semi-definite matrix placed
//! at a contiguous range of beta. A block may have a null space (a
//! P-spline's difference penalty leaves the polynomials it does not
//! penalise): its rank r_k and the log of its pseudo-determinant (the
//! product of its positive eigenvalues) are found once, by an eigen
//! decomposition. Blocks may overlap, as a tensor product's marginal
//! penalties do (`A (x) I` and `I (x) B` on the same columns): blocks are
//! grouped into connected components of overlapping ranges, and
//! `log|S_lambda|_+` is the sum over the groups. A group of one block
//! contributes `r_k ln lambda_k + log|S_k|_+`, with derivative `r_k` in
//! `ln lambda_k`, exactly; a group of several is computed by mgcv's stable
//! similarity transform ([`logdet`]'s module docs), accurate when the
//! lambdas differ by many orders of magnitude.

use serde::{Deserialize, Serialize};

use crate::backend::Backend;
use crate::dense::Cholesky;
use crate::operator::{expect_len, LinearOperator};
use crate::{Result, SolverError};

mod constraint;
pub mod logdet;

pub use constraint::Constraint;
use logdet::OverlapGroup;

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

/// A validated penalty on `p` coefficients: a sum of blocks, which may
/// overlap; coefficients outside every block are unpenalised. Block `k` is
/// scaled by `lambda[k]`.
#[derive(Clone, Debug)]
pub struct Penalty {
    p: usize,
    blocks: Vec<PenaltyBlock>,
    logdets: Vec<f64>,
    ranks: Vec<usize>,
    /// Each block with a null space: its root ([`Root`]).
    roots: Vec<Option<Root>>,
    /// Connected components of overlapping blocks, by first column.
    groups: Vec<Vec<usize>>,
    /// The groups of more than one block.
    overlaps: Vec<OverlapGroup>,
    /// Whether block k shares a column with another block.
    overlapped: Vec<bool>,
}

/// log|S_lambda|_+ with its derivatives in `rho = ln lambda`
/// ([`Penalty::log_pseudo_det_derivatives`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogPseudoDet {
    /// log|S_lambda|_+.
    pub value: f64,
    /// d log|S_lambda|_+ / d rho_k = lambda_k tr(S_lambda^+ S_k): the rank
    /// r_k for a block that overlaps no other.
    pub gradient: Vec<f64>,
    /// d2 log|S_lambda|_+ / d rho_k d rho_l, row-major n_blocks x n_blocks:
    /// zero outside the groups of overlapping blocks.
    pub hessian: Vec<f64>,
}

impl Penalty {
    /// Validate and store the blocks: each must be non-empty, lie inside
    /// `0..p`, be finite, symmetric (to [`SYMMETRY_TOL`]), positive
    /// semi-definite and not zero (to [`RANK_TOL`]). Blocks may overlap.
    pub fn new(p: usize, blocks: Vec<PenaltyBlock>) -> Result<Self> {
        let mut blocks = blocks;
        let (mut logdets, mut ranks, mut roots) = (Vec::new(), Vec::new(), Vec::new());
        for (k, b) in blocks.iter_mut().enumerate() {
            let (logdet, rank, root) = validate_block(k, p, b)?;
            logdets.push(logdet);
            ranks.push(rank);
            roots.push(root);
        }
        let groups = overlap_groups(&blocks);
        let mut overlapped = vec![false; blocks.len()];
        let mut overlaps = Vec::new();
        for g in groups.iter().filter(|g| g.len() > 1) {
            g.iter().for_each(|&k| overlapped[k] = true);
            overlaps.push(OverlapGroup::new(&blocks, g.clone())?);
        }
        Ok(Self {
            p,
            blocks,
            logdets,
            ranks,
            roots,
            groups,
            overlaps,
            overlapped,
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

    /// The rank of S_lambda, the same at every lambda > 0: the dimension
    /// of the union of the blocks' ranges.
    pub fn rank(&self) -> usize {
        let single: usize = (0..self.blocks.len())
            .filter(|&k| !self.overlapped[k])
            .map(|k| self.ranks[k])
            .sum();
        single + self.overlaps.iter().map(|g| g.rank()).sum::<usize>()
    }

    /// The connected components of overlapping blocks (each a list of
    /// block indices, ascending), ordered by their first column; a block
    /// that overlaps no other is a group of its own.
    pub fn groups(&self) -> &[Vec<usize>] {
        &self.groups
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
        for ((b, &l), &shared) in self.blocks.iter().zip(lambda).zip(&self.overlapped) {
            for i in 0..b.dim {
                for j in 0..b.dim {
                    let (at, v) = ((b.start + i) * p + b.start + j, l * b.s[i * b.dim + j]);
                    // A block alone on its columns writes them, as it always
                    // did (bit for bit); overlapping blocks add up.
                    s[at] = if shared { s[at] + v } else { v };
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
        let mut part = Vec::new();
        for (k, (b, &l)) in self.blocks.iter().zip(lambda).enumerate() {
            part.resize(b.dim, 0.0);
            self.block_product(k, l, beta, &mut part);
            for (i, v) in part.iter().enumerate() {
                let o = &mut out[b.start + i];
                *o = if self.overlapped[k] { *o + v } else { *v };
            }
        }
        Ok(out)
    }

    /// beta^T S_lambda beta.
    pub fn quadratic(&self, lambda: &[f64], beta: &[f64]) -> Result<f64> {
        self.check_lambda(lambda)?;
        expect_len("beta", beta.len(), self.p)?;
        Ok((0..self.blocks.len())
            .map(|k| lambda[k] * self.block_quadratic(k, beta))
            .sum())
    }

    /// `lambda S_k beta_k` (block k's slice of a full beta) into `out`
    /// (dim_k): through the block's root where it has a null space
    /// ([`Root`]), densely (as it always was) where it has full rank.
    pub fn block_product(&self, k: usize, lambda: f64, beta: &[f64], out: &mut [f64]) {
        let b = &self.blocks[k];
        let x = &beta[b.range()];
        match &self.roots[k] {
            Some(root) => root.product(lambda, x, out),
            None => {
                for (i, o) in out.iter_mut().enumerate() {
                    *o = lambda * dot(&b.s[i * b.dim..(i + 1) * b.dim], x);
                }
            }
        }
    }

    /// `beta_k^T S_k beta_k`, as [`Penalty::block_product`] computes it.
    pub fn block_quadratic(&self, k: usize, beta: &[f64]) -> f64 {
        match &self.roots[k] {
            Some(root) => root.quadratic(&beta[self.blocks[k].range()]),
            None => self.blocks[k].quadratic(beta),
        }
    }

    /// log|S_lambda|_+, the log pseudo-determinant: the sum over the blocks
    /// that overlap no other of `r_k ln lambda_k + log|S_k|_+` (in block
    /// order, as it always was) plus each overlapping group's.
    pub fn log_pseudo_det(&self, lambda: &[f64]) -> Result<f64> {
        Ok(self.log_pseudo_det_derivatives(lambda)?.value)
    }

    /// log|S_lambda|_+ with its gradient and Hessian in `rho = ln lambda`.
    /// A block that overlaps no other has gradient entry r_k and no
    /// Hessian entries, exactly; a group of overlapping blocks takes all
    /// three from mgcv's stable similarity transform ([`logdet`]).
    pub fn log_pseudo_det_derivatives(&self, lambda: &[f64]) -> Result<LogPseudoDet> {
        self.check_lambda(lambda)?;
        let m = self.blocks.len();
        let mut value: f64 = (0..m)
            .filter(|&k| !self.overlapped[k])
            .map(|k| self.ranks[k] as f64 * lambda[k].ln() + self.logdets[k])
            .sum();
        let mut gradient: Vec<f64> = self.ranks.iter().map(|&r| r as f64).collect();
        let mut hessian = vec![0.0; m * m];
        for g in &self.overlaps {
            let members = g.members();
            let sub: Vec<f64> = members.iter().map(|&k| lambda[k]).collect();
            let part = g.evaluate(&sub)?;
            value += part.value;
            for (a, &k) in members.iter().enumerate() {
                gradient[k] = part.gradient[a];
                for (b, &l) in members.iter().enumerate() {
                    hessian[k * m + l] = part.hessian[a * members.len() + b];
                }
            }
        }
        Ok(LogPseudoDet {
            value,
            gradient,
            hessian,
        })
    }
}

/// Connected components of blocks whose ranges overlap (share a column),
/// each ascending, ordered by first column: a sweep over the blocks sorted
/// by start joins a block to the current group while it starts before the
/// group's end.
fn overlap_groups(blocks: &[PenaltyBlock]) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..blocks.len()).collect();
    order.sort_by_key(|&k| (blocks[k].start, k));
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut end = 0;
    for k in order {
        let b = &blocks[k];
        match groups.last_mut() {
            Some(g) if b.start < end => {
                g.push(k);
                end = end.max(b.start + b.dim);
            }
            _ => {
                groups.push(vec![k]);
                end = b.start + b.dim;
            }
        }
    }
    groups.iter_mut().for_each(|g| g.sort_unstable());
    groups
}

/// Check one block and symmetrise it; returns (log|S_k|_+, rank).
fn validate_block(k: usize, p: usize, b: &mut PenaltyBlock) -> Result<(f64, usize, Option<Root>)> {
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

/// A block's (log|S|_+, rank, root). A block of full rank takes its log
/// determinant from a Cholesky factor, as it always did; one with a null
/// space from its positive eigenvalues, and keeps its [`Root`].
fn rank_and_logdet(k: usize, n: usize, s: &[f64]) -> Result<(f64, usize, Option<Root>)> {
    let field = format!("blocks[{k}].s");
    let (values, vectors) = crate::dense::symmetric_eigen(n, s)?;
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
    let kept: Vec<usize> = (0..n).filter(|&i| values[i] > RANK_TOL * top).collect();
    if kept.len() == n {
        return match Cholesky::factor(n, s) {
            Ok(c) => Ok((c.logdet(), n, None)),
            Err(SolverError::NotPositiveDefinite { pivot, value }) => Err(SolverError::invalid(
                field,
                format!("pivot {pivot} = {value:e}"),
                "must be positive semi-definite (its Cholesky factor failed)",
            )),
            Err(e) => Err(e),
        };
    }
    let logdet = kept.iter().map(|&i| values[i].ln()).sum();
    Ok((logdet, kept.len(), Some(Root::new(n, &values, &vectors, &kept))))
}

/// `R` with `S = R^T R` for a block with a null space: the rows
/// `sqrt(d_i) u_i^T` of its positive eigenpairs. Its products are the
/// block's in rounding that does not grow with lambda: `S beta` computed
/// densely cancels to near 0 on the null space with an error of
/// `eps |S| |beta|`, which lambda multiplies (on 2,000 binomial rows with a
/// cubic spline's lambda at 1.8e8 and its linear part in beta, `lambda
/// beta^T S beta` was 2.5e-5 of terms of size 1.1e9: a noise of 2.5e-7 in
/// the penalised objective, far above its resolution, which stopped the
/// inner Newton solves short of REML's tolerance). Through R the null
/// space contributes only the rounding of `R beta`, and `R^T (R beta)`
/// lies in the block's range, where lambda S dominates H.
#[derive(Clone, Debug)]
struct Root {
    rank: usize,
    /// rank x dim, row-major.
    r: Vec<f64>,
}

impl Root {
    fn new(n: usize, values: &[f64], vectors: &[f64], kept: &[usize]) -> Self {
        let mut r = Vec::with_capacity(kept.len() * n);
        for &i in kept {
            let root = values[i].sqrt();
            r.extend((0..n).map(|j| root * vectors[j * n + i]));
        }
        Self { rank: kept.len(), r }
    }

    /// R x (rank) for the block's slice x.
    fn times(&self, x: &[f64]) -> Vec<f64> {
        self.r.chunks_exact(x.len()).map(|row| dot(row, x)).collect()
    }

    /// x^T S x = |R x|^2.
    fn quadratic(&self, x: &[f64]) -> f64 {
        self.times(x).iter().map(|v| v * v).sum()
    }

    /// lambda S x = lambda R^T (R x), into `out` (dim).
    fn product(&self, lambda: f64, x: &[f64], out: &mut [f64]) {
        let rx = self.times(x);
        let dim = x.len();
        out.iter_mut().for_each(|o| *o = 0.0);
        for (row, v) in self.r.chunks_exact(dim).zip(&rx) {
            for (o, rij) in out.iter_mut().zip(row) {
                *o += lambda * rij * v;
            }
        }
        debug_assert_eq!(self.rank, rx.len());
    }
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

    /// A second-difference penalty D^T D (dim x dim): its null space is
    /// the constant and the linear sequences.
    fn second_difference(dim: usize) -> Vec<f64> {
        let mut s = vec![0.0; dim * dim];
        for r in 0..dim - 2 {
            let d = [(r, 1.0), (r + 1, -2.0), (r + 2, 1.0)];
            for &(i, a) in &d {
                for &(j, b) in &d {
                    s[i * dim + j] += a * b;
                }
            }
        }
        s
    }

    /// A block with a null space goes through its root: with beta a large
    /// linear sequence plus a small wiggle and lambda at 1e12, the
    /// quadratic is lambda eps^2 |D v|^2 to 1e-6 (the dense product's
    /// cancellation leaves errors of order eps |S| |beta|^2 lambda, here
    /// about 1e-1 of the answer), and the product is the dense one to
    /// rounding while it lies in the block's range (orthogonal to the
    /// null space to rounding of its own size, not lambda's).
    #[test]
    fn a_block_with_a_null_space_is_evaluated_through_its_root() {
        let dim = 10;
        let s = second_difference(dim);
        let pen = Penalty::new(
            dim,
            vec![PenaltyBlock {
                start: 0,
                dim,
                s: s.clone(),
            }],
        )
        .unwrap();
        assert_eq!(pen.ranks(), &[dim - 2]);
        let (eps, lambda) = (1e-6, 1e12);
        let v: Vec<f64> = (0..dim).map(|i| (i as f64 * 0.7).sin()).collect();
        let beta: Vec<f64> = (0..dim).map(|i| 3.0 + 2.5 * i as f64 + eps * v[i]).collect();
        let dv: Vec<f64> = (0..dim - 2).map(|r| v[r] - 2.0 * v[r + 1] + v[r + 2]).collect();
        let want = lambda * eps * eps * dot(&dv, &dv);
        let got = pen.quadratic(&[lambda], &beta).unwrap();
        assert!((got - want).abs() <= 1e-6 * want, "{got} vs {want}");
        let sb = pen.apply(&[lambda], &beta).unwrap();
        let exact: Vec<f64> = (0..dim)
            .map(|i| lambda * eps * dot(&s[i * dim..(i + 1) * dim], &v))
            .collect();
        let scale = exact.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        for (g, w) in sb.iter().zip(&exact) {
            assert!((g - w).abs() <= 1e-6 * scale, "{g} vs {w}");
        }
        let (ones, line): (Vec<f64>, Vec<f64>) =
            ((0..dim).map(|_| 1.0).collect(), (0..dim).map(|i| i as f64).collect());
        assert!(dot(&sb, &ones).abs() <= 1e-6 * scale && dot(&sb, &line).abs() <= 1e-5 * scale);
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
        // Overlapping blocks are accepted: one group, adding up.
        let two = Penalty::new(
            8,
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
        )
        .unwrap();
        assert_eq!(two.groups(), &[vec![0, 1]]);
        let s = two.dense(&[1.0, 2.0]).unwrap();
        assert_eq!(s[2 * 8 + 2], spd(3, 0.0)[8] + 2.0 * spd(2, 0.0)[0]);
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
