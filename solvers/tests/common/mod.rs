//! Shared test fixtures: a penalised logistic regression with a dense design,
//! an independent dense Newton reference and small dense linear algebra.
#![allow(dead_code)]
// Index loops read like the formulas they implement.
#![allow(clippy::needless_range_loop)]

use matfree_solvers::{CpuBackend, DenseOperator, Evaluation, Objective, Penalty, PenaltyBlock, Result};

/// splitmix64: a tiny seeded generator, so tests need no extra crate.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Logistic regression data: design rows (row-major n x p) and 0/1 response.
pub struct Data {
    pub n: usize,
    pub p: usize,
    pub x: Vec<f64>,
    pub y: Vec<f64>,
    /// The covariates (one column per smooth).
    pub z: Vec<Vec<f64>>,
}

/// Basis functions per smooth.
pub const K: usize = 6;

/// Cosine basis cos(j pi x), j = 1..K: smooth, centred for uniform x.
pub fn basis(x: f64) -> [f64; K] {
    std::array::from_fn(|j| ((j + 1) as f64 * std::f64::consts::PI * x).cos())
}

/// Simulate: intercept plus `effects.len()` smooths of uniform covariates,
/// y ~ Bernoulli(logistic(intercept + sum f_k(z_k))).
pub fn simulate(n: usize, intercept: f64, effects: &[fn(f64) -> f64], seed: u64) -> Data {
    let mut rng = Rng::new(seed);
    let p = 1 + K * effects.len();
    let (mut x, mut y) = (Vec::with_capacity(n * p), Vec::with_capacity(n));
    let mut z = vec![Vec::with_capacity(n); effects.len()];
    for _ in 0..n {
        x.push(1.0);
        let mut eta = intercept;
        for (k, f) in effects.iter().enumerate() {
            let u = rng.uniform();
            z[k].push(u);
            x.extend(basis(u));
            eta += f(u);
        }
        y.push(if rng.uniform() < 1.0 / (1.0 + (-eta).exp()) {
            1.0
        } else {
            0.0
        });
    }
    Data { n, p, x, y, z }
}

/// Roughness penalty of the cosine basis (integral of f''^2, up to a
/// constant: j^4 / 2) plus a small second-difference coupling so the blocks
/// are not diagonal.
pub fn roughness() -> Vec<f64> {
    let mut s = vec![0.0; K * K];
    for j in 0..K {
        s[j * K + j] = ((j + 1) as f64).powi(4) / 2.0;
    }
    for r in 0..K - 2 {
        let d = [1.0, -2.0, 1.0];
        for a in 0..3 {
            for b in 0..3 {
                s[(r + a) * K + r + b] += 0.05 * d[a] * d[b];
            }
        }
    }
    s
}

/// One roughness block per smooth, after the unpenalised intercept.
pub fn penalty(data: &Data) -> Penalty {
    let blocks = (0..(data.p - 1) / K)
        .map(|k| PenaltyBlock {
            start: 1 + k * K,
            dim: K,
            s: roughness(),
        })
        .collect();
    Penalty::new(data.p, blocks).unwrap()
}

/// ln(1 + e^t) without overflow.
fn softplus(t: f64) -> f64 {
    if t > 0.0 {
        t + (-t).exp().ln_1p()
    } else {
        t.exp().ln_1p()
    }
}

/// The logistic negative log-likelihood, with optional test hooks.
pub struct Logistic<'d> {
    pub data: &'d Data,
    /// Outside `||beta||_inf < bound` the objective reports `None`.
    pub domain: Option<f64>,
    /// Adds `gamma sum_j (beta_j^2 - 1)^2 / 4`: a non-convex double well.
    pub double_well: f64,
    /// Give REML the exact dH along a direction instead of the default
    /// finite difference.
    pub exact_dh: bool,
    /// Report `value` as cheap (the line search then tries values alone).
    pub cheap_value: bool,
    /// Full evaluations made so far.
    pub evaluations: std::cell::Cell<usize>,
    /// Value-only evaluations made so far.
    pub values: std::cell::Cell<usize>,
}

