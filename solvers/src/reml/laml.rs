//! V(rho) at one rho (an inner Newton solve, the factor of H + S and its
//! log-determinant), then dV/drho and the fixed-H outer Hessian for the
//! trials that are kept.

use serde::{Deserialize, Serialize};

use crate::logdet::PenalisedFactor;
use crate::newton::{newton_watched, Evaluation, Joins, NewtonReport, Objective};
use crate::observer::Watched;
use crate::operator::expect_len;
use crate::pcg_kernels::PcgKernels;
use crate::penalty::{Penalty, PenaltyBlock};
use crate::stats::laml_score;
use crate::{Result, SolverError};

use super::RemlOptions;

/// V(rho) and its derivatives at one rho, with the parts that make them up.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LamlEvaluation {
    /// rho = ln lambda.
    pub rho: Vec<f64>,
    /// V(rho).
    pub value: f64,
    /// dV/drho.
    pub gradient: Vec<f64>,
    /// d2V/drho2 with H held fixed (row-major m x m; see the module docs).
    pub outer_hessian: Vec<f64>,
    /// beta_hat(rho).
    pub beta: Vec<f64>,
    /// Penalised objective f(beta_hat).
    pub objective: f64,
    /// log|H + S_lambda|.
    pub logdet_penalised_hessian: f64,
    /// log|S_lambda|_+.
    pub log_pseudo_det_penalty: f64,
    /// d log|S_lambda|_+ / d rho per block (its rank where it overlaps no
    /// other block).
    #[serde(default)]
    pub log_pseudo_det_gradient: Vec<f64>,
    /// d2 log|S_lambda|_+ / d rho d rho, row-major m x m (zero where no
    /// blocks overlap).
    #[serde(default)]
    pub log_pseudo_det_hessian: Vec<f64>,
    /// tr((H + S)^{-1} S_k) per block (unscaled S_k).
    pub penalty_traces: Vec<f64>,
    /// The unpenalised Hessian H at beta_hat, dense row-major p x p.
    #[serde(skip)]
    pub hessian: Vec<f64>,
    /// The inner Newton solve.
    pub newton: NewtonReport,
}

/// V(rho) and dV/drho, solving for beta_hat from `beta0` (a warm start).
/// An inner solve that does not converge is an error: the gradient formula
/// holds only at the optimum.
pub fn evaluate_laml<B: PcgKernels>(
    backend: &B,
    objective: &dyn Objective<B>,
    penalty: &Penalty,
    rho: &[f64],
    beta0: &[f64],
    opts: &RemlOptions,
) -> Result<LamlEvaluation> {
    opts.validate()?;
    let watched = Watched {
        objective,
        observer: &(),
    };
    let trial = laml_value(backend, watched, penalty, rho, beta0, None, opts, None)?;
    if !trial.laml.newton.converged {
        return Err(not_converged(&trial.laml.newton));
    }
    Ok(with_gradient(watched, penalty, trial, opts)?.laml)
}

fn not_converged(report: &NewtonReport) -> SolverError {
    SolverError::NoConvergence {
        solver: "inner Newton (V(rho) and its gradient need its optimum)".into(),
        iterations: report.iterations.len(),
        termination: format!("{:?}", report.termination),
        history: report.iterations.iter().map(|it| it.grad_norm).collect(),
    }
}

/// V at one rho with what its gradient needs: the factor of H + S and the
/// objective's evaluation at beta_hat (where the next inner solve starts).
pub(super) struct Trial<'o, B: PcgKernels> {
    pub(super) laml: LamlEvaluation,
    factor: PenalisedFactor,
    lambda: Vec<f64>,
    pub(super) at_beta: Evaluation<'o, B>,
}

impl<'o, B: PcgKernels> Trial<'o, B> {
    /// The trial as a point without its gradient (where the outer loop
    /// stops before computing one).
    pub(super) fn into_point(self) -> Point<'o, B> {
        Point {
            laml: self.laml,
            factor: self.factor,
            at_beta: self.at_beta,
        }
    }
}

/// A point the outer loop can stand on: V (with its gradient once
/// [`with_gradient`] ran), the factor of H + S at its beta_hat (kept, so
/// that the fit's statistics need no second factorisation), and the
/// objective's evaluation there (where the next inner solve starts).
pub(super) struct Point<'o, B: PcgKernels> {
    pub(super) laml: LamlEvaluation,
    pub(super) factor: PenalisedFactor,
    pub(super) at_beta: Evaluation<'o, B>,
}

