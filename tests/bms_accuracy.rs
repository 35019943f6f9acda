//! The BMS row against a reference computed without the model's quadrature
//! (#42's accuracy rule): every integral of the calibration and of its
//! derivatives by 20-point Gauss-Legendre on panels of width at most 1/32
//! between the cells' edges over |z| <= 40 (the integrands are analytic on
//! each panel, so the sums are exact to rounding), the intercept solved by
//! Newton on that F, and the row's value, gradient and Hessian from a, the
//! implicit derivatives a_u = -F_u / F_a and a_uv and the probit layer.
//! Each row's outputs must be within 1e-10 of its largest entry, over both
//! tails of the probit, steep warps, both signs of the slope and extreme
//! intercepts, on both CPU paths (fused, and Stage 1's bundle read by
//! Stage 2, as the device's bundle kernel reads it).

use std::sync::Arc;

use matfree::bms::numerics::probit::{log_ndtr_mills_curvature, norm_cdf};
use matfree::bms::numerics::quadrature;
use matfree::bms::{evaluate_rows, marginal_slope_designs, Bases, BmsData, BmsModel, CubicBasis};

/// The 20-point Gauss-Legendre rule on [-1, 1]: (node, weight) pairs.
fn gauss_legendre() -> Vec<(f64, f64)> {
    let (x, w) = quadrature::gauss_legendre(20);
    x.into_iter().zip(w).collect()
}

fn phi(x: f64) -> f64 {
    (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt()
}

/// eta and its derivatives at z for intercept a: coordinates 0..r are
/// theta's, r is a. First derivatives (r + 1), second ((r + 1)^2).
struct Jet {
    eta: f64,
    d1: Vec<f64>,
    d2: Vec<f64>,
}

struct Row<'a> {
    bases: &'a Bases,
    theta: &'a [f64],
}

