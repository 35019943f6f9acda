//! Newton's method for penalised objectives, written once for every backend.
//!
//! Minimises `f(beta) = neglog(beta) + beta^T S_lambda beta / 2`. Each step
//! solves `(H + S_lambda) delta = -grad` either matrix-free (PCG with the
//! Jacobi preconditioner, to an Eisenstat-Walker forcing tolerance) or
//! exactly (dense assembly and Cholesky), picked per step by a cost estimate.
//! Where `H + S` is not positive definite (Cholesky fails, PCG breaks down,
//! the step is not a descent direction) the step is Levenberg-Marquardt
//! damped ([`step`]), more where it would leave the cap on steps (a trust
//! region). Steps are capped in the objective's coefficient scales and
//! halved until the Armijo test holds.
//!
//! The solve stops when an undamped step's Newton decrement
//! `g^T (H + S)^{-1} g` is at most `decrement_tol`: the point is then within
//! `sqrt(decrement_tol)` standard errors of the optimum, whatever n, the
//! objective's offset or the coefficients' units. A PCG step's decrement is
//! confirmed by a tight re-solve before it ends the solve.
//!
//! Host traffic per iteration: beta and the gradient live on the host (the
//! objective evaluates at a host beta); the Hessian is an operator on the
//! backend. A step reads back the diagonal of `H + S` (to scale damping),
//! the PCG scalars at its checks, and the step itself: all at
//! Newton-iteration granularity, never inside a PCG iteration.

mod line_search;
mod objective;
mod options;
mod step;

use std::rc::Rc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::backend::Backend;
use crate::observer::{Observer, Watched};
use crate::operator::{expect_len, LinearOperator};
use crate::pcg_kernels::PcgKernels;
use crate::penalty::{Penalty, PenaltyMatrix};
use crate::{Result, SolverError};
use line_search::line_search;
pub use objective::{fd_hessian_derivative, trace_product, traces_through_dense, CostEstimate, Evaluation, Objective};
use options::check;
pub use options::{Forcing, NewtonOptions, StepSolver};
use step::{confirm, solve_step, Step};

/// Why the driver stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Termination {
    /// An undamped Newton step's decrement met `decrement_tol`: the point
    /// is a minimum (H + S positive definite) within tolerance. The step is
    /// not taken.
    Decrement,
    /// `max_iter` iterations ran.
    MaxIterations,
    /// `max_halvings` halvings found no acceptable point.
    LineSearchFailed,
    /// [`STALL_STEPS`] steps in a row were cut to [`STALL_LENGTH`] or
    /// shorter: the objective is not smooth enough there for Newton to make
    /// progress (e.g. against the edge of its domain).
    Stalled,
    /// A stall as [`Termination::Stalled`], but with the last undamped
    /// decrement at most [`RESOLVED_DECREMENT`]: the point is within 1e-3
    /// standard errors of the optimum and the evaluations no longer resolve
    /// a better one (their rounding and the calibration's tolerances put a
    /// floor under the decrement; on 2,000 nearly separable rows it sat at
    /// 3.5e-9 for 35 steps of length 1/64, above REML's 1e-10). Converged.
    Resolved,
    /// An undamped step would land at a minimum the caller already knows
    /// (its `joins` test, [`newton_watched`]): the solve would end there.
    /// The step is not taken; not converged to a minimum of its own.
    Joined,
}

/// The largest decrement at which a stall counts as converged
/// ([`Termination::Resolved`]): 1e-3 standard errors from the optimum.
pub const RESOLVED_DECREMENT: f64 = 1e-6;

/// Steps in a row cut to [`STALL_LENGTH`] or shorter that end a solve as
/// stalled.
pub const STALL_STEPS: usize = 3;
/// A step length at or below which a step counts toward a stall.
pub const STALL_LENGTH: f64 = 1.0 / 64.0;

impl Termination {
    /// Whether this stop means the solve converged.
    pub fn converged(self) -> bool {
        matches!(self, Termination::Decrement | Termination::Resolved)
    }
}

