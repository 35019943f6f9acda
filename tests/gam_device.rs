//! The GLM's rows on a GPU (`gam::DeviceGlmRows` under
//! `cuda::DeviceRowObjective`) against the CPU's (`GlmRows` under
//! `RowObjective`), on every family and link (`tests/common/glm_cases.rs`:
//! rows into the tails, prior weights with zeros, offsets, trials, a scale
//! phi read from a shared cell):
//!
//! - each row's value, gradient and Hessian within 1e-12 of the row's
//!   largest (a one-column design with x_i = theta_i, so theta is the same
//!   bits on both sides; the device's libm and FMA contraction are the only
//!   differences, the formulas being the CPU's: `tests/gam_replay.rs` shows
//!   them equal to the bit on the host);
//! - the joint value and gradient, the value alone, the dense Hessian (on
//!   the tensor cores and by the entry-a-thread kernel), the exact Hessian
//!   derivative and REML's traces tr(A dH_k) within 1e-12 of their scale
//!   (the sums of the terms' magnitudes), on a five-column design and on a
//!   wide one (400,000 x 90: several blocks of 8 x 8 tiles, two tiles of
//!   Z = X K);
//! - a point outside the domain rejected as the CPU rejects it, naming the
//!   first row.

#![cfg(feature = "cuda")]

#[path = "common/glm_cases.rs"]
mod glm_cases;

use std::sync::Arc;

use glm_cases::{case, families, Case};
use matfree::cuda::{gpu_for_test, CudaBackend, DeviceRowObjective, Gpu};
use matfree::gam::{DeviceGlmRows, Distribution, Family, Link, ScaleCell};
use matfree::solvers::{CpuBackend, Objective};
use matfree::Error;

fn device(gpu: &Arc<Gpu>, c: &Case, scale: &Arc<ScaleCell>) -> DeviceRowObjective<DeviceGlmRows> {
    let designs = c.designs();
    let rows = DeviceGlmRows::new(gpu.clone(), &c.rows, &designs)
        .unwrap()
        .with_scale(scale.clone());
    DeviceRowObjective::new(rows, &designs).unwrap()
}

/// max |got - want| / scale over entries.
fn error(got: &[f64], want: &[f64], scale: f64) -> f64 {
    assert_eq!(got.len(), want.len());
    got.iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs() / scale)
        .fold(0.0, f64::max)
}

/// Each row's value, gradient and Hessian against the CPU's, for every
/// family and link, with and without weights, offsets and trials.
#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn gpu_glm_rows_equal_the_cpu_rows() {
    let Some(gpu) = gpu_for_test("gpu_glm_rows_equal_the_cpu_rows") else {
        return;
    };
    for (k, family) in families().into_iter().enumerate() {
        for full in [true, false] {
            let c = case(family, 20_000, 1, full, 300 + k as u64);
            let scale = Arc::new(ScaleCell::new(c.phi));
            let rows = device(&gpu, &c, &scale).evaluate_rows(&c.beta).unwrap();
            let got = [
                gpu.download(&rows.neglog).unwrap(),
                gpu.download(&rows.grad).unwrap(),
                rows.hessian.hess_host().unwrap(),
            ];
            let want = c.rows_at(&c.x);
            let (mut worst, mut worst_each) = (0.0f64, 0.0f64);
            for i in 0..c.n {
                let size = (0..3).map(|j| want[j][i].abs()).fold(0.0, f64::max).max(1e-300);
                for j in 0..3 {
                    let d = (got[j][i] - want[j][i]).abs();
                    worst = worst.max(d / size);
                    if d > 0.0 {
                        worst_each = worst_each.max(d / want[j][i].abs());
                    }
                }
            }
            println!(
                "{}: worst {worst:.1e} of the row's largest ({worst_each:.1e} of each entry)",
                c.name
            );
            assert!(worst <= 1e-12, "{}: rows differ by {worst:e} of their largest", c.name);
        }
    }
}

/// The sums of the terms' magnitudes: sum_i |v_i|, each column's sum_i
/// |g_i x_ic|, the largest entry of X^T |W| X for the Hessian and of
/// X^T |t d / phi| X for the first direction's derivative.
fn scales(c: &Case) -> (f64, f64, f64, f64) {
    let theta: Vec<f64> = (0..c.n).map(|i| c.dot(i, &c.beta)).collect();
    let [v, g, h] = c.rows_at(&theta);
    let d: Vec<f64> = (0..c.n).map(|i| c.dot(i, &c.directions[0])).collect();
    let t = c.third_at(&theta, &[d]);
    let p = c.p;
    let (mut gs, mut hs, mut ts) = (vec![0.0; p], vec![0.0; p], vec![0.0; p]);
    for i in 0..c.n {
        for a in 0..p {
            let x = c.x[i * p + a];
            gs[a] += (g[i] * x).abs();
            hs[a] += (h[i] * x * x).abs();
            ts[a] += (t[i] * x * x).abs();
        }
    }
    let max = |v: &[f64]| v.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    (v.iter().map(|x| x.abs()).sum(), max(&gs), max(&hs), max(&ts))
}

