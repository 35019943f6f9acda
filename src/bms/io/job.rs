//! One run of the `fit_bms` command line as a library call, so that any
//! front end (a Python package, a service) fits, summarises, saves, plots
//! and predicts as `fit_bms` does: a [`Job`] (what to fit or predict, where,
//! what to write), [`Job::run`] and its [`Outcome`], whose
//! [`Outcome::status`] is the exit status.
//!
//! Every option and output is checked before the fit, so that no long fit
//! is lost to a typo or an unwritable path. The library prints nothing and
//! exits nowhere: the lines for the user and the report go to the
//! [`Console`] the caller passes, the fit's progress to its [`Display`].

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use matfree_solvers::observer::Observer;

use crate::bms::fit::progress::Display;
use crate::bms::fit::{fit_on_device_observed, BmsFit, FitOptions, SampleStart};
use crate::bms::io::problem::{ModelShape, Problem};
use crate::bms::results::report::{DesignNames, FitSummary};
use crate::bms::results::saved::SavedFit;
use crate::bms::results::summary::smooth_panels;
#[cfg(feature = "cuda")]
use crate::cuda::Gpu;
use crate::data::{empty_rows_note, ColumnSpec};
use crate::device::Device;
use crate::files;
use crate::plot::smooths_svg;

/// Rows simulated by default on the GPU.
pub const GPU_DEFAULT_ROWS: usize = 200_000;
/// Rows simulated by default on the CPU (a row evaluation costs about
/// 50 us a row and core there at the default shape, and a fit takes 15-30
/// of them: a 2-core machine fits 60,000 rows in about 45 s).
pub const CPU_DEFAULT_ROWS: usize = 60_000;

/// Exit statuses: a fit's outcome and whether every output was written are
/// both visible. 2 is left to the command line's parser (a bad command line).
pub mod status {
    /// The fit converged (or the rows were predicted) and every output was
    /// written.
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

/// The exit statuses in a sentence each, for `--help` (the README has the
/// same table).
pub const EXIT_STATUS_HELP: &str = "Exit status: 0 converged (or predicted) and every output written; 1 bad input or \
a failure before the fit ended; 2 a bad command line; 3 the fit did not converge (the best fit found is still \
printed and written, marked so); 4 an output could not be written after a converged fit (or a prediction), every \
other output kept; 5 the fit did not converge and an output could not be written.";

/// Where the lines for the user and the report go (stderr and stdout in
/// `fit_bms`).
pub trait Console {
    /// A line for the user: a phase, a note.
    fn say(&mut self, line: &str);
    /// The fit's report (a table); an error message where it could not be
    /// shown, which makes it a failed output.
    fn print(&mut self, text: &str) -> Result<(), String>;
    /// Told of the fit's progress beside its [`Display`], and asked whether
    /// to stop it (a user's Ctrl-C: the job then ends with the solvers'
    /// `Interrupted`); by default no one.
    fn observer(&self) -> &dyn Observer {
        &()
    }
}

/// Why a job did not run to its end: nothing was fitted or written.
#[derive(Debug)]
pub enum JobError {
    /// An option broke a rule: the option as typed, its value (where it
    /// has one) and the rule.
    Option {
        /// The option (`--reml-tol`).
        flag: String,
        /// Its value as given.
        value: Option<String>,
        /// The rule it broke.
        rule: String,
    },
    /// An output path that cannot be written (the message names the option
    /// and the path).
    Output(String),
    /// The library's own error (bad data, a failed fit or device).
    Matfree(crate::Error),
}

impl JobError {
    fn option(flag: &str, value: impl fmt::Display, rule: impl Into<String>) -> Self {
        Self::Option {
            flag: flag.into(),
            value: Some(value.to_string()),
            rule: rule.into(),
        }
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Option { flag, value, rule } => match value {
                Some(v) => write!(f, "{flag} {v}: {rule}"),
                None => write!(f, "{flag}: {rule}"),
            },
            Self::Output(message) => f.write_str(message),
            Self::Matfree(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for JobError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Matfree(e) => Some(e),
            _ => None,
        }
    }
}

impl From<crate::Error> for JobError {
    fn from(e: crate::Error) -> Self {
        Self::Matfree(e)
    }
}

/// A run: what to do, with the model's shape, the device and the display.
#[derive(Clone, Debug)]
pub struct Job {
    /// Fit, or predict from a saved fit.
    pub task: Task,
    /// The model's shape (for a fit; its frailty is checked for every task,
    /// as `fit_bms` always has).
    pub shape: ModelShape,
    /// `auto` (the `MATFREE_GPU` policy), `cpu` or `gpu`.
    pub backend: String,
    /// What a fit shows while it runs; [`Display::Quiet`] also drops the
    /// fit's phase lines (a prediction's lines are always said).
    pub display: Display,
}

/// What a [`Job`] does.
// One task a run: the size of the larger variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum Task {
    /// Fit a problem and write its outputs.
    Fit(FitTask),
    /// Predict new rows from a saved fit.
    Predict(PredictTask),
}

