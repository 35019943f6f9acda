//! A fit saved to disk and loaded back: the model's specification (knots,
//! frailty scale, design widths), the column names and the fit itself, as
//! JSON through serde with a `format_version`. The bases are rebuilt from
//! their knots on load, not read as numbers someone could have edited, and
//! every length and value of the fit is checked against the model: a file
//! of another version, a truncated or edited file, or a fit whose bases do
//! not match its coefficients is a named error, never a panic.

use crate::bms::MarginalSlope;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::bms::fit::BmsFit;
use crate::bms::model::cubic_basis::CubicBasis;
use crate::bms::results::predict::{extrapolation_notes, Predictions};
use crate::bms::{Bases, BmsModel};
use crate::data::{read_csv, ColumnSpec, Dataset, INTERCEPT};
use crate::{Designs, Error, Result};

/// The version [`SavedFit::save`] writes and [`SavedFit::load`] reads
/// (2: the score column and its standardisation, needed to predict).
pub const FORMAT_VERSION: u32 = 2;

/// What defines a model: each basis by its knots, s_f and the design widths
/// (intercepts included).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelSpec {
    /// The score warp's knots (`None`: no warp).
    pub score_knots: Option<Vec<f64>>,
    /// The link deviation's knots (`None`: no deviation).
    pub link_knots: Option<Vec<f64>>,
    /// The frailty scale s_f.
    pub s_f: f64,
    /// Marginal design width.
    pub p_m: usize,
    /// Slope design width.
    pub p_g: usize,
}

impl ModelSpec {
    /// The specification of `model`.
    pub fn of(model: &BmsModel) -> Self {
        let b = model.bases();
        let block = model.blocks();
        Self {
            score_knots: b.score.as_ref().map(|c| c.knots().to_vec()),
            link_knots: b.link.as_ref().map(|c| c.knots().to_vec()),
            s_f: b.s_f,
            p_m: block.p_m,
            p_g: block.p_g,
        }
    }

    /// The model it specifies, its bases rebuilt from the knots.
    pub fn model(&self) -> Result<BmsModel> {
        let basis = |knots: &Option<Vec<f64>>| knots.clone().map(CubicBasis::new).transpose();
        let bases = Bases::new(basis(&self.score_knots)?, basis(&self.link_knots)?, self.s_f)?;
        BmsModel::new(bases, self.p_m, self.p_g)
    }
}

/// The score column and the standardisation the fit applied to it: new
/// scores are transformed the same way before they are predicted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScoreColumn {
    /// The column's name.
    pub name: String,
    /// `(mean, sd)`: the fit used `(z - mean) / sd`; `None`: z as given.
    pub standardised: Option<(f64, f64)>,
}

impl ScoreColumn {
    /// A score used as given.
    pub fn plain(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            standardised: None,
        }
    }

    /// The fit's scale of raw scores `z`, in place.
    pub fn apply(&self, z: &mut [f64]) {
        if let Some((mean, sd)) = self.standardised {
            z.iter_mut().for_each(|v| *v = (*v - mean) / sd);
        }
    }

    fn check(&self) -> Result<()> {
        match self.standardised {
            Some((mean, _)) if !mean.is_finite() => {
                Err(Error::invalid("score.standardised.mean", mean, "must be finite"))
            }
            Some((_, sd)) if !(sd.is_finite() && sd > 0.0) => {
                Err(Error::invalid("score.standardised.sd", sd, "must be finite and > 0"))
            }
            _ => Ok(()),
        }
    }
}

/// New rows to predict, read by [`SavedFit::read_predictors`].
pub struct Predictors {
    /// The designs (intercepts added).
    pub designs: Arc<Designs>,
    /// The scores, transformed as the fit's were.
    pub z: Vec<f64>,
    /// Lines of the file whose fields were all empty, skipped.
    pub empty_rows: Vec<usize>,
}

/// A fit with what it needs to be read back and used.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SavedFit {
    /// [`FORMAT_VERSION`] when written.
    pub format_version: u32,
    /// The model.
    pub model: ModelSpec,
    /// Names of the marginal design's columns (the intercept's first).
    pub marginal_names: Vec<String>,
    /// See `marginal_names`.
    pub slope_names: Vec<String>,
    /// The score column.
    pub score: ScoreColumn,
    /// The fit.
    pub fit: BmsFit,
}

impl SavedFit {
    /// A fit of `model`, checked against it; `names` are the marginal
    /// and the slope design's column names (intercepts first).
    pub fn new(model: &BmsModel, fit: BmsFit, names: (Vec<String>, Vec<String>), score: ScoreColumn) -> Result<Self> {
        let saved = Self {
            format_version: FORMAT_VERSION,
            model: ModelSpec::of(model),
            marginal_names: names.0,
            slope_names: names.1,
            score,
            fit,
        };
        saved.check(model)?;
        Ok(saved)
    }

