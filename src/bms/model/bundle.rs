//! The Stage-2 input bundle: per-row scalars, per-cell coefficient arrays and
//! moments, and observed-point jets, in exactly the layouts the row kernel
//! (CPU here, CUDA later) indexes.
//!
//! Layouts (all row-major, `n = n_rows`, `C = cell_offsets[n]` cells in all):
//!
//! | field | length | indexing |
//! |---|---|---|
//! | q, b, mu_1, mu_2, z_obs, y, w, e_obs, chi_obs, xi_obs | n | `[i]` |
//! | cell_offsets (u32) | n + 1 | row i owns cells `cell_offsets[i]..cell_offsets[i+1]` |
//! | cell_c0..cell_c3 | C | `[c]` |
//! | cell_a, cell_aa, cell_sbb | 4 C | `[c * 4 + k]` |
//! | cell_r, cell_ar | (r - 1) 4 C | `[(c * (r - 1) + (u - 1)) * 4 + k]`, u = 1..r-1 |
//! | cell_sbh | p_h 4 C | `[(c * p_h + j) * 4 + k]` |
//! | cell_sbw | p_w 4 C | `[(c * p_w + l) * 4 + k]` |
//! | cell_moments | 10 C | `[c * 10 + k]`, m_0..m_9 |
//! | rho_u, tau_u | n r | `[i * r + u]` |
//! | r_uv | n r r | `[(i * r + u) * r + v]` |
//!
//! A cell's cubics and moments may be taken about any point x = z - c of
//! the cell's choosing, as long as all are taken about the same one: Stage 2
//! only sums products of coefficients and moments, integrals that do not
//! depend on c. Stage 1 takes them about `cells::moment_center` (a finite
//! cell's midpoint, 0 for the tails), where those sums do not cancel.

use crate::bms::model::calibration::Calibrated;
use crate::bms::model::cells::{Cell, Observed, MOMENTS};
use crate::bms::numerics::probit::norm_pdf;
use crate::designs::first_non_finite;
use crate::{Error, Result};
use std::borrow::Cow;

/// Monomial coefficients per cubic.
pub const COEFF4: usize = 4;

/// The Stage-2 input bundle (owned). Field names and layouts follow the
/// reference row kernel; see the module docs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RowKernelInputs {
    /// Number of rows n.
    pub n_rows: usize,
    /// Row width r = 2 + p_h + p_w.
    pub r: usize,
    /// Score-warp block width.
    pub p_h: usize,
    /// Link-deviation block width.
    pub p_w: usize,
    /// The frailty scale (already folded into every coefficient array).
    pub s_f: f64,
    /// Row i owns cells `cell_offsets[i]..cell_offsets[i+1]` (n + 1, monotone, from 0).
    pub cell_offsets: Vec<u32>,
    /// Marginal index q per row.
    pub q: Vec<f64>,
    /// Slope b per row.
    pub b: Vec<f64>,
    /// phi(q) per row (F_q = -mu_1).
    pub mu_1: Vec<f64>,
    /// -q phi(q) per row (F_qq = -mu_2).
    pub mu_2: Vec<f64>,
    /// Observed score per row.
    pub z_obs: Vec<f64>,
    /// Label per row, 0 or 1.
    pub y: Vec<f64>,
    /// Weight per row, > 0.
    pub weights: Vec<f64>,
    /// eta(z_obs) per row.
    pub e_obs: Vec<f64>,
    /// eta coefficient of z^0 per cell.
    pub cell_c0: Vec<f64>,
    /// eta coefficient of z^1 per cell.
    pub cell_c1: Vec<f64>,
    /// eta coefficient of z^2 per cell.
    pub cell_c2: Vec<f64>,
    /// eta coefficient of z^3 per cell.
    pub cell_c3: Vec<f64>,
    /// d eta / da, `[cell, 4]`.
    pub cell_a: Vec<f64>,
    /// d2 eta / da2, `[cell, 4]`.
    pub cell_aa: Vec<f64>,
    /// d eta / d theta_u, `[cell, r - 1, 4]` (u = 1..r-1).
    pub cell_r: Vec<f64>,
    /// d2 eta / da d theta_u, `[cell, r - 1, 4]`.
    pub cell_ar: Vec<f64>,
    /// d2 eta / db2, `[cell, 4]`.
    pub cell_sbb: Vec<f64>,
    /// d2 eta / db d beta_h, `[cell, p_h, 4]`.
    pub cell_sbh: Vec<f64>,
    /// d2 eta / db d beta_w, `[cell, p_w, 4]`.
    pub cell_sbw: Vec<f64>,
    /// m_0..m_9, `[cell, 10]`.
    pub cell_moments: Vec<f64>,
    /// d eta / da at z_obs per row.
    pub chi_obs: Vec<f64>,
    /// d2 eta / da2 at z_obs per row.
    pub xi_obs: Vec<f64>,
    /// d eta / d theta_u at z_obs, `[row, r]`.
    pub rho_u: Vec<f64>,
    /// d2 eta / da d theta_u at z_obs, `[row, r]`.
    pub tau_u: Vec<f64>,
    /// Explicit second partials at z_obs, `[row, r, r]`.
    pub r_uv: Vec<f64>,
}

