//! Smoothing-parameter selection by the Laplace-approximate marginal
//! likelihood (LAML/REML), over `rho = ln lambda` per penalty block:
//!
//! ```text
//! V(rho) = f(beta_hat) + log|H + S_lambda| / 2 - log|S_lambda|_+ / 2
//! dV/drho_k = lambda_k beta_hat^T S_k beta_hat / 2
//!           + tr((H + S)^{-1} (lambda_k S_k + dH/drho_k)) / 2
//!           - (d log|S_lambda|_+ / d rho_k) / 2
//! ```
//!
//! with `d log|S_lambda|_+ / d rho_k` the rank of S_k where the block
//! overlaps no other and `lambda_k tr(S^+ S_k)` where blocks overlap, as a
//! tensor product's do ([`Penalty::log_pseudo_det_derivatives`]), and
//! `dH/drho_k` the derivative of H along
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
//! component is pinned), as mgcv accepts lambda -> infinity. Where V is so
//! flat that a failed line search's short trials move it by more than the
//! step predicts (V's rounding), the point is accepted as well
//! ([`RemlTermination::Resolved`]), and a jump to the bound that V does
//! not reward is retried as a plain Newton step.
//!
//! The files follow the algorithm: `options`, and `laml` (V and its
//! derivatives at one rho, with `vanished` for what they say of one
//! smooth); `start` and `bounds`; the `fellner_schall` phase; then the
//! Newton `walk`, with its `direction`, the `curvature` corrections, the
//! `line_search`, the `guards` against the wrong minimum and the `stop`
//! tests; and the `report`.
//!
//! [`newton_from`]: crate::newton::newton_from
//! [`PenalisedFactor`]: crate::logdet::PenalisedFactor

mod bounds;
mod curvature;
mod direction;
mod fellner_schall;
mod guards;
mod laml;
mod line_search;
mod options;
mod report;
mod start;
mod stop;
mod vanished;
mod walk;

use std::cell::Cell;
use std::time::Instant;

use crate::newton::{Evaluation, Joins, NewtonIteration, Objective};
use crate::observer::{EvaluationKind, EvaluationRecord, Observer, Watched};
use crate::operator::expect_len;
use crate::pcg_kernels::PcgKernels;
use crate::penalty::Penalty;
use crate::stats::FitStatistics;
use crate::{Result, SolverError};
use bounds::Outer;
use fellner_schall::fellner_schall_phase;
pub use fellner_schall::fellner_schall_step;
pub use laml::{evaluate_laml, LamlEvaluation};
use laml::{laml_value, with_gradient, Point, Trial};
pub use options::RemlOptions;
pub use report::{EvaluationCounts, OuterStep, RemlFit, RemlIteration, RemlReport, RemlTermination};
pub use start::reference_rho;
use start::start_trial;
pub use stop::STALL_STEPS;
pub use vanished::VANISHED_EDF;
use walk::Walk;

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
    reml_observed(backend, objective, penalty, rho0, beta0, opts, &())
}

