//! The GLM families (`matfree::gam`): every family and link's row
//! derivatives against Richardson-extrapolated central differences of the
//! row value (tails included); unpenalised fits through the Newton driver
//! against R's `glm()` on the data `tests/mgcv/glm.R` committed
//! (`tests/data/glm_r.json`); the scale's log-likelihood against mgcv's
//! `fix.family.ls` and its own differences; the input checks.

use std::sync::Arc;

use matfree::gam::{Distribution, Family, GlmData, GlmRows, Link};
use matfree::solvers::newton::newton;
use matfree::solvers::{Cholesky, CpuBackend, NewtonOptions, Objective, Penalty};
use matfree::{Designs, Layout, RowEvaluator, RowObjective};
use serde_json::Value;

/// Every family with every link it takes.
fn families() -> Vec<Family> {
    let all = [
        Distribution::Binomial,
        Distribution::Poisson,
        Distribution::Gaussian,
        Distribution::Gamma,
    ];
    all.iter()
        .flat_map(|d| d.links().iter().map(|l| Family::new(*d, *l).unwrap()))
        .collect()
}

/// The etas to test a link at: both tails for the probability links,
/// mu > 0 for the identity and inverse links outside the Gaussian.
fn etas(f: Family) -> Vec<f64> {
    let positive = vec![0.05, 0.3, 1.0, 4.0, 30.0];
    match f.link() {
        Link::Logit | Link::Probit | Link::Cloglog => vec![
            -40.0, -30.0, -20.0, -8.0, -4.5, -4.0, -3.9, -1.0, -0.2, 0.0, 0.4, 2.0, 4.0, 8.0, 20.0, 30.0, 40.0,
        ],
        Link::Log => vec![-30.0, -8.0, -1.0, 0.0, 0.5, 3.0, 10.0, 30.0],
        _ if f.distribution() == Distribution::Gaussian => [positive, vec![-3.0, -0.2]].concat(),
        _ => positive,
    }
}

/// (y, trials) pairs for a family.
fn responses(d: Distribution) -> Vec<(f64, f64)> {
    match d {
        Distribution::Binomial => vec![(0.0, 1.0), (1.0, 1.0), (0.0, 5.0), (2.0, 5.0), (5.0, 5.0), (2.5, 4.0)],
        Distribution::Poisson => vec![(0.0, 1.0), (1.0, 1.0), (7.0, 1.0), (2.5, 1.0)],
        Distribution::Gaussian => vec![(-1.3, 1.0), (0.0, 1.0), (2.7, 1.0)],
        Distribution::Gamma => vec![(0.2, 1.0), (1.0, 1.0), (5.5, 1.0)],
    }
}

/// f'(x) by Richardson's extrapolation of central differences at h and
/// h / 2 (error O(h^4)), with the largest |f| it touched.
fn derivative(f: impl Fn(f64) -> f64, x: f64, h: f64) -> (f64, f64) {
    let central = |h: f64| (f(x + h) - f(x - h)) / (2.0 * h);
    let scale = [x - h, x + h].iter().map(|t| f(*t).abs()).fold(0.0, f64::max);
    ((4.0 * central(h / 2.0) - central(h)) / 3.0, scale)
}

