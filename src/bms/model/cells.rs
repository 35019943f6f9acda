//! Stage 1: a row's cell partition of the z line, the cubic coefficient
//! arrays of eta and its derivatives on every cell, and the cell moments
//! `m_k = integral_L^R (z - c)^k exp(-(z^2 + eta(z)^2) / 2) dz`, k = 0..9,
//! about the cell's [`moment_center`] c.
//!
//! A row's primary coordinates are `theta = (q, b, beta_h, beta_w)`; the
//! intercept a is given (see `calibration`). Every coefficient array holds
//! 4 monomial coefficients and already includes s_f: in the global z as
//! built, in z - c once the cell's moments are filled ([`Cell::center`]).

pub use crate::bms::model::bases::Bases;
use std::borrow::Cow;

use crate::bms::model::cubic_basis::{
    poly_add, poly_compose_affine, poly_deriv, poly_eval, poly_scale, poly_times_z, Cubic, CubicBasis,
};
use crate::bms::numerics::probit::{norm_cdf, norm_sf};
use crate::bms::numerics::quadrature::{abs_poly, adaptive_bounded_nodes, radius};
use crate::bms::numerics::series::series_moments;

/// Number of moments per cell, m_0..m_9.
pub const MOMENTS: usize = 10;

/// Beyond |z| = Z_CLIP the weight exp(-z^2/2) z^9 underflows to zero in f64,
/// so quadrature never looks further out.
pub const Z_CLIP: f64 = 40.0;

/// The size of eta's monomial terms at a cell's far edge (sum |c_k| |z|^k)
/// above which the cell's integrands evaluate its cubics about the cell's
/// midpoint ([`local_center`]). A cubic evaluated at z carries rounding
/// errors of about 1e-16 of that sum; where the terms cancel, as in the
/// cells that carry the link's knots at extreme intercepts (issue 38:
/// terms of 1e7-1e8 at z = 8-16 cancelling to eta of -35 to 10, errors of
/// 1e-9-1e-8 in eta), the integrands are noise at 1e-8 of themselves, which
/// no bisection gets below the quadrature's tolerance: each such cell ran
/// to the panel cap. About the midpoint the same cubics evaluate to 1e-16
/// of eta. Ordinary cells stay far below this (at most 1,800 over every
/// cell the evaluations visit, 12,000 rows at four shapes at 1 and 1.5
/// times the generator's coefficients; 7,500 at three times), and are
/// evaluated exactly as before.
const SHIFT_ABOVE: f64 = 1e5;

/// How far past a finite cell's point nearest 0 its [`moment_center`]
/// looks: the weight exp(-z^2/2) has fallen by e^-2 or more 2 past it.
const CENTER_REACH: f64 = 2.0;

/// The moments' tolerance. Each is needed to a fraction of rho^k times the
/// cell's mass (`quadrature_moments`), and the Kronrod value is far more
/// accurate than the error estimate this bounds (QUADPACK's, from the
/// embedded Gauss rule's error: about 1e-11 of the mass on a centred
/// x^9 E where the Kronrod sum is exact to rounding): the rows meet #42's
/// rule with 1e-11 as with 1e-14 (tests/bms_accuracy.rs).
const MOMENT_TOL: f64 = 1e-12;

/// Accepted running error bound of the affine recurrence, relative to each
/// moment; above it the cell falls back to quadrature. The upward recurrence
/// cancels on short finite cells (moments that shrink with k) and on cells far
/// from the weight's centre; infinite tails near the centre pass.
const RECURRENCE_TOL: f64 = 1e-12;

impl Bases {
    fn beta_h<'t>(&self, theta: &'t [f64]) -> &'t [f64] {
        &theta[2..2 + self.p_h()]
    }
    fn beta_w<'t>(&self, theta: &'t [f64]) -> &'t [f64] {
        &theta[2 + self.p_h()..]
    }

    /// The cell edges in z: the score knots and the link knots mapped back
    /// through t = a + b z (none when b = 0: the link part is then constant
    /// in z), sorted, without duplicates or non-finite values.
    ///
    /// Both lists come sorted (the knots increase, and z = (t - a) / b is
    /// monotone in t, rounding included), so they are merged, not sorted:
    /// the same values in the same order as sorting by `total_cmp` and
    /// dropping repeats, without the sort.
    pub fn breakpoints(&self, b: f64, a: f64) -> Vec<f64> {
        self.edges(b, a)
            .filter_map(|(_, hi)| hi.is_finite().then_some(hi))
            .collect()
    }

    /// The cells [lo, hi] between consecutive [`Bases::breakpoints`], the
    /// tails included.
    pub(crate) fn bounds(&self, b: f64, a: f64) -> Vec<(f64, f64)> {
        self.edges(b, a).collect()
    }

    /// [`Bases::bounds`] one at a time, merged as they come (nothing
    /// allocated: the calibration walks them at every trial intercept).
    pub(crate) fn edges(&self, b: f64, a: f64) -> CellEdges<'_> {
        let score = self.score.as_ref().map_or(&[][..], |s| s.knots());
        let link = match &self.link {
            Some(l) if b != 0.0 => l.knots(),
            _ => &[][..],
        };
        CellEdges {
            score,
            link,
            a,
            b,
            i: 0,
            j: 0,
            lo: f64::NEG_INFINITY,
            done: false,
        }
    }

    /// How many cells a row of slope b has at intercept a.
    pub(crate) fn cell_count(&self, b: f64, a: f64) -> usize {
        self.bounds(b, a).len()
    }

    /// The cells of row theta at intercept a, coefficients only (moments
    /// zero; see [`Cell::fill_moments`]).
    pub fn cells(&self, theta: &[f64], a: f64) -> Vec<Cell> {
        RowBases::new(self, theta).cells(a)
    }

    /// What the calibration needs of each cell (edges, eta, d eta/da,
    /// d2 eta/da2), without the per-coordinate arrays: one allocation a row
    /// instead of seven a cell, for the iteration's repeated evaluations.
    pub fn jets(&self, theta: &[f64], a: f64) -> Vec<CellJet> {
        RowBases::new(self, theta).jets(a)
    }

    /// eta = s_f (a + b z + b H + L), d eta/da = s_f (1 + L'), d2 eta/da2 =
    /// s_f L'' on one cell.
    #[inline(always)]
    fn jet(&self, theta: &[f64], a: f64, p: &Pieces, lo: f64, hi: f64) -> CellJet {
        let (b, s_f) = (theta[1], self.s_f);
        let sf = |q: Cubic| poly_scale(&q, s_f);
        CellJet {
            lo,
            hi,
            eta: sf(poly_add(&poly_add(&[a, b, 0.0, 0.0], &poly_scale(&p.h, b)), &p.l)),
            a: sf(poly_add(&[1.0, 0.0, 0.0, 0.0], &p.l1)),
            aa: sf(p.l2),
        }
    }

    /// One cell's coefficient arrays (the doc's table): [`CellParts`]
    /// repacked, so that both evaluations build the same cubics.
    fn cell_with(&self, rb: &RowBases, a: f64, lo: f64, hi: f64) -> Cell {
        let mut parts = CellParts::default();
        self.cell_parts_with(rb, a, lo, hi, &mut SegmentHint::default(), &mut parts);
        let (r, p_h) = (parts.v.c[0].len(), self.p_h());
        let mut coef = Vec::with_capacity(2 * (r - 1) + r - 2);
        coef.extend((1..r).map(|u| parts.v.get(u)));
        coef.extend((1..r).map(|u| parts.ar.get(u)));
        coef.extend((2..r).map(|u| parts.s1.get(u)));
        Cell {
            lo,
            hi,
            eta: parts.eta,
            a: parts.v.get(0),
            aa: parts.ar.get(0),
            sbb: parts.s1.get(1),
            coef,
            parts: r - 1,
            p_h,
            moments: [0.0; MOMENTS],
            center: 0.0,
        }
    }
}

