//! Each smooth's contribution at new data, mgcv's `predict.gam(type =
//! "terms", se.fit = TRUE)` for the smooth terms: X_j beta_j and its
//! standard error sqrt(diag(X_j Vp_jj X_j^T)); and `plot.gam`'s default
//! panels from them (one per one-dimensional smooth, 100 points over the
//! covariate's range at the fit, the fit with a band of +-2 SE).

use super::fit::GamFit;
use super::setup::{ModelTerm, Table};
use super::{Basis, Column, Prediction, Term};
use crate::plot::{Band, Panel};
use crate::{Error, Result};

/// Points on a plotted smooth's grid (`plot.gam`'s `n = 100`).
pub const PLOT_POINTS: usize = 100;

/// One smooth term's contribution at new rows.
#[derive(Clone, Debug, PartialEq)]
pub struct TermPrediction {
    /// The term's label, `s(x)`.
    pub label: String,
    /// X_j beta_j and its standard error, one a row.
    pub prediction: Prediction,
}

/// A fit's panels for [`crate::plot::smooths_svg`], and a note for each
/// smooth not drawn.
#[derive(Clone, Debug, Default)]
pub struct SmoothPanels {
    /// One per one-dimensional numeric smooth ("cr", "ps").
    pub panels: Vec<Panel>,
    /// Why the other smooths (te, re) have no panel.
    pub skipped: Vec<String>,
}

impl GamFit {
    /// Every smooth term's contribution at the named `columns` (as
    /// [`GamFit::predict`] takes them), in term order.
    pub fn predict_terms(&self, columns: &[(&str, Column)]) -> Result<Vec<TermPrediction>> {
        let table = Table::new(columns)?;
        self.terms
            .iter()
            .filter(|t| matches!(t.term, Term::Smooth(_)))
            .map(|t| {
                let prediction = self.predict_term(t, &table.all(&t.columns)?)?;
                Ok(TermPrediction {
                    label: t.label(),
                    prediction,
                })
            })
            .collect()
    }

    /// Term `t`'s (one of this fit's) X_j beta_j and sqrt(diag(X_j Vp_jj
    /// X_j^T)) at its covariate `columns`.
    pub fn predict_term(&self, t: &ModelTerm, columns: &[Column]) -> Result<Prediction> {
        let p = self.coefficients.len();
        if t.range.end > p {
            let rule = format!("must lie within the fit's {p} coefficients");
            return Err(Error::invalid(t.label(), format!("{:?}", t.range), rule));
        }
        let n = columns.first().map_or(0, Column::len);
        let x = t.term.design(columns, n)?;
        let (s, d) = (t.range.start, t.range.len());
        let beta = &self.coefficients[t.range.clone()];
        let vp = |j: usize, k: usize| self.vp[(s + j) * p + s + k];
        let (mut fit, mut se) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for xi in x.chunks_exact(d) {
            fit.push(xi.iter().zip(beta).map(|(a, b)| a * b).sum());
            let var: f64 = (0..d)
                .map(|j| xi[j] * (0..d).map(|k| vp(j, k) * xi[k]).sum::<f64>())
                .sum();
            se.push(var.max(0.0).sqrt());
        }
        Ok(Prediction { fit, se })
    }

    /// `plot.gam`'s panels: each "cr" or "ps" smooth over
    /// [`PLOT_POINTS`] points spanning its covariate's range at the fit
    /// (from the basis: a cr's end knots, a ps's range less its 0.1%
    /// widening), titled with its label, the y axis `s(x,edf)` as mgcv
    /// labels it, the band +-2 SE. Tensor products and random effects
    /// are skipped, each with a note.
    pub fn smooth_panels(&self) -> Result<SmoothPanels> {
        let mut out = SmoothPanels::default();
        let edf = self.smooth_edf();
        for (t, (label, edf)) in self.terms.iter().filter(|t| matches!(t.term, Term::Smooth(_))).zip(edf) {
            let Term::Smooth(s) = &t.term else { continue };
            let (lo, hi) = match s.basis() {
                Basis::Cr(b) => (b.knots()[0], b.knots()[b.dim() - 1]),
                Basis::Ps(b) => unwiden(b.range()),
                Basis::Te(_) => {
                    out.skipped
                        .push(format!("{label}: not plotted (a smooth of several covariates)"));
                    continue;
                }
                Basis::Re(_) => {
                    out.skipped.push(format!("{label}: not plotted (a random effect)"));
                    continue;
                }
            };
            let x = grid(lo, hi);
            let pred = self.predict_term(t, &[Column::Numeric(&x)])?;
            let band = Band {
                lower: pred.fit.iter().zip(&pred.se).map(|(f, s)| f - 2.0 * s).collect(),
                upper: pred.fit.iter().zip(&pred.se).map(|(f, s)| f + 2.0 * s).collect(),
                fit: pred.fit,
                x,
                truth: None,
            };
            out.panels.push(Panel {
                y_label: format!("{},{edf:.2})", label.trim_end_matches(')')),
                title: label,
                x_label: t.columns[0].clone(),
                band,
            });
        }
        Ok(out)
    }
}

/// The covariate's range from a ps basis's, which widened it by 0.1% of
/// it at each end (`PsBasis::new`).
fn unwiden((lo, hi): (f64, f64)) -> (f64, f64) {
    let widen = 0.001 * (hi - lo) / 1.002;
    (lo + widen, hi - widen)
}

/// R's `seq(lo, hi, length.out = PLOT_POINTS)`.
fn grid(lo: f64, hi: f64) -> Vec<f64> {
    let last = PLOT_POINTS - 1;
    (0..PLOT_POINTS)
        .map(|i| match i == last {
            true => hi,
            false => lo + (hi - lo) * i as f64 / last as f64,
        })
        .collect()
}
