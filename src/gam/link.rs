//! Link functions eta = g(mu) for the GLM families ([`super::family`]),
//! with mu's derivatives in eta and, for the links onto (0, 1), log mu and
//! log(1 - mu) with theirs, in forms that stay accurate in both tails
//! (|eta| of 30 and beyond), so that a binomial row's derivatives never
//! divide a tiny mu by another.

use std::f64::consts::LN_2;

use crate::bms::numerics::probit::log_ndtr_mills_curvature;

/// ln sqrt(2 pi).
const LN_SQRT_2PI: f64 = 0.918_938_533_204_672_741_780_329_736_405_62;

/// A link function eta = g(mu) (R's `make.link` names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// eta = log(mu / (1 - mu)).
    Logit,
    /// eta = Phi^-1(mu).
    Probit,
    /// eta = log(-log(1 - mu)).
    Cloglog,
    /// eta = log(mu).
    Log,
    /// eta = mu.
    Identity,
    /// eta = 1 / mu.
    Inverse,
}

/// log p and its first three derivatives in eta (p = mu or 1 - mu).
pub type LogJet = [f64; 4];

impl Link {
    /// R's name for the link.
    pub fn name(self) -> &'static str {
        match self {
            Link::Logit => "logit",
            Link::Probit => "probit",
            Link::Cloglog => "cloglog",
            Link::Log => "log",
            Link::Identity => "identity",
            Link::Inverse => "inverse",
        }
    }

    /// Whether g maps (0, 1) onto the line (a binomial mean's links).
    pub fn is_probability(self) -> bool {
        matches!(self, Link::Logit | Link::Probit | Link::Cloglog)
    }

    /// eta = g(mu).
    pub fn linkfun(self, mu: f64) -> f64 {
        match self {
            Link::Logit => (mu / (1.0 - mu)).ln(),
            Link::Probit => probit_quantile(mu),
            Link::Cloglog => (-(-mu).ln_1p()).ln(),
            Link::Log => mu.ln(),
            Link::Identity => mu,
            Link::Inverse => 1.0 / mu,
        }
    }

    /// mu = g^-1(eta).
    pub fn linkinv(self, eta: f64) -> f64 {
        self.mu_derivatives(eta)[0]
    }

    /// log mu (exact in eta for the log link, where mu may overflow).
    pub fn log_mu(self, eta: f64) -> f64 {
        match self {
            Link::Log => eta,
            Link::Identity => eta.ln(),
            Link::Inverse => -eta.ln(),
            _ => self.log_probabilities(eta).0[0],
        }
    }

    /// mu and d mu / d eta, d2 mu / d eta2, d3 mu / d eta3.
    pub fn mu_derivatives(self, eta: f64) -> [f64; 4] {
        match self {
            Link::Logit => {
                let (mu, one_minus, v) = logistic(eta);
                let d2 = v * (one_minus - mu);
                [mu, v, d2, v * (1.0 - 6.0 * v)]
            }
            Link::Probit => {
                let phi = crate::bms::numerics::probit::norm_pdf(eta);
                let mu = crate::bms::numerics::probit::norm_cdf(eta);
                [mu, phi, -eta * phi, (eta * eta - 1.0) * phi]
            }
            Link::Cloglog => {
                let u = eta.exp();
                let d1 = u * (-u).exp(); // 0 once e^-u underflows (u finite or not)
                let d1 = if d1.is_nan() { 0.0 } else { d1 };
                [-(-u).exp_m1(), d1, d1 * (1.0 - u), d1 * ((1.0 - u) * (1.0 - u) - u)]
            }
            Link::Log => [eta.exp(); 4],
            Link::Identity => [eta, 1.0, 0.0, 0.0],
            Link::Inverse => {
                let mu = 1.0 / eta;
                let mu2 = mu * mu;
                [mu, -mu2, 2.0 * mu2 * mu, -6.0 * mu2 * mu2]
            }
        }
    }

    /// mu and its relative derivatives mu^(j) / mu (j = 1, 2, 3) in closed
    /// form where it has one: all 1 for the log link, where mu may have
    /// underflowed to 0 or be near overflow.
    pub fn relative_mu_derivatives(self, eta: f64) -> (f64, [f64; 3]) {
        match self {
            Link::Log => (eta.exp(), [1.0; 3]),
            Link::Identity => (eta, [1.0 / eta, 0.0, 0.0]),
            Link::Inverse => {
                let mu = 1.0 / eta;
                (mu, [-mu, 2.0 * mu * mu, -6.0 * mu * mu * mu])
            }
            _ => {
                let d = self.mu_derivatives(eta);
                (d[0], [d[1] / d[0], d[2] / d[0], d[3] / d[0]])
            }
        }
    }

    /// (log mu, log(1 - mu)), each with its first three derivatives in
    /// eta, for the links onto (0, 1); NaN for the others. No tiny
    /// probability is formed and divided again: the logit's come from the
    /// logistic function, the probit's from log Phi and the Mills ratio
    /// (a continued fraction in the lower tail), the cloglog's from
    /// u = e^eta with series where u is small.
    pub fn log_probabilities(self, eta: f64) -> (LogJet, LogJet) {
        match self {
            Link::Logit => logit_log_probabilities(eta),
            Link::Probit => {
                let (a, b) = (probit_log_jet(eta), probit_log_jet(-eta));
                (a, [b[0], -b[1], b[2], -b[3]]) // log(1 - Phi(eta)) = log Phi(-eta)
            }
            Link::Cloglog => cloglog_log_probabilities(eta),
            _ => ([f64::NAN; 4], [f64::NAN; 4]),
        }
    }

    /// (log mu, log(1 - mu)) alone: the values of
    /// [`Link::log_probabilities`], bit for bit, without the cloglog's
    /// derivatives (the probit's come with its Mills ratio anyway).
    pub fn log_probability_pair(self, eta: f64) -> (f64, f64) {
        match self {
            Link::Logit => (-softplus(-eta), -softplus(eta)),
            Link::Cloglog => {
                let u = eta.exp();
                (if u > 750.0 { 0.0 } else { log1mexp(u, eta) }, -u)
            }
            _ => {
                let (a, b) = self.log_probabilities(eta);
                (a[0], b[0])
            }
        }
    }
}

