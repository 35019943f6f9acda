//! The fit's report, as `fit_bms` prints it and writes it as JSON: mgcv's
//! `summary.gam` for this model (coefficients with standard errors and z
//! values, smoothing parameters and edf per smooth, the REML score, also
//! at fixed lambda), the iteration counts, and what the caller adds (the
//! backend, the data's description, timed phases, notes).

use std::fmt;

use serde::Serialize;

use crate::bms::fit::BmsFit;
use crate::bms::model::cubic_basis::CubicBasis;
use crate::bms::results::summary::{coefficients, Coefficient, SmoothTerm};
use crate::bms::{Bases, BmsModel};
use crate::device::gb;

/// Everything a fit reports, printed by its `Display` (a table) and
/// serialised as JSON; every printed number is also in the JSON.
#[derive(Clone, Debug, Serialize)]
pub struct FitSummary {
    /// Where the fit ran (filled by the caller).
    pub backend: String,
    /// The GPU memory the fit used (filled by the caller; none on the CPU
    /// or where the device has no memory pool to read it from).
    pub device_memory: Option<crate::device::MemoryUse>,
    /// The data's description (filled by the caller).
    pub data: String,
    /// Rows.
    pub n: usize,
    /// Coefficients.
    pub p: usize,
    /// `REML (LAML)` or `fixed lambda`.
    pub method: String,
    /// Whether the fit converged.
    pub converged: bool,
    /// Why it stopped.
    pub termination: String,
    /// The REML (LAML) score at the fit's lambda (also for fixed lambda).
    pub reml_score: Option<f64>,
    /// The penalised negative log-likelihood.
    pub penalised_neglog: f64,
    /// Total effective degrees of freedom.
    pub edf_total: f64,
    /// Newton iterations of the last inner solve.
    pub newton_iterations: usize,
    /// Newton iterations of the first inner solve.
    pub first_newton_iterations: usize,
    /// Outer REML iterations.
    pub reml_iterations: usize,
    /// Objective evaluations (the sample start's not included).
    pub evaluations: usize,
    /// The sample start's fit, where REML started from one.
    pub sample_start: Option<crate::bms::fit::SampleFit>,
    /// Every coefficient (the table prints the parametric ones).
    pub coefficients: Vec<Coefficient>,
    /// The smooth terms.
    pub smooths: Vec<SmoothTerm>,
    /// Named phases and their seconds (filled by the caller).
    pub phases: Vec<(String, f64)>,
    /// Notes and warnings (the fit's warnings, and the caller's).
    pub notes: Vec<String>,
    /// The REML loop's iterations (rho, V, gradient, step, inner solves).
    pub reml_trace: Option<matfree_solvers::reml::RemlReport>,
}

/// Column names of the two designs (intercepts first), for the table.
#[derive(Clone, Copy, Debug)]
pub struct DesignNames<'a> {
    /// The marginal design's columns.
    pub marginal: &'a [String],
    /// The slope design's columns.
    pub slope: &'a [String],
}

impl BmsFit {
    /// The report of this fit of `model` to `n` rows; `truth` (simulated
    /// data) adds a column. The caller fills `backend`, `data`, `phases`
    /// and adds its own notes after the fit's warnings.
    pub fn summary(&self, model: &BmsModel, n: usize, names: DesignNames<'_>, truth: Option<&[f64]>) -> FitSummary {
        let p = self.beta.len();
        let nan = vec![f64::NAN; p * p];
        let cov = self.covariance.as_deref().unwrap_or(&nan);
        let coefficients = coefficients(&self.beta, cov, &parameter_names(model, names), truth);
        let smooths = smooth_blocks(model)
            .into_iter()
            .zip(&self.lambda)
            .zip(&self.edf.blocks)
            .map(|(((smooth, range), &lambda), &edf)| SmoothTerm {
                name: smooth.name().into(),
                dim: range.len(),
                lambda,
                edf,
            })
            .collect();
        FitSummary {
            backend: String::new(),
            device_memory: None,
            data: String::new(),
            n,
            p,
            method: if self.reml { "REML (LAML)" } else { "fixed lambda" }.into(),
            converged: self.converged,
            termination: self.termination.clone(),
            reml_score: self.reml_score,
            penalised_neglog: self.penalised_neglog,
            edf_total: self.edf.total,
            newton_iterations: self.newton_iterations,
            first_newton_iterations: self.first_newton_iterations,
            reml_iterations: self.reml_iterations,
            evaluations: self.evaluations,
            sample_start: self.sample_start.clone(),
            coefficients,
            smooths,
            phases: Vec::new(),
            notes: self.warnings.clone(),
            reml_trace: self.reml_report.clone(),
        }
    }
}

