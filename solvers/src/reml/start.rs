//! Where the outer solve starts: the reference rho from the Hessian's
//! diagonal, and the first inner solve (retried more heavily penalised
//! where it finds no minimum).

use crate::newton::Evaluation;
use crate::operator::expect_len;
use crate::pcg_kernels::PcgKernels;
use crate::penalty::Penalty;
use crate::{Result, SolverError};

use super::fellner_schall::rough;
use super::guards::PROBE_DISTANCE;
use super::laml::{laml_value, Trial};
use super::Ctx;

/// The reference log smoothing parameters (mgcv's `initial.sp`): each
/// lambda_k puts the mean diagonal of `lambda_k S_k` at the mean absolute
/// diagonal of the Hessian on block k, so the penalty and the data weigh
/// about equally at the start, at any n and in any units. A block's mean is
/// floored at 1e-3 of the mean over all penalised coefficients (a block the data
/// barely inform at the start, e.g. a smooth that enters only through a
/// coefficient that is zero there, would otherwise start unpenalised);
/// lambda is 1 where the whole diagonal is zero.
pub fn reference_rho(penalty: &Penalty, hessian_diagonal: &[f64]) -> Result<Vec<f64>> {
    expect_len("hessian_diagonal", hessian_diagonal.len(), penalty.dim())?;
    if let Some(j) = hessian_diagonal.iter().position(|v| !v.is_finite()) {
        return Err(SolverError::invalid(
            format!("hessian_diagonal[{j}]"),
            hessian_diagonal[j],
            "must be finite",
        ));
    }
    let mean_abs = |v: &[f64]| v.iter().map(|x| x.abs()).sum::<f64>() / v.len().max(1) as f64;
    // Over the penalised coefficients only: an unpenalised covariate in
    // other units must not move any lambda.
    let penalised: Vec<f64> = penalty
        .blocks()
        .iter()
        .flat_map(|b| hessian_diagonal[b.range()].to_vec())
        .collect();
    let overall = mean_abs(&penalised);
    Ok(penalty
        .blocks()
        .iter()
        .map(|b| {
            let data = mean_abs(&hessian_diagonal[b.range()]).max(1e-3 * overall);
            if data == 0.0 {
                return 0.0;
            }
            let s = (0..b.dim).map(|i| b.s[i * b.dim + i]).sum::<f64>() / b.dim as f64;
            (data / s).ln()
        })
        .collect())
}

/// Starts tried above the first, each [`PROBE_DISTANCE`] higher.
const START_RETRIES: usize = 2;

/// The first inner solve (to [`super::fellner_schall::ROUGH_DECREMENT`]: it
/// feeds the Fellner-Schall phase; its steps capped at
/// [`super::RemlOptions::start_max_step`]): at `start`, or, where it does not converge to a
/// minimum (little data and little penalty can leave the penalised
/// likelihood without one within reach, e.g. against the edge of the
/// model's domain), at a start more heavily penalised, up to
/// [`START_RETRIES`] times. Returns the trial and the evaluations spent.
pub(super) fn start_trial<'o, B: PcgKernels>(
    ctx: &Ctx<'o, '_, B>,
    start: &[f64],
    first: Evaluation<'o, B>,
) -> Result<(Trial<'o, B>, usize)> {
    let (b, o, p, outer) = (ctx.backend, ctx.watched, ctx.penalty, &ctx.outer);
    let mut first = Some(first);
    let before = ctx.counted.get();
    let mut opts = rough(outer.opts);
    if let Some(cap) = opts.start_max_step {
        opts.newton.max_step = opts.newton.max_step.min(cap);
    }
    let mut last = None;
    for retry in 0..=START_RETRIES {
        let rho: Vec<f64> = start.iter().map(|r| r + PROBE_DISTANCE * retry as f64).collect();
        let rho = outer.clamp(&rho);
        // Not `Ctx::trial`: the last start's pivot goes into the error.
        let at_beta0 = first.take().or_else(|| ctx.at_beta0.clone());
        let trial = laml_value(b, o, p, &rho, ctx.beta0, at_beta0, &opts, None);
        ctx.saw(&trial, true);
        match trial {
            Ok(trial) => {
                if trial.laml.newton.converged {
                    return Ok((trial, ctx.counted.get() - before));
                }
                last = Some(Ok(trial));
            }
            Err(e @ SolverError::NotPositiveDefinite { .. }) => last = Some(Err(e)),
            Err(e) => return Err(e),
        }
    }
    let last = last.unwrap_or_else(|| Err(SolverError::invalid("REML start", "none", "no start was tried")));
    Ok((no_minimum_error(last)?, ctx.counted.get() - before))
}

/// The last start's trial (not converged), or where its H + S was not
/// positive definite, an error that says what that means for the model.
fn no_minimum_error<B: PcgKernels>(last: Result<Trial<'_, B>>) -> Result<Trial<'_, B>> {
    match last {
        Err(SolverError::NotPositiveDefinite { pivot, value }) => Err(SolverError::numerical(
            "REML start",
            format!("H + S pivot {pivot} = {value:e}"),
            "the inner Newton solve found no minimum (H + S positive definite) at the reference smoothing \
             parameters nor at more heavily penalised ones: the data may not identify the model",
        )),
        last => last,
    }
}