/// mu = 1 / (1 + e^-eta), 1 - mu and mu (1 - mu), without cancellation
/// at large |eta|.
fn logistic(eta: f64) -> (f64, f64, f64) {
    let e = (-eta.abs()).exp();
    let (big, small) = (1.0 / (1.0 + e), e / (1.0 + e));
    let (mu, one_minus) = if eta >= 0.0 { (big, small) } else { (small, big) };
    (mu, one_minus, big * small)
}

/// log(1 + e^x).
fn softplus(x: f64) -> f64 {
    x.max(0.0) + (-x.abs()).exp().ln_1p()
}

/// Logit: log mu = -softplus(-eta), (log mu)' = 1 - mu, log(1 - mu) =
/// -softplus(eta), (log(1 - mu))' = -mu; both second derivatives are
/// -mu (1 - mu), both third -mu (1 - mu)(1 - 2 mu).
fn logit_log_probabilities(eta: f64) -> (LogJet, LogJet) {
    let (mu, one_minus, v) = logistic(eta);
    let d3 = -v * (one_minus - mu);
    ([-softplus(-eta), one_minus, -v, d3], [-softplus(eta), -mu, -v, d3])
}

/// log Phi(x) with its derivatives lambda, -C, -C' (lambda the Mills ratio
/// phi / Phi, C = lambda (x + lambda)). Below x = -4, from the continued
/// fraction lambda = t + q, q = 1 / (t + r), r = 2 / (t + s),
/// s = 3 / (t + ...), t = -x: there 1 - C = q (r - q) and C' =
/// C (r - s) r q, where the direct C' = lambda (1 - C) - C (x + lambda)
/// would lose four digits at x = -30 to cancellation.
fn probit_log_jet(x: f64) -> LogJet {
    if x > -4.0 {
        let (log_cdf, lambda, c) = log_ndtr_mills_curvature(x);
        let dc = lambda * (1.0 - c) - c * (x + lambda);
        return [log_cdf, lambda, -c, -dc];
    }
    let t = -x;
    // 160 levels leave a truncation error far below one ulp for t >= 4
    // (as `bms::numerics::probit`'s `mills_gap`).
    let mut tail = t;
    for k in (4..=160).rev() {
        tail = t + k as f64 / tail;
    }
    let s = 3.0 / tail;
    let r = 2.0 / (t + s);
    let q = 1.0 / (t + r);
    let lambda = t + q;
    let c = lambda * q;
    let dc = c * (r - s) * r * q;
    let log_cdf = -0.5 * t * t - LN_SQRT_2PI - lambda.ln();
    [log_cdf, lambda, -c, -dc]
}

