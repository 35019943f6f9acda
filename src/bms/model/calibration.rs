//! The per-row intercept a: the root of the marginal calibration
//! `F(a; theta) = integral Phi(eta(z)) phi(z) dz - Phi(q) = 0`.
//!
//! Rigid rows (beta_h = beta_w = 0) use the closed form; flexible rows use
//! Halley's method on a (Newton's with a second-derivative correction),
//! safeguarded by a bracket grown from its seed when a step is unusable.
//! The seed is the rigid value improved by a few quick Halley steps on a
//! fixed 5-point rule (`quick_seed`); the adaptive iteration then usually
//! takes one evaluation where it took three from the rigid value. Each
//! adaptive iterate takes one quadrature pass per cell for F (of Phi(eta)
//! phi(z)), F_a and F_aa together; the full moments are computed once, at
//! the root. Far out in a tail (the mass beyond a factor LOG_FAR of its
//! target Phi(q)) a step is Newton's on the log of the mass instead
//! ([`tail_step`]). The device kernel (`bms_calibrate`) follows the same steps,
//! the quick seed's handover included (tests/kernel_replay.rs checks the
//! two against each other); its 5-point rule's weights are constants within
//! a few ulp of `gauss_legendre(5)`'s, so the two agree to rounding, not
//! bitwise.

use std::f64::consts::PI;

use crate::bms::model::cells::{local_center, Bases, Cell, CellJet, RowBases, Z_CLIP};
use crate::bms::model::cubic_basis::{poly_eval, Cubic};
use crate::bms::numerics::nodes;
use crate::bms::numerics::probit::{cdf_pdf_and_gauss, inv_sqrt_2pi, norm_cdf, norm_sf};
use crate::bms::numerics::quadrature::{
    abs_poly, adaptive_bounded, adaptive_bounded_nodes_from, gauss3, gauss5, initial_edges, nearest, radius,
};
use crate::dispatch::by_cpu;
use crate::{Error, Result};

/// Newton iterations allowed (bisection steps included).
const MAX_ITER: usize = 200;

/// A row's solved intercept with the cells (moments filled) at that a.
#[derive(Clone, Debug)]
pub struct Calibrated {
    /// The intercept a.
    pub a: f64,
    /// dF/da at a, positive.
    pub f_a: f64,
    /// The row's cells at a, with moments.
    pub cells: Vec<Cell>,
}

/// The rigid intercept `q sqrt(1 + (s_f b)^2) / s_f`.
pub fn rigid_intercept(q: f64, b: f64, s_f: f64) -> f64 {
    q * (1.0 + (s_f * b).powi(2)).sqrt() / s_f
}

/// D(R) = kappa sum_k R_k m_k with kappa = 1/(2 pi): the integral of
/// R(z) phi(eta) phi(z) over a cell.
pub fn cell_d(r: &[f64; 4], m: &[f64]) -> f64 {
    (r[0] * m[0] + r[1] * m[1] + r[2] * m[2] + r[3] * m[3]) / (2.0 * PI)
}

/// F(a) over the given cells (built at a: [`Bases::jets`]). For q > 0 the
/// complement form `Phi(-q) - integral Phi(-eta) phi` keeps the small
/// difference accurate.
pub fn residual(q: f64, cells: &[CellJet]) -> f64 {
    let upper = q > 0.0;
    let mass: f64 = cells.iter().map(|c| cell_mass(c, upper, F_TOL)).sum();
    if upper {
        norm_sf(q) - mass
    } else {
        mass - norm_cdf(q)
    }
}

/// The integral of Phi(+-eta) phi(z) over one cell, each panel's estimated
/// error within `tol` of the cell's own |f| integral (the 21-point rule).
fn cell_mass(c: &CellJet, upper: bool, tol: f64) -> f64 {
    let (l, r) = (c.lo.max(-Z_CLIP), c.hi.min(Z_CLIP));
    let center = local_center(&c.eta, l, r);
    let eta = c.about(center).eta;
    let f = |z: f64| {
        let e = poly_eval(&eta, z - center);
        [cdf_pdf_and_gauss(if upper { -e } else { e }, z).0]
    };
    // Phi(+-eta) phi(z) <= phi(z).
    let bound = |g: f64, _: f64, _: f64| [g * inv_sqrt_2pi()];
    adaptive_bounded(l, r, [tol], &f, &bound)[0]
}

/// Cells with moments at a, and F_a from them.
fn cells_at(bases: &Bases, theta: &[f64], a: f64) -> (Vec<Cell>, f64) {
    let mut cells = bases.cells(theta, a);
    cells.iter_mut().for_each(Cell::fill_moments);
    let f_a = cells.iter().map(|c| cell_d(&c.a, &c.moments)).sum();
    (cells, f_a)
}

fn reject(row: usize, reason: String) -> Error {
    Error::RowRejected { row, reason }
}

/// Solve a for row `row` (the index only names the row in errors).
pub fn solve_intercept(bases: &Bases, theta: &[f64], row: usize) -> Result<Calibrated> {
    let a = solve_root(bases, theta, row)?;
    let (cells, f_a) = checked_cells(bases, theta, a, row)?;
    Ok(Calibrated { a, f_a, cells })
}

/// The root a of [`solve_intercept`], without the cells at it.
pub(crate) fn solve_root(bases: &Bases, theta: &[f64], row: usize) -> Result<f64> {
    bases.check_theta(theta)?;
    solve_root_on(&RowBases::new(bases, theta), row)
}

