//! The first phase of the outer solve: Fellner-Schall fixed-point steps
//! while they are long.

use std::time::Instant;

use crate::newton::resolution;
use crate::pcg_kernels::PcgKernels;
use crate::penalty::Penalty;
use crate::Result;

use super::laml::Trial;
use super::report::keep;
use super::vanished::{penalised_edf, wiggliness};
use super::{Ctx, LamlEvaluation, OuterStep, RemlIteration, RemlOptions};

/// Most Fellner-Schall steps before Newton takes over.
const FS_STEPS: usize = 6;

/// The Fellner-Schall phase ends once its step is below this in every
/// component. A step costs one rough warm inner solve (1-2 evaluations)
/// and no dH/drho, a Newton point a tight solve and one dH/drho evaluation
/// a smooth, so the phase goes on until rho is within about 30% in lambda
/// of its fixed point, where one or two Newton steps end the walk. With
/// 1.0 and 4 steps (until session 29) the Newton phase started up to a
/// unit away and took 2-3 points: BMS on the H100, 200,000 rows 24 -> 20
/// evaluations, 1M seeds 1-3 25/18/27 -> 15/18/22; on the CPU, 20,000 rows
/// seeds 1-3 13/40/27 -> 13/16/21, 8,000 rows seeds 1-4 99 -> 85 in all.
/// 0.1 saved one or two more but on 2,000 rows (seed 3) led the walk onto
/// the link smooth's tail, whose jump to the bound ends 0.006 above the
/// interior minimum (`tests/fit_validation.rs`).
const FS_MIN_STEP: f64 = 0.25;

/// The generalised Fellner-Schall update (Wood and Fasiolo 2017, Biometrics
/// 73:1071) in rho: `delta rho_k = ln(edf_k / (lambda_k beta^T S_k beta))`
/// with `edf_k = lambda_k (tr(S^+ S_k) - tr((H + S)^{-1} S_k))`
/// (`penalised_edf`; `tr(S^+ S_k) = r_k / lambda_k` for a block that
/// overlaps no other),
/// the multiplicative fixed-point step toward `dV/drho_k = 0` with the
/// dH/drho terms left out (so it needs no extra evaluation), capped at
/// `max_step` and kept within the bounds. From a start several units from
/// the optimum it moves there in one or two steps, where Newton on V
/// (whose gradient grows like e^rho far above the optimum) gains about one
/// unit a step. A smooth with no edf left, or a wiggliness of zero, goes up
/// by the cap.
pub fn fellner_schall_step(penalty: &Penalty, e: &LamlEvaluation, max_step: f64) -> Vec<f64> {
    edf_and_wiggliness(penalty, e)
        .into_iter()
        .map(|(edf, quad)| {
            let ratio = edf / quad;
            let step = if ratio.is_finite() && ratio > 0.0 {
                ratio.ln()
            } else {
                max_step
            };
            step.clamp(-max_step, max_step)
        })
        .collect()
}

/// Per block, its edf and `lambda_k beta^T S_k beta`: the two sides of the
/// fixed point `dV/drho_k = 0` without the dH/drho terms.
fn edf_and_wiggliness(penalty: &Penalty, e: &LamlEvaluation) -> Vec<(f64, f64)> {
    (0..penalty.n_blocks())
        .map(|k| (penalised_edf(e, penalty, k), wiggliness(e, penalty, k)))
        .collect()
}

/// What the Fellner-Schall phase ended with.
pub(super) struct FsPhase<'o, B: PcgKernels> {
    pub(super) trial: Trial<'o, B>,
    pub(super) iterations: Vec<RemlIteration>,
    pub(super) evaluations: usize,
}

/// Halvings of a Fellner-Schall step whose trial is not kept.
const FS_HALVINGS: usize = 2;

/// The inner Newton tolerance (decrement, squared standard errors) of the
/// start's solve and the Fellner-Schall trials: they choose the next rho,
/// which the last standard error's worth of precision in beta does not
/// move (the phase's step is a log ratio, often capped), so their solves
/// stop within 0.1 standard errors, and the trial the gradient is taken at
/// is brought to the full tolerance ([`tightened`]). The last step of a
/// solve goes from a decrement of 1e-5-1e-3 to below 1e-10: one
/// evaluation saved per rough solve.
pub(super) const ROUGH_DECREMENT: f64 = 1e-2;

/// `opts` with the inner tolerance loosened to [`ROUGH_DECREMENT`].
pub(super) fn rough(opts: &RemlOptions) -> RemlOptions {
    let mut rough = opts.clone();
    rough.newton.decrement_tol = rough.newton.decrement_tol.max(ROUGH_DECREMENT);
    rough
}

