//! The `LinearOperator` defaults (apply_multi, diagonal, to_dense) on an
//! operator that gives only `dim` and `apply`, and the `Identity`
//! preconditioner.

use matfree_solvers::{
    cg, Cholesky, CpuBackend, Identity, Jacobi, LinearOperator, PcgOptions, Result, SolverError, DEFAULT_DENSE_MAX_DIM,
    NO_DIAGONAL_RULE,
};

/// The 5-point Laplacian on an m x m grid, Dirichlet boundary, plus a shift:
/// only `dim` and `apply`.
struct Laplacian {
    m: usize,
    shift: f64,
}

impl LinearOperator<CpuBackend> for Laplacian {
    fn dim(&self) -> usize {
        self.m * self.m
    }
    fn apply(&self, x: &Vec<f64>, y: &mut Vec<f64>) -> Result<()> {
        let m = self.m;
        for (i, yi) in y.iter_mut().enumerate() {
            let (r, c) = (i / m, i % m);
            let at = |ok: bool, j: usize| if ok { x[j] } else { 0.0 };
            let near = at(r > 0, i.wrapping_sub(m)) + at(r + 1 < m, i + m) + at(c > 0, i.wrapping_sub(1));
            *yi = (4.0 + self.shift) * x[i] - near - at(c + 1 < m, i + 1);
        }
        Ok(())
    }
}

/// The same matrix written out entry by entry.
fn dense_laplacian(m: usize, shift: f64) -> Vec<f64> {
    let n = m * m;
    let mut a = vec![0.0; n * n];
    for i in 0..n {
        a[i * n + i] = 4.0 + shift;
        let (r, c) = (i / m, i % m);
        let mut link = |j: usize| a[i * n + j] = -1.0;
        if r > 0 {
            link(i - m);
        }
        if r + 1 < m {
            link(i + m);
        }
        if c > 0 {
            link(i - 1);
        }
        if c + 1 < m {
            link(i + 1);
        }
    }
    a
}

fn pattern(n: usize, seed: f64) -> Vec<f64> {
    (0..n)
        .map(|i| ((i as f64 + seed) * 0.7548776662).fract() - 0.5)
        .collect()
}

fn rule_of(e: SolverError) -> (String, String, String) {
    match e {
        SolverError::InvalidInput { field, value, rule } => (field, value, rule),
        other => panic!("expected InvalidInput, got {other}"),
    }
}

#[test]
fn default_apply_multi_equals_single_applies_bitwise() {
    let op = Laplacian { m: 7, shift: 0.1 };
    let (n, k) = (op.dim(), 3);
    let x = pattern(n * k, 0.3);
    let mut y = vec![f64::NAN; n * k];
    op.apply_multi(&x, k, &mut y).unwrap();
    for j in 0..k {
        let mut yj = vec![0.0; n];
        op.apply(&x[j * n..(j + 1) * n].to_vec(), &mut yj).unwrap();
        let same = yj
            .iter()
            .zip(&y[j * n..(j + 1) * n])
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "column {j}");
    }
    let err = op.apply_multi(&x, k, &mut vec![0.0; n]).unwrap_err();
    assert_eq!(rule_of(err).0, "y");
}

#[test]
fn default_to_dense_equals_the_dense_oracle() {
    let op = Laplacian { m: 6, shift: 0.25 };
    assert_eq!(op.to_dense().unwrap(), dense_laplacian(6, 0.25));
}

#[test]
fn the_size_limit_and_the_missing_diagonal_are_named_errors() {
    let op = Laplacian { m: 65, shift: 0.1 };
    assert!(op.dim() > DEFAULT_DENSE_MAX_DIM);
    let (field, value, rule) = rule_of(op.to_dense().unwrap_err());
    assert_eq!((field.as_str(), value.as_str()), ("dim", "4225"));
    assert!(rule.contains("dim <= 4096"), "{rule}");
    let (field, _, rule) = rule_of(op.diagonal(&mut vec![0.0; op.dim()]).unwrap_err());
    assert_eq!((field.as_str(), rule.as_str()), ("diagonal()", NO_DIAGONAL_RULE));
}

