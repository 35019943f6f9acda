//! BMS Stage 2 on the device against the CPU row kernel (the oracle), and
//! the device operator built from device rows against the CPU operator.
#![cfg(feature = "cuda")]

mod common;

use matfree::bms::device::{evaluate_device, evaluate_rows_device, DeviceStage1};
use matfree::bms::io::generator::{generate, Generated, GeneratorConfig};
use matfree::bms::model::stage2::evaluate_rows;
use matfree::bms::MarginalSlope;
use matfree::cuda::{gpu_for_test, CudaBackend, DeviceDesigns, DeviceRowEvaluation, Gpu, HessianStorage};
use matfree::fixture::Rng;
use matfree::solvers::newton::{newton, StepSolver};
use matfree::solvers::{Backend, CpuBackend, LinearOperator, Objective};
use matfree::{Error, RowHessian};

fn fixture(n: usize, p_h: usize, p_w: usize, seed: u64) -> Generated {
    generate(GeneratorConfig {
        n,
        p_m: 3,
        p_g: 2,
        p_h,
        p_w,
        s_f: 0.8,
        seed,
    })
    .unwrap()
}

/// beta with the slope block shrunk, so b is small and every link knot
/// (t in [-6, 6]) maps to |z| far outside the score knots' range.
fn small_slope(g: &Generated) -> Vec<f64> {
    let mut beta = g.beta.clone();
    for j in g.model.blocks().g_range() {
        beta[j] *= 0.01;
    }
    beta
}

/// Device rows against CPU rows: neglog, gradients and row Hessians. Stage 2
/// on the device differs from the CPU's by ~1e-9 relative at r = 64 even on
/// the same bundle (sums of many cancelling cell terms), hence 1e-8.
fn check_rows(label: &str, gpu: &Gpu, dev: &DeviceRowEvaluation, cpu: &matfree::bms::RowKernelOutputs) {
    let pairs = [
        ("neglog", gpu.download(&dev.neglog).unwrap(), &cpu.neglog),
        ("grad", gpu.download(&dev.grad).unwrap(), &cpu.grad),
        ("hess", dev.hessian.hess_host().unwrap(), &cpu.hess),
    ];
    for (what, got, want) in pairs {
        common::assert_close(&format!("{what} {label}"), &got, want, 1e-8);
    }
}

#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn device_rows_match_cpu_rows_and_operators() {
    let Some(gpu) = gpu_for_test("device_rows_match_cpu_rows_and_operators") else {
        return;
    };
    // r = 4, 20, 33, 64 with both blocks active.
    for (k, (n, p_h, p_w)) in [(300, 1, 1), (200, 10, 8), (120, 20, 11), (60, 40, 22)]
        .into_iter()
        .enumerate()
    {
        let g = fixture(n, p_h, p_w, 10 + k as u64);
        assert!(g.data.y.contains(&0.0) && g.data.y.contains(&1.0), "both labels");
        let designs = DeviceDesigns::upload(gpu.clone(), &g.data.designs).unwrap();
        for beta in [g.beta.clone(), small_slope(&g)] {
            let (inp, _) = g.model.stage1(&g.data, &beta).unwrap();
            let most_cells = (0..n).map(|i| inp.row_cells(i).len()).max().unwrap();
            let cpu = evaluate_rows(&inp).unwrap();
            let dev = evaluate_rows_device(&designs, g.model.layout(), &inp).unwrap();
            let r = inp.r;
            let label = format!("r = {r}, most cells {most_cells}");
            check_rows(&label, &gpu, &dev, &cpu);
            // The operator from device rows equals the CPU operator from CPU rows.
            let op = RowHessian::new(g.model.layout().clone(), g.data.designs.clone(), cpu.hess.clone()).unwrap();
            let p = op.dim();
            let v = Rng::new(3).normals(p);
            let mut want = vec![0.0; p];
            op.apply(&v, &mut want).unwrap();
            common::assert_close(&format!("hvp {label}"), &dev.hessian.hvp_host(&v).unwrap(), &want, 1e-8);
            common::assert_close(
                &format!("diag {label}"),
                &dev.hessian.diagonal_host().unwrap(),
                &op.diagonal_host(),
                1e-8,
            );
            let dense = LinearOperator::<CpuBackend>::to_dense(&op).unwrap();
            common::assert_close(
                &format!("dense {label}"),
                &dev.hessian.dense_host().unwrap(),
                &dense,
                1e-8,
            );
            let (jc, jd) = (
                op.joint_gradient(&cpu.neglog, &cpu.grad).unwrap(),
                dev.joint_gradient().unwrap(),
            );
            common::assert_close(&format!("joint gradient {label}"), &jd.gradient, &jc.gradient, 1e-8);
            common::assert_close(&format!("joint neglog {label}"), &[jd.neglog], &[jc.neglog], 1e-10);
            println!("{label}: parity ok");
        }
        // Small slopes really do move every link knot off the score range.
        let (inp, _) = g.model.stage1(&g.data, &small_slope(&g)).unwrap();
        assert!(inp.b.iter().all(|b| b.abs() < 0.1), "slopes not small");
    }
}