/// The cells of a row at one intercept, from the merge of the score knots
/// and the mapped link knots ([`Bases::edges`]).
pub(crate) struct CellEdges<'k> {
    score: &'k [f64],
    link: &'k [f64],
    a: f64,
    b: f64,
    i: usize,
    j: usize,
    /// The last edge given (-inf before the first).
    lo: f64,
    done: bool,
}

impl CellEdges<'_> {
    /// Link knot k mapped to z, in increasing z.
    #[inline(always)]
    fn mapped(&self, k: usize) -> f64 {
        let t = if self.b > 0.0 {
            self.link[k]
        } else {
            self.link[self.link.len() - 1 - k]
        };
        (t - self.a) / self.b
    }
}

impl Iterator for CellEdges<'_> {
    type Item = (f64, f64);

    #[inline(always)]
    fn next(&mut self) -> Option<(f64, f64)> {
        if self.done {
            return None;
        }
        let (score, link) = (self.score, self.link);
        while self.i < score.len() || self.j < link.len() {
            // The next mapped link knot, formed once.
            let mapped = (self.j < link.len()).then(|| self.mapped(self.j));
            let take_score = match mapped {
                None => true,
                Some(m) => self.i < score.len() && score[self.i].total_cmp(&m).is_le(),
            };
            let v = match mapped {
                Some(m) if !take_score => m,
                _ => score[self.i],
            };
            if take_score {
                self.i += 1;
            } else {
                self.j += 1;
            }
            // Repeats and non-finite values are dropped.
            if v.is_finite() && v != self.lo {
                let lo = std::mem::replace(&mut self.lo, v);
                return Some((lo, v));
            }
        }
        self.done = true;
        Some((self.lo, f64::INFINITY))
    }
}

/// Where the last cell's basis segments were: cells come in increasing z,
/// so each search starts from the last answer (a step or two) instead of
/// bisecting every knot list again ([`CubicBasis::segment_near`]).
#[derive(Clone, Copy, Default)]
pub(crate) struct SegmentHint {
    score: Option<usize>,
    link: Option<usize>,
}

/// One cell's cubics over theta, what [`Bases::cells`]' cells (the bundle
/// path's) are built from: `v` holds d eta/da then d eta/d theta_u for
/// u = 1..r-1 (index 0 stands for a, since the q row is overridden), `ar`
/// d2 eta/da2 then d2 eta/da d theta_u, and `s1` the explicit d2 eta/db
/// d theta_v (index 0 unused). The fused evaluation sums over the raw
/// functions instead ([`RawCell`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct CellParts {
    pub lo: f64,
    pub hi: f64,
    pub eta: Cubic,
    pub v: Coefs,
    pub ar: Coefs,
    pub s1: Coefs,
}

/// r cubics stored by coefficient: `c[p][u]` is coefficient p of cubic u.
#[derive(Clone, Debug, Default)]
pub(crate) struct Coefs {
    pub c: [Vec<f64>; 4],
}

impl Coefs {
    /// r cubics (new ones zero).
    #[inline(always)]
    fn resize(&mut self, r: usize) {
        for c in &mut self.c {
            c.resize(r, 0.0);
        }
    }

    /// Cubic u.
    #[inline(always)]
    pub fn get(&self, u: usize) -> Cubic {
        [self.c[0][u], self.c[1][u], self.c[2][u], self.c[3][u]]
    }

    /// Set cubic u.
    #[inline(always)]
    fn set(&mut self, u: usize, p: Cubic) {
        for (c, v) in self.c.iter_mut().zip(p) {
            c[u] = v;
        }
    }
}

impl Bases {
    /// [`CellParts`] of the cell [lo, hi] of row rb at intercept a.
    #[inline(always)]
    fn cell_parts_with(&self, rb: &RowBases, a: f64, lo: f64, hi: f64, hint: &mut SegmentHint, out: &mut CellParts) {
        let theta = rb.theta;
        let (b, s_f, r, p_h) = (theta[1], self.s_f, self.r(), self.p_h());
        let p = rb.pieces(a, lo, hi, hint);
        let jet = self.jet(theta, a, &p, lo, hi);
        let bh: &[Cubic] = match (&self.score, p.score_seg) {
            (Some(basis), Some(seg)) => basis.segment(seg),
            _ => &[],
        };
        let bw: &[Cubic] = match (&self.link, p.link_seg) {
            (Some(basis), Some(seg)) => basis.segment(seg),
            _ => &[],
        };
        let sf = |q: Cubic| poly_scale(&q, s_f);
        let z = [0.0, 1.0, 0.0, 0.0];
        // Written in place (no iterator extends).
        for buf in [&mut out.v, &mut out.ar, &mut out.s1] {
            buf.resize(r);
        }
        (out.lo, out.hi, out.eta) = (lo, hi, jet.eta);
        let (v, ar, s1) = (&mut out.v, &mut out.ar, &mut out.s1);
        v.set(0, jet.a);
        v.set(1, sf(poly_add(&poly_add(&z, &p.h), &poly_times_z(&p.l1))));
        ar.set(0, jet.aa);
        ar.set(1, sf(poly_times_z(&p.l2)));
        s1.set(0, [0.0; 4]);
        s1.set(1, sf(poly_times_z(&poly_times_z(&p.l2))));
        for (u, q) in (2..2 + p_h).zip(bh) {
            v.set(u, sf(poly_scale(q, b)));
            ar.set(u, [0.0; 4]);
            s1.set(u, sf(*q));
        }
        for (u, q) in (2 + p_h..r).zip(bw) {
            let d = sf(poly_compose_affine(&poly_deriv(q), a, b));
            v.set(u, sf(poly_compose_affine(q, a, b)));
            ar.set(u, d);
            s1.set(u, poly_times_z(&d));
        }
    }
}

