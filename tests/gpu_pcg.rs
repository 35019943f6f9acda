//! Device PCG (cuBLAS with device scalars, graph-replayed blocks) against
//! the CPU PCG on the same systems, with the sync budget checked.
#![cfg(feature = "cuda")]

use std::sync::Arc;

use cudarc::driver::CudaSlice;
use matfree::cuda::{gpu_for_test, CudaBackend, DeviceRowHessian, Gpu};
use matfree::fixture::{random_row_problem, Rng, Shape};
use matfree::solvers::precond::Preconditioner;
use matfree::solvers::{
    cg, Backend, BreakdownQuantity, Cholesky, CpuBackend, Jacobi, LinearOperator, PcgOptions, StopReason,
};
use matfree::RowHessian;

fn fixture() -> RowHessian {
    random_row_problem(
        Shape {
            n: 20_000,
            p_m: 14,
            p_g: 12,
            p_h: 10,
            p_w: 8,
        },
        3.0,
        41,
    )
    .unwrap()
}

/// ||x - want|| / ||want||.
fn relative_difference(x: &[f64], want: &[f64]) -> f64 {
    let norm = |v: &mut dyn Iterator<Item = f64>| v.map(|e| e * e).sum::<f64>().sqrt();
    norm(&mut x.iter().zip(want).map(|(u, v)| u - v)) / norm(&mut want.iter().copied())
}

fn device_jacobi<'b>(be: &'b CudaBackend, dev: &DeviceRowHessian) -> Jacobi<'b, CudaBackend> {
    let mut diag = be.zeros(dev.dim()).unwrap();
    dev.diagonal(&mut diag).unwrap();
    Jacobi::new(be, &diag, None, 0.0).unwrap()
}

#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn device_pcg_matches_cpu_pcg_within_sync_budget() {
    let Some(gpu) = gpu_for_test("device_pcg_matches_cpu_pcg_within_sync_budget") else {
        return;
    };
    let op = fixture();
    let p = op.dim();
    let dense = LinearOperator::<CpuBackend>::to_dense(&op).unwrap();
    let m = faer::Mat::from_fn(p, p, |i, j| dense[i * p + j]);
    let ev = m.self_adjoint_eigenvalues(faer::Side::Lower).unwrap();
    assert!(
        ev[p - 1] / ev[0] >= 1e6,
        "fixture condition number {}",
        ev[p - 1] / ev[0]
    );
    let b = Rng::new(6).normals(p);
    let opts = PcgOptions {
        rtol: 1e-12,
        max_iter: 2000,
        check_every: 8,
        refresh_every: 0,
        ..Default::default()
    };

    let cpu = CpuBackend::new();
    let mut cdiag = vec![0.0; p];
    op.diagonal(&mut cdiag).unwrap();
    let cj = Jacobi::new(&cpu, &cdiag, None, 0.0).unwrap();
    let want = cg(&cpu, &op, &cj, &b, None, &opts).unwrap();

    let be = CudaBackend::new(gpu.clone()).unwrap();
    let dev = DeviceRowHessian::from_cpu(gpu.clone(), &op).unwrap();
    let gj = device_jacobi(&be, &dev);
    let bd = be.upload(&b).unwrap();
    let (before, graphs_before) = (gpu.syncs(), gpu.graph_launches());
    let got = cg(&be, &dev, &gj, &bd, None, &opts).unwrap();
    let syncs = gpu.syncs() - before;
    let graphs = gpu.graph_launches() - graphs_before;
    assert_eq!(graphs, got.info.blocks_queued, "every block replays a recorded graph");
    assert!(
        got.info.blocks_queued <= got.info.residual_history.len(),
        "at most one block queued beyond the reads: {:?}",
        got.info
    );
    let k = got.info.iterations;
    println!(
        "gpu: {k} iterations, {syncs} syncs; cpu: {} iterations",
        want.info.iterations
    );
    println!("gpu info: {:?}", got.info);
    assert!(got.info.converged && want.info.converged);
    assert!(
        k.abs_diff(want.info.iterations) <= 1,
        "iterations {k} vs {}",
        want.info.iterations
    );
    assert!(
        syncs <= k.div_ceil(opts.check_every) + 2,
        "{syncs} syncs for {k} iterations"
    );
    let x = be.download(&got.x).unwrap();
    let rel = relative_difference(&x, &want.x);
    assert!(rel <= 1e-10, "solution relative difference {rel}");
    // Bitwise repeatable.
    let again = cg(&be, &dev, &gj, &bd, None, &opts).unwrap();
    assert_eq!(be.download(&again.x).unwrap(), x);
    assert_eq!(again.info, got.info);
    // The unfused path (cuBLAS dot/axpy with device scalars) agrees too.
    let unfused = cg(&be, &dev, &NotDiagonal(&gj), &bd, None, &opts).unwrap();
    assert!(unfused.info.iterations.abs_diff(want.info.iterations) <= 1);
    let rel = relative_difference(&be.download(&unfused.x).unwrap(), &want.x);
    assert!(rel <= 1e-10, "unfused solution relative difference {rel}");
}

