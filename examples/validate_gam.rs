//! Validation of GAM fits over seeds (the twin of `validate_fit` for
//! `gam::Gam`): for each family, simulate data sets from known smooth
//! truths, fit each by REML and report how the fits' intervals and edf
//! behave, as a table and JSON.
//!
//!     cargo run --release --example validate_gam -- --n 2000 --seeds 50 --json gam.json
//!
//! The model, for every family:
//!
//! ```text
//! eta = b0 + bz z + c (f0(x0) + f1(x1) + f2(x2) + f3(x3))
//! y ~ g^-1(eta) [ + offset(log_t) for the Poisson ]
//! formula: y ~ z + s(x0, bs = "cr") + s(x1, bs = "cr") + s(x2, bs = "ps") + s(x3, bs = "cr")
//! ```
//!
//! with gamSim's test functions (mgcv's `gamSim(1)`): f0 = 2 sin(pi x),
//! f1 = exp(2 x), f2 = 0.2 x^11 (10 (1 - x))^6 + 10 (10 x)^3 (1 - x)^10,
//! f3 = 0; x0..x3 and z uniform on [0, 1]; c, b0 and bz per family (see
//! [`Setting`]). The Poisson counts have an exposure t in [0.5, 2]
//! (`offset(log_t)`); the Gamma has shape 4.
//!
//! What is reported, per family:
//! - (a) the coverage of the 95% intervals (estimate +- 1.96 sqrt diag Vp)
//!   of the parametric coefficients over the seeds. The smooths are
//!   centred over the data (mgcv's sum-to-zero constraint), so the
//!   intercept's truth in a seed is b0 + c sum_j mean_i f_j(x_ij);
//! - (b) the across-the-function coverage of each smooth (Marra & Wood
//!   2012): the share of the data's covariate values where the true
//!   function, centred over the data as the fit's is, lies within the
//!   fit +- 1.96 SE (the SE from the term's block of Vp), averaged over
//!   the seeds;
//! - (c) each smooth's edf (mean, range) and the share of seeds where REML
//!   shrank a smooth whose truth is not zero to edf < 1.1 ("lost": its
//!   curvature penalised away);
//! - (d) how many fits converged.
//!
//! Exit status 4 when a fit failed or did not converge.

use std::error::Error;
use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use matfree::gam::{Column, Distribution, Family, Gam, GamFit, GamModel, GamOptions, Term};
use matfree::rng::Rng;
use matfree::solvers::CpuBackend;
use serde::Serialize;

#[path = "shared/coverage.rs"]
mod coverage;
use coverage::{covered_share, CoefficientSummary, Z975};

#[derive(Parser, Debug)]
#[command(about = "Coverage and edf of GAM fits (mgcv's gam, REML) over simulated seeds")]
struct Args {
    /// Rows per data set.
    #[arg(long, default_value_t = 2_000)]
    n: usize,
    /// Seeds per family.
    #[arg(long, default_value_t = 10)]
    seeds: u64,
    /// First seed.
    #[arg(long, default_value_t = 1)]
    first_seed: u64,
    /// The families, comma-separated (binomial, poisson, gaussian, Gamma).
    #[arg(long, default_value = "binomial,poisson,gaussian,Gamma")]
    families: String,
    /// Write the per-seed results and the summaries as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write each simulated data set here as <family>_<seed>.csv (to fit
    /// it with mgcv too).
    #[arg(long)]
    write_data: Option<PathBuf>,
}

const FORMULA: &str = "y ~ z + s(x0, bs = \"cr\") + s(x1, bs = \"cr\") + s(x2, bs = \"ps\") + s(x3, bs = \"cr\")";
const SMOOTHS: [&str; 4] = ["s(x0)", "s(x1)", "s(x2)", "s(x3)"];
const PARAMETRIC: [&str; 2] = ["(Intercept)", "z"];
/// A smooth shrunk below this edf is "lost" (where its truth is not zero).
const LOST_EDF: f64 = 1.1;

/// gamSim(1)'s test functions; f3 is zero.
fn truth(j: usize, x: f64) -> f64 {
    match j {
        0 => 2.0 * (std::f64::consts::PI * x).sin(),
        1 => (2.0 * x).exp(),
        2 => 0.2 * x.powi(11) * (10.0 * (1.0 - x)).powi(6) + 10.0 * (10.0 * x).powi(3) * (1.0 - x).powi(10),
        _ => 0.0,
    }
}

