//! A fit saved and loaded back: bitwise the same fit and model, and every
//! damaged file a named error.

use std::path::PathBuf;

use matfree::bms::fit::{fit, FitOptions};
use matfree::bms::io::generator::{generate, GeneratorConfig};
use matfree::bms::results::predict::{predict_cpu, Estimates};
use matfree::bms::results::saved::{SavedFit, ScoreColumn, FORMAT_VERSION};
use matfree::solvers::CpuBackend;
use matfree::Error;

/// A fit at fixed lambda (`lambda`) or by REML (`None`).
fn saved(lambda: Option<Vec<f64>>) -> SavedFit {
    let g = generate(GeneratorConfig::fit_shape(1000, 1)).unwrap();
    let objective = g.model.objective(&g.data).unwrap();
    let opts = FitOptions {
        lambda,
        ..FitOptions::default()
    };
    let f = fit(&CpuBackend::new(), &objective, &g.model, &g.data, &opts).unwrap();
    let names = |n: usize| {
        (0..n)
            .map(|j| if j == 0 { "(Intercept)".into() } else { format!("x{j}") })
            .collect()
    };
    let score = ScoreColumn {
        name: "z".into(),
        standardised: Some((0.5, 2.0)),
    };
    SavedFit::new(&g.model, f, (names(3), names(2)), score).unwrap()
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("matfree-saved-{}-{name}", std::process::id()))
}

/// The field a load error names.
fn field_of(e: Error) -> String {
    match e {
        Error::InvalidInput { field, .. } => field,
        other => panic!("not an input error: {other}"),
    }
}

#[test]
fn a_saved_fit_loads_back_bitwise() {
    let s = saved(None);
    assert!(s.fit.reml_report.is_some());
    let path = temp("round-trip.json");
    s.save(&path).unwrap();
    let (back, model) = SavedFit::load(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(back, s);
    assert_eq!(back.format_version, FORMAT_VERSION);
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&back.fit.beta), bits(&s.fit.beta));
    assert_eq!(
        bits(back.fit.covariance.as_ref().unwrap()),
        bits(s.fit.covariance.as_ref().unwrap())
    );
    // The bases rebuilt from their knots are the fitted model's.
    let original = s.model.model().unwrap();
    for (a, b) in [
        (&model.bases().score, &original.bases().score),
        (&model.bases().link, &original.bases().link),
    ] {
        let (a, b) = (a.as_ref().unwrap(), b.as_ref().unwrap());
        assert_eq!(bits(a.penalty()), bits(b.penalty()));
        assert_eq!(a.knots(), b.knots());
    }
    assert_eq!(model.layout().p_total(), s.fit.beta.len());
}

#[test]
fn damaged_files_are_named_errors() {
    let s = saved(Some(vec![10.0, 100.0]));
    let (p, cov) = (s.fit.beta.len(), s.fit.covariance.clone().unwrap());
    let text = serde_json::to_string(&s).unwrap();
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    let edit = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut v = value.clone();
        f(&mut v);
        SavedFit::from_json(&v.to_string()).map(|_| ()).unwrap_err()
    };
    let cases: Vec<(&str, Error)> = vec![
        ("format_version", edit(&|v| v["format_version"] = 1.into())),
        ("format_version", edit(&|v| v["format_version"] = 3.into())),
        (
            "score.standardised.sd",
            edit(&|v| v["score"]["standardised"][1] = 0.0.into()),
        ),
        (
            "file",
            edit(&|v| {
                v.as_object_mut().unwrap().remove("score");
            }),
        ),
        (
            "format_version",
            edit(&|v| {
                v.as_object_mut().unwrap().remove("format_version");
            }),
        ),
        (
            "fit.beta",
            edit(&|v| {
                v["fit"]["beta"].as_array_mut().unwrap().pop();
            }),
        ),
        ("fit.lambda[1]", edit(&|v| v["fit"]["lambda"][1] = (-1.0).into())),
        (
            "fit.lambda",
            edit(&|v| {
                v["fit"]["lambda"].as_array_mut().unwrap().pop();
            }),
        ),
        ("slope_names", edit(&|v| v["slope_names"] = serde_json::json!([]))),
        (
            "knots",
            edit(&|v| v["model"]["link_knots"] = serde_json::json!([1.0, 0.0])),
        ),
        ("file", edit(&|v| v["fit"]["beta"][0] = "x".into())),
        (
            "file",
            SavedFit::from_json(&text[..text.len() / 2]).map(|_| ()).unwrap_err(),
        ),
        ("file", SavedFit::from_json("\u{0}garbage").map(|_| ()).unwrap_err()),
        // A coefficient no fit makes, and covariances no inverse is
        // (issue 38, items 7 and 9).
        ("fit.beta[0]", edit(&|v| v["fit"]["beta"][0] = 1e308.into())),
        (
            "fit.covariance[3][3]",
            edit(&|v| {
                let c = v["fit"]["covariance"][3 * p + 3].as_f64().unwrap();
                v["fit"]["covariance"][3 * p + 3] = (-c).into();
            }),
        ),
        (
            "fit.covariance[4][2]",
            edit(&|v| {
                let c = v["fit"]["covariance"][2 * p + 4].as_f64().unwrap();
                v["fit"]["covariance"][2 * p + 4] = (c + 1e-3 * cov[2 * p + 2]).into();
            }),
        ),
        (
            "fit.covariance",
            edit(&|v| {
                let c = 2.0 * (cov[0] * cov[p + 1]).sqrt();
                v["fit"]["covariance"][1] = c.into();
                v["fit"]["covariance"][p] = c.into();
            }),
        ),
    ];
    for (want, e) in cases {
        let field = field_of(e);
        assert!(field.contains(want), "expected an error naming {want:?}, got {field:?}");
    }
    // A missing file names its path.
    let path = temp("missing.json");
    let field = field_of(SavedFit::load(&path).map(|_| ()).unwrap_err());
    assert_eq!(field, "model file");
}

