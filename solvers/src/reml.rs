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
//! ([`Objective::hessian_derivative`], one evaluation a block, at a step of
//! `fd_step` standard errors). `beta_hat` comes from [`newton_from`]; the
//! log-determinant and traces from the exact dense path ([`PenalisedFactor`]).
//!
//! The outer minimiser starts with Fellner-Schall steps
//! ([`fellner_schall_step`]) while they are long: far from the optimum V
//! grows like e^rho and Newton would gain one unit of rho a step, while the
//! multiplicative update lands near the optimum in one or two and needs no
//! dH/drho. Then Newton on rho with the LAML Hessian in which H is held
//! fixed (exact for a quadratic objective; the neglected terms are the third
//! derivatives of the likelihood) plus a secant correction, its eigenvalues
//! made positive, the step capped and projected onto the bounds, and Armijo
//! backtracking. A smooth whose V decays geometrically toward lambda =
//! infinity (or whose edf is already gone) jumps to its bound. Each trial's
//! inner solve starts at the current `beta_hat` with the evaluation kept
//! from there (so no beta is evaluated twice), a long trial's is cut off
//! after a few Newton steps, and the gradient is computed for accepted
//! trials only.
//!
//! Start and bounds are relative to the data: `rho_ref` puts each penalty's
//! mean diagonal at the Hessian's on its block (mgcv's `initial.sp`), and
//! rho stays within `rho_ref +- rho_range`. Convergence is an absolute test
//! on the projected gradient: dV/drho is a sum of effective degrees of
//! freedom, of order one at any n, so `grad_tol` means the same at every n
//! and under a shifted objective. A block at its upper bound with V still
//! falling is a smooth the data cannot support: it is accepted there (its
//! component is pinned), as mgcv accepts lambda -> infinity.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::dense::{clip_eigenvalues, symmetric_eigen};
use crate::logdet::PenalisedFactor;
use crate::newton::{newton_from, resolution, Evaluation, FitEvent, NewtonOptions, NewtonReport, Objective};
use crate::operator::expect_len;
use crate::pcg_kernels::PcgKernels;
use crate::penalty::{Penalty, PenaltyBlock};
use crate::{Result, SolverError};

/// Options of [`reml`] (the fit) and [`evaluate_laml`] (V at one rho).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RemlOptions {
    /// Inner Newton options (default: [`NewtonOptions::default`] with
    /// `decrement_tol` 1e-10, since the gradient formula assumes an exact
    /// optimum: beta_hat within 1e-5 standard errors).
    pub newton: NewtonOptions,
    /// Outer iteration cap (default 30).
    pub max_iter: usize,
    /// Converged when the projected `||dV/drho||_inf <= grad_tol`, an
    /// absolute tolerance in units of effective degrees of freedom
    /// (default 1e-4).
    pub grad_tol: f64,
    /// Converged when the outer Newton decrement `g^T B^{-1} g` (B the
    /// outer model Hessian, on the components free to move) is at most this
    /// (default 1e-3): rho is then within about 3% of its own standard
    /// error (`B^{-1/2}`, the curvature of V) from the optimum and V within
    /// 5e-4 of its minimum, whatever n or V's offset.
    pub decrement_tol: f64,
    /// Converged when a full outer Newton step has `||delta rho||_inf <=
    /// step_tol` (default 1e-4).
    pub step_tol: f64,
    /// Converged when V fell by at most this over the last
    /// [`STALL_STEPS`] outer Newton steps (default 1e-3; mgcv's score-change
    /// test, but absolute: V is a log-likelihood, and a change of 1e-3 in it
    /// is far below its sampling noise, which is of order 1 at every n).
    /// This is the stop where V is kinked, as it is where many tied rows
    /// cross a spline knot of the link together: the gradient jumps across
    /// the kink, so neither it nor the Newton decrement can become small,
    /// while V has stopped falling.
    #[serde(default = "default_value_tol")]
    pub value_tol: f64,
    /// Half-width of the range of every rho around its reference start
    /// `rho_ref` (default 15: lambda within a factor e^15 = 3.3e6 of it).
    pub rho_range: f64,
    /// Largest `||delta rho||_inf` of one step (default 5).
    pub max_step: f64,
    /// Armijo constant of the outer line search (default 1e-4).
    pub armijo: f64,
    /// Most halvings per outer step (default 12).
    pub max_halvings: usize,
    /// Step of the forward-difference dH/drho, in standard errors: the
    /// norm of the step in `H + S` (default 1e-4). The forward difference's
    /// error is proportional to the step: on 800 BMS rows a step of 1e-2
    /// moved dV/drho by 3e-3, 1e-4 by 3e-5 (and the error shrinks with the
    /// standard errors as n grows), while the central difference at 1e-4
    /// showed no rounding noise.
    pub fd_step: f64,
}

impl Default for RemlOptions {
    fn default() -> Self {
        Self {
            newton: NewtonOptions {
                decrement_tol: 1e-10,
                ..NewtonOptions::default()
            },
            max_iter: 30,
            grad_tol: 1e-4,
            decrement_tol: 1e-3,
            step_tol: 1e-4,
            value_tol: default_value_tol(),
            rho_range: 15.0,
            max_step: 5.0,
            armijo: 1e-4,
            max_halvings: 12,
            fd_step: 1e-4,
        }
    }
}

fn default_value_tol() -> f64 {
    1e-3
}

/// How many consecutive outer Newton steps [`RemlOptions::value_tol`]
/// looks back over: one step that barely moves V is no stall (a step cut
/// short by the line search is one), three in a row are.
pub const STALL_STEPS: usize = 3;

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
        pos("decrement_tol", self.decrement_tol)?;
        pos("step_tol", self.step_tol)?;
        pos("value_tol", self.value_tol)?;
        pos("rho_range", self.rho_range)?;
        pos("max_step", self.max_step)?;
        pos("fd_step", self.fd_step)?;
        if !(self.armijo > 0.0 && self.armijo < 0.5) {
            return Err(SolverError::invalid("armijo", self.armijo, "must lie in (0, 0.5)"));
        }
        if self.max_iter == 0 {
            return Err(SolverError::invalid("max_iter", 0, "must be >= 1"));
        }
        Ok(())
    }
}

/// V(rho) and its derivatives at one rho, with the parts that make them up.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LamlEvaluation {
    /// rho = ln lambda.
    pub rho: Vec<f64>,
    /// V(rho).
    pub value: f64,
    /// dV/drho.
    pub gradient: Vec<f64>,
    /// d2V/drho2 with H held fixed (row-major m x m; see the module docs).
    pub outer_hessian: Vec<f64>,
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
    /// The unpenalised Hessian H at beta_hat, dense row-major p x p.
    #[serde(skip)]
    pub hessian: Vec<f64>,
    /// The inner Newton solve.
    pub newton: NewtonReport,
}

/// V(rho) and dV/drho, solving for beta_hat from `beta0` (a warm start).
/// An inner solve that does not converge is an error: the gradient formula
/// holds only at the optimum.
pub fn evaluate_laml<B: PcgKernels>(
    backend: &B,
    objective: &dyn Objective<B>,
    penalty: &Penalty,
    rho: &[f64],
    beta0: &[f64],
    opts: &RemlOptions,
) -> Result<LamlEvaluation> {
    opts.validate()?;
    let trial = laml_value(backend, objective, penalty, rho, beta0, None, opts)?;
    if !trial.laml.newton.converged {
        return Err(not_converged(&trial.laml.newton));
    }
    let (laml, _) = with_gradient(objective, penalty, trial, opts)?;
    Ok(laml)
}

fn not_converged(report: &NewtonReport) -> SolverError {
    SolverError::NoConvergence {
        solver: "inner Newton (V(rho) and its gradient need its optimum)".into(),
        iterations: report.iterations.len(),
        termination: format!("{:?}", report.termination),
        history: report.iterations.iter().map(|it| it.grad_norm).collect(),
    }
}

/// V at one rho with what its gradient needs: the factor of H + S and the
/// objective's evaluation at beta_hat (where the next inner solve starts).
struct Trial<'o, B: PcgKernels> {
    laml: LamlEvaluation,
    factor: PenalisedFactor,
    lambda: Vec<f64>,
    at_beta: Evaluation<'o, B>,
}

