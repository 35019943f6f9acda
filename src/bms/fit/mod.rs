//! Fitting the BMS model on any backend: the rigid start, then Newton at
//! fixed smoothing parameters or REML, and what a summary needs from the
//! fit (the penalised covariance, effective degrees of freedom, whether and
//! why it converged). The backend's objective is given by the caller (CPU,
//! one GPU or several); everything else is the same algorithm.

pub mod checks;
pub mod progress;
pub mod rigid;
pub mod sample;

use crate::bms::MarginalSlope;
use std::time::Instant;

use matfree_solvers::newton::{newton_observed, NewtonOptions, Objective};
use matfree_solvers::observer::Observer;
use matfree_solvers::reml::{reml_observed, RemlOptions, RemlReport};
use matfree_solvers::stats::FitStatistics;
pub use matfree_solvers::stats::{effective_df, Edf};
use matfree_solvers::{Backend, CpuBackend, PcgKernels, Penalty};
use serde::{Deserialize, Serialize};

use crate::bms::fit::progress::{Display, Progress};
use crate::bms::fit::rigid::rigid_start;
use crate::bms::fit::sample::Start;
pub use crate::bms::fit::sample::{SampleFit, SampleStart};
use crate::bms::{bms_penalty, BmsData, BmsModel};
use crate::device::Device;
use crate::{Error, Result};

/// Options of [`fit`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FitOptions {
    /// Fixed smoothing parameters, one per smooth (score warp first),
    /// instead of REML.
    pub lambda: Option<Vec<f64>>,
    /// REML options; `reml.newton` is the inner Newton's (also used at
    /// fixed lambda). Default: REML's defaults with steps capped at 2 units
    /// of theta (the coefficient scales of the BMS objectives) and the
    /// inner solves ended at a decrement of [`INNER_DECREMENT`].
    pub reml: RemlOptions,
    /// Rows the rigid start fits at most (an even subsample beyond;
    /// default 200,000).
    pub rigid_rows: usize,
    /// Whether a fit on one GPU gives its PCG steps' Hessian products packed
    /// f32 copies of the row Hessians (half the bytes of packed f64; see
    /// `DeviceRowHessian::with_single_precision_hvp`). Safe for the fit:
    /// the gradient, dense steps, log-determinants and REML derivatives
    /// stay f64, so the optimum is the same. Default on; ignored on the CPU
    /// and over several GPUs.
    #[serde(default = "default_true")]
    pub single_precision_hvp: bool,
    /// When the fit starts from a fit to an even subsample of the rows
    /// (mgcv bam's `samfrac`; default: fits of 2M rows or more, on 1 in 50
    /// of them, at least 200,000). Used by [`fit_on_device`], which can
    /// build the sample's objective.
    #[serde(default)]
    pub sample_start: SampleStart,
    /// REML fits of at least this many rows cap the steps of their first
    /// inner solve at [`START_MAX_STEP`] (where `reml.start_max_step` is
    /// not set; `usize::MAX`: never). Default [`START_CAP_ROWS`].
    #[serde(default = "default_start_cap_rows")]
    pub start_cap_rows: usize,
}

fn default_start_cap_rows() -> usize {
    START_CAP_ROWS
}

fn default_true() -> bool {
    true
}

impl Default for FitOptions {
    fn default() -> Self {
        let mut reml = RemlOptions::default();
        reml.newton = NewtonOptions {
            max_step: 2.0,
            decrement_tol: INNER_DECREMENT,
            ..reml.newton
        };
        Self {
            lambda: None,
            reml,
            rigid_rows: 200_000,
            single_precision_hvp: true,
            sample_start: SampleStart::default(),
            start_cap_rows: START_CAP_ROWS,
        }
    }
}

