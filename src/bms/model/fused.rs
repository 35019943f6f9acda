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
//! Hankel matrix of `T_n = kappa sum_e C_e m_{e+n}`, every
//! `Q(V_k, V_l) = V_k . M V_l`. The cubics are not formed over theta: every
//! R_u is a fixed combination of the row's r + 2 raw functions (d eta/da,
//! d eta/db, 1, z, the raw score B-splines Bh_j(z) and link B-splines
//! Bw_j(a + b z); the bases' functions are B-splines less their linear
//! parts), of which a cell carries at most 12 (four B-splines of each
//! basis), so each cell adds a 12 x 12 block of `Q` and 12 D sums over
//! the raw functions ([`RawCell`]) where over theta it had added r x r
//! and r (both x 4 flops), and the row's sums over theta are formed once
//! from them ([`Sums::finish`]). The results agree with the bundle path to
//! rounding (the tests hold them to 1e-12 of each row's largest entry,
//! 1e-11 at r = 64).

use rayon::prelude::*;

use crate::bms::model::calibration::solve_root_on;
use crate::bms::model::cells::{
    moments, shift_cubic, Bases, Combinations, Observed, ObservedBases, RawCell, RowBases, SegmentHint, MOMENTS,
    RAW_COLUMNS,
};
use crate::bms::model::cubic_basis::Cubic;
use crate::bms::model::stage2::{finish_row, ObservedRow, RowSums};
use crate::bms::numerics::probit::norm_pdf;
use crate::bms::{BmsData, BmsModel, RowEvaluation};
use crate::dispatch::by_cpu;
use crate::{Error, Result};

use std::f64::consts::PI;

/// Rows a parallel task evaluates with one set of buffers.
const BLOCK_ROWS: usize = 32;

/// The per-cell sums of one row, before the q-row override: summed over
/// the row's raw functions ([`RawCell`]) cell by cell, then formed over
/// theta once ([`Sums::finish`]).
struct Sums {
    r: usize,
    p_h: usize,
    /// The row length of `qr` (and length of `dv`): r + 2 and a block's
    /// four more, so that every cell adds whole four-wide blocks (a
    /// narrower basis's columns past its width are zero, and add zeros).
    stride: usize,
    /// D(V_k): F_a (k = 0), F_u.
    d: Vec<f64>,
    /// D(AR_k): D(AA) (k = 0), D(AR_u).
    e: Vec<f64>,
    /// D(S_1v), the explicit d2 eta/db d theta_v (v >= 1).
    s1: Vec<f64>,
    /// Q(V_k, V_l), r x r.
    q: Vec<f64>,
    /// D of the r + 2 raw functions (d eta/da, d eta/db, 1, z, Bh_j,
    /// Bw_j(t)), and Q between them: its upper triangle (raw i <= j)
    /// summed, rows `stride` apart (entries below it are not kept).
    dv: Vec<f64>,
    qr: Vec<f64>,
    /// D(AA), D(AB) and the explicit D(BB).
    dense: [f64; 3],
    /// D(Bw_j'(t)) and D(z Bw_j'(t)).
    dw1: Vec<f64>,
    dzw1: Vec<f64>,
    /// Q_raw(raw_u, 1) and Q_raw(raw_u, z) for each theta coordinate u.
    a1: Vec<f64>,
    az: Vec<f64>,
    /// Each theta coordinate's combination ([`Sums::combination`]).
    g: Vec<f64>,
    c1: Vec<f64>,
    cz: Vec<f64>,
}

impl Sums {
    fn new(bases: &Bases) -> Self {
        let (r, p_h, p_w) = (bases.r(), bases.p_h(), bases.p_w());
        let n = r + 2;
        Self {
            r,
            p_h,
            stride: n + 4,
            d: vec![0.0; r],
            e: vec![0.0; r],
            s1: vec![0.0; r],
            q: vec![0.0; r * r],
            dv: vec![0.0; n + 4],
            qr: vec![0.0; (n + 4) * (n + 4)],
            dense: [0.0; 3],
            dw1: vec![0.0; p_w + 4],
            dzw1: vec![0.0; p_w + 4],
            a1: vec![0.0; r],
            az: vec![0.0; r],
            g: vec![0.0; r],
            c1: vec![0.0; r],
            cz: vec![0.0; r],
        }
    }

    fn clear(&mut self) {
        for v in [&mut self.dv, &mut self.qr, &mut self.dw1, &mut self.dzw1] {
            v.fill(0.0);
        }
        self.dense = [0.0; 3];
    }

