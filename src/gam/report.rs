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
use super::{Basis, Parametric, Term};
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
        let mut input = SummaryInput {
            coefficients: fit.coefficients.clone(),
            names: fit.names.clone(),
            vp: fit.vp.clone(),
            ve: fit.ve.clone(),
            edf: fit.edf.clone(),
            edf1: Some(edf1(p, &fit.vp, &xtwx, fit.scale)),
            x: square_root(p, &xtwx)?,
            parametric: Vec::new(),
            parametric_terms: Vec::new(),
            smooths: Vec::new(),
            n: fit.n,
            scale: fit.scale,
            scale_estimated: self.rows().family().has_scale(),
            df_residual: fit.n as f64 - fit.edf_total,
            response: Some(self.response(fitted)),
            deviance: fit.deviance,
            null_deviance: fit.null_deviance,
            family: self.rows().family().distribution().name().into(),
            link: self.rows().family().link().name().into(),
            formula: formula.into(),
            criterion: Some(Criterion {
                method: "REML".into(),
                score: fit.reml_score,
            }),
        };
        self.add_terms(fit, &mut input);
        Ok(input)
    }

    /// The terms' columns: the parametric ones, and each smooth with its
    /// kind and sp-weighted penalty.
    fn add_terms(&self, fit: &GamFit, input: &mut SummaryInput) {
        let blocks = self.penalty().blocks();
        for t in self.terms() {
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
                    let mine = blocks.iter().zip(&fit.sp).filter(|(b, _)| t.range.contains(&b.start));
                    for (b, sp) in mine {
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
