//! ndarray in and out: data sets from ndarray arrays, and a fit's
//! coefficients, covariance and predictions as ndarray views.
//!
//! Owned arrays in standard (row-major, contiguous) layout become the data
//! set's storage as they are, without a copy (`from_arrays`); any other
//! layout (column-major, strided, sliced) is copied once into row-major
//! order. Views (`from_views`) borrow, and a data set owns its rows, so
//! they are always copied once; any strides are accepted. Everything is
//! then checked as [`Designs::new`] and [`BmsData::new`] check it. Results
//! come back as views over the fit's own vectors, without a copy.

use std::sync::Arc;

use ndarray::{Array1, Array2, ArrayView1, ArrayView2};

use crate::bms::fit::BmsFit;
use crate::bms::results::predict::Predictions;
use crate::bms::BmsData;
use crate::device::Device;
use crate::{Designs, Error, Result};

/// An owned matrix as a row-major vector: its own buffer where it is
/// already one (standard layout from the buffer's start), else one copy.
fn matrix_vec(a: Array2<f64>) -> Vec<f64> {
    let len = a.len();
    if !a.is_standard_layout() {
        return a.iter().copied().collect();
    }
    let (mut v, offset) = a.into_raw_vec_and_offset();
    let start = offset.unwrap_or(0);
    if start == 0 && v.len() == len {
        return v;
    }
    v.truncate(start + len);
    v.split_off(start)
}

/// An owned vector's values in order: its own buffer where it is one.
fn vector_vec(a: Array1<f64>) -> Vec<f64> {
    let (rows, cols) = (a.len(), 1);
    matrix_vec(
        a.into_shape_with_order((rows, cols))
            .unwrap_or_else(|e| unreachable!("n -> n x 1: {e}")),
    )
}

/// A borrowed vector's values in order (one copy, any stride).
fn view_vec(a: ArrayView1<f64>) -> Vec<f64> {
    a.iter().copied().collect()
}

/// The row counts of `arrays` must agree with the first's.
fn same_rows(arrays: &[(&str, usize)]) -> Result<()> {
    let (first, n) = arrays[0];
    match arrays.iter().find(|(_, rows)| *rows != n) {
        Some((name, rows)) => Err(Error::invalid(
            format!("{name}.rows"),
            rows,
            format!("must equal {first}'s {n} rows"),
        )),
        None => Ok(()),
    }
}

impl Designs {
    /// The designs from owned n x p_j arrays, one per linear predictor,
    /// without a copy where an array is in standard layout.
    pub fn from_arrays(designs: Vec<Array2<f64>>) -> Result<Self> {
        let n = check_design_rows(designs.iter().map(|x| x.nrows()))?;
        Self::new(n, designs.into_iter().map(|x| (x.ncols(), matrix_vec(x))).collect())
    }

    /// The designs from views of any layout (copied once, row-major).
    pub fn from_views(designs: &[ArrayView2<f64>]) -> Result<Self> {
        let n = check_design_rows(designs.iter().map(|x| x.nrows()))?;
        let rows = |a: &ArrayView2<f64>| a.iter().copied().collect::<Vec<_>>();
        Self::new(n, designs.iter().map(|x| (x.ncols(), rows(x))).collect())
    }
}

/// The designs' common row count (at least one design).
fn check_design_rows(rows: impl Iterator<Item = usize>) -> Result<usize> {
    let names: Vec<(String, usize)> = rows.enumerate().map(|(j, n)| (format!("designs[{j}]"), n)).collect();
    if names.is_empty() {
        return Err(Error::invalid("designs", "[]", "at least one design is required"));
    }
    let refs: Vec<(&str, usize)> = names.iter().map(|(s, n)| (s.as_str(), *n)).collect();
    same_rows(&refs)?;
    Ok(names[0].1)
}

impl BmsData {
    /// A data set from owned arrays (no copy where the layout matches):
    /// designs, scores z, labels y (0 or 1) and weights w (1 when `None`).
    pub fn from_arrays(designs: Designs, z: Array1<f64>, y: Array1<f64>, w: Option<Array1<f64>>) -> Result<Self> {
        let n = designs.n();
        let w = w.map_or_else(|| vec![1.0; n], vector_vec);
        Self::new(Arc::new(designs), vector_vec(z), vector_vec(y), w)
    }

    /// A data set from views of any stride (copied once).
    pub fn from_views(
        designs: Designs,
        z: ArrayView1<f64>,
        y: ArrayView1<f64>,
        w: Option<ArrayView1<f64>>,
    ) -> Result<Self> {
        let n = designs.n();
        let w = w.map_or_else(|| vec![1.0; n], view_vec);
        Self::new(Arc::new(designs), view_vec(z), view_vec(y), w)
    }
}