/// Columns of a cell's raw block ([`RawCell`]): d eta/da, d eta/db, 1 and
/// z, then up to four score and four link B-splines.
pub(crate) const RAW_COLUMNS: usize = 12;

/// One cell's cubics over the row's raw functions, for the fused
/// evaluation's sums (`fused`), all in x = z - center (the cell's
/// [`moment_center`]). Every d eta/d theta_u is a fixed combination of
/// them: the score warp's u = s_f b (Bh_j - alpha_j - gamma_j z), the
/// link's s_f (Bw_j(t) - alpha_j - gamma_j t) with t = a + b z, so the
/// cell's Q block and D sums are formed over 4 + 4 + 4 columns whatever
/// p_h and p_w, and the row's over theta once, at its end.
#[derive(Clone, Debug, Default)]
pub(crate) struct RawCell {
    pub lo: f64,
    pub hi: f64,
    pub center: f64,
    /// eta.
    pub eta: Cubic,
    /// `v[p][k]`: coefficient p of column k (zero columns past a block's
    /// width).
    pub v: [[f64; RAW_COLUMNS]; 4],
    /// d2 eta/da2, d2 eta/da db and the explicit d2 eta/db2.
    pub aa: Cubic,
    pub ab: Cubic,
    pub bb: Cubic,
    /// Bw_j'(t) for the link block's functions.
    pub w1: [Cubic; 4],
    /// The first function of the score and link blocks.
    pub score_first: usize,
    pub link_first: usize,
}

impl RowBases<'_> {
    /// The [`RawCell`] of [lo, hi] at intercept a (`hint` as for
    /// [`RowBases::cell_parts`]).
    #[inline(always)]
    pub(crate) fn raw_cell(&self, a: f64, lo: f64, hi: f64, hint: &mut SegmentHint, out: &mut RawCell) {
        let (b, s_f) = (self.theta[1], self.bases.s_f);
        let p = self.pieces(a, lo, hi, hint);
        let jet = self.bases.jet(self.theta, a, &p, lo, hi);
        let c = moment_center(lo, hi);
        let sf = |q: Cubic| poly_scale(&q, s_f);
        let z = [0.0, 1.0, 0.0, 0.0];
        (out.lo, out.hi, out.center, out.eta) = (lo, hi, c, jet.eta);
        out.aa = shift_cubic(&jet.aa, c);
        out.ab = shift_cubic(&sf(poly_times_z(&p.l2)), c);
        out.bb = shift_cubic(&sf(poly_times_z(&poly_times_z(&p.l2))), c);
        let mut cols = [[0.0; 4]; RAW_COLUMNS];
        cols[0] = shift_cubic(&jet.a, c);
        cols[1] = shift_cubic(&sf(poly_add(&poly_add(&z, &p.h), &poly_times_z(&p.l1))), c);
        cols[2] = [1.0, 0.0, 0.0, 0.0];
        cols[3] = [c, 1.0, 0.0, 0.0];
        out.score_first = 0;
        if let (Some(basis), Some(seg)) = (&self.bases.score, p.score_seg) {
            let block = basis.raw_block(seg);
            out.score_first = block.first;
            for (col, q) in cols[4..8].iter_mut().zip(&block.pieces) {
                *col = shift_cubic(q, c);
            }
        }
        out.link_first = 0;
        out.w1 = [[0.0; 4]; 4];
        if let (Some(basis), Some(seg)) = (&self.bases.link, p.link_seg) {
            let block = basis.raw_block(seg);
            out.link_first = block.first;
            // t = (a + b c) + b x: composed in the cell's frame at once.
            let t0 = a + b * c;
            for ((col, w1), q) in cols[8..].iter_mut().zip(&mut out.w1).zip(&block.pieces) {
                *col = poly_compose_affine(q, t0, b);
                *w1 = poly_compose_affine(&poly_deriv(q), t0, b);
            }
        }
        for (k, col) in cols.iter().enumerate() {
            for (p, v) in col.iter().enumerate() {
                out.v[p][k] = *v;
            }
        }
    }
}

/// A row's basis combinations: H = beta_h . Bh on every score segment and
/// L, L', L'' (in t) on every link segment. The cells at each trial
/// intercept then only pick and compose them (forming them again for every
/// cell of every trial was a tenth of a CPU evaluation).
pub(crate) struct RowBases<'a> {
    pub bases: &'a Bases,
    pub theta: &'a [f64],
    h: Cow<'a, [Cubic]>,
    l: Cow<'a, [[Cubic; 3]]>,
}

/// [`RowBases`]' combinations kept across rows: they depend on theta's
/// basis coefficients (beta_h, beta_w) alone, which every row of an
/// evaluation shares, so a block of rows forms them once.
#[derive(Default)]
pub(crate) struct Combinations {
    /// theta[2..] they were formed for (compared bitwise).
    coefs: Vec<f64>,
    h: Vec<Cubic>,
    l: Vec<[Cubic; 3]>,
}

impl Combinations {
    /// Row theta's bases, the combinations formed again only where theta's
    /// basis coefficients differ from the last row's.
    pub fn row<'a>(&'a mut self, bases: &'a Bases, theta: &'a [f64]) -> RowBases<'a> {
        let same = self.coefs.len() == theta.len() - 2
            && self
                .coefs
                .iter()
                .zip(&theta[2..])
                .all(|(x, y)| x.to_bits() == y.to_bits());
        if !same {
            (self.h, self.l) = combine(bases, theta);
            self.coefs.clear();
            self.coefs.extend_from_slice(&theta[2..]);
        }
        RowBases {
            bases,
            theta,
            h: Cow::Borrowed(&self.h),
            l: Cow::Borrowed(&self.l),
        }
    }
}

/// H on every score segment and (L, L', L'') on every link segment.
fn combine(bases: &Bases, theta: &[f64]) -> (Vec<Cubic>, Vec<[Cubic; 3]>) {
    let h = bases.score.as_ref().map_or(Vec::new(), |basis| {
        (0..basis.segments())
            .map(|s| basis.combine(s, bases.beta_h(theta)))
            .collect()
    });
    let l = bases.link.as_ref().map_or(Vec::new(), |basis| {
        (0..basis.segments())
            .map(|s| {
                let lt = basis.combine(s, bases.beta_w(theta));
                let l1t = poly_deriv(&lt);
                [lt, l1t, poly_deriv(&l1t)]
            })
            .collect()
    });
    (h, l)
}

impl<'a> RowBases<'a> {
    /// The combinations of row theta.
    pub fn new(bases: &'a Bases, theta: &'a [f64]) -> Self {
        let (h, l) = combine(bases, theta);
        Self {
            bases,
            theta,
            h: Cow::Owned(h),
            l: Cow::Owned(l),
        }
    }