impl<'d> Logistic<'d> {
    pub fn new(data: &'d Data) -> Self {
        Self {
            data,
            domain: None,
            double_well: 0.0,
            exact_dh: false,
            cheap_value: true,
            evaluations: std::cell::Cell::new(0),
            values: std::cell::Cell::new(0),
        }
    }

    fn eta(&self, beta: &[f64]) -> Vec<f64> {
        let p = self.data.p;
        (0..self.data.n)
            .map(|i| (0..p).map(|j| self.data.x[i * p + j] * beta[j]).sum())
            .collect()
    }

    fn inside(&self, beta: &[f64]) -> bool {
        self.domain.is_none_or(|b| beta.iter().all(|v| v.abs() < b))
    }

    /// neglog(beta).
    pub fn neglog(&self, beta: &[f64]) -> f64 {
        let eta = self.eta(beta);
        let nl: f64 = eta.iter().zip(&self.data.y).map(|(e, y)| softplus(*e) - y * e).sum();
        let g = self.double_well;
        nl + beta.iter().map(|b| g * (b * b - 1.0).powi(2) / 4.0).sum::<f64>()
    }

    /// The exact derivative of the Hessian along d:
    /// X^T diag(w'(eta) X d) X with w' = mu (1 - mu) (1 - 2 mu).
    pub fn exact_hessian_derivative(&self, beta: &[f64], d: &[f64]) -> Vec<f64> {
        let (n, p) = (self.data.n, self.data.p);
        let (eta, xd) = (self.eta(beta), self.eta(d));
        let mut h = vec![0.0; p * p];
        for i in 0..n {
            let mu = 1.0 / (1.0 + (-eta[i]).exp());
            let c = mu * (1.0 - mu) * (1.0 - 2.0 * mu) * xd[i];
            let row = &self.data.x[i * p..(i + 1) * p];
            for a in 0..p {
                for b in 0..p {
                    h[a * p + b] += c * row[a] * row[b];
                }
            }
        }
        for a in 0..p {
            h[a * p + a] += 6.0 * self.double_well * beta[a] * d[a];
        }
        h
    }

    /// Gradient and dense Hessian (row-major) of neglog.
    pub fn derivatives(&self, beta: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let (n, p) = (self.data.n, self.data.p);
        let eta = self.eta(beta);
        let (mut g, mut h) = (vec![0.0; p], vec![0.0; p * p]);
        for i in 0..n {
            let mu = 1.0 / (1.0 + (-eta[i]).exp());
            let w = mu * (1.0 - mu);
            let row = &self.data.x[i * p..(i + 1) * p];
            for a in 0..p {
                g[a] += row[a] * (mu - self.data.y[i]);
                for b in 0..=a {
                    h[a * p + b] += w * row[a] * row[b];
                }
            }
        }
        for a in 0..p {
            for b in 0..a {
                h[b * p + a] = h[a * p + b];
            }
            let bw = beta[a];
            g[a] += self.double_well * (bw * bw - 1.0) * bw;
            h[a * p + a] += self.double_well * (3.0 * bw * bw - 1.0);
        }
        (g, h)
    }
}

impl Objective<CpuBackend> for Logistic<'_> {
    fn dim(&self) -> usize {
        self.data.p
    }
    fn evaluate(&self, beta: &[f64]) -> Result<Option<Evaluation<'_, CpuBackend>>> {
        self.evaluations.set(self.evaluations.get() + 1);
        if !self.inside(beta) {
            return Ok(None);
        }
        let (gradient, h) = self.derivatives(beta);
        Ok(Some(Evaluation {
            value: self.neglog(beta),
            gradient,
            hessian: std::rc::Rc::new(DenseOperator::new(self.data.p, h)?),
        }))
    }
    fn value(&self, beta: &[f64]) -> Result<Option<f64>> {
        self.values.set(self.values.get() + 1);
        Ok(self.inside(beta).then(|| self.neglog(beta)))
    }
    fn cheap_value(&self) -> bool {
        self.cheap_value
    }
    fn exact_hessian_derivative(&self) -> bool {
        self.exact_dh
    }
    fn hessian_derivative(&self, beta: &[f64], h: &[f64], d: &[f64], step: f64) -> Result<Vec<f64>> {
        if self.exact_dh {
            Ok(self.exact_hessian_derivative(beta, d))
        } else {
            matfree_solvers::fd_hessian_derivative(self, beta, h, d, step)
        }
    }
}