/// The cap on the Newton steps of a large BMS fit's first inner solve
/// (from the rigid start), in units of theta (the BMS objectives'
/// coefficient scales; later solves keep the cap of 2). The rigid start
/// (warps at zero, where H + S is often indefinite) lies far from the
/// minimum: its first step ran to the cap of 2 and was halved twice, trials
/// at lengths 1, 0.5 and 0.25 (200,000 rows seed 2, 1M seed 3, 20,000 seed
/// 3), two rejected trials a fit, each a pass over every row. At 0.5, on
/// the CPU (`fit_bms --simulate N --seed S --backend cpu`): 1M rows seeds
/// 1-3 15/18/22 -> 13/16/20 evaluations, 200,000 seed 2 21 -> 20, 60,000
/// seeds 1-2 19/22 -> 18/21, 20,000 seeds 1-3 13/16/21 -> 13/14/19, REML
/// scores within 1.6e-10 relative (benches/RESULTS.md, session 36).
pub const START_MAX_STEP: f64 = 0.5;

/// The fewest rows whose fit caps its first solve's steps
/// ([`START_MAX_STEP`]). Small fits keep the start they had: on 1,500-2,000
/// rows the capped start moved REML's path (its rough first solve ends
/// elsewhere within its tolerance), and one simulated fit then ended with a
/// smooth at its bound above a lower V and a near-separable one found
/// several minima (tests/fit_validation.rs); there an evaluation costs
/// little anyway.
pub const START_CAP_ROWS: usize = 50_000;

/// The BMS fit's inner Newton tolerance (the decrement, in squared
/// standard errors): estimates within 1e-4 standard errors of the exact
/// optimum. REML's generic 1e-10 (1e-5 standard errors) cost the BMS fit a
/// Newton step a solve for digits no user reads: on 60,000 simulated rows
/// the last steps went from decrements of 1.6e-9 and 3.8e-10 to below
/// 1e-10; at 1e-8 the fit took 24 evaluations instead of 26, with the REML
/// score within 8e-12 of itself, lambda within 2e-5 and the parametric
/// estimates within 1.1e-5 standard errors.
pub const INNER_DECREMENT: f64 = 1e-8;

/// A fitted BMS model: estimates, their penalised covariance, smoothing
/// parameters and the diagnostics a summary reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BmsFit {
    /// The coefficients (beta_m, beta_g, beta_h, beta_w).
    pub beta: Vec<f64>,
    /// The smoothing parameters (one per smooth).
    pub lambda: Vec<f64>,
    /// REML's reference start ln lambda (mgcv's `initial.sp`; empty at
    /// fixed lambda).
    pub rho_ref: Vec<f64>,
    /// Whether lambda was chosen by REML.
    pub reml: bool,
    /// Whether every solve converged to its tolerance.
    pub converged: bool,
    /// Why the fit stopped (the outer loop's reason under REML).
    pub termination: String,
    /// The REML (LAML) score V at the fit, `f + log|H + S|/2 -
    /// log|S|_+/2`, at fixed lambda too (as mgcv reports it, so smoothing
    /// choices can be compared); `None` where H + S is not positive
    /// definite.
    pub reml_score: Option<f64>,
    /// The penalised negative log-likelihood at the fit.
    pub penalised_neglog: f64,
    /// The unpenalised Hessian H at the fit, dense row-major p x p.
    pub hessian: Vec<f64>,
    /// (H + S)^{-1}, row-major p x p; `None` where H + S is not positive
    /// definite (the fit is not at a minimum).
    pub covariance: Option<Vec<f64>>,
    /// Effective degrees of freedom.
    pub edf: Edf,
    /// REML outer iterations (0 at fixed lambda).
    pub reml_iterations: usize,
    /// Newton steps of the last inner solve.
    pub newton_iterations: usize,
    /// Newton steps of the first inner solve (from the rigid start).
    pub first_newton_iterations: usize,
    /// Objective evaluations of the fit (the rigid start's not counted).
    pub evaluations: usize,
    /// Rows the rigid start used, and whether it converged.
    pub rigid_start: (usize, bool),
    /// Smooths whose lambda ended at its upper bound: the data do not
    /// support them, and they are fitted as (nearly) zero.
    pub at_upper_bound: Vec<usize>,
    /// Warnings a user should read.
    pub warnings: Vec<String>,
    /// The outer REML loop's record (each iteration's rho, V, gradient,
    /// step and inner solves), for diagnosis; `None` at fixed lambda.
    pub reml_report: Option<RemlReport>,
    /// The sample's fit this fit started from ([`SampleStart`]), if any.
    #[serde(default)]
    pub sample_start: Option<SampleFit>,
}