impl Row<'_> {
    fn r(&self) -> usize {
        self.theta.len()
    }

    fn jet(&self, z: f64, a: f64) -> Jet {
        let (bs, th, r) = (self.bases, self.theta, self.r());
        let (p_h, p_w, s) = (bs.p_h(), bs.p_w(), bs.s_f);
        let (b, m) = (th[1], r + 1);
        let t = a + b * z;
        let (mut hv, mut hd, mut hdd) = (vec![0.0; p_h], vec![0.0; p_h], vec![0.0; p_h]);
        if let Some(score) = &bs.score {
            score.eval(z, &mut hv, &mut hd, &mut hdd);
        }
        let (mut wv, mut wd, mut wdd) = (vec![0.0; p_w], vec![0.0; p_w], vec![0.0; p_w]);
        if let Some(link) = &bs.link {
            link.eval(t, &mut wv, &mut wd, &mut wdd);
        }
        let (beta_h, beta_w) = (&th[2..2 + p_h], &th[2 + p_h..]);
        let dot = |x: &[f64], y: &[f64]| x.iter().zip(y).map(|(p, q)| p * q).sum::<f64>();
        let (h, l, l1, l2) = (dot(&hv, beta_h), dot(&wv, beta_w), dot(&wd, beta_w), dot(&wdd, beta_w));
        let mut d1 = vec![0.0; m];
        let mut d2 = vec![0.0; m * m];
        let mut set2 = |u: usize, v: usize, x: f64| {
            d2[u * m + v] = x;
            d2[v * m + u] = x;
        };
        d1[1] = s * (z + h + l1 * z);
        d1[r] = s * (1.0 + l1);
        set2(r, r, s * l2);
        set2(r, 1, s * l2 * z);
        set2(1, 1, s * l2 * z * z);
        for j in 0..p_h {
            d1[2 + j] = s * b * hv[j];
            set2(1, 2 + j, s * hv[j]);
        }
        for k in 0..p_w {
            let u = 2 + p_h + k;
            d1[u] = s * wv[k];
            set2(r, u, s * wd[k]);
            set2(1, u, s * wd[k] * z);
        }
        Jet {
            eta: s * (a + b * z + b * h + l),
            d1,
            d2,
        }
    }

    /// The cells' edges: the score knots, and the link knots mapped back
    /// through t = a + b z, within [-40, 40].
    fn edges(&self, a: f64) -> Vec<f64> {
        let b = self.theta[1];
        let mut e = vec![-40.0, 40.0];
        if let Some(score) = &self.bases.score {
            e.extend(score.knots());
        }
        if let (Some(link), true) = (&self.bases.link, b != 0.0) {
            e.extend(link.knots().iter().map(|t| (t - a) / b));
        }
        e.retain(|z| (-40.0..=40.0).contains(z));
        e.sort_by(f64::total_cmp);
        e.dedup();
        e
    }

    /// The sum over the quadrature nodes of f(jet at z, out, phi(z) times
    /// the node's weight) into `out`.
    fn integrate(&self, a: f64, out: &mut [f64], f: &dyn Fn(&Jet, &mut [f64], f64)) {
        let rule = gauss_legendre();
        out.iter_mut().for_each(|v| *v = 0.0);
        for w in self.edges(a).windows(2) {
            let pieces = ((w[1] - w[0]) * 32.0).ceil().max(1.0) as usize;
            let h = (w[1] - w[0]) / pieces as f64;
            for k in 0..pieces {
                let (lo, half) = (w[0] + k as f64 * h, 0.5 * h);
                for &(x, wt) in &rule {
                    let z = lo + half * (1.0 + x);
                    f(&self.jet(z, a), out, wt * half * phi(z));
                }
            }
        }
    }

    /// F(a) on the side where it does not cancel: integral Phi(s eta) phi
    /// - Phi(s q), s = -1 for q > 0 (then -F), and F_a.
    fn calibration(&self, a: f64) -> (f64, f64) {
        let q = self.theta[0];
        let side = if q > 0.0 { -1.0 } else { 1.0 };
        let r = self.r();
        let mut out = [0.0; 2];
        self.integrate(a, &mut out, &|j, o, w| {
            o[0] += w * norm_cdf(side * j.eta);
            o[1] += w * phi(j.eta) * j.d1[r];
        });
        (side * (out[0] - norm_cdf(side * q)), out[1])
    }

    /// The root of F by Newton from `a0`.
    fn intercept(&self, a0: f64) -> f64 {
        let mut a = a0;
        for _ in 0..100 {
            let (f, f_a) = self.calibration(a);
            let step = f / f_a;
            a -= step;
            if step.abs() <= 1e-15 * (1.0 + a.abs()) {
                return a;
            }
        }
        panic!("the reference calibration did not converge at theta {:?}", self.theta)
    }

    /// (neglog, gradient, Hessian, a) at the observed (z, y, w).
    fn reference(&self, z: f64, y: f64, w: f64, a0: f64) -> (f64, Vec<f64>, Vec<f64>, f64) {
        let (r, q) = (self.r(), self.theta[0]);
        let a = self.intercept(a0);
        let m = r + 1;
        // J1_k = int phi(eta) eta_k, J2_kl = int phi(eta) (eta_kl - eta eta_k eta_l).
        let mut out = vec![0.0; m + m * m];
        self.integrate(a, &mut out, &|j, o, wt| {
            let g = wt * phi(j.eta);
            for k in 0..m {
                o[k] += g * j.d1[k];
                for l in 0..m {
                    o[m + k * m + l] += g * (j.d2[k * m + l] - j.eta * j.d1[k] * j.d1[l]);
                }
            }
        });
        let (mut f1, mut f2) = (out[..m].to_vec(), out[m..].to_vec());
        // Phi(q) in F: F_q = -phi(q), F_qq = q phi(q).
        f1[0] -= phi(q);
        f2[0] += q * phi(q);
        let f_a = f1[r];
        let a1: Vec<f64> = (0..r).map(|u| -f1[u] / f_a).collect();
        let a2 = |u: usize, v: usize| {
            -(f2[u * m + v] + f2[r * m + u] * a1[v] + f2[r * m + v] * a1[u] + f2[r * m + r] * a1[u] * a1[v]) / f_a
        };
        let o = self.jet(z, a);
        let e_u: Vec<f64> = (0..r).map(|u| o.d1[u] + o.d1[r] * a1[u]).collect();
        let s = 2.0 * y - 1.0;
        let (log_cdf, lambda, curvature) = log_ndtr_mills_curvature(s * o.eta);
        let grad: Vec<f64> = e_u.iter().map(|e| -w * s * lambda * e).collect();
        let mut hess = vec![0.0; r * r];
        for u in 0..r {
            for v in 0..r {
                let e_uv = o.d2[u * m + v]
                    + o.d2[u * m + r] * a1[v]
                    + o.d2[v * m + r] * a1[u]
                    + o.d2[r * m + r] * a1[u] * a1[v]
                    + o.d1[r] * a2(u, v);
                hess[u * r + v] = w * (curvature * e_u[u] * e_u[v] - s * lambda * e_uv);
            }
        }
        (-w * log_cdf, grad, hess, a)
    }
}

