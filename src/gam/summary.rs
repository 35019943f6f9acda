//! mgcv's `summary.gam` (1.8-41, default `p.type = 0`, `freq = FALSE`,
//! `re.test = TRUE`) from a fitted GAM's numbers, whatever made the fit:
//! the parametric coefficients with their standard errors, z or t values
//! and p-values; Wald tests of the parametric terms; for each smooth its
//! edf, reference df, test statistic and p-value (Wood 2013, "On p-values
//! for smooth components of an extended generalized additive model",
//! Biometrika 100, 221-228: `testStat`; random effects by `reTest`, Wood
//! 2013, "A simple test for random effects in regression models",
//! Biometrika 100, 1005-1010); R-sq.(adj), deviance explained, the scale,
//! the smoothness criterion and n.
//!
//! Where the scale was estimated the tests are t and F tests on the
//! residual df n - sum(edf), else z and chi-square tests, as mgcv's.
//! `tests/gam_summary.rs` compares every table with mgcv's
//! (`tests/mgcv/gam_summary.R`).

mod davies;
mod display;
mod distributions;
mod re_test;
mod smooth_test;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};
use distributions::{chisq_upper, f_upper, normal_upper, t_upper};

/// A dense row-major matrix as the summary reads it.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct DenseMatrix {
    /// Rows.
    pub nrow: usize,
    /// Columns.
    pub ncol: usize,
    /// The entries, row by row (`nrow * ncol`).
    pub data: Vec<f64>,
}

/// How a smooth is penalised, which decides its test.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SmoothKind {
    /// Penalised with a non-empty null space: `testStat`.
    Penalized,
    /// Unpenalised (`fx = TRUE`): `testStat` too.
    Fixed,
    /// Penalised with no null space (`s(f, bs = "re")`): `reTest`, and a
    /// random effect in the other random effects' tests.
    RandomEffect,
}

/// A smooth term's columns and penalty.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct SmoothTerm {
    /// Its label, as `s(x0)`.
    pub label: String,
    /// Its first coefficient (0-based).
    pub first: usize,
    /// One past its last coefficient.
    pub last: usize,
    /// Its kind.
    pub kind: SmoothKind,
    /// sum_j sp_j S_j over its penalties, (last - first)^2 row-major
    /// (zeros for a fixed term); `reTest` needs every smooth's.
    pub penalty: Vec<f64>,
}

/// A parametric term of the formula (a factor has several columns).
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct ParametricTerm {
    /// Its label, as `fac`.
    pub label: String,
    /// Its coefficients (0-based).
    pub columns: Vec<usize>,
}

/// The response and fitted values, for R-sq.(adj).
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct ResponseFit {
    /// The response y.
    pub y: Vec<f64>,
    /// The fitted values mu.
    pub fitted: Vec<f64>,
    /// The prior weights.
    pub prior_weights: Vec<f64>,
}

/// The smoothness selection criterion and its value.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Criterion {
    /// `REML`, `ML`, `GCV.Cp` ...
    pub method: String,
    /// Its value at the fit (mgcv's `gcv.ubre`).
    pub score: f64,
}

/// What `summary.gam` reads from a fitted GAM with p coefficients.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct SummaryInput {
    /// beta (p).
    pub coefficients: Vec<f64>,
    /// The coefficients' names (p), as `(Intercept)`, `s(x0).1`.
    pub names: Vec<String>,
    /// The Bayesian covariance Vp (p x p row-major).
    pub vp: Vec<f64>,
    /// The frequentist covariance Ve (p x p row-major).
    pub ve: Vec<f64>,
    /// The effective degrees of freedom of each coefficient (p).
    pub edf: Vec<f64>,
    /// mgcv's edf1 (2 edf - edf2 type, p), for the smooths' reference df.
    pub edf1: Option<Vec<f64>>,
    /// A matrix with p columns whose crossproduct is X^T W X: mgcv's
    /// `object$R` (p x p), or sqrt(W) X itself.
    pub x: DenseMatrix,
    /// The coefficients of the parametric part (0-based).
    pub parametric: Vec<usize>,
    /// The parametric terms, for their Wald tests (the intercept is none).
    pub parametric_terms: Vec<ParametricTerm>,
    /// The smooth terms.
    pub smooths: Vec<SmoothTerm>,
    /// The number of observations.
    pub n: usize,
    /// The scale (dispersion) of the fit.
    pub scale: f64,
    /// Whether the scale was estimated (t and F tests) or known (z, chi-square).
    pub scale_estimated: bool,
    /// mgcv's `df.residual`, which `reTest` rounds for its F-type test.
    pub df_residual: f64,
    /// The response and fitted values, for R-sq.(adj) (none: not shown).
    pub response: Option<ResponseFit>,
    /// The deviance.
    pub deviance: f64,
    /// The null deviance.
    pub null_deviance: f64,
    /// The family's name.
    pub family: String,
    /// The link's name.
    pub link: String,
    /// The model formula, as printed.
    pub formula: String,
    /// The smoothness criterion (none: not shown).
    pub criterion: Option<Criterion>,
}

