//! GAM fits against mgcv: `tests/mgcv/gam_fit.R` simulated (fixed seeds)
//! or loaded each case's data into `tests/data/gam_fit_<case>.csv`, fitted
//! it with `gam(..., method = "REML", control = gam.control(epsilon =
//! 1e-12))` and wrote the results to `tests/data/gam_fit_mgcv.json`. The
//! cases: gamSim(1) Gaussian with a factor, cr, ps and te(x2, x3) (scale by
//! REML); gamSim(1, dist = "binary"); gamSim(1, dist = "poisson"); a Gamma
//! (log link) with s(grp, bs = "re") simulated by hand (scale by REML);
//! a binomial cbind(s, f) with a factor; MASS::mcycle (Gaussian, k = 20).
//! `tests/mgcv/gam_offsets.R` made the cases with prior weights and offsets
//! the same way (`tests/data/gam_offsets_*`): Poisson counts over a
//! log-exposure offset; a binomial with weights 1..4; a Gaussian with
//! weights and two offsets; a Gamma (log link) with weights and an offset.
//!
//! matfree runs with [`GamOptions::default`]: each REML solve to a
//! projected gradient of 1e-9 edf, inner Newton to a decrement of 1e-20,
//! the profile over the scale to |dR/dlog phi| <= 1e-9. Coefficients, SEs
//! (sqrt diag Vp), sp, edf (per coefficient, smooth and total), scale,
//! REML score and deviances must agree to 1e-5 relative (coefficients and
//! edf per coefficient relative to the largest of their kind: a
//! coefficient near 0 has no relative digits to compare).

use matfree::gam::{Column, Distribution, Family, Gam, GamFit, GamModel, GamOptions, PredictionType};
use matfree::solvers::CpuBackend;
use serde_json::Value;

const TOL: f64 = 1e-5;

/// Relative to the package root, where cargo runs tests (and where a
/// staged binary runs on the device machine, whose checkout lies elsewhere).
fn path(file: &str) -> String {
    format!("tests/data/{file}")
}

/// The cases of `<prefix>_mgcv.json`, each with its data file as `csv`.
fn reference(prefix: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(path(&format!("{prefix}_mgcv.json"))).unwrap();
    let reference: Value = serde_json::from_str(&text).unwrap();
    let mut cases = reference["cases"].as_array().unwrap().clone();
    for c in &mut cases {
        let csv = format!("{prefix}_{}.csv", c["name"].as_str().unwrap());
        c["csv"] = Value::String(csv);
    }
    cases
}

