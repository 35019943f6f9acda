//! A BMS problem ready to fit, from a CSV file or simulated: the model
//! (bases on `fit_bms`' default knot ranges), the checked data, the column
//! names a summary and a saved fit use, the score's standardisation, and
//! the notes a user should read about how the data were taken. What
//! `fit_bms` and other front ends share.

use std::path::Path;
use std::sync::Arc;

use crate::bms::fit::checks::{check_data, standardise_score, ColumnNames};
use crate::bms::io::generator::{generate_on, GeneratorConfig};
use crate::bms::results::saved::ScoreColumn;
use crate::bms::{Bases, BmsData, BmsModel, CubicBasis};
use crate::data::{empty_rows_note, from_columns, read_csv, ColumnSpec, Dataset, INTERCEPT};
use crate::device::Device;
use crate::{Error, Result};

/// How the model is shaped: the smooths' basis dimensions (0: none) and a
/// Gaussian frailty's standard deviation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModelShape {
    /// Basis dimension of the score warp H(z) (`fit_bms`' default 8).
    pub score_basis: usize,
    /// Basis dimension of the link deviation L(t) (default 6).
    pub link_basis: usize,
    /// Standard deviation of a Gaussian frailty (>= 0; 0: none).
    pub frailty_sd: f64,
}

impl Default for ModelShape {
    fn default() -> Self {
        Self {
            score_basis: 8,
            link_basis: 6,
            frailty_sd: 0.0,
        }
    }
}

/// Knot ranges of the default bases: the score warp on [-4, 4] (a
/// standardised score), the link deviation on [-6, 6] (t = a + b z).
pub const SCORE_KNOTS: (f64, f64) = (-4.0, 4.0);
/// See [`SCORE_KNOTS`].
pub const LINK_KNOTS: (f64, f64) = (-6.0, 6.0);

impl ModelShape {
    /// The frailty's scale `s_f = 1 / sqrt(1 + sd^2)`.
    pub fn s_f(&self) -> Result<f64> {
        let sd = self.frailty_sd;
        if !(sd.is_finite() && sd >= 0.0) {
            return Err(Error::invalid("frailty_sd", sd, "must be finite and >= 0"));
        }
        Ok(1.0 / (1.0 + sd * sd).sqrt())
    }

    /// Uniform cubic bases of these dimensions on the default knot ranges.
    pub fn bases(&self) -> Result<Bases> {
        let basis = |k: usize, (lo, hi): (f64, f64)| (k > 0).then(|| CubicBasis::uniform(lo, hi, k)).transpose();
        Bases::new(
            basis(self.score_basis, SCORE_KNOTS)?,
            basis(self.link_basis, LINK_KNOTS)?,
            self.s_f()?,
        )
    }
}

/// The rows a model of this shape needs at least: one per coefficient.
fn min_rows(columns: &ColumnSpec, shape: ModelShape) -> usize {
    2 + columns.marginal.len() + columns.slope.len() + shape.score_basis + shape.link_basis
}

/// A problem ready to fit.
#[derive(Debug)]
pub struct Problem {
    /// The model.
    pub model: BmsModel,
    /// The data, checked against it.
    pub data: BmsData,
    /// The true coefficients, where the data were simulated.
    pub truth: Option<Vec<f64>>,
    /// The marginal design's column names ([`INTERCEPT`] first).
    pub marginal_names: Vec<String>,
    /// The slope design's column names ([`INTERCEPT`] first).
    pub slope_names: Vec<String>,
    /// The score column and the standardisation applied to it.
    pub score: ScoreColumn,
    /// Where the data came from, for the summary.
    pub source: String,
    /// Notes on how the data were taken (a standardised score, skipped
    /// rows).
    pub notes: Vec<String>,
}