/// One Newton iteration (a step tried from one point).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewtonIteration {
    /// Penalised objective at the start of the iteration.
    pub objective: f64,
    /// `||grad||_inf` at the start of the iteration.
    pub grad_norm: f64,
    /// `||delta||_inf` of the Newton direction (before halving).
    pub direction_norm: f64,
    /// Newton decrement `-grad^T delta` (twice the predicted decrease).
    pub decrement: f64,
    /// `||t delta||_inf` of the accepted step (0 if none was accepted).
    pub step_norm: f64,
    /// Accepted step length t (0 if none was accepted).
    pub step_length: f64,
    /// The solver used (`Pcg` or `Dense`).
    pub solver: StepSolver,
    /// PCG iterations (0 for a dense step).
    pub pcg_iterations: usize,
    /// Synchronising scalar reads made by this step's PCG solves (failed
    /// damping attempts included); the driver makes no other `read_scalars`.
    pub pcg_host_reads: usize,
    /// PCG relative tolerance (forcing term) used, if PCG ran.
    pub pcg_rtol: Option<f64>,
    /// Whether PCG met its tolerance, if PCG ran.
    pub pcg_converged: Option<bool>,
    /// Levenberg-Marquardt damping mu of the step (0 for a Newton step).
    pub damping: f64,
    /// Solves that failed for lack of positive definiteness before this one.
    pub damping_tries: usize,
    /// Step halvings.
    pub halvings: usize,
    /// Trial points whose objective was not finite.
    pub non_finite_trials: usize,
    /// Wall time of the iteration in seconds.
    pub seconds: f64,
}

/// What a Newton solve did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewtonReport {
    /// One record per step taken (or tried, when the line search failed).
    pub iterations: Vec<NewtonIteration>,
    /// The solve at the final point that found it converged (no step is
    /// taken from there), if one did.
    pub check: Option<NewtonIteration>,
    /// Why it stopped.
    pub termination: Termination,
    /// Whether a convergence test was met.
    pub converged: bool,
    /// Final penalised objective.
    pub objective: f64,
    /// Final `||grad||_inf`.
    pub grad_norm: f64,
    /// The last undamped Newton decrement computed (infinite if none).
    pub decrement: f64,
    /// Objective evaluations (full and value-only).
    pub evaluations: usize,
    /// Wall time in seconds.
    pub seconds: f64,
}

impl NewtonReport {
    /// Steps taken (iterations with an accepted step).
    pub fn steps(&self) -> usize {
        self.iterations.iter().filter(|it| it.step_length > 0.0).count()
    }
}

/// The result of [`newton`]: the final point with its Hessian, and the report.
pub struct NewtonFit<'a, B: PcgKernels> {
    /// Final coefficients.
    pub beta: Vec<f64>,
    /// Penalised objective at beta.
    pub objective: f64,
    /// Penalised gradient at beta.
    pub gradient: Vec<f64>,
    /// Unpenalised Hessian at beta.
    pub hessian: Rc<dyn LinearOperator<B> + 'a>,
    /// The objective's own value and gradient at beta (without the penalty).
    pub unpenalised: (f64, Vec<f64>),
    /// What the solve did.
    pub report: NewtonReport,
}

impl<'a, B: PcgKernels> NewtonFit<'a, B> {
    /// The objective's evaluation at the final beta: a solve that starts
    /// from this beta ([`newton_from`]) takes it instead of evaluating again.
    pub fn into_evaluation(self) -> Evaluation<'a, B> {
        Evaluation {
            value: self.unpenalised.0,
            gradient: self.unpenalised.1,
            hessian: self.hessian,
        }
    }
}

/// A point with its penalised value and gradient.
struct Point<'a, B: PcgKernels> {
    beta: Vec<f64>,
    value: f64,
    grad: Vec<f64>,
    hessian: Rc<dyn LinearOperator<B> + 'a>,
    /// The objective's own value and gradient.
    unpenalised: (f64, Vec<f64>),
}

