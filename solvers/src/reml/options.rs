//! The options of the outer REML solve and their ranges.

use serde::{Deserialize, Serialize};

use crate::newton::NewtonOptions;
use crate::{Result, SolverError};

/// Options of [`reml`] (the fit) and [`evaluate_laml`] (V at one rho).
///
/// [`reml`]: super::reml
/// [`evaluate_laml`]: super::evaluate_laml
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RemlOptions {
    /// Inner Newton options (default: [`NewtonOptions::default`] with
    /// `decrement_tol` 1e-10, since the gradient formula assumes an exact
    /// optimum: beta_hat within 1e-5 standard errors).
    pub newton: NewtonOptions,
    /// Outer iteration cap (default 30).
    pub max_iter: usize,
    /// Converged when the projected `||dV/drho||_inf <= grad_tol`, an
    /// absolute tolerance in units of effective degrees of freedom
    /// (default 1e-4).
    pub grad_tol: f64,
    /// Converged when the outer Newton decrement `g^T B^{-1} g` (B the
    /// outer model Hessian, on the components free to move) is at most this
    /// (default 1e-3): rho is then within about 3% of its own standard
    /// error (`B^{-1/2}`, the curvature of V) from the optimum and V within
    /// 5e-4 of its minimum, whatever n or V's offset.
    pub decrement_tol: f64,
    /// Converged when a full outer Newton step has `||delta rho||_inf <=
    /// step_tol` (default 1e-4).
    pub step_tol: f64,
    /// Converged when V fell by at most this over the last
    /// [`STALL_STEPS`] outer Newton steps (default 1e-3; mgcv's score-change
    /// test, but absolute: V is a log-likelihood, and a change of 1e-3 in it
    /// is far below its sampling noise, which is of order 1 at every n).
    /// This is the stop where V is kinked, as it is where many tied rows
    /// cross a spline knot of the link together: the gradient jumps across
    /// the kink, so neither it nor the Newton decrement can become small,
    /// while V has stopped falling.
    ///
    /// [`STALL_STEPS`]: super::STALL_STEPS
    #[serde(default = "default_value_tol")]
    pub value_tol: f64,
    /// Half-width of the range of every rho around its reference start
    /// `rho_ref` (default 15: lambda within a factor e^15 = 3.3e6 of it).
    pub rho_range: f64,
    /// Largest `||delta rho||_inf` of one step (default 5).
    pub max_step: f64,
    /// Armijo constant of the outer line search (default 1e-4).
    pub armijo: f64,
    /// Most halvings per outer step (default 12).
    pub max_halvings: usize,
    /// Step of the forward-difference dH/drho, in standard errors: the
    /// norm of the step in `H + S` (default 1e-4). The forward difference's
    /// error is proportional to the step: on 800 BMS rows a step of 1e-2
    /// moved dV/drho by 3e-3, 1e-4 by 3e-5 (and the error shrinks with the
    /// standard errors as n grows), while the central difference at 1e-4
    /// showed no rounding noise.
    pub fd_step: f64,
    /// Cap on the Newton steps of the first inner solve (from beta0), in
    /// the objective's coefficient scales as `newton.max_step` (the smaller
    /// of the two holds); `None` (the default): `newton.max_step`. The
    /// start is where the quadratic model is least reliable: a model whose
    /// start lies far from its minimum by construction may set it shorter,
    /// so that its first step is not tried, and rejected, at lengths the
    /// model cannot take (`bms::fit::START_MAX_STEP`).
    #[serde(default)]
    pub start_max_step: Option<f64>,
}

impl Default for RemlOptions {
    fn default() -> Self {
        Self {
            newton: NewtonOptions {
                decrement_tol: 1e-10,
                ..NewtonOptions::default()
            },
            max_iter: 30,
            grad_tol: 1e-4,
            decrement_tol: 1e-3,
            step_tol: 1e-4,
            value_tol: default_value_tol(),
            rho_range: 15.0,
            max_step: 5.0,
            armijo: 1e-4,
            max_halvings: 12,
            fd_step: 1e-4,
            start_max_step: None,
        }
    }
}

fn default_value_tol() -> f64 {
    1e-3
}

impl RemlOptions {
    /// The options that reproduce mgcv's fits to 1e-5 and better: REML
    /// until the projected gradient of V is 1e-9 edf (every other outer
    /// stop made as tight), each inner Newton solve until its decrement is
    /// 1e-20 (beta within 1e-10 standard errors).
    pub fn tight() -> Self {
        let newton = NewtonOptions {
            decrement_tol: 1e-20,
            ..NewtonOptions::default()
        };
        Self {
            newton,
            grad_tol: 1e-9,
            decrement_tol: 1e-16,
            step_tol: 1e-10,
            value_tol: 1e-13,
            ..Self::default()
        }
    }

    /// Check every field's range (the inner options included).
    pub fn validate(&self) -> Result<()> {
        self.newton.validate()?;
        let pos = |field: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(SolverError::invalid(field, v, "must be finite and > 0"))
            }
        };
        pos("grad_tol", self.grad_tol)?;
        pos("decrement_tol", self.decrement_tol)?;
        pos("step_tol", self.step_tol)?;
        pos("value_tol", self.value_tol)?;
        if let Some(cap) = self.start_max_step {
            pos("start_max_step", cap)?;
        }
        pos("rho_range", self.rho_range)?;
        pos("max_step", self.max_step)?;
        pos("fd_step", self.fd_step)?;
        if !(self.armijo > 0.0 && self.armijo < 0.5) {
            return Err(SolverError::invalid("armijo", self.armijo, "must lie in (0, 0.5)"));
        }
        if self.max_iter == 0 {
            return Err(SolverError::invalid("max_iter", 0, "must be >= 1"));
        }
        Ok(())
    }
}
