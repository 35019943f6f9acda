//! The special functions the families' saturated log-likelihoods need:
//! log Gamma (libm's port of musl), digamma and trigamma (the recurrence up
//! to x >= 10, then the asymptotic series, whose truncation there is
//! below 1e-16 relative).

/// log Gamma(x) for x > 0.
pub fn lgamma(x: f64) -> f64 {
    libm::lgamma(x)
}

/// log C(m, k) = log Gamma(m + 1) - log Gamma(k + 1) - log Gamma(m - k + 1).
pub fn lchoose(m: f64, k: f64) -> f64 {
    lgamma(m + 1.0) - lgamma(k + 1.0) - lgamma(m - k + 1.0)
}

/// x log y, 0 where x is 0 (whatever y is).
pub fn xlogy(x: f64, y: f64) -> f64 {
    if x == 0.0 {
        0.0
    } else {
        x * y.ln()
    }
}

/// The digamma function psi(x) = d log Gamma / dx for x > 0.
pub fn digamma(x: f64) -> f64 {
    let (mut x, mut acc) = (x, 0.0);
    while x < 10.0 {
        acc -= 1.0 / x;
        x += 1.0;
    }
    let r = 1.0 / (x * x);
    let series = r
        * (1.0 / 12.0
            - r * (1.0 / 120.0
                - r * (1.0 / 252.0 - r * (1.0 / 240.0 - r * (1.0 / 132.0 - r * (691.0 / 32_760.0 - r / 12.0))))));
    acc + x.ln() - 0.5 / x - series
}

/// The trigamma function psi'(x) for x > 0.
pub fn trigamma(x: f64) -> f64 {
    let (mut x, mut acc) = (x, 0.0);
    while x < 10.0 {
        acc += 1.0 / (x * x);
        x += 1.0;
    }
    let (ix, r) = (1.0 / x, 1.0 / (x * x));
    let series = 1.0 / 6.0
        - r * (1.0 / 30.0
            - r * (1.0 / 42.0 - r * (1.0 / 30.0 - r * (5.0 / 66.0 - r * (691.0 / 2_730.0 - r * 7.0 / 6.0)))));
    acc + ix + 0.5 * r + ix * r * series
}

#[cfg(test)]
#[allow(clippy::excessive_precision)] // R's values, 17 digits as printed
mod tests {
    use super::*;

    /// (x, digamma, trigamma, lgamma) from R 4.2.
    const R: [(f64, f64, f64, f64); 6] = [
        (0.3, -3.5025242222001323, 12.245364546107732, 1.0957979948180756),
        (1.0, -0.57721566490153231, 1.6449340668482264, 0.0),
        (2.5, 0.70315664064524341, 0.49035775610023491, 0.28468287047291918),
        (7.2, 1.903032144270175, 0.14897878164889405, 6.9568480798883403),
        (15.0, 2.6743466616607936, 0.068938227847683817, 25.191221182738683),
        (120.0, 4.7833192891185288, 0.0083681520048333163, 453.02489623849618),
    ];

    #[test]
    fn special_functions_match_r() {
        let close = |got: f64, want: f64| (got - want).abs() <= 4e-15 * want.abs().max(1.0);
        for (x, psi, psi1, lg) in R {
            assert!(close(digamma(x), psi), "digamma({x}) = {:e}", digamma(x));
            assert!(close(trigamma(x), psi1), "trigamma({x}) = {:e}", trigamma(x));
            assert!(close(lgamma(x), lg), "lgamma({x}) = {:e}", lgamma(x));
        }
        assert_eq!(xlogy(0.0, 0.0), 0.0);
        assert!((lchoose(5.0, 2.0) - 10f64.ln()).abs() < 1e-15);
    }
}
