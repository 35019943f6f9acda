//! BMS fits: `fit_bms` (one `fit_bms` job on columns in memory:
//! `bms::io::job`, with a `Source::Built` problem) and the fitted model,
//! [`BmsResult`] (a `SavedFit`: what `fit_bms --save` writes and
//! `--model` reads).

use std::sync::Arc;

use matfree::bms::fit::progress::Display;
use matfree::bms::io::job::{Console, FitTask, Job, JobError, Outcome, Outputs, Source, Task};
use matfree::bms::io::problem::{ModelShape, Problem};
use matfree::bms::results::report::{parameter_names, DesignNames};
use matfree::bms::results::saved::SavedFit;
use matfree::bms::results::summary::smooth_panels;
use matfree::bms::BmsModel;
use matfree::data::{from_columns, ColumnSpec};
use matfree::solvers::observer::Observer;
use numpy::{IntoPyArray, PyArray1, PyArray2};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::columns::Columns;
use crate::gam::square;
use crate::panels::{panels_to_py, Panels};
use crate::watch::Watcher;
use crate::{job_err, py_err};

/// The job's report, kept for Python; its observer is the watcher
/// (progress and Ctrl-C).
struct Collected<'w> {
    report: String,
    watcher: &'w Watcher,
}

impl Console for Collected<'_> {
    /// A quiet job says nothing but a prediction's lines (not run here).
    fn say(&mut self, _: &str) {}
    fn print(&mut self, text: &str) -> Result<(), String> {
        self.report.push_str(text);
        Ok(())
    }
    fn observer(&self) -> &dyn Observer {
        self.watcher
    }
}

/// The model's columns, shape and solver settings, as `fit_bms` takes
/// them on its command line.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub struct BmsSpec {
    label: String,
    score: String,
    weights: Option<String>,
    marginal: Vec<String>,
    slope: Vec<String>,
    score_basis: usize,
    link_basis: usize,
    frailty_sd: f64,
    keep_score: bool,
    lambda: Option<Vec<f64>>,
    newton_tol: f64,
    reml_tol: f64,
    gpus: Option<usize>,
    f64_hvp: bool,
    samfrac: Option<f64>,
}

impl BmsSpec {
    fn columns(&self) -> ColumnSpec {
        ColumnSpec {
            label: self.label.clone(),
            score: self.score.clone(),
            weights: self.weights.clone(),
            marginal: self.marginal.clone(),
            slope: self.slope.clone(),
        }
    }

    fn shape(&self) -> ModelShape {
        ModelShape {
            score_basis: self.score_basis,
            link_basis: self.link_basis,
            frailty_sd: self.frailty_sd,
        }
    }

    /// The `fit_bms` job on `problem`, writing no file, showing nothing
    /// on stderr (progress goes to the console's observer).
    fn job(&self, problem: Problem, device: &str) -> Job {
        Job {
            task: Task::Fit(FitTask {
                source: Source::Built(Arc::new(problem)),
                lambda: self.lambda.clone(),
                gpus: self.gpus,
                newton_tol: self.newton_tol,
                reml_tol: self.reml_tol,
                single_precision_hvp: !self.f64_hvp,
                samfrac: self.samfrac,
                outputs: Outputs::default(),
            }),
            shape: self.shape(),
            backend: device.into(),
            display: Display::Quiet,
        }
    }
}

/// Fit the BMS model to `data` (a dict of float64 arrays) as `fit_bms`
/// does; `spec` holds the columns, shape and settings (see `BmsSpec`),
/// `progress(event)` is called at each Newton and REML iteration, and the
/// GIL is released during the fit.
#[pyfunction]
#[pyo3(signature = (data, spec, device="auto", progress=None))]
pub fn fit_bms(
    py: Python<'_>,
    data: &Bound<'_, PyDict>,
    spec: BmsSpec,
    device: &str,
    progress: Option<Py<PyAny>>,
) -> PyResult<BmsResult> {
    let held = Columns::from_dict(data)?;
    let columns = held.numeric()?;
    let watcher = Watcher::new(progress);
    let mut console = Collected {
        report: String::new(),
        watcher: &watcher,
    };
    let run = py.detach(|| -> Result<Outcome, JobError> {
        let problem = Problem::from_columns("data", &columns, &spec.columns(), spec.shape(), spec.keep_score)?;
        spec.job(problem, device).run(&mut console)
    });
    let outcome = run.map_err(|e| watcher.raised(job_err(e)))?;
    let (Some(saved), Some(summary)) = (outcome.saved, outcome.summary) else {
        return Err(PyValueError::new_err("the fit gave no saved fit"));
    };
    let json = serde_json::to_string(&summary).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let model = saved.model.model().map_err(py_err)?;
    Ok(BmsResult {
        device: summary.backend.clone(),
        saved,
        model,
        report: (console.report, json),
    })
}

/// A fit saved as JSON (by `save` here or by `fit_bms --save`).
#[pyfunction]
pub fn bms_from_json(text: &str) -> PyResult<BmsResult> {
    let (saved, model) = SavedFit::from_json(text).map_err(py_err)?;
    let mut summary = saved.fit.summary(&model, 0, names(&saved), None);
    (summary.backend, summary.data) = ("loaded".into(), "a saved fit (its rows are not saved: n = 0)".into());
    let json = serde_json::to_string(&summary).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(BmsResult {
        device: "loaded".into(),
        report: (summary.to_string(), json),
        saved,
        model,
    })
}

