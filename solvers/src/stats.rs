//! Statistics of a penalised fit from its dense unpenalised Hessian H and
//! penalty S_lambda, as mgcv reports them: the Bayesian covariance
//! `V_b = (H + S)^{-1}`, the frequentist one `V_f = (H + S)^{-1} H (H +
//! S)^{-1}`, and the effective degrees of freedom `tr((H + S)^{-1} H)` per
//! penalty block and in total (Wood 2017, sections 6.10 and 6.11.3).
//! All come from one factor of H + S: a REML fit's own
//! ([`crate::reml::RemlFit::statistics`], from the factor its last LAML
//! evaluation made) or, at fixed lambda, one made by [`FitStatistics::new`].

use serde::{Deserialize, Serialize};

use crate::backend::Backend;
use crate::dense::clip_eigenvalues;
use crate::logdet::PenalisedFactor;
use crate::operator::expect_len;
use crate::penalty::Penalty;
use crate::Result;

/// Effective degrees of freedom of a fit.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Edf {
    /// Per penalty block, each in [0, its dimension]: the edf of the
    /// block's columns. Blocks that overlap (a tensor product's) share
    /// columns, so each reports their smooth's whole edf; see `smooths`.
    pub blocks: Vec<f64>,
    /// Per smooth: per group of overlapping blocks ([`Penalty::groups`],
    /// in that order), the edf of the union of their columns, in [0, its
    /// width]. Where no blocks overlap, equal to `blocks`.
    #[serde(default)]
    pub smooths: Vec<f64>,
    /// Of the whole model, in [0, p].
    pub total: f64,
    /// Whether the unpenalised Hessian was indefinite at the fit, so that
    /// the edf were computed from its positive part (see [`effective_df`]).
    pub from_positive_part: bool,
}

/// The effective degrees of freedom `tr((H + S)^{-1} H)`, per penalty block
/// and in total, from the dense unpenalised Hessian `h` and penalty `s`.
///
/// Where H is positive semi-definite this is mgcv's edf, and each block's
/// share lies in [0, dim] (with A = H + S, the block's share is
/// `dim - lambda tr((A^{-1})_kk S_k)`, and `(A^{-1})_kk <= (lambda S_k)^{-1}`
/// because the Schur complement of H is positive semi-definite). The
/// observed Hessian of a non-canonical model can be indefinite at a
/// minimum of the penalised objective (H + S positive definite), most often
/// on small data; its edf can then leave [0, dim] and mean nothing. Where
/// they do, the positive part of H (its negative eigenvalues set to 0) is
/// used, which keeps every bound, and `from_positive_part` says so.
pub fn effective_df(p: usize, h: &[f64], s: &[f64], penalty: &Penalty) -> Result<Edf> {
    edf_or_positive_part(p, h, s, penalty, edf_of(p, h, s, penalty))
}

/// `plain` (the edf from H itself) where it keeps its bounds, else the edf
/// of H's positive part (see [`effective_df`]).
fn edf_or_positive_part(p: usize, h: &[f64], s: &[f64], penalty: &Penalty, plain: Result<Edf>) -> Result<Edf> {
    let tol = 1e-9 * (p as f64);
    let inside = |v: f64, hi: f64| v >= -tol && v <= hi + tol;
    if let Ok(plain) = plain {
        let ok = inside(plain.total, p as f64)
            && penalty
                .blocks()
                .iter()
                .zip(&plain.blocks)
                .all(|(b, &e)| inside(e, b.dim as f64));
        if ok {
            return Ok(within_bounds(plain, penalty, p));
        }
    }
    // The positive part, with a ridge of 1e-10 of its largest eigenvalue
    // where H + S is singular on it (unpenalised directions H does not
    // inform, at a fit that is not a minimum).
    let mut positive = clip_eigenvalues(p, h, 0.0)?;
    let top = (0..p).fold(0.0f64, |m, j| m.max(positive[j * p + j]));
    let edf = match edf_of(p, &positive, s, penalty) {
        Ok(e) => e,
        Err(_) => {
            (0..p).for_each(|j| positive[j * p + j] += 1e-10 * top.max(f64::MIN_POSITIVE));
            edf_of(p, &positive, s, penalty)?
        }
    };
    Ok(within_bounds(
        Edf {
            from_positive_part: true,
            ..edf
        },
        penalty,
        p,
    ))
}

