//! One Newton direction: undamped when `H + S` is positive definite, else
//! Levenberg-Marquardt damped, `(H + S + mu D) delta = -g` with
//! `D = |diag(H + S)|` (floored), so the damping means the same whatever the
//! coefficients' units.

use super::{dot, Point, Problem, StepSolver};
use crate::operator::LinearOperator;
use crate::pcg::{cg, BreakdownQuantity, PcgOptions, StopReason};
use crate::pcg_kernels::PcgKernels;
use crate::penalty::{Penalised, PenaltyMatrix};
use crate::precond::Jacobi;
use crate::{Result, SolverError};

/// PCG relative tolerance of the solve that confirms convergence: the
/// decrement of a PCG step underestimates the true one by at most about
/// `rtol^2 cond(H + S)`, so a loose step cannot end the solve early.
pub(super) const CONFIRM_RTOL: f64 = 1e-8;

/// A Newton direction and how it was found.
pub(super) struct Step {
    pub delta: Vec<f64>,
    pub pcg_iterations: usize,
    pub pcg_host_reads: usize,
    pub pcg_converged: Option<bool>,
    pub pcg_rtol: Option<f64>,
    /// Levenberg-Marquardt mu (0 for an undamped Newton step).
    pub damping: f64,
    /// Solves that failed for lack of positive definiteness before this one.
    pub damping_tries: usize,
}

/// Outcome of one solve attempt at a fixed damping.
enum Attempt {
    Solved(Step),
    /// Not positive definite, after this many PCG host reads.
    NotPositiveDefinite(usize),
}

/// Solve for a descent direction: undamped first, then with growing mu
/// (from `mu_prev / growth`: damping that was needed at the last step is
/// likely needed again). A damped step that would leave `max_step` (in the
/// coefficient scales) is damped to it instead ([`damped_to_cap`]), a
/// Levenberg-Marquardt trust region: the least mu that makes
/// `H + S + mu D` positive definite leaves it nearly singular, so its step
/// runs far along the negative-curvature direction, and cut to the cap it
/// is mostly that direction. BMS's 60,000-row start cut its first step to
/// 0.04 of the direction and halved it twice (9 evaluations to its
/// minimum); damped to the cap it halved twice as well, from a better
/// direction (8, the same minimum). Damping a factor 10 past the cap
/// took 5 there but crawled on a double well (199 evaluations against 73
/// cut, at a cap of 0.08), so the step is brought near the cap.
pub(super) fn solve_step<B: PcgKernels>(
    prob: &Problem<'_, '_, B>,
    cur: &Point<'_, B>,
    solver: StepSolver,
    rtol: f64,
    mu_prev: f64,
) -> Result<Step> {
    let scale = damping_scale(prob, cur)?;
    let opts = prob.opts;
    let mut mu = 0.0;
    let mut reads = 0;
    for tries in 0..=opts.max_damping_tries {
        match attempt(prob, cur, solver, rtol, mu, &scale, None)? {
            Attempt::Solved(mut step) => {
                reads += step.pcg_host_reads;
                if dot(&step.delta, &cur.grad) < 0.0 {
                    step.damping = mu;
                    if mu > 0.0 && reach(prob, &step.delta) > opts.max_step {
                        step = damped_to_cap(prob, cur, (solver, rtol), &scale, step, &mut reads)?;
                    }
                    step.damping_tries = tries;
                    step.pcg_host_reads = reads;
                    return Ok(step);
                }
            }
            Attempt::NotPositiveDefinite(r) => reads += r,
        }
        mu = if mu == 0.0 {
            opts.damping_start.max(mu_prev / opts.damping_growth)
        } else {
            mu * opts.damping_growth
        };
    }
    Err(SolverError::numerical(
        "hessian",
        format!("damping {mu:e}"),
        "H + S + mu |diag(H + S)| stayed indefinite through max_damping_tries dampings",
    ))
}

/// Solves spent bisecting mu for a step of about `max_step`.
const CAP_BISECTIONS: usize = 4;

