//! Newton's method for penalised objectives, written once for every backend.
//!
//! Minimises `f(beta) = neglog(beta) + beta^T S_lambda beta / 2`. Each step
//! solves `(H + S_lambda + ridge I) delta = -grad` either matrix-free (PCG with
//! the Jacobi preconditioner, to an Eisenstat-Walker forcing tolerance) or
//! exactly (dense assembly and Cholesky), picked per step by a cost estimate.
//! A step whose trial value is not finite, or that fails the Armijo test, is
//! halved. A Hessian that is not positive definite (Cholesky fails, PCG breaks
//! down, the step is not a descent direction) gets a growing ridge.
//!
//! Host traffic per iteration: beta and the gradient live on the host (the
//! objective evaluates at a host beta); the Hessian is an operator on the
//! backend. A step reads back the diagonal of `H + S` (to size a ridge), the
//! PCG scalars at its checks, and the step itself: all at Newton-iteration
//! granularity, never inside a PCG iteration.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::backend::Backend;
use crate::dense::Cholesky;
use crate::operator::{expect_len, LinearOperator};
use crate::pcg::{cg, BreakdownQuantity, PcgOptions, StopReason};
use crate::penalty::{Penalised, Penalty, PenaltyMatrix};
use crate::precond::Jacobi;
use crate::{Result, SolverError};

/// The unpenalised objective at one beta, as returned by [`Objective::evaluate`].
pub struct Evaluation<'a, B: Backend> {
    /// neglog(beta).
    pub value: f64,
    /// Its gradient, on the host.
    pub gradient: Vec<f64>,
    /// Its Hessian as an operator on the backend (without the penalty).
    pub hessian: Box<dyn LinearOperator<B> + 'a>,
}

/// Cost estimates in flops that steer [`Solver::Auto`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostEstimate {
    /// One Hessian-vector product.
    pub hvp: f64,
    /// Assembling the dense Hessian (`to_dense`).
    pub dense_assembly: f64,
}

impl CostEstimate {
    /// The default: a dense `p x p` Hessian, so an HVP costs `2 p^2` and
    /// assembly costs `p` HVPs.
    pub fn dense(p: usize) -> Self {
        let p = p as f64;
        Self {
            hvp: 2.0 * p * p,
            dense_assembly: 2.0 * p * p * p,
        }
    }
}

/// A twice-differentiable negative log-likelihood (or any smooth loss).
///
/// The driver evaluates it at host betas; the Hessian it returns is an
/// operator on the backend, so it may stay matrix-free on a device. REML
/// evaluates it at perturbed betas to differentiate the Hessian.
pub trait Objective<B: Backend> {
    /// Number of coefficients p.
    fn dim(&self) -> usize;
    /// Value, gradient and Hessian at `beta`. `Ok(None)` (or a non-finite
    /// value or gradient) means beta is outside the objective's domain: the
    /// driver then shrinks its step instead of failing.
    fn evaluate(&self, beta: &[f64]) -> Result<Option<Evaluation<'_, B>>>;
    /// The value alone, for line-search trials; override when it is cheaper
    /// than a full evaluation (and say so in [`Objective::cheap_value`]).
    fn value(&self, beta: &[f64]) -> Result<Option<f64>> {
        Ok(self.evaluate(beta)?.map(|e| e.value))
    }
    /// Whether [`Objective::value`] costs much less than
    /// [`Objective::evaluate`]. When it does not (the default), line-search
    /// trials are full evaluations and the accepted one is kept, so the next
    /// iteration does not evaluate the same beta again.
    fn cheap_value(&self) -> bool {
        false
    }
    /// Cost estimates for the step-solver choice (default: dense `p x p`).
    fn cost(&self) -> CostEstimate {
        CostEstimate::dense(self.dim())
    }
    /// The derivative of the Hessian at `beta` along `direction`, dense
    /// row-major `p x p` (REML needs it). The default is the central
    /// difference [`fd_hessian_derivative`] with relative step `rel_step`;
    /// override it with an exact contraction of third derivatives.
    fn hessian_derivative(&self, beta: &[f64], direction: &[f64], rel_step: f64) -> Result<Vec<f64>> {
        fd_hessian_derivative(self, beta, direction, rel_step)
    }
}

