//! Smoothing-parameter selection by the Laplace-approximate marginal
//! likelihood (LAML/REML), over `rho = ln lambda` per penalty block:
//!
//! ```text
//! V(rho) = f(beta_hat) + log|H + S_lambda| / 2 - log|S_lambda|_+ / 2
//! dV/drho_k = lambda_k beta_hat^T S_k beta_hat / 2
//!           + tr((H + S)^{-1} (lambda_k S_k + dH/drho_k)) / 2 - dim_k / 2
//! ```
//!
//! with `dH/drho_k` the derivative of H along
//! `d beta_hat / d rho_k = -(H + S)^{-1} lambda_k S_k beta_hat`
//! ([`Objective::hessian_derivative`]). `beta_hat` comes from [`newton`]; the
//! log-determinant and traces from the exact dense path ([`PenalisedFactor`]).
//! The outer minimiser is BFGS with a capped, bounded step and Armijo
//! halving; each inner Newton solve warm-starts from the last `beta_hat`.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::backend::Backend;
use crate::logdet::PenalisedFactor;
use crate::newton::{newton_from, Evaluation, NewtonOptions, NewtonReport, Objective};
use crate::operator::expect_len;
use crate::penalty::{Penalised, Penalty, PenaltyMatrix};
use crate::{Result, SolverError};

/// Options of [`reml`] and [`laml`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RemlOptions {
    /// Inner Newton options (default: [`NewtonOptions::default`] with
    /// `grad_tol` 1e-10, since the gradient formula assumes an exact optimum).
    pub newton: NewtonOptions,
    /// Outer iteration cap (default 50).
    pub max_iter: usize,
    /// Converged when the projected `||dV/drho||_inf <= grad_tol (|V| + 1)`
    /// (default 1e-7).
    pub grad_tol: f64,
    /// Converged when an accepted step has `||delta rho||_inf <= step_tol`
    /// (default 1e-6).
    pub step_tol: f64,
    /// Bounds on every rho (default -20, 20): lambda beyond them changes the
    /// fit by less than the inner tolerance.
    pub rho_min: f64,
    /// Upper bound on every rho (default 20).
    pub rho_max: f64,
    /// Largest `||delta rho||_inf` of one step (default 5).
    pub max_step: f64,
    /// Armijo constant of the outer line search (default 1e-4).
    pub armijo: f64,
    /// Most halvings per outer step (default 20).
    pub max_halvings: usize,
    /// Relative step of the finite-difference dH/drho (default 1e-4).
    pub fd_step: f64,
}

impl Default for RemlOptions {
    fn default() -> Self {
        Self {
            newton: NewtonOptions {
                grad_tol: 1e-10,
                ..NewtonOptions::default()
            },
            max_iter: 50,
            grad_tol: 1e-7,
            step_tol: 1e-6,
            rho_min: -20.0,
            rho_max: 20.0,
            max_step: 5.0,
            armijo: 1e-4,
            max_halvings: 20,
            fd_step: 1e-4,
        }
    }
}

impl RemlOptions {
    /// Check every field's range (the inner options included).
    pub fn validate(&self) -> Result<()> {
        self.newton.validate()?;
        let pos = |field: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(SolverError::invalid(field, v, "must be finite and > 0"))
            }
        };
        pos("grad_tol", self.grad_tol)?;
        pos("step_tol", self.step_tol)?;
        pos("max_step", self.max_step)?;
        pos("fd_step", self.fd_step)?;
        if !(self.rho_min.is_finite() && self.rho_max.is_finite() && self.rho_min < self.rho_max) {
            return Err(SolverError::invalid(
                "rho_min",
                self.rho_min,
                format!("need finite rho_min < rho_max = {}", self.rho_max),
            ));
        }
        if !(self.armijo > 0.0 && self.armijo < 0.5) {
            return Err(SolverError::invalid("armijo", self.armijo, "must lie in (0, 0.5)"));
        }
        Ok(())
    }
}