/// b = u / (e^u - 1) and c = 1 - b for u >= 0, each without
/// cancellation: c by its series below u = 0.1, where 1 - b cancels (the
/// truncation there is under 1e-16 relative), b directly above, where it
/// may be far below an ulp of 1.
fn bernoulli_pair(u: f64) -> (f64, f64) {
    if u < 0.1 {
        let u2 = u * u;
        let even = u2 * (1.0 / 12.0 - u2 * (1.0 / 720.0 - u2 * (1.0 / 30_240.0 - u2 / 1_209_600.0)));
        let c = 0.5 * u - even;
        return (1.0 - c, c);
    }
    let b = u / u.exp_m1();
    (b, 1.0 - b)
}

/// log(1 - e^-u) for u > 0 (Maechler's log1mexp), and eta + log((1 -
/// e^-u) / u) for u below 1e-5, where u = e^eta may underflow.
fn log1mexp(u: f64, eta: f64) -> f64 {
    if u < 1e-5 {
        eta - 0.5 * u + u * u / 24.0
    } else if u <= LN_2 {
        (-(-u).exp_m1()).ln()
    } else {
        (-(-u).exp()).ln_1p()
    }
}

/// Cloglog, with u = e^eta: log(1 - mu) = -u, each derivative -u; log mu
/// = log(1 - e^-u), whose derivative is b = u / (e^u - 1); with c = 1 - b
/// (cancellation-free), the second is b (c - u) and the third
/// b (c - u)^2 - b (b + u) c.
fn cloglog_log_probabilities(eta: f64) -> (LogJet, LogJet) {
    let u = eta.exp();
    let lower = [-u; 4];
    if u > 750.0 {
        // b = u e^-u has underflowed; log mu = -e^-u is 0 too.
        return ([0.0; 4], lower);
    }
    let (b, c) = bernoulli_pair(u);
    let d2 = b * (c - u);
    let d3 = d2 * (c - u) - b * (b + u) * c;
    ([log1mexp(u, eta), b, d2, d3], lower)
}

/// Phi^-1(p) by Acklam's rational approximation and one Halley step on
/// Phi (relative error near 1e-15): only the families' starting values
/// use it.
fn probit_quantile(p: f64) -> f64 {
    if !(p > 0.0 && p < 1.0) {
        return match p {
            0.0 => f64::NEG_INFINITY,
            1.0 => f64::INFINITY,
            _ => f64::NAN,
        };
    }
    let x = acklam(p.min(1.0 - p));
    let x = if p > 0.5 { -x } else { x };
    let e = crate::bms::numerics::probit::norm_cdf(x) - p;
    let u = e / crate::bms::numerics::probit::norm_pdf(x);
    x - u / (1.0 + x * u / 2.0)
}

/// Acklam's approximation to Phi^-1(p) for p <= 1/2 (relative error
/// 1.15e-9).
fn acklam(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let poly = |c: &[f64], x: f64| c.iter().fold(0.0, |acc, k| acc * x + k);
    if p < 0.02425 {
        let q = (-2.0 * p.ln()).sqrt();
        return poly(&C, q) / (poly(&D, q) * q + 1.0);
    }
    let q = p - 0.5;
    let r = q * q;
    poly(&A, r) * q / (poly(&B, r) * r + 1.0)
}
