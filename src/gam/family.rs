//! GLM families as row evaluators: binomial (successes of trials), Poisson,
//! Gaussian and Gamma, each with any valid [`Link`], prior weights and
//! offsets. A family is a small object (statsmodels' design): its variance,
//! deviance, saturated log-likelihood and the row's negative
//! log-likelihood with three derivatives in eta; [`GlmRows`] makes the
//! rows of one data set a [`RowEvaluator`] with r = 1, so that
//! [`crate::RowObjective`] fits it by Newton or REML on the CPU, and
//! `cuda::DeviceRowObjective` on a GPU (over `gam::DeviceGlmRows`, the same
//! rows computed on the device).
//!
//! Row i's value is half its deviance, w_i d(y_i, mu_i) / 2: the negative
//! log-likelihood at phi = 1 less the saturated one, so it is 0 at a
//! perfect fit and does not depend on beta's constants. Its Hessian is the
//! observed one (for a non-canonical link it differs from the expected
//! information by (y - mu) terms), as mgcv's full Newton uses, and its
//! third derivative is exact, so REML's gradient is.
//!
//! The scale. Binomial and Poisson have phi = 1. For Gaussian and Gamma
//! the full negative log-likelihood is D(beta) / (2 phi) - ls(phi), D the
//! deviance (twice the rows' sum) and ls mgcv's saturated log-likelihood
//! (`fix.family.ls`, prior weights dividing the scale):
//! [`GlmRows::neglog_scale`] gives it with two derivatives in phi, and
//! [`GlmRows::dispersion`] the Pearson estimate R's `summary.glm` reports.
//! REML with the scale as a parameter (mgcv's `gam(method = "REML")` for
//! these families) is `gam::GamModel::fit_on`'s profile over log phi,
//! on these rows divided by phi.

use crate::gam::link::{Link, LogJet};
use crate::gam::special::{digamma, lchoose, lgamma, trigamma, xlogy};
use rayon::prelude::*;

use crate::row_hessian::reduce_chunks;
use crate::row_objective::RowEvaluator;
use crate::{Error, Result};

/// Rows a task of the rows' sums (deviance, Pearson, ls) takes.
const SUM_CHUNK: usize = 1 << 14;

/// The distribution of a GLM's response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Distribution {
    /// y successes of m trials, mean m mu, mu in (0, 1).
    Binomial,
    /// Counts, variance mu.
    Poisson,
    /// Normal, variance phi.
    Gaussian,
    /// Gamma, variance phi mu^2.
    Gamma,
}

impl Distribution {
    /// R's name for the family.
    pub fn name(self) -> &'static str {
        match self {
            Distribution::Binomial => "binomial",
            Distribution::Poisson => "poisson",
            Distribution::Gaussian => "gaussian",
            Distribution::Gamma => "Gamma",
        }
    }

    /// R's default link (the canonical one; Gamma's up to sign).
    pub fn canonical(self) -> Link {
        match self {
            Distribution::Binomial => Link::Logit,
            Distribution::Poisson => Link::Log,
            Distribution::Gaussian => Link::Identity,
            Distribution::Gamma => Link::Inverse,
        }
    }

    /// The links this family takes.
    pub fn links(self) -> &'static [Link] {
        match self {
            Distribution::Binomial => &[Link::Logit, Link::Probit, Link::Cloglog],
            Distribution::Poisson => &[Link::Log, Link::Identity],
            Distribution::Gaussian | Distribution::Gamma => &[Link::Identity, Link::Log, Link::Inverse],
        }
    }

    /// k in V(mu) = mu^k (0 Gaussian, 1 Poisson, 2 Gamma; binomial's
    /// variance mu (1 - mu) is no power).
    fn power(self) -> f64 {
        match self {
            Distribution::Gaussian => 0.0,
            Distribution::Poisson | Distribution::Binomial => 1.0,
            Distribution::Gamma => 2.0,
        }
    }
}

impl Distribution {
    /// Every distribution.
    pub const ALL: [Distribution; 4] = [
        Distribution::Binomial,
        Distribution::Poisson,
        Distribution::Gaussian,
        Distribution::Gamma,
    ];
}

