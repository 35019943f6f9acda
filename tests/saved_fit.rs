//! A fit saved and loaded back: bitwise the same fit and model, and every
//! damaged file a named error.

use std::path::PathBuf;

use matfree::bms::fit::{fit, FitOptions};
use matfree::bms::generator::{generate, GeneratorConfig};
use matfree::bms::saved::{SavedFit, ScoreColumn, FORMAT_VERSION};
use matfree::bms::BmsObjective;
use matfree::solvers::CpuBackend;
use matfree::Error;

/// A fit at fixed lambda (`lambda`) or by REML (`None`).
fn saved(lambda: Option<Vec<f64>>) -> SavedFit {
    let g = generate(GeneratorConfig::fit_shape(1000, 1)).unwrap();
    let objective = BmsObjective::new(&g.model, &g.data);
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
    use matfree::bms::report::DesignNames;
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