/// The damped step `long` (beyond `max_step`) damped until it fits: mu
/// grows from `long.damping` by `damping_growth` until the step is within
/// the cap, then [`CAP_BISECTIONS`] bisections of ln mu between the last
/// step too long and the first that fits keep the longest that fits, so
/// the step reaches near the cap rather than a factor of growth below it (a
/// step far below the cap crawls: on a double well, cap 0.08, 199
/// evaluations against 73 cut to the cap). A mu that gives no descent
/// direction counts as too long; `long` itself where no mu fits within
/// `max_damping_tries`.
fn damped_to_cap<B: PcgKernels>(
    prob: &Problem<'_, '_, B>,
    cur: &Point<'_, B>,
    (solver, rtol): (StepSolver, f64),
    scale: &[f64],
    long: Step,
    reads: &mut usize,
) -> Result<Step> {
    let opts = prob.opts;
    let mut try_mu = |mu: f64| -> Result<Option<Step>> {
        Ok(match attempt(prob, cur, solver, rtol, mu, scale, None)? {
            Attempt::Solved(mut step) => {
                *reads += step.pcg_host_reads;
                step.damping = mu;
                let fits = dot(&step.delta, &cur.grad) < 0.0 && reach(prob, &step.delta) <= opts.max_step;
                fits.then_some(step)
            }
            Attempt::NotPositiveDefinite(r) => {
                *reads += r;
                None
            }
        })
    };
    let (mut lo, mut hi, mut fit) = (long.damping, long.damping, None);
    for _ in 0..opts.max_damping_tries {
        hi *= opts.damping_growth;
        if let Some(step) = try_mu(hi)? {
            fit = Some(step);
            break;
        }
        lo = hi;
    }
    let Some(mut fit) = fit else {
        return Ok(long);
    };
    for _ in 0..CAP_BISECTIONS {
        let mid = (lo * hi).sqrt();
        match try_mu(mid)? {
            Some(step) => (hi, fit) = (mid, step),
            None => lo = mid,
        }
    }
    Ok(fit)
}

/// How far a step moves its farthest coefficient, in the objective's
/// coefficient scales.
pub(super) fn reach<B: PcgKernels>(prob: &Problem<'_, '_, B>, delta: &[f64]) -> f64 {
    delta
        .iter()
        .zip(&prob.scales)
        .fold(0.0f64, |m, (d, s)| m.max((d * s).abs()))
}

/// The undamped step solved again to [`CONFIRM_RTOL`] from `step` (PCG
/// only), so that its decrement can be trusted.
pub(super) fn confirm<B: PcgKernels>(
    prob: &Problem<'_, '_, B>,
    cur: &Point<'_, B>,
    step: &Step,
) -> Result<Option<Step>> {
    let scale = vec![1.0; step.delta.len()];
    match attempt(prob, cur, StepSolver::Pcg, CONFIRM_RTOL, 0.0, &scale, Some(&step.delta))? {
        Attempt::Solved(s) if dot(&s.delta, &cur.grad) <= 0.0 => Ok(Some(s)),
        _ => Ok(None),
    }
}

/// `|diag(H + S)|` floored at 1e-12 of its largest entry, both measured in
/// the objective's coefficient scales (entry j over scales_j^2), so that the
/// floor means the same whatever a coefficient's units: measured raw, a
/// covariate multiplied by 1e60 made the floor 1e108 for every other
/// coefficient, and damping then froze them. Read back once a step; a
/// non-finite entry is an error naming it.
fn damping_scale<B: PcgKernels>(prob: &Problem<'_, '_, B>, cur: &Point<'_, B>) -> Result<Vec<f64>> {
    let op = Penalised::new(prob.backend, cur.hessian.as_ref(), &prob.s, 0.0)?;
    let mut d = prob.backend.zeros(op.dim())?;
    op.diagonal(&mut d)?;
    let d = prob.backend.download(&d)?;
    if let Some(i) = d.iter().position(|v| !v.is_finite()) {
        return Err(SolverError::numerical(
            format!("hessian diagonal[{i}]"),
            d[i],
            "must be finite (the objective's Hessian overflowed at this beta)",
        ));
    }
    let unit = |j: usize| prob.scales[j] * prob.scales[j];
    let top = d.iter().enumerate().fold(0.0f64, |m, (j, v)| m.max(v.abs() / unit(j)));
    let floor = if top > 0.0 { 1e-12 * top } else { 1.0 };
    Ok(d.iter()
        .enumerate()
        .map(|(j, v)| v.abs().max(floor * unit(j)))
        .collect())
}

