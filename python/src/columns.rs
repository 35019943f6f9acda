//! The data a fit or a prediction reads: a dict of named columns, each a
//! 1-D numpy float64 array (borrowed: a C-contiguous one is read in place,
//! without a copy) or a list of level names (a factor). The Python layer
//! converts DataFrames and other arrays to these.

use matfree::gam::Column;
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// One column as held while the fit reads it.
enum Held<'py> {
    Numeric(PyReadonlyArray1<'py, f64>),
    Factor(Vec<String>),
}

/// The named columns of one call, borrowed from Python for its length.
pub(crate) struct Columns<'py> {
    held: Vec<(String, Held<'py>)>,
}

impl<'py> Columns<'py> {
    /// The columns of `data` (name -> float64 array or list of str).
    pub(crate) fn from_dict(data: &Bound<'py, PyDict>) -> PyResult<Self> {
        let mut held = Vec::with_capacity(data.len());
        for (name, value) in data.iter() {
            let name: String = name.extract()?;
            let column = match value.cast::<PyArray1<f64>>() {
                Ok(array) => Held::Numeric(array.try_readonly()?),
                Err(_) => Held::Factor(value.extract().map_err(|_| {
                    PyValueError::new_err(format!(
                        "column '{name}': must be a 1-D float64 array or a list of str (a factor)"
                    ))
                })?),
            };
            held.push((name, column));
        }
        Ok(Self { held })
    }

    /// The numbers of a numeric column, in place where C-contiguous.
    fn slice<'a>(name: &str, array: &'a PyReadonlyArray1<'py, f64>) -> PyResult<&'a [f64]> {
        array.as_slice().map_err(|_| {
            let shape = array.shape().to_vec();
            PyValueError::new_err(format!(
                "column '{name}': a float64 array of shape {shape:?} that is not contiguous"
            ))
        })
    }

    /// Every column, as a GAM's terms read them.
    pub(crate) fn gam(&self) -> PyResult<Vec<(&str, Column<'_>)>> {
        let mut out = Vec::with_capacity(self.held.len());
        for (name, held) in &self.held {
            out.push(match held {
                Held::Numeric(a) => (name.as_str(), Column::Numeric(Self::slice(name, a)?)),
                Held::Factor(f) => (name.as_str(), Column::Factor(f.as_slice())),
            });
        }
        Ok(out)
    }

    /// Every column as numbers (the BMS model reads no factors).
    pub(crate) fn numeric(&self) -> PyResult<Vec<(&str, &[f64])>> {
        let mut out = Vec::with_capacity(self.held.len());
        for (name, held) in &self.held {
            match held {
                Held::Numeric(a) => out.push((name.as_str(), Self::slice(name, a)?)),
                Held::Factor(_) => {
                    return Err(PyValueError::new_err(format!(
                        "column '{name}': holds text, but this model reads numbers only (code a factor as 0/1 columns)"
                    )))
                }
            }
        }
        Ok(out)
    }
}
