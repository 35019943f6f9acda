//! `summary.gam` from a fit's numbers against mgcv's own tables:
//! tests/mgcv/gam_summary.R fits six models (Gaussian with four cr
//! smooths, binomial, Gaussian with a factor and s(g, bs = "re"), Poisson
//! with two random effects, Gaussian te(x0, x1) + s(x2), Gaussian with an
//! unpenalised s(x0, fx = TRUE)) and writes what
//! summary.gam reads and what it returns. Every p-value must match mgcv's
//! to 1e-6 relative or 1e-12 absolute, every other number (estimates,
//! standard errors, statistics, edf, Ref.df, R-sq.(adj), deviance
//! explained) to 1e-8 relative.

use matfree::gam::summary::{summarize, GamSummary, Statistic, SummaryInput};
use serde_json::Value;

fn reference() -> Value {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/gam_summary_mgcv.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn case(name: &str) -> Value {
    reference()["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap()
        .clone()
}

fn input(case: &Value, key: &str) -> SummaryInput {
    serde_json::from_value(case[key].clone()).unwrap()
}

fn numbers(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

fn value(what: &str, got: f64, want: f64) {
    assert!(
        (got - want).abs() <= 1e-8 * want.abs().max(1e-300),
        "{what}: {got} vs mgcv {want}"
    );
}

fn p_value(what: &str, got: f64, want: f64) {
    let err = (got - want).abs();
    assert!(
        err <= 1e-12 || err <= 1e-6 * want.abs(),
        "{what}: p = {got} vs mgcv {want}"
    );
}

/// An mgcv table's rows (names and entries).
fn table(v: &Value) -> (Vec<String>, Vec<Vec<f64>>) {
    let names: Vec<String> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect();
    let ncol = v["columns"].as_array().unwrap().len();
    let data = numbers(&v["data"]);
    (names, data.chunks(ncol).map(<[f64]>::to_vec).collect())
}

/// Every table and figure of `got` against the case's expected ones.
fn check(name: &str, got: &GamSummary, expected: &Value) {
    let (rows, want) = table(&expected["p_table"]);
    assert_eq!(got.coefficients.len(), rows.len(), "{name}: parametric rows");
    for ((r, w), label) in got.coefficients.iter().zip(&want).zip(&rows) {
        assert_eq!(&r.name, label);
        value(&format!("{name} {label} estimate"), r.estimate, w[0]);
        value(&format!("{name} {label} std. error"), r.std_error, w[1]);
        value(&format!("{name} {label} statistic"), r.statistic, w[2]);
        p_value(&format!("{name} {label}"), r.p_value, w[3]);
    }
    if expected["p_terms_table"].is_null() {
        assert!(got.parametric_terms.is_empty(), "{name}: no parametric terms");
    } else {
        let (rows, want) = table(&expected["p_terms_table"]);
        assert_eq!(got.parametric_terms.len(), rows.len(), "{name}: parametric terms");
        for ((r, w), label) in got.parametric_terms.iter().zip(&want).zip(&rows) {
            assert_eq!(&r.label, label);
            value(&format!("{name} {label} df"), r.df, w[0]);
            value(&format!("{name} {label} statistic"), r.statistic, w[1]);
            p_value(&format!("{name} {label}"), r.p_value, w[2]);
        }
    }
    let (rows, want) = table(&expected["s_table"]);
    assert_eq!(got.smooths.len(), rows.len(), "{name}: smooth rows");
    for ((r, w), label) in got.smooths.iter().zip(&want).zip(&rows) {
        assert_eq!(&r.label, label);
        value(&format!("{name} {label} edf"), r.edf, w[0]);
        value(&format!("{name} {label} Ref.df"), r.ref_df, w[1]);
        value(&format!("{name} {label} statistic"), r.statistic, w[2]);
        p_value(&format!("{name} {label}"), r.p_value, w[3]);
    }
    match expected["r_sq"].as_f64() {
        Some(r) => value(&format!("{name} r.sq"), got.r_sq.unwrap(), r),
        None => assert!(got.r_sq.is_none()),
    }
    value(
        &format!("{name} dev.expl"),
        got.dev_expl,
        expected["dev_expl"].as_f64().unwrap(),
    );
    value(&format!("{name} scale"), got.scale, expected["scale"].as_f64().unwrap());
    value(
        &format!("{name} residual df"),
        got.residual_df,
        expected["residual_df"].as_f64().unwrap(),
    );
    value(
        &format!("{name} REML"),
        got.criterion.as_ref().unwrap().score,
        expected["sp_criterion"].as_f64().unwrap(),
    );
    assert_eq!(got.n as u64, expected["n"].as_u64().unwrap());
}

fn check_case(name: &str) -> GamSummary {
    let c = case(name);
    let got = summarize(&input(&c, "input")).unwrap();
    check(name, &got, &c["expected"]);
    got
}

/// F and t tests (scale estimated), testStat with fractional ranks.
#[test]
fn gaussian_cr_matches_mgcv() {
    let got = check_case("gaussian_cr");
    assert_eq!(
        (got.coefficient_statistic, got.term_statistic),
        (Statistic::T, Statistic::F)
    );
}

/// The same tests from model.matrix (weights 1) in place of mgcv's R
/// factor: only X^T W X matters.
#[test]
fn gaussian_cr_from_model_matrix_matches_mgcv() {
    let c = case("gaussian_cr");
    let x = input(&c, "input_model_matrix");
    assert_eq!(x.x.nrow, 200);
    check("gaussian_cr (model.matrix)", &summarize(&x).unwrap(), &c["expected"]);
}

/// z and chi-square tests (scale known).
#[test]
fn binomial_cr_matches_mgcv() {
    let got = check_case("binomial_cr");
    assert_eq!(
        (got.coefficient_statistic, got.term_statistic),
        (Statistic::Z, Statistic::ChiSq)
    );
}

/// A factor's Wald test, and reTest with one random effect (F-type).
#[test]
fn gaussian_factor_re_matches_mgcv() {
    check_case("gaussian_factor_re");
}

/// reTest with the other random effect integrated out (chi-square type).
#[test]
fn poisson_two_re_matches_mgcv() {
    check_case("poisson_two_re");
}

/// A tensor product smooth.
#[test]
fn gaussian_te_matches_mgcv() {
    check_case("gaussian_te");
}

/// An unpenalised smooth (fx = TRUE, no penalty): its full rank.
#[test]
fn gaussian_fixed_matches_mgcv() {
    let got = check_case("gaussian_fixed");
    assert!((got.smooths[0].ref_df - 4.0).abs() < 1e-8);
}

/// The print has summary.gam's sections, labels and figures, and the
/// JSON carries the tables.
#[test]
fn display_and_json() {
    let got = check_case("gaussian_factor_re");
    let text = got.to_string();
    for line in [
        "Family: gaussian",
        "Link function: identity",
        "Parametric coefficients:",
        "Approximate significance of smooth terms:",
        "R-sq.(adj) =  0.686",
        "Deviance explained = 70.7%",
        "-REML = 530.47",
        "n = 240",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    assert!(
        text.lines().any(|l| l.starts_with("s(x2)") && l.ends_with("***")),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("s(g)") && l.contains("0.129")),
        "{text}"
    );
    let json = serde_json::to_value(&got).unwrap();
    assert_eq!(json["smooths"][2]["label"], "s(g)");
    assert_eq!(json["coefficient_statistic"], "t");
    assert_eq!(json["parametric_terms"][0]["label"], "fac");
}

/// Inputs of the wrong shape are errors naming the field.
#[test]
fn rejects_bad_shapes() {
    let c = case("binomial_cr");
    let mut bad = input(&c, "input");
    bad.vp.pop();
    let e = summarize(&bad).unwrap_err().to_string();
    assert!(e.contains("vp") && e.contains("length"), "{e}");
    let mut bad = input(&c, "input");
    bad.smooths[1].last = bad.coefficients.len() + 1;
    let e = summarize(&bad).unwrap_err().to_string();
    assert!(e.contains("smooths[1]"), "{e}");
    let mut bad = input(&c, "input");
    bad.scale = -1.0;
    assert!(summarize(&bad).unwrap_err().to_string().contains("scale"));
}