/// The designs' column names of a saved fit.
fn names(saved: &SavedFit) -> DesignNames<'_> {
    DesignNames {
        marginal: &saved.marginal_names,
        slope: &saved.slope_names,
    }
}

/// Predictions: p, eta, se_eta (none without a covariance), notes.
type Predicted<'py> = (
    Bound<'py, PyArray1<f64>>,
    Bound<'py, PyArray1<f64>>,
    Option<Bound<'py, PyArray1<f64>>>,
    Vec<String>,
);

/// A fitted BMS model.
#[pyclass(module = "matfree._matfree", frozen)]
pub struct BmsResult {
    saved: SavedFit,
    model: BmsModel,
    /// The report as `fit_bms` prints it, and as JSON.
    report: (String, String),
    device: String,
}

#[pymethods]
impl BmsResult {
    /// Each coefficient's name, `fit_bms`' (`marginal:x1`, `H:b3`, ...).
    #[getter]
    fn names(&self) -> Vec<String> {
        let mut named = parameter_names(&self.model, names(&self.saved));
        named.sort_by_key(|(j, _)| *j);
        named.into_iter().map(|(_, n)| n).collect()
    }
    #[getter]
    fn coefficients<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        self.saved.fit.beta.clone().into_pyarray(py)
    }
    /// (H + S)^-1, or None where the fit did not end at a minimum.
    #[getter]
    fn covariance<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyArray2<f64>>> {
        self.saved.fit.covariance.as_deref().map(|v| square(py, v))
    }
    /// The edf of each smooth (score warp, link deviation, where present).
    #[getter]
    fn edf<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        self.saved.fit.edf.blocks.clone().into_pyarray(py)
    }
    #[getter]
    fn edf_total(&self) -> f64 {
        self.saved.fit.edf.total
    }
    #[getter]
    fn lambda_<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        self.saved.fit.lambda.clone().into_pyarray(py)
    }
    #[getter]
    fn converged(&self) -> bool {
        self.saved.fit.converged
    }
    #[getter]
    fn termination(&self) -> String {
        self.saved.fit.termination.clone()
    }
    /// The fit's warnings.
    #[getter]
    fn warnings(&self) -> Vec<String> {
        self.saved.fit.warnings.clone()
    }
    #[getter]
    fn device(&self) -> String {
        self.device.clone()
    }
    /// The columns a prediction reads: the score, then the covariates.
    #[getter]
    fn covariates(&self) -> Vec<String> {
        let spec = self.saved.column_spec();
        let mut out = vec![spec.score];
        for c in spec.marginal.into_iter().chain(spec.slope) {
            if !out.contains(&c) {
                out.push(c);
            }
        }
        out
    }
    /// The report as `fit_bms` prints it.
    fn summary_text(&self) -> String {
        self.report.0.clone()
    }
    /// The report as JSON (what `fit_bms --json` writes).
    fn summary_json(&self) -> String {
        self.report.1.clone()
    }
    /// The saved fit as JSON (what `fit_bms --save` writes).
    fn to_json(&self) -> PyResult<String> {
        self.saved.to_json().map_err(py_err)
    }
    fn save(&self, path: std::path::PathBuf) -> PyResult<()> {
        self.saved.save(&path).map_err(py_err)
    }
    /// Predictions at the rows of `data` (float64 arrays with the fit's
    /// score and covariates) on `device`: (p, eta, se_eta or None, notes).
    fn predict<'py>(&self, py: Python<'py>, data: &Bound<'py, PyDict>, device: &str) -> PyResult<Predicted<'py>> {
        let held = Columns::from_dict(data)?;
        let columns = held.numeric()?;
        let s = &self.saved;
        let run = py.detach(|| -> matfree::Result<_> {
            let rows = s.predictors(from_columns("data", &columns, &s.column_spec(), 1)?)?;
            let device = matfree::device::choose_device("device", device)?;
            let pred = s.fit.predict(&device, &self.model, rows.designs.clone(), &rows.z)?;
            let notes = s.prediction_notes(&self.model, &rows.designs, &rows.z, &pred);
            Ok((pred, notes))
        });
        let (pred, notes) = run.map_err(py_err)?;
        let se = pred.se_eta.map(|s| s.into_pyarray(py));
        Ok((pred.p.into_pyarray(py), pred.eta.into_pyarray(py), se, notes))
    }
    /// The fitted smooths with 95% bands (none without a covariance).
    fn smooths<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let fit = &self.saved.fit;
        let (panels, notes) = match &fit.covariance {
            Some(cov) => (
                smooth_panels(&self.model, &fit.beta, cov, None).map_err(py_err)?,
                vec![],
            ),
            None => (
                vec![],
                vec!["no bands without a covariance (the fit is not at a minimum)".to_string()],
            ),
        };
        panels_to_py(
            py,
            Panels {
                panels: &panels,
                notes: &notes,
            },
        )
    }
}
