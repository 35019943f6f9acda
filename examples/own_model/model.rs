//! A user's own model on matfree: penalised logistic regression
//! y ~ x1 + s(x2), s a P-spline (10 cubic B-splines on evenly spaced knots,
//! a second-difference penalty, the sum-to-zero constraint absorbed), its
//! smoothing parameter chosen by REML. Shared by `examples/own_model.rs` and
//! `tests/own_model.rs`.
// Each includer uses part of it (the test reads the constraint, the example does not).
#![allow(dead_code)]

use std::error::Error;
use std::sync::Arc;

use matfree::solvers::reml::{reml, RemlFit, RemlOptions};
use matfree::solvers::{Constraint, Objective, PcgKernels, Penalty, PenaltyBlock};
use matfree::{Designs, Layout, PSpline, RowEvaluator, RowObjective};

/// The spline's basis dimension (before the constraint).
pub const K: usize = 10;

/// The model: row i's Bernoulli negative log-likelihood in its one
/// coordinate eta_i, with the labels y.
pub struct Logit(pub Vec<f64>);

/// mu = 1 / (1 + e^-eta) and mu (1 - mu), without cancellation at large |eta|.
fn logistic(eta: f64) -> (f64, f64) {
    let e = (-eta.abs()).exp();
    (
        if eta >= 0.0 { 1.0 } else { e } / (1.0 + e),
        e / ((1.0 + e) * (1.0 + e)),
    )
}

impl RowEvaluator for Logit {
    fn row(&self, i: usize, eta: &[f64], grad: &mut [f64], hess: &mut [f64]) -> f64 {
        let (mu, w) = logistic(eta[0]);
        (grad[0], hess[0]) = (mu - self.0[i], w);
        eta[0].max(0.0) + (-eta[0].abs()).exp().ln_1p() - self.0[i] * eta[0] // log(1 + e^eta) - y eta
    }
    fn has_hessian_derivative(&self) -> bool {
        true // REML's gradient is then exact, as mgcv's is
    }
    fn row_hessian_derivative(&self, _: usize, eta: &[f64], d: &[f64], out: &mut [f64]) {
        let (mu, w) = logistic(eta[0]);
        out[0] = w * (1.0 - 2.0 * mu) * d[0];
    }
}

/// One data row.
#[derive(serde::Deserialize)]
pub struct Row {
    pub x1: f64,
    pub x2: f64,
    pub y: f64,
}

/// The columns x1, x2, y of `path`, y 0 or 1 (the designs check the rest).
pub fn read(path: &str) -> Result<Vec<Row>, Box<dyn Error>> {
    let rows: Vec<Row> = csv::Reader::from_path(path)?.deserialize().collect::<Result<_, _>>()?;
    match rows.iter().position(|r| r.y != 0.0 && r.y != 1.0) {
        Some(i) => Err(format!("{path}: data row {}, column y: {} must be 0 or 1", i + 1, rows[i].y).into()),
        None => Ok(rows),
    }
}

/// The model on one data set: its objective, penalty and the smooth's
/// constraint.
pub struct Problem {
    pub objective: RowObjective<Logit>,
    pub penalty: Penalty,
    pub constraint: Constraint,
    /// Unpenalised dimensions, p - rank(S): mgcv's REML score is
    /// matfree's V less `null_space_dim ln(2 pi) / 2`.
    pub null_space_dim: usize,
}

/// The options the fit runs with: REML until the projected gradient of V is
/// 1e-9 edf (every other outer stop made as tight), each inner Newton solve
/// until its decrement is 1e-20 (beta within 1e-10 standard errors).
pub fn options() -> RemlOptions {
    RemlOptions::tight()
}

/// The model on the rows of `path`.
pub fn problem(path: &str) -> Result<Problem, Box<dyn Error>> {
    let rows = read(path)?;
    let (n, x2): (usize, Vec<f64>) = (rows.len(), rows.iter().map(|r| r.x2).collect());
    let spline = PSpline::over(&x2, K)?;
    let basis = spline.design(&x2)?;
    let constraint = Constraint::sum_to_zero(&basis, n, K)?; // s(x2) sums to zero over the data
    let b = constraint.apply_to_design(&basis, n)?;
    let p = K + 1; // the intercept, x1 and the K - 1 constrained spline columns
    let row = |i: usize| {
        [1.0, rows[i].x1]
            .into_iter()
            .chain(b[i * (K - 1)..(i + 1) * (K - 1)].to_vec())
    };
    let x = (0..n).flat_map(row).collect();
    let s = constraint.apply_to_penalty(&spline.penalty(2)?)?;
    let penalty = Penalty::new(
        p,
        vec![PenaltyBlock {
            start: 2,
            dim: K - 1,
            s,
        }],
    )?;
    let model = Logit(rows.iter().map(|r| r.y).collect());
    let objective = RowObjective::new(Layout::glm(p)?, Arc::new(Designs::single(n, p, x)?), model)?;
    let null_space_dim = p - penalty.ranks().iter().sum::<usize>();
    Ok(Problem {
        objective,
        penalty,
        constraint,
        null_space_dim,
    })
}

/// The REML fit on `backend` (the CPU's, or a GPU's with the objective's
/// Hessians uploaded), with its statistics (`fit.statistics`: covariance
/// and edf from REML's own last factor of H + S).
pub fn fit_on<B: PcgKernels>(
    backend: &B,
    objective: &dyn Objective<B>,
    penalty: &Penalty,
) -> Result<RemlFit, Box<dyn Error>> {
    Ok(reml(
        backend,
        objective,
        penalty,
        None,
        &vec![0.0; penalty.dim()],
        &options(),
    )?)
}