/// The edf moved onto their bounds where rounding left them just outside,
/// so every edf lies in [0, dim] as printed and tested (a smooth at lambda
/// = 1e7 gave -1.4e-8).
fn within_bounds(edf: Edf, penalty: &Penalty, p: usize) -> Edf {
    let blocks = penalty
        .blocks()
        .iter()
        .zip(&edf.blocks)
        .map(|(b, &e)| e.clamp(0.0, b.dim as f64))
        .collect();
    let smooths = group_columns(penalty)
        .iter()
        .zip(&edf.smooths)
        .map(|(cols, &e)| e.clamp(0.0, cols.len() as f64))
        .collect();
    Edf {
        blocks,
        smooths,
        total: edf.total.clamp(0.0, p as f64),
        ..edf
    }
}

/// Each group of overlapping blocks' columns: the union of their ranges,
/// ascending.
fn group_columns(penalty: &Penalty) -> Vec<Vec<usize>> {
    let blocks = penalty.blocks();
    penalty
        .groups()
        .iter()
        .map(|g| {
            let mut cols: Vec<usize> = g.iter().flat_map(|&k| blocks[k].range()).collect();
            cols.sort_unstable();
            cols.dedup();
            cols
        })
        .collect()
}

fn edf_of(p: usize, h: &[f64], s: &[f64], penalty: &Penalty) -> Result<Edf> {
    let a: Vec<f64> = h.iter().zip(s).map(|(x, y)| x + y).collect();
    let inv = PenalisedFactor::new(p, &a)?.inverse()?.to_vec();
    Ok(edf_from_inverse(p, &inv, h, penalty))
}

/// The edf `diag((H + S)^{-1} H)` summed per block, per smooth and in
/// total, from `inv` = (H + S)^{-1}.
fn edf_from_inverse(p: usize, inv: &[f64], h: &[f64], penalty: &Penalty) -> Edf {
    let share = |j: usize| (0..p).map(|k| inv[j * p + k] * h[k * p + j]).sum::<f64>();
    let blocks = penalty.blocks().iter().map(|b| b.range().map(share).sum()).collect();
    let smooths = group_columns(penalty)
        .iter()
        .map(|cols| cols.iter().map(|&j| share(j)).sum())
        .collect();
    Edf {
        blocks,
        smooths,
        total: (0..p).map(share).sum(),
        from_positive_part: false,
    }
}

/// The statistics of a fit at its coefficients (see the module docs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FitStatistics {
    /// `V_b = (H + S)^{-1}`, row-major p x p: the Bayesian (penalised)
    /// covariance, mgcv's `Vp`.
    pub covariance: Vec<f64>,
    /// `V_f = V_b H V_b`, row-major p x p: the frequentist covariance,
    /// mgcv's `Ve`.
    pub frequentist_covariance: Vec<f64>,
    /// log|H + S|.
    pub logdet_penalised_hessian: f64,
    /// Effective degrees of freedom.
    pub edf: Edf,
}

impl FitStatistics {
    /// From the dense unpenalised Hessian `h` (row-major p x p) and the
    /// penalty at `lambda`, factoring H + S once with `backend`'s dense
    /// factorisation. An H + S that is not positive definite (a point that
    /// is not a minimum) is `SolverError::NotPositiveDefinite`. Where a
    /// factor of H + S is at hand (a REML fit keeps its own), use
    /// [`FitStatistics::from_factor`].
    pub fn new<B: Backend>(backend: &B, h: &[f64], penalty: &Penalty, lambda: &[f64]) -> Result<Self> {
        let p = penalty.dim();
        expect_len("hessian", h.len(), p * p)?;
        let s = penalty.dense(lambda)?;
        let a: Vec<f64> = h.iter().zip(&s).map(|(h, s)| h + s).collect();
        let factor = PenalisedFactor::on(backend, p, &a)?;
        Self::of(&factor, h, &s, penalty)
    }