/// Seconds of a fit's host work before its solves, on the host whatever
/// the backend: the data checks read every row, the rigid start at most
/// [`FitOptions::rigid_rows`] of them. With the solves' own host work they
/// are what a GPU fit spends outside its row evaluations and its sample
/// start (0.75 s of a 12M-row fit on the H100).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SetupSeconds {
    /// [`crate::bms::fit::checks::check_data`].
    pub data_checks: f64,
    /// The rigid start ([`crate::bms::fit::rigid`]).
    pub rigid_start: f64,
}

/// Fit `model` on `data` through `objective` (the model's negative
/// log-likelihood on `data` on some backend): the rigid start on the CPU,
/// then Newton at `opts.lambda` or REML. The data are checked first
/// ([`crate::bms::fit::checks::check_data`]): labels of one class, too few rows, a
/// constant or collinear covariate are errors. A fit that did not converge
/// is still returned, marked so (`converged`, `termination`, `warnings`).
pub fn fit<B: PcgKernels>(
    backend: &B,
    objective: &dyn Objective<B>,
    model: &BmsModel,
    data: &BmsData,
    opts: &FitOptions,
) -> Result<BmsFit> {
    fit_observed(backend, objective, &(), model, data, opts)
}

/// [`fit`], telling `observer` of the Newton and REML solves' progress
/// (the rigid start's not included).
pub fn fit_observed<B: PcgKernels>(
    backend: &B,
    objective: &dyn Objective<B>,
    observer: &dyn Observer,
    model: &BmsModel,
    data: &BmsData,
    opts: &FitOptions,
) -> Result<BmsFit> {
    fit_from(backend, objective, observer, model, data, opts, None).map(|(fit, _)| fit)
}

/// [`fit_observed`] from `start` where given (its beta instead of the
/// rigid start's, and under REML its lambda as the first rho instead of
/// the reference); the rigid start is still fitted, for its notes on
/// separation and to explain a start that cannot be evaluated. With the
/// fit, the seconds of its host work before the solves.
pub(crate) fn fit_from<B: PcgKernels>(
    backend: &B,
    objective: &dyn Objective<B>,
    observer: &dyn Observer,
    model: &BmsModel,
    data: &BmsData,
    opts: &FitOptions,
    from: Option<&Start>,
) -> Result<(BmsFit, SetupSeconds)> {
    let penalty = bms_penalty(model)?;
    let p = model.layout().p_total();
    if objective.dim() != p {
        return Err(Error::invalid(
            "objective.dim",
            objective.dim(),
            format!("must equal the model's p = {p}"),
        ));
    }
    if let Some(l) = &opts.lambda {
        if l.len() != penalty.n_blocks() {
            return Err(Error::invalid(
                "lambda",
                format!("{} values", l.len()),
                format!("the model has {} smooths", penalty.n_blocks()),
            ));
        }
    }
    let t = Instant::now();
    let mut warnings = crate::bms::fit::checks::check_data(model, data, None)?;
    let data_checks = t.elapsed().as_secs_f64();
    let start = rigid_start(model, data, opts.rigid_rows)?;
    let setup_seconds = SetupSeconds {
        data_checks,
        rigid_start: t.elapsed().as_secs_f64() - data_checks,
    };
    warnings.extend(extreme_rows_note(&start));
    if !start.report.converged {
        warnings.push(format!(
            "the rigid start did not converge ({:?}); the fit started from its last point",
            start.report.termination
        ));
    }
    let capped = start_capped(opts, data.n());
    let opts = &capped;
    let solve = |from: Option<&Start>| match (&opts.lambda, from) {
        (Some(lambda), from) => {
            let beta0 = from.map_or(&start.beta, |f| &f.beta);
            fixed(backend, objective, observer, &penalty, lambda, beta0, opts).map(|f| (f, None))
        }
        (None, None) => selected(backend, objective, observer, &penalty, &start.beta, None, opts),
        (None, Some(from)) => {
            let rho: Vec<f64> = from.lambda.iter().map(|l| l.ln()).collect();
            selected(backend, objective, observer, &penalty, &from.beta, Some(&rho), opts)
        }
    };
    let out = match solve(from) {
        // A sample's estimates can fail on a row the sample did not hold
        // (an outlier the calibration cannot solve there): the rigid start
        // instead, as without the sample.
        Err(e) if from.is_some() && failed_at_start(&e) => {
            warnings.push(format!(
                "the sample start's estimates could not be evaluated on every row ({e}); the fit started from the \
                 rigid fit instead"
            ));
            solve(None)
        }
        out => out,
    };
    let (mut out, kept) = out.map_err(|e| explain_start_failure(e, model, data, &start))?;
    out.rigid_start = (start.rows, start.report.converged);
    out.warnings.splice(0..0, warnings);
    finish(backend, &mut out, &penalty, &data.weights, kept)?;
    Ok((out, setup_seconds))
}

