//! A GAM as mgcv's `gam(formula, family, method = "REML")` fits it: the
//! formula on named columns ([`Gam::setup`]: mgcv's terms, model matrix
//! and penalties), its REML fit on any backend ([`GamModel::fit_on`]) and
//! what mgcv reports of it ([`GamFit`]).
//!
//! The scale. For binomial and Poisson phi = 1 and the fit is one REML
//! solve. For Gaussian and Gamma mgcv minimises its REML criterion over
//! (log sp, log phi) jointly (Wood 2011). Here that is a profile, which
//! leaves the REML solver as it is: at each phi the rows are scaled by
//! 1 / phi (a [`ScaleCell`] shared with the objective, so a GPU objective
//! built once serves every phi) and the existing REML solve minimises over
//! log lambda; the outer loop moves log phi. With mgcv's sp = phi lambda
//! and D_p the penalised deviance, mgcv's criterion is
//!
//! ```text
//! R(sp, phi) = D_p / (2 phi) - ls(phi) + log|X'WX + S_sp| / 2 - log|S_sp|_+ / 2 - Mp log(2 pi phi) / 2
//!            = V(log lambda; phi) - ls(phi) - Mp log(2 pi) / 2
//! ```
//!
//! (V matfree's score on the scaled rows, ls the saturated log-likelihood,
//! Mp the penalty's null-space dimension). At fixed sp, beta_hat does not
//! depend on phi, so by the envelope theorem the profile's derivative is
//! explicit: h(log phi) = -D_p / (2 phi) - phi ls'(phi) - Mp / 2. The
//! outer loop solves h = 0: a first step to the root at fixed sp (for the
//! Gaussian phi = D_p / (n - Mp)), then secant steps on h; each REML solve
//! starts at the previous sp, so beta_hat is already its optimum there.
//! It stops at |h| <= `scale_tol` (default 1e-9, in the units of dV/drho:
//! an edf), where log phi is within 1e-9 / R'' of its optimum, or where
//! the next step would move log phi by at most `SCALE_STEP_TOL` (1e-9):
//! the REML solves' own tolerances leave h a noise of about 1e-7.
//!
//! What mgcv reports as the scale is not that optimum but Fletcher's
//! estimate (`gam.control(scale.est = "fletcher")`, its default), and its
//! `Vp` and `Ve` are scaled by it: [`GamFit::scale`] and the covariances
//! follow mgcv, [`GamFit::reml_scale`] is the REML optimum (mgcv's
//! `reml.scale`). For the Gaussian family with the identity link the two
//! are equal at the optimum (RSS / (n - edf) = D_p / (n - Mp) there).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use matfree_solvers::observer::Observer;
use matfree_solvers::reml::{reml_observed, RemlFit, RemlOptions, RemlReport};
use matfree_solvers::stats::FitStatistics;
use matfree_solvers::{CpuBackend, Objective, PcgKernels, Penalty};

use super::formula::Formula;
use super::setup::{build_terms, offsets, prior_weights, response, ModelTerm, Table};
use super::term::bind_terms;
use super::{Column, Distribution, Family, GlmData, GlmRows, Parametric, Term};
use crate::row_objective::RowEvaluator;
use crate::{Designs, Error, Layout, Result, RowHessian, RowObjective};

/// The scale phi the rows are divided by, shared between a model and the
/// objectives built from it (so that one objective, uploaded once, serves
/// every phi of the profile).
#[derive(Debug)]
pub struct ScaleCell(AtomicU64);

impl ScaleCell {
    /// A cell holding `phi`.
    pub fn new(phi: f64) -> Self {
        Self(AtomicU64::new(phi.to_bits()))
    }
    /// The current phi.
    pub fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }
    /// Set phi: every objective sharing the cell divides its rows by it
    /// from its next evaluation on.
    pub fn set(&self, phi: f64) {
        self.0.store(phi.to_bits(), Ordering::Relaxed);
    }
}