/// V(rho) (no gradient), its inner solve from `beta0` with the objective's
/// evaluation there when `start` has it. An inner solve that does not
/// converge still gives V where H + S is positive definite at its end
/// (`laml.newton.converged` says which). `joins` ends the inner solve
/// where it is bound for a known minimum ([`newton_watched`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn laml_value<'o, B: PcgKernels>(
    backend: &B,
    watched: Watched<'_, 'o, B>,
    penalty: &Penalty,
    rho: &[f64],
    beta0: &[f64],
    start: Option<Evaluation<'o, B>>,
    opts: &RemlOptions,
    joins: Option<Joins<'_>>,
) -> Result<Trial<'o, B>> {
    expect_len("rho", rho.len(), penalty.n_blocks())?;
    let lambda: Vec<f64> = rho.iter().map(|r| r.exp()).collect();
    penalty.check_lambda(&lambda)?;
    let fit = newton_watched(backend, watched, penalty, &lambda, beta0, start, &opts.newton, joins)?;
    let hessian = fit.hessian.to_dense()?;
    expect_len("dense Hessian", hessian.len(), fit.beta.len() * fit.beta.len())?;
    let s = penalty.dense(&lambda)?;
    let a: Vec<f64> = hessian.iter().zip(&s).map(|(h, s)| h + s).collect();
    let factor = PenalisedFactor::on(backend, fit.beta.len(), &a)?;
    let traces = factor.penalty_traces(penalty)?;
    let log_pdet = penalty.log_pseudo_det_derivatives(&lambda)?;
    let logdet = factor.logdet();
    let laml = LamlEvaluation {
        rho: rho.to_vec(),
        value: laml_score(fit.objective, logdet, log_pdet.value),
        gradient: Vec::new(),
        outer_hessian: Vec::new(),
        objective: fit.objective,
        logdet_penalised_hessian: logdet,
        log_pseudo_det_penalty: log_pdet.value,
        log_pseudo_det_gradient: log_pdet.gradient,
        log_pseudo_det_hessian: log_pdet.hessian,
        penalty_traces: traces,
        beta: fit.beta.clone(),
        hessian,
        newton: fit.report.clone(),
    };
    Ok(Trial {
        laml,
        factor,
        lambda,
        at_beta: fit.into_evaluation(),
    })
}

/// A trial completed with dV/drho and the fixed-H outer Hessian, as a
/// point with its factor and the evaluation at beta_hat.
pub(super) fn with_gradient<'o, B: PcgKernels>(
    watched: Watched<'_, 'o, B>,
    penalty: &Penalty,
    trial: Trial<'o, B>,
    opts: &RemlOptions,
) -> Result<Point<'o, B>> {
    let Trial {
        mut laml,
        factor,
        lambda,
        at_beta,
    } = trial;
    let parts = Derivatives::new(penalty, &lambda, &laml.beta, &factor)?;
    let tr_dh = parts.traces_dh(watched, &laml, &factor, opts.fd_step)?;
    let mut gradient = Vec::with_capacity(lambda.len());
    for (k, &log_det) in laml.log_pseudo_det_gradient.iter().enumerate() {
        let quad = parts.quad[k];
        gradient.push(0.5 * (quad + lambda[k] * laml.penalty_traces[k] + tr_dh[k] - log_det));
    }
    laml.outer_hessian = parts.outer_hessian(penalty, &lambda, &laml, &factor)?;
    laml.gradient = gradient;
    Ok(Point { laml, factor, at_beta })
}

/// The pieces shared by the gradient and the outer Hessian:
/// `u_k = lambda_k S_k beta` and `d_k = d beta_hat / d rho_k = -A^{-1} u_k`.
struct Derivatives {
    u: Vec<Vec<f64>>,
    d: Vec<Vec<f64>>,
    /// `beta^T u_k`.
    quad: Vec<f64>,
}

impl Derivatives {
    fn new(penalty: &Penalty, lambda: &[f64], beta: &[f64], factor: &PenalisedFactor) -> Result<Self> {
        let (mut u, mut d, mut quad) = (Vec::new(), Vec::new(), Vec::new());
        for (k, &l) in lambda.iter().enumerate() {
            let uk = embedded_product(penalty, k, l, beta);
            let dk: Vec<f64> = factor.solve(&uk, 1)?.iter().map(|v| -v).collect();
            quad.push(l * penalty.block_quadratic(k, beta));
            u.push(uk);
            d.push(dk);
        }
        Ok(Self { u, d, quad })
    }

