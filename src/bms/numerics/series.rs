//! A finite cell's moments by the Taylor series of its weight, without
//! quadrature: one exp and a few hundred multiply-adds a cell where the
//! adaptive rule took one or two 21-node panels (21 exps and 21 cubics
//! each).
//!
//! On the cell [c - rho, c + rho], with z = c + rho u and eta's cubic taken
//! about c, the weight is `E = exp(P(u))` with
//! `P(u) = -((c + rho u)^2 + eta(c + rho u)^2) / 2`, a polynomial of degree
//! 6. With `exp(P(u) - P(0)) = sum_j f_j u^j` (f_0 = 1 and
//! `(j + 1) f_{j+1} = sum_{i=1..6} i p_i f_{j+1-i}`, from F' = P' F), the
//! moments about c are
//!
//! ```text
//! m_k = e^{P(0)} rho^{k+1} sum_j f_j w_{k+j},   w_n = integral_{-1}^{1} u^n du
//! ```
//!
//! (w_n = 2 / (n + 1) for even n, 0 for odd). The same recurrence with
//! |p_i| gives the coefficients g_j >= |f_j| of exp(sum |p_i| u^i): the
//! series stops where the last six g_j are below 1e-17 of their sum G, and
//! is taken only where its rounding (at most a few eps per term, so
//! 4 J eps G over J terms) is within the moments' tolerance of m_0: where
//! the weight varies by more than about e^25 across the cell, or the
//! series needs more than MAX_TERMS terms, the caller integrates instead.
//! The device runs the same series (series_moments in
//! kernels/bms_stage1/moments.cuh), with 1/(j + 1) applied to the whole sum
//! where here it is folded into the newest term's coefficient (shorter
//! dependence from one term to the next): the two round apart by an ulp or
//! so a term.

use crate::bms::model::cells::MOMENTS;
use crate::bms::model::cubic_basis::Cubic;

/// Terms the series may take before the cell goes to quadrature.
pub const MAX_TERMS: usize = 64;

/// A term of g below this fraction of G (six in a row) ends the series.
const TAIL: f64 = 1e-17;

/// `w_n = integral_{-1}^{1} u^n du` for n < MAX_TERMS + MOMENTS: 2 / (n + 1)
/// for even n, 0 for odd. The device holds the same literals (SERIES_W in
/// kernels/bms_stage1/moments.cuh; a test compares them bitwise).
pub const POWER_INTEGRALS: [f64; MAX_TERMS + MOMENTS] = {
    let mut w = [0.0; MAX_TERMS + MOMENTS];
    let mut n = 0;
    while n < w.len() {
        if n % 2 == 0 {
            w[n] = 2.0 / (n as f64 + 1.0);
        }
        n += 1;
    }
    w
};

/// 1 / n for n <= MAX_TERMS (entry 0 unused): a conversion and a division
/// a term were a third of the series' time. The device holds the same
/// literals (SERIES_INV in kernels/bms_stage1/moments.cuh; a test compares
/// them bitwise).
const INVERSES: [f64; MAX_TERMS + 1] = {
    let mut v = [0.0; MAX_TERMS + 1];
    let mut n = 1;
    while n <= MAX_TERMS {
        v[n] = 1.0 / n as f64;
        n += 1;
    }
    v
};

