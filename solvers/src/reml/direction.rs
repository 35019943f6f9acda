//! The outer Newton direction: the free components' Newton step on the
//! model Hessian made positive definite, capped, with a vanishing smooth's
//! jump to its bound.

use crate::dense::{clip_eigenvalues, symmetric_eigen};
use crate::penalty::Penalty;
use crate::Result;

use super::bounds::Outer;
use super::laml::dot;
use super::vanished::vanished;
use super::LamlEvaluation;

/// Which components of the outer step may jump to their upper bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Jumps {
    /// A smooth shrunk to nothing, or (with the last iterate) one on an
    /// exponential tail.
    Tail,
    /// A smooth shrunk to nothing only.
    Vanished,
    /// None: every free component moves by Newton.
    Off,
}

impl Outer<'_> {
    /// The Newton direction on the free components, with the outer Hessian
    /// plus the secant `correction`, its eigenvalues raised to a floor (so
    /// it is a descent direction), capped at `radius`; a component whose
    /// smooth is already shrunk to nothing (block edf below
    /// [`VANISHED_EDF`]) with V still falling as its lambda grows goes
    /// straight to its upper bound. There V decays like exp(-rho) (each
    /// Newton step gains about one unit of rho), so walking out would cost
    /// an inner solve per unit for a change in V below its gradient, while
    /// the jump is one trial that the line search checks.
    ///
    /// [`VANISHED_EDF`]: super::VANISHED_EDF
    #[allow(clippy::too_many_arguments)]
    pub(super) fn direction(
        &self,
        e: &LamlEvaluation,
        prev: Option<&LamlEvaluation>,
        correction: &[f64],
        penalty: &Penalty,
        radius: f64,
        measured: bool,
        jumps: Jumps,
    ) -> Result<Direction> {
        let m = e.rho.len();
        let vanishing = match jumps {
            Jumps::Tail => self.vanishing(e, prev, penalty),
            Jumps::Vanished => self.vanishing(e, None, penalty),
            Jumps::Off => vec![false; m],
        };
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
        let g: Vec<f64> = free.iter().map(|&k| -e.gradient[k]).collect();
        let step = newton_step(f, &sub, &g)?;
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
            jumping: vanishing.contains(&true),
            jump,
            tail: tail_gain > 0.0,
            tail_gain,
        })
    }

    /// Per component, whether it jumps to its upper bound: free to move
    /// up, V falling as lambda grows, below the bound, and its smooth
    /// shrunk to nothing or (with `prev`) on an exponential tail.
    fn vanishing(&self, e: &LamlEvaluation, prev: Option<&LamlEvaluation>, penalty: &Penalty) -> Vec<bool> {
        penalty
            .blocks()
            .iter()
            .enumerate()
            .map(|(k, _)| {
                let shrunk = vanished(e, penalty, k) || prev.is_some_and(|p| exponential_tail(p, e, k));
                !self.pinned(e, k) && e.gradient[k] < 0.0 && shrunk && e.rho[k] < self.upper[k]
            })
            .collect()
    }
}

/// `g^T B^{-1} g` with B's eigenvalues raised to a floor relative to its
/// largest (as for the step).
fn clipped_decrement(f: usize, b: &[f64], g: &[f64]) -> Result<f64> {
    if f == 0 {
        return Ok(0.0);
    }
    let fixed = clip_eigenvalues(f, b, eigenvalue_floor(b))?;
    Ok(dot(g, &crate::dense::Cholesky::factor(f, &fixed)?.solve(g, 1)?))
}

/// `B^{-1} g` on the f free components with B's eigenvalues raised to
/// [`eigenvalue_floor`]; where B has a clearly negative eigenvalue, the
/// diagonal Newton step instead.
fn newton_step(f: usize, b: &[f64], g: &[f64]) -> Result<Vec<f64>> {
    let floor = eigenvalue_floor(b);
    let indefinite = symmetric_eigen(f, b)?.0.first().is_some_and(|&l| l < -floor);
    if indefinite {
        // Where the model has negative curvature its coupling cannot be
        // trusted (it leaves out the third derivatives): a step along a
        // negative eigenvector can push a smooth uphill in its own
        // coordinate, into the wrong basin. Diagonal Newton moves each
        // component downhill.
        return Ok((0..f).map(|i| g[i] / b[i * f + i].abs().max(floor)).collect());
    }
    let fixed = clip_eigenvalues(f, b, floor)?;
    crate::dense::Cholesky::factor(f, &fixed)?.solve(g, 1)
}

/// The least eigenvalue kept of an outer model Hessian: 1e-6 of its
/// largest entry, and at least 1e-8.
fn eigenvalue_floor(b: &[f64]) -> f64 {
    let top = b.iter().fold(0.0f64, |a, v| a.max(v.abs()));
    (1e-6 * top).max(1e-8)
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

/// An outer step and what it predicts.
pub(super) struct Direction {
    /// The step in rho.
    pub(super) d: Vec<f64>,
    /// `g^T B^{-1} g` on the components that move by Newton (before the
    /// cap): the squared distance to the optimum in rho's standard errors.
    pub(super) decrement: f64,
    /// Whether any smooth jumps to its bound.
    pub(super) jumping: bool,
    /// Whether a vanishing smooth jumps to its bound with a gradient above
    /// `grad_tol` (so the solve has not converged).
    pub(super) jump: bool,
    /// Whether a jump comes from the exponential-tail test alone (a smooth
    /// not yet shrunk to nothing).
    pub(super) tail: bool,
    /// The least fall of V that accepts such a jump: half of what the
    /// exponential model predicts (`|dV/drho_k|` summed over the tail
    /// components). A gradient can shrink geometrically for a while and
    /// still cross zero ahead, at an interior minimum; then V at the bound
    /// falls far less than the model says.
    pub(super) tail_gain: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::newton::NewtonReport;

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
            log_pseudo_det_gradient: vec![1.0],
            log_pseudo_det_hessian: vec![0.0],
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
