//! The dense row-major designs, one per linear predictor, that pull beta
//! back to each row's predictors (see [`crate::layout`]).

use rayon::prelude::*;

use crate::{Error, Result};

/// One design per linear predictor: n x p_j, row-major, finite.
#[derive(Clone, Debug)]
pub struct Designs {
    n: usize,
    widths: Vec<usize>,
    matrices: Vec<Vec<f64>>,
}

/// The index of the first non-finite value. Checked a chunk at a time with
/// a branch-free test the compiler vectorises, the chunks in parallel (the
/// BMS bundle and a fit's row Hessians are checked at every evaluation; a
/// plain `position` scan was 3% of a CPU fit, and a serial one left the
/// other cores idle).
pub(crate) fn first_non_finite(values: &[f64]) -> Option<usize> {
    first_where(values, |v| !v.is_finite())
}

/// The index of the first value for which `bad` holds, found as
/// [`first_non_finite`] finds its own: a branch-free test a chunk at a
/// time, the chunks in parallel, the first chunk that has one searched.
pub(crate) fn first_where(values: &[f64], bad: impl Fn(f64) -> bool + Sync) -> Option<usize> {
    const CHUNK: usize = 4096;
    values.par_chunks(CHUNK).enumerate().find_map_first(|(c, chunk)| {
        let any = chunk.iter().fold(false, |acc, &v| acc | bad(v));
        any.then(|| c * CHUNK + chunk.iter().position(|&v| bad(v)).unwrap_or(0))
    })
}

/// Check that `values` has `rows * cols` finite entries; name the first bad one.
pub(crate) fn check_matrix(field: &str, values: &[f64], rows: usize, cols: usize) -> Result<()> {
    let want = rows
        .checked_mul(cols)
        .ok_or_else(|| Error::invalid(field, rows, "rows * cols overflows"))?;
    if values.len() != want {
        let rule = format!("length must equal {rows} x {cols} = {want}");
        return Err(Error::invalid(format!("{field}.len"), values.len(), rule));
    }
    if let Some(i) = first_non_finite(values) {
        let at = format!("{field}[{}, {}]", i / cols.max(1), i % cols.max(1));
        return Err(Error::invalid(at, values[i], "must be finite"));
    }
    Ok(())
}

impl Designs {
    /// Validate and wrap the designs: `n >= 1` rows; each entry of
    /// `designs` is (width p_j >= 1, n * p_j values, every one finite).
    /// No designs at all is allowed (a layout of direct blocks only).
    pub fn new(n: usize, designs: Vec<(usize, Vec<f64>)>) -> Result<Self> {
        if n == 0 {
            return Err(Error::invalid("n", 0, "at least one row is required"));
        }
        let (mut widths, mut matrices) = (Vec::new(), Vec::new());
        for (j, (p, x)) in designs.into_iter().enumerate() {
            if p == 0 {
                return Err(Error::invalid(
                    format!("designs[{j}].width"),
                    0,
                    "a design needs at least one column",
                ));
            }
            check_matrix(&format!("designs[{j}]"), &x, n, p)?;
            widths.push(p);
            matrices.push(x);
        }
        Ok(Self { n, widths, matrices })
    }

    /// One design: a GLM's.
    pub fn single(n: usize, p: usize, x: Vec<f64>) -> Result<Self> {
        Self::new(n, vec![(p, x)])
    }

    /// Number of rows.
    pub fn n(&self) -> usize {
        self.n
    }
    /// Number of designs.
    pub fn count(&self) -> usize {
        self.widths.len()
    }
    /// The widths p_j.
    pub fn widths(&self) -> &[usize] {
        &self.widths
    }
    /// Design j, row-major n x p_j.
    pub fn matrix(&self, j: usize) -> &[f64] {
        &self.matrices[j]
    }
    /// Row i of design j.
    pub fn row(&self, j: usize, i: usize) -> &[f64] {
        let p = self.widths[j];
        &self.matrices[j][i * p..(i + 1) * p]
    }

    /// The rows in `rows` as designs of their own (a shard of the data).
    pub fn rows(&self, rows: std::ops::Range<usize>) -> Result<Self> {
        if rows.start >= rows.end || rows.end > self.n {
            let rule = format!("must be a non-empty range within 0..{}", self.n);
            return Err(Error::invalid("rows", format!("{rows:?}"), rule));
        }
        let matrices = self
            .matrices
            .iter()
            .zip(&self.widths)
            .map(|(x, &p)| x[rows.start * p..rows.end * p].to_vec())
            .collect();
        Ok(Self {
            n: rows.len(),
            widths: self.widths.clone(),
            matrices,
        })
    }
}
