//! Cubic B-spline bases with their constant and linear parts projected out.
//!
//! The B-splines live on simple (non-repeated) knots, so each is C2 on the
//! whole real line and vanishes outside its support. Subtracting each
//! function's L2 projection onto {1, x} (over the knot range) leaves a basis
//! that cannot represent any linear function: beta = 0 is the rigid model and
//! neither the score warp nor the link deviation can mimic the intercept or
//! the slope. A projected function is a cubic on every knot interval and
//! linear outside the knot range.
//!
//! Pieces are stored as monomial coefficients `[c0, c1, c2, c3]` in the
//! global variable x, one set per *segment*: segment 0 is `(-inf, t_0)`,
//! segment s in `1..K` is `[t_{s-1}, t_s)`, segment K is `[t_{K-1}, inf)`.

use crate::{Error, Result};

/// A cubic polynomial `c0 + c1 x + c2 x^2 + c3 x^3`.
pub type Cubic = [f64; 4];

/// Evaluate a cubic at x (Horner).
#[inline(always)]
pub fn poly_eval(p: &Cubic, x: f64) -> f64 {
    ((p[3] * x + p[2]) * x + p[1]) * x + p[0]
}

/// The derivative of a cubic.
pub fn poly_deriv(p: &Cubic) -> Cubic {
    [p[1], 2.0 * p[2], 3.0 * p[3], 0.0]
}

/// p(a + b z) as a cubic in z, coefficient by coefficient: Horner in a
/// for each derivative of p at a, times the power of b.
#[inline(always)]
pub fn poly_compose_affine(p: &Cubic, a: f64, b: f64) -> Cubic {
    let bb = b * b;
    [
        p[0] + a * (p[1] + a * (p[2] + a * p[3])),
        b * (p[1] + a * (2.0 * p[2] + 3.0 * a * p[3])),
        bb * (p[2] + 3.0 * a * p[3]),
        bb * b * p[3],
    ]
}

/// z p(z); the caller guarantees deg p <= 2.
pub fn poly_times_z(p: &Cubic) -> Cubic {
    debug_assert!(p[3] == 0.0, "z * cubic leaves degree 3");
    [0.0, p[0], p[1], p[2]]
}

/// s p.
pub fn poly_scale(p: &Cubic, s: f64) -> Cubic {
    [s * p[0], s * p[1], s * p[2], s * p[3]]
}

/// p + q.
pub fn poly_add(p: &Cubic, q: &Cubic) -> Cubic {
    [p[0] + q[0], p[1] + q[1], p[2] + q[2], p[3] + q[3]]
}

/// Cubic B-splines on simple knots, projected orthogonal to {1, x}.
#[derive(Clone, Debug, PartialEq)]
pub struct CubicBasis {
    knots: Vec<f64>,
    /// `pieces[s][j]`: function j on segment s.
    pieces: Vec<Vec<Cubic>>,
    /// Row-major `dim x dim` integrated squared second derivative.
    penalty: Vec<f64>,
    /// `raw[s]`: the raw B-splines on segment s, before the projection (see
    /// [`RawBlock`]).
    raw: Vec<RawBlock>,
    /// Each function's linear part `alpha_j + gamma_j x` as `[alpha_j,
    /// gamma_j]`: `pieces[s][j] = B_j - (alpha_j + gamma_j x)`.
    linear: Vec<[f64; 2]>,
}

/// The raw (unprojected) B-splines that can be non-zero on one segment: the
/// `width` functions from `first` (width = min(4, dim), the same for every
/// segment), as global monomials, zero where a function vanishes (all of
/// them outside the knots). A projected function is its raw piece less its
/// linear part, so sums over the projected functions follow from sums over
/// these, which are four a segment instead of dim (`fused`).
#[derive(Clone, Debug, PartialEq)]
pub struct RawBlock {
    /// The first function of the block.
    pub first: usize,
    /// B_{first + k} on the segment, k < width (zero past it).
    pub pieces: [Cubic; 4],
}

/// The integral of a polynomial (any degree, coefficients in x) over [a, b].
fn integrate(p: &[f64], a: f64, b: f64) -> f64 {
    let (mut pa, mut pb) = (a, b);
    let mut sum = 0.0;
    for (k, c) in p.iter().enumerate() {
        sum += c * (pb - pa) / (k + 1) as f64;
        pa *= a;
        pb *= b;
    }
    sum
}