impl std::str::FromStr for Distribution {
    type Err = Error;

    /// R's name (`binomial`, `poisson`, `gaussian`, `Gamma`; any case).
    fn from_str(name: &str) -> Result<Self> {
        let known = Self::ALL.map(Distribution::name);
        Self::ALL
            .into_iter()
            .find(|d| d.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| Error::invalid("family", name, format!("the families are {}", known.join(", "))))
    }
}

impl std::str::FromStr for Link {
    type Err = Error;

    /// R's name (`logit`, `probit`, `cloglog`, `log`, `identity`, `inverse`).
    fn from_str(name: &str) -> Result<Self> {
        let all = [
            Link::Logit,
            Link::Probit,
            Link::Cloglog,
            Link::Log,
            Link::Identity,
            Link::Inverse,
        ];
        all.into_iter().find(|l| l.name() == name).ok_or_else(|| {
            Error::invalid(
                "link",
                name,
                format!("the links are {}", all.map(Link::name).join(", ")),
            )
        })
    }
}

/// A distribution with a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Family {
    distribution: Distribution,
    link: Link,
}

impl Family {
    /// `distribution` with `link`: an error naming both unless the family
    /// takes that link ([`Distribution::links`]).
    pub fn new(distribution: Distribution, link: Link) -> Result<Self> {
        if !distribution.links().contains(&link) {
            let names: Vec<&str> = distribution.links().iter().map(|l| l.name()).collect();
            return Err(Error::invalid(
                "link",
                link.name(),
                format!(
                    "the {} family takes the links {}",
                    distribution.name(),
                    names.join(", ")
                ),
            ));
        }
        Ok(Self { distribution, link })
    }

    /// `distribution` with its canonical link.
    pub fn canonical(distribution: Distribution) -> Self {
        Self {
            distribution,
            link: distribution.canonical(),
        }
    }

    /// The distribution.
    pub fn distribution(&self) -> Distribution {
        self.distribution
    }
    /// The link.
    pub fn link(&self) -> Link {
        self.link
    }
    /// Whether the scale phi is a free parameter (Gaussian, Gamma).
    pub fn has_scale(&self) -> bool {
        matches!(self.distribution, Distribution::Gaussian | Distribution::Gamma)
    }

    /// R's variance function V(mu) (binomial's per trial).
    pub fn variance(&self, mu: f64) -> f64 {
        match self.distribution {
            Distribution::Binomial => mu * (1.0 - mu),
            d => mu.powf(d.power()),
        }
    }

    /// V'(mu), R's `dvar` (binomial's per trial).
    pub fn variance_derivative(&self, mu: f64) -> f64 {
        match self.distribution {
            Distribution::Binomial => 1.0 - 2.0 * mu,
            Distribution::Gaussian => 0.0,
            Distribution::Poisson => 1.0,
            Distribution::Gamma => 2.0 * mu,
        }
    }

    /// One row's expected information in eta at phi = 1, w m mu'^2 / V(mu)
    /// (the Fisher weight, which mgcv's `Vp` and `edf` use), m its trials.
    pub fn fisher_weight(&self, m: f64, w: f64, eta: f64) -> f64 {
        let d = self.link.mu_derivatives(eta);
        w * m * d[1] * d[1] / self.variance(d[0])
    }

    /// Whether the link is canonical, so that the observed information
    /// equals the expected one.
    pub fn is_canonical(&self) -> bool {
        self.link == self.distribution.canonical()
    }

    /// Whether each row's negative log-likelihood is convex in eta (at any
    /// y in range and weight >= 0): binomial with logit, probit or cloglog
    /// (log-concave distribution functions, for mu and for 1 - mu), Poisson
    /// with log (mu - y eta), Gaussian with identity, Gamma with log
    /// (y e^-eta + eta) or inverse (y eta - log eta). Other links are not
    /// claimed.
    pub fn is_convex(&self) -> bool {
        use Distribution::*;
        matches!(
            (self.distribution, self.link),
            (Binomial, Link::Logit | Link::Probit | Link::Cloglog)
                | (Poisson, Link::Log)
                | (Gaussian, Link::Identity)
                | (Gamma, Link::Log | Link::Inverse)
        )
    }

