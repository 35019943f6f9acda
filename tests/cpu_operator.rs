//! The CPU row-Hessian operator against an independent dense oracle built
//! from explicit P_i matrices, plus input validation and determinism.

mod common;

use std::sync::Arc;

use matfree::fixture::{random_row_problem, Rng, Shape};
use matfree::solvers::{CpuBackend, LinearOperator};
use matfree::{Block, Designs, Error, Layout, RowHessian};

/// The explicit r x p matrix P_i: row j holds design j's row i in
/// predictor j's columns; a direct coordinate a 1 in its column.
fn explicit_p(op: &RowHessian, i: usize) -> Vec<f64> {
    let (l, d) = (op.layout(), op.designs());
    let (r, p) = (l.r(), l.p_total());
    let mut m = vec![0.0; r * p];
    for (j, range) in l.predictors().iter().enumerate() {
        m[j * p + range.start..j * p + range.end].copy_from_slice(d.row(j, i));
    }
    for (range, u0) in l.direct_blocks() {
        for (k, j) in range.enumerate() {
            m[(u0 + k) * p + j] = 1.0;
        }
    }
    m
}

/// sum_i P_i^T H_i P_i by plain triple loops.
fn dense_oracle(op: &RowHessian) -> Vec<f64> {
    let (r, p) = (op.layout().r(), op.layout().p_total());
    let mut out = vec![0.0; p * p];
    for i in 0..op.n() {
        let pm = explicit_p(op, i);
        let h = &op.hess()[i * r * r..(i + 1) * r * r];
        for a in 0..p {
            for b in 0..p {
                let mut s = 0.0;
                for u in 0..r {
                    for v in 0..r {
                        s += pm[u * p + a] * h[u * r + v] * pm[v * p + b];
                    }
                }
                out[a * p + b] += s;
            }
        }
    }
    out
}

fn shapes() -> Vec<Shape> {
    vec![
        Shape {
            n: 37,
            p_m: 3,
            p_g: 2,
            p_h: 1,
            p_w: 1,
        },
        Shape {
            n: 300,
            p_m: 5,
            p_g: 4,
            p_h: 0,
            p_w: 6,
        },
        Shape {
            n: 129,
            p_m: 4,
            p_g: 3,
            p_h: 20,
            p_w: 11,
        }, // r = 33
        Shape {
            n: 1300,
            p_m: 40,
            p_g: 3,
            p_h: 2,
            p_w: 1,
        }, // several dense tiles (512 rows), a design wider than a warp
    ]
}

/// The operator's dense matrix, product and diagonal against the explicit
/// pullback.
fn check_against_oracle(op: &RowHessian) {
    let dense = dense_oracle(op);
    let p = op.dim();
    let r = op.layout().r();
    common::assert_close(
        &format!("dense r={r} p={p}"),
        &LinearOperator::<CpuBackend>::to_dense(op).unwrap(),
        &dense,
        1e-13,
    );
    let v = Rng::new(5).normals(p);
    let mut hv = vec![0.0; p];
    op.apply(&v, &mut hv).unwrap();
    let want: Vec<f64> = (0..p).map(|a| (0..p).map(|b| dense[a * p + b] * v[b]).sum()).collect();
    common::assert_close(&format!("hvp r={r} p={p}"), &hv, &want, 1e-12);
    let mut diag = vec![0.0; p];
    op.diagonal(&mut diag).unwrap();
    let want: Vec<f64> = (0..p).map(|a| dense[a * p + a]).collect();
    common::assert_close(&format!("diag r={r} p={p}"), &diag, &want, 1e-13);
}

#[test]
fn hvp_diagonal_and_dense_match_explicit_pullback() {
    for (s, shape) in shapes().into_iter().enumerate() {
        check_against_oracle(&random_row_problem(shape, 0.0, 11 + s as u64).unwrap());
    }
}