/// `(H(beta + e d) - H(beta - e d)) / (2 e)` through `to_dense`, with
/// `e ||d||_inf = rel_step (1 + ||beta||_inf)`. Error O(e^2); a point outside
/// the objective's domain is an error naming the step.
pub fn fd_hessian_derivative<B: Backend, O: Objective<B> + ?Sized>(
    objective: &O,
    beta: &[f64],
    direction: &[f64],
    rel_step: f64,
) -> Result<Vec<f64>> {
    let p = objective.dim();
    expect_len("beta", beta.len(), p)?;
    expect_len("direction", direction.len(), p)?;
    check("rel_step", rel_step, rel_step > 0.0, "must be finite and > 0")?;
    let dn = inf_norm(direction);
    if dn == 0.0 {
        return Ok(vec![0.0; p * p]);
    }
    let e = rel_step * (1.0 + inf_norm(beta)) / dn;
    let hessian_at = |sign: f64| -> Result<Vec<f64>> {
        let b: Vec<f64> = beta.iter().zip(direction).map(|(b, d)| b + sign * e * d).collect();
        match objective.evaluate(&b)? {
            Some(ev) => ev.hessian.to_dense(),
            None => Err(SolverError::invalid(
                "hessian_derivative step",
                sign * e,
                "beta +- step * direction must lie in the objective's domain",
            )),
        }
    };
    let (hp, hm) = (hessian_at(1.0)?, hessian_at(-1.0)?);
    Ok(hp.iter().zip(&hm).map(|(a, b)| (a - b) / (2.0 * e)).collect())
}

/// How Newton steps are solved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Solver {
    /// Pick per step by cost estimate.
    Auto,
    /// PCG with the Jacobi preconditioner (matrix-free).
    Pcg,
    /// Dense assembly and Cholesky.
    Dense,
}

/// Eisenstat-Walker forcing ("choice 2"): the PCG relative tolerance of step
/// k is `gamma (||g_k|| / ||g_{k-1}||)^alpha`, safeguarded, clamped to
/// `[eta_min, eta_max]` and never tighter than needed to meet `grad_tol`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Forcing {
    /// Loosest tolerance, also used at the first step (default 0.5).
    pub eta_max: f64,
    /// Tightest tolerance (default 1e-12).
    pub eta_min: f64,
    /// gamma (default 0.9).
    pub gamma: f64,
    /// alpha (default 2).
    pub alpha: f64,
}

impl Default for Forcing {
    fn default() -> Self {
        Self {
            eta_max: 0.5,
            eta_min: 1e-12,
            gamma: 0.9,
            alpha: 2.0,
        }
    }
}

/// Options of [`newton`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewtonOptions {
    /// Step solver (default `Auto`).
    pub solver: Solver,
    /// Iteration cap (default 100).
    pub max_iter: usize,
    /// Converged when `||grad||_inf <= grad_tol (|f| + 1)` (default 1e-9;
    /// mgcv's criterion).
    pub grad_tol: f64,
    /// Converged when an unridged Newton direction has
    /// `||delta||_inf <= step_tol (||beta||_inf + 1)` (default 1e-10; 0 turns
    /// the test off). Near the optimum rounding can make the line search
    /// halve a step that is already negligible; this test ends such runs.
    pub step_tol: f64,
    /// Armijo constant c: accept `f(beta + t d) <= f + c t g^T d` (default 1e-4).
    pub armijo: f64,
    /// Most step halvings per iteration (default 40).
    pub max_halvings: usize,
    /// Longest step tried, `||t delta||_inf <= max_step` (default 1e3): a
    /// nearly singular ridged Hessian far from the optimum can propose a
    /// huge step, and a model evaluated that far out may be slow or outside
    /// its domain. mgcv caps its Newton steps the same way.
    pub max_step: f64,
    /// PCG forcing terms.
    pub forcing: Forcing,
    /// PCG options; `rtol` is replaced by the forcing term (default
    /// [`PcgOptions::default`]).
    pub pcg: PcgOptions,
    /// First ridge, relative to `max |diag(H + S)|` (default 1e-8).
    pub ridge_start: f64,
    /// Factor by which a failing ridge grows (default 2).
    pub ridge_growth: f64,
    /// Most ridge retries per step (default 30).
    pub max_ridge_tries: usize,
    /// PCG iterations `Auto` assumes before the first PCG solve (default 50;
    /// later steps use the last observed count).
    pub expected_pcg_iters: usize,
}