    /// One row's w d(y, mu) / 2 at eta (offset included), m its trials (1
    /// outside the binomial). Non-finite outside the link's domain
    /// (mu <= 0 for Poisson and Gamma, mu infinite).
    pub fn neglog(&self, y: f64, m: f64, w: f64, eta: f64) -> f64 {
        if w == 0.0 {
            return 0.0;
        }
        match self.distribution {
            Distribution::Binomial => {
                let (a, b) = self.link.log_probability_pair(eta);
                binomial_value(y, m, w, a, b)
            }
            _ => self.power_value(y, w, self.link.linkinv(eta), eta),
        }
    }

    /// [`Family::neglog`] and its first three derivatives in eta; the
    /// second is the observed information.
    pub fn neglog_jet(&self, y: f64, m: f64, w: f64, eta: f64) -> [f64; 4] {
        if w == 0.0 {
            return [0.0; 4];
        }
        match self.distribution {
            Distribution::Binomial => {
                let (a, b) = self.link.log_probabilities(eta);
                binomial_jet(y, m, w, &a, &b)
            }
            Distribution::Gaussian => {
                let dmu = self.link.mu_derivatives(eta);
                let [g, h, t] = gaussian_derivatives(y, w, &dmu);
                [self.power_value(y, w, dmu[0], eta), g, h, t]
            }
            d => {
                let (mu, q) = self.link.relative_mu_derivatives(eta);
                if !self.in_domain(mu) {
                    return [f64::NAN; 4];
                }
                let [g, h, t] = power_derivatives(d.power(), y, w, mu, &q);
                [self.power_value(y, w, mu, eta), g, h, t]
            }
        }
    }

    /// w d(y, mu) / 2 for the Poisson, Gaussian and Gamma families: the
    /// log link's log mu is eta itself, exact where mu is near overflow.
    fn power_value(&self, y: f64, w: f64, mu: f64, eta: f64) -> f64 {
        match self.distribution {
            Distribution::Gaussian => w * (y - mu) * (y - mu) / 2.0,
            _ if !self.in_domain(mu) => f64::NAN,
            Distribution::Poisson => w * (xlogy(y, y) - y * self.link.log_mu(eta) - (y - mu)),
            _ => {
                // (y - mu) / mu - log(y / mu): with log1p near y = mu, with
                // the link's log mu where y / mu is far from 1 (and 1 + r
                // would have lost y / mu's digits).
                let r = (y - mu) / mu;
                let log_ratio = if r.abs() < 0.5 {
                    r.ln_1p()
                } else {
                    y.ln() - self.link.log_mu(eta)
                };
                w * (r - log_ratio)
            }
        }
    }

    /// Whether a Poisson or Gamma mean is inside the domain: finite and
    /// positive, or 0 under the log link (where e^eta underflowed).
    fn in_domain(&self, mu: f64) -> bool {
        mu.is_finite() && (mu > 0.0 || (mu == 0.0 && self.link == Link::Log))
    }

    /// One row's Pearson term w (y - m mu)^2 / (m V(mu)).
    pub fn pearson(&self, y: f64, m: f64, w: f64, eta: f64) -> f64 {
        if w == 0.0 {
            return 0.0;
        }
        let mu = self.link.linkinv(eta);
        w * (y - m * mu) * (y - m * mu) / (m * self.variance(mu))
    }

    /// One row's deviance residual sign(y - m mu) sqrt(w d(y, mu)).
    pub fn deviance_residual(&self, y: f64, m: f64, w: f64, eta: f64) -> f64 {
        let d = (2.0 * self.neglog(y, m, w, eta)).max(0.0).sqrt();
        if y >= m * self.link.linkinv(eta) {
            d
        } else {
            -d
        }
    }

