//! What the outer solve reports: why it stopped, a record per iteration,
//! and the fit.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::observer::Observer;
use crate::stats::FitStatistics;

use super::stop::{DEGENERATE_FALL, DEGENERATE_MOVE, STALL_STEPS};
use super::{LamlEvaluation, RemlOptions};

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
    /// The line search found no lower V where the full step's predicted
    /// decrease was below V's noise, as measured by the shortest trial
    /// ([`super::stop::resolved`]): V cannot tell a better rho from this
    /// one. Converged (mgcv's step failure at a flat V, which its
    /// relative tests call full convergence).
    Resolved,
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
                | RemlTermination::Resolved
        )
    }
}

/// How an outer iteration chose its step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OuterStep {
    /// A Fellner-Schall update from the start ([`fellner_schall_step`]).
    ///
    /// [`fellner_schall_step`]: super::fellner_schall_step
    FellnerSchall,
    /// A vanished smooth's other side, probed ([`PROBE_DISTANCE`]).
    ///
    /// [`PROBE_DISTANCE`]: super::guards::PROBE_DISTANCE
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

/// What a REML solve's objective evaluations were for: they add up to
/// [`RemlReport::evaluations`]. An inner solve's evaluations are its Newton
/// steps' and line-search trials'; a gradient point adds one per penalty
/// block for dH/drho.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvaluationCounts {
    /// The first evaluation at `beta0` and the first inner solve from it
    /// (with its retries more heavily penalised).
    pub start: usize,
    /// The Fellner-Schall steps' inner solves.
    pub fellner_schall: usize,
    /// dH/drho at the start's and each accepted Newton iterate's gradient.
    pub hessian_derivatives: usize,
    /// The outer line searches' inner solves (each trial rho's).
    pub line_searches: usize,
    /// The outer Hessian measured by differences of the gradient.
    pub measured_hessian: usize,
    /// The probes of vanished smooths' other sides, with a taken probe's
    /// gradient.
    pub probes: usize,
    /// The checks of the inner minimum from `beta0`, with a taken
    /// minimum's gradient.
    pub mode_checks: usize,
}

impl EvaluationCounts {
    /// Every evaluation counted.
    pub fn total(&self) -> usize {
        self.start
            + self.fellner_schall
            + self.hessian_derivatives
            + self.line_searches
            + self.measured_hessian
            + self.probes
            + self.mode_checks
    }
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
    ///
    /// [`reference_rho`]: super::reference_rho
    pub rho_ref: Vec<f64>,
    /// Lower bounds on rho (`rho_ref - rho_range`).
    pub rho_lower: Vec<f64>,
    /// Upper bounds on rho (`rho_ref + rho_range`).
    pub rho_upper: Vec<f64>,
    /// Objective evaluations: the start, every inner solve's and one per
    /// block for each gradient's dH/drho.
    pub evaluations: usize,
    /// The same evaluations by what they were for.
    #[serde(default)]
    pub evaluations_by_purpose: EvaluationCounts,
    /// Newton steps of the first inner solve (from `beta0`).
    pub start_newton_steps: usize,
    /// Inner solves from `beta0` run to check that the warm-started ones
    /// found the lowest minimum: where the loop would stop (once an inner
    /// solve has met H + S not positive definite), and after an accepted
    /// line search of [`POOR_MODEL_HALVINGS`] halvings.
    ///
    /// [`POOR_MODEL_HALVINGS`]: super::curvature::POOR_MODEL_HALVINGS
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
            RemlTermination::Resolved => format!(
                "REML stopped where V no longer resolves a better rho: the last step's predicted decrease was \
                 below V's rounding noise, with the gradient test unmet{gradient}, above grad_tol {}",
                opts.grad_tol
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

/// The result of [`reml`]: the final point, its statistics and the
/// record. The REML score is `laml.value`.
///
/// [`reml`]: super::reml
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RemlFit {
    /// The final LAML evaluation (rho, V, gradient, beta_hat, ...): the
    /// best point found, converged or not.
    pub laml: LamlEvaluation,
    /// lambda = exp(rho).
    pub lambda: Vec<f64>,
    /// The covariances V_b = (H + S)^{-1} and V_f = V_b H V_b, log|H + S|
    /// and the edf at `laml.beta`, from the factor of H + S that gave
    /// `laml.value` ([`FitStatistics::from_factor`]): no second
    /// factorisation.
    pub statistics: FitStatistics,
    /// What the outer loop did.
    pub report: RemlReport,
}

/// The record of an outer iteration that took no Newton step (a probe, a
/// cold start): at cur, with its inner work.
pub(super) fn still(
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

/// Record an outer iteration, telling the observer first.
pub(super) fn keep(observer: &dyn Observer, iterations: &mut Vec<RemlIteration>, record: RemlIteration) {
    observer.reml_iteration(&record);
    iterations.push(record);
}

#[cfg(test)]
mod tests {
    use super::*;

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
            evaluations_by_purpose: EvaluationCounts::default(),
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
}