/// V(rho) and its gradient at one rho, with the parts that make them up.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LamlEvaluation {
    /// rho = ln lambda.
    pub rho: Vec<f64>,
    /// V(rho).
    pub value: f64,
    /// dV/drho.
    pub gradient: Vec<f64>,
    /// beta_hat(rho).
    pub beta: Vec<f64>,
    /// Penalised objective f(beta_hat).
    pub objective: f64,
    /// log|H + S_lambda|.
    pub logdet_penalised_hessian: f64,
    /// log|S_lambda|_+.
    pub log_pseudo_det_penalty: f64,
    /// tr((H + S)^{-1} S_k) per block (unscaled S_k).
    pub penalty_traces: Vec<f64>,
    /// The inner Newton solve.
    pub newton: NewtonReport,
}

/// V(rho) and dV/drho, solving for beta_hat from `beta0` (a warm start).
/// An inner solve that does not converge is an error: the gradient formula
/// holds only at the optimum.
pub fn laml<B: Backend>(
    backend: &B,
    objective: &dyn Objective<B>,
    penalty: &Penalty,
    rho: &[f64],
    beta0: &[f64],
    opts: &RemlOptions,
) -> Result<LamlEvaluation> {
    opts.validate()?;
    match laml_at(backend, objective, penalty, rho, beta0, None, opts)? {
        Ok((e, _)) => Ok(e),
        Err(report) => Err(not_converged(&report)),
    }
}

fn not_converged(report: &NewtonReport) -> SolverError {
    SolverError::invalid(
        "inner Newton",
        format!("{:?}", report.termination),
        "must converge for V(rho) and its gradient",
    )
}

/// An evaluation of V(rho), with the objective's evaluation at its beta_hat
/// (where the next inner solve starts), or the report of an inner solve
/// that did not converge.
type LamlResult<'o, B> = std::result::Result<(LamlEvaluation, Evaluation<'o, B>), NewtonReport>;

/// [`laml`] without option validation, its inner solve from `beta0` with
/// the objective's evaluation there when `start` has it; an inner solve
/// that does not converge is returned as its report.
fn laml_at<'o, B: Backend>(
    backend: &B,
    objective: &'o dyn Objective<B>,
    penalty: &Penalty,
    rho: &[f64],
    beta0: &[f64],
    start: Option<Evaluation<'o, B>>,
    opts: &RemlOptions,
) -> Result<LamlResult<'o, B>> {
    expect_len("rho", rho.len(), penalty.n_blocks())?;
    let lambda: Vec<f64> = rho.iter().map(|r| r.exp()).collect();
    penalty.check_lambda(&lambda)?;
    let fit = newton_from(backend, objective, penalty, &lambda, beta0, start, &opts.newton)?;
    if !fit.report.converged {
        return Ok(Err(fit.report));
    }
    let (logdet, traces, gradient) = {
        let s = PenaltyMatrix::from_penalty(backend, penalty, &lambda)?;
        let a = Penalised::new(backend, fit.hessian.as_ref(), &s, 0.0)?;
        let factor = PenalisedFactor::from_operator(&a)?;
        let traces = factor.penalty_traces(penalty)?;
        let gradient = gradient(objective, penalty, &lambda, &fit.beta, &factor, &traces, opts)?;
        (factor.logdet(), traces, gradient)
    };
    let log_pdet = penalty.log_pseudo_det(&lambda)?;
    let laml = LamlEvaluation {
        rho: rho.to_vec(),
        value: fit.objective + 0.5 * logdet - 0.5 * log_pdet,
        gradient,
        objective: fit.objective,
        logdet_penalised_hessian: logdet,
        log_pseudo_det_penalty: log_pdet,
        penalty_traces: traces,
        beta: fit.beta.clone(),
        newton: fit.report.clone(),
    };
    Ok(Ok((laml, fit.into_evaluation())))
}

