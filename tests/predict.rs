//! Predictions from a fit (CPU): probabilities against the model computed
//! row by row, the delta-method standard error against finite differences
//! of eta, accuracy against the truth as n grows, linear extrapolation past
//! the knots, and named errors for bad input.

use matfree::bms::MarginalSlope;
use std::sync::Arc;

use matfree::bms::fit::{fit, FitOptions};
use matfree::bms::io::generator::{generate, Generated, GeneratorConfig};
use matfree::bms::model::calibration::solve_intercept;
use matfree::bms::numerics::probit::norm_cdf;
use matfree::bms::results::predict::{predict_cpu, Estimates, Predictions};
use matfree::fixture::Rng;
use matfree::solvers::CpuBackend;
use matfree::Error;

fn simulated(n: usize, seed: u64) -> Generated {
    generate(GeneratorConfig::fit_shape(n, seed)).unwrap()
}

fn at(g: &Generated, beta: &[f64], cov: Option<&[f64]>) -> Predictions {
    let est = Estimates { beta, covariance: cov };
    predict_cpu(&g.model, est, g.data.designs.clone(), &g.data.z).unwrap()
}

/// eta and p of every row, solved one at a time from theta (the path the
/// generator and the tests' oracles use, not the packed Stage-1 bundle).
fn row_by_row(g: &Generated, beta: &[f64]) -> (Vec<f64>, Vec<f64>) {
    (0..g.data.n())
        .map(|i| {
            let theta = g.model.theta(&g.data, beta, i);
            let a = solve_intercept(g.model.bases(), &theta, i).unwrap().a;
            (g.model.bases().observed(&theta, a, g.data.z[i]).e, a)
        })
        .unzip()
}

#[test]
fn probabilities_and_intercepts_are_the_models() {
    let g = simulated(700, 5);
    let pred = at(&g, &g.beta, None);
    let (eta, a) = row_by_row(&g, &g.beta);
    for i in 0..g.data.n() {
        assert!((pred.eta[i] - eta[i]).abs() <= 1e-12 * (1.0 + eta[i].abs()), "row {i}");
        assert!((pred.p[i] - norm_cdf(eta[i])).abs() <= 1e-12, "row {i}");
        assert!(
            (pred.intercept[i] - g.intercept[i]).abs() <= 1e-12 * (1.0 + a[i].abs()),
            "row {i}"
        );
    }
    assert!(pred.se_eta.is_none());
}

/// se(eta)^2 = sum_k (J . L_k)^2 for V = L L^T; each J . L_k is the central
/// difference of eta along the draw direction L_k.
#[test]
fn delta_method_se_matches_finite_differences_along_draws() {
    let g = simulated(300, 6);
    let p = g.beta.len();
    let mut rng = Rng::new(11);
    let draws: Vec<Vec<f64>> = (0..4).map(|_| (0..p).map(|_| 0.05 * rng.normal()).collect()).collect();
    let mut cov = vec![0.0; p * p];
    for l in &draws {
        for a in 0..p {
            for b in 0..p {
                cov[a * p + b] += l[a] * l[b];
            }
        }
    }
    let se = at(&g, &g.beta, Some(&cov)).se_eta.unwrap();
    let h = 1e-4;
    let mut sum_sq = vec![0.0; g.data.n()];
    for l in &draws {
        let shifted = |s: f64| -> Vec<f64> { g.beta.iter().zip(l).map(|(b, d)| b + s * h * d).collect() };
        let (up, down) = (at(&g, &shifted(1.0), None).eta, at(&g, &shifted(-1.0), None).eta);
        for i in 0..g.data.n() {
            sum_sq[i] += ((up[i] - down[i]) / (2.0 * h)).powi(2);
        }
    }
    for i in 0..g.data.n() {
        let fd = sum_sq[i].sqrt();
        assert!(
            (se[i] - fd).abs() <= 1e-6 * (fd + 1e-3),
            "row {i}: se {} vs {fd}",
            se[i]
        );
    }
}

fn rmse_against_truth(n: usize, test: &Generated) -> f64 {
    let g = simulated(n, 21);
    let objective = g.model.objective(&g.data).unwrap();
    let f = fit(
        &CpuBackend::new(),
        &objective,
        &g.model,
        &g.data,
        &FitOptions::default(),
    )
    .unwrap();
    assert!(f.converged, "{n} rows: {}", f.termination);
    let pred = f
        .predict(
            &matfree::device::Device::Cpu { reason: "test".into() },
            &g.model,
            test.data.designs.clone(),
            &test.data.z,
        )
        .unwrap();
    let truth = at(test, &test.beta, None).p;
    let se = pred.se_eta.as_ref().unwrap();
    assert!(
        se.iter().all(|s| s.is_finite() && *s > 0.0),
        "{n} rows: standard errors"
    );
    let ss: f64 = pred.p.iter().zip(&truth).map(|(a, b)| (a - b).powi(2)).sum();
    (ss / truth.len() as f64).sqrt()
}