/// The share of the rigid start's rows at a margin beyond `EXTREME_ETA`
/// from which they are noted: rows that far out occur in valid data with
/// strong effects (1 of 200,000 in `fit_bms`' simulation), so a few say
/// nothing; a percent of the rows, or a rigid fit that ran off without
/// converging, is the mark of (quasi-)separation.
pub const EXTREME_ROWS_SHARE: f64 = 0.01;

/// The note on rows the rigid start fits with probability numerically 1,
/// where they are many or the start ran off ([`EXTREME_ROWS_SHARE`]).
fn extreme_rows_note(start: &crate::bms::fit::rigid::RigidStart) -> Option<String> {
    let (k, n) = (start.extreme_rows, start.rows);
    extreme_rows_noted(k, n, start.report.converged).then(|| {
        format!(
            "the rigid start fits {k} of {n} rows with their label's probability numerically 1 (margin beyond {}){}: \
             the data may be (quasi-)separated, and estimates along that direction may run large",
            crate::bms::fit::rigid::EXTREME_ETA,
            if start.report.converged {
                ""
            } else {
                " and did not converge"
            }
        )
    })
}

/// Whether `extreme` of `rows` rows at probability numerically 1 are worth a
/// note ([`EXTREME_ROWS_SHARE`]).
pub fn extreme_rows_noted(extreme: usize, rows: usize, converged: bool) -> bool {
    extreme > 0 && (extreme as f64 >= EXTREME_ROWS_SHARE * rows as f64 || !converged)
}

/// Whether `e` says the objective was not finite at the solve's start.
fn failed_at_start(e: &Error) -> bool {
    matches!(e, Error::Solver(matfree_solvers::SolverError::InvalidInput { field, .. }) if field == "beta0")
}

/// A start where the objective is not finite is a row the model cannot
/// evaluate there: the error names the first such row (1-based), the
/// reason and its values, instead of "beta0 = a point". Where the rigid
/// start ran off to it (a share of [`EXTREME_ROWS_SHARE`] or more of its
/// rows at probability numerically 1), the cause named is separation, not
/// the row.
fn explain_start_failure(
    e: Error,
    model: &BmsModel,
    data: &BmsData,
    start: &crate::bms::fit::rigid::RigidStart,
) -> Error {
    if !failed_at_start(&e) {
        return e;
    }
    let Err(Error::RowRejected { row, reason }) = model.evaluate(data, &start.beta) else {
        return e;
    };
    let d = &data.designs;
    let values = |x: &[f64]| x.iter().map(|v| format!("{v:e}")).collect::<Vec<_>>().join(", ");
    let cause = if extreme_rows_noted(start.extreme_rows, start.rows, true) {
        format!(
            "the rigid start fits {} of {} rows with probability numerically 1: the labels look separated by a \
             combination of the covariates (no finite estimate exists), which carried the start where this row \
             cannot be calibrated; drop or merge the covariates that separate them",
            start.extreme_rows, start.rows
        )
    } else {
        "a value far outside the others' range (an outlier, a unit error?) takes it beyond what the calibration \
         can solve; check the row, transform the column (a log, say) or drop the row"
            .to_string()
    };
    Error::invalid(
        format!("row {}", row + 1),
        format!(
            "marginal design [{}], slope design [{}], score {:e}",
            values(d.x_m_row(row)),
            values(d.x_g_row(row)),
            data.z[row]
        ),
        format!("the model cannot be evaluated at this row at the start ({reason}): {cause}"),
    )
}

