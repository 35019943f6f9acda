//! P-splines (Eilers and Marx 1996): a cubic B-spline basis on evenly
//! spaced knots with a difference penalty on its coefficients, the pieces
//! of mgcv's `s(x, bs = "ps")` a model needs to build its own smooth. The
//! penalty is semidefinite (a penalty of order m leaves the polynomials of
//! degree below m unpenalised), which [`matfree_solvers::Penalty`] accepts
//! as it is.

use crate::{Error, Result};

/// Cubic B-splines B_0 .. B_{k-1} on k + 4 evenly spaced knots, three
/// intervals beyond [lo, hi] on each side (mgcv's "ps" knots, without its
/// 0.1% widening of the range), so that every x in [lo, hi] sees four
/// whole B-splines and the basis sums to 1 there.
#[derive(Clone, Debug, PartialEq)]
pub struct PSpline {
    knots: Vec<f64>,
    /// The range given (its ends and the knots' can differ by rounding).
    range: (f64, f64),
}

impl PSpline {
    /// The basis of `k >= 4` functions over [lo, hi] (finite, lo < hi).
    pub fn new(lo: f64, hi: f64, k: usize) -> Result<Self> {
        if !(lo.is_finite() && hi.is_finite() && lo < hi) {
            return Err(Error::invalid(
                "lo..hi",
                format!("{lo}..{hi}"),
                "must be finite with lo < hi",
            ));
        }
        if k < 4 {
            return Err(Error::invalid("k", k, "a cubic basis needs at least 4 functions"));
        }
        let dx = (hi - lo) / (k - 3) as f64;
        let knots = (0..k + 4).map(|j| lo + (j as f64 - 3.0) * dx).collect();
        Ok(Self { knots, range: (lo, hi) })
    }

    /// The basis over the range of `x` (its smallest to its largest value).
    pub fn over(x: &[f64], k: usize) -> Result<Self> {
        let (lo, hi) = x
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &v| (l.min(v), h.max(v)));
        Self::new(lo, hi, k)
    }

    /// Number of functions k.
    pub fn dim(&self) -> usize {
        self.knots.len() - 4
    }
    /// The k + 4 knots.
    pub fn knots(&self) -> &[f64] {
        &self.knots
    }
    /// The range [lo, hi] it was built over ([`PSpline::new`]'s arguments).
    pub fn range(&self) -> (f64, f64) {
        self.range
    }

    /// The design: row i holds B_0(x_i) .. B_{k-1}(x_i) (n x k, row-major).
    /// Every x must lie in [lo, hi].
    pub fn design(&self, x: &[f64]) -> Result<Vec<f64>> {
        let (lo, hi) = self.range;
        if let Some(i) = x.iter().position(|v| !(*v >= lo && *v <= hi)) {
            return Err(Error::invalid(
                format!("x[{i}]"),
                x[i],
                format!("must lie in the basis range [{lo}, {hi}]"),
            ));
        }
        Ok(x.iter().flat_map(|&v| self.row(v)).collect())
    }

    /// The design at any finite x: the basis inside [lo, hi] and, beyond
    /// an end, the tangent line of every B-spline there (mgcv's
    /// `Predict.matrix.pspline.smooth` extrapolates so).
    pub fn design_extended(&self, x: &[f64]) -> Vec<f64> {
        let (lo, hi) = self.range;
        x.iter()
            .flat_map(|&v| {
                let end = v.clamp(lo, hi);
                let (row, slope) = (self.row(end), self.slope(end));
                row.into_iter().zip(slope).map(move |(b, d)| b + (v - end) * d)
            })
            .collect()
    }

    /// Cox-de Boor from the order-1 indicators up to order 4.
    fn row(&self, x: f64) -> Vec<f64> {
        let mut b = self.order(x, 4);
        b.truncate(self.dim());
        b
    }

    /// The first derivatives of the cubic B-splines at x, from the
    /// quadratic ones: B'_j = 3 (B_{j,3} / (t_{j+3} - t_j) - B_{j+1,3} / (t_{j+4} - t_{j+1})).
    fn slope(&self, x: f64) -> Vec<f64> {
        let (t, b) = (&self.knots, self.order(x, 3));
        (0..self.dim())
            .map(|j| 3.0 * (b[j] / (t[j + 3] - t[j]) - b[j + 1] / (t[j + 4] - t[j + 1])))
            .collect()
    }

    /// The B-splines of order `order` (degree order - 1) at x, one per knot
    /// interval (the last order - 1 are zero).
    fn order(&self, x: f64, order: usize) -> Vec<f64> {
        let t = &self.knots;
        let mut b: Vec<f64> = t.windows(2).map(|w| f64::from(w[0] <= x && x < w[1])).collect();
        for d in 1..order {
            for j in 0..t.len() - 1 - d {
                let left = (x - t[j]) / (t[j + d] - t[j]);
                let right = (t[j + d + 1] - x) / (t[j + d + 1] - t[j + 1]);
                b[j] = left * b[j] + right * b[j + 1];
            }
            b[t.len() - 1 - d] = 0.0;
        }
        b
    }

    /// The difference penalty D^T D of order `order` (1 ..= 3; D the
    /// (k - order) x k matrix of order-th differences), k x k row-major, of
    /// rank k - order.
    pub fn penalty(&self, order: usize) -> Result<Vec<f64>> {
        if !(1..=3).contains(&order) {
            return Err(Error::invalid(
                "order",
                order,
                "a difference penalty of order 1, 2 or 3",
            ));
        }
        let k = self.dim();
        // The order-th difference stencil: binomial coefficients, alternating.
        let stencil: Vec<f64> = (0..=order)
            .map(|j| (0..j).fold(1.0, |c, i| -c * (order - i) as f64 / (i + 1) as f64))
            .collect();
        let mut s = vec![0.0; k * k];
        for r in 0..k - order {
            for (a, u) in stencil.iter().enumerate() {
                for (b, v) in stencil.iter().enumerate() {
                    s[(r + a) * k + r + b] += u * v;
                }
            }
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_basis_sums_to_one_and_the_penalty_is_the_stencil() {
        let b = PSpline::new(-1.0, 2.0, 10).unwrap();
        let x: Vec<f64> = (0..=60).map(|i| -1.0 + 3.0 * i as f64 / 60.0).collect();
        let d = b.design(&x).unwrap();
        for row in d.chunks(10) {
            assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-14 && row.iter().all(|v| *v >= 0.0));
        }
        // At a knot a cubic B-spline takes 1/6, 2/3, 1/6.
        let at = b.design(&[b.knots()[5]]).unwrap();
        assert!((at[2] - 1.0 / 6.0).abs() < 1e-15 && (at[3] - 2.0 / 3.0).abs() < 1e-15);
        let s = b.penalty(2).unwrap();
        assert_eq!(&s[..3], &[1.0, -2.0, 1.0]);
        assert_eq!(&s[4 * 10 + 2..4 * 10 + 7], &[1.0, -4.0, 6.0, -4.0, 1.0]);
        assert!(b.design(&[2.5]).unwrap_err().to_string().contains("x[0]"));
        assert!(PSpline::new(0.0, 1.0, 3).is_err() && b.penalty(4).is_err());
        // Inside the range the extended design is the design; beyond it, a line.
        assert_eq!(b.design_extended(&x), d);
        let (near, far) = (b.design_extended(&[2.5]), b.design_extended(&[3.0]));
        let end = b.design(&[2.0]).unwrap();
        for j in 0..10 {
            assert!((far[j] - end[j] - 2.0 * (near[j] - end[j])).abs() < 1e-12);
        }
    }
}