/// The moments about c of a cell [c - rho, c + rho] whose eta, as a cubic
/// in z - c, is `eta` (see the module docs), or None where the series is
/// not accurate to `tol` of m_0 (each moment's error then within about
/// tol rho^k m_0, the quadrature's shared tolerance).
#[inline(always)]
pub fn series_moments(eta: &Cubic, c: f64, rho: f64, tol: f64) -> Option<[f64; MOMENTS]> {
    let p = weight_exponent(eta, c, rho);
    // i p_i and |i p_i|, i = 1..6.
    let ip: [f64; 6] = std::array::from_fn(|i| (i + 1) as f64 * p[i + 1]);
    // Each pair is (f's, g's): i p_i and |i p_i|, i = 1..6, and the last six
    // f_j and g_j, newest first (zeros before f_0). As pairs, the two
    // recurrences share each vector operation without shuffles.
    let c: [[f64; 2]; 6] = std::array::from_fn(|i| [ip[i], ip[i].abs()]);
    let mut fg = [[0.0; 2]; 6];
    fg[0] = [1.0, 1.0];
    let mut big = 1.0;
    // The f_j, summed into the moments once the series stops.
    let mut fs = [0.0; MAX_TERMS];
    let mut terms = 0;
    for j in 0..MAX_TERMS {
        fs[j] = fg[0][0];
        terms = j + 1;
        if j >= 5 && window_max(&fg) <= TAIL * big {
            break;
        }
        // 1 / (j + 1) folded in and f_j's term last: only a multiply and an
        // add wait on f_j.
        let inv = INVERSES[j + 1];
        let rest: [f64; 2] = std::array::from_fn(|l| {
            ((((c[5][l] * fg[5][l] + c[4][l] * fg[4][l]) + c[3][l] * fg[3][l]) + c[2][l] * fg[2][l])
                + c[1][l] * fg[1][l])
                * inv
        });
        let next: [f64; 2] = std::array::from_fn(|l| (c[0][l] * inv) * fg[0][l] + rest[l]);
        fg = [next, fg[0], fg[1], fg[2], fg[3], fg[4]];
        big += next[1];
    }
    // S_k = sum_j f_j w_{k+j}, j ascending, every k at once (w_{k+j} is 0
    // for odd k + j: those terms add zeros).
    let mut sums = [0.0; MOMENTS];
    for (j, fj) in fs[..terms].iter().enumerate() {
        let w: &[f64; MOMENTS] = POWER_INTEGRALS[j..j + MOMENTS].try_into().expect("MOMENTS weights");
        sums = std::array::from_fn(|k| sums[k] + fj * w[k]);
    }
    let converged = terms < MAX_TERMS || window_max(&fg) <= TAIL * big;
    let rounding = 4.0 * terms as f64 * f64::EPSILON * big;
    if !(converged && big.is_finite() && sums[0] > 0.0 && rounding <= tol * sums[0]) {
        return None;
    }
    let mut scale = p[0].exp() * rho;
    let mut m = [0.0; MOMENTS];
    for (m, s) in m.iter_mut().zip(&sums) {
        *m = scale * s;
        scale *= rho;
    }
    Some(m)
}

/// The largest of the window's six g_j (a NaN among them is passed over:
/// it makes `big` NaN, which the caller rejects).
#[inline(always)]
fn window_max(fg: &[[f64; 2]; 6]) -> f64 {
    let m = |x: f64, y: f64| if x >= y { x } else { y };
    m(m(m(fg[0][1], fg[1][1]), m(fg[2][1], fg[3][1])), m(fg[4][1], fg[5][1]))
}