by_cpu! {
    /// [`solve_root`] on the row's bases (theta checked by the caller), for
    /// a caller that walks the row's cells again at the root. Compiled for
    /// the CPU's widest vectors with the iteration and the quadrature's
    /// bisection inlined (`dispatch`: their scalar control code takes a
    /// tenth of a row, and the wider instruction set's three-operand forms
    /// shorten it), the same bits on any.
    pub(crate) fn solve_root_on / solve_root_on_avx2 / solve_root_on_avx512(rb: &RowBases, row: usize) -> Result<f64> = solve_root_on_body
}

#[inline(always)]
fn solve_root_on_body(rb: &RowBases, row: usize) -> Result<f64> {
    let (q, b) = (rb.theta[0], rb.theta[1]);
    let a0 = rigid_intercept(q, b, rb.bases.s_f);
    if rb.theta[2..].iter().all(|v| *v == 0.0) {
        return Ok(a0);
    }
    newton(rb, quick_seed(rb, a0), row, Rule::Adaptive)
}

/// The cells with moments at the root a, and F_a from them, which must be
/// finite and positive (as a itself must be finite).
pub(crate) fn checked_cells(bases: &Bases, theta: &[f64], a: f64, row: usize) -> Result<(Vec<Cell>, f64)> {
    let (cells, f_a) = cells_at(bases, theta, a);
    if !(f_a.is_finite() && f_a > 0.0 && a.is_finite()) {
        return Err(reject(
            row,
            format!("F_a = {f_a:e} at a = {a:e}: must be finite and > 0"),
        ));
    }
    Ok((cells, f_a))
}

/// The bracket's first step from a0, which is also how far the iterations
/// may step from a0 before a bracket (F need not be monotone further out).
fn first_step(a0: f64) -> f64 {
    0.5 * (1.0 + a0.abs())
}

/// A bracket [lo, hi] with F(lo) <= 0 <= F(hi), grown from a0, with F by
/// the adaptive rule or (Quick) the quick one.
fn bracket(rb: &RowBases, a0: f64, f0: f64, row: usize, rule: Rule) -> Result<(f64, f64)> {
    let f = |a: f64| match rule {
        Rule::Adaptive => residual(rb.theta[0], &rb.jets(a)),
        Rule::Quick | Rule::Rough => residual_and_slopes(rb, a, rule).f,
    };
    let dir = if f0 < 0.0 { 1.0 } else { -1.0 };
    let (mut near, mut step) = (a0, first_step(a0));
    for _ in 0..64 {
        let far = near + dir * step;
        let ff = f(far);
        if !ff.is_finite() {
            return Err(reject(row, format!("F({far:e}) = {ff:e} while bracketing a")));
        }
        if ff * dir >= 0.0 {
            return Ok(if dir > 0.0 { (near, far) } else { (far, near) });
        }
        near = far;
        step *= 2.0;
    }
    Err(reject(row, format!("no sign change of F found from a = {a0:e}")))
}

/// A usable Halley step below STEP_STOP (relative) ends the iteration
/// without another evaluation when its L = F F_aa / F_a^2 is at most
/// STOP_CURVATURE: the new iterate's error is then about L^2 step / 4
/// (below 2.5e-18; 1e-21 where F_aa / F_a is of order one), and the
/// SLOPE_TOL errors of F_a and F_aa move it by about SLOPE_TOL times the
/// step (1e-16) where A = d eta / da keeps its sign. SLOPE_TOL is relative
/// to the integral of |A E|, so where A changes sign (a non-monotone link)
/// F_a's relative error, and the iterate's, can be larger (still far below
/// the 1e-12 the tests allow). A step of Newton's (|L| large) never ends it
/// early: its iterate is only within about L step / 2.
const STEP_STOP: f64 = 1e-7;
const STOP_CURVATURE: f64 = 1e-5;

/// Tolerance of F's integral (relative to the largest panel integral of
/// |f|, as `adaptive_bounded` takes it). QUADPACK's error estimate bounds
/// the Kronrod value's error far above it: the roots and rows came out the
/// same at 1e-10 as at 1e-14 (tests/bms_accuracy.rs: rows within 1.9e-12
/// of their largest entry, intercepts within 1.4e-14, either way), with a
/// fifth fewer panels a row (41.5 -> 33.4 at the seed shape, calibration
/// and moments together). The device's QUAD_TOL (kernels/bms_stage1/
/// basis.cuh) is the same.
const F_TOL: f64 = 1e-10;

/// Tolerance of the F_a and F_aa integrals: they only steer the iteration
/// (a relative error e in them moves the next iterate by about e times the
/// step), so they need far less than F.
const SLOPE_TOL: f64 = 1e-9;

/// Halley's correction 1 / (1 - L/2), L = F F_aa / F_a^2, is used while
/// |L| is below this; Newton's step otherwise.
const HALLEY_LIMIT: f64 = 1.0;

/// How F, F_a and F_aa are integrated over one cell: the adaptive rule at
/// the calibration's tolerances, or the quick rule that only seeds it (5
/// Gauss points a panel), or the rough one that takes the seed's first
/// step (3 points: see [`quick_seed`]).
#[derive(Clone, Copy)]
enum Rule {
    Adaptive,
    Quick,
    Rough,
}

/// F, F_a and F_aa at one a, with the tail mass F compares: `mass` is the
/// integral of Phi(eta) phi(z) (of Phi(-eta) phi(z) for q > 0) and
/// `target` Phi(q) (Phi(-q)), so F = mass - target (target - mass).
#[derive(Clone, Copy, Debug)]
struct Residual {
    f: f64,
    f_a: f64,
    f_aa: f64,
    mass: f64,
    target: f64,
}

