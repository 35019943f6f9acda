//! The box rho stays in (`rho_ref +- rho_range`), and the components
//! pinned against it.

use super::{LamlEvaluation, RemlOptions};

/// Bounds and options of one outer solve.
pub(super) struct Outer<'a> {
    pub(super) rho_ref: Vec<f64>,
    pub(super) lower: Vec<f64>,
    pub(super) upper: Vec<f64>,
    pub(super) opts: &'a RemlOptions,
}

impl<'a> Outer<'a> {
    /// The box `rho_ref +- rho_range`.
    pub(super) fn around(rho_ref: Vec<f64>, opts: &'a RemlOptions) -> Self {
        Self {
            lower: rho_ref.iter().map(|r| r - opts.rho_range).collect(),
            upper: rho_ref.iter().map(|r| r + opts.rho_range).collect(),
            rho_ref,
            opts,
        }
    }

    pub(super) fn clamp(&self, rho: &[f64]) -> Vec<f64> {
        (0..rho.len())
            .map(|k| rho[k].clamp(self.lower[k], self.upper[k]))
            .collect()
    }

    /// Component k sits on a bound with the gradient pushing outward (so it
    /// cannot move and does not count against convergence).
    pub(super) fn pinned(&self, e: &LamlEvaluation, k: usize) -> bool {
        (e.rho[k] <= self.lower[k] && e.gradient[k] > 0.0) || (e.rho[k] >= self.upper[k] && e.gradient[k] < 0.0)
    }

    pub(super) fn projected_norm(&self, e: &LamlEvaluation) -> f64 {
        (0..e.rho.len())
            .filter(|&k| !self.pinned(e, k))
            .fold(0.0f64, |m, k| m.max(e.gradient[k].abs()))
    }
}