/// A loaded fit's summary is the saved one's: the same table, with the
/// REML score also at fixed lambda and every parametric row named.
#[test]
fn a_loaded_fit_summarises_as_the_fit_did() {
    use matfree::bms::results::report::DesignNames;
    let s = saved(Some(vec![10.0, 100.0]));
    let (back, model) = SavedFit::from_json(&serde_json::to_string(&s).unwrap()).unwrap();
    let summary = |f: &SavedFit| {
        let names = DesignNames {
            marginal: &f.marginal_names,
            slope: &f.slope_names,
        };
        f.fit.summary(&model, 1000, names, None)
    };
    let (a, b) = (summary(&s), summary(&back));
    let table = a.to_string();
    assert_eq!(table, b.to_string());
    assert_eq!(a.method, "fixed lambda");
    assert!(a.reml_score.is_some() && table.contains("REML score:"), "{table}");
    for name in ["marginal:(Intercept)", "marginal:x2", "slope:x1"] {
        assert!(table.lines().any(|l| l.starts_with(name)), "{name} in {table}");
    }
    assert_eq!(a.coefficients.len(), s.fit.beta.len());
    assert_eq!(a.smooths.len(), 2);
}

/// Property test of predict's inputs (issue 38): random files for a saved
/// fit (random shapes, values from ordinary to far outside the data,
/// non-finite and unparsable ones, unbalanced quotes, random bytes) never
/// panic; each is either predicted row for row (every row either finite or
/// listed as rejected with a reason, never silently missing) or an error
/// that names the file and, for a bad value, its line and column.
#[test]
fn random_prediction_inputs_never_panic_or_drop_rows() {
    let s = saved(Some(vec![10.0, 100.0]));
    let model = s.model.model().unwrap();
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let values = [
        "0.3", "-1.2", "2", "1e6", "-1e6", "1e99", "NaN", "inf", "", "x", "\"0.5", "\"1\"", "7e-300",
    ];
    let path = temp("random-predict.csv");
    for case in 0..150 {
        let rows = 1 + next(30);
        let mut text = String::from("z,x1,x2,label\n");
        for _ in 0..rows {
            let cells: Vec<&str> = (0..3).map(|_| values[next(values.len())]).collect();
            text += &format!("{},note\n", cells.join(","));
        }
        let mut bytes = text.into_bytes();
        if case % 5 == 4 {
            let at = next(bytes.len());
            bytes.insert(at, [b'"', b',', b'\n', 0xff, b'\r'][next(5)]);
        }
        std::fs::write(&path, &bytes).unwrap();
        let file = path.display().to_string();
        match s.read_predictors(&path) {
            Ok(rows_in) => {
                let n = rows_in.z.len();
                let est = Estimates::of(&s.fit);
                let pred = predict_cpu(&model, est, rows_in.designs, &rows_in.z).unwrap();
                assert_eq!(pred.eta.len(), n, "case {case}");
                let rejected: Vec<usize> = pred.rejected.iter().map(|(i, _)| *i).collect();
                for i in 0..n {
                    assert_eq!(pred.eta[i].is_finite(), !rejected.contains(&i), "case {case} row {i}");
                }
            }
            Err(Error::InvalidInput { field, rule, .. }) => {
                assert!(field.starts_with(&file), "case {case}: {field}");
                if rule.contains("not a number") || rule.contains("finite") || rule.contains("never closed") {
                    let cell = field.contains("column '") || field.contains(", field ");
                    assert!(field.contains("line ") && cell, "case {case}: {field}: {rule}");
                }
            }
            Err(e) => panic!("case {case}: unexpected error kind {e}"),
        }
    }
    std::fs::remove_file(&path).unwrap();
}