/// F(a), F_a(a) and F_aa(a) in one quadrature pass per cell: with
/// E = exp(-(z^2 + eta^2)/2), the integrand carries Phi(+-eta) phi(z), A E
/// and (AA - A^2 eta) E, whose integrals over 2 pi are F_a = sum D(A) and
/// F_aa = sum D(AA) - Q(A, A).
#[inline(always)]
fn residual_and_slopes(rb: &RowBases, a: f64, rule: Rule) -> Residual {
    let q = rb.theta[0];
    let upper = q > 0.0;
    let SlopeTotals { mass, f_a, f_aa } = match rule {
        Rule::Adaptive => adaptive_totals(rb, a, upper),
        Rule::Quick => quick_slopes(rb, a, upper, gauss5()),
        Rule::Rough => quick_slopes(rb, a, upper, gauss3()),
    };
    let target = if upper { norm_sf(q) } else { norm_cdf(q) };
    let f = if upper { target - mass } else { mass - target };
    Residual {
        f,
        f_a,
        f_aa,
        mass,
        target,
    }
}

/// The row's mass, F_a and F_aa, summed a cell at a time.
#[derive(Clone, Copy, Default)]
struct SlopeTotals {
    mass: f64,
    f_a: f64,
    f_aa: f64,
}

impl SlopeTotals {
    /// Add one cell's three integrals (F_a's and F_aa's over 2 pi).
    #[inline(always)]
    fn add(&mut self, v: [f64; 3]) {
        self.mass += v[0];
        self.f_a += v[1] / (2.0 * PI);
        self.f_aa += v[2] / (2.0 * PI);
    }
}

/// Nodes the quick rule evaluates side by side: the nodes of as many
/// whole panels as fit (8 of 5 nodes, 13 of 3).
const QUICK_NODES: usize = 40;

/// A panel's nodes are formed in a vector of this many lanes (K <= 8), so
/// a batch holds this many slots past its nodes.
const QUICK_LANES: usize = 8;
const QUICK_SLOTS: usize = QUICK_NODES + QUICK_LANES;

by_cpu! {
    /// The quick rule's mass, F_a and F_aa at a: the K-point Gauss rule
    /// `(x, w)` on each of every cell's first panels (within QUICK_CLIP),
    /// the panels' nodes evaluated QUICK_NODES / K panels at a time (5 nodes
    /// a panel filled a vector of 8 one panel at a time), then summed panel
    /// by panel and cell by cell in the order and with the operations of
    /// `gauss5_panels_nodes` on `nodes::Slopes`, so with their bits where
    /// K = 5.
    fn quick_slopes / quick_slopes_avx2 / quick_slopes_avx512<const K: usize>(
        rb: &RowBases,
        a: f64,
        upper: bool,
        rule: &([f64; K], [f64; K]),
    ) -> SlopeTotals = quick_slopes_body
}

#[inline(always)]
fn quick_slopes_body<const K: usize>(rb: &RowBases, a: f64, upper: bool, rule: &([f64; K], [f64; K])) -> SlopeTotals {
    let (x, w) = rule;
    // The panel's K nodes in a vector of 8 (the spare lanes are written past
    // the panel, then overwritten by the next one's or never read).
    let x8: [f64; QUICK_LANES] = std::array::from_fn(|i| if i < K { x[i] } else { 0.0 });
    let mut batch = QuickBatch {
        z: [0.0; QUICK_SLOTS],
        e: [0.0; QUICK_SLOTS],
        d1: [0.0; QUICK_SLOTS],
        d2: [0.0; QUICK_SLOTS],
        half: [0.0; QUICK_NODES],
        cell: [0; QUICK_NODES],
        panels: 0,
    };
    let mut sums = QuickSums::default();
    // A count, not `enumerate` (whose `next` stayed out of line).
    let mut k = usize::MAX;
    for c in rb.each_jet(a) {
        k = k.wrapping_add(1);
        let (lo, hi) = (c.lo.max(-QUICK_CLIP), c.hi.min(QUICK_CLIP));
        if hi <= lo {
            continue;
        }
        let (edges, n, right) = initial_edges(lo, hi);
        for e in edges[..=n].windows(2) {
            let (pl, ph) = if right { (e[0], e[1]) } else { (e[1], e[0]) };
            let (mid, half) = (0.5 * (pl + ph), 0.5 * (ph - pl));
            let at = K * batch.panels;
            let z: [f64; QUICK_LANES] = std::array::from_fn(|i| mid + half * x8[i]);
            // Slopes' cubics at z - center, center 0: z itself.
            let at_nodes = |p: &Cubic| -> [f64; QUICK_LANES] { std::array::from_fn(|i| poly_eval(p, z[i] - 0.0)) };
            batch.z[at..at + QUICK_LANES].copy_from_slice(&z);
            batch.e[at..at + QUICK_LANES].copy_from_slice(&at_nodes(&c.eta));
            batch.d1[at..at + QUICK_LANES].copy_from_slice(&at_nodes(&c.a));
            batch.d2[at..at + QUICK_LANES].copy_from_slice(&at_nodes(&c.aa));
            (batch.half[batch.panels], batch.cell[batch.panels]) = (half, k);
            batch.panels += 1;
            if batch.panels == QUICK_NODES / K {
                batch.sum_into(&mut sums, w, upper);
            }
        }
    }
    batch.sum_into(&mut sums, w, upper);
    sums.flush();
    sums.totals
}

