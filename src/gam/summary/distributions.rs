//! Upper tails of the normal (the crate's Cody erfc/erfcx, to round-off;
//! statrs' erfc is good to only ~1e-9), t, chi-square and F distributions
//! (statrs' regularised incomplete gamma and beta functions, written as
//! the upper tail itself so that small p-values keep their relative
//! accuracy), the
//! non-central chi-square as a Poisson mixture, and log(1 + x) - x.

use statrs::function::{beta::checked_beta_reg, gamma::checked_gamma_ur};

use crate::bms::numerics::probit::norm_cdf;

/// I_x(a, b), NaN (as R gives) where a or b is not positive.
fn beta_reg(a: f64, b: f64, x: f64) -> f64 {
    checked_beta_reg(a, b, x).unwrap_or(f64::NAN)
}

/// Q(a, x), NaN where a is not positive.
fn gamma_ur(a: f64, x: f64) -> f64 {
    checked_gamma_ur(a, x).unwrap_or(f64::NAN)
}

/// Pr(Z > z) for a standard normal Z.
pub(crate) fn normal_upper(z: f64) -> f64 {
    norm_cdf(-z)
}

/// Pr(T > t) for T ~ t(df), df > 0.
pub(crate) fn t_upper(t: f64, df: f64) -> f64 {
    // Pr(|T| > |t|) = I_{df / (df + t^2)}(df / 2, 1 / 2).
    let two_sided = beta_reg(df / 2.0, 0.5, df / (df + t * t));
    if t >= 0.0 {
        0.5 * two_sided
    } else {
        1.0 - 0.5 * two_sided
    }
}

/// Pr(X > x) for X ~ chi^2(df), df >= 0 (chi^2(0) is a point mass at 0).
pub(crate) fn chisq_upper(x: f64, df: f64) -> f64 {
    if x <= 0.0 {
        1.0
    } else if x.is_infinite() || df == 0.0 {
        0.0
    } else {
        gamma_ur(df / 2.0, x / 2.0)
    }
}

/// Pr(F > f) for F ~ F(d1, d2).
pub(crate) fn f_upper(f: f64, d1: f64, d2: f64) -> f64 {
    if f <= 0.0 {
        1.0
    } else if f.is_infinite() {
        0.0
    } else {
        // Pr(F > f) = I_{d2 / (d2 + d1 f)}(d2 / 2, d1 / 2), the argument
        // formed directly rather than as 1 - d1 f / (d2 + d1 f).
        beta_reg(d2 / 2.0, d1 / 2.0, d2 / (d2 + d1 * f))
    }
}

/// Pr(X > x) for X ~ chi^2(df, ncp): sum_i Pois(i; ncp / 2) Pr(chi^2(df +
/// 2 i) > x), summed outward from the Poisson mode until the weights left
/// are below 1e-17 of the total.
pub(crate) fn noncentral_chisq_upper(x: f64, df: f64, ncp: f64) -> f64 {
    let lambda = ncp / 2.0;
    let mode = lambda.floor();
    let log_weight = |i: f64| -lambda + i * lambda.ln() - libm::lgamma(i + 1.0);
    let term = |i: f64| log_weight(i).exp() * chisq_upper(x, df + 2.0 * i);
    let mut sum = term(mode);
    let mut i = mode + 1.0;
    while log_weight(i).exp() > 1e-17 {
        sum += term(i);
        i += 1.0;
    }
    let mut i = mode - 1.0;
    while i >= 0.0 && log_weight(i).exp() > 1e-17 {
        sum += term(i);
        i -= 1.0;
    }
    sum
}

/// log(1 + x) - x without the cancellation near 0, for x > -1: with r = x
/// / (2 + x), log(1 + x) = 2 r (1 + r^2 / 3 + r^4 / 5 + ...), so log(1 + x)
/// - x = r (2 r^2 S - x) with S = sum_k r^(2k) / (2k + 3).
pub(crate) fn log1pmx(x: f64) -> f64 {
    if !(-0.79149064..=1.0).contains(&x) {
        return x.ln_1p() - x;
    }
    let r = x / (2.0 + x);
    let y = r * r;
    let (mut s, mut yk, mut k) = (0.0, 1.0, 0.0);
    loop {
        let t = yk / (2.0 * k + 3.0);
        s += t;
        if t < 1e-17 * s {
            break;
        }
        yk *= y;
        k += 1.0;
    }
    r * (2.0 * y * s - x)
}

#[cfg(test)]
#[allow(clippy::excessive_precision)] // R's values, 17 digits as printed
mod tests {
    use super::*;

    fn close(got: f64, want: f64) {
        assert!((got - want).abs() <= 1e-12 * want.abs() + 1e-300, "{got} vs {want}");
    }

    /// R: pnorm(z, lower.tail = FALSE).
    #[test]
    fn normal_matches_r() {
        close(normal_upper(1.5), 6.6807201268858071e-02);
        close(normal_upper(-0.3), 6.1791142218895267e-01);
        close(normal_upper(9.0), 1.1285884059538408e-19);
    }

    /// R: pt(t, df, lower.tail = FALSE).
    #[test]
    fn t_matches_r() {
        close(t_upper(2.1, 7.5), 3.5618535729039023e-02);
        close(t_upper(-1.2, 3.0), 8.4186894265094758e-01);
        close(t_upper(12.0, 180.3), 4.5900318449895189e-25);
    }

    /// R: pchisq(x, df, lower.tail = FALSE), and with ncp.
    #[test]
    fn chisq_matches_r() {
        close(chisq_upper(3.2, 1.0), 7.3638270120302773e-02);
        close(chisq_upper(14.0, 4.7), 1.2599520450161855e-02);
        close(chisq_upper(120.0, 3.0), 7.7167903556341579e-26);
        close(noncentral_chisq_upper(6.0, 2.5, 1.7), 2.3861897318232225e-01);
        assert_eq!(chisq_upper(2.0, 0.0), 0.0);
        assert!(chisq_upper(2.0, -1.0).is_nan() && t_upper(1.0, 0.0).is_nan());
    }

    /// R: pf(f, d1, d2, lower.tail = FALSE).
    #[test]
    fn f_matches_r() {
        close(f_upper(2.3, 3.4, 190.2), 7.0704520257600142e-02);
        close(f_upper(0.4, 1.0, 12.0), 5.3895363428219323e-01);
        close(f_upper(60.0, 4.0, 200.0), 3.1796582381915490e-33);
    }

    /// log1p(x) - x against R's log1p(x) - x (and the series at 1e-5).
    #[test]
    fn log1pmx_matches_r() {
        close(log1pmx(1e-5), -4.9999666669166649e-11);
        close(log1pmx(0.3), -0.037635735532508929);
        close(log1pmx(-0.7), -0.503972804325935941);
        close(log1pmx(3.0), -1.613705638880109428);
    }
}