/// Naive Cholesky solve of a row-major SPD system (the test's own code).
pub fn chol_solve(n: usize, a: &[f64], b: &[f64]) -> Vec<f64> {
    let mut l = vec![0.0f64; n * n];
    for j in 0..n {
        let d = a[j * n + j] - (0..j).map(|k| l[j * n + k].powi(2)).sum::<f64>();
        assert!(d > 0.0, "reference Cholesky: not positive definite");
        l[j * n + j] = d.sqrt();
        for i in j + 1..n {
            let s = a[i * n + j] - (0..j).map(|k| l[i * n + k] * l[j * n + k]).sum::<f64>();
            l[i * n + j] = s / l[j * n + j];
        }
    }
    let mut z = b.to_vec();
    for i in 0..n {
        z[i] = (z[i] - (0..i).map(|k| l[i * n + k] * z[k]).sum::<f64>()) / l[i * n + i];
    }
    for i in (0..n).rev() {
        z[i] = (z[i] - (i + 1..n).map(|k| l[k * n + i] * z[k]).sum::<f64>()) / l[i * n + i];
    }
    z
}

/// Gauss-Jordan inverse with partial pivoting (the test's own code).
pub fn inverse(n: usize, a: &[f64]) -> Vec<f64> {
    let mut m = a.to_vec();
    let mut inv: Vec<f64> = (0..n * n).map(|i| f64::from(i / n == i % n)).collect();
    for c in 0..n {
        let piv = (c..n)
            .max_by(|&i, &j| m[i * n + c].abs().total_cmp(&m[j * n + c].abs()))
            .unwrap();
        for k in 0..n {
            m.swap(c * n + k, piv * n + k);
            inv.swap(c * n + k, piv * n + k);
        }
        let d = m[c * n + c];
        for k in 0..n {
            m[c * n + k] /= d;
            inv[c * n + k] /= d;
        }
        for r in (0..n).filter(|&r| r != c) {
            let f = m[r * n + c];
            for k in 0..n {
                m[r * n + k] -= f * m[c * n + k];
                inv[r * n + k] -= f * inv[c * n + k];
            }
        }
    }
    inv
}

/// Independent reference: plain damped Newton on the dense penalised
/// problem, iterated far past any tolerance the driver uses.
pub fn reference_optimum(obj: &Logistic<'_>, pen: &Penalty, lambda: &[f64], beta0: &[f64]) -> Vec<f64> {
    let p = obj.data.p;
    let s = pen.dense(lambda).unwrap();
    let f = |b: &[f64]| {
        let sb: f64 = (0..p)
            .map(|i| b[i] * (0..p).map(|j| s[i * p + j] * b[j]).sum::<f64>())
            .sum();
        obj.neglog(b) + 0.5 * sb
    };
    let mut beta = beta0.to_vec();
    for _ in 0..200 {
        let (mut g, mut h) = obj.derivatives(&beta);
        for i in 0..p {
            g[i] += (0..p).map(|j| s[i * p + j] * beta[j]).sum::<f64>();
        }
        for (hi, si) in h.iter_mut().zip(&s) {
            *hi += si;
        }
        let neg: Vec<f64> = g.iter().map(|v| -v).collect();
        let d = chol_solve(p, &h, &neg);
        let f0 = f(&beta);
        let mut t = 1.0;
        let next = loop {
            let trial: Vec<f64> = beta.iter().zip(&d).map(|(b, di)| b + t * di).collect();
            if f(&trial) <= f0 || t < 1e-12 {
                break trial;
            }
            t *= 0.5;
        };
        let moved = next.iter().zip(&beta).any(|(a, b)| a != b);
        beta = next;
        if !moved {
            break;
        }
    }
    beta
}