/// Up to QUICK_NODES / K panels' nodes with their cubics' values (the
/// slots past QUICK_NODES are the last panel's spare lanes).
struct QuickBatch {
    z: [f64; QUICK_SLOTS],
    e: [f64; QUICK_SLOTS],
    d1: [f64; QUICK_SLOTS],
    d2: [f64; QUICK_SLOTS],
    half: [f64; QUICK_NODES],
    cell: [usize; QUICK_NODES],
    panels: usize,
}

impl QuickBatch {
    /// The integrands at the batch's nodes (`nodes::slopes`' operations),
    /// summed into `sums` panel by panel; the batch is then empty.
    #[inline(always)]
    fn sum_into<const K: usize>(&mut self, sums: &mut QuickSums, w: &[f64; K], upper: bool) {
        let mut out = [[0.0; QUICK_NODES]; 3];
        if nodes::all_near(&self.e[..QUICK_NODES]) {
            self.values::<false>(upper, &mut out);
        } else {
            self.values::<true>(upper, &mut out);
        }
        for p in 0..self.panels {
            sums.enter(self.cell[p]);
            for (i, wi) in w.iter().enumerate() {
                for (sum, out) in sums.cell.iter_mut().zip(&out) {
                    *sum += wi * self.half[p] * out[K * p + i];
                }
            }
        }
        self.panels = 0;
    }
}

impl QuickBatch {
    /// The three integrands at every node (stale nodes past the batch's
    /// panels are evaluated too, unread).
    #[inline(always)]
    fn values<const FAR: bool>(&self, upper: bool, out: &mut [[f64; QUICK_NODES]; 3]) {
        let [o0, o1, o2] = out;
        let n = QUICK_NODES;
        let at = self.e[..n]
            .iter()
            .zip(&self.d1[..n])
            .zip(&self.d2[..n])
            .zip(&self.z[..n]);
        let outs = o0.iter_mut().zip(o1.iter_mut()).zip(o2.iter_mut());
        for ((((e, d1), d2), z), ((o0, o1), o2)) in at.zip(outs) {
            [*o0, *o1, *o2] = nodes::slope_values::<FAR>(*e, *d1, *d2, *z, upper);
        }
    }
}

/// The quick rule's running sums: the current cell's three integrals, and
/// the row's totals they join (as `residual_and_slopes` adds a cell's).
#[derive(Default)]
struct QuickSums {
    current: Option<usize>,
    cell: [f64; 3],
    totals: SlopeTotals,
}

impl QuickSums {
    /// Start cell k's sums, adding the last cell's to the totals.
    #[inline(always)]
    fn enter(&mut self, k: usize) {
        if self.current != Some(k) {
            self.flush();
            self.current = Some(k);
        }
    }

    /// Add the current cell's sums to the totals.
    #[inline(always)]
    fn flush(&mut self) {
        if self.current.take().is_some() {
            self.totals.add(self.cell);
        }
        self.cell = [0.0; 3];
    }
}

/// The cells whose nearest point to 0 lies within this are integrated
/// first (`adaptive_totals`): they carry the mass of the integrands, which
/// decay at least like exp(-z^2/2), where the row's mass lies near z = 0.
const NEAR_FIRST: f64 = 2.0;

/// The row's three calibration integrals by the adaptive rule. Each cell is
/// integrated to the tolerances relative to what the row's cells summed so
/// far (whose magnitude bounds the row's |f| integral from below), not just
/// to its own: F's error matters against the row's mass, and a cell far out
/// in a tail carries little of it. The cells near 0 go first (in z order),
/// so that the far ones, which took most of the bisections when each was
/// held to its own size, are measured against nearly the whole row (and
/// skipped where even their bounds are below its tolerance).
#[inline(always)]
fn adaptive_totals(rb: &RowBases, a: f64, upper: bool) -> SlopeTotals {
    let mut raw = [0.0; 3];
    for first in [true, false] {
        for c in rb.each_jet_where(a, |lo, hi| (nearest(lo, hi) < NEAR_FIRST) == first) {
            let v = adaptive_slopes(&c, upper, raw.map(f64::abs));
            for (t, v) in raw.iter_mut().zip(v) {
                *t += v;
            }
        }
    }
    SlopeTotals {
        mass: raw[0],
        f_a: raw[1] / (2.0 * PI),
        f_aa: raw[2] / (2.0 * PI),
    }
}

/// One cell's three calibration integrals by the adaptive rule, its cubics
/// taken about its [`local_center`], to the tolerances relative to at least
/// `floor` (see [`adaptive_totals`]).
#[inline(always)]
fn adaptive_slopes(c: &CellJet, upper: bool, floor: [f64; 3]) -> [f64; 3] {
    let (l, r) = (c.lo.max(-Z_CLIP), c.hi.min(Z_CLIP));
    let center = local_center(&c.eta, l, r);
    let local = c.about(center);
    // Phi <= 1 and exp(-eta^2/2) <= 1: each component is at most a
    // polynomial bound times exp(-z^2/2), the cubics (in z - center)
    // bounded over the panel's largest |z - center|.
    let bound = |g: f64, lo: f64, hi: f64| {
        let z = radius(lo, hi, center);
        let pa = abs_poly(&local.a, z);
        [
            g * inv_sqrt_2pi(),
            g * pa,
            g * (abs_poly(&local.aa, z) + pa * pa * abs_poly(&local.eta, z)),
        ]
    };
    let tol = [F_TOL, SLOPE_TOL, SLOPE_TOL];
    let f = nodes::Slopes {
        cell: &local,
        center,
        upper,
    };
    adaptive_bounded_nodes_from(l, r, tol, floor, &f, &bound)
}

