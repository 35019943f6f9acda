//! The options of [`super::newton`] and their checks.

use serde::{Deserialize, Serialize};

use crate::pcg::PcgOptions;
use crate::{Result, SolverError};

/// How Newton steps are solved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StepSolver {
    /// Pick per step by cost estimate.
    Auto,
    /// PCG with the Jacobi preconditioner (matrix-free).
    Pcg,
    /// Dense assembly and Cholesky.
    Dense,
}

/// Eisenstat-Walker forcing ("choice 2"): the PCG relative tolerance of step
/// k is `gamma (||g_k|| / ||g_{k-1}||)^alpha`, safeguarded and clamped to
/// `[eta_min, eta_max]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Forcing {
    /// Loosest tolerance, also used at the first step (default 0.5).
    pub eta_max: f64,
    /// Tightest tolerance (default 1e-12).
    pub eta_min: f64,
    /// gamma (default 0.9).
    pub gamma: f64,
    /// alpha (default 2).
    pub alpha: f64,
}

impl Default for Forcing {
    fn default() -> Self {
        Self {
            eta_max: 0.5,
            eta_min: 1e-12,
            gamma: 0.9,
            alpha: 2.0,
        }
    }
}

/// Options of [`super::newton`].
///
/// Every test is invariant to adding a constant to the objective, to the
/// number of rows behind it and to rescaling a coefficient (a covariate):
/// convergence is judged by the Newton decrement, damping is scaled by the
/// Hessian's own diagonal, and the step cap is measured in the objective's
/// [`super::Objective::coefficient_scales`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewtonOptions {
    /// Step solver (default `Auto`).
    pub solver: StepSolver,
    /// Iteration cap (default 100).
    pub max_iter: usize,
    /// Converged when the Newton decrement `g^T (H + S)^{-1} g` of an
    /// undamped step is at most this (default 1e-8). The decrement is twice
    /// the predicted distance to the optimum in objective units and the
    /// squared distance to it in standard-error units (the norm of
    /// `H + S`), so one absolute tolerance means the same at any n, under
    /// a shifted objective and under rescaled coefficients. 1e-8 puts the
    /// estimate within 1e-4 standard errors of the optimum.
    pub decrement_tol: f64,
    /// Armijo constant c: accept `f(beta + t d) <= f + c t g^T d` (default 1e-4).
    pub armijo: f64,
    /// Most step halvings per iteration (default 20).
    pub max_halvings: usize,
    /// Longest step tried, `max_j |t delta_j| s_j <= max_step` with `s_j`
    /// the objective's coefficient scales (default 1e3; with scales in
    /// model units, as the BMS objectives give, 2 is a sensible cap): a
    /// nearly singular Hessian far from the optimum can propose a huge
    /// step, and a model evaluated that far out may be slow or outside its
    /// domain. mgcv caps its Newton steps the same way. An undamped step
    /// beyond it is cut to it; a damped one is damped more until it fits.
    pub max_step: f64,
    /// PCG forcing terms.
    pub forcing: Forcing,
    /// PCG options; `rtol` is replaced by the forcing term (default
    /// [`PcgOptions::default`]).
    pub pcg: PcgOptions,
    /// First Levenberg-Marquardt damping mu when `H + S` is not positive
    /// definite: the step solves `(H + S + mu D) delta = -g` with
    /// `D = |diag(H + S)|` (default 1e-6), so the damping is invariant to
    /// rescaling a coefficient.
    pub damping_start: f64,
    /// Factor by which a failing damping grows (default 10).
    pub damping_growth: f64,
    /// Most damping retries per step (default 20).
    pub max_damping_tries: usize,
    /// PCG iterations `Auto` assumes before the first PCG solve (default 50;
    /// later steps use the last observed count).
    pub expected_pcg_iters: usize,
}

impl Default for NewtonOptions {
    fn default() -> Self {
        Self {
            solver: StepSolver::Auto,
            max_iter: 100,
            decrement_tol: 1e-8,
            armijo: 1e-4,
            max_halvings: 20,
            max_step: 1e3,
            forcing: Forcing::default(),
            pcg: PcgOptions::default(),
            damping_start: 1e-6,
            damping_growth: 10.0,
            max_damping_tries: 20,
            expected_pcg_iters: 50,
        }
    }
}

pub(crate) fn check(field: &str, v: f64, ok: bool, rule: &str) -> Result<()> {
    if ok && v.is_finite() {
        Ok(())
    } else {
        Err(SolverError::invalid(field, v, rule))
    }
}

impl NewtonOptions {
    /// Check every field's range.
    pub fn validate(&self) -> Result<()> {
        let t = self.decrement_tol;
        check("decrement_tol", t, t > 0.0, "must be finite and > 0")?;
        check("max_step", self.max_step, self.max_step > 0.0, "must be finite and > 0")?;
        let a = self.armijo;
        check("armijo", a, a > 0.0 && a < 0.5, "must lie in (0, 0.5)")?;
        let r = self.damping_start;
        check("damping_start", r, r > 0.0, "must be finite and > 0")?;
        let g = self.damping_growth;
        check("damping_growth", g, g > 1.0, "must be finite and > 1")?;
        let f = &self.forcing;
        let ok = f.eta_min > 0.0 && f.eta_min <= f.eta_max && f.eta_max < 1.0;
        check("forcing.eta_min", f.eta_min, ok, "need 0 < eta_min <= eta_max < 1")?;
        let gm = f.gamma;
        check("forcing.gamma", gm, gm > 0.0 && gm <= 1.0, "must lie in (0, 1]")?;
        let al = f.alpha;
        check("forcing.alpha", al, al > 1.0 && al <= 2.0, "must lie in (1, 2]")?;
        if self.max_iter == 0 {
            return Err(SolverError::invalid("max_iter", 0, "must be >= 1"));
        }
        Ok(())
    }
}
