//! Term predictions (`GamFit::predict_terms`, mgcv's `predict.gam(type =
//! "terms", se.fit = TRUE)`) and `plot.gam`'s panels against mgcv:
//! `tests/mgcv/gam_terms.R` fitted two committed cases and wrote each
//! smooth's contribution and SE at 9 rows, and one smooth on plot.gam's
//! grid of 100 points, to `tests/data/gam_terms_mgcv.json`. The fits agree
//! to about 1e-9 (`tests/gam_fit.rs`); contributions are held to 1e-5 of
//! the largest |contribution|, SEs to 1e-5 relative.

use std::path::Path;

use matfree::gam::{Family, Gam, GamFit, GamOptions, TableColumns, PLOT_POINTS};
use matfree::table::Table;
use serde_json::Value;

const TOL: f64 = 1e-5;

fn numbers(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

fn fit(case: &Value) -> (Table, GamFit) {
    let name = case["name"].as_str().unwrap();
    let table = Table::read_csv(Path::new(&format!("tests/data/gam_fit_{name}.csv")), None).unwrap();
    let gaussian = Family::canonical(matfree::gam::Distribution::Gaussian);
    let gam = Gam::new(case["formula"].as_str().unwrap(), gaussian).unwrap();
    let fit = gam
        .fit(&TableColumns::new(&table).columns(), &GamOptions::default())
        .unwrap();
    (table, fit)
}

fn close(what: &str, got: &[f64], want: &[f64], by_largest: bool) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let largest = want.iter().fold(0.0f64, |m, w| m.max(w.abs()));
    for (j, (g, w)) in got.iter().zip(want).enumerate() {
        let rel = (g - w).abs() / if by_largest { largest } else { w.abs() };
        assert!(
            rel <= TOL,
            "{what}[{j}]: matfree {g:.12e}, mgcv {w:.12e}, relative {rel:.2e}"
        );
    }
}

fn cases() -> Vec<Value> {
    let text = std::fs::read_to_string("tests/data/gam_terms_mgcv.json").unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    v["cases"].as_array().unwrap().clone()
}

#[test]
fn term_predictions_match_mgcvs_type_terms() {
    for case in cases() {
        let name = case["name"].as_str().unwrap();
        let (table, fit) = fit(&case);
        let rows: Vec<usize> = numbers(&case["rows"]).iter().map(|&r| r as usize).collect();
        let new = table.rows(&rows).unwrap();
        let got = fit.predict_terms(&TableColumns::new(&new).columns()).unwrap();
        let want = case["terms"].as_array().unwrap();
        assert_eq!(got.len(), want.len(), "{name}: smooth terms");
        for (g, w) in got.iter().zip(want) {
            assert_eq!(g.label, w["label"].as_str().unwrap());
            let what = format!("{name} {}", g.label);
            close(&format!("{what} fit"), &g.prediction.fit, &numbers(&w["fit"]), true);
            close(&format!("{what} se"), &g.prediction.se, &numbers(&w["se"]), false);
        }
    }
}

/// The panels plot.gam draws: the grid over the covariate's range, the
/// fit and a band of 2 SE each side; te terms skipped with a note.
#[test]
fn smooth_panels_are_plot_gams() {
    for case in cases() {
        let name = case["name"].as_str().unwrap();
        let (_, fit) = fit(&case);
        let panels = fit.smooth_panels().unwrap();
        let label = case["grid_label"].as_str().unwrap();
        let panel = panels.panels.iter().find(|p| p.title == label).unwrap();
        assert_eq!(panel.x_label, case["grid_var"].as_str().unwrap());
        let b = &panel.band;
        assert_eq!(b.x.len(), PLOT_POINTS);
        let want_x = numbers(&case["grid"]);
        for (g, w) in b.x.iter().zip(&want_x) {
            assert!((g - w).abs() <= 1e-12 * w.abs().max(1.0), "{name} grid: {g} vs {w}");
        }
        close(&format!("{name} grid fit"), &b.fit, &numbers(&case["grid_fit"]), true);
        let half: Vec<f64> = b.upper.iter().zip(&b.lower).map(|(u, l)| (u - l) / 4.0).collect();
        close(&format!("{name} grid se"), &half, &numbers(&case["grid_se"]), false);
        let edf = fit.smooth_edf().into_iter().find(|(l, _)| l == label).unwrap().1;
        assert_eq!(panel.y_label, format!("{},{edf:.2})", label.trim_end_matches(')')));
        if name == "gaussian" {
            assert_eq!(panels.panels.len(), 2, "s(x0) and s(x1)");
            assert_eq!(
                panels.skipped,
                ["te(x2,x3): not plotted (a smooth of several covariates)"]
            );
        }
    }
}