/// dV/drho_k (see the module docs).
fn gradient<B: Backend>(
    objective: &dyn Objective<B>,
    penalty: &Penalty,
    lambda: &[f64],
    beta: &[f64],
    factor: &PenalisedFactor,
    traces: &[f64],
    opts: &RemlOptions,
) -> Result<Vec<f64>> {
    let p = beta.len();
    let inv = factor.inverse()?;
    let mut out = Vec::with_capacity(lambda.len());
    for (k, b) in penalty.blocks().iter().enumerate() {
        // u = lambda_k S_k beta, embedded in a p-vector; d beta/d rho_k = -A^{-1} u.
        let mut u = vec![0.0; p];
        let bk = &beta[b.range()];
        for i in 0..b.dim {
            let row = &b.s[i * b.dim..(i + 1) * b.dim];
            u[b.start + i] = lambda[k] * row.iter().zip(bk).map(|(s, x)| s * x).sum::<f64>();
        }
        let dbeta: Vec<f64> = factor.solve(&u, 1)?.iter().map(|v| -v).collect();
        let dh = objective.hessian_derivative(beta, &dbeta, opts.fd_step)?;
        expect_len("hessian_derivative", dh.len(), p * p)?;
        let tr_dh: f64 = (0..p)
            .map(|i| (0..p).map(|j| inv[i * p + j] * dh[j * p + i]).sum::<f64>())
            .sum();
        let quad = lambda[k] * b.quadratic(beta);
        out.push(0.5 * (quad + lambda[k] * traces[k] + tr_dh - b.dim as f64));
    }
    Ok(out)
}

/// Why the outer loop stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RemlTermination {
    /// The projected gradient met `grad_tol`.
    Gradient,
    /// An accepted step met `step_tol`.
    Step,
    /// `max_iter` outer iterations ran.
    MaxIterations,
    /// `max_halvings` halvings found no acceptable rho.
    LineSearchFailed,
}

/// One outer iteration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RemlIteration {
    /// rho at the start of the iteration.
    pub rho: Vec<f64>,
    /// V(rho).
    pub value: f64,
    /// dV/drho.
    pub gradient: Vec<f64>,
    /// Accepted step length (0 if none).
    pub step_length: f64,
    /// Halvings of the outer step.
    pub halvings: usize,
    /// Inner Newton iterations summed over this iteration's trials.
    pub newton_iterations: usize,
    /// Wall time in seconds.
    pub seconds: f64,
}

/// What an outer REML solve did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RemlReport {
    /// One record per outer iteration.
    pub iterations: Vec<RemlIteration>,
    /// Why it stopped.
    pub termination: RemlTermination,
    /// Whether a convergence test was met.
    pub converged: bool,
    /// Wall time in seconds.
    pub seconds: f64,
}

/// The result of [`reml`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RemlFit {
    /// The final LAML evaluation (rho, V, gradient, beta_hat, ...).
    pub laml: LamlEvaluation,
    /// lambda = exp(rho).
    pub lambda: Vec<f64>,
    /// What the outer loop did.
    pub report: RemlReport,
}

