//! Several GPUs through NCCL: the sharded row Hessian against the
//! single-GPU operator and the CPU operator (the oracle), PCG and Newton on
//! a group against one GPU, bitwise repeatability, and replicas that stay
//! identical. Groups of one device always run (the multi path with one
//! shard); groups of every visible device run when there are two or more.
//! GPU tests follow MATFREE_GPU: with `auto` and no GPU they print a skip.
#![cfg(feature = "cuda")]

mod common;

use std::rc::Rc;
use std::sync::Mutex;

use matfree::cuda::{
    setup_for_test, shard_rows, CudaBackend, DeviceRowHessian, Gpu, GpuGroup, HessianStorage, MultiGpuBackend,
    ShardedRowHessian,
};
use matfree::fixture::{random_row_problem, Rng, Shape};
use matfree::solvers::newton::{newton, Objective, StepSolver};
use matfree::solvers::{cg, Backend, Jacobi, LinearOperator, PcgOptions};
use matfree::{Error, RowHessian};

/// Tests of this file share the devices' streams: one at a time, so their
/// collectives and host syncs never interleave.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A group of one device and, with two or more visible, one of all.
fn groups_for_test(test: &str) -> Option<Vec<Rc<GpuGroup>>> {
    setup_for_test(test, || {
        let mut groups = vec![GpuGroup::open(1)?];
        let count = Gpu::count()?;
        if count >= 2 {
            groups.push(GpuGroup::open(count)?);
        } else {
            println!("{test}: one GPU visible: only the one-device group runs");
        }
        Ok(groups)
    })
}

/// (r, p_total) = (20, 44), (33, 44), (64, 300), (6, 700), and 3 rows with
/// r = 4 (a shard of one row).
fn shapes() -> Vec<Shape> {
    let s = |n, p_m, p_g, p_h, p_w| Shape { n, p_m, p_g, p_h, p_w };
    vec![
        s(1537, 14, 12, 10, 8),
        s(999, 7, 6, 20, 11),
        s(1201, 130, 108, 40, 22),
        s(151, 400, 296, 2, 2),
        s(3, 2, 2, 1, 1),
    ]
}

/// The same four through the backend, every replica downloaded: checks
/// that the replicas are bitwise identical and returns device 0's.
fn sharded_results(be: &MultiGpuBackend, op: &ShardedRowHessian, v: &[f64], k: usize) -> Vec<Vec<f64>> {
    let p = op.dim();
    let (x, xs) = (be.upload(&v[..p]).unwrap(), be.upload(v).unwrap());
    let (mut y, mut ys, mut d) = (be.zeros(p).unwrap(), be.zeros(p * k).unwrap(), be.zeros(p).unwrap());
    op.apply(&x, &mut y).unwrap();
    op.apply_multi(&xs, k, &mut ys).unwrap();
    op.diagonal(&mut d).unwrap();
    let mut out = Vec::new();
    for (label, r) in [("hvp", &y), ("hvp_multi", &ys), ("diagonal", &d)] {
        let replicas = be.download_replicas(r).unwrap();
        assert!(replicas.iter().all(|x| *x == replicas[0]), "{label}: replicas differ");
        out.push(replicas[0].clone());
    }
    out.push(op.to_dense().unwrap());
    out
}

#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn sharded_operator_matches_one_gpu_and_cpu() {
    let _serial = serial();
    let Some(groups) = groups_for_test("sharded_operator_matches_one_gpu_and_cpu") else {
        return;
    };
    for group in groups {
        let be = MultiGpuBackend::new(group.clone()).unwrap();
        let gpu0 = group.gpus()[0].clone();
        for (s, shape) in shapes().into_iter().enumerate() {
            if shape.n < group.len() {
                continue;
            }
            let op = random_row_problem(shape, 1.0, 200 + s as u64).unwrap();
            let single = DeviceRowHessian::from_cpu(gpu0.clone(), &op).unwrap();
            let sharded = ShardedRowHessian::from_cpu(group.clone(), &op).unwrap();
            let (p, r, k) = (op.dim(), op.layout().r(), 3);
            let v = Rng::new(11 + s as u64).normals(p * k);
            let label = format!("{} gpus, r = {r}, p = {p}, n = {}", group.len(), op.n());
            let got = sharded_results(&be, &sharded, &v, k);
            let names = ["hvp", "hvp_multi", "diagonal", "dense"];
            for (want, oracle) in [
                (common::device_operator_results(&single, &v, k), "one gpu"),
                (common::cpu_operator_results(&op, &v, k), "cpu"),
            ] {
                for (name, (g, w)) in names.iter().zip(got.iter().zip(&want)) {
                    common::assert_close(&format!("{name} vs {oracle}, {label}"), g, w, 1e-12);
                }
            }
            if group.len() == 1 {
                // One shard runs exactly the single-GPU kernels.
                assert_eq!(
                    got,
                    common::device_operator_results(&single, &v, k),
                    "one shard vs one gpu, {label}"
                );
            }
            let mut rng = Rng::new(5);
            let (neglog, grad) = (rng.normals(op.n()), rng.normals(op.n() * r));
            let want = op.joint_gradient(&neglog, &grad).unwrap();
            let jg = sharded.joint_gradient_host(&neglog, &grad).unwrap();
            common::assert_close(&format!("joint gradient, {label}"), &jg.gradient, &want.gradient, 1e-12);
            common::assert_close(&format!("joint neglog, {label}"), &[jg.neglog], &[want.neglog], 1e-12);
            let one = single.joint_gradient_host(&neglog, &grad).unwrap();
            common::assert_close(
                &format!("joint vs one gpu, {label}"),
                &jg.gradient,
                &one.gradient,
                1e-12,
            );
            // Bitwise repeatable.
            assert_eq!(sharded_results(&be, &sharded, &v, k), got, "repeat, {label}");
            assert_eq!(sharded.joint_gradient_host(&neglog, &grad).unwrap(), jg);
            println!("{label}: parity ok");
        }
    }
}