/// Hides a Jacobi's diagonal, so PCG takes the unfused sequence.
struct NotDiagonal<'a, 'b>(&'a Jacobi<'b, CudaBackend>);
impl Preconditioner<CudaBackend> for NotDiagonal<'_, '_> {
    fn apply(&self, r: &CudaSlice<f64>, z: &mut CudaSlice<f64>) -> matfree::solvers::Result<()> {
        self.0.apply(r, z)
    }
}

#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn warm_start_from_the_solution_stops_at_once_on_device() {
    let Some(gpu) = gpu_for_test("warm_start_from_the_solution_stops_at_once_on_device") else {
        return;
    };
    let op = fixture();
    let p = op.dim();
    let b = Rng::new(9).normals(p);
    let dense = LinearOperator::<CpuBackend>::to_dense(&op).unwrap();
    let x = Cholesky::factor(p, &dense).unwrap().solve(&b, 1).unwrap();
    let be = CudaBackend::new(gpu.clone()).unwrap();
    let dev = DeviceRowHessian::from_cpu(gpu, &op).unwrap();
    let gj = device_jacobi(&be, &dev);
    let opts = PcgOptions {
        rtol: 1e-8,
        ..Default::default()
    };
    let sol = cg(
        &be,
        &dev,
        &gj,
        &be.upload(&b).unwrap(),
        Some(&be.upload(&x).unwrap()),
        &opts,
    )
    .unwrap();
    assert_eq!(sol.info.iterations, 0);
    assert_eq!(sol.info.stop_reason, StopReason::Converged);
    assert_eq!(sol.info.host_reads, 1);
}

fn negated(op: &RowHessian) -> RowHessian {
    let hess = op.hess().iter().map(|v| -v).collect();
    RowHessian::new(op.layout().clone(), op.designs().clone(), hess).unwrap()
}

#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn indefinite_operator_breaks_down_on_device() {
    let Some(gpu) = gpu_for_test("indefinite_operator_breaks_down_on_device") else {
        return;
    };
    let op = negated(
        &random_row_problem(
            Shape {
                n: 500,
                p_m: 4,
                p_g: 3,
                p_h: 2,
                p_w: 2,
            },
            0.0,
            3,
        )
        .unwrap(),
    );
    let be = CudaBackend::new(gpu.clone()).unwrap();
    let dev = DeviceRowHessian::from_cpu(gpu, &op).unwrap();
    let id = Jacobi::identity(&be, dev.dim()).unwrap();
    let b = be.upload(&Rng::new(1).normals(dev.dim())).unwrap();
    let sol = cg(&be, &dev, &id, &b, None, &PcgOptions::default()).unwrap();
    match sol.info.stop_reason {
        StopReason::Breakdown {
            quantity: BreakdownQuantity::PAp,
            value,
        } => assert!(value < 0.0),
        other => panic!("expected a PAp breakdown, got {other:?}"),
    }
    assert!(be.download(&sol.x).unwrap().iter().all(|v| v.is_finite()));
}