    /// The polynomial pieces that hold on [lo, hi], picked at a point inside.
    #[inline(always)]
    fn pieces(&self, a: f64, lo: f64, hi: f64, hint: &mut SegmentHint) -> Pieces {
        let b = self.theta[1];
        let zm = representative(lo, hi);
        let zero = [0.0; 4];
        let mut p = Pieces {
            h: zero,
            l: zero,
            l1: zero,
            l2: zero,
            score_seg: None,
            link_seg: None,
        };
        if let Some(basis) = &self.bases.score {
            let seg = basis.segment_near(zm, hint.score);
            hint.score = Some(seg);
            p.h = self.h[seg];
            p.score_seg = Some(seg);
        }
        if let Some(basis) = &self.bases.link {
            let seg = basis.segment_near(a + b * zm, hint.link);
            hint.link = Some(seg);
            let [lt, l1t, l2t] = &self.l[seg];
            p.l = poly_compose_affine(lt, a, b);
            p.l1 = poly_compose_affine(l1t, a, b);
            p.l2 = poly_compose_affine(l2t, a, b);
            p.link_seg = Some(seg);
        }
        p
    }

    /// [`Bases::jets`] of this row at intercept a.
    pub fn jets(&self, a: f64) -> Vec<CellJet> {
        self.each_jet(a).collect()
    }

    /// [`RowBases::jets`] one at a time (nothing allocated).
    pub fn each_jet(&self, a: f64) -> impl Iterator<Item = CellJet> + '_ {
        self.each_jet_where(a, |_, _| true)
    }

    /// The jets of the cells [lo, hi] for which `keep(lo, hi)`, in
    /// increasing z (the others' cubics are not formed).
    pub fn each_jet_where<'s, K: Fn(f64, f64) -> bool>(&'s self, a: f64, keep: K) -> Jets<'s, 'a, K> {
        Jets {
            rb: self,
            a,
            edges: self.bases.edges(self.theta[1], a),
            hint: SegmentHint::default(),
            keep,
        }
    }

    /// [`Bases::cells`] of this row at intercept a.
    pub fn cells(&self, a: f64) -> Vec<Cell> {
        let bounds = self.bases.bounds(self.theta[1], a);
        bounds
            .into_iter()
            .map(|(lo, hi)| self.bases.cell_with(self, a, lo, hi))
            .collect()
    }
}

/// [`RowBases::each_jet_where`]'s iterator: a struct whose `next` is
/// inlined into the dispatched callers (`dispatch`), where the adapters'
/// closures (filter, map, enumerate) had stayed out of line, baseline code.
pub(crate) struct Jets<'s, 'a, K> {
    rb: &'s RowBases<'a>,
    a: f64,
    edges: CellEdges<'s>,
    hint: SegmentHint,
    keep: K,
}

impl<K: Fn(f64, f64) -> bool> Iterator for Jets<'_, '_, K> {
    type Item = CellJet;

    #[inline(always)]
    fn next(&mut self) -> Option<CellJet> {
        loop {
            let (lo, hi) = self.edges.next()?;
            if (self.keep)(lo, hi) {
                let (rb, a) = (self.rb, self.a);
                let p = rb.pieces(a, lo, hi, &mut self.hint);
                return Some(rb.bases.jet(rb.theta, a, &p, lo, hi));
            }
        }
    }
}

/// The polynomial pieces of one cell: H and L, L', L'' composed with
/// t = a + b z, and the basis segments they come from.
struct Pieces {
    h: Cubic,
    l: Cubic,
    l1: Cubic,
    l2: Cubic,
    score_seg: Option<usize>,
    link_seg: Option<usize>,
}

/// A cell's edges and the cubics the calibration integrates: eta, d eta/da
/// and d2 eta/da2 (the same values as the [`Cell`]'s).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CellJet {
    /// Left edge.
    pub lo: f64,
    /// Right edge.
    pub hi: f64,
    /// eta.
    pub eta: Cubic,
    /// d eta / da.
    pub a: Cubic,
    /// d2 eta / da2.
    pub aa: Cubic,
}

impl CellJet {
    /// The jet's cubics about `center` ([`shift_cubic`]), edges as they are.
    pub fn about(&self, center: f64) -> CellJet {
        CellJet {
            eta: shift_cubic(&self.eta, center),
            a: shift_cubic(&self.a, center),
            aa: shift_cubic(&self.aa, center),
            ..*self
        }
    }
}

/// p(center + x) as a cubic in x (the Taylor shift); p itself for a centre
/// of 0. The device forms it in the same operations (`shift_cubic` in
/// kernels/bms_stage1/quadrature.cuh).
pub fn shift_cubic(p: &Cubic, center: f64) -> Cubic {
    if center == 0.0 {
        return *p;
    }
    let s = 3.0 * center * p[3];
    [poly_eval(p, center), (s + 2.0 * p[2]) * center + p[1], s + p[2], p[3]]
}

/// The centre a cell's integrands evaluate its cubics about, over its part
/// [l, r] inside |z| <= Z_CLIP: the midpoint where eta's monomial terms
/// pass SHIFT_ABOVE at the far edge (see it), 0 (z as it is) otherwise.
pub fn local_center(eta: &Cubic, l: f64, r: f64) -> f64 {
    if abs_poly(eta, radius(l, r, 0.0)) > SHIFT_ABOVE {
        0.5 * (l + r)
    } else {
        0.0
    }
}

/// The observed-point inputs of a row at z_obs (after solving a): eta and
/// its derivatives there, evaluated from the bases directly.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observed {
    /// eta(z_obs).
    pub e: f64,
    /// d eta / da.
    pub chi: f64,
    /// d2 eta / da2.
    pub xi: f64,
    /// d eta / d theta_u, u = 0..r (rho_0 = 0).
    pub rho: Vec<f64>,
    /// d2 eta / da d theta_u (tau_0 = 0).
    pub tau: Vec<f64>,
    /// Explicit second partials d2 eta / d theta_u d theta_v, r x r row-major.
    pub r_uv: Vec<f64>,
}

