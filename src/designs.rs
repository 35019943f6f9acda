//! The two dense row-major designs that pull beta back to each row's q and b.

use rayon::prelude::*;

use crate::{Error, Result};

/// Marginal (n x p_m) and slope (n x p_g) designs, row-major, finite.
#[derive(Clone, Debug)]
pub struct Designs {
    n: usize,
    p_m: usize,
    p_g: usize,
    x_m: Vec<f64>,
    x_g: Vec<f64>,
}

/// The index of the first non-finite value. Checked a chunk at a time with
/// a branch-free test the compiler vectorises, the chunks in parallel (the
/// BMS bundle and a fit's row Hessians are checked at every evaluation; a
/// plain `position` scan was 3% of a CPU fit, and a serial one left the
/// other cores idle).
pub(crate) fn first_non_finite(values: &[f64]) -> Option<usize> {
    const CHUNK: usize = 4096;
    values.par_chunks(CHUNK).enumerate().find_map_first(|(c, chunk)| {
        let bad = chunk.iter().fold(false, |acc, v| acc | !v.is_finite());
        bad.then(|| c * CHUNK + chunk.iter().position(|v| !v.is_finite()).unwrap_or(0))
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
    /// Validate and wrap the designs: `n >= 1` rows, lengths `n * p_m` and
    /// `n * p_g`, every entry finite.
    pub fn new(n: usize, p_m: usize, p_g: usize, x_m: Vec<f64>, x_g: Vec<f64>) -> Result<Self> {
        if n == 0 {
            return Err(Error::invalid("n", 0, "at least one row is required"));
        }
        for (field, p) in [("p_m", p_m), ("p_g", p_g)] {
            if p == 0 {
                return Err(Error::invalid(field, 0, "a design needs at least one column"));
            }
        }
        check_matrix("x_m", &x_m, n, p_m)?;
        check_matrix("x_g", &x_g, n, p_g)?;
        Ok(Self { n, p_m, p_g, x_m, x_g })
    }

    /// Number of rows.
    pub fn n(&self) -> usize {
        self.n
    }
    /// Marginal design width.
    pub fn p_m(&self) -> usize {
        self.p_m
    }
    /// Slope design width.
    pub fn p_g(&self) -> usize {
        self.p_g
    }
    /// The marginal design, row-major.
    pub fn x_m(&self) -> &[f64] {
        &self.x_m
    }
    /// The slope design, row-major.
    pub fn x_g(&self) -> &[f64] {
        &self.x_g
    }
    /// The rows in `rows` as designs of their own (a shard of the data).
    pub fn rows(&self, rows: std::ops::Range<usize>) -> Result<Self> {
        if rows.start >= rows.end || rows.end > self.n {
            let rule = format!("must be a non-empty range within 0..{}", self.n);
            return Err(Error::invalid("rows", format!("{rows:?}"), rule));
        }
        Ok(Self {
            n: rows.len(),
            p_m: self.p_m,
            p_g: self.p_g,
            x_m: self.x_m[rows.start * self.p_m..rows.end * self.p_m].to_vec(),
            x_g: self.x_g[rows.start * self.p_g..rows.end * self.p_g].to_vec(),
        })
    }

    /// Row i of the marginal design.
    pub fn x_m_row(&self, i: usize) -> &[f64] {
        &self.x_m[i * self.p_m..(i + 1) * self.p_m]
    }
    /// Row i of the slope design.
    pub fn x_g_row(&self, i: usize) -> &[f64] {
        &self.x_g[i * self.p_g..(i + 1) * self.p_g]
    }
}
