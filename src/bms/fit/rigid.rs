//! The rigid model (no score warp, no link deviation) in closed form, the
//! start of every flexible fit.
//!
//! With H = L = 0 the calibration has the closed form
//! `a = q sqrt(1 + (s_f b)^2) / s_f`, so `eta(z) = q c + s_f b z` with
//! `c = sqrt(1 + s_f^2 b^2)`: a probit model, nonlinear in (q, b), that needs
//! no quadrature. Its derivatives in theta = (q, b):
//!
//! ```text
//! eta_q = c, eta_b = q s_f^2 b / c + s_f z,
//! eta_qq = 0, eta_qb = s_f^2 b / c, eta_bb = q s_f^2 / c^3,
//! ```
//!
//! and the row's gradient and Hessian follow the probit layer of the full
//! model (`g = A e`, `H = B e e^T + A e2`). Its fit is the flexible model's
//! fit at beta_h = beta_w = 0: cheap, and close to the flexible optimum.

use matfree_solvers::newton::{newton, NewtonOptions, NewtonReport, Objective};
use matfree_solvers::{CpuBackend, Penalty};

use crate::bms::numerics::probit::log_ndtr_mills_curvature;
use crate::bms::{BmsData, BmsModel};
use crate::row_objective::{RowEvaluator, RowObjective};
use crate::Result;

/// The rigid model's rows on a data set (theta = (q, b)).
pub struct RigidRows<'a> {
    data: &'a BmsData,
    s_f: f64,
}

/// The rigid model's negative log-likelihood on a data set (CPU).
pub type RigidObjective<'a> = RowObjective<RigidRows<'a>>;

impl RowEvaluator for RigidRows<'_> {
    fn row(&self, i: usize, theta: &[f64], grad: &mut [f64], hess: &mut [f64]) -> f64 {
        let (d, y, w) = (self.data.z[i], self.data.y[i], self.data.weights[i]);
        let (neglog, g, h) = rigid_row(theta[0], theta[1], d, y, w, self.s_f);
        grad.copy_from_slice(&g);
        hess.copy_from_slice(&h);
        neglog
    }
}

/// The rigid predictor `eta = q c + s_f b z` and `c = sqrt(1 + s_f^2 b^2)`.
fn rigid_eta(q: f64, b: f64, z: f64, s_f: f64) -> (f64, f64) {
    let c = (1.0 + s_f * s_f * b * b).sqrt();
    (q * c + s_f * b * z, c)
}

/// One row's neglog, gradient (2) and Hessian (2 x 2) at theta = (q, b).
pub fn rigid_row(q: f64, b: f64, z: f64, y: f64, w: f64, s_f: f64) -> (f64, [f64; 2], [f64; 4]) {
    let (eta, c) = rigid_eta(q, b, z, s_f);
    let e = [c, q * s_f * s_f * b / c + s_f * z];
    let (e_qb, e_bb) = (s_f * s_f * b / c, q * s_f * s_f / (c * c * c));
    let s = 2.0 * y - 1.0;
    let (log_cdf, lambda, curv) = log_ndtr_mills_curvature(s * eta);
    let (a, bb) = (-w * s * lambda, w * curv);
    let g = [a * e[0], a * e[1]];
    let h01 = bb * e[0] * e[1] + a * e_qb;
    let h = [bb * e[0] * e[0], h01, h01, bb * e[1] * e[1] + a * e_bb];
    (-w * log_cdf, g, h)
}

/// The rigid part of `model` (its designs and frailty scale) on `data`.
pub fn rigid_objective<'a>(model: &BmsModel, data: &'a BmsData) -> Result<RigidObjective<'a>> {
    let b = model.blocks();
    let layout = crate::bms::standard_layout(b.p_m, b.p_g, 0, 0)?;
    let rows = RigidRows {
        data,
        s_f: model.bases().s_f,
    };
    RowObjective::new(layout, data.designs.clone(), rows)
}

/// Rows whose margin `s eta` exceeds [`EXTREME_ETA`] at `beta`.
fn extreme_rows(objective: &RigidObjective, beta: &[f64]) -> usize {
    let rows = objective.evaluator();
    (0..rows.data.n())
        .filter(|&i| {
            let theta = objective.theta(beta, i);
            let eta = rigid_eta(theta[0], theta[1], rows.data.z[i], rows.s_f).0;
            (2.0 * rows.data.y[i] - 1.0) * eta > EXTREME_ETA
        })
        .count()
}

/// The rigid fit used as a start: the flexible model's beta with
/// (beta_m, beta_g) from the rigid fit and zero warp and link coefficients.
#[derive(Clone, Debug)]
pub struct RigidStart {
    /// The start for the flexible model (length p_total).
    pub beta: Vec<f64>,
    /// The rigid Newton solve.
    pub report: NewtonReport,
    /// Rows the rigid fit used (every row, or an even subsample of at most
    /// `max_rows`).
    pub rows: usize,
    /// Rows the rigid fit gives its own label with probability numerically
    /// 1 (`s eta > EXTREME_ETA`): R's "fitted probabilities numerically 0
    /// or 1", the mark of (quasi-)separation.
    pub extreme_rows: usize,
}

/// The margin `s eta` beyond which a probit probability is 1 to within
/// 1e-15 (R's glm warns at the same point).
pub const EXTREME_ETA: f64 = 8.0;

/// Fit the rigid model (unpenalised Newton from zero) on `data`, or on an
/// evenly strided subsample of `max_rows` rows when it has more: a start
/// need not use every row. A rigid fit that does not converge still gives
/// its last point (its report says so).
pub fn rigid_start(model: &BmsModel, data: &BmsData, max_rows: usize) -> Result<RigidStart> {
    let sub;
    let data = if data.n() > max_rows.max(1) {
        sub = data.strided(max_rows)?;
        &sub
    } else {
        data
    };
    let objective = rigid_objective(model, data)?;
    let p = objective.dim();
    let penalty = Penalty::new(p, Vec::new())?;
    let opts = NewtonOptions {
        max_step: 2.0,
        max_iter: 50,
        ..NewtonOptions::default()
    };
    let fit = newton(&CpuBackend::new(), &objective, &penalty, &[], &vec![0.0; p], &opts)?;
    let extreme_rows = extreme_rows(&objective, &fit.beta);
    let mut beta = fit.beta;
    beta.resize(model.layout().p_total(), 0.0);
    Ok(RigidStart {
        beta,
        report: fit.report,
        rows: data.n(),
        extreme_rows,
    })
}
