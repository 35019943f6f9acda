//! Fit the Bernoulli marginal-slope model end to end, as a user would.
//!
//!     cargo run --release --example fit_bms                      # simulate and fit
//!     cargo run --release --example fit_bms -- --data d.csv --label y --score z \
//!         --marginal x1,x2 --slope x1 --json fit.json --plot smooths.svg
//!
//! Smoothing parameters are chosen by REML (LAML) unless `--lambda` fixes
//! them; the GPU is used when one is found (`--backend` overrides), every
//! visible GPU unless `--gpus N` says how many (rows sharded over them).

use std::error::Error;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;
use matfree::bms::fit::{fit_on_device, BmsFit, FitOptions};
use matfree::bms::predict::extrapolation_notes;
use matfree::bms::problem::{ModelShape, Problem};
use matfree::bms::progress::Display;
use matfree::bms::report::{DesignNames, FitSummary};
use matfree::bms::saved::SavedFit;
use matfree::bms::summary::smooth_panels;
#[cfg(feature = "cuda")]
use matfree::cuda::Gpu;
use matfree::data::{empty_rows_note, ColumnSpec};
use matfree::device::{check_cuda_support, select_device, Device, GpuPolicy};
use matfree::files;
use matfree::plot::smooths_svg;

type AnyResult<T> = Result<T, Box<dyn Error>>;

/// Rows simulated by default on the GPU, and on the CPU (a row evaluation
/// costs about 50 us a row and core there at this shape, and a fit takes
/// 15-30 of them: a 2-core machine fits 60,000 rows in about 45 s).
const GPU_DEFAULT_ROWS: usize = 200_000;
const CPU_DEFAULT_ROWS: usize = 60_000;

#[derive(Parser, Debug)]
#[command(
    about = "Fit the Bernoulli marginal-slope model (REML smoothing selection) on CPU or GPU",
    after_help = EXIT_STATUS_HELP
)]
struct Args {
    /// Simulate this many rows (default 200,000 on a GPU, 60,000 on the CPU).
    #[arg(long, conflicts_with = "data")]
    simulate: Option<usize>,
    /// Seed of the simulation.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Fit a CSV file instead of simulated data.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Label column (0/1).
    #[arg(long, default_value = "y")]
    label: String,
    /// Standardised score column.
    #[arg(long, default_value = "z")]
    score: String,
    /// Fit the score as given, even when it is not standardised (by
    /// default a score whose mean is beyond 0.25 or whose sd is beyond a
    /// factor 1.5 of 1 is standardised, with a note).
    #[arg(long)]
    keep_score: bool,
    /// Optional weight column (> 0).
    #[arg(long)]
    weights: Option<String>,
    /// Comma-separated covariates of the marginal design (an intercept is added).
    #[arg(long, value_delimiter = ',')]
    marginal: Vec<String>,
    /// Comma-separated covariates of the slope design (an intercept is added).
    #[arg(long, value_delimiter = ',')]
    slope: Vec<String>,
    /// Basis dimension of the score warp H(z) (0: none).
    #[arg(long, default_value_t = 8)]
    score_basis: usize,
    /// Basis dimension of the link deviation L(t) (0: none).
    #[arg(long, default_value_t = 6)]
    link_basis: usize,
    /// Fix the smoothing parameters (comma-separated, one per smooth) instead of REML.
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true)]
    lambda: Option<Vec<f64>>,
    /// auto, cpu or gpu.
    #[arg(long, default_value = "auto")]
    backend: String,
    /// GPUs to use (default: every visible one); more than one shards the
    /// rows over them and combines the products through NCCL.
    #[arg(long)]
    gpus: Option<usize>,
    /// Standard deviation of a Gaussian frailty (0: none).
    #[arg(long, default_value_t = 0.0)]
    frailty_sd: f64,
    /// Inner Newton tolerance on the Newton decrement g^T (H + S)^{-1} g
    /// (absolute: the squared distance to the optimum in standard errors).
    #[arg(long, default_value_t = 1e-10)]
    newton_tol: f64,
    /// REML tolerance on |dV/drho| (absolute, in effective degrees of freedom).
    #[arg(long, default_value_t = 1e-3)]
    reml_tol: f64,
    /// On one GPU, keep the PCG's Hessian products on the f64 row Hessians
    /// (by default they read packed f32 copies, half the bytes; the
    /// gradient, dense steps and log-determinants are f64 either way).
    #[arg(long)]
    f64_hvp: bool,
    /// Write the summary as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw the fitted smooths with 95% bands as SVG here.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Save the fit (model, coefficients, covariance, smoothing parameters)
    /// here as JSON, to load with `matfree::bms::saved::SavedFit::load`.
    #[arg(long)]
    save: Option<PathBuf>,
    /// Print only the result: no progress, no phase lines on stderr.
    #[arg(long, conflicts_with = "verbose")]
    quiet: bool,
    /// A line per objective evaluation and per Newton and REML iteration
    /// (default: one live status line on a terminal, a line per REML
    /// iteration when stderr is not a terminal).
    #[arg(long)]
    verbose: bool,
    /// Predict from a fit saved with --save instead of fitting (with
    /// --predict and --out).
    #[arg(long, requires_all = ["predict", "out"], conflicts_with_all = ["data", "simulate", "lambda", "json", "plot", "save"])]
    model: Option<PathBuf>,
    /// New rows to predict (CSV with the saved fit's score and covariate
    /// columns; other columns, a label among them, are ignored).
    #[arg(long, requires = "model")]
    predict: Option<PathBuf>,
    /// Write the predictions here (CSV: row, p, eta, se_eta).
    #[arg(long, requires = "model")]
    out: Option<PathBuf>,
}