#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn one_call_evaluation_matches_the_cpu_model() {
    let Some(gpu) = gpu_for_test("one_call_evaluation_matches_the_cpu_model") else {
        return;
    };
    let g = fixture(150, 6, 5, 21);
    let designs = DeviceDesigns::upload(gpu, &g.data.designs).unwrap();
    let dev = evaluate_device(&g.model, &g.data, &designs, &g.beta).unwrap();
    let rows = g.model.evaluate(&g.data, &g.beta).unwrap();
    let want = g.model.joint_gradient(&g.data, &rows).unwrap();
    let got = dev.joint_gradient().unwrap();
    common::assert_close("joint gradient", &got.gradient, &want.gradient, 1e-8);
    common::assert_close("joint neglog", &[got.neglog], &[want.neglog], 1e-10);
}

#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn a_rejected_row_is_reported_with_its_index_on_device() {
    let Some(gpu) = gpu_for_test("a_rejected_row_is_reported_with_its_index_on_device") else {
        return;
    };
    let g = fixture(40, 4, 3, 7);
    let (mut inp, _) = g.model.stage1(&g.data, &g.beta).unwrap();
    for c in inp.row_cells(17) {
        inp.cell_a[c * 4..(c + 1) * 4].iter_mut().for_each(|v| *v = -*v);
    }
    let designs = DeviceDesigns::upload(gpu, &g.data.designs).unwrap();
    match evaluate_rows_device(&designs, g.model.layout(), &inp) {
        Err(Error::RowRejected { row, reason }) => {
            assert_eq!(row, 17);
            assert!(reason.contains("F_a"), "{reason}");
        }
        other => panic!("expected row 17 rejected, got {:?}", other.err()),
    }
    // A malformed bundle is rejected before any launch, naming the field.
    inp.q.pop();
    match evaluate_rows_device(&designs, g.model.layout(), &inp) {
        Err(Error::InvalidInput { field, .. }) => assert!(field.starts_with('q'), "{field}"),
        other => panic!("expected a field error, got {:?}", other.err()),
    }
}