    /// One row's share of mgcv's saturated log-likelihood ls(phi) with its
    /// first two derivatives in phi (`fix.family.ls`; prior weights divide
    /// the scale; rows of weight 0 count for nothing).
    pub fn saturated_loglik(&self, y: f64, m: f64, w: f64, phi: f64) -> [f64; 3] {
        if w == 0.0 {
            return [0.0; 3];
        }
        match self.distribution {
            Distribution::Binomial => {
                let sat = xlogy(y, y / m) + xlogy(m - y, (m - y) / m);
                [w * (lchoose(m, y) + sat), 0.0, 0.0]
            }
            Distribution::Poisson => [w * (xlogy(y, y) - y - lgamma(y + 1.0)), 0.0, 0.0],
            Distribution::Gaussian => [
                -(2.0 * std::f64::consts::PI * phi).ln() / 2.0 + w.ln() / 2.0,
                -1.0 / (2.0 * phi),
                1.0 / (2.0 * phi * phi),
            ],
            Distribution::Gamma => gamma_saturated(y, w, phi),
        }
    }

    /// R's starting mean for the row (its family's `initialize`).
    pub fn mustart(&self, y: f64, m: f64, w: f64) -> f64 {
        match self.distribution {
            Distribution::Binomial => (w * y + 0.5) / (w * m + 1.0),
            Distribution::Poisson => y + 0.1,
            Distribution::Gaussian | Distribution::Gamma => y,
        }
    }

    /// Row i's response against the family's rule; `Ok(true)` where a
    /// count is not an integer (R warns and fits on).
    fn check_y(&self, i: usize, y: f64, m: f64) -> Result<bool> {
        let bad = |rule: String| Err(Error::invalid(format!("y[{i}]"), y, rule));
        let name = self.distribution.name();
        match self.distribution {
            _ if !y.is_finite() => bad("must be finite".into()),
            Distribution::Binomial if !(0.0..=m).contains(&y) => bad(format!("must be in [0, trials[{i}]] = [0, {m}]")),
            Distribution::Poisson if y < 0.0 => bad(format!("must be >= 0 for the {name} family")),
            Distribution::Gamma if y <= 0.0 => bad(format!("must be > 0 for the {name} family")),
            Distribution::Binomial | Distribution::Poisson => Ok(y.fract() != 0.0),
            _ => Ok(false),
        }
    }
}

/// y a + f b with a zero coefficient's term 0 whatever its factor (a log
/// probability may be -inf where the data make it irrelevant).
fn weighted(y: f64, a: f64, f: f64, b: f64) -> f64 {
    let term = |c: f64, x: f64| if c == 0.0 { 0.0 } else { c * x };
    term(y, a) + term(f, b)
}

/// w [y log(y / (m mu)) + (m - y) log((m - y) / (m (1 - mu)))] from
/// a = log mu, b = log(1 - mu).
fn binomial_value(y: f64, m: f64, w: f64, a: f64, b: f64) -> f64 {
    let sat = xlogy(y, y / m) + xlogy(m - y, (m - y) / m);
    w * (sat - weighted(y, a, m - y, b))
}

/// The binomial row and its derivatives, -w (y A^(k) + (m - y) B^(k)),
/// from the log-probability jets A = log mu, B = log(1 - mu).
fn binomial_jet(y: f64, m: f64, w: f64, a: &LogJet, b: &LogJet) -> [f64; 4] {
    let d = |k: usize| -w * weighted(y, a[k], m - y, b[k]);
    [binomial_value(y, m, w, a[0], b[0]), d(1), d(2), d(3)]
}

/// Gaussian (V = 1), any link, from mu's derivatives d: with e = y - mu,
/// g = -w e mu', H = w (mu'^2 - e mu''), T = w (3 mu' mu'' - e mu''').
fn gaussian_derivatives(y: f64, w: f64, d: &[f64; 4]) -> [f64; 3] {
    let e = y - d[0];
    [
        -w * e * d[1],
        w * (d[1] * d[1] - e * d[2]),
        w * (3.0 * d[1] * d[2] - e * d[3]),
    ]
}