/// The profile over log phi also stops where its next step would move
/// log phi by at most this (phi then known to 1e-9 of itself): each REML
/// solve ends within its own tolerances, which leave |h| a noise of about
/// 1e-7 edf as log phi moves by 1e-10 (on 2,000 Gamma rows, seed 29 of
/// `validate_gam`, the secant steps wandered by 1e-10 for 25 solves while h
/// stayed between -1e-7 and 1e-6).
const SCALE_STEP_TOL: f64 = 1e-9;

/// A GLM's rows divided by the scale phi: the row value D_i / (2 phi).
#[derive(Clone, Debug)]
pub struct ScaledRows {
    rows: GlmRows,
    scale: Arc<ScaleCell>,
}

impl ScaledRows {
    /// The unscaled rows.
    pub fn rows(&self) -> &GlmRows {
        &self.rows
    }
    fn inv(&self) -> f64 {
        1.0 / self.scale.get()
    }
}

impl RowEvaluator for ScaledRows {
    fn row(&self, i: usize, theta: &[f64], grad: &mut [f64], hess: &mut [f64]) -> f64 {
        let c = self.inv();
        let v = self.rows.row(i, theta, grad, hess);
        (grad[0], hess[0]) = (c * grad[0], c * hess[0]);
        c * v
    }
    fn row_value(&self, i: usize, theta: &[f64]) -> f64 {
        self.inv() * self.rows.row_value(i, theta)
    }
    fn cheap_value(&self) -> bool {
        true
    }
    fn has_hessian_derivative(&self) -> bool {
        true
    }
    // 1 / phi > 0 keeps each row's convexity.
    fn convex(&self) -> bool {
        self.rows.convex()
    }
    fn row_hessian_derivative(&self, i: usize, theta: &[f64], dtheta: &[f64], out: &mut [f64]) {
        self.rows.row_hessian_derivative(i, theta, dtheta, out);
        out[0] *= self.inv();
    }
    fn row_hessian_derivatives(&self, i: usize, theta: &[f64], dthetas: &[f64], out: &mut [f64]) {
        self.rows.row_hessian_derivatives(i, theta, dthetas, out);
        let c = self.inv();
        out.iter_mut().for_each(|o| *o *= c);
    }
}

/// How a GAM is fitted.
#[derive(Clone, Debug, PartialEq)]
pub struct GamOptions {
    /// The REML solve at each scale (default: projected gradient 1e-9 edf,
    /// every other outer stop as tight, inner Newton to a decrement of
    /// 1e-20, beta within 1e-10 standard errors).
    pub reml: RemlOptions,
    /// The profile over log phi stops at |dR/dlog phi| <= this (default 1e-9).
    pub scale_tol: f64,
    /// Most REML solves of the profile over phi (default 30).
    pub max_scale_iter: usize,
}

impl Default for GamOptions {
    fn default() -> Self {
        Self {
            reml: RemlOptions::tight(),
            scale_tol: 1e-9,
            max_scale_iter: 30,
        }
    }
}

/// A model formula with its family: `Gam::new("y ~ x + s(z, bs = \"cr\")", family)`,
/// optionally with prior weights from a column ([`Gam::with_weights`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Gam {
    formula: Formula,
    family: Family,
    weights: Option<String>,
}

impl Gam {
    /// Parse `formula` (see [`Formula::parse`]).
    pub fn new(formula: &str, family: Family) -> Result<Self> {
        Ok(Self {
            formula: Formula::parse(formula)?,
            family,
            weights: None,
        })
    }

    /// Prior weights from the data's column `column` (mgcv's `weights = w`):
    /// row i's deviance counts w_i times and, for Gaussian and Gamma, its
    /// variance is phi / w_i. A column name, not a vector, so that the
    /// weights come with the data the model is set up on and are checked
    /// with it (finite, >= 0, errors naming the column and the row).
    pub fn with_weights(mut self, column: &str) -> Self {
        self.weights = Some(column.to_string());
        self
    }