fn numbers(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

/// A CSV's columns: numeric where every entry parses, else a factor.
enum Data {
    Numeric(Vec<f64>),
    Factor(Vec<String>),
}

fn read_csv(file: &str) -> Vec<(String, Data)> {
    let mut reader = csv::Reader::from_path(path(file)).unwrap();
    let names: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
    let mut cells: Vec<Vec<String>> = vec![Vec::new(); names.len()];
    for record in reader.records() {
        for (c, v) in cells.iter_mut().zip(record.unwrap().iter()) {
            c.push(v.to_string());
        }
    }
    names
        .into_iter()
        .zip(cells)
        .map(|(name, c)| match c.iter().map(|v| v.parse::<f64>()).collect() {
            Ok(x) => (name, Data::Numeric(x)),
            Err(_) => (name, Data::Factor(c)),
        })
        .collect()
}

fn columns(data: &[(String, Data)]) -> Vec<(&str, Column<'_>)> {
    data.iter()
        .map(|(n, d)| {
            let c = match d {
                Data::Numeric(x) => Column::Numeric(x),
                Data::Factor(f) => Column::Factor(f),
            };
            (n.as_str(), c)
        })
        .collect()
}

fn family(case: &Value) -> Family {
    let (d, link) = (case["family"].as_str().unwrap(), case["link"].as_str().unwrap());
    Family::new(d.parse().unwrap(), link.parse().unwrap()).unwrap()
}

/// The worst relative error of got against want, each entry relative to
/// itself or, `by_largest`, to the largest |want|.
fn check(case: &str, what: &str, got: &[f64], want: &[f64], by_largest: bool) -> f64 {
    assert_eq!(got.len(), want.len(), "{case} {what}: lengths");
    let largest = want.iter().fold(0.0f64, |m, w| m.max(w.abs()));
    let mut worst = 0.0f64;
    for (j, (g, w)) in got.iter().zip(want).enumerate() {
        let rel = (g - w).abs() / if by_largest { largest } else { w.abs() };
        assert!(
            rel <= TOL,
            "{case} {what}[{j}]: matfree {g:.12e}, mgcv {w:.12e}, relative {rel:.2e}"
        );
        worst = worst.max(rel);
    }
    worst
}

/// The case's data.
fn data(case: &Value) -> Vec<(String, Data)> {
    read_csv(case["csv"].as_str().unwrap())
}

/// The case's model: its formula, family and prior weights' column.
fn gam(case: &Value) -> Gam {
    let gam = Gam::new(case["formula"].as_str().unwrap(), family(case)).unwrap();
    match case["weights"].as_str() {
        Some(w) => gam.with_weights(w),
        None => gam,
    }
}

/// The case's model fitted by `fit` (on the CPU: `Gam::fit`).
fn fit_case(case: &Value, fit: &dyn Fn(&GamModel) -> GamFit) -> GamFit {
    fit(&gam(case).setup(&columns(&data(case))).unwrap())
}

fn on_cpu(model: &GamModel) -> GamFit {
    let objective = model.objective().unwrap();
    model
        .fit_on(&CpuBackend::new(), &objective, &GamOptions::default())
        .unwrap()
}

fn matches_mgcv(case: &Value) {
    matches_mgcv_on(case, &on_cpu);
}

fn matches_mgcv_on(case: &Value, on: &dyn Fn(&GamModel) -> GamFit) {
    let name = case["name"].as_str().unwrap();
    let fit = fit_case(case, on);
    assert!(fit.converged, "{name}: {:?}", fit.report.termination);
    let names: Vec<&str> = case["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(fit.names, names, "{name}: coefficient names");
    let scalar = |k: &str| numbers(&case[k])[0];
    let smooth_edf = fit.smooth_edf();
    let labels: Vec<&str> = smooth_edf.iter().map(|(l, _)| l.as_str()).collect();
    let want_labels: Vec<&str> = case["smooth_labels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(labels, want_labels, "{name}: smooths");
    let edf_smooth: Vec<f64> = smooth_edf.iter().map(|(_, e)| *e).collect();
    let worst = [
        check(name, "sp", &fit.sp, &numbers(&case["sp"]), false),
        check(name, "reml_scale", &[fit.reml_scale], &[scalar("reml_scale")], false),
        check(name, "reml_score", &[fit.reml_score], &[scalar("reml_score")], false),
        check(
            name,
            "coefficients",
            &fit.coefficients,
            &numbers(&case["coefficients"]),
            true,
        ),
        check(name, "se", &fit.standard_errors(), &numbers(&case["se"]), false),
        check(name, "edf", &fit.edf, &numbers(&case["edf"]), true),
        check(name, "edf_smooth", &edf_smooth, &numbers(&case["edf_smooth"]), false),
        check(name, "edf_total", &[fit.edf_total], &[scalar("edf_total")], false),
        check(name, "deviance", &[fit.deviance], &[scalar("deviance")], false),
        check(
            name,
            "null_deviance",
            &[fit.null_deviance],
            &[scalar("null_deviance")],
            false,
        ),
        check(
            name,
            "deviance_explained",
            &[fit.deviance_explained()],
            &[scalar("deviance_explained")],
            false,
        ),
        check(name, "scale", &[fit.scale], &[scalar("scale")], false),
    ]
    .into_iter()
    .fold(0.0f64, f64::max);
    let p = fit.coefficients.len();
    let se_f: Vec<f64> = (0..p).map(|j| fit.ve[j * p + j].sqrt()).collect();
    check(name, "se_frequentist", &se_f, &numbers(&case["se_frequentist"]), false);
    assert_eq!(fit.n as f64, scalar("n"));
    eprintln!(
        "{name}: worst relative error {worst:.2e}, scale steps {}, REML evaluations {}",
        fit.scale_steps, fit.report.evaluations
    );
}

fn case(name: &str) -> Value {
    case_in("gam_fit", name)
}

fn case_in(prefix: &str, name: &str) -> Value {
    reference(prefix).into_iter().find(|c| c["name"] == name).unwrap()
}

#[test]
fn gaussian_gamsim_with_a_factor_cr_ps_and_te_matches_mgcv() {
    matches_mgcv(&case("gaussian"));
}

#[test]
fn binomial_gamsim_matches_mgcv() {
    matches_mgcv(&case("binomial"));
}

#[test]
fn poisson_gamsim_matches_mgcv() {
    matches_mgcv(&case("poisson"));
}

#[test]
fn gamma_with_a_random_effect_matches_mgcv() {
    matches_mgcv(&case("gamma"));
}

#[test]
fn binomial_with_trials_matches_mgcv() {
    matches_mgcv(&case("trials"));
}

#[test]
fn mcycle_matches_mgcv() {
    matches_mgcv(&case("mcycle"));
}

#[test]
fn poisson_with_a_log_exposure_offset_matches_mgcv() {
    matches_mgcv(&case_in("gam_offsets", "poisson"));
}

#[test]
fn binomial_with_prior_weights_matches_mgcv() {
    matches_mgcv(&case_in("gam_offsets", "binomial"));
}

/// The scale by REML with weights (variance phi / w; ls holds sum log w / 2).
#[test]
fn gaussian_with_prior_weights_and_two_offsets_matches_mgcv() {
    matches_mgcv(&case_in("gam_offsets", "gaussian"));
}

#[test]
fn gamma_with_prior_weights_and_an_offset_matches_mgcv() {
    matches_mgcv(&case_in("gam_offsets", "gamma"));
}

/// `Gam::fit` is the CPU path above, the same numbers.
#[test]
fn gam_fit_is_setup_then_fit_on_the_cpu() {
    let case = case("trials");
    let fit = gam(&case).fit(&columns(&data(&case)), &GamOptions::default()).unwrap();
    let again = fit_case(&case, &on_cpu);
    assert_eq!(fit.coefficients, again.coefficients);
    assert_eq!(fit.sp, again.sp);
}

/// On a GPU, with the rows on the device (`GamModel::device_objective`:
/// data uploaded once, each evaluation a pass of the GLM kernels; the scale
/// set on the model reaches the uploaded objective): mgcv's values for
/// every case, as the CPU fit gives them (an estimated scale for Gaussian
/// and Gamma, weights, offsets, trials, a random effect and a te() term).
#[cfg(feature = "cuda")]
#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn gpu_gam_fits_match_mgcv() {
    use matfree::cuda::{gpu_for_test, CudaBackend};
    let Some(gpu) = gpu_for_test("gpu_gam_fits_match_mgcv") else {
        return;
    };
    let on_gpu = |model: &GamModel| {
        let device = model.device_objective(gpu.clone()).unwrap();
        let backend = CudaBackend::new(gpu.clone()).unwrap();
        model.fit_on(&backend, &device, &GamOptions::default()).unwrap()
    };
    for name in ["gaussian", "binomial", "poisson", "gamma", "trials", "mcycle"] {
        matches_mgcv_on(&case(name), &on_gpu);
    }
    for name in ["poisson", "binomial", "gaussian", "gamma"] {
        matches_mgcv_on(&case_in("gam_offsets", name), &on_gpu);
    }
}

/// The rows split over a group of GPUs (`GamModel::sharded_objective`:
/// one contiguous shard a device, each uploaded once; products and sums
/// joined over NCCL): mgcv's values for every case, on a group of one
/// device and, where two or more are visible, of all of them.
#[cfg(feature = "cuda")]
#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn gpu_sharded_gam_fits_match_mgcv() {
    use matfree::cuda::{setup_for_test, Gpu, GpuGroup, MultiGpuBackend};
    let Some(groups) = setup_for_test("gpu_sharded_gam_fits_match_mgcv", || {
        let count = Gpu::count()?;
        let mut groups = vec![GpuGroup::open(1)?];
        if count >= 2 {
            groups.push(GpuGroup::open(count)?);
        }
        Ok(groups)
    }) else {
        return;
    };
    for group in groups {
        eprintln!("a group of {} GPU(s)", group.len());
        let on_group = |model: &GamModel| {
            let sharded = model.sharded_objective(group.clone()).unwrap();
            let backend = MultiGpuBackend::new(group.clone()).unwrap();
            model.fit_on(&backend, &sharded, &GamOptions::default()).unwrap()
        };
        for name in ["gaussian", "binomial", "poisson", "gamma", "trials", "mcycle"] {
            matches_mgcv_on(&case(name), &on_group);
        }
        matches_mgcv_on(&case_in("gam_offsets", "gamma"), &on_group);
    }
}

/// The host rows on a GPU (`DeviceRowObjective::from_host`: rows on the
/// host, their Hessians uploaded), which other models with CPU rows use:
/// mgcv's values still.
#[cfg(feature = "cuda")]
#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn gpu_gam_fits_with_host_rows_match_mgcv() {
    use matfree::cuda::{gpu_for_test, CudaBackend, DeviceRowObjective};
    let Some(gpu) = gpu_for_test("gpu_gam_fits_with_host_rows_match_mgcv") else {
        return;
    };
    let on_gpu = |model: &GamModel| {
        let device = DeviceRowObjective::from_host(gpu.clone(), model.objective().unwrap()).unwrap();
        let backend = CudaBackend::new(gpu.clone()).unwrap();
        model.fit_on(&backend, &device, &GamOptions::default()).unwrap()
    };
    for name in ["gaussian", "poisson"] {
        matches_mgcv_on(&case(name), &on_gpu);
    }
}