impl Default for NewtonOptions {
    fn default() -> Self {
        Self {
            solver: Solver::Auto,
            max_iter: 100,
            grad_tol: 1e-9,
            step_tol: 1e-10,
            armijo: 1e-4,
            max_halvings: 40,
            max_step: 1e3,
            forcing: Forcing::default(),
            pcg: PcgOptions::default(),
            ridge_start: 1e-8,
            ridge_growth: 2.0,
            max_ridge_tries: 30,
            expected_pcg_iters: 50,
        }
    }
}

fn check(field: &str, v: f64, ok: bool, rule: &str) -> Result<()> {
    if ok && v.is_finite() {
        Ok(())
    } else {
        Err(SolverError::invalid(field, v, rule))
    }
}

impl NewtonOptions {
    /// Check every field's range.
    pub fn validate(&self) -> Result<()> {
        check(
            "grad_tol",
            self.grad_tol,
            self.grad_tol >= 0.0,
            "must be finite and >= 0",
        )?;
        check(
            "step_tol",
            self.step_tol,
            self.step_tol >= 0.0,
            "must be finite and >= 0",
        )?;
        check("max_step", self.max_step, self.max_step > 0.0, "must be finite and > 0")?;
        let a = self.armijo;
        check("armijo", a, a > 0.0 && a < 0.5, "must lie in (0, 0.5)")?;
        let r = self.ridge_start;
        check("ridge_start", r, r > 0.0, "must be finite and > 0")?;
        let g = self.ridge_growth;
        check("ridge_growth", g, g > 1.0, "must be finite and > 1")?;
        let f = &self.forcing;
        let ok = f.eta_min > 0.0 && f.eta_min <= f.eta_max && f.eta_max < 1.0;
        check("forcing.eta_min", f.eta_min, ok, "need 0 < eta_min <= eta_max < 1")?;
        check(
            "forcing.gamma",
            f.gamma,
            f.gamma > 0.0 && f.gamma <= 1.0,
            "must lie in (0, 1]",
        )?;
        check(
            "forcing.alpha",
            f.alpha,
            f.alpha > 1.0 && f.alpha <= 2.0,
            "must lie in (1, 2]",
        )?;
        if self.max_iter == 0 {
            return Err(SolverError::invalid("max_iter", 0, "must be >= 1"));
        }
        Ok(())
    }
}

/// Why the driver stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Termination {
    /// The gradient met `grad_tol`.
    Gradient,
    /// An unridged Newton step was negligible: its direction met `step_tol`
    /// or its decrement was below the rounding of f ([`resolution`]); the
    /// step is taken before stopping.
    Step,
    /// `max_iter` iterations ran.
    MaxIterations,
    /// `max_halvings` halvings found no acceptable point.
    LineSearchFailed,
}

/// One Newton iteration.
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
    pub solver: Solver,
    /// PCG iterations (0 for a dense step).
    pub pcg_iterations: usize,
    /// Synchronising scalar reads made by this step's PCG solves (failed
    /// ridge attempts included); the driver makes no other `read_scalars`.
    pub pcg_host_reads: usize,
    /// PCG relative tolerance (forcing term) used, if PCG ran.
    pub pcg_rtol: Option<f64>,
    /// Whether PCG met its tolerance, if PCG ran.
    pub pcg_converged: Option<bool>,
    /// Ridge added to the Hessian for the accepted step (0 if none).
    pub ridge: f64,
    /// Solves that failed for lack of positive definiteness before this one.
    pub ridge_retries: usize,
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
    /// One record per iteration.
    pub iterations: Vec<NewtonIteration>,
    /// Why it stopped.
    pub termination: Termination,
    /// Whether a convergence test was met.
    pub converged: bool,
    /// Final penalised objective.
    pub objective: f64,
    /// Final `||grad||_inf`.
    pub grad_norm: f64,
    /// Objective evaluations (full and value-only).
    pub evaluations: usize,
    /// Wall time in seconds.
    pub seconds: f64,
}