/// A case's joint quantities on the device against the CPU's.
fn check_objective(gpu: &Arc<Gpu>, c: &Case) {
    let scale = Arc::new(ScaleCell::new(c.phi));
    let dev = device(gpu, c, &scale);
    let cpu = c.objective();
    let inv = 1.0 / c.phi;
    let (vs, gs, hs, ts) = scales(c);
    let (gradient, value, value_alone, traces) = c.cpu_joint();
    let e = Objective::<CudaBackend>::evaluate(&dev, &c.beta).unwrap().unwrap();
    let rows = dev.evaluate_rows(&c.beta).unwrap();
    assert_eq!(rows.hessian.dense_path(), "tensor", "{}", c.name);
    let dense = rows.hessian.dense_host().unwrap();
    let staged = rows.hessian.with_tensor_dense(false).dense_host().unwrap();
    let cpu_eval = Objective::<CpuBackend>::evaluate(&cpu, &c.beta).unwrap().unwrap();
    let cpu_dense: Vec<f64> = cpu_eval.hessian.to_dense().unwrap().iter().map(|h| inv * h).collect();
    let alone = Objective::<CudaBackend>::value(&dev, &c.beta).unwrap().unwrap();
    let dh = Objective::<CudaBackend>::hessian_derivative(&dev, &c.beta, &[], &c.directions[0], 1e-4).unwrap();
    let h0 = vec![0.0; c.p * c.p];
    let cpu_dh: Vec<f64> = Objective::<CpuBackend>::hessian_derivative(&cpu, &c.beta, &h0, &c.directions[0], 1e-4)
        .unwrap()
        .iter()
        .map(|t| inv * t)
        .collect();
    let dirs: Vec<&[f64]> = c.directions.iter().map(Vec::as_slice).collect();
    let steps = vec![1e-4; dirs.len()];
    let dev_traces =
        Objective::<CudaBackend>::hessian_derivative_traces(&dev, &c.beta, &h0, &c.inverse(), &dirs, &steps).unwrap();
    let trace_scales = c.trace_scales();
    let trace_error = dev_traces
        .iter()
        .zip(&traces)
        .zip(&trace_scales)
        .map(|((g, w), s)| (g - w).abs() / s)
        .fold(0.0, f64::max);
    let errors = [
        error(&[e.value], &[value], vs),
        error(&e.gradient, &gradient, gs),
        error(&[alone], &[value_alone.unwrap()], vs),
        error(&dense, &cpu_dense, hs),
        error(&staged, &cpu_dense, hs),
        error(&dh, &cpu_dh, ts),
        trace_error,
    ];
    let shown: Vec<String> = errors.iter().map(|e| format!("{e:.1e}")).collect();
    println!(
        "{} ({} x {}): value, gradient, value alone, dense (tensor, staged), dH, traces {}",
        c.name,
        c.n,
        c.p,
        shown.join(" ")
    );
    assert!(errors.iter().all(|e| *e <= 1e-12), "{}: {errors:?}", c.name);
}

/// The joint value, gradient, value alone, dense Hessian, Hessian
/// derivative and traces against the CPU objective's, for every family and
/// link on a five-column design, and on a wide, tall binomial one.
#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn gpu_glm_objective_equals_the_cpu_objective() {
    let Some(gpu) = gpu_for_test("gpu_glm_objective_equals_the_cpu_objective") else {
        return;
    };
    for (k, family) in families().into_iter().enumerate() {
        check_objective(&gpu, &case(family, 5_000, 5, true, 400 + k as u64));
    }
    let logit = Family::new(Distribution::Binomial, Link::Logit).unwrap();
    check_objective(&gpu, &case(logit, 400_000, 90, false, 41));
}

/// A point outside the domain (a Poisson identity link's eta <= 0 at rows
/// 17 and 30,001): no evaluation and no value, as on the CPU, and the rows'
/// verdict names row 17; a new scale in the cell divides the next
/// evaluation's rows.
#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn gpu_glm_rows_outside_the_domain_are_rejected_and_the_scale_is_read_each_launch() {
    let Some(gpu) = gpu_for_test("gpu_glm_rows_outside_the_domain") else {
        return;
    };
    let family = Family::new(Distribution::Poisson, Link::Identity).unwrap();
    let mut c = case(family, 40_000, 1, true, 5);
    let scale = Arc::new(ScaleCell::new(1.0));
    let good = device(&gpu, &c, &scale);
    let v1 = Objective::<CudaBackend>::value(&good, &c.beta).unwrap().unwrap();
    scale.set(4.0);
    let v4 = Objective::<CudaBackend>::value(&good, &c.beta).unwrap().unwrap();
    let e4 = Objective::<CudaBackend>::evaluate(&good, &c.beta).unwrap().unwrap();
    assert!(
        (v4 - v1 / 4.0).abs() <= 1e-14 * v1,
        "value at phi 4: {v4} vs {}",
        v1 / 4.0
    );
    assert!(
        (e4.value - v4).abs() <= 1e-12 * v4,
        "evaluation at phi 4: {} vs {v4}",
        e4.value
    );
    for bad in [17, 30_001] {
        c.x[bad] = -0.5 - c.rows.offset()[bad];
    }
    let dev = device(&gpu, &c, &scale);
    assert!(Objective::<CudaBackend>::evaluate(&dev, &c.beta).unwrap().is_none());
    assert!(Objective::<CudaBackend>::value(&dev, &c.beta).unwrap().is_none());
    match dev.evaluate_rows(&c.beta) {
        Err(Error::RowRejected { row, .. }) => assert_eq!(row, 17),
        Err(other) => panic!("expected row 17 rejected, got {other}"),
        Ok(_) => panic!("expected row 17 rejected, got rows"),
    }
    let objective = c.objective();
    assert!(Objective::<CpuBackend>::evaluate(&objective, &c.beta)
        .unwrap()
        .is_none());
}