/// One family's truth: eta = b0 + bz z + c sum_j f_j(x_j) (+ log t).
#[derive(Clone, Copy, Debug)]
struct Setting {
    distribution: Distribution,
    /// The smooths' multiplier.
    c: f64,
    b0: f64,
    bz: f64,
}

impl Setting {
    /// gamSim's scales: the binary (f - 5) / 3, the Poisson 0.2 f; the
    /// Gaussian's noise sd 2; the Gamma's 0.2 f on the log scale.
    fn of(distribution: Distribution) -> Self {
        let (c, b0, bz) = match distribution {
            Distribution::Binomial => (1.0 / 3.0, -5.0 / 3.0, 0.8),
            Distribution::Poisson => (0.2, -0.5, 0.6),
            Distribution::Gaussian => (1.0, 1.0, 1.5),
            Distribution::Gamma => (0.2, 0.3, -0.5),
        };
        Self {
            distribution,
            c,
            b0,
            bz,
        }
    }

    /// A response at eta (the Gaussian's sd 2, the Gamma's shape 4).
    fn draw(&self, eta: f64, rng: &mut Rng) -> f64 {
        let mu = self.family().link().linkinv(eta);
        match self.distribution {
            Distribution::Binomial => f64::from(rng.uniform() < mu),
            Distribution::Poisson => poisson(mu, rng),
            Distribution::Gaussian => mu + 2.0 * rng.normal(),
            Distribution::Gamma => gamma(4.0, rng) * mu / 4.0,
        }
    }

    /// The family as fitted: the canonical link, but the log for the Gamma.
    fn family(&self) -> Family {
        match self.distribution {
            Distribution::Gamma => {
                Family::new(Distribution::Gamma, matfree::gam::Link::Log).expect("log is a Gamma link")
            }
            d => Family::canonical(d),
        }
    }
}

/// A Poisson count by inversion (the means here stay below ~100, where
/// e^-mu and the running sums keep their digits).
fn poisson(mu: f64, rng: &mut Rng) -> f64 {
    let u = rng.uniform();
    let (mut k, mut p) = (0.0, (-mu).exp());
    let mut cdf = p;
    while u > cdf && p > 0.0 {
        k += 1.0;
        p *= mu / k;
        cdf += p;
    }
    k
}

/// A Gamma(shape, 1) variate, shape >= 1 (Marsaglia & Tsang 2000).
fn gamma(shape: f64, rng: &mut Rng) -> f64 {
    let d = shape - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = rng.normal();
        let v = (1.0 + c * x).powi(3);
        if v > 0.0 && rng.uniform().ln() < 0.5 * x * x + d - d * v + d * v.ln() {
            return d * v;
        }
    }
}

