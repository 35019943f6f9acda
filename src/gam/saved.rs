//! A GAM fit saved to disk and loaded back ([`SavedGam`]): versioned JSON
//! (format tag `"matfree-gam"`, [`FORMAT_VERSION`]) holding what
//! `predict` and the summary need. The terms are saved by what they were
//! built from at the data (knots, ranges, factor levels, the constraint's
//! column means, the penalties' scales) and rebuilt on load by the code
//! that built them, so a loaded fit predicts to the bit what the fitted
//! one did; every length and value is checked, so a file of another
//! version, a truncated or edited one is a named error, never a panic.
//!
//! The fields (docs/design.md, "Saved GAM fits", lists them for readers
//! in other languages, such as the Python package of issue #41):
//!
//! - `format` = `"matfree-gam"`, `format_version` = 1, `formula` (as written);
//! - `family` and `link`: R's names (`gaussian`, `Gamma`, ...; `identity`, `log`, ...);
//! - `terms`: in coefficient order, each an object with `type`:
//!   `intercept`; `numeric` {`column`}; `interaction` {`columns`};
//!   `factor` {`column`, `levels`: the first is the baseline};
//!   `smooth` {`label`, `columns`, `basis`, `constraint`, `penalty_scale`};
//!   a `basis` has `type`: `cr` {`knots`}; `ps` {`range`: [lo, hi], the
//!   covariate's range widened by 0.1% at each end, `k`, `m`: [2, m2]};
//!   `re` {`levels`}; `te` {`margins`: [{`basis`, `range`}], `range` the
//!   covariate's [min, max] for a "ps" margin, null for "cr"};
//!   `constraint` is the unconstrained design's column means (null for
//!   "re"), `penalty_scale` each penalty's divisor (mgcv's `S.scale`);
//! - `names`, `coefficients`, `edf` (p each), `vp`, `ve` (p x p row-major,
//!   mgcv's `Vp`, `Ve`), `sp` (one per penalty, in term order);
//! - `scale`, `reml_scale`, `reml_score`, `deviance`, `null_deviance`,
//!   `n`, `converged`, `scale_steps`, `scale_gradient` ([`GamFit`]'s);
//! - `xtwx`: X^T W X at the fit (Fisher weights, scale 1, p x p), and
//!   `r_sq`: R-sq.(adj) (null where not shown): what the summary reads of
//!   the data;
//! - `report`: the last REML solve's record (matfree's `RemlReport`).

use std::path::Path;

use matfree_solvers::reml::RemlReport;
use serde::{Deserialize, Serialize};

use super::fit::{GamFit, GamModel};
use super::summary::{summarize, GamSummary};
use super::{Basis, CrBasis, Factor, Family, ModelTerm, Parametric, PsBasis, ReBasis, Smooth, TensorBasis, Term};
use crate::bms::results::saved::check_covariance;
use crate::{Error, Result};

/// The format tag every saved GAM carries.
pub const FORMAT: &str = "matfree-gam";

/// The version [`SavedGam::save`] writes and [`SavedGam::load`] reads.
pub const FORMAT_VERSION: u32 = 1;

/// A fitted GAM with what it needs to be read back, predicted from and
/// summarised without its data.
#[derive(Clone, Debug)]
pub struct SavedGam {
    /// The formula, as written.
    pub formula: String,
    /// The fit.
    pub fit: GamFit,
    /// X^T W X at the fit (Fisher weights, scale 1), p x p row-major.
    pub xtwx: Vec<f64>,
    /// R-sq.(adj) of the fit (none where the summary shows none).
    pub r_sq: Option<f64>,
}

impl SavedGam {
    /// `fit`, a fit of `model` from `formula`, with what its summary needs
    /// of the data; checked as [`SavedGam::load`] checks.
    pub fn new(model: &GamModel, fit: GamFit, formula: &str) -> Result<Self> {
        let r_sq = model.summary(&fit, formula)?.r_sq;
        let saved = Self {
            formula: formula.into(),
            xtwx: model.fit_crossproduct(&fit)?,
            fit,
            r_sq,
        };
        saved.check()?;
        Ok(saved)
    }

    /// mgcv's `summary.gam` of the fit, as [`GamModel::summary`] gives it
    /// at the data.
    pub fn summary(&self) -> Result<GamSummary> {
        let mut summary = summarize(&self.fit.summary_input_at(&self.formula, &self.xtwx, None)?)?;
        summary.r_sq = self.r_sq;
        Ok(summary)
    }