/// Newton on the device objective reaches the dense reference's optimum
/// (beta to 1e-8) with PCG and with dense steps, and with PCG steps whose
/// products read f32 copies of the row Hessians: the gradient is f64, only
/// those steps are inexact. The f32 operator's dense matrix (the
/// log-determinant's) is the f64 rows' one, bit for bit.
#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn newton_on_bms_on_device_matches_dense_reference() {
    let Some(gpu) = gpu_for_test("newton_on_bms_on_device_matches_dense_reference") else {
        return;
    };
    let f = common::newton_fixture();
    let backend = CudaBackend::new(gpu.clone()).unwrap();
    for (solver, single, storage) in [
        (StepSolver::Pcg, false, HessianStorage::Rows),
        (StepSolver::Pcg, true, HessianStorage::Rows),
        (StepSolver::Dense, false, HessianStorage::Rows),
        (StepSolver::Pcg, false, HessianStorage::Dense),
        (StepSolver::Auto, true, HessianStorage::Auto),
    ] {
        let objective =
            f.g.model
                .device_objective(gpu.clone(), &f.g.data)
                .unwrap()
                .with_single_precision_hvp(single)
                .with_hessian_storage(storage);
        let opts = f.options(solver);
        let fit = newton(&backend, &objective, &f.penalty, &f.lambda, &f.beta0, &opts).unwrap();
        let label = format!("{solver:?}, f32 products {single}, {storage:?} storage");
        common::check_newton_fit(
            &label,
            &fit.beta,
            &fit.gradient,
            fit.objective,
            fit.report.converged,
            &f.want,
        );
        println!("{label}: {} Newton iterations", fit.report.iterations.len());
    }
    let stage1 = DeviceStage1::new(gpu.clone(), &f.g.model, &f.g.data).unwrap();
    let op = stage1.evaluate(&f.want).unwrap().hessian;
    let want_dense = op.dense_host().unwrap();
    let op = op.with_single_precision_hvp().unwrap();
    assert_eq!(
        op.hvp_precision(),
        matfree::cuda::HvpPrecision::F32,
        "this shape runs the f32 kernel"
    );
    assert_eq!(op.dense_host().unwrap(), want_dense, "the dense matrix stays f64");
}

/// An evaluation that keeps the dense matrix (`HessianStorage::Dense`, the
/// fit shape's choice under Auto) against one that keeps the rows: the same
/// value and gradient bits, the dense matrix and diagonal equal to the bit
/// (the same kernel summed them), products with one and with 40 vectors
/// (above the warp width) within 1e-13 of their scale.
#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn dense_storage_gives_the_rows_operator() {
    let Some(gpu) = gpu_for_test("dense_storage_gives_the_rows_operator") else {
        return;
    };
    let g = fixture(3_000, 8, 6, 41);
    let be = CudaBackend::new(gpu.clone()).unwrap();
    let objective = |storage| {
        g.model
            .device_objective(gpu.clone(), &g.data)
            .unwrap()
            .with_hessian_storage(storage)
    };
    let auto = objective(HessianStorage::Auto);
    assert!(auto.keeps_dense(), "the fit shape (p = 19) keeps the dense matrix");
    assert!(!objective(HessianStorage::Rows).keeps_dense());
    let (rows, dense) = (objective(HessianStorage::Rows), objective(HessianStorage::Dense));
    let want = rows.evaluate(&g.beta).unwrap().unwrap();
    let got = dense.evaluate(&g.beta).unwrap().unwrap();
    assert_eq!(got.value.to_bits(), want.value.to_bits());
    assert_eq!(got.gradient, want.gradient);
    let p = g.beta.len();
    assert_eq!(got.hessian.to_dense().unwrap(), want.hessian.to_dense().unwrap());
    let (mut d_got, mut d_want) = (be.zeros(p).unwrap(), be.zeros(p).unwrap());
    got.hessian.diagonal(&mut d_got).unwrap();
    want.hessian.diagonal(&mut d_want).unwrap();
    assert_eq!(be.download(&d_got).unwrap(), be.download(&d_want).unwrap());
    let h = want.hessian.to_dense().unwrap();
    for k in [1, 40] {
        let x = Rng::new(7 + k as u64).normals(p * k);
        let (mut y_got, mut y_want) = (be.zeros(p * k).unwrap(), be.zeros(p * k).unwrap());
        let xd = be.upload(&x).unwrap();
        if k == 1 {
            got.hessian.apply(&xd, &mut y_got).unwrap();
            want.hessian.apply(&xd, &mut y_want).unwrap();
        } else {
            got.hessian.apply_multi(&xd, k, &mut y_got).unwrap();
            want.hessian.apply_multi(&xd, k, &mut y_want).unwrap();
        }
        let (y_got, y_want) = (be.download(&y_got).unwrap(), be.download(&y_want).unwrap());
        for j in 0..k {
            for i in 0..p {
                let scale: f64 = (0..p).map(|l| (h[i * p + l] * x[j * p + l]).abs()).sum();
                let (a, b) = (y_got[j * p + i], y_want[j * p + i]);
                assert!(
                    (a - b).abs() <= 1e-13 * scale,
                    "k {k}, column {j}, entry {i}: {a} vs {b}"
                );
            }
        }
    }
    let bad = vec![0.0; p + 1];
    let mut y = be.zeros(p).unwrap();
    assert!(
        got.hessian.apply(&be.upload(&bad).unwrap(), &mut y).is_err(),
        "a wrong length is an error"
    );
}