/// The worst relative error of each derivative (gradient, Hessian, third)
/// over every family, link, response and eta, beyond the rounding of the
/// differences (100 eps |f| / h).
#[test]
fn row_derivatives_match_differences_of_the_value_in_both_tails() {
    let mut worst = [(0.0f64, String::new()), (0.0, String::new()), (0.0, String::new())];
    for family in families() {
        for (y, m) in responses(family.distribution()) {
            for w in [1.0, 0.37] {
                for eta in etas(family) {
                    let jet = family.neglog_jet(y, m, w, eta);
                    let what = format!("{family:?} y {y} m {m} w {w} eta {eta}");
                    assert!(jet.iter().all(|v| v.is_finite()), "{what}: {jet:?}");
                    assert_eq!(jet[0].to_bits(), family.neglog(y, m, w, eta).to_bits(), "{what}: value");
                    // The cloglog row varies on the scale 1 / e^eta above 0.
                    let speed = if family.link() == Link::Cloglog {
                        eta.exp().max(1.0)
                    } else {
                        1.0
                    };
                    let h = 1e-3 * eta.abs().clamp(0.05, 1.0) / speed;
                    for k in 0..3 {
                        let (fd, scale) = derivative(|e| family.neglog_jet(y, m, w, e)[k], eta, h);
                        let err = (fd - jet[k + 1]).abs() - 100.0 * f64::EPSILON * scale / h;
                        // Relative to the derivative or, where it vanishes
                        // (y = mu), its neighbours' size times h.
                        let near = jet[k].abs() + jet.get(k + 2).map_or(0.0, |v| v.abs());
                        let rel = err.max(0.0) / (jet[k + 1].abs() + h * near).max(1e-300);
                        if rel > worst[k].0 && err > 1e-300 {
                            worst[k] = (rel, format!("{what}: exact {:e}, differences {fd:e}", jet[k + 1]));
                        }
                    }
                }
            }
        }
    }
    for (k, (rel, at)) in worst.iter().enumerate() {
        eprintln!("derivative {}: worst relative error {rel:.2e} at {at}", k + 1);
        assert!(*rel <= 1e-8, "derivative {}: relative error {rel:e} at {at}", k + 1);
    }
}

/// Where the data make a tail irrelevant (all successes, no counts) the
/// row stays finite far beyond where its probabilities underflow.
#[test]
fn rows_stay_finite_where_a_probability_underflows() {
    for link in [Link::Logit, Link::Probit, Link::Cloglog] {
        let f = Family::new(Distribution::Binomial, link).unwrap();
        for (y, eta) in [(3.0, 800.0), (0.0, -800.0), (3.0, 38.0), (0.0, -38.0)] {
            let jet = f.neglog_jet(y, 3.0, 1.0, eta);
            assert!(jet.iter().all(|v| v.is_finite()), "{link:?} y {y} eta {eta}: {jet:?}");
            assert!(jet[0] >= 0.0 && jet[0] < 1e-10, "{link:?} y {y} eta {eta}: {jet:?}");
        }
    }
    let poisson = Family::canonical(Distribution::Poisson);
    assert_eq!(poisson.neglog_jet(0.0, 1.0, 1.0, -800.0)[0], 0.0);
    // Outside the domain: non-finite, which the row objective rejects.
    let gamma = Family::new(Distribution::Gamma, Link::Identity).unwrap();
    assert!(gamma.neglog_jet(1.0, 1.0, 1.0, -0.5).iter().any(|v| !v.is_finite()));
}

/// Canonical links in closed form: logit's Hessian m mu (1 - mu), log-
/// Poisson's mu, Gamma-inverse's mu^2, Gaussian-identity's w.
#[test]
fn canonical_rows_have_their_closed_forms() {
    let eta: f64 = 0.7;
    let mu = 1.0 / (1.0 + (-eta).exp());
    let logit = Family::canonical(Distribution::Binomial).neglog_jet(2.0, 5.0, 1.5, eta);
    assert!((logit[1] - 1.5 * (5.0 * mu - 2.0)).abs() < 1e-14);
    assert!((logit[2] - 1.5 * 5.0 * mu * (1.0 - mu)).abs() < 1e-14);
    let poisson = Family::canonical(Distribution::Poisson).neglog_jet(3.0, 1.0, 2.0, eta);
    assert!((poisson[2] - 2.0 * eta.exp()).abs() < 1e-14 && (poisson[3] - 2.0 * eta.exp()).abs() < 1e-14);
    let gamma = Family::canonical(Distribution::Gamma).neglog_jet(3.0, 1.0, 2.0, eta);
    assert!((gamma[1] - 2.0 * (3.0 - 1.0 / eta)).abs() < 1e-13 && (gamma[2] - 2.0 / (eta * eta)).abs() < 1e-13);
    let gaussian = Family::canonical(Distribution::Gaussian).neglog_jet(3.0, 1.0, 2.0, eta);
    let e = 3.0 - eta;
    assert_eq!(gaussian, [2.0 * e * e / 2.0, -2.0 * e, 2.0, 0.0]);
}

/// One committed data set's columns.
struct Data {
    x1: Vec<f64>,
    x2: Vec<f64>,
    y: Vec<f64>,
    trials: Vec<f64>,
    w: Vec<f64>,
    offset: Vec<f64>,
}

