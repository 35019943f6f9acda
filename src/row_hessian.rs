//! The CPU row-Hessian operator H = sum_i P_i^T H_i P_i and the joint
//! gradient reduction, parallel with rayon.
//!
//! Every reduction over rows runs in fixed chunks of [`ROW_CHUNK`] rows whose
//! partial sums are added in chunk order: bitwise the same result for any
//! number of threads.

use std::ops::Range;
use std::sync::{Arc, OnceLock};

use faer::linalg::matmul::matmul;
use faer::linalg::matmul::triangular::{self, BlockStructure};
use faer::{Accum, Mat, MatMut, MatRef, Par};

use matfree_solvers::operator::expect_len;
use matfree_solvers::{CpuBackend, LinearOperator};
use rayon::prelude::*;

use crate::designs::{check_matrix, Designs};
use crate::layout::Layout;
use crate::pool::PooledVec;
use crate::{Error, Result};

/// Rows per partial sum in every row reduction.
pub const ROW_CHUNK: usize = 256;

/// Per-row r x r Hessians (row-major, symmetric) with the designs that pull
/// them back to beta.
#[derive(Clone, Debug)]
pub struct RowHessian {
    layout: Layout,
    designs: Arc<Designs>,
    hess: PooledVec,
    /// The dense matrix once `to_dense` made it: a Newton solve's last
    /// check and REML's log-determinant at the same beta ask for it twice
    /// (at 1M rows and p = 51, 70 ms each).
    dense_cache: OnceLock<Vec<f64>>,
}

/// The joint negative log-likelihood and its gradient in beta.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct JointGradient {
    /// sum_i neglog_i.
    pub neglog: f64,
    /// sum_i P_i^T g_i, the gradient of `neglog` in beta.
    pub gradient: Vec<f64>,
}

impl JointGradient {
    /// The log-likelihood, -neglog.
    pub fn log_likelihood(&self) -> f64 {
        -self.neglog
    }
}

/// Check that the layout has one design per predictor, of its width.
pub(crate) fn check_layout_designs(layout: &Layout, designs: &Designs) -> Result<()> {
    check_design_widths(layout, designs.widths())
}

/// Check design widths against the layout's predictors.
pub(crate) fn check_design_widths(layout: &Layout, widths: &[usize]) -> Result<()> {
    let want = layout.design_widths();
    if widths.len() != want.len() {
        let rule = format!("must equal the layout's number of linear predictors, {}", want.len());
        return Err(Error::invalid("designs.count", widths.len(), rule));
    }
    for (j, (&got, &p)) in widths.iter().zip(&want).enumerate() {
        if got != p {
            let rule = format!("must equal the width of the layout's predictor {j}, {p}");
            return Err(Error::invalid(format!("designs[{j}].width"), got, rule));
        }
    }
    Ok(())
}

/// Sum per-chunk partial vectors of length `len` in chunk order.
pub(crate) fn reduce_chunks(
    n: usize,
    len: usize,
    chunk: usize,
    f: impl Fn(std::ops::Range<usize>, &mut [f64]) + Sync,
) -> Vec<f64> {
    let chunks = n.div_ceil(chunk);
    let partials: Vec<Vec<f64>> = (0..chunks)
        .into_par_iter()
        .map(|c| {
            let mut acc = vec![0.0; len];
            f(c * chunk..((c + 1) * chunk).min(n), &mut acc);
            acc
        })
        .collect();
    let mut out = vec![0.0; len];
    for p in &partials {
        out.iter_mut().zip(p).for_each(|(o, v)| *o += v);
    }
    out
}

/// Rows per matrix product in [`RowHessian::dense_host`]: a tile of the
/// design and its weighted copy stay in cache.
pub(crate) const DENSE_TILE: usize = 512;

/// Beta columns that reach one row coordinate through one matrix: a
/// predictor's design columns (`design` its index), or one direct column
/// (`None`: a column of ones).
struct ColumnGroup {
    cols: Range<usize>,
    coord: usize,
    design: Option<usize>,
}