/// The fixed inputs of one solve.
struct Problem<'a, 'o, B: PcgKernels> {
    backend: &'a B,
    objective: &'o dyn Objective<B>,
    observer: &'a dyn Observer,
    penalty: &'a Penalty,
    lambda: &'a [f64],
    s: PenaltyMatrix<B>,
    /// The objective's coefficient scales (ones by default).
    scales: Vec<f64>,
    opts: &'a NewtonOptions,
    joins: Option<Joins<'a>>,
}

/// A test of an undamped step's landing point `beta + delta`: true where
/// it lies at a minimum the caller knows ([`newton_watched`]).
pub(crate) type Joins<'a> = &'a dyn Fn(&[f64]) -> bool;

/// The smallest change of f that evaluations can resolve:
/// `16 eps (|f| + 1)`. The Armijo test gets this much slack, so that a
/// step whose decrease f cannot resolve is not refused for rounding.
pub fn resolution(f: f64) -> f64 {
    16.0 * f64::EPSILON * (f.abs() + 1.0)
}

fn inf_norm(x: &[f64]) -> f64 {
    x.iter().fold(0.0f64, |m, v| m.max(v.abs()))
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(u, v)| u * v).sum()
}

/// The objective's coefficient scales, checked (ones when it has none).
/// The damping works in their squares, so each must square to a normal
/// float: within [1e-150, 1e150].
fn coefficient_scales<B: Backend>(objective: &dyn Objective<B>) -> Result<Vec<f64>> {
    let p = objective.dim();
    let Some(s) = objective.coefficient_scales() else {
        return Ok(vec![1.0; p]);
    };
    expect_len("coefficient_scales", s.len(), p)?;
    if let Some(j) = s.iter().position(|v| !(1e-150..=1e150).contains(v)) {
        return Err(SolverError::invalid(
            format!("coefficient_scales[{j}]"),
            s[j],
            "must be within [1e-150, 1e150] (their squares are the damping's units)",
        ));
    }
    Ok(s)
}

impl<'a, 'o, B: PcgKernels> Problem<'a, 'o, B> {
    /// The objective with the observer, for the calls that evaluate it.
    fn watched(&self) -> Watched<'a, 'o, B> {
        Watched {
            objective: self.objective,
            observer: self.observer,
        }
    }

    /// The penalised point at beta, or `None` where it is not finite.
    fn point(&self, beta: Vec<f64>) -> Result<Option<Point<'o, B>>> {
        let Some(e) = self.watched().evaluate(&beta)? else {
            return Ok(None);
        };
        self.point_from(beta, e)
    }

    /// The penalised point at beta from the objective's evaluation there.
    fn point_from(&self, beta: Vec<f64>, e: Evaluation<'o, B>) -> Result<Option<Point<'o, B>>> {
        expect_len("objective gradient", e.gradient.len(), beta.len())?;
        expect_len("objective Hessian", e.hessian.dim(), beta.len())?;
        let sb = self.penalty.apply(self.lambda, &beta)?;
        let value = e.value + 0.5 * dot(&beta, &sb);
        let grad: Vec<f64> = e.gradient.iter().zip(&sb).map(|(g, s)| g + s).collect();
        if !(value.is_finite() && grad.iter().all(|g| g.is_finite())) {
            return Ok(None);
        }
        Ok(Some(Point {
            beta,
            value,
            grad,
            hessian: e.hessian,
            unpenalised: (e.value, e.gradient),
        }))
    }

    /// The penalised value at beta, or `None` where it is not finite.
    fn value(&self, beta: &[f64]) -> Result<Option<f64>> {
        let Some(v) = self.watched().value(beta)? else {
            return Ok(None);
        };
        let f = v + 0.5 * self.penalty.quadratic(self.lambda, beta)?;
        Ok(f.is_finite().then_some(f))
    }
}