fn read(file: &str) -> Data {
    let mut reader = csv::Reader::from_path(format!("tests/data/{file}")).unwrap();
    let rows: Vec<Vec<f64>> = reader
        .records()
        .map(|r| r.unwrap().iter().map(|v| v.parse().unwrap()).collect())
        .collect();
    let col = |j: usize| rows.iter().map(|r| r[j]).collect();
    Data {
        x1: col(0),
        x2: col(1),
        y: col(2),
        trials: col(3),
        w: col(4),
        offset: col(5),
    }
}

fn reference() -> Value {
    serde_json::from_str(&std::fs::read_to_string("tests/data/glm_r.json").unwrap()).unwrap()
}

fn numbers(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

fn family_of(case: &Value) -> Family {
    let distribution = match case["family"].as_str().unwrap() {
        "binomial" => Distribution::Binomial,
        "poisson" => Distribution::Poisson,
        "gaussian" => Distribution::Gaussian,
        "gamma" => Distribution::Gamma,
        other => panic!("family {other}"),
    };
    let link = *distribution
        .links()
        .iter()
        .find(|l| l.name() == case["link"].as_str().unwrap())
        .unwrap();
    Family::new(distribution, link).unwrap()
}

/// A case's rows and design [1, x1, x2].
fn problem(case: &Value) -> (GlmRows, Vec<f64>) {
    let d = read(case["csv"].as_str().unwrap());
    let family = family_of(case);
    let binomial = family.distribution() == Distribution::Binomial;
    let data = GlmData {
        y: d.y,
        weights: Some(d.w),
        offset: Some(d.offset),
        trials: binomial.then_some(d.trials),
    };
    let x = d.x1.iter().zip(&d.x2).flat_map(|(a, b)| [1.0, *a, *b]).collect();
    (GlmRows::new(family, data).unwrap(), x)
}

/// The weighted least-squares fit of the rows' starting theta on x (p = 3).
fn start(rows: &GlmRows, x: &[f64]) -> Vec<f64> {
    let (t, w) = (rows.start_theta(), rows.weights());
    let (mut a, mut b) = (vec![0.0; 9], vec![0.0; 3]);
    for (i, xi) in x.chunks_exact(3).enumerate() {
        for j in 0..3 {
            b[j] += w[i] * xi[j] * t[i];
            (0..3).for_each(|k| a[j * 3 + k] += w[i] * xi[j] * xi[k]);
        }
    }
    Cholesky::factor(3, &a).unwrap().solve(&b, 1).unwrap()
}

fn theta(x: &[f64], beta: &[f64]) -> Vec<f64> {
    x.chunks_exact(3)
        .map(|r| r.iter().zip(beta).map(|(a, b)| a * b).sum())
        .collect()
}

fn close(what: &str, got: f64, want: f64, tol: f64) {
    let rel = (got - want).abs() / want.abs();
    assert!(
        rel <= tol,
        "{what}: matfree {got:.15e}, R {want:.15e}, relative {rel:.2e}"
    );
}

/// The unpenalised Newton fit of a case from the least-squares start.
fn fit(rows: GlmRows, x: Vec<f64>) -> (Vec<f64>, RowObjective<GlmRows>) {
    let beta0 = start(&rows, &x);
    let objective = objective_of(rows, x);
    let opts = NewtonOptions {
        decrement_tol: 1e-24,
        ..NewtonOptions::default()
    };
    let penalty = Penalty::new(3, vec![]).unwrap();
    let fit = newton(&CpuBackend::new(), &objective, &penalty, &[], &beta0, &opts).unwrap();
    assert!(fit.report.converged, "{:?}", fit.report.termination);
    let beta = fit.beta.clone();
    drop(fit);
    (beta, objective)
}

/// Every family and link: the coefficients equal R's `glm()`'s to 1e-8
/// and the Newton-polished optimum's to 1e-10; deviance, Pearson
/// statistic and dispersion agree; mgcv's ls at R's dispersion and the
/// log-likelihood agree with mgcv and (binomial, Poisson, Gaussian) R's
/// `logLik`.
#[test]
fn unpenalised_fits_match_r_glm_for_every_family_and_link() {
    let reference = reference();
    let cases: Vec<(&String, &Value)> = reference
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, v)| v.is_object())
        .collect();
    assert_eq!(cases.len(), 11);
    for (name, case) in cases {
        let (rows, x) = problem(case);
        assert!(rows.notes().is_empty(), "{name}: {:?}", rows.notes());
        let (beta, objective) = fit(rows, x.clone());
        let rows = objective.evaluator();
        for (j, (b, (r, g))) in beta
            .iter()
            .zip(
                numbers(&case["coefficients"])
                    .iter()
                    .zip(numbers(&case["glm_coefficients"])),
            )
            .enumerate()
        {
            close(&format!("{name} beta[{j}] (optimum)"), *b, *r, 1e-10);
            close(&format!("{name} beta[{j}] (glm)"), *b, g, 1e-8);
        }
        let t = theta(&x, &beta);
        let num = |key: &str| case[key].as_f64().unwrap();
        close(
            &format!("{name} deviance"),
            rows.deviance(&t).unwrap(),
            num("deviance"),
            1e-12,
        );
        close(
            &format!("{name} pearson"),
            rows.pearson(&t).unwrap(),
            num("pearson"),
            1e-10,
        );
        let residuals = rows.deviance_residuals(&t).unwrap();
        let squares = residuals.iter().map(|r| r * r).sum();
        close(&format!("{name} deviance residuals"), squares, num("deviance"), 1e-12);
        let mu = rows.mu(&t);
        for (i, r) in residuals.iter().enumerate().filter(|(_, r)| **r != 0.0) {
            let above = rows.y()[i] >= rows.trials()[i] * mu[i];
            assert_eq!(*r >= 0.0, above, "{name}: residual {i} has the sign of y - m mu");
        }
        let df = case["df_residual"].as_u64().unwrap() as usize;
        close(
            &format!("{name} dispersion"),
            rows.dispersion(&t, df).unwrap(),
            num("dispersion"),
            1e-10,
        );
        let phi = num("dispersion");
        let ls = rows.saturated_loglik(phi);
        for (k, want) in numbers(&case["ls"]).iter().enumerate().filter(|(_, v)| **v != 0.0) {
            close(&format!("{name} ls[{k}]"), ls[k], *want, 1e-12);
        }
        close(
            &format!("{name} loglik"),
            rows.loglik(&t, phi).unwrap(),
            num("loglik_mgcv"),
            1e-12,
        );
        if let Some(r) = case["loglik_r"].as_f64() {
            // R's Gaussian logLik is at its own dispersion, deviance / n.
            let phi = if rows.family().has_scale() {
                rows.deviance(&t).unwrap() / rows.n() as f64
            } else {
                1.0
            };
            close(&format!("{name} R logLik"), rows.loglik(&t, phi).unwrap(), r, 1e-12);
        }
    }
}