/// The layout's column groups in beta's order.
fn column_groups(layout: &Layout) -> Vec<ColumnGroup> {
    let mut groups: Vec<ColumnGroup> = layout
        .predictors()
        .iter()
        .enumerate()
        .map(|(j, range)| ColumnGroup {
            cols: range.clone(),
            coord: j,
            design: Some(j),
        })
        .collect();
    for (range, u0) in layout.direct() {
        groups.extend(range.clone().enumerate().map(|(k, a)| ColumnGroup {
            cols: a..a + 1,
            coord: u0 + k,
            design: None,
        }));
    }
    groups.sort_by_key(|g| g.cols.start);
    groups
}

/// Group g's coefficients at `rows` (rows x its width): its design's
/// rows, or `ones` (one per row) for a direct column.
fn group_matrix<'a>(designs: &'a Designs, g: &ColumnGroup, rows: Range<usize>, ones: &'a [f64]) -> MatRef<'a, f64> {
    match g.design {
        Some(j) => {
            let w = designs.widths()[j];
            MatRef::from_row_major_slice(&designs.matrix(j)[rows.start * w..rows.end * w], rows.len(), w)
        }
        None => MatRef::from_column_major_slice(&ones[..rows.len()], rows.len(), 1),
    }
}

/// Each row's P_i A P_i^T (r x r, row-major, one after another) at `rows`,
/// for A = K K^T given by its lower-triangular factor `k` (p x p): with
/// A = (H + S)^{-1} the rows' leverages, which make tr(A dH) =
/// sum_i tr(P_i A P_i^T dH_i). Entry (u, v) is the dot product of rows
/// P_i[u, :] K and P_i[v, :] K: one product with a triangle a group.
pub(crate) fn pulled_back_quadratic(
    layout: &Layout,
    designs: &Designs,
    rows: Range<usize>,
    k: MatRef<f64>,
) -> Vec<f64> {
    let (r, len) = (layout.r(), rows.len());
    let groups = column_groups(layout);
    let ones = vec![1.0; len];
    // Y_g = M_g K[g, :], of which columns g.end.. are zero (K is lower).
    let ys: Vec<Mat<f64>> = groups
        .iter()
        .map(|g| {
            let mg = group_matrix(designs, g, rows.clone(), &ones);
            let mut y = Mat::<f64>::zeros(len, g.cols.end);
            let (w, s) = (g.cols.len(), g.cols.start);
            let (left, right) = y.as_mut().split_at_col_mut(s);
            matmul(left, Accum::Replace, mg, k.submatrix(s, 0, w, s), 1.0, Par::Seq);
            let tri = k.submatrix(s, s, w, w);
            triangular::matmul(
                right,
                BlockStructure::Rectangular,
                Accum::Replace,
                mg,
                BlockStructure::Rectangular,
                tri,
                BlockStructure::TriangularLower,
                1.0,
                Par::Seq,
            );
            y
        })
        .collect();
    let mut out = vec![0.0; len * r * r];
    let mut dots = vec![0.0; len];
    for (g, yg) in groups.iter().zip(&ys) {
        for (h, yh) in groups.iter().zip(&ys) {
            dots.fill(0.0);
            for b in 0..g.cols.end.min(h.cols.end) {
                let each = dots.iter_mut().zip(yg.col_as_slice(b)).zip(yh.col_as_slice(b));
                each.for_each(|((d, x), y)| *d += x * y);
            }
            let at = g.coord * r + h.coord;
            dots.iter().enumerate().for_each(|(i, d)| out[i * r * r + at] = *d);
        }
    }
    out
}

impl RowHessian {
    /// Wrap per-row Hessians (`n * r * r`, row-major, finite, symmetric to
    /// within rounding) and the designs. Symmetry is checked: `apply` and
    /// `to_dense` read different triangles, so an asymmetric row would make
    /// them disagree. The tolerance is [`matfree_solvers::symmetry_error`]'s.
    pub fn new(layout: Layout, designs: Arc<Designs>, hess: Vec<f64>) -> Result<Self> {
        Self::with_storage(layout, designs, PooledVec::owned(hess))
    }