/// The log-likelihood per unit weight below which a fit separates the
/// labels: every row's label fitted with probability within about 1e-6 of
/// 1, which no data with any noise allow at a finite optimum.
pub const SEPARATED_NEGLOG_PER_WEIGHT: f64 = 1e-6;

/// Whether the fit separates the labels (its unpenalised negative
/// log-likelihood below [`SEPARATED_NEGLOG_PER_WEIGHT`] per unit weight);
/// `s` is the penalty S_lambda, dense.
fn separation_warning(fit: &BmsFit, s: &[f64], weights: &[f64]) -> Option<String> {
    let p = fit.beta.len();
    let quad: f64 = (0..p)
        .map(|i| fit.beta[i] * (0..p).map(|j| s[i * p + j] * fit.beta[j]).sum::<f64>())
        .sum();
    let neglog = fit.penalised_neglog - 0.5 * quad;
    let total: f64 = weights.iter().sum();
    (neglog < SEPARATED_NEGLOG_PER_WEIGHT * total).then(|| {
        format!(
            "the fit separates the labels: its negative log-likelihood is {neglog:.3e} over a total weight of \
             {total}, so every row's label is fitted with probability numerically 1; the parametric estimates run \
             to infinity and have no finite value, and their standard errors mean nothing. Drop or merge the \
             covariates that separate the labels, or fit more data"
        )
    })
}

/// The fit at fixed lambda.
fn fixed<B: PcgKernels>(
    backend: &B,
    objective: &dyn Objective<B>,
    observer: &dyn Observer,
    penalty: &Penalty,
    lambda: &[f64],
    beta0: &[f64],
    opts: &FitOptions,
) -> Result<BmsFit> {
    let f = newton_observed(backend, objective, penalty, lambda, beta0, &opts.reml.newton, observer)?;
    let steps = f.report.steps();
    Ok(BmsFit {
        converged: f.report.converged,
        termination: format!("Newton: {:?}", f.report.termination),
        hessian: f.hessian.to_dense()?,
        beta: f.beta,
        lambda: lambda.to_vec(),
        rho_ref: Vec::new(),
        reml: false,
        reml_score: None,
        penalised_neglog: f.objective,
        covariance: None,
        // Filled by `finish`.
        edf: Edf::default(),
        reml_iterations: 0,
        newton_iterations: steps,
        first_newton_iterations: steps,
        evaluations: f.report.evaluations,
        rigid_start: (0, false),
        at_upper_bound: Vec::new(),
        warnings: Vec::new(),
        reml_report: None,
        sample_start: None,
    })
}

/// `opts` with the first inner solve's cap ([`START_MAX_STEP`]) where the
/// fit has at least `start_cap_rows` rows and `reml.start_max_step` is not
/// set.
fn start_capped(opts: &FitOptions, n: usize) -> FitOptions {
    let mut o = opts.clone();
    if n >= o.start_cap_rows && o.reml.start_max_step.is_none() {
        o.reml.start_max_step = Some(START_MAX_STEP);
    }
    o
}