/// Where the rows to fit come from.
#[derive(Clone, Debug)]
pub enum Source {
    /// Simulated ([`Problem::simulated`]).
    Simulate {
        /// Rows (`None`: [`GPU_DEFAULT_ROWS`] on a GPU, [`CPU_DEFAULT_ROWS`]
        /// on the CPU).
        rows: Option<usize>,
        /// The generator's seed.
        seed: u64,
    },
    /// A CSV file ([`Problem::from_csv`]).
    Csv {
        /// The file.
        path: PathBuf,
        /// Its columns.
        columns: ColumnSpec,
        /// Fit the score as given, standardised or not.
        keep_score: bool,
    },
    /// A problem built by the caller, of the job's shape (a front end's
    /// arrays in memory: [`Problem::from_columns`]).
    Built(Arc<Problem>),
}

/// The files a fit writes, each optional.
#[derive(Clone, Debug, Default)]
pub struct Outputs {
    /// The summary as JSON (`--json`).
    pub json: Option<PathBuf>,
    /// The smooths with 95% bands as SVG (`--plot`).
    pub plot: Option<PathBuf>,
    /// The saved fit ([`SavedFit`], `--save`).
    pub save: Option<PathBuf>,
}

/// A fit: the rows, the solver's settings and the outputs.
#[derive(Clone, Debug)]
pub struct FitTask {
    /// The rows.
    pub source: Source,
    /// Fixed smoothing parameters (one per smooth) instead of REML.
    pub lambda: Option<Vec<f64>>,
    /// GPUs to fit on (`None`: every visible one); an error on the CPU.
    pub gpus: Option<usize>,
    /// The inner Newton's tolerance on the Newton decrement (> 0).
    pub newton_tol: f64,
    /// REML's tolerance on |dV/drho| (> 0).
    pub reml_tol: f64,
    /// On one GPU, PCG's Hessian products on packed f32 row Hessians.
    pub single_precision_hvp: bool,
    /// mgcv bam's `samfrac`: REML first on this share of the rows, in
    /// (0, 1], 1 for never (`None`: [`SampleStart`]'s default, 1 in 50
    /// rows, at least 200,000, of fits of 2M rows or more).
    pub samfrac: Option<f64>,
    /// The files to write.
    pub outputs: Outputs,
}

/// A prediction: the saved fit, the new rows and the CSV to write.
#[derive(Clone, Debug)]
pub struct PredictTask {
    /// The fit saved with `--save`.
    pub model: PathBuf,
    /// The new rows (CSV with the fit's score and covariate columns).
    pub input: PathBuf,
    /// The predictions (CSV: row, p, eta, se_eta).
    pub out: PathBuf,
}

/// How a run ended: whether the fit converged, the outputs that could not
/// be written (each message names its option and path), and the fit's
/// report.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Whether the fit converged (a prediction counts as converged).
    pub converged: bool,
    /// A message for each output that could not be written.
    pub failed_outputs: Vec<String>,
    /// The fit's report (`None` for a prediction).
    pub summary: Option<FitSummary>,
    /// The fit with what it needs to be saved, predicted from and
    /// summarised (what `--save` writes; `None` for a prediction).
    pub saved: Option<SavedFit>,
}

impl Outcome {
    /// The exit status ([`status`]).
    pub fn status(&self) -> u8 {
        match (self.converged, self.failed_outputs.is_empty()) {
            (true, true) => status::CONVERGED,
            (true, false) => status::OUTPUT_FAILED,
            (false, true) => status::NOT_CONVERGED,
            (false, false) => status::NOT_CONVERGED_OUTPUT_FAILED,
        }
    }

    /// The closing lines for the user: each failed output, then whether
    /// the fit did not converge (with the exit status).
    pub fn messages(&self) -> Vec<String> {
        let mut lines: Vec<String> = self.failed_outputs.iter().map(|f| format!("error: {f}")).collect();
        if !self.converged {
            lines.push(format!(
                "the fit did not converge (exit status {}); the best fit found is reported",
                self.status()
            ));
        }
        lines
    }
}