impl Problem {
    /// Read `path` (see [`crate::data::parse_csv`]), standardise the score
    /// unless `keep_score` (with a note), and check the data for the model
    /// ([`check_data`], errors naming the columns).
    pub fn from_csv(path: &Path, columns: &ColumnSpec, shape: ModelShape, keep_score: bool) -> Result<Self> {
        let ds = read_csv(path, columns, min_rows(columns, shape))?;
        let file = path.display().to_string();
        let notes = empty_rows_note(&file, &ds.empty_rows).into_iter().collect();
        let source = format!("{file} ({} rows)", ds.n);
        Self::from_dataset(ds, &columns.score, shape, keep_score, source, notes)
    }

    /// [`Problem::from_csv`] on named columns in memory (a front end's
    /// arrays, see [`crate::data::from_columns`]); `name` names them in
    /// errors and in the summary.
    pub fn from_columns(
        name: &str,
        data: &[(&str, &[f64])],
        columns: &ColumnSpec,
        shape: ModelShape,
        keep_score: bool,
    ) -> Result<Self> {
        let ds = from_columns(name, data, columns, min_rows(columns, shape))?;
        let source = format!("{name} ({} rows)", ds.n);
        Self::from_dataset(ds, &columns.score, shape, keep_score, source, Vec::new())
    }

    /// The problem of a data set read by the rules of [`ColumnSpec`]:
    /// the score (column `score`) standardised unless `keep_score`, the
    /// model built and the data checked for it.
    fn from_dataset(
        mut ds: Dataset,
        score_column: &str,
        shape: ModelShape,
        keep_score: bool,
        source: String,
        mut notes: Vec<String>,
    ) -> Result<Self> {
        let model = BmsModel::new(shape.bases()?, ds.p_m, ds.p_g)?;
        let mut score = ScoreColumn::plain(score_column);
        if !keep_score {
            if let Some((note, moments)) = standardise_score(&mut ds.z, score_column) {
                notes.push(note);
                score.standardised = Some(moments);
            }
        }
        let designs = Arc::new(crate::bms::marginal_slope_designs(
            ds.n, ds.p_m, ds.p_g, ds.x_m, ds.x_g,
        )?);
        let data = BmsData::new(designs, ds.z, ds.y, ds.weights)?;
        let names = ColumnNames {
            marginal: &ds.marginal_names,
            slope: &ds.slope_names,
        };
        // Here for errors that name the columns; the fit repeats the checks
        // and reports their warnings.
        check_data(&model, &data, Some(names))?;
        Ok(Self {
            model,
            data,
            truth: None,
            marginal_names: ds.marginal_names,
            slope_names: ds.slope_names,
            score,
            source,
            notes,
        })
    }

    /// `n` rows simulated from the model with two marginal covariates and
    /// one slope covariate (`GeneratorConfig`), the truth kept. Covariates
    /// are named as a CSV of the same data would have them: `m1, m2` and
    /// `g1`, different columns. Each row's intercept is solved on the CPU.
    pub fn simulated(n: usize, seed: u64, shape: ModelShape) -> Result<Self> {
        Self::simulated_on(n, seed, shape, &Device::Cpu { reason: "asked".into() })
    }

    /// As [`Problem::simulated`], each row's intercept solved on `device`
    /// ([`generate_on`]).
    pub fn simulated_on(n: usize, seed: u64, shape: ModelShape, device: &Device) -> Result<Self> {
        let cfg = GeneratorConfig {
            n,
            p_m: 3,
            p_g: 2,
            p_h: shape.score_basis,
            p_w: shape.link_basis,
            s_f: shape.s_f()?,
            seed,
        };
        let g = generate_on(cfg, device)?;
        let names = |prefix: &str, p: usize| -> Vec<String> {
            std::iter::once(INTERCEPT.to_string())
                .chain((1..p).map(|j| format!("{prefix}{j}")))
                .collect()
        };
        Ok(Self {
            source: format!("simulated, {n} rows, seed {seed}"),
            model: g.model,
            data: g.data,
            truth: Some(g.beta),
            marginal_names: names("m", 3),
            slope_names: names("g", 2),
            score: ScoreColumn::plain("z"),
            notes: Vec::new(),
        })
    }
}
