//! The hot integrands at a panel's nodes at once: the calibration's three
//! (Phi(+-eta) phi(z), A E and (AA - A^2 eta) E) and the ten moments
//! z^k E, with E = exp(-(z^2 + eta^2)/2). Each is a loop over the nodes
//! without a branch or a library call (`probit::exp_branchless`, the
//! branch-free erfcx), which the compiler vectorises.
//!
//! On x86-64 the same loops are compiled a second time with AVX2 enabled
//! and picked at run time where the CPU has it (the crate is built for the
//! baseline x86-64, whose vectors hold two doubles). Rust never contracts a
//! product and a sum into an FMA, and every operation here is elementwise,
//! so both versions give the same bits (a test checks).

use super::basis::{poly_eval, Cubic};
use super::cells::{CellJet, MOMENTS};
use super::probit::{cdf_pdf_and_gauss, exp_branchless};

/// Whether this CPU runs the AVX2 versions (checked once, then cached by
/// the standard library).
#[cfg(target_arch = "x86_64")]
fn avx2() -> bool {
    std::is_x86_feature_detected!("avx2")
}

/// The calibration's integrands at M nodes of a cell, into `out[0..3][i]`.
pub(crate) fn slopes<const M: usize>(c: &CellJet, upper: bool, z: &[f64; M], out: &mut [[f64; M]; 3]) {
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { slopes_avx2(c, upper, z, out) };
    }
    slopes_body(c, upper, z, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn slopes_avx2<const M: usize>(c: &CellJet, upper: bool, z: &[f64; M], out: &mut [[f64; M]; 3]) {
    slopes_body(c, upper, z, out)
}

#[inline(always)]
fn slopes_body<const M: usize>(c: &CellJet, upper: bool, z: &[f64; M], out: &mut [[f64; M]; 3]) {
    for i in 0..M {
        let e = poly_eval(&c.eta, z[i]);
        let (d1, d2) = (poly_eval(&c.a, z[i]), poly_eval(&c.aa, z[i]));
        let (phi, w) = cdf_pdf_and_gauss(if upper { -e } else { e }, z[i]);
        out[0][i] = phi;
        out[1][i] = d1 * w;
        out[2][i] = (d2 - d1 * d1 * e) * w;
    }
}

/// z^k exp(-(z^2 + eta^2)/2), k < MOMENTS, at 21 nodes, into `out[k][i]`.
pub(crate) fn moments(eta: &Cubic, z: &[f64; 21], out: &mut [[f64; 21]; MOMENTS]) {
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { moments_avx2(eta, z, out) };
    }
    moments_body(eta, z, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn moments_avx2(eta: &Cubic, z: &[f64; 21], out: &mut [[f64; 21]; MOMENTS]) {
    moments_body(eta, z, out)
}

#[inline(always)]
fn moments_body(eta: &Cubic, z: &[f64; 21], out: &mut [[f64; 21]; MOMENTS]) {
    for i in 0..21 {
        let e = poly_eval(eta, z[i]);
        let mut zk = exp_branchless(-0.5 * (z[i] * z[i] + e * e));
        for m in out.iter_mut() {
            m[i] = zk;
            zk *= z[i];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both compilations of each loop give the same bits, across the tails
    /// and the erfcx switch points.
    #[test]
    fn vector_and_baseline_loops_agree_bitwise() {
        let mut rng = crate::rng::Rng::new(7);
        for _ in 0..200 {
            let mut cubic = || -> Cubic { std::array::from_fn(|k| rng.normal() * [3.0, 2.0, 0.5, 0.1][k]) };
            let c = CellJet {
                lo: -1.0,
                hi: 1.0,
                eta: cubic(),
                a: cubic(),
                aa: cubic(),
            };
            let z: [f64; 21] = std::array::from_fn(|i| -12.0 + 1.2 * i as f64 + 0.01 * i as f64 * i as f64);
            for upper in [false, true] {
                let (mut got, mut want) = ([[0.0; 21]; 3], [[0.0; 21]; 3]);
                slopes(&c, upper, &z, &mut got);
                slopes_body(&c, upper, &z, &mut want);
                assert_eq!(bits(&got), bits(&want));
            }
            let (mut got, mut want) = ([[0.0; 21]; MOMENTS], [[0.0; 21]; MOMENTS]);
            moments(&c.eta, &z, &mut got);
            moments_body(&c.eta, &z, &mut want);
            assert_eq!(bits(&got), bits(&want));
        }
    }

    fn bits<const M: usize>(v: &[[f64; M]]) -> Vec<u64> {
        v.iter().flatten().map(|x| x.to_bits()).collect()
    }
}