    /// Add one cell with moments m: D of its raw columns and their Q block
    /// `V^T M V` (M the cell's Hankel matrix of T_n), into the row's raw
    /// sums at the columns' places.
    #[inline(always)]
    fn add(&mut self, c: &RawCell, m: &[f64; MOMENTS]) {
        // Every sum here leaves out D's and T's factor 1/(2 pi), applied
        // once a row in `derivatives`.
        let eta = shift_cubic(&c.eta, c.center);
        let mut t = [0.0; 7];
        for (n, tn) in t.iter_mut().enumerate() {
            *tn = eta[0] * m[n] + eta[1] * m[n + 1] + eta[2] * m[n + 2] + eta[3] * m[n + 3];
        }
        let v = &c.v;
        let mut dcol = [0.0; RAW_COLUMNS];
        let mut w = [[0.0; RAW_COLUMNS]; 4];
        for k in 0..RAW_COLUMNS {
            dcol[k] = v[0][k] * m[0] + v[1][k] * m[1] + v[2][k] * m[2] + v[3][k] * m[3];
            for (p, wp) in w.iter_mut().enumerate() {
                wp[k] = t[p] * v[0][k] + t[p + 1] * v[1][k] + t[p + 2] * v[2][k] + t[p + 3] * v[3][k];
            }
        }
        // (local column, raw index, width) of the dense four and the blocks,
        // in increasing raw index: Q's upper blocks (raw i <= j) are summed,
        // the lower ones mirrored once a row (`finish`).
        let ns = self.stride;
        let blocks = [(0, 0), (4, 4 + c.score_first), (8, 4 + self.p_h + c.link_first)];
        // W's four-column blocks, as fixed-size arrays (whole vectors).
        let wb: [[[f64; 4]; 4]; 3] =
            std::array::from_fn(|b| std::array::from_fn(|p| std::array::from_fn(|y| w[p][4 * b + y])));
        for (bi, &(li, gi)) in blocks.iter().enumerate() {
            for x in 0..4 {
                let i = li + x;
                self.dv[gi + x] += dcol[i];
                let vi = [v[0][i], v[1][i], v[2][i], v[3][i]];
                let row = &mut self.qr[(gi + x) * ns..(gi + x + 1) * ns];
                for (bj, &(_, gj)) in blocks.iter().enumerate().skip(bi) {
                    let [w0, w1, w2, w3] = &wb[bj];
                    let dst: &mut [f64; 4] = (&mut row[gj..gj + 4]).try_into().expect("four columns");
                    // Lane by lane in the sum's order (((v0 w0 + v1 w1) +
                    // v2 w2) + v3 w3) + dst: whole vectors, not 4 scalars.
                    let mut t: [f64; 4] = std::array::from_fn(|y| vi[0] * w0[y]);
                    for (vp, wp) in vi[1..].iter().zip([w1, w2, w3]) {
                        t = std::array::from_fn(|y| t[y] + vp * wp[y]);
                    }
                    *dst = std::array::from_fn(|y| dst[y] + t[y]);
                }
            }
        }
        let d = |p: &Cubic| p[0] * m[0] + p[1] * m[1] + p[2] * m[2] + p[3] * m[3];
        for (s, p) in self.dense.iter_mut().zip([&c.aa, &c.ab, &c.bb]) {
            *s += d(p);
        }
        // z Bw_j' = (center + x) Bw_j' in the cell's frame.
        let at = c.link_first;
        for (k, p) in c.w1.iter().enumerate() {
            let dp = d(p);
            self.dw1[at + k] += dp;
            self.dzw1[at + k] += c.center * dp + (p[0] * m[1] + p[1] * m[2] + p[2] * m[3] + p[3] * m[4]);
        }
    }