fn message(formula: &str, family: Family, data: &[(&str, Column)]) -> String {
    Gam::new(formula, family)
        .and_then(|gam| gam.fit(data, &GamOptions::default()))
        .unwrap_err()
        .to_string()
}

#[test]
fn bad_input_names_the_column_the_value_and_the_rule() {
    let x: Vec<f64> = (0..50).map(|i| f64::from(i) / 50.0).collect();
    let y: Vec<f64> = x.iter().map(|v| (6.0 * v).sin()).collect();
    let f: Vec<String> = (0..50).map(|i| ["a", "b"][i % 2].to_string()).collect();
    let gauss = Family::canonical(Distribution::Gaussian);
    let data = [
        ("y", Column::Numeric(&y)),
        ("x", Column::Numeric(&x)),
        ("f", Column::Factor(&f)),
    ];
    let m = message("y ~ s(z, bs = \"cr\")", gauss, &data);
    assert!(
        m.contains("column z") && m.contains("missing") && m.contains("y, x, f"),
        "{m}"
    );
    let m = message("f ~ x", gauss, &data);
    assert!(m.contains("column f") && m.contains("numeric"), "{m}");
    let m = message("y ~ s(f, bs = \"cr\")", gauss, &data);
    assert!(m.contains("s(f)") && m.contains("numeric covariate"), "{m}");
    let m = message("y ~ s(x)", gauss, &data);
    assert!(m.contains("bs") && m.contains("\"tp\""), "{m}");
    let z: Vec<f64> = x.iter().map(|v| v * v).collect();
    let with_z = [
        ("y", Column::Numeric(&y)),
        ("x", Column::Numeric(&x)),
        ("z", Column::Numeric(&z)),
    ];
    let m = message("y ~ te(x, z, k = c(4, 4, 4))", gauss, &with_z);
    assert!(m.contains("te(x,z): k") && m.contains("one a covariate"), "{m}");
    let m = message("y ~ s(x, bs = \"ps\", m = c(2, 2, 1))", gauss, &data);
    assert!(m.contains("s(x): m has 3 values"), "{m}");
    let m = message("cbind(y, x) ~ x", gauss, &data);
    assert!(m.contains("binomial family only"), "{m}");
    let m = message("y ~ x", Family::canonical(Distribution::Poisson), &data);
    assert!(m.contains("y[") && m.contains(">= 0"), "{m}");
    let twice = [("y", Column::Numeric(&y)), ("y", Column::Numeric(&x))];
    let m = message("y ~ 1", gauss, &twice);
    assert!(m.contains("column y") && m.contains("distinct"), "{m}");
    let short = [("y", Column::Numeric(&y)), ("x", Column::Numeric(&x[..10]))];
    let m = message("y ~ x", gauss, &short);
    assert!(m.contains("x") && m.contains("10 rows") && m.contains("50 rows"), "{m}");
}