    /// The saved fit as JSON text (what [`SavedGam::save`] writes).
    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string_pretty(&GamFile::of(self)).map_err(|e| Error::invalid("fit", "JSON", e.to_string()))
    }

    /// Write as JSON to `path`, through [`crate::files::write`] (a
    /// symlink's target is written, a failure leaves no half file).
    pub fn save(&self, path: &Path) -> Result<()> {
        crate::files::write(path, self.to_json()?.as_bytes())
            .map_err(|e| Error::invalid("save path", path.display(), e.to_string()))
    }

    /// Read a fit written by [`SavedGam::save`]; errors name the file.
    pub fn load(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).map_err(|e| Error::invalid("model file", path.display(), e.to_string()))?;
        Self::from_json(&text).map_err(|e| e.within(path.display()))
    }

    /// Parse, rebuild and check a saved fit.
    pub fn from_json(text: &str) -> Result<Self> {
        #[derive(Deserialize)]
        struct Header {
            format: Option<String>,
            format_version: Option<u32>,
        }
        let not_saved = |e: serde_json::Error| Error::invalid("file", "not a saved GAM", e.to_string());
        let header: Header = serde_json::from_str(text).map_err(not_saved)?;
        match header.format.as_deref() {
            Some(FORMAT) => {}
            Some(other) => {
                return Err(Error::invalid(
                    "format",
                    other,
                    format!("a saved GAM's is \"{FORMAT}\""),
                ))
            }
            None => {
                return Err(Error::invalid(
                    "format",
                    "missing",
                    format!("a saved GAM has \"{FORMAT}\""),
                ))
            }
        }
        match header.format_version {
            Some(FORMAT_VERSION) => {}
            Some(v) => {
                let rule = format!("this build reads version {FORMAT_VERSION}");
                return Err(Error::invalid("format_version", v, rule));
            }
            None => return Err(Error::invalid("format_version", "missing", "a saved GAM has one")),
        }
        let file: GamFile = serde_json::from_str(text).map_err(not_saved)?;
        let saved = file.into_saved()?;
        saved.check()?;
        Ok(saved)
    }

    /// Every length and value against the terms.
    fn check(&self) -> Result<()> {
        let f = &self.fit;
        let p = f.coefficients.len();
        let dims: usize = f.terms.iter().map(|t| t.term.dim()).sum();
        let penalties: usize = f.terms.iter().map(|t| t.term.penalty_count()).sum();
        let lengths = [
            ("coefficients", p, dims),
            ("names", f.names.len(), p),
            ("edf", f.edf.len(), p),
            ("vp", f.vp.len(), p * p),
            ("ve", f.ve.len(), p * p),
            ("xtwx", self.xtwx.len(), p * p),
            ("sp", f.sp.len(), penalties),
        ];
        for (field, got, want) in lengths {
            if got != want {
                let rule = format!("the terms need {want} (p = {dims} coefficients)");
                return Err(Error::invalid(field, format!("{got} values"), rule));
            }
        }
        let names = f.terms.iter().flat_map(ModelTerm::coefficient_names);
        if let Some((j, (want, got))) = names.zip(&f.names).enumerate().find(|(_, (w, g))| w != *g) {
            return Err(Error::invalid(
                format!("names[{j}]"),
                got,
                format!("the terms name it {want}"),
            ));
        }
        self.check_values()?;
        check_covariance("vp", &f.vp, p)?;
        check_covariance("ve", &f.ve, p)?;
        check_covariance("xtwx", &self.xtwx, p)
    }

    /// Finite numbers; scales, sp and n positive.
    fn check_values(&self) -> Result<()> {
        let f = &self.fit;
        crate::error::all_finite(&[
            ("coefficients", &f.coefficients),
            ("edf", &f.edf),
            ("vp", &f.vp),
            ("ve", &f.ve),
            ("xtwx", &self.xtwx),
            ("sp", &f.sp),
        ])?;
        if let Some(k) = f.sp.iter().position(|&s| s <= 0.0) {
            return Err(Error::invalid(format!("sp[{k}]"), f.sp[k], "must be > 0"));
        }
        let scalars = [
            ("scale", f.scale, true),
            ("reml_scale", f.reml_scale, true),
            ("reml_score", f.reml_score, false),
            ("deviance", f.deviance, false),
            ("null_deviance", f.null_deviance, false),
            ("scale_gradient", f.scale_gradient, false),
        ];
        for (field, v, positive) in scalars {
            if !v.is_finite() || (positive && v <= 0.0) {
                let rule = if positive {
                    "must be finite and > 0"
                } else {
                    "must be finite"
                };
                return Err(Error::invalid(field, v, rule));
            }
        }
        if f.n == 0 {
            return Err(Error::invalid("n", 0, "a fit has rows"));
        }
        match self.r_sq {
            Some(r) if !r.is_finite() => Err(Error::invalid("r_sq", r, "must be finite or null")),
            _ => Ok(()),
        }
    }
}