/// Minimise V(rho) from `rho0` (clamped into the bounds), starting the first
/// inner solve at `beta0`.
pub fn reml<B: Backend>(
    backend: &B,
    objective: &dyn Objective<B>,
    penalty: &Penalty,
    rho0: &[f64],
    beta0: &[f64],
    opts: &RemlOptions,
) -> Result<RemlFit> {
    opts.validate()?;
    expect_len("rho0", rho0.len(), penalty.n_blocks())?;
    if let Some(k) = rho0.iter().position(|r| !r.is_finite()) {
        return Err(SolverError::invalid(format!("rho0[{k}]"), rho0[k], "must be finite"));
    }
    let start = Instant::now();
    // Each outer trial's inner solve starts at the current beta_hat, whose
    // evaluation the last accepted solve hands over (`at_beta`): one
    // evaluation fewer a trial.
    let eval = |rho: &[f64], beta: &[f64], at_beta| laml_at(backend, objective, penalty, rho, beta, at_beta, opts);
    let (mut cur, at_beta) = laml_at(backend, objective, penalty, &clamp(rho0, opts), beta0, None, opts)?
        .map_err(|report| not_converged(&report))?;
    let mut at_beta = Some(at_beta);
    let mut bfgs = Bfgs::new(rho0.len());
    let mut iterations = Vec::new();
    let termination = loop {
        if projected_norm(&cur, opts) <= opts.grad_tol * (cur.value.abs() + 1.0) {
            break RemlTermination::Gradient;
        }
        if iterations.len() == opts.max_iter {
            break RemlTermination::MaxIterations;
        }
        let t0 = Instant::now();
        let dir = bfgs.direction(&cur, opts);
        let (next, halvings, newton_iterations) = outer_line_search(&cur, &dir, opts, at_beta.take(), &eval)?;
        let mut record = RemlIteration {
            rho: cur.rho.clone(),
            value: cur.value,
            gradient: cur.gradient.clone(),
            step_length: 0.0,
            halvings,
            newton_iterations,
            seconds: 0.0,
        };
        let Some((t, (next, next_at_beta))) = next else {
            record.seconds = t0.elapsed().as_secs_f64();
            iterations.push(record);
            break RemlTermination::LineSearchFailed;
        };
        let step: Vec<f64> = next.rho.iter().zip(&cur.rho).map(|(a, b)| a - b).collect();
        bfgs.update(&step, &next.gradient, &cur.gradient);
        record.step_length = t;
        record.seconds = t0.elapsed().as_secs_f64();
        iterations.push(record);
        cur = next;
        at_beta = Some(next_at_beta);
        if step.iter().all(|s| s.abs() <= opts.step_tol) {
            break RemlTermination::Step;
        }
    };
    let report = RemlReport {
        iterations,
        converged: matches!(termination, RemlTermination::Gradient | RemlTermination::Step),
        termination,
        seconds: start.elapsed().as_secs_f64(),
    };
    Ok(RemlFit {
        lambda: cur.rho.iter().map(|r| r.exp()).collect(),
        laml: cur,
        report,
    })
}

fn clamp(rho: &[f64], opts: &RemlOptions) -> Vec<f64> {
    rho.iter().map(|r| r.clamp(opts.rho_min, opts.rho_max)).collect()
}

/// Whether component k sits on a bound with the gradient pushing outward
/// (so it cannot move and does not count against convergence).
fn pinned(rho: f64, g: f64, opts: &RemlOptions) -> bool {
    (rho <= opts.rho_min && g > 0.0) || (rho >= opts.rho_max && g < 0.0)
}

fn projected_norm(e: &LamlEvaluation, opts: &RemlOptions) -> f64 {
    e.rho
        .iter()
        .zip(&e.gradient)
        .filter(|(r, g)| !pinned(**r, **g, opts))
        .fold(0.0f64, |m, (_, g)| m.max(g.abs()))
}