/// `a:b` is the product column, named as R names it, after the main effects.
#[test]
fn an_interaction_is_the_product_after_the_main_effects() {
    let x: Vec<f64> = (0..60).map(|i| f64::from(i) / 60.0).collect();
    let z: Vec<f64> = x.iter().map(|v| (5.0 * v).cos()).collect();
    let y: Vec<f64> = x
        .iter()
        .zip(&z)
        .map(|(a, b)| 1.0 + a - b + 2.0 * a * b + 0.01 * (37.0 * a).sin())
        .collect();
    let data = [
        ("y", Column::Numeric(&y)),
        ("x", Column::Numeric(&x)),
        ("z", Column::Numeric(&z)),
    ];
    let gam = Gam::new("y ~ x:z + x + z", Family::canonical(Distribution::Gaussian)).unwrap();
    let model = gam.setup(&data).unwrap();
    let names: Vec<String> = model.terms().iter().flat_map(|t| t.coefficient_names()).collect();
    assert_eq!(names, ["(Intercept)", "x", "z", "x:z"]);
    let row = model.designs().row(0, 7);
    assert_eq!(row, [1.0, x[7], z[7], x[7] * z[7]]);
}

/// `GamModel::summary` on each case's fit: mgcv's `summary.gam` tables
/// (parametric: estimate, SE, t or z, p; smooths: edf, Ref.df, F or
/// Chi.sq, p) and R-sq.(adj), each within 1e-5 relative (or 1e-12
/// absolute for p-values that small).
#[test]
fn summaries_match_mgcvs_summary_gam() {
    for case in reference("gam_fit").into_iter().chain(reference("gam_offsets")) {
        let name = case["name"].as_str().unwrap();
        let formula = case["formula"].as_str().unwrap();
        let model = gam(&case).setup(&columns(&data(&case))).unwrap();
        let fit = on_cpu(&model);
        let s = model.summary(&fit, formula).unwrap();
        let p_table: Vec<f64> = s
            .coefficients
            .iter()
            .filter(|r| !r.name.starts_with("s(") && !r.name.starts_with("te("))
            .flat_map(|r| [r.estimate, r.std_error, r.statistic, r.p_value])
            .collect();
        let s_table: Vec<f64> = s
            .smooths
            .iter()
            .flat_map(|r| [r.edf, r.ref_df, r.statistic, r.p_value])
            .collect();
        for (what, got, want) in [
            ("p.table", p_table, numbers(&case["p_table"])),
            ("s.table", s_table, numbers(&case["s_table"])),
            ("r.sq", vec![s.r_sq.unwrap()], numbers(&case["r_sq"])),
        ] {
            assert_eq!(got.len(), want.len(), "{name} {what}: {got:?} vs {want:?}");
            for (g, w) in got.iter().zip(&want) {
                let err = (g - w).abs();
                assert!(
                    err <= 1e-5 * w.abs() || err <= 1e-12,
                    "{name} {what}: {g:e} vs mgcv {w:e}"
                );
            }
        }
        assert!(
            s.to_string().contains("Approximate significance of smooth terms"),
            "{name}: {s}"
        );
    }
}

