//! A fit's mgcv summary: what [`summarize`] reads, built from the model
//! and its fit. The crossproduct X^T W X it needs is taken at the fit with
//! the family's Fisher weights (mgcv's working weights for a canonical
//! link), and passed as its symmetric square root (p x p), so nothing of
//! size n x p is copied; edf1 is mgcv's `2 edf - rowSums(F * t(F))` with
//! `F = Vp X^T W X / scale`.

use super::fit::{GamFit, GamModel};
use super::summary::{
    summarize, Criterion, DenseMatrix, GamSummary, ParametricTerm, ResponseFit, SmoothKind, SmoothTerm, SummaryInput,
};
use std::ops::Range;

use super::{Basis, ModelTerm, Parametric, Term};
use crate::{Error, Result};
use matfree_solvers::symmetric_eigen;

impl GamModel {
    /// mgcv's `summary.gam` of `fit` (a fit of this model); `formula` is
    /// printed as given.
    pub fn summary(&self, fit: &GamFit, formula: &str) -> Result<GamSummary> {
        summarize(&self.summary_input(fit, formula)?)
    }

    /// What the summary reads, from this model and its fit.
    pub fn summary_input(&self, fit: &GamFit, formula: &str) -> Result<SummaryInput> {
        let p = fit.coefficients.len();
        if p != self.designs().widths()[0] {
            let rule = format!("must be this model's {} coefficients", self.designs().widths()[0]);
            return Err(Error::invalid("fit.coefficients", p, rule));
        }
        let (xtwx, fitted) = self.weighted_crossproduct(&fit.coefficients)?;
        fit.summary_input_at(formula, &xtwx, Some(self.response(fitted)))
    }

    /// X^T W X at the fit's coefficients (Fisher weights, scale 1), what a
    /// saved fit keeps of the data for its summary.
    pub fn fit_crossproduct(&self, fit: &GamFit) -> Result<Vec<f64>> {
        Ok(self.weighted_crossproduct(&fit.coefficients)?.0)
    }

    /// X^T W X at beta (Fisher weights) and the fitted means.
    fn weighted_crossproduct(&self, beta: &[f64]) -> Result<(Vec<f64>, Vec<f64>)> {
        let theta = self.linear_predictor(beta);
        Ok((self.expected_information(&theta, 1.0)?, self.rows().mu(&theta)))
    }

    /// y, mu and the prior weights as mgcv's R-sq.(adj) reads them (a
    /// binomial's y as a proportion, its weights the trials').
    fn response(&self, fitted: Vec<f64>) -> ResponseFit {
        let r = self.rows();
        let n = r.n();
        let (y, prior_weights) = (0..n)
            .map(|i| {
                let m = r.trials()[i];
                (r.y()[i] / m, r.weights()[i] * m)
            })
            .unzip();
        ResponseFit {
            y,
            fitted,
            prior_weights,
        }
    }
}

impl GamFit {
    /// What the summary reads, from the fit and what it needs of the data:
    /// `xtwx`, X^T W X at the fit (Fisher weights, scale 1, p x p), and the
    /// response and fitted values for R-sq.(adj) (none: not shown).
    pub fn summary_input_at(&self, formula: &str, xtwx: &[f64], response: Option<ResponseFit>) -> Result<SummaryInput> {
        let p = self.coefficients.len();
        if xtwx.len() != p * p {
            let rule = format!("must be p^2 = {}", p * p);
            return Err(Error::invalid("xtwx", format!("{} values", xtwx.len()), rule));
        }
        let mut input = SummaryInput {
            coefficients: self.coefficients.clone(),
            names: self.names.clone(),
            vp: self.vp.clone(),
            ve: self.ve.clone(),
            edf: self.edf.clone(),
            edf1: Some(edf1(p, &self.vp, xtwx, self.scale)),
            x: square_root(p, xtwx)?,
            parametric: Vec::new(),
            parametric_terms: Vec::new(),
            smooths: Vec::new(),
            n: self.n,
            scale: self.scale,
            scale_estimated: self.family.has_scale(),
            df_residual: self.n as f64 - self.edf_total,
            response,
            deviance: self.deviance,
            null_deviance: self.null_deviance,
            family: self.family.distribution().name().into(),
            link: self.family.link().name().into(),
            formula: formula.into(),
            criterion: Some(Criterion {
                method: "REML".into(),
                score: self.reml_score,
            }),
        };
        self.add_terms(&mut input);
        Ok(input)
    }

    /// The positions in `sp` of term `t`'s smoothing parameters (the
    /// penalties in term order, one sp each).
    pub(crate) fn sp_range(&self, t: &ModelTerm) -> Range<usize> {
        let before: usize = self
            .terms
            .iter()
            .take_while(|u| u.range.start < t.range.start)
            .map(|u| u.term.penalty_count())
            .sum();
        before..before + t.term.penalty_count()
    }

    /// The terms' columns: the parametric ones, and each smooth with its
    /// kind and sp-weighted penalty.
    fn add_terms(&self, input: &mut SummaryInput) {
        for t in &self.terms {
            match &t.term {
                Term::Parametric(kind) => {
                    input.parametric.extend(t.range.clone());
                    if !matches!(kind, Parametric::Intercept) {
                        input.parametric_terms.push(ParametricTerm {
                            label: t.label(),
                            columns: t.range.clone().collect(),
                        });
                    }
                }
                Term::Smooth(s) => {
                    let (first, d) = (t.range.start, t.range.len());
                    let mut penalty = vec![0.0; d * d];
                    let blocks = t.term.penalty_blocks(first);
                    for (b, sp) in blocks.iter().zip(&self.sp[self.sp_range(t)]) {
                        let o = b.start - first;
                        for i in 0..b.dim {
                            for j in 0..b.dim {
                                penalty[(o + i) * d + o + j] += sp * b.s[i * b.dim + j];
                            }
                        }
                    }
                    let kind = match s.basis() {
                        Basis::Re(_) => SmoothKind::RandomEffect,
                        _ if s.penalties().is_empty() => SmoothKind::Fixed,
                        _ => SmoothKind::Penalized,
                    };
                    input.smooths.push(SmoothTerm {
                        label: t.label(),
                        first,
                        last: t.range.end,
                        kind,
                        penalty,
                    });
                }
            }
        }
    }
}

/// mgcv's edf1: 2 edf - rowSums(F * t(F)), F = Vp A / scale.
fn edf1(p: usize, vp: &[f64], a: &[f64], scale: f64) -> Vec<f64> {
    let mut f = vec![0.0; p * p];
    for i in 0..p {
        for k in 0..p {
            let v = vp[i * p + k] / scale;
            for j in 0..p {
                f[i * p + j] += v * a[k * p + j];
            }
        }
    }
    (0..p)
        .map(|i| 2.0 * f[i * p + i] - (0..p).map(|j| f[i * p + j] * f[j * p + i]).sum::<f64>())
        .collect()
}

/// A p x p matrix whose crossproduct is `a` (symmetric positive
/// semi-definite): Lambda^(1/2) Q^T from a = Q Lambda Q^T.
fn square_root(p: usize, a: &[f64]) -> Result<DenseMatrix> {
    let (values, vectors) = symmetric_eigen(p, a)?;
    let mut data = vec![0.0; p * p];
    for (k, &l) in values.iter().enumerate() {
        let s = l.max(0.0).sqrt();
        for j in 0..p {
            data[k * p + j] = s * vectors[j * p + k];
        }
    }
    Ok(DenseMatrix { nrow: p, ncol: p, data })
}
