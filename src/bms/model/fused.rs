//! The CPU's production row evaluation: Stage 1 and Stage 2 fused per row.
//!
//! The bundle path ([`crate::bms::BmsModel::stage1`] then
//! [`crate::bms::model::stage2::evaluate_rows`]) writes every cell's coefficient
//! arrays and moments to memory (about 38 KB a row at the seed shape) for
//! the row kernel to read back, and forms each F_uv term as a 16-term double
//! sum. It stays as the reference the device kernels are checked against.
//! Here each row's cells are built into buffers reused across a block of
//! rows, summed as they come, and the row finished at once:
//!
//! with `V = (A, R_1, ..., R_{r-1})` a cell's cubics (d eta/da in the q
//! slot, which the q-row override never reads), `M_{pq} = T_{p+q}` its
//! Hankel matrix of `T_n = kappa sum_e C_e m_{e+n}`, and `W = M V`, every
//! `Q(V_k, V_l) = V_k . W_l`, so that the row's Q is one product V^T W over
//! all its cells (faer), where the double sums took 32 flops a term. It
//! gives `Q(A, A)`, `Q(A, R_u)` and `Q(R_u, R_v)` at once. The results agree
//! with the bundle path to rounding (the tests hold them to 1e-12 of each
//! row's largest entry, 1e-11 at r = 64).

use faer::linalg::matmul::matmul;
use faer::{Accum, MatMut, MatRef, Par};
use rayon::prelude::*;

use crate::bms::model::calibration::solve_root_on;
use crate::bms::model::cells::{
    moment_center, moments, CellParts, Coefs, Combinations, Observed, ObservedBases, RowBases, SegmentHint, MOMENTS,
};
use crate::bms::model::stage2::{finish_row, ObservedRow, RowSums};
use crate::bms::numerics::probit::norm_pdf;
use crate::bms::{BmsData, BmsModel, RowEvaluation};
use crate::dispatch::by_cpu;
use crate::{Error, Result};

use std::f64::consts::PI;

/// Rows a parallel task evaluates with one set of buffers.
const BLOCK_ROWS: usize = 32;

/// The per-cell sums of one row, before the q-row override.
struct Sums {
    r: usize,
    /// D(V_k): F_a (k = 0), F_u.
    d: Vec<f64>,
    /// D(AR_k): D(AA) (k = 0), D(AR_u).
    e: Vec<f64>,
    /// D(S_1v), the explicit d2 eta/db d theta_v (v >= 1).
    s1: Vec<f64>,
    /// Every cell's V, 4 rows a cell (row 4c + p holds coefficient p of
    /// V_0..V_{r-1}), and W = M V in the same layout.
    v: Vec<f64>,
    w: Vec<f64>,
    /// The entries of `v` and `w` this row's cells fill.
    used: usize,
    /// Q(V_k, V_l) = sum over cells of V_k . W_l, r x r.
    q: Vec<f64>,
}

impl Sums {
    fn new(r: usize) -> Self {
        Self {
            r,
            d: vec![0.0; r],
            e: vec![0.0; r],
            s1: vec![0.0; r],
            v: Vec::new(),
            w: Vec::new(),
            used: 0,
            q: vec![0.0; r * r],
        }
    }

    fn clear(&mut self) {
        for v in [&mut self.d, &mut self.e, &mut self.s1] {
            v.fill(0.0);
        }
        self.used = 0;
    }

    /// Add one cell with moments m: its D sums, and its V and W rows for
    /// [`Sums::finish`].
    #[inline(always)]
    fn add(&mut self, c: &CellParts, m: &[f64; MOMENTS]) {
        // Every sum here leaves out D's and T's factor 1/(2 pi), applied
        // once a row in `derivatives` instead of 67 divisions a cell.
        let mut t = [0.0; 7];
        for (n, tn) in t.iter_mut().enumerate() {
            *tn = c.eta[0] * m[n] + c.eta[1] * m[n + 1] + c.eta[2] * m[n + 2] + c.eta[3] * m[n + 3];
        }
        // D(p) = sum_k p_k m_k for every cubic u at once (vectors over u).
        let dots = |out: &mut [f64], p: &Coefs| {
            let [p0, p1, p2, p3] = &p.c;
            let terms = out.iter_mut().zip(p0).zip(p1).zip(p2).zip(p3);
            for ((((o, p0), p1), p2), p3) in terms {
                *o += p0 * m[0] + p1 * m[1] + p2 * m[2] + p3 * m[3];
            }
        };
        dots(&mut self.d, &c.v);
        dots(&mut self.e, &c.ar);
        dots(&mut self.s1, &c.s1);
        // V's rows are the cell's coefficient rows as they are; W's
        // (W = M V) are formed from them. The buffers only grow (zeroed
        // once, for a row with more cells than any before).
        let (r, at) = (self.r, self.used);
        self.used += 4 * r;
        if self.v.len() < self.used {
            self.v.resize(self.used, 0.0);
            self.w.resize(self.used, 0.0);
        }
        let [v0, v1, v2, v3] = &c.v.c;
        let rows = self.v[at..self.used]
            .chunks_exact_mut(r)
            .zip(self.w[at..self.used].chunks_exact_mut(r));
        for (p, (vp, wp)) in rows.enumerate() {
            vp.copy_from_slice(&c.v.c[p]);
            let (t0, t1, t2, t3) = (t[p], t[p + 1], t[p + 2], t[p + 3]);
            let terms = wp.iter_mut().zip(v0).zip(v1).zip(v2).zip(v3);
            for ((((w, a), b), c), d) in terms {
                *w = t0 * a + t1 * b + t2 * c + t3 * d;
            }
        }
    }