/// The gpu_pcg system (condition number above 1e6, about 1.1 after Jacobi
/// scaling): two solves to rtol 1e-14 that differ only in rounding agree
/// to about 1e-15 (checked on the CPU with the rows summed in another order).
fn pcg_fixture() -> RowHessian {
    let shape = Shape {
        n: 20_001,
        p_m: 14,
        p_g: 12,
        p_h: 10,
        p_w: 8,
    };
    random_row_problem(shape, 3.0, 43).unwrap()
}

fn pcg_options() -> PcgOptions {
    PcgOptions {
        rtol: 1e-14,
        max_iter: 1000,
        check_every: 8,
        refresh_every: 0,
        ..Default::default()
    }
}

#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn pcg_on_a_group_matches_one_gpu() {
    let _serial = serial();
    let Some(groups) = groups_for_test("pcg_on_a_group_matches_one_gpu") else {
        return;
    };
    let op = pcg_fixture();
    let b = Rng::new(8).normals(op.dim());
    let gpu0 = groups[0].gpus()[0].clone();
    let one = CudaBackend::new(gpu0.clone()).unwrap();
    let dev = DeviceRowHessian::from_cpu(gpu0, &op).unwrap();
    let mut diag = one.zeros(op.dim()).unwrap();
    dev.diagonal(&mut diag).unwrap();
    let jac = Jacobi::new(&one, &diag, None, 0.0).unwrap();
    let want = cg(&one, &dev, &jac, &one.upload(&b).unwrap(), None, &pcg_options()).unwrap();
    let want_x = one.download(&want.x).unwrap();
    assert!(want.info.converged, "{:?}", want.info);
    for group in groups {
        let be = MultiGpuBackend::new(group.clone()).unwrap();
        let sharded = ShardedRowHessian::from_cpu(group.clone(), &op).unwrap();
        let mut diag = be.zeros(op.dim()).unwrap();
        sharded.diagonal(&mut diag).unwrap();
        let jac = Jacobi::new(&be, &diag, None, 0.0).unwrap();
        let bd = be.upload(&b).unwrap();
        let before = be.syncs();
        let got = cg(&be, &sharded, &jac, &bd, None, &pcg_options()).unwrap();
        let (syncs, k) = (be.syncs() - before, got.info.iterations);
        let label = format!("{} gpus", group.len());
        println!(
            "{label}: {k} iterations ({} on one gpu), {syncs} syncs",
            want.info.iterations
        );
        assert!(got.info.converged, "{label}: {:?}", got.info);
        assert!(k.abs_diff(want.info.iterations) <= 1, "{label}: iterations");
        assert!(syncs <= k.div_ceil(8) + 2, "{label}: {syncs} syncs for {k} iterations");
        let replicas = be.download_replicas(&got.x).unwrap();
        assert!(replicas.iter().all(|x| *x == replicas[0]), "{label}: replicas differ");
        common::assert_close(&format!("{label}: x vs one gpu"), &replicas[0], &want_x, 1e-12);
        if group.len() == 1 {
            assert_eq!(replicas[0], want_x, "one-device group vs one gpu, bitwise");
        }
        // Bitwise repeatable, info included.
        let again = cg(&be, &sharded, &jac, &bd, None, &pcg_options()).unwrap();
        assert_eq!(be.download(&again.x).unwrap(), replicas[0], "{label}: repeat");
        assert_eq!(again.info, got.info, "{label}: repeat info");
    }
}