/// Everything Stage 1 produced for one row.
#[derive(Clone, Debug)]
pub struct RowStage1 {
    /// Marginal index q.
    pub q: f64,
    /// Slope b.
    pub b: f64,
    /// The observed score.
    pub z_obs: f64,
    /// Label, 0 or 1.
    pub y: f64,
    /// Weight, > 0.
    pub weights: f64,
    /// The solved intercept and the cells at it.
    pub calibrated: Calibrated,
    /// The observed-point jets.
    pub observed: Observed,
}

/// Stage 1 of one row without its cells: the per-row values, and how many
/// cells the row has at its intercept.
pub(crate) struct RowHead<'o> {
    pub q: f64,
    pub b: f64,
    pub z_obs: f64,
    pub y: f64,
    pub weights: f64,
    /// Owned where Stage 1 made it for the bundle, borrowed from a
    /// [`RowStage1`] being packed.
    pub observed: Cow<'o, Observed>,
    pub cells: usize,
}

/// Doubles a cell takes in each cell array, in [`RowCells`]' order: c0..c3,
/// a, aa, r, ar, sbb, sbh, sbw, moments.
fn cell_widths(r: usize, p_h: usize, p_w: usize) -> [usize; 12] {
    let c = COEFF4;
    [1, 1, 1, 1, c, c, (r - 1) * c, (r - 1) * c, c, p_h * c, p_w * c, MOMENTS]
}

/// One row's share of the bundle's cell arrays (c0..c3, a, aa, r, ar, sbb,
/// sbh, sbw, moments), which its cells are written into.
pub(crate) struct RowCells<'a>([&'a mut [f64]; 12]);

impl RowCells<'_> {
    /// Write the row's cell j as [`RowKernelInputs::pack`] would.
    /// The cell's widths must be the share's (the bundle was sized from the
    /// same bases); a cell of other widths is an error, not a write at the
    /// wrong offsets.
    pub(crate) fn put(&mut self, j: usize, c: &Cell) -> Result<()> {
        let cells = self.cells();
        let parts: [&[[f64; COEFF4]]; 7] = [
            std::slice::from_ref(&c.a),
            std::slice::from_ref(&c.aa),
            c.r(),
            c.ar(),
            std::slice::from_ref(&c.sbb),
            c.sbh(),
            c.sbw(),
        ];
        for (f, p) in parts.iter().enumerate() {
            let width = self.0[4 + f].len() / cells.max(1);
            if p.len() * COEFF4 != width || j >= cells {
                let rule = format!(
                    "cell {j} of {cells} with {} cubics where the bundle holds {width} values",
                    p.len()
                );
                return Err(Error::invalid("cell", 4 + f, rule));
            }
        }
        for (f, v) in c.eta.iter().enumerate() {
            self.0[f][j] = *v;
        }
        for (f, p) in parts.iter().enumerate() {
            let w = p.len() * COEFF4;
            for (d, q) in self.0[4 + f][j * w..(j + 1) * w].chunks_exact_mut(COEFF4).zip(p.iter()) {
                d.copy_from_slice(q);
            }
        }
        self.0[11][j * MOMENTS..(j + 1) * MOMENTS].copy_from_slice(&c.moments);
        Ok(())
    }

    /// The number of cells this share holds.
    pub(crate) fn cells(&self) -> usize {
        self.0[0].len()
    }
}