/// Any layout (r = 1, 2, 3 and wider; predictors anywhere in beta; no
/// predictor at all) against the explicit pullback, and its joint gradient.
#[test]
fn any_layout_matches_explicit_pullback() {
    for (s, (n, blocks)) in common::generic_layouts().into_iter().enumerate() {
        let op = matfree::fixture::random_layout_problem(n, &blocks, 40 + s as u64).unwrap();
        assert_eq!(op.layout().blocks(), &blocks[..]);
        check_against_oracle(&op);
        let r = op.layout().r();
        let mut rng = Rng::new(3);
        let (neglog, grad) = (rng.normals(n), rng.normals(n * r));
        let got = op.joint_gradient(&neglog, &grad).unwrap();
        let p = op.dim();
        let mut want = vec![0.0; p];
        for i in 0..n {
            let pm = explicit_p(&op, i);
            for (a, w) in want.iter_mut().enumerate() {
                *w += (0..r).map(|u| pm[u * p + a] * grad[i * r + u]).sum::<f64>();
            }
        }
        common::assert_close(&format!("joint gradient {blocks:?}"), &got.gradient, &want, 1e-12);
    }
}

/// A GLM's layout: one predictor, r = 1, and H = X^T diag(w) X.
#[test]
fn glm_layout_is_x_transpose_w_x() {
    let (n, p) = (50, 4);
    let mut rng = Rng::new(8);
    let x = rng.normals(n * p);
    let w: Vec<f64> = (0..n).map(|_| 0.1 + rng.uniform()).collect();
    let designs = Arc::new(Designs::single(n, p, x.clone()).unwrap());
    let op = RowHessian::new(Layout::glm(p).unwrap(), designs, w.clone()).unwrap();
    let got = LinearOperator::<CpuBackend>::to_dense(&op).unwrap();
    let want: Vec<f64> = (0..p * p)
        .map(|e| (0..n).map(|i| x[i * p + e / p] * w[i] * x[i * p + e % p]).sum())
        .collect();
    common::assert_close("X^T W X", &got, &want, 1e-13);
}

#[test]
fn multi_rhs_equals_repeated_single_applies() {
    let op = random_row_problem(
        Shape {
            n: 700,
            p_m: 6,
            p_g: 5,
            p_h: 4,
            p_w: 3,
        },
        1.0,
        3,
    )
    .unwrap();
    let (p, k) = (op.dim(), 5);
    let x = Rng::new(9).normals(p * k);
    let mut y = vec![0.0; p * k];
    op.apply_multi(&x, k, &mut y).unwrap();
    for j in 0..k {
        let mut yj = vec![0.0; p];
        op.apply(&x[j * p..(j + 1) * p].to_vec(), &mut yj).unwrap();
        assert_eq!(&y[j * p..(j + 1) * p], &yj[..], "column {j}");
    }
}

#[test]
fn joint_gradient_matches_explicit_pullback() {
    let op = random_row_problem(
        Shape {
            n: 90,
            p_m: 3,
            p_g: 4,
            p_h: 2,
            p_w: 5,
        },
        0.0,
        8,
    )
    .unwrap();
    let (n, r, p) = (op.n(), op.layout().r(), op.dim());
    let mut rng = Rng::new(1);
    let (neglog, grad) = (rng.normals(n), rng.normals(n * r));
    let jg = op.joint_gradient(&neglog, &grad).unwrap();
    let mut want = vec![0.0; p];
    for i in 0..n {
        let pm = explicit_p(&op, i);
        for a in 0..p {
            want[a] += (0..r).map(|u| pm[u * p + a] * grad[i * r + u]).sum::<f64>();
        }
    }
    common::assert_close("gradient", &jg.gradient, &want, 1e-13);
    let total: f64 = neglog.iter().sum();
    assert!((jg.neglog - total).abs() <= 1e-12 * total.abs().max(1.0));
    assert_eq!(jg.log_likelihood(), -jg.neglog);
}

fn run_with_threads(threads: usize, op: &RowHessian, v: &[f64]) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    pool.install(|| {
        let mut hv = vec![0.0; op.dim()];
        op.apply(&v.to_vec(), &mut hv).unwrap();
        (hv, op.diagonal_host(), op.dense_host())
    })
}

#[test]
fn results_are_bitwise_identical_for_1_and_4_threads() {
    let op = random_row_problem(
        Shape {
            n: 5000,
            p_m: 7,
            p_g: 6,
            p_h: 5,
            p_w: 4,
        },
        2.0,
        21,
    )
    .unwrap();
    let v = Rng::new(2).normals(op.dim());
    let one = run_with_threads(1, &op, &v);
    let four = run_with_threads(4, &op, &v);
    assert_eq!(one, four);
}