/// The beta variants Stage 1 must handle: the generated coefficients, small
/// slopes (link knots far outside the score range), the rigid model
/// (closed-form intercepts) and b = 0 (no link edges at all).
fn stage1_variants(g: &Generated) -> Vec<(&'static str, Vec<f64>)> {
    let layout = g.model.layout();
    let mut rigid = g.beta.clone();
    for (range, _) in layout.direct_blocks() {
        rigid[range].iter_mut().for_each(|v| *v = 0.0);
    }
    let mut flat = g.beta.clone();
    flat[g.model.blocks().g_range()].iter_mut().for_each(|v| *v = 0.0);
    vec![
        ("generated", g.beta.clone()),
        ("small slope", small_slope(g)),
        ("rigid", rigid),
        ("b = 0", flat),
    ]
}

/// Device cell moments (padded to `slots` per row) against the CPU cells:
/// the row's cells in order, then exact zeros.
fn check_moments(label: &str, inp: &matfree::bms::RowKernelInputs, slots: usize, dev: &[f64]) {
    for i in 0..inp.n_rows {
        let cells = inp.row_cells(i);
        let want = &inp.cell_moments[cells.start * 10..cells.end * 10];
        let got = &dev[i * slots * 10..(i + 1) * slots * 10];
        let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        for (k, w) in want.iter().enumerate() {
            assert!(
                (got[k] - w).abs() <= 1e-11 * scale,
                "{label}: row {i} moment {k}: {} vs {w}",
                got[k]
            );
        }
        assert!(got[want.len()..].iter().all(|v| *v == 0.0), "{label}: row {i} padding");
    }
}

#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn device_stage1_matches_cpu_stage1() {
    let Some(gpu) = gpu_for_test("device_stage1_matches_cpu_stage1") else {
        return;
    };
    // r = 4, 20, 21, 28, 33, 64, and each block alone: the dense tiles (3
    // of 8 raw functions to r = 22, 4 to r = 30; r = 21's 35 side sums
    // pass a warp's lanes), the scattered blocks, and Stage 2 over theta.
    let shapes = [
        (300, 1, 1),
        (200, 10, 8),
        (150, 3, 16),
        (120, 12, 14),
        (120, 15, 16),
        (60, 40, 22),
        (150, 0, 4),
        (150, 5, 0),
    ];
    for (k, (n, p_h, p_w)) in shapes.into_iter().enumerate() {
        let g = fixture(n, p_h, p_w, 40 + k as u64);
        let r = g.model.layout().r();
        let new = || DeviceStage1::new(gpu.clone(), &g.model, &g.data).unwrap();
        let (dense, scattered, theta) = (new(), new().stage2_scattered(), new().stage2_over_theta());
        let want = match r + 2 {
            0..=24 => "bms_row_dense3",
            25..=32 => "bms_row_dense4",
            _ => "bms_row_raw",
        };
        assert_eq!(dense.stage2_kernel(), want, "r = {r}");
        assert_eq!(scattered.stage2_kernel(), "bms_row_raw", "r = {r}");
        assert_eq!(theta.stage2_kernel(), "bms_row_bases");
        let kernels = if want == "bms_row_raw" {
            vec![dense, theta]
        } else {
            vec![dense, scattered, theta]
        };
        for (stage1, (name, beta)) in kernels
            .iter()
            .flat_map(|s| stage1_variants(&g).into_iter().map(move |v| (s, v)))
        {
            let label = format!("r = {}, {name}, {}", g.model.layout().r(), stage1.stage2_kernel());
            let (inp, a) = g.model.stage1(&g.data, &beta).unwrap();
            let dev = stage1.evaluate(&beta).unwrap();
            let got_a = stage1.intercepts().unwrap();
            for (i, (x, y)) in got_a.iter().zip(&a).enumerate() {
                assert!((x - y).abs() <= 1e-12 * (1.0 + y.abs()), "{label}: a[{i}] {x} vs {y}");
            }
            check_moments(&label, &inp, stage1.slots(), &stage1.cell_moments().unwrap());
            let cpu = evaluate_rows(&inp).unwrap();
            check_rows(&label, &gpu, &dev, &cpu);
            println!("{label}: device Stage 1 parity ok");
        }
    }
}

