//! Fit the Bernoulli marginal-slope model end to end, as a user would.
//!
//!     cargo run --release --example fit_bms                      # simulate and fit
//!     cargo run --release --example fit_bms -- --data d.csv --label y --score z \
//!         --marginal x1,x2 --slope x1 --json fit.json --plot smooths.svg
//!
//! Smoothing parameters are chosen by REML (LAML) unless `--lambda` fixes
//! them; the GPU is used when one is found (`--backend` overrides), every
//! visible GPU unless `--gpus N` says how many (rows sharded over them).
//! The work is `matfree::bms::io::job`'s: this file parses, prints and exits.

use std::io::Write;
use std::path::PathBuf;

use clap::Parser;
use matfree::bms::fit::progress::Display;
use matfree::bms::io::job::{status, Console, FitTask, Job, Outputs, PredictTask, Source, Task, EXIT_STATUS_HELP};
use matfree::bms::io::problem::ModelShape;
use matfree::data::ColumnSpec;

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
    #[arg(long, default_value_t = matfree::bms::fit::INNER_DECREMENT)]
    newton_tol: f64,
    /// REML tolerance on |dV/drho| (absolute, in effective degrees of freedom).
    #[arg(long, default_value_t = 1e-3)]
    reml_tol: f64,
    /// mgcv bam's samfrac: REML first on this share of the rows (an even
    /// subsample, loose tolerances), then on every row from its estimates
    /// and smoothing parameters; 1 for never (default: 0.02 for fits of 2M
    /// rows or more, at least 200,000 sampled).
    #[arg(long)]
    samfrac: Option<f64>,
    /// On one GPU, keep the PCG's Hessian products on the f64 row Hessians
    /// (by default they read packed f32 copies, half the bytes; the
    /// gradient, dense steps and log-determinants are f64 either way).
    /// Only a model wide enough for PCG steps makes them: at the default
    /// bases every step is dense and an evaluation keeps only its dense
    /// Hessian.
    #[arg(long)]
    f64_hvp: bool,
    /// Write the summary as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw the fitted smooths with 95% bands as SVG here.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Save the fit (model, coefficients, covariance, smoothing parameters)
    /// here as JSON, to load with `matfree::bms::results::saved::SavedFit::load`.
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

fn main() -> std::process::ExitCode {
    let code = match job(Args::parse()).run(&mut Terminal) {
        Ok(outcome) => {
            outcome
                .messages()
                .iter()
                .for_each(|m| Terminal.say(&format!("fit_bms: {m}")));
            outcome.status()
        }
        Err(e) => {
            Terminal.say(&format!("fit_bms: error: {e}"));
            status::ERROR
        }
    };
    std::process::ExitCode::from(code)
}

/// stderr for lines, stdout for the report.
struct Terminal;

impl Console for Terminal {
    /// A closed stderr (`2>&1 | head`) loses the line, never the fit or its
    /// files.
    fn say(&mut self, line: &str) {
        let _ = writeln!(std::io::stderr().lock(), "{line}");
    }

    /// A closed pipe (`| head`, `| true`) ends the printing quietly, as Unix
    /// tools do; any other failure (`> /dev/full`) is an output that failed.
    fn print(&mut self, text: &str) -> Result<(), String> {
        let mut out = std::io::stdout().lock();
        match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(format!("standard output: {e}")),
            _ => Ok(()),
        }
    }
}

/// The job the arguments describe.
fn job(a: Args) -> Job {
    let task = match (a.model, a.predict, a.out) {
        (Some(model), Some(input), Some(out)) => Task::Predict(PredictTask { model, input, out }),
        _ => Task::Fit(FitTask {
            source: match a.data {
                Some(path) => Source::Csv {
                    path,
                    columns: ColumnSpec {
                        label: a.label,
                        score: a.score,
                        weights: a.weights,
                        marginal: a.marginal,
                        slope: a.slope,
                    },
                    keep_score: a.keep_score,
                },
                None => Source::Simulate {
                    rows: a.simulate,
                    seed: a.seed,
                },
            },
            lambda: a.lambda,
            gpus: a.gpus,
            newton_tol: a.newton_tol,
            reml_tol: a.reml_tol,
            samfrac: a.samfrac,
            single_precision_hvp: !a.f64_hvp,
            outputs: Outputs {
                json: a.json,
                plot: a.plot,
                save: a.save,
            },
        }),
    };
    let shape = ModelShape {
        score_basis: a.score_basis,
        link_basis: a.link_basis,
        frailty_sd: a.frailty_sd,
    };
    Job {
        task,
        shape,
        backend: a.backend,
        display: Display::from_flags(a.quiet, a.verbose),
    }
}
