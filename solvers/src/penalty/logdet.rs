//! log|S_lambda|_+ and its derivatives in `rho = ln lambda` over a group of
//! overlapping blocks (a tensor product's marginal penalties), by mgcv's
//! similarity transform (Wood 2011, JRSSB 73:3-36, Appendix B; mgcv's C
//! `get_stableS`, which `gam.reparam` and `ldetS` call).
//!
//! Why a transform: where the lambdas differ by many orders of magnitude
//! the rounding of the large terms, eps * lambda_max, swamps the small terms
//! in `sum_k lambda_k S_k` itself, and the small eigenvalues that carry the
//! small terms' share of the determinant are lost. The transform finds the
//! range space of the dominant terms from their lambda-free sum, rotates it
//! onto the leading coordinates, sets the dominant terms' parts outside it
//! to exactly zero (the rounding that would leak into the small terms'
//! space), and repeats on the remaining space with the remaining terms. The
//! transformed matrix has its scales graded down the diagonal, so a
//! Cholesky factor of its diagonally scaled form gives the determinant and
//! the traces to rounding relative to each scale.
//!
//! The group's range space (the union of its blocks' ranges, the same for
//! every lambda > 0, so the rank is fixed) is found once from the
//! lambda-free sum `sum_k S_k / ||S_k||_F` (mgcv's `totalPenaltySpace`).
//! Each block is held as a square root `R_k` (q x r_k) in an orthonormal
//! basis Y of that space, `S_k = Y R_k R_k^T Y^T`, so `log|S_lambda|_+ =
//! log|sum_k lambda_k R_k R_k^T|`, the determinant of a q x q matrix of
//! full rank, and its derivatives are
//!
//! ```text
//! d/drho_k        = lambda_k tr(S^-1 R_k R_k^T)
//! d2/drho_k drho_l = delta_kl d/drho_k - lambda_k lambda_l tr(S^-1 S_k S^-1 S_l)
//! ```

use faer::linalg::triangular_solve::solve_lower_triangular_in_place;
use faer::{Mat, MatRef, Par, Scale, Side};

use super::{PenaltyBlock, RANK_TOL};
use crate::{Result, SolverError};

/// Terms whose `lambda_k ||S_k||_F` is within this factor of the largest
/// remaining one are dominant together (mgcv's `d.tol`, eps^0.3): terms of
/// similar size lose nothing to each other's rounding, and treating them
/// together saves a transform step each.
const DOMINANT_TOL: f64 = 2.0e-5;

/// Rank tolerance of the dominant terms' scaled sum, relative to its
/// largest eigenvalue (mgcv's `r.tol`, eps^0.75): well above rounding
/// (1e-16) and well below a real small eigenvalue of a scaled sum.
const DOMINANT_RANK_TOL: f64 = 1.8e-12;

/// log|S|_+ of one group with its derivatives in the members' rho.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct GroupLogDet {
    pub value: f64,
    /// One entry per member.
    pub gradient: Vec<f64>,
    /// Members x members, row-major.
    pub hessian: Vec<f64>,
}

/// Blocks whose column ranges overlap (connected through overlaps), held
/// for the stable log pseudo-determinant.
#[derive(Clone, Debug)]
pub(crate) struct OverlapGroup {
    /// The blocks' indices, ascending.
    members: Vec<usize>,
    /// `R_k` per member: q x r_k in the basis of the group's range space.
    roots: Vec<Mat<f64>>,
}

impl OverlapGroup {
    /// The group of `members` (ascending block indices, already validated).
    pub(crate) fn new(blocks: &[PenaltyBlock], members: Vec<usize>) -> Result<Self> {
        let start = members.iter().map(|&k| blocks[k].start).min().unwrap_or(0);
        let end = members
            .iter()
            .map(|&k| blocks[k].start + blocks[k].dim)
            .max()
            .unwrap_or(0);
        let full = members
            .iter()
            .map(|&k| block_root(&blocks[k], start, end - start))
            .collect::<Result<Vec<_>>>()?;
        let y = range_basis(&full, end - start)?;
        let roots = full.iter().map(|r| y.transpose() * r).collect();
        Ok(Self { members, roots })
    }

    /// The blocks of the group.
    pub(crate) fn members(&self) -> &[usize] {
        &self.members
    }

    /// The rank of S_lambda on the group's columns (any lambda > 0).
    pub(crate) fn rank(&self) -> usize {
        self.roots[0].nrows()
    }