/// Exit statuses (also in `--help` and the README): a fit's outcome and
/// whether every output was written are both visible.
mod status {
    /// The fit converged and every output was written.
    pub const CONVERGED: u8 = 0;
    /// Bad input or a failure before the fit ended: nothing was fitted.
    pub const ERROR: u8 = 1;
    /// The fit ran to the end without converging; its summary and outputs
    /// are still written, marked so, with the reason.
    pub const NOT_CONVERGED: u8 = 3;
    /// The fit converged but an output could not be written (every other
    /// output was).
    pub const OUTPUT_FAILED: u8 = 4;
    /// The fit did not converge and an output could not be written.
    pub const NOT_CONVERGED_OUTPUT_FAILED: u8 = 5;
}

const EXIT_STATUS_HELP: &str = "Exit status: 0 converged (or predicted) and every output written; 1 bad input or a \
failure before the fit ended; 2 a bad command line; 3 the fit did not converge (the best fit found is still printed \
and written, marked so); 4 an output could not be written after a converged fit (or a prediction), every other \
output kept; 5 the fit did not converge and an output could not be written.";

/// How a run ended: whether the fit converged, and the outputs that could
/// not be written (each message names its flag and path).
struct Outcome {
    converged: bool,
    failed_outputs: Vec<String>,
}

impl Outcome {
    fn status(&self) -> u8 {
        match (self.converged, self.failed_outputs.is_empty()) {
            (true, true) => status::CONVERGED,
            (true, false) => status::OUTPUT_FAILED,
            (false, true) => status::NOT_CONVERGED,
            (false, false) => status::NOT_CONVERGED_OUTPUT_FAILED,
        }
    }
}

fn main() -> std::process::ExitCode {
    let code = match run(Args::parse()) {
        Ok(outcome) => {
            for failure in &outcome.failed_outputs {
                say(&format!("fit_bms: error: {failure}"));
            }
            let code = outcome.status();
            if !outcome.converged {
                say(&format!(
                    "fit_bms: the fit did not converge (exit status {code}); the best fit found is reported"
                ));
            }
            code
        }
        Err(e) => {
            say(&format!("fit_bms: error: {e}"));
            status::ERROR
        }
    };
    std::process::ExitCode::from(code)
}