/// The result of [`newton`]: the final point with its Hessian, and the report.
pub struct NewtonFit<'a, B: Backend> {
    /// Final coefficients.
    pub beta: Vec<f64>,
    /// Penalised objective at beta.
    pub objective: f64,
    /// Penalised gradient at beta.
    pub gradient: Vec<f64>,
    /// Unpenalised Hessian at beta.
    pub hessian: Box<dyn LinearOperator<B> + 'a>,
    /// The objective's own value and gradient at beta (without the penalty).
    pub unpenalised: (f64, Vec<f64>),
    /// What the solve did.
    pub report: NewtonReport,
}

impl<'a, B: Backend> NewtonFit<'a, B> {
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
struct Point<'a, B: Backend> {
    beta: Vec<f64>,
    value: f64,
    grad: Vec<f64>,
    hessian: Box<dyn LinearOperator<B> + 'a>,
    /// The objective's own value and gradient.
    unpenalised: (f64, Vec<f64>),
}

/// The fixed inputs of one solve.
struct Problem<'a, 'o, B: Backend> {
    backend: &'a B,
    objective: &'o dyn Objective<B>,
    penalty: &'a Penalty,
    lambda: &'a [f64],
    s: PenaltyMatrix<B>,
    opts: &'a NewtonOptions,
}

/// The smallest change of f that evaluations can resolve:
/// `16 eps (|f| + 1)`. Near the optimum the Armijo test gets this much
/// slack, and a Newton decrement below it ends the solve: from there on the
/// objective cannot tell a better point from a worse one.
pub fn resolution(f: f64) -> f64 {
    16.0 * f64::EPSILON * (f.abs() + 1.0)
}

fn inf_norm(x: &[f64]) -> f64 {
    x.iter().fold(0.0f64, |m, v| m.max(v.abs()))
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(u, v)| u * v).sum()
}

impl<'o, B: Backend> Problem<'_, 'o, B> {
    /// The penalised point at beta, or `None` where it is not finite.
    fn point(&self, beta: Vec<f64>) -> Result<Option<Point<'o, B>>> {
        let Some(e) = self.objective.evaluate(&beta)? else {
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
        let Some(v) = self.objective.value(beta)? else {
            return Ok(None);
        };
        let f = v + 0.5 * self.penalty.quadratic(self.lambda, beta)?;
        Ok(f.is_finite().then_some(f))
    }
}

/// Minimise `neglog(beta) + beta^T S_lambda beta / 2` from `beta0`, which must
/// be a point where the objective is finite.
pub fn newton<'o, B: Backend>(
    backend: &B,
    objective: &'o dyn Objective<B>,
    penalty: &Penalty,
    lambda: &[f64],
    beta0: &[f64],
    opts: &NewtonOptions,
) -> Result<NewtonFit<'o, B>> {
    newton_from(backend, objective, penalty, lambda, beta0, None, opts)
}