/// Cox-de Boor on polynomials: all raw cubic B-splines on interval i of the
/// knots, as global monomials (`out[j]` for B_j, zero where B_j vanishes).
fn raw_pieces(t: &[f64], i: usize) -> Vec<Cubic> {
    let nb = t.len() - 4;
    // level[j] = N_{j,k} on interval i, for j < t.len() - 1 - k.
    let mut level: Vec<Cubic> = (0..t.len() - 1)
        .map(|j| if j == i { [1.0, 0.0, 0.0, 0.0] } else { [0.0; 4] })
        .collect();
    for k in 1..=3 {
        let next: Vec<Cubic> = (0..t.len() - 1 - k)
            .map(|j| {
                let left = 1.0 / (t[j + k] - t[j]);
                let right = 1.0 / (t[j + k + 1] - t[j + 1]);
                // (x - t_j) * left * N_{j,k-1} + (t_{j+k+1} - x) * right * N_{j+1,k-1}
                let mut out = [0.0; 4];
                for d in 0..3 {
                    let (a, b) = (level[j][d], level[j + 1][d]);
                    out[d] += -t[j] * left * a + t[j + k + 1] * right * b;
                    out[d + 1] += left * a - right * b;
                }
                out
            })
            .collect();
        level = next;
    }
    level.truncate(nb);
    level
}

impl CubicBasis {
    /// The projected basis on the full simple knot vector `knots` (strictly
    /// increasing, finite, at least 5 knots): one function per cubic
    /// B-spline, `dim = knots.len() - 4`. Nothing is lost to the projection
    /// because no combination of compactly supported B-splines is linear.
    pub fn new(knots: Vec<f64>) -> Result<Self> {
        if knots.len() < 5 {
            return Err(Error::invalid(
                "knots.len",
                knots.len(),
                "a cubic basis needs at least 5 simple knots (dim = len - 4 >= 1)",
            ));
        }
        if let Some(i) = knots.iter().position(|v| !v.is_finite()) {
            return Err(Error::invalid(format!("knots[{i}]"), knots[i], "must be finite"));
        }
        if let Some(i) = (1..knots.len()).find(|&i| knots[i] <= knots[i - 1]) {
            let rule = format!(
                "knots must be strictly increasing (knots[{}] = {})",
                i - 1,
                knots[i - 1]
            );
            return Err(Error::invalid(format!("knots[{i}]"), knots[i], rule));
        }
        let raw: Vec<Vec<Cubic>> = (0..knots.len() - 1).map(|i| raw_pieces(&knots, i)).collect();
        let linear = linear_parts(&knots, &raw);
        // Segment s: B_j - (alpha_j + gamma_j x), with B_j = 0 outside the knots.
        let pieces: Vec<Vec<Cubic>> = (0..=knots.len())
            .map(|s| {
                (0..linear.len())
                    .map(|j| {
                        let inside = (1..knots.len()).contains(&s);
                        let bj = if inside { raw[s - 1][j] } else { [0.0; 4] };
                        poly_add(&bj, &poly_scale(&linear[j], -1.0))
                    })
                    .collect()
            })
            .collect();
        let penalty = second_derivative_gram(&knots, &pieces);
        let raw = raw_blocks(&knots, &raw);
        let linear = linear.iter().map(|p| [p[0], p[1]]).collect();
        Ok(Self {
            knots,
            pieces,
            penalty,
            raw,
            linear,
        })
    }

    /// `dim` functions on `dim + 4` equally spaced knots spanning [lo, hi].
    pub fn uniform(lo: f64, hi: f64, dim: usize) -> Result<Self> {
        if !(lo.is_finite() && hi.is_finite() && lo < hi) {
            return Err(Error::invalid(
                "lo..hi",
                format!("{lo}..{hi}"),
                "must be finite with lo < hi",
            ));
        }
        if dim == 0 {
            return Err(Error::invalid("dim", 0, "must be >= 1"));
        }
        let m = dim + 3;
        Self::new((0..=m).map(|k| lo + (hi - lo) * k as f64 / m as f64).collect())
    }