    /// The saved fit as JSON text (what [`SavedFit::save`] writes).
    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string(self).map_err(|e| Error::invalid("fit", "JSON", e.to_string()))
    }

    /// Write as JSON to `path`, through [`crate::files::write`] (a
    /// symlink's target is written, a failure leaves no half file).
    pub fn save(&self, path: &Path) -> Result<()> {
        crate::files::write(path, self.to_json()?.as_bytes())
            .map_err(|e| Error::invalid("save path", path.display(), e.to_string()))
    }

    /// Read a fit written by [`SavedFit::save`], with its model.
    pub fn load(path: &Path) -> Result<(Self, BmsModel)> {
        let text =
            std::fs::read_to_string(path).map_err(|e| Error::invalid("model file", path.display(), e.to_string()))?;
        Self::from_json(&text).map_err(|e| e.within(path.display()))
    }

    /// Parse and check a saved fit.
    pub fn from_json(text: &str) -> Result<(Self, BmsModel)> {
        #[derive(Deserialize)]
        struct Version {
            format_version: Option<u32>,
        }
        let version: Version =
            serde_json::from_str(text).map_err(|e| Error::invalid("file", "not a saved fit", e.to_string()))?;
        match version.format_version {
            Some(FORMAT_VERSION) => {}
            Some(v) => {
                return Err(Error::invalid(
                    "format_version",
                    v,
                    format!("this build reads version {FORMAT_VERSION}"),
                ))
            }
            None => return Err(Error::invalid("format_version", "missing", "a saved fit has one")),
        }
        let saved: Self =
            serde_json::from_str(text).map_err(|e| Error::invalid("file", "not a saved fit", e.to_string()))?;
        let model = saved.model.model()?;
        saved.check(&model)?;
        Ok((saved, model))
    }

    /// The columns new data needs to be predicted by this fit: the score
    /// and the covariates, no label and no weights.
    pub fn column_spec(&self) -> ColumnSpec {
        ColumnSpec {
            label: String::new(),
            score: self.score.name.clone(),
            weights: None,
            marginal: self.marginal_names[1..].to_vec(),
            slope: self.slope_names[1..].to_vec(),
        }
    }

    /// New rows from a CSV file with this fit's columns (other columns,
    /// a label among them, are ignored), the score transformed as the
    /// fit's was: the designs and the scores to predict.
    pub fn read_predictors(&self, path: &Path) -> Result<Predictors> {
        self.predictors(read_csv(path, &self.column_spec(), 1)?)
    }

    /// New rows read by [`SavedFit::column_spec`] (from a file or from
    /// columns in memory, [`crate::data::from_columns`]), the score
    /// transformed as the fit's was.
    pub fn predictors(&self, mut ds: Dataset) -> Result<Predictors> {
        self.score.apply(&mut ds.z);
        let designs = crate::bms::marginal_slope_designs(ds.n, ds.p_m, ds.p_g, ds.x_m, ds.x_g)?;
        Ok(Predictors {
            designs: Arc::new(designs),
            z: ds.z,
            empty_rows: ds.empty_rows,
        })
    }

    /// The notes a user should read with `pred`, this fit's predictions of
    /// `designs` and `z`: a fit that did not converge, rows beyond the
    /// knots ([`extrapolation_notes`]), rows that could not be predicted
    /// ([`SavedFit::rejected_notes`]) and a missing covariance.
    pub fn prediction_notes(&self, model: &BmsModel, designs: &Designs, z: &[f64], pred: &Predictions) -> Vec<String> {
        let mut notes = Vec::new();
        if !self.fit.converged {
            notes.push(format!(
                "the saved fit did not converge ({}): these predictions come from its best point, not from an \
                 optimum",
                self.fit.termination
            ));
        }
        notes.extend(extrapolation_notes(model, &self.fit.beta, designs, z, &pred.intercept));
        notes.extend(self.rejected_notes(designs, z, &pred.rejected));
        if pred.se_eta.is_none() {
            notes.push("the saved fit has no covariance (it did not end at a minimum): se_eta is left empty".into());
        }
        notes
    }

    /// The notes on rows [`crate::bms::results::predict::Predictions::rejected`] lists:
    /// each row that could not be predicted (at most 10 named, then a count),
    /// with its reason and its values by column name.
    pub fn rejected_notes(&self, designs: &Designs, z: &[f64], rejected: &[(usize, String)]) -> Vec<String> {
        let named = |names: &[String], row: &[f64]| -> Vec<String> {
            names
                .iter()
                .zip(row)
                .skip(1)
                .map(|(n, v)| format!("{n} = {v:e}"))
                .collect()
        };
        let mut notes: Vec<String> = rejected
            .iter()
            .take(10)
            .map(|(i, why)| {
                let mut values = vec![format!("{} = {:e}", self.score.name, z[*i])];
                values.extend(named(&self.marginal_names, designs.x_m_row(*i)));
                values.extend(named(&self.slope_names, designs.x_g_row(*i)));
                values.dedup();
                format!(
                    "data row {} ({}) could not be predicted: {why}; its p, eta and se_eta are left empty (is a value \
                     far outside the fit's data?)",
                    i + 1,
                    values.join(", ")
                )
            })
            .collect();
        if rejected.len() > 10 {
            notes.push(format!("{} rows in all could not be predicted", rejected.len()));
        }
        notes
    }

    /// Every length and value of the fit against the model.
    fn check(&self, model: &BmsModel) -> Result<()> {
        self.score.check()?;
        let p = model.layout().p_total();
        let f = &self.fit;
        let smooths = usize::from(model.bases().score.is_some()) + usize::from(model.bases().link.is_some());
        let block = model.blocks();
        let names = [
            ("marginal_names", self.marginal_names.len(), block.p_m),
            ("slope_names", self.slope_names.len(), block.p_g),
        ];
        let lengths = [
            ("fit.beta", f.beta.len(), p),
            ("fit.lambda", f.lambda.len(), smooths),
            ("fit.hessian", f.hessian.len(), p * p),
            ("fit.covariance", f.covariance.as_ref().map_or(p * p, Vec::len), p * p),
            ("fit.edf.blocks", f.edf.blocks.len(), smooths),
        ];
        for (field, names) in [
            ("marginal_names", &self.marginal_names),
            ("slope_names", &self.slope_names),
        ] {
            if names.first().map(String::as_str) != Some(INTERCEPT) {
                let first = names.first().cloned().unwrap_or_default();
                return Err(Error::invalid(
                    format!("{field}[0]"),
                    first,
                    format!("must be {INTERCEPT}"),
                ));
            }
        }
        for (field, got, want) in names.into_iter().chain(lengths) {
            if got != want {
                return Err(Error::invalid(
                    field,
                    format!("{got} values"),
                    format!("the model needs {want}"),
                ));
            }
        }
        let finite = [
            ("fit.beta", &f.beta),
            ("fit.hessian", &f.hessian),
            ("fit.lambda", &f.lambda),
        ];
        for (field, v) in finite
            .into_iter()
            .chain(f.covariance.as_ref().map(|c| ("fit.covariance", c)))
        {
            if let Some(i) = v.iter().position(|x| !x.is_finite()) {
                return Err(Error::invalid(format!("{field}[{i}]"), v[i], "must be finite"));
            }
        }
        if let Some(k) = f.lambda.iter().position(|&l| l <= 0.0) {
            return Err(Error::invalid(format!("fit.lambda[{k}]"), f.lambda[k], "must be > 0"));
        }
        if let Some(k) = f.beta.iter().position(|b| b.abs() > MAX_COEFFICIENT) {
            return Err(Error::invalid(
                format!("fit.beta[{k}]"),
                format!("{:e}", f.beta[k]),
                format!(
                    "|coefficient| must be at most {MAX_COEFFICIENT:e} (no fit of data within the checked range makes \
                     one larger, and its products would overflow)"
                ),
            ));
        }
        if let Some(v) = &f.covariance {
            check_covariance("fit.covariance", v, p)?;
        }
        Ok(())
    }
}