/// P(u) = -((c + rho u)^2 + eta(c + rho u)^2) / 2 as coefficients p_0..p_6,
/// eta a cubic in z - c.
#[inline(always)]
fn weight_exponent(eta: &Cubic, c: f64, rho: f64) -> [f64; 7] {
    let h = [eta[0], eta[1] * rho, eta[2] * (rho * rho), eta[3] * (rho * rho * rho)];
    let mut p = [0.0; 7];
    for (i, hi) in h.iter().enumerate() {
        for (j, hj) in h.iter().enumerate() {
            p[i + j] += hi * hj;
        }
    }
    p[0] += c * c;
    p[1] += 2.0 * c * rho;
    p[2] += rho * rho;
    p.map(|v| -0.5 * v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bms::model::cells::shift_cubic;
    use crate::bms::numerics::quadrature::gauss_legendre;

    /// The moments about c by 40-point Gauss-Legendre on 64 panels of the
    /// cell: exact to rounding for these analytic integrands.
    fn reference(eta: &Cubic, lo: f64, hi: f64, c: f64) -> [f64; MOMENTS] {
        let (x, w) = gauss_legendre(40);
        let mut m = [0.0; MOMENTS];
        let panels = 64;
        let h = (hi - lo) / panels as f64;
        for p in 0..panels {
            let (a, b) = (lo + p as f64 * h, lo + (p + 1) as f64 * h);
            for (xi, wi) in x.iter().zip(&w) {
                let z = 0.5 * (a + b) + 0.5 * (b - a) * xi;
                let e = crate::bms::model::cubic_basis::poly_eval(eta, z);
                let mut v = 0.5 * (b - a) * wi * (-0.5 * (z * z + e * e)).exp();
                for mk in m.iter_mut() {
                    *mk += v;
                    v *= z - c;
                }
            }
        }
        m
    }

    /// Cells near and far from 0, short and long, flat and steep, affine
    /// and cubic: where the series answers, each moment is within 1e-12 of
    /// rho^k m_0 of the reference; it answers on the ordinary cells, and
    /// declines where the weight varies too much across the cell.
    #[test]
    fn series_moments_match_the_reference() {
        let cases: [(Cubic, f64, f64, bool); 8] = [
            ([0.3, 0.9, -0.1, 0.02], 0.5, 1.3, true),
            ([0.3, 0.9, -0.1, 0.02], -2.0, -1.1, true),
            ([-1.0, 1.5, 0.2, -0.05], 2.0, 3.5, true),
            ([0.1, 0.8, 0.0, 0.0], 0.2, 0.9, true),
            ([-20.0, 2.5, 0.0, 0.0], 6.5, 9.0, false),
            ([-22.0, 2.6, 0.04, -0.01], 7.0, 8.5, true),
            ([0.0, 0.0, 0.0, 0.0], -1.0, 1.0, true),
            ([0.0, 30.0, 0.0, 0.0], 1.0, 3.0, false),
        ];
        for (eta, lo, hi, answers) in cases {
            let (c, rho) = (0.5 * (lo + hi), 0.5 * (hi - lo));
            let got = series_moments(&shift_cubic(&eta, c), c, rho, 1e-12);
            assert_eq!(got.is_some(), answers, "eta {eta:?} on [{lo}, {hi}]");
            let Some(got) = got else { continue };
            let want = reference(&eta, lo, hi, c);
            for k in 0..MOMENTS {
                let tol = 1e-12 * rho.powi(k as i32) * want[0];
                assert!(
                    (got[k] - want[k]).abs() <= tol,
                    "eta {eta:?} on [{lo}, {hi}] m_{k}: {:e} vs {:e}",
                    got[k],
                    want[k]
                );
            }
        }
    }

    /// Random cells (widths 0.02-3, centres -9..9, cubics from flat to
    /// steep): wherever the series answers, it agrees with the adaptive
    /// rule (`cells::quadrature_moments`, on the same scaled tolerance)
    /// within 1e-12 of rho^k m_0, and it answers on most ordinary cells.
    #[test]
    fn series_and_quadrature_agree_on_random_cells() {
        use crate::bms::model::cells::quadrature_moments;
        let mut rng = crate::rng::Rng::new(42);
        let (mut answered, mut ordinary, mut ordinary_answered) = (0, 0, 0);
        for _ in 0..3000 {
            let c = 18.0 * rng.uniform() - 9.0;
            let rho = 0.01 + 1.5 * rng.uniform().powi(2);
            let size = 3.0 * rng.uniform().powi(3);
            let eta: Cubic = [
                4.0 * rng.normal(),
                size * 3.0 * rng.normal(),
                size * rng.normal(),
                size * 0.3 * rng.normal(),
            ];
            let (lo, hi) = (c - rho, c + rho);
            // rho as the cell gives it (c - rho and c + rho need not round back).
            let (c, rho) = (0.5 * (lo + hi), 0.5 * (hi - lo));
            let about = shift_cubic(&eta, c);
            let is_ordinary = c.abs() < 3.0 && rho < 0.7 && size < 1.0 && eta[0].abs() < 4.0;
            ordinary += usize::from(is_ordinary);
            let Some(got) = series_moments(&about, c, rho, 1e-12) else {
                continue;
            };
            answered += 1;
            ordinary_answered += usize::from(is_ordinary);
            let want = quadrature_moments(&eta, lo, hi, c, rho);
            for k in 0..MOMENTS {
                let tol = 1e-12 * rho.powi(k as i32) * want[0].abs() + 1e-300;
                assert!(
                    (got[k] - want[k]).abs() <= tol,
                    "eta {eta:?} on [{lo}, {hi}] m_{k}: {:e} vs {:e}",
                    got[k],
                    want[k]
                );
            }
        }
        assert!(answered > 1000, "the series answered {answered} of 3000");
        assert!(
            ordinary_answered * 10 >= ordinary * 9,
            "{ordinary_answered} of {ordinary} ordinary cells"
        );
    }

    /// The entries of the device table that `key` opens in
    /// kernels/bms_stage1/moments.cuh.
    fn device_table(key: &str) -> Vec<f64> {
        let src = include_str!("../../../kernels/bms_stage1/moments.cuh");
        let start = src
            .find(key)
            .unwrap_or_else(|| panic!("{key} in bms_stage1/moments.cuh"))
            + key.len();
        let body = &src[start..start + src[start..].find("};").expect("the table's closing brace")];
        body.split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(|t| t.parse::<f64>().unwrap_or_else(|e| panic!("{key} entry {t:?}: {e}")))
            .collect()
    }

    /// The device holds POWER_INTEGRALS and INVERSES as literals (SERIES_W
    /// and SERIES_INV in kernels/bms_stage1/moments.cuh), bit for bit.
    #[test]
    fn device_series_tables_are_these_bitwise() {
        let tables: [(&str, &[f64]); 2] = [
            ("SERIES_W[SERIES_TERMS + MOMENTS] = {", &POWER_INTEGRALS),
            ("SERIES_INV[SERIES_TERMS + 1] = {", &INVERSES),
        ];
        for (key, host) in tables {
            let device = device_table(key);
            assert_eq!(device.len(), host.len(), "{key}");
            for (n, (d, h)) in device.iter().zip(host).enumerate() {
                assert_eq!(d.to_bits(), h.to_bits(), "{key} entry {n}: {d:e} vs {h:e}");
            }
        }
    }
}