    /// The knots.
    pub fn knots(&self) -> &[f64] {
        &self.knots
    }
    /// Number of basis functions.
    pub fn dim(&self) -> usize {
        self.pieces[0].len()
    }
    /// Number of segments, `knots.len() + 1`.
    pub fn segments(&self) -> usize {
        self.pieces.len()
    }
    /// The segment holding x (see the module docs).
    pub fn segment_of(&self, x: f64) -> usize {
        self.knots.partition_point(|&t| t <= x)
    }
    /// [`CubicBasis::segment_of`] searched from `guess` (the answer for a
    /// nearby x) by steps instead of bisection; the same answer from any
    /// guess, None bisecting.
    #[inline(always)]
    pub fn segment_near(&self, x: f64, guess: Option<usize>) -> usize {
        let Some(mut s) = guess else {
            return self.segment_of(x);
        };
        let knots = &self.knots;
        s = s.min(knots.len());
        while s < knots.len() && knots[s] <= x {
            s += 1;
        }
        // The knots are finite: !(t <= x) is t > x or x NaN.
        while s > 0 && (knots[s - 1] > x || x.is_nan()) {
            s -= 1;
        }
        s
    }
    /// Every function's cubic on segment s (global monomials in x).
    pub fn segment(&self, s: usize) -> &[Cubic] {
        &self.pieces[s]
    }
    /// The raw B-splines on segment s ([`RawBlock`]).
    #[inline(always)]
    pub fn raw_block(&self, s: usize) -> &RawBlock {
        &self.raw[s]
    }
    /// How many functions every [`RawBlock`] holds: min(4, dim).
    pub fn raw_width(&self) -> usize {
        self.dim().min(4)
    }
    /// Each function's linear part `[alpha_j, gamma_j]` (see `linear`).
    pub fn linear_parts(&self) -> &[[f64; 2]] {
        &self.linear
    }
    /// sum_j beta_j f_j on segment s.
    pub fn combine(&self, s: usize, beta: &[f64]) -> Cubic {
        self.pieces[s]
            .iter()
            .zip(beta)
            .fold([0.0; 4], |acc, (p, b)| poly_add(&acc, &poly_scale(p, *b)))
    }
    /// Values, first and second derivatives of every function at x.
    pub fn eval(&self, x: f64, value: &mut [f64], d1: &mut [f64], d2: &mut [f64]) {
        for (j, p) in self.pieces[self.segment_of(x)].iter().enumerate() {
            let dp = poly_deriv(p);
            value[j] = poly_eval(p, x);
            d1[j] = poly_eval(&dp, x);
            d2[j] = poly_eval(&poly_deriv(&dp), x);
        }
    }
    /// The penalty `S[j][k] = integral f_j'' f_k'' dx`, row-major dim x dim,
    /// positive definite.
    pub fn penalty(&self) -> &[f64] {
        &self.penalty
    }
}

/// The [`RawBlock`] of every segment (0 and knots.len() lie outside the
/// knots: zero pieces), from the raw pieces of each knot interval.
fn raw_blocks(t: &[f64], raw: &[Vec<Cubic>]) -> Vec<RawBlock> {
    let dim = raw[0].len();
    let width = dim.min(4);
    (0..=t.len())
        .map(|s| {
            let mut block = RawBlock {
                first: 0,
                pieces: [[0.0; 4]; 4],
            };
            if (1..t.len()).contains(&s) {
                // Interval i = s - 1 carries B_{i-3}..B_i (those below dim).
                let i = s - 1;
                block.first = i.saturating_sub(3).min(dim - width);
                for k in 0..width {
                    block.pieces[k] = raw[i][block.first + k];
                }
            }
            block
        })
        .collect()
}

/// Each B-spline's L2 projection onto {1, x} over the knot range, as the
/// linear cubic `[alpha_j, gamma_j, 0, 0]`.
fn linear_parts(t: &[f64], raw: &[Vec<Cubic>]) -> Vec<Cubic> {
    let (lo, hi) = (t[0], t[t.len() - 1]);
    // {1, x - m} is orthogonal on the symmetric range: a diagonal Gram.
    let (m, h) = (0.5 * (lo + hi), 0.5 * (hi - lo));
    (0..raw[0].len())
        .map(|j| {
            let (mut i0, mut i1) = (0.0, 0.0);
            for (i, seg) in raw.iter().enumerate() {
                let p = &seg[j];
                let xp = [-m * p[0], p[0] - m * p[1], p[1] - m * p[2], p[2] - m * p[3], p[3]];
                i0 += integrate(p, t[i], t[i + 1]);
                i1 += integrate(&xp, t[i], t[i + 1]);
            }
            let (c, g) = (i0 / (2.0 * h), i1 / (2.0 * h * h * h / 3.0));
            [c - g * m, g, 0.0, 0.0]
        })
        .collect()
}

