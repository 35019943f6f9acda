//! PCG with the Jacobi preconditioner on an ill-conditioned, full-rank
//! row-Hessian system, checked against the dense Cholesky solution.

use matfree::fixture::{random_row_problem, Rng, Shape};
use matfree::solvers::{cg, Cholesky, CpuBackend, Jacobi, LinearOperator, PcgOptions};

#[test]
fn jacobi_pcg_meets_tolerance_on_condition_1e6_fixture() {
    let shape = Shape {
        n: 4000,
        p_m: 8,
        p_g: 6,
        p_h: 5,
        p_w: 4,
    };
    let op = random_row_problem(shape, 3.0, 77).unwrap();
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