/// [`newton`] with the objective's evaluation at `beta0` already in hand
/// (`start`, as [`NewtonFit::into_evaluation`] gives it), which the solve
/// takes instead of evaluating there again: REML starts each inner solve at
/// the last one's beta (objectives are deterministic, so the solve is the
/// same either way). `start` must be the evaluation at exactly `beta0`.
pub fn newton_from<'o, B: Backend>(
    backend: &B,
    objective: &'o dyn Objective<B>,
    penalty: &Penalty,
    lambda: &[f64],
    beta0: &[f64],
    start: Option<Evaluation<'o, B>>,
    opts: &NewtonOptions,
) -> Result<NewtonFit<'o, B>> {
    opts.validate()?;
    let p = objective.dim();
    expect_len("penalty dimension", penalty.dim(), p)?;
    expect_len("beta0", beta0.len(), p)?;
    let prob = Problem {
        backend,
        objective,
        penalty,
        lambda,
        s: PenaltyMatrix::from_penalty(backend, penalty, lambda)?,
        opts,
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
    let mut run = Run::new(opts);
    run.evaluations = usize::from(evaluated);
    let termination = loop {
        if let Some(t) = run.converged(&cur, opts) {
            break t;
        }
        if run.iterations.len() == opts.max_iter {
            break Termination::MaxIterations;
        }
        let (next, record) = iterate(&prob, &cur, &mut run)?;
        let small = record.ridge == 0.0
            && (record.direction_norm <= opts.step_tol * (inf_norm(&cur.beta) + 1.0)
                || record.decrement <= resolution(cur.value));
        run.iterations.push(record);
        let Some(next) = next else {
            break Termination::LineSearchFailed;
        };
        run.last_step_small = small;
        cur = next;
    };
    let report = NewtonReport {
        converged: matches!(termination, Termination::Gradient | Termination::Step),
        termination,
        objective: cur.value,
        grad_norm: inf_norm(&cur.grad),
        evaluations: run.evaluations,
        seconds: clock.elapsed().as_secs_f64(),
        iterations: run.iterations,
    };
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
    evaluations: usize,
    last_step_small: bool,
    /// (||g||_2, eta) of the previous PCG step, for the forcing term.
    prev_forcing: Option<(f64, f64)>,
    expected_pcg_iters: usize,
}

impl Run {
    fn new(opts: &NewtonOptions) -> Self {
        Self {
            iterations: Vec::new(),
            evaluations: 1,
            last_step_small: false,
            prev_forcing: None,
            expected_pcg_iters: opts.expected_pcg_iters,
        }
    }

    fn converged<B: Backend>(&self, cur: &Point<'_, B>, opts: &NewtonOptions) -> Option<Termination> {
        if inf_norm(&cur.grad) <= opts.grad_tol * (cur.value.abs() + 1.0) {
            Some(Termination::Gradient)
        } else if self.last_step_small {
            Some(Termination::Step)
        } else {
            None
        }
    }

    /// Eisenstat-Walker choice 2 with the usual safeguards.
    fn forcing(&self, g2: f64, tol_abs: f64, f: &Forcing) -> f64 {
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
        // No need to solve beyond what the gradient test asks for.
        let needed = 0.5 * tol_abs / g2;
        eta.min(f.eta_max).max(needed.min(f.eta_max)).max(f.eta_min)
    }
}

/// One iteration: a step, then the line search. Returns the accepted point
/// (`None` if the line search failed) and the record.
fn iterate<'o, B: Backend>(
    prob: &Problem<'_, 'o, B>,
    cur: &Point<'o, B>,
    run: &mut Run,
) -> Result<(Option<Point<'o, B>>, NewtonIteration)> {
    let t0 = Instant::now();
    let solver = choose_solver(prob, run.expected_pcg_iters);
    let g2 = dot(&cur.grad, &cur.grad).sqrt();
    let tol_abs = prob.opts.grad_tol * (cur.value.abs() + 1.0);
    let rtol = run.forcing(g2, tol_abs, &prob.opts.forcing);
    let step = solve_step(prob, cur, solver, rtol)?;
    if solver == Solver::Pcg {
        run.prev_forcing = Some((g2, rtol));
        run.expected_pcg_iters = step.pcg_iterations.max(1);
    }
    let search = line_search(prob, cur, &step.delta)?;
    run.evaluations += search.evaluations;
    let mut record = NewtonIteration {
        objective: cur.value,
        grad_norm: inf_norm(&cur.grad),
        direction_norm: inf_norm(&step.delta),
        decrement: -dot(&cur.grad, &step.delta),
        step_norm: search.t * inf_norm(&step.delta),
        step_length: search.t,
        solver,
        pcg_iterations: step.pcg_iterations,
        pcg_host_reads: step.pcg_host_reads,
        pcg_rtol: (solver == Solver::Pcg).then_some(rtol),
        pcg_converged: step.pcg_converged,
        ridge: step.ridge,
        ridge_retries: step.ridge_retries,
        halvings: search.halvings,
        non_finite_trials: search.non_finite,
        seconds: 0.0,
    };
    let next = match (search.point, search.beta) {
        (Some(point), _) => Some(point),
        (None, Some(beta)) => {
            run.evaluations += 1;
            let next = prob.point(beta)?;
            if next.is_none() {
                return Err(SolverError::invalid(
                    "objective",
                    "None",
                    "evaluate must be finite where value was finite",
                ));
            }
            next
        }
        (None, None) => {
            record.step_norm = 0.0;
            record.step_length = 0.0;
            None
        }
    };
    record.seconds = t0.elapsed().as_secs_f64();
    Ok((next, record))
}