/// The quick rule's range: |z| <= 8 (phi(8) = 5e-15; the seed it feeds needs
/// nothing like that accuracy).
const QUICK_CLIP: f64 = 8.0;

/// The quick iteration stops once a step is below this (relative): Halley's
/// next iterate is then within about its cube, 2.7e-8, of the quick rule's
/// root, which lies within its own error (about 1e-9 at the seed shape) of
/// the true one; both are under the adaptive iteration's STEP_STOP (1e-7),
/// so one adaptive step from the seed still finishes. At 1e-3 (the value
/// before) 300 seed rows took 2.79 quick evaluations a row, at 3e-3 1.97,
/// and exactly one adaptive evaluation a row either way (counted in the
/// host replay of the device kernels); at 1e-2, r = 64 rows needed a second
/// adaptive evaluation more often.
const QUICK_STOP: f64 = 3e-3;

/// Quick iterations allowed.
const QUICK_ITERS: usize = 8;

/// A seed for the adaptive iteration: Halley's method from a0 on F, F_a, F_aa
/// taken with one 5-point Gauss rule a panel (the adaptive rule's first
/// panels, no error test), a twentieth of an adaptive evaluation's integrand
/// values; the first step, from a0, is on the 3-point rule (`Rule::Rough`,
/// three fifths of the cost), and a quick step always follows it. The
/// adaptive iteration then usually ends after one evaluation (its first
/// step is below STEP_STOP): at the seed shape a row took two quick
/// evaluations before and takes a rough and a quick one now, with one
/// adaptive evaluation either way (also at r = 42 and 64, and at 1.5 times
/// the generator's coefficients); a 2-point first step put a second
/// adaptive evaluation on 14% of the r = 64 rows. The device takes its
/// first step on the quick rule (kernels/bms_stage1/calibration.cuh): the
/// two seeds differ within the quick rule's error, and both roots within
/// STEP_STOP's bound. A step further from a0 than the
/// bracket's first step (the root lies far from the rigid value, as when
/// the link deviates a lot) hands over to [`newton`] on the quick rule,
/// which brackets from a0 as the adaptive iteration would, only cheaply; the
/// adaptive iteration then starts at the root it finds. Where the quick
/// iteration misbehaves otherwise (F_a <= 0, anything non-finite, a
/// quick bracket that fails) it returns a0, as if it had not run.
#[inline(always)]
fn quick_seed(rb: &RowBases, a0: f64) -> f64 {
    let cap = first_step(a0);
    let mut a = a0;
    for k in 0..QUICK_ITERS {
        let rule = if k == 0 { Rule::Rough } else { Rule::Quick };
        let Residual { f, f_a, f_aa, .. } = residual_and_slopes(rb, a, rule);
        if !f.is_finite() || f_a.is_nan() || f_a <= 0.0 {
            return a0;
        }
        let (next, _) = halley_step(a, f, f_a, f_aa);
        if !next.is_finite() {
            return a0;
        }
        if (next - a0).abs() > cap {
            return newton(rb, a0, 0, Rule::Quick).unwrap_or(a0);
        }
        // The rough step's error is its rule's, not Halley's (cubic in the
        // step): a quick evaluation always follows it.
        let done = k > 0 && (next - a).abs() <= QUICK_STOP * (1.0 + a.abs());
        a = next;
        if done {
            break;
        }
    }
    a
}

/// Halley's step from a, or Newton's where Halley's correction is far from
/// one (F_aa is only a guide there); with L = F F_aa / F_a^2.
#[inline(always)]
fn halley_step(a: f64, f: f64, f_a: f64, f_aa: f64) -> (f64, f64) {
    let newton = f / f_a;
    let l = newton * f_aa / f_a;
    if l.abs() < HALLEY_LIMIT {
        (a - newton / (1.0 - 0.5 * l), l)
    } else {
        (a - newton, l)
    }
}

/// The factor between the mass and its target beyond which (either way) an
/// adaptive step is [`tail_step`]'s. F is then nearly exponential in a:
/// steps on F crawl toward the root from above (0.3 a step, about 60
/// evaluations for a row of issue 38 at q = -18.8, Phi(q) = 1.5e-79) and
/// overshoot by about target / F_a from below. Ordinary rows start the
/// adaptive iteration at the quick seed, with the mass far closer to its
/// target, and never take it (12,000 rows at four shapes, at 1 and 1.5
/// times the generator's coefficients, evaluate bitwise as before).
const LOG_FAR: f64 = 4.0;

/// Newton's step on G = +-log(mass / target) (F's sign: G increases in a as
/// F does), whose slope is F_a / mass, where the mass is beyond a factor
/// LOG_FAR of its target; None elsewhere (or where the mass underflows).
/// Its L is infinite: such a step never ends the iteration.
#[inline(always)]
fn tail_step(a: f64, r: &Residual) -> Option<(f64, f64)> {
    let ratio = r.mass / r.target;
    let far = !(1.0 / LOG_FAR..=LOG_FAR).contains(&ratio);
    if !(far && ratio > 0.0 && ratio.is_finite()) {
        return None;
    }
    let g = if r.f < 0.0 { -ratio.ln().abs() } else { ratio.ln().abs() };
    Some((a - g * r.mass / r.f_a, f64::INFINITY))
}