/// Values, first and second derivatives of a basis at x (empty if
/// absent), in `out`'s three vectors.
fn basis_at<'o>(basis: &Option<CubicBasis>, x: f64, out: &'o mut [Vec<f64>; 3]) -> [&'o [f64]; 3] {
    let d = basis.as_ref().map_or(0, |b| b.dim());
    for v in out.iter_mut() {
        v.clear();
        v.resize(d, 0.0);
    }
    let [v, d1, d2] = out;
    if let Some(b) = basis {
        b.eval(x, v, d1, d2);
    }
    [v, d1, d2]
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

impl Bases {
    /// eta and its partial derivatives (a held fixed) at z for row theta.
    pub fn observed(&self, theta: &[f64], a: f64, z: f64) -> Observed {
        let mut out = Observed::default();
        self.observed_into(theta, a, z, &mut ObservedBases::default(), &mut out);
        out
    }

    /// [`Bases::observed`] into `out`, with the bases' values in `basis`
    /// (both reused across rows: a row allocated nine vectors here).
    pub(crate) fn observed_into(&self, theta: &[f64], a: f64, z: f64, basis: &mut ObservedBases, out: &mut Observed) {
        let (b, s_f, r, p_h) = (theta[1], self.s_f, self.r(), self.p_h());
        let [bh, _, _] = basis_at(&self.score, z, &mut basis.score);
        let [bw, bw1, bw2] = basis_at(&self.link, a + b * z, &mut basis.link);
        let (beta_h, beta_w) = (self.beta_h(theta), self.beta_w(theta));
        let h = dot(beta_h, bh);
        let (l, l1, l2) = (dot(beta_w, bw), dot(beta_w, bw1), dot(beta_w, bw2));
        let rho = &mut out.rho;
        rho.clear();
        rho.extend([0.0, s_f * (z + h + z * l1)]);
        rho.extend(bh.iter().map(|v| s_f * b * v));
        rho.extend(bw.iter().map(|v| s_f * v));
        let tau = &mut out.tau;
        tau.clear();
        tau.extend([0.0, s_f * z * l2]);
        tau.extend(bh.iter().map(|_| 0.0));
        tau.extend(bw1.iter().map(|v| s_f * v));
        let r_uv = &mut out.r_uv;
        r_uv.clear();
        r_uv.resize(r * r, 0.0);
        r_uv[r + 1] = s_f * z * z * l2;
        let cross = bh.iter().map(|v| s_f * v).chain(bw1.iter().map(|v| s_f * z * v));
        for (k, v) in cross.enumerate() {
            r_uv[r + 2 + k] = v;
            r_uv[(2 + k) * r + 1] = v;
        }
        debug_assert_eq!(rho.len(), 2 + p_h + bw.len());
        out.e = s_f * (a + b * z + b * h + l);
        out.chi = s_f * (1.0 + l1);
        out.xi = s_f * l2;
    }
}

/// The score and link bases' values and first two derivatives at a row's
/// observed point, reused across rows ([`Bases::observed_into`]).
#[derive(Default)]
pub(crate) struct ObservedBases {
    score: [Vec<f64>; 3],
    link: [Vec<f64>; 3],
}

/// A point inside the cell, to pick the polynomial pieces that hold there.
fn representative(lo: f64, hi: f64) -> f64 {
    match (lo.is_finite(), hi.is_finite()) {
        (true, true) => 0.5 * (lo + hi),
        (true, false) => lo + 1.0,
        (false, true) => hi - 1.0,
        (false, false) => 0.0,
    }
}

/// One cell of a row: its edges (lo may be -inf, hi +inf), the cubic
/// coefficients of eta and its derivatives, and its moments.
#[derive(Clone, Debug, PartialEq)]
pub struct Cell {
    /// Left edge.
    pub lo: f64,
    /// Right edge.
    pub hi: f64,
    /// eta (c0..c3).
    pub eta: Cubic,
    /// d eta / da.
    pub a: Cubic,
    /// d2 eta / da2.
    pub aa: Cubic,
    /// d2 eta / db2.
    pub sbb: Cubic,
    /// The per-coordinate cubics in one allocation (a cell is built at every
    /// evaluation; four vectors a cell were about a tenth of a CPU fit in
    /// the allocator): [`Cell::r`], [`Cell::ar`], [`Cell::sbh`] and
    /// [`Cell::sbw`] in turn.
    coef: Vec<Cubic>,
    /// r - 1, the length of `r` and `ar`.
    parts: usize,
    /// p_h, the length of `sbh`.
    p_h: usize,
    /// m_0..m_9, about `center`.
    pub moments: [f64; MOMENTS],
    /// The point the cubics are taken about: 0 (global z) as built,
    /// [`moment_center`] once [`Cell::fill_moments`] has run, which gives
    /// the moments of (z - center)^k, so that Stage 2's sums are the same
    /// integrals without the cancellation of global monomials.
    pub center: f64,
}

impl Cell {
    /// d eta / d theta_u for u = 1..r-1 (index u - 1).
    pub fn r(&self) -> &[Cubic] {
        &self.coef[..self.parts]
    }

    /// d2 eta / da d theta_u for u = 1..r-1 (index u - 1).
    pub fn ar(&self) -> &[Cubic] {
        &self.coef[self.parts..2 * self.parts]
    }

    /// `d2 eta / db d beta_h[j]`.
    pub fn sbh(&self) -> &[Cubic] {
        &self.coef[2 * self.parts..2 * self.parts + self.p_h]
    }

    /// `d2 eta / db d beta_w[l]`.
    pub fn sbw(&self) -> &[Cubic] {
        &self.coef[2 * self.parts + self.p_h..]
    }

    /// Compute the cell's moments about its [`moment_center`] and take
    /// every cubic about the same centre (see [`Cell::center`]).
    pub fn fill_moments(&mut self) {
        let c = moment_center(self.lo, self.hi);
        self.moments = moments(&self.eta, self.lo, self.hi);
        for p in [&mut self.eta, &mut self.a, &mut self.aa, &mut self.sbb]
            .into_iter()
            .chain(self.coef.iter_mut())
        {
            *p = shift_cubic(p, c);
        }
        self.center = c;
    }
}

/// The point a cell's moments and Stage 2's cubics are taken about
/// ([`moment_frame`]'s centre).
pub fn moment_center(lo: f64, hi: f64) -> f64 {
    moment_frame(lo, hi).0
}

/// Where a cell's moments are taken and on what scale: for a finite cell,
/// the midpoint c and half-width rho of its part within [near - 2, near +
/// 2], near its point nearest 0 (so the midpoint of an ordinary cell, and a
/// point near the weight's mass on a long one: mapped link knots of small
/// slopes make cells such as [3.5, 120]); (0, 0) for the tails.
///
/// Stage 2 sums products of the cells' polynomial coefficients and
/// moments, integrals of polynomials times the weight; in global monomials
/// of z those sums cancel on cells far from 0 (the link's cells at steep
/// slopes and extreme intercepts lie at z of 6-11: terms of z^9 against a
/// Hessian entry of order one, which lost up to 1e-6 of it, #42). About a
/// point inside the weight's mass every term is of the size of the result.
/// The tails keep 0: their mass sits at the finite edge, where the affine
/// closed form (the tails are affine) is stable in global z and not about
/// the edge, and they meet the accuracy rule as they are.
pub fn moment_frame(lo: f64, hi: f64) -> (f64, f64) {
    frame_of(reach(lo, hi))
}

/// The centre and half-width of a [`reach`] ((0, 0) for a tail's None).
fn frame_of(part: Option<(f64, f64)>) -> (f64, f64) {
    match part {
        Some((l, r)) => (0.5 * (l + r), 0.5 * (r - l)),
        None => (0.0, 0.0),
    }
}

/// A finite cell's part within CENTER_REACH of its point nearest 0 (None
/// for a tail).
fn reach(lo: f64, hi: f64) -> Option<(f64, f64)> {
    if !(lo.is_finite() && hi.is_finite()) {
        return None;
    }
    let near = if lo > 0.0 {
        lo
    } else if hi < 0.0 {
        hi
    } else {
        0.0
    };
    Some((lo.max(near - CENTER_REACH), hi.min(near + CENTER_REACH)))
}

/// m_k = integral_lo^hi (z - c)^k exp(-(z^2 + eta^2)/2) dz, k = 0..9, about
/// the cell's [`moment_center`] c: by the Taylor series of the weight on
/// the ordinary finite cells ([`series_moments`]), else the closed form and
/// recurrence on affine cells where its running error bound allows, else
/// adaptive Gauss-Kronrod.
#[inline(always)]
pub fn moments(eta: &Cubic, lo: f64, hi: f64) -> [f64; MOMENTS] {
    let part = reach(lo, hi);
    let (center, rho) = frame_of(part);
    // A finite cell that is its whole frame (not a long one) inside the
    // clip: by the series where it is accurate.
    let whole = part == Some((lo, hi));
    if whole && rho > 0.0 && lo.abs().max(hi.abs()) <= Z_CLIP {
        if let Some(m) = series_moments(&shift_cubic(eta, center), center, rho, MOMENT_TOL) {
            return m;
        }
    }
    if eta[2] == 0.0 && eta[3] == 0.0 {
        if let Some(m) = affine_moments(eta[0], eta[1], lo, hi, center) {
            return m;
        }
    }
    quadrature_moments(eta, lo, hi, center, rho)
}

/// The moments about `center` by adaptive Gauss-Legendre over the cell
/// clipped to |z| <= Z_CLIP. With rho > 0 (a finite cell), the rule
/// integrates ((z - center) / rho)^k E, with one tolerance relative to the
/// largest of them (see [`adaptive_bounded_nodes`]), and scales back by
/// rho^k; with rho = 0 (a tail), (z - center)^k E, each to its own
/// tolerance. eta is evaluated about `center`, or, for a tail, about its
/// [`local_center`].
pub fn quadrature_moments(eta: &Cubic, lo: f64, hi: f64, center: f64, rho: f64) -> [f64; MOMENTS] {
    let (l, r) = (lo.max(-Z_CLIP), hi.min(Z_CLIP));
    let shared = rho > 0.0;
    let at = if shared { center } else { local_center(eta, l, r) };
    let inv_rho = if shared { 1.0 / rho } else { 1.0 };
    let local = shift_cubic(eta, at);
    let f = crate::bms::numerics::nodes::Moments {
        eta: &local,
        center: at,
        power_center: center,
        inv_scale: inv_rho,
    };
    // |x^k exp(-(z^2 + eta^2)/2)| <= |x|_far^k exp(-z_near^2/2), x = (z - center) / rho.
    let bound = |g: f64, lo: f64, hi: f64| {
        let x = radius(lo, hi, center) * inv_rho;
        let mut out = [0.0; MOMENTS];
        let mut xk = g;
        for m in out.iter_mut() {
            *m = xk;
            xk *= x;
        }
        out
    };
    let mut m = adaptive_bounded_nodes(l, r, [MOMENT_TOL; MOMENTS], shared, &f, &bound);
    if shared {
        let mut rk = 1.0;
        for v in m.iter_mut() {
            *v *= rk;
            rk *= rho;
        }
    }
    m
}

/// Phi(v) - Phi(u) for u <= v without cancellation in either tail.
fn normal_mass(u: f64, v: f64) -> f64 {
    if u >= 0.0 {
        norm_sf(u) - norm_sf(v)
    } else {
        norm_cdf(v) - norm_cdf(u)
    }
}

/// The affine closed form (eta = alpha + beta z) about `center`, with x =
/// z - center: m_0 from the normal distribution function, then, as
/// d/dz exp(-g) = -(d x + s) exp(-g) with d = 1 + beta^2 and
/// s = alpha beta + d center, `m_{n+1} = (n m_{n-1} - s m_n - B_n) / d`,
/// B_n the edge terms of x^n exp(-g). Returns None when the recurrence's running error
/// bound exceeds RECURRENCE_TOL relative to some moment (it cancels when
/// the cell lies far from the weight's centre mu, or is short).
pub fn affine_moments(alpha: f64, beta: f64, lo: f64, hi: f64, center: f64) -> Option<[f64; MOMENTS]> {
    let d = 1.0 + beta * beta;
    let mu = -alpha * beta / d;
    let sd = d.sqrt();
    let g = |z: f64| 0.5 * (z * z + (alpha + beta * z).powi(2));
    let scale = (2.0 * std::f64::consts::PI / d).sqrt() * (-0.5 * alpha * alpha / d).exp();
    let mut m = [0.0; MOMENTS];
    m[0] = scale * normal_mass(sd * (lo - mu), sd * (hi - mu));
    // Boundary terms B_n = x_hi^n e^{-g(hi)} - x_lo^n e^{-g(lo)} (0 at infinite ends).
    let weight = |z: f64| if z.is_finite() { (-g(z)).exp() } else { 0.0 };
    let (w_lo, w_hi) = (weight(lo), weight(hi));
    let edge = |z: f64, w: f64, n: i32| if w != 0.0 { (z - center).powi(n) * w } else { 0.0 };
    let eps = f64::EPSILON;
    let s = alpha * beta + d * center;
    let mut err = [0.0; MOMENTS];
    err[0] = 8.0 * eps * m[0].abs();
    for n in 0..MOMENTS - 1 {
        let b_n = edge(hi, w_hi, n as i32) - edge(lo, w_lo, n as i32);
        let (prev, prev_err) = if n > 0 { (m[n - 1], err[n - 1]) } else { (0.0, 0.0) };
        let terms = n as f64 * prev.abs() + (s * m[n]).abs() + b_n.abs();
        m[n + 1] = (n as f64 * prev - s * m[n] - b_n) / d;
        err[n + 1] = (n as f64 * prev_err + s.abs() * err[n] + 4.0 * eps * terms) / d;
    }
    let ok = m
        .iter()
        .zip(&err)
        .all(|(v, e)| *e <= RECURRENCE_TOL * v.abs() || *e == 0.0);
    (ok && m.iter().all(|v| v.is_finite())).then_some(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The merged breakpoints equal the collected, sorted (by `total_cmp`)
    /// and deduplicated list, bit for bit: slopes of both signs, slopes so
    /// small that mapped knots overflow, intercepts that put a mapped knot
    /// on a score knot or on zero (-0.0 and 0.0).
    #[test]
    fn merged_breakpoints_equal_the_sorted_list() {
        let bases = Bases::new(
            Some(CubicBasis::uniform(-3.5, 3.5, 6).unwrap()),
            Some(CubicBasis::uniform(-4.0, 4.0, 5).unwrap()),
            0.9,
        )
        .unwrap();
        let sorted = |b: f64, a: f64| {
            let mut z: Vec<f64> = bases.score.iter().flat_map(|s| s.knots().to_vec()).collect();
            if b != 0.0 {
                z.extend(bases.link.iter().flat_map(|l| l.knots().iter().map(|t| (t - a) / b)));
            }
            z.retain(|v| v.is_finite());
            z.sort_by(f64::total_cmp);
            z.dedup();
            z
        };
        let link_knot = bases.link.as_ref().unwrap().knots()[2];
        let score_knot = bases.score.as_ref().unwrap().knots()[3];
        let mut rng = crate::rng::Rng::new(5);
        let mut cases = vec![
            (0.0, 0.3),
            (1e-310, 0.1),
            (-1e-310, 0.1),
            (1.0, link_knot),
            (-1.0, link_knot),
        ];
        cases.push((1.0, link_knot - score_knot));
        cases.push((-2.0, link_knot + 2.0 * score_knot));
        cases.extend((0..200).map(|_| (rng.normal() * 2.0, rng.normal() * 3.0)));
        for (b, a) in cases {
            let bits = |v: Vec<f64>| v.into_iter().map(f64::to_bits).collect::<Vec<_>>();
            assert_eq!(bits(bases.breakpoints(b, a)), bits(sorted(b, a)), "b = {b}, a = {a}");
        }
    }

    /// Published Kronrod nodes and weights, kept at their printed precision.
    #[allow(clippy::excessive_precision)]
    /// Adaptive Gauss-Kronrod (G7-K15) reference, independent of the
    /// Gauss-Legendre integrator under test. `tol` bounds the G7-K15 gap,
    /// the error of the Gauss estimate; the Kronrod value returned is much
    /// more accurate than that.
    fn gk15(f: &dyn Fn(f64) -> f64, a: f64, b: f64, tol: f64, depth: u32) -> f64 {
        const XK: [f64; 8] = [
            0.991455371120812639206854697526329,
            0.949107912342758524526189684047851,
            0.864864423359769072789712788640926,
            0.741531185599394439863864773280788,
            0.586087235467691130294144845693013,
            0.405845151377397166906606412076961,
            0.207784955007898467600689403773245,
            0.000000000000000000000000000000000,
        ];
        const WK: [f64; 8] = [
            0.022935322010529224963732008058970,
            0.063092092629978553290700663189204,
            0.104790010322250183839876322541518,
            0.140653259715525918745189590510238,
            0.169004726639267902826583426598550,
            0.190350578064785409913256402421014,
            0.204432940075298892414161999234649,
            0.209482141084727828012999174891714,
        ];
        const WG: [f64; 4] = [
            0.129484966168869693270611432679082,
            0.279705391489276667901467771423780,
            0.381830050505118944950369775488975,
            0.417959183673469387755102040816327,
        ];
        let (c, h) = (0.5 * (a + b), 0.5 * (b - a));
        let (mut k, mut g, mut abs) = (WK[7] * f(c), WG[3] * f(c), WK[7] * f(c).abs());
        for i in 0..7 {
            let (fl, fr) = (f(c - h * XK[i]), f(c + h * XK[i]));
            k += WK[i] * (fl + fr);
            abs += WK[i] * (fl.abs() + fr.abs());
            if i % 2 == 1 {
                g += WG[i / 2] * (fl + fr);
            }
        }
        let (k, g, abs) = (k * h, g * h, abs * h);
        if (k - g).abs() <= tol * abs + 1e-300 || depth > 40 {
            return k;
        }
        gk15(f, a, c, tol, depth + 1) + gk15(f, c, b, tol, depth + 1)
    }

    fn reference(eta: &Cubic, lo: f64, hi: f64, c: f64, k: i32) -> f64 {
        let f = |z: f64| (z - c).powi(k) * (-0.5 * (z * z + poly_eval(eta, z).powi(2))).exp();
        gk15(&f, lo.max(-Z_CLIP), hi.min(Z_CLIP), 1e-13, 0)
    }

    /// Relative error of each moment about c against the adaptive Kronrod
    /// reference, scaled by the integral of |z - c|^k times the weight.
    fn check(eta: Cubic, lo: f64, hi: f64, c: f64, got: [f64; MOMENTS]) {
        for (k, g) in got.iter().enumerate() {
            let want = reference(&eta, lo, hi, c, k as i32);
            let scale = gk15(
                &|z: f64| (z - c).abs().powi(k as i32) * (-0.5 * (z * z + poly_eval(&eta, z).powi(2))).exp(),
                lo.max(-Z_CLIP),
                hi.min(Z_CLIP),
                1e-13,
                0,
            );
            assert!(
                (g - want).abs() <= 1e-12 * scale,
                "eta {eta:?} on [{lo}, {hi}] about {c}: m_{k}: {g:e} vs {want:e}"
            );
        }
    }

    /// Each cell's moments about its moment_center, and by both routes
    /// (where the affine form applies) about 0 and a few other centres,
    /// each tolerance (per moment, or shared on a scale rho).
    fn check_about_centres(eta: Cubic, lo: f64, hi: f64) {
        check(eta, lo, hi, moment_center(lo, hi), moments(&eta, lo, hi));
        for c in [0.0, 0.7, -2.3] {
            for rho in [0.0, 0.4, 1.5] {
                check(eta, lo, hi, c, quadrature_moments(&eta, lo, hi, c, rho));
            }
            if eta[2] == 0.0 && eta[3] == 0.0 {
                if let Some(m) = affine_moments(eta[0], eta[1], lo, hi, c) {
                    check(eta, lo, hi, c, m);
                }
            }
        }
    }

    #[test]
    fn affine_cells_match_adaptive_reference() {
        let cases = [
            ([0.3, 0.8, 0.0, 0.0], -1.0, 0.5),
            ([-1.2, 2.5, 0.0, 0.0], 0.2, 1.7),
            ([0.1, -0.4, 0.0, 0.0], f64::NEG_INFINITY, -2.5),
            ([0.6, 1.1, 0.0, 0.0], 3.1, f64::INFINITY),
            ([2.0, -3.0, 0.0, 0.0], f64::NEG_INFINITY, f64::INFINITY),
            ([8.0, 4.0, 0.0, 0.0], -1.0, 1.0), // |mu| large: falls back
            ([-6.0, 0.5, 0.0, 0.0], 4.0, f64::INFINITY),
            ([-20.0, 2.5, 0.0, 0.0], 6.5, 9.0), // a link cell at a steep slope
        ];
        for (eta, lo, hi) in cases {
            check_about_centres(eta, lo, hi);
        }
        // The closed form itself is taken on the easy cells, about 0 and
        // about a centre.
        assert!(affine_moments(-0.7, 1.9, -3.0, 4.0, 0.0).is_some());
        assert!(affine_moments(-0.7, 1.9, -3.0, 4.0, 0.5).is_some());
        assert!(affine_moments(0.6, 1.1, 3.1, f64::INFINITY, 0.0).is_some());
    }

    #[test]
    fn non_affine_cells_match_adaptive_reference() {
        let cases = [
            ([0.2, 0.9, -0.3, 0.15], -0.7, 0.4),
            ([-0.5, 1.4, 0.6, -0.2], 1.0, 2.6),
            ([1.0, 0.3, 0.05, 0.01], 2.0, 180.0),
            ([0.0, 2.0, 1.5, 0.8], -4.0, -2.0),
            ([0.4, -1.0, 0.2, 0.03], f64::NEG_INFINITY, -3.0),
            ([-22.0, 2.6, 0.04, -0.01], 7.0, 8.5),
        ];
        for (eta, lo, hi) in cases {
            check_about_centres(eta, lo, hi);
        }
    }

    #[test]
    fn recurrence_and_quadrature_agree_where_both_apply() {
        let cases = [
            (-0.7, 1.9, -3.0, 4.0, 0.0),
            (0.4, 1.2, 2.5, f64::INFINITY, 0.0),
            (0.4, -0.6, f64::NEG_INFINITY, -2.0, 0.0),
            (-0.7, 1.9, -3.0, 4.0, 0.5),
            (0.3, -1.1, -1.0, 2.0, 0.5),
        ];
        for (alpha, beta, lo, hi, c) in cases {
            let closed = affine_moments(alpha, beta, lo, hi, c).unwrap();
            let quad = quadrature_moments(&[alpha, beta, 0.0, 0.0], lo, hi, c, 0.0);
            for k in 0..MOMENTS {
                assert!(
                    (closed[k] - quad[k]).abs() < 1e-13 * quad[0].abs().max(quad[k].abs()),
                    "k = {k}, about {c}"
                );
            }
        }
    }

    /// Stage 2's sums do not depend on the centre: a cell filled about its
    /// midpoint integrates each of its cubics against the weight as the
    /// same cell about 0 does (D(p) = sum_k p_k m_k), for a cell near 0.
    #[test]
    fn centred_cells_keep_their_integrals() {
        let bases = Bases::new(
            Some(CubicBasis::uniform(-3.0, 3.0, 3).unwrap()),
            Some(CubicBasis::uniform(-4.0, 4.0, 4).unwrap()),
            0.8,
        )
        .unwrap();
        let theta = [0.2, 1.3, 0.3, -0.2, 0.1, 0.15, -0.1, 0.05, 0.2];
        let a = 0.35;
        let dot = |p: &Cubic, m: &[f64; MOMENTS]| (0..4).map(|k| p[k] * m[k]).sum::<f64>();
        for global in bases.cells(&theta, a) {
            let mut centred = global.clone();
            centred.fill_moments();
            assert_eq!(centred.center, moment_center(global.lo, global.hi));
            let m0 = quadrature_moments(&global.eta, global.lo, global.hi, 0.0, 0.0);
            let pairs = [
                (&global.eta, &centred.eta),
                (&global.a, &centred.a),
                (&global.sbb, &centred.sbb),
            ];
            let more = global.r().iter().zip(centred.r());
            for (g, c) in pairs.into_iter().chain(more) {
                let (want, got) = (dot(g, &m0), dot(c, &centred.moments));
                let size = (0..4).map(|k| (g[k] * m0[k]).abs()).sum::<f64>();
                assert!(
                    (want - got).abs() <= 1e-13 * size.max(1e-300),
                    "cell [{}, {}]",
                    global.lo,
                    global.hi
                );
            }
        }
    }

    /// The cell polynomials (Stage 1) and the pointwise jets (observed
    /// point) are two independent routes to the doc's table: they must agree
    /// everywhere, for b > 0, b < 0 and b = 0.
    #[test]
    fn cell_coefficients_agree_with_pointwise_jets() {
        use crate::bms::model::cubic_basis::CubicBasis;
        let bases = Bases::new(
            Some(CubicBasis::uniform(-3.0, 3.0, 3).unwrap()),
            Some(CubicBasis::uniform(-4.0, 4.0, 4).unwrap()),
            0.8,
        )
        .unwrap();
        let r = bases.r();
        for b in [1.3, -0.7, 0.0] {
            let theta = [0.2, b, 0.3, -0.2, 0.1, 0.15, -0.1, 0.05, 0.2];
            let a = 0.35;
            let cells = bases.cells(&theta, a);
            // The calibration's light view holds the same cells.
            let jets = bases.jets(&theta, a);
            assert_eq!(jets.len(), cells.len());
            for (j, c) in jets.iter().zip(&cells) {
                assert_eq!((j.lo, j.hi, j.eta, j.a, j.aa), (c.lo, c.hi, c.eta, c.a, c.aa));
            }
            // Edges strictly increase and the cells tile the line.
            assert!(cells.windows(2).all(|w| w[0].hi == w[1].lo && w[0].lo < w[0].hi));
            assert_eq!(
                (cells[0].lo, cells[cells.len() - 1].hi),
                (f64::NEG_INFINITY, f64::INFINITY)
            );
            let expected_edges = 7 + if b == 0.0 { 0 } else { 8 };
            assert_eq!(cells.len(), expected_edges + 1, "b = {b}");
            for c in &cells {
                for z in [representative(c.lo, c.hi), representative(c.lo, c.hi) + 0.01] {
                    if z <= c.lo || z >= c.hi {
                        continue;
                    }
                    let o = bases.observed(&theta, a, z);
                    let ev = |p: &Cubic| poly_eval(p, z);
                    let close = |x: f64, y: f64| (x - y).abs() < 1e-12 * (1.0 + y.abs());
                    assert!(close(ev(&c.eta), o.e) && close(ev(&c.a), o.chi) && close(ev(&c.aa), o.xi));
                    for u in 1..r {
                        assert!(close(ev(&c.r()[u - 1]), o.rho[u]), "rho[{u}] at z = {z}, b = {b}");
                        assert!(close(ev(&c.ar()[u - 1]), o.tau[u]), "tau[{u}] at z = {z}, b = {b}");
                    }
                    assert!(close(ev(&c.sbb), o.r_uv[r + 1]));
                    for (j, p) in c.sbh().iter().chain(c.sbw()).enumerate() {
                        assert!(close(ev(p), o.r_uv[r + 2 + j]), "r_uv[1, {}]", 2 + j);
                    }
                }
            }
        }
    }
}
