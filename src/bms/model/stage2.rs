//! Stage 2 on the CPU: per-row neglog, gradient (r) and r x r Hessian from
//! the input bundle, with the reference kernel's math (rows in parallel).
//!
//! Per cell, with kappa = 1/(2 pi), `T_n = kappa sum_e C_e m_{e+n}`,
//! `D(R) = kappa sum_k R_k m_k` and `Q(R, S) = sum_{p,q} R_p S_q T_{p+q}`:
//! `F_a += D(A)`, `F_aa += D(AA) - Q(A, A)`, `F_u += D(R_u)`,
//! `F_au += D(AR_u) - Q(A, R_u)`, `F_uv += D(S_uv) - Q(R_u, R_v)` (u, v >= 1).
//! Then the q-row override (`F_q = -mu_1`, `F_qq = -mu_2`, `F_qv = F_aq = 0`),
//! the implicit function theorem for a_u and a_uv, the observed jets and the
//! probit layer.

use std::f64::consts::PI;

use rayon::prelude::*;

use crate::bms::model::bundle::{RowKernelInputs, COEFF4};
use crate::bms::model::calibration::cell_d;
use crate::bms::model::cells::MOMENTS;
use crate::bms::numerics::probit::log_ndtr_mills_curvature;
use crate::dispatch::by_cpu;
use crate::{Error, Result};

/// Per-row outputs of Stage 2.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RowKernelOutputs {
    /// neglog_i, length n.
    pub neglog: Vec<f64>,
    /// Gradients in theta, n x r row-major.
    pub grad: Vec<f64>,
    /// Hessians in theta, n x r x r row-major, symmetric.
    pub hess: Vec<f64>,
}

/// The calibration derivatives of one row, summed over its cells: F_a,
/// F_aa, F_u and F_au (r) and F_uv (r x r, upper triangle read).
pub(crate) struct RowSums {
    pub f_a: f64,
    pub f_aa: f64,
    pub f_u: Vec<f64>,
    pub f_au: Vec<f64>,
    pub f_uv: Vec<f64>,
}

/// Q(R, S) = sum_{p,q} R_p S_q T_{p+q}.
fn q_of(r: &[f64], s: &[f64], t: &[f64; 7]) -> f64 {
    let mut acc = 0.0;
    for p in 0..4 {
        for q in 0..4 {
            acc += r[p] * s[q] * t[p + q];
        }
    }
    acc
}

fn slice4(v: &[f64], index: usize) -> &[f64] {
    &v[index * COEFF4..(index + 1) * COEFF4]
}

fn cell_sums(inp: &RowKernelInputs, i: usize) -> RowSums {
    let (r, p_h) = (inp.r, inp.p_h);
    let mut s = RowSums {
        f_a: 0.0,
        f_aa: 0.0,
        f_u: vec![0.0; r],
        f_au: vec![0.0; r],
        f_uv: vec![0.0; r * r],
    };
    for c in inp.row_cells(i) {
        let eta = [inp.cell_c0[c], inp.cell_c1[c], inp.cell_c2[c], inp.cell_c3[c]];
        let m = &inp.cell_moments[c * MOMENTS..(c + 1) * MOMENTS];
        let mut t = [0.0; 7];
        for (n, tn) in t.iter_mut().enumerate() {
            *tn = (0..4).map(|e| eta[e] * m[e + n]).sum::<f64>() / (2.0 * PI);
        }
        let d = |v: &[f64]| cell_d(&[v[0], v[1], v[2], v[3]], m);
        let a = slice4(&inp.cell_a, c);
        s.f_a += d(a);
        s.f_aa += d(slice4(&inp.cell_aa, c)) - q_of(a, a, &t);
        let r_u = |u: usize| slice4(&inp.cell_r, c * (r - 1) + u - 1);
        for u in 1..r {
            s.f_u[u] += d(r_u(u));
            s.f_au[u] += d(slice4(&inp.cell_ar, c * (r - 1) + u - 1)) - q_of(a, r_u(u), &t);
            for v in u..r {
                let explicit = match (u, v) {
                    (1, 1) => d(slice4(&inp.cell_sbb, c)),
                    (1, v) if v < 2 + p_h => d(slice4(&inp.cell_sbh, c * p_h + v - 2)),
                    (1, v) => d(slice4(&inp.cell_sbw, c * inp.p_w + v - 2 - p_h)),
                    _ => 0.0,
                };
                s.f_uv[u * r + v] += explicit - q_of(r_u(u), r_u(v), &t);
            }
        }
    }
    s
}