/// `GamFit::predict` at 7 rows of each case's data against mgcv's
/// `predict.gam` (link and response, with `se.fit`), to 1e-5 relative (TOL).
#[test]
fn predictions_match_mgcvs_predict_gam() {
    use matfree::gam::PredictionType;
    for case in reference("gam_fit").into_iter().chain(reference("gam_offsets")) {
        let name = case["name"].as_str().unwrap();
        let data = data(&case);
        let fit = fit_case(&case, &on_cpu);
        let rows: Vec<usize> = numbers(&case["predict_rows"]).iter().map(|&r| r as usize).collect();
        let new: Vec<(String, Data)> = data
            .iter()
            .map(|(n, d)| {
                let d = match d {
                    Data::Numeric(x) => Data::Numeric(rows.iter().map(|&i| x[i]).collect()),
                    Data::Factor(f) => Data::Factor(rows.iter().map(|&i| f[i].clone()).collect()),
                };
                (n.clone(), d)
            })
            .collect();
        for (kind, key) in [
            (PredictionType::Link, "predict_link"),
            (PredictionType::Response, "predict_response"),
        ] {
            let got = fit.predict(&columns(&new), kind).unwrap();
            check(name, key, &got.fit, &numbers(&case[key]), true);
            check(
                name,
                &format!("{key}_se"),
                &got.se,
                &numbers(&case[&format!("{key}_se")]),
                false,
            );
        }
    }
    let fit = fit_case(&case("mcycle"), &on_cpu);
    let e = fit.predict(&[], PredictionType::Link).unwrap_err().to_string();
    assert!(e.contains("times"), "{e}");
}