/// integral f_j'' f_k'' over the knot range (zero outside: the pieces there
/// are linear). Per interval f'' is linear, so 2-point Gauss-Legendre is exact.
fn second_derivative_gram(t: &[f64], pieces: &[Vec<Cubic>]) -> Vec<f64> {
    let dim = pieces[0].len();
    let mut s = vec![0.0; dim * dim];
    let node = 0.5 / 3f64.sqrt();
    for i in 0..t.len() - 1 {
        let (mid, len) = (0.5 * (t[i] + t[i + 1]), t[i + 1] - t[i]);
        for x in [mid - node * len, mid + node * len] {
            let d2: Vec<f64> = pieces[i + 1]
                .iter()
                .map(|p| poly_eval(&poly_deriv(&poly_deriv(p)), x))
                .collect();
            for a in 0..dim {
                for b in 0..dim {
                    s[a * dim + b] += 0.5 * len * d2[a] * d2[b];
                }
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A segment found from any guess is `segment_of`'s (`partition_point`), wherever the
    /// guess is (beyond the end included) and for x on, between and beyond
    /// the knots, NaN too.
    #[test]
    fn segment_near_a_guess_is_segment_of() {
        let basis = CubicBasis::new(vec![-3.0, -1.5, 0.0, 2.0, 3.5]).unwrap();
        let knots = basis.knots();
        let xs = [
            -9.0,
            -3.0,
            -2.0,
            -1.5,
            -0.1,
            0.0,
            1.0,
            2.0,
            3.5,
            4.0,
            f64::NAN,
            f64::INFINITY,
        ];
        for x in xs {
            let want = knots.partition_point(|&t| t <= x);
            for guess in [None, Some(0), Some(2), Some(3), Some(5), Some(9)] {
                assert_eq!(basis.segment_near(x, guess), want, "x = {x}, guess {guess:?}");
            }
        }
    }

    use matfree_solvers::dense::Cholesky;

    /// B_j(x) by the pointwise Cox-de Boor recursion (independent of the
    /// polynomial construction above).
    fn bspline(t: &[f64], j: usize, k: usize, x: f64) -> f64 {
        if k == 0 {
            return if t[j] <= x && x < t[j + 1] { 1.0 } else { 0.0 };
        }
        let l = (x - t[j]) / (t[j + k] - t[j]) * bspline(t, j, k - 1, x);
        let r = (t[j + k + 1] - x) / (t[j + k + 1] - t[j + 1]) * bspline(t, j + 1, k - 1, x);
        l + r
    }

    fn knots() -> Vec<f64> {
        vec![-3.1, -2.2, -1.0, -0.45, 0.1, 0.8, 1.9, 2.5, 3.3]
    }

    fn values(b: &CubicBasis, x: f64) -> [Vec<f64>; 3] {
        let d = b.dim();
        let (mut v, mut d1, mut d2) = (vec![0.0; d], vec![0.0; d], vec![0.0; d]);
        b.eval(x, &mut v, &mut d1, &mut d2);
        [v, d1, d2]
    }

    #[test]
    fn projected_functions_are_bsplines_minus_their_l2_linear_part() {
        let t = knots();
        let b = CubicBasis::new(t.clone()).unwrap();
        assert_eq!(b.dim(), t.len() - 4);
        let (lo, hi) = (t[0], t[t.len() - 1]);
        let m = 20_000;
        for j in 0..b.dim() {
            // f_j - B_j is linear: its second difference on a grid vanishes.
            let g = |x: f64| values(&b, x)[0][j] - bspline(&t, j, 3, x);
            let (x0, x1, x2) = (-5.0, 0.37, 4.0);
            let slope = (g(x1) - g(x0)) / (x1 - x0);
            assert!((g(x2) - g(x1) - slope * (x2 - x1)).abs() < 1e-12, "j = {j}");
            // f_j is orthogonal to 1 and x on the knot range (midpoint rule).
            let h = (hi - lo) / m as f64;
            let (mut i0, mut i1) = (0.0, 0.0);
            for k in 0..m {
                let x = lo + (k as f64 + 0.5) * h;
                let f = values(&b, x)[0][j];
                i0 += f * h;
                i1 += f * x * h;
            }
            assert!(i0.abs() < 1e-7 && i1.abs() < 1e-7, "j = {j}: {i0} {i1}");
        }
    }

    /// The raw blocks against the Cox-de Boor recursion (an independent
    /// B-spline) at points of every segment, and every projected function
    /// as its raw piece less its linear part; on bases of 1 to 9 functions
    /// (blocks narrower than four included).
    #[test]
    fn raw_blocks_are_the_bsplines_and_the_pieces_less_their_linear_parts() {
        let all = knots();
        for len in 5..=all.len() + 4 {
            let t: Vec<f64> = (0..len)
                .map(|k| -3.0 + 6.5 * k as f64 / (len - 1) as f64 + 0.01 * (k * k) as f64)
                .collect();
            let b = CubicBasis::new(t.clone()).unwrap();
            let (dim, width) = (b.dim(), b.raw_width());
            assert_eq!(width, dim.min(4));
            for s in 0..b.segments() {
                let block = b.raw_block(s);
                assert!(block.first + width <= dim, "len {len} segment {s}");
                // A point inside segment s (the outer ones open-ended).
                let x = match s {
                    0 => t[0] - 0.7,
                    s if s == t.len() => t[t.len() - 1] + 0.7,
                    s => 0.5 * (t[s - 1] + t[s]),
                };
                for j in 0..dim {
                    let in_block = (block.first..block.first + width).contains(&j);
                    let raw = if in_block {
                        poly_eval(&block.pieces[j - block.first], x)
                    } else {
                        0.0
                    };
                    let inside = (t[0]..t[t.len() - 1]).contains(&x);
                    let want = if inside { bspline(&t, j, 3, x) } else { 0.0 };
                    assert!((raw - want).abs() < 1e-12, "len {len} s {s} j {j}: {raw} vs {want}");
                    let [alpha, gamma] = b.linear_parts()[j];
                    let projected = poly_eval(&b.segment(s)[j], x);
                    assert!(
                        (projected - (raw - alpha - gamma * x)).abs() < 1e-12,
                        "len {len} s {s} j {j}"
                    );
                }
            }
        }
    }

    #[test]
    fn every_function_is_c2_and_linear_outside() {
        let b = CubicBasis::new(knots()).unwrap();
        for (s, &tk) in b.knots().iter().enumerate() {
            for (left, right) in b.segment(s).iter().zip(b.segment(s + 1)) {
                let (mut pl, mut pr) = (*left, *right);
                for order in 0..3 {
                    let (vl, vr) = (poly_eval(&pl, tk), poly_eval(&pr, tk));
                    assert!((vl - vr).abs() < 1e-12, "knot {s}, derivative {order}: {vl} vs {vr}");
                    pl = poly_deriv(&pl);
                    pr = poly_deriv(&pr);
                }
            }
        }
        let (first, last) = (b.segment(0), b.segment(b.segments() - 1));
        for (p, q) in first.iter().zip(last) {
            assert_eq!(p, q);
            assert_eq!((p[2], p[3]), (0.0, 0.0));
        }
    }

    #[test]
    fn penalty_is_the_integrated_squared_second_derivative_and_pd() {
        let b = CubicBasis::new(knots()).unwrap();
        let (d, t) = (b.dim(), b.knots().to_vec());
        let m = 40_000;
        let h = (t[t.len() - 1] - t[0]) / m as f64;
        let mut s = vec![0.0; d * d];
        for k in 0..m {
            let f2 = values(&b, t[0] + (k as f64 + 0.5) * h)[2].clone();
            for a in 0..d {
                for c in 0..d {
                    s[a * d + c] += f2[a] * f2[c] * h;
                }
            }
        }
        let scale = s.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        for (x, y) in s.iter().zip(b.penalty()) {
            assert!((x - y).abs() < 1e-6 * scale, "{x} vs {y}");
        }
        Cholesky::factor(d, b.penalty()).expect("penalty positive definite");
    }

    #[test]
    fn composition_and_products_are_exact() {
        let p = [0.3, -1.2, 0.7, 0.25];
        let (a, bb) = (0.4, -1.7);
        let c = poly_compose_affine(&p, a, bb);
        for z in [-2.0, 0.0, 1.3] {
            assert!((poly_eval(&c, z) - poly_eval(&p, a + bb * z)).abs() < 1e-13);
        }
        let q = [0.5, 2.0, -1.0, 0.0];
        assert!((poly_eval(&poly_times_z(&q), 1.7) - 1.7 * poly_eval(&q, 1.7)).abs() < 1e-14);
    }

    #[test]
    fn bad_knots_are_rejected_with_the_field_named() {
        let msg = |k: Vec<f64>| CubicBasis::new(k).unwrap_err().to_string();
        assert!(msg(vec![0.0, 1.0, 2.0, 3.0]).contains("knots.len"));
        assert!(msg(vec![0.0, 1.0, 1.0, 3.0, 4.0]).contains("knots[2]"));
        assert!(msg(vec![0.0, 1.0, f64::NAN, 3.0, 4.0]).contains("knots[2]"));
        assert!(CubicBasis::uniform(1.0, 1.0, 3).is_err());
        assert!(CubicBasis::uniform(-1.0, 1.0, 0)
            .unwrap_err()
            .to_string()
            .contains("dim"));
        assert_eq!(CubicBasis::uniform(-3.0, 3.0, 1).unwrap().dim(), 1);
    }
}
