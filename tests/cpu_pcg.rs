//! PCG with the Jacobi preconditioner on an ill-conditioned, full-rank
//! row-Hessian system, checked against the dense Cholesky solution.

use matfree::fixture::{random_row_problem, Rng, Shape};
use matfree::solvers::{cg, Cholesky, CpuBackend, Jacobi, LinearOperator, PcgOptions};

/// A full-rank row-Hessian fixture of n rows whose row Hessians span
/// `decades` decades of eigenvalues.
fn problem(n: usize, decades: f64, seed: u64) -> matfree::RowHessian {
    let shape = Shape {
        n,
        p_m: 8,
        p_g: 6,
        p_h: 5,
        p_w: 4,
    };
    random_row_problem(shape, decades, seed).unwrap()
}

#[test]
fn jacobi_pcg_meets_tolerance_on_condition_1e6_fixture() {
    let op = problem(4000, 3.0, 77);
    let p = op.dim();
    let dense = op.to_dense().unwrap();
    let m = faer::Mat::from_fn(p, p, |i, j| dense[i * p + j]);
    let ev = m.self_adjoint_eigenvalues(faer::Side::Lower).unwrap();
    let (lo, hi) = (ev[0], ev[p - 1]);
    assert!(
        lo > 0.0 && hi / lo >= 1e6,
        "fixture condition number {} must be >= 1e6",
        hi / lo
    );

    let be = CpuBackend::new();
    let mut diag = vec![0.0; p];
    op.diagonal(&mut diag).unwrap();
    let jac = Jacobi::new(&be, &diag, None, 0.0).unwrap();
    let b = Rng::new(4).normals(p);
    let opts = PcgOptions {
        rtol: 1e-10,
        max_iter: 5000,
        ..Default::default()
    };
    let sol = cg(&be, &op, &jac, &b, None, &opts).unwrap();
    assert!(sol.info.converged, "{:?}", sol.info.stop_reason);

    let mut ax = vec![0.0; p];
    op.apply(&sol.x, &mut ax).unwrap();
    let res = ax.iter().zip(&b).map(|(u, v)| (u - v) * (u - v)).sum::<f64>().sqrt();
    assert!(
        res <= sol.info.threshold * 1.5,
        "true residual {res} vs threshold {}",
        sol.info.threshold
    );

    let x = Cholesky::factor(p, &dense).unwrap().solve(&b, 1).unwrap();
    let xn = x.iter().map(|v| v * v).sum::<f64>().sqrt();
    let err = x.iter().zip(&sol.x).map(|(u, v)| (u - v) * (u - v)).sum::<f64>().sqrt();
    // Forward error is bounded by cond * relative residual.
    assert!(err <= hi / lo * 1e-10 * 1.5 * xn, "solution error {err} vs |x| {xn}");
}

/// A reused solver (vectors, slots and recording kept across solves) gives
/// bitwise what fresh `cg` calls give, for cold starts after a warm one too.
#[test]
fn a_reused_solver_matches_fresh_solves_bitwise() {
    use matfree::solvers::Pcg;
    let op = problem(1500, 2.0, 31);
    let p = op.dim();
    let be = CpuBackend::new();
    let mut diag = vec![0.0; p];
    op.diagonal(&mut diag).unwrap();
    let jac = Jacobi::new(&be, &diag, None, 0.0).unwrap();
    let mut rng = Rng::new(9);
    let (b1, b2, b3, x0) = (rng.normals(p), rng.normals(p), rng.normals(p), rng.normals(p));
    let opts = PcgOptions {
        rtol: 1e-9,
        check_every: 7,
        ..Default::default()
    };
    let mut solver = Pcg::new(&be, &op, &jac).unwrap();
    for (b, start) in [(&b1, None), (&b2, Some(&x0)), (&b3, None), (&b1, None)] {
        let info = solver.solve(b, start, &opts).unwrap();
        let fresh = cg(&be, &op, &jac, b, start, &opts).unwrap();
        assert!(info.converged);
        assert_eq!(info, fresh.info);
        assert_eq!(solver.x(), &fresh.x);
    }
}
