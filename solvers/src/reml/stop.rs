//! The outer loop's stopping tests, each a named predicate: the three
//! convergence tests (the projected gradient, the outer Newton decrement,
//! a short full step), V's stall (converged as well: V is kinked or flat
//! there), and the stops that are not convergence, V falling in place and
//! the iteration cap. The gradient test runs before any work at a point,
//! the step test after its step, the others in between
//! ([`before_search`]).

use super::bounds::Outer;
use super::direction::Direction;
use super::{LamlEvaluation, RemlOptions, RemlTermination};

/// How many consecutive outer Newton steps [`RemlOptions::value_tol`]
/// looks back over: one step that barely moves V is no stall (a step cut
/// short by the line search is one), three in a row are.
pub const STALL_STEPS: usize = 3;

/// The gradient test: the projected `||dV/drho||_inf` (the components
/// pinned at a bound left out) is at most `grad_tol`.
pub(super) fn gradient_met(outer: &Outer<'_>, cur: &LamlEvaluation) -> bool {
    outer.projected_norm(cur) <= outer.opts.grad_tol
}

/// The decrement test: the outer Newton decrement is at most
/// `decrement_tol`, and no vanishing smooth still jumps to its bound with a
/// gradient above `grad_tol`.
pub(super) fn decrement_met(step: &Direction, opts: &RemlOptions) -> bool {
    step.decrement <= opts.decrement_tol && !step.jump
}

/// The step test: a full step (`t` = 1) that moved rho by at most
/// `step_tol`.
pub(super) fn step_met(t: f64, moved: f64, opts: &RemlOptions) -> bool {
    t == 1.0 && moved <= opts.step_tol
}

/// The tests between a point's direction and its line search, in order:
/// the decrement, V's stall, V falling in place, and the iteration cap
/// (`iterations` outer iterations so far).
pub(super) fn before_search(
    step: &Direction,
    values: &[(f64, Vec<f64>)],
    iterations: usize,
    opts: &RemlOptions,
) -> Option<RemlTermination> {
    if decrement_met(step, opts) {
        Some(RemlTermination::Decrement)
    } else if stalled(values, opts.value_tol) {
        Some(RemlTermination::ValueChange)
    } else if falling_in_place(values) {
        Some(RemlTermination::Degenerate)
    } else if iterations >= opts.max_iter {
        Some(RemlTermination::MaxIterations)
    } else {
        None
    }
}

/// The largest noise in V, relative to `|V| + 1`, that [`resolved`]
/// accepts as rounding: beyond it a failed search says something other
/// than a flat V (mgcv's own score tolerance is 5e-6 of `|V|`).
pub(super) const RESOLVED_NOISE: f64 = 1e-6;

/// Whether a failed line search ends the solve as
/// [`RemlTermination::Resolved`]: V moved at its short trials (t at most
/// 1/64) by `noise` (the largest such change, [`Search::short_change`]),
/// at most [`RESOLVED_NOISE`] of `|V| + 1`, and the full step's predicted
/// decrease (`-full_decrease`) is no larger, so V cannot tell a better rho
/// from this one. On 2,000 binomial rows with one lambda at its bound V
/// moved by +1.1e-10 at every trial length while the full step predicted
/// 1.1e-15 (V's rounding grows where a lambda near 1e8 enters log|H + S|);
/// on 2,000 Gaussian rows the short trials moved V by 1e-11 to 6e-11 where
/// the full step predicted 4e-11.
///
/// [`Search::short_change`]: super::line_search::Search::short_change
pub(super) fn resolved(full_decrease: f64, noise: Option<f64>, value: f64) -> bool {
    noise.is_some_and(|noise| -full_decrease <= noise && noise <= RESOLVED_NOISE * (value.abs() + 1.0))
}

/// The largest `|a_k - b_k|`.
pub(super) fn max_move(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).fold(0.0f64, |m, (x, y)| m.max((x - y).abs()))
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
pub(super) const DEGENERATE_FALL: f64 = 1.0;
pub(super) const DEGENERATE_MOVE: f64 = 1e-2;

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
    v0 - v1 > DEGENERATE_FALL && max_move(r0, r1) <= DEGENERATE_MOVE
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failed search is resolved where the short trials' change of V
    /// (its noise) is at least the full step's predicted decrease and
    /// small beside V; not without short trials, not where the step
    /// predicts more than the noise, not where the "noise" is large.
    #[test]
    fn a_failed_search_is_resolved_only_below_the_noise() {
        assert!(resolved(-1.1e-15, Some(1.1e-10), 952.0));
        assert!(resolved(-4.2e-11, Some(6.4e-11), 1041.0));
        assert!(!resolved(-4.2e-11, None, 1041.0), "no short trial");
        assert!(!resolved(-1e-8, Some(6.4e-11), 1041.0), "the step predicts more");
        assert!(!resolved(-1e-4, Some(1e-2), 1041.0), "noise above 1e-6 of V");
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
}