    /// log|S_lambda|_+ over the group and its derivatives, `lambda` the
    /// members' (finite, > 0, checked by the caller).
    pub(crate) fn evaluate(&self, lambda: &[f64]) -> Result<GroupLogDet> {
        let roots = self.transformed_roots(lambda);
        let q = self.rank();
        let mut s = Mat::<f64>::zeros(q, q);
        for (r, &l) in roots.iter().zip(lambda) {
            s += Scale(l) * (r * r.transpose());
        }
        let (value, w) = scaled_cholesky(&s, &roots)?;
        let m = roots.len();
        let gradient: Vec<f64> = (0..m).map(|k| lambda[k] * w[k].squared_norm_l2()).collect();
        let mut hessian = vec![0.0; m * m];
        for k in 0..m {
            for l in 0..=k {
                let cross = (w[k].transpose() * &w[l]).squared_norm_l2();
                let v = -lambda[k] * lambda[l] * cross + if k == l { gradient[k] } else { 0.0 };
                hessian[k * m + l] = v;
                hessian[l * m + k] = v;
            }
        }
        Ok(GroupLogDet {
            value,
            gradient,
            hessian,
        })
    }

    /// The roots after the similarity transform: in each round the
    /// dominant terms' range (in the coordinates not yet dealt with) is
    /// rotated onto the leading ones and their rows beyond it are zeroed;
    /// the other terms are rotated alike and go on to the next round. Ends
    /// where the dominant terms fill the remaining space or none remain.
    fn transformed_roots(&self, lambda: &[f64]) -> Vec<Mat<f64>> {
        let q = self.rank();
        let mut roots = self.roots.clone();
        let initial: Vec<f64> = roots.iter().map(|r| gram_norm(r.as_ref())).collect();
        let mut active: Vec<usize> = (0..roots.len()).collect();
        let mut done = 0;
        while done < q {
            // A term whose part in the remaining space is rounding has its
            // range inside the space dealt with: that part is zeroed, so it
            // cannot leak into terms that are smaller still.
            active.retain(|&i| {
                let keep = gram_norm(roots[i].subrows(done, q - done)) > RANK_TOL * initial[i];
                if !keep {
                    roots[i].subrows_mut(done, q - done).fill(0.0);
                }
                keep
            });
            match split_dominant(&mut roots, &active, lambda, done) {
                Some((r, rest)) => {
                    done += r;
                    active = rest;
                }
                None => break,
            }
        }
        roots
    }
}

/// One round of the transform on rows `done..` of the `active` roots:
/// the dominant terms (`lambda_k ||S_k||_F` within [`DOMINANT_TOL`] of the
/// largest) have their range, of rank r, rotated onto rows `done..done + r`
/// and their other rows zeroed; the rest are rotated alike. Returns r and
/// the rest, or `None` where there is nothing to split: no term is
/// subdominant, or the dominant ones fill the remaining rows.
fn split_dominant(
    roots: &mut [Mat<f64>],
    active: &[usize],
    lambda: &[f64],
    done: usize,
) -> Option<(usize, Vec<usize>)> {
    let left = roots.first()?.nrows() - done;
    let tails: Vec<(usize, Mat<f64>, f64)> = active
        .iter()
        .map(|&i| {
            let t = roots[i].subrows(done, left).to_owned();
            let norm = gram_norm(t.as_ref());
            (i, t, norm)
        })
        .collect();
    let top = tails.iter().fold(0.0f64, |m, (i, _, n)| m.max(lambda[*i] * n));
    let (alpha, rest): (Vec<_>, Vec<_>) = tails.iter().partition(|(i, _, n)| lambda[*i] * n > DOMINANT_TOL * top);
    if rest.is_empty() {
        return None;
    }
    // The rank from the lambda-free scaled sum, so it does not depend on
    // how far apart the dominant lambdas are.
    let r = rank(&gram_sum(left, alpha.iter().map(|(_, t, n)| (t, 1.0 / n))));
    if r == left {
        return None;
    }
    let u = descending_eigenvectors(&gram_sum(left, alpha.iter().map(|(i, t, _)| (t, lambda[*i]))));
    for (i, t, _) in &alpha {
        let mut rows = roots[*i].subrows_mut(done, left);
        rows.fill(0.0);
        rows.subrows_mut(0, r).copy_from(u.subcols(0, r).transpose() * t);
    }
    for (i, t, _) in &rest {
        roots[*i].subrows_mut(done, left).copy_from(u.transpose() * t);
    }
    Some((r, rest.iter().map(|(i, _, _)| *i).collect()))
}

/// `||R R^T||_F` (= `||R^T R||_F`, the cheaper one when R is tall).
fn gram_norm(r: MatRef<'_, f64>) -> f64 {
    (r.transpose() * r).norm_l2()
}

/// `sum_i w_i T_i T_i^T` over `(T_i, w_i)`, n x n.
fn gram_sum<'a>(n: usize, terms: impl Iterator<Item = (&'a Mat<f64>, f64)>) -> Mat<f64> {
    let mut s = Mat::<f64>::zeros(n, n);
    for (t, w) in terms {
        s += Scale(w) * (t * t.transpose());
    }
    s
}

/// The number of eigenvalues of a symmetric matrix above
/// [`DOMINANT_RANK_TOL`] of its largest (at least one: the matrix is a
/// non-zero PSD sum).
fn rank(s: &Mat<f64>) -> usize {
    let values = eigen(s).0;
    let top = values.last().copied().unwrap_or(0.0);
    values.iter().filter(|&&v| v > DOMINANT_RANK_TOL * top).count().max(1)
}

