//! The device row-Hessian operator against the CPU operator (the oracle), at
//! widths below and above the warp (r = 4, 20, 33, 64) and p_total 44 and 300.
//! GPU tests follow MATFREE_GPU: with `auto` and no GPU they print a skip.
#![cfg(feature = "cuda")]

mod common;

use matfree::bms::MarginalSlope;
use matfree::cuda::{gpu_for_test, DeviceRowHessian, HvpPrecision, SingleKernel};
use matfree::fixture::{random_row_problem, Rng, Shape};
use matfree::solvers::LinearOperator;
use matfree::Error;

/// (r, p_total) = (4, 44), (20, 44), (33, 44), (64, 300), (20, 300), (33, 300), (6, 700),
/// (82, 89), whose rows are too big for the staged dense kernel, and r = 130
/// with p = 139 and 700, whose rows are too big to stage for the HVP on any
/// current GPU (two 135 KB rows a buffer): the fused warp-per-row HVP serves
/// the first, the two-phase HVP the second (p too wide for the fused
/// kernel's accumulators). Every HVP path is checked.
fn shapes() -> Vec<Shape> {
    let s = |n, p_m, p_g, p_h, p_w| Shape { n, p_m, p_g, p_h, p_w };
    vec![
        s(2003, 22, 20, 1, 1),
        s(1537, 14, 12, 10, 8),
        s(999, 7, 6, 20, 11),
        s(1200, 130, 108, 40, 22),
        s(777, 150, 132, 10, 8),
        s(640, 140, 127, 16, 15),
        // p = 700: too wide for the fused HVP's accumulators, staged on an H200.
        s(150, 400, 296, 2, 2),
        s(200, 5, 4, 40, 40),
        s(61, 6, 5, 64, 64),
        s(37, 300, 272, 64, 64),
    ]
}

/// The device operator (full and packed rows) against the CPU operator:
/// products, multi-RHS, diagonal, dense matrix, joint gradient, and
/// bitwise repeats. Returns the HVP paths it took.
fn check_device_parity(
    gpu: &std::sync::Arc<matfree::cuda::Gpu>,
    op: &matfree::RowHessian,
    s: usize,
) -> Vec<&'static str> {
    let dev = DeviceRowHessian::from_cpu(gpu.clone(), op).unwrap();
    let mut paths = vec![dev.hvp_path()];
    let (p, r, k) = (op.dim(), op.layout().r(), 3 + s);
    let v = Rng::new(7 + s as u64).normals(p * k);
    let want = common::cpu_operator_results(op, &v, k);
    let got = common::device_operator_results(&dev, &v, k);
    for (label, (g, w)) in ["hvp", "hvp_multi", "diagonal", "dense"]
        .iter()
        .zip(got.iter().zip(&want))
    {
        common::assert_close(&format!("{label} r={r} p={p}"), g, w, 1e-12);
    }
    let mut rng = Rng::new(3);
    let (neglog, grad) = (rng.normals(op.n()), rng.normals(op.n() * r));
    let jg_cpu = op.joint_gradient(&neglog, &grad).unwrap();
    let jg_gpu = dev.joint_gradient_host(&neglog, &grad).unwrap();
    common::assert_close("joint gradient", &jg_gpu.gradient, &jg_cpu.gradient, 1e-12);
    common::assert_close("joint neglog", &[jg_gpu.neglog], &[jg_cpu.neglog], 1e-12);
    // Repeated runs are bitwise equal.
    assert_eq!(common::device_operator_results(&dev, &v, k), got, "repeat r={r} p={p}");
    assert_eq!(dev.joint_gradient_host(&neglog, &grad).unwrap(), jg_gpu);
    // Packed storage: every operation reads the upper triangle only.
    let packed = dev.packed().unwrap();
    assert!(packed.is_packed());
    let got_packed = common::device_operator_results(&packed, &v, k);
    for (label, (g, w)) in ["hvp", "hvp_multi", "diagonal", "dense"]
        .iter()
        .zip(got_packed.iter().zip(&want))
    {
        common::assert_close(&format!("packed {label} r={r} p={p}"), g, w, 1e-12);
    }
    common::assert_close("packed rows", &packed.hess_host().unwrap(), op.hess(), 1e-14);
    println!(
        "r = {r}, p = {p}, n = {}, layout {:?}: parity ok (full and packed), HVP {} / {}",
        op.n(),
        op.layout().blocks(),
        paths[0],
        packed.hvp_path()
    );
    paths.push(packed.hvp_path());
    paths
}