/// The bundle's f64 arrays with their names, in one order (that of
/// `field_lengths`): `f64_fields!(x,)` borrows them, `f64_fields!(x, mut)`
/// borrows them mutably.
macro_rules! f64_fields {
    ($s:expr, $($m:tt)?) => {
        [
            ("q", &$($m)? $s.q),
            ("b", &$($m)? $s.b),
            ("mu_1", &$($m)? $s.mu_1),
            ("mu_2", &$($m)? $s.mu_2),
            ("z_obs", &$($m)? $s.z_obs),
            ("y", &$($m)? $s.y),
            ("weights", &$($m)? $s.weights),
            ("e_obs", &$($m)? $s.e_obs),
            ("cell_c0", &$($m)? $s.cell_c0),
            ("cell_c1", &$($m)? $s.cell_c1),
            ("cell_c2", &$($m)? $s.cell_c2),
            ("cell_c3", &$($m)? $s.cell_c3),
            ("cell_a", &$($m)? $s.cell_a),
            ("cell_aa", &$($m)? $s.cell_aa),
            ("cell_r", &$($m)? $s.cell_r),
            ("cell_ar", &$($m)? $s.cell_ar),
            ("cell_sbb", &$($m)? $s.cell_sbb),
            ("cell_sbh", &$($m)? $s.cell_sbh),
            ("cell_sbw", &$($m)? $s.cell_sbw),
            ("cell_moments", &$($m)? $s.cell_moments),
            ("chi_obs", &$($m)? $s.chi_obs),
            ("xi_obs", &$($m)? $s.xi_obs),
            ("rho_u", &$($m)? $s.rho_u),
            ("tau_u", &$($m)? $s.tau_u),
            ("r_uv", &$($m)? $s.r_uv),
        ]
    };
}

/// The 12 cell arrays in the row kernel's order (c0..c3, a, aa, r, ar, sbb,
/// sbh, sbw, moments), shared or mutable.
macro_rules! cell_fields {
    ($s:expr, $($m:tt)?) => {
        [
            &$($m)? $s.cell_c0,
            &$($m)? $s.cell_c1,
            &$($m)? $s.cell_c2,
            &$($m)? $s.cell_c3,
            &$($m)? $s.cell_a,
            &$($m)? $s.cell_aa,
            &$($m)? $s.cell_r,
            &$($m)? $s.cell_ar,
            &$($m)? $s.cell_sbb,
            &$($m)? $s.cell_sbh,
            &$($m)? $s.cell_sbw,
            &$($m)? $s.cell_moments,
        ]
    };
}