/// A line on stderr. A closed stderr (`2>&1 | head`) loses the line, never
/// the fit or its files.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// Text on stdout. A closed pipe (`| head`, `| true`) ends the printing
/// quietly, as Unix tools do; any other failure (`> /dev/full`) is an
/// output that failed.
fn print_stdout(text: &str) -> Option<String> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => None,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => None,
        Err(e) => Some(format!("standard output: {e}")),
    }
}

fn display(args: &Args) -> Display {
    match (args.quiet, args.verbose) {
        (true, _) => Display::Quiet,
        (_, true) => Display::Verbose,
        _ => Display::Status,
    }
}

fn choose_device(backend: &str) -> AnyResult<Device> {
    let policy = match backend {
        "auto" => GpuPolicy::from_env()?,
        "cpu" => GpuPolicy::Off,
        "gpu" => {
            check_cuda_support("--backend", backend)?;
            GpuPolicy::Required
        }
        other => return Err(format!("--backend {other:?}: must be auto, cpu or gpu").into()),
    };
    Ok(select_device(policy)?)
}

/// GPUs to fit on: `--gpus`, or every visible one; 0 on the CPU, where
/// `--gpus` is an error.
fn gpu_count(device: &Device, gpus: Option<usize>) -> AnyResult<usize> {
    match (device, gpus) {
        (Device::Cpu { reason }, Some(n)) => Err(format!("--gpus {n}: the fit runs on the CPU ({reason})").into()),
        (Device::Cpu { .. }, None) => Ok(0),
        #[cfg(feature = "cuda")]
        (Device::Gpu(_), gpus) => Ok(gpus.map_or_else(Gpu::count, Ok)?),
    }
}

fn run(args: Args) -> AnyResult<Outcome> {
    if !(args.frailty_sd.is_finite() && args.frailty_sd >= 0.0) {
        return Err(format!("--frailty-sd {}: must be finite and >= 0", args.frailty_sd).into());
    }
    if let Some(model) = &args.model {
        return predict_saved(model, &args);
    }
    check_options(&args)?;
    check_outputs(&args)?;
    let mut phases = Vec::new();
    let mut notes = Vec::new();
    let device = choose_device(&args.backend)?;
    let say = |line: String| {
        if !args.quiet {
            say(&line);
        }
    };
    say(format!("backend: {}", device.describe()));
    let gpus = gpu_count(&device, args.gpus)?;
    let t = Instant::now();
    let problem = match &args.data {
        Some(path) => load(path, &args)?,
        None => simulate(&args, device.is_gpu(), &mut notes)?,
    };
    notes.extend(problem.notes.iter().cloned());
    phases.push((
        if args.data.is_some() { "load" } else { "simulate" }.to_string(),
        t.elapsed().as_secs_f64(),
    ));
    match &args.lambda {
        Some(lambda) => say(format!("Newton at fixed lambda = {lambda:?}")),
        None => say("REML over the smoothing parameters".into()),
    }
    let run = fit_on_device(
        &device,
        gpus,
        &problem.model,
        &problem.data,
        &fit_options(&args),
        display(&args),
    )?;
    phases.push(("upload".into(), run.upload_seconds));
    phases.push(("fit".into(), run.fit_seconds));
    phases.push(("fit: row evaluations".into(), run.evaluation_seconds));
    phases.push((
        "fit: rigid start, solves, logdets, REML".into(),
        run.fit_seconds - run.evaluation_seconds,
    ));
    let (fit, backend) = (run.fit, run.backend);
    let t = Instant::now();
    let names = DesignNames {
        marginal: &problem.marginal_names,
        slope: &problem.slope_names,
    };
    let mut report = fit.summary(&problem.model, problem.data.n(), names, problem.truth.as_deref());
    report.backend = backend;
    report.data = problem.source.clone();
    report.phases = phases;
    notes.append(&mut report.notes);
    report.notes = notes;
    // Files first: a closed or full stdout never costs them.
    let mut failed_outputs = write_outputs(&args, &problem, &fit, &report);
    failed_outputs.extend(print_stdout(&report.to_string()));
    say(format!("output written in {:.2} s", t.elapsed().as_secs_f64()));
    Ok(Outcome {
        converged: fit.converged,
        failed_outputs,
    })
}