/// V = mu^k (k >= 1), any link, in mu's relative derivatives q_j =
/// mu^(j) / mu (all 1 for the log link, so nothing overflows before mu
/// does and mu may underflow to 0): with e = y - mu and h = d theta /
/// d eta = mu' / V, g = -w e h, H = w (mu' h - e h'), T = w (mu'' h +
/// 2 mu' h' - e h''), each a factor mu^(1 - k) times a polynomial in mu,
/// e and the q_j.
fn power_derivatives(k: f64, y: f64, w: f64, mu: f64, q: &[f64; 3]) -> [f64; 3] {
    let [q1, q2, q3] = *q;
    let e = y - mu;
    let s = if k == 1.0 { 1.0 } else { mu.powf(1.0 - k) };
    // h, h' and h'' over mu^(1 - k).
    let h1 = q2 - k * q1 * q1;
    let h2 = q3 - 3.0 * k * q1 * q2 + k * (k + 1.0) * q1 * q1 * q1;
    // H and T grouped as mu (..) - y (..): terms that cancel exactly in
    // closed form (the identity link's at y = 0) then cancel in floating
    // point too.
    [
        -w * s * e * q1,
        w * s * (mu * (q1 * q1 + h1) - y * h1),
        w * s * (mu * (q1 * q2 + 2.0 * q1 * h1 + h2) - y * h2),
    ]
}

/// mgcv's Gamma ls with its two phi derivatives, for one row of weight
/// w > 0: s = phi / w, ls = -lgamma(1/s) - log(s)/s - 1/s - log y.
fn gamma_saturated(y: f64, w: f64, phi: f64) -> [f64; 3] {
    let s = phi / w;
    let (a, ls) = (1.0 / s, s.ln());
    let value = -lgamma(a) - ls / s - 1.0 / s - y.ln();
    let d1 = (digamma(a) + ls) / (s * s) / w;
    let d2 = (-trigamma(a) / s + (1.0 - 2.0 * ls - 2.0 * digamma(a))) / (s * s * s) / (w * w);
    [value, d1, d2]
}

/// A GLM's data: the response, and optionally prior weights (default 1),
/// offsets (default 0) and, for the binomial family, trials (default 1,
/// y then 0 or 1).
#[derive(Clone, Debug, Default)]
pub struct GlmData {
    /// The response: successes for the binomial family.
    pub y: Vec<f64>,
    /// Prior weights, finite and >= 0.
    pub weights: Option<Vec<f64>>,
    /// Offsets added to each row's eta, finite.
    pub offset: Option<Vec<f64>>,
    /// The binomial family's trials, finite and > 0.
    pub trials: Option<Vec<f64>>,
}

/// The rows of one GLM data set: a [`RowEvaluator`] in theta = eta less
/// the offset (r = 1), whose row value is half the row's deviance.
#[derive(Clone, Debug)]
pub struct GlmRows {
    family: Family,
    y: Vec<f64>,
    weights: Vec<f64>,
    offset: Vec<f64>,
    trials: Vec<f64>,
    notes: Vec<String>,
    /// [`GlmRows::mean_start_theta`], summed once with the checks.
    start_mean: f64,
    /// ls and its derivatives where they do not depend on phi (binomial,
    /// Poisson), summed once with the checks: the report asks for them.
    fixed_saturated: Option<[f64; 3]>,
}

impl GlmRows {
    /// Check `data` against `family` and keep it: errors name the field,
    /// the row, the value and the rule; a non-integer count (binomial
    /// successes or trials, Poisson y) is a note, as R's warning is.
    pub fn new(family: Family, data: GlmData) -> Result<Self> {
        let n = data.y.len();
        let column = |name: &str, v: Option<Vec<f64>>, default: f64| match v {
            None => Ok(vec![default; n]),
            Some(v) if v.len() == n => Ok(v),
            Some(v) => Err(Error::invalid(
                format!("{name}.len()"),
                v.len(),
                format!("must equal y.len() = {n}"),
            )),
        };
        if data.trials.is_some() && family.distribution() != Distribution::Binomial {
            let name = family.distribution().name();
            return Err(Error::invalid(
                "trials",
                "given",
                format!("apply to the binomial family only, not {name}"),
            ));
        }
        let rows = Self {
            family,
            weights: column("weights", data.weights, 1.0)?,
            offset: column("offset", data.offset, 0.0)?,
            trials: column("trials", data.trials, 1.0)?,
            y: data.y,
            notes: Vec::new(),
            start_mean: 0.0,
            fixed_saturated: None,
        };
        Ok(rows.checked()?.with_sums())
    }