impl Job {
    /// Check the options, then fit (or predict) and write every output; a
    /// failed output does not stop the others ([`Outcome::failed_outputs`]).
    pub fn run(&self, console: &mut dyn Console) -> Result<Outcome, JobError> {
        let sd = self.shape.frailty_sd;
        if !(sd.is_finite() && sd >= 0.0) {
            return Err(JobError::option("--frailty-sd", sd, "must be finite and >= 0"));
        }
        match &self.task {
            Task::Fit(task) => self.fit(task, console),
            Task::Predict(task) => task.run(&self.backend, console),
        }
    }

    fn fit(&self, task: &FitTask, console: &mut dyn Console) -> Result<Outcome, JobError> {
        task.check_options()?;
        task.check_outputs(&self.shape)?;
        let loud = self.display != Display::Quiet;
        let say = |console: &mut dyn Console, line: String| {
            if loud {
                console.say(&line)
            }
        };
        let device = choose_device(&self.backend)?;
        say(console, format!("backend: {}", device.describe()));
        let gpus = gpu_count(&device, task.gpus)?;
        let t = Instant::now();
        let (problem, mut notes) = task.source.problem(self.shape, &device, &mut |l| say(console, l))?;
        let mut phases = vec![(task.source.phase().to_string(), t.elapsed().as_secs_f64())];
        match &task.lambda {
            Some(lambda) => say(console, format!("Newton at fixed lambda = {lambda:?}")),
            None => say(console, "REML over the smoothing parameters".into()),
        }
        let (model, data) = (&problem.model, &problem.data);
        let opts = task.fit_options();
        if let Some(rows) = opts.sample_start.rows(data.n()) {
            say(console, format!("first on an even sample of {rows} rows (--samfrac)"));
        }
        let run = fit_on_device_observed(&device, gpus, model, data, &opts, self.display, console.observer())?;
        phases.push(("upload".into(), run.upload_seconds));
        phases.push(("fit".into(), run.fit_seconds));
        let sample = run.sample_seconds.unwrap_or(0.0);
        if run.sample_seconds.is_some() {
            phases.push(("fit: sample start".into(), sample));
        }
        phases.push(("fit: row evaluations".into(), run.evaluation_seconds));
        let setup = run.setup_seconds;
        phases.push(("fit: data checks".into(), setup.data_checks));
        phases.push(("fit: rigid start".into(), setup.rigid_start));
        let rest = run.fit_seconds - sample - run.evaluation_seconds - setup.data_checks - setup.rigid_start;
        phases.push(("fit: solves, logdets, REML".into(), rest));
        let t = Instant::now();
        let names = DesignNames {
            marginal: &problem.marginal_names,
            slope: &problem.slope_names,
        };
        let mut report = run.fit.summary(model, data.n(), names, problem.truth.as_deref());
        report.backend = run.backend;
        report.device_memory = run.memory;
        report.data = problem.source.clone();
        report.phases = phases;
        notes.append(&mut report.notes);
        report.notes = notes;
        let names = (problem.marginal_names.clone(), problem.slope_names.clone());
        let saved = SavedFit::new(model, run.fit.clone(), names, problem.score.clone());
        // Files first: a closed or full stdout never costs them.
        let mut failed_outputs = task.outputs.write(&problem, &run.fit, &saved, &report);
        failed_outputs.extend(console.print(&report.to_string()).err());
        say(console, format!("output written in {:.2} s", t.elapsed().as_secs_f64()));
        Ok(Outcome {
            converged: run.fit.converged,
            failed_outputs,
            summary: Some(report),
            saved: saved.ok(),
        })
    }
}

/// The device `--backend` names: `auto` follows `MATFREE_GPU`, `cpu` is
/// the CPU, `gpu` the GPU or an error.
pub fn choose_device(backend: &str) -> Result<Device, JobError> {
    if !matches!(backend, "auto" | "cpu" | "gpu") {
        return Err(JobError::option(
            "--backend",
            format!("{backend:?}"),
            "must be auto, cpu or gpu",
        ));
    }
    Ok(crate::device::choose_device("--backend", backend)?)
}

/// GPUs to fit on: `gpus`, or every visible one; 0 on the CPU, where
/// asking for GPUs is an error.
pub fn gpu_count(device: &Device, gpus: Option<usize>) -> Result<usize, JobError> {
    match (device, gpus) {
        (Device::Cpu { reason }, Some(n)) => Err(JobError::option(
            "--gpus",
            n,
            format!("the fit runs on the CPU ({reason})"),
        )),
        (Device::Cpu { .. }, None) => Ok(0),
        #[cfg(feature = "cuda")]
        (Device::Gpu(_), gpus) => Ok(gpus.map_or_else(Gpu::count, Ok)?),
    }
}