/// F_a and F_u (u >= 1; F_0 = -mu_1, the q-row override) of one row: the
/// first-order half of [`cell_sums`], all a prediction needs.
fn first_order_sums(inp: &RowKernelInputs, i: usize) -> (f64, Vec<f64>) {
    let r = inp.r;
    let (mut f_a, mut f_u) = (0.0, vec![0.0; r]);
    for c in inp.row_cells(i) {
        let m = &inp.cell_moments[c * MOMENTS..(c + 1) * MOMENTS];
        let d = |v: &[f64]| cell_d(&[v[0], v[1], v[2], v[3]], m);
        f_a += d(slice4(&inp.cell_a, c));
        for (u, f) in f_u.iter_mut().enumerate().skip(1) {
            *f += d(slice4(&inp.cell_r, c * (r - 1) + u - 1));
        }
    }
    f_u[0] = -inp.mu_1[i];
    (f_a, f_u)
}

/// One row's d eta(z_obs) / d theta_u = chi a_u + rho_u, with a_u = -F_u / F_a
/// (the observed jet e_u of the gradient, before the probit layer).
fn row_eta_gradient(inp: &RowKernelInputs, i: usize) -> std::result::Result<Vec<f64>, String> {
    let r = inp.r;
    let (f_a, f_u) = first_order_sums(inp, i);
    if !(f_a.is_finite() && f_a > 0.0) {
        return Err(format!("F_a = {f_a}: must be finite and > 0"));
    }
    let (chi, rho) = (inp.chi_obs[i], &inp.rho_u[i * r..(i + 1) * r]);
    let e_u: Vec<f64> = f_u.iter().zip(rho).map(|(f, rho)| chi * (-f / f_a) + rho).collect();
    if e_u.iter().any(|e| !e.is_finite()) {
        return Err("non-finite gradient of eta".into());
    }
    Ok(e_u)
}

/// The gradient of every row's eta(z_obs) in its theta (n x r, row-major),
/// through the calibrated intercept: what prediction's delta method needs.
/// The first rejected row (lowest index) is the error.
pub fn eta_gradients(inp: &RowKernelInputs) -> Result<Vec<f64>> {
    inp.validate()?;
    let rows: Vec<_> = (0..inp.n_rows)
        .into_par_iter()
        .map(|i| row_eta_gradient(inp, i))
        .collect();
    let mut out = Vec::with_capacity(inp.n_rows * inp.r);
    for (i, res) in rows.into_iter().enumerate() {
        out.extend(res.map_err(|reason| Error::RowRejected { row: i, reason })?);
    }
    Ok(out)
}

/// A row's observed point as Stage 2 reads it: eta(z_obs) and its jets in
/// a (chi, xi) and theta (rho, tau, r_uv), the label and the weight.
pub(crate) struct ObservedRow<'a> {
    pub e: f64,
    pub chi: f64,
    pub xi: f64,
    pub rho: &'a [f64],
    pub tau: &'a [f64],
    pub r_uv: &'a [f64],
    pub y: f64,
    pub weights: f64,
}

/// One row's (neglog, gradient, Hessian); Err(reason) when rejected.
fn row(inp: &RowKernelInputs, i: usize) -> std::result::Result<(f64, Vec<f64>, Vec<f64>), String> {
    let r = inp.r;
    let mut s = cell_sums(inp, i);
    // q enters F only through -Phi(q).
    s.f_u[0] = -inp.mu_1[i];
    s.f_au[0] = 0.0;
    s.f_uv[0] = -inp.mu_2[i];
    let obs = ObservedRow {
        e: inp.e_obs[i],
        chi: inp.chi_obs[i],
        xi: inp.xi_obs[i],
        rho: &inp.rho_u[i * r..(i + 1) * r],
        tau: &inp.tau_u[i * r..(i + 1) * r],
        r_uv: &inp.r_uv[i * r * r..(i + 1) * r * r],
        y: inp.y[i],
        weights: inp.weights[i],
    };
    let (mut grad, mut hess) = (vec![0.0; r], vec![0.0; r * r]);
    let neglog = finish_row(&s, &obs, &mut grad, &mut hess)?;
    Ok((neglog, grad, hess))
}