/// Which statistic a table holds.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Statistic {
    /// z (known scale) for coefficients.
    Z,
    /// t (estimated scale) for coefficients.
    T,
    /// Chi-square (known scale) for terms.
    ChiSq,
    /// F (estimated scale) for terms.
    F,
}

/// One row of the parametric coefficients' table.
#[derive(Clone, Debug, Serialize)]
pub struct CoefficientRow {
    /// The coefficient's name.
    pub name: String,
    /// Estimate.
    pub estimate: f64,
    /// Std. Error.
    pub std_error: f64,
    /// z or t value.
    pub statistic: f64,
    /// Pr(>|z|) or Pr(>|t|).
    pub p_value: f64,
}

/// One row of the parametric terms' Wald tests.
#[derive(Clone, Debug, Serialize)]
pub struct TermRow {
    /// The term's label.
    pub label: String,
    /// Its df (the rank of its covariance).
    pub df: f64,
    /// Chi.sq or F.
    pub statistic: f64,
    /// p-value.
    pub p_value: f64,
}

/// One row of the smooth terms' table.
#[derive(Clone, Debug, Serialize)]
pub struct SmoothRow {
    /// The smooth's label.
    pub label: String,
    /// edf.
    pub edf: f64,
    /// Ref.df.
    pub ref_df: f64,
    /// Chi.sq or F.
    pub statistic: f64,
    /// p-value.
    pub p_value: f64,
}

/// `summary.gam`'s tables and figures.
#[derive(Clone, Debug, Serialize)]
pub struct GamSummary {
    /// The family's name.
    pub family: String,
    /// The link's name.
    pub link: String,
    /// The formula.
    pub formula: String,
    /// z or t for the coefficients.
    pub coefficient_statistic: Statistic,
    /// Chi-square or F for the terms.
    pub term_statistic: Statistic,
    /// The parametric coefficients.
    pub coefficients: Vec<CoefficientRow>,
    /// The parametric terms' tests.
    pub parametric_terms: Vec<TermRow>,
    /// The smooth terms.
    pub smooths: Vec<SmoothRow>,
    /// n - sum(edf), the t and F tests' df.
    pub residual_df: f64,
    /// R-sq.(adj), where a response was given.
    pub r_sq: Option<f64>,
    /// Deviance explained, (null - deviance) / null.
    pub dev_expl: f64,
    /// The scale.
    pub scale: f64,
    /// The smoothness criterion.
    pub criterion: Option<Criterion>,
    /// The number of observations.
    pub n: usize,
}

impl SummaryInput {
    /// The number of coefficients.
    fn p(&self) -> usize {
        self.coefficients.len()
    }

    /// Vp[i, j].
    fn vp_at(&self, i: usize, j: usize) -> f64 {
        self.vp[i * self.p() + j]
    }

    /// The square block of a p x p matrix on `cols`.
    fn block(m: &[f64], p: usize, cols: &[usize]) -> Vec<f64> {
        cols.iter()
            .flat_map(|&i| cols.iter().map(move |&j| m[i * p + j]))
            .collect()
    }
}

/// `summary.gam` of a fit.
pub fn summarize(input: &SummaryInput) -> Result<GamSummary> {
    validate(input)?;
    let residual_df = input.n as f64 - input.edf.iter().sum::<f64>();
    let (coefficient_statistic, term_statistic) = if input.scale_estimated {
        (Statistic::T, Statistic::F)
    } else {
        (Statistic::Z, Statistic::ChiSq)
    };
    Ok(GamSummary {
        family: input.family.clone(),
        link: input.link.clone(),
        formula: input.formula.clone(),
        coefficient_statistic,
        term_statistic,
        coefficients: coefficient_table(input, residual_df),
        parametric_terms: input
            .parametric_terms
            .iter()
            .map(|t| parametric_term_test(input, t, residual_df))
            .collect::<Result<_>>()?,
        smooths: smooth_table(input, residual_df)?,
        residual_df,
        r_sq: input.response.as_ref().map(|r| adjusted_r_sq(r, residual_df)),
        dev_expl: (input.null_deviance - input.deviance) / input.null_deviance,
        scale: input.scale,
        criterion: input.criterion.clone(),
        n: input.n,
    })
}