/// The largest |coefficient| a saved fit may hold: the Newton driver's own
/// bound on coefficient scales (squares stay within the doubles).
pub const MAX_COEFFICIENT: f64 = 1e150;

/// A covariance is symmetric and positive semi-definite to within this
/// relative tolerance: |V_ij - V_ji| <= tol sqrt(V_ii V_jj), and every
/// eigenvalue >= -tol times the largest (an inverse of H + S written by
/// `--save` meets both to rounding, about 1e-15).
pub const COVARIANCE_TOL: f64 = 1e-8;

/// `field`, p x p, checked as a covariance: a negative diagonal, an
/// asymmetric entry or a clearly negative eigenvalue is a named error (a
/// damaged file would otherwise give zero or meaningless standard errors).
pub(crate) fn check_covariance(field: &str, v: &[f64], p: usize) -> Result<()> {
    if let Some(i) = (0..p).find(|&i| v[i * p + i] < 0.0) {
        let rule = "a variance must be >= 0";
        return Err(Error::invalid(format!("{field}[{i}][{i}]"), v[i * p + i], rule));
    }
    for i in 0..p {
        for j in 0..i {
            let scale = (v[i * p + i] * v[j * p + j]).sqrt();
            if (v[i * p + j] - v[j * p + i]).abs() > COVARIANCE_TOL * scale {
                return Err(Error::invalid(
                    format!("{field}[{i}][{j}]"),
                    format!("{:e}, but [{j}][{i}] = {:e}", v[i * p + j], v[j * p + i]),
                    format!("a covariance is symmetric (to {COVARIANCE_TOL:e} of sqrt(V_ii V_jj))"),
                ));
            }
        }
    }
    let (values, _) = matfree_solvers::symmetric_eigen(p, v)?;
    let (lo, hi) = (values[0], values[p - 1]);
    if lo < -COVARIANCE_TOL * hi.abs() {
        return Err(Error::invalid(
            field,
            format!("smallest eigenvalue {lo:e} (largest {hi:e})"),
            format!("a covariance is positive semi-definite (to {COVARIANCE_TOL:e} of its largest eigenvalue)"),
        ));
    }
    Ok(())
}