/// Prior weights and offsets are checked where they enter: a negative,
/// infinite or all-zero weight, a missing or factor weights column, a
/// non-finite offset, a missing or short offset column, each an error
/// naming the column, the row (where there is one) and the rule.
#[test]
fn bad_weights_and_offsets_name_the_column_the_row_and_the_rule() {
    let n = 40;
    let x: Vec<f64> = (0..n).map(|i| f64::from(i) / 40.0).collect();
    let y: Vec<f64> = x.iter().map(|v| (2.0 * v).exp().round()).collect();
    let with =
        |i: usize, v: f64, base: f64| -> Vec<f64> { (0..n as usize).map(|j| if j == i { v } else { base }).collect() };
    let (w_neg, w_inf, zero) = (with(7, -1.0, 1.0), with(2, f64::INFINITY, 1.0), vec![0.0; n as usize]);
    let (o_nan, short) = (with(3, f64::NAN, 0.0), vec![0.0; 5]);
    let f: Vec<String> = (0..n).map(|i| ["a", "b"][i as usize % 2].to_string()).collect();
    let data = [
        ("y", Column::Numeric(&y)),
        ("x", Column::Numeric(&x)),
        ("w_neg", Column::Numeric(&w_neg)),
        ("w_inf", Column::Numeric(&w_inf)),
        ("zero", Column::Numeric(&zero)),
        ("o_nan", Column::Numeric(&o_nan)),
        ("short", Column::Numeric(&short)),
        ("f", Column::Factor(&f)),
    ];
    let pois = Family::canonical(Distribution::Poisson);
    let fails = |formula: &str, weights: Option<&str>| {
        let gam = Gam::new(formula, pois).unwrap();
        let gam = weights.map_or(gam.clone(), |w| gam.with_weights(w));
        gam.fit(&data, &GamOptions::default()).unwrap_err().to_string()
    };
    let cases = [
        ("y ~ x", Some("w_neg"), ["column w_neg[7]", "-1", "finite and >= 0"]),
        ("y ~ x", Some("w_inf"), ["column w_inf[2]", "inf", "finite and >= 0"]),
        ("y ~ x", Some("zero"), ["column zero", "all 0", "must not all be 0"]),
        ("y ~ x", Some("nope"), ["column nope", "missing", "prior weights"]),
        (
            "y ~ x",
            Some("f"),
            ["column f", "factor", "prior weights must be numeric"],
        ),
        (
            "y ~ x + offset(o_nan)",
            None,
            ["column o_nan[3]", "NaN", "offsets must be finite"],
        ),
        (
            "y ~ x + offset(nope)",
            None,
            ["column nope", "missing", "formula reads it"],
        ),
        ("y ~ x + offset(short)", None, ["column short", "5 rows", "(40)"]),
        (
            "y ~ x + offset(f)",
            None,
            ["column f", "factor", "offset must be numeric"],
        ),
    ];
    for (formula, weights, want) in cases {
        let m = fails(formula, weights);
        assert!(want.iter().all(|w| m.contains(w)), "{formula} {weights:?}: {m}");
    }
}

