//! GLM row problems for every family and link, with the CPU's answers: the
//! cases `tests/gam_replay.rs` (the kernels as C++) and `tests/gam_device.rs`
//! (the kernels on a GPU) hold the device rows to. Each case spreads eta over
//! the link's range into its tails (|eta| to 40 for the binomial links),
//! with prior weights (some 0), offsets and, for the binomial, trials.

#![allow(dead_code)]

use std::sync::Arc;

use matfree::gam::{Distribution, Family, GlmData, GlmRows, Link};
use matfree::rng::Rng;
use matfree::solvers::{CpuBackend, Objective};
use matfree::{Designs, Layout, RowEvaluator, RowObjective};
use rayon::prelude::*;

/// One problem: rows, a design (n x p, column 0 the target theta, the
/// others small), beta, the scale, REML-like directions and a lower factor.
pub struct Case {
    pub name: String,
    pub rows: GlmRows,
    pub n: usize,
    pub p: usize,
    pub x: Vec<f64>,
    pub beta: Vec<f64>,
    pub phi: f64,
    pub directions: Vec<Vec<f64>>,
    /// K, lower triangular, row-major p x p (A = K K^T).
    pub factor: Vec<f64>,
}

/// Every family with every link it takes.
pub fn families() -> Vec<Family> {
    Distribution::ALL
        .iter()
        .flat_map(|d| d.links().iter().map(move |l| Family::new(*d, *l).unwrap()))
        .collect()
}

/// The range of eta a case spreads its rows over: into both tails where
/// the link allows, inside the domain otherwise.
fn eta_range(f: Family) -> (f64, f64) {
    use Distribution::*;
    match (f.distribution(), f.link()) {
        (Binomial, Link::Logit) => (-40.0, 40.0),
        (Binomial, Link::Probit) => (-38.0, 38.0),
        (Binomial, _) => (-40.0, 7.0), // cloglog: e^eta past 750 at the top
        (Poisson, Link::Log) => (-30.0, 15.0),
        (Gaussian, Link::Identity) => (-10.0, 10.0),
        (Gaussian | Gamma, Link::Log) => (-6.0, 6.0),
        _ => (0.05, 20.0), // identity and inverse on positive means
    }
}

/// A case of `family` at n rows and p columns; `full` gives weights,
/// offsets and (binomial) trials, otherwise they are left at their defaults.
pub fn case(family: Family, n: usize, p: usize, full: bool, seed: u64) -> Case {
    let mut rng = Rng::new(seed);
    let (lo, hi) = eta_range(family);
    let offset: Vec<f64> = (0..n).map(|_| if full { rng.uniform() - 0.5 } else { 0.0 }).collect();
    let eta: Vec<f64> = (0..n)
        .map(|i| lo + (hi - lo) * (i as f64 + rng.uniform()) / n as f64)
        .collect();
    let binomial = family.distribution() == Distribution::Binomial;
    let trials: Vec<f64> = (0..n)
        .map(|_| {
            if full && binomial {
                1.0 + (rng.uniform() * 5.0).floor()
            } else {
                1.0
            }
        })
        .collect();
    let y = (0..n).map(|i| response(family, eta[i], trials[i], &mut rng)).collect();
    let weights = (0..n)
        .map(|i| if i % 19 == 7 { 0.0 } else { 3.0 * rng.uniform() })
        .collect();
    let rows = GlmRows::new(
        family,
        GlmData {
            y,
            weights: full.then_some(weights),
            offset: full.then(|| offset.clone()),
            trials: (full && binomial).then_some(trials),
        },
    )
    .unwrap();
    let mut x = vec![0.0; n * p];
    for i in 0..n {
        x[i * p] = eta[i] - offset[i];
        for c in 1..p {
            x[i * p + c] = 2.0 * rng.uniform() - 1.0;
        }
    }
    let beta = (0..p).map(|c| if c == 0 { 1.0 } else { 1e-3 * rng.normal() }).collect();
    let directions = (0..3).map(|_| rng.normals(p)).collect();
    let mut factor = vec![0.0; p * p];
    for a in 0..p {
        for c in 0..=a {
            factor[a * p + c] = if a == c {
                0.5 + rng.uniform()
            } else {
                0.3 * rng.normal()
            };
        }
    }
    Case {
        name: format!(
            "{}-{}{}",
            family.distribution().name(),
            family.link().name(),
            if full { "" } else { "-plain" }
        ),
        phi: if family.has_scale() { 2.5 } else { 1.0 },
        rows,
        n,
        p,
        x,
        beta,
        directions,
        factor,
    }
}

/// A response near the mean at eta, in the family's range.
fn response(f: Family, eta: f64, m: f64, rng: &mut Rng) -> f64 {
    let mu = f.link().linkinv(eta);
    match f.distribution() {
        Distribution::Binomial => (rng.uniform() * (m + 1.0)).floor().min(m),
        Distribution::Poisson => (mu * (0.5 + rng.uniform())).round().min(1e12),
        Distribution::Gaussian => mu + rng.normal(),
        Distribution::Gamma => mu * (0.3 * rng.normal()).exp(),
    }
}