#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn device_operations_match_cpu_operator() {
    let Some(gpu) = gpu_for_test("device_operations_match_cpu_operator") else {
        return;
    };
    let mut paths = std::collections::BTreeSet::new();
    for (s, shape) in shapes().into_iter().enumerate() {
        let op = random_row_problem(shape, 1.0, 100 + s as u64).unwrap();
        paths.extend(check_device_parity(&gpu, &op, s));
    }
    let want: std::collections::BTreeSet<_> = ["fused", "staged", "two-phase"].into();
    assert_eq!(paths, want, "every HVP path exercised");
}

/// Every layout, not only the BMS shape: r = 1 (a GLM), 2 and 3, predictors
/// anywhere in beta, several designs, no design, r and p above the warp
/// width; and the single-precision HVP over them equal to the CPU operator
/// over the rows rounded to f32 (the staged kernel serves layouts that are
/// not two leading predictors).
#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn device_operations_match_cpu_for_any_layout() {
    let Some(gpu) = gpu_for_test("device_operations_match_cpu_for_any_layout") else {
        return;
    };
    for (s, (n, blocks)) in common::generic_layouts().into_iter().enumerate() {
        let op = matfree::fixture::random_layout_problem(n, &blocks, 500 + s as u64).unwrap();
        check_device_parity(&gpu, &op, s);
        let single = DeviceRowHessian::from_cpu(gpu.clone(), &op)
            .unwrap()
            .with_single_precision_hvp_kernel(SingleKernel::Staged)
            .unwrap();
        assert_eq!(format!("{:?}", single.hvp_precision()), "F32", "{blocks:?}");
        let v = Rng::new(2).normals(op.dim());
        let want = common::cpu_operator_results(&rounded(&op, false), &v, 1);
        common::assert_close(
            &format!("f32 hvp {blocks:?}"),
            &single.hvp_host(&v).unwrap(),
            &want[0],
            1e-12,
        );
    }
}

/// The CPU operator over `op`'s rows rounded to f32, and its designs too
/// where `designs_too` (what the tiled f32 kernel reads; the staged one
/// reads f64 designs).
fn rounded(op: &matfree::RowHessian, designs_too: bool) -> matfree::RowHessian {
    let round = |x: &[f64]| x.iter().map(|v| *v as f32 as f64).collect::<Vec<_>>();
    let d = op.designs();
    let designs = match designs_too {
        true => {
            let each = (0..d.count()).map(|j| (d.widths()[j], round(d.matrix(j)))).collect();
            std::sync::Arc::new(matfree::Designs::new(d.n(), each).unwrap())
        }
        false => d.clone(),
    };
    matfree::RowHessian::new(op.layout().clone(), designs, round(op.hess())).unwrap()
}

