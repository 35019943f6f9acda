//! PCG, Jacobi and Cholesky on small dense systems with known answers.

use matfree_solvers::precond::Preconditioner;
use matfree_solvers::{
    cg, Backend, BreakdownQuantity, Cholesky, CpuBackend, DenseOperator, Jacobi, LinearOperator, PcgOptions,
    SolverError, StopReason,
};

/// A deterministic SPD matrix A = Q diag(eig) Q^T with Q from Householder
/// reflections of a fixed vector pattern, so its eigenvalues are known.
fn spd_with_eigenvalues(eig: &[f64]) -> Vec<f64> {
    let n = eig.len();
    let mut a: Vec<f64> = (0..n * n)
        .map(|k| if k % (n + 1) == 0 { eig[k / n] } else { 0.0 })
        .collect();
    for h in 0..3 {
        let v: Vec<f64> = (0..n).map(|i| ((i * 7 + h * 13) as f64 * 0.37).sin() + 0.1).collect();
        let vv: f64 = v.iter().map(|x| x * x).sum();
        // A <- (I - 2 v v^T / vv) A (I - 2 v v^T / vv)
        let av: Vec<f64> = (0..n).map(|i| (0..n).map(|j| a[i * n + j] * v[j]).sum()).collect();
        let vav: f64 = v.iter().zip(&av).map(|(x, y)| x * y).sum();
        for i in 0..n {
            for j in 0..n {
                a[i * n + j] += -2.0 * (av[i] * v[j] + v[i] * av[j]) / vv + 4.0 * vav * v[i] * v[j] / (vv * vv);
            }
        }
    }
    // Exact symmetry, which DenseOperator requires.
    for i in 0..n {
        for j in 0..i {
            a[i * n + j] = a[j * n + i];
        }
    }
    a
}

fn residual_norm(a: &DenseOperator, x: &[f64], b: &[f64]) -> f64 {
    let mut ax = vec![0.0; b.len()];
    a.apply(&x.to_vec(), &mut ax).unwrap();
    ax.iter().zip(b).map(|(u, v)| (v - u) * (v - u)).sum::<f64>().sqrt()
}

#[test]
fn pcg_solves_ill_conditioned_system_to_tolerance() {
    let n = 60;
    let eig: Vec<f64> = (0..n).map(|i| 10f64.powf(-6.0 * i as f64 / (n - 1) as f64)).collect();
    let a = DenseOperator::new(n, spd_with_eigenvalues(&eig)).unwrap();
    let be = CpuBackend::new();
    let b: Vec<f64> = (0..n).map(|i| (i as f64 * 0.3).cos()).collect();
    let m = Jacobi::identity(&be, n).unwrap();
    let opts = PcgOptions {
        rtol: 1e-10,
        max_iter: 2000,
        check_every: 7,
        ..Default::default()
    };
    let sol = cg(&be, &a, &m, &b, None, &opts).unwrap();
    assert!(sol.info.converged, "{:?}", sol.info);
    let bn = b.iter().map(|v| v * v).sum::<f64>().sqrt();
    let true_res = residual_norm(&a, &sol.x, &b);
    assert!(true_res <= 2e-10 * bn, "true residual {true_res} vs {}", 1e-10 * bn);
    assert!((sol.info.true_residual_norm - true_res).abs() <= 1e-3 * true_res + 1e-300);
    // The sync budget: one read before, one per block, one at the end.
    let k = sol.info.iterations;
    assert_eq!(sol.info.host_reads, k.div_ceil(7) + 2);
    assert_eq!(be.reads(), sol.info.host_reads);
    // Dense Cholesky solve agrees.
    let x = Cholesky::factor(n, a.as_slice()).unwrap().solve(&b, 1).unwrap();
    let xn = x.iter().map(|v| v * v).sum::<f64>().sqrt();
    let diff = x.iter().zip(&sol.x).map(|(u, v)| (u - v) * (u - v)).sum::<f64>().sqrt();
    assert!(diff <= 1e-3 * xn, "pcg vs cholesky {diff} / {xn}");
}