/// A prediction adds the offsets of the new data (mgcv's `predict.gam`):
/// one more unit of log exposure is one more on the link scale, the same
/// standard error; new data without the offset's column are an error
/// naming it, as mgcv's are.
#[test]
fn predictions_add_the_offset_and_need_its_column() {
    use matfree::gam::PredictionType;
    let case = case_in("gam_offsets", "poisson");
    let fit = fit_case(&case, &on_cpu);
    assert_eq!(fit.offsets, ["log_t"]);
    let data = data(&case);
    let get = |name: &str| match &data.iter().find(|(n, _)| n == name).unwrap().1 {
        Data::Numeric(x) => x[..20].to_vec(),
        Data::Factor(_) => unreachable!(),
    };
    let (x0, x1, lt) = (get("x0"), get("x1"), get("log_t"));
    let lt1: Vec<f64> = lt.iter().map(|v| v + 1.0).collect();
    let at = |offset: &[f64]| {
        let new = [
            ("x0", Column::Numeric(&x0)),
            ("x1", Column::Numeric(&x1)),
            ("log_t", Column::Numeric(offset)),
        ];
        fit.predict(&new, PredictionType::Link).unwrap()
    };
    let (base, more) = (at(&lt), at(&lt1));
    for i in 0..20 {
        assert!((more.fit[i] - base.fit[i] - 1.0).abs() <= 1e-12, "row {i}");
        assert_eq!(more.se[i], base.se[i]);
    }
    let without = [("x0", Column::Numeric(&x0)), ("x1", Column::Numeric(&x1))];
    let e = fit.predict(&without, PredictionType::Link).unwrap_err().to_string();
    assert!(e.contains("column log_t") && e.contains("missing"), "{e}");
}

/// The four data sets of `tests/mgcv/gam_flat.R` (`validate_gam`'s, n =
/// 2000), each with a smooth whose sp runs off toward infinity where REML
/// is flat: mgcv's tight fit takes its sp to about 1e13 (edf 1 + 1e-9),
/// matfree's stops it at its upper bound `rho_ref + 15` (edf 1 + 5e-5).
/// Such a fit must converge (it once ended with `LineSearchFailed`, after
/// up to 1,422 evaluations), agree with mgcv on a smooth near its null
/// space (edf below 1.1, where V is flat in its sp and the sp says little)
/// in edf to 1e-4, on the other smooths' edf and sp to 1e-5 relative, on
/// the coefficients to 1e-4 of the largest, and on the REML
/// score to 1e-7 relative (the bound leaves V 1e-5 above mgcv's on V of
/// 1e3). The Gaussian case is a shallow minimum short of the bound, where
/// a jump to the bound fails (mgcv: "step failed" at the same point), and
/// the Gamma case's profile over the scale once wandered by 1e-10 in log
/// phi for 30 solves.
fn matches_mgcv_at_a_flat_smooth(name: &str) {
    let case = case_in("gam_flat", name);
    let fit = fit_case(&case, &on_cpu);
    assert!(fit.converged, "{name}: {:?}", fit.report.termination);
    let (sp, edf) = (numbers(&case["sp"]), numbers(&case["edf_smooth"]));
    let mut worst = [0.0f64; 4];
    for (k, (_, got)) in fit.smooth_edf().iter().enumerate() {
        if edf[k] < 1.1 {
            worst[0] = worst[0].max((got - edf[k]).abs());
            assert!(
                (got - edf[k]).abs() <= 1e-4,
                "{name} edf[{k}]: {got} vs mgcv {}",
                edf[k]
            );
        } else {
            worst[1] = worst[1].max(check(name, "edf_smooth", &[*got], &[edf[k]], false));
            worst[1] = worst[1].max(check(name, "sp", &[fit.sp[k]], &[sp[k]], false));
        }
    }
    let score = numbers(&case["reml_score"])[0];
    worst[2] = (fit.reml_score - score).abs() / score;
    assert!(worst[2] <= 1e-7, "{name}: REML {} vs mgcv {score}", fit.reml_score);
    let want = numbers(&case["coefficients"]);
    let largest = want.iter().fold(0.0f64, |m, w| m.max(w.abs()));
    worst[3] = fit
        .coefficients
        .iter()
        .zip(&want)
        .fold(0.0f64, |m, (g, w)| m.max((g - w).abs() / largest));
    assert!(worst[3] <= 1e-4, "{name}: coefficients {worst:?}");
    eprintln!(
        "{name}: flat edf {:.1e}, others {:.1e}, REML {:.1e}, coefficients {:.1e}; {} evaluations",
        worst[0], worst[1], worst[2], worst[3], fit.report.evaluations
    );
}

