//! `fit_bms` on data a user gets wrong (issue 38): each case is an error
//! or a note that names the column, the row (1-based) and what to do, or a
//! fit that says it did not converge; none is a fit reported as normal.
//!
//! The data files: `tests/data/separated_20_seed7.csv` is
//! `python3 tools/messy_data.py 20 7 1`, and `outlier_400_seed3.csv` is
//! `python3 tools/messy_data.py 400 3 1` with x1 = 1e6 in data row 5.

mod common;

use common::fit_bms_binary as binary;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn data(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
        .to_str()
        .unwrap()
        .to_string()
}

fn run(args: &[&str]) -> Output {
    Command::new(binary())
        .args(args)
        .args(["--backend", "cpu", "--quiet"])
        .env("MATFREE_GPU", "off")
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("matfree-cli-checks-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// Exit status 1 with every needle in the message.
fn refused(args: &[&str], needles: &[&str]) {
    let o = run(args);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{args:?}: {e}");
    for n in needles {
        assert!(e.contains(n), "{args:?}: {e:?} should mention {n:?}");
    }
}

/// The messy data's columns, with an edit of each row's fields.
fn edited(name: &str, edit: impl Fn(usize, &mut Vec<String>)) -> String {
    let text = std::fs::read_to_string(data("outlier_400_seed3.csv")).unwrap();
    let mut out = String::new();
    for (i, line) in text.lines().enumerate() {
        let mut fields: Vec<String> = line.split(',').map(str::to_string).collect();
        if i == 5 {
            fields[2] = "0.5".into(); // the outlier, put back in range
        }
        edit(i, &mut fields);
        out += &(fields.join(",") + "\n");
    }
    let path = tmp(name);
    std::fs::write(&path, out).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn a_separated_fit_exits_3_with_the_reason() {
    let json = tmp("separated.json");
    let sep = data("separated_20_seed7.csv");
    let o = run(&[
        "--data",
        &sep,
        "--marginal",
        "x1,x2",
        "--slope",
        "x1",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("converged: false") && stdout.contains("separates the labels"),
        "{stdout}"
    );
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["converged"], false);
    assert!(report["termination"].as_str().unwrap().starts_with("separated"));
}

#[test]
fn an_outlier_at_the_start_is_named_by_row_and_value() {
    let outlier = data("outlier_400_seed3.csv");
    refused(
        &["--data", &outlier, "--marginal", "x1,x2", "--slope", "x1"],
        &["row 5 ", "1e6", "outlier"],
    );
}

#[test]
fn the_label_or_the_score_misused_is_refused_before_the_fit() {
    let d = edited("clean.csv", |_, _| {});
    let separated = edited("by-score.csv", |i, f| {
        if i > 0 {
            f[0] = if f[1].parse::<f64>().unwrap() > 0.3 { "1" } else { "0" }.into();
        }
    });
    refused(
        &["--data", &d, "--score", "y"],
        &["score", "separates the labels", "the label"],
    );
    refused(&["--data", &separated], &["score", "separates the labels"]);
    refused(
        &["--data", &d, "--slope", "z"],
        &["column 'z'", "is the score", "--score-basis"],
    );
    refused(&["--data", &d, "--marginal", "z,x1"], &["column 'z'", "is the score"]);
    refused(&["--data", &d, "--marginal", "y"], &["column 'y'", "is the label"]);
}

#[test]
fn scales_weights_and_lambdas_out_of_range_are_named() {
    let shifted = edited("shifted.csv", |i, f| {
        if i > 0 {
            f[2] = (f[2].parse::<f64>().unwrap() + 1e8).to_string();
        }
    });
    refused(
        &["--data", &shifted, "--marginal", "x1,x2"],
        &["covariate 'x1'", "centre it"],
    );
    for w in ["1e-12", "1e12", "1e200"] {
        let weighted = edited(&format!("w{w}.csv"), |i, f| {
            f.push(if i == 0 { "w".into() } else { w.into() })
        });
        refused(&["--data", &weighted, "--weights", "w"], &["weights", "mean weight"]);
    }
    let huge = edited("huge.csv", |i, f| {
        if i == 7 {
            f[2] = "1e101".into();
        }
    });
    refused(&["--data", &huge, "--marginal", "x1"], &["'x1', row 7", "rescale"]);
    let d = edited("clean-lambda.csv", |_, _| {});
    refused(&["--data", &d, "--lambda", "-1,1"], &["--lambda -1", "> 0"]);
}

/// A small simulated fit at fixed lambda saved as `name`, with `extra`
/// options; its exit status must be `status`.
fn saved_fit(name: &str, extra: &[&str], status: i32) -> PathBuf {
    let model = tmp(name);
    let o = Command::new(binary())
        .args(["--simulate", "300", "--lambda", "10,10", "--backend", "cpu", "--quiet"])
        .args(extra)
        .args(["--save", model.to_str().unwrap()])
        .env("MATFREE_GPU", "off")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(status), "{}", stderr(&o));
    model
}

#[test]
fn empty_rows_and_predictions_from_an_unconverged_fit_are_noted() {
    // A fit that cannot converge (Newton tolerance 1e-300), saved.
    let model = saved_fit("unconverged.json", &["--newton-tol", "1e-300"], 3);
    let new = tmp("new.csv");
    std::fs::write(&new, "z,m1,m2,g1\n0.1,0.2,0.3,0.4\n,,,\n-0.5,1,0,2\n,,,\n").unwrap();
    let out = tmp("pred.csv");
    let (m, n, p) = (model.to_str().unwrap(), new.to_str().unwrap(), out.to_str().unwrap());
    let o = run(&["--model", m, "--predict", n, "--out", p]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{e}");
    assert!(e.contains("the saved fit did not converge"), "{e}");
    assert!(e.contains("2 rows of only empty fields skipped (lines 3, 5)"), "{e}");
    assert_eq!(std::fs::read_to_string(&out).unwrap().lines().count(), 3);
}

#[test]
fn a_row_that_cannot_be_predicted_is_named_and_the_rest_written() {
    let model = saved_fit("good.json", &[], 0);
    let new = tmp("far.csv");
    std::fs::write(&new, "z,m1,m2,g1\n0.1,0.2,0.3,0.4\n0.5,1e6,0,1e6\n-0.5,1,0,2\n").unwrap();
    let out = tmp("far-pred.csv");
    let (m, n, p) = (model.to_str().unwrap(), new.to_str().unwrap(), out.to_str().unwrap());
    let o = run(&["--model", m, "--predict", n, "--out", p]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{e}");
    assert!(
        e.contains("data row 2 (z = 5e-1, m1 = 1e6, m2 = 0e0, g1 = 1e6) could not be predicted"),
        "{e}"
    );
    let lines: Vec<String> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[2], "2,,,");
    assert!(
        lines[1].starts_with("1,0.") && lines[3].starts_with("3,0."),
        "{lines:?}"
    );
}
