//! Runs the `fit_gam` example binary as a user would: a fit of MASS::mcycle
//! (`tests/data/gam_fit_mcycle.csv`) printing mgcv's numbers
//! (`tests/data/gam_fit_mgcv.json`), its JSON summary, a saved fit
//! predicted from without refitting, a plot, and bad inputs.

mod common;

use common::fit_gam_binary as binary;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const DATA: &str = "tests/data/gam_fit_mcycle.csv";
const FORMULA: &str = r#"accel ~ s(times, bs = "cr", k = 20)"#;

fn run(args: &[&str]) -> Output {
    Command::new(binary())
        .args(args)
        .env("MATFREE_GPU", "off")
        .output()
        .expect("fit_gam runs")
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("matfree-fit-gam-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A run that must succeed: its stdout and stderr.
fn ok(args: &[&str]) -> (String, String) {
    let o = run(args);
    let (out, err) = text(&o);
    assert!(o.status.success(), "fit_gam {args:?} failed: {err}");
    (out, err)
}

/// A run that must fail with a message holding every one of `parts`.
fn fails(args: &[&str], parts: &[&str]) {
    let o = run(args);
    let (_, err) = text(&o);
    assert!(!o.status.success(), "fit_gam {args:?} succeeded");
    for p in parts {
        assert!(err.contains(p), "fit_gam {args:?}: {p:?} not in: {err}");
    }
}

fn mgcv() -> Value {
    let v: Value = serde_json::from_str(&std::fs::read_to_string("tests/data/gam_fit_mgcv.json").unwrap()).unwrap();
    v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "mcycle")
        .unwrap()
        .clone()
}

/// An R number, written by `tests/mgcv/gam_fit.R` as a one-element array.
fn number(v: &Value) -> f64 {
    v.as_f64().or_else(|| v[0].as_f64()).unwrap()
}

fn close(what: &str, got: f64, want: f64) {
    assert!((got - want).abs() <= 1e-5 * want.abs(), "{what}: {got} vs mgcv {want}");
}

#[test]
fn mcycle_summary_prints_mgcvs_edf_and_reml() {
    let json = tmp("summary.json");
    let (out, _) = ok(&["--data", DATA, "--formula", FORMULA, "--json", s(&json)]);
    let want = mgcv();
    let (edf, reml) = (number(&want["edf_smooth"]), number(&want["reml_score"]));
    let row = out
        .lines()
        .find(|l| l.starts_with("s(times)"))
        .expect("the smooth's row");
    assert_eq!(
        row.split_whitespace().nth(1),
        Some(format!("{edf:.2}").as_str()),
        "{row}"
    );
    assert!(out.contains(&format!("-REML = {reml:.2}")), "{out}");
    assert!(out.contains("n = 133"), "{out}");
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    close("edf", summary["smooths"][0]["edf"].as_f64().unwrap(), edf);
    close("REML", summary["criterion"]["score"].as_f64().unwrap(), reml);
    close("r_sq", summary["r_sq"].as_f64().unwrap(), number(&want["r_sq"]));
}

/// --save then --model --predict gives the predictions of the fitting run
/// to the last digit, and the same summary.
#[test]
fn saved_fit_predicts_without_refitting() {
    let (model, fitted, loaded) = (tmp("model.json"), tmp("fitted.csv"), tmp("loaded.csv"));
    for kind in ["link", "response"] {
        let args = ["--predict", DATA, "--out", s(&fitted), "--type", kind];
        let (out1, _) = ok(&[&["--data", DATA, "--formula", FORMULA, "--save", s(&model)], &args[..]].concat());
        let (out2, err) = ok(&[
            "--model",
            s(&model),
            "--predict",
            DATA,
            "--out",
            s(&loaded),
            "--type",
            kind,
        ]);
        assert!(err.contains("predicted 133 rows"), "{err}");
        assert_eq!(out1, out2, "the summary of the saved fit");
        let (a, b) = (
            std::fs::read_to_string(&fitted).unwrap(),
            std::fs::read_to_string(&loaded).unwrap(),
        );
        assert_eq!(a, b, "{kind} predictions");
        assert_eq!(a.lines().count(), 134);
    }
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&model).unwrap()).unwrap();
    assert_eq!(saved["format"], "matfree-gam");
    assert_eq!(saved["formula"], FORMULA);
}

#[test]
fn plot_writes_an_svg_of_the_smooth() {
    let svg = tmp("smooths.svg");
    let (_, err) = ok(&["--data", DATA, "--formula", FORMULA, "--plot", s(&svg)]);
    assert!(err.contains("plotted 1 smooth(s)"), "{err}");
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg") && text.trim_end().ends_with("</svg>"));
    assert!(text.contains(">s(times)<"), "the panel's title");
    assert_eq!(text.matches("<polygon").count(), 1, "one band");
    // A model with only a tensor product has nothing to draw: an error
    // naming the plot, with a note on the skipped term.
    let args = [
        "--data",
        "tests/data/gam_fit_gaussian.csv",
        "--formula",
        "y ~ te(x2, x3)",
        "--plot",
        s(&svg),
    ];
    fails(
        &args,
        &["te(x2,x3): not plotted", "--plot", "no one-dimensional smooth"],
    );
}

#[test]
fn bad_inputs_exit_non_zero_naming_the_problem() {
    let bad = tmp("bad.csv");
    std::fs::write(&bad, "times,accel\n1,2\n2,x\n3,4\n4,3\n5,1\n").unwrap();
    let model = tmp("broken.json");
    std::fs::write(&model, "{\"format\": \"matfree-gam\", \"format_version\": 1, \"vp\": [").unwrap();
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (
            vec!["--data", DATA, "--formula", "accel ~ s(speed, bs = \"cr\")"],
            vec!["speed", "no such column"],
        ),
        (
            vec!["--data", DATA, "--formula", FORMULA, "--family", "gausian"],
            vec!["family", "gausian"],
        ),
        (
            vec!["--data", DATA, "--formula", "accel ~ s(times"],
            vec!["formula", "character"],
        ),
        (
            vec!["--data", s(&bad), "--formula", "times ~ s(accel, bs = \"cr\", k = 4)"],
            vec!["line 3", "accel", "'x'", "not a number"],
        ),
        (
            vec!["--data", DATA, "--formula", FORMULA, "--link", "logit"],
            vec!["logit"],
        ),
        (
            vec!["--model", s(&model), "--predict", DATA, "--out", "p.csv"],
            vec!["broken.json", "not a saved GAM"],
        ),
        (vec!["--model", s(&model), "--data", DATA], vec!["--model", "--data"]),
        (vec!["--formula", FORMULA], vec!["--data"]),
        (
            vec!["--data", DATA, "--formula", FORMULA, "--type", "mean"],
            vec!["--type mean"],
        ),
    ];
    for (args, parts) in &cases {
        fails(args, parts);
    }
}
