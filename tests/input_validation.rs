//! A property test of the library's input validation: random shapes, random
//! lengths and random non-finite entries given to every constructor a user
//! calls, and to `cg` and the fit. Nothing panics, and every error is an
//! input error naming a field.

use std::sync::Arc;

use matfree::bms::fit::{fit, FitOptions};
use matfree::bms::{Bases, BmsData, BmsModel, CubicBasis};
use matfree::fixture::Rng;
use matfree::solvers::{cg, CpuBackend, DenseOperator, Jacobi, PcgOptions, Penalty, PenaltyBlock};
use matfree::{Error, RowHessian};

/// A value that is usually fine and sometimes not finite.
fn value(rng: &mut Rng) -> f64 {
    match (rng.uniform() * 40.0) as u32 {
        0 => f64::NAN,
        1 => f64::INFINITY,
        2 => f64::NEG_INFINITY,
        3 => 1e308,
        _ => rng.normal(),
    }
}

fn small(rng: &mut Rng, max: usize) -> usize {
    (rng.uniform() * (max + 1) as f64) as usize
}

/// An error must name a field (`field = value: rule`), or where a
/// computation failed and why.
fn named(e: &Error) {
    match e {
        Error::InvalidInput { field, rule, .. } => assert!(!field.is_empty() && !rule.is_empty(), "{e}"),
        Error::Solver(matfree::solvers::SolverError::InvalidInput { field, .. }) => assert!(!field.is_empty(), "{e}"),
        Error::Solver(matfree::solvers::SolverError::NotPositiveDefinite { .. }) => {}
        // Data that do not identify the model: named as a numerical failure
        // (where, the value met, why) or an iteration that did not converge.
        Error::Solver(matfree::solvers::SolverError::NumericalFailure { what, reason, .. }) => {
            assert!(!what.is_empty() && !reason.is_empty(), "{e}")
        }
        Error::Solver(matfree::solvers::SolverError::NoConvergence { solver, .. }) => {
            assert!(!solver.is_empty(), "{e}")
        }
        other => panic!("not an input error: {other}"),
    }
}

#[test]
fn random_shapes_and_entries_never_panic() {
    let mut rng = Rng::new(2024);
    for _ in 0..3000 {
        let (n, p_m, p_g) = (small(&mut rng, 6), small(&mut rng, 3), small(&mut rng, 3));
        let len = |rng: &mut Rng, want: usize| {
            if rng.uniform() < 0.9 {
                want
            } else {
                small(rng, want + 2)
            }
        };
        let x_m: Vec<f64> = (0..len(&mut rng, n * p_m)).map(|_| value(&mut rng)).collect();
        let x_g: Vec<f64> = (0..len(&mut rng, n * p_g)).map(|_| value(&mut rng)).collect();
        let designs = match matfree::bms::marginal_slope_designs(n, p_m, p_g, x_m, x_g) {
            Ok(d) => Arc::new(d),
            Err(e) => {
                named(&e);
                continue;
            }
        };
        let col = |rng: &mut Rng| -> Vec<f64> { (0..len(rng, n)).map(|_| value(rng)).collect() };
        let y: Vec<f64> = (0..len(&mut rng, n)).map(|_| (rng.uniform() * 3.0).floor()).collect();
        if let Err(e) = BmsData::new(designs.clone(), col(&mut rng), y, col(&mut rng)) {
            named(&e);
        }
        let r = 2 + small(&mut rng, 2);
        let hess: Vec<f64> = (0..len(&mut rng, n * r * r)).map(|_| value(&mut rng)).collect();
        if let Ok(layout) = matfree::bms::standard_layout(p_m, p_g, r - 2, 0) {
            if let Err(e) = RowHessian::new(layout, designs, hess) {
                named(&e);
            }
        }
    }
}

#[test]
fn random_penalties_and_solves_never_panic() {
    let mut rng = Rng::new(7);
    let be = CpuBackend::new();
    for _ in 0..2000 {
        let p = 1 + small(&mut rng, 5);
        let dim = 1 + small(&mut rng, 3);
        let start = small(&mut rng, p);
        let s: Vec<f64> = (0..dim * dim).map(|_| value(&mut rng)).collect();
        if let Err(e) = Penalty::new(p, vec![PenaltyBlock { start, dim, s }]) {
            assert!(!e.to_string().is_empty());
        }
        let a: Vec<f64> = (0..p * p).map(|_| value(&mut rng)).collect();
        let Ok(op) = DenseOperator::new(p, a) else { continue };
        let diag: Vec<f64> = (0..p).map(|_| value(&mut rng).abs()).collect();
        let Ok(m) = Jacobi::new(&be, &diag, None, 0.0) else {
            continue;
        };
        let b: Vec<f64> = (0..p).map(|_| value(&mut rng)).collect();
        // Any outcome but a panic: a solution, a stop reason or a named error.
        let _ = cg(&be, &op, &m, &b, None, &PcgOptions::default());
    }
}

/// The whole fit on tiny random data sets: an answer or a named error.
#[test]
fn random_tiny_fits_never_panic() {
    let mut rng = Rng::new(11);
    let bases = Bases::new(
        Some(CubicBasis::uniform(-4.0, 4.0, 4).unwrap()),
        Some(CubicBasis::uniform(-6.0, 6.0, 3).unwrap()),
        1.0,
    )
    .unwrap();
    let model = BmsModel::new(bases, 2, 1).unwrap();
    for _ in 0..12 {
        let n = 5 + small(&mut rng, 40);
        let x: Vec<f64> = (0..n)
            .flat_map(|_| [1.0, rng.normal() * 10f64.powf(rng.normal() * 3.0)])
            .collect();
        let designs = Arc::new(matfree::bms::marginal_slope_designs(n, 2, 1, x, vec![1.0; n]).unwrap());
        let z: Vec<f64> = (0..n).map(|_| rng.normal() * 3.0).collect();
        let y: Vec<f64> = (0..n).map(|_| f64::from(rng.uniform() < 0.5)).collect();
        let data = BmsData::new(designs, z, y, vec![1.0; n]).unwrap();
        let objective = model.objective(&data).unwrap();
        match fit(&CpuBackend::new(), &objective, &model, &data, &FitOptions::default()) {
            Ok(f) => {
                assert!(f.converged || !f.warnings.is_empty(), "{}", f.termination);
                assert!(f.edf.total.is_finite());
            }
            Err(e) => named(&e),
        }
    }
}
