//! mgcv's smooth terms and parametric columns against mgcv itself:
//! tests/mgcv/bases.R writes, for three data sets (ties, an unevenly spread
//! x, a Gaussian x), smoothCon's X and S (absorb.cons = TRUE, scale.penalty
//! = TRUE) for s(x, bs = "cr", k = 10), s(x, bs = "ps", k = 10),
//! te(x1, x2, k = c(5, 4)), te(x1, x2, k = c(6, 5), bs = "ps") and
//! s(f, bs = "re"), their PredictMat at new points (beyond the range too),
//! model.matrix(~ x + g), and a whole model as gam(..., fit = FALSE) sets
//! it up. Every matrix must match to 1e-10 relative to its largest entry.

use matfree::gam::{self, Basis, Column, Parametric, Smooth, Spec, Term};
use serde_json::Value;

const TOL: f64 = 1e-10;

fn reference() -> Value {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/bases_mgcv.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn numbers(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect()
}

/// max |got - want| / max |want|, after checking the shape.
fn relative_error(what: &str, got: &[f64], ncol: usize, want: &Value) -> f64 {
    let (nrow, wcol) = (
        want["nrow"].as_u64().unwrap() as usize,
        want["ncol"].as_u64().unwrap() as usize,
    );
    let w = numbers(&want["data"]);
    assert_eq!((got.len(), ncol), (nrow * wcol, wcol), "{what}: shape");
    let scale = w.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let err = got.iter().zip(&w).fold(0.0f64, |m, (a, b)| m.max((a - b).abs())) / scale;
    assert!(err <= TOL, "{what}: relative error {err:e} > {TOL:e}");
    err
}

/// Compares one smoothCon term (its columns at the data it was built on,
/// `data`) and its PredictMat with mgcv's; the worst relative error.
fn check_term(what: &str, sm: &Smooth, data: &[Column], new: &[Column], want: &Value) -> f64 {
    let p = sm.dim();
    let mut worst = relative_error(&format!("{what} X"), &sm.predict(data).unwrap(), p, &want["X"]);
    let s_want = want["S"].as_array().unwrap();
    assert_eq!(sm.penalties().len(), s_want.len(), "{what}: number of penalties");
    for (j, (s, w)) in sm.penalties().iter().zip(s_want).enumerate() {
        worst = worst.max(relative_error(&format!("{what} S[{j}]"), s, p, w));
    }
    let predicted = sm.predict(new).unwrap();
    worst = worst.max(relative_error(&format!("{what} PredictMat"), &predicted, p, &want["P"]));
    assert_eq!(
        sm.null_space_dim() as u64,
        want["null_space_dim"].as_u64().unwrap(),
        "{what}: null space"
    );
    let ranks: Vec<usize> = want["rank"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_u64().unwrap() as usize)
        .collect();
    assert_eq!(sm.ranks(), ranks.as_slice(), "{what}: ranks");
    for (got, want) in sm.penalty_scale().iter().zip(numbers(&want["S_scale"])) {
        assert!(
            (got - want).abs() <= TOL * want.abs(),
            "{what}: S.scale {got} vs {want}"
        );
    }
    worst
}

struct Data {
    x: Vec<f64>,
    x1: Vec<f64>,
    x2: Vec<f64>,
    f: Vec<String>,
    g: Vec<String>,
}

impl Data {
    fn from(v: &Value) -> Self {
        Self {
            x: numbers(&v["x"]),
            x1: numbers(&v["x1"]),
            x2: numbers(&v["x2"]),
            f: strings(&v["f"]),
            g: strings(&v["g"]),
        }
    }
}

/// Which of a data set's columns a term reads.
type Columns = fn(&Data) -> Vec<Column<'_>>;

fn specs() -> Vec<(&'static str, Spec, Columns)> {
    let x: Columns = |d| vec![Column::Numeric(&d.x)];
    let te: Columns = |d| vec![Column::Numeric(&d.x1), Column::Numeric(&d.x2)];
    let f: Columns = |d| vec![Column::Factor(&d.f)];
    vec![
        ("cr", Spec::Cr { k: 10 }, x),
        ("ps", Spec::Ps { k: 10, m: [2, 2] }, x),
        ("te", Spec::Te(vec![Spec::Cr { k: 5 }, Spec::Cr { k: 4 }]), te),
        (
            "te_ps",
            Spec::Te(vec![Spec::Ps { k: 6, m: [2, 2] }, Spec::Ps { k: 5, m: [2, 2] }]),
            te,
        ),
        ("re", Spec::Re, f),
    ]
}

#[test]
fn smooth_terms_match_mgcv() {
    let reference = reference();
    let mut worst = 0.0f64;
    for set in reference["datasets"].as_array().unwrap() {
        let name = set["name"].as_str().unwrap();
        let (data, new) = (Data::from(set), Data::from(&set["new"]));
        for (term, spec, columns) in specs() {
            let what = format!("{name} {term}");
            let sm = Smooth::new(term, &spec, &columns(&data)).unwrap();
            worst = worst.max(check_term(&what, &sm, &columns(&data), &columns(&new), &set[term]));
        }
    }
    eprintln!("smooth terms: worst relative error {worst:e}");
}

#[test]
fn knots_and_levels_match_mgcv() {
    let reference = reference();
    for set in reference["datasets"].as_array().unwrap() {
        let data = Data::from(set);
        let cr = Smooth::new("cr", &Spec::Cr { k: 10 }, &[Column::Numeric(&data.x)]).unwrap();
        let Basis::Cr(b) = cr.basis() else { panic!("a cr basis") };
        let want = numbers(&set["cr_knots"]);
        assert!(b
            .knots()
            .iter()
            .zip(&want)
            .all(|(a, w)| (a - w).abs() <= 1e-14 * w.abs().max(1.0)));
        let ps = Smooth::new("ps", &Spec::Ps { k: 10, m: [2, 2] }, &[Column::Numeric(&data.x)]).unwrap();
        let Basis::Ps(b) = ps.basis() else { panic!("a ps basis") };
        let want = numbers(&set["ps_knots"]);
        assert_eq!(b.knots().len(), want.len());
        assert!(b
            .knots()
            .iter()
            .zip(&want)
            .all(|(a, w)| (a - w).abs() <= 1e-13 * w.abs().max(1.0)));
        let re = Smooth::new("re", &Spec::Re, &[Column::Factor(&data.f)]).unwrap();
        let Basis::Re(b) = re.basis() else { panic!("a re basis") };
        assert_eq!(b.levels(), strings(&set["f_levels"]).as_slice());
    }
}

#[test]
fn treatment_contrasts_match_model_matrix() {
    let reference = reference();
    for set in reference["datasets"].as_array().unwrap() {
        let name = set["name"].as_str().unwrap();
        let (data, new) = (Data::from(set), Data::from(&set["new"]));
        let terms = [
            Parametric::Intercept,
            Parametric::Numeric { label: "x".into() },
            Parametric::factor("g", &data.g).unwrap(),
        ];
        let levels = strings(&set["g_levels"]);
        assert_eq!(
            terms[2],
            Parametric::Factor {
                label: "g".into(),
                levels
            }
        );
        for (d, key) in [(&data, "model_matrix"), (&new, "new_model_matrix")] {
            let got = model_matrix(&terms, d);
            let p = terms.iter().map(Parametric::dim).sum();
            relative_error(&format!("{name} {key}"), &got, p, &set[key]);
        }
    }
}

/// The parametric terms' columns side by side, as model.matrix binds them.
fn model_matrix(terms: &[Parametric], d: &Data) -> Vec<f64> {
    let terms: Vec<Term> = terms.iter().cloned().map(Term::Parametric).collect();
    let (x, g) = ([Column::Numeric(&d.x)], [Column::Factor(&d.g)]);
    let parts: Vec<(&Term, &[Column])> = vec![(&terms[0], &[]), (&terms[1], &x), (&terms[2], &g)];
    let (x, penalties) = gam::model_matrix(&parts, d.x.len()).unwrap();
    assert!(penalties.is_empty());
    x
}

/// y ~ g + x + s(x, bs = "cr", k = 10) + te(x1, x2, k = c(5, 4)) + s(f, bs = "re")
/// as gam(..., fit = FALSE) sets it up: the whole X and every penalty at
/// its offset.
#[test]
fn a_whole_model_matches_gam_setup() {
    let reference = reference();
    let set = &reference["datasets"][0];
    let d = Data::from(set);
    let (x, te, f, g) = (
        [Column::Numeric(&d.x)],
        [Column::Numeric(&d.x1), Column::Numeric(&d.x2)],
        [Column::Factor(&d.f)],
        [Column::Factor(&d.g)],
    );
    let smooth = |label: &str, spec: Spec, cols: &[Column]| Term::Smooth(Smooth::new(label, &spec, cols).unwrap());
    let terms = [
        Term::Parametric(Parametric::Intercept),
        Term::Parametric(Parametric::factor("g", &d.g).unwrap()),
        Term::Parametric(Parametric::Numeric { label: "x".into() }),
        smooth("s(x)", Spec::Cr { k: 10 }, &x),
        smooth("te(x1,x2)", Spec::Te(vec![Spec::Cr { k: 5 }, Spec::Cr { k: 4 }]), &te),
        smooth("s(f)", Spec::Re, &f),
    ];
    let columns: [&[Column]; 6] = [&[], &g, &x, &x, &te, &f];
    let parts: Vec<(&Term, &[Column])> = terms.iter().zip(columns).collect();
    let (design, penalties) = gam::model_matrix(&parts, d.x.len()).unwrap();
    let want = &reference["gam_setup"];
    let p = terms.iter().map(Term::dim).sum();
    let mut worst = relative_error("gam X", &design, p, &want["X"]);
    let offsets: Vec<usize> = want["off"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_u64().unwrap() as usize - 1)
        .collect();
    assert_eq!(penalties.iter().map(|b| b.start).collect::<Vec<_>>(), offsets);
    for (k, (b, w)) in penalties.iter().zip(want["S"].as_array().unwrap()).enumerate() {
        worst = worst.max(relative_error(&format!("gam S[{k}]"), &b.s, b.dim, w));
    }
    let names: Vec<String> = terms
        .iter()
        .flat_map(|t| match t {
            Term::Parametric(t) => t.column_names(),
            Term::Smooth(s) => (1..=s.dim()).map(|j| format!("{}.{j}", s.label())).collect(),
        })
        .collect();
    assert_eq!(names, strings(&want["term_names"]));
    eprintln!("gam setup: worst relative error {worst:e}");
}

#[test]
fn bad_input_names_the_term_the_value_and_the_rule() {
    let x: Vec<f64> = (0..30).map(|i| (i % 6) as f64).collect();
    let message = |spec: Spec, cols: &[Column]| Smooth::new("s(x)", &spec, cols).unwrap_err().to_string();
    let m = message(Spec::Cr { k: 2 }, &[Column::Numeric(&x)]);
    assert!(m.contains("s(x): k = 2") && m.contains("k >= 3"), "{m}");
    let m = message(Spec::Cr { k: 10 }, &[Column::Numeric(&x)]);
    assert!(m.contains("6 unique values") && m.contains("k = 10"), "{m}");
    let m = message(Spec::Ps { k: 3, m: [2, 2] }, &[Column::Numeric(&x)]);
    assert!(m.contains("k >= 4"), "{m}");
    let mut bad = x.clone();
    bad[4] = f64::NAN;
    let m = message(Spec::Ps { k: 5, m: [2, 2] }, &[Column::Numeric(&bad)]);
    assert!(m.contains("x[4] = NaN") && m.contains("finite"), "{m}");
    let m = message(
        Spec::Te(vec![Spec::Cr { k: 3 }, Spec::Re]),
        &[Column::Numeric(&x), Column::Numeric(&x)],
    );
    assert!(m.contains("margins are"), "{m}");
    let f: Vec<String> = (0..30).map(|i| ["a", "b", "c"][i % 3].to_string()).collect();
    let re = Smooth::new("s(f)", &Spec::Re, &[Column::Factor(&f)]).unwrap();
    let m = re
        .predict(&[Column::Factor(&["b".to_string(), "d".to_string()])])
        .unwrap_err()
        .to_string();
    assert!(
        m.contains("s(f): row 1") && m.contains("\"d\"") && m.contains("levels: a, b, c"),
        "{m}"
    );
    let g = Parametric::factor("g", &f).unwrap();
    let m = g
        .design(&[Column::Factor(&["z".to_string()])], 1)
        .unwrap_err()
        .to_string();
    assert!(m.contains("g: row 0") && m.contains("\"z\""), "{m}");
    let m = Parametric::factor("g", &f[..1]).unwrap_err().to_string();
    assert!(m.contains("2 or more levels"), "{m}");
    let m = message(Spec::Cr { k: 4 }, &[Column::Factor(&f)]);
    assert!(m.contains("numeric covariate"), "{m}");
}