    /// From `factor`, an existing factor of `H + S_lambda` with `h` the
    /// dense unpenalised Hessian (row-major p x p) and S the penalty at
    /// `lambda`: no factorisation, the same numbers as
    /// [`FitStatistics::new`] on that H (bit for bit, where `factor` is the
    /// one it would make).
    pub fn from_factor(factor: &PenalisedFactor, h: &[f64], penalty: &Penalty, lambda: &[f64]) -> Result<Self> {
        let p = penalty.dim();
        expect_len("factor dimension", factor.dim(), p)?;
        expect_len("hessian", h.len(), p * p)?;
        Self::of(factor, h, &penalty.dense(lambda)?, penalty)
    }

    /// The statistics from the factor of H + S, H and S (dense).
    fn of(factor: &PenalisedFactor, h: &[f64], s: &[f64], penalty: &Penalty) -> Result<Self> {
        let p = factor.dim();
        let covariance = factor.inverse()?.to_vec();
        Ok(Self {
            frequentist_covariance: sandwich(p, &covariance, h),
            logdet_penalised_hessian: factor.logdet(),
            // From the same inverse: H + S is factored once.
            edf: edf_or_positive_part(p, h, s, penalty, Ok(edf_from_inverse(p, &covariance, h, penalty)))?,
            covariance,
        })
    }

    /// The LAML (REML) score `V = f + log|H + S| / 2 - log|S|_+ / 2` at
    /// these statistics, from the penalised objective `objective` = f at
    /// the fit and `log_pseudo_det_penalty` = log|S_lambda|_+ (mgcv reports
    /// it at fixed lambda too, so smoothing choices can be compared).
    pub fn reml_score(&self, objective: f64, log_pseudo_det_penalty: f64) -> f64 {
        laml_score(objective, self.logdet_penalised_hessian, log_pseudo_det_penalty)
    }
}

/// `V = f + log|H + S| / 2 - log|S|_+ / 2`, the one formula REML
/// minimises ([`crate::reml::LamlEvaluation::value`]) and a fit at fixed
/// lambda reports.
pub fn laml_score(objective: f64, logdet_penalised_hessian: f64, log_pseudo_det_penalty: f64) -> f64 {
    objective + 0.5 * logdet_penalised_hessian - 0.5 * log_pseudo_det_penalty
}