/// The JSON shape of a saved GAM (module docs).
#[derive(Serialize, Deserialize)]
struct GamFile {
    format: String,
    format_version: u32,
    formula: String,
    family: String,
    link: String,
    terms: Vec<TermFile>,
    /// The offsets' columns (`offset(name)`), which a prediction adds.
    #[serde(default)]
    offsets: Vec<String>,
    names: Vec<String>,
    coefficients: Vec<f64>,
    edf: Vec<f64>,
    vp: Vec<f64>,
    ve: Vec<f64>,
    sp: Vec<f64>,
    scale: f64,
    reml_scale: f64,
    reml_score: f64,
    deviance: f64,
    null_deviance: f64,
    n: usize,
    converged: bool,
    scale_steps: usize,
    scale_gradient: f64,
    xtwx: Vec<f64>,
    r_sq: Option<f64>,
    report: RemlReport,
}

impl GamFile {
    fn of(saved: &SavedGam) -> Self {
        let f = &saved.fit;
        Self {
            format: FORMAT.into(),
            format_version: FORMAT_VERSION,
            formula: saved.formula.clone(),
            family: f.family.distribution().name().into(),
            link: f.family.link().name().into(),
            terms: f.terms.iter().map(TermFile::of).collect(),
            offsets: f.offsets.clone(),
            names: f.names.clone(),
            coefficients: f.coefficients.clone(),
            edf: f.edf.clone(),
            vp: f.vp.clone(),
            ve: f.ve.clone(),
            sp: f.sp.clone(),
            scale: f.scale,
            reml_scale: f.reml_scale,
            reml_score: f.reml_score,
            deviance: f.deviance,
            null_deviance: f.null_deviance,
            n: f.n,
            converged: f.converged,
            scale_steps: f.scale_steps,
            scale_gradient: f.scale_gradient,
            xtwx: saved.xtwx.clone(),
            r_sq: saved.r_sq,
            report: f.report.clone(),
        }
    }

    /// The fit it describes, its terms rebuilt (lengths not yet checked).
    fn into_saved(self) -> Result<SavedGam> {
        let family = Family::new(self.family.parse()?, self.link.parse()?)?;
        let mut start = 0;
        let terms = self
            .terms
            .into_iter()
            .enumerate()
            .map(|(i, t)| {
                let (term, columns) = t.into_term().map_err(|e| e.within(format!("terms[{i}]")))?;
                let range = start..start + term.dim();
                start = range.end;
                Ok(ModelTerm { term, columns, range })
            })
            .collect::<Result<Vec<_>>>()?;
        let fit = GamFit {
            terms,
            offsets: self.offsets,
            family,
            names: self.names,
            edf_total: self.edf.iter().sum(),
            coefficients: self.coefficients,
            vp: self.vp,
            ve: self.ve,
            edf: self.edf,
            sp: self.sp,
            scale: self.scale,
            reml_scale: self.reml_scale,
            reml_score: self.reml_score,
            deviance: self.deviance,
            null_deviance: self.null_deviance,
            n: self.n,
            converged: self.converged,
            scale_steps: self.scale_steps,
            scale_gradient: self.scale_gradient,
            report: self.report,
            notes: Vec::new(),
        };
        Ok(SavedGam {
            formula: self.formula,
            fit,
            xtwx: self.xtwx,
            r_sq: self.r_sq,
        })
    }
}

/// One saved term (module docs).
#[derive(Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum TermFile {
    Intercept,
    Numeric {
        column: String,
    },
    Interaction {
        columns: Vec<String>,
    },
    Factor {
        column: String,
        levels: Vec<String>,
    },
    Smooth {
        label: String,
        columns: Vec<String>,
        basis: BasisFile,
        constraint: Option<Vec<f64>>,
        penalty_scale: Vec<f64>,
    },
}

impl TermFile {
    fn of(t: &ModelTerm) -> Self {
        match &t.term {
            Term::Parametric(Parametric::Intercept) => Self::Intercept,
            Term::Parametric(Parametric::Numeric { label }) => Self::Numeric { column: label.clone() },
            Term::Parametric(Parametric::Interaction { labels }) => Self::Interaction {
                columns: labels.clone(),
            },
            Term::Parametric(Parametric::Factor { label, levels }) => Self::Factor {
                column: label.clone(),
                levels: levels.clone(),
            },
            Term::Smooth(s) => Self::Smooth {
                label: s.label().into(),
                columns: t.columns.clone(),
                basis: BasisFile::of(s.basis()),
                constraint: s.constraint_means().map(<[f64]>::to_vec),
                penalty_scale: s.penalty_scale().to_vec(),
            },
        }
    }

