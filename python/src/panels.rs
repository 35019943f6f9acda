//! Plotted smooths as Python data: `{"panels": [{title, x_label, y_label,
//! x, fit, lower, upper}], "notes": [...]}`, for matplotlib.

use matfree::plot::Panel;
use numpy::IntoPyArray;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// Panels and the notes on what is not drawn.
pub(crate) struct Panels<'a> {
    pub panels: &'a [Panel],
    pub notes: &'a [String],
}

/// The panels as a dict of lists of dicts of numpy arrays.
pub(crate) fn panels_to_py<'py>(py: Python<'py>, p: Panels<'_>) -> PyResult<Bound<'py, PyDict>> {
    let list = PyList::empty(py);
    for panel in p.panels {
        let d = PyDict::new(py);
        d.set_item("title", &panel.title)?;
        d.set_item("x_label", &panel.x_label)?;
        d.set_item("y_label", &panel.y_label)?;
        let b = &panel.band;
        d.set_item("x", b.x.clone().into_pyarray(py))?;
        d.set_item("fit", b.fit.clone().into_pyarray(py))?;
        d.set_item("lower", b.lower.clone().into_pyarray(py))?;
        d.set_item("upper", b.upper.clone().into_pyarray(py))?;
        list.append(d)?;
    }
    let out = PyDict::new(py);
    out.set_item("panels", list)?;
    out.set_item("notes", p.notes.to_vec())?;
    Ok(out)
}