    /// The prior weights' column, if any.
    pub fn weights(&self) -> Option<&str> {
        self.weights.as_deref()
    }

    /// Every column the model reads: the formula's, then the weights'.
    pub fn columns(&self) -> Vec<String> {
        let mut out = self.formula.columns();
        if let Some(w) = self.weights.iter().find(|w| !out.contains(w)) {
            out.push(w.clone());
        }
        out
    }

    /// The formula.
    pub fn formula(&self) -> &Formula {
        &self.formula
    }
    /// The family.
    pub fn family(&self) -> Family {
        self.family
    }

    /// The model on the named `columns` (numeric or factor): its terms,
    /// model matrix, penalties and rows (response, prior weights, the
    /// offsets' sum), as `gam.setup` builds them.
    pub fn setup(&self, columns: &[(&str, Column)]) -> Result<GamModel> {
        let table = Table::new(columns)?;
        let binomial = self.family.distribution() == Distribution::Binomial;
        let (y, trials) = response(&self.formula, &table, binomial)?;
        let n = y.len();
        let weights = match &self.weights {
            Some(w) => Some(prior_weights(&table, w, n)?),
            None => None,
        };
        let offset = offsets(&self.formula.offsets, &table, n)?;
        let rows = GlmRows::new(
            self.family,
            GlmData {
                y,
                trials,
                weights,
                offset,
            },
        )?;
        let mut terms = build_terms(&self.formula, &table)?;
        let columns: Vec<Vec<Column>> = terms.iter().map(|t| table.all(&t.columns)).collect::<Result<_>>()?;
        let designs = terms
            .iter_mut()
            .zip(&columns)
            .map(|(t, c)| t.term.design(c, n))
            .collect::<Result<Vec<_>>>()?;
        let bound: Vec<&Term> = terms.iter().map(|t| &t.term).collect();
        let (x, blocks) = bind_terms(&bound, &designs, n);
        drop(designs);
        let p = terms.last().map_or(0, |t| t.range.end);
        if p == 0 {
            return Err(Error::invalid("formula", "no terms", "a model needs a coefficient"));
        }
        let penalty = Penalty::new(p, blocks)?;
        Ok(GamModel {
            family: self.family,
            null_space_dim: p - penalty.rank(),
            designs: Arc::new(Designs::single(n, p, x)?),
            layout: Layout::glm(p)?,
            terms,
            offsets: self.formula.offsets.clone(),
            penalty,
            rows,
            scale: Arc::new(ScaleCell::new(1.0)),
        })
    }

    /// Set up on `columns` and fit by REML on the CPU.
    pub fn fit(&self, columns: &[(&str, Column)], opts: &GamOptions) -> Result<GamFit> {
        let model = self.setup(columns)?;
        let objective = model.objective()?;
        model.fit_on(&CpuBackend::new(), &objective, opts)
    }
}

/// A model set up on its data: terms, design, penalties and rows.
#[derive(Debug)]
pub struct GamModel {
    family: Family,
    terms: Vec<ModelTerm>,
    offsets: Vec<String>,
    designs: Arc<Designs>,
    /// One linear predictor over the design (r = 1).
    layout: Layout,
    penalty: Penalty,
    rows: GlmRows,
    null_space_dim: usize,
    scale: Arc<ScaleCell>,
}

impl GamModel {
    /// The terms, in coefficient order.
    pub fn terms(&self) -> &[ModelTerm] {
        &self.terms
    }
    /// The model matrix (one design, n x p).
    pub fn designs(&self) -> &Arc<Designs> {
        &self.designs
    }
    /// The penalties at their coefficients, mgcv's sp order.
    pub fn penalty(&self) -> &Penalty {
        &self.penalty
    }
    /// The offsets' columns (`offset(name)` in the formula), in order.
    pub fn offsets(&self) -> &[String] {
        &self.offsets
    }
    /// The rows (response, trials, prior weights, offsets).
    pub fn rows(&self) -> &GlmRows {
        &self.rows
    }
    /// The dimension of the penalty's null space, mgcv's Mp.
    pub fn null_space_dim(&self) -> usize {
        self.null_space_dim
    }
    /// The scale the objectives built from the model divide their rows by
    /// ([`GamModel::fit_on`] sets it; an objective of one's own over the
    /// model's rows shares it to be fitted there).
    pub fn scale_cell(&self) -> &Arc<ScaleCell> {
        &self.scale
    }

