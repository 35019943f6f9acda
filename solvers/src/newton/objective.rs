//! What Newton minimises: the objective trait, its evaluation at one beta,
//! the cost estimates that steer the step solver, and the finite-difference
//! Hessian derivative REML falls back on.

use std::rc::Rc;

use serde::{Deserialize, Serialize};

use crate::backend::Backend;
use crate::operator::{expect_len, LinearOperator};
use crate::{Result, SolverError};

use super::{check, inf_norm};

/// The unpenalised objective at one beta, as returned by [`Objective::evaluate`].
pub struct Evaluation<'a, B: Backend> {
    /// neglog(beta).
    pub value: f64,
    /// Its gradient, on the host.
    pub gradient: Vec<f64>,
    /// Its Hessian as an operator on the backend (without the penalty).
    pub hessian: Rc<dyn LinearOperator<B> + 'a>,
}

// By hand: a derived Clone would ask `B: Clone`. The Hessian is shared, not
// copied, so a kept evaluation can start several inner solves.
impl<B: Backend> Clone for Evaluation<'_, B> {
    fn clone(&self) -> Self {
        Self {
            value: self.value,
            gradient: self.gradient.clone(),
            hessian: Rc::clone(&self.hessian),
        }
    }
}

/// Cost estimates in flops that steer [`StepSolver::Auto`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostEstimate {
    /// One Hessian-vector product.
    pub hvp: f64,
    /// Assembling the dense Hessian (`to_dense`).
    pub dense_assembly: f64,
}

impl CostEstimate {
    /// The default: a dense `p x p` Hessian, so an HVP costs `2 p^2` and
    /// assembly costs `p` HVPs.
    pub fn dense(p: usize) -> Self {
        let p = p as f64;
        Self {
            hvp: 2.0 * p * p,
            dense_assembly: 2.0 * p * p * p,
        }
    }

    /// A dense Newton step at dimension `p`: assembly, a Cholesky factor
    /// and its two triangular solves.
    pub fn dense_step(&self, p: usize) -> f64 {
        let p = p as f64;
        self.dense_assembly + p * p * p / 3.0 + 2.0 * p * p
    }

    /// A PCG Newton step of `iters` iterations at dimension `p`: each an
    /// HVP, the penalty's gemv and about ten vector operations.
    pub fn pcg_step(&self, p: usize, iters: usize) -> f64 {
        let p = p as f64;
        iters.max(1) as f64 * (self.hvp + 2.0 * p * p + 10.0 * p)
    }

    /// Whether [`StepSolver::Auto`] takes the dense step however few PCG
    /// iterations a step would need: then a Hessian is only ever used
    /// through its dense matrix (steps, log-determinants, traces), and an
    /// objective may form that matrix at once and free what it came from.
    pub fn always_dense(&self, p: usize) -> bool {
        self.dense_step(p) <= self.pcg_step(p, 1)
    }
}