/// The exact third derivative through the row objective equals
/// differences of its Hessians (what REML's gradient uses), on a
/// non-canonical case.
#[test]
fn the_objectives_exact_hessian_derivative_matches_differences() {
    let reference = reference();
    let dir = [0.3, -0.5, 0.8];
    for key in ["binomial_probit", "gamma_identity", "gaussian_log"] {
        let (rows, x) = problem(&reference[key]);
        let beta = start(&rows, &x);
        let n = rows.n();
        let obj = RowObjective::new(
            Layout::glm(3).unwrap(),
            Arc::new(Designs::single(n, 3, x).unwrap()),
            rows,
        )
        .unwrap();
        assert!(Objective::<CpuBackend>::exact_hessian_derivative(&obj));
        let hessian = |t: f64| {
            let b: Vec<f64> = beta.iter().zip(&dir).map(|(b, d)| b + t * d).collect();
            obj.evaluate(&b).unwrap().unwrap().hessian.to_dense().unwrap()
        };
        let exact = obj.hessian_derivative(&beta, &hessian(0.0), &dir, 0.0).unwrap();
        let t = 1e-4;
        let (up, down) = (hessian(t), hessian(-t));
        for (j, e) in exact.iter().enumerate() {
            let fd = (up[j] - down[j]) / (2.0 * t);
            assert!(
                (e - fd).abs() <= 1e-7 * e.abs().max(1.0),
                "{key}: exact {e:e}, differences {fd:e}"
            );
        }
    }
}