    /// The CPU objective: the rows over the model matrix, divided by the
    /// model's scale. On a GPU, `GamModel::device_objective` evaluates the
    /// rows there (or wrap this one, `cuda::DeviceRowObjective::from_host`,
    /// to upload the host's rows each evaluation); [`GamModel::fit_on`]
    /// needs an objective built by the model, which reads the scale it sets.
    pub fn objective(&self) -> Result<RowObjective<ScaledRows>> {
        let rows = ScaledRows {
            rows: self.rows.clone(),
            scale: self.scale.clone(),
        };
        RowObjective::new(self.layout.clone(), self.designs.clone(), rows)
    }

    /// The REML fit on `backend` with `objective` (from
    /// [`GamModel::objective`] or `GamModel::device_objective`), the scale estimated
    /// for Gaussian and Gamma (see the module docs).
    pub fn fit_on<B: PcgKernels>(
        &self,
        backend: &B,
        objective: &dyn Objective<B>,
        opts: &GamOptions,
    ) -> Result<GamFit> {
        self.fit_observed(backend, objective, &(), opts)
    }

    /// [`GamModel::fit_on`], telling `observer` of every REML solve's
    /// progress (and stopping where it asks: `Interrupted`).
    pub fn fit_observed<B: PcgKernels>(
        &self,
        backend: &B,
        objective: &dyn Objective<B>,
        observer: &dyn Observer,
        opts: &GamOptions,
    ) -> Result<GamFit> {
        if !(opts.scale_tol.is_finite() && opts.scale_tol > 0.0) {
            return Err(Error::invalid("scale_tol", opts.scale_tol, "must be finite and > 0"));
        }
        let beta0 = self.start();
        let profile = match self.family.has_scale() {
            false => {
                self.scale.set(1.0);
                let fit = reml_observed(backend, objective, &self.penalty, None, &beta0, &opts.reml, observer)?;
                Profile {
                    fit,
                    phi: 1.0,
                    steps: 0,
                    gradient: 0.0,
                }
            }
            true => self.profile(backend, objective, observer, &beta0, opts)?,
        };
        self.report(objective, profile)
    }

    /// beta0: the intercept at the link of R's starting mean, the rest 0
    /// (inside every family's domain where the intercept is in the model).
    fn start(&self) -> Vec<f64> {
        let mut beta = vec![0.0; self.designs.widths()[0]];
        if let Some(t) = self
            .terms
            .iter()
            .find(|t| t.term == Term::Parametric(Parametric::Intercept))
        {
            beta[t.range.start] = self.rows.mean_start_theta();
        }
        beta
    }