/// A twice-differentiable negative log-likelihood (or any smooth loss).
///
/// The driver evaluates it at host betas; the Hessian it returns is an
/// operator on the backend, so it may stay matrix-free on a device. REML
/// evaluates it at perturbed betas to differentiate the Hessian.
pub trait Objective<B: Backend> {
    /// Number of coefficients p.
    fn dim(&self) -> usize;
    /// Value, gradient and Hessian at `beta`. `Ok(None)` (or a non-finite
    /// value or gradient) means beta is outside the objective's domain: the
    /// driver then shrinks its step instead of failing.
    fn evaluate(&self, beta: &[f64]) -> Result<Option<Evaluation<'_, B>>>;
    /// The value alone, for line-search trials; override when it is cheaper
    /// than a full evaluation (and say so in [`Objective::cheap_value`]).
    fn value(&self, beta: &[f64]) -> Result<Option<f64>> {
        Ok(self.evaluate(beta)?.map(|e| e.value))
    }
    /// Whether [`Objective::value`] costs much less than
    /// [`Objective::evaluate`]. When it does not (the default), line-search
    /// trials are full evaluations and the accepted one is kept, so the next
    /// iteration does not evaluate the same beta again.
    fn cheap_value(&self) -> bool {
        false
    }
    /// Cost estimates for the step-solver choice (default: dense `p x p`).
    fn cost(&self) -> CostEstimate {
        CostEstimate::dense(self.dim())
    }
    /// How far one unit of each coefficient moves the model (for a design
    /// coefficient, the typical size of its column), positive and finite;
    /// [`NewtonOptions::max_step`] caps steps in these units, so the cap
    /// does not depend on the units of a covariate. `None` (the default)
    /// means all ones.
    fn coefficient_scales(&self) -> Option<Vec<f64>> {
        None
    }
    /// Whether the objective is convex in beta everywhere (default false):
    /// the penalised objective then has one minimum at every lambda, so
    /// REML does not solve again from the start to look for a lower one
    /// (and cannot end in `SeveralMinima`). A GLM whose negative
    /// log-likelihood is convex in its linear predictor is.
    fn convex(&self) -> bool {
        false
    }
    /// Whether [`Objective::hessian_derivative`] is overridden with an
    /// exact derivative (a wrapper forwards it only then, and otherwise
    /// differentiates through its own `evaluate`).
    fn exact_hessian_derivative(&self) -> bool {
        false
    }
    /// The derivative of the Hessian at `beta` along `direction`, dense
    /// row-major `p x p` (REML needs it); `hessian` is the dense Hessian at
    /// `beta` and `step` a step length along `direction` that the caller
    /// judged small (REML takes a hundredth of a standard error). The
    /// default is the forward difference [`fd_hessian_derivative`]: one
    /// evaluation. Override it with an exact contraction of third
    /// derivatives where the objective has one.
    fn hessian_derivative(&self, beta: &[f64], hessian: &[f64], direction: &[f64], step: f64) -> Result<Vec<f64>> {
        fd_hessian_derivative(self, beta, hessian, direction, step)
    }
    /// `tr(inverse dH_k)` for each direction d_k, dH_k the derivative of
    /// the Hessian at `beta` along d_k (`steps[k]` its difference step, as
    /// for [`Objective::hessian_derivative`]); `inverse` is `(H + S)^{-1}`,
    /// dense row-major `p x p`. REML's gradient needs only these traces.
    /// The default forms each `dH_k` ([`Objective::hessian_derivative`]);
    /// override it where the traces cost less than the matrices (a row
    /// model's: `sum_i tr(P_i A^{-1} P_i^T dH_i)`, one pass over the rows
    /// for every direction).
    fn hessian_derivative_traces(
        &self,
        beta: &[f64],
        hessian: &[f64],
        inverse: &[f64],
        directions: &[&[f64]],
        steps: &[f64],
    ) -> Result<Vec<f64>> {
        traces_through_dense(self, beta, hessian, inverse, directions, steps)
    }
}

/// [`Objective::hessian_derivative_traces`] through each dense
/// [`Objective::hessian_derivative`] (the default, and a fallback).
pub fn traces_through_dense<B: Backend, O: Objective<B> + ?Sized>(
    objective: &O,
    beta: &[f64],
    hessian: &[f64],
    inverse: &[f64],
    directions: &[&[f64]],
    steps: &[f64],
) -> Result<Vec<f64>> {
    expect_len("steps", steps.len(), directions.len())?;
    let each = directions.iter().zip(steps).map(|(d, &step)| {
        let dh = objective.hessian_derivative(beta, hessian, d, step)?;
        trace_product(inverse, &dh, objective.dim())
    });
    each.collect()
}

/// `tr(a b)` for row-major `p x p` matrices.
pub fn trace_product(a: &[f64], b: &[f64], p: usize) -> Result<f64> {
    expect_len("trace_product a", a.len(), p * p)?;
    expect_len("trace_product b", b.len(), p * p)?;
    Ok((0..p)
        .map(|i| (0..p).map(|j| a[i * p + j] * b[j * p + i]).sum::<f64>())
        .sum())
}

/// `(H(beta + t d) - H(beta)) / t` through `to_dense`, with `H(beta)` given
/// as `hessian`: one evaluation. Error O(t |d|); a point outside the
/// objective's domain is an error naming the step.
pub fn fd_hessian_derivative<B: Backend, O: Objective<B> + ?Sized>(
    objective: &O,
    beta: &[f64],
    hessian: &[f64],
    direction: &[f64],
    step: f64,
) -> Result<Vec<f64>> {
    let p = objective.dim();
    expect_len("beta", beta.len(), p)?;
    expect_len("hessian", hessian.len(), p * p)?;
    expect_len("direction", direction.len(), p)?;
    check("step", step, step > 0.0, "must be finite and > 0")?;
    if inf_norm(direction) == 0.0 {
        return Ok(vec![0.0; p * p]);
    }
    let b: Vec<f64> = beta.iter().zip(direction).map(|(b, d)| b + step * d).collect();
    let Some(ev) = objective.evaluate(&b)? else {
        return Err(SolverError::numerical(
            "hessian_derivative step",
            step,
            "beta + step * direction must lie in the objective's domain",
        ));
    };
    let hp = ev.hessian.to_dense()?;
    expect_len("dense Hessian", hp.len(), p * p)?;
    Ok(hp.iter().zip(hessian).map(|(a, b)| (a - b) / step).collect())
}