    /// Q = V^T W over all the row's cells, one small matrix product (faer
    /// picks the CPU's widest vectors at run time).
    fn finish(&mut self) {
        let (r, rows) = (self.r, self.used / self.r);
        let v = MatRef::from_row_major_slice(&self.v[..self.used], rows, r);
        let w = MatRef::from_row_major_slice(&self.w[..self.used], rows, r);
        let q = MatMut::from_row_major_slice_mut(&mut self.q, r, r);
        matmul(q, Accum::Replace, v.transpose(), w, 1.0, Par::Seq);
    }

    /// The calibration derivatives with the q-row override (F_q = -mu_1,
    /// F_qq = -mu_2, F_aq = F_qv = 0), into `out`.
    #[inline(always)]
    fn derivatives(&self, q: f64, out: &mut RowSums) {
        let (r, kappa) = (self.r, 1.0 / (2.0 * PI));
        let phi = norm_pdf(q);
        out.f_a = kappa * self.d[0];
        out.f_aa = kappa * (self.e[0] - self.q[0]);
        for (f, d) in out.f_u.iter_mut().zip(&self.d) {
            *f = kappa * d;
        }
        out.f_u[0] = -phi;
        out.f_au[0] = 0.0;
        out.f_uv.fill(0.0);
        out.f_uv[0] = -(-q * phi);
        for u in 1..r {
            out.f_au[u] = kappa * (self.e[u] - self.q[u]);
            for v in u..r {
                let explicit = if u == 1 { self.s1[v] } else { 0.0 };
                out.f_uv[u * r + v] = kappa * (explicit - self.q[u * r + v]);
            }
        }
    }
}

by_cpu! {
    /// Every cell of a row at intercept a (walked from the merged knots:
    /// `Bases::edges`), its cubics, moments and sums into `s.sums`, on the
    /// CPU's widest vectors (`dispatch`: the cells' cubics
    /// and Stage 2's sums; the moments' quadrature dispatches on its own),
    /// with the same bits on any.
    fn sum_cells / sum_cells_avx2 / sum_cells_avx512(rb: &RowBases, a: f64, s: &mut Work) = sum_cells_body
}

#[inline(always)]
fn sum_cells_body(rb: &RowBases, a: f64, s: &mut Work) {
    s.sums.clear();
    let mut hint = SegmentHint::default();
    for (lo, hi) in rb.bases.edges(rb.theta[1], a) {
        rb.cell_parts(a, lo, hi, &mut hint, &mut s.cell);
        // Moments and cubics about the cell's centre (see moment_center).
        let c = moment_center(lo, hi);
        let m = moments(&s.cell.eta, lo, hi);
        s.cell.shift(c);
        s.sums.add(&s.cell, &m);
    }
}

/// Buffers for one block of rows.
struct Scratch {
    /// The row's basis combinations, formed once for rows that share them.
    combinations: Combinations,
    /// eta's partial derivatives at the row's observed point, and the
    /// bases' values there.
    observed: Observed,
    observed_bases: ObservedBases,
    work: Work,
}

/// Stage 2's buffers.
struct Work {
    cell: CellParts,
    sums: Sums,
    row: RowSums,
}

impl Scratch {
    fn new(r: usize) -> Self {
        Self {
            combinations: Combinations::default(),
            observed: Observed::default(),
            observed_bases: ObservedBases::default(),
            work: Work {
                cell: CellParts::default(),
                sums: Sums::new(r),
                row: RowSums {
                    f_a: 0.0,
                    f_aa: 0.0,
                    f_u: vec![0.0; r],
                    f_au: vec![0.0; r],
                    f_uv: vec![0.0; r * r],
                },
            },
        }
    }
}

/// Where one row's results go.
struct RowOut<'a> {
    neglog: &'a mut f64,
    intercept: &'a mut f64,
    grad: &'a mut [f64],
    hess: &'a mut [f64],
}

impl BmsModel {
    /// Both stages for all rows at beta, fused per row (see the module
    /// docs); the first rejected row (lowest index) is the error.
    pub(crate) fn evaluate_fused(&self, data: &BmsData, beta: &[f64]) -> Result<RowEvaluation> {
        let mut hess = vec![0.0; data.n() * self.bases.r().pow(2)];
        let rest = self.evaluate_fused_into(data, beta, &mut hess)?;
        Ok(RowEvaluation { hess, ..rest })
    }