/// Eigenvalues (ascending) and eigenvectors of a symmetric matrix. faer's
/// eigen solver does not fail on a finite symmetric matrix; a failure is
/// mapped to NaN values, which the final Cholesky factor reports.
fn eigen(s: &Mat<f64>) -> (Vec<f64>, Mat<f64>) {
    let n = s.nrows();
    match s.self_adjoint_eigen(Side::Lower) {
        Ok(e) => {
            let d = e.S().column_vector();
            ((0..n).map(|i| d[i]).collect(), e.U().to_owned())
        }
        Err(_) => (vec![f64::NAN; n], Mat::from_fn(n, n, |_, _| f64::NAN)),
    }
}

/// The eigenvectors of a symmetric matrix, largest eigenvalue first.
fn descending_eigenvectors(s: &Mat<f64>) -> Mat<f64> {
    let (_, u) = eigen(s);
    let n = u.ncols();
    Mat::from_fn(u.nrows(), n, |i, j| u[(i, n - 1 - j)])
}

/// A block's square root `V_+ D_+^{1/2}` (its eigenpairs above
/// [`RANK_TOL`] of the largest), at its rows of the group's `n` columns
/// starting at `start`: n x r_k.
fn block_root(b: &PenaltyBlock, start: usize, n: usize) -> Result<Mat<f64>> {
    let (values, vectors) = crate::dense::symmetric_eigen(b.dim, &b.s)?;
    let top = values[b.dim - 1];
    let keep: Vec<usize> = (0..b.dim).filter(|&j| values[j] > RANK_TOL * top).collect();
    let off = b.start - start;
    Ok(Mat::from_fn(n, keep.len(), |i, c| {
        if (off..off + b.dim).contains(&i) {
            vectors[(i - off) * b.dim + keep[c]] * values[keep[c]].sqrt()
        } else {
            0.0
        }
    }))
}

/// An orthonormal basis (n x q) of the union of the roots' ranges: the
/// eigenvectors of `sum_k S_k / ||S_k||_F` above [`RANK_TOL`] of its
/// largest eigenvalue. Scaling each term by its norm makes the basis
/// independent of the blocks' units (mgcv's `totalPenaltySpace`).
fn range_basis(roots: &[Mat<f64>], n: usize) -> Result<Mat<f64>> {
    let total = gram_sum(n, roots.iter().map(|r| (r, 1.0 / gram_norm(r.as_ref()))));
    let (values, u) = eigen(&total);
    let top = values.last().copied().unwrap_or(0.0);
    if !(top.is_finite() && top > 0.0) {
        return Err(SolverError::numerical(
            "overlapping penalty range space",
            top,
            "the eigen decomposition of the blocks' scaled sum failed",
        ));
    }
    let keep: Vec<usize> = (0..n).filter(|&j| values[j] > RANK_TOL * top).collect();
    Ok(Mat::from_fn(n, keep.len(), |i, c| u[(i, keep[c])]))
}

/// log|S| of the transformed S and `W_k = L^{-1} D^{-1} R_k` per root,
/// where `D^{-1} S D^{-1} = L L^T` with D the square roots of S's diagonal:
/// the scaling makes the graded matrix well conditioned, so the factor is
/// accurate relative to each diagonal's scale (as mgcv's `gam.reparam`
/// forms its root E), and `tr(S^{-1} R_k R_k^T) = ||W_k||_F^2`.
fn scaled_cholesky(s: &Mat<f64>, roots: &[Mat<f64>]) -> Result<(f64, Vec<Mat<f64>>)> {
    let q = s.nrows();
    let d: Vec<f64> = (0..q).map(|i| s[(i, i)].sqrt()).collect();
    if let Some(i) = d.iter().position(|v| !(v.is_finite() && *v > 0.0)) {
        return Err(SolverError::numerical(
            format!("overlapping penalty diagonal[{i}]"),
            s[(i, i)],
            "the transformed penalty must be positive definite on its range space",
        ));
    }
    let scaled = Mat::from_fn(q, q, |i, j| s[(i, j)] / (d[i] * d[j]));
    let llt = scaled.llt(Side::Lower).map_err(|e| {
        SolverError::numerical(
            "overlapping penalty Cholesky",
            format!("{e:?}"),
            "the scaled transformed penalty must be positive definite on its range space",
        )
    })?;
    let l = llt.L();
    let logdet = 2.0 * (0..q).map(|i| l[(i, i)].ln() + d[i].ln()).sum::<f64>();
    let w = roots
        .iter()
        .map(|r| {
            let mut x = Mat::from_fn(q, r.ncols(), |i, j| r[(i, j)] / d[i]);
            solve_lower_triangular_in_place(l, x.as_mut(), Par::Seq);
            x
        })
        .collect();
    Ok((logdet, w))
}