impl Case {
    /// The CPU objective over the case's design (rows at phi = 1).
    pub fn objective(&self) -> RowObjective<GlmRows> {
        let designs = Arc::new(Designs::single(self.n, self.p, self.x.clone()).unwrap());
        RowObjective::new(Layout::glm(self.p).unwrap(), designs, self.rows.clone()).unwrap()
    }

    /// The designs.
    pub fn designs(&self) -> Designs {
        Designs::single(self.n, self.p, self.x.clone()).unwrap()
    }

    /// x_i . v, in column order.
    pub fn dot(&self, i: usize, v: &[f64]) -> f64 {
        self.x[i * self.p..(i + 1) * self.p]
            .iter()
            .zip(v)
            .map(|(a, b)| a * b)
            .sum()
    }

    /// Each row's (value, gradient, Hessian) divided by phi, as the CPU's
    /// `ScaledRows` gives them, at theta_i = `theta[i]`.
    pub fn rows_at(&self, theta: &[f64]) -> [Vec<f64>; 3] {
        let c = 1.0 / self.phi;
        let mut out = [vec![0.0; self.n], vec![0.0; self.n], vec![0.0; self.n]];
        for (i, t) in theta.iter().enumerate() {
            let (mut g, mut h) = ([0.0], [0.0]);
            let v = self.rows.row(i, &[*t], &mut g, &mut h);
            (out[0][i], out[1][i], out[2][i]) = (c * v, c * g[0], c * h[0]);
        }
        out
    }

    /// Each row's third-derivative weights t_i dtheta_k / phi (n x m), as
    /// the CPU's `ScaledRows` gives them, at theta_i and dtheta_ik.
    pub fn third_at(&self, theta: &[f64], dtheta: &[Vec<f64>]) -> Vec<f64> {
        let (c, m) = (1.0 / self.phi, dtheta.len());
        let mut out = vec![0.0; self.n * m];
        for (i, t) in theta.iter().enumerate() {
            let d: Vec<f64> = dtheta.iter().map(|d| d[i]).collect();
            let o = &mut out[i * m..(i + 1) * m];
            self.rows.row_hessian_derivatives(i, &[*t], &d, o);
            o.iter_mut().for_each(|v| *v *= c);
        }
        out
    }

    /// A = K K^T, row-major.
    pub fn inverse(&self) -> Vec<f64> {
        let p = self.p;
        let k = &self.factor;
        (0..p * p)
            .map(|t| (0..p).map(|c| k[(t / p) * p + c] * k[(t % p) * p + c]).sum())
            .collect()
    }

    /// The CPU's joint (gradient, value) at beta, divided by phi, its value
    /// alone, and its traces tr(A dH_k) (from the leverages) divided by phi.
    pub fn cpu_joint(&self) -> (Vec<f64>, f64, Option<f64>, Vec<f64>) {
        let objective = self.objective();
        let c = 1.0 / self.phi;
        let value = Objective::<CpuBackend>::value(&objective, &self.beta)
            .unwrap()
            .map(|v| c * v);
        let e = Objective::<CpuBackend>::evaluate(&objective, &self.beta)
            .unwrap()
            .unwrap();
        let dirs: Vec<&[f64]> = self.directions.iter().map(Vec::as_slice).collect();
        let h = vec![0.0; self.p * self.p];
        let steps = vec![1e-4; dirs.len()];
        let traces = Objective::<CpuBackend>::hessian_derivative_traces(
            &objective,
            &self.beta,
            &h,
            &self.inverse(),
            &dirs,
            &steps,
        )
        .unwrap();
        (
            e.gradient.iter().map(|g| c * g).collect(),
            c * e.value,
            value,
            traces.iter().map(|t| c * t).collect(),
        )
    }

    /// sum_i |l_i u_ik| for each direction: the scale the traces' rounding
    /// is measured against (they may cancel).
    pub fn trace_scales(&self) -> Vec<f64> {
        let a = self.inverse();
        let p = self.p;
        let theta: Vec<f64> = (0..self.n).map(|i| self.dot(i, &self.beta)).collect();
        let dtheta: Vec<Vec<f64>> = self
            .directions
            .iter()
            .map(|d| (0..self.n).map(|i| self.dot(i, d)).collect())
            .collect();
        let u = self.third_at(&theta, &dtheta);
        let m = dtheta.len();
        // Each row's leverage x_i^T A x_i (in parallel: the wide case has
        // 400,000 rows of 90).
        let leverage: Vec<f64> = (0..self.n)
            .into_par_iter()
            .map(|i| {
                let xi = &self.x[i * p..(i + 1) * p];
                (0..p * p).map(|t| xi[t / p] * a[t] * xi[t % p]).sum()
            })
            .collect();
        (0..m)
            .map(|k| (0..self.n).map(|i| (leverage[i] * u[i * m + k]).abs()).sum())
            .collect()
    }
}

/// The largest |got - want| over the scale (each entry's own magnitude, at
/// least `floor`).
pub fn worst(got: &[f64], want: &[f64], floor: f64) -> f64 {
    assert_eq!(got.len(), want.len());
    got.iter()
        .zip(want)
        .map(|(g, w)| match (g.is_nan(), w.is_nan()) {
            (true, true) => 0.0,
            (true, false) | (false, true) => f64::INFINITY,
            _ if g == w => 0.0,
            _ => (g - w).abs() / w.abs().max(floor),
        })
        .fold(0.0, f64::max)
}