/// A warp setting: (label, p_h, p_w, s_f, beta_h, beta_w).
type Warp = (&'static str, usize, usize, f64, Vec<f64>, Vec<f64>);

fn warps() -> Vec<Warp> {
    let smooth =
        |p: usize, amp: f64, f: f64| -> Vec<f64> { (0..p).map(|j| amp * (f * j as f64 + 0.4).sin()).collect() };
    vec![
        ("fit shape", 8, 6, 1.0, smooth(8, 0.25, 0.9), smooth(6, 0.15, 0.7)),
        (
            "seed shape, frailty",
            10,
            8,
            0.8,
            smooth(10, 0.25, 0.9),
            smooth(8, 0.15, 0.7),
        ),
        ("steep warps", 8, 6, 1.0, smooth(8, 1.5, 1.3), smooth(6, 0.6, 1.1)),
    ]
}

/// The largest error of the model's rows against the reference, relative
/// to each row's largest entry (value, gradient, Hessian), and of the
/// intercepts relative to 1 + |a|, over (q, b, z) cases for every slope in
/// `slopes` and every warp: both tails of the probit (q to -/+8, intercepts
/// to about +-22), scores in both tails. Labelled with the worst row.
fn worst_errors(slopes: &[f64]) -> (f64, f64, String) {
    let mut cases = Vec::new();
    for &q in &[-8.0, -3.5, -0.4, 0.0, 1.2, 4.0, 8.0] {
        for &b in slopes {
            for (k, &z) in [-3.2, 0.3, 2.7].iter().enumerate() {
                cases.push((q, b, z, ((k + usize::from(q > 0.0)) % 2) as f64));
            }
        }
    }
    let mut worst = (0.0f64, 0.0f64, String::new());
    for (label, p_h, p_w, s_f, beta_h, beta_w) in warps() {
        let score = CubicBasis::uniform(-4.0, 4.0, p_h).unwrap();
        let link = CubicBasis::uniform(-6.0, 6.0, p_w).unwrap();
        let bases = Bases::new(Some(score), Some(link), s_f).unwrap();
        let model = BmsModel::new(bases.clone(), 1, 1).unwrap();
        let n = cases.len();
        let x_m: Vec<f64> = cases.iter().map(|c| c.0).collect();
        let x_g: Vec<f64> = cases.iter().map(|c| c.1).collect();
        let designs = Arc::new(marginal_slope_designs(n, 1, 1, x_m, x_g).unwrap());
        let z: Vec<f64> = cases.iter().map(|c| c.2).collect();
        let y: Vec<f64> = cases.iter().map(|c| c.3).collect();
        let w: Vec<f64> = (0..n).map(|i| 0.5 + (i % 3) as f64 * 0.75).collect();
        let data = BmsData::new(designs, z.clone(), y.clone(), w.clone()).unwrap();
        let beta: Vec<f64> = [1.0, 1.0].iter().chain(&beta_h).chain(&beta_w).copied().collect();
        let got = model.evaluate(&data, &beta).unwrap();
        // The bundle path (Stage 1's cells and moments, then Stage 2: what
        // the device's bundle kernel reads) as well as the fused one.
        let (inp, bundle_a) = model.stage1(&data, &beta).unwrap();
        let bundle = evaluate_rows(&inp).unwrap();
        let r = beta.len();
        for i in 0..n {
            let theta = model.theta(&data, &beta, i);
            let row = Row {
                bases: &bases,
                theta: &theta,
            };
            let (neglog, grad, hess, a) = row.reference(z[i], y[i], w[i], got.intercept[i]);
            let scale = std::iter::once(neglog.abs())
                .chain(grad.iter().chain(&hess).map(|v| v.abs()))
                .fold(0.0, f64::max);
            let paths = [
                ("fused", got.neglog[i], &got.grad, &got.hess, got.intercept[i]),
                ("bundle", bundle.neglog[i], &bundle.grad, &bundle.hess, bundle_a[i]),
            ];
            for (path, got_neglog, got_grad, got_hess, got_a) in paths {
                let (gg, gh) = (&got_grad[i * r..(i + 1) * r], &got_hess[i * r * r..(i + 1) * r * r]);
                let err = std::iter::once((got_neglog - neglog).abs())
                    .chain(gg.iter().zip(&grad).map(|(x, y)| (x - y).abs()))
                    .chain(gh.iter().zip(&hess).map(|(x, y)| (x - y).abs()))
                    .fold(0.0, f64::max)
                    / scale;
                worst.1 = worst.1.max((got_a - a).abs() / (1.0 + a.abs()));
                if err > worst.0 {
                    worst.0 = err;
                    worst.2 = format!(
                        "{label} ({path}): q {} b {} z {} y {}: a {a}",
                        theta[0], theta[1], z[i], y[i]
                    );
                }
            }
        }
    }
    worst
}

/// Slopes up to 0.9 in size, with every q, warp and score: within the rule.
#[test]
fn rows_match_the_quadrature_free_reference() {
    let (err, a_err, row) = worst_errors(&[-0.9, 0.05, 0.9]);
    eprintln!("largest errors: rows {err:e} ({row}), intercepts {a_err:e}");
    assert!(err <= 1e-10, "rows off by {err:e} at {row}");
    assert!(a_err <= 1e-13, "intercepts off by {a_err:e}");
}

/// Steep slopes (b = -1.4 and 2.5) with |q| >= 3.5: a in the far tails
/// (up to 22), the link's cells mapped to z of 6 to 11. With Stage 2's sums
/// in global monomials of z these rows missed the rule by up to 9.5e-7 of
/// their largest entry (steep warps, q = -8, b = 2.5, z = 0.3: H[11][11]
/// 1.68609 against 1.68637, which central differences of the reference's
/// gradient confirm to 1e-7): the sums of coefficients times moments
/// cancelled. With moments and cubics about each cell's midpoint
/// (`cells::moment_center`) they are within 2e-12.
#[test]
fn steep_rows_in_the_far_tails_match_the_reference() {
    let (err, a_err, row) = worst_errors(&[-1.4, 2.5]);
    eprintln!("largest errors: rows {err:e} ({row}), intercepts {a_err:e}");
    assert!(err <= 1e-10, "rows off by {err:e} at {row}");
    assert!(a_err <= 1e-13, "intercepts off by {a_err:e}");
}

/// The reference's gradient and Hessian are its value's and gradient's
/// central differences (the intercept re-solved at each step), at ordinary
/// and far-tail rows, to the differences' own accuracy.
#[test]
fn the_reference_is_its_own_derivative() {
    let (label, p_h, p_w, s_f, beta_h, beta_w) = warps().swap_remove(2);
    let score = CubicBasis::uniform(-4.0, 4.0, p_h).unwrap();
    let link = CubicBasis::uniform(-6.0, 6.0, p_w).unwrap();
    let bases = Bases::new(Some(score), Some(link), s_f).unwrap();
    for (q, b, z, y, a0) in [(0.3, 0.8, -1.1, 1.0, 0.4), (-8.0, 2.5, 0.3, 1.0, -21.6)] {
        let theta: Vec<f64> = [q, b].iter().chain(&beta_h).chain(&beta_w).copied().collect();
        let r = theta.len();
        let at = |u: usize, d: f64| {
            let mut t = theta.clone();
            t[u] += d;
            Row {
                bases: &bases,
                theta: &t,
            }
            .reference(z, y, 1.3, a0)
        };
        let (_, grad, hess, _) = at(0, 0.0);
        let big = grad.iter().chain(&hess).fold(0.0f64, |m, v| m.max(v.abs()));
        let h = 1e-5;
        for u in 0..r {
            let (plus, minus) = (at(u, h), at(u, -h));
            let fd = (plus.0 - minus.0) / (2.0 * h);
            assert!(
                (fd - grad[u]).abs() <= 1e-7 * big,
                "{label} q {q}: grad[{u}] {} vs {fd}",
                grad[u]
            );
            for v in 0..r {
                let fd = (plus.1[v] - minus.1[v]) / (2.0 * h);
                let got = hess[u * r + v];
                assert!(
                    (fd - got).abs() <= 1e-7 * big,
                    "{label} q {q}: H[{u}][{v}] {got} vs {fd}"
                );
            }
        }
    }
}
