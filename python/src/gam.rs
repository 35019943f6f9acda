//! GAM fits: `fit_gam` (what `fit_gam --data --formula` does, on columns
//! in memory) and the fitted model, [`GamResult`] (a `SavedGam`: what
//! `--save` writes and `--model` reads).

use matfree::device::choose_device;
use matfree::gam::{Distribution, Family, Gam, GamOptions, Link, PredictionType, SavedGam};
use numpy::ndarray::Array2;
use numpy::{IntoPyArray, PyArray1, PyArray2};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::columns::Columns;
use crate::panels::{panels_to_py, Panels};
use crate::py_err;
use crate::watch::Watcher;

/// The model `formula` of `family` (R's name) with `link` (default the
/// canonical one) and prior weights from column `weights`.
fn gam(formula: &str, family: &str, link: Option<&str>, weights: Option<&str>) -> PyResult<Gam> {
    let distribution: Distribution = family.parse().map_err(py_err)?;
    let link: Link = match link {
        Some(l) => l.parse().map_err(py_err)?,
        None => Family::canonical(distribution).link(),
    };
    let mut gam = Gam::new(formula, Family::new(distribution, link).map_err(py_err)?).map_err(py_err)?;
    if let Some(w) = weights {
        gam = gam.with_weights(w);
    }
    Ok(gam)
}

/// The columns the model reads (the formula's, then the weights'): what
/// the Python layer takes out of a DataFrame.
#[pyfunction]
#[pyo3(signature = (formula, family, link=None, weights=None))]
pub fn gam_columns(formula: &str, family: &str, link: Option<&str>, weights: Option<&str>) -> PyResult<Vec<String>> {
    Ok(gam(formula, family, link, weights)?.columns())
}

/// Set up `formula` on `data` and fit it by REML on `device` (auto, cpu,
/// gpu), as `fit_gam` does; the GIL is released during the fit, and
/// `progress(event)` is called at each Newton and REML iteration.
#[pyfunction]
#[pyo3(signature = (formula, family, data, link=None, weights=None, device="auto", progress=None))]
#[allow(clippy::too_many_arguments)]
pub fn fit_gam(
    py: Python<'_>,
    formula: &str,
    family: &str,
    data: &Bound<'_, PyDict>,
    link: Option<&str>,
    weights: Option<&str>,
    device: &str,
    progress: Option<Py<PyAny>>,
) -> PyResult<GamResult> {
    let gam = gam(formula, family, link, weights)?;
    let held = Columns::from_dict(data)?;
    let columns = held.gam()?;
    let watcher = Watcher::new(progress);
    let fitted = py.detach(|| -> matfree::Result<(SavedGam, String)> {
        let device = choose_device("device", device)?;
        let model = gam.setup(&columns)?;
        let fit = model.fit_on_device(&device, &watcher, &GamOptions::default())?;
        Ok((SavedGam::new(&model, fit, formula)?, device.describe()))
    });
    let (saved, device) = fitted.map_err(|e| watcher.raised(py_err(e)))?;
    Ok(GamResult { saved, device })
}

/// A fit saved as JSON (by `save` here or by `fit_gam --save`).
#[pyfunction]
pub fn gam_from_json(text: &str) -> PyResult<GamResult> {
    let saved = SavedGam::from_json(text).map_err(py_err)?;
    Ok(GamResult {
        saved,
        device: "loaded".into(),
    })
}

/// A prediction and its standard errors.
type FitAndSe<'py> = (Bound<'py, PyArray1<f64>>, Bound<'py, PyArray1<f64>>);

/// A fitted GAM.
#[pyclass(module = "matfree._matfree", frozen)]
pub struct GamResult {
    saved: SavedGam,
    device: String,
}

/// A row-major p x p matrix as a 2-D array.
pub(crate) fn square<'py>(py: Python<'py>, m: &[f64]) -> Bound<'py, PyArray2<f64>> {
    let p = (m.len() as f64).sqrt().round() as usize;
    let a = Array2::from_shape_vec((p, p), m.to_vec()).unwrap_or_else(|_| Array2::zeros((0, 0)));
    a.into_pyarray(py)
}