    /// [`RowHessian::new`] over a buffer that returns to its pool when the
    /// operator is dropped (a fit's evaluations reuse one; see `pool`).
    /// The checks run in parallel.
    pub fn with_storage(layout: Layout, designs: Arc<Designs>, hess: PooledVec) -> Result<Self> {
        check_layout_designs(&layout, &designs)?;
        let r = layout.r();
        check_matrix("hess", &hess, designs.n(), r * r)?;
        // Every row's symmetry, in parallel; the lowest asymmetric row is
        // the error.
        let bad = hess
            .par_chunks_exact(r * r)
            .position_first(|h| matfree_solvers::symmetry_error(r, h).is_some());
        if let Some(i) = bad {
            let h = &hess[i * r * r..(i + 1) * r * r];
            if let Some((u, v, rule)) = matfree_solvers::symmetry_error(r, h) {
                return Err(Error::invalid(format!("hess[{i}][{u},{v}]"), h[u * r + v], rule));
            }
        }
        Ok(Self {
            layout,
            designs,
            hess,
            dense_cache: OnceLock::new(),
        })
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
    /// The designs.
    pub fn designs(&self) -> &Arc<Designs> {
        &self.designs
    }
    /// Number of rows.
    pub fn n(&self) -> usize {
        self.designs.n()
    }
    /// The per-row Hessians, row-major `n x r x r`.
    pub fn hess(&self) -> &[f64] {
        &self.hess
    }

    fn row_hess(&self, i: usize) -> &[f64] {
        let rr = self.layout.r() * self.layout.r();
        &self.hess[i * rr..(i + 1) * rr]
    }

    fn row_direction(&self, i: usize, v: &[f64], d: &mut [f64]) {
        row_direction(&self.layout, &self.designs, i, v, d)
    }

    fn row_scatter(&self, i: usize, t: &[f64], out: &mut [f64]) {
        row_scatter(&self.layout, &self.designs, i, t, out)
    }

    /// out_j = H v_j for k columns of length p_total stored back to back.
    fn hvp_columns(&self, v: &[f64], k: usize) -> Vec<f64> {
        let (r, p) = (self.layout.r(), self.layout.p_total());
        reduce_chunks(self.n(), k * p, ROW_CHUNK, |rows, acc| {
            let (mut d, mut t) = (vec![0.0; r], vec![0.0; r]);
            for i in rows {
                let h = self.row_hess(i);
                for j in 0..k {
                    self.row_direction(i, &v[j * p..(j + 1) * p], &mut d);
                    for (u, tu) in t.iter_mut().enumerate() {
                        *tu = dot(&h[u * r..(u + 1) * r], &d);
                    }
                    self.row_scatter(i, &t, &mut acc[j * p..(j + 1) * p]);
                }
            }
        })
    }

    /// diag(H).
    pub fn diagonal_host(&self) -> Vec<f64> {
        let r = self.layout.r();
        let (predictors, direct) = (self.layout.predictors(), self.layout.direct());
        // Each predictor's design row as a slice (coordinate j is predictor
        // j): the same sums, in the same order, as one entry at a time.
        reduce_chunks(self.n(), self.layout.p_total(), ROW_CHUNK, |rows, acc| {
            for i in rows {
                let h = self.row_hess(i);
                for (j, range) in predictors.iter().enumerate() {
                    let hjj = h[j * r + j];
                    for (a, &c) in acc[range.clone()].iter_mut().zip(self.designs.row(j, i)) {
                        *a += c * c * hjj;
                    }
                }
                for (range, u0) in direct {
                    for (k, a) in range.clone().enumerate() {
                        acc[a] += h[(u0 + k) * r + u0 + k];
                    }
                }
            }
        })
    }

    /// The dense joint Hessian, row-major p_total x p_total: for each pair
    /// of column groups g <= h (a predictor's design columns, or one direct
    /// column), the block M_g^T diag(H_i[u_g, u_h]) M_h, as a matrix
    /// product over a tile of rows at a time ([`tile_dense`]). Few large
    /// chunks, summed in order: each partial is p^2.
    pub fn dense_host(&self) -> Vec<f64> {
        let p = self.layout.p_total();
        let groups = column_groups(&self.layout);
        let chunk = DENSE_TILE.max(self.n().div_ceil(64).next_multiple_of(DENSE_TILE));
        let upper = reduce_chunks(self.n(), p * p, chunk, |rows, acc| {
            let mut scratch = Vec::new();
            for start in rows.clone().step_by(DENSE_TILE) {
                let tile = start..(start + DENSE_TILE).min(rows.end);
                self.tile_dense(&groups, tile, acc, &mut scratch);
            }
        });
        let mut full = upper;
        for a in 0..p {
            for b in 0..a {
                full[a * p + b] = full[b * p + a];
            }
        }
        full
    }

    /// Add the upper blocks of sum_{i in rows} P_i^T H_i P_i to `acc`
    /// (row-major p x p), one matrix product per pair of groups.
    fn tile_dense(&self, groups: &[ColumnGroup], rows: Range<usize>, acc: &mut [f64], scratch: &mut Vec<f64>) {
        let (r, p, len) = (self.layout.r(), self.layout.p_total(), rows.len());
        let hess = &self.hess[rows.start * r * r..rows.end * r * r];
        let ones = vec![1.0; len];
        let matrix = |g: &ColumnGroup| group_matrix(&self.designs, g, rows.clone(), &ones);
        let mut out = MatMut::from_row_major_slice_mut(acc, p, p);
        for (a, g) in groups.iter().enumerate() {
            let mg = matrix(g);
            for h in &groups[a..] {
                let mh = matrix(h);
                // W = diag(H_i[u_g, u_h]) M_h, row-major (as the designs).
                let (at, wh) = (g.coord * r + h.coord, mh.ncols());
                scratch.clear();
                for i in 0..len {
                    let hi = hess[i * r * r + at];
                    scratch.extend((0..wh).map(|b| hi * mh[(i, b)]));
                }
                let w = MatRef::from_row_major_slice(scratch, len, wh);
                let block = out
                    .as_mut()
                    .submatrix_mut(g.cols.start, h.cols.start, g.cols.len(), h.cols.len());
                // A diagonal block's lower half is mirrored from its upper.
                let upper = match g.cols == h.cols {
                    true => BlockStructure::TriangularUpper,
                    false => BlockStructure::Rectangular,
                };
                let rect = BlockStructure::Rectangular;
                triangular::matmul(block, upper, Accum::Add, mg.transpose(), rect, w, rect, 1.0, Par::Seq);
            }
        }
    }

    /// The joint negative log-likelihood and its gradient from per-row values
    /// (`neglog`, length n) and gradients (`grad`, n x r, row-major).
    pub fn joint_gradient(&self, neglog: &[f64], grad: &[f64]) -> Result<JointGradient> {
        joint_gradient(&self.layout, &self.designs, neglog, grad)
    }
}

/// The joint negative log-likelihood and gradient `sum_i P_i^T g_i`.
pub fn joint_gradient(layout: &Layout, designs: &Designs, neglog: &[f64], grad: &[f64]) -> Result<JointGradient> {
    check_layout_designs(layout, designs)?;
    let (n, r, p) = (designs.n(), layout.r(), layout.p_total());
    check_matrix("neglog", neglog, n, 1)?;
    check_matrix("grad", grad, n, r)?;
    // Slot p of each partial carries the neglog sum.
    let sums = reduce_chunks(n, p + 1, ROW_CHUNK, |rows, acc| {
        tile_scatter(
            layout,
            designs,
            rows.clone(),
            &grad[rows.start * r..rows.end * r],
            &mut acc[..p],
        );
        acc[p] += neglog[rows].iter().sum::<f64>();
    });
    Ok(JointGradient {
        neglog: sums[p],
        gradient: sums[..p].to_vec(),
    })
}

/// theta-direction of row i: d = P_i v.
pub(crate) fn row_direction(layout: &Layout, designs: &Designs, i: usize, v: &[f64], d: &mut [f64]) {
    for (j, range) in layout.predictors().iter().enumerate() {
        d[j] = dot(designs.row(j, i), &v[range.clone()]);
    }
    for (range, u0) in layout.direct() {
        d[*u0..u0 + range.len()].copy_from_slice(&v[range.clone()]);
    }
}

/// Each row's coordinates P_i v_c at `rows`, for every vector v_c of
/// `vs`: row-major len x k x r (row i's k directions, r each). A design's
/// part is one matrix product per tile (X_rows times the k vectors' slices).
pub(crate) fn tile_directions(layout: &Layout, designs: &Designs, rows: Range<usize>, vs: &[&[f64]]) -> Vec<f64> {
    let (r, k, len) = (layout.r(), vs.len(), rows.len());
    let mut out = vec![0.0; len * k * r];
    let mut y = Mat::<f64>::zeros(len, k);
    for (j, range) in layout.predictors().iter().enumerate() {
        let w = range.len();
        let x = MatRef::from_row_major_slice(&designs.matrix(j)[rows.start * w..rows.end * w], len, w);
        let v = Mat::from_fn(w, k, |b, c| vs[c][range.start + b]);
        matmul(y.as_mut(), Accum::Replace, x, v.as_ref(), 1.0, Par::Seq);
        for i in 0..len {
            for c in 0..k {
                out[(i * k + c) * r + j] = y[(i, c)];
            }
        }
    }
    for (range, u0) in layout.direct() {
        for i in 0..len {
            for (c, v) in vs.iter().enumerate() {
                let at = (i * k + c) * r + u0;
                out[at..at + range.len()].copy_from_slice(&v[range.clone()]);
            }
        }
    }
    out
}

/// Every row's coordinates P_i v (n x r, row-major), by tiles in parallel.
pub fn linear_predictors(layout: &Layout, designs: &Designs, v: &[f64]) -> Vec<f64> {
    let r = layout.r();
    let mut out = vec![0.0; designs.n() * r];
    out.par_chunks_mut(ROW_CHUNK * r).enumerate().for_each(|(c, o)| {
        let first = c * ROW_CHUNK;
        o.copy_from_slice(&tile_directions(layout, designs, first..first + o.len() / r, &[v]));
    });
    out
}

/// out += sum_{i in rows} P_i^T t_i, `t` the rows' coordinates (len x r):
/// a design's part is X_rows^T t[:, j], one matrix product.
fn tile_scatter(layout: &Layout, designs: &Designs, rows: Range<usize>, t: &[f64], out: &mut [f64]) {
    let (r, len) = (layout.r(), rows.len());
    let tm = MatRef::from_row_major_slice(t, len, r);
    for (j, range) in layout.predictors().iter().enumerate() {
        let w = range.len();
        let x = MatRef::from_row_major_slice(&designs.matrix(j)[rows.start * w..rows.end * w], len, w);
        let dst = MatMut::from_column_major_slice_mut(&mut out[range.clone()], w, 1);
        matmul(dst, Accum::Add, x.transpose(), tm.subcols(j, 1), 1.0, Par::Seq);
    }
    for (range, u0) in layout.direct() {
        for i in 0..len {
            let ti = &t[i * r + u0..i * r + u0 + range.len()];
            out[range.clone()].iter_mut().zip(ti).for_each(|(o, x)| *o += x);
        }
    }
}

/// out += P_i^T t.
fn row_scatter(layout: &Layout, designs: &Designs, i: usize, t: &[f64], out: &mut [f64]) {
    for (j, range) in layout.predictors().iter().enumerate() {
        axpy(t[j], designs.row(j, i), &mut out[range.clone()]);
    }
    for (range, u0) in layout.direct() {
        let len = range.len();
        out[range.clone()]
            .iter_mut()
            .zip(&t[*u0..u0 + len])
            .for_each(|(o, ti)| *o += ti);
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn axpy(alpha: f64, x: &[f64], y: &mut [f64]) {
    y.iter_mut().zip(x).for_each(|(yi, xi)| *yi += alpha * xi);
}

impl LinearOperator<CpuBackend> for RowHessian {
    fn dim(&self) -> usize {
        self.layout.p_total()
    }
    fn apply(&self, x: &Vec<f64>, y: &mut Vec<f64>) -> matfree_solvers::Result<()> {
        self.apply_multi(x, 1, y)
    }
    fn apply_multi(&self, x: &Vec<f64>, k: usize, y: &mut Vec<f64>) -> matfree_solvers::Result<()> {
        let p = self.dim();
        expect_len("x", x.len(), p * k)?;
        expect_len("y", y.len(), p * k)?;
        *y = self.hvp_columns(x, k);
        Ok(())
    }
    fn diagonal(&self, out: &mut Vec<f64>) -> matfree_solvers::Result<()> {
        expect_len("diagonal", out.len(), self.dim())?;
        *out = self.diagonal_host();
        Ok(())
    }
    fn to_dense(&self) -> matfree_solvers::Result<Vec<f64>> {
        Ok(self.dense_cache.get_or_init(|| self.dense_host()).clone())
    }
}