/// One simulated data set: the columns, and the truths the fit estimates.
struct Simulated {
    columns: Vec<(&'static str, Vec<f64>)>,
    /// (Intercept) and z as the fit parametrises them.
    parametric: [f64; 2],
    /// Each smooth's truth at the data, centred over the data.
    smooths: Vec<Vec<f64>>,
}

fn simulate(s: &Setting, n: usize, seed: u64) -> Simulated {
    let mut rng = Rng::new(seed.wrapping_mul(4).wrapping_add(s.distribution as u64));
    let mut unif = |n: usize| (0..n).map(|_| rng.uniform()).collect::<Vec<f64>>();
    let (z, x): (Vec<f64>, Vec<Vec<f64>>) = (unif(n), (0..4).map(|_| unif(n)).collect());
    let log_t: Vec<f64> = unif(n).iter().map(|u| (0.5 + 1.5 * u).ln()).collect();
    let raw: Vec<Vec<f64>> = (0..4)
        .map(|j| x[j].iter().map(|v| s.c * truth(j, *v)).collect())
        .collect();
    let means: Vec<f64> = raw.iter().map(|f| f.iter().sum::<f64>() / n as f64).collect();
    let poisson = s.distribution == Distribution::Poisson;
    let y = (0..n)
        .map(|i| {
            let eta = s.b0 + s.bz * z[i] + raw.iter().map(|f| f[i]).sum::<f64>();
            s.draw(eta + if poisson { log_t[i] } else { 0.0 }, &mut rng)
        })
        .collect();
    let smooths = raw
        .iter()
        .zip(&means)
        .map(|(f, m)| f.iter().map(|v| v - m).collect())
        .collect();
    let mut columns = vec![("y", y), ("z", z), ("x0", x[0].clone()), ("x1", x[1].clone())];
    columns.extend([("x2", x[2].clone()), ("x3", x[3].clone())]);
    if poisson {
        columns.push(("log_t", log_t));
    }
    Simulated {
        columns,
        parametric: [s.b0 + means.iter().sum::<f64>(), s.bz],
        smooths,
    }
}

/// One seed's fit.
#[derive(Serialize)]
struct SeedResult {
    seed: u64,
    /// Why the fit failed, if it did (then nothing else is filled in).
    error: Option<String>,
    converged: bool,
    /// How the (last) REML solve stopped.
    termination: String,
    /// The projected |dV/drho|_inf where it stopped (edf units).
    projected_gradient: Option<f64>,
    /// Smooths whose sp ended at the solver's upper bound.
    at_upper_bound: usize,
    /// (estimate - truth) / SE of (Intercept) and z.
    z: Vec<f64>,
    /// Each smooth's across-the-function coverage.
    coverage: Vec<f64>,
    /// Each smooth's edf.
    edf: Vec<f64>,
    fit_seconds: f64,
}

fn fit_seed(s: &Setting, args: &Args, seed: u64) -> Result<SeedResult, Box<dyn Error>> {
    let sim = simulate(s, args.n, seed);
    if let Some(dir) = &args.write_data {
        let file = dir.join(format!("{}_{seed}.csv", s.distribution.name()));
        matfree::files::write(&file, csv(&sim.columns).as_bytes())?;
    }
    let formula = match s.distribution {
        Distribution::Poisson => format!("{FORMULA} + offset(log_t)"),
        _ => FORMULA.to_string(),
    };
    let t = Instant::now();
    let fitted = fit_model(&formula, s.family(), &sim);
    let fit_seconds = t.elapsed().as_secs_f64();
    Ok(match fitted {
        Ok((model, fit)) => measure(&model, &fit, &sim, seed, fit_seconds),
        Err(e) => SeedResult {
            seed,
            error: Some(e.to_string()),
            converged: false,
            termination: String::new(),
            projected_gradient: None,
            at_upper_bound: 0,
            z: Vec::new(),
            coverage: Vec::new(),
            edf: Vec::new(),
            fit_seconds,
        },
    })
}

/// The columns as CSV, every double to its last digit.
fn csv(columns: &[(&str, Vec<f64>)]) -> String {
    let names: Vec<&str> = columns.iter().map(|(k, _)| *k).collect();
    let mut out = names.join(",") + "\n";
    for i in 0..columns[0].1.len() {
        let row: Vec<String> = columns.iter().map(|(_, v)| format!("{:?}", v[i])).collect();
        out += &(row.join(",") + "\n");
    }
    out
}

/// The model set up on the simulated columns and its REML fit on the CPU.
fn fit_model(formula: &str, family: Family, sim: &Simulated) -> matfree::Result<(GamModel, GamFit)> {
    let columns: Vec<(&str, Column)> = sim.columns.iter().map(|(k, v)| (*k, Column::Numeric(v))).collect();
    let model = Gam::new(formula, family)?.setup(&columns)?;
    let fit = model.fit_on(&CpuBackend::new(), &model.objective()?, &GamOptions::default())?;
    Ok((model, fit))
}

/// (a)-(c) of one fit against its truths.
fn measure(model: &GamModel, fit: &GamFit, sim: &Simulated, seed: u64, fit_seconds: f64) -> SeedResult {
    let se = fit.standard_errors();
    let z = PARAMETRIC
        .iter()
        .zip(sim.parametric)
        .map(|(name, truth)| {
            let j = fit
                .names
                .iter()
                .position(|n| n == name)
                .expect("the formula's coefficient");
            (fit.coefficients[j] - truth) / se[j]
        })
        .collect();
    let rho: Vec<f64> = fit.sp.iter().map(|sp| (sp / fit.reml_scale).ln()).collect();
    let smooth_terms = model.terms().iter().filter(|t| matches!(t.term, Term::Smooth(_)));
    let coverage = smooth_terms
        .zip(&sim.smooths)
        .map(|(t, truth)| across_the_function(model, fit, t.range.clone(), truth))
        .collect();
    SeedResult {
        seed,
        error: None,
        converged: fit.converged,
        termination: format!("{:?}", fit.report.termination),
        projected_gradient: fit.report.projected_gradient,
        at_upper_bound: fit.report.at_upper_bound(&rho).len(),
        z,
        coverage,
        edf: fit.smooth_edf().into_iter().map(|(_, e)| e).collect(),
        fit_seconds,
    }
}

/// The share of rows where |X_j beta_j - truth| <= 1.96 sqrt(X_j Vp_jj X_j^T),
/// j the term's coefficients.
fn across_the_function(model: &GamModel, fit: &GamFit, range: std::ops::Range<usize>, truth: &[f64]) -> f64 {
    let p = fit.coefficients.len();
    let x = model.designs().matrix(0);
    let covered = truth.iter().enumerate().filter(|(i, t)| {
        let xi = &x[i * p..(i + 1) * p];
        let value: f64 = range.clone().map(|a| xi[a] * fit.coefficients[a]).sum();
        let var: f64 = range
            .clone()
            .map(|a| xi[a] * range.clone().map(|b| fit.vp[a * p + b] * xi[b]).sum::<f64>())
            .sum();
        (value - *t).abs() <= Z975 * var.max(0.0).sqrt()
    });
    covered.count() as f64 / truth.len() as f64
}

/// A smooth over the seeds.
#[derive(Serialize)]
struct SmoothSummary {
    label: String,
    truth_is_zero: bool,
    /// Across-the-function coverage, mean and smallest over the seeds.
    coverage_mean: f64,
    coverage_min: f64,
    edf_mean: f64,
    edf_min: f64,
    edf_max: f64,
    /// The share of seeds with edf < 1.1 (`None` for a zero truth).
    lost_share: Option<f64>,
}

#[derive(Serialize)]
struct FamilySummary {
    family: String,
    link: String,
    formula: String,
    seeds: usize,
    converged: usize,
    failed: usize,
    coefficients: Vec<CoefficientSummary>,
    coverage_parametric: f64,
    smooths: Vec<SmoothSummary>,
    fit_seconds_mean: f64,
    results: Vec<SeedResult>,
}

#[derive(Serialize)]
struct Report {
    n: usize,
    seeds: u64,
    first_seed: u64,
    families: Vec<FamilySummary>,
}

fn main() -> std::process::ExitCode {
    match run(Args::parse()) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(4),
        Err(e) => {
            eprintln!("validate_gam: error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<bool, Box<dyn Error>> {
    let distributions = args
        .families
        .split(',')
        .map(|f| f.trim().parse::<Distribution>())
        .collect::<matfree::Result<Vec<_>>>()?;
    if args.seeds == 0 || args.n < 100 {
        return Err(format!(
            "--seeds {} --n {}: need a seed and at least 100 rows",
            args.seeds, args.n
        )
        .into());
    }
    let mut families = Vec::new();
    for d in distributions {
        let s = Setting::of(d);
        let mut results = Vec::new();
        for seed in args.first_seed..args.first_seed + args.seeds {
            let r = fit_seed(&s, &args, seed)?;
            eprintln!("{} seed {seed}: {}", d.name(), progress(&r));
            results.push(r);
        }
        families.push(summarise(&s, results));
    }
    let report = Report {
        n: args.n,
        seeds: args.seeds,
        first_seed: args.first_seed,
        families,
    };
    print!("{}", table(&report));
    if let Some(path) = &args.json {
        matfree::files::write(path, serde_json::to_string_pretty(&report)?.as_bytes())?;
    }
    Ok(report.families.iter().all(|f| f.converged == f.seeds))
}

fn progress(r: &SeedResult) -> String {
    match &r.error {
        Some(e) => format!("FAILED: {e}"),
        None => format!(
            "{} ({}, gradient {:.1e}, {} at the upper bound), edf {:.2?}, coverage {:.2?}, {:.2} s",
            if r.converged { "converged" } else { "NOT converged" },
            r.termination,
            r.projected_gradient.unwrap_or(f64::NAN),
            r.at_upper_bound,
            r.edf,
            r.coverage,
            r.fit_seconds
        ),
    }
}

/// Mean, sd, smallest and largest of v.
fn moments(v: &[f64]) -> (f64, f64, f64, f64) {
    let k = v.len().max(1) as f64;
    let mean = v.iter().sum::<f64>() / k;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (k - 1.0).max(1.0);
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    (
        mean,
        var.sqrt(),
        min,
        v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    )
}

fn summarise(s: &Setting, results: Vec<SeedResult>) -> FamilySummary {
    let ok: Vec<&SeedResult> = results.iter().filter(|r| r.error.is_none()).collect();
    let column = |f: &dyn Fn(&SeedResult) -> f64| ok.iter().map(|r| f(r)).collect::<Vec<f64>>();
    let coefficients = PARAMETRIC
        .iter()
        .enumerate()
        .map(|(j, name)| CoefficientSummary::new(name, &column(&|r| r.z[j])))
        .collect();
    let smooths = SMOOTHS
        .iter()
        .enumerate()
        .map(|(j, label)| {
            let (coverage, edf) = (column(&|r| r.coverage[j]), column(&|r| r.edf[j]));
            let (coverage_mean, _, coverage_min, _) = moments(&coverage);
            let (edf_mean, _, edf_min, edf_max) = moments(&edf);
            let truth_is_zero = j == 3;
            let lost = edf.iter().filter(|e| **e < LOST_EDF).count() as f64 / edf.len().max(1) as f64;
            SmoothSummary {
                label: label.to_string(),
                truth_is_zero,
                coverage_mean,
                coverage_min,
                edf_mean,
                edf_min,
                edf_max,
                lost_share: (!truth_is_zero).then_some(lost),
            }
        })
        .collect();
    let z_all: Vec<f64> = ok.iter().flat_map(|r| r.z.iter().copied()).collect();
    let family = s.family();
    FamilySummary {
        family: s.distribution.name().into(),
        link: family.link().name().into(),
        formula: FORMULA.into(),
        seeds: results.len(),
        converged: results.iter().filter(|r| r.converged).count(),
        failed: results.len() - ok.len(),
        coefficients,
        coverage_parametric: covered_share(&z_all),
        smooths,
        fit_seconds_mean: moments(&column(&|r| r.fit_seconds)).0,
        results,
    }
}

fn table(r: &Report) -> String {
    let mut out = format!(
        "GAM validation: n = {}, seeds {}..{}, formula {FORMULA} (+ offset(log_t) for the Poisson)\n",
        r.n,
        r.first_seed,
        r.first_seed + r.seeds - 1
    );
    for f in &r.families {
        out += &format!(
            "\n{} ({} link): converged {}/{} ({} failed), mean fit {:.2} s\n",
            f.family, f.link, f.converged, f.seeds, f.failed, f.fit_seconds_mean
        );
        out += &format!(
            "  {:<12} {:>8} {:>8} {:>9} {:>9}\n",
            "coefficient", "mean z", "sd z", "max |z|", "coverage"
        );
        for c in &f.coefficients {
            out += &format!(
                "  {:<12} {:>8.3} {:>8.3} {:>9.3} {:>8.1}%\n",
                c.name,
                c.mean_z,
                c.sd_z,
                c.max_abs_z,
                100.0 * c.coverage
            );
        }
        out += &format!(
            "  {:<12} {:>14} {:>9} {:>8} {:>15} {:>7}\n",
            "smooth", "truth", "ATF cov", "min", "edf mean (range)", "lost"
        );
        for s in &f.smooths {
            let lost = s.lost_share.map_or("-".to_string(), |l| format!("{:.1}%", 100.0 * l));
            out += &format!(
                "  {:<12} {:>14} {:>8.1}% {:>7.1}% {:>6.2} ({:.2}-{:.2}) {:>7}\n",
                s.label,
                if s.truth_is_zero { "zero" } else { "gamSim f" },
                100.0 * s.coverage_mean,
                100.0 * s.coverage_min,
                s.edf_mean,
                s.edf_min,
                s.edf_max,
                lost
            );
        }
    }
    out += "\nATF cov: across-the-function coverage of the 95% bands (Marra & Wood 2012), mean and smallest over the seeds;\n";
    out += "lost: the share of seeds with edf < 1.1 for a smooth whose truth is not zero.\n";
    out
}