/// Estimates, Bayesian standard errors, z or t and two-sided p-values.
fn coefficient_table(input: &SummaryInput, residual_df: f64) -> Vec<CoefficientRow> {
    input
        .parametric
        .iter()
        .map(|&j| {
            let (estimate, std_error) = (input.coefficients[j], input.vp_at(j, j).sqrt());
            let statistic = estimate / std_error;
            let p_value = if input.scale_estimated {
                2.0 * t_upper(statistic.abs(), residual_df)
            } else {
                2.0 * normal_upper(statistic.abs())
            };
            CoefficientRow {
                name: input.names[j].clone(),
                estimate,
                std_error,
                statistic,
                p_value,
            }
        })
        .collect()
}

/// The Wald test of a parametric term: b^T V^- b on the rank of V (its
/// eigenvalues above sqrt(eps) of the largest), chi-square or F / rank.
fn parametric_term_test(input: &SummaryInput, term: &ParametricTerm, residual_df: f64) -> Result<TermRow> {
    let b: Vec<f64> = term.columns.iter().map(|&j| input.coefficients[j]).collect();
    let v = SummaryInput::block(&input.vp, input.p(), &term.columns);
    let (values, vectors) = matfree_solvers::symmetric_eigen(b.len(), &v)?;
    let top = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let k = b.len();
    let mut chi_sq = 0.0;
    let mut rank = 0usize;
    for (e, &l) in values.iter().enumerate() {
        if k == 1 || l > f64::EPSILON.sqrt() * top {
            let proj: f64 = (0..k).map(|i| vectors[i * k + e] * b[i]).sum();
            chi_sq += proj * proj / l;
            rank += 1;
        }
    }
    let df = rank as f64;
    let (statistic, p_value) = if input.scale_estimated {
        (chi_sq / df, f_upper(chi_sq / df, df, residual_df))
    } else {
        (chi_sq, chisq_upper(chi_sq, df))
    };
    Ok(TermRow {
        label: term.label.clone(),
        df,
        statistic,
        p_value,
    })
}

/// Each smooth's edf, Ref.df, statistic (chi-square, or F = chi-square /
/// Ref.df) and p-value.
fn smooth_table(input: &SummaryInput, residual_df: f64) -> Result<Vec<SmoothRow>> {
    input
        .smooths
        .iter()
        .enumerate()
        .map(|(m, s)| {
            let edf: f64 = input.edf[s.first..s.last].iter().sum();
            let test = if s.kind == SmoothKind::RandomEffect {
                re_test::re_test(input, m)?
            } else {
                let edf1 = input.edf1.as_ref().map_or(edf, |e| e[s.first..s.last].iter().sum());
                let res_df = if input.scale_estimated { residual_df } else { -1.0 };
                smooth_test::test_stat(input, s, edf1.min((s.last - s.first) as f64), res_df)?
            };
            let statistic = if input.scale_estimated {
                test.stat / test.rank
            } else {
                test.stat
            };
            Ok(SmoothRow {
                label: s.label.clone(),
                edf,
                ref_df: test.rank,
                statistic,
                p_value: test.p_value,
            })
        })
        .collect()
}

/// A smooth's test: its statistic, reference df and p-value.
pub(crate) struct TermTest {
    stat: f64,
    rank: f64,
    p_value: f64,
}

/// 1 - var(sqrt(w) (y - mu)) (n - 1) / (var(sqrt(w) (y - mean_w y)) rdf).
fn adjusted_r_sq(r: &ResponseFit, residual_df: f64) -> f64 {
    let sw: f64 = r.prior_weights.iter().sum();
    let mean_y = r.prior_weights.iter().zip(&r.y).map(|(w, y)| w * y).sum::<f64>() / sw;
    let resid: Vec<f64> =
        r.y.iter()
            .zip(&r.fitted)
            .zip(&r.prior_weights)
            .map(|((y, f), w)| w.sqrt() * (y - f))
            .collect();
    let total: Vec<f64> =
        r.y.iter()
            .zip(&r.prior_weights)
            .map(|(y, w)| w.sqrt() * (y - mean_y))
            .collect();
    let n = r.y.len() as f64;
    1.0 - sample_var(&resid) * (n - 1.0) / (sample_var(&total) * residual_df)
}