/// One solve of `(H + S + mu D) delta = -g`.
fn attempt<B: PcgKernels>(
    prob: &Problem<'_, '_, B>,
    cur: &Point<'_, B>,
    solver: StepSolver,
    rtol: f64,
    mu: f64,
    scale: &[f64],
    x0: Option<&[f64]>,
) -> Result<Attempt> {
    let damped;
    let s = if mu == 0.0 {
        &prob.s
    } else {
        let p = prob.s.dim();
        let mut host = prob.s.host().to_vec();
        for (j, d) in scale.iter().enumerate() {
            host[j * p + j] += mu * d;
        }
        damped = PenaltyMatrix::new(prob.backend, p, host)?;
        &damped
    };
    let op = Penalised::new(prob.backend, cur.hessian.as_ref(), s, 0.0)?;
    match solver {
        StepSolver::Pcg => pcg_step(prob, &op, &cur.grad, rtol, x0),
        _ => dense_step(prob.backend, &op, &cur.grad),
    }
}

fn dense_step<B: PcgKernels>(backend: &B, op: &Penalised<'_, B>, grad: &[f64]) -> Result<Attempt> {
    let a = op.to_dense()?;
    let chol = match backend.dense_factor(op.dim(), &a) {
        Ok(c) => c,
        Err(SolverError::NotPositiveDefinite { .. }) => return Ok(Attempt::NotPositiveDefinite(0)),
        Err(e) => return Err(e),
    };
    let rhs: Vec<f64> = grad.iter().map(|g| -g).collect();
    Ok(Attempt::Solved(Step {
        delta: chol.solve(&rhs, 1)?,
        pcg_iterations: 0,
        pcg_host_reads: 0,
        pcg_converged: None,
        pcg_rtol: None,
        damping: 0.0,
        damping_tries: 0,
    }))
}

fn pcg_step<B: PcgKernels>(
    prob: &Problem<'_, '_, B>,
    op: &Penalised<'_, B>,
    grad: &[f64],
    rtol: f64,
    x0: Option<&[f64]>,
) -> Result<Attempt> {
    let be = prob.backend;
    let mut d = be.zeros(op.dim())?;
    op.diagonal(&mut d)?;
    let Ok(jacobi) = Jacobi::new(be, &d, None, 0.0) else {
        // A diagonal entry is not positive: the operator is not positive definite.
        return Ok(Attempt::NotPositiveDefinite(0));
    };
    let rhs: Vec<f64> = grad.iter().map(|g| -g).collect();
    let b = be.upload(&rhs)?;
    let x0 = x0.map(|x| be.upload(x)).transpose()?;
    let opts = PcgOptions {
        rtol,
        ..prob.opts.pcg.clone()
    };
    let sol = cg(be, op, &jacobi, &b, x0.as_ref(), &opts)?;
    match sol.info.stop_reason {
        StopReason::Converged | StopReason::MaxIter => {}
        StopReason::Breakdown {
            quantity: BreakdownQuantity::PAp,
            ..
        }
        | StopReason::BadPreconditioner { .. } => return Ok(Attempt::NotPositiveDefinite(sol.info.host_reads)),
        StopReason::Breakdown { quantity, value } => {
            return Err(SolverError::numerical(
                format!("pcg {quantity:?}"),
                value,
                "Newton step solve broke down on a non-finite value",
            ))
        }
    }
    Ok(Attempt::Solved(Step {
        delta: be.download(&sol.x)?,
        pcg_iterations: sol.info.iterations,
        pcg_host_reads: sol.info.host_reads,
        pcg_converged: Some(sol.info.converged),
        pcg_rtol: Some(rtol),
        damping: 0.0,
        damping_tries: 0,
    }))
}
