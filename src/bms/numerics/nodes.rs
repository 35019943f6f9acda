//! The hot integrands at a panel's nodes at once: the calibration's three
//! (Phi(+-eta) phi(z), A E and (AA - A^2 eta) E) and the ten moments
//! z^k E, with E = exp(-(z^2 + eta^2)/2). Each is a loop over the nodes
//! without a branch or a library call (`probit::exp_branchless`, the
//! branch-free erfcx), which the compiler vectorises.
//!
//! Each evaluates its cubics at z - center (a finite cell's midpoint, or
//! `cells::local_center` for a tail), while phi(z) and E take z itself and
//! the moments' powers z - power_center (`cells::moment_center`).
//!
//! They are inlined into the quadrature's panel rules, which run with AVX-512
//! or AVX2 where the CPU has them (`quadrature::apply_rule_nodes`).

use crate::bms::model::cells::{CellJet, MOMENTS};
use crate::bms::model::cubic_basis::{poly_eval, Cubic};
use crate::bms::numerics::probit::{cdf_pdf_and_gauss_in, exp_branchless};
use crate::bms::numerics::quadrature::{NodeIntegrand, KRONROD_LANES};

/// The calibration's three integrands on a cell, Phi(-eta) where `upper`,
/// with the cell's cubics in z - center.
pub(crate) struct Slopes<'a> {
    pub cell: &'a CellJet,
    pub center: f64,
    pub upper: bool,
}

impl<const M: usize> NodeIntegrand<M, 3> for Slopes<'_> {
    #[inline(always)]
    fn eval(&self, z: &[f64; M], out: &mut [[f64; M]; 3]) {
        slopes(self.cell, self.center, self.upper, z, out)
    }
}

/// The ten moments in x = (z - power_center) inv_scale of a cell whose eta
/// is the cubic held, in z - center.
pub(crate) struct Moments<'a> {
    pub eta: &'a Cubic,
    pub center: f64,
    pub power_center: f64,
    pub inv_scale: f64,
}

impl NodeIntegrand<KRONROD_LANES, MOMENTS> for Moments<'_> {
    #[inline(always)]
    fn eval(&self, z: &[f64; KRONROD_LANES], out: &mut [[f64; KRONROD_LANES]; MOMENTS]) {
        moments(self.eta, self.center, self.power_center, self.inv_scale, z, out)
    }
}

/// The calibration's integrands at M nodes of a cell, into `out[0..3][i]`.
/// eta first: where no node's |eta| / sqrt 2 passes 4 (most panels), the
/// erfcx's asymptotic form is left out for the whole panel (a uniform
/// branch, so the loop still vectorises), with the same bits.
#[inline(always)]
pub(crate) fn slopes<const M: usize>(c: &CellJet, center: f64, upper: bool, z: &[f64; M], out: &mut [[f64; M]; 3]) {
    let mut e = [0.0; M];
    for i in 0..M {
        e[i] = poly_eval(&c.eta, z[i] - center);
    }
    if all_near(&e) {
        slopes_from::<M, false>(c, center, upper, z, &e, out)
    } else {
        slopes_from::<M, true>(c, center, upper, z, &e, out)
    }
}

#[inline(always)]
fn slopes_from<const M: usize, const FAR: bool>(
    c: &CellJet,
    center: f64,
    upper: bool,
    z: &[f64; M],
    e: &[f64; M],
    out: &mut [[f64; M]; 3],
) {
    for i in 0..M {
        let x = z[i] - center;
        let (d1, d2) = (poly_eval(&c.a, x), poly_eval(&c.aa, x));
        [out[0][i], out[1][i], out[2][i]] = slope_values::<FAR>(e[i], d1, d2, z[i], upper);
    }
}

/// Whether no eta's |eta| / sqrt 2 passes 4, so that the erfcx's
/// asymptotic form can be left out (FAR false) for all of them.
#[inline(always)]
pub(crate) fn all_near(e: &[f64]) -> bool {
    e.iter().all(|e| e.abs() * std::f64::consts::FRAC_1_SQRT_2 <= 4.0)
}

/// The calibration's three integrands at one node z, from eta, d eta/da
/// and d2 eta/da2 there: Phi(+-eta) phi(z), A E and (AA - A^2 eta) E.
#[inline(always)]
pub(crate) fn slope_values<const FAR: bool>(e: f64, d1: f64, d2: f64, z: f64, upper: bool) -> [f64; 3] {
    let (phi, w) = cdf_pdf_and_gauss_in::<FAR>(if upper { -e } else { e }, z);
    [phi, d1 * w, (d2 - d1 * d1 * e) * w]
}

/// ((z - pc) s)^k exp(-(z^2 + eta^2)/2), k < MOMENTS, at M nodes, into
/// `out[k][i]`, eta in z - center.
#[inline(always)]
pub(crate) fn moments<const M: usize>(
    eta: &Cubic,
    center: f64,
    pc: f64,
    s: f64,
    z: &[f64; M],
    out: &mut [[f64; M]; MOMENTS],
) {
    for i in 0..M {
        let e = poly_eval(eta, z[i] - center);
        let mut xk = exp_branchless(-0.5 * (z[i] * z[i] + e * e));
        let x = (z[i] - pc) * s;
        for m in out.iter_mut() {
            m[i] = xk;
            xk *= x;
        }
    }
}
