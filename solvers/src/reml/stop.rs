//! The outer loop's stopping tests on V's recent history.

/// How many consecutive outer Newton steps [`RemlOptions::value_tol`](super::RemlOptions::value_tol)
/// looks back over: one step that barely moves V is no stall (a step cut
/// short by the line search is one), three in a row are.
pub const STALL_STEPS: usize = 3;

/// Whether V fell by at most `tol` over the last [`STALL_STEPS`] steps of
/// `values` (V before and after consecutive accepted Newton steps).
pub(super) fn stalled(values: &[(f64, Vec<f64>)], tol: f64) -> bool {
    let n = values.len();
    n > STALL_STEPS && values[n - 1 - STALL_STEPS].0 - values[n - 1].0 <= tol
}

/// V's least fall, and rho's largest move, over [`STALL_STEPS`] Newton
/// steps that mark V as falling without bound in place
/// ([`RemlTermination::Degenerate`](super::RemlTermination::Degenerate)): a slope of 100 or more in edf units,
/// which no regular point gives over steps that short (early steps, where
/// V is steep, move rho by units).
pub(super) const DEGENERATE_FALL: f64 = 1.0;
pub(super) const DEGENERATE_MOVE: f64 = 1e-2;

/// Whether V fell by more than [`DEGENERATE_FALL`] over the last
/// [`STALL_STEPS`] steps of `values` (V and rho before and after
/// consecutive accepted Newton steps) while rho moved by at most
/// [`DEGENERATE_MOVE`] in every component.
pub(super) fn falling_in_place(values: &[(f64, Vec<f64>)]) -> bool {
    let n = values.len();
    if n <= STALL_STEPS {
        return false;
    }
    let ((v0, r0), (v1, r1)) = (&values[n - 1 - STALL_STEPS], &values[n - 1]);
    let moved = r0.iter().zip(r1).fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
    v0 - v1 > DEGENERATE_FALL && moved <= DEGENERATE_MOVE
}

#[cfg(test)]
mod tests {
    use super::*;

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