/// `--model m.json --predict new.csv --out predictions.csv`: the saved
/// fit's predictions of the new rows, with notes on extrapolated rows.
fn predict_saved(model_path: &Path, args: &Args) -> AnyResult<Outcome> {
    let (input, out) = (args.predict.as_ref(), args.out.as_ref());
    let (input, out) = input
        .zip(out)
        .ok_or("--model needs --predict FILE.csv and --out FILE.csv")?;
    files::check_outputs(&[("--out", out)], &[input, model_path])?;
    let (saved, model) = SavedFit::load(model_path)?;
    let rows = saved.read_predictors(input)?;
    if let Some(note) = empty_rows_note(&input.display().to_string(), &rows.empty_rows) {
        say(&format!("note: {note}"));
    }
    let (designs, z) = (rows.designs, rows.z);
    let device = choose_device(&args.backend)?;
    let t = Instant::now();
    let pred = saved.fit.predict(&device, &model, designs.clone(), &z)?;
    let seconds = t.elapsed().as_secs_f64();
    let mut text = Vec::new();
    pred.write_csv(&mut text)?;
    let failed_outputs: Vec<String> = write_output("--out", out, &text).err().into_iter().collect();
    if failed_outputs.is_empty() {
        say(&format!(
            "predicted {} rows in {seconds:.3} s ({}) -> {}",
            z.len(),
            device.describe(),
            out.display()
        ));
    }
    if !saved.fit.converged {
        say(&format!(
            "note: the saved fit did not converge ({}): these predictions come from its best point, not from an \
             optimum",
            saved.fit.termination
        ));
    }
    for note in extrapolation_notes(&model, &saved.fit.beta, &designs, &z, &pred.intercept) {
        say(&format!("note: {note}"));
    }
    for note in saved.rejected_notes(&designs, &z, &pred.rejected) {
        say(&format!("note: {note}"));
    }
    if pred.se_eta.is_none() {
        say("note: the saved fit has no covariance (it did not end at a minimum): se_eta is left empty");
    }
    Ok(Outcome {
        converged: true,
        failed_outputs,
    })
}

/// The model's shape from the options.
fn shape(args: &Args) -> ModelShape {
    ModelShape {
        score_basis: args.score_basis,
        link_basis: args.link_basis,
        frailty_sd: args.frailty_sd,
    }
}

fn load(path: &Path, args: &Args) -> AnyResult<Problem> {
    let spec = ColumnSpec {
        label: args.label.clone(),
        score: args.score.clone(),
        weights: args.weights.clone(),
        marginal: args.marginal.clone(),
        slope: args.slope.clone(),
    };
    Ok(Problem::from_csv(path, &spec, shape(args), args.keep_score)?)
}

fn simulate(args: &Args, gpu: bool, notes: &mut Vec<String>) -> AnyResult<Problem> {
    let n = args
        .simulate
        .unwrap_or(if gpu { GPU_DEFAULT_ROWS } else { CPU_DEFAULT_ROWS });
    if args.simulate.is_none() && !gpu {
        notes.push(format!(
            "no GPU: simulated {CPU_DEFAULT_ROWS} rows instead of {GPU_DEFAULT_ROWS} (use --simulate N for more)"
        ));
    }
    if !args.quiet {
        say(&format!("simulating {n} rows (seed {})", args.seed));
    }
    Ok(Problem::simulated(n, args.seed, shape(args))?)
}