/// The single-precision HVP (packed f32 copies of the rows, products in
/// f64): equal to the CPU operator over the same rows rounded to f32 (and
/// the designs too, for the tiled kernel) (1e-12, an independent oracle of
/// the kernel), within 1e-6 of the f64 product
/// (norm-wise), bitwise repeatable, and nothing else changes: multi-vector
/// products, the diagonal and the dense matrix stay the f64 operator's,
/// bit for bit. From full and from packed f64 rows, read by both kernels
/// (tiled where the shape allows, r = 4, 20 and 33 here, with row counts
/// that leave a partial last tile; staged); rows too wide for the staged
/// kernel keep f64 products and say so.
#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn single_precision_hvp_matches_rounded_rows_and_leaves_the_rest_f64() {
    let Some(gpu) = gpu_for_test("single_precision_hvp_matches_rounded_rows_and_leaves_the_rest_f64") else {
        return;
    };
    let (mut precisions, mut paths) = (std::collections::BTreeSet::new(), std::collections::BTreeSet::new());
    // Many tiles (1,251 at r = 20): every resident block of the tiled
    // kernel works, and reduce_partials adds hundreds of blocks' partials.
    let many_tiles = Shape {
        n: 40_003,
        p_m: 14,
        p_g: 12,
        p_h: 10,
        p_w: 8,
    };
    let runs = shapes()
        .into_iter()
        .chain([many_tiles])
        .enumerate()
        .flat_map(|s| [(s, SingleKernel::Tiled), (s, SingleKernel::Staged)]);
    for ((s, shape), kernel) in runs {
        let op = random_row_problem(shape, 1.0, 300 + s as u64).unwrap();
        // The staged kernel reads f32 rows and f64 designs, the tiled one
        // f32 rows and f32 designs.
        let oracle = |designs_too: bool| rounded(&op, designs_too);
        let (p, r, k) = (op.dim(), op.layout().r(), 2);
        for packed in [false, true] {
            let dev = DeviceRowHessian::from_cpu(gpu.clone(), &op).unwrap();
            let dev = if packed { dev.packed().unwrap() } else { dev };
            let mut rng = Rng::new(11 + s as u64);
            let v = rng.normals(p * k);
            let f64_results = common::device_operator_results(&dev, &v, k);
            let single = dev.with_single_precision_hvp_kernel(kernel).unwrap();
            let label = format!("r = {r}, p = {p}, packed {packed}, {kernel:?} asked");
            precisions.insert(format!("{:?}", single.hvp_precision()));
            let got = common::device_operator_results(&single, &v, k);
            for (what, (g, w)) in ["hvp_multi", "diagonal", "dense"]
                .iter()
                .zip(got[1..].iter().zip(&f64_results[1..]))
            {
                assert_eq!(g, w, "{label}: {what} must stay f64");
            }
            if single.hvp_precision() == HvpPrecision::F64 {
                assert_eq!(got[0], f64_results[0], "{label}: f64 products kept");
                println!("{label}: rows too wide for the f32 staged HVP, f64 kept");
                continue;
            }
            let want = common::cpu_operator_results(&oracle(single.hvp_path() == "tiled"), &v, k).swap_remove(0);
            common::assert_close(&format!("{label}: f32 hvp vs rounded rows"), &got[0], &want, 1e-12);
            let norm = |x: &[f64]| x.iter().map(|v| v * v).sum::<f64>().sqrt();
            let diff: Vec<f64> = got[0].iter().zip(&f64_results[0]).map(|(a, b)| a - b).collect();
            let rel = norm(&diff) / norm(&f64_results[0]);
            assert!(rel <= 1e-6, "{label}: f32 hvp off the f64 one by {rel:e}");
            assert!(rel > 0.0, "{label}: the f32 rows were not read");
            assert_eq!(single.hvp_host(&v[..p]).unwrap(), got[0], "{label}: repeat");
            let detail = single.hvp_kernel_detail().unwrap_or_default();
            println!(
                "{label}: f32 hvp within {rel:.2e} of f64, {} path ({detail})",
                single.hvp_path()
            );
            paths.insert(single.hvp_path());
        }
    }
    assert_eq!(paths, ["staged", "tiled"].into(), "both f32 kernels ran");
    assert!(
        precisions.contains("F32"),
        "some shape ran the f32 kernel: {precisions:?}"
    );
}

/// Values a float cannot hold are never read as one: a design value beyond
/// the float range, or a non-zero one below its normal range, sends the
/// tiled request to the staged kernel (f64 designs, equal to the CPU
/// operator over f32 rows); a row value beyond it keeps the f64 product.
#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn values_beyond_single_precision_keep_double_reads() {
    let Some(gpu) = gpu_for_test("values_beyond_single_precision_keep_double_reads") else {
        return;
    };
    let shape = Shape {
        n: 300,
        p_m: 5,
        p_g: 4,
        p_h: 3,
        p_w: 2,
    };
    let op = random_row_problem(shape, 1.0, 41).unwrap();
    let d = op.designs();
    let with_design = |x: f64| {
        let mut x_m = d.x_m().to_vec();
        x_m[7 * d.p_m() + 2] = x;
        let designs = matfree::bms::marginal_slope_designs(d.n(), d.p_m(), d.p_g(), x_m, d.x_g().to_vec()).unwrap();
        matfree::RowHessian::new(op.layout().clone(), std::sync::Arc::new(designs), op.hess().to_vec()).unwrap()
    };
    let mut big_row = op.hess().to_vec();
    big_row[5 * op.layout().r() * op.layout().r()] = 1e39;
    let big_row = matfree::RowHessian::new(op.layout().clone(), d.clone(), big_row).unwrap();
    let v = Rng::new(3).normals(op.dim());
    for (label, cpu, want_path) in [
        ("design 1e39", with_design(1e39), "staged"),
        ("design 1e-39", with_design(-1e-39), "staged"),
        ("row 1e39", big_row, "f64"),
        ("plain", op.clone(), "tiled"),
    ] {
        let dev = DeviceRowHessian::from_cpu(gpu.clone(), &cpu).unwrap().packed().unwrap();
        let single = dev.with_single_precision_hvp_kernel(SingleKernel::Tiled).unwrap();
        let path = match single.hvp_precision() {
            HvpPrecision::F64 => "f64",
            HvpPrecision::F32 => single.hvp_path(),
        };
        assert_eq!(path, want_path, "{label}");
        let got = single.hvp_host(&v).unwrap();
        assert!(got.iter().all(|x| x.is_finite()), "{label}: finite product");
        let oracle = match path {
            "f64" => cpu.clone(),
            "staged" => rounded(&cpu, false),
            _ => rounded(&cpu, true),
        };
        let want = common::cpu_operator_results(&oracle, &v, 1).swap_remove(0);
        common::assert_close(&format!("{label}: {path} hvp vs its oracle"), &got, &want, 1e-12);
        println!("{label}: {path} path");
    }
}

