//! A user's own model (`examples/own_model/model.rs`: penalised logistic
//! regression y ~ x1 + s(x2) with a P-spline, REML) against mgcv on the
//! committed data set: `tests/mgcv/own_model.R` simulated
//! `tests/data/own_model.csv`, fitted the same design and penalty with
//! `gam(..., paraPen, method = "REML")` at tolerances 1e-12 and wrote
//! `tests/data/own_model_mgcv.json`. The fit runs with
//! `model::options()`: REML to a projected gradient of 1e-9 edf, inner
//! Newton to a decrement of 1e-20; on the GPU too, where there is one. Then the generic row objective on a
//! layout with a direct block, against its own derivatives.

#[path = "../examples/own_model/model.rs"]
mod model;

use std::sync::Arc;

#[cfg(feature = "cuda")]
use matfree::cuda::{gpu_for_test, CudaBackend, DeviceRowObjective, GpuGroup, MultiGpuBackend, ShardedRowObjective};
use matfree::solvers::reml::RemlFit;
use matfree::solvers::{fd_hessian_derivative, CpuBackend, Objective, PcgKernels};
use matfree::{Block, Designs, Layout, RowEvaluator, RowObjective};
use serde_json::Value;

const TOL: f64 = 1e-5;

/// Relative to the package root, where cargo runs tests (and where a
/// staged binary runs on the device machine, whose checkout lies elsewhere).
fn data(file: &str) -> String {
    format!("tests/data/{file}")
}

fn numbers(v: &Value, key: &str) -> Vec<f64> {
    match &v[key] {
        Value::Array(a) => a.iter().map(|x| x.as_f64().expect("a number")).collect(),
        x => vec![x.as_f64().unwrap_or_else(|| panic!("{key} is not a number"))],
    }
}

/// Every entry within TOL of mgcv's, relative.
fn close(what: &str, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (j, (g, w)) in got.iter().zip(want).enumerate() {
        let rel = (g - w).abs() / w.abs();
        assert!(
            rel <= TOL,
            "{what}[{j}]: matfree {g:.12e}, mgcv {w:.12e}, relative {rel:.2e}"
        );
    }
}

/// The fit on `backend`, held to mgcv's values.
fn matches_mgcv<B: PcgKernels>(backend: &B, objective: &dyn Objective<B>, problem: &model::Problem) -> RemlFit {
    let fit = model::fit_on(backend, objective, &problem.penalty).unwrap();
    let stats = &fit.statistics;
    let reference: Value =
        serde_json::from_str(&std::fs::read_to_string(data("own_model_mgcv.json")).unwrap()).unwrap();
    let p = fit.laml.beta.len();
    assert!(fit.report.converged, "{:?}", fit.report.termination);
    let se = |v: &[f64], p: usize| (0..p).map(|j| v[j * p + j].sqrt()).collect::<Vec<_>>();
    close("lambda", &fit.lambda, &numbers(&reference, "lambda"));
    close("edf_total", &[stats.edf.total], &numbers(&reference, "edf_total"));
    close("edf_smooth", &stats.edf.blocks, &numbers(&reference, "edf_smooth"));
    close("coefficients", &fit.laml.beta, &numbers(&reference, "coefficients"));
    close("se", &se(&stats.covariance, p), &numbers(&reference, "se"));
    // The smooth in the B-spline basis (Z b, Z V Z^T): independent of the
    // null-space basis either side's QR chose.
    let (spline, z) = (2..p, &problem.constraint);
    let b = z.expand_coefficients(&fit.laml.beta[spline.clone()]).unwrap();
    close("spline_coefficients", &b, &numbers(&reference, "spline_coefficients"));
    let pairs = spline.clone().flat_map(|i| spline.clone().map(move |j| (i, j)));
    let v: Vec<f64> = pairs.map(|(i, j)| stats.covariance[i * p + j]).collect();
    let spline_se = se(&z.expand_covariance(&v).unwrap(), z.dim());
    close("spline_se", &spline_se, &numbers(&reference, "spline_se"));
    // mgcv's score is matfree's V less Mp ln(2 pi) / 2 (Mp = 3 unpenalised
    // dimensions); the R script checked that constant on its own parts.
    assert_eq!(problem.null_space_dim as f64, numbers(&reference, "null_space_dim")[0]);
    let constant = -(problem.null_space_dim as f64) * (2.0 * std::f64::consts::PI).ln() / 2.0;
    close(
        "reml_score",
        &[fit.laml.value + constant],
        &numbers(&reference, "reml_score"),
    );
    fit
}