impl Source {
    /// Rows to simulate: `rows`, or the device's default, with a note where
    /// the CPU's smaller default was taken.
    pub fn simulated_rows(rows: Option<usize>, gpu: bool) -> (usize, Option<String>) {
        match (rows, gpu) {
            (Some(n), _) => (n, None),
            (None, true) => (GPU_DEFAULT_ROWS, None),
            (None, false) => (
                CPU_DEFAULT_ROWS,
                Some(format!(
                    "no GPU: simulated {CPU_DEFAULT_ROWS} rows instead of {GPU_DEFAULT_ROWS} (use --simulate N for more)"
                )),
            ),
        }
    }

    /// The timed phase's name: `load` or `simulate`.
    pub fn phase(&self) -> &'static str {
        match self {
            Self::Simulate { .. } => "simulate",
            Self::Csv { .. } | Self::Built(_) => "load",
        }
    }

    /// The problem, with every note on how its rows were taken; `say` hears
    /// what is being simulated.
    fn problem(
        &self,
        shape: ModelShape,
        device: &Device,
        say: &mut dyn FnMut(String),
    ) -> Result<(Arc<Problem>, Vec<String>), JobError> {
        let (problem, mut notes) = match self {
            Self::Csv {
                path,
                columns,
                keep_score,
            } => (
                Arc::new(Problem::from_csv(path, columns, shape, *keep_score)?),
                Vec::new(),
            ),
            Self::Simulate { rows, seed } => {
                let (n, note) = Self::simulated_rows(*rows, device.is_gpu());
                say(format!("simulating {n} rows (seed {seed})"));
                (
                    Arc::new(Problem::simulated_on(n, *seed, shape, device)?),
                    note.into_iter().collect(),
                )
            }
            Self::Built(problem) => (problem.clone(), Vec::new()),
        };
        notes.extend(problem.notes.iter().cloned());
        Ok((problem, notes))
    }

    fn input(&self) -> Option<&Path> {
        match self {
            Self::Csv { path, .. } => Some(path),
            Self::Simulate { .. } | Self::Built(_) => None,
        }
    }
}

impl FitTask {
    /// Options checked by the option the user typed (the solvers would name
    /// their own fields).
    pub fn check_options(&self) -> Result<(), JobError> {
        for (flag, v) in [("--newton-tol", self.newton_tol), ("--reml-tol", self.reml_tol)] {
            if !(v.is_finite() && v > 0.0) {
                return Err(JobError::option(flag, v, "must be finite and > 0"));
            }
        }
        if let Some(f) = self.samfrac.filter(|f| !(*f > 0.0 && *f <= 1.0)) {
            return Err(JobError::option("--samfrac", f, "must lie in (0, 1]"));
        }
        let bad = self.lambda.iter().flatten().find(|v| !(v.is_finite() && **v > 0.0));
        match bad {
            Some(v) => Err(JobError::option(
                "--lambda",
                v,
                "every smoothing parameter must be finite and > 0",
            )),
            None => Ok(()),
        }
    }

    /// Every output checked before the fit ([`files::check_outputs`]: not
    /// a directory, not the input data, writable, no two the same file);
    /// and a plot needs a smooth.
    pub fn check_outputs(&self, shape: &ModelShape) -> Result<(), JobError> {
        let inputs: Vec<&Path> = self.source.input().into_iter().collect();
        files::check_outputs(&self.outputs.named(), &inputs).map_err(JobError::Output)?;
        if self.outputs.plot.is_some() && shape.score_basis == 0 && shape.link_basis == 0 {
            return Err(JobError::Option {
                flag: "--plot".into(),
                value: None,
                rule: "the model has no smooth to draw (--score-basis 0 --link-basis 0)".into(),
            });
        }
        Ok(())
    }

    /// The fit's options: the defaults with these tolerances and lambda.
    pub fn fit_options(&self) -> FitOptions {
        let mut opts = FitOptions {
            lambda: self.lambda.clone(),
            single_precision_hvp: self.single_precision_hvp,
            ..FitOptions::default()
        };
        opts.reml.grad_tol = self.reml_tol;
        opts.reml.newton.decrement_tol = self.newton_tol;
        opts.sample_start = match self.samfrac {
            None => SampleStart::default(),
            Some(f) if f >= 1.0 => SampleStart::off(),
            Some(fraction) => SampleStart {
                min_rows: 0,
                fraction,
                min_sample: 1,
            },
        };
        opts
    }
}

impl Outputs {
    /// The outputs asked for, each with its option.
    fn named(&self) -> Vec<(&'static str, &Path)> {
        [("--json", &self.json), ("--plot", &self.plot), ("--save", &self.save)]
            .into_iter()
            .filter_map(|(flag, path)| path.as_deref().map(|p| (flag, p)))
            .collect()
    }