/// The scale's negative log-likelihood: its phi derivatives against
/// differences, for Gaussian and Gamma.
#[test]
fn the_scale_derivatives_match_differences() {
    let reference = reference();
    for key in ["gaussian_identity", "gamma_log", "gamma_inverse"] {
        let (rows, x) = problem(&reference[key]);
        let t = theta(&x, &numbers(&reference[key]["coefficients"]));
        let phi = 0.4;
        let f = rows.neglog_scale(&t, phi).unwrap();
        for k in 0..2 {
            let (fd, _) = derivative(|p| rows.neglog_scale(&t, p).unwrap()[k], phi, 1e-3);
            assert!(
                (fd - f[k + 1]).abs() <= 1e-9 * f[k + 1].abs(),
                "{key} d{}: {fd:e} vs {:e}",
                k + 1,
                f[k + 1]
            );
        }
    }
}

fn data(y: Vec<f64>) -> GlmData {
    GlmData {
        y,
        ..GlmData::default()
    }
}

fn message(family: Family, data: GlmData) -> String {
    GlmRows::new(family, data).unwrap_err().to_string()
}

/// Bad inputs are errors naming the field, row, value and rule; a
/// non-integer count is a note.
#[test]
fn inputs_are_checked_with_field_row_and_rule() {
    let binomial = Family::canonical(Distribution::Binomial);
    let poisson = Family::canonical(Distribution::Poisson);
    let gamma = Family::canonical(Distribution::Gamma);
    let with_trials = GlmData {
        trials: Some(vec![2.0, 2.0, 2.0]),
        ..data(vec![0.0, 3.0, 1.0])
    };
    assert_eq!(
        message(binomial, with_trials),
        "invalid input: y[1] = 3: must be in [0, trials[1]] = [0, 2]"
    );
    assert!(message(gamma, data(vec![1.0, 0.0])).contains("y[1] = 0: must be > 0 for the Gamma family"));
    assert!(message(poisson, data(vec![1.0, -1.0])).contains("y[1] = -1: must be >= 0"));
    assert!(message(poisson, data(vec![f64::NAN])).contains("y[0] = NaN: must be finite"));
    let weights = GlmData {
        weights: Some(vec![1.0, -0.5]),
        ..data(vec![1.0, 2.0])
    };
    assert!(message(poisson, weights).contains("weights[1] = -0.5: must be finite and >= 0"));
    let offset = GlmData {
        offset: Some(vec![f64::INFINITY, 0.0]),
        ..data(vec![1.0, 2.0])
    };
    assert!(message(poisson, offset).contains("offset[0] = inf: must be finite"));
    let short = GlmData {
        weights: Some(vec![1.0]),
        ..data(vec![1.0, 2.0])
    };
    assert!(message(poisson, short).contains("weights.len() = 1: must equal y.len() = 2"));
    let trials = GlmData {
        trials: Some(vec![1.0]),
        ..data(vec![1.0])
    };
    assert!(message(poisson, trials).contains("binomial family only"));
    let err = Family::new(Distribution::Poisson, Link::Logit).unwrap_err().to_string();
    assert!(
        err.contains("link = logit: the poisson family takes the links log, identity"),
        "{err}"
    );
    let noted = GlmRows::new(poisson, data(vec![1.0, 2.5, 3.5])).unwrap();
    assert_eq!(noted.notes().len(), 1);
    assert!(
        noted.notes()[0].contains("2 non-integer count(s), the first y[1] = 2.5"),
        "{:?}",
        noted.notes()
    );
    // A row of weight 0 counts for nothing, even outside the domain.
    let zero = GlmRows::new(
        gamma,
        GlmData {
            weights: Some(vec![0.0]),
            ..data(vec![1.0])
        },
    )
    .unwrap();
    assert_eq!(zero.row_value(0, &[-1.0]), 0.0);
}

