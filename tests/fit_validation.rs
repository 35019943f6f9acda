//! The whole BMS fit (rigid start, Newton, REML) on data the model did not
//! generate, checked independently: each fit converges within its caps, to
//! a point where the penalised gradient is zero (a dense Newton decrement
//! from a fresh evaluation) and V(rho) is stationary (central differences
//! of V through fresh inner solves), with every edf inside its bounds. Also:
//! invariance to rescaling a covariate, small data, and the rigid model
//! against the full model without smooths.

use std::sync::Arc;

use matfree::bms::fit::rigid::rigid_objective;
use matfree::bms::fit::{fit, BmsFit, FitOptions};
use matfree::bms::MarginalSlope;
use matfree::bms::{bms_penalty, Bases, BmsData, BmsModel, CubicBasis};
use matfree::fixture::Rng;
use matfree::solvers::newton::Objective;
use matfree::solvers::reml::{evaluate_laml, RemlOptions};
use matfree::solvers::{Cholesky, CpuBackend};

fn logistic(t: f64) -> f64 {
    1.0 / (1.0 + (-t).exp())
}

/// `fit_bms`' default bases (score warp 8 on [-4, 4], link deviation 6 on
/// [-6, 6]) for the given design widths (intercepts included).
fn model(p_m: usize, p_g: usize) -> BmsModel {
    let bases = Bases::new(
        Some(CubicBasis::uniform(-4.0, 4.0, 8).unwrap()),
        Some(CubicBasis::uniform(-6.0, 6.0, 6).unwrap()),
        1.0,
    )
    .unwrap();
    BmsModel::new(bases, p_m, p_g).unwrap()
}

/// A data set from columns: marginal covariates (an intercept is added),
/// slope covariates (likewise), scores and labels.
fn data(marginal: &[Vec<f64>], slope: &[Vec<f64>], z: Vec<f64>, y: Vec<f64>) -> BmsData {
    let n = z.len();
    let rows = |cols: &[Vec<f64>]| -> Vec<f64> {
        (0..n)
            .flat_map(|i| std::iter::once(1.0).chain(cols.iter().map(move |c| c[i])))
            .collect()
    };
    let designs =
        matfree::bms::marginal_slope_designs(n, marginal.len() + 1, slope.len() + 1, rows(marginal), rows(slope))
            .unwrap();
    BmsData::new(Arc::new(designs), z, y, vec![1.0; n]).unwrap()
}