impl BmsFit {
    /// The coefficients beta = (beta_m, beta_g, beta_h, beta_w).
    pub fn beta_view(&self) -> ArrayView1<'_, f64> {
        ArrayView1::from(&self.beta[..])
    }

    /// The penalised covariance of beta (p x p), if the fit ended at a minimum.
    pub fn covariance_view(&self) -> Option<ArrayView2<'_, f64>> {
        let p = self.beta.len();
        self.covariance
            .as_deref()
            .and_then(|c| ArrayView2::from_shape((p, p), c).ok())
    }

    /// [`BmsFit::predict`] for new rows given as views of any layout.
    pub fn predict_views(
        &self,
        device: &Device,
        model: &crate::bms::BmsModel,
        x_m: ArrayView2<f64>,
        x_g: ArrayView2<f64>,
        z: ArrayView1<f64>,
    ) -> Result<Predictions> {
        same_rows(&[("x_m", x_m.nrows()), ("z", z.len())])?;
        let designs = Arc::new(Designs::from_views(&[x_m.view(), x_g.view()])?);
        self.predict(device, model, designs, &view_vec(z))
    }
}

impl Predictions {
    /// The linear predictors eta.
    pub fn eta_view(&self) -> ArrayView1<'_, f64> {
        ArrayView1::from(&self.eta[..])
    }

    /// The probabilities P(y = 1 | x, z).
    pub fn p_view(&self) -> ArrayView1<'_, f64> {
        ArrayView1::from(&self.p[..])
    }

    /// The standard errors of eta, where the fit has a covariance.
    pub fn se_eta_view(&self) -> Option<ArrayView1<'_, f64>> {
        self.se_eta.as_deref().map(ArrayView1::from)
    }
}

#[cfg(test)]
mod tests {
    use ndarray::{s, Array2};

    use super::*;
    use crate::bms::MarginalSlope;

    #[test]
    fn standard_layout_arrays_are_taken_without_a_copy() {
        let x_m = Array2::from_shape_fn((5, 2), |(i, j)| (i * 2 + j) as f64);
        let x_g = Array2::from_elem((5, 1), 1.0);
        let (pm, pg) = (x_m.as_ptr(), x_g.as_ptr());
        let d = Designs::from_arrays(vec![x_m, x_g]).unwrap();
        assert_eq!(d.x_m().as_ptr(), pm);
        assert_eq!(d.x_g().as_ptr(), pg);
        let z = Array1::from_vec(vec![0.1, 0.2, 0.3, 0.4, 0.5]);
        let zp = z.as_ptr();
        let data = BmsData::from_arrays(d, z, Array1::from_vec(vec![0.0, 1.0, 0.0, 1.0, 1.0]), None).unwrap();
        assert_eq!(data.z.as_ptr(), zp);
        assert_eq!(data.weights, vec![1.0; 5]);
    }

    #[test]
    fn other_layouts_give_the_same_rows() {
        let base = Array2::from_shape_fn((8, 3), |(i, j)| (i * 3 + j) as f64 + 0.5);
        let want = base.iter().copied().collect::<Vec<_>>();
        let column_major = base.t().as_standard_layout().t().to_owned();
        assert!(!column_major.is_standard_layout());
        let big = Array2::from_shape_fn((16, 3), |(i, j)| if i % 2 == 0 { base[(i / 2, j)] } else { f64::NAN });
        let strided = big.slice(s![..;2, ..]);
        let g = Array2::from_elem((8, 1), 1.0);
        for d in [
            Designs::from_arrays(vec![column_major.clone(), g.clone()]).unwrap(),
            Designs::from_views(&[column_major.view(), g.view()]).unwrap(),
            Designs::from_views(&[strided, g.view()]).unwrap(),
        ] {
            assert_eq!(d.x_m(), &want[..]);
        }
        // A sliced owned array in standard layout starts past its buffer's start.
        let tail = base.clone().slice_move(s![1.., ..]);
        assert!(tail.is_standard_layout());
        let d = Designs::from_arrays(vec![tail, Array2::from_elem((7, 1), 1.0)]).unwrap();
        assert_eq!(d.x_m(), &want[3..]);
    }

    #[test]
    fn mismatched_rows_and_bad_values_are_named() {
        let e = Designs::from_arrays(vec![Array2::zeros((4, 2)), Array2::zeros((3, 1))]).unwrap_err();
        assert!(e.to_string().contains("designs[1].rows"), "{e}");
        let d = Designs::from_arrays(vec![Array2::ones((4, 1)), Array2::ones((4, 1))]).unwrap();
        let y = Array1::from_vec(vec![0.0, 1.0, 2.0, 1.0]);
        let e = BmsData::from_arrays(d, Array1::zeros(4), y, None).unwrap_err();
        assert!(e.to_string().contains("y[2]"), "{e}");
    }
}