    /// The term and the columns it reads.
    fn into_term(self) -> Result<(Term, Vec<String>)> {
        Ok(match self {
            Self::Intercept => (Term::Parametric(Parametric::Intercept), Vec::new()),
            Self::Numeric { column } => (
                Term::Parametric(Parametric::Numeric { label: column.clone() }),
                vec![column],
            ),
            Self::Interaction { columns } => {
                if columns.len() < 2 {
                    let rule = "an interaction multiplies 2 or more columns";
                    return Err(Error::invalid("columns", format!("{columns:?}"), rule));
                }
                let labels = columns.clone();
                (Term::Parametric(Parametric::Interaction { labels }), columns)
            }
            Self::Factor { column, levels } => {
                Factor::check_levels(&column, &levels, 2)?;
                let label = column.clone();
                (Term::Parametric(Parametric::Factor { label, levels }), vec![column])
            }
            Self::Smooth {
                label,
                columns,
                basis,
                constraint,
                penalty_scale,
            } => {
                let basis = basis.into_basis(&label)?;
                let want = covariates(&basis);
                if columns.len() != want {
                    let rule = format!("a {} basis reads {want} covariate column(s)", basis.name());
                    return Err(Error::invalid(
                        format!("{label}: columns"),
                        format!("{columns:?}"),
                        rule,
                    ));
                }
                let smooth = Smooth::rebuild(&label, basis, constraint, penalty_scale)?;
                (Term::Smooth(smooth), columns)
            }
        })
    }
}

/// The number of covariates a basis reads: one a margin.
fn covariates(basis: &Basis) -> usize {
    match basis {
        Basis::Te(b) => b.margins().len(),
        _ => 1,
    }
}

/// One saved basis (module docs).
#[derive(Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BasisFile {
    Cr { knots: Vec<f64> },
    Ps { range: [f64; 2], k: usize, m: [usize; 2] },
    Re { levels: Vec<String> },
    Te { margins: Vec<MarginFile> },
}

/// A tensor product's margin: its basis and, for "ps", the covariate's range.
#[derive(Serialize, Deserialize)]
struct MarginFile {
    basis: BasisFile,
    range: Option<[f64; 2]>,
}

impl BasisFile {
    fn of(basis: &Basis) -> Self {
        match basis {
            Basis::Cr(b) => Self::Cr {
                knots: b.knots().to_vec(),
            },
            Basis::Ps(b) => Self::Ps {
                range: pair(b.range()),
                k: b.dim(),
                m: b.m(),
            },
            Basis::Re(b) => Self::Re {
                levels: b.levels().to_vec(),
            },
            Basis::Te(b) => Self::Te {
                margins: b
                    .margins()
                    .into_iter()
                    .map(|(basis, range)| MarginFile {
                        basis: Self::of(basis),
                        range: range.map(pair),
                    })
                    .collect(),
            },
        }
    }

    /// The basis rebuilt (term `label`'s).
    fn into_basis(self, label: &str) -> Result<Basis> {
        Ok(match self {
            Self::Cr { knots } => Basis::Cr(CrBasis::with_knots(knots).map_err(|e| e.within(label))?),
            Self::Ps { range, k, m } => Basis::Ps(PsBasis::over(label, (range[0], range[1]), k, m)?),
            Self::Re { levels } => Basis::Re(ReBasis::with_levels(label, levels)?),
            Self::Te { margins } => {
                let margins = margins
                    .into_iter()
                    .enumerate()
                    .map(|(i, m)| {
                        let basis = m.basis.into_basis(&format!("{label} margin {i}"))?;
                        Ok((basis, m.range.map(|[lo, hi]| (lo, hi))))
                    })
                    .collect::<Result<_>>()?;
                Basis::Te(TensorBasis::rebuild(label, margins)?)
            }
        })
    }
}

fn pair((lo, hi): (f64, f64)) -> [f64; 2] {
    [lo, hi]
}

impl GamFit {
    /// The covariate columns its terms read, each once, in term order
    /// (what new data must have to be predicted).
    pub fn covariates(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for c in self.terms.iter().flat_map(|t| &t.columns).chain(&self.offsets) {
            if !out.contains(c) {
                out.push(c.clone());
            }
        }
        out
    }
}
