//! Corrections to the fixed-H outer Hessian: a secant update along the
//! steps taken, and a measurement by differences of the gradient where the
//! line search shows the model wrong.

use crate::newton::Evaluation;
use crate::pcg_kernels::PcgKernels;
use crate::Result;

use super::laml::dot;
use super::{Ctx, LamlEvaluation};

/// Line-search halvings that mark the outer model's curvature as wrong.
pub(super) const POOR_MODEL_HALVINGS: usize = 3;

/// The step in rho of [`measured_hessian`]'s differences.
const MEASURE_STEP: f64 = 1e-2;

/// The outer Hessian by forward differences of dV/drho, a step of
/// [`MEASURE_STEP`] in each component not pinned at a bound (inward at an
/// upper bound), each an inner solve from `cur` and a gradient. For where
/// the fixed-H model fails: its neglected third-derivative terms can carry
/// nearly all of the curvature (on 5,000 rows a link deviation's V curved
/// 60 per unit of rho squared where the model said 1e-6), and Newton on
/// it halves its way down in tens of inner solves. `None` where a
/// difference's inner solve does not converge.
pub(super) fn measured_hessian<'o, B: PcgKernels>(
    ctx: &Ctx<'o, '_, B>,
    cur: &LamlEvaluation,
    at_cur: &Evaluation<'o, B>,
) -> Result<(Option<Vec<f64>>, usize)> {
    let outer = &ctx.outer;
    let m = cur.rho.len();
    let mut h = cur.outer_hessian.clone();
    let mut spent = 0;
    let measured: Vec<usize> = (0..m).filter(|&k| !outer.pinned(cur, k)).collect();
    for &k in &measured {
        let mut rho = cur.rho.clone();
        let step = if rho[k] + MEASURE_STEP > outer.upper[k] {
            -MEASURE_STEP
        } else {
            MEASURE_STEP
        };
        rho[k] += step;
        let (trial, made) = ctx.trial(&rho, &cur.beta, Some(at_cur.clone()), outer.opts)?;
        spent += made;
        let Some(trial) = trial else {
            return Ok((None, spent));
        };
        if !trial.laml.newton.converged {
            return Ok((None, spent));
        }
        spent += ctx.penalty.n_blocks();
        let e = ctx.gradient(trial)?.laml;
        for l in 0..m {
            h[l * m + k] = (e.gradient[l] - cur.gradient[l]) / step;
        }
    }
    symmetrise_measured(&mut h, m, &measured);
    Ok((Some(h), spent))
}

/// Column k of the m x m `h` was measured for each k in `measured`; make
/// the matrix symmetric from what was (the mean of the two differences
/// where both were measured, else the measured one).
fn symmetrise_measured(h: &mut [f64], m: usize, measured: &[usize]) {
    for &k in measured {
        for l in 0..m {
            let v = if measured.contains(&l) {
                0.5 * (h[l * m + k] + h[k * m + l])
            } else {
                h[l * m + k]
            };
            h[l * m + k] = v;
            h[k * m + l] = v;
        }
    }
}

/// The symmetric rank-one update of the correction C that makes the outer
/// model `B = outer_hessian + C` meet the secant condition `B s = y` along
/// the last step (`y` the change of the gradient): the fixed-H Hessian
/// leaves out the likelihood's third derivatives, and on small data that
/// can be a third of the curvature; the secant restores what the steps
/// observe. Skipped where `r^T s` is too small for a stable update.
pub(super) fn secant_update(correction: &mut [f64], cur: &LamlEvaluation, next: &LamlEvaluation) {
    let m = cur.rho.len();
    let s: Vec<f64> = next.rho.iter().zip(&cur.rho).map(|(a, b)| a - b).collect();
    let r: Vec<f64> = (0..m)
        .map(|i| {
            let bs: f64 = (0..m)
                .map(|j| (next.outer_hessian[i * m + j] + correction[i * m + j]) * s[j])
                .sum();
            next.gradient[i] - cur.gradient[i] - bs
        })
        .collect();
    let rs = dot(&r, &s);
    let (rn, sn) = (dot(&r, &r).sqrt(), dot(&s, &s).sqrt());
    // NaN fails the test too.
    if rs.is_nan() || rs.abs() <= 1e-8 * rn * sn {
        return;
    }
    for i in 0..m {
        for j in 0..m {
            correction[i * m + j] += r[i] * r[j] / rs;
        }
    }
}