by_cpu! {
    /// The implicit function theorem for a_u and a_uv from the summed
    /// calibration derivatives (q row overridden), then the observed jets
    /// and the probit layer: the row's neglog, with its gradient and
    /// Hessian written into `grad` (r) and `hess` (r x r). Err(reason) when
    /// rejected. On the CPU's widest vectors (`dispatch`), the same bits on
    /// any.
    pub(crate) fn finish_row / finish_row_avx2 / finish_row_avx512(
        s: &RowSums,
        obs: &ObservedRow,
        grad: &mut [f64],
        hess: &mut [f64],
    ) -> std::result::Result<f64, String> = finish_row_body
}

#[inline(always)]
fn finish_row_body(
    s: &RowSums,
    obs: &ObservedRow,
    grad: &mut [f64],
    hess: &mut [f64],
) -> std::result::Result<f64, String> {
    let r = grad.len();
    if !(s.f_a.is_finite() && s.f_a > 0.0) {
        return Err(format!("F_a = {}: must be finite and > 0", s.f_a));
    }
    let (chi, xi, tau, rho) = (obs.chi, obs.xi, obs.tau, obs.rho);
    let sign = 2.0 * obs.y - 1.0;
    let (log_cdf, lambda, curvature) = log_ndtr_mills_curvature(sign * obs.e);
    let (big_a, big_b) = (-obs.weights * sign * lambda, obs.weights * curvature);
    // a_u lives in `grad` until the gradient replaces it, and e_u = chi
    // a_u + rho_u is formed where it is used: no buffers a row. Each
    // Hessian row is written left to right from its diagonal (a loop the
    // compiler vectorises), then mirrored below it.
    for (a, f) in grad.iter_mut().zip(&s.f_u) {
        *a = -f / s.f_a;
    }
    let a_u = &*grad;
    for u in 0..r {
        let (au, fau, tu) = (a_u[u], s.f_au[u], tau[u]);
        let eu = chi * au + rho[u];
        let row = u * r;
        for v in u..r {
            let uv = row + v;
            let f = s.f_uv[uv] + s.f_au[v] * au + fau * a_u[v] + s.f_aa * au * a_u[v];
            let a_uv = -f / s.f_a;
            let e_uv = chi * a_uv + xi * au * a_u[v] + tu * a_u[v] + au * tau[v] + obs.r_uv[uv];
            hess[uv] = big_b * eu * (chi * a_u[v] + rho[v]) + big_a * e_uv;
        }
    }
    for u in 0..r {
        for v in u + 1..r {
            hess[v * r + u] = hess[u * r + v];
        }
    }
    for (g, rho) in grad.iter_mut().zip(rho) {
        *g = big_a * (chi * *g + rho);
    }
    let neglog = -obs.weights * log_cdf;
    let finite = neglog.is_finite() && grad.iter().chain(hess.iter()).all(|v| v.is_finite());
    if !finite {
        return Err("non-finite neglog, gradient or Hessian".into());
    }
    Ok(neglog)
}

/// Validate the bundle and evaluate every row in parallel. The first
/// rejected row (lowest index) is reported as [`Error::RowRejected`].
pub fn evaluate_rows(inp: &RowKernelInputs) -> Result<RowKernelOutputs> {
    inp.validate()?;
    let rows: Vec<_> = (0..inp.n_rows).into_par_iter().map(|i| row(inp, i)).collect();
    let mut out = RowKernelOutputs::default();
    for (i, res) in rows.into_iter().enumerate() {
        let (neglog, grad, hess) = res.map_err(|reason| Error::RowRejected { row: i, reason })?;
        out.neglog.push(neglog);
        out.grad.extend(grad);
        out.hess.extend(hess);
    }
    Ok(out)
}