#[test]
fn predicted_probabilities_approach_the_truth_as_n_grows() {
    let test = simulated(1500, 99);
    let small = rmse_against_truth(600, &test);
    let large = rmse_against_truth(4800, &test);
    eprintln!("RMSE against the true p: {small:.5} at 600 rows, {large:.5} at 4800");
    // Measured 0.0307 and 0.0182: less than the parametric rate's sqrt(8),
    // as the penalties' bias shrinks more slowly than the variance.
    assert!(large < small / 1.25, "RMSE {small} at 600 rows, {large} at 4800");
    assert!(large < 0.03, "RMSE {large} at 4800 rows");
}

/// Past every knot (score knots in [-4, 4], link knots in [-6, 6]) eta is
/// linear in z for a fixed covariate row: extrapolated, not clamped.
#[test]
fn scores_past_the_knots_extrapolate_linearly() {
    let g = simulated(40, 7);
    let rows = 20;
    let x_m = g.data.designs.x_m()[..rows * g.data.designs.p_m()].to_vec();
    let x_g = g.data.designs.x_g()[..rows * g.data.designs.p_g()].to_vec();
    let (p_m, p_g) = (g.data.designs.p_m(), g.data.designs.p_g());
    for z0 in [12.0, -12.0, 36.0, -38.0] {
        let etas: Vec<Vec<f64>> = [z0, z0 + 1.0, z0 + 2.0]
            .iter()
            .map(|&z| {
                let designs =
                    Arc::new(matfree::bms::marginal_slope_designs(rows, p_m, p_g, x_m.clone(), x_g.clone()).unwrap());
                let est = Estimates {
                    beta: &g.beta,
                    covariance: None,
                };
                predict_cpu(&g.model, est, designs, &vec![z; rows]).unwrap().eta
            })
            .collect();
        for i in 0..rows {
            let second = etas[0][i] - 2.0 * etas[1][i] + etas[2][i];
            assert!(
                second.abs() <= 1e-9 * (1.0 + etas[1][i].abs()),
                "z {z0}, row {i}: {second}"
            );
            assert!(etas.iter().all(|e| e[i].is_finite()));
        }
    }
}

#[test]
fn bad_inputs_are_named_errors() {
    let g = simulated(30, 8);
    let est = |beta| Estimates { beta, covariance: None };
    let short = &g.beta[1..];
    let e = predict_cpu(&g.model, est(short), g.data.designs.clone(), &g.data.z).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidInput { field, .. } if field.contains("beta")),
        "{e}"
    );
    let mut z = g.data.z.clone();
    z[3] = f64::NAN;
    let e = predict_cpu(&g.model, est(&g.beta), g.data.designs.clone(), &z).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidInput { field, .. } if field.starts_with("z[3")),
        "{e}"
    );
    let e = predict_cpu(&g.model, est(&g.beta), g.data.designs.clone(), &z[..10]).unwrap_err();
    assert!(e.to_string().contains('z'), "{e}");
    let p = g.beta.len();
    let cov = vec![f64::INFINITY; p * p];
    let with_cov = Estimates {
        beta: &g.beta,
        covariance: Some(&cov),
    };
    let e = predict_cpu(&g.model, with_cov, g.data.designs.clone(), &g.data.z).unwrap_err();
    assert!(e.to_string().contains("covariance"), "{e}");
    let narrow = Arc::new(matfree::bms::marginal_slope_designs(30, 1, 1, vec![1.0; 30], vec![1.0; 30]).unwrap());
    assert!(predict_cpu(&g.model, est(&g.beta), narrow, &g.data.z).is_err());
}

/// A row the model cannot calibrate (a covariate a million times the
/// data's) is listed with its reason and NaN values, and every other row is
/// predicted as it would be without it (issue 38, item 9).
#[test]
fn a_rejected_row_does_not_fail_the_others() {
    let g = simulated(40, 8);
    let (p_m, p_g) = (g.data.designs.p_m(), g.data.designs.p_g());
    let (mut x_m, mut x_g) = (g.data.designs.x_m().to_vec(), g.data.designs.x_g().to_vec());
    x_m[7 * p_m + 1] = 1e6;
    x_g[7 * p_g + 1] = 1e6;
    let designs = Arc::new(matfree::bms::marginal_slope_designs(40, p_m, p_g, x_m, x_g).unwrap());
    let est = Estimates {
        beta: &g.beta,
        covariance: None,
    };
    let pred = predict_cpu(&g.model, est, designs, &g.data.z).unwrap();
    assert_eq!(pred.rejected.len(), 1, "{:?}", pred.rejected);
    assert_eq!(pred.rejected[0].0, 7);
    assert!(pred.rejected[0].1.contains("F_a"), "{}", pred.rejected[0].1);
    assert!(pred.eta[7].is_nan() && pred.p[7].is_nan());
    let clean = at(&g, &g.beta, None);
    for i in (0..40).filter(|&i| i != 7) {
        assert_eq!(pred.eta[i].to_bits(), clean.eta[i].to_bits(), "row {i}");
    }
    let mut csv = Vec::new();
    pred.write_csv(&mut csv).unwrap();
    let text = String::from_utf8(csv).unwrap();
    assert_eq!(text.lines().nth(8), Some("8,,,"), "{text}");
}
