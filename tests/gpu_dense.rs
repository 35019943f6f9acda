//! The device Cholesky path (cuSOLVER) against faer on the CPU.
#![cfg(feature = "cuda")]

use matfree::cuda::{gpu_for_test, DeviceCholesky, DeviceRowHessian};
use matfree::fixture::{random_row_problem, Rng, Shape};
use matfree::solvers::{Cholesky, CpuBackend, LinearOperator, SolverError};
use matfree::Error;

fn penalty(p: usize, seed: u64) -> Vec<f64> {
    // A symmetric positive semi-definite penalty: B B^T / p with B random.
    let b = Rng::new(seed).normals(p * p);
    let mut s = vec![0.0; p * p];
    for i in 0..p {
        for j in 0..=i {
            let v: f64 = (0..p).map(|k| b[i * p + k] * b[j * p + k]).sum::<f64>() / p as f64;
            s[i * p + j] = v;
            s[j * p + i] = v;
        }
    }
    s
}

#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn device_logdet_solve_and_traces_match_faer() {
    let Some(gpu) = gpu_for_test("device_logdet_solve_and_traces_match_faer") else {
        return;
    };
    for (shape, seed) in [
        (Shape::SEED, 1u64),
        (
            Shape {
                n: 3000,
                p_m: 140,
                p_g: 127,
                p_h: 20,
                p_w: 13,
            },
            2,
        ),
    ] {
        let shape = Shape {
            n: shape.n.min(20_000),
            ..shape
        };
        let op = random_row_problem(shape, 1.0, seed).unwrap();
        let p = op.dim();
        let s = penalty(p, seed + 10);
        let mut a = LinearOperator::<CpuBackend>::to_dense(&op).unwrap();
        a.iter_mut().zip(&s).for_each(|(x, y)| *x += y);
        let cpu = Cholesky::factor(p, &a).unwrap();
        let dev = DeviceRowHessian::from_cpu(gpu.clone(), &op).unwrap();
        let chol = DeviceCholesky::factor_penalised(&dev, &s).unwrap();
        let (want, got) = (cpu.logdet(), chol.logdet().unwrap());
        assert!(
            (got - want).abs() <= 1e-10 * want.abs(),
            "p = {p}: logdet {got} vs {want}"
        );
        let b = Rng::new(seed).normals(p * 2);
        let (xs, xc) = (chol.solve(&b, 2).unwrap(), cpu.solve(&b, 2).unwrap());
        let scale = xc.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        assert!(
            xs.iter().zip(&xc).all(|(u, v)| (u - v).abs() <= 1e-10 * scale),
            "p = {p}: solve"
        );
        // tr(A^{-1} S) against the CPU solve of S's columns.
        let cols: Vec<f64> = (0..p * p).map(|e| s[(e % p) * p + e / p]).collect();
        let x = cpu.solve(&cols, p).unwrap();
        let want_tr: f64 = (0..p).map(|i| x[i * p + i]).sum();
        let got_tr = chol.trace_inv(&s).unwrap();
        assert!(
            (got_tr - want_tr).abs() <= 1e-10 * want_tr.abs(),
            "p = {p}: trace {got_tr} vs {want_tr}"
        );
    }
}

#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn device_cholesky_names_the_failing_pivot() {
    let Some(gpu) = gpu_for_test("device_cholesky_names_the_failing_pivot") else {
        return;
    };
    let a = vec![4.0, 2.0, 0.0, 2.0, 1.0, 0.0, 0.0, 0.0, 1.0];
    match DeviceCholesky::factor(gpu.clone(), 3, &gpu.upload(&a).unwrap()) {
        Err(Error::Solver(SolverError::NotPositiveDefinite { pivot, .. })) => assert_eq!(pivot, 1),
        other => panic!("expected NotPositiveDefinite, got {:?}", other.err()),
    }
    assert!(DeviceCholesky::factor(gpu.clone(), 3, &gpu.upload(&a[..8]).unwrap()).is_err());
}

/// The CUDA backend's exact-path factor (what Newton's dense step and REML
/// use): on the host below DEVICE_DENSE_MIN_P, on the device above, and
/// the same logdet, solves and errors as faer's either way.
#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn the_backends_dense_factor_matches_faer_on_both_sides_of_the_threshold() {
    use matfree::cuda::{CudaBackend, DEVICE_DENSE_MIN_P};
    use matfree::solvers::{Backend, PenalisedFactor};
    let Some(gpu) = gpu_for_test("the_backends_dense_factor_matches_faer_on_both_sides_of_the_threshold") else {
        return;
    };
    let backend = CudaBackend::new(gpu).unwrap();
    for p in [DEVICE_DENSE_MIN_P - 1, DEVICE_DENSE_MIN_P + 37] {
        let mut a = penalty(p, p as u64);
        for i in 0..p {
            a[i * p + i] += 1.0;
        }
        let host = Cholesky::factor(p, &a).unwrap();
        let dev = backend.dense_factor(p, &a).unwrap();
        assert!(
            (dev.logdet() - host.logdet()).abs() <= 1e-10 * host.logdet().abs().max(1.0),
            "p {p}"
        );
        let b = Rng::new(9).normals(p * 3);
        let (x, want) = (dev.solve(&b, 3).unwrap(), host.solve(&b, 3).unwrap());
        let err = x.iter().zip(&want).map(|(u, v)| (u - v).abs()).fold(0.0, f64::max);
        let scale = want.iter().map(|v| v.abs()).fold(0.0, f64::max);
        assert!(err <= 1e-10 * scale, "p {p}: solve error {err:e} of {scale:e}");
        // Through REML's factor type: the penalty traces agree too.
        let via = PenalisedFactor::on(&backend, p, &a).unwrap();
        assert_eq!(via.dim(), p);
        // Not positive definite: the same pivot as faer names.
        let mut bad = a.clone();
        bad[5 * p + 5] = -1.0;
        let want = Cholesky::factor(p, &bad).err().unwrap();
        let got = backend.dense_factor(p, &bad).err().unwrap();
        match (got, want) {
            (SolverError::NotPositiveDefinite { pivot: g, .. }, SolverError::NotPositiveDefinite { pivot: w, .. }) => {
                assert_eq!(g, w, "p {p}")
            }
            (g, w) => panic!("p {p}: {g} vs {w}"),
        }
        // Not symmetric: an input error naming the entry.
        let mut skew = a.clone();
        skew[1] += 1.0;
        assert!(matches!(
            backend.dense_factor(p, &skew).err().unwrap(),
            SolverError::InvalidInput { .. }
        ));
    }
}