/// z = -r on the device: a negative definite preconditioner.
struct Negate<'b> {
    be: &'b CudaBackend,
    minus_one: CudaSlice<f64>,
}
impl Preconditioner<CudaBackend> for Negate<'_> {
    fn apply(&self, r: &CudaSlice<f64>, z: &mut CudaSlice<f64>) -> matfree::solvers::Result<()> {
        self.be.mul_elementwise(&self.minus_one, r, z)
    }
}

#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn bad_preconditioner_is_reported_on_device_and_jacobi_rules_hold() {
    let Some(gpu) = gpu_for_test("bad_preconditioner_is_reported_on_device") else {
        return;
    };
    let op = random_row_problem(
        Shape {
            n: 400,
            p_m: 4,
            p_g: 3,
            p_h: 2,
            p_w: 2,
        },
        0.0,
        4,
    )
    .unwrap();
    let be = CudaBackend::new(gpu.clone()).unwrap();
    let dev = DeviceRowHessian::from_cpu(gpu.clone(), &op).unwrap();
    let neg = Negate {
        be: &be,
        minus_one: be.upload(&vec![-1.0; dev.dim()]).unwrap(),
    };
    let b = be.upload(&vec![1.0; dev.dim()]).unwrap();
    let sol = cg(&be, &dev, &neg, &b, None, &PcgOptions::default()).unwrap();
    assert!(matches!(sol.info.stop_reason, StopReason::BadPreconditioner { value } if value < 0.0));
    jacobi_errors_match_cpu(&be, &gpu);
}

fn jacobi_errors_match_cpu(be: &CudaBackend, gpu: &Arc<Gpu>) {
    let d = vec![1.0, 2.0, 3.0, -0.5, f64::NAN, 4.0];
    let cpu_err = Jacobi::new(&CpuBackend::new(), &d, None, 0.0)
        .err()
        .unwrap()
        .to_string();
    let gpu_err = Jacobi::new(be, &gpu.upload(&d).unwrap(), None, 0.0)
        .err()
        .unwrap()
        .to_string();
    assert_eq!(gpu_err, cpu_err);
    let extra = [0.0, 0.0, 0.0, 1.0, 0.0, 0.0];
    let ok = Jacobi::new(
        be,
        &gpu.upload(&d[..4]).unwrap(),
        Some(&gpu.upload(&extra[..4]).unwrap()),
        0.25,
    )
    .unwrap();
    let inv = be.download(ok.inverse_diagonal().unwrap()).unwrap();
    assert_eq!(inv, vec![1.0 / 1.25, 1.0 / 2.25, 1.0 / 3.25, 1.0 / 0.75]);
}

#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn device_gemv_and_penalised_operator_match_cpu() {
    use matfree::solvers::penalty::{Penalised, PenaltyMatrix};
    let Some(gpu) = gpu_for_test("device_gemv_and_penalised_operator_match_cpu") else {
        return;
    };
    let op = random_row_problem(
        Shape {
            n: 900,
            p_m: 9,
            p_g: 7,
            p_h: 20,
            p_w: 11,
        },
        1.0,
        12,
    )
    .unwrap();
    let p = op.dim();
    let mut rng = Rng::new(5);
    let a = rng.normals(p * p);
    let (x, y0) = (rng.normals(p * 3), rng.normals(p * 3));
    let cpu = CpuBackend::new();
    let mut y_cpu = y0.clone();
    cpu.gemm_acc(&a, p, &x, &mut y_cpu).unwrap();
    let be = CudaBackend::new(gpu.clone()).unwrap();
    let mut y_gpu = be.upload(&y0).unwrap();
    be.gemm_acc(&be.upload(&a).unwrap(), p, &be.upload(&x).unwrap(), &mut y_gpu)
        .unwrap();
    let y_gpu = be.download(&y_gpu).unwrap();
    for (g, c) in y_gpu.iter().zip(&y_cpu) {
        assert!((g - c).abs() <= 1e-12 * c.abs().max(1.0), "gemv {g} vs {c}");
    }
    // H + S on the device equals H + S on the CPU.
    let s: Vec<f64> = (0..p * p)
        .map(|k| if k / p == k % p { 2.0 + (k % 7) as f64 } else { 0.0 })
        .collect();
    let dev = DeviceRowHessian::from_cpu(gpu.clone(), &op).unwrap();
    let (sc, sg) = (
        PenaltyMatrix::new(&cpu, p, s.clone()).unwrap(),
        PenaltyMatrix::new(&be, p, s).unwrap(),
    );
    let (pc, pg) = (
        Penalised::new(&cpu, &op, &sc, 0.5).unwrap(),
        Penalised::new(&be, &dev, &sg, 0.5).unwrap(),
    );
    let v = rng.normals(p);
    let mut want = vec![0.0; p];
    pc.apply(&v, &mut want).unwrap();
    let mut got = be.zeros(p).unwrap();
    pg.apply(&be.upload(&v).unwrap(), &mut got).unwrap();
    let got = be.download(&got).unwrap();
    let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    for (g, c) in got.iter().zip(&want) {
        assert!((g - c).abs() <= 1e-12 * scale, "penalised {g} vs {c}");
    }
}