/// Halve t from 1 along `dir` (projected onto the bounds) until
/// `V(rho + t dir) <= V + c g^T (rho_t - rho)`. A trial whose inner solve
/// fails counts as a failed trial. The first trial's inner solve takes
/// `at_beta`, the objective's evaluation at `cur.beta`. Returns the accepted
/// (t, evaluation), the halvings and the inner Newton iterations spent.
#[allow(clippy::type_complexity)]
fn outer_line_search<'o, B: Backend>(
    cur: &LamlEvaluation,
    dir: &[f64],
    opts: &RemlOptions,
    mut at_beta: Option<Evaluation<'o, B>>,
    eval: &dyn Fn(&[f64], &[f64], Option<Evaluation<'o, B>>) -> Result<LamlResult<'o, B>>,
) -> Result<(Option<(f64, (LamlEvaluation, Evaluation<'o, B>))>, usize, usize)> {
    let (mut t, mut newton_iters) = (1.0, 0);
    for halvings in 0..=opts.max_halvings {
        let trial: Vec<f64> = cur.rho.iter().zip(dir).map(|(r, d)| r + t * d).collect();
        let trial = clamp(&trial, opts);
        let decrease: f64 = trial
            .iter()
            .zip(&cur.rho)
            .zip(&cur.gradient)
            .map(|((a, b), g)| g * (a - b))
            .sum();
        match eval(&trial, &cur.beta, at_beta.take())? {
            Ok((e, next_at_beta)) => {
                newton_iters += e.newton.iterations.len();
                if e.value <= cur.value + opts.armijo * decrease {
                    return Ok((Some((t, (e, next_at_beta))), halvings, newton_iters));
                }
            }
            // An inner solve that cannot converge at this rho: back off.
            Err(report) => newton_iters += report.iterations.len(),
        }
        t *= 0.5;
    }
    Ok((None, opts.max_halvings, newton_iters))
}

/// The BFGS inverse-Hessian approximation on rho.
struct Bfgs {
    m: usize,
    h: Vec<f64>,
    scaled: bool,
}

impl Bfgs {
    fn new(m: usize) -> Self {
        let h = (0..m * m).map(|i| f64::from(i / m == i % m)).collect();
        Self { m, h, scaled: false }
    }

    /// -H g with pinned components frozen, capped at `max_step`; steepest
    /// descent if that is not a descent direction.
    fn direction(&mut self, cur: &LamlEvaluation, opts: &RemlOptions) -> Vec<f64> {
        let m = self.m;
        let free: Vec<bool> = (0..m).map(|k| !pinned(cur.rho[k], cur.gradient[k], opts)).collect();
        let g: Vec<f64> = (0..m).map(|k| if free[k] { cur.gradient[k] } else { 0.0 }).collect();
        let mut d: Vec<f64> = (0..m)
            .map(|i| -(0..m).map(|j| self.h[i * m + j] * g[j]).sum::<f64>())
            .collect();
        for k in (0..m).filter(|&k| !free[k]) {
            d[k] = 0.0;
        }
        if d.iter().zip(&g).map(|(a, b)| a * b).sum::<f64>() >= 0.0 {
            *self = Self::new(m);
            d = g.iter().map(|v| -v).collect();
        }
        let norm = d.iter().fold(0.0f64, |a, v| a.max(v.abs()));
        if norm > opts.max_step {
            d.iter_mut().for_each(|v| *v *= opts.max_step / norm);
        }
        d
    }

    /// The standard inverse update, skipped without positive curvature.
    fn update(&mut self, s: &[f64], g_new: &[f64], g_old: &[f64]) {
        let m = self.m;
        let y: Vec<f64> = g_new.iter().zip(g_old).map(|(a, b)| a - b).collect();
        let sy: f64 = s.iter().zip(&y).map(|(a, b)| a * b).sum();
        let yy: f64 = y.iter().map(|v| v * v).sum();
        let ss: f64 = s.iter().map(|v| v * v).sum();
        // NaN curvature also skips the update.
        if sy.is_nan() || sy <= 1e-12 * (yy * ss).sqrt() {
            return;
        }
        if !self.scaled {
            // Scale the identity to the observed curvature before the first update.
            self.h.iter_mut().for_each(|v| *v *= sy / yy);
            self.scaled = true;
        }
        let hy: Vec<f64> = (0..m).map(|i| (0..m).map(|j| self.h[i * m + j] * y[j]).sum()).collect();
        let yhy: f64 = y.iter().zip(&hy).map(|(a, b)| a * b).sum();
        for i in 0..m {
            for j in 0..m {
                self.h[i * m + j] += (sy + yhy) * s[i] * s[j] / (sy * sy) - (hy[i] * s[j] + s[i] * hy[j]) / sy;
            }
        }
    }
}