    /// The profile over log phi (module docs): REML at each phi, the
    /// explicit derivative h, a root step at fixed sp, then secant steps.
    fn profile<B: PcgKernels>(
        &self,
        backend: &B,
        objective: &dyn Objective<B>,
        observer: &dyn Observer,
        beta0: &[f64],
        opts: &GamOptions,
    ) -> Result<Profile> {
        let theta: Vec<f64> = self.linear_predictor(beta0);
        let mut u = (self.rows.deviance(&theta)? / self.rows.n() as f64).max(1e-300).ln();
        let (mut rho0, mut beta) = (None::<Vec<f64>>, beta0.to_vec());
        let mut last: Option<(f64, f64)> = None;
        for steps in 1..=opts.max_scale_iter {
            let phi = u.exp();
            self.scale.set(phi);
            let fit = reml_observed(
                backend,
                objective,
                &self.penalty,
                rho0.as_deref(),
                &beta,
                &opts.reml,
                observer,
            )?;
            let dp = 2.0 * phi * fit.laml.objective;
            let h = self.scale_gradient(dp, u);
            if h.abs() <= opts.scale_tol {
                return Ok(Profile {
                    fit,
                    phi,
                    steps,
                    gradient: h,
                });
            }
            let root = self.root_at_fixed_sp(dp, u)?;
            let next = match last {
                Some((u1, h1)) if (h - h1) * (u - u1) > 0.0 => u - h * (u - u1) / (h - h1),
                _ => root,
            };
            last = Some((u, h));
            // sp = phi lambda held: beta_hat is the optimum at the next phi too.
            let next = u + (next - u).clamp(-2.0, 2.0);
            if (next - u).abs() <= SCALE_STEP_TOL {
                return Ok(Profile {
                    fit,
                    phi,
                    steps,
                    gradient: h,
                });
            }
            rho0 = Some(fit.lambda.iter().map(|l| l.ln() + u - next).collect());
            beta = fit.laml.beta;
            u = next;
        }
        Err(Error::invalid(
            "max_scale_iter",
            opts.max_scale_iter,
            "the REML profile over the scale did not converge within it",
        ))
    }

    /// dR/dlog phi at fixed sp: -D_p / (2 phi) - phi ls'(phi) - Mp / 2.
    fn scale_gradient(&self, dp: f64, u: f64) -> f64 {
        let phi = u.exp();
        -dp / (2.0 * phi) - phi * self.rows.saturated_loglik(phi)[1] - self.null_space_dim as f64 / 2.0
    }

    /// The log phi where [`Self::scale_gradient`] is 0 at fixed D_p
    /// (Newton in log phi; R is convex in log phi at fixed sp).
    fn root_at_fixed_sp(&self, dp: f64, mut u: f64) -> Result<f64> {
        for _ in 0..100 {
            let phi = u.exp();
            let ls = self.rows.saturated_loglik(phi);
            let h = -dp / (2.0 * phi) - phi * ls[1] - self.null_space_dim as f64 / 2.0;
            let dh = dp / (2.0 * phi) - phi * ls[1] - phi * phi * ls[2];
            let step = (h / dh).clamp(-2.0, 2.0);
            u -= step;
            if step.abs() <= 1e-14 * u.abs().max(1.0) {
                return Ok(u);
            }
        }
        Err(Error::invalid(
            "scale",
            u.exp(),
            "the scale's root at fixed sp was not found",
        ))
    }

    /// X beta (in parallel).
    pub(crate) fn linear_predictor(&self, beta: &[f64]) -> Vec<f64> {
        crate::row_hessian::linear_predictors(&self.layout, &self.designs, beta)
    }

    /// What mgcv reports of the profile's last fit.
    /// The deviances come from `objective` (on the device where the rows
    /// are: two value passes instead of passes over X on the host); X beta
    /// is formed on the host only where the expected information or the
    /// scale needs it.
    fn report<B: PcgKernels>(&self, objective: &dyn Objective<B>, profile: Profile) -> Result<GamFit> {
        let Profile {
            fit,
            phi,
            steps,
            gradient,
        } = profile;
        let beta = fit.laml.beta.clone();
        let p = beta.len();
        let deviance = self.deviance_at(objective, &beta, phi)?;
        let null_deviance = self.null_deviance(objective, phi)?;
        let theta = match self.family.is_canonical() && !self.family.has_scale() {
            true => None,
            false => Some(self.linear_predictor(&beta)),
        };
        let expected = match &theta {
            Some(theta) => self.expected_statistics(theta, phi, &fit.lambda)?,
            None => None,
        };
        let (stats, h) = match &expected {
            Some((stats, h)) => (stats, h),
            None => (&fit.statistics, &fit.laml.hessian),
        };
        let v = &stats.covariance;
        let edf: Vec<f64> = (0..p)
            .map(|j| (0..p).map(|k| v[j * p + k] * h[k * p + j]).sum())
            .collect();
        let edf_total: f64 = edf.iter().sum();
        let scale = match &theta {
            Some(theta) if self.family.has_scale() => self.fletcher_scale(theta, edf_total)?,
            _ => 1.0,
        };
        // Vp and Ve are phi (X'WX + S)^-1 (...): mgcv's at its scale.
        let rescale = |m: &[f64]| m.iter().map(|v| v * scale / phi).collect();
        let mp = self.null_space_dim as f64;
        let score = fit.laml.value - self.rows.saturated_loglik(phi)[0] - mp * (2.0 * std::f64::consts::PI).ln() / 2.0;
        Ok(GamFit {
            names: self.terms.iter().flat_map(ModelTerm::coefficient_names).collect(),
            terms: self.terms.clone(),
            offsets: self.offsets.clone(),
            family: self.family,
            sp: fit.lambda.iter().map(|l| l * phi).collect(),
            edf_total,
            edf,
            coefficients: beta,
            vp: rescale(&stats.covariance),
            ve: rescale(&stats.frequentist_covariance),
            scale,
            reml_scale: phi,
            reml_score: score,
            deviance,
            null_deviance,
            n: self.rows.n(),
            converged: fit.report.converged,
            scale_steps: steps,
            scale_gradient: gradient,
            report: fit.report,
            notes: Vec::new(),
        })
    }