    /// Rows `range` alone (a shard of checked rows: not checked again;
    /// the notes stay with the whole set).
    pub fn rows(&self, range: std::ops::Range<usize>) -> Result<Self> {
        if range.start > range.end || range.end > self.n() {
            let rule = format!("must be a range within 0..{}", self.n());
            return Err(Error::invalid("rows", format!("{range:?}"), rule));
        }
        let part = |v: &[f64]| v[range.clone()].to_vec();
        let rows = Self {
            family: self.family,
            y: part(&self.y),
            weights: part(&self.weights),
            offset: part(&self.offset),
            trials: part(&self.trials),
            notes: Vec::new(),
            start_mean: 0.0,
            fixed_saturated: None,
        };
        Ok(rows.with_sums())
    }

    /// With the sums kept from the rows ([`GlmRows::mean_start_theta`],
    /// and ls where it does not depend on phi).
    fn with_sums(mut self) -> Self {
        self.start_mean = self.start_mean_sum();
        if !self.family.has_scale() {
            self.fixed_saturated = Some(self.saturated_sum(1.0));
        }
        self
    }

    /// Every row against the rules; the notes for non-integer counts.
    fn checked(mut self) -> Result<Self> {
        let (mut fractional_y, mut fractional_m) = (Vec::new(), Vec::new());
        for i in 0..self.y.len() {
            let (w, o, m) = (self.weights[i], self.offset[i], self.trials[i]);
            if !(w.is_finite() && w >= 0.0) {
                return Err(Error::invalid(format!("weights[{i}]"), w, "must be finite and >= 0"));
            }
            if !o.is_finite() {
                return Err(Error::invalid(format!("offset[{i}]"), o, "must be finite"));
            }
            if !(m.is_finite() && m > 0.0) {
                return Err(Error::invalid(format!("trials[{i}]"), m, "must be finite and > 0"));
            }
            if m.fract() != 0.0 {
                fractional_m.push(i);
            }
            if self.family.check_y(i, self.y[i], m)? {
                fractional_y.push(i);
            }
        }
        let name = self.family.distribution().name();
        self.notes.extend(note("y", &self.y, &fractional_y, name));
        self.notes.extend(note("trials", &self.trials, &fractional_m, name));
        Ok(self)
    }

    /// The family.
    pub fn family(&self) -> Family {
        self.family
    }
    /// Number of rows.
    pub fn n(&self) -> usize {
        self.y.len()
    }
    /// The response.
    pub fn y(&self) -> &[f64] {
        &self.y
    }
    /// The prior weights.
    pub fn weights(&self) -> &[f64] {
        &self.weights
    }
    /// The offsets.
    pub fn offset(&self) -> &[f64] {
        &self.offset
    }
    /// The trials (all 1 outside the binomial family).
    pub fn trials(&self) -> &[f64] {
        &self.trials
    }
    /// What the checks noted (non-integer counts), one line a field.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Each row's theta at R's starting mean: g(mustart) less the offset.
    /// Regressing it on the design gives a starting beta inside the
    /// domain (as R's `glm.fit` does).
    pub fn start_theta(&self) -> Vec<f64> {
        let link = self.family.link();
        (0..self.n())
            .into_par_iter()
            .map(|i| link.linkfun(self.family.mustart(self.y[i], self.trials[i], self.weights[i])) - self.offset[i])
            .collect()
    }

    /// An error unless theta has one value a row.
    fn expect_n(&self, theta: &[f64]) -> Result<()> {
        match theta.len() == self.n() {
            true => Ok(()),
            false => Err(Error::invalid(
                "theta.len()",
                theta.len(),
                format!("must equal n = {}", self.n()),
            )),
        }
    }

