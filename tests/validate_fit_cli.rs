//! `examples/validate_fit` at a small size (n = 2,000, 2 seeds, CPU): the
//! JSON's summaries are its seeds' results. Each smooth's across-the-
//! function coverage is a share in [0, 1] for every seed, named H then L,
//! and the summary's mean and smallest are the seeds'; the lost shares
//! are the seeds' edf < 1.1; the coverage of all coefficients is the share
//! of z-errors within 1.96. (Whether the bars are met at this size is not
//! asked: the exit status is 0 or 4, never an error.)

mod common;

use serde_json::Value;

#[test]
fn validate_fit_summaries_are_its_seeds_results() {
    let dir = std::env::temp_dir().join(format!("validate_fit_cli_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("out.json");
    let out = std::process::Command::new(common::example_binary("validate_fit"))
        .args(["--n", "2000", "--seeds", "2", "--backend", "cpu", "--json"])
        .arg(&json)
        .output()
        .expect("cargo test builds the examples");
    let code = out.status.code();
    assert!(
        matches!(code, Some(0 | 4)),
        "{code:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    let f = |v: &Value| v.as_f64().unwrap();
    let atf = report["atf_coverage"].as_array().unwrap();
    let names: Vec<&str> = atf.iter().map(|s| s[0].as_str().unwrap()).collect();
    assert_eq!(names, ["H (score warp)", "L (link deviation)"]);
    for (k, smooth) in atf.iter().enumerate() {
        let seeds: Vec<f64> = results.iter().map(|r| f(&r["atf"][k])).collect();
        assert!(seeds.iter().all(|c| (0.0..=1.0).contains(c)), "{seeds:?}");
        let mean = seeds.iter().sum::<f64>() / seeds.len() as f64;
        assert!((f(&smooth[1]) - mean).abs() < 1e-15, "{smooth} vs {seeds:?}");
        assert_eq!(f(&smooth[2]), seeds.iter().copied().fold(f64::INFINITY, f64::min));
        let lost = results.iter().filter(|r| f(&r["edf"][k]) < 1.1).count() as f64 / 2.0;
        assert_eq!(f(&report["lost_share"][k][1]), lost);
    }
    let z: Vec<f64> = results
        .iter()
        .flat_map(|r| r["z"].as_array().unwrap().iter().map(f))
        .collect();
    let covered = z.iter().filter(|v| v.abs() <= 1.959_963_984_540_054).count() as f64 / z.len() as f64;
    assert_eq!(f(&report["coverage_all"]), covered);
}