/// [`reml`], telling `observer` of every outer and inner iteration, every
/// evaluation and every solve's end.
pub fn reml_observed<B: PcgKernels>(
    backend: &B,
    objective: &dyn Objective<B>,
    penalty: &Penalty,
    rho0: Option<&[f64]>,
    beta0: &[f64],
    opts: &RemlOptions,
    observer: &dyn Observer,
) -> Result<RemlFit> {
    check_inputs(objective, penalty, rho0, beta0, opts)?;
    let clock = Instant::now();
    let counted = Counted::default();
    let both: (&dyn Observer, &dyn Observer) = (observer, &counted);
    let watched = Watched {
        objective,
        observer: &both,
    };
    let Some(first) = watched.evaluate(beta0)? else {
        return Err(SolverError::invalid(
            "beta0",
            "a point",
            "the objective must be finite at the start",
        ));
    };
    let mut diag = backend.zeros(first.hessian.dim())?;
    first.hessian.diagonal(&mut diag)?;
    let rho_ref = reference_rho(penalty, &backend.download(&diag)?)?;
    // Kept where the objective's evaluations hold only their dense matrix
    // (every step dense: `HessianStorage::Auto` keeps no rows then), so
    // that a later solve from beta0 does not evaluate it again.
    let at_beta0 = objective.cost().always_dense(objective.dim()).then(|| first.clone());
    let ctx = Ctx {
        backend,
        watched,
        penalty,
        outer: Outer::around(rho_ref, opts),
        beta0,
        at_beta0,
        indefinite: Cell::new(false),
        counted: &counted,
    };
    let start = ctx.outer.clamp(rho0.unwrap_or(&ctx.outer.rho_ref));
    let (trial, tries) = start_trial(&ctx, &start, first)?;
    let start_newton_steps = trial.laml.newton.steps();
    let (mut walk, termination) = if trial.laml.newton.converged {
        let fs = fellner_schall_phase(&ctx, trial)?;
        let mut walk = Walk::new(ctx.gradient(fs.trial)?, fs.iterations, opts.max_step);
        walk.evaluations.start += 1 + tries;
        walk.evaluations.fellner_schall += fs.evaluations;
        walk.evaluations.hessian_derivatives += penalty.n_blocks();
        let termination = walk.run(&ctx)?;
        (walk, termination)
    } else {
        let mut walk = Walk::new(trial.into_point(), Vec::new(), opts.max_step);
        walk.evaluations.start += 1 + tries;
        (walk, RemlTermination::InnerNotConverged)
    };
    // The factor of H + S at the point returned: the walk keeps it with
    // every move of `cur`, so the statistics need no second factorisation.
    let (cur, factor) = (walk.cur, walk.factor);
    let lambda: Vec<f64> = cur.rho.iter().map(|r| r.exp()).collect();
    let statistics = FitStatistics::from_factor(&factor, &cur.hessian, penalty, &lambda)?;
    let report = RemlReport {
        iterations: std::mem::take(&mut walk.iterations),
        converged: termination.converged(),
        projected_gradient: (cur.gradient.len() == cur.rho.len()).then(|| ctx.outer.projected_norm(&cur)),
        termination,
        rho_ref: ctx.outer.rho_ref,
        rho_lower: ctx.outer.lower,
        rho_upper: ctx.outer.upper,
        evaluations: walk.evaluations.total(),
        evaluations_by_purpose: walk.evaluations,
        start_newton_steps,
        mode_checks: walk.mode_checks,
        seconds: clock.elapsed().as_secs_f64(),
    };
    observer.reml_stop(&report);
    Ok(RemlFit {
        lambda,
        laml: cur,
        statistics,
        report,
    })
}

/// The options, and the starts' lengths and values.
fn check_inputs<B: PcgKernels>(
    objective: &dyn Objective<B>,
    penalty: &Penalty,
    rho0: Option<&[f64]>,
    beta0: &[f64],
    opts: &RemlOptions,
) -> Result<()> {
    opts.validate()?;
    if let Some(rho0) = rho0 {
        expect_len("rho0", rho0.len(), penalty.n_blocks())?;
        if let Some(k) = rho0.iter().position(|r| !r.is_finite()) {
            return Err(SolverError::invalid(format!("rho0[{k}]"), rho0[k], "must be finite"));
        }
    }
    expect_len("beta0", beta0.len(), objective.dim())
}

/// The least Levenberg-Marquardt damping (mu, relative to H + S's
/// diagonal, as the inner Newton step damps) that marks a solve as having met a
/// second well. A step that needed less met H + S indefinite by under 1%
/// of its diagonal: a nearly flat direction of one valley, as BMS fits of
/// 4M and 12M simulated rows meet in their first warm solve (mu 1e-3)
/// without a second minimum anywhere (the check from beta0 joined the same
/// one, at 7 of their 28 evaluations); a hump between two wells needs
/// 0.1-10 (the double well of the solver's tests, the messy 5,000 rows).
const MARGINAL_DAMPING: f64 = 1e-2;

/// Whether a solve's Newton iterations met H + S indefinite by more than
/// [`MARGINAL_DAMPING`], its first step aside where it started at the
/// fit's own beta0 (see [`Ctx::saw`]).
fn met_second_well(iterations: &[NewtonIteration], from_beta0: bool) -> bool {
    iterations
        .iter()
        .skip(usize::from(from_beta0))
        .any(|it| it.damping >= MARGINAL_DAMPING)
}

/// What every outer iteration reads: the problem, its bounds and options,
/// and the first inner solve's start.
struct Ctx<'o, 'a, B: PcgKernels> {
    backend: &'a B,
    watched: Watched<'a, 'o, B>,
    penalty: &'a Penalty,
    outer: Outer<'a>,
    beta0: &'a [f64],
    /// Whether an inner solve met H + S not positive definite (a damped
    /// Newton step, or a trial that ended without a minimum): the
    /// penalised objective is not convex where it went, so it may have
    /// several minima and the one found is checked from beta0
    /// ([`walk::Walk`]'s mode check).
    indefinite: Cell<bool>,
    /// The objective's evaluation at beta0, for solves from there (the
    /// start's retries, the mode check), where keeping it costs only its
    /// dense matrix; `None` where an evaluation may hold its rows (a set of
    /// row Hessians held all fit, where memory bounds the rows a card
    /// takes).
    at_beta0: Option<Evaluation<'o, B>>,
    /// The objective's evaluations so far, failed trials' included.
    counted: &'a Counted,
}