#[test]
fn the_own_model_fit_matches_mgcv() {
    let problem = model::problem(&data("own_model.csv")).unwrap();
    matches_mgcv(&CpuBackend::new(), &problem.objective, &problem);
}

/// The same bits on one thread as on three.
#[test]
fn the_fit_is_the_same_for_any_thread_count() {
    let on = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        let fit = pool.install(|| {
            let problem = model::problem(&data("own_model.csv")).unwrap();
            model::fit_on(&CpuBackend::new(), &problem.objective, &problem.penalty).unwrap()
        });
        (
            fit.laml.value.to_bits(),
            fit.laml.beta.iter().map(|b| b.to_bits()).collect::<Vec<_>>(),
        )
    };
    assert_eq!(on(1), on(3));
}

/// On the GPU (the rows on the host, their Hessians uploaded): mgcv's
/// values as on the CPU, and the CPU fit's to 1e-9.
#[cfg(feature = "cuda")]
#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn gpu_the_own_model_fit_matches_mgcv_and_the_cpu() {
    let Some(gpu) = gpu_for_test("gpu_the_own_model_fit_matches_mgcv_and_the_cpu") else {
        return;
    };
    let cpu_problem = model::problem(&data("own_model.csv")).unwrap();
    let cpu = matches_mgcv(&CpuBackend::new(), &cpu_problem.objective, &cpu_problem);
    let problem = model::problem(&data("own_model.csv")).unwrap();
    let device =
        DeviceRowObjective::from_host(gpu.clone(), model::problem(&data("own_model.csv")).unwrap().objective).unwrap();
    let fit = matches_mgcv(&CudaBackend::new(gpu).unwrap(), &device, &problem);
    for (g, c) in fit
        .laml
        .beta
        .iter()
        .chain(&fit.lambda)
        .zip(cpu.laml.beta.iter().chain(&cpu.lambda))
    {
        assert!((g - c).abs() <= 1e-9 * c.abs(), "GPU {g:e} vs CPU {c:e}");
    }
}

/// A two-coordinate row, theta = (eta = x . beta_0, a direct coefficient c):
/// neglog = exp(eta + c) - y (eta + c) + c^2 / 2, a Poisson term with an
/// offset c shared by every row. Infinite where eta + c > 700.
struct Shared {
    y: Vec<f64>,
}

impl RowEvaluator for Shared {
    fn row(&self, i: usize, t: &[f64], grad: &mut [f64], hess: &mut [f64]) -> f64 {
        let (s, c) = (t[0] + t[1], t[1]);
        let e = if s > 700.0 { f64::INFINITY } else { s.exp() };
        grad.copy_from_slice(&[e - self.y[i], e - self.y[i] + c]);
        hess.copy_from_slice(&[e, e, e, e + 1.0]);
        e - self.y[i] * s + c * c / 2.0
    }
    fn has_hessian_derivative(&self) -> bool {
        true
    }
    fn row_hessian_derivative(&self, _i: usize, t: &[f64], d: &[f64], out: &mut [f64]) {
        out.fill((t[0] + t[1]).exp() * (d[0] + d[1]));
    }
}

fn shared_objective(n: usize) -> RowObjective<Shared> {
    let x: Vec<f64> = (0..n).flat_map(|i| [1.0, (i as f64 / n as f64) - 0.5]).collect();
    let designs = Arc::new(Designs::single(n, 2, x).unwrap());
    let layout = Layout::new(&[Block::Predictor(2), Block::Direct(1)]).unwrap();
    RowObjective::new(
        layout,
        designs,
        Shared {
            y: (0..n).map(|i| (i % 4) as f64).collect(),
        },
    )
    .unwrap()
}