    /// For a non-canonical link, the statistics from the expected
    /// information X'W X / phi (W the Fisher weights) with that Hessian:
    /// mgcv's `Vp` and `edf` use it, while its REML criterion uses the
    /// observed one. `None` for a canonical link, where the two are equal.
    fn expected_statistics(
        &self,
        theta: &[f64],
        phi: f64,
        lambda: &[f64],
    ) -> Result<Option<(FitStatistics, Vec<f64>)>> {
        if self.family.is_canonical() {
            return Ok(None);
        }
        let h = self.expected_information(theta, phi)?;
        let stats = FitStatistics::new(&CpuBackend::new(), &h, &self.penalty, lambda)?;
        Ok(Some((stats, h)))
    }

    /// X^T W X / phi at the linear predictors theta (offsets not included),
    /// W the family's Fisher weights, row-major p x p.
    pub(crate) fn expected_information(&self, theta: &[f64], phi: f64) -> Result<Vec<f64>> {
        let r = &self.rows;
        let w: Vec<f64> = (0..r.n())
            .map(|i| {
                self.family
                    .fisher_weight(r.trials()[i], r.weights()[i], theta[i] + r.offset()[i])
                    / phi
            })
            .collect();
        // The rows' Hessians are the weights: X^T W X is their dense pull-back.
        Ok(RowHessian::new(self.layout.clone(), self.designs.clone(), w)?.dense_host())
    }

    /// mgcv's scale estimate (Fletcher 2012, `gam.fit3`): the Pearson
    /// statistic over n - edf, divided by 1 + mean(V'(mu) (y - mu) / V(mu))
    /// (that mean kept above -0.9).
    fn fletcher_scale(&self, theta: &[f64], edf_total: f64) -> Result<f64> {
        let (f, n) = (&self.family, self.rows.n() as f64);
        let mu = self.rows.mu(theta);
        let s_bar = mu
            .iter()
            .zip(self.rows.y())
            .map(|(m, y)| f.variance_derivative(*m) * (y - m) / f.variance(*m))
            .sum::<f64>()
            / n;
        Ok(self.rows.pearson(theta)? / (n - edf_total) / (1.0 + s_bar.max(-0.9)))
    }