    /// [`BmsModel::evaluate_fused`] with the row Hessians written into
    /// `hess` (n r^2, every entry written), the rest returned (its `hess`
    /// empty).
    pub(crate) fn evaluate_fused_into(&self, data: &BmsData, beta: &[f64], hess: &mut [f64]) -> Result<RowEvaluation> {
        self.check(data, beta)?;
        let (n, r) = (data.n(), self.bases.r());
        if hess.len() != n * r * r {
            return Err(Error::invalid(
                "hess.len",
                hess.len(),
                format!("must equal n r^2 = {}", n * r * r),
            ));
        }
        let mut out = RowEvaluation {
            neglog: vec![0.0; n],
            grad: vec![0.0; n * r],
            hess: Vec::new(),
            intercept: vec![0.0; n],
        };
        let failures: Vec<Error> = out
            .neglog
            .par_chunks_mut(BLOCK_ROWS)
            .zip(out.intercept.par_chunks_mut(BLOCK_ROWS))
            .zip(out.grad.par_chunks_mut(BLOCK_ROWS * r))
            .zip(hess.par_chunks_mut(BLOCK_ROWS * r * r))
            .enumerate()
            .filter_map(|(block, (((neglog, intercept), grad), hess))| {
                let (mut scratch, mut theta) = (Scratch::new(r), Vec::with_capacity(r));
                let rows = neglog
                    .iter_mut()
                    .zip(intercept.iter_mut())
                    .zip(grad.chunks_exact_mut(r))
                    .zip(hess.chunks_exact_mut(r * r));
                for (k, (((neglog, intercept), grad), hess)) in rows.enumerate() {
                    let i = block * BLOCK_ROWS + k;
                    let out = RowOut {
                        neglog,
                        intercept,
                        grad,
                        hess,
                    };
                    self.theta_into(data, beta, i, &mut theta);
                    if let Err(e) = fused_row(self, data, &theta, i, &mut scratch, out) {
                        return Some(e);
                    }
                }
                None
            })
            .collect();
        match failures.into_iter().next() {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// Rows `first..` at their coordinates `theta` (r a row) with one set
    /// of buffers, as [`crate::RowEvaluator::rows`] asks: a row the model
    /// rejects gets a NaN value (outside the domain).
    pub(crate) fn fused_rows(
        &self,
        data: &BmsData,
        first: usize,
        theta: &[f64],
        neglog: &mut [f64],
        grad: &mut [f64],
        hess: &mut [f64],
    ) {
        let r = self.bases.r();
        let mut scratch = Scratch::new(r);
        let rows = theta
            .chunks_exact(r)
            .zip(neglog.iter_mut())
            .zip(grad.chunks_exact_mut(r))
            .zip(hess.chunks_exact_mut(r * r));
        for (k, (((theta, neglog), grad), hess)) in rows.enumerate() {
            let mut intercept = 0.0;
            let out = RowOut {
                neglog: &mut *neglog,
                intercept: &mut intercept,
                grad,
                hess,
            };
            if fused_row(self, data, theta, first + k, &mut scratch, out).is_err() {
                *neglog = f64::NAN;
            }
        }
    }
}

by_cpu! {
    /// Row i at its coordinates theta: its intercept, cells and moments
    /// summed as they come, and Stage 2's finish. On the CPU's widest
    /// vectors (`dispatch`) with its glue inlined (the calibration, the cell
    /// walk and the finish dispatch on their own), the same bits on any.
    fn fused_row / fused_row_avx2 / fused_row_avx512(
        model: &BmsModel,
        data: &BmsData,
        theta: &[f64],
        i: usize,
        scratch: &mut Scratch,
        out: RowOut,
    ) -> Result<()> = fused_row_body
}

#[inline(always)]
fn fused_row_body(
    model: &BmsModel,
    data: &BmsData,
    theta: &[f64],
    i: usize,
    scratch: &mut Scratch,
    out: RowOut,
) -> Result<()> {
    model.bases.check_theta(theta)?;
    let Scratch {
        combinations,
        observed: o,
        observed_bases,
        work: s,
    } = scratch;
    let rb = combinations.row(&model.bases, theta);
    let a = solve_root_on(&rb, i)?;
    sum_cells(&rb, a, s);
    let f_a = s.sums.d[0] / (2.0 * PI);
    if !(f_a.is_finite() && f_a > 0.0 && a.is_finite()) {
        let reason = format!("F_a = {f_a:e} at a = {a:e}: must be finite and > 0");
        return Err(Error::RowRejected { row: i, reason });
    }
    s.sums.finish();
    s.sums.derivatives(theta[0], &mut s.row);
    let (z, y, w) = (data.z[i], data.y[i], data.weights[i]);
    model.bases.observed_into(theta, a, z, observed_bases, o);
    let obs = ObservedRow {
        e: o.e,
        chi: o.chi,
        xi: o.xi,
        rho: &o.rho,
        tau: &o.tau,
        r_uv: &o.r_uv,
        y,
        weights: w,
    };
    *out.neglog =
        finish_row(&s.row, &obs, out.grad, out.hess).map_err(|reason| Error::RowRejected { row: i, reason })?;
    *out.intercept = a;
    Ok(())
}