/// A reused solver replays the iteration block it recorded in its first
/// solve: its solves (cold, warm, cold again) are bitwise those of fresh
/// `cg` calls on the device.
#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn a_reused_solver_matches_fresh_solves_on_device() {
    use matfree::solvers::Pcg;
    let Some(gpu) = gpu_for_test("a_reused_solver_matches_fresh_solves_on_device") else {
        return;
    };
    let op = fixture();
    let p = op.dim();
    let be = CudaBackend::new(gpu.clone()).unwrap();
    let dev = DeviceRowHessian::from_cpu(gpu, &op).unwrap();
    let gj = device_jacobi(&be, &dev);
    let mut rng = Rng::new(12);
    let up = |v: Vec<f64>| be.upload(&v).unwrap();
    let (b1, b2, x0) = (up(rng.normals(p)), up(rng.normals(p)), up(rng.normals(p)));
    let opts = PcgOptions {
        rtol: 1e-9,
        check_every: 7,
        ..Default::default()
    };
    let mut solver = Pcg::new(&be, &dev, &gj).unwrap();
    for (b, start) in [(&b1, None), (&b2, Some(&x0)), (&b1, None)] {
        let info = solver.solve(b, start, &opts).unwrap();
        let fresh = cg(&be, &dev, &gj, b, start, &opts).unwrap();
        assert!(info.converged, "{:?}", info.stop_reason);
        assert_eq!(info, fresh.info);
        assert_eq!(be.download(solver.x()).unwrap(), be.download(&fresh.x).unwrap());
    }
}

