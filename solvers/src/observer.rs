//! What a solve tells whoever watches it: an [`Observer`] handed to
//! [`newton_observed`] or [`reml_observed`] (as loggers attach to a
//! solver), told of every Newton and REML iteration as it ends, every
//! objective evaluation the driver makes and every solve's end. The
//! objective is not wrapped, so all of its methods reach the driver; the
//! observer sees only records and cannot change the solve.
//!
//! The driver calls the objective through [`Watched`], which times each
//! call and tells the observer; the counts it tells are the counts it
//! reports.
//!
//! [`newton_observed`]: crate::newton::newton_observed
//! [`reml_observed`]: crate::reml::reml_observed

use std::time::Instant;

use crate::backend::Backend;
use crate::newton::{Evaluation, NewtonIteration, NewtonReport, Objective};
use crate::reml::{RemlIteration, RemlReport};
use crate::Result;

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
    /// Tell the observer of a call of `kind` that began at `t`.
    fn tell(&self, kind: EvaluationKind, value: Option<f64>, t: Instant) {
        let seconds = t.elapsed().as_secs_f64();
        self.observer.evaluation(&EvaluationRecord { kind, value, seconds });
    }

    /// [`Objective::evaluate`].
    pub fn evaluate(&self, beta: &[f64]) -> Result<Option<Evaluation<'o, B>>> {
        let t = Instant::now();
        let e = self.objective.evaluate(beta)?;
        self.tell(EvaluationKind::Full, e.as_ref().map(|e| e.value), t);
        Ok(e)
    }

    /// [`Objective::value`].
    pub fn value(&self, beta: &[f64]) -> Result<Option<f64>> {
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