/// V(rho) (no gradient), its inner solve from `beta0` with the objective's
/// evaluation there when `start` has it. An inner solve that does not
/// converge still gives V where H + S is positive definite at its end
/// (`laml.newton.converged` says which).
fn laml_value<'o, B: PcgKernels>(
    backend: &B,
    objective: &'o dyn Objective<B>,
    penalty: &Penalty,
    rho: &[f64],
    beta0: &[f64],
    start: Option<Evaluation<'o, B>>,
    opts: &RemlOptions,
) -> Result<Trial<'o, B>> {
    expect_len("rho", rho.len(), penalty.n_blocks())?;
    let lambda: Vec<f64> = rho.iter().map(|r| r.exp()).collect();
    penalty.check_lambda(&lambda)?;
    let fit = newton_from(backend, objective, penalty, &lambda, beta0, start, &opts.newton)?;
    let hessian = fit.hessian.to_dense()?;
    expect_len("dense Hessian", hessian.len(), fit.beta.len() * fit.beta.len())?;
    let s = penalty.dense(&lambda)?;
    let a: Vec<f64> = hessian.iter().zip(&s).map(|(h, s)| h + s).collect();
    let factor = PenalisedFactor::on(backend, fit.beta.len(), &a)?;
    let traces = factor.penalty_traces(penalty)?;
    let log_pdet = penalty.log_pseudo_det(&lambda)?;
    let logdet = factor.logdet();
    let laml = LamlEvaluation {
        rho: rho.to_vec(),
        value: fit.objective + 0.5 * logdet - 0.5 * log_pdet,
        gradient: Vec::new(),
        outer_hessian: Vec::new(),
        objective: fit.objective,
        logdet_penalised_hessian: logdet,
        log_pseudo_det_penalty: log_pdet,
        penalty_traces: traces,
        beta: fit.beta.clone(),
        hessian,
        newton: fit.report.clone(),
    };
    Ok(Trial {
        laml,
        factor,
        lambda,
        at_beta: fit.into_evaluation(),
    })
}

/// A trial completed with dV/drho and the fixed-H outer Hessian; returns the
/// evaluation at beta_hat for the next inner solve.
fn with_gradient<'o, B: PcgKernels>(
    objective: &'o dyn Objective<B>,
    penalty: &Penalty,
    trial: Trial<'o, B>,
    opts: &RemlOptions,
) -> Result<(LamlEvaluation, Evaluation<'o, B>)> {
    let Trial {
        mut laml,
        factor,
        lambda,
        at_beta,
    } = trial;
    let parts = Derivatives::new(penalty, &lambda, &laml.beta, &factor)?;
    let mut gradient = Vec::with_capacity(lambda.len());
    for (k, &rank) in penalty.ranks().iter().enumerate() {
        let tr_dh = parts.trace_dh(objective, &laml, &factor, k, opts.fd_step)?;
        let quad = parts.quad[k];
        gradient.push(0.5 * (quad + lambda[k] * laml.penalty_traces[k] + tr_dh - rank as f64));
    }
    laml.outer_hessian = parts.outer_hessian(penalty, &lambda, &laml.penalty_traces, &factor)?;
    laml.gradient = gradient;
    Ok((laml, at_beta))
}

/// The pieces shared by the gradient and the outer Hessian:
/// `u_k = lambda_k S_k beta` and `d_k = d beta_hat / d rho_k = -A^{-1} u_k`.
struct Derivatives {
    u: Vec<Vec<f64>>,
    d: Vec<Vec<f64>>,
    /// `beta^T u_k`.
    quad: Vec<f64>,
}

impl Derivatives {
    fn new(penalty: &Penalty, lambda: &[f64], beta: &[f64], factor: &PenalisedFactor) -> Result<Self> {
        let p = beta.len();
        let (mut u, mut d, mut quad) = (Vec::new(), Vec::new(), Vec::new());
        for (k, b) in penalty.blocks().iter().enumerate() {
            let uk = embedded_product(b, lambda[k], beta, p);
            let dk: Vec<f64> = factor.solve(&uk, 1)?.iter().map(|v| -v).collect();
            quad.push(dot(beta, &uk));
            u.push(uk);
            d.push(dk);
        }
        Ok(Self { u, d, quad })
    }

    /// `tr(A^{-1} dH/drho_k)`, dH along `d_k` at a step of `fd_step`
    /// standard errors (`||t d_k||_A = fd_step`).
    fn trace_dh<B: PcgKernels>(
        &self,
        objective: &dyn Objective<B>,
        laml: &LamlEvaluation,
        factor: &PenalisedFactor,
        k: usize,
        fd_step: f64,
    ) -> Result<f64> {
        let p = laml.beta.len();
        let norm_a = (-dot(&self.u[k], &self.d[k])).max(0.0).sqrt();
        if norm_a == 0.0 {
            return Ok(0.0);
        }
        let dh = objective.hessian_derivative(&laml.beta, &laml.hessian, &self.d[k], fd_step / norm_a)?;
        expect_len("hessian_derivative", dh.len(), p * p)?;
        let inv = factor.inverse()?;
        Ok((0..p)
            .map(|i| (0..p).map(|j| inv[i * p + j] * dh[j * p + i]).sum::<f64>())
            .sum())
    }

    /// d2V/drho_k drho_l with H fixed:
    /// `delta_kl (beta^T u_k + lambda_k tr(A^{-1} S_k)) / 2 + u_k^T d_l
    ///  - lambda_k lambda_l tr(A^{-1} S_l A^{-1} S_k) / 2`.
    fn outer_hessian(
        &self,
        penalty: &Penalty,
        lambda: &[f64],
        traces: &[f64],
        factor: &PenalisedFactor,
    ) -> Result<Vec<f64>> {
        let m = lambda.len();
        let p = factor.dim();
        let inv = factor.inverse()?;
        // M_k = A^{-1} S_k restricted to block k's columns (p x dim_k).
        let blocks = penalty.blocks();
        let ms: Vec<Vec<f64>> = blocks.iter().map(|b| inverse_times_block(inv, p, b)).collect();
        let mut h = vec![0.0; m * m];
        for k in 0..m {
            for l in 0..m {
                let (bk, bl) = (&blocks[k], &blocks[l]);
                let mut tr = 0.0;
                for i in bk.range() {
                    for j in bl.range() {
                        tr += ms[l][i * bl.dim + (j - bl.start)] * ms[k][j * bk.dim + (i - bk.start)];
                    }
                }
                let mut v = dot(&self.u[k], &self.d[l]) - 0.5 * lambda[k] * lambda[l] * tr;
                if k == l {
                    v += 0.5 * (self.quad[k] + lambda[k] * traces[k]);
                }
                h[k * m + l] = v;
            }
        }
        // Symmetric in exact arithmetic; make it so in floating point.
        for k in 0..m {
            for l in 0..k {
                let s = 0.5 * (h[k * m + l] + h[l * m + k]);
                h[k * m + l] = s;
                h[l * m + k] = s;
            }
        }
        Ok(h)
    }
}

/// `lambda S_k beta` embedded in a p-vector.
fn embedded_product(b: &PenaltyBlock, lambda: f64, beta: &[f64], p: usize) -> Vec<f64> {
    let mut u = vec![0.0; p];
    let bk = &beta[b.range()];
    for i in 0..b.dim {
        let row = &b.s[i * b.dim..(i + 1) * b.dim];
        u[b.start + i] = lambda * dot(row, bk);
    }
    u
}

/// `A^{-1}[:, block] S_k`, row-major p x dim.
fn inverse_times_block(inv: &[f64], p: usize, b: &PenaltyBlock) -> Vec<f64> {
    let mut out = vec![0.0; p * b.dim];
    for i in 0..p {
        for c in 0..b.dim {
            out[i * b.dim + c] = (0..b.dim).map(|t| inv[i * p + b.start + t] * b.s[t * b.dim + c]).sum();
        }
    }
    out
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

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

/// Why the outer loop stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RemlTermination {
    /// The projected gradient met `grad_tol`.
    Gradient,
    /// The outer Newton decrement met `decrement_tol`.
    Decrement,
    /// A full step met `step_tol`.
    Step,
    /// V fell by at most `value_tol` over the last [`STALL_STEPS`] outer
    /// Newton steps, with the gradient test unmet (see
    /// [`RemlOptions::value_tol`]).
    ValueChange,
    /// `max_iter` outer iterations ran.
    MaxIterations,
    /// V fell by more than 1 over the last [`STALL_STEPS`] Newton steps
    /// while rho moved by at most 0.01: it falls without bound toward a
    /// point where H + S turns singular (nearly separable labels, or the
    /// end of a branch of inner minima), where the LAML means nothing.
    /// Not converged; the check of the inner minimum from `beta0` ran first
    /// ([`RemlTermination::SeveralMinima`] if it found a lower one).
    Degenerate,
    /// The inner solve from `beta0` found a lower minimum of the penalised
    /// objective at this rho than the warm-started solves had followed
    /// ([`OuterStep::ColdStart`]): the penalised likelihood has several
    /// minima there, and V along the followed branch is not the LAML of the
    /// fit. The fit ends at the lower minimum, not converged.
    SeveralMinima,
    /// `max_halvings` halvings found no acceptable rho.
    LineSearchFailed,
    /// The inner Newton solve at the start did not converge.
    InnerNotConverged,
}

impl RemlTermination {
    /// Whether this stop means the fit converged.
    pub fn converged(self) -> bool {
        matches!(
            self,
            RemlTermination::Gradient
                | RemlTermination::Decrement
                | RemlTermination::Step
                | RemlTermination::ValueChange
        )
    }
}