/// z standardised to sample mean 0 and sd 1.
fn standardise(z: &mut [f64]) {
    let n = z.len() as f64;
    let mean = z.iter().sum::<f64>() / n;
    let sd = (z.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt();
    z.iter_mut().for_each(|v| *v = (*v - mean) / sd);
}

/// `fit_bms`' default simulated data (p_m 3, p_g 2, warp 8, link 6).
fn simulated(n: usize, seed: u64) -> matfree::bms::io::generator::Generated {
    matfree::bms::io::generator::generate(matfree::bms::io::generator::GeneratorConfig::fit_shape(n, seed)).unwrap()
}

fn cpu_fit(model: &BmsModel, data: &BmsData) -> BmsFit {
    let objective = model.objective(data).unwrap();
    fit(&CpuBackend::new(), &objective, model, data, &FitOptions::default()).unwrap()
}

/// The checks every fit must pass.
fn check_fit(label: &str, model: &BmsModel, data: &BmsData, f: &BmsFit) {
    check_fit_with_step(label, model, data, f, 0.05);
}

/// [`check_fit`] with the central differences of V a step `h` in rho.
fn check_fit_with_step(label: &str, model: &BmsModel, data: &BmsData, f: &BmsFit, h: f64) {
    let p = f.beta.len();
    assert!(f.converged, "{label}: {} {:?}", f.termination, f.warnings);
    assert!(f.evaluations <= 120, "{label}: {} evaluations", f.evaluations);
    assert!(f.covariance.is_some(), "{label}: H + S must be positive definite");
    let penalty = bms_penalty(model).unwrap();
    for (b, e) in penalty.blocks().iter().zip(&f.edf.blocks) {
        assert!(
            (-1e-9..=b.dim as f64 + 1e-9).contains(e),
            "{label}: edf {e} of {}",
            b.dim
        );
    }
    assert!(
        (-1e-9..=p as f64 + 1e-9).contains(&f.edf.total),
        "{label}: total edf {}",
        f.edf.total
    );
    // Penalised stationarity from a fresh evaluation: g^T (H + S)^{-1} g.
    let objective = model.objective(data).unwrap();
    let e = objective.evaluate(&f.beta).unwrap().unwrap();
    let s = penalty.dense(&f.lambda).unwrap();
    let sb = penalty.apply(&f.lambda, &f.beta).unwrap();
    let g: Vec<f64> = e.gradient.iter().zip(&sb).map(|(a, b)| a + b).collect();
    let a: Vec<f64> = e
        .hessian
        .to_dense()
        .unwrap()
        .iter()
        .zip(&s)
        .map(|(h, s)| h + s)
        .collect();
    let step = Cholesky::factor(p, &a).unwrap().solve(&g, 1).unwrap();
    let decrement: f64 = g.iter().zip(&step).map(|(a, b)| a * b).sum();
    assert!(decrement <= 1e-6, "{label}: Newton decrement {decrement:e} at the fit");
    check_reml_stationary(label, model, data, f, h);
}

/// Central differences of V(rho) through fresh inner solves: zero within
/// tolerance for a free rho, and V not lower just inside for a rho at its
/// upper bound (a smooth the data do not support).
fn check_reml_stationary(label: &str, model: &BmsModel, data: &BmsData, f: &BmsFit, h: f64) {
    let penalty = bms_penalty(model).unwrap();
    let objective = model.objective(data).unwrap();
    let mut opts = RemlOptions::default();
    opts.newton.max_step = 2.0;
    let rho: Vec<f64> = f.lambda.iter().map(|l| l.ln()).collect();
    let v = |r: &[f64]| {
        evaluate_laml(&CpuBackend::new(), &objective, &penalty, r, &f.beta, &opts)
            .unwrap()
            .value
    };
    let v0 = v(&rho);
    assert!(
        (v0 - f.reml_score.unwrap()).abs() < 1e-6 * v0.abs(),
        "{label}: V {v0} vs {:?}",
        f.reml_score
    );
    for k in 0..rho.len() {
        let (mut up, mut dn) = (rho.clone(), rho.clone());
        up[k] += h;
        dn[k] -= h;
        let vd = v(&dn);
        if f.at_upper_bound.contains(&k) {
            assert!(
                vd >= v0 - 1e-6,
                "{label}: rho[{k}] at its bound but V falls inside: {vd} < {v0}"
            );
            continue;
        }
        let fd = (v(&up) - vd) / (2.0 * h);
        assert!(fd.abs() < 0.05, "{label}: dV/drho[{k}] = {fd} by central differences");
    }
}

/// A standardised score with 7 distinct values (heavy ties), three
/// covariates, one of them in the slope, and labels from a logistic model
/// with a nonlinear score effect: data the model did not generate, shaped
/// like the survey data set that did not converge.
#[test]
fn tied_score_and_logistic_outcome() {
    let n = 2000;
    let mut rng = Rng::new(31);
    let mut z: Vec<f64> = (0..n).map(|_| (rng.normal() * 1.5).round().clamp(-3.0, 3.0)).collect();
    standardise(&mut z);
    let x1: Vec<f64> = (0..n).map(|_| rng.normal()).collect();
    let x2: Vec<f64> = (0..n).map(|_| rng.uniform()).collect();
    let x3: Vec<f64> = (0..n).map(|_| f64::from(rng.uniform() < 0.3)).collect();
    let y: Vec<f64> = (0..n)
        .map(|i| {
            let t = -0.4 + 0.7 * x1[i] - 0.5 * x2[i] + 0.3 * x3[i] + 1.1 * z[i] + 0.35 * z[i] * z[i];
            f64::from(rng.uniform() < logistic(t))
        })
        .collect();
    let m = model(4, 2);
    let d = data(&[x1.clone(), x2, x3], &[x1], z, y);
    let f = cpu_fit(&m, &d);
    check_fit("tied score", &m, &d, &f);
}

/// A covariate with three levels in both designs, and a sine score effect.
#[test]
fn few_level_covariate_and_sine_score_effect() {
    let n = 2000;
    let mut rng = Rng::new(7);
    let z: Vec<f64> = rng.normals(n);
    let x: Vec<f64> = (0..n).map(|_| (rng.uniform() * 3.0).floor()).collect();
    let y: Vec<f64> = (0..n)
        .map(|i| f64::from(rng.uniform() < logistic(-0.2 + 0.6 * x[i] + 1.5 * z[i].sin())))
        .collect();
    let m = model(2, 2);
    let d = data(std::slice::from_ref(&x), std::slice::from_ref(&x), z, y);
    let f = cpu_fit(&m, &d);
    check_fit("few levels", &m, &d, &f);
}

/// Nearly separable labels: a steep probit in the score and a covariate.
#[test]
fn near_separable_labels() {
    let n = 1500;
    let mut rng = Rng::new(99);
    let z: Vec<f64> = rng.normals(n);
    let x: Vec<f64> = rng.normals(n);
    let y: Vec<f64> = (0..n)
        .map(|i| f64::from(2.5 * z[i] + x[i] + 0.4 * rng.normal() > 0.0))
        .collect();
    let m = model(2, 1);
    let d = data(&[x], &[], z, y);
    let f = cpu_fit(&m, &d);
    check_fit("near separable", &m, &d, &f);
    // The slope is steep, and the estimate says so; the rigid start sees
    // rows fitted with probability numerically 1 and says so too.
    assert!(f.beta[2] > 1.5, "slope {}", f.beta[2]);
    assert!(f.warnings.iter().any(|w| w.contains("separated")), "{:?}", f.warnings);
}

/// Multiplying a covariate by 1e-4 or 1e6 changes nothing but its
/// coefficients (divided by the factor): the same fitted model, V and
/// smoothing parameters.
#[test]
fn rescaled_covariate_gives_the_same_fit() {
    let g = simulated(1500, 3);
    let base = cpu_fit(&g.model, &g.data);
    assert!(base.converged, "{}", base.termination);
    for c in [1e-4, 1e6] {
        let d = &g.data.designs;
        let scale = |x: &[f64], p: usize| -> Vec<f64> {
            x.iter()
                .enumerate()
                .map(|(k, v)| if k % p == 1 { v * c } else { *v })
                .collect()
        };
        let designs = matfree::bms::marginal_slope_designs(d.n(), 3, 2, scale(d.x_m(), 3), scale(d.x_g(), 2)).unwrap();
        let data = BmsData::new(
            Arc::new(designs),
            g.data.z.clone(),
            g.data.y.clone(),
            g.data.weights.clone(),
        )
        .unwrap();
        let f = cpu_fit(&g.model, &data);
        assert!(f.converged, "x1 * {c}: {} {:?}", f.termination, f.warnings);
        // V moves by a constant: log|H + S| / 2 gains ln c for each of the
        // two unpenalised columns holding x1, whatever lambda.
        let (v, v0) = (f.reml_score.unwrap(), base.reml_score.unwrap());
        assert!((v - v0 - 2.0 * c.ln()).abs() < 1e-3, "x1 * {c}: V {v} vs {v0} + 2 ln c");
        let p = f.beta.len();
        let cov = base.covariance.as_ref().unwrap();
        for j in 0..p {
            let unit = if j == 1 || j == 4 { c } else { 1.0 };
            let se = cov[j * p + j].sqrt();
            let diff = (f.beta[j] * unit - base.beta[j]).abs() / se;
            assert!(
                diff < 0.05,
                "x1 * {c}: beta[{j}] {} vs {} ({diff} SE)",
                f.beta[j] * unit,
                base.beta[j]
            );
        }
        for (a, b) in f.lambda.iter().zip(&base.lambda) {
            assert!(
                (a.ln() - b.ln()).abs() < 0.2,
                "x1 * {c}: lambda {:?} vs {:?}",
                f.lambda,
                base.lambda
            );
        }
    }
}

/// 100 and 200 rows for 19 coefficients: the fit ends converged at a
/// minimum or says it did not, and its edf stay in bounds either way.
#[test]
fn small_data_keeps_edf_in_bounds() {
    for (n, seed) in [(100, 2), (200, 5)] {
        let g = simulated(n, seed);
        let f = cpu_fit(&g.model, &g.data);
        let penalty = bms_penalty(&g.model).unwrap();
        for (b, e) in penalty.blocks().iter().zip(&f.edf.blocks) {
            assert!((-1e-9..=b.dim as f64 + 1e-9).contains(e), "n {n}: edf {e} of {}", b.dim);
        }
        assert!(
            f.edf.total >= -1e-9 && f.edf.total <= 19.0 + 1e-9,
            "n {n}: {}",
            f.edf.total
        );
        assert!(
            f.converged || !f.warnings.is_empty(),
            "n {n}: not converged without a warning"
        );
        if f.converged {
            assert!(f.covariance.is_some());
        }
    }
}

/// The rigid objective (closed form) equals the full model without smooths,
/// which solves the calibration numerically: value, gradient and Hessian.
#[test]
fn rigid_objective_matches_the_model_without_smooths() {
    let g = matfree::bms::io::generator::generate(matfree::bms::io::generator::GeneratorConfig {
        n: 300,
        p_m: 3,
        p_g: 2,
        p_h: 0,
        p_w: 0,
        s_f: 0.8,
        seed: 9,
    })
    .unwrap();
    let rigid = rigid_objective(&g.model, &g.data).unwrap();
    let full = g.model.objective(&g.data).unwrap();
    for beta in [g.beta.clone(), vec![0.1, -0.3, 0.2, -0.7, 0.4]] {
        let (a, b) = (
            rigid.evaluate(&beta).unwrap().unwrap(),
            full.evaluate(&beta).unwrap().unwrap(),
        );
        assert!(
            (a.value - b.value).abs() < 1e-9 * b.value.abs(),
            "{} vs {}",
            a.value,
            b.value
        );
        for (x, y) in a.gradient.iter().zip(&b.gradient) {
            assert!((x - y).abs() < 1e-8 * (1.0 + y.abs()), "gradient {x} vs {y}");
        }
        let (ha, hb) = (a.hessian.to_dense().unwrap(), b.hessian.to_dense().unwrap());
        for (x, y) in ha.iter().zip(&hb) {
            assert!((x - y).abs() < 1e-7 * (1.0 + y.abs()), "hessian {x} vs {y}");
        }
    }
}

/// Degenerate data are named errors before any fitting, and doubtful data
/// warnings, each naming the column and the rule.
#[test]
fn data_checks_name_the_problem() {
    use matfree::bms::fit::checks::{check_data, ColumnNames};
    let n = 300;
    let mut rng = Rng::new(4);
    let z: Vec<f64> = rng.normals(n);
    let x: Vec<f64> = rng.normals(n);
    let y: Vec<f64> = (0..n).map(|i| f64::from(i % 3 == 0)).collect();
    let m3 = model(3, 1);
    let names: Vec<String> = ["(Intercept)", "age", "dose"].iter().map(|s| s.to_string()).collect();
    let slope = vec!["(Intercept)".to_string()];
    let err = |m: &BmsModel, d: &BmsData| {
        let names = ColumnNames {
            marginal: &names,
            slope: &slope,
        };
        check_data(m, d, Some(names)).unwrap_err().to_string()
    };
    let one_class = data(
        &[x.clone(), x.iter().map(|v| v * v).collect()],
        &[],
        z.clone(),
        vec![0.0; n],
    );
    assert!(err(&m3, &one_class).contains("all 300 labels are 0"));
    let constant = data(&[x.clone(), vec![2.5; n]], &[], z.clone(), y.clone());
    let e = err(&m3, &constant);
    assert!(e.contains("'dose'") && e.contains("constant 2.5"), "{e}");
    let duplicated = data(&[x.clone(), x.clone()], &[], z.clone(), y.clone());
    let e = err(&m3, &duplicated);
    assert!(
        e.contains("'age'") && e.contains("'dose'") && e.contains("collinear"),
        "{e}"
    );
    let affine = data(
        &[x.clone(), x.iter().map(|v| 3.0 * v - 1.0).collect()],
        &[],
        z.clone(),
        y.clone(),
    );
    assert!(err(&m3, &affine).contains("collinear"));
    let few = data(
        &[x[..10].to_vec(), z[..10].to_vec()],
        &[],
        z[..10].to_vec(),
        y[..10].to_vec(),
    );
    assert!(err(&m3, &few).contains("at least p rows"));
    // Warnings: a shifted score, and a score of 4 distinct values.
    let good = data(
        &[x.clone(), z.iter().map(|v| v.sin()).collect()],
        &[],
        z.clone(),
        y.clone(),
    );
    assert!(check_data(&m3, &good, None).unwrap().is_empty());
    let shifted = data(
        std::slice::from_ref(&x),
        &[],
        z.iter().map(|v| v + 50.0).collect(),
        y.clone(),
    );
    let w = check_data(&model(2, 1), &shifted, None).unwrap();
    assert!(
        w.iter()
            .any(|w| w.contains("not standardised") && w.contains("mean 49.9")),
        "{w:?}"
    );
    let huge = data(&[x.iter().map(|v| v * 1e300).collect()], &[], z.clone(), y.clone());
    let e = check_data(&model(2, 1), &huge, None).unwrap_err().to_string();
    assert!(
        e.contains("marginal 'marginal column 1', row 1") && e.contains("rescale"),
        "{e}"
    );
    // A column scaled far down is named as such (its squares would
    // underflow), not as constant; the score too.
    let tiny = data(&[x.iter().map(|v| v * 1e-200).collect()], &[], z.clone(), y.clone());
    let e = check_data(&model(2, 1), &tiny, None).unwrap_err().to_string();
    assert!(
        e.contains("marginal 'marginal column 1'") && e.contains("at least 1e-100") && !e.contains("constant"),
        "{e}"
    );
    let tiny_score = data(
        std::slice::from_ref(&x),
        &[],
        z.iter().map(|v| v * 1e-120).collect(),
        y.clone(),
    );
    let e = check_data(&model(2, 1), &tiny_score, None).unwrap_err().to_string();
    assert!(e.contains("score 'z'") && e.contains("rescale"), "{e}");
    // A column of zeros is constant, not tiny.
    let zeros = data(&[x.clone(), vec![0.0; n]], &[], z.clone(), y.clone());
    assert!(err(&m3, &zeros).contains("'dose'") && err(&m3, &zeros).contains("constant 0"));
    let tied = data(
        std::slice::from_ref(&x),
        &[],
        z.iter().map(|v| v.clamp(-1.0, 1.0).round()).collect(),
        y,
    );
    let w = check_data(&model(2, 1), &tied, None).unwrap();
    assert!(w.iter().any(|w| w.contains("3 distinct values")), "{w:?}");
}

/// A covariate that splits the labels exactly (the label itself, say) is an
/// error naming it; a score that does is a warning.
#[test]
fn complete_separation_is_named() {
    use matfree::bms::fit::checks::check_data;
    let n = 200;
    let mut rng = Rng::new(12);
    let z: Vec<f64> = rng.normals(n);
    let y: Vec<f64> = (0..n).map(|i| f64::from(i % 2 == 0)).collect();
    let label_copy = data(std::slice::from_ref(&y), &[], z.clone(), y.clone());
    let e = check_data(&model(2, 1), &label_copy, None).unwrap_err().to_string();
    assert!(
        e.contains("marginal covariate 'marginal column 1'") && e.contains("complete separation"),
        "{e}"
    );
    // The score's slope has no finite estimate either: an error now, where
    // it was a warning and the fit ended at a pivot failure (issue 38).
    let by_score: Vec<f64> = z.iter().map(|v| f64::from(*v > 0.3)).collect();
    let x: Vec<f64> = rng.normals(n);
    let e = check_data(
        &model(2, 1),
        &data(std::slice::from_ref(&x), &[], z.clone(), by_score.clone()),
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("score") && e.contains("exactly where") && e.contains("complete separation"),
        "{e}"
    );
    // The checks run at once, but where several fail the first in their
    // order is named: a constant covariate before the score's separation,
    // and a covariate's separation before the score's.
    let constant = data(&[x.clone(), vec![2.5; n]], &[], z.clone(), by_score.clone());
    let e = check_data(&model(3, 1), &constant, None).unwrap_err().to_string();
    assert!(e.contains("constant 2.5"), "{e}");
    let both = data(&[x, by_score.clone()], &[], z, by_score);
    let e = check_data(&model(3, 1), &both, None).unwrap_err().to_string();
    assert!(
        e.contains("marginal covariate 'marginal column 2'") && e.contains("separates"),
        "{e}"
    );
}

/// Issue 38's data checks: a covariate nearly constant beside its mean
/// (x + 1e8), weights whose mean is far from 1, and too few events per
/// coefficient; each names the column or the rule and what to do, and the
/// clean data pass.
#[test]
fn near_constant_columns_weights_and_rare_events_are_named() {
    use matfree::bms::fit::checks::{check_data, MIN_EVENTS_PER_COEFFICIENT, MIN_RELATIVE_SPREAD};
    let n = 400;
    let mut rng = Rng::new(21);
    let z: Vec<f64> = rng.normals(n);
    let x: Vec<f64> = rng.normals(n);
    let y: Vec<f64> = (0..n).map(|i| f64::from(i % 2 == 0)).collect();
    let m = model(2, 1);
    assert!(
        check_data(&m, &data(std::slice::from_ref(&x), &[], z.clone(), y.clone()), None)
            .unwrap()
            .is_empty()
    );
    for (shift, fails) in [(1e8, true), (1e3, false)] {
        let shifted: Vec<f64> = x.iter().map(|v| v + shift).collect();
        let r = check_data(&m, &data(&[shifted], &[], z.clone(), y.clone()), None);
        assert_eq!(r.is_err(), fails, "x + {shift:e}: {r:?}");
        if let Err(e) = r {
            let e = e.to_string();
            assert!(
                e.contains("centre it") && e.contains(&format!("{MIN_RELATIVE_SPREAD:e}")),
                "{e}"
            );
        }
    }
    let weighted = |w: f64| {
        let d = data(std::slice::from_ref(&x), &[], z.clone(), y.clone());
        BmsData::new(d.designs.clone(), d.z.clone(), d.y.clone(), vec![w; n]).unwrap()
    };
    for w in [1e-12, 1e12, 1e200] {
        let e = check_data(&m, &weighted(w), None).unwrap_err().to_string();
        assert!(e.contains("weights") && e.contains("mean weight"), "x {w:e}: {e}");
    }
    assert!(check_data(&m, &weighted(1e3), None).is_ok());
    // Rare events: 3 positives of 400 is below 10 per parametric coefficient.
    let rare: Vec<f64> = (0..n).map(|i| f64::from(i % 150 == 7)).collect();
    let w = check_data(&m, &data(std::slice::from_ref(&x), &[], z.clone(), rare), None).unwrap();
    assert!(
        w.iter().any(|w| w.contains("only 3 of 400 rows have y = 1")
            && w.contains(&format!(
                "{MIN_EVENTS_PER_COEFFICIENT} events per parametric coefficient (3)"
            ))),
        "{w:?}"
    );
}

/// Labels split exactly by a combination of covariates (no single column
/// splits them, so no check before the fit sees it): the fit never reports
/// convergence. It either ends not converged with the separation named, or
/// the runaway start is an error that names separation (issue 38, item 6).
#[test]
fn separation_by_a_combination_of_covariates_is_named() {
    let n = 60;
    let mut rng = Rng::new(5);
    let (a, b): (Vec<f64>, Vec<f64>) = (rng.normals(n), rng.normals(n));
    let mut z: Vec<f64> = rng.normals(n);
    standardise(&mut z);
    let y: Vec<f64> = (0..n).map(|i| f64::from(a[i] + b[i] > 0.0)).collect();
    let m = model(3, 1);
    let d = data(&[a, b], &[], z, y);
    matfree::bms::fit::checks::check_data(&m, &d, None).unwrap();
    let objective = m.objective(&d).unwrap();
    let opts = FitOptions {
        lambda: Some(vec![1.0, 1.0]),
        ..FitOptions::default()
    };
    match fit(&CpuBackend::new(), &objective, &m, &d, &opts) {
        Ok(f) => {
            assert!(
                !f.converged && f.termination.starts_with("separated"),
                "{}",
                f.termination
            );
            assert!(
                f.warnings.iter().any(|w| w.contains("separates the labels")),
                "{:?}",
                f.warnings
            );
        }
        Err(e) => assert!(e.to_string().contains("separated by a combination"), "{e}"),
    }
}

/// The end of REML is the lowest V along each rho axis, not only a
/// stationary point: on simulated data of 2,000 rows (seed 8's link
/// deviation is shrunk to nothing, seed 3 keeps both smooths), V through
/// fresh inner solves at
/// each smooth's rho from 6 below its reference to its upper bound, the
/// other held at the fit, is nowhere lower than at the fit.
#[test]
fn reml_ends_at_the_lowest_v_along_each_axis() {
    for seed in [3, 8] {
        let g = simulated(2000, seed);
        let f = cpu_fit(&g.model, &g.data);
        let label = format!("seed {seed}");
        assert!(f.converged, "{label}: {}", f.termination);
        let report = f.reml_report.as_ref().unwrap();
        let penalty = bms_penalty(&g.model).unwrap();
        let objective = g.model.objective(&g.data).unwrap();
        let mut opts = RemlOptions::default();
        opts.newton.max_step = 2.0;
        opts.newton.max_iter = 100;
        let rho: Vec<f64> = f.lambda.iter().map(|l| l.ln()).collect();
        let v0 = f.reml_score.unwrap();
        for k in 0..rho.len() {
            let (lo, hi) = (report.rho_ref[k] - 6.0, report.rho_upper[k]);
            for i in 0..=5 {
                let mut r = rho.clone();
                r[k] = lo + (hi - lo) * i as f64 / 5.0;
                let v = evaluate_laml(&CpuBackend::new(), &objective, &penalty, &r, &f.beta, &opts)
                    .unwrap()
                    .value;
                assert!(
                    v >= v0 - 1e-3,
                    "{label}: V({r:?}) = {v} below the fit's {v0} at {rho:?}"
                );
            }
        }
    }
}

/// Simulated data of 5,000 rows (seed 24) on which REML once ended
/// "LineSearchFailed" after 196 evaluations: the observed H is indefinite
/// there, so the link deviation's `dim - lambda tr(A^{-1} S)` fell below
/// 0.05 while it was in full use (its penalty term about 2) and the loop
/// took it for a vanished smooth; and V curves about 60 per unit of rho in
/// it, where the fixed-H model sees next to nothing. It converges to a
/// stationary point (checked with differences 0.005 in rho: V's third
/// derivative is large there, so 0.05 would be off by 0.24).
#[test]
fn indefinite_hessian_and_sharp_v_converge() {
    let g = simulated(5000, 24);
    let f = cpu_fit(&g.model, &g.data);
    assert!(
        f.edf.blocks[1] > 1.0,
        "the link deviation stays: edf {:?}",
        f.edf.blocks
    );
    check_fit_with_step("seed 24", &g.model, &g.data, &f, 0.005);
}

/// A fit at fixed lambda reports its REML score too (as mgcv does), so
/// smoothing choices compare: at REML's own lambda it is REML's score, and
/// at lambdas ten times larger or smaller it is higher.
#[test]
fn fixed_lambda_fits_report_the_reml_score() {
    let g = simulated(2000, 3);
    let objective = g.model.objective(&g.data).unwrap();
    let at = |lambda: Vec<f64>| {
        let opts = FitOptions {
            lambda: Some(lambda),
            ..FitOptions::default()
        };
        fit(&CpuBackend::new(), &objective, &g.model, &g.data, &opts).unwrap()
    };
    let reml = cpu_fit(&g.model, &g.data);
    let v = reml.reml_score.unwrap();
    let same = at(reml.lambda.clone());
    assert!(same.converged);
    let vs = same.reml_score.unwrap();
    // Two solves from different starts, each stopped within 1e-4 standard
    // errors of the optimum (INNER_DECREMENT): V moves by about 1e-6 over
    // that at 2,000 rows, through log|H + S| (1.4e-6 measured).
    assert!((vs - v).abs() < 1e-5, "fixed at REML's lambda: {vs} vs {v}");
    for factor in [10.0, 0.1] {
        let other = at(reml.lambda.iter().map(|l| l * factor).collect());
        let vo = other.reml_score.unwrap();
        assert!(vo > v, "lambda x {factor}: V {vo} not above the optimum's {v}");
    }
}

/// Every edf lies in [0, dim] exactly, whatever the rounding: random
/// positive semi-definite H of rank 4 to 8 (so smooths are informed in few
/// directions), with each smooth's lambda from 1 to 1e16.
#[test]
fn edf_stay_inside_their_bounds_exactly() {
    use matfree::bms::fit::effective_df;
    let m = model(3, 2);
    let penalty = bms_penalty(&m).unwrap();
    let p = m.layout().p_total();
    let mut rng = Rng::new(7);
    for draw in 0..200 {
        let rank = 4 + draw as usize % 5;
        let x: Vec<f64> = rng.normals(rank * p);
        let h: Vec<f64> = (0..p * p)
            .map(|jk| (0..rank).map(|i| x[i * p + jk / p] * x[i * p + jk % p]).sum())
            .collect();
        let lambda = [10f64.powi(draw % 17), 10f64.powi((draw * 7) % 17)];
        let s = penalty.dense(&lambda).unwrap();
        let edf = effective_df(p, &h, &s, &penalty).unwrap();
        for (b, e) in penalty.blocks().iter().zip(&edf.blocks) {
            assert!((0.0..=b.dim as f64).contains(e), "draw {draw}: edf {e} of {}", b.dim);
        }
        assert!(
            (0.0..=p as f64).contains(&edf.total),
            "draw {draw}: total {}",
            edf.total
        );
    }
}