#[test]
fn warm_start_from_the_solution_stops_at_once() {
    let n = 20;
    let eig: Vec<f64> = (1..=n).map(|i| i as f64).collect();
    let a = DenseOperator::new(n, spd_with_eigenvalues(&eig)).unwrap();
    let be = CpuBackend::new();
    let b = vec![1.0; n];
    let x = Cholesky::factor(n, a.as_slice()).unwrap().solve(&b, 1).unwrap();
    let m = Jacobi::identity(&be, n).unwrap();
    let sol = cg(&be, &a, &m, &b, Some(&x), &PcgOptions::default()).unwrap();
    assert_eq!(sol.info.iterations, 0);
    assert_eq!(sol.info.stop_reason, StopReason::Converged);
    assert_eq!(sol.info.host_reads, 1);
}

#[test]
fn max_iter_is_reported_not_silent() {
    let n = 40;
    let eig: Vec<f64> = (0..n).map(|i| 1.0 + i as f64 * 10.0).collect();
    let a = DenseOperator::new(n, spd_with_eigenvalues(&eig)).unwrap();
    let be = CpuBackend::new();
    let m = Jacobi::identity(&be, n).unwrap();
    let opts = PcgOptions {
        rtol: 0.0,
        max_iter: 5,
        check_every: 2,
        ..Default::default()
    };
    let sol = cg(&be, &a, &m, &vec![1.0; n], None, &opts).unwrap();
    assert_eq!(sol.info.iterations, 5);
    assert!(!sol.info.converged);
    assert_eq!(sol.info.stop_reason, StopReason::MaxIter);
    assert_eq!(
        sol.info.residual_history.iter().map(|h| h.0).collect::<Vec<_>>(),
        vec![0, 2, 4, 5]
    );
}

#[test]
fn indefinite_operator_is_a_breakdown_on_pap() {
    let eig = [2.0, 1.0, -3.0, 0.5];
    let a = DenseOperator::new(4, spd_with_eigenvalues(&eig)).unwrap();
    let be = CpuBackend::new();
    let m = Jacobi::identity(&be, 4).unwrap();
    let b = [0.1, 0.2, 1.0, -0.4].to_vec();
    let sol = cg(
        &be,
        &a,
        &m,
        &b,
        None,
        &PcgOptions {
            check_every: 1,
            ..Default::default()
        },
    )
    .unwrap();
    match sol.info.stop_reason {
        StopReason::Breakdown {
            quantity: BreakdownQuantity::PAp,
            value,
        } => assert!(value <= 0.0),
        other => panic!("expected PAp breakdown, got {other:?}"),
    }
    assert!(sol.x.iter().all(|v| v.is_finite()));
}

/// z = -r: a negative definite "preconditioner".
struct Negate;
impl Preconditioner<CpuBackend> for Negate {
    fn apply(&self, r: &Vec<f64>, z: &mut Vec<f64>) -> matfree_solvers::Result<()> {
        z.iter_mut().zip(r).for_each(|(zi, ri)| *zi = -ri);
        Ok(())
    }
}

#[test]
fn negative_preconditioner_is_reported() {
    let a = DenseOperator::new(3, spd_with_eigenvalues(&[1.0, 2.0, 3.0])).unwrap();
    let be = CpuBackend::new();
    let sol = cg(&be, &a, &Negate, &vec![1.0; 3], None, &PcgOptions::default()).unwrap();
    match sol.info.stop_reason {
        StopReason::BadPreconditioner { value } => assert!(value < 0.0),
        other => panic!("expected BadPreconditioner, got {other:?}"),
    }
}