/// The concrete solver of a step: the option, or the cheaper by estimate.
fn choose_solver<B: Backend>(prob: &Problem<'_, '_, B>, expected_iters: usize) -> Solver {
    match prob.opts.solver {
        Solver::Auto => {
            let p = prob.s.dim() as f64;
            let c = prob.objective.cost();
            let dense = c.dense_assembly + p * p * p / 3.0 + 2.0 * p * p;
            let iters = expected_iters.min(prob.s.dim()).max(1) as f64;
            // Each PCG iteration: an HVP, the penalty gemv, ~10 vector ops.
            let pcg = iters * (c.hvp + 2.0 * p * p + 10.0 * p);
            if dense <= pcg {
                Solver::Dense
            } else {
                Solver::Pcg
            }
        }
        s => s,
    }
}

/// A Newton direction and how it was found.
struct Step {
    delta: Vec<f64>,
    pcg_iterations: usize,
    pcg_host_reads: usize,
    pcg_converged: Option<bool>,
    ridge: f64,
    ridge_retries: usize,
}

/// Outcome of one solve attempt at a fixed ridge.
enum Attempt {
    Solved(Step),
    /// Not positive definite, after this many PCG host reads.
    NotPositiveDefinite(usize),
}

/// Solve `(H + S + ridge I) delta = -grad`, growing the ridge until the
/// system is positive definite and delta is a descent direction.
fn solve_step<B: Backend>(prob: &Problem<'_, '_, B>, cur: &Point<'_, B>, solver: Solver, rtol: f64) -> Result<Step> {
    let (dmin, dmax) = diagonal_range(prob, cur)?;
    let scale = if dmax > 0.0 { dmax } else { 1.0 };
    let first = prob.opts.ridge_start * scale;
    // The Jacobi preconditioner needs a positive diagonal: start past it.
    let mut ridge = if dmin > 0.0 { 0.0 } else { first - dmin };
    let mut reads = 0;
    for retries in 0..=prob.opts.max_ridge_tries {
        let op = Penalised::new(prob.backend, cur.hessian.as_ref(), &prob.s, ridge)?;
        let attempt = match solver {
            Solver::Pcg => pcg_step(prob, &op, &cur.grad, rtol)?,
            _ => dense_step(&op, &cur.grad)?,
        };
        match attempt {
            Attempt::Solved(mut step) => {
                reads += step.pcg_host_reads;
                if dot(&step.delta, &cur.grad) < 0.0 {
                    step.ridge = ridge;
                    step.ridge_retries = retries;
                    step.pcg_host_reads = reads;
                    return Ok(step);
                }
            }
            Attempt::NotPositiveDefinite(r) => reads += r,
        }
        ridge = if ridge == 0.0 {
            first
        } else {
            ridge * prob.opts.ridge_growth
        };
    }
    Err(SolverError::invalid(
        "hessian",
        format!("ridge {ridge:e}"),
        "H + S + ridge I stayed indefinite through max_ridge_tries ridges",
    ))
}