/// `V H V` for symmetric row-major p x p V and H.
fn sandwich(p: usize, v: &[f64], h: &[f64]) -> Vec<f64> {
    let product = |x: &[f64], y: &[f64]| -> Vec<f64> {
        (0..p * p)
            .map(|ij| {
                let (i, j) = (ij / p, ij % p);
                (0..p).map(|k| x[i * p + k] * y[k * p + j]).sum()
            })
            .collect()
    };
    product(&product(v, h), v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dense::Cholesky;
    use crate::penalty::PenaltyBlock;
    use crate::CpuBackend;

    /// A symmetric positive definite p x p matrix from a seeded generator.
    fn spd(p: usize, seed: u64) -> Vec<f64> {
        let mut state = seed;
        let mut next = move || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 11) as f64 / (1u64 << 53) as f64) - 0.5
        };
        let g: Vec<f64> = (0..p * p).map(|_| next()).collect();
        let mut a = vec![0.0; p * p];
        for i in 0..p {
            for j in 0..p {
                a[i * p + j] =
                    (0..p).map(|k| g[i * p + k] * g[j * p + k]).sum::<f64>() + if i == j { 0.1 } else { 0.0 };
            }
        }
        a
    }

    /// Against dense algebra done independently: V_b A = I, V_f = V_b H
    /// V_b entry by entry, edf = sum_i (V_b H)_ii with each block's share
    /// its own columns, log|A| from a separate Cholesky.
    #[test]
    fn statistics_match_dense_algebra() {
        let p = 7;
        let h = spd(p, 3);
        let blocks = vec![
            PenaltyBlock {
                start: 1,
                dim: 3,
                s: spd(3, 5),
            },
            PenaltyBlock {
                start: 5,
                dim: 2,
                s: spd(2, 9),
            },
        ];
        let penalty = Penalty::new(p, blocks).unwrap();
        let lambda = [0.7, 30.0];
        let st = FitStatistics::new(&CpuBackend::new(), &h, &penalty, &lambda).unwrap();
        let s = penalty.dense(&lambda).unwrap();
        let a: Vec<f64> = h.iter().zip(&s).map(|(x, y)| x + y).collect();
        let vb = &st.covariance;
        for i in 0..p {
            for j in 0..p {
                let e: f64 = (0..p).map(|k| vb[i * p + k] * a[k * p + j]).sum();
                assert!((e - f64::from(i == j)).abs() < 1e-10, "V_b A [{i},{j}] = {e}");
                let vf: f64 = (0..p)
                    .flat_map(|k| (0..p).map(move |l| (k, l)))
                    .map(|(k, l)| vb[i * p + k] * h[k * p + l] * vb[l * p + j])
                    .sum();
                assert!((vf - st.frequentist_covariance[i * p + j]).abs() < 1e-12 * (1.0 + vf.abs()));
            }
        }
        let share = |i: usize| (0..p).map(|k| vb[i * p + k] * h[k * p + i]).sum::<f64>();
        let total: f64 = (0..p).map(share).sum();
        assert!((st.edf.total - total).abs() < 1e-12, "{} vs {total}", st.edf.total);
        for (b, e) in penalty.blocks().iter().zip(&st.edf.blocks) {
            let want: f64 = b.range().map(share).sum();
            assert!(
                (e - want).abs() < 1e-12 && *e >= 0.0 && *e <= b.dim as f64,
                "{e} vs {want}"
            );
        }
        let logdet = Cholesky::factor(p, &a).unwrap().logdet();
        assert!((st.logdet_penalised_hessian - logdet).abs() < 1e-12);
        // Unpenalised coefficients count fully, so total = 2 + blocks.
        assert!((st.edf.total - 2.0 - st.edf.blocks.iter().sum::<f64>()).abs() < 1e-9);
        assert_eq!(st.edf.smooths, st.edf.blocks, "no overlap: a smooth a block");
    }

    /// Overlapping blocks (a tensor product's two penalties on columns
    /// 1..7, one of them on 1..5 only, and a separate block on 8..10): one
    /// smooth edf per group, the sum of its columns' shares, and the total
    /// is the unpenalised columns plus the smooths.
    #[test]
    fn overlapping_blocks_give_one_edf_per_smooth() {
        let p = 11;
        let h = spd(p, 4);
        let block = |start, dim, seed| PenaltyBlock {
            start,
            dim,
            s: spd(dim, seed),
        };
        let blocks = vec![block(1, 6, 5), block(1, 4, 6), block(8, 3, 7)];
        let penalty = Penalty::new(p, blocks).unwrap();
        assert_eq!(penalty.groups(), &[vec![0, 1], vec![2]]);
        let st = FitStatistics::new(&CpuBackend::new(), &h, &penalty, &[2.0, 0.3, 9.0]).unwrap();
        let vb = &st.covariance;
        let share = |i: usize| (0..p).map(|k| vb[i * p + k] * h[k * p + i]).sum::<f64>();
        let te: f64 = (1..7).map(share).sum();
        let other: f64 = (8..11).map(share).sum();
        assert_eq!(st.edf.smooths.len(), 2);
        assert!((st.edf.smooths[0] - te).abs() < 1e-12, "{} vs {te}", st.edf.smooths[0]);
        assert!((st.edf.smooths[1] - other).abs() < 1e-12);
        assert!(
            (st.edf.smooths[0] - st.edf.blocks[0]).abs() < 1e-12,
            "block 0 spans the smooth"
        );
        let unpenalised = share(0) + share(7);
        assert!((st.edf.total - unpenalised - st.edf.smooths.iter().sum::<f64>()).abs() < 1e-9);
    }

    #[test]
    fn a_point_that_is_not_a_minimum_is_named() {
        let p = 3;
        let h = vec![-1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0];
        let penalty = Penalty::new(p, vec![]).unwrap();
        let e = FitStatistics::new(&CpuBackend::new(), &h, &penalty, &[]).unwrap_err();
        assert!(matches!(e, crate::SolverError::NotPositiveDefinite { .. }), "{e}");
    }
}
