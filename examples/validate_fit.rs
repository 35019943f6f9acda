//! Coverage harness: simulate S seeds at a given n, fit each with REML, and
//! report every coefficient's z-error (estimate - truth) / SE, the share of
//! 95% intervals that cover the truth, the smoothing parameters and the
//! solver's work, as a table and JSON.
//!
//!     cargo run --release --example validate_fit -- --n 5000 --seeds 50 --json cov.json
//!
//! The bars (exit status 4 when one fails): every parametric coefficient
//! within 3 SE of the truth in every seed; the coverage of all coefficients
//! in [92%, 98%] when there are at least 300 intervals (else only reported);
//! every fit converged; lambda moved from its reference start; at least one
//! REML iteration.

use std::error::Error;
use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use matfree::bms::fit::progress::Display;
use matfree::bms::fit::{fit_on_device, FitOptions};
use matfree::bms::io::generator::{generate_on, Generated, GeneratorConfig};
use matfree::device::{check_cuda_support, select_device, GpuPolicy};
use serde::Serialize;

#[path = "shared/coverage.rs"]
mod coverage;
use coverage::{covered_share, CoefficientSummary, Z975};

#[derive(Parser, Debug)]
#[command(about = "Coverage of the BMS fit's intervals over simulated seeds")]
struct Args {
    /// Rows per data set.
    #[arg(long, default_value_t = 5_000)]
    n: usize,
    /// Number of seeds.
    #[arg(long, default_value_t = 10)]
    seeds: u64,
    /// First seed.
    #[arg(long, default_value_t = 1)]
    first_seed: u64,
    /// Score-warp basis dimension.
    #[arg(long, default_value_t = 8)]
    score_basis: usize,
    /// Link-deviation basis dimension.
    #[arg(long, default_value_t = 6)]
    link_basis: usize,
    /// auto, cpu or gpu.
    #[arg(long, default_value = "auto")]
    backend: String,
    /// Write the per-seed results and the summary as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One seed's fit.
#[derive(Serialize)]
struct SeedResult {
    seed: u64,
    converged: bool,
    termination: String,
    /// The REML score V at the fit.
    reml_score: Option<f64>,
    /// (estimate - truth) / SE per coefficient.
    z: Vec<f64>,
    lambda: Vec<f64>,
    rho_moved: Vec<f64>,
    edf: Vec<f64>,
    /// Across-the-function coverage of each smooth (H, then L).
    atf: Vec<f64>,
    reml_iterations: usize,
    first_newton_iterations: usize,
    evaluations: usize,
    fit_seconds: f64,
}

#[derive(Serialize)]
struct Summary {
    n: usize,
    seeds: u64,
    backend: String,
    coefficients: Vec<CoefficientSummary>,
    coverage_all: f64,
    coverage_parametric: f64,
    intervals: usize,
    converged: usize,
    /// Per smooth (the score warp H, the link deviation L): the share of
    /// seeds where REML shrank it to edf < 1.1 (a "lost" smooth; both
    /// truths are not zero).
    lost_share: Vec<(String, f64)>,
    /// Per smooth: the across-the-function coverage of its 95% band
    /// (Marra & Wood 2012) on a grid over its knots, mean and smallest
    /// over the seeds.
    atf_coverage: Vec<(String, f64, f64)>,
    bars: Vec<(String, bool)>,
    results: Vec<SeedResult>,
}

fn main() -> std::process::ExitCode {
    match run(Args::parse()) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(4),
        Err(e) => {
            eprintln!("validate_fit: error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

const P_M: usize = 3;
const P_G: usize = 2;

fn names(p_h: usize, p_w: usize) -> Vec<String> {
    let mut v = vec![
        "marginal:(Intercept)".to_string(),
        "marginal:x1".into(),
        "marginal:x2".into(),
        "slope:(Intercept)".into(),
        "slope:x1".into(),
    ];
    v.extend((1..=p_h).map(|k| format!("H:b{k}")));
    v.extend((1..=p_w).map(|k| format!("L:b{k}")));
    v
}

fn run(args: Args) -> Result<bool, Box<dyn Error>> {
    let policy = match args.backend.as_str() {
        "auto" => GpuPolicy::from_env()?,
        "cpu" => GpuPolicy::Off,
        "gpu" => {
            check_cuda_support("--backend", &args.backend)?;
            GpuPolicy::Required
        }
        other => return Err(format!("--backend {other:?}: must be auto, cpu or gpu").into()),
    };
    let device = select_device(policy)?;
    let mut backend = device.describe();
    let mut results = Vec::new();
    for seed in args.first_seed..args.first_seed + args.seeds {
        let g = generate_on(
            GeneratorConfig {
                n: args.n,
                p_m: P_M,
                p_g: P_G,
                p_h: args.score_basis,
                p_w: args.link_basis,
                s_f: 1.0,
                seed,
            },
            &device,
        )?;
        let t = Instant::now();
        let run = fit_on_device(&device, 1, &g.model, &g.data, &FitOptions::default(), Display::Quiet)?;
        backend = run.backend;
        let f = run.fit;
        let p = f.beta.len();
        let z = (0..p)
            .map(|j| {
                let se = f.covariance.as_ref().map_or(f64::NAN, |c| c[j * p + j].max(0.0).sqrt());
                (f.beta[j] - g.beta[j]) / se
            })
            .collect::<Vec<f64>>();
        let r = SeedResult {
            seed,
            converged: f.converged,
            termination: f.termination.clone(),
            reml_score: f.reml_score,
            z,
            rho_moved: f.lambda.iter().zip(&f.rho_ref).map(|(l, r)| l.ln() - r).collect(),
            lambda: f.lambda.clone(),
            edf: f.edf.blocks.clone(),
            atf: smooths_atf(&g, &f.beta, f.covariance.as_deref()),
            reml_iterations: f.reml_iterations,
            first_newton_iterations: f.first_newton_iterations,
            evaluations: f.evaluations,
            fit_seconds: t.elapsed().as_secs_f64(),
        };
        eprintln!(
            "seed {seed}: {} ({}), {} REML iterations, {} evaluations, {:.2} s, max |z| parametric {:.2}",
            if r.converged { "converged" } else { "NOT converged" },
            r.termination,
            r.reml_iterations,
            r.evaluations,
            r.fit_seconds,
            r.z[..P_M + P_G].iter().fold(0.0f64, |m, v| m.max(v.abs()))
        );
        results.push(r);
    }
    let summary = summarise(&args, backend, results);
    print!("{}", table(&summary));
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&summary)?)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(summary.bars.iter().all(|(_, ok)| *ok))
}

/// Grid points a smooth's band is checked at.
const ATF_GRID: usize = 200;

/// The across-the-function coverage of the score warp H(z) and the link
/// deviation L(t): the share of ATF_GRID points evenly over the basis's
/// knots where |f_hat - f| <= 1.96 se, f = B beta over the smooth's block,
/// se^2 = B V B^T; NaN for an absent smooth or without a covariance.
fn smooths_atf(g: &Generated, beta: &[f64], covariance: Option<&[f64]>) -> Vec<f64> {
    let (bases, p) = (g.model.bases(), beta.len());
    let h = P_M + P_G;
    let blocks = [(bases.score.as_ref(), h), (bases.link.as_ref(), h + bases.p_h())];
    blocks
        .into_iter()
        .map(|(basis, start)| {
            let (Some(basis), Some(v)) = (basis, covariance) else {
                return f64::NAN;
            };
            let k = basis.dim();
            let knots = basis.knots();
            let (lo, hi) = (knots[0], knots[knots.len() - 1]);
            let (mut x, mut d1, mut d2) = (vec![0.0; k], vec![0.0; k], vec![0.0; k]);
            let covered = (0..ATF_GRID)
                .filter(|&i| {
                    basis.eval(
                        lo + (hi - lo) * i as f64 / (ATF_GRID - 1) as f64,
                        &mut x,
                        &mut d1,
                        &mut d2,
                    );
                    let (mut fit, mut truth, mut var) = (0.0, 0.0, 0.0);
                    for a in 0..k {
                        fit += x[a] * beta[start + a];
                        truth += x[a] * g.beta[start + a];
                        var += x[a] * (0..k).map(|b| v[(start + a) * p + start + b] * x[b]).sum::<f64>();
                    }
                    (fit - truth).abs() <= Z975 * var.max(0.0).sqrt()
                })
                .count();
            covered as f64 / ATF_GRID as f64
        })
        .collect()
}

fn summarise(args: &Args, backend: String, results: Vec<SeedResult>) -> Summary {
    let names = names(args.score_basis, args.link_basis);
    let coefficients: Vec<CoefficientSummary> = names
        .iter()
        .enumerate()
        .map(|(j, name)| CoefficientSummary::new(name, &results.iter().map(|r| r.z[j]).collect::<Vec<f64>>()))
        .collect();
    let all: Vec<f64> = results.iter().flat_map(|r| r.z.iter().copied()).collect();
    let parametric: Vec<f64> = results.iter().flat_map(|r| r.z[..P_M + P_G].iter().copied()).collect();
    let coverage_all = covered_share(&all);
    let converged = results.iter().filter(|r| r.converged).count();
    let lost_share = ["H (score warp)", "L (link deviation)"]
        .iter()
        .enumerate()
        .map(|(k, name)| {
            let lost = results
                .iter()
                .filter(|r| r.edf.get(k).is_some_and(|e| *e < 1.1))
                .count();
            (name.to_string(), lost as f64 / results.len().max(1) as f64)
        })
        .collect();
    let atf_coverage = ["H (score warp)", "L (link deviation)"]
        .iter()
        .enumerate()
        .filter(|(k, _)| results.iter().any(|r| !r.atf[*k].is_nan()))
        .map(|(k, name)| {
            let c: Vec<f64> = results.iter().map(|r| r.atf[k]).collect();
            let mean = c.iter().sum::<f64>() / c.len().max(1) as f64;
            (name.to_string(), mean, c.iter().copied().fold(f64::INFINITY, f64::min))
        })
        .collect();
    let mut bars = vec![
        (
            "every parametric coefficient within 3 SE".to_string(),
            parametric.iter().all(|z| z.abs() <= 3.0),
        ),
        ("every fit converged".into(), converged == results.len()),
        (
            "lambda moved from its reference start".into(),
            results.iter().all(|r| r.rho_moved.iter().all(|m| m.abs() > 1e-3)),
        ),
        (
            "at least one REML iteration".into(),
            results.iter().all(|r| r.reml_iterations > 0),
        ),
    ];
    if all.len() >= 300 {
        bars.push((
            "coverage of all coefficients in [92%, 98%]".into(),
            (0.92..=0.98).contains(&coverage_all),
        ));
    }
    Summary {
        n: args.n,
        seeds: args.seeds,
        backend,
        coefficients,
        coverage_all,
        coverage_parametric: covered_share(&parametric),
        intervals: all.len(),
        converged,
        lost_share,
        atf_coverage,
        bars,
        results,
    }
}

fn table(s: &Summary) -> String {
    let mut out = format!(
        "Coverage of 95% intervals: n = {}, {} seeds, {}\n\n",
        s.n, s.seeds, s.backend
    );
    out += &format!(
        "{:<22} {:>8} {:>8} {:>10} {:>9}\n",
        "coefficient", "mean z", "sd z", "max |z|", "coverage"
    );
    for c in &s.coefficients {
        out += &format!(
            "{:<22} {:>8.3} {:>8.3} {:>10.3} {:>8.1}%\n",
            c.name,
            c.mean_z,
            c.sd_z,
            c.max_abs_z,
            100.0 * c.coverage
        );
    }
    let evals: Vec<usize> = s.results.iter().map(|r| r.evaluations).collect();
    let reml: Vec<usize> = s.results.iter().map(|r| r.reml_iterations).collect();
    let secs: Vec<f64> = s.results.iter().map(|r| r.fit_seconds).collect();
    let range = |v: &[usize]| format!("{}-{}", v.iter().min().unwrap_or(&0), v.iter().max().unwrap_or(&0));
    out += &format!(
        "\ncoverage: all coefficients {:.1}% of {} intervals, parametric {:.1}%\n",
        100.0 * s.coverage_all,
        s.intervals,
        100.0 * s.coverage_parametric
    );
    out += &format!(
        "converged {}/{}; REML iterations {}; evaluations {} (mean {:.1}); fit time {:.2}-{:.2} s\n",
        s.converged,
        s.results.len(),
        range(&reml),
        range(&evals),
        evals.iter().sum::<usize>() as f64 / evals.len().max(1) as f64,
        secs.iter().cloned().fold(f64::INFINITY, f64::min),
        secs.iter().cloned().fold(0.0, f64::max),
    );
    for (smooth, share) in &s.lost_share {
        out += &format!("lost (edf < 1.1): {smooth} {:.1}% of seeds\n", 100.0 * share);
    }
    for (smooth, mean, min) in &s.atf_coverage {
        out += &format!(
            "across-the-function coverage (Marra & Wood 2012): {smooth} mean {:.1}%, smallest {:.1}%\n",
            100.0 * mean,
            100.0 * min
        );
    }
    for (bar, ok) in &s.bars {
        out += &format!("bar: {bar}: {}\n", if *ok { "met" } else { "MISSED" });
    }
    out
}
