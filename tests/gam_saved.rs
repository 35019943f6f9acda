//! Saved GAM fits (`matfree::gam::SavedGam`): a fit saved and loaded back
//! predicts to the bit what it did (link and response, with standard
//! errors), has the same coefficients and prints the same summary; a
//! damaged file is an error naming the field.

use std::path::{Path, PathBuf};

use matfree::gam::{Family, Gam, GamFit, GamOptions, PredictionType, SavedGam, TableColumns};
use matfree::table::Table;
use serde_json::Value;

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("matfree-gam-saved-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// A case's data: `tests/data/gam_fit_<case>.csv`, or `tests/data/<case>.csv`
/// for a case named by its file (`gam_offsets_poisson`).
fn data(case: &str) -> Table {
    let file = match case.starts_with("gam_") {
        true => format!("tests/data/{case}.csv"),
        false => format!("tests/data/gam_fit_{case}.csv"),
    };
    Table::read_csv(Path::new(&file), None).unwrap()
}

/// The fit of `formula` on a case's data, saved with it.
fn fitted(case: &str, formula: &str, family: Family) -> SavedGam {
    let table = data(case);
    let columns = TableColumns::new(&table);
    let model = Gam::new(formula, family).unwrap().setup(&columns.columns()).unwrap();
    let objective = model.objective().unwrap();
    let fit = model
        .fit_on(&matfree::solvers::CpuBackend::new(), &objective, &GamOptions::default())
        .unwrap();
    let saved = SavedGam::new(&model, fit, formula).unwrap();
    let summary = model.summary(&saved.fit, formula).unwrap();
    assert_eq!(
        json(&summary),
        json(&saved.summary().unwrap()),
        "{case}: summary before saving"
    );
    saved
}

fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap()
}

/// Bitwise: the same doubles (NaN never occurs here).
fn same_bits(what: &str, a: &[f64], b: &[f64]) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (j, (x, y)) in a.iter().zip(b).enumerate() {
        assert_eq!(x.to_bits(), y.to_bits(), "{what}[{j}]: {x:e} vs {y:e}");
    }
}

/// Save, load, and compare everything predict and the summary give.
fn round_trip(case: &str, saved: &SavedGam) {
    let path = tmp(&format!("{case}.json"));
    saved.save(&path).unwrap();
    let loaded = SavedGam::load(&path).unwrap();
    let (a, b) = (&saved.fit, &loaded.fit);
    same_bits("coefficients", &a.coefficients, &b.coefficients);
    same_bits("vp", &a.vp, &b.vp);
    same_bits("sp", &a.sp, &b.sp);
    assert_eq!(a.names, b.names);
    assert_eq!(a.terms, b.terms, "{case}: terms rebuilt");
    assert_eq!(a.edf_total.to_bits(), b.edf_total.to_bits());
    assert_eq!(loaded.formula, saved.formula);
    assert_eq!(
        json(&saved.summary().unwrap()),
        json(&loaded.summary().unwrap()),
        "{case}: summary"
    );
    let table = data(case);
    let columns = TableColumns::new(&table);
    for kind in [PredictionType::Link, PredictionType::Response] {
        let (p, q) = (predict(a, &columns, kind), predict(b, &columns, kind));
        same_bits(&format!("{case} {kind:?} fit"), &p.fit, &q.fit);
        same_bits(&format!("{case} {kind:?} se"), &p.se, &q.se);
    }
    assert_eq!(
        loaded.to_json().unwrap(),
        saved.to_json().unwrap(),
        "{case}: the file again"
    );
}

fn predict(fit: &GamFit, columns: &TableColumns, kind: PredictionType) -> matfree::gam::Prediction {
    fit.predict(&columns.columns(), kind).unwrap()
}

fn gaussian() -> Family {
    Family::canonical(matfree::gam::Distribution::Gaussian)
}

/// The gamSim case: a factor, cr, ps and te(x2, x3) on cr margins.
#[test]
fn gaussian_with_factor_cr_ps_te_round_trips_bitwise() {
    let f = r#"y ~ fac + s(x0, bs = "cr") + s(x1, bs = "ps") + te(x2, x3)"#;
    round_trip("gaussian", &fitted("gaussian", f, gaussian()));
}

/// A Gamma (log link) with a random effect, and te on P-spline margins
/// (re-parametrised over the covariates' ranges) with an interaction.
#[test]
fn random_effects_ps_margins_and_interactions_round_trip_bitwise() {
    let gamma = Family::new(matfree::gam::Distribution::Gamma, matfree::gam::Link::Log).unwrap();
    let f = r#"y ~ s(x0, bs = "cr") + s(x1, bs = "ps", k = 8) + s(grp, bs = "re")"#;
    round_trip("gamma", &fitted("gamma", f, gamma));
    let f = r#"y ~ x0 + x0:x1 + te(x2, x3, bs = "ps", k = 5)"#;
    round_trip("gaussian", &fitted("gaussian", f, gaussian()));
}

/// An offset is saved with the fit: the loaded fit reads and adds it.
#[test]
fn offsets_round_trip_and_a_prediction_adds_them() {
    let poisson = Family::canonical(matfree::gam::Distribution::Poisson);
    let f = r#"y ~ x1 + s(x0, bs = "cr") + offset(log_t)"#;
    let saved = fitted("gam_offsets_poisson", f, poisson);
    assert_eq!(saved.fit.offsets, ["log_t"]);
    assert!(saved.fit.covariates().contains(&"log_t".to_string()));
    round_trip("gam_offsets_poisson", &saved);
}