/// On one GPU and on a group of one device (rows on the host, their
/// Hessians uploaded; the group's rows sharded): the CPU fit's coefficients
/// to 1e-10 for a canonical and two non-canonical cases.
#[cfg(feature = "cuda")]
#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn gpu_glm_fits_match_the_cpu() {
    use matfree::cuda::{
        gpu_for_test, CudaBackend, DeviceRowObjective, GpuGroup, MultiGpuBackend, ShardedRowObjective,
    };
    let Some(gpu) = gpu_for_test("gpu_glm_fits_match_the_cpu") else {
        return;
    };
    let reference = reference();
    let opts = NewtonOptions {
        decrement_tol: 1e-24,
        ..NewtonOptions::default()
    };
    let penalty = Penalty::new(3, vec![]).unwrap();
    let close = |key: &str, got: &[f64], cpu: &[f64]| {
        for (g, c) in got.iter().zip(cpu) {
            assert!((g - c).abs() <= 1e-10 * c.abs(), "{key}: GPU {g:e} vs CPU {c:e}");
        }
    };
    for key in ["poisson_log", "binomial_probit", "gamma_identity"] {
        let (rows, x) = problem(&reference[key]);
        let beta0 = start(&rows, &x);
        let (cpu, objective) = fit(rows, x);
        let device = DeviceRowObjective::from_host(gpu.clone(), objective).unwrap();
        let backend = CudaBackend::new(gpu.clone()).unwrap();
        let fit = newton(&backend, &device, &penalty, &[], &beta0, &opts).unwrap();
        assert!(fit.report.converged, "{key}: {:?}", fit.report.termination);
        close(key, &fit.beta, &cpu);
        let (rows, x) = problem(&reference[key]);
        let objective = objective_of(rows, x);
        let group = GpuGroup::open(1).unwrap();
        let sharded = ShardedRowObjective::from_host(group.clone(), objective).unwrap();
        let be = MultiGpuBackend::new(group).unwrap();
        let fit = newton(&be, &sharded, &penalty, &[], &beta0, &opts).unwrap();
        assert!(fit.report.converged, "{key} on a group: {:?}", fit.report.termination);
        close(&format!("{key} on a group"), &fit.beta, &cpu);
    }
}

/// The objective of a problem.
fn objective_of(rows: GlmRows, x: Vec<f64>) -> RowObjective<GlmRows> {
    let n = rows.n();
    RowObjective::new(
        Layout::glm(3).unwrap(),
        Arc::new(Designs::single(n, 3, x).unwrap()),
        rows,
    )
    .unwrap()
}

/// A shard of the rows (`GlmRows::rows`, what each device of a sharded
/// GAM objective holds) is those rows alone: the shards' deviances,
/// Pearson statistics and starts add up to the whole's, and a range
/// outside the rows is an error naming it.
#[test]
fn shards_of_the_rows_add_up_to_the_whole() {
    let reference = reference();
    for (name, case) in reference.as_object().unwrap().iter().filter(|(_, v)| v.is_object()) {
        let (rows, _) = problem(case);
        let n = rows.n();
        // Inside every family's domain: theta at R's starting means.
        let t = rows.start_theta();
        let cuts = [0, 1, n / 3, n - 1, n];
        let (mut dev, mut pearson, mut start) = (0.0, 0.0, 0.0);
        for w in cuts.windows(2) {
            let part = rows.rows(w[0]..w[1]).unwrap();
            assert_eq!(part.n(), w[1] - w[0]);
            assert_eq!(part.y(), &rows.y()[w[0]..w[1]]);
            dev += part.deviance(&t[w[0]..w[1]]).unwrap();
            pearson += part.pearson(&t[w[0]..w[1]]).unwrap();
            start += part.mean_start_theta() * part.n() as f64;
        }
        let close = |what: &str, a: f64, b: f64| {
            assert!(
                (a - b).abs() <= 1e-12 * b.abs().max(1.0),
                "{name} {what}: shards {a}, whole {b}"
            )
        };
        close("deviance", dev, rows.deviance(&t).unwrap());
        close("pearson", pearson, rows.pearson(&t).unwrap());
        close("start", start / n as f64, rows.mean_start_theta());
        let whole = rows.start_theta().iter().sum::<f64>() / n as f64;
        close("start against start_theta", rows.mean_start_theta(), whole);
        #[allow(clippy::reversed_empty_ranges)]
        for bad in [0..n + 1, 3..2] {
            let e = rows.rows(bad.clone()).unwrap_err().to_string();
            assert!(e.contains("rows") && e.contains(&format!("0..{n}")), "{e}");
        }
    }
}
