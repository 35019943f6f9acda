//! The CPU row evaluation against values recorded before the CPU's speed
//! work (#23), at commit 4e4cf63: intercepts, neglog and gradients of every
//! row and the Hessians of the first rows, for the seed shape (r = 20),
//! `fit_bms`' default shape (r = 16) and r = 33 with s_f = 0.8. Both the
//! fused evaluation (`BmsModel::evaluate`) and the bundle path
//! (`evaluate_bundled`, the device kernels' reference) must stay within
//! 1e-12 of them, relative to each row's largest entry. Regenerate only on
//! purpose: `cargo test --release --test rows_baseline -- --ignored`.

use matfree::bms::io::generator::{generate, GeneratorConfig};
use matfree::bms::{RowEvaluation, RowKernelInputs};
use serde::{Deserialize, Serialize};

const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/rows_baseline.json");

#[derive(Serialize, Deserialize)]
struct Case {
    label: String,
    config: [usize; 6],
    s_f: f64,
    r: usize,
    hess_rows: usize,
    intercept: Vec<f64>,
    neglog: Vec<f64>,
    grad: Vec<f64>,
    hess: Vec<f64>,
}

/// Each case with its tolerance: 1e-12 at the shapes; at r = 33
/// the Hessians' cell sums cancel more, and one-ulp changes of exp (the
/// branch-free exp of #23 against the library's) already move them by 1e-11
/// of the row's largest entry, in the bundle path as in the fused one.
fn configs() -> Vec<(&'static str, GeneratorConfig, usize, f64)> {
    let mut wide = GeneratorConfig::fit_shape(12, 5);
    (wide.p_h, wide.p_w, wide.s_f) = (20, 11, 0.8);
    vec![
        ("seed shape", GeneratorConfig::seed_shape(48), 6, 1e-12),
        ("fit shape", GeneratorConfig::fit_shape(48, 3), 6, 1e-12),
        ("r = 33, s_f = 0.8", wide, 4, 3e-11),
    ]
}

fn record(label: &str, cfg: GeneratorConfig, hess_rows: usize, e: &RowEvaluation) -> Case {
    let r = 2 + cfg.p_h + cfg.p_w;
    Case {
        label: label.into(),
        config: [cfg.n, cfg.p_m, cfg.p_g, cfg.p_h, cfg.p_w, cfg.seed as usize],
        s_f: cfg.s_f,
        r,
        hess_rows,
        intercept: e.intercept.clone(),
        neglog: e.neglog.clone(),
        grad: e.grad.clone(),
        hess: e.hess[..hess_rows * r * r].to_vec(),
    }
}

/// max |got - want| / max |want| over each row's chunk of `width` values.
fn worst(got: &[f64], want: &[f64], width: usize) -> f64 {
    got.chunks(width).zip(want.chunks(width)).fold(0.0, |m, (g, w)| {
        let scale = w.iter().fold(0.0f64, |s, v| s.max(v.abs())).max(f64::MIN_POSITIVE);
        g.iter().zip(w).fold(m, |m, (g, w)| m.max((g - w).abs() / scale))
    })
}

fn check(path: &str, case: &Case, e: &RowEvaluation, tol: f64) {
    let r = case.r;
    let parts = [
        ("intercept", worst(&e.intercept, &case.intercept, 1)),
        ("neglog", worst(&e.neglog, &case.neglog, 1)),
        ("grad", worst(&e.grad, &case.grad, r)),
        ("hess", worst(&e.hess[..case.hess.len()], &case.hess, r * r)),
    ];
    for (name, err) in parts {
        assert!(
            err <= tol,
            "{path}, {}: {name} off by {err:e} (relative to the row's largest)",
            case.label
        );
    }
}

#[test]
fn evaluations_match_the_recorded_values() {
    let cases: Vec<Case> = serde_json::from_str(&std::fs::read_to_string(PATH).expect("baseline file")).unwrap();
    assert_eq!(cases.len(), configs().len());
    for (case, (label, cfg, _, tol)) in cases.iter().zip(configs()) {
        assert_eq!(case.label, label);
        let g = generate(cfg).unwrap();
        check("fused", case, &g.model.evaluate(&g.data, &g.beta).unwrap(), tol);
        let bundled = g
            .model
            .evaluate_bundled(&g.data, &g.beta, &mut RowKernelInputs::default());
        check("bundled", case, &bundled.unwrap(), tol);
    }
}

#[test]
#[ignore = "writes tests/data/rows_baseline.json; run on purpose only"]
fn write_baseline() {
    let cases: Vec<Case> = configs()
        .into_iter()
        .map(|(label, cfg, hess_rows, _)| {
            let g = generate(cfg).unwrap();
            let e = g
                .model
                .evaluate_bundled(&g.data, &g.beta, &mut RowKernelInputs::default())
                .unwrap();
            record(label, cfg, hess_rows, &e)
        })
        .collect();
    std::fs::write(PATH, serde_json::to_string(&cases).unwrap()).unwrap();
}