#[test]
fn jacobi_rejects_non_positive_and_non_finite_entries() {
    let be = CpuBackend::new();
    let d = vec![1.0, 2.0, -0.5, 4.0];
    match Jacobi::new(&be, &d, None, 0.0) {
        Err(SolverError::InvalidInput { field, .. }) => assert_eq!(field, "jacobi diagonal[2]"),
        other => panic!("expected an error naming index 2, got {:?}", other.err()),
    }
    // The extra diagonal and ridge can lift it.
    let extra = vec![0.0, 0.0, 1.0, 0.0];
    let j = Jacobi::new(&be, &d, Some(&extra), 0.5).unwrap();
    assert_eq!(
        be.download(j.inverse_diagonal().unwrap()).unwrap(),
        vec![1.0 / 1.5, 1.0 / 2.5, 1.0, 1.0 / 4.5]
    );
    assert!(Jacobi::new(&be, &vec![1.0, f64::NAN], None, 0.0).is_err());
    assert!(Jacobi::new(&be, &d, None, f64::NAN).is_err());
    assert!(Jacobi::new(&be, &d, Some(&vec![1.0]), 0.0).is_err());
}

#[test]
fn bad_options_and_lengths_are_rejected() {
    let a = DenseOperator::new(2, vec![2.0, 0.0, 0.0, 1.0]).unwrap();
    let be = CpuBackend::new();
    let m = Jacobi::identity(&be, 2).unwrap();
    let b = vec![1.0, 1.0];
    for opts in [
        PcgOptions {
            rtol: -1.0,
            ..Default::default()
        },
        PcgOptions {
            atol: f64::NAN,
            ..Default::default()
        },
        PcgOptions {
            check_every: 0,
            ..Default::default()
        },
    ] {
        assert!(matches!(
            cg(&be, &a, &m, &b, None, &opts),
            Err(SolverError::InvalidInput { .. })
        ));
    }
    assert!(cg(&be, &a, &m, &vec![1.0; 3], None, &PcgOptions::default()).is_err());
    assert!(cg(&be, &a, &m, &b, Some(&vec![0.0]), &PcgOptions::default()).is_err());
    assert!(DenseOperator::new(2, vec![1.0, 2.0, 3.0, 1.0]).is_err(), "asymmetric");
}

#[test]
fn logdet_matches_eigenvalues_and_failing_pivot_is_named() {
    let eig: Vec<f64> = (0..30).map(|i| 0.01 + (i as f64).powi(2)).collect();
    let a = spd_with_eigenvalues(&eig);
    let chol = Cholesky::factor(30, &a).unwrap();
    let want: f64 = eig.iter().map(|e| e.ln()).sum();
    assert!(
        (chol.logdet() - want).abs() <= 1e-10 * want.abs(),
        "{} vs {want}",
        chol.logdet()
    );
    // An independent eigen-solver agrees too.
    let m = faer::Mat::from_fn(30, 30, |i, j| a[i * 30 + j]);
    let ev = m.self_adjoint_eigenvalues(faer::Side::Lower).unwrap();
    let via_eig: f64 = ev.iter().map(|e| e.ln()).sum();
    assert!((chol.logdet() - via_eig).abs() <= 1e-10 * via_eig.abs());
    // Not positive definite: the pivot and the Schur value are reported.
    let bad = vec![4.0, 2.0, 0.0, 2.0, 1.0, 0.0, 0.0, 0.0, 1.0];
    match Cholesky::factor(3, &bad) {
        Err(SolverError::NotPositiveDefinite { pivot, value }) => {
            assert_eq!(pivot, 1);
            assert!(value.abs() < 1e-12);
        }
        other => panic!("expected NotPositiveDefinite, got {:?}", other.err()),
    }
}