impl fmt::Display for FitSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&table(self))
    }
}

/// Each coefficient's index and printed name: `marginal:<column>`,
/// `slope:<column>`, `H:b<k>`, `L:b<k>`.
pub fn parameter_names(model: &BmsModel, names: DesignNames<'_>) -> Vec<(usize, String)> {
    let b = model.blocks();
    let m = names
        .marginal
        .iter()
        .enumerate()
        .map(|(j, n)| (j, format!("marginal:{n}")));
    let g = names
        .slope
        .iter()
        .enumerate()
        .map(|(j, n)| (b.p_m + j, format!("slope:{n}")));
    let smooth = |range: &Option<std::ops::Range<usize>>, prefix: &'static str| {
        let range = range.clone();
        range
            .into_iter()
            .flatten()
            .enumerate()
            .map(move |(k, j)| (j, format!("{prefix}:b{}", k + 1)))
    };
    m.chain(g).chain(smooth(&b.h, "H")).chain(smooth(&b.w, "L")).collect()
}

/// A smooth term of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Smooth {
    /// The score warp H(z).
    ScoreWarp,
    /// The link deviation L(t), t = a + b z.
    LinkDeviation,
}

impl Smooth {
    /// Its name in the summary and on the plot.
    pub fn name(self) -> &'static str {
        match self {
            Self::ScoreWarp => "score warp H(z)",
            Self::LinkDeviation => "link deviation L(t)",
        }
    }

    /// Its basis among `bases` (`None` where the model has no such term).
    pub fn basis(self, bases: &Bases) -> Option<&CubicBasis> {
        match self {
            Self::ScoreWarp => bases.score.as_ref(),
            Self::LinkDeviation => bases.link.as_ref(),
        }
    }

    /// The interval a plot shows it on, inside the default knots
    /// ([`crate::bms::io::problem::SCORE_KNOTS`], [`crate::bms::io::problem::LINK_KNOTS`]),
    /// where the rows are: z in [-3, 3] (99.7% of a standardised score), t
    /// in [-5, 5].
    pub fn plot_range(self) -> (f64, f64) {
        match self {
            Self::ScoreWarp => (-3.0, 3.0),
            Self::LinkDeviation => (-5.0, 5.0),
        }
    }

    /// The label of a plot's x axis.
    pub fn x_label(self) -> &'static str {
        match self {
            Self::ScoreWarp => "z",
            Self::LinkDeviation => "t = a + b z",
        }
    }
}

/// The smooth terms the model has and their coefficient ranges.
pub fn smooth_blocks(model: &BmsModel) -> Vec<(Smooth, std::ops::Range<usize>)> {
    let b = model.blocks();
    let mut out = Vec::new();
    out.extend(b.h.clone().map(|r| (Smooth::ScoreWarp, r)));
    out.extend(b.w.clone().map(|r| (Smooth::LinkDeviation, r)));
    out
}