#[test]
fn a_row_objective_over_a_direct_block_has_its_own_derivatives() {
    let obj = shared_objective(1000);
    let beta = [0.3, -0.8, 0.2];
    let ev = obj.evaluate(&beta).unwrap().unwrap();
    let h = ev.hessian.to_dense().unwrap();
    // Central differences of the value give the gradient, of the gradient the Hessian.
    let shifted = |j: usize, t: f64| {
        let mut b = beta;
        b[j] += t;
        obj.evaluate(&b).unwrap().unwrap()
    };
    let t = 1e-5;
    for j in 0..3 {
        let (up, down) = (shifted(j, t), shifted(j, -t));
        let fd = (up.value - down.value) / (2.0 * t);
        assert!(
            (fd - ev.gradient[j]).abs() <= 1e-6 * ev.gradient[j].abs().max(1.0),
            "gradient[{j}]"
        );
        for k in 0..3 {
            let fd = (up.gradient[k] - down.gradient[k]) / (2.0 * t);
            assert!(
                (fd - h[k * 3 + j]).abs() <= 1e-6 * h[k * 3 + j].abs().max(1.0),
                "hessian[{k},{j}]"
            );
        }
    }
    let d = [0.5, 1.0, -0.25];
    let exact = obj.hessian_derivative(&beta, &h, &d, 1e-6).unwrap();
    let fd = fd_hessian_derivative::<CpuBackend, _>(&obj, &beta, &h, &d, 1e-6).unwrap();
    for (e, f) in exact.iter().zip(&fd) {
        assert!(
            (e - f).abs() <= 1e-4 * e.abs().max(1.0),
            "dH: exact {e}, differenced {f}"
        );
    }
    // Outside the domain (a row's exp overflows): no evaluation, no error.
    assert!(obj.evaluate(&[800.0, 0.0, 0.0]).unwrap().is_none());
    assert!(obj.value(&[800.0, 0.0, 0.0]).unwrap().is_none());
    let e = obj.evaluate(&[0.0; 2]).err().expect("a short beta is an error");
    assert!(e.to_string().contains("beta"), "{e}");
}

/// How an evaluation keeps its Hessian: Auto keeps the dense matrix for
/// this small p (every Newton step is dense) and the rows for a wide one;
/// the dense operator gives the rows' dense matrix, and their diagonal and
/// products (one vector and 40, above the warp width) to rounding.
#[test]
fn dense_storage_gives_the_rows_operator_on_the_cpu() {
    use matfree::solvers::newton::CostEstimate;
    use matfree::HessianStorage;
    let n = 1000;
    let cost = |p: usize| matfree::row_objective::row_cost(&Layout::new(&[Block::Predictor(p)]).unwrap(), n);
    assert!(HessianStorage::Auto.keeps_dense(cost(3), 3));
    assert!(!HessianStorage::Auto.keeps_dense(cost(400), 400), "{:?}", cost(400));
    assert!(!HessianStorage::Rows.keeps_dense(CostEstimate::dense(3), 3));
    assert!(HessianStorage::Dense.keeps_dense(cost(400), 400));
    let beta = [0.3, -0.8, 0.2];
    let rows = shared_objective(n).with_hessian_storage(HessianStorage::Rows);
    let dense = shared_objective(n);
    let (want, got) = (
        rows.evaluate(&beta).unwrap().unwrap(),
        dense.evaluate(&beta).unwrap().unwrap(),
    );
    assert_eq!((got.value, &got.gradient), (want.value, &want.gradient));
    let h = want.hessian.to_dense().unwrap();
    assert_eq!(got.hessian.to_dense().unwrap(), h);
    let (mut dg, mut dw) = (vec![0.0; 3], vec![0.0; 3]);
    got.hessian.diagonal(&mut dg).unwrap();
    want.hessian.diagonal(&mut dw).unwrap();
    // The dense matrix's own diagonal; the rows sum theirs in another order.
    assert_eq!(dg, [h[0], h[4], h[8]]);
    for (a, b) in dg.iter().zip(&dw) {
        assert!((a - b).abs() <= 1e-14 * b.abs(), "diagonal {a} vs {b}");
    }
    for k in [1, 40] {
        let x: Vec<f64> = (0..3 * k).map(|i| ((i * 7 % 11) as f64 - 5.0) / 3.0).collect();
        let (mut yg, mut yw) = (vec![0.0; 3 * k], vec![0.0; 3 * k]);
        got.hessian.apply_multi(&x, k, &mut yg).unwrap();
        want.hessian.apply_multi(&x, k, &mut yw).unwrap();
        for (i, (a, b)) in yg.iter().zip(&yw).enumerate() {
            let scale: f64 = (0..3).map(|l| (h[(i % 3) * 3 + l] * x[i / 3 * 3 + l]).abs()).sum();
            assert!((a - b).abs() <= 1e-13 * scale, "k {k}, entry {i}: {a} vs {b}");
        }
    }
}

