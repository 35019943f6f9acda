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
use matfree::solvers::{Constraint, CpuBackend, FitStatistics, NewtonOptions, Penalty, PenaltyBlock};
use matfree::{Designs, Layout, RowEvaluator, RowObjective};

/// The spline's basis dimension (before the constraint).
pub const K: usize = 10;

/// The model: row i's Bernoulli negative log-likelihood in eta_i.
pub struct Logit {
    pub y: Vec<f64>,
}

/// mu = 1 / (1 + e^-eta) and mu (1 - mu), without cancellation at large |eta|.
fn logistic(eta: f64) -> (f64, f64) {
    let e = (-eta.abs()).exp();
    let mu = if eta >= 0.0 { 1.0 / (1.0 + e) } else { e / (1.0 + e) };
    (mu, e / ((1.0 + e) * (1.0 + e)))
}

impl RowEvaluator for Logit {
    fn row(&self, i: usize, eta: &[f64], grad: &mut [f64], hess: &mut [f64]) -> f64 {
        let (mu, w) = logistic(eta[0]);
        (grad[0], hess[0]) = (mu - self.y[i], w);
        eta[0].max(0.0) + (-eta[0].abs()).exp().ln_1p() - self.y[i] * eta[0] // log(1 + e^eta) - y eta
    }
    fn has_hessian_derivative(&self) -> bool {
        true // so REML's gradient is exact, as mgcv's is
    }
    fn row_hessian_derivative(&self, _i: usize, eta: &[f64], d: &[f64], out: &mut [f64]) {
        let (mu, w) = logistic(eta[0]);
        out[0] = w * (1.0 - 2.0 * mu) * d[0];
    }
}

/// The data: x1, x2 and the 0/1 label y.
#[derive(serde::Deserialize)]
struct Row {
    x1: f64,
    x2: f64,
    y: f64,
}

/// Read `path` (header x1,x2,y); values finite, y 0 or 1.
pub fn read(path: &str) -> Result<Vec<[f64; 3]>, Box<dyn Error>> {
    let mut rows = Vec::new();
    for (k, row) in csv::Reader::from_path(path)?.deserialize::<Row>().enumerate() {
        let Row { x1, x2, y } = row?;
        if !(x1.is_finite() && x2.is_finite() && (y == 0.0 || y == 1.0)) {
            return Err(format!(
                "{path} data row {}: x1 = {x1}, x2 = {x2}, y = {y}: x1, x2 must be finite and y 0 or 1",
                k + 1
            )
            .into());
        }
        rows.push([x1, x2, y]);
    }
    Ok(rows)
}

/// The K cubic B-splines at x (Cox-de Boor) on `knots` (K + 4 of them).
fn bsplines(x: f64, knots: &[f64]) -> Vec<f64> {
    let mut b: Vec<f64> = knots.windows(2).map(|t| f64::from(t[0] <= x && x < t[1])).collect();
    for d in 1..=3 {
        for j in 0..knots.len() - 1 - d {
            let (left, right) = (
                (x - knots[j]) / (knots[j + d] - knots[j]),
                (knots[j + d + 1] - x) / (knots[j + d + 1] - knots[j + 1]),
            );
            b[j] = left * b[j] + right * b[j + 1];
        }
    }
    b.truncate(K);
    b
}

/// The fit and what it reports.
pub struct OwnFit {
    pub fit: RemlFit,
    pub stats: FitStatistics,
    pub constraint: Constraint,
    /// Unpenalised dimensions, p - rank(S): mgcv's REML score is
    /// `fit.laml.value - null_space_dim ln(2 pi) / 2`.
    pub null_space_dim: usize,
}

/// The options the fit runs with: REML until the projected gradient of V is
/// 1e-9 edf (every other outer stop made as tight), each inner Newton solve
/// until its decrement is 1e-20 (beta within 1e-10 standard errors).
pub fn options() -> RemlOptions {
    let newton = NewtonOptions {
        decrement_tol: 1e-20,
        ..NewtonOptions::default()
    };
    RemlOptions {
        newton,
        grad_tol: 1e-9,
        decrement_tol: 1e-16,
        step_tol: 1e-10,
        value_tol: 1e-13,
        ..RemlOptions::default()
    }
}

/// Fit the model to the rows of `path`.
pub fn fit(path: &str) -> Result<OwnFit, Box<dyn Error>> {
    let rows = read(path)?;
    let n = rows.len();
    let (lo, hi) = rows.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), r| {
        (l.min(r[1]), h.max(r[1]))
    });
    let dx = (hi - lo) / (K - 3) as f64; // three intervals beyond [lo, hi] on each side
    let knots: Vec<f64> = (0..K + 4).map(|j| lo + (j as f64 - 3.0) * dx).collect();
    let basis: Vec<f64> = rows.iter().flat_map(|r| bsplines(r[1], &knots)).collect();
    let constraint = Constraint::sum_to_zero(&basis, n, K)?; // s(x2) sums to zero over the data
    let spline = constraint.apply_to_design(&basis, n)?;
    let p = 2 + K - 1;
    let x: Vec<f64> = (0..n)
        .flat_map(|i| {
            [1.0, rows[i][0]]
                .into_iter()
                .chain(spline[i * (K - 1)..(i + 1) * (K - 1)].iter().copied())
        })
        .collect();
    let mut s = vec![0.0; K * K]; // D^T D, D the second differences
    for r in 0..K - 2 {
        for (a, u) in [(r, 1.0), (r + 1, -2.0), (r + 2, 1.0)] {
            for (b, v) in [(r, 1.0), (r + 1, -2.0), (r + 2, 1.0)] {
                s[a * K + b] += u * v;
            }
        }
    }
    let block = PenaltyBlock {
        start: 2,
        dim: K - 1,
        s: constraint.apply_to_penalty(&s)?,
    };
    let penalty = Penalty::new(p, vec![block])?;
    let model = Logit {
        y: rows.iter().map(|r| r[2]).collect(),
    };
    let objective = RowObjective::new(Layout::glm(p)?, Arc::new(Designs::single(n, p, x)?), model)?;
    let backend = CpuBackend::new();
    let fit = reml(&backend, &objective, &penalty, None, &vec![0.0; p], &options())?;
    let stats = fit.statistics(&backend, &penalty)?;
    let null_space_dim = p - penalty.ranks().iter().sum::<usize>();
    Ok(OwnFit {
        fit,
        stats,
        constraint,
        null_space_dim,
    })
}