    /// f(row, eta) summed over the rows, theta one value a row (chunks of
    /// rows in parallel, summed in chunk order: the same bits on any
    /// number of threads).
    fn sum(&self, theta: &[f64], f: impl Fn(usize, f64) -> f64 + Sync) -> Result<f64> {
        self.expect_n(theta)?;
        Ok(reduce_chunks(self.n(), 1, SUM_CHUNK, |rows, acc| {
            acc[0] += rows.map(|i| f(i, theta[i] + self.offset[i])).sum::<f64>();
        })[0])
    }

    /// The fitted means g^-1(theta + offset) (probabilities for the binomial).
    pub fn mu(&self, theta: &[f64]) -> Vec<f64> {
        let link = self.family.link();
        theta
            .iter()
            .zip(&self.offset)
            .map(|(t, o)| link.linkinv(t + o))
            .collect()
    }

    /// The mean of [`GlmRows::start_theta`]: the intercept's start.
    pub fn mean_start_theta(&self) -> f64 {
        self.start_mean
    }

    /// [`GlmRows::mean_start_theta`] summed without the vector (chunks in
    /// parallel, summed in chunk order).
    fn start_mean_sum(&self) -> f64 {
        let link = self.family.link();
        let sum = reduce_chunks(self.n(), 1, SUM_CHUNK, |rows, acc| {
            acc[0] += rows
                .map(|i| link.linkfun(self.family.mustart(self.y[i], self.trials[i], self.weights[i])) - self.offset[i])
                .sum::<f64>();
        })[0];
        sum / self.n() as f64
    }

    /// The deviance at theta = c on every row (eta = c + offset): the same
    /// bits as [`GlmRows::deviance`] of a constant vector, without it.
    pub fn constant_deviance(&self, c: f64) -> f64 {
        2.0 * reduce_chunks(self.n(), 1, SUM_CHUNK, |rows, acc| {
            acc[0] += rows.map(|i| self.row_at(i, c + self.offset[i])).sum::<f64>();
        })[0]
    }

    /// The score and Fisher information of the intercept-only model at
    /// theta = c: sum of dl/deta and of the Fisher weights.
    pub fn constant_score(&self, c: f64) -> [f64; 2] {
        let sums = reduce_chunks(self.n(), 2, SUM_CHUNK, |rows, acc| {
            for i in rows {
                acc[0] += self.jet(i, c)[1];
                acc[1] += self
                    .family
                    .fisher_weight(self.trials[i], self.weights[i], c + self.offset[i]);
            }
        });
        [sums[0], sums[1]]
    }

    /// The deviance, twice the rows' sum.
    pub fn deviance(&self, theta: &[f64]) -> Result<f64> {
        Ok(2.0 * self.sum(theta, |i, eta| self.row_at(i, eta))?)
    }

    /// The deviance residuals.
    pub fn deviance_residuals(&self, theta: &[f64]) -> Result<Vec<f64>> {
        self.expect_n(theta)?;
        let f = &self.family;
        let at = |i: usize| f.deviance_residual(self.y[i], self.trials[i], self.weights[i], theta[i] + self.offset[i]);
        Ok((0..self.n()).map(at).collect())
    }

    /// The Pearson statistic sum w (y - m mu)^2 / (m V(mu)).
    pub fn pearson(&self, theta: &[f64]) -> Result<f64> {
        let f = &self.family;
        self.sum(theta, |i, eta| {
            f.pearson(self.y[i], self.trials[i], self.weights[i], eta)
        })
    }

    /// `summary.glm`'s dispersion: Pearson / df_residual for Gaussian and
    /// Gamma, 1 for binomial and Poisson.
    pub fn dispersion(&self, theta: &[f64], df_residual: usize) -> Result<f64> {
        if !self.family.has_scale() {
            return Ok(1.0);
        }
        if df_residual == 0 {
            return Err(Error::invalid("df_residual", 0, "must be > 0 to estimate the scale"));
        }
        Ok(self.pearson(theta)? / df_residual as f64)
    }