/// How an outer iteration chose its step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OuterStep {
    /// A Fellner-Schall update from the start ([`fellner_schall_step`]).
    FellnerSchall,
    /// A vanished smooth's other side, probed ([`PROBE_DISTANCE`]).
    Probe,
    /// Newton on rho with a line search.
    Newton,
    /// The inner solve from `beta0` found a lower penalised objective at
    /// this rho than the warm-started one: the fit ends there
    /// ([`RemlTermination::SeveralMinima`]).
    ColdStart,
}

/// One outer iteration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RemlIteration {
    /// How the step was chosen.
    pub kind: OuterStep,
    /// rho at the start of the iteration.
    pub rho: Vec<f64>,
    /// V(rho).
    pub value: f64,
    /// dV/drho; for a Fellner-Schall step the same without the dH/drho
    /// terms (the update does not compute them).
    pub gradient: Vec<f64>,
    /// The outer Newton decrement `g^T B^{-1} g` at rho (0 for a
    /// Fellner-Schall or probe step).
    pub decrement: f64,
    /// Whether B was measured at rho by differences of the gradient
    /// (after a line search that halved its step repeatedly).
    pub hessian_measured: bool,
    /// Accepted step length (0 if none).
    pub step_length: f64,
    /// Halvings of the outer step.
    pub halvings: usize,
    /// Inner Newton iterations summed over this iteration's trials.
    pub newton_iterations: usize,
    /// Objective evaluations of this iteration's inner solves.
    pub newton_evaluations: usize,
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
    /// The projected `||dV/drho||_inf` at the final point (edf units; the
    /// quantity `grad_tol` bounds); `None` where no gradient was computed
    /// (the first inner solve failed).
    #[serde(default)]
    pub projected_gradient: Option<f64>,
    /// The reference start (see [`reference_rho`]).
    pub rho_ref: Vec<f64>,
    /// Lower bounds on rho (`rho_ref - rho_range`).
    pub rho_lower: Vec<f64>,
    /// Upper bounds on rho (`rho_ref + rho_range`).
    pub rho_upper: Vec<f64>,
    /// Objective evaluations: the start, every inner solve's and one per
    /// block for each gradient's dH/drho.
    pub evaluations: usize,
    /// Newton steps of the first inner solve (from `beta0`).
    pub start_newton_steps: usize,
    /// Inner solves from `beta0` run to check that the warm-started ones
    /// found the lowest minimum: where the loop would stop, and after an
    /// accepted line search of [`POOR_MODEL_HALVINGS`] halvings.
    #[serde(default)]
    pub mode_checks: usize,
    /// Wall time in seconds.
    pub seconds: f64,
}

impl RemlReport {
    /// The blocks whose rho ended at its upper bound (smooths the data do
    /// not support, fitted as nearly zero).
    pub fn at_upper_bound(&self, rho: &[f64]) -> Vec<usize> {
        (0..rho.len()).filter(|&k| rho[k] >= self.rho_upper[k]).collect()
    }

    /// A sentence for the fit's user on how the loop ended, where the
    /// termination needs one (a stop that is not the gradient, decrement or
    /// step test); the thresholds quoted are the ones the loop used.
    pub fn termination_note(&self, opts: &RemlOptions) -> Option<String> {
        let steps = STALL_STEPS;
        let gradient = self
            .projected_gradient
            .map_or(String::new(), |g| format!(" (the projected gradient is {g:.3} edf)"));
        Some(match self.termination {
            RemlTermination::Gradient | RemlTermination::Decrement | RemlTermination::Step => return None,
            RemlTermination::ValueChange => format!(
                "REML stopped where V stopped falling (by <= {} over {steps} steps) with the gradient test \
                 unmet{gradient}, above grad_tol {}: V is kinked or flat near its minimum (as where tied rows \
                 cross a spline knot together)",
                opts.value_tol, opts.grad_tol
            ),
            RemlTermination::Degenerate => format!(
                "REML did not converge: V fell by more than {DEGENERATE_FALL} over {steps} steps while rho moved \
                 by at most {DEGENERATE_MOVE}, toward a point where H + S turns singular (nearly separable labels, \
                 or a degenerate minimum of the penalised likelihood), where the Laplace approximation means \
                 nothing; the check from the start found no lower minimum. Simplify the model or check the data \
                 for separation"
            ),
            RemlTermination::SeveralMinima => "REML did not converge: the penalised likelihood has several local \
                 minima at this lambda (the inner solve from the start found a lower one than the warm-started \
                 solves had followed), so V is not well defined along the path; the fit reported is the lower \
                 minimum at the last lambda"
                .into(),
            RemlTermination::MaxIterations => format!(
                "REML did not converge within max_iter = {} outer iterations; the fit reported is the last one",
                opts.max_iter
            ),
            RemlTermination::LineSearchFailed => format!(
                "REML did not converge: {} halvings of the last step found no rho that lowers V{gradient}; the \
                 fit reported is the best one found",
                opts.max_halvings
            ),
            RemlTermination::InnerNotConverged => {
                "REML did not start: the inner Newton solve at the starting lambda did not converge".into()
            }
        })
    }
}

/// The result of [`reml`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RemlFit {
    /// The final LAML evaluation (rho, V, gradient, beta_hat, ...): the
    /// best point found, converged or not.
    pub laml: LamlEvaluation,
    /// lambda = exp(rho).
    pub lambda: Vec<f64>,
    /// What the outer loop did.
    pub report: RemlReport,
}

/// Block k's penalised degrees of freedom, `rank_k - lambda_k tr((H +
/// S)^{-1} S_k)`: its edf less its penalty's null space (the block's edf
/// where S_k is positive definite), the side of the fixed point `dV/drho_k =
/// 0` that `d log|S|_+ / d rho_k = rank_k` brings.
fn penalised_edf(e: &LamlEvaluation, penalty: &Penalty, k: usize) -> f64 {
    penalty.ranks()[k] as f64 - e.rho[k].exp() * e.penalty_traces[k]
}

/// A smooth whose effective degrees of freedom and penalty term
/// `lambda_k beta^T S_k beta` are both below this is treated as shrunk to
/// nothing when its lambda would still grow (see [`Outer::direction`]).
pub const VANISHED_EDF: f64 = 0.05;

/// Whether block k is shrunk to nothing (to its penalty's null space): its
/// penalised edf and its penalty term both below [`VANISHED_EDF`]. The edf alone does not say so where H is
/// indefinite (small data, a non-canonical link): `dim - lambda tr(A^{-1}
/// S)` can then fall below zero for a smooth in full use (on 5,000 rows a
/// link deviation with lambda 12 and a penalty term of 2), while a smooth
/// that is gone has its coefficients, and so its penalty term, near zero
/// as well.
fn vanished(e: &LamlEvaluation, penalty: &Penalty, k: usize) -> bool {
    let b = &penalty.blocks()[k];
    penalised_edf(e, penalty, k) < VANISHED_EDF && wiggliness(e, b, k) < VANISHED_EDF
}

/// Block k's penalty term `lambda_k beta^T S_k beta`.
fn wiggliness(e: &LamlEvaluation, b: &PenaltyBlock, k: usize) -> f64 {
    dot(&e.beta, &embedded_product(b, e.rho[k].exp(), &e.beta, e.beta.len()))
}

/// Bounds and options of one outer solve.
struct Outer<'a> {
    rho_ref: Vec<f64>,
    lower: Vec<f64>,
    upper: Vec<f64>,
    opts: &'a RemlOptions,
}

