//! The backtracking line search of a Newton step: the first trial length
//! capped in the objective's coefficient scales, then halving until the
//! Armijo test holds.

use crate::pcg_kernels::PcgKernels;
use crate::Result;

use super::step::reach;
use super::{dot, resolution, Point, Problem};

/// The outcome of a backtracking line search.
pub(super) struct Search<'o, B: PcgKernels> {
    /// The accepted beta, when trials were values only.
    pub beta: Option<Vec<f64>>,
    /// The accepted trial's full evaluation, when trials were full.
    pub point: Option<Point<'o, B>>,
    /// The step length of the search (meaningful when a trial was accepted).
    pub t: f64,
    /// Halvings made.
    pub halvings: usize,
    /// Trials whose value or gradient was not finite.
    pub non_finite: usize,
    /// Objective evaluations made.
    pub evaluations: usize,
}

/// Halve t from 1 until `f(beta + t delta) <= f + c t g^T delta`; a trial
/// whose value (or, for full trials, gradient) is not finite is halved like
/// any other failure.
pub(super) fn line_search<'o, B: PcgKernels>(
    prob: &Problem<'_, 'o, B>,
    cur: &Point<'o, B>,
    delta: &[f64],
) -> Result<Search<'o, B>> {
    let slope = dot(&cur.grad, delta);
    let full = !prob.objective.cheap_value();
    let mut s = Search {
        beta: None,
        point: None,
        t: first_length(prob, delta),
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

/// The first trial length: 1, or less where the step would move a
/// coefficient by more than `max_step` of its scale.
fn first_length<B: PcgKernels>(prob: &Problem<'_, '_, B>, delta: &[f64]) -> f64 {
    let reach = reach(prob, delta);
    if reach > prob.opts.max_step {
        prob.opts.max_step / reach
    } else {
        1.0
    }
}
