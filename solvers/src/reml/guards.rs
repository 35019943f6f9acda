//! Guards against the wrong minimum: a vanished smooth's other side is
//! probed once, and the inner minimum is checked from `beta0` where the
//! loop would stop (the penalised likelihood can have several).

use crate::newton::resolution;
use crate::pcg_kernels::PcgKernels;
use crate::penalty::Penalty;
use crate::Result;

use super::bounds::Outer;
use super::laml::Point;
use super::line_search::Start;
use super::vanished::vanished;
use super::{Ctx, LamlEvaluation};

/// Penalised objectives closer than this (beyond the values' resolution)
/// at one rho are one minimum reached twice: solves to the default inner
/// tolerance agree to about 1e-10.
const MODE_TOL: f64 = 1e-4;

/// Newton steps allowed to the check of [`lower_mode`]. On 20,000 messy
/// rows the solve from `beta0` at a small lambda found a minimum 31 above
/// the warm-started one, so degenerate that Newton converged linearly and
/// ran to its 100-step cap (250 evaluations); a first inner solve from
/// `beta0` takes 5-9 steps, and the check that found a lower minimum 14.
const MODE_CHECK_STEPS: usize = 20;

/// The inner solve at `cur.rho` from `beta0`, the fit's own start, away
/// from the path the warm starts followed; returned (with its gradient)
/// where its penalised objective is lower than cur's, with its Newton
/// iterations and the evaluations spent; a solve that does not converge
/// within [`MODE_CHECK_STEPS`] says nothing. The penalised objective of a
/// likelihood that is not convex (the BMS one is not) can have several
/// local minima at one lambda. Warm starts follow one branch of them as rho
/// moves; where that branch is not the lowest, V there is not the LAML of
/// the penalised fit, and near where the branch ends (a fold, H + S
/// singular) V falls without bound while rho barely moves, so the outer
/// loop chases the fold: on 5,000 messy rows V fell by 3.3 over 10
/// iterations, at a penalised objective 0.008 above the lower minimum's,
/// for 860 evaluations. Moving to the lower minimum and going on did not
/// help there: the warm starts went back to the other branch within three
/// steps; nor did solving every later trial from `beta0` as well and
/// keeping the lower (one step took 221 evaluations). Checked where the
/// loop would stop and after an accepted line search of
/// [`POOR_MODEL_HALVINGS`] halvings
/// (requiring the gradient to grow as well missed a nearly separable chase),
/// but where the loop stops only once an inner solve has met H + S not
/// positive definite: on simulated BMS data of 8,000 rows, seeds 3 and 4
/// met none and the check found nothing there, at 5-6 of their 30-32
/// evaluations; the messy fit meets it in its first warm solve. A damped
/// first step at `beta0` itself does not count: BMS's rigid start (warps at
/// zero) is often indefinite whatever the data, and counting it ran the
/// check on most simulated fits without finding a lower minimum on any (on
/// the README's 60,000 rows 5 of 24 evaluations, on 20,000 rows seed 1 8
/// of 21; 8,000 rows seeds 1 and 2 4 and 6). Nor does a step damped by
/// less than [`MARGINAL_DAMPING`] (4M and 12M simulated rows, 7 of 28
/// evaluations each, the same minimum joined). The solve ends early once a
/// Newton step would land at cur's own minimum ([`SAME_MINIMUM`]); its
/// evaluations are counted
/// whether or not it ends at a minimum.
///
/// [`POOR_MODEL_HALVINGS`]: super::curvature::POOR_MODEL_HALVINGS
/// [`MARGINAL_DAMPING`]: super::MARGINAL_DAMPING
pub(super) fn lower_mode<'o, B: PcgKernels>(
    ctx: &Ctx<'o, '_, B>,
    cur: &LamlEvaluation,
) -> Result<(Option<Point<'o, B>>, usize, usize)> {
    let mut capped = ctx.outer.opts.clone();
    capped.newton.max_iter = capped.newton.max_iter.min(MODE_CHECK_STEPS);
    let a = penalised_hessian(ctx.penalty, cur)?;
    let joins = |landing: &[f64]| {
        let d = squared_distance(&a, landing, &cur.beta);
        d <= SAME_MINIMUM
    };
    let (trial, spent) = ctx.trial_joining(&cur.rho, ctx.beta0, ctx.at_beta0.clone(), &capped, Some(&joins))?;
    let Some(trial) = trial else {
        return Ok((None, 0, spent));
    };
    let steps = trial.laml.newton.steps();
    let tol = MODE_TOL + resolution(cur.objective);
    if !(trial.laml.newton.converged && trial.laml.objective < cur.objective - tol) {
        return Ok((None, steps, spent));
    }
    Ok((Some(ctx.gradient(trial)?), steps, spent + ctx.penalty.n_blocks()))
}