impl Outer<'_> {
    fn clamp(&self, rho: &[f64]) -> Vec<f64> {
        (0..rho.len())
            .map(|k| rho[k].clamp(self.lower[k], self.upper[k]))
            .collect()
    }

    /// Component k sits on a bound with the gradient pushing outward (so it
    /// cannot move and does not count against convergence).
    fn pinned(&self, e: &LamlEvaluation, k: usize) -> bool {
        (e.rho[k] <= self.lower[k] && e.gradient[k] > 0.0) || (e.rho[k] >= self.upper[k] && e.gradient[k] < 0.0)
    }

    fn projected_norm(&self, e: &LamlEvaluation) -> f64 {
        (0..e.rho.len())
            .filter(|&k| !self.pinned(e, k))
            .fold(0.0f64, |m, k| m.max(e.gradient[k].abs()))
    }

    /// The Newton direction on the free components, with the outer Hessian
    /// plus the secant `correction`, its eigenvalues raised to a floor (so
    /// it is a descent direction), capped at `radius`; a component whose
    /// smooth is already shrunk to nothing (block edf below
    /// [`VANISHED_EDF`]) with V still falling as its lambda grows goes
    /// straight to its upper bound. There V decays like exp(-rho) (each
    /// Newton step gains about one unit of rho), so walking out would cost
    /// an inner solve per unit for a change in V below its gradient, while
    /// the jump is one trial that the line search checks.
    fn direction(
        &self,
        e: &LamlEvaluation,
        prev: Option<&LamlEvaluation>,
        correction: &[f64],
        penalty: &Penalty,
        radius: f64,
        measured: bool,
    ) -> Result<Direction> {
        let m = e.rho.len();
        let vanishing: Vec<bool> = penalty
            .blocks()
            .iter()
            .enumerate()
            .map(|(k, _)| {
                let shrunk = vanished(e, penalty, k) || prev.is_some_and(|p| exponential_tail(p, e, k));
                !self.pinned(e, k) && e.gradient[k] < 0.0 && shrunk && e.rho[k] < self.upper[k]
            })
            .collect();
        let tail_gain: f64 = penalty
            .blocks()
            .iter()
            .enumerate()
            .filter(|&(k, _)| vanishing[k] && !vanished(e, penalty, k))
            .map(|(k, _)| 0.5 * e.gradient[k].abs())
            .sum();
        let free: Vec<usize> = (0..m).filter(|&k| !self.pinned(e, k) && !vanishing[k]).collect();
        let f = free.len();
        let sub: Vec<f64> = (0..f * f)
            .map(|i| {
                let (a, b) = (free[i / f], free[i % f]);
                e.outer_hessian[a * m + b] + correction[a * m + b]
            })
            .collect();
        let top = sub.iter().fold(0.0f64, |a, v| a.max(v.abs()));
        let floor = (1e-6 * top).max(1e-8);
        let g: Vec<f64> = free.iter().map(|&k| -e.gradient[k]).collect();
        let indefinite = symmetric_eigen(f, &sub)?.0.first().is_some_and(|&l| l < -floor);
        let step = if indefinite {
            // Where the model has negative curvature its coupling cannot be
            // trusted (it leaves out the third derivatives): a step along a
            // negative eigenvector can push a smooth uphill in its own
            // coordinate, into the wrong basin. Diagonal Newton moves each
            // component downhill.
            (0..f).map(|i| g[i] / sub[i * f + i].abs().max(floor)).collect()
        } else {
            let fixed = clip_eigenvalues(f, &sub, floor)?;
            crate::dense::Cholesky::factor(f, &fixed)?.solve(&g, 1)?
        };
        let mut d = vec![0.0; m];
        for (i, &k) in free.iter().enumerate() {
            d[k] = step[i];
        }
        // The decrement ends the solve, so unless B was measured here it
        // is taken from the plain fixed-H model as well and the larger one
        // kept: a secant correction can inflate the curvature along its
        // steps and call a point converged in a shallow side basin of V
        // (at 5,000 rows, seed 20: V 0.08 above the optimum).
        let decrement = if measured {
            dot(&g, &step)
        } else {
            let plain: Vec<f64> = (0..f * f)
                .map(|i| e.outer_hessian[free[i / f] * m + free[i % f]])
                .collect();
            dot(&g, &step).max(clipped_decrement(f, &plain, &g)?)
        };
        let norm = d.iter().fold(0.0f64, |a, v| a.max(v.abs()));
        if norm > radius {
            d.iter_mut().for_each(|v| *v *= radius / norm);
        }
        let mut jump = false;
        for k in (0..m).filter(|&k| vanishing[k]) {
            d[k] = self.upper[k] - e.rho[k];
            jump |= e.gradient[k].abs() > self.opts.grad_tol;
        }
        Ok(Direction {
            d,
            decrement,
            jump,
            tail: tail_gain > 0.0,
            tail_gain,
        })
    }
}

/// `g^T B^{-1} g` with B's eigenvalues raised to a floor relative to its
/// largest (as for the step).
fn clipped_decrement(f: usize, b: &[f64], g: &[f64]) -> Result<f64> {
    if f == 0 {
        return Ok(0.0);
    }
    let top = b.iter().fold(0.0f64, |a, v| a.max(v.abs()));
    let fixed = clip_eigenvalues(f, b, (1e-6 * top).max(1e-8))?;
    Ok(dot(g, &crate::dense::Cholesky::factor(f, &fixed)?.solve(g, 1)?))
}

/// The least move of rho_k between two iterates for the tail test.
const TAIL_MIN_MOVE: f64 = 0.25;

/// Whether V along rho_k decays like `V_inf + b e^{-rho_k}` between the
/// last two iterates: both gradients negative (V falling as lambda_k grows),
/// rho_k moved up, and the gradient shrank by `e^{-delta rho_k}` to within
/// half the step in the log. That is the tail of a smooth being shrunk to
/// nothing, whose infimum is at lambda_k = infinity: Newton would gain
/// about one unit of rho an iteration toward it (the curvature there equals
/// the slope), so the step jumps to the bound instead (the line search
/// checks that V is lower there).
fn exponential_tail(prev: &LamlEvaluation, e: &LamlEvaluation, k: usize) -> bool {
    let (g0, g1) = (prev.gradient[k], e.gradient[k]);
    let moved = e.rho[k] - prev.rho[k];
    // Over a shorter move the gradient's ratio says too little.
    if !(g0 < 0.0 && g1 < 0.0 && moved >= TAIL_MIN_MOVE) {
        return false;
    }
    ((g1 / g0).ln() + moved).abs() <= 0.5 * moved
}

/// Line-search halvings that mark the outer model's curvature as wrong.
const POOR_MODEL_HALVINGS: usize = 3;

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
fn measured_hessian<'o, B: PcgKernels>(
    backend: &B,
    objective: &'o dyn Objective<B>,
    penalty: &Penalty,
    outer: &Outer<'_>,
    cur: &LamlEvaluation,
    at_cur: &Evaluation<'o, B>,
) -> Result<(Option<Vec<f64>>, usize)> {
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
        let trial = match laml_value(
            backend,
            objective,
            penalty,
            &rho,
            &cur.beta,
            Some(at_cur.clone()),
            outer.opts,
        ) {
            Ok(t) => t,
            Err(SolverError::NotPositiveDefinite { .. }) => return Ok((None, spent)),
            Err(e) => return Err(e),
        };
        spent += trial.laml.newton.evaluations;
        if !trial.laml.newton.converged {
            return Ok((None, spent));
        }
        spent += penalty.n_blocks();
        let (e, _) = with_gradient(objective, penalty, trial, outer.opts)?;
        for l in 0..m {
            h[l * m + k] = (e.gradient[l] - cur.gradient[l]) / step;
        }
    }
    // Column k was measured; make the matrix symmetric from what was.
    for &k in &measured {
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
    Ok((Some(h), spent))
}

/// An outer step and what it predicts.
struct Direction {
    /// The step in rho.
    d: Vec<f64>,
    /// `g^T B^{-1} g` on the components that move by Newton (before the
    /// cap): the squared distance to the optimum in rho's standard errors.
    decrement: f64,
    /// Whether a vanishing smooth jumps to its bound with a gradient above
    /// `grad_tol` (so the solve has not converged).
    jump: bool,
    /// Whether a jump comes from the exponential-tail test alone (a smooth
    /// not yet shrunk to nothing).
    tail: bool,
    /// The least fall of V that accepts such a jump: half of what the
    /// exponential model predicts (`|dV/drho_k|` summed over the tail
    /// components). A gradient can shrink geometrically for a while and
    /// still cross zero ahead, at an interior minimum; then V at the bound
    /// falls far less than the model says.
    tail_gain: f64,
}

