//! Shared test helpers: an independent dense Newton reference for the BMS
//! fit, and the `fit_bms` binary for the command-line tests.

#![allow(dead_code)]

use matfree::bms::{BmsData, BmsModel};
use matfree::solvers::{Cholesky, CpuBackend, LinearOperator, Penalty};

/// f(beta) = neglog + beta^T S beta / 2 and its gradient, straight from the model.
fn penalised(model: &BmsModel, data: &BmsData, s: &[f64], beta: &[f64]) -> Option<(f64, Vec<f64>, Vec<f64>)> {
    let p = beta.len();
    let rows = model.evaluate(data, beta).ok()?;
    let jg = model.joint_gradient(data, &rows).ok()?;
    let sb: Vec<f64> = (0..p).map(|i| (0..p).map(|j| s[i * p + j] * beta[j]).sum()).collect();
    let f = jg.neglog + 0.5 * beta.iter().zip(&sb).map(|(a, b)| a * b).sum::<f64>();
    let g = jg.gradient.iter().zip(&sb).map(|(a, b)| a + b).collect();
    let mut h = LinearOperator::<CpuBackend>::to_dense(&model.row_hessian(data, &rows).ok()?).ok()?;
    h.iter_mut().zip(s).for_each(|(a, b)| *a += b);
    Some((f, g, h))
}

/// A plain dense Newton loop with step halving: the oracle the matrix-free
/// driver is compared with.
pub fn dense_newton(model: &BmsModel, data: &BmsData, penalty: &Penalty, lambda: &[f64], beta0: &[f64]) -> Vec<f64> {
    let s = penalty.dense(lambda).unwrap();
    let p = beta0.len();
    let mut beta = beta0.to_vec();
    let (mut f, mut g, mut h) = penalised(model, data, &s, &beta).expect("start inside the domain");
    for _ in 0..100 {
        if g.iter().fold(0.0f64, |m, v| m.max(v.abs())) <= 1e-11 * (f.abs() + 1.0) {
            break;
        }
        let step = ridged_solve(p, &h, &g);
        let mut t = 1.0;
        loop {
            let trial: Vec<f64> = beta.iter().zip(&step).map(|(b, d)| b - t * d).collect();
            if let Some((ft, gt, ht)) = penalised(model, data, &s, &trial) {
                if ft <= f {
                    (beta, f, g, h) = (trial, ft, gt, ht);
                    break;
                }
            }
            t *= 0.5;
            assert!(t > 1e-12, "dense reference line search failed");
        }
    }
    beta
}

/// (H + mu I)^{-1} g with the smallest mu in 0, 1e-8 d, 1e-7 d, ... (d =
/// max diag) that makes the matrix positive definite: far from the optimum
/// the observed information need not be.
fn ridged_solve(p: usize, h: &[f64], g: &[f64]) -> Vec<f64> {
    let d = (0..p).fold(0.0f64, |m, i| m.max(h[i * p + i].abs()));
    let mut mu = 0.0;
    loop {
        let mut a = h.to_vec();
        (0..p).for_each(|i| a[i * p + i] += mu);
        if let Ok(c) = Cholesky::factor(p, &a) {
            return c.solve(g, 1).unwrap();
        }
        mu = if mu == 0.0 { 1e-8 * d } else { mu * 10.0 };
    }
}

/// max |a - b| / max |b|.
pub fn rel_diff(a: &[f64], b: &[f64]) -> f64 {
    let scale = b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    a.iter().zip(b).fold(0.0f64, |m, (x, y)| m.max((x - y).abs())) / scale
}

/// Every entry within `rel` times the largest |want| of its oracle value.
pub fn assert_close(label: &str, got: &[f64], want: &[f64], rel: f64) {
    assert_eq!(got.len(), want.len(), "{label} length");
    let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-300);
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= rel * scale,
            "{label}[{k}]: got {g} vs want {w} (scale {scale})"
        );
    }
}

/// The BMS Newton fixture shared by the CPU and GPU driver tests: data,
/// penalty, lambda, a poor start (zero) and the dense reference optimum.
pub struct NewtonFixture {
    pub g: matfree::bms::io::generator::Generated,
    pub penalty: Penalty,
    pub lambda: [f64; 2],
    pub beta0: Vec<f64>,
    pub want: Vec<f64>,
}