    /// `tr(A^{-1} dH/drho_k)` for every block k, dH along `d_k` at a step
    /// of `fd_step` standard errors (`||t d_k||_A = fd_step`); 0 where
    /// `d_k` is 0. One call of the objective for all blocks.
    fn traces_dh<B: PcgKernels>(
        &self,
        watched: Watched<'_, '_, B>,
        laml: &LamlEvaluation,
        factor: &PenalisedFactor,
        fd_step: f64,
    ) -> Result<Vec<f64>> {
        let norms: Vec<f64> = (0..self.d.len())
            .map(|k| (-dot(&self.u[k], &self.d[k])).max(0.0).sqrt())
            .collect();
        let moving: Vec<usize> = (0..norms.len()).filter(|&k| norms[k] > 0.0).collect();
        let mut traces = vec![0.0; norms.len()];
        if moving.is_empty() {
            return Ok(traces);
        }
        let directions: Vec<&[f64]> = moving.iter().map(|&k| self.d[k].as_slice()).collect();
        let steps: Vec<f64> = moving.iter().map(|&k| fd_step / norms[k]).collect();
        let inv = factor.inverse()?;
        let got = watched.hessian_derivative_traces(&laml.beta, &laml.hessian, inv, &directions, &steps)?;
        expect_len("hessian_derivative_traces", got.len(), moving.len())?;
        for (&k, t) in moving.iter().zip(got) {
            traces[k] = t;
        }
        Ok(traces)
    }

    /// d2V/drho_k drho_l with H fixed:
    /// `delta_kl (beta^T u_k + lambda_k tr(A^{-1} S_k)) / 2 + u_k^T d_l
    ///  - lambda_k lambda_l tr(A^{-1} S_l A^{-1} S_k) / 2 - L_kl / 2`
    ///
    /// with `L_kl = d2 log|S|_+ / drho_k drho_l`, zero where no blocks overlap.
    fn outer_hessian(
        &self,
        penalty: &Penalty,
        lambda: &[f64],
        laml: &LamlEvaluation,
        factor: &PenalisedFactor,
    ) -> Result<Vec<f64>> {
        let (traces, log_det) = (&laml.penalty_traces, &laml.log_pseudo_det_hessian);
        let m = lambda.len();
        let p = factor.dim();
        let inv = factor.inverse()?;
        // M_k = A^{-1} S_k restricted to block k's columns (p x dim_k).
        let blocks = penalty.blocks();
        let ms: Vec<Vec<f64>> = blocks.iter().map(|b| inverse_times_block(inv, p, b)).collect();
        let mut h = vec![0.0; m * m];
        for k in 0..m {
            for l in 0..m {
                let (bk, bl) = (&blocks[k], &blocks[l]);
                let mut tr = 0.0;
                for i in bk.range() {
                    for j in bl.range() {
                        tr += ms[l][i * bl.dim + (j - bl.start)] * ms[k][j * bk.dim + (i - bk.start)];
                    }
                }
                let mut v = dot(&self.u[k], &self.d[l]) - 0.5 * lambda[k] * lambda[l] * tr - 0.5 * log_det[k * m + l];
                if k == l {
                    v += 0.5 * (self.quad[k] + lambda[k] * traces[k]);
                }
                h[k * m + l] = v;
            }
        }
        // Symmetric in exact arithmetic; make it so in floating point.
        for k in 0..m {
            for l in 0..k {
                let s = 0.5 * (h[k * m + l] + h[l * m + k]);
                h[k * m + l] = s;
                h[l * m + k] = s;
            }
        }
        Ok(h)
    }
}

/// `lambda S_k beta` embedded in a p-vector ([`Penalty::block_product`]).
pub(super) fn embedded_product(penalty: &Penalty, k: usize, lambda: f64, beta: &[f64]) -> Vec<f64> {
    let mut u = vec![0.0; beta.len()];
    let range = penalty.blocks()[k].range();
    penalty.block_product(k, lambda, beta, &mut u[range]);
    u
}

/// `A^{-1}[:, block] S_k`, row-major p x dim.
fn inverse_times_block(inv: &[f64], p: usize, b: &PenaltyBlock) -> Vec<f64> {
    let mut out = vec![0.0; p * b.dim];
    for i in 0..p {
        for c in 0..b.dim {
            out[i * b.dim + c] = (0..b.dim).map(|t| inv[i * p + b.start + t] * b.s[t * b.dim + c]).sum();
        }
    }
    out
}

pub(super) fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}