/// Minimise V(rho), starting the first inner solve at `beta0`. `rho0`
/// (clamped into the bounds) is the start; `None` starts at the reference
/// [`reference_rho`], computed from the Hessian at `beta0`.
pub fn reml<B: PcgKernels>(
    backend: &B,
    objective: &dyn Objective<B>,
    penalty: &Penalty,
    rho0: Option<&[f64]>,
    beta0: &[f64],
    opts: &RemlOptions,
) -> Result<RemlFit> {
    opts.validate()?;
    if let Some(rho0) = rho0 {
        expect_len("rho0", rho0.len(), penalty.n_blocks())?;
        if let Some(k) = rho0.iter().position(|r| !r.is_finite()) {
            return Err(SolverError::invalid(format!("rho0[{k}]"), rho0[k], "must be finite"));
        }
    }
    expect_len("beta0", beta0.len(), objective.dim())?;
    let clock = Instant::now();
    let Some(first) = objective.evaluate(beta0)? else {
        return Err(SolverError::invalid(
            "beta0",
            "a point",
            "the objective must be finite at the start",
        ));
    };
    let mut diag = backend.zeros(first.hessian.dim())?;
    first.hessian.diagonal(&mut diag)?;
    let rho_ref = reference_rho(penalty, &backend.download(&diag)?)?;
    let ctx = Ctx {
        backend,
        objective,
        penalty,
        outer: Outer {
            rho_ref: rho_ref.clone(),
            lower: rho_ref.iter().map(|r| r - opts.rho_range).collect(),
            upper: rho_ref.iter().map(|r| r + opts.rho_range).collect(),
            opts,
        },
        beta0,
    };
    let start = ctx.outer.clamp(rho0.unwrap_or(&rho_ref));
    let (trial, tries) = start_trial(backend, objective, penalty, &ctx.outer, &start, beta0, first)?;
    let start_newton_steps = trial.laml.newton.steps();
    let (mut walk, termination) = if trial.laml.newton.converged {
        let fs = fellner_schall_phase(backend, objective, penalty, &ctx.outer, trial)?;
        let (cur, at_beta) = with_gradient(objective, penalty, fs.trial, opts)?;
        let mut walk = Walk::new(cur, at_beta, fs.iterations, opts.max_step);
        walk.evaluations += 1 + tries + fs.evaluations + penalty.n_blocks();
        let termination = walk.run(&ctx)?;
        (walk, termination)
    } else {
        let mut walk = Walk::new(trial.laml, trial.at_beta, Vec::new(), opts.max_step);
        walk.evaluations += 1 + tries;
        (walk, RemlTermination::InnerNotConverged)
    };
    let cur = walk.cur;
    let report = RemlReport {
        iterations: std::mem::take(&mut walk.iterations),
        converged: termination.converged(),
        projected_gradient: (cur.gradient.len() == cur.rho.len()).then(|| ctx.outer.projected_norm(&cur)),
        termination,
        rho_ref,
        rho_lower: ctx.outer.lower,
        rho_upper: ctx.outer.upper,
        evaluations: walk.evaluations,
        start_newton_steps,
        mode_checks: walk.mode_checks,
        seconds: clock.elapsed().as_secs_f64(),
    };
    Ok(RemlFit {
        lambda: cur.rho.iter().map(|r| r.exp()).collect(),
        laml: cur,
        report,
    })
}

/// What every outer iteration reads: the problem, its bounds and options,
/// and the first inner solve's start.
struct Ctx<'o, 'a, B: PcgKernels> {
    backend: &'a B,
    objective: &'o dyn Objective<B>,
    penalty: &'a Penalty,
    outer: Outer<'a>,
    beta0: &'a [f64],
}

/// The outer loop's state from one iteration to the next.
struct Walk<'o, B: PcgKernels> {
    cur: LamlEvaluation,
    /// The objective's evaluation at cur.beta, shared by every trial that
    /// starts there.
    at_cur: Evaluation<'o, B>,
    /// Where the next line search's first trial starts (cur.beta, or the
    /// optimum of a probe that did not improve V).
    start: Start<'o, B>,
    /// The last Newton iterate, for the exponential-tail test.
    prev: Option<LamlEvaluation>,
    /// The secant correction of the outer Hessian (m x m).
    correction: Vec<f64>,
    /// A trust radius on the outer step: cut to the accepted step after a
    /// line search that needed halvings, doubled (up to max_step) after a
    /// full step.
    radius: f64,
    probed: Vec<bool>,
    /// Whether the last line search showed the model's curvature wrong, and
    /// where the outer Hessian was last measured.
    model_poor: bool,
    measured_at: Option<Vec<f64>>,
    /// Whether the last accepted step's line search needed that many
    /// halvings: the minimum is then checked from beta0, since a branch of
    /// inner minima nearing its end is one way the model fails
    /// ([`lower_mode`]).
    suspect: bool,
    /// V before and after each of the consecutive accepted Newton steps.
    values: Vec<(f64, Vec<f64>)>,
    /// Where the minimum of cur was last checked from beta0, and how often.
    checked_at: Option<Vec<f64>>,
    mode_checks: usize,
    evaluations: usize,
    iterations: Vec<RemlIteration>,
}

/// What a Newton iteration leads to.
enum Next {
    /// The next iteration, at once.
    Iterate,
    /// A check of cur's minimum from beta0 first; then stop with the
    /// termination, or (`None`) iterate.
    Check(Option<RemlTermination>),
}

impl<'o, B: PcgKernels> Walk<'o, B> {
    fn new(cur: LamlEvaluation, at_cur: Evaluation<'o, B>, iterations: Vec<RemlIteration>, radius: f64) -> Self {
        let m = cur.rho.len();
        Self {
            start: (cur.beta.clone(), Some(at_cur.clone())),
            cur,
            at_cur,
            prev: None,
            correction: vec![0.0; m * m],
            radius,
            probed: vec![false; m],
            model_poor: false,
            measured_at: None,
            suspect: false,
            values: Vec::new(),
            checked_at: None,
            mode_checks: 0,
            evaluations: 0,
            iterations,
        }
    }

    /// Outer iterations until a stop.
    fn run(&mut self, ctx: &Ctx<'o, '_, B>) -> Result<RemlTermination> {
        loop {
            let t0 = Instant::now();
            if self.probe(ctx, t0)? {
                continue;
            }
            let stop = match self.newton(ctx, t0)? {
                Next::Iterate => continue,
                Next::Check(stop) => stop,
            };
            if self.several_minima(ctx, t0)? {
                return Ok(RemlTermination::SeveralMinima);
            }
            if let Some(t) = stop {
                return Ok(t);
            }
        }
    }

    /// The other side of a vanished smooth ([`probe_other_side`]); true
    /// where V is lower there and the walk moved to it.
    fn probe(&mut self, ctx: &Ctx<'o, '_, B>, t0: Instant) -> Result<bool> {
        let Some(probe) = probe_other_side(
            ctx.backend,
            ctx.objective,
            ctx.penalty,
            &ctx.outer,
            &self.cur,
            &mut self.probed,
            &mut self.start,
        )?
        else {
            return Ok(false);
        };
        self.evaluations += probe.evaluations;
        let Some((next, next_at_beta)) = probe.better else {
            return Ok(false);
        };
        let record = still(
            OuterStep::Probe,
            &self.cur,
            1.0,
            probe.newton_iterations,
            probe.evaluations,
            t0,
        );
        keep(ctx.objective, &mut self.iterations, record);
        self.correction.iter_mut().for_each(|c| *c = 0.0);
        self.radius = ctx.outer.opts.max_step;
        self.values.clear();
        self.start = (next.beta.clone(), Some(next_at_beta.clone()));
        self.at_cur = next_at_beta;
        self.prev = None;
        self.cur = next;
        Ok(true)
    }

    /// The stopping tests at cur, then a Newton step with its line search.
    fn newton(&mut self, ctx: &Ctx<'o, '_, B>, t0: Instant) -> Result<Next> {
        let (opts, m) = (ctx.outer.opts, self.cur.rho.len());
        if ctx.outer.projected_norm(&self.cur) <= opts.grad_tol {
            return Ok(Next::Check(Some(RemlTermination::Gradient)));
        }
        if self.suspect && self.checked_at.as_ref() != Some(&self.cur.rho) {
            return Ok(Next::Check(None));
        }
        let measured = self.measure(ctx)?;
        let step = self.direction(ctx, measured, true)?;
        if step.decrement <= opts.decrement_tol && !step.jump {
            return Ok(Next::Check(Some(RemlTermination::Decrement)));
        }
        if stalled(&self.values, opts.value_tol) {
            return Ok(Next::Check(Some(RemlTermination::ValueChange)));
        }
        if falling_in_place(&self.values) {
            return Ok(Next::Check(Some(RemlTermination::Degenerate)));
        }
        if self.iterations.len() == opts.max_iter {
            return Ok(Next::Check(Some(RemlTermination::MaxIterations)));
        }
        let (step, search, tried) = self.search(ctx, step, measured)?;
        let (cur, outer) = (&self.cur, &ctx.outer);
        let step_jumped = (0..m).any(|k| cur.rho[k] + step.d[k] >= outer.upper[k] && step.d[k] > self.radius);
        self.evaluations += tried + search.evaluations;
        let mut record = RemlIteration {
            kind: OuterStep::Newton,
            rho: cur.rho.clone(),
            value: cur.value,
            gradient: cur.gradient.clone(),
            decrement: step.decrement,
            hessian_measured: measured,
            step_length: 0.0,
            halvings: search.halvings,
            newton_iterations: search.newton_iterations,
            newton_evaluations: tried + search.evaluations,
            seconds: 0.0,
        };
        self.model_poor = search.halvings >= POOR_MODEL_HALVINGS;
        self.suspect = self.model_poor && search.accepted.is_some();
        let Some((t, trial)) = search.accepted else {
            record.seconds = t0.elapsed().as_secs_f64();
            keep(ctx.objective, &mut self.iterations, record);
            if self.measured_at.as_ref() != Some(&self.cur.rho) {
                // Once per point: measure the curvature and search again.
                return Ok(Next::Iterate);
            }
            return Ok(Next::Check(Some(RemlTermination::LineSearchFailed)));
        };
        self.evaluations += ctx.penalty.n_blocks();
        let (next, next_at_beta) = with_gradient(ctx.objective, ctx.penalty, trial, opts)?;
        let moved = next
            .rho
            .iter()
            .zip(&self.cur.rho)
            .fold(0.0f64, |a, (x, y)| a.max((x - y).abs()));
        let small = t == 1.0 && moved <= opts.step_tol;
        self.radius = if t == 1.0 {
            (2.0 * self.radius).min(opts.max_step)
        } else {
            moved.clamp(opts.step_tol, opts.max_step)
        };
        record.step_length = t;
        record.seconds = t0.elapsed().as_secs_f64();
        keep(ctx.objective, &mut self.iterations, record);
        self.advance(next, next_at_beta, step_jumped);
        Ok(if small {
            Next::Check(Some(RemlTermination::Step))
        } else {
            Next::Iterate
        })
    }