/// Fresh solvers update the executables that earlier ones left (same
/// graph shape, new vectors and operator buffers; counted) or instantiate
/// anew (another block length, the unfused sequence): every solve must
/// match the CPU's and repeat the first solve of its system bit for bit,
/// and x must not depend on the block length or on blocks queued ahead.
#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn fresh_solvers_reuse_recorded_blocks_and_block_length_leaves_x_alone_on_device() {
    let Some(gpu) = gpu_for_test("fresh_solvers_reuse_recorded_blocks_and_block_length_leaves_x_alone_on_device")
    else {
        return;
    };
    let be = CudaBackend::new(gpu.clone()).unwrap();
    let cpu = CpuBackend::new();
    let shape = Shape {
        n: 20_000,
        p_m: 14,
        p_g: 12,
        p_h: 10,
        p_w: 8,
    };
    let ops: Vec<RowHessian> = [41, 42]
        .iter()
        .map(|&seed| random_row_problem(shape, 3.0, seed).unwrap())
        .collect();
    let devs: Vec<DeviceRowHessian> = ops
        .iter()
        .map(|op| DeviceRowHessian::from_cpu(gpu.clone(), op).unwrap())
        .collect();
    let jacs: Vec<_> = devs.iter().map(|d| device_jacobi(&be, d)).collect();
    let p = ops[0].dim();
    let bs: Vec<Vec<f64>> = (0..2).map(|k| Rng::new(30 + k).normals(p)).collect();
    let opts = |check_every| PcgOptions {
        rtol: 1e-10,
        check_every,
        refresh_every: 0,
        ..Default::default()
    };
    let mut first: Vec<Option<Vec<f64>>> = vec![None; 2];
    for (step, (k, ce, fused)) in [
        (0, 8, true),
        (1, 8, true),
        (0, 8, true),
        (1, 5, true),
        (0, 8, false),
        (1, 8, true),
    ]
    .into_iter()
    .enumerate()
    {
        let execs = gpu.graph_executables();
        let bd = be.upload(&bs[k]).unwrap();
        let got = if fused {
            cg(&be, &devs[k], &jacs[k], &bd, None, &opts(ce)).unwrap()
        } else {
            cg(&be, &devs[k], &NotDiagonal(&jacs[k]), &bd, None, &opts(ce)).unwrap()
        };
        let mut cdiag = vec![0.0; p];
        ops[k].diagonal(&mut cdiag).unwrap();
        let cj = Jacobi::new(&cpu, &cdiag, None, 0.0).unwrap();
        let want = cg(&cpu, &ops[k], &cj, &bs[k], None, &opts(ce)).unwrap();
        let x = be.download(&got.x).unwrap();
        let label = format!("system {k}, check_every {ce}, fused {fused}");
        assert!(got.info.converged, "{label}: {:?}", got.info);
        // The second and third solves record blocks of the first one's
        // shape: they must update the executable it left, not instantiate.
        if step == 1 || step == 2 {
            let (updates, _) = gpu.graph_executables();
            assert!(updates > execs.0, "{label}: no executable updated ({execs:?} before)");
        }
        assert!(got.info.iterations.abs_diff(want.info.iterations) <= 1, "{label}");
        let rel = relative_difference(&x, &want.x);
        assert!(rel <= 1e-9, "{label}: relative difference {rel}");
        if fused {
            match &first[k] {
                Some(x1) => assert_eq!(&x, x1, "{label}: not the first solve's x"),
                None => first[k] = Some(x),
            }
        }
    }
    // Fixed iterations: one read a block plus the start, the true residual
    // on the last block's read, one graph launch a block.
    let bd = be.upload(&bs[0]).unwrap();
    let graphs = gpu.graph_launches();
    let fixed = cg(&be, &devs[0], &jacs[0], &bd, None, &PcgOptions::fixed_iterations(40)).unwrap();
    assert_eq!(fixed.info.iterations, 40);
    assert_eq!(
        (fixed.info.blocks_queued, fixed.info.host_reads),
        (4, 5),
        "{:?}",
        fixed.info
    );
    assert_eq!(gpu.graph_launches() - graphs, 4);
    // The fused start's and true residual's norms against the host's.
    let x = be.download(&fixed.x).unwrap();
    let mut ax = vec![0.0; p];
    LinearOperator::<CpuBackend>::apply(&ops[0], &x, &mut ax).unwrap();
    let true_norm = ax
        .iter()
        .zip(&bs[0])
        .map(|(u, v)| (v - u) * (v - u))
        .sum::<f64>()
        .sqrt();
    let b_norm = bs[0].iter().map(|v| v * v).sum::<f64>().sqrt();
    assert!(
        (fixed.info.true_residual_norm - true_norm).abs() <= 1e-9 * b_norm,
        "{:?} vs {true_norm}",
        fixed.info
    );
    assert!((fixed.info.b_norm - b_norm).abs() <= 1e-14 * b_norm);
    assert!((fixed.info.initial_residual_norm - b_norm).abs() <= 1e-14 * b_norm);
}

/// One change to a scalar bank.
type Trap = fn(&mut [f64]);