    /// mgcv's null deviance: the deviance at the weighted mean response
    /// (`gam.fit3`'s `wtdmu`); with offsets, that of the intercept-only
    /// model refitted with them (mgcv's `glm(y ~ offset(o))`); without an
    /// intercept, at eta = the offsets.
    fn null_deviance<B: PcgKernels>(&self, objective: &dyn Objective<B>, phi: f64) -> Result<f64> {
        let intercept = self
            .terms
            .iter()
            .find(|t| t.term == Term::Parametric(Parametric::Intercept));
        let mut beta = vec![0.0; objective.dim()];
        let Some(intercept) = intercept else {
            return self.deviance_at(objective, &beta, phi);
        };
        let r = &self.rows;
        let sum = |v: &[f64]| v.iter().zip(r.weights()).map(|(a, w)| a * w).sum::<f64>();
        let c = self.family.link().linkfun(sum(r.y()) / sum(r.trials()));
        if !self.offsets.is_empty() {
            return self.intercept_only_deviance(c - sum(r.offset()) / sum(&vec![1.0; r.n()]));
        }
        // The intercept's column is ones: theta = c on every row.
        beta[intercept.range.start] = c;
        self.deviance_at(objective, &beta, phi)
    }

    /// The deviance at beta, from the objective's value (the rows' sum of
    /// half deviances over phi).
    fn deviance_at<B: PcgKernels>(&self, objective: &dyn Objective<B>, beta: &[f64], phi: f64) -> Result<f64> {
        match objective.value(beta)? {
            Some(v) if v.is_finite() => Ok(2.0 * phi * v),
            v => Err(Error::invalid(
                "deviance",
                v.unwrap_or(f64::NAN),
                "the rows' value at the fitted or null beta must be finite",
            )),
        }
    }

    /// The deviance of theta = c (eta = c + offset) at its minimum over c:
    /// Fisher scoring from `c`, halving steps that raise the deviance, to
    /// a step of 1e-12 (the deviance is flat to ~1e-24 there).
    fn intercept_only_deviance(&self, mut c: f64) -> Result<f64> {
        let r = &self.rows;
        let deviance = |c: f64| r.constant_deviance(c);
        let mut d = deviance(c);
        for _ in 0..200 {
            let [g, h] = r.constant_score(c);
            let mut step = -g / h;
            // A NaN deviance (outside the family's domain) counts as a rise.
            while deviance(c + step).partial_cmp(&d).is_none_or(|o| o.is_gt()) && step.abs() > 1e-14 * c.abs().max(1.0)
            {
                step /= 2.0;
            }
            if !step.is_finite() || step.abs() <= 1e-12 * c.abs().max(1.0) {
                return Ok(d);
            }
            c += step;
            d = deviance(c);
        }
        Err(Error::invalid(
            "null deviance",
            c,
            "the intercept-only fit with the offsets did not converge in 200 steps",
        ))
    }
}

/// The REML fit at the scale the profile ended at.
struct Profile {
    fit: RemlFit,
    phi: f64,
    steps: usize,
    gradient: f64,
}

/// The scale of a prediction (mgcv's `type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PredictionType {
    /// The linear predictor eta.
    Link,
    /// The mean mu = g^-1(eta).
    Response,
}

/// Predictions and their standard errors (mgcv's `fit`, `se.fit`).
#[derive(Clone, Debug, PartialEq)]
pub struct Prediction {
    /// One value a row.
    pub fit: Vec<f64>,
    /// Its standard error.
    pub se: Vec<f64>,
}