    /// Write the JSON, the saved fit (`saved`, `fit` with its names), then
    /// the plot; a failure of one does not drop the others. Returns a
    /// message for each output that failed.
    pub fn write(
        &self,
        problem: &Problem,
        fit: &BmsFit,
        saved: &crate::Result<SavedFit>,
        report: &FitSummary,
    ) -> Vec<String> {
        let json = self.json.as_ref().map(|path| {
            let text = serde_json::to_string_pretty(report).map_err(|e| e.to_string())?;
            write_output("--json", path, text.as_bytes())
        });
        let saved = self.save.as_ref().map(|path| {
            let text = match saved {
                Ok(s) => s.to_json(),
                Err(e) => Err(crate::Error::invalid("fit", "not saved", e.to_string())),
            }
            .map_err(|e| format!("--save {}: {e}", path.display()))?;
            write_output("--save", path, text.as_bytes())
        });
        let svg = self.plot.as_ref().map(|path| {
            let svg = plot(problem, fit).map_err(|e| format!("--plot {}: {e}", path.display()))?;
            write_output("--plot", path, svg.as_bytes())
        });
        [json, saved, svg]
            .into_iter()
            .flatten()
            .filter_map(Result::err)
            .collect()
    }
}

/// The smooths with their bands as SVG; no bands without a covariance.
fn plot(problem: &Problem, fit: &BmsFit) -> Result<String, String> {
    let cov = fit
        .covariance
        .as_ref()
        .ok_or("no bands without a covariance (the fit is not at a minimum)")?;
    let panels = smooth_panels(&problem.model, &fit.beta, cov, problem.truth.as_deref()).map_err(|e| e.to_string())?;
    smooths_svg(&panels).map_err(|e| e.to_string())
}

/// Write one output through [`files::write`] (symlinks followed, regular
/// files replaced by a rename, FIFOs and devices written in place); the
/// error names the option and the path.
fn write_output(flag: &str, path: &Path, contents: &[u8]) -> Result<(), String> {
    files::write(path, contents).map_err(|e| format!("{flag} {}: {e}", path.display()))
}