/// A running bank with ordinary values; each trap below changes one thing.
fn bank() -> Vec<f64> {
    use matfree::solvers::pcg_kernels::slot;
    let mut s = vec![0.0; slot::COUNT];
    s[slot::RZ] = 2.0;
    s[slot::PAP] = 4.0;
    s[slot::RZ_NEW] = 1.0;
    s[slot::RR] = 0.5;
    s[slot::THRESH2] = 1e-6;
    s[slot::ITERS] = 3.0;
    s[slot::BB] = 9.0;
    s
}

/// PCG's scalar kernels on the device against the CPU's slot functions
/// (the reference), on traps: pAp = 0, negative or NaN, alpha overflowing,
/// rz_new negative or NaN, r^T r NaN or below the threshold, rz = 0, and a
/// status that has already stopped; and the start's threshold and status
/// on them too (b^T b infinite, rz < 0). Every slot must agree bitwise (NaN with
/// NaN), as Ginkgo's kernel tests compare executors.
#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn pcg_scalar_kernels_match_the_cpu_slot_functions_on_traps() {
    use matfree::solvers::cpu::{pcg_alpha_slots, pcg_beta_slots, pcg_start_slots};
    use matfree::solvers::pcg::status;
    use matfree::solvers::pcg_kernels::slot;
    use matfree::solvers::{Backend, PcgKernels};
    let Some(gpu) = gpu_for_test("pcg_scalar_kernels_match_the_cpu_slot_functions_on_traps") else {
        return;
    };
    let be = CudaBackend::new(gpu).unwrap();
    let traps: [(&str, Trap); 15] = [
        ("ordinary", |_| {}),
        ("pAp = 0", |s| s[slot::PAP] = 0.0),
        ("pAp < 0", |s| s[slot::PAP] = -1.0),
        ("pAp NaN", |s| s[slot::PAP] = f64::NAN),
        ("alpha overflows", |s| (s[slot::RZ], s[slot::PAP]) = (1e300, 1e-300)),
        ("rz NaN", |s| s[slot::RZ] = f64::NAN),
        ("rz_new < 0", |s| s[slot::RZ_NEW] = -1.0),
        ("rz_new NaN", |s| s[slot::RZ_NEW] = f64::NAN),
        ("rr NaN", |s| s[slot::RR] = f64::NAN),
        ("rr below the threshold", |s| s[slot::RR] = 1e-9),
        ("rz = 0", |s| s[slot::RZ] = 0.0),
        ("already converged", |s| s[slot::STATUS] = status::CONVERGED),
        ("already broken down", |s| s[slot::STATUS] = status::BREAKDOWN_PAP),
        ("b^T b infinite", |s| s[slot::BB] = f64::INFINITY),
        ("rz < 0 at the start", |s| s[slot::RZ] = -2.0),
    ];
    let same = |a: f64, b: f64| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
    for (name, trap) in &traps {
        // alpha, beta, and the start under three (rtol, atol) rules.
        for step in 0..5 {
            let mut want = bank();
            trap(want.as_mut_slice());
            let mut dev = be.scalars(slot::COUNT).unwrap();
            be.write_scalars(&mut dev, 0, &want).unwrap();
            let label = match step {
                0 => {
                    pcg_alpha_slots(&mut want);
                    be.pcg_alpha(&mut dev).unwrap();
                    "alpha".to_string()
                }
                1 => {
                    pcg_beta_slots(&mut want);
                    be.pcg_beta(&mut dev).unwrap();
                    "beta".to_string()
                }
                k => {
                    let (rtol, atol) = [(1e-8, 0.0), (0.0, 0.0), (0.5, 1e-3)][k - 2];
                    pcg_start_slots(&mut want, rtol, atol);
                    be.pcg_start(&mut dev, rtol, atol).unwrap();
                    format!("start (rtol {rtol}, atol {atol})")
                }
            };
            let got = be.read_scalars(&dev).unwrap();
            for k in 0..slot::COUNT {
                assert!(
                    same(got[k], want[k]),
                    "{name}, {label}: slot {k}: device {} vs cpu {}",
                    got[k],
                    want[k]
                );
            }
        }
    }
}