/// Minimise `neglog(beta) + beta^T S_lambda beta / 2` from `beta0`, which must
/// be a point where the objective is finite.
pub fn newton<'o, B: PcgKernels>(
    backend: &B,
    objective: &'o dyn Objective<B>,
    penalty: &Penalty,
    lambda: &[f64],
    beta0: &[f64],
    opts: &NewtonOptions,
) -> Result<NewtonFit<'o, B>> {
    newton_observed(backend, objective, penalty, lambda, beta0, opts, &())
}

/// [`newton`], telling `observer` of every iteration, evaluation and the
/// solve's end.
pub fn newton_observed<'o, B: PcgKernels>(
    backend: &B,
    objective: &'o dyn Objective<B>,
    penalty: &Penalty,
    lambda: &[f64],
    beta0: &[f64],
    opts: &NewtonOptions,
    observer: &dyn Observer,
) -> Result<NewtonFit<'o, B>> {
    let watched = Watched { objective, observer };
    newton_watched(backend, watched, penalty, lambda, beta0, None, opts, None)
}

/// [`newton`] with the objective's evaluation at `beta0` already in hand
/// (`start`, as [`NewtonFit::into_evaluation`] gives it), which the solve
/// takes instead of evaluating there again: REML starts each inner solve at
/// the last one's beta (objectives are deterministic, so the solve is the
/// same either way). `start` must be the evaluation at exactly `beta0`.
pub fn newton_from<'o, B: PcgKernels>(
    backend: &B,
    objective: &'o dyn Objective<B>,
    penalty: &Penalty,
    lambda: &[f64],
    beta0: &[f64],
    start: Option<Evaluation<'o, B>>,
    opts: &NewtonOptions,
) -> Result<NewtonFit<'o, B>> {
    let watched = Watched {
        objective,
        observer: &(),
    };
    newton_watched(backend, watched, penalty, lambda, beta0, start, opts, None)
}

/// [`newton_from`] with the objective's observer, ending as
/// [`Termination::Joined`] where an undamped step's landing point passes
/// `joins`: REML's check of the inner minimum from beta0 stops once it is
/// bound for the minimum it checks.
#[allow(clippy::too_many_arguments)]
pub(crate) fn newton_watched<'o, B: PcgKernels>(
    backend: &B,
    watched: Watched<'_, 'o, B>,
    penalty: &Penalty,
    lambda: &[f64],
    beta0: &[f64],
    start: Option<Evaluation<'o, B>>,
    opts: &NewtonOptions,
    joins: Option<Joins<'_>>,
) -> Result<NewtonFit<'o, B>> {
    let Watched { objective, observer } = watched;
    opts.validate()?;
    let p = objective.dim();
    expect_len("penalty dimension", penalty.dim(), p)?;
    expect_len("beta0", beta0.len(), p)?;
    if let Some(j) = beta0.iter().position(|b| !b.is_finite()) {
        return Err(SolverError::invalid(format!("beta0[{j}]"), beta0[j], "must be finite"));
    }
    let prob = Problem {
        backend,
        objective,
        observer,
        penalty,
        lambda,
        s: PenaltyMatrix::from_penalty(backend, penalty, lambda)?,
        scales: coefficient_scales(objective)?,
        opts,
        joins,
    };
    let clock = Instant::now();
    let evaluated = start.is_none();
    let first = match start {
        Some(e) => prob.point_from(beta0.to_vec(), e)?,
        None => prob.point(beta0.to_vec())?,
    };
    let Some(mut cur) = first else {
        return Err(SolverError::invalid(
            "beta0",
            "a point",
            "objective and gradient must be finite at the start",
        ));
    };
    let mut run = Run::new(opts, usize::from(evaluated));
    let termination = loop {
        if run.iterations.len() == opts.max_iter {
            break Termination::MaxIterations;
        }
        match iterate(&prob, &cur, &mut run)? {
            Outcome::Converged => break Termination::Decrement,
            Outcome::Joined => break Termination::Joined,
            Outcome::Failed => break Termination::LineSearchFailed,
            Outcome::Moved(next) => cur = next,
        }
        let recent = run.iterations.iter().rev().take(STALL_STEPS);
        if run.iterations.len() >= STALL_STEPS && recent.clone().all(|it| it.step_length <= STALL_LENGTH) {
            break if run.decrement <= RESOLVED_DECREMENT.max(opts.decrement_tol) {
                Termination::Resolved
            } else {
                Termination::Stalled
            };
        }
    };
    let report = NewtonReport {
        converged: termination.converged(),
        termination,
        objective: cur.value,
        grad_norm: inf_norm(&cur.grad),
        decrement: run.decrement,
        evaluations: run.evaluations,
        seconds: clock.elapsed().as_secs_f64(),
        iterations: run.iterations,
        check: run.check,
    };
    observer.newton_stop(&report);
    Ok(NewtonFit {
        beta: cur.beta,
        objective: cur.value,
        gradient: cur.grad,
        hessian: cur.hessian,
        unpenalised: cur.unpenalised,
        report,
    })
}