/// A fitted GAM, with what mgcv's `gam` object holds of it.
#[derive(Clone, Debug)]
pub struct GamFit {
    /// The terms (to rebuild the columns at new data), with their ranges.
    pub terms: Vec<ModelTerm>,
    /// The offsets' columns (`offset(name)`): a prediction adds them.
    pub offsets: Vec<String>,
    /// The family.
    pub family: Family,
    /// The coefficients' names, mgcv's: `(Intercept)`, `x`, `fb`, `s(x).1`, ...
    pub names: Vec<String>,
    /// The coefficients.
    pub coefficients: Vec<f64>,
    /// The Bayesian covariance (mgcv's `Vp`), row-major p x p.
    pub vp: Vec<f64>,
    /// The frequentist covariance (mgcv's `Ve`), row-major p x p.
    pub ve: Vec<f64>,
    /// The effective degrees of freedom per coefficient (mgcv's `edf`).
    pub edf: Vec<f64>,
    /// Their sum.
    pub edf_total: f64,
    /// The smoothing parameters, mgcv's `sp` (one a penalty, in order).
    pub sp: Vec<f64>,
    /// The scale as mgcv reports it (its `scale`, `sig2`: Fletcher's
    /// estimate at the fit; 1 for binomial and Poisson).
    pub scale: f64,
    /// The scale that maximises the REML criterion (mgcv's `reml.scale`).
    pub reml_scale: f64,
    /// The REML score in mgcv's convention (its `gcv.ubre`).
    pub reml_score: f64,
    /// The deviance.
    pub deviance: f64,
    /// The null deviance (as mgcv computes it).
    pub null_deviance: f64,
    /// The number of rows.
    pub n: usize,
    /// Whether the (last) REML solve converged.
    pub converged: bool,
    /// REML solves of the profile over the scale (0 where phi is fixed).
    pub scale_steps: usize,
    /// dR/dlog phi where the profile stopped (0 where phi is fixed).
    pub scale_gradient: f64,
    /// The last REML solve's report.
    pub report: RemlReport,
    /// What the fit did that its user should know and no other field says
    /// (a GPU fit whose rows stayed on the host, say); not saved.
    pub notes: Vec<String>,
}

impl GamFit {
    /// Standard errors, sqrt diag Vp.
    pub fn standard_errors(&self) -> Vec<f64> {
        let p = self.coefficients.len();
        (0..p).map(|j| self.vp[j * p + j].sqrt()).collect()
    }

    /// The edf of each smooth term, with its label (mgcv's per-smooth edf,
    /// the sum over its coefficients).
    pub fn smooth_edf(&self) -> Vec<(String, f64)> {
        self.terms
            .iter()
            .filter(|t| matches!(t.term, Term::Smooth(_)))
            .map(|t| (t.label(), self.edf[t.range.clone()].iter().sum()))
            .collect()
    }

    /// mgcv's `predict.gam` at new data (named columns, as the fit took
    /// them): each row's linear predictor (the formula's offsets added, so
    /// the new data must hold their columns, as mgcv's must) and, with
    /// `type` response, its mean, with standard errors from Vp (sqrt of
    /// x Vp x^T on the link scale; times |dmu/deta| on the response scale).
    pub fn predict(&self, columns: &[(&str, Column)], kind: PredictionType) -> Result<Prediction> {
        let n = columns.first().map_or(0, |(_, c)| c.len());
        let table = Table::new(columns)?;
        let picked = self
            .terms
            .iter()
            .map(|t| Ok((&t.term, table.all(&t.columns)?)))
            .collect::<Result<Vec<_>>>()?;
        let terms: Vec<(&Term, &[Column])> = picked.iter().map(|(t, c)| (*t, c.as_slice())).collect();
        let (x, _) = crate::gam::model_matrix(&terms, n)?;
        let offset = offsets(&self.offsets, &table, n)?.unwrap_or_else(|| vec![0.0; n]);
        let p = self.coefficients.len();
        let (mut fit, mut se) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for (xi, o) in x.chunks_exact(p).zip(offset) {
            let eta: f64 = o + xi.iter().zip(&self.coefficients).map(|(a, b)| a * b).sum::<f64>();
            let var: f64 = (0..p)
                .map(|j| xi[j] * (0..p).map(|k| self.vp[j * p + k] * xi[k]).sum::<f64>())
                .sum();
            let (value, slope) = match kind {
                PredictionType::Link => (eta, 1.0),
                PredictionType::Response => {
                    let d = self.family.link().mu_derivatives(eta);
                    (d[0], d[1].abs())
                }
            };
            fit.push(value);
            se.push(slope * var.max(0.0).sqrt());
        }
        Ok(Prediction { fit, se })
    }

    /// The proportion of the null deviance explained.
    pub fn deviance_explained(&self) -> f64 {
        (self.null_deviance - self.deviance) / self.null_deviance
    }
}