/// The iteration's step from a, with its L: [`tail_step`]'s far out in a
/// tail on the adaptive rule, [`halley_step`]'s otherwise.
#[inline(always)]
fn step_from(a: f64, r: &Residual, rule: Rule) -> (f64, f64) {
    let tail = match rule {
        Rule::Adaptive => tail_step(a, r),
        Rule::Quick | Rule::Rough => None,
    };
    tail.unwrap_or_else(|| halley_step(a, r.f, r.f_a, r.f_aa))
}

/// Halley on a seeded by a0. The bracket is grown (from a0) only when a
/// step is unusable: F_a <= 0, a step outside what the signs seen so far
/// allow, or, before any bracket, a step longer than the bracket's first
/// step (F need not be monotone far from a0). From then on a Newton step
/// that leaves the bracket is replaced by bisection. Where F has several
/// increasing roots within that first step of a0, the one the iteration
/// reaches from a0 is returned; the device kernel
/// (`kernels/bms_stage1/calibration.cuh`) follows the same rule.
///
/// On the quick rule (`rule` Quick, a seed only) it stops at QUICK_STOP;
/// on the adaptive one, steps far out in a tail are [`tail_step`]'s.
#[inline(always)]
fn newton(rb: &RowBases, a0: f64, row: usize, rule: Rule) -> Result<f64> {
    let stop = match rule {
        Rule::Adaptive => STEP_STOP,
        Rule::Quick | Rule::Rough => QUICK_STOP,
    };
    let mut r = residual_and_slopes(rb, a0, rule);
    if !r.f.is_finite() {
        return Err(reject(row, format!("F({a0:e}) = {:e}", r.f)));
    }
    if r.f == 0.0 {
        return Ok(a0);
    }
    let (f0, cap) = (r.f, first_step(a0));
    let mut a = a0;
    let (mut lo, mut hi) = if r.f < 0.0 {
        (a, f64::INFINITY)
    } else {
        (f64::NEG_INFINITY, a)
    };
    let mut bracketed = false;
    for _ in 0..MAX_ITER {
        let (step_to, l) = step_from(a, &r, rule);
        let inside = |lo: f64, hi: f64| r.f_a > 0.0 && step_to > lo && step_to < hi;
        let mut usable = inside(lo, hi) && (bracketed || (step_to - a0).abs() <= cap);
        if !usable && !bracketed {
            (lo, hi) = bracket(rb, a0, f0, row, rule)?;
            bracketed = true;
            usable = inside(lo, hi);
        }
        let next = if usable { step_to } else { 0.5 * (lo + hi) };
        let step = (next - a).abs();
        let scale = 1.0 + a.abs();
        let done = step <= 4.0 * f64::EPSILON * scale
            || hi - lo <= 4.0 * f64::EPSILON * scale
            || (usable && step <= stop * scale && l.abs() <= STOP_CURVATURE);
        a = next;
        if done {
            return Ok(a);
        }
        r = residual_and_slopes(rb, a, rule);
        if !r.f.is_finite() {
            return Err(reject(row, format!("F({a:e}) = {:e}", r.f)));
        }
        if r.f == 0.0 {
            return Ok(a);
        }
        if r.f < 0.0 {
            lo = a;
        } else {
            hi = a;
        }
    }
    Err(reject(row, format!("intercept did not converge (last a = {a:e})")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bms::model::cubic_basis::CubicBasis;
    use crate::bms::numerics::probit::norm_pdf;

    fn bases() -> Bases {
        Bases::new(
            Some(CubicBasis::uniform(-3.5, 3.5, 4).unwrap()),
            Some(CubicBasis::uniform(-4.0, 4.0, 3).unwrap()),
            0.9,
        )
        .unwrap()
    }

    /// Rows with tails, steep and flat links and both signs of q.
    fn mixed_rows() -> Vec<Vec<f64>> {
        vec![
            vec![0.3, 0.8, 0.2, -0.15, 0.1, 0.05, 0.06, -0.04, 0.03],
            vec![-2.5, -1.4, 0.5, 0.3, -0.2, 0.1, 0.9, -0.6, 0.4],
            vec![1.7, 3.0, -0.05, 0.02, 0.0, 0.01, -2.0, 1.5, 0.2],
        ]
    }

    #[test]
    fn rigid_rows_use_the_closed_form_and_satisfy_the_calibration() {
        let bs = bases();
        for (q, b) in [(0.4, 0.7), (-1.3, -1.1), (2.5, 0.0), (-6.0, 2.0)] {
            let mut theta = vec![0.0; bs.r()];
            (theta[0], theta[1]) = (q, b);
            let cal = solve_intercept(&bs, &theta, 0).unwrap();
            let want = q * (1.0 + (0.9 * b) * (0.9f64 * b)).sqrt() / 0.9;
            assert_eq!(cal.a, want);
            // F(a) = 0 by quadrature: an independent check of the closed form.
            let f = residual(q, &bs.jets(&theta, cal.a));
            assert!(f.abs() < 1e-14 * norm_cdf(-q.abs()).max(1e-300) + 1e-16, "F = {f:e}");
            // F_a from the moments equals s_f phi(a s_f / sqrt(1 + (s_f b)^2)) / sqrt(1 + (s_f b)^2).
            let k = (1.0 + (0.9 * b) * (0.9f64 * b)).sqrt();
            let fa = 0.9 * norm_pdf(0.9 * want / k) / k;
            assert!((cal.f_a - fa).abs() < 1e-13 * fa, "F_a {} vs {fa}", cal.f_a);
        }
    }

    #[test]
    fn flexible_rows_solve_to_machine_precision_from_a_close_seed() {
        let bs = bases();
        let mut theta = vec![0.3, 0.8, 0.2, -0.15, 0.1, 0.05, 0.06, -0.04, 0.03];
        for q in [-3.0, -0.5, 0.0, 1.2, 4.0] {
            theta[0] = q;
            let cal = solve_intercept(&bs, &theta, 7).unwrap();
            let f = residual(q, &bs.jets(&theta, cal.a));
            // |F| within a few ulps of the tail mass, so a is within ~ulps/F_a.
            assert!(f.abs() <= 1e-14 * norm_cdf(-q.abs()), "q = {q}: F = {f:e}");
            let h = 1e-7;
            let fd = (residual(q, &bs.jets(&theta, cal.a + h)) - residual(q, &bs.jets(&theta, cal.a - h))) / (2.0 * h);
            assert!((fd - cal.f_a).abs() < 1e-6 * cal.f_a, "F_a {} vs FD {fd}", cal.f_a);
            // The quick seed's job: close enough that one adaptive
            // evaluation ends the iteration (a step below STEP_STOP).
            let a0 = rigid_intercept(q, theta[1], bs.s_f);
            let seed = quick_seed(&RowBases::new(&bs, &theta), a0);
            assert!(
                (a0 - cal.a).abs() > 1e-3,
                "q = {q}: the rigid value is already the root"
            );
            let a = cal.a;
            assert!(
                (seed - a).abs() < STEP_STOP * (1.0 + a.abs()),
                "q = {q}: seed {seed} vs {a}"
            );
        }
    }

    /// The adaptive pass holds each cell to the row's mass so far (far cells
    /// to far less than their own size, or skipped): the row's mass stays
    /// within 1e-12 of a reference that holds every cell to 1e-14 of
    /// itself, on rows with tails, steep and flat links, both signs of q,
    /// at intercepts that put the mass near 0 and far out (Phi(q) of 1e-9).
    #[test]
    fn cells_held_to_the_rows_mass_keep_it() {
        let bs = bases();
        let mut rows = mixed_rows();
        rows.push(vec![-6.0, 0.4, 0.3, -0.2, 0.1, 0.0, 0.5, 0.2, -0.3]);
        rows.push(vec![6.0, -2.2, -0.3, 0.2, 0.1, 0.4, -0.5, 0.2, 0.3]);
        for theta in &rows {
            let rb = RowBases::new(&bs, theta);
            let upper = theta[0] > 0.0;
            let a0 = rigid_intercept(theta[0], theta[1], bs.s_f);
            for a in [a0 - 2.0, a0, a0 + 1.5] {
                let got = adaptive_totals(&rb, a, upper).mass;
                let want: f64 = rb.each_jet(a).map(|c| cell_mass(&c, upper, 1e-14)).sum();
                assert!(
                    (got - want).abs() <= 1e-12 * want,
                    "theta {theta:?} a {a}: {got:e} vs {want:e}"
                );
            }
        }
    }

    /// The batched quick rule gives each F, F_a and F_aa the bits of the
    /// rule cell by cell (`gauss5_panels_nodes` on `nodes::Slopes`, summed
    /// as the cells come), on rows with tails, steep and flat links, both
    /// signs of q and a range of intercepts.
    #[test]
    fn quick_slopes_equal_the_rule_cell_by_cell() {
        use crate::bms::numerics::quadrature::gauss5_panels_nodes;
        let bs = bases();
        for theta in &mixed_rows() {
            let rb = RowBases::new(&bs, theta);
            let upper = theta[0] > 0.0;
            for a in [-9.0, -2.0, -0.3, 0.0, 0.7, 4.0, 12.0] {
                let (mut mass, mut f_a, mut f_aa) = (0.0, 0.0, 0.0);
                for c in rb.each_jet(a) {
                    let f = nodes::Slopes {
                        cell: &c,
                        center: 0.0,
                        upper,
                    };
                    let v = gauss5_panels_nodes(c.lo.max(-QUICK_CLIP), c.hi.min(QUICK_CLIP), &f);
                    mass += v[0];
                    f_a += v[1] / (2.0 * PI);
                    f_aa += v[2] / (2.0 * PI);
                }
                let want = [mass, f_a, f_aa].map(f64::to_bits);
                let bits = |t: SlopeTotals| [t.mass, t.f_a, t.f_aa].map(f64::to_bits);
                let rule = gauss5();
                assert_eq!(
                    bits(quick_slopes(&rb, a, upper, rule)),
                    want,
                    "theta {theta:?}, a = {a}"
                );
                let got = quick_slopes_body(&rb, a, upper, rule);
                assert_eq!(bits(got), want, "baseline: theta {theta:?}, a = {a}");
                #[cfg(target_arch = "x86_64")]
                if std::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU has AVX2, checked just above.
                    let got = unsafe { quick_slopes_avx2(&rb, a, upper, rule) };
                    assert_eq!(bits(got), want, "AVX2: theta {theta:?}, a = {a}");
                }
            }
        }
    }

    /// The rough rule (3 points a panel, 13 panels a batch) is the 3-point
    /// Gauss rule on the quick rule's panels, summed directly, to rounding.
    #[test]
    fn rough_slopes_are_the_three_point_rule_on_the_quick_panels() {
        let bs = bases();
        let (x, w) = gauss3();
        for theta in &mixed_rows() {
            let rb = RowBases::new(&bs, theta);
            let upper = theta[0] > 0.0;
            for a in [-9.0, -2.0, -0.3, 0.0, 0.7, 4.0, 12.0] {
                let mut want = SlopeTotals::default();
                for c in rb.each_jet(a) {
                    let (lo, hi) = (c.lo.max(-QUICK_CLIP), c.hi.min(QUICK_CLIP));
                    if hi <= lo {
                        continue;
                    }
                    let (edges, n, _) = initial_edges(lo, hi);
                    let mut cell = [0.0; 3];
                    for e in edges[..=n].windows(2) {
                        let (mid, half) = (0.5 * (e[0] + e[1]), 0.5 * (e[1] - e[0]).abs());
                        for (xi, wi) in x.iter().zip(w) {
                            let z = mid + half * xi;
                            let [ev, d1, d2] = [&c.eta, &c.a, &c.aa].map(|p| poly_eval(p, z));
                            let v = nodes::slope_values::<true>(ev, d1, d2, z, upper);
                            for (s, v) in cell.iter_mut().zip(v) {
                                *s += wi * half * v;
                            }
                        }
                    }
                    want.add(cell);
                }
                let got = quick_slopes(&rb, a, upper, gauss3());
                for (g, wv) in [got.mass, got.f_a, got.f_aa]
                    .iter()
                    .zip([want.mass, want.f_a, want.f_aa])
                {
                    let scale = 1e-300 + wv.abs();
                    assert!((g - wv).abs() <= 1e-13 * scale, "theta {theta:?}, a = {a}: {g} vs {wv}");
                }
            }
        }
    }

    /// Combinations kept across rows are formed again where a row's basis
    /// coefficients differ (by a bit or in sign), and reused where they do
    /// not: each root is the bits of a row solved on its own.
    #[test]
    fn combinations_kept_across_rows_give_each_rows_own_root() {
        use crate::bms::model::cells::Combinations;
        let bs = bases();
        let base: Vec<f64> = vec![0.3, 0.8, 0.2, -0.15, 0.1, 0.05, 0.06, -0.04, 0.03];
        let mut next_bit = base.clone();
        next_bit[5] = f64::from_bits(base[5].to_bits() + 1);
        let mut flipped = base.clone();
        flipped[8] = -base[8];
        let mut other_row = base.clone();
        (other_row[0], other_row[1]) = (-1.1, 1.4);
        let mut kept = Combinations::default();
        for theta in [&base, &other_row, &next_bit, &flipped, &base, &other_row] {
            let got = solve_root_on(&kept.row(&bs, theta), 0).unwrap();
            let want = solve_root(&bs, theta, 0).unwrap();
            assert_eq!(got.to_bits(), want.to_bits(), "theta {theta:?}");
        }
    }

    #[test]
    fn halley_slopes_match_finite_differences_of_the_residual() {
        // F_a and F_aa come from their own integrands; central differences
        // of F (and of F_a) are the independent check.
        let bs = bases();
        let theta = vec![-0.7, 0.9, 0.25, -0.1, 0.12, 0.05, 0.2, -0.15, 0.1];
        let h = 1e-5;
        for a in [-1.5, -0.6, 0.3] {
            let at = |a: f64| residual_and_slopes(&RowBases::new(&bs, &theta), a, Rule::Adaptive);
            let (Residual { f_a, f_aa, .. }, p, m) = (at(a), at(a + h), at(a - h));
            let (fp, fap, fm, fam) = (p.f, p.f_a, m.f, m.f_a);
            let (fd1, fd2) = ((fp - fm) / (2.0 * h), (fap - fam) / (2.0 * h));
            assert!((fd1 - f_a).abs() < 1e-8 * f_a.abs(), "a = {a}: F_a {f_a} vs FD {fd1}");
            assert!(
                (fd2 - f_aa).abs() < 1e-6 * (f_aa.abs() + f_a.abs()),
                "a = {a}: F_aa {f_aa} vs FD {fd2}"
            );
        }
    }

    #[test]
    fn non_monotone_f_still_gives_a_root_with_positive_slope() {
        // b = 0, so F(a) = Phi(s_f (a + L(a))) - Phi(q), with a link
        // deviation of slope -2 outside its knots: F falls at both ends and
        // rises only inside. The safeguarded Newton must land on a root where
        // F_a > 0 (or reject the row), never on a falling one.
        let link = CubicBasis::uniform(-2.0, 2.0, 2).unwrap();
        let slope = link.segment(0)[0][1];
        let bs = Bases::new(None, Some(link), 1.0).unwrap();
        let theta = vec![0.0, 0.0, -2.0 / slope, 0.0];
        let cal = solve_intercept(&bs, &theta, 3).unwrap();
        assert!(cal.f_a > 0.0);
        assert!(residual(0.0, &bs.jets(&theta, cal.a)).abs() < 1e-15);
        let eta_slope = cal.cells[0].a[0];
        assert!(eta_slope > 0.0, "d eta / da = {eta_slope}");
    }

    #[test]
    fn malformed_theta_is_rejected_with_the_field_named() {
        let bs = bases();
        let err = solve_intercept(&bs, &[0.0, 1.0], 0).unwrap_err().to_string();
        assert!(err.contains("theta.len"), "{err}");
        let mut theta = vec![0.0; bs.r()];
        theta[4] = f64::NAN;
        let err = solve_intercept(&bs, &theta, 0).unwrap_err().to_string();
        assert!(err.contains("theta[4]"), "{err}");
    }
}