fn fit_options(args: &Args) -> FitOptions {
    let mut opts = FitOptions {
        lambda: args.lambda.clone(),
        single_precision_hvp: !args.f64_hvp,
        ..FitOptions::default()
    };
    opts.reml.grad_tol = args.reml_tol;
    opts.reml.newton.decrement_tol = args.newton_tol;
    opts
}

/// Write one output through `matfree::files` (symlinks followed, regular
/// files replaced by a rename, FIFOs and devices written in place); the
/// error names the flag and the path.
fn write_output(flag: &str, path: &Path, contents: &[u8]) -> Result<(), String> {
    files::write(path, contents).map_err(|e| format!("{flag} {}: {e}", path.display()))
}

/// Options checked by the flag the user typed (the solvers would name their
/// own fields).
fn check_options(args: &Args) -> AnyResult<()> {
    for (flag, v) in [("--newton-tol", args.newton_tol), ("--reml-tol", args.reml_tol)] {
        if !(v.is_finite() && v > 0.0) {
            return Err(format!("{flag} {v}: must be finite and > 0").into());
        }
    }
    if let Some(l) = &args.lambda {
        if let Some(v) = l.iter().find(|v| !(v.is_finite() && **v > 0.0)) {
            return Err(format!("--lambda {v}: every smoothing parameter must be finite and > 0").into());
        }
    }
    Ok(())
}

/// Every output path checked before the fit, so that no fit is lost to an
/// unwritable path: not a directory, not the input data, writable, no two
/// the same file however spelled; and a plot needs a smooth.
fn check_outputs(args: &Args) -> AnyResult<()> {
    let outputs = [("--json", &args.json), ("--plot", &args.plot), ("--save", &args.save)];
    let named: Vec<(&str, &Path)> = outputs
        .iter()
        .filter_map(|(f, p)| p.as_deref().map(|p| (*f, p)))
        .collect();
    let inputs: Vec<&Path> = args.data.iter().map(PathBuf::as_path).collect();
    files::check_outputs(&named, &inputs)?;
    if args.plot.is_some() && args.score_basis == 0 && args.link_basis == 0 {
        return Err("--plot: the model has no smooth to draw (--score-basis 0 --link-basis 0)".into());
    }
    Ok(())
}

/// Write the JSON, the saved fit, then the plot; a failure of one does not
/// drop the others. Returns a message for each output that failed.
fn write_outputs(args: &Args, problem: &Problem, fit: &BmsFit, report: &FitSummary) -> Vec<String> {
    let json = args.json.as_ref().map(|path| {
        let text = serde_json::to_string_pretty(report).map_err(|e| e.to_string())?;
        write_output("--json", path, text.as_bytes())
    });
    let saved = args.save.as_ref().map(|path| {
        let names = (problem.marginal_names.clone(), problem.slope_names.clone());
        let saved = SavedFit::new(&problem.model, fit.clone(), names, problem.score.clone());
        let text = saved
            .and_then(|s| s.to_json())
            .map_err(|e| format!("--save {}: {e}", path.display()))?;
        write_output("--save", path, text.as_bytes())
    });
    let svg = args.plot.as_ref().map(|path| match &fit.covariance {
        Some(cov) => {
            let svg = plot(problem, cov, fit).map_err(|e| format!("--plot {}: {e}", path.display()))?;
            write_output("--plot", path, svg.as_bytes())
        }
        None => Err(format!(
            "--plot {}: no bands without a covariance (the fit is not at a minimum)",
            path.display()
        )),
    });
    [json, saved, svg]
        .into_iter()
        .flatten()
        .filter_map(Result::err)
        .collect()
}

fn plot(problem: &Problem, cov: &[f64], fit: &BmsFit) -> AnyResult<String> {
    let panels = smooth_panels(&problem.model, &fit.beta, cov, problem.truth.as_deref())?;
    Ok(smooths_svg(&panels)?)
}