/// The fit with lambda chosen by REML, and its statistics (from REML's
/// last factor of H + S).
fn selected<B: PcgKernels>(
    backend: &B,
    objective: &dyn Objective<B>,
    observer: &dyn Observer,
    penalty: &Penalty,
    beta0: &[f64],
    rho0: Option<&[f64]>,
    opts: &FitOptions,
) -> Result<(BmsFit, Option<FitStatistics>)> {
    let f = reml_observed(backend, objective, penalty, rho0, beta0, &opts.reml, observer)?;
    let r = &f.report;
    let mut warnings = Vec::new();
    if !f.laml.newton.converged {
        warnings.push(format!(
            "the last inner Newton solve did not converge ({:?})",
            f.laml.newton.termination
        ));
    }
    warnings.extend(r.termination_note(&opts.reml));
    let fit = BmsFit {
        converged: r.converged && f.laml.newton.converged,
        termination: format!("REML: {:?}", r.termination),
        reml_score: Some(f.laml.value),
        penalised_neglog: f.laml.objective,
        hessian: f.laml.hessian.clone(),
        at_upper_bound: r.at_upper_bound(&f.laml.rho),
        beta: f.laml.beta.clone(),
        lambda: f.lambda.clone(),
        rho_ref: r.rho_ref.clone(),
        reml: true,
        covariance: None,
        // Filled by `finish`.
        edf: Edf::default(),
        reml_iterations: r.iterations.len(),
        newton_iterations: f.laml.newton.steps(),
        first_newton_iterations: r.start_newton_steps,
        evaluations: r.evaluations,
        rigid_start: (0, false),
        warnings,
        reml_report: Some(f.report.clone()),
        sample_start: None,
    };
    Ok((fit, Some(f.statistics)))
}

/// The covariance, the edf and the warnings they imply; a fit that
/// separates the labels is not converged. `kept`: the statistics REML
/// computed from its own factor of H + S; at fixed lambda (`None`), H + S is
/// factored here, once (Newton's last step need not have factored it).
fn finish<B: Backend>(
    backend: &B,
    out: &mut BmsFit,
    penalty: &Penalty,
    weights: &[f64],
    kept: Option<FitStatistics>,
) -> Result<()> {
    let p = out.beta.len();
    let s = penalty.dense(&out.lambda)?;
    if let Some(w) = separation_warning(out, &s, weights) {
        out.converged = false;
        out.termination = format!("separated ({})", out.termination);
        out.warnings.push(w);
    }
    let statistics = match kept {
        Some(st) => Ok(st),
        None => FitStatistics::new(backend, &out.hessian, penalty, &out.lambda),
    };
    match statistics {
        Ok(st) => {
            if out.reml_score.is_none() {
                let log_pdet = penalty.log_pseudo_det(&out.lambda)?;
                out.reml_score = Some(st.reml_score(out.penalised_neglog, log_pdet));
            }
            out.covariance = Some(st.covariance);
            out.edf = st.edf;
        }
        Err(matfree_solvers::SolverError::NotPositiveDefinite { .. }) => {
            out.converged = false;
            out.warnings.push(
                "H + S is not positive definite at the final point: it is not a minimum, and no standard errors \
                 are given"
                    .into(),
            );
            out.edf = effective_df(p, &out.hessian, &s, penalty)?;
        }
        Err(e) => return Err(e.into()),
    }
    if out.edf.from_positive_part {
        out.warnings.push(
            "the Hessian of the log-likelihood is indefinite at the fit (common on small data) and its edf fell \
             outside [0, dim]: the effective degrees of freedom use its positive part"
                .into(),
        );
    }
    if !out.converged && out.warnings.is_empty() {
        out.warnings
            .push(format!("the fit did not converge ({})", out.termination));
    }
    Ok(())
}

/// A fit run on a device, with where it ran and how long evaluations took.
pub struct DeviceFit {
    /// The fit.
    pub fit: BmsFit,
    /// The backend, described (CPU threads, GPU name, or the GPU group).
    pub backend: String,
    /// Seconds spent uploading the data to the device(s).
    pub upload_seconds: f64,
    /// Seconds of the fit (the sample start's included).
    pub fit_seconds: f64,
    /// Seconds of the fit spent in objective evaluations (the sample
    /// start's not included).
    pub evaluation_seconds: f64,
    /// Seconds of the sample start's fit (included in `fit_seconds`).
    pub sample_seconds: Option<f64>,
    /// Seconds of the fit's data checks and rigid start (included in
    /// `fit_seconds`).
    pub setup_seconds: SetupSeconds,
    /// The GPU memory the upload and the fit used (none on the CPU).
    pub memory: Option<crate::device::MemoryUse>,
}