/// Mutable state carried across iterations.
struct Run {
    iterations: Vec<NewtonIteration>,
    check: Option<NewtonIteration>,
    evaluations: usize,
    /// The last undamped decrement.
    decrement: f64,
    /// The last damping used (Levenberg-Marquardt memory).
    damping: f64,
    /// (||g||_2, eta) of the previous PCG step, for the forcing term.
    prev_forcing: Option<(f64, f64)>,
    expected_pcg_iters: usize,
}

impl Run {
    fn new(opts: &NewtonOptions, evaluations: usize) -> Self {
        Self {
            iterations: Vec::new(),
            check: None,
            evaluations,
            decrement: f64::INFINITY,
            damping: 0.0,
            prev_forcing: None,
            expected_pcg_iters: opts.expected_pcg_iters,
        }
    }

    /// Eisenstat-Walker choice 2 with the usual safeguards.
    fn forcing(&self, g2: f64, f: &Forcing) -> f64 {
        let eta = match self.prev_forcing {
            None => f.eta_max,
            Some((g_prev, eta_prev)) => {
                let e = f.gamma * (g2 / g_prev).powf(f.alpha);
                // Do not let eta drop fast while the previous one was large.
                let guard = f.gamma * eta_prev.powf(f.alpha);
                if guard > 0.1 {
                    e.max(guard)
                } else {
                    e
                }
            }
        };
        eta.min(f.eta_max).max(f.eta_min)
    }
}

/// What one iteration did.
enum Outcome<'o, B: PcgKernels> {
    /// The current point met the decrement test.
    Converged,
    /// The step would land at the caller's minimum (`joins`).
    Joined,
    /// The line search found no acceptable point.
    Failed,
    /// The accepted point.
    Moved(Point<'o, B>),
}