/// min and max of diag(H + S), read back once per step.
fn diagonal_range<B: Backend>(prob: &Problem<'_, '_, B>, cur: &Point<'_, B>) -> Result<(f64, f64)> {
    let op = Penalised::new(prob.backend, cur.hessian.as_ref(), &prob.s, 0.0)?;
    let mut d = prob.backend.zeros(op.dim())?;
    op.diagonal(&mut d)?;
    let d = prob.backend.download(&d)?;
    if let Some(i) = d.iter().position(|v| !v.is_finite()) {
        return Err(SolverError::invalid(
            format!("hessian diagonal[{i}]"),
            d[i],
            "must be finite",
        ));
    }
    let dmin = d.iter().copied().fold(f64::INFINITY, f64::min);
    Ok((dmin, inf_norm(&d)))
}

fn dense_step<B: Backend>(op: &Penalised<'_, B>, grad: &[f64]) -> Result<Attempt> {
    let a = op.to_dense()?;
    let chol = match Cholesky::factor(op.dim(), &a) {
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
        ridge: 0.0,
        ridge_retries: 0,
    }))
}

fn pcg_step<B: Backend>(prob: &Problem<'_, '_, B>, op: &Penalised<'_, B>, grad: &[f64], rtol: f64) -> Result<Attempt> {
    let be = prob.backend;
    let mut d = be.zeros(op.dim())?;
    op.diagonal(&mut d)?;
    let Ok(jacobi) = Jacobi::new(be, &d, None, 0.0) else {
        // A diagonal entry is not positive: H + S + ridge I is not positive definite.
        return Ok(Attempt::NotPositiveDefinite(0));
    };
    let rhs: Vec<f64> = grad.iter().map(|g| -g).collect();
    let b = be.upload(&rhs)?;
    let opts = PcgOptions {
        rtol,
        ..prob.opts.pcg.clone()
    };
    let sol = cg(be, op, &jacobi, &b, None, &opts)?;
    match sol.info.stop_reason {
        StopReason::Converged | StopReason::MaxIter => {}
        StopReason::Breakdown {
            quantity: BreakdownQuantity::PAp,
            ..
        }
        | StopReason::BadPreconditioner { .. } => return Ok(Attempt::NotPositiveDefinite(sol.info.host_reads)),
        StopReason::Breakdown { quantity, value } => {
            return Err(SolverError::invalid(
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
        ridge: 0.0,
        ridge_retries: 0,
    }))
}

/// The outcome of a backtracking line search.
struct Search<'o, B: Backend> {
    beta: Option<Vec<f64>>,
    /// The accepted trial's full evaluation, when trials were full.
    point: Option<Point<'o, B>>,
    t: f64,
    halvings: usize,
    non_finite: usize,
    evaluations: usize,
}

/// Halve t from 1 until `f(beta + t delta) <= f + c t g^T delta`; a trial
/// whose value (or, for full trials, gradient) is not finite is halved like
/// any other failure.
fn line_search<'o, B: Backend>(prob: &Problem<'_, 'o, B>, cur: &Point<'o, B>, delta: &[f64]) -> Result<Search<'o, B>> {
    let slope = dot(&cur.grad, delta);
    let full = !prob.objective.cheap_value();
    let mut s = Search {
        beta: None,
        point: None,
        t: (prob.opts.max_step / inf_norm(delta)).min(1.0),
        halvings: 0,
        non_finite: 0,
        evaluations: 0,
    };
    loop {
        let trial: Vec<f64> = cur.beta.iter().zip(delta).map(|(b, d)| b + s.t * d).collect();
        s.evaluations += 1;
        let (value, point) = if full {
            let point = prob.point(trial.clone())?;
            (point.as_ref().map(|p| p.value), point)
        } else {
            (prob.value(&trial)?, None)
        };
        match value {
            // The slack lets a step through whose decrease f cannot resolve.
            Some(f) if f <= cur.value + prob.opts.armijo * s.t * slope + resolution(cur.value) => {
                s.beta = Some(trial);
                s.point = point;
                return Ok(s);
            }
            Some(_) => {}
            None => s.non_finite += 1,
        }
        if s.halvings == prob.opts.max_halvings {
            return Ok(s);
        }
        s.halvings += 1;
        s.t *= 0.5;
    }
}