/// [`fit`] on `device`: the CPU, one GPU, or the first `gpus` GPUs with
/// the rows sharded over them (`gpus` is ignored on the CPU); `display`
/// says what it shows on stderr while it runs.
pub fn fit_on_device(
    device: &Device,
    gpus: usize,
    model: &BmsModel,
    data: &BmsData,
    opts: &FitOptions,
    display: Display,
) -> Result<DeviceFit> {
    fit_on_device_observed(device, gpus, model, data, opts, display, &())
}

/// [`fit_on_device`], telling `observer` too of the solves' progress (and
/// stopping where it asks, [`Observer::interrupted`]).
pub fn fit_on_device_observed(
    device: &Device,
    gpus: usize,
    model: &BmsModel,
    data: &BmsData,
    opts: &FitOptions,
    display: Display,
    observer: &dyn Observer,
) -> Result<DeviceFit> {
    opts.sample_start.validate()?;
    let sample = match opts.sample_start.rows(data.n()) {
        Some(rows) => Some(sample::sample_fit(device, gpus, model, data, opts, rows, observer)?),
        None => None,
    };
    let start = sample.as_ref().and_then(|(s, beta)| s.start(beta));
    let t = Instant::now();
    let job = Fitting {
        model,
        data,
        opts,
        start: start.as_ref(),
        shown: Shown { display, observer },
    };
    let mut run = match (device, gpus) {
        #[cfg(feature = "cuda")]
        (Device::Gpu(gpu), gpus) => fit_on_gpus(gpu, gpus, job, t)?,
        (Device::Cpu { .. }, _) => {
            let objective = model.objective(data)?;
            let backend = CpuBackend::new();
            timed(&backend, &objective, job, device.describe(), t)?
        }
    };
    if let Some((s, _)) = sample {
        run.fit_seconds += s.seconds;
        run.sample_seconds = Some(s.seconds);
        if !s.used {
            let why = s.error.as_deref().unwrap_or("it did not converge");
            run.fit.warnings.push(format!(
                "the sample start (a fit to {} of the rows) was not used ({why}); the fit started from the rigid \
                 fit instead",
                s.rows
            ));
        }
        run.fit.sample_start = Some(s);
    }
    Ok(run)
}

/// What a fit on a device fits, from where, and what it shows.
#[derive(Clone, Copy)]
struct Fitting<'a> {
    model: &'a BmsModel,
    data: &'a BmsData,
    opts: &'a FitOptions,
    start: Option<&'a Start>,
    shown: Shown<'a>,
}

/// What a fit on a device shows and who else watches it.
#[derive(Clone, Copy)]
struct Shown<'a> {
    display: Display,
    observer: &'a dyn Observer,
}

/// [`fit_on_device`] on `gpu`, or on the first `gpus` GPUs where that is
/// more than one; `t` is when the upload began.
#[cfg(feature = "cuda")]
fn fit_on_gpus(gpu: &std::sync::Arc<crate::cuda::Gpu>, gpus: usize, job: Fitting<'_>, t: Instant) -> Result<DeviceFit> {
    let (model, data, opts) = (job.model, job.data, job.opts);
    use crate::cuda::{CudaBackend, GpuGroup, MultiGpuBackend};
    if gpus <= 1 {
        gpu.reset_memory_peak()?;
        let objective = model
            .device_objective(gpu.clone(), data)?
            .with_single_precision_hvp(opts.single_precision_hvp);
        let backend = CudaBackend::new(gpu.clone())?;
        let run = timed(&backend, &objective, job, gpu.describe(), t)?;
        return with_memory(run, std::slice::from_ref(gpu));
    }
    let group = GpuGroup::open(gpus)?;
    for g in group.gpus() {
        g.reset_memory_peak()?;
    }
    let objective = model.sharded_objective(group.clone(), data)?;
    let backend = MultiGpuBackend::new(group.clone())?;
    let run = timed(&backend, &objective, job, group.describe(), t)?;
    with_memory(run, group.gpus())
}