/// (A + A^T) / 2 for a row-major k x k A: the symmetric matrix R's
/// `eigen(symmetric = TRUE)` is given after round-off.
pub(crate) fn symmetric_part(a: &[f64], k: usize) -> Vec<f64> {
    (0..k * k).map(|t| 0.5 * (a[t] + a[(t % k) * k + t / k])).collect()
}

/// The sample variance (n - 1 denominator).
fn sample_var(x: &[f64]) -> f64 {
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - 1.0)
}

/// Shapes, ranges and finiteness of the input.
fn validate(input: &SummaryInput) -> Result<()> {
    let p = input.p();
    let len = |field: &str, got: usize, want: usize| {
        if got == want {
            Ok(())
        } else {
            Err(Error::invalid(
                field,
                format!("length {got}"),
                format!("must have length {want} (p = {p} coefficients)"),
            ))
        }
    };
    len("names", input.names.len(), p)?;
    len("vp", input.vp.len(), p * p)?;
    len("ve", input.ve.len(), p * p)?;
    len("edf", input.edf.len(), p)?;
    if let Some(e) = &input.edf1 {
        len("edf1", e.len(), p)?;
    }
    validate_matrix(&input.x, p)?;
    validate_columns(input)?;
    if !(input.scale.is_finite() && input.scale > 0.0) {
        return Err(Error::invalid("scale", input.scale, "must be finite and positive"));
    }
    if let Some(r) = &input.response {
        len("response.fitted", r.fitted.len(), r.y.len())?;
        len("response.prior_weights", r.prior_weights.len(), r.y.len())?;
    }
    crate::error::all_finite(&[
        ("coefficients", &input.coefficients),
        ("vp", &input.vp),
        ("ve", &input.ve),
        ("edf", &input.edf),
    ])
}

/// x has p columns, nrow * ncol entries, all finite.
fn validate_matrix(x: &DenseMatrix, p: usize) -> Result<()> {
    if x.ncol != p {
        return Err(Error::invalid(
            "x.ncol",
            x.ncol,
            format!("must equal the number of coefficients {p}"),
        ));
    }
    if x.data.len() != x.nrow * x.ncol {
        return Err(Error::invalid(
            "x.data",
            format!("length {}", x.data.len()),
            format!("must have nrow * ncol = {} entries", x.nrow * x.ncol),
        ));
    }
    if let Some(i) = x.data.iter().position(|v| !v.is_finite()) {
        return Err(Error::invalid(format!("x.data[{i}]"), x.data[i], "must be finite"));
    }
    Ok(())
}

/// Every column index is below p; each smooth's range is non-empty, within
/// p and no wider than x has rows; its penalty is square on it.
fn validate_columns(input: &SummaryInput) -> Result<()> {
    let p = input.p();
    let terms = input
        .parametric_terms
        .iter()
        .map(|t| (format!("parametric_terms[{}].columns", t.label), &t.columns));
    for (field, cols) in std::iter::once(("parametric".to_string(), &input.parametric)).chain(terms) {
        if let Some(&j) = cols.iter().find(|&&j| j >= p) {
            return Err(Error::invalid(
                field,
                j,
                format!("column indices must be below p = {p}"),
            ));
        }
        if cols.is_empty() && field != "parametric" {
            return Err(Error::invalid(field, "[]", "a term needs at least one column"));
        }
    }
    for (i, s) in input.smooths.iter().enumerate() {
        if !(s.first < s.last && s.last <= p && s.last - s.first <= input.x.nrow) {
            return Err(Error::invalid(
                format!("smooths[{i}] ({})", s.label),
                format!("{}..{}", s.first, s.last),
                format!(
                    "must be a non-empty range within p = {p} and no wider than x's {} rows",
                    input.x.nrow
                ),
            ));
        }
        let k = s.last - s.first;
        if let Some(j) = s.penalty.iter().position(|v| !v.is_finite()) {
            return Err(Error::invalid(
                format!("smooths[{i}].penalty[{j}]"),
                s.penalty[j],
                "must be finite",
            ));
        }
        if s.penalty.len() != k * k {
            return Err(Error::invalid(
                format!("smooths[{i}].penalty"),
                format!("length {}", s.penalty.len()),
                format!("must be {k} x {k}"),
            ));
        }
    }
    Ok(())
}