/// `x` to `digits` significant digits as a statistician reads it: plain
/// between 1e-3 and 1e5 (9.894, 0.01234, 1234), otherwise in R's exponent
/// form (1.234e+07, 5.1e-06).
pub fn signif(x: f64, digits: usize) -> String {
    if !x.is_finite() || x == 0.0 {
        return format!("{x}");
    }
    let exp = x.abs().log10().floor() as i32;
    if (-3..5).contains(&exp) {
        let decimals = (digits as i32 - 1 - exp).max(0) as usize;
        return format!("{x:.decimals$}");
    }
    let m = format!("{:.*e}", digits - 1, x);
    let (mantissa, e) = m.split_once('e').unwrap_or((&m, "0"));
    let e: i32 = e.parse().unwrap_or(0);
    let mantissa = if mantissa.contains('.') {
        mantissa.trim_end_matches('0').trim_end_matches('.')
    } else {
        mantissa
    };
    format!("{mantissa}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
}

/// The printed table.
fn table(r: &FitSummary) -> String {
    let mut s = String::new();
    s += "Bernoulli marginal-slope model\n";
    s += &format!("data: {}\nbackend: {}\n", r.data, r.backend);
    if let Some(m) = r.device_memory {
        let (peak, total) = (gb(m.peak_bytes), gb(m.total_bytes));
        s += &format!("device memory: peak {peak} of {total}\n");
    }
    s += &format!(
        "n = {}, p = {}, smoothing selection: {}, converged: {} ({})\n\n",
        r.n, r.p, r.method, r.converged, r.termination
    );
    s += "Parametric coefficients:\n";
    s += &format!(
        "{:<24} {:>12} {:>12} {:>9} {:>10}\n",
        "", "Estimate", "Std. Error", "z value", "Truth"
    );
    for c in r
        .coefficients
        .iter()
        .filter(|c| c.name.starts_with("marginal:") || c.name.starts_with("slope:"))
    {
        let truth = c.truth.map_or("-".to_string(), |t| signif(t, 5));
        s += &format!(
            "{:<24} {:>12} {:>12} {:>9} {:>10}\n",
            c.name,
            signif(c.estimate, 5),
            signif(c.std_error, 5),
            signif(c.z_value, 4),
            truth
        );
    }
    s += "\nSmooth terms:\n";
    s += &format!("{:<24} {:>6} {:>12} {:>9}\n", "", "dim", "lambda", "edf");
    for t in &r.smooths {
        s += &format!(
            "{:<24} {:>6} {:>12} {:>9.3}\n",
            t.name,
            t.dim,
            signif(t.lambda, 4),
            t.edf
        );
    }
    s += "\n";
    if let Some(v) = r.reml_score {
        s += &format!("REML score: {v:.6}\n");
    }
    s += &format!("penalised neglog: {:.6}\n", r.penalised_neglog);
    s += &format!("total edf: {:.3}\n", r.edf_total);
    s += &format!(
        "iterations: REML {}, Newton (first inner solve) {}, Newton (last inner solve) {}, objective evaluations {}\n",
        r.reml_iterations, r.first_newton_iterations, r.newton_iterations, r.evaluations
    );
    if let Some(st) = &r.sample_start {
        s += &format!(
            "sample start: {} rows, objective evaluations {} (each on the sample), {}\n",
            st.rows,
            st.evaluations,
            if st.used { "used" } else { "not used" }
        );
    }
    s += &format!(
        "time (s): {}\n",
        r.phases
            .iter()
            .map(|(k, v)| format!("{k} {v:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for n in &r.notes {
        s += &format!("note: {n}\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bms::io::problem::ModelShape;

    /// Each smooth the model has, in beta's order, with its own basis, and
    /// plotted inside its knots (beyond them the smooth is extrapolated).
    #[test]
    fn smooths_are_found_by_block_and_plotted_inside_their_knots() {
        let shape = ModelShape::default();
        let model = BmsModel::new(shape.bases().unwrap(), 3, 2).unwrap();
        let blocks = smooth_blocks(&model);
        let kinds: Vec<Smooth> = blocks.iter().map(|(s, _)| *s).collect();
        assert_eq!(kinds, [Smooth::ScoreWarp, Smooth::LinkDeviation]);
        assert_eq!(blocks[0].1, 5..13);
        assert_eq!(blocks[1].1, 13..19);
        for (smooth, range) in blocks {
            let basis = smooth.basis(model.bases()).unwrap();
            assert_eq!(basis.dim(), range.len());
            let (knots, (lo, hi)) = (basis.knots(), smooth.plot_range());
            assert!(
                knots[0] < lo && lo < hi && hi < knots[knots.len() - 1],
                "{smooth:?}: {knots:?}"
            );
        }
        assert_eq!(Smooth::ScoreWarp.plot_range(), (-3.0, 3.0));
        assert_eq!(Smooth::LinkDeviation.plot_range(), (-5.0, 5.0));
        let link_only = ModelShape {
            score_basis: 0,
            ..shape
        };
        let model = BmsModel::new(link_only.bases().unwrap(), 3, 2).unwrap();
        let blocks = smooth_blocks(&model);
        assert_eq!(blocks, [(Smooth::LinkDeviation, 5..11)]);
        assert!(Smooth::ScoreWarp.basis(model.bases()).is_none());
    }
}