/// An observer that counts the objective's evaluations (full and
/// value-only): a trial whose inner solve ends without a minimum returns
/// no report, and its evaluations are counted here.
#[derive(Default)]
struct Counted(Cell<usize>);

impl Observer for Counted {
    fn evaluation(&self, evaluation: &EvaluationRecord) {
        if evaluation.kind != EvaluationKind::HessianDerivative {
            self.0.set(self.0.get() + 1);
        }
    }
}

impl Counted {
    fn get(&self) -> usize {
        self.0.get()
    }
}

impl<'o, B: PcgKernels> Ctx<'o, '_, B> {
    /// V at `rho` ([`laml_value`]) from `beta0`, with the objective's
    /// evaluation there when `start` has it, and the evaluations the trial
    /// made; `None` where H + S is not positive definite at the inner
    /// solve's end. That is a failed trial (the caller backs off or gives
    /// the step up), not an error.
    fn trial(
        &self,
        rho: &[f64],
        beta0: &[f64],
        start: Option<Evaluation<'o, B>>,
        opts: &RemlOptions,
    ) -> Result<(Option<Trial<'o, B>>, usize)> {
        self.trial_joining(rho, beta0, start, opts, None)
    }

    /// [`Ctx::trial`] whose inner solve ends where it is bound for a known
    /// minimum (`joins`, [`laml_value`]).
    fn trial_joining(
        &self,
        rho: &[f64],
        beta0: &[f64],
        start: Option<Evaluation<'o, B>>,
        opts: &RemlOptions,
        joins: Option<Joins<'_>>,
    ) -> Result<(Option<Trial<'o, B>>, usize)> {
        let before = self.counted.get();
        let trial = laml_value(self.backend, self.watched, self.penalty, rho, beta0, start, opts, joins);
        let spent = self.counted.get() - before;
        self.saw(&trial, beta0 == self.beta0);
        match trial {
            Ok(trial) => Ok((Some(trial), spent)),
            Err(SolverError::NotPositiveDefinite { .. }) => Ok((None, spent)),
            Err(e) => Err(e),
        }
    }

    /// Note an inner solve that met an indefinite H + S: a step damped by
    /// at least [`MARGINAL_DAMPING`], or no positive definite H + S at its
    /// end. A solve from the fit's own `beta0` (`from_beta0`) is judged
    /// after its first step: a damped step at beta0 itself says where the
    /// fit started, not what the data are (BMS's rigid start, warps at
    /// zero, is often indefinite whatever the data).
    fn saw(&self, trial: &Result<Trial<'o, B>>, from_beta0: bool) {
        let indefinite = match trial {
            Ok(t) => met_second_well(&t.laml.newton.iterations, from_beta0),
            Err(e) => matches!(e, SolverError::NotPositiveDefinite { .. }),
        };
        if indefinite {
            self.indefinite.set(true);
        }
    }

    /// A kept trial with its gradient ([`with_gradient`]): a point, with
    /// its factor and the objective's evaluation at its beta_hat.
    fn gradient(&self, trial: Trial<'o, B>) -> Result<Point<'o, B>> {
        with_gradient(self.watched, self.penalty, trial, self.outer.opts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::newton::StepSolver;

    fn iteration(damping: f64) -> NewtonIteration {
        NewtonIteration {
            objective: 0.0,
            grad_norm: 0.0,
            direction_norm: 0.0,
            decrement: 0.0,
            step_norm: 0.0,
            step_length: 1.0,
            solver: StepSolver::Dense,
            pcg_iterations: 0,
            pcg_host_reads: 0,
            pcg_rtol: None,
            pcg_converged: None,
            damping,
            damping_tries: 0,
            halvings: 0,
            non_finite_trials: 0,
            seconds: 0.0,
        }
    }

    /// A marginal damping (a nearly flat direction of one valley) does not
    /// call for the mode check; one at the threshold or above does, except
    /// at the first step of a solve from beta0.
    #[test]
    fn only_a_damping_beyond_the_marginal_one_marks_a_second_well() {
        let steps = |d: &[f64]| d.iter().map(|&m| iteration(m)).collect::<Vec<_>>();
        assert!(!met_second_well(&steps(&[0.0, 0.0]), false));
        assert!(!met_second_well(&steps(&[1e-3, 1e-6, 0.0]), false));
        assert!(!met_second_well(&steps(&[0.0, MARGINAL_DAMPING / 2.0]), true));
        assert!(met_second_well(&steps(&[0.0, MARGINAL_DAMPING]), false));
        assert!(met_second_well(&steps(&[0.2, 0.0]), false));
        assert!(!met_second_well(&steps(&[10.0, 0.0]), true));
        assert!(met_second_well(&steps(&[10.0, 0.1]), true));
    }
}