/// `trial` solved on to the full inner tolerance from its own beta and
/// evaluation, where its solve stopped short of it; the evaluations spent.
/// A solve that does not converge leaves the rough trial.
fn tightened<'o, B: PcgKernels>(ctx: &Ctx<'o, '_, B>, trial: Trial<'o, B>) -> Result<(Trial<'o, B>, usize)> {
    let opts = ctx.outer.opts;
    if trial.laml.newton.decrement <= opts.newton.decrement_tol {
        return Ok((trial, 0));
    }
    let start = Some(trial.at_beta.clone());
    let (tight, spent) = ctx.trial(&trial.laml.rho, &trial.laml.beta, start, opts)?;
    match tight {
        Some(tight) if tight.laml.newton.converged => Ok((tight, spent)),
        _ => Ok((trial, spent)),
    }
}

/// Fellner-Schall steps from the converged start while they are long
/// (some component at least [`FS_MIN_STEP`]), at most [`FS_STEPS`]. A step
/// is kept where its inner solve converges and V is lower, and otherwise
/// halved up to [`FS_HALVINGS`] times; the phase ends at the first step
/// not kept. Each trial costs one warm inner solve (to
/// [`ROUGH_DECREMENT`]) and no dH/drho; the trial the phase ends at is
/// solved to the full tolerance.
pub(super) fn fellner_schall_phase<'o, B: PcgKernels>(
    ctx: &Ctx<'o, '_, B>,
    mut trial: Trial<'o, B>,
) -> Result<FsPhase<'o, B>> {
    let (penalty, outer) = (ctx.penalty, &ctx.outer);
    let mut iterations = Vec::new();
    let mut evaluations = 0;
    while iterations.len() < FS_STEPS {
        let t0 = Instant::now();
        let cur = &trial.laml;
        let step = fellner_schall_step(penalty, cur, outer.opts.max_step);
        let full = outer.clamp(&cur.rho.iter().zip(&step).map(|(r, d)| r + d).collect::<Vec<_>>());
        if full.iter().zip(&cur.rho).all(|(x, y)| (x - y).abs() < FS_MIN_STEP) {
            break;
        }
        let mut record = RemlIteration {
            kind: OuterStep::FellnerSchall,
            rho: cur.rho.clone(),
            value: cur.value,
            gradient: fixed_point_gradient(penalty, cur),
            decrement: 0.0,
            hessian_measured: false,
            step_length: 0.0,
            halvings: 0,
            newton_iterations: 0,
            newton_evaluations: 0,
            seconds: 0.0,
        };
        let kept = halved_until_lower(ctx, &trial, &full, &mut record)?;
        evaluations += record.newton_evaluations;
        record.seconds = t0.elapsed().as_secs_f64();
        keep(ctx.watched.observer, &mut iterations, record);
        match kept {
            Some(next) => trial = next,
            None => break,
        }
    }
    let (trial, spent) = tightened(ctx, trial)?;
    Ok(FsPhase {
        trial,
        iterations,
        evaluations: evaluations + spent,
    })
}

/// The trial at `full` from `trial`, the step halved up to [`FS_HALVINGS`]
/// times until its inner solve converges with V lower; `None` where none
/// does. The halvings, the inner work and the length kept go into `record`.
fn halved_until_lower<'o, B: PcgKernels>(
    ctx: &Ctx<'o, '_, B>,
    trial: &Trial<'o, B>,
    full: &[f64],
    record: &mut RemlIteration,
) -> Result<Option<Trial<'o, B>>> {
    let cur = &trial.laml;
    let mut t = 1.0;
    loop {
        let rho: Vec<f64> = cur.rho.iter().zip(full).map(|(r, f)| r + t * (f - r)).collect();
        let start = Some(trial.at_beta.clone());
        let (next, spent) = ctx.trial(&rho, &cur.beta, start, &rough(ctx.outer.opts))?;
        record.newton_evaluations += spent;
        if let Some(next) = next {
            record.newton_iterations += next.laml.newton.iterations.len();
            if next.laml.newton.converged && next.laml.value < cur.value - resolution(cur.value) {
                record.step_length = t;
                return Ok(Some(next));
            }
        }
        if record.halvings == FS_HALVINGS {
            return Ok(None);
        }
        record.halvings += 1;
        t *= 0.5;
    }
}

/// dV/drho without the dH/drho terms: `(lambda_k beta^T S_k beta - edf_k) / 2`.
fn fixed_point_gradient(penalty: &Penalty, e: &LamlEvaluation) -> Vec<f64> {
    edf_and_wiggliness(penalty, e)
        .into_iter()
        .map(|(edf, quad)| 0.5 * (quad - edf))
        .collect()
}