#[pymethods]
impl GamResult {
    /// The coefficients' names, mgcv's.
    #[getter]
    fn names(&self) -> Vec<String> {
        self.saved.fit.names.clone()
    }
    #[getter]
    fn coefficients<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        self.saved.fit.coefficients.clone().into_pyarray(py)
    }
    /// mgcv's Vp (Bayesian covariance), p x p.
    #[getter]
    fn vp<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray2<f64>> {
        square(py, &self.saved.fit.vp)
    }
    /// mgcv's Ve (frequentist covariance), p x p.
    #[getter]
    fn ve<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray2<f64>> {
        square(py, &self.saved.fit.ve)
    }
    /// The edf of each coefficient.
    #[getter]
    fn edf<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        self.saved.fit.edf.clone().into_pyarray(py)
    }
    /// Each smooth's label and edf.
    #[getter]
    fn smooth_edf(&self) -> Vec<(String, f64)> {
        self.saved.fit.smooth_edf()
    }
    /// The smoothing parameters, mgcv's sp.
    #[getter]
    fn sp<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        self.saved.fit.sp.clone().into_pyarray(py)
    }
    #[getter]
    fn converged(&self) -> bool {
        self.saved.fit.converged
    }
    /// What the fit did that its user should know (a GPU fit whose rows
    /// stayed on the host); the fit warns with each.
    #[getter]
    fn notes(&self) -> Vec<String> {
        self.saved.fit.notes.clone()
    }
    /// Why the last REML solve stopped.
    #[getter]
    fn termination(&self) -> String {
        format!("{:?}", self.saved.fit.report.termination)
    }
    #[getter]
    fn formula(&self) -> String {
        self.saved.formula.clone()
    }
    #[getter]
    fn family(&self) -> &'static str {
        self.saved.fit.family.distribution().name()
    }
    #[getter]
    fn link(&self) -> &'static str {
        self.saved.fit.family.link().name()
    }
    /// Where it was fitted (`loaded` for a loaded fit).
    #[getter]
    fn device(&self) -> String {
        self.device.clone()
    }
    /// The columns a prediction reads.
    #[getter]
    fn covariates(&self) -> Vec<String> {
        self.saved.fit.covariates()
    }
    /// The scalars mgcv reports: scale, reml_scale, reml_score, deviance,
    /// null_deviance, n, r_sq.
    fn scalars<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (f, d) = (&self.saved.fit, PyDict::new(py));
        d.set_item("scale", f.scale)?;
        d.set_item("reml_scale", f.reml_scale)?;
        d.set_item("reml_score", f.reml_score)?;
        d.set_item("deviance", f.deviance)?;
        d.set_item("null_deviance", f.null_deviance)?;
        d.set_item("n", f.n)?;
        d.set_item("r_sq", self.saved.r_sq)?;
        Ok(d)
    }
    /// `summary.gam`'s table as `fit_gam` prints it.
    fn summary_text(&self) -> PyResult<String> {
        Ok(self.saved.summary().map_err(py_err)?.to_string())
    }
    /// The summary as JSON (what `fit_gam --json` writes).
    fn summary_json(&self) -> PyResult<String> {
        let summary = self.saved.summary().map_err(py_err)?;
        serde_json::to_string(&summary).map_err(|e| PyValueError::new_err(e.to_string()))
    }
    /// The saved fit as JSON (what `fit_gam --save` writes).
    fn to_json(&self) -> PyResult<String> {
        self.saved.to_json().map_err(py_err)
    }
    /// Write the saved fit to `path` (replaced whole, never half written).
    fn save(&self, path: std::path::PathBuf) -> PyResult<()> {
        self.saved.save(&path).map_err(py_err)
    }
    /// `predict.gam` at the rows of `data` on the `kind` scale (link or
    /// response): (fit, se.fit).
    fn predict<'py>(&self, py: Python<'py>, data: &Bound<'py, PyDict>, kind: &str) -> PyResult<FitAndSe<'py>> {
        let kind = match kind {
            "link" => PredictionType::Link,
            "response" => PredictionType::Response,
            other => {
                return Err(PyValueError::new_err(format!(
                    "type = {other:?}: must be \"link\" or \"response\""
                )))
            }
        };
        let held = Columns::from_dict(data)?;
        let columns = held.gam()?;
        let p = py.detach(|| self.saved.fit.predict(&columns, kind)).map_err(py_err)?;
        Ok((p.fit.into_pyarray(py), p.se.into_pyarray(py)))
    }
    /// `plot.gam`'s panels: each one-dimensional smooth on a grid with a
    /// +-2 SE band; the notes name the smooths not drawn.
    fn smooths<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let p = self.saved.fit.smooth_panels().map_err(py_err)?;
        panels_to_py(
            py,
            Panels {
                panels: &p.panels,
                notes: &p.skipped,
            },
        )
    }
}