#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn newton_on_bms_on_a_group_matches_one_gpu() {
    let _serial = serial();
    let Some(groups) = groups_for_test("newton_on_bms_on_a_group_matches_one_gpu") else {
        return;
    };
    let f = common::newton_fixture();
    let (model, data) = (&f.g.model, &f.g.data);
    let gpu0 = groups[0].gpus()[0].clone();
    let single = model.device_objective(gpu0.clone(), data).unwrap();
    let one = CudaBackend::new(gpu0).unwrap();
    let want = single.evaluate(&f.g.beta).unwrap().unwrap();
    let opts = f.options(StepSolver::Pcg);
    let want_fit = newton(&one, &single, &f.penalty, &f.lambda, &f.beta0, &opts).unwrap();
    let storages = groups
        .iter()
        .flat_map(|g| [(g, HessianStorage::Rows), (g, HessianStorage::Auto)]);
    for (group, storage) in storages {
        let label = format!("{} gpus, {storage:?} storage", group.len());
        let objective = model
            .sharded_objective(group.clone(), data)
            .unwrap()
            .with_hessian_storage(storage);
        let be = MultiGpuBackend::new(group.clone()).unwrap();
        let got = objective.evaluate(&f.g.beta).unwrap().unwrap();
        common::assert_close(&format!("{label}: neglog"), &[got.value], &[want.value], 1e-12);
        common::assert_close(&format!("{label}: gradient"), &got.gradient, &want.gradient, 1e-12);
        let v = Rng::new(2).normals(f.g.beta.len());
        let (mut hv, mut hv1) = (be.zeros(v.len()).unwrap(), one.zeros(v.len()).unwrap());
        got.hessian.apply(&be.upload(&v).unwrap(), &mut hv).unwrap();
        want.hessian.apply(&one.upload(&v).unwrap(), &mut hv1).unwrap();
        let (hv, hv1) = (be.download(&hv).unwrap(), one.download(&hv1).unwrap());
        common::assert_close(&format!("{label}: hvp"), &hv, &hv1, 1e-12);
        for solver in [StepSolver::Pcg, StepSolver::Dense] {
            let opts = f.options(solver);
            let fit = newton(&be, &objective, &f.penalty, &f.lambda, &f.beta0, &opts).unwrap();
            let l = format!("{label}, {solver:?}");
            common::check_newton_fit(
                &l,
                &fit.beta,
                &fit.gradient,
                fit.objective,
                fit.report.converged,
                &f.want,
            );
            common::assert_close(&format!("{l}: vs one gpu"), &fit.beta, &want_fit.beta, 1e-8);
        }
    }
}

#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn bad_inputs_are_errors_not_panics() {
    let _serial = serial();
    let Some(groups) = groups_for_test("bad_inputs_are_errors_not_panics") else {
        return;
    };
    let shape = Shape {
        n: 50,
        p_m: 3,
        p_g: 2,
        p_h: 2,
        p_w: 1,
    };
    let op = random_row_problem(shape, 0.0, 2).unwrap();
    let group = groups.last().unwrap().clone();
    let sharded = ShardedRowHessian::from_cpu(group.clone(), &op).unwrap();
    let field = |e: Option<Error>| match e {
        Some(Error::InvalidInput { field, .. }) => field,
        other => panic!("expected an input error, got {other:?}"),
    };
    assert_eq!(field(sharded.hvp_host(&[1.0; 3]).err()), "v.len");
    assert_eq!(
        field(sharded.joint_gradient_host(&[0.0; 49], &[0.0; 250]).err()),
        "neglog.len"
    );
    assert!(sharded.joint_gradient_host(&[f64::NAN; 50], &[0.0; 250]).is_err());
    // A vector of another group is refused before any launch.
    let other = MultiGpuBackend::new(GpuGroup::open(1).unwrap()).unwrap();
    let mut y = other.zeros(op.dim()).unwrap();
    let x = other.upload(&vec![1.0; op.dim()]).unwrap();
    let err = sharded.apply(&x, &mut y).err();
    if group.len() > 1 {
        assert!(
            err.is_some(),
            "a one-device vector on a {}-device operator",
            group.len()
        );
    }
    // Shards on the wrong devices, or too few, are refused.
    let gpu0 = group.gpus()[0].clone();
    let single = DeviceRowHessian::from_cpu(gpu0.clone(), &op).unwrap();
    assert_eq!(
        field(ShardedRowHessian::from_shards(group.clone(), vec![]).err()),
        "shards"
    );
    if group.len() > 1 {
        let again = DeviceRowHessian::from_cpu(gpu0.clone(), &op).unwrap();
        let err = ShardedRowHessian::from_shards(group.clone(), vec![single, again]).err();
        assert!(field(err).starts_with("shard 1"));
    }
    assert_eq!(field(GpuGroup::new(vec![]).err()), "GPU group ordinals");
    assert_eq!(
        field(GpuGroup::new(vec![gpu0.clone(), gpu0]).err()),
        "GPU group ordinals"
    );
    assert_eq!(field(Gpu::open_first(0).err()), "GPU count");
}

/// Needs no GPU: the row split every sharded object uses.
#[test]
fn shard_rows_are_contiguous_balanced_and_cover_the_data() {
    assert_eq!(shard_rows(10, 3).unwrap(), vec![0..4, 4..7, 7..10]);
    assert_eq!(
        shard_rows(4_000_000, 2).unwrap(),
        vec![0..2_000_000, 2_000_000..4_000_000]
    );
    assert_eq!(shard_rows(5, 5).unwrap().len(), 5);
    for bad in [(3, 4), (0, 1), (5, 0)] {
        match shard_rows(bad.0, bad.1) {
            Err(Error::InvalidInput { field, .. }) => assert_eq!(field, "rows to shard"),
            other => panic!("{bad:?}: expected an input error, got {other:?}"),
        }
    }
}