/// A bundle's arrays in the row kernel's argument order.
pub struct KernelArrays<'a> {
    /// mu_1, mu_2, y, w.
    pub rows: [&'a [f64]; 4],
    /// c0..c3, a, aa, r, ar, sbb, sbh, sbw, moments.
    pub cells: [&'a [f64]; 12],
    /// chi, xi, rho, tau, r_uv, e_obs.
    pub observed: [&'a [f64]; 6],
}

impl RowKernelInputs {
    /// Pack Stage-1 rows into the bundle and validate it.
    pub fn pack(p_h: usize, p_w: usize, s_f: f64, rows: &[RowStage1]) -> Result<Self> {
        let mut out = Self::default();
        out.pack_into(p_h, p_w, s_f, rows)?;
        Ok(out)
    }

    /// [`RowKernelInputs::pack`] into this bundle, reusing its arrays'
    /// memory: a fitting loop that packs every evaluation into one bundle
    /// allocates (and page-faults) the arrays once.
    pub fn pack_into(&mut self, p_h: usize, p_w: usize, s_f: f64, rows: &[RowStage1]) -> Result<()> {
        let heads: Vec<RowHead> = rows
            .iter()
            .map(|row| RowHead {
                q: row.q,
                b: row.b,
                z_obs: row.z_obs,
                y: row.y,
                weights: row.weights,
                observed: Cow::Borrowed(&row.observed),
                cells: row.calibrated.cells.len(),
            })
            .collect();
        let shares = self.pack_heads(p_h, p_w, s_f, &heads)?;
        for (mut share, row) in shares.into_iter().zip(rows) {
            for (j, c) in row.calibrated.cells.iter().enumerate() {
                share.put(j, c)?;
            }
        }
        self.validate()
    }

    /// Drop every row, keeping the arrays' memory: a bundle left this way
    /// fails validation until it is packed again.
    pub(crate) fn discard(&mut self) {
        self.n_rows = 0;
        self.cell_offsets.clear();
        for (_, v) in f64_fields!(self, mut) {
            v.clear();
        }
    }

    /// One row's per-row values and observed-point jets.
    fn push_row(&mut self, q: f64, b: f64, z_obs: f64, y: f64, w: f64, o: &Observed) {
        let phi = norm_pdf(q);
        self.q.push(q);
        self.b.push(b);
        self.mu_1.push(phi);
        self.mu_2.push(-q * phi);
        self.z_obs.push(z_obs);
        self.y.push(y);
        self.weights.push(w);
        self.e_obs.push(o.e);
        self.chi_obs.push(o.chi);
        self.xi_obs.push(o.xi);
        self.rho_u.extend_from_slice(&o.rho);
        self.tau_u.extend_from_slice(&o.tau);
        self.r_uv.extend_from_slice(&o.r_uv);
    }

    /// The first half of packing without the rows' cells in hand: each
    /// row's per-row values from its head, and the cell arrays sized for the
    /// heads' cell counts, handed out as each row's share ([`RowCells`]) for
    /// the rows to fill in parallel. The cell arrays are only resized, not
    /// cleared: every entry is written by the rows' fill, and clearing would
    /// rewrite the whole bundle (about 80 MB at 1,500 rows) every time.
    pub(crate) fn pack_heads(
        &mut self,
        p_h: usize,
        p_w: usize,
        s_f: f64,
        heads: &[RowHead],
    ) -> Result<Vec<RowCells<'_>>> {
        (self.n_rows, self.r, self.p_h, self.p_w, self.s_f) = (heads.len(), 2 + p_h + p_w, p_h, p_w, s_f);
        let n = heads.len();
        let total = heads.iter().map(|h| h.cells).sum::<usize>();
        u32::try_from(total).map_err(|_| Error::invalid("cell_offsets", total, "total cells must fit in u32"))?;
        self.cell_offsets.clear();
        self.cell_offsets.push(0);
        let mut sum = 0;
        for h in heads {
            sum += h.cells;
            self.cell_offsets.push(sum as u32);
        }
        let lengths = self.field_lengths(n, total)?;
        for ((name, v), len) in f64_fields!(self, mut).into_iter().zip(lengths) {
            if name.starts_with("cell_") {
                v.resize(len, 0.0);
            } else {
                v.clear();
                v.reserve_exact(len);
            }
        }
        for h in heads {
            self.push_row(h.q, h.b, h.z_obs, h.y, h.weights, &h.observed);
        }
        let widths = cell_widths(self.r, p_h, p_w);
        let mut rest: Vec<&mut [f64]> = cell_fields!(self, mut).into_iter().map(|v| v.as_mut_slice()).collect();
        let shares = heads
            .iter()
            .map(|h| {
                RowCells(std::array::from_fn(|f| {
                    let (share, tail) = std::mem::take(&mut rest[f]).split_at_mut(h.cells * widths[f]);
                    rest[f] = tail;
                    share
                }))
            })
            .collect();
        Ok(shares)
    }

    /// The length of every f64 array (in `f64_fields` order) for n rows of
    /// `cells` cells in all.
    fn field_lengths(&self, n: usize, cells: usize) -> Result<[usize; 25]> {
        let r = self.r;
        let shape = |dims: &[usize]| -> Result<usize> {
            dims.iter()
                .try_fold(1usize, |acc, d| acc.checked_mul(*d))
                .ok_or_else(|| Error::invalid("shape", format!("{dims:?}"), "shape product overflows usize"))
        };
        Ok([
            n,
            n,
            n,
            n,
            n,
            n,
            n,
            n,
            cells,
            cells,
            cells,
            cells,
            shape(&[cells, COEFF4])?,
            shape(&[cells, COEFF4])?,
            shape(&[cells, r - 1, COEFF4])?,
            shape(&[cells, r - 1, COEFF4])?,
            shape(&[cells, COEFF4])?,
            shape(&[cells, self.p_h, COEFF4])?,
            shape(&[cells, self.p_w, COEFF4])?,
            shape(&[cells, MOMENTS])?,
            n,
            n,
            shape(&[n, r])?,
            shape(&[n, r])?,
            shape(&[n, r, r])?,
        ])
    }

    /// The arrays in the row kernel's argument order (`bms_row` in
    /// kernels/bms_row.cu), for whoever hands them to it.
    pub fn kernel_arrays(&self) -> KernelArrays<'_> {
        KernelArrays {
            rows: [&self.mu_1, &self.mu_2, &self.y, &self.weights],
            cells: cell_fields!(self,).map(|v| v.as_slice()),
            observed: [
                &self.chi_obs,
                &self.xi_obs,
                &self.rho_u,
                &self.tau_u,
                &self.r_uv,
                &self.e_obs,
            ],
        }
    }

    /// Every f64 array with its name, for the shared checks.
    fn f64_fields(&self) -> [(&'static str, &Vec<f64>); 25] {
        f64_fields!(self,)
    }

    /// Check every shape the kernel relies on, plus finiteness, labels in
    /// {0, 1}, positive weights and a positive finite s_f. The kernel itself
    /// assumes a valid bundle.
    pub fn validate(&self) -> Result<()> {
        self.validate_dims()?;
        let n = self.n_rows;
        let offsets = &self.cell_offsets;
        check_len("cell_offsets", offsets.len(), n + 1)?;
        if offsets[0] != 0 {
            return Err(Error::invalid("cell_offsets[0]", offsets[0], "must be 0"));
        }
        if let Some(i) = (0..n).find(|&i| offsets[i] > offsets[i + 1]) {
            let rule = format!("cell_offsets must be monotone; cell_offsets[{i}] = {}", offsets[i]);
            return Err(Error::invalid(format!("cell_offsets[{}]", i + 1), offsets[i + 1], rule));
        }
        let want = self.field_lengths(n, offsets[n] as usize)?;
        for ((name, values), want) in self.f64_fields().iter().zip(want) {
            check_len(name, values.len(), want)?;
            if let Some(k) = first_non_finite(values) {
                return Err(Error::invalid(format!("{name}[{k}]"), values[k], "must be finite"));
            }
        }
        if let Some(i) = self.y.iter().position(|&v| v != 0.0 && v != 1.0) {
            return Err(Error::invalid(format!("y[{i}]"), self.y[i], "labels must be 0 or 1"));
        }
        if let Some(i) = self.weights.iter().position(|&v| v <= 0.0) {
            return Err(Error::invalid(
                format!("weights[{i}]"),
                self.weights[i],
                "weights must be > 0",
            ));
        }
        Ok(())
    }

    fn validate_dims(&self) -> Result<()> {
        if self.n_rows == 0 {
            return Err(Error::invalid("n_rows", 0, "must be > 0"));
        }
        if self.r == 0 {
            return Err(Error::invalid("r", 0, "must be > 0"));
        }
        let want = 2usize.checked_add(self.p_h).and_then(|v| v.checked_add(self.p_w));
        if want != Some(self.r) {
            let rule = format!("must equal 2 + p_h ({}) + p_w ({})", self.p_h, self.p_w);
            return Err(Error::invalid("r", self.r, rule));
        }
        if !(self.s_f.is_finite() && self.s_f > 0.0) {
            return Err(Error::invalid("s_f", self.s_f, "must be finite and > 0"));
        }
        Ok(())
    }

    /// Cells of row i.
    pub fn row_cells(&self, i: usize) -> std::ops::Range<usize> {
        self.cell_offsets[i] as usize..self.cell_offsets[i + 1] as usize
    }
}

fn check_len(name: &str, have: usize, want: usize) -> Result<()> {
    if have != want {
        return Err(Error::invalid(
            format!("{name}.len"),
            have,
            format!("must equal {want}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::designs::first_non_finite;

    #[test]
    fn first_non_finite_finds_the_first_bad_index_in_any_chunk() {
        let n = 3 * 4096 + 5;
        let v = vec![1.5; n];
        assert_eq!(first_non_finite(&v), None);
        // A bad value at k, others further on (in a later chunk too): k is
        // the answer.
        for (k, bad) in [
            (0, f64::NAN),
            (4095, f64::INFINITY),
            (4096, f64::NEG_INFINITY),
            (8191, f64::NAN),
            (n - 3, f64::NAN),
        ] {
            let mut w = v.clone();
            w[k] = bad;
            w[n - 2] = f64::NAN;
            w[n - 1] = f64::INFINITY;
            assert_eq!(first_non_finite(&w), Some(k));
        }
    }
}