    /// Measure the outer Hessian at cur where the last line search showed
    /// the model poor (once a point); whether it is measured at cur.
    fn measure(&mut self, ctx: &Ctx<'o, '_, B>) -> Result<bool> {
        if self.model_poor && self.measured_at.as_ref() != Some(&self.cur.rho) {
            let (b, o, p) = (ctx.backend, ctx.objective, ctx.penalty);
            let (hessian, spent) = measured_hessian(b, o, p, &ctx.outer, &self.cur, &self.at_cur)?;
            self.evaluations += spent;
            if let Some(h) = hessian {
                self.correction = h.iter().zip(&self.cur.outer_hessian).map(|(a, b)| a - b).collect();
            }
            self.measured_at = Some(self.cur.rho.clone());
        }
        Ok(self.measured_at.as_ref() == Some(&self.cur.rho))
    }

    /// The outer step at cur (`tail`: with the exponential-tail test).
    fn direction(&self, ctx: &Ctx<'o, '_, B>, measured: bool, tail: bool) -> Result<Direction> {
        let prev = if tail { self.prev.as_ref() } else { None };
        ctx.outer
            .direction(&self.cur, prev, &self.correction, ctx.penalty, self.radius, measured)
    }

    /// The line search along `step` (a tail jump is tried whole, once; if V
    /// is not lower at the bound, the step without the tail test is
    /// searched as usual): the step searched, the search, and the
    /// evaluations of a jump tried before it.
    fn search(
        &mut self,
        ctx: &Ctx<'o, '_, B>,
        step: Direction,
        measured: bool,
    ) -> Result<(Direction, Search<'o, B>, usize)> {
        let opts = ctx.outer.opts;
        let from = match std::mem::replace(&mut self.start, (self.cur.beta.clone(), None)) {
            (_, None) => (self.cur.beta.clone(), Some(self.at_cur.clone())),
            kept => kept,
        };
        let here = (&self.cur, &self.at_cur);
        let along = |d: &[f64], from, halvings| {
            outer_line_search(
                ctx.backend,
                ctx.objective,
                ctx.penalty,
                &ctx.outer,
                here,
                d,
                from,
                halvings,
            )
        };
        if !step.tail {
            let search = along(&step.d, from, (opts.max_halvings, 0.0))?;
            return Ok((step, search, 0));
        }
        let jump = along(&step.d, from, (0, step.tail_gain))?;
        if jump.accepted.is_some() {
            return Ok((step, jump, 0));
        }
        let plain = self.direction(ctx, measured, false)?;
        let from = (self.cur.beta.clone(), Some(self.at_cur.clone()));
        let search = along(&plain.d, from, (opts.max_halvings, 0.0))?;
        Ok((plain, search, jump.evaluations))
    }

    /// Move to an accepted Newton iterate: the secant correction (reset
    /// after a jump to a bound, which says nothing of the curvature near
    /// the iterates), V's record, and where the next search starts.
    fn advance(&mut self, next: LamlEvaluation, next_at_beta: Evaluation<'o, B>, jumped: bool) {
        if jumped {
            self.correction.iter_mut().for_each(|c| *c = 0.0);
        } else {
            secant_update(&mut self.correction, &self.cur, &next);
        }
        if self.values.is_empty() {
            self.values.push((self.cur.value, self.cur.rho.clone()));
        }
        self.values.push((next.value, next.rho.clone()));
        self.start = (next.beta.clone(), Some(next_at_beta.clone()));
        self.at_cur = next_at_beta;
        self.prev = Some(std::mem::replace(&mut self.cur, next));
    }

    /// The inner solve from beta0 at cur (once a point): true where it
    /// found a lower minimum, which becomes cur ([`lower_mode`]).
    fn several_minima(&mut self, ctx: &Ctx<'o, '_, B>, t0: Instant) -> Result<bool> {
        if self.checked_at.as_ref() == Some(&self.cur.rho) {
            return Ok(false);
        }
        self.checked_at = Some(self.cur.rho.clone());
        self.mode_checks += 1;
        let (b, o, p) = (ctx.backend, ctx.objective, ctx.penalty);
        let (lower, newton_iterations, spent) = lower_mode(b, o, p, &ctx.outer, &self.cur, ctx.beta0)?;
        self.evaluations += spent;
        let Some(lower) = lower else {
            return Ok(false);
        };
        let record = still(OuterStep::ColdStart, &self.cur, 0.0, newton_iterations, spent, t0);
        keep(ctx.objective, &mut self.iterations, record);
        self.cur = lower;
        Ok(true)
    }
}

/// The record of an outer iteration that took no Newton step (a probe, a
/// cold start): at cur, with its inner work.
fn still(
    kind: OuterStep,
    cur: &LamlEvaluation,
    step_length: f64,
    newton_iterations: usize,
    newton_evaluations: usize,
    t0: Instant,
) -> RemlIteration {
    RemlIteration {
        kind,
        rho: cur.rho.clone(),
        value: cur.value,
        gradient: cur.gradient.clone(),
        decrement: 0.0,
        hessian_measured: false,
        step_length,
        halvings: 0,
        newton_iterations,
        newton_evaluations,
        seconds: t0.elapsed().as_secs_f64(),
    }
}

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
/// keeping the lower (one step took 221 evaluations). Checked where the loop would stop and after an accepted line
/// search of [`POOR_MODEL_HALVINGS`] halvings (requiring the gradient to
/// grow as well missed a nearly separable chase).
fn lower_mode<B: PcgKernels>(
    backend: &B,
    objective: &dyn Objective<B>,
    penalty: &Penalty,
    outer: &Outer<'_>,
    cur: &LamlEvaluation,
    beta0: &[f64],
) -> Result<(Option<LamlEvaluation>, usize, usize)> {
    let mut capped = outer.opts.clone();
    capped.newton.max_iter = capped.newton.max_iter.min(MODE_CHECK_STEPS);
    let trial = match laml_value(backend, objective, penalty, &cur.rho, beta0, None, &capped) {
        Ok(t) => t,
        Err(SolverError::NotPositiveDefinite { .. }) => return Ok((None, 0, 0)),
        Err(e) => return Err(e),
    };
    let (steps, spent) = (trial.laml.newton.steps(), trial.laml.newton.evaluations);
    let tol = MODE_TOL + resolution(cur.objective);
    if !(trial.laml.newton.converged && trial.laml.objective < cur.objective - tol) {
        return Ok((None, steps, spent));
    }
    let (lower, _) = with_gradient(objective, penalty, trial, outer.opts)?;
    Ok((Some(lower), steps, spent + penalty.n_blocks()))
}

/// Whether V fell by at most `tol` over the last [`STALL_STEPS`] steps of
/// `values` (V before and after consecutive accepted Newton steps).
fn stalled(values: &[(f64, Vec<f64>)], tol: f64) -> bool {
    let n = values.len();
    n > STALL_STEPS && values[n - 1 - STALL_STEPS].0 - values[n - 1].0 <= tol
}

/// V's least fall, and rho's largest move, over [`STALL_STEPS`] Newton
/// steps that mark V as falling without bound in place
/// ([`RemlTermination::Degenerate`]): a slope of 100 or more in edf units,
/// which no regular point gives over steps that short (early steps, where
/// V is steep, move rho by units).
const DEGENERATE_FALL: f64 = 1.0;
const DEGENERATE_MOVE: f64 = 1e-2;

/// Whether V fell by more than [`DEGENERATE_FALL`] over the last
/// [`STALL_STEPS`] steps of `values` (V and rho before and after
/// consecutive accepted Newton steps) while rho moved by at most
/// [`DEGENERATE_MOVE`] in every component.
fn falling_in_place(values: &[(f64, Vec<f64>)]) -> bool {
    let n = values.len();
    if n <= STALL_STEPS {
        return false;
    }
    let ((v0, r0), (v1, r1)) = (&values[n - 1 - STALL_STEPS], &values[n - 1]);
    let moved = r0.iter().zip(r1).fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
    v0 - v1 > DEGENERATE_FALL && moved <= DEGENERATE_MOVE
}