/// `run` with the largest memory peak among `gpus`.
#[cfg(feature = "cuda")]
fn with_memory(mut run: DeviceFit, gpus: &[std::sync::Arc<crate::cuda::Gpu>]) -> Result<DeviceFit> {
    for g in gpus {
        let m = g.memory()?;
        if let Some(peak) = m.peak {
            if run.memory.is_none_or(|u| peak > u.peak_bytes) {
                run.memory = Some(crate::device::MemoryUse {
                    peak_bytes: peak,
                    total_bytes: m.total,
                });
            }
        }
    }
    Ok(run)
}

/// `job` through `objective` on `backend` (described by `describe`),
/// whose upload began at `upload`.
fn timed<B: PcgKernels>(
    backend: &B,
    objective: &dyn Objective<B>,
    job: Fitting<'_>,
    describe: String,
    upload: Instant,
) -> Result<DeviceFit> {
    let Fitting {
        model,
        data,
        opts,
        start,
        shown,
    } = job;
    let upload_seconds = upload.elapsed().as_secs_f64();
    let progress = Progress::new(shown.display);
    let t = Instant::now();
    let both: (&dyn Observer, &dyn Observer) = (&progress, shown.observer);
    let result = fit_from(backend, objective, &both, model, data, opts, start);
    progress.finish();
    let (fit, setup_seconds) = result?;
    Ok(DeviceFit {
        fit,
        setup_seconds,
        backend: describe,
        upload_seconds,
        fit_seconds: t.elapsed().as_secs_f64(),
        evaluation_seconds: progress.evaluation_seconds(),
        sample_seconds: None,
        memory: None,
    })
}

#[cfg(test)]
mod tests {
    use super::{extreme_rows_noted, start_capped, FitOptions, START_CAP_ROWS, START_MAX_STEP};

    /// One row of 200,000 far out is valid data with a strong effect (issue
    /// 38, item 11); a percent of the rows, or a start that ran off, is not.
    #[test]
    fn extreme_rows_are_noted_by_share_or_a_runaway_start() {
        assert!(!extreme_rows_noted(1, 200_000, true));
        assert!(!extreme_rows_noted(1_999, 200_000, true));
        assert!(extreme_rows_noted(2_000, 200_000, true));
        assert!(extreme_rows_noted(1, 200_000, false));
        assert!(extreme_rows_noted(15, 20, true));
        assert!(!extreme_rows_noted(0, 20, false));
    }

    /// The start cap goes on at START_CAP_ROWS rows, never overrides a cap
    /// the caller set, and is off with `start_cap_rows` at usize::MAX.
    #[test]
    fn the_start_cap_follows_the_rows_and_the_callers_choice() {
        let opts = FitOptions::default();
        assert_eq!(start_capped(&opts, START_CAP_ROWS - 1).reml.start_max_step, None);
        assert_eq!(
            start_capped(&opts, START_CAP_ROWS).reml.start_max_step,
            Some(START_MAX_STEP)
        );
        let mut own = FitOptions::default();
        own.reml.start_max_step = Some(1.5);
        assert_eq!(start_capped(&own, 10 * START_CAP_ROWS).reml.start_max_step, Some(1.5));
        let never = FitOptions {
            start_cap_rows: usize::MAX,
            ..FitOptions::default()
        };
        assert_eq!(start_capped(&never, usize::MAX - 1).reml.start_max_step, None);
        // Saved options from before the field read as the default.
        let mut json = serde_json::to_value(&opts).unwrap();
        json.as_object_mut().unwrap().remove("start_cap_rows");
        let read: FitOptions = serde_json::from_value(json).unwrap();
        assert_eq!(read.start_cap_rows, START_CAP_ROWS);
    }
}