fn expect_invalid(result: Result<impl std::fmt::Debug, Error>, field: &str) {
    match result {
        Err(Error::InvalidInput { field: f, .. }) => assert!(f.contains(field), "field {f} should name {field}"),
        other => panic!("expected InvalidInput naming {field}, got {other:?}"),
    }
}

#[test]
fn bad_inputs_are_rejected_with_the_field_named() {
    expect_invalid(matfree::bms::marginal_slope_designs(0, 1, 1, vec![], vec![]), "n");
    expect_invalid(
        matfree::bms::marginal_slope_designs(2, 2, 1, vec![1.0; 3], vec![1.0; 2]),
        "designs[0].len",
    );
    let mut x_g = vec![1.0; 6];
    x_g[4] = f64::NAN;
    expect_invalid(
        matfree::bms::marginal_slope_designs(3, 1, 2, vec![1.0; 3], x_g),
        "designs[1][2, 0]",
    );
    expect_invalid(Designs::new(2, vec![(0, vec![])]), "designs[0].width");
    // Layouts: no blocks, a block of no columns.
    expect_invalid(Layout::new(&[]), "blocks");
    expect_invalid(Layout::new(&[Block::Predictor(2), Block::Direct(0)]), "blocks[1]");
    // Designs that do not match the layout's predictors.
    let glm = Layout::glm(2).unwrap();
    let two = Arc::new(matfree::bms::marginal_slope_designs(2, 2, 1, vec![1.0; 4], vec![1.0; 2]).unwrap());
    expect_invalid(RowHessian::new(glm, two, vec![1.0; 2]), "designs.count");
    // Operator: hessian length and design widths.
    let layout = matfree::bms::standard_layout(2, 1, 1, 0).unwrap();
    let designs = Arc::new(matfree::bms::marginal_slope_designs(2, 2, 1, vec![1.0; 4], vec![1.0; 2]).unwrap());
    expect_invalid(
        RowHessian::new(layout.clone(), designs.clone(), vec![1.0; 17]),
        "hess.len",
    );
    let mut hess = vec![1.0; 18];
    hess[10] = f64::INFINITY;
    expect_invalid(RowHessian::new(layout.clone(), designs.clone(), hess), "hess[1, 1]");
    let wide = matfree::bms::standard_layout(3, 1, 1, 0).unwrap();
    expect_invalid(
        RowHessian::new(wide, designs.clone(), vec![1.0; 18]),
        "designs[0].width",
    );
    let op = RowHessian::new(layout, designs, vec![1.0; 18]).unwrap();
    let mut y = vec![0.0; 4];
    assert!(op.apply(&vec![1.0; 3], &mut y).is_err(), "wrong x length must fail");
    expect_invalid(op.joint_gradient(&[1.0], &[0.0; 6]), "neglog.len");
}

/// A row Hessian that is not symmetric is refused, naming the row and the
/// entry (apply and to_dense read different triangles); rounding-level
/// asymmetry is accepted.
#[test]
fn asymmetric_row_hessians_are_rejected() {
    let layout = matfree::bms::standard_layout(2, 1, 0, 0).unwrap();
    let designs =
        Arc::new(matfree::bms::marginal_slope_designs(2, 2, 1, vec![1.0, 0.5, 1.0, -0.5], vec![1.0, 1.0]).unwrap());
    let sym = vec![2.0, 0.3, 0.3, 1.0, 1.5, -0.2, -0.2, 0.8];
    assert!(RowHessian::new(layout.clone(), designs.clone(), sym.clone()).is_ok());
    let mut rounding = sym.clone();
    rounding[2] += 1e-15;
    assert!(RowHessian::new(layout.clone(), designs.clone(), rounding).is_ok());
    let mut bad = sym;
    bad[5] = 0.2;
    let e = RowHessian::new(layout, designs, bad).unwrap_err().to_string();
    assert!(e.contains("hess[1][1,0]") && e.contains("symmetric"), "{e}");
}