    /// D, AR, S_1 and Q over theta from the raw sums: d eta/d theta_u is
    /// `g_u raw_u + c1_u 1 + cz_u z` ([`Sums::combination`]).
    #[inline(always)]
    fn finish(&mut self, bases: &Bases, theta: &[f64], a: f64) {
        let (r, ns) = (self.r, self.stride);
        for u in 0..r {
            (self.g[u], self.c1[u], self.cz[u]) = self.combination(bases, theta, a, u);
        }
        let (g, c1, cz, qr) = (&self.g, &self.c1, &self.cz, &self.qr);
        // Q_raw is summed in its upper triangle (raw i <= j). With
        // a_u = Q_raw(raw_u, 1) and b_u = Q_raw(raw_u, z), Q over theta's
        // upper triangle (k <= l, so raw_k <= raw_l) is
        // g_k g_l Q_raw(raw_k, raw_l) + g_k (c1_l a_k + cz_l b_k)
        //   + g_l (c1_k a_l + cz_k b_l) + the 1 and z terms.
        let upper = |i: usize, j: usize| qr[i.min(j) * ns + i.max(j)];
        for u in 0..r {
            (self.a1[u], self.az[u]) = (upper(raw_index(u), 2), upper(raw_index(u), 3));
        }
        let (a1, az) = (&self.a1, &self.az);
        let (r11, r1z, rzz) = (upper(2, 2), upper(2, 3), upper(3, 3));
        for k in 0..r {
            let (gk, c1k, czk, pk) = (g[k], c1[k], cz[k], raw_index(k));
            let row = &qr[pk * ns..(pk + 1) * ns];
            let q = &mut self.q[k * r..(k + 1) * r];
            // A macro, not a closure: the closure stayed out of line, on
            // baseline SSE2 and a call an entry, outside the dispatched
            // caller.
            macro_rules! entry {
                ($l:expr, $raw:expr) => {{
                    let l = $l;
                    gk * g[l] * $raw
                        + gk * (c1[l] * a1[k] + cz[l] * az[k])
                        + g[l] * (c1k * a1[l] + czk * az[l])
                        + (c1k * c1[l] * r11 + (c1k * cz[l] + czk * c1[l]) * r1z + czk * cz[l] * rzz)
                }};
            }
            // raw_index(l): l for theta's coordinates 0 and 1, then l + 2,
            // so a vector loop past the first two.
            for l in k..2 {
                q[l] = entry!(l, row[l]);
            }
            for l in k.max(2)..r {
                q[l] = entry!(l, row[l + 2]);
            }
        }
        let dv = &self.dv;
        for u in 0..r {
            self.d[u] = g[u] * dv[raw_index(u)] + c1[u] * dv[2] + cz[u] * dv[3];
        }
        let s_f = bases.s_f;
        (self.e[0], self.e[1], self.s1[0], self.s1[1]) = (self.dense[0], self.dense[1], 0.0, self.dense[2]);
        for (j, lin) in bases.score.iter().flat_map(|b| b.linear_parts()).enumerate() {
            let u = 2 + j;
            self.e[u] = 0.0;
            self.s1[u] = s_f * (dv[u + 2] - lin[0] * dv[2] - lin[1] * dv[3]);
        }
        for (j, lin) in bases.link.iter().flat_map(|b| b.linear_parts()).enumerate() {
            let u = 2 + self.p_h + j;
            self.e[u] = s_f * (self.dw1[j] - lin[1] * dv[2]);
            self.s1[u] = s_f * (self.dzw1[j] - lin[1] * dv[3]);
        }
    }

    /// Theta coordinate u as (g, c1, cz): d eta/d theta_u = g
    /// raw_{raw_index(u)} + c1 1 + cz z; the score warp's s_f b (Bh_j -
    /// alpha_j - gamma_j z), the link's s_f (Bw_j(t) - alpha_j - gamma_j
    /// (a + b z)).
    #[inline(always)]
    fn combination(&self, bases: &Bases, theta: &[f64], a: f64, u: usize) -> (f64, f64, f64) {
        let (b, s_f, p_h) = (theta[1], bases.s_f, self.p_h);
        match u {
            0 | 1 => (1.0, 0.0, 0.0),
            u if u < 2 + p_h => {
                let [al, ga] = bases.score.as_ref().map_or([0.0; 2], |s| s.linear_parts()[u - 2]);
                let g = s_f * b;
                (g, -g * al, -g * ga)
            }
            u => {
                let [al, ga] = bases.link.as_ref().map_or([0.0; 2], |l| l.linear_parts()[u - 2 - p_h]);
                (s_f, -s_f * (al + ga * a), -s_f * ga * b)
            }
        }
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

/// The raw function of theta coordinate u: d eta/da and d eta/db (0, 1),
/// then past the raw 1 and z (2, 3) the score and link B-splines in
/// theta's order.
#[inline(always)]
fn raw_index(u: usize) -> usize {
    if u < 2 {
        u
    } else {
        u + 2
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
        rb.raw_cell(a, lo, hi, &mut hint, &mut s.cell);
        // Moments and cubics about the cell's centre (see moment_center).
        let m = moments(&s.cell.eta, lo, hi);
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
    cell: RawCell,
    sums: Sums,
    row: RowSums,
}

impl Scratch {
    fn new(bases: &Bases) -> Self {
        let r = bases.r();
        Self {
            combinations: Combinations::default(),
            observed: Observed::default(),
            observed_bases: ObservedBases::default(),
            work: Work {
                cell: RawCell::default(),
                sums: Sums::new(bases),
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
                let (mut scratch, mut theta) = (Scratch::new(&self.bases), Vec::with_capacity(r));
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
        let mut scratch = Scratch::new(&self.bases);
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
    let f_a = s.sums.dv[0] / (2.0 * PI);
    if !(f_a.is_finite() && f_a > 0.0 && a.is_finite()) {
        let reason = format!("F_a = {f_a:e} at a = {a:e}: must be finite and > 0");
        return Err(Error::RowRejected { row: i, reason });
    }
    s.sums.finish(&model.bases, theta, a);
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