/// The symmetric rank-one update of the correction C that makes the outer
/// model `B = outer_hessian + C` meet the secant condition `B s = y` along
/// the last step (`y` the change of the gradient): the fixed-H Hessian
/// leaves out the likelihood's third derivatives, and on small data that
/// can be a third of the curvature; the secant restores what the steps
/// observe. Skipped where `r^T s` is too small for a stable update.
fn secant_update(correction: &mut [f64], cur: &LamlEvaluation, next: &LamlEvaluation) {
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

/// How far below its reference a vanishing smooth's rho is probed.
const PROBE_DISTANCE: f64 = 2.5;

/// What a probe of the other side found.
struct Probe<'o, B: PcgKernels> {
    /// The probed point with its gradient, if V is lower there.
    better: Option<(LamlEvaluation, Evaluation<'o, B>)>,
    newton_iterations: usize,
    evaluations: usize,
}

/// A guard against the wrong minimum at lambda = infinity. V(rho_k) can
/// fall toward a smooth's upper bound from a start that lies past a local
/// maximum, while a lower minimum with the smooth in use lies below (the
/// reference start can be on the wrong side at large n). Once per smooth,
/// when it has vanished (shrunk to nothing, or at its upper bound), V is
/// evaluated with its rho at `rho_ref - PROBE_DISTANCE`; a lower V there
/// becomes the current point. Costs one inner solve (and a gradient when taken).
fn probe_other_side<'o, B: PcgKernels>(
    backend: &B,
    objective: &'o dyn Objective<B>,
    penalty: &Penalty,
    outer: &Outer<'_>,
    cur: &LamlEvaluation,
    probed: &mut [bool],
    start: &mut Start<'o, B>,
) -> Result<Option<Probe<'o, B>>> {
    let candidate = (0..penalty.n_blocks()).position(|k| {
        // Whatever the gradient's sign: V is flat out there, and rounding
        // can leave a shallow local minimum of its own.
        let vanishing = vanished(cur, penalty, k) || cur.rho[k] >= outer.upper[k];
        let target = outer.rho_ref[k] - PROBE_DISTANCE;
        !probed[k] && vanishing && target < cur.rho[k] - 1.0
    });
    let Some(k) = candidate else {
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
    let trial = match laml_value(backend, objective, penalty, &rho, &beta0, eval, outer.opts) {
        Ok(t) => t,
        Err(SolverError::NotPositiveDefinite { .. }) => return Ok(Some(probe)),
        Err(e) => return Err(e),
    };
    probe.newton_iterations = trial.laml.newton.iterations.len();
    probe.evaluations = trial.laml.newton.evaluations;
    if !trial.laml.newton.converged {
        return Ok(Some(probe));
    }
    if trial.laml.value < cur.value - resolution(cur.value) {
        probe.evaluations += penalty.n_blocks();
        probe.better = Some(with_gradient(objective, penalty, trial, outer.opts)?);
    } else {
        // The next line search starts from the probe's optimum: a warm
        // start that evaluates no beta twice.
        *start = (trial.laml.beta, Some(trial.at_beta));
    }
    Ok(Some(probe))
}

/// Most Fellner-Schall steps before Newton takes over.
const FS_STEPS: usize = 4;

/// The Fellner-Schall phase ends once its step is below this in every
/// component (Newton converges fast from there).
const FS_MIN_STEP: f64 = 1.0;

/// The generalised Fellner-Schall update (Wood and Fasiolo 2017, Biometrics
/// 73:1071) in rho: `delta rho_k = ln(edf_k / (lambda_k beta^T S_k beta))`,
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
    penalty
        .blocks()
        .iter()
        .enumerate()
        .map(|(k, b)| (penalised_edf(e, penalty, k), wiggliness(e, b, k)))
        .collect()
}

/// What the Fellner-Schall phase ended with.
struct FsPhase<'o, B: PcgKernels> {
    trial: Trial<'o, B>,
    iterations: Vec<RemlIteration>,
    evaluations: usize,
}

/// Halvings of a Fellner-Schall step whose trial is not kept.
const FS_HALVINGS: usize = 2;

/// Fellner-Schall steps from the converged start while they are long
/// (some component at least [`FS_MIN_STEP`]), at most [`FS_STEPS`]. A step
/// is kept where its inner solve converges and V is lower, and otherwise
/// halved up to [`FS_HALVINGS`] times; the phase ends at the first step
/// not kept. Each trial costs one warm inner solve and no dH/drho.
fn fellner_schall_phase<'o, B: PcgKernels>(
    backend: &B,
    objective: &'o dyn Objective<B>,
    penalty: &Penalty,
    outer: &Outer<'_>,
    mut trial: Trial<'o, B>,
) -> Result<FsPhase<'o, B>> {
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
        let mut kept = None;
        let mut t = 1.0;
        loop {
            let rho: Vec<f64> = cur.rho.iter().zip(&full).map(|(r, f)| r + t * (f - r)).collect();
            let start = Some(trial.at_beta.clone());
            match laml_value(backend, objective, penalty, &rho, &cur.beta, start, outer.opts) {
                Ok(next) => {
                    evaluations += next.laml.newton.evaluations;
                    record.newton_iterations += next.laml.newton.iterations.len();
                    record.newton_evaluations += next.laml.newton.evaluations;
                    if next.laml.newton.converged && next.laml.value < cur.value - resolution(cur.value) {
                        kept = Some(next);
                        break;
                    }
                }
                Err(SolverError::NotPositiveDefinite { .. }) => {}
                Err(e) => return Err(e),
            }
            if record.halvings == FS_HALVINGS {
                break;
            }
            record.halvings += 1;
            t *= 0.5;
        }
        record.step_length = if kept.is_some() { t } else { 0.0 };
        record.seconds = t0.elapsed().as_secs_f64();
        keep(objective, &mut iterations, record);
        match kept {
            Some(next) => trial = next,
            None => break,
        }
    }
    Ok(FsPhase {
        trial,
        iterations,
        evaluations,
    })
}

/// Record an outer iteration, telling the objective first.
fn keep<B: PcgKernels>(objective: &dyn Objective<B>, iterations: &mut Vec<RemlIteration>, record: RemlIteration) {
    objective.observe(FitEvent::Reml(&record));
    iterations.push(record);
}

/// dV/drho without the dH/drho terms: `(lambda_k beta^T S_k beta - edf_k) / 2`.
fn fixed_point_gradient(penalty: &Penalty, e: &LamlEvaluation) -> Vec<f64> {
    edf_and_wiggliness(penalty, e)
        .into_iter()
        .map(|(edf, quad)| 0.5 * (quad - edf))
        .collect()
}

/// Starts tried above the first, each [`PROBE_DISTANCE`] higher.
const START_RETRIES: usize = 2;

/// The first inner solve: at `start`, or, where it does not converge to a
/// minimum (little data and little penalty can leave the penalised
/// likelihood without one within reach, e.g. against the edge of the
/// model's domain), at a start more heavily penalised, up to
/// [`START_RETRIES`] times. Returns the trial and the evaluations spent.
#[allow(clippy::too_many_arguments)]
fn start_trial<'o, B: PcgKernels>(
    backend: &B,
    objective: &'o dyn Objective<B>,
    penalty: &Penalty,
    outer: &Outer<'_>,
    start: &[f64],
    beta0: &[f64],
    first: Evaluation<'o, B>,
) -> Result<(Trial<'o, B>, usize)> {
    let mut first = Some(first);
    let mut evaluations = 0;
    let mut last = None;
    for retry in 0..=START_RETRIES {
        let rho: Vec<f64> = start.iter().map(|r| r + PROBE_DISTANCE * retry as f64).collect();
        let rho = outer.clamp(&rho);
        match laml_value(backend, objective, penalty, &rho, beta0, first.take(), outer.opts) {
            Ok(trial) => {
                evaluations += trial.laml.newton.evaluations;
                if trial.laml.newton.converged {
                    return Ok((trial, evaluations));
                }
                last = Some(Ok(trial));
            }
            Err(e @ SolverError::NotPositiveDefinite { .. }) => last = Some(Err(e)),
            Err(e) => return Err(e),
        }
    }
    match last.unwrap_or_else(|| Err(SolverError::invalid("REML start", "none", "no start was tried"))) {
        Ok(trial) => Ok((trial, evaluations)),
        Err(SolverError::NotPositiveDefinite { pivot, value }) => Err(SolverError::numerical(
            "REML start",
            format!("H + S pivot {pivot} = {value:e}"),
            "the inner Newton solve found no minimum (H + S positive definite) at the reference smoothing \
             parameters nor at more heavily penalised ones: the data may not identify the model",
        )),
        Err(e) => Err(e),
    }
}

/// Where the next inner solve starts: a beta with the objective's
/// evaluation there when one is in hand.
type Start<'o, B> = (Vec<f64>, Option<Evaluation<'o, B>>);