#[test]
fn binomial_with_a_smooth_at_working_infinity_matches_mgcv() {
    matches_mgcv_at_a_flat_smooth("binomial_5");
    matches_mgcv_at_a_flat_smooth("binomial_7");
}

#[test]
fn gaussian_with_a_shallow_minimum_short_of_the_bound_matches_mgcv() {
    matches_mgcv_at_a_flat_smooth("gaussian_4");
}

#[test]
fn gamma_with_a_smooth_at_working_infinity_matches_mgcv() {
    matches_mgcv_at_a_flat_smooth("gamma_29");
}

/// ndarray in and out: columns borrowed from `Array1`s give the fit of the
/// same values as slices, bit for bit; the fit's views are its vectors
/// (Vp's row j is vp[j p..]); a prediction's views are its vectors; a
/// strided view is refused with its name, its stride and the rule.
#[test]
fn ndarray_columns_and_views_give_the_same_fit() {
    use matfree::ndarray::{s, Array1};
    let case = case("mcycle");
    let data = data(&case);
    let arrays: Vec<(&str, Array1<f64>)> = data
        .iter()
        .map(|(n, d)| match d {
            Data::Numeric(x) => (n.as_str(), Array1::from(x.clone())),
            Data::Factor(_) => unreachable!("mcycle is numeric"),
        })
        .collect();
    let cols: Vec<(&str, Column)> = arrays
        .iter()
        .map(|(n, a)| (*n, Column::from_view(n, a.view()).unwrap()))
        .collect();
    let from_arrays = on_cpu(&gam(&case).setup(&cols).unwrap());
    let from_slices = fit_case(&case, &on_cpu);
    assert_eq!(from_arrays.coefficients, from_slices.coefficients);
    assert_eq!(from_arrays.vp, from_slices.vp);
    let p = from_arrays.coefficients.len();
    assert_eq!(from_arrays.coefficients_view().to_vec(), from_arrays.coefficients);
    let vp = from_arrays.vp_view().unwrap();
    assert_eq!(vp.dim(), (p, p));
    assert_eq!(vp.row(3).to_vec(), from_arrays.vp[3 * p..4 * p].to_vec());
    assert_eq!(from_arrays.ve_view().unwrap()[[1, 2]], from_arrays.ve[p + 2]);
    assert_eq!(from_arrays.edf_view().to_vec(), from_arrays.edf);
    assert_eq!(from_arrays.sp_view().to_vec(), from_arrays.sp);
    let pred = from_arrays.predict(&cols, PredictionType::Response).unwrap();
    assert_eq!(pred.fit_view().to_vec(), pred.fit);
    assert_eq!(pred.se_view().len(), arrays[0].1.len());
    let strided = arrays[0].1.slice(s![..;2]);
    let e = Column::from_view("times", strided).unwrap_err().to_string();
    assert!(
        e.contains("'times'") && e.contains("stride 2") && e.contains("contiguous"),
        "{e}"
    );
}