#[test]
fn identity_pcg_on_the_laplacian_matches_a_dense_solve() {
    let (m, shift) = (20, 0.05);
    let op = Laplacian { m, shift };
    let n = op.dim();
    let b = pattern(n, 1.7);
    let opts = PcgOptions {
        rtol: 1e-13,
        ..Default::default()
    };
    let sol = cg(&CpuBackend::new(), &op, &Identity, &b, None, &opts).unwrap();
    assert!(sol.info.converged, "{:?}", sol.info.stop_reason);
    let x = Cholesky::factor(n, &dense_laplacian(m, shift))
        .unwrap()
        .solve(&b, 1)
        .unwrap();
    let err = x.iter().zip(&sol.x).fold(0.0f64, |e, (u, v)| e.max((u - v).abs()));
    assert!(err <= 1e-10, "max |x_pcg - x_dense| = {err:e}");
}

#[test]
fn identity_and_jacobi_identity_give_the_same_bits() {
    let op = Laplacian { m: 15, shift: 0.01 };
    let n = op.dim();
    let be = CpuBackend::new();
    let (b, x0) = (pattern(n, 0.9), pattern(n, 2.2));
    let opts = PcgOptions {
        rtol: 1e-11,
        check_every: 3,
        refresh_every: 7,
        ..Default::default()
    };
    let jac = Jacobi::identity(&be, n).unwrap();
    for start in [None, Some(&x0)] {
        let a = cg(&be, &op, &Identity, &b, start, &opts).unwrap();
        let j = cg(&be, &op, &jac, &b, start, &opts).unwrap();
        assert!(a.info.converged);
        assert_eq!(a.info, j.info);
        assert!(a.x.iter().zip(&j.x).all(|(u, v)| u.to_bits() == v.to_bits()));
    }
}

/// `ResidentDense` on the CPU backend against the Laplacian's own
/// `apply`: its products (one vector and 40 at once, above the warp width),
/// diagonal and dense matrix; wrong lengths are errors naming the argument.
#[test]
fn a_resident_dense_matrix_gives_the_operator_it_was_made_from() {
    use matfree_solvers::ResidentDense;
    let (m, shift) = (6, 0.3);
    let lap = Laplacian { m, shift };
    let n = m * m;
    let dense = ResidentDense::new(CpuBackend::new(), n, dense_laplacian(m, shift)).unwrap();
    assert_eq!(dense.to_dense().unwrap(), dense_laplacian(m, shift));
    let mut diag = vec![f64::NAN; n];
    dense.diagonal(&mut diag).unwrap();
    assert!(diag.iter().all(|&d| d == 4.0 + shift));
    for k in [1, 40] {
        let x: Vec<f64> = (0..n * k).map(|i| ((i * 37 % 101) as f64 - 50.0) / 7.0).collect();
        // y starts non-zero: a product overwrites it.
        let mut got = vec![3.0; n * k];
        dense.apply_multi(&x, k, &mut got).unwrap();
        for j in 0..k {
            let mut want = vec![0.0; n];
            lap.apply(&x[j * n..(j + 1) * n].to_vec(), &mut want).unwrap();
            for (i, (g, w)) in got[j * n..(j + 1) * n].iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-13 * w.abs().max(1.0),
                    "k {k}, column {j}, entry {i}: {g} vs {w}"
                );
            }
        }
    }
    let mut y = vec![0.0; n];
    let e = dense.apply(&vec![1.0; n + 1], &mut y).unwrap_err();
    assert!(e.to_string().contains('x'), "{e}");
    assert!(
        ResidentDense::new(CpuBackend::new(), n, vec![0.0; n]).is_err(),
        "a matrix of the wrong size"
    );
}