/// A model with CPU rows on one GPU and on a group of one device (and of
/// every visible device, with two or more): the same value, gradient and
/// Hessian as on the CPU, the exact dH of the host rows, the value alone
/// and the domain rule (a row outside it: no evaluation, no error).
#[cfg(feature = "cuda")]
#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn gpu_host_rows_on_one_gpu_and_on_a_group_match_the_cpu() {
    use matfree::solvers::Backend;
    let Some(gpu) = gpu_for_test("gpu_host_rows_on_one_gpu_and_on_a_group_match_the_cpu") else {
        return;
    };
    let n = 1001;
    let cpu = shared_objective(n);
    let beta = [0.3, -0.8, 0.2];
    let want = cpu.evaluate(&beta).unwrap().unwrap();
    let h = want.hessian.to_dense().unwrap();
    let d = [0.5, 1.0, -0.25];
    let want_dh = cpu.hessian_derivative(&beta, &h, &d, 1e-6).unwrap();
    let near = |what: &str, got: &[f64], want: &[f64]| {
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() <= 1e-12 * w.abs().max(1.0), "{what}: {g:e} vs {w:e}");
        }
    };
    let one = DeviceRowObjective::from_host(gpu.clone(), shared_objective(n)).unwrap();
    let backend = CudaBackend::new(gpu.clone()).unwrap();
    let got = one.evaluate(&beta).unwrap().unwrap();
    near("one gpu: value", &[got.value], &[want.value]);
    near("one gpu: gradient", &got.gradient, &want.gradient);
    near("one gpu: hessian", &got.hessian.to_dense().unwrap(), &h);
    near(
        "one gpu: dH",
        &one.hessian_derivative(&beta, &h, &d, 1e-6).unwrap(),
        &want_dh,
    );
    near(
        "one gpu: value alone",
        &[one.value(&beta).unwrap().unwrap()],
        &[want.value],
    );
    assert!(one.evaluate(&[800.0, 0.0, 0.0]).unwrap().is_none());
    let v = backend.upload(&d).unwrap();
    let mut hv = backend.zeros(3).unwrap();
    got.hessian.apply(&v, &mut hv).unwrap();
    let hv = backend.download(&hv).unwrap();
    let want_hv: Vec<f64> = (0..3).map(|i| (0..3).map(|j| h[i * 3 + j] * d[j]).sum()).collect();
    near("one gpu: product", &hv, &want_hv);
    let mut groups = vec![GpuGroup::open(1).unwrap()];
    if matfree::cuda::Gpu::count().unwrap() >= 2 {
        groups.push(GpuGroup::open_all().unwrap());
    }
    for group in groups {
        let label = format!("{} gpus", group.len());
        let sharded = ShardedRowObjective::from_host(group, shared_objective(n)).unwrap();
        let got = sharded.evaluate(&beta).unwrap().unwrap();
        near(&format!("{label}: value"), &[got.value], &[want.value]);
        near(&format!("{label}: gradient"), &got.gradient, &want.gradient);
        near(&format!("{label}: hessian"), &got.hessian.to_dense().unwrap(), &h);
        let fd = fd_hessian_derivative::<MultiGpuBackend, _>(&sharded, &beta, &h, &d, 1e-6).unwrap();
        let cpu_fd = fd_hessian_derivative::<CpuBackend, _>(&cpu, &beta, &h, &d, 1e-6).unwrap();
        for (g, w) in fd.iter().zip(&cpu_fd) {
            assert!(
                (g - w).abs() <= 1e-6 * w.abs().max(1.0),
                "{label}: differenced dH {g:e} vs {w:e}"
            );
        }
        assert!(
            sharded.evaluate(&[800.0, 0.0, 0.0]).unwrap().is_none(),
            "{label}: outside"
        );
    }
}

/// A row over a wide design and a direct block: theta = (eta, c_1..c_3),
/// s = a . theta, neglog = exp(s) - y s + |c|^2 / 2 (r = 4, 40 design
/// columns: wider than a warp).
struct Wide {
    y: Vec<f64>,
}