/// Evaluations at one beta are the same to the bit, whatever order Stage
/// 1's threads take the rows in (data order at the first evaluation, the
/// first's (b, q) order from the second on).
#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn device_stage1_is_bitwise_repeatable() {
    let Some(gpu) = gpu_for_test("device_stage1_is_bitwise_repeatable") else {
        return;
    };
    let g = fixture(500, 8, 7, 77);
    let stage1 = DeviceStage1::new(gpu.clone(), &g.model, &g.data).unwrap();
    let run = || {
        let dev = stage1.evaluate(&g.beta).unwrap();
        let joint = dev.joint_gradient().unwrap();
        (
            gpu.download(&dev.neglog).unwrap(),
            dev.hessian.hess_host().unwrap(),
            joint.gradient,
            stage1.cell_moments().unwrap(),
        )
    };
    let identity: Vec<u32> = (0..250).chain(0..250).collect();
    let first = run();
    assert_eq!(stage1.row_order().unwrap(), identity, "data order at first");
    // The second evaluation takes the rows in the first's (b, q) order:
    // each part's rows permuted, the values the same to the bit.
    let second = run();
    let order = stage1.row_order().unwrap();
    assert_ne!(order, identity, "the rows were not reordered");
    for part in order.chunks(250) {
        let mut seen = part.to_vec();
        seen.sort_unstable();
        assert_eq!(seen, (0..250).collect::<Vec<u32>>(), "a permutation within each part");
    }
    assert!(first == second, "two evaluations differ");
    assert!(run() == first, "a third evaluation differs");
}

/// A link deviation of slope -2 outside its knots and b = 0: F rises only
/// between the knots, so Newton from the rigid start can jump to where F
/// falls. The device's lazy bracket must then bracket from the start as the
/// CPU does: same intercepts where the CPU finds one, and the same rejection
/// (no sign change) where it does not.
#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn device_stage1_brackets_non_monotone_calibrations_like_the_cpu() {
    use matfree::bms::{solve_intercept, Bases, BmsData, BmsModel, CubicBasis};
    use std::sync::Arc;
    let Some(gpu) = gpu_for_test("device_stage1_brackets_non_monotone_calibrations_like_the_cpu") else {
        return;
    };
    let link = CubicBasis::uniform(-2.0, 2.0, 2).unwrap();
    let bw = [-2.0 / link.segment(0)[0][1], 0.0];
    let bases = Bases::new(None, Some(link), 1.0).unwrap();
    let model = BmsModel::new(bases.clone(), 1, 1).unwrap();
    let beta = [1.0, 0.0, bw[0], bw[1]];
    let data = |qs: &[f64]| {
        let n = qs.len();
        let designs = matfree::bms::marginal_slope_designs(n, 1, 1, qs.to_vec(), vec![1.0; n]).unwrap();
        BmsData::new(Arc::new(designs), vec![0.3; n], vec![1.0; n], vec![1.0; n]).unwrap()
    };
    // q in [-1, 1.9]: the CPU finds a root for each, several only after bracketing.
    let qs: Vec<f64> = (0..30).map(|k| -1.0 + 0.1 * k as f64).collect();
    let d = data(&qs);
    let stage1 = DeviceStage1::new(gpu.clone(), &model, &d).unwrap();
    stage1.evaluate(&beta).unwrap();
    for (i, (got, q)) in stage1.intercepts().unwrap().iter().zip(&qs).enumerate() {
        let want = solve_intercept(&bases, &[*q, 0.0, bw[0], bw[1]], i).unwrap().a;
        assert!(
            (got - want).abs() <= 1e-12 * (1.0 + want.abs()),
            "q = {q}: a {got} vs {want}"
        );
    }
    // q = -2: no sign change from the start on either side.
    let d = data(&[0.5, -2.0]);
    assert!(solve_intercept(&bases, &[-2.0, 0.0, bw[0], bw[1]], 1).is_err());
    match DeviceStage1::new(gpu.clone(), &model, &d).unwrap().evaluate(&beta) {
        Err(Error::RowRejected { row, reason }) => {
            assert_eq!(row, 1);
            assert!(reason.contains("bracketing"), "{reason}");
        }
        other => panic!("expected row 1 rejected, got {:?}", other.err()),
    }
    // 400 rows, which DeviceStage1 evaluates in two parts on two streams:
    // a rejection in the second part is reported with its index among all
    // rows, and of two rejections (one a part) the first.
    let mut qs: Vec<f64> = (0..400).map(|k| -1.0 + 0.002 * k as f64).collect();
    for (bad, want) in [(330, 330), (150, 150)] {
        qs[bad] = -2.0;
        match DeviceStage1::new(gpu.clone(), &model, &data(&qs))
            .unwrap()
            .evaluate(&beta)
        {
            Err(Error::RowRejected { row, reason }) => {
                assert_eq!(row, want);
                assert!(reason.contains("bracketing"), "{reason}");
            }
            other => panic!("expected row {want} rejected, got {:?}", other.err()),
        }
    }
}

