//! What a solve tells whoever watches it: an [`Observer`] handed to
//! [`newton_observed`] or [`reml_observed`] (as loggers attach to a
//! solver), told of every Newton and REML iteration as it ends, every
//! objective evaluation the driver makes and every solve's end. The
//! objective is not wrapped, so all of its methods reach the driver; the
//! observer sees only records and cannot change the solve.
//!
//! The driver calls the objective through [`Watched`], which times each
//! call and tells the observer; the counts it tells are the counts it
//! reports. Before each call it asks [`Observer::interrupted`]: an
//! observer that answers yes (a user pressed Ctrl-C, a deadline passed)
//! ends the solve with [`SolverError::Interrupted`], the one way an
//! observer changes a solve.
//!
//! [`newton_observed`]: crate::newton::newton_observed
//! [`reml_observed`]: crate::reml::reml_observed

use std::time::Instant;

use crate::backend::Backend;
use crate::newton::{Evaluation, NewtonIteration, NewtonReport, Objective};
use crate::reml::{RemlIteration, RemlReport};
use crate::{Result, SolverError};

/// What an evaluation of the objective computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvaluationKind {
    /// Value, gradient and Hessian ([`Objective::evaluate`]).
    Full,
    /// The value alone ([`Objective::value`], line-search trials of an
    /// objective whose [`Objective::cheap_value`] holds).
    Value,
    /// A Hessian derivative for REML's gradient (one direction of
    /// [`Objective::hessian_derivative_traces`]): one full evaluation where
    /// it is the finite difference, none where it is exact. REML counts it
    /// as one either way.
    HessianDerivative,
}

/// One objective evaluation the driver made.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EvaluationRecord {
    /// What it computed.
    pub kind: EvaluationKind,
    /// The objective's value (without the penalty); `None` outside its
    /// domain and for a Hessian derivative.
    pub value: Option<f64>,
    /// Wall time of the call in seconds.
    pub seconds: f64,
}

/// Told of a solve's progress; every method defaults to doing nothing.
pub trait Observer {
    /// An inner Newton iteration has ended (the record the report keeps).
    fn newton_iteration(&self, _iteration: &NewtonIteration) {}
    /// A Newton solve has ended (each of REML's inner solves included).
    fn newton_stop(&self, _report: &NewtonReport) {}
    /// An outer REML iteration has ended (the record the report keeps).
    fn reml_iteration(&self, _iteration: &RemlIteration) {}
    /// The REML solve has ended.
    fn reml_stop(&self, _report: &RemlReport) {}
    /// The driver has evaluated the objective.
    fn evaluation(&self, _evaluation: &EvaluationRecord) {}
    /// Whether the solve should stop now: asked before every evaluation of
    /// the objective; `true` ends the solve with
    /// [`SolverError::Interrupted`] (its evaluations so far are lost).
    fn interrupted(&self) -> bool {
        false
    }
}

/// Two observers told of everything in turn; interrupted when either is.
impl Observer for (&dyn Observer, &dyn Observer) {
    fn newton_iteration(&self, iteration: &NewtonIteration) {
        self.0.newton_iteration(iteration);
        self.1.newton_iteration(iteration);
    }
    fn newton_stop(&self, report: &NewtonReport) {
        self.0.newton_stop(report);
        self.1.newton_stop(report);
    }
    fn reml_iteration(&self, iteration: &RemlIteration) {
        self.0.reml_iteration(iteration);
        self.1.reml_iteration(iteration);
    }
    fn reml_stop(&self, report: &RemlReport) {
        self.0.reml_stop(report);
        self.1.reml_stop(report);
    }
    fn evaluation(&self, evaluation: &EvaluationRecord) {
        self.0.evaluation(evaluation);
        self.1.evaluation(evaluation);
    }
    fn interrupted(&self) -> bool {
        self.0.interrupted() || self.1.interrupted()
    }
}

/// The observer that ignores everything: what [`newton`] and [`reml`] use.
///
/// [`newton`]: crate::newton::newton
/// [`reml`]: crate::reml::reml
impl Observer for () {}

/// The objective and the observer of one solve: the driver's calls that
/// evaluate the objective, each timed and told to the observer.
pub(crate) struct Watched<'a, 'o, B: Backend> {
    pub objective: &'o dyn Objective<B>,
    pub observer: &'a dyn Observer,
}

// By hand: derived ones would ask `B: Clone`.
impl<B: Backend> Clone for Watched<'_, '_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: Backend> Copy for Watched<'_, '_, B> {}

impl<'o, B: Backend> Watched<'_, 'o, B> {
    /// [`SolverError::Interrupted`] where the observer asks to stop.
    fn proceed(&self) -> Result<()> {
        match self.observer.interrupted() {
            true => Err(SolverError::Interrupted),
            false => Ok(()),
        }
    }

    /// Tell the observer of a call of `kind` that began at `t`.
    fn tell(&self, kind: EvaluationKind, value: Option<f64>, t: Instant) {
        let seconds = t.elapsed().as_secs_f64();
        self.observer.evaluation(&EvaluationRecord { kind, value, seconds });
    }

    /// [`Objective::evaluate`].
    pub fn evaluate(&self, beta: &[f64]) -> Result<Option<Evaluation<'o, B>>> {
        self.proceed()?;
        let t = Instant::now();
        let e = self.objective.evaluate(beta)?;
        self.tell(EvaluationKind::Full, e.as_ref().map(|e| e.value), t);
        Ok(e)
    }

    /// [`Objective::value`].
    pub fn value(&self, beta: &[f64]) -> Result<Option<f64>> {
        self.proceed()?;
        let t = Instant::now();
        let v = self.objective.value(beta)?;
        self.tell(EvaluationKind::Value, v, t);
        Ok(v)
    }

    /// [`Objective::hessian_derivative_traces`], told as one Hessian
    /// derivative a direction (each with an equal share of the time).
    pub fn hessian_derivative_traces(
        &self,
        beta: &[f64],
        hessian: &[f64],
        inverse: &[f64],
        directions: &[&[f64]],
        steps: &[f64],
    ) -> Result<Vec<f64>> {
        self.proceed()?;
        let t = Instant::now();
        let traces = self
            .objective
            .hessian_derivative_traces(beta, hessian, inverse, directions, steps)?;
        let seconds = t.elapsed().as_secs_f64() / directions.len().max(1) as f64;
        for _ in directions {
            let record = EvaluationRecord {
                kind: EvaluationKind::HessianDerivative,
                value: None,
                seconds,
            };
            self.observer.evaluation(&record);
        }
        Ok(traces)
    }
}