/// A saved file edited by `edit`, loaded: the error message.
fn load_error(text: &str, edit: impl Fn(&mut Value)) -> String {
    let mut v: Value = serde_json::from_str(text).unwrap();
    edit(&mut v);
    SavedGam::from_json(&v.to_string()).unwrap_err().to_string()
}

fn contains_all(e: &str, parts: &[&str]) {
    for p in parts {
        assert!(e.contains(p), "{p:?} not in: {e}");
    }
}

#[test]
fn damaged_files_are_named_errors() {
    let f = r#"accel ~ s(times, bs = "cr", k = 20)"#;
    let text = fitted("mcycle", f, gaussian()).to_json().unwrap();
    type Edit = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(Edit, Vec<&str>)> = vec![
        (
            Box::new(|v| v["format"] = "matfree-bms".into()),
            vec!["format", "matfree-bms", "matfree-gam"],
        ),
        (
            Box::new(|v| drop(v.as_object_mut().unwrap().remove("format"))),
            vec!["format", "missing"],
        ),
        (
            Box::new(|v| v["format_version"] = 2.into()),
            vec!["format_version", "2", "version 1"],
        ),
        (
            Box::new(|v| drop(v["vp"].as_array_mut().unwrap().pop())),
            vec!["vp", "399 values", "400"],
        ),
        (
            Box::new(|v| drop(v["names"].as_array_mut().unwrap().pop())),
            vec!["names", "19 values"],
        ),
        (
            Box::new(|v| v["names"][3] = "s(x).4".into()),
            vec!["names[3]", "s(x).4", "s(times).3"],
        ),
        (
            Box::new(|v| drop(v["coefficients"].as_array_mut().unwrap().pop())),
            vec!["coefficients", "19 values"],
        ),
        (
            Box::new(|v| v["sp"].as_array_mut().unwrap().push(1.0.into())),
            vec!["sp", "2 values", "need 1"],
        ),
        (Box::new(|v| v["sp"][0] = (-1.0).into()), vec!["sp[0]", "-1", "> 0"]),
        (
            Box::new(|v| v["coefficients"][2] = Value::Null),
            vec!["not a saved GAM", "null"],
        ),
        (Box::new(|v| v["vp"][0] = (-1.0).into()), vec!["vp[0][0]", "-1", ">= 0"]),
        (
            Box::new(|v| v["family"] = "gaussian2".into()),
            vec!["family", "gaussian2"],
        ),
        (Box::new(|v| v["link"] = "logit".into()), vec!["link", "logit"]),
        (
            Box::new(|v| v["terms"][1]["basis"]["knots"][3] = 0.0.into()),
            vec!["terms[1]", "s(times)", "knots", "increasing"],
        ),
        (
            Box::new(|v| drop(v["terms"][1]["constraint"].as_array_mut().unwrap().pop())),
            vec!["s(times): constraint", "19 column means", "20 columns"],
        ),
        (
            Box::new(|v| v["terms"][1]["penalty_scale"][0] = 0.0.into()),
            vec!["penalty_scale[0]", "> 0"],
        ),
        (
            Box::new(|v| v["terms"][1]["columns"] = serde_json::json!([])),
            vec!["s(times): columns", "1 covariate"],
        ),
        (
            Box::new(|v| v["terms"][1]["basis"]["type"] = "tp".into()),
            vec!["not a saved GAM", "tp"],
        ),
        (Box::new(|v| v["n"] = 0.into()), vec!["n", "a fit has rows"]),
        (Box::new(|v| v["xtwx"][5] = 1e300.into()), vec!["xtwx", "symmetric"]),
    ];
    for (edit, parts) in &cases {
        contains_all(&load_error(&text, edit), parts);
    }
    for cut in [0, 1, text.len() / 3, text.len() - 2] {
        let e = SavedGam::from_json(&text[..cut]).unwrap_err().to_string();
        contains_all(&e, &["not a saved GAM"]);
    }
    let path = tmp("truncated.json");
    std::fs::write(&path, &text[..text.len() / 2]).unwrap();
    let e = SavedGam::load(&path).unwrap_err().to_string();
    contains_all(&e, &["truncated.json", "not a saved GAM"]);
    let e = SavedGam::load(&tmp("absent.json")).unwrap_err().to_string();
    contains_all(&e, &["model file", "absent.json"]);
}

/// A factor term's levels and a random effect's are checked on load.
#[test]
fn saved_levels_are_checked() {
    let f = r#"y ~ fac + s(x0, bs = "cr", k = 5)"#;
    let text = fitted("gaussian", f, gaussian()).to_json().unwrap();
    let e = load_error(&text, |v| v["terms"][1]["levels"] = serde_json::json!(["a"]));
    contains_all(&e, &["terms[1]", "fac: levels", "2 or more distinct"]);
    let e = load_error(&text, |v| v["terms"][1]["levels"] = serde_json::json!(["a", "b", "a"]));
    contains_all(&e, &["fac: levels", "distinct"]);
    let e = load_error(&text, |v| {
        v["terms"][0] = serde_json::json!({"type": "numeric", "column": "x0"})
    });
    contains_all(&e, &["names[0]", "(Intercept)", "x0"]);
}