    /// mgcv's saturated log-likelihood ls(phi) with its first two
    /// derivatives in phi (phi is 1 for binomial and Poisson, whose ls
    /// does not depend on it).
    pub fn saturated_loglik(&self, phi: f64) -> [f64; 3] {
        self.fixed_saturated.unwrap_or_else(|| self.saturated_sum(phi))
    }

    /// [`GlmRows::saturated_loglik`] summed over the rows.
    fn saturated_sum(&self, phi: f64) -> [f64; 3] {
        let sums = reduce_chunks(self.n(), 3, SUM_CHUNK, |rows, acc| {
            for i in rows {
                let row = self
                    .family
                    .saturated_loglik(self.y[i], self.trials[i], self.weights[i], phi);
                acc.iter_mut().zip(row).for_each(|(a, b)| *a += b);
            }
        });
        [sums[0], sums[1], sums[2]]
    }

    /// The full negative log-likelihood at theta and scale phi,
    /// D / (2 phi) - ls(phi), with its first two derivatives in phi: what
    /// an REML step that estimates the scale needs beside log|H / phi + S|.
    pub fn neglog_scale(&self, theta: &[f64], phi: f64) -> Result<[f64; 3]> {
        if !(phi.is_finite() && phi > 0.0) {
            return Err(Error::invalid("phi", phi, "must be finite and > 0"));
        }
        let d = self.deviance(theta)?;
        let ls = self.saturated_loglik(phi);
        Ok([
            d / (2.0 * phi) - ls[0],
            -d / (2.0 * phi * phi) - ls[1],
            d / (phi * phi * phi) - ls[2],
        ])
    }

    /// The log-likelihood at theta and phi, ls(phi) - D / (2 phi) (for
    /// AIC; R's `logLik` for binomial, Poisson and Gaussian, whose prior
    /// weight conventions mgcv shares).
    pub fn loglik(&self, theta: &[f64], phi: f64) -> Result<f64> {
        Ok(-self.neglog_scale(theta, phi)?[0])
    }

    /// Row i's value at eta.
    fn row_at(&self, i: usize, eta: f64) -> f64 {
        self.family.neglog(self.y[i], self.trials[i], self.weights[i], eta)
    }

    /// Row i's value and derivatives at theta.
    fn jet(&self, i: usize, theta: f64) -> [f64; 4] {
        let eta = theta + self.offset[i];
        self.family.neglog_jet(self.y[i], self.trials[i], self.weights[i], eta)
    }
}

/// One note for the rows `at` of `field` whose counts are not integers.
fn note(field: &str, values: &[f64], at: &[usize], family: &str) -> Option<String> {
    let first = *at.first()?;
    Some(format!(
        "{field}: {} non-integer count(s), the first {field}[{first}] = {}; the {family} family \
         expects integers (R warns the same) and the fit uses the values as given",
        at.len(),
        values[first]
    ))
}

impl RowEvaluator for GlmRows {
    fn row(&self, i: usize, theta: &[f64], grad: &mut [f64], hess: &mut [f64]) -> f64 {
        let [value, g, h, _] = self.jet(i, theta[0]);
        (grad[0], hess[0]) = (g, h);
        value
    }
    fn row_value(&self, i: usize, theta: &[f64]) -> f64 {
        self.row_at(i, theta[0] + self.offset[i])
    }
    fn cheap_value(&self) -> bool {
        true
    }
    fn has_hessian_derivative(&self) -> bool {
        true
    }
    fn row_hessian_derivative(&self, i: usize, theta: &[f64], dtheta: &[f64], out: &mut [f64]) {
        out[0] = self.jet(i, theta[0])[3] * dtheta[0];
    }
    fn row_hessian_derivatives(&self, i: usize, theta: &[f64], dthetas: &[f64], out: &mut [f64]) {
        let third = self.jet(i, theta[0])[3];
        out.iter_mut().zip(dthetas).for_each(|(o, d)| *o = third * d);
    }
    fn convex(&self) -> bool {
        self.family.is_convex()
    }
}
