//! The outer line search: Armijo backtracking along the direction
//! projected onto the bounds, each trial an inner solve warm-started at the
//! current beta_hat.

use crate::newton::{resolution, Evaluation};
use crate::pcg_kernels::PcgKernels;
use crate::Result;

use super::bounds::Outer;
use super::laml::Trial;
use super::{Ctx, LamlEvaluation};

/// Where the next inner solve starts: a beta with the objective's
/// evaluation there when one is in hand.
pub(super) type Start<'o, B> = (Vec<f64>, Option<Evaluation<'o, B>>);

/// The outcome of one outer line search.
pub(super) struct Search<'o, B: PcgKernels> {
    /// The accepted (t, trial), if any.
    pub(super) accepted: Option<(f64, Trial<'o, B>)>,
    pub(super) halvings: usize,
    pub(super) newton_iterations: usize,
    pub(super) evaluations: usize,
    /// The full step's first-order change of V, `g^T (rho_1 - rho)`.
    pub(super) full_decrease: f64,
    /// The largest `|V(trial) - V|` over the short trials (t at most
    /// [`SHORT_TRIAL`]) whose inner solves converged, if any: V's noise at
    /// this rho where the search failed (see [`super::stop::resolved`]).
    pub(super) short_change: Option<f64>,
}

/// Inner Newton steps allowed to a line-search trial before it counts as
/// failed, while the step is long (fewer than [`UNCAPPED_AFTER`] halvings):
/// a warm inner solve takes 1-3, and one that needs many means rho moved
/// too far for its start, where a shorter step is both cheaper and more
/// likely to be accepted.
const TRIAL_STEPS: usize = 6;

/// The longest trial whose change of V counts as noise where the search
/// fails ([`Search::short_change`]): along a step that is merely too long
/// for V's curvature, V changes at t = 1/64 by about 1/64 of the full
/// step's predicted decrease or less, so a change there as large as the
/// full step's prediction is V's noise, or curvature so strong that less
/// than 1/16,384 of the prediction is left to gain.
pub(super) const SHORT_TRIAL: f64 = 1.0 / 64.0;

/// Halvings after which a trial's inner solve may use all of `max_iter`.
const UNCAPPED_AFTER: usize = 2;

/// Halve t from 1 along `dir` (projected onto the bounds), at most
/// `max_halvings` times, until `V(rho_t) <= V + c g^T (rho_t - rho) - gain`
/// (with the rounding slack of V; `gain` is a tail jump's, else 0). A
/// trial whose inner solve does not converge (within [`TRIAL_STEPS`] while
/// the step is long), or ends where H + S is not positive definite, counts
/// as failed. The first trial's inner solve starts at `start` (`cur.beta`
/// or a probe's optimum, with the objective's evaluation there); each later
/// one at `cur.beta` with the evaluation `at_cur` kept from there: its first
/// Newton step is the exact optimum of the quadratic model at the trial's
/// lambda, so no evaluation is repeated and no trial starts from a failed
/// trial's distant optimum.
pub(super) fn outer_line_search<'o, B: PcgKernels>(
    ctx: &Ctx<'o, '_, B>,
    (cur, at_cur): (&LamlEvaluation, &Evaluation<'o, B>),
    dir: &[f64],
    mut start: Start<'o, B>,
    max_halvings: usize,
    gain: f64,
) -> Result<Search<'o, B>> {
    let opts = ctx.outer.opts;
    let mut capped = opts.clone();
    capped.newton.max_iter = opts.newton.max_iter.min(TRIAL_STEPS);
    let mut s = Search {
        accepted: None,
        halvings: 0,
        newton_iterations: 0,
        evaluations: 0,
        full_decrease: projected_point(&ctx.outer, cur, dir, 1.0).1,
        short_change: None,
    };
    let mut t = 1.0;
    loop {
        let (rho, decrease) = projected_point(&ctx.outer, cur, dir, t);
        let (beta0, eval) = std::mem::replace(&mut start, (cur.beta.clone(), Some(at_cur.clone())));
        let trial_opts = if s.halvings < UNCAPPED_AFTER { &capped } else { opts };
        // `None`: H + S not positive definite at this rho's inner end, so
        // back off.
        let (trial, spent) = ctx.trial(&rho, &beta0, eval, trial_opts)?;
        s.evaluations += spent;
        if let Some(trial) = trial {
            let newton = &trial.laml.newton;
            s.newton_iterations += newton.iterations.len();
            let ok = trial.laml.value <= cur.value + opts.armijo * decrease - gain + resolution(cur.value);
            if newton.converged && t <= SHORT_TRIAL {
                let change = (trial.laml.value - cur.value).abs();
                s.short_change = Some(s.short_change.map_or(change, |c: f64| c.max(change)));
            }
            if newton.converged && ok {
                s.accepted = Some((t, trial));
                return Ok(s);
            }
        }
        if s.halvings == max_halvings {
            return Ok(s);
        }
        s.halvings += 1;
        t *= 0.5;
    }
}

/// `rho + t dir` projected onto the bounds, with the first-order change of
/// V to there, `g^T (rho_t - rho)`.
fn projected_point(outer: &Outer<'_>, cur: &LamlEvaluation, dir: &[f64], t: f64) -> (Vec<f64>, f64) {
    let rho: Vec<f64> = cur.rho.iter().zip(dir).map(|(r, d)| r + t * d).collect();
    let rho = outer.clamp(&rho);
    let decrease: f64 = rho
        .iter()
        .zip(&cur.rho)
        .zip(&cur.gradient)
        .map(|((a, b), g)| g * (a - b))
        .sum();
    (rho, decrease)
}