#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn large_multi_rhs_batches_match_single_products() {
    let Some(gpu) = gpu_for_test("large_multi_rhs_batches_match_single_products") else {
        return;
    };
    let op = random_row_problem(
        Shape {
            n: 300,
            p_m: 5,
            p_g: 4,
            p_h: 3,
            p_w: 2,
        },
        0.0,
        5,
    )
    .unwrap();
    let dev = DeviceRowHessian::from_cpu(gpu.clone(), &op).unwrap();
    let (p, k) = (op.dim(), 70);
    let v = Rng::new(1).normals(p * k);
    let mut out = gpu.zeros(p * k).unwrap();
    dev.hvp_multi_into(&gpu.upload(&v).unwrap(), k, &mut out).unwrap();
    let out = gpu.download(&out).unwrap();
    for j in 0..k {
        let single = dev.hvp_host(&v[j * p..(j + 1) * p]).unwrap();
        common::assert_close(&format!("column {j}"), &out[j * p..(j + 1) * p], &single, 1e-14);
    }
}

#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn bad_shapes_are_rejected_before_launch() {
    let Some(gpu) = gpu_for_test("bad_shapes_are_rejected_before_launch") else {
        return;
    };
    let op = random_row_problem(
        Shape {
            n: 50,
            p_m: 3,
            p_g: 2,
            p_h: 2,
            p_w: 1,
        },
        0.0,
        2,
    )
    .unwrap();
    let short = &op.hess()[..op.hess().len() - 1];
    let err = DeviceRowHessian::new(gpu.clone(), op.layout().clone(), op.designs(), short).err();
    assert!(
        matches!(err, Some(Error::InvalidInput { ref field, .. }) if field == "hess.len"),
        "{err:?}"
    );
    let dev = DeviceRowHessian::from_cpu(gpu.clone(), &op).unwrap();
    assert!(matches!(dev.hvp_host(&[1.0; 3]), Err(Error::InvalidInput { .. })));
    let mut y = gpu.zeros(op.dim()).unwrap();
    assert!(dev.apply(&gpu.upload(&[1.0; 4]).unwrap(), &mut y).is_err());
    assert!(dev.joint_gradient_host(&[0.0; 49], &vec![0.0; 50 * 5]).is_err());
    assert!(dev.joint_gradient_host(&[f64::NAN; 50], &vec![0.0; 50 * 5]).is_err());
}

/// A model registers its kernels with the runtime: compiled once per
/// device and cached; an undeclared kernel and a source NVRTC rejects are
/// errors that say which (the compile error keeping NVRTC's log).
#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn models_register_kernel_modules_and_compile_errors_keep_the_log() {
    use matfree::bms::device::BMS_KERNELS;
    use matfree::cuda::KernelModule;
    let Some(gpu) = gpu_for_test("models_register_kernel_modules_and_compile_errors_keep_the_log") else {
        return;
    };
    let (a, b) = (gpu.kernels(&BMS_KERNELS).unwrap(), gpu.kernels(&BMS_KERNELS).unwrap());
    assert!(std::sync::Arc::ptr_eq(&a, &b), "compiled once, then cached");
    assert!(a.get("bms_row").is_ok());
    let e = a.get("no_such_kernel").err().unwrap().to_string();
    assert!(e.contains("no_such_kernel") && e.contains("bms_row.cu"), "{e}");
    static BROKEN: KernelModule = KernelModule {
        name: "broken.cu",
        source: "extern \"C\" __global__ void k(double* x) { x[0] = undefined_name; }",
        kernels: &["k"],
        staging: &[],
    };
    match gpu.kernels(&BROKEN) {
        Err(Error::Compile { file, log, options, .. }) => {
            assert_eq!(file, "broken.cu");
            assert!(log.contains("undefined_name"), "{log}");
            assert!(!options.is_empty());
        }
        other => panic!("expected a compile error, got {:?}", other.map(|_| ())),
    }
}