impl NewtonFixture {
    /// The driver options every fit of this fixture uses, for one solver.
    pub fn options(&self, solver: matfree::solvers::newton::StepSolver) -> matfree::solvers::newton::NewtonOptions {
        matfree::solvers::newton::NewtonOptions {
            solver,
            decrement_tol: 1e-16,
            max_step: 2.0,
            ..Default::default()
        }
    }
}

pub fn newton_fixture() -> NewtonFixture {
    use matfree::bms::io::generator::{generate, GeneratorConfig};
    let g = generate(GeneratorConfig {
        n: 400,
        p_m: 3,
        p_g: 2,
        p_h: 4,
        p_w: 3,
        s_f: 1.0,
        seed: 5,
    })
    .unwrap();
    let penalty = matfree::bms::bms_penalty(&g.model).unwrap();
    let lambda = [2.0, 0.5];
    let beta0 = vec![0.0; g.beta.len()];
    let want = dense_newton(&g.model, &g.data, &penalty, &lambda, &beta0);
    NewtonFixture {
        g,
        penalty,
        lambda,
        beta0,
        want,
    }
}

/// A converged driver fit equal to the reference within 1e-8 relative.
pub fn check_newton_fit(label: &str, beta: &[f64], gradient: &[f64], objective: f64, converged: bool, want: &[f64]) {
    assert!(converged, "{label}: not converged");
    let d = rel_diff(beta, want);
    assert!(d <= 1e-8, "{label}: coefficients differ by {d:e} relative");
    let gn = gradient.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    assert!(gn <= 1e-10 * (objective.abs() + 1.0), "{label}: gradient {gn:e}");
}

/// hvp, hvp_multi (k columns back to back), diagonal and dense of the CPU
/// operator: the oracle every device operator is compared with.
pub fn cpu_operator_results(op: &matfree::RowHessian, v: &[f64], k: usize) -> Vec<Vec<f64>> {
    let p = op.dim();
    let mut multi = vec![0.0; p * k];
    op.apply_multi(&v.to_vec(), k, &mut multi).unwrap();
    vec![
        multi[..p].to_vec(),
        multi,
        op.diagonal_host(),
        LinearOperator::<CpuBackend>::to_dense(op).unwrap(),
    ]
}

/// The same four from a single-GPU device operator.
#[cfg(feature = "cuda")]
pub fn device_operator_results(dev: &matfree::cuda::DeviceRowHessian, v: &[f64], k: usize) -> Vec<Vec<f64>> {
    let g = dev.gpu();
    let p = dev.layout().p_total();
    let mut multi = g.zeros(p * k).unwrap();
    dev.hvp_multi_into(&g.upload(v).unwrap(), k, &mut multi).unwrap();
    vec![
        dev.hvp_host(&v[..p]).unwrap(),
        g.download(&multi).unwrap(),
        dev.diagonal_host().unwrap(),
        dev.dense_host().unwrap(),
    ]
}

/// target/<profile>/examples/fit_bms, next to the test's deps/ folder
/// (cargo test builds the examples before running the tests).
pub fn fit_bms_binary() -> std::path::PathBuf {
    example_binary("fit_bms")
}

/// target/<profile>/examples/fit_gam (see [`fit_bms_binary`]).
pub fn fit_gam_binary() -> std::path::PathBuf {
    example_binary("fit_gam")
}

/// The example `name`'s binary, target/<profile>/examples/<name>.
pub fn example_binary(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().unwrap().parent().unwrap();
    profile
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX))
}

/// Layouts beyond the BMS shape, for the operators' parity tests: a GLM
/// (r = 1, narrow and wider than a warp), two and three predictors, a
/// predictor after a direct block (not the two-leading-predictors form the
/// fused and tiled kernels serve), direct blocks only, and r and p above
/// the warp width.
pub fn generic_layouts() -> Vec<(usize, Vec<matfree::Block>)> {
    use matfree::Block::{Direct, Predictor};
    vec![
        (500, vec![Predictor(7)]),
        (333, vec![Predictor(40)]),
        (257, vec![Predictor(3), Predictor(5)]),
        (300, vec![Predictor(4), Direct(1), Predictor(2)]),
        (129, vec![Predictor(3), Predictor(33), Predictor(2)]),
        (64, vec![Direct(5)]),
        (200, vec![Direct(3), Predictor(4), Predictor(2)]),
        (97, vec![Predictor(50), Direct(40)]),
        (61, vec![Predictor(2); 35]),
    ]
}
