//! The CPU row-Hessian operator H = sum_i P_i^T H_i P_i and the joint
//! gradient reduction, parallel with rayon.
//!
//! Every reduction over rows runs in fixed chunks of [`ROW_CHUNK`] rows whose
//! partial sums are added in chunk order: bitwise the same result for any
//! number of threads.

use std::sync::Arc;

use matfree_solvers::operator::expect_len;
use matfree_solvers::{CpuBackend, LinearOperator};
use rayon::prelude::*;

use crate::designs::{check_matrix, Designs};
use crate::layout::{Layout, Via};
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
        Ok(Self { layout, designs, hess })
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
        let (r, map) = (self.layout.r(), self.layout.column_map());
        reduce_chunks(self.n(), map.len(), ROW_CHUNK, |rows, acc| {
            for i in rows {
                let h = self.row_hess(i);
                for (a, &(u, via)) in map.iter().enumerate() {
                    let c = self.coef(i, via);
                    acc[a] += c * c * h[u * r + u];
                }
            }
        })
    }

    /// The value P_i[u(a), a] for a beta column reached `via`.
    fn coef(&self, i: usize, via: Via) -> f64 {
        match via {
            Via::Design { design, col } => self.designs.row(design, i)[col],
            Via::Direct => 1.0,
        }
    }

    /// The dense joint Hessian, row-major p_total x p_total.
    pub fn dense_host(&self) -> Vec<f64> {
        let (r, map) = (self.layout.r(), self.layout.column_map());
        let p = map.len();
        // Few large chunks: each partial is p^2, so bound their number.
        let chunk = ROW_CHUNK.max(self.n().div_ceil(64));
        let upper = reduce_chunks(self.n(), p * p, chunk, |rows, acc| {
            let mut c = vec![0.0; p];
            for i in rows {
                let h = self.row_hess(i);
                for (a, &(_, via)) in map.iter().enumerate() {
                    c[a] = self.coef(i, via);
                }
                for a in 0..p {
                    let hu = &h[map[a].0 * r..(map[a].0 + 1) * r];
                    for b in a..p {
                        acc[a * p + b] += c[a] * c[b] * hu[map[b].0];
                    }
                }
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
        for i in rows {
            row_scatter(layout, designs, i, &grad[i * r..(i + 1) * r], &mut acc[..p]);
            acc[p] += neglog[i];
        }
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
        Ok(self.dense_host())
    }
}