/// The outcome of one outer line search.
struct Search<'o, B: PcgKernels> {
    /// The accepted (t, trial), if any.
    accepted: Option<(f64, Trial<'o, B>)>,
    halvings: usize,
    newton_iterations: usize,
    evaluations: usize,
}

/// Inner Newton steps allowed to a line-search trial before it counts as
/// failed, while the step is long (fewer than [`UNCAPPED_AFTER`] halvings):
/// a warm inner solve takes 1-3, and one that needs many means rho moved
/// too far for its start, where a shorter step is both cheaper and more
/// likely to be accepted.
const TRIAL_STEPS: usize = 6;

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
#[allow(clippy::too_many_arguments)]
fn outer_line_search<'o, B: PcgKernels>(
    backend: &B,
    objective: &'o dyn Objective<B>,
    penalty: &Penalty,
    outer: &Outer<'_>,
    (cur, at_cur): (&LamlEvaluation, &Evaluation<'o, B>),
    dir: &[f64],
    mut start: Start<'o, B>,
    (max_halvings, gain): (usize, f64),
) -> Result<Search<'o, B>> {
    let opts = outer.opts;
    let mut capped = opts.clone();
    capped.newton.max_iter = opts.newton.max_iter.min(TRIAL_STEPS);
    let mut s = Search {
        accepted: None,
        halvings: 0,
        newton_iterations: 0,
        evaluations: 0,
    };
    let mut t = 1.0;
    loop {
        let rho: Vec<f64> = cur.rho.iter().zip(dir).map(|(r, d)| r + t * d).collect();
        let rho = outer.clamp(&rho);
        let decrease: f64 = rho
            .iter()
            .zip(&cur.rho)
            .zip(&cur.gradient)
            .map(|((a, b), g)| g * (a - b))
            .sum();
        let (beta0, eval) = std::mem::replace(&mut start, (cur.beta.clone(), Some(at_cur.clone())));
        let trial_opts = if s.halvings < UNCAPPED_AFTER { &capped } else { opts };
        match laml_value(backend, objective, penalty, &rho, &beta0, eval, trial_opts) {
            Ok(trial) => {
                let newton = &trial.laml.newton;
                s.newton_iterations += newton.iterations.len();
                s.evaluations += newton.evaluations;
                let ok = trial.laml.value <= cur.value + opts.armijo * decrease - gain + resolution(cur.value);
                if newton.converged && ok {
                    s.accepted = Some((t, trial));
                    return Ok(s);
                }
            }
            // H + S not positive definite at this rho's inner end: back off.
            Err(SolverError::NotPositiveDefinite { .. }) => {}
            Err(e) => return Err(e),
        }
        if s.halvings == max_halvings {
            return Ok(s);
        }
        s.halvings += 1;
        t *= 0.5;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(rho: f64, gradient: f64) -> LamlEvaluation {
        LamlEvaluation {
            rho: vec![rho],
            value: 0.0,
            gradient: vec![gradient],
            outer_hessian: vec![1.0],
            beta: vec![0.0],
            objective: 0.0,
            logdet_penalised_hessian: 0.0,
            log_pseudo_det_penalty: 0.0,
            penalty_traces: vec![0.0],
            hessian: vec![0.0],
            newton: NewtonReport {
                iterations: Vec::new(),
                check: None,
                termination: crate::newton::Termination::Decrement,
                converged: true,
                objective: 0.0,
                grad_norm: 0.0,
                decrement: 0.0,
                evaluations: 0,
                seconds: 0.0,
            },
        }
    }

    /// Every stop other than the three convergence tests gets a note, and
    /// the note quotes the options the loop ran with, not fixed numbers.
    #[test]
    fn termination_notes_quote_the_thresholds_used() {
        use RemlTermination as T;
        let report = |termination, projected_gradient| RemlReport {
            iterations: Vec::new(),
            termination,
            converged: termination.converged(),
            projected_gradient,
            rho_ref: vec![0.0],
            rho_lower: vec![-1.0],
            rho_upper: vec![1.0],
            evaluations: 0,
            start_newton_steps: 0,
            mode_checks: 0,
            seconds: 0.0,
        };
        let opts = RemlOptions {
            value_tol: 2.5e-3,
            grad_tol: 0.125,
            max_iter: 17,
            max_halvings: 9,
            ..RemlOptions::default()
        };
        for t in [T::Gradient, T::Decrement, T::Step] {
            assert_eq!(report(t, Some(0.01)).termination_note(&opts), None, "{t:?}");
        }
        let note = |t, g| report(t, g).termination_note(&opts).unwrap_or_default();
        let value = note(T::ValueChange, Some(0.3));
        for part in ["0.0025", "0.125", "0.300 edf", "3 steps"] {
            assert!(value.contains(part), "{value}");
        }
        assert!(note(T::MaxIterations, None).contains("max_iter = 17"));
        let search = note(T::LineSearchFailed, Some(29.3));
        assert!(
            search.contains("9 halvings") && search.contains("29.300 edf"),
            "{search}"
        );
        assert!(
            !note(T::LineSearchFailed, None).contains("edf"),
            "no gradient, no figure"
        );
        for t in [T::Degenerate, T::SeveralMinima, T::InnerNotConverged] {
            assert!(note(t, None).contains("did not"), "{t:?}");
        }
    }

    /// V stalls when it fell by at most the tolerance over the last
    /// STALL_STEPS steps: not before that many steps, not when one of them
    /// fell by more, and an earlier large fall does not count.
    #[test]
    fn a_stall_needs_three_steps_of_small_falls() {
        let tol = 1e-3;
        let at = |v: &[f64]| -> Vec<(f64, Vec<f64>)> { v.iter().map(|&v| (v, vec![0.0])).collect() };
        assert!(!stalled(&at(&[]), tol));
        assert!(!stalled(&at(&[5.0, 5.0, 5.0]), tol), "two steps are no stall");
        assert!(stalled(&at(&[5.0, 4.9999, 4.9996, 4.9991]), tol));
        assert!(
            !stalled(&at(&[5.0, 4.9999, 4.9996, 4.9989]), tol),
            "1.1e-3 over three steps"
        );
        assert!(
            stalled(&at(&[9.0, 5.0, 4.9999, 4.9996, 4.9991]), tol),
            "only the last three steps count"
        );
        assert!(
            !stalled(&at(&[5.0, 5.0005, 4.9, 4.9]), tol),
            "a large fall within the window"
        );
    }

    /// The near-separable trace of `tools/messy_data.py 5000 1 1 x 8`
    /// (CPU, REML iterations 13-16: V and ln lambda) falls in place; the
    /// same falls over a real move, or a small fall in place, do not.
    #[test]
    fn falling_in_place_needs_a_large_fall_over_a_tiny_move() {
        let trace = |rho: [f64; 4]| -> Vec<(f64, Vec<f64>)> {
            [1009.906744, 1009.545043, 1009.068220, 1008.744668]
                .iter()
                .zip(rho)
                .map(|(&v, r)| (v, vec![r, -0.305]))
                .collect()
        };
        let (l0, l1, l2, l3) = (
            7.6542e-3f64.ln(),
            7.6652e-3f64.ln(),
            7.6680e-3f64.ln(),
            7.6683e-3f64.ln(),
        );
        assert!(falling_in_place(&trace([l0, l1, l2, l3])));
        assert!(!falling_in_place(&trace([l0, l1, l2, l3 + 0.02])), "rho moved 0.02");
        assert!(!falling_in_place(&trace([l0, l1, l2, l3])[1..]), "two steps");
        let small: Vec<(f64, Vec<f64>)> = (0..4).map(|i| (10.0 - 0.3 * i as f64, vec![0.0])).collect();
        assert!(!falling_in_place(&small), "0.9 over three steps");
    }

    #[test]
    fn the_tail_test_needs_a_geometric_decay_over_a_real_move() {
        let g0 = -0.1;
        // V = V_inf + b e^{-rho}: the gradient shrinks by e^{-move}.
        assert!(exponential_tail(&at(4.0, g0), &at(4.6, g0 * (-0.6f64).exp()), 0));
        // Within half the move in the log, either way.
        assert!(exponential_tail(&at(4.0, g0), &at(4.6, g0 * (-0.85f64).exp()), 0));
        assert!(!exponential_tail(&at(4.0, g0), &at(4.6, g0 * (-1.0f64).exp()), 0));
        // A gradient that barely shrinks points at an interior optimum.
        assert!(!exponential_tail(&at(4.0, g0), &at(4.6, 0.97 * g0), 0));
        // Too short a move, a move down, or V rising: no tail.
        assert!(!exponential_tail(&at(4.0, g0), &at(4.1, g0 * (-0.1f64).exp()), 0));
        assert!(!exponential_tail(&at(4.6, g0), &at(4.0, g0 * (-0.6f64).exp()), 0));
        assert!(!exponential_tail(&at(4.0, -g0), &at(4.6, -g0 * (-0.6f64).exp()), 0));
    }
}