/// One iteration: a step, the convergence test on it, then the line search.
fn iterate<'o, B: PcgKernels>(prob: &Problem<'_, 'o, B>, cur: &Point<'o, B>, run: &mut Run) -> Result<Outcome<'o, B>> {
    let t0 = Instant::now();
    let solver = choose_solver(prob, run.expected_pcg_iters);
    let g2 = dot(&cur.grad, &cur.grad).sqrt();
    let rtol = run.forcing(g2, &prob.opts.forcing);
    let mut step = solve_step(prob, cur, solver, rtol, run.damping)?;
    run.damping = step.damping;
    if solver == StepSolver::Pcg {
        run.prev_forcing = Some((g2, rtol));
        run.expected_pcg_iters = step.pcg_iterations.max(1);
    }
    if step.damping == 0.0 {
        let loose = step.pcg_rtol.is_some_and(|r| r > step::CONFIRM_RTOL);
        if loose && -dot(&cur.grad, &step.delta) <= prob.opts.decrement_tol {
            if let Some(mut tight) = confirm(prob, cur, &step)? {
                tight.pcg_iterations += step.pcg_iterations;
                tight.pcg_host_reads += step.pcg_host_reads;
                step = tight;
            }
        }
        run.decrement = -dot(&cur.grad, &step.delta);
    }
    let mut record = record(cur, &step, solver);
    if step.damping == 0.0 && run.decrement <= prob.opts.decrement_tol {
        record.seconds = t0.elapsed().as_secs_f64();
        run.check = Some(record);
        return Ok(Outcome::Converged);
    }
    if step.damping == 0.0 && joined(prob, cur, &step)? {
        record.seconds = t0.elapsed().as_secs_f64();
        run.check = Some(record);
        return Ok(Outcome::Joined);
    }
    let search = line_search(prob, cur, &step.delta)?;
    run.evaluations += search.evaluations;
    record.step_norm = search.t * record.direction_norm;
    record.step_length = search.t;
    record.halvings = search.halvings;
    record.non_finite_trials = search.non_finite;
    let outcome = match (search.point, search.beta) {
        (Some(point), _) => Outcome::Moved(point),
        (None, Some(beta)) => {
            run.evaluations += 1;
            let Some(next) = prob.point(beta)? else {
                return Err(SolverError::numerical(
                    "objective",
                    "None",
                    "evaluate must be finite where value was finite",
                ));
            };
            Outcome::Moved(next)
        }
        (None, None) => {
            record.step_norm = 0.0;
            record.step_length = 0.0;
            Outcome::Failed
        }
    };
    record.seconds = t0.elapsed().as_secs_f64();
    prob.observer.newton_iteration(&record);
    run.iterations.push(record);
    Ok(outcome)
}

/// Whether the undamped `step` lands where `prob.joins` says; a loose PCG
/// step that does is solved again to [`step::CONFIRM_RTOL`] and tested
/// again, so that a loose solve cannot end the solve.
fn joined<B: PcgKernels>(prob: &Problem<'_, '_, B>, cur: &Point<'_, B>, step: &Step) -> Result<bool> {
    let Some(joins) = prob.joins else {
        return Ok(false);
    };
    let lands = |delta: &[f64]| -> Vec<f64> { cur.beta.iter().zip(delta).map(|(b, d)| b + d).collect() };
    if !joins(&lands(&step.delta)) {
        return Ok(false);
    }
    if step.pcg_rtol.is_none_or(|r| r <= step::CONFIRM_RTOL) {
        return Ok(true);
    }
    match confirm(prob, cur, step)? {
        Some(tight) => Ok(joins(&lands(&tight.delta))),
        None => Ok(false),
    }
}

/// The record of a step from `cur`, before its line search.
fn record<B: PcgKernels>(cur: &Point<'_, B>, step: &Step, solver: StepSolver) -> NewtonIteration {
    NewtonIteration {
        objective: cur.value,
        grad_norm: inf_norm(&cur.grad),
        direction_norm: inf_norm(&step.delta),
        decrement: -dot(&cur.grad, &step.delta),
        step_norm: 0.0,
        step_length: 0.0,
        solver,
        pcg_iterations: step.pcg_iterations,
        pcg_host_reads: step.pcg_host_reads,
        pcg_rtol: step.pcg_rtol,
        pcg_converged: step.pcg_converged,
        damping: step.damping,
        damping_tries: step.damping_tries,
        halvings: 0,
        non_finite_trials: 0,
        seconds: 0.0,
    }
}

/// The concrete solver of a step: the option, or the cheaper by estimate.
fn choose_solver<B: PcgKernels>(prob: &Problem<'_, '_, B>, expected_iters: usize) -> StepSolver {
    match prob.opts.solver {
        StepSolver::Auto => {
            let p = prob.s.dim();
            let c = prob.objective.cost();
            if c.dense_step(p) <= c.pcg_step(p, expected_iters.min(p)) {
                StepSolver::Dense
            } else {
                StepSolver::Pcg
            }
        }
        s => s,
    }
}
