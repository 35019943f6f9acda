//! `matfree._matfree`: the compiled half of the Python package. Thin
//! bindings over the library's own front-end calls (the ones `fit_gam` and
//! `fit_bms` make): the data come in as named columns (numpy float64
//! arrays, borrowed without a copy, or lists of level names), every fit
//! runs with the GIL released and an observer that relays its progress to
//! a Python callback and stops it on Ctrl-C, and every error becomes a
//! Python exception. The user-facing classes are in `matfree/*.py`.

mod bms;
mod columns;
mod gam;
mod panels;
mod watch;

use matfree::bms::io::job::JobError;
use matfree::solvers::SolverError;
use matfree::Error;
use pyo3::exceptions::{PyKeyboardInterrupt, PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;

/// A library error as the Python exception a user expects: bad input is a
/// `ValueError`, an interrupted fit a `KeyboardInterrupt`, anything else
/// (a device, a solver that failed) a `RuntimeError`.
pub(crate) fn py_err(e: Error) -> PyErr {
    match e {
        Error::InvalidInput { .. } | Error::RowRejected { .. } => PyValueError::new_err(e.to_string()),
        Error::Solver(SolverError::InvalidInput { .. }) => PyValueError::new_err(e.to_string()),
        Error::Solver(SolverError::Interrupted) => PyKeyboardInterrupt::new_err("the fit was interrupted"),
        _ => PyRuntimeError::new_err(e.to_string()),
    }
}

/// A BMS job's error: an option or the data is a `ValueError`, an output
/// an `OSError`, the library's as [`py_err`].
pub(crate) fn job_err(e: JobError) -> PyErr {
    match e {
        JobError::Option { .. } => PyValueError::new_err(e.to_string()),
        JobError::Output(message) => PyOSError::new_err(message),
        JobError::Matfree(e) => py_err(e),
    }
}

#[pymodule]
fn _matfree(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(gam::fit_gam, m)?)?;
    m.add_function(wrap_pyfunction!(gam::gam_from_json, m)?)?;
    m.add_function(wrap_pyfunction!(gam::gam_columns, m)?)?;
    m.add_function(wrap_pyfunction!(bms::fit_bms, m)?)?;
    m.add_function(wrap_pyfunction!(bms::bms_from_json, m)?)?;
    m.add_class::<gam::GamResult>()?;
    m.add_class::<bms::BmsResult>()?;
    m.add("CUDA_SUPPORT", matfree::device::CUDA_SUPPORT)?;
    Ok(())
}