#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn device_stage1_rejects_designs_of_another_shape() {
    let Some(gpu) = gpu_for_test("device_stage1_rejects_designs_of_another_shape") else {
        return;
    };
    let g = fixture(50, 3, 3, 9);
    let other = fixture(50, 3, 3, 9);
    let wide = matfree::bms::marginal_slope_designs(
        50,
        4,
        2,
        other.data.designs.x_m().iter().chain(&vec![0.5; 50]).copied().collect(),
        other.data.designs.x_g().to_vec(),
    )
    .unwrap();
    let designs = DeviceDesigns::upload(gpu, &wide).unwrap();
    match DeviceStage1::with_designs(designs, &g.model, &g.data) {
        Err(Error::InvalidInput { field, .. }) => assert_eq!(field, "device designs (n, p_m, p_g)"),
        other => panic!("expected a shape error, got {:?}", other.err()),
    }
}

/// The generator's device path (each row's intercept and eta(z_i) from the
/// GPU's predictions at the truth: the fit's Stage-1 kernel) against its
/// CPU path: the same draws, intercepts to rounding, the same labels; at
/// the fit's shape and at the seed shape (r = 20) with frailty.
#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn gpu_generated_rows_equal_the_cpu_rows() {
    use matfree::bms::io::generator::generate_on;
    let Some(gpu) = gpu_for_test("gpu_generated_rows_equal_the_cpu_rows") else {
        return;
    };
    let device = matfree::device::Device::Gpu(gpu);
    for cfg in [
        GeneratorConfig::fit_shape(30_011, 5),
        GeneratorConfig {
            s_f: 0.8,
            ..GeneratorConfig::seed_shape(6_000)
        },
    ] {
        let cpu = generate(cfg).unwrap();
        let dev = generate_on(cfg, &device).unwrap();
        assert_eq!(dev.beta, cpu.beta);
        assert_eq!(dev.data.z, cpu.data.z);
        for j in 0..cpu.data.designs.count() {
            assert_eq!(dev.data.designs.matrix(j), cpu.data.designs.matrix(j));
        }
        let worst = dev
            .intercept
            .iter()
            .zip(&cpu.intercept)
            .map(|(d, c)| (d - c).abs() / (1.0 + c.abs()))
            .fold(0.0, f64::max);
        assert!(worst < 1e-12, "n {}: intercepts differ by {worst:e}", cfg.n);
        let flipped = (0..cfg.n).filter(|&i| dev.data.y[i] != cpu.data.y[i]).count();
        assert_eq!(flipped, 0, "n {}: labels differ", cfg.n);
        let ones = cpu.data.y.iter().sum::<f64>() / cfg.n as f64;
        assert!(ones > 0.05 && ones < 0.95, "a share of ones of {ones}");
    }
}