/// Eigenvalues of a symmetric row-major matrix, by faer.
pub fn eigenvalues(n: usize, a: &[f64]) -> Vec<f64> {
    let m = faer::Mat::from_fn(n, n, |i, j| a[i * n + j]);
    m.self_adjoint_eigenvalues(faer::Side::Lower).unwrap()
}

pub fn max_rel_diff(a: &[f64], b: &[f64]) -> f64 {
    let scale = b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    a.iter().zip(b).fold(0.0f64, |m, (x, y)| m.max((x - y).abs() / scale))
}

/// Marginal basis sizes of the tensor-product smooth te(z1, z2).
pub const TE: (usize, usize) = (4, 5);

/// `cos(j pi x)`, j = 1..k.
pub fn cosines(x: f64, k: usize) -> Vec<f64> {
    (1..=k).map(|j| (j as f64 * std::f64::consts::PI * x).cos()).collect()
}

/// Data with an intercept and a tensor-product smooth of two uniform
/// covariates (design columns: the row-wise Kronecker product of the
/// marginal bases), the response Bernoulli or, with `gaussian`, normal with
/// unit variance around `f(z1, z2) = sin(2 pi z1) (z2 - 0.5) * 3`.
pub fn tensor_data(n: usize, seed: u64, gaussian: bool) -> Data {
    let mut rng = Rng::new(seed);
    let p = 1 + TE.0 * TE.1;
    let (mut x, mut y, mut z) = (
        Vec::with_capacity(n * p),
        Vec::with_capacity(n),
        vec![Vec::new(), Vec::new()],
    );
    for _ in 0..n {
        let (u, v) = (rng.uniform(), rng.uniform());
        z[0].push(u);
        z[1].push(v);
        x.push(1.0);
        let (a, b) = (cosines(u, TE.0), cosines(v, TE.1));
        x.extend(a.iter().flat_map(|ai| b.iter().map(move |bj| ai * bj)));
        let eta = (2.0 * std::f64::consts::PI * u).sin() * (v - 0.5) * 3.0;
        y.push(if gaussian {
            // Box-Muller: a standard normal from two uniforms.
            let (r1, r2) = (rng.uniform().max(1e-300), rng.uniform());
            eta + (-2.0 * r1.ln()).sqrt() * (2.0 * std::f64::consts::PI * r2).cos()
        } else {
            f64::from(rng.uniform() < 1.0 / (1.0 + (-eta).exp()))
        });
    }
    Data { n, p, x, y, z }
}

/// A second-difference (P-spline) penalty D^T D on k columns: rank k - 2
/// (constants and lines are not penalised).
pub fn second_difference(k: usize) -> Vec<f64> {
    let mut s = vec![0.0; k * k];
    for r in 0..k - 2 {
        let d = [1.0, -2.0, 1.0];
        for a in 0..3 {
            for b in 0..3 {
                s[(r + a) * k + r + b] += d[a] * d[b];
            }
        }
    }
    s
}

/// te's two marginal penalties, A (x) I and I (x) B (second differences),
/// overlapping on the smooth's columns 1..21.
pub fn tensor_penalty(p: usize) -> Penalty {
    let (ka, kb) = TE;
    let (a, b) = (second_difference(ka), second_difference(kb));
    let n = ka * kb;
    let left = |i: usize, j: usize| a[(i / kb) * ka + j / kb] * f64::from(i % kb == j % kb);
    let right = |i: usize, j: usize| f64::from(i / kb == j / kb) * b[(i % kb) * kb + j % kb];
    let block = |f: &dyn Fn(usize, usize) -> f64| PenaltyBlock {
        start: 1,
        dim: n,
        s: (0..n * n).map(|t| f(t / n, t % n)).collect(),
    };
    let pen = Penalty::new(p, vec![block(&left), block(&right)]).unwrap();
    assert_eq!(pen.groups(), &[vec![0, 1]]);
    pen
}