/// b with entries near 1e155 (||b||^2 overflows) is solved, not reported as
/// converged at x = 0; a non-finite entry of b or x0 is an error naming it.
#[test]
fn huge_right_hand_sides_are_solved_and_non_finite_inputs_named() {
    let be = CpuBackend::new();
    let a = DenseOperator::new(2, vec![2.0, 0.0, 0.0, 3.0]).unwrap();
    let j = Jacobi::identity(&be, 2).unwrap();
    for big in [1e155, 1e300] {
        let b = vec![big, -big];
        let sol = cg(&be, &a, &j, &b, None, &PcgOptions::default()).unwrap();
        assert!(sol.info.converged, "{big}: {:?}", sol.info);
        assert!(sol.info.iterations > 0);
        let want = [big / 2.0, -big / 3.0];
        for (x, w) in sol.x.iter().zip(want) {
            assert!(((x - w) / w).abs() < 1e-12, "{big}: {x} vs {w}");
        }
        assert!(sol.info.b_norm.is_finite(), "{:?}", sol.info);
    }
    let msg = |b: Vec<f64>, x0: Option<Vec<f64>>| {
        cg(&be, &a, &j, &b, x0.as_ref(), &PcgOptions::default())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    assert!(msg(vec![f64::INFINITY, 1.0], None).contains("b[0]"));
    assert!(msg(vec![1.0, f64::NAN], None).contains("b[1]"));
    assert!(msg(vec![1.0, 1.0], Some(vec![0.0, f64::NAN])).contains("x0[1]"));
    // A finite x0 where A x0 overflows is a numerical failure, not bad input.
    let huge = DenseOperator::new(2, vec![1e300, 0.0, 0.0, 1e300]).unwrap();
    match cg(
        &be,
        &huge,
        &j,
        &vec![1.0, 1.0],
        Some(&vec![1e10, 1e10]),
        &PcgOptions::default(),
    ) {
        Err(SolverError::NumericalFailure { what, .. }) => assert!(what.contains("A x0"), "{what}"),
        other => panic!("expected NumericalFailure, got {:?}", other.map(|s| s.info)),
    }
}

/// Cholesky reads one triangle: a matrix whose triangles differ beyond
/// rounding is an error naming the entry, not a silent factor of half of it.
#[test]
fn cholesky_rejects_asymmetric_matrices() {
    let a = [4.0, 1.0, 0.0, 1.0, 3.0, 0.5, 0.0, 0.5, 2.0];
    assert!(Cholesky::factor(3, &a).is_ok());
    let mut b = a;
    b[7] = 0.7;
    let e = Cholesky::factor(3, &b).err().unwrap().to_string();
    assert!(e.contains("a[2,1]") && e.contains("symmetric"), "{e}");
}

#[test]
fn block_length_and_blocks_queued_ahead_do_not_change_the_answer() {
    // The stop is found on the slots at the iteration it happens, and the
    // iterations queued after it (the rest of a block, and a block queued
    // before the read that shows the stop) leave x alone: x, the iteration
    // count and the true residual must not depend on check_every.
    let n = 60;
    let eig: Vec<f64> = (0..n).map(|i| 10f64.powf(-5.0 * i as f64 / (n - 1) as f64)).collect();
    let a = DenseOperator::new(n, spd_with_eigenvalues(&eig)).unwrap();
    let be = CpuBackend::new();
    let b: Vec<f64> = (0..n).map(|i| (i as f64 * 0.7).sin() + 0.2).collect();
    let m = Jacobi::identity(&be, n).unwrap();
    let solve = |check_every| {
        let opts = PcgOptions {
            rtol: 1e-9,
            max_iter: 5000,
            check_every,
            refresh_every: 0,
            ..Default::default()
        };
        cg(&be, &a, &m, &b, None, &opts).unwrap()
    };
    let one = solve(1);
    assert!(one.info.converged, "{:?}", one.info);
    let mut queued_ahead = 0;
    for ce in [2, 3, 7, 10, 64, 10_000] {
        let got = solve(ce);
        assert_eq!(got.x, one.x, "check_every {ce}");
        assert_eq!(got.info.iterations, one.info.iterations, "check_every {ce}");
        assert_eq!(
            got.info.true_residual_norm, one.info.true_residual_norm,
            "check_every {ce}"
        );
        // At most one block beyond those whose reads were taken.
        let read = got.info.residual_history.len() - 1;
        assert!(got.info.blocks_queued <= read + 1, "check_every {ce}: {:?}", got.info);
        queued_ahead += usize::from(got.info.blocks_queued == read + 1);
        // The start, each block read, the true residual (on the last block's
        // read when that block ends at max_iter).
        let reads = got.info.host_reads;
        assert!(
            reads == read + 2 || reads == read + 1,
            "check_every {ce}: {reads} reads"
        );
    }
    // The case the test is for: some block length queues a block past the
    // read that shows the stop.
    assert!(queued_ahead > 0, "no block was queued ahead of the stop");
}

#[test]
fn a_fixed_iteration_solve_reads_once_a_block_and_carries_the_true_residual() {
    let n = 50;
    let eig: Vec<f64> = (0..n).map(|i| 1.0 + i as f64).collect();
    let a = DenseOperator::new(n, spd_with_eigenvalues(&eig)).unwrap();
    let be = CpuBackend::new();
    let b = vec![1.0; n];
    let m = Jacobi::identity(&be, n).unwrap();
    for (its, blocks) in [(40, 4), (35, 4), (10, 1)] {
        let sol = cg(&be, &a, &m, &b, None, &PcgOptions::fixed_iterations(its)).unwrap();
        assert_eq!(sol.info.iterations, its);
        assert_eq!(sol.info.stop_reason, StopReason::MaxIter);
        assert_eq!(sol.info.blocks_queued, blocks);
        // The start and one read a block; the last block's read carries
        // the true residual.
        assert_eq!(sol.info.host_reads, blocks + 1);
        assert!((sol.info.true_residual_norm - residual_norm(&a, &sol.x, &b)).abs() <= 1e-12);
    }
}

/// z = r until the `finite_applies`-th apply, then z = r with z[0] = inf: a
/// preconditioner that breaks down mid-solve.
struct InfAfter {
    finite_applies: usize,
    applies: std::sync::atomic::AtomicUsize,
}
impl Preconditioner<CpuBackend> for InfAfter {
    fn apply(&self, r: &Vec<f64>, z: &mut Vec<f64>) -> matfree_solvers::Result<()> {
        z.copy_from_slice(r);
        if self.applies.fetch_add(1, std::sync::atomic::Ordering::Relaxed) >= self.finite_applies {
            z[0] = f64::INFINITY;
        }
        Ok(())
    }
}

#[test]
fn a_stop_on_a_non_finite_direction_leaves_x_as_it_was() {
    // After r^T z = inf the direction p = z is infinite; the iterations
    // left in the block (and any block queued ahead) must not touch x.
    let n = 30;
    let eig: Vec<f64> = (0..n).map(|i| 1.0 + 3.0 * i as f64).collect();
    let a = DenseOperator::new(n, spd_with_eigenvalues(&eig)).unwrap();
    let be = CpuBackend::new();
    let b: Vec<f64> = (0..n).map(|i| 1.0 + (i % 3) as f64).collect();
    let solve = |finite_applies, opts: &PcgOptions| {
        let m = InfAfter {
            finite_applies,
            applies: 0.into(),
        };
        cg(&be, &a, &m, &b, None, opts).unwrap()
    };
    let opts = PcgOptions {
        check_every: 10,
        ..PcgOptions::fixed_iterations(30)
    };
    // At the start (the block queued ahead of the first read runs on a
    // stopped solve): x stays zero.
    let start = solve(0, &opts);
    assert!(matches!(start.info.stop_reason, StopReason::BadPreconditioner { value } if value.is_infinite()));
    assert_eq!(start.info.iterations, 0);
    assert_eq!(start.x, vec![0.0; n]);
    // Mid-block: x is the iterate of the stopping iteration, as with blocks of one.
    let mid = solve(4, &opts);
    let single = solve(
        4,
        &PcgOptions {
            check_every: 1,
            ..opts.clone()
        },
    );
    assert!(
        matches!(mid.info.stop_reason, StopReason::BadPreconditioner { .. }),
        "{:?}",
        mid.info
    );
    assert_eq!(mid.info.iterations, 4);
    assert!(mid.x.iter().all(|v| v.is_finite()));
    assert_eq!(mid.x, single.x);
}