/// The squared distance from cur's beta_hat, in its standard errors (the
/// norm of H + S there), within which a Newton step of the check may land
/// for the check to end: within 0.1 standard errors of a minimum where
/// H + S is positive definite, the penalised objective is its quadratic
/// model to third order (terms that shrink like n^{-1/2} in these units),
/// which has no other minimum, so Newton from the landing point goes to
/// cur's and the check can find nothing lower. On the README's 60,000 rows
/// the check's undamped steps landed at squared distances 4.8, 0.48 and
/// 8.8e-3 (ending it there: 5 evaluations instead of 8), on a logistic
/// double well at 4.0, 0.30 and 8.1e-3.
const SAME_MINIMUM: f64 = 1e-2;

/// H + S at cur, dense row-major.
fn penalised_hessian(penalty: &Penalty, cur: &LamlEvaluation) -> Result<Vec<f64>> {
    let lambda: Vec<f64> = cur.rho.iter().map(|r| r.exp()).collect();
    let s = penalty.dense(&lambda)?;
    Ok(cur.hessian.iter().zip(&s).map(|(h, s)| h + s).collect())
}

/// `(x - y)^T A (x - y)` for a dense symmetric `A`.
fn squared_distance(a: &[f64], x: &[f64], y: &[f64]) -> f64 {
    let v: Vec<f64> = x.iter().zip(y).map(|(x, y)| x - y).collect();
    let p = v.len();
    (0..p)
        .map(|i| v[i] * (0..p).map(|j| a[i * p + j] * v[j]).sum::<f64>())
        .sum()
}

/// How far below its reference a vanishing smooth's rho is probed.
pub(super) const PROBE_DISTANCE: f64 = 2.5;

/// What a probe of the other side found.
pub(super) struct Probe<'o, B: PcgKernels> {
    /// The probed point with its gradient, if V is lower there.
    pub(super) better: Option<Point<'o, B>>,
    pub(super) newton_iterations: usize,
    pub(super) evaluations: usize,
}

/// A guard against the wrong minimum at lambda = infinity. V(rho_k) can
/// fall toward a smooth's upper bound from a start that lies past a local
/// maximum, while a lower minimum with the smooth in use lies below (the
/// reference start can be on the wrong side at large n). Once per smooth,
/// when it has vanished (shrunk to nothing, or at its upper bound), V is
/// evaluated with its rho at `rho_ref - PROBE_DISTANCE`; a lower V there
/// becomes the current point. Costs one inner solve (and a gradient when taken).
pub(super) fn probe_other_side<'o, B: PcgKernels>(
    ctx: &Ctx<'o, '_, B>,
    cur: &LamlEvaluation,
    probed: &mut [bool],
    start: &mut Start<'o, B>,
) -> Result<Option<Probe<'o, B>>> {
    let (penalty, outer) = (ctx.penalty, &ctx.outer);
    let Some(k) = probe_candidate(penalty, outer, cur, probed) else {
        return Ok(None);
    };
    probed[k] = true;
    let mut rho = cur.rho.clone();
    rho[k] = (outer.rho_ref[k] - PROBE_DISTANCE).max(outer.lower[k]);
    let mut probe = Probe {
        better: None,
        newton_iterations: 0,
        evaluations: 0,
    };
    let (beta0, eval) = std::mem::replace(start, (cur.beta.clone(), None));
    let (trial, spent) = ctx.trial(&rho, &beta0, eval, outer.opts)?;
    probe.evaluations = spent;
    let Some(trial) = trial else {
        return Ok(Some(probe));
    };
    probe.newton_iterations = trial.laml.newton.iterations.len();
    if !trial.laml.newton.converged {
        return Ok(Some(probe));
    }
    if trial.laml.value < cur.value - resolution(cur.value) {
        probe.evaluations += penalty.n_blocks();
        probe.better = Some(ctx.gradient(trial)?);
    } else {
        // The next line search starts from the probe's optimum: a warm
        // start that evaluates no beta twice.
        *start = (trial.laml.beta, Some(trial.at_beta));
    }
    Ok(Some(probe))
}

/// The first smooth not probed yet that has vanished (shrunk to nothing,
/// or at its upper bound) with its probe point more than one unit below.
fn probe_candidate(penalty: &Penalty, outer: &Outer<'_>, cur: &LamlEvaluation, probed: &[bool]) -> Option<usize> {
    (0..penalty.n_blocks()).position(|k| {
        // Whatever the gradient's sign: V is flat out there, and rounding
        // can leave a shallow local minimum of its own.
        let vanishing = vanished(cur, penalty, k) || cur.rho[k] >= outer.upper[k];
        let target = outer.rho_ref[k] - PROBE_DISTANCE;
        !probed[k] && vanishing && target < cur.rho[k] - 1.0
    })
}