impl PredictTask {
    /// The saved fit's predictions of the new rows, written to `out`, with
    /// notes on skipped, extrapolated and rejected rows.
    fn run(&self, backend: &str, console: &mut dyn Console) -> Result<Outcome, JobError> {
        files::check_outputs(&[("--out", &self.out)], &[&self.input, &self.model]).map_err(JobError::Output)?;
        let (saved, model) = SavedFit::load(&self.model)?;
        let rows = saved.read_predictors(&self.input)?;
        if let Some(note) = empty_rows_note(&self.input.display().to_string(), &rows.empty_rows) {
            console.say(&format!("note: {note}"));
        }
        let device = choose_device(backend)?;
        let t = Instant::now();
        let pred = saved.fit.predict(&device, &model, rows.designs.clone(), &rows.z)?;
        let seconds = t.elapsed().as_secs_f64();
        let mut text = Vec::new();
        pred.write_csv(&mut text).map_err(|e| JobError::Output(e.to_string()))?;
        let failed_outputs: Vec<String> = write_output("--out", &self.out, &text).err().into_iter().collect();
        if failed_outputs.is_empty() {
            let (n, out) = (rows.z.len(), self.out.display());
            console.say(&format!(
                "predicted {n} rows in {seconds:.3} s ({}) -> {out}",
                device.describe()
            ));
        }
        for note in saved.prediction_notes(&model, &rows.designs, &rows.z, &pred) {
            console.say(&format!("note: {note}"));
        }
        Ok(Outcome {
            converged: true,
            failed_outputs,
            summary: None,
            saved: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::bms::fit::fit_on_device;
    use crate::bms::results::predict::Predictions;
    use crate::bms::MarginalSlope;

    /// A console that keeps what it is told; `refuse` makes printing fail.
    #[derive(Default)]
    struct Captured {
        lines: Vec<String>,
        printed: String,
        refuse: bool,
    }

    impl Console for Captured {
        fn say(&mut self, line: &str) {
            self.lines.push(line.to_string());
        }
        fn print(&mut self, text: &str) -> Result<(), String> {
            if self.refuse {
                return Err("standard output: refused".into());
            }
            self.printed.push_str(text);
            Ok(())
        }
    }

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("matfree-job-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    const SHAPE: ModelShape = ModelShape {
        score_basis: 4,
        link_basis: 3,
        frailty_sd: 0.0,
    };

    fn fit_task(source: Source, outputs: Outputs) -> FitTask {
        FitTask {
            source,
            lambda: Some(vec![1.0, 2.0]),
            gpus: None,
            newton_tol: 1e-10,
            reml_tol: 1e-3,
            samfrac: None,
            single_precision_hvp: true,
            outputs,
        }
    }

    /// 400 simulated rows (seed 2) at fixed lambda on the CPU: a fit of a
    /// tenth of a second.
    fn small_fit(outputs: Outputs, display: Display) -> Job {
        Job {
            task: Task::Fit(fit_task(
                Source::Simulate {
                    rows: Some(400),
                    seed: 2,
                },
                outputs,
            )),
            shape: SHAPE,
            backend: "cpu".into(),
            display,
        }
    }

    fn outcome(converged: bool, failed: &[&str]) -> Outcome {
        Outcome {
            converged,
            failed_outputs: failed.iter().map(|s| s.to_string()).collect(),
            summary: None,
            saved: None,
        }
    }

    #[test]
    fn the_exit_status_shows_convergence_and_failed_outputs() {
        assert_eq!(outcome(true, &[]).status(), 0);
        assert_eq!(outcome(true, &["--json x: full"]).status(), 4);
        assert_eq!(outcome(false, &[]).status(), 3);
        assert_eq!(outcome(false, &["--json x: full", "--plot y: full"]).status(), 5);
        assert!(outcome(true, &[]).messages().is_empty());
        assert_eq!(
            outcome(false, &["--json x: full"]).messages(),
            [
                "error: --json x: full",
                "the fit did not converge (exit status 5); the best fit found is reported"
            ]
        );
    }

    #[test]
    fn option_errors_name_the_option_the_value_and_the_rule() {
        let task = |newton_tol: f64, reml_tol: f64, lambda: Vec<f64>| FitTask {
            newton_tol,
            reml_tol,
            samfrac: None,
            lambda: Some(lambda),
            ..fit_task(Source::Simulate { rows: None, seed: 1 }, Outputs::default())
        };
        let message = |t: FitTask| t.check_options().unwrap_err().to_string();
        assert_eq!(
            message(task(0.0, 1e-3, vec![1.0])),
            "--newton-tol 0: must be finite and > 0"
        );
        assert_eq!(
            message(task(1e-9, f64::NAN, vec![1.0])),
            "--reml-tol NaN: must be finite and > 0"
        );
        assert_eq!(
            message(task(1e-9, 1e-3, vec![1.0, -2.0])),
            "--lambda -2: every smoothing parameter must be finite and > 0"
        );
        assert!(task(1e-9, 1e-3, vec![1.0, 2.0]).check_options().is_ok());
        for f in [0.0, 1.5, f64::NAN] {
            let t = FitTask {
                samfrac: Some(f),
                ..task(1e-9, 1e-3, vec![1.0])
            };
            assert_eq!(message(t), format!("--samfrac {f}: must lie in (0, 1]"));
        }
        let sampled = |f: f64| {
            FitTask {
                samfrac: Some(f),
                ..task(1e-9, 1e-3, vec![1.0])
            }
            .fit_options()
            .sample_start
        };
        assert_eq!(sampled(1.0).rows(usize::MAX - 1), None);
        assert_eq!(sampled(0.1).rows(1_000), Some(100));
        assert_eq!(
            task(1e-9, 1e-3, vec![1.0]).fit_options().sample_start,
            SampleStart::default()
        );
        let mut job = small_fit(Outputs::default(), Display::Quiet);
        job.shape.frailty_sd = -1.0;
        let e = job.run(&mut Captured::default()).unwrap_err();
        assert_eq!(e.to_string(), "--frailty-sd -1: must be finite and >= 0");
    }

    #[test]
    fn the_default_rows_follow_the_device_with_a_note_on_the_cpu() {
        assert_eq!(Source::simulated_rows(Some(123), false), (123, None));
        assert_eq!(Source::simulated_rows(None, true), (GPU_DEFAULT_ROWS, None));
        let (n, note) = Source::simulated_rows(None, false);
        assert_eq!(n, CPU_DEFAULT_ROWS);
        assert!(note.unwrap().contains("no GPU: simulated 60000 rows instead of 200000"));
    }

    #[test]
    fn outputs_are_checked_before_any_work() {
        let d = dir("checks");
        let data = d.join("data.csv");
        fs::write(&data, "y,z\n").unwrap();
        let csv = Source::Csv {
            path: data.clone(),
            columns: ColumnSpec::default(),
            keep_score: false,
        };
        let json_on_data = fit_task(
            csv,
            Outputs {
                json: Some(data.clone()),
                ..Outputs::default()
            },
        );
        let e = json_on_data.check_outputs(&SHAPE).unwrap_err().to_string();
        assert!(e.starts_with("--json ") && e.contains("is the input data file"), "{e}");
        let plot = Outputs {
            plot: Some(d.join("s.svg")),
            ..Outputs::default()
        };
        let no_smooth = ModelShape {
            score_basis: 0,
            link_basis: 0,
            ..SHAPE
        };
        let plot_task = fit_task(Source::Simulate { rows: None, seed: 1 }, plot);
        assert_eq!(
            plot_task.check_outputs(&no_smooth).unwrap_err().to_string(),
            "--plot: the model has no smooth to draw (--score-basis 0 --link-basis 0)"
        );
        assert!(plot_task.check_outputs(&SHAPE).is_ok());
        // A directory fails the check before the device is even chosen.
        let job = small_fit(
            Outputs {
                save: Some(d.clone()),
                ..Outputs::default()
            },
            Display::Status,
        );
        let mut console = Captured::default();
        assert!(job
            .run(&mut console)
            .unwrap_err()
            .to_string()
            .ends_with("is a directory"));
        assert!(console.lines.is_empty(), "{:?}", console.lines);
    }

    #[test]
    fn the_backend_is_auto_cpu_or_gpu_and_gpus_need_a_gpu() {
        let Err(e) = choose_device("tpu") else {
            panic!("a backend of tpu was taken")
        };
        assert_eq!(e.to_string(), "--backend \"tpu\": must be auto, cpu or gpu");
        let cpu = choose_device("cpu").unwrap();
        assert!(!cpu.is_gpu());
        assert_eq!(gpu_count(&cpu, None).unwrap(), 0);
        assert_eq!(
            gpu_count(&cpu, Some(2)).unwrap_err().to_string(),
            "--gpus 2: the fit runs on the CPU (MATFREE_GPU=off)"
        );
    }

    /// The fit the job reports and saves is the one the library's own calls
    /// give (bit for bit), the files come before the printed table, and the
    /// phase lines come in order.
    #[test]
    fn a_fit_job_is_the_library_fit_with_its_files_and_lines() {
        let d = dir("fit");
        let (json, save) = (d.join("fit.json"), d.join("saved.json"));
        let outputs = Outputs {
            json: Some(json.clone()),
            save: Some(save.clone()),
            plot: None,
        };
        let mut console = Captured::default();
        let outcome = small_fit(outputs, Display::Status).run(&mut console).unwrap();
        assert_eq!(outcome.status(), status::CONVERGED, "{:?}", outcome.failed_outputs);

        let problem = Problem::simulated(400, 2, SHAPE).unwrap();
        let mut opts = FitOptions {
            lambda: Some(vec![1.0, 2.0]),
            ..FitOptions::default()
        };
        (opts.reml.grad_tol, opts.reml.newton.decrement_tol) = (1e-3, 1e-10);
        let cpu = Device::Cpu { reason: "test".into() };
        let direct = fit_on_device(&cpu, 0, &problem.model, &problem.data, &opts, Display::Quiet).unwrap();
        let (saved, _) = SavedFit::load(&save).unwrap();
        assert_eq!(saved.fit.beta, direct.fit.beta);
        assert_eq!(saved.fit.covariance, direct.fit.covariance);

        let summary = outcome.summary.unwrap();
        let written: serde_json::Value = serde_json::from_str(&fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(written, serde_json::to_value(&summary).unwrap());
        assert_eq!(console.printed, summary.to_string());
        assert_eq!(summary.data, "simulated, 400 rows, seed 2");
        let phases: Vec<&str> = summary.phases.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(phases[..3], ["simulate", "upload", "fit"]);
        let lines = &console.lines;
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert!(
            lines[0].starts_with("backend: cpu (") && lines[0].ends_with("MATFREE_GPU=off)"),
            "{lines:?}"
        );
        assert_eq!(
            lines[1..3],
            ["simulating 400 rows (seed 2)", "Newton at fixed lambda = [1.0, 2.0]"]
        );
        assert!(lines[3].starts_with("output written in "), "{lines:?}");
    }

    /// Asks to stop at once.
    struct Stop;

    impl Observer for Stop {
        fn interrupted(&self) -> bool {
            true
        }
    }

    /// A console whose observer stops every fit.
    struct Interrupting(Captured);

    impl Console for Interrupting {
        fn say(&mut self, line: &str) {
            self.0.say(line)
        }
        fn print(&mut self, text: &str) -> Result<(), String> {
            self.0.print(text)
        }
        fn observer(&self) -> &dyn Observer {
            &Stop
        }
    }

    /// A problem the caller built fits as the job's own does, the outcome
    /// carries the fit as `--save` writes it, and a console's observer
    /// that asks to stop ends the job with `Interrupted`, writing nothing.
    #[test]
    fn a_built_problem_fits_as_the_jobs_own_and_its_console_can_stop_it() {
        let d = dir("built");
        let save = d.join("saved.json");
        let outputs = Outputs {
            save: Some(save.clone()),
            ..Outputs::default()
        };
        let own = small_fit(outputs, Display::Quiet)
            .run(&mut Captured::default())
            .unwrap();
        let mut job = small_fit(Outputs::default(), Display::Quiet);
        let problem = Arc::new(Problem::simulated(400, 2, SHAPE).unwrap());
        let Task::Fit(task) = &mut job.task else { unreachable!() };
        task.source = Source::Built(problem);
        let built = job.run(&mut Captured::default()).unwrap();
        let (saved, _) = SavedFit::load(&save).unwrap();
        assert_eq!(built.saved.as_ref(), Some(&saved));
        assert_eq!(own.saved, built.saved);

        let mut console = Interrupting(Captured::default());
        let e = job.run(&mut console).unwrap_err();
        assert!(
            matches!(
                e,
                JobError::Matfree(crate::Error::Solver(matfree_solvers::SolverError::Interrupted))
            ),
            "{e}"
        );
        assert!(console.0.printed.is_empty());
    }

    /// A report that cannot be printed is a failed output (status 4) that
    /// costs no file; a quiet job says nothing.
    #[test]
    fn a_failed_print_is_a_failed_output_after_the_files() {
        let d = dir("print");
        let json = d.join("fit.json");
        let outputs = Outputs {
            json: Some(json.clone()),
            ..Outputs::default()
        };
        let mut console = Captured {
            refuse: true,
            ..Captured::default()
        };
        let outcome = small_fit(outputs, Display::Quiet).run(&mut console).unwrap();
        assert_eq!(outcome.failed_outputs, ["standard output: refused"]);
        assert_eq!(outcome.status(), status::OUTPUT_FAILED);
        assert!(json.exists() && console.lines.is_empty(), "{:?}", console.lines);
    }

    /// Predictions from a saved fit through a CSV are those of the fit on
    /// the rows themselves, and a fit saved unconverged and without a
    /// covariance says so.
    #[test]
    fn a_prediction_job_writes_the_fits_predictions_with_its_notes() {
        let d = dir("predict");
        let (model, input, out) = (d.join("model.json"), d.join("new.csv"), d.join("p.csv"));
        let problem = Problem::simulated(400, 2, SHAPE).unwrap();
        let outputs = Outputs {
            save: Some(model.clone()),
            ..Outputs::default()
        };
        small_fit(outputs, Display::Quiet)
            .run(&mut Captured::default())
            .unwrap();
        let (mut saved, bms) = SavedFit::load(&model).unwrap();
        (saved.fit.converged, saved.fit.covariance) = (false, None);
        fs::write(&model, saved.to_json().unwrap()).unwrap();

        let rows = problem.data.rows(0..50).unwrap();
        let (xm, xg) = (rows.designs.x_m(), rows.designs.x_g());
        let mut csv = String::from("z,m1,m2,g1\n");
        for i in 0..50 {
            csv += &format!("{},{},{},{}\n", rows.z[i], xm[3 * i + 1], xm[3 * i + 2], xg[2 * i + 1]);
        }
        fs::write(&input, csv).unwrap();
        let job = Job {
            task: Task::Predict(PredictTask {
                model,
                input,
                out: out.clone(),
            }),
            shape: ModelShape::default(),
            backend: "cpu".into(),
            display: Display::Quiet,
        };
        let mut console = Captured::default();
        let outcome = job.run(&mut console).unwrap();
        assert_eq!(outcome.status(), status::CONVERGED);

        let cpu = Device::Cpu { reason: "test".into() };
        let want: Predictions = saved.fit.predict(&cpu, &bms, rows.designs.clone(), &rows.z).unwrap();
        let mut text = Vec::new();
        want.write_csv(&mut text).unwrap();
        assert_eq!(fs::read(&out).unwrap(), text);
        let lines = &console.lines;
        assert!(lines[0].starts_with("predicted 50 rows in "), "{lines:?}");
        assert!(
            lines[1].starts_with("note: the saved fit did not converge"),
            "{lines:?}"
        );
        assert!(lines.last().unwrap().contains("se_eta is left empty"), "{lines:?}");
    }
}