const A: [f64; 4] = [1.0, 1.0, 0.5, -0.3];

impl RowEvaluator for Wide {
    fn row(&self, i: usize, t: &[f64], grad: &mut [f64], hess: &mut [f64]) -> f64 {
        let s: f64 = t.iter().zip(A).map(|(x, a)| x * a).sum();
        let e = s.exp();
        for u in 0..4 {
            grad[u] = (e - self.y[i]) * A[u] + if u > 0 { t[u] } else { 0.0 };
            for v in 0..4 {
                hess[u * 4 + v] = e * A[u] * A[v] + if u == v && u > 0 { 1.0 } else { 0.0 };
            }
        }
        e - self.y[i] * s + t[1..].iter().map(|c| c * c).sum::<f64>() / 2.0
    }
    fn has_hessian_derivative(&self) -> bool {
        true
    }
    fn row_hessian_derivative(&self, _i: usize, t: &[f64], d: &[f64], out: &mut [f64]) {
        let s: f64 = t.iter().zip(A).map(|(x, a)| x * a).sum();
        let ad: f64 = d.iter().zip(A).map(|(x, a)| x * a).sum();
        for u in 0..4 {
            for v in 0..4 {
                out[u * 4 + v] = s.exp() * ad * A[u] * A[v];
            }
        }
    }
}

fn wide_objective(n: usize, w: usize) -> RowObjective<Wide> {
    let x: Vec<f64> = (0..n * w)
        .map(|k| ((k * 7919 % 1009) as f64 / 1009.0 - 0.5) / (w as f64).sqrt())
        .collect();
    let designs = Arc::new(Designs::single(n, w, x).unwrap());
    let layout = Layout::new(&[Block::Direct(1), Block::Predictor(w), Block::Direct(2)]).unwrap();
    let y = (0..n).map(|i| (i % 3) as f64).collect();
    RowObjective::new(layout, designs, Wide { y }).unwrap()
}

/// REML's traces tr(A dH_k) from the rows' leverages (one pass for every
/// direction) equal tr(A dH_k) through each dense dH_k, for a positive
/// definite A and (through the fallback) an indefinite one; on a layout
/// with direct blocks around a design wider than a warp, and on the
/// two-coordinate model.
#[test]
fn hessian_derivative_traces_equal_the_traces_of_the_dense_derivatives() {
    fn check<E: RowEvaluator>(obj: &RowObjective<E>, beta: &[f64]) {
        let p = beta.len();
        let h = obj.evaluate(beta).unwrap().unwrap().hessian.to_dense().unwrap();
        let m: Vec<f64> = (0..p * p).map(|k| ((k * 31 % 17) as f64 - 8.0) / 17.0).collect();
        let spd: Vec<f64> = (0..p * p)
            .map(|k| (0..p).map(|t| m[(k / p) * p + t] * m[(k % p) * p + t]).sum::<f64>() + f64::from(k / p == k % p))
            .collect();
        let indefinite: Vec<f64> = spd
            .iter()
            .enumerate()
            .map(|(k, v)| v - 3.0 * f64::from(k == 0))
            .collect();
        let dirs: Vec<Vec<f64>> = (0..3)
            .map(|c| (0..p).map(|j| ((j + 3 * c) as f64 * 0.7).sin()).collect())
            .collect();
        let views: Vec<&[f64]> = dirs.iter().map(|d| d.as_slice()).collect();
        for a in [&spd, &indefinite] {
            let got = obj.hessian_derivative_traces(beta, &h, a, &views, &[1e-6; 3]).unwrap();
            for (d, g) in dirs.iter().zip(&got) {
                let dh = obj.hessian_derivative(beta, &h, d, 1e-6).unwrap();
                let want = matfree::solvers::newton::trace_product(a, &dh, p).unwrap();
                assert!((g - want).abs() <= 1e-10 * want.abs().max(1.0), "trace {g} vs {want}");
            }
        }
    }
    let w = 40;
    let beta: Vec<f64> = (0..w + 3).map(|j| 0.05 * (j as f64).cos()).collect();
    check(&wide_objective(1500, w), &beta);
    check(&shared_objective(700), &[0.3, -0.8, 0.2]);
}
