//! The sample start (mgcv bam's `samfrac`): on many rows, the fit first on
//! an even subsample with loose tolerances, then the full fit from that
//! fit's coefficients and (under REML) smoothing parameters.
//!
//! A fit from the rigid start spends a third of its evaluations getting
//! near the optimum: the first inner solve from beta_h = beta_w = 0 (about
//! 7 evaluations) and the Fellner-Schall steps toward lambda (5-9). Those
//! moves cost the same on a fraction of the rows, which lands within sampling
//! error of the full fit's estimates; and with a fixed basis lambda settles
//! as n grows (REML's fixed point is `edf / beta^T S beta`, both of which
//! converge), so the sample's lambda is a start within the Fellner-Schall
//! phase's reach. The full fit still selects lambda by its own REML to its
//! own tolerances: the sample moves where it starts, not where it ends.

use std::time::Instant;

use matfree_solvers::observer::Observer;
use matfree_solvers::SolverError;
use serde::{Deserialize, Serialize};

use super::progress::Display;
use super::FitOptions;
use crate::bms::{BmsData, BmsModel};
use crate::device::Device;
use crate::{Error, Result};

/// When and on how many rows a fit starts from a subsample's fit.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SampleStart {
    /// Fits of at least this many rows start from a sample's fit
    /// (`usize::MAX`: never).
    pub min_rows: usize,
    /// The sample's share of the rows (bam's `samfrac`), in (0, 1).
    pub fraction: f64,
    /// The sample's fewest rows, whatever the fraction.
    pub min_sample: usize,
}

impl Default for SampleStart {
    fn default() -> Self {
        Self {
            min_rows: DEFAULT_MIN_ROWS,
            fraction: DEFAULT_FRACTION,
            min_sample: 200_000,
        }
    }
}

/// The default [`SampleStart::fraction`]: 1 in 50, so that from 2M to 10M
/// rows the sample is its 200,000-row floor. What the full fit costs after
/// the sample hardly depends on the sample's size beyond that floor (on the
/// H100, seeds 1-3: 11-14 evaluations at 4M after 200,000 or 400,000 rows,
/// 11-12 at 12M after 240,000 or 1.2M), while the sample's own cost grows
/// with it: 12M rows in 7.41-8.03 s with 240,000 sampled, 8.18-8.19 s with
/// 1.2M; 4M in 2.39-3.16 s against 2.79-3.37 s with 400,000
/// (`benches/RESULTS.md`, session 31).
pub const DEFAULT_FRACTION: f64 = 0.02;

/// The default [`SampleStart::min_rows`].
pub const DEFAULT_MIN_ROWS: usize = 2_000_000;

impl SampleStart {
    /// Never start from a sample.
    pub fn off() -> Self {
        Self {
            min_rows: usize::MAX,
            ..Self::default()
        }
    }

    /// The sample's rows for a fit of `n` rows, `None` where the fit starts
    /// from the rigid fit (fewer than `min_rows`, or a sample that would not
    /// be smaller than half the rows).
    pub fn rows(&self, n: usize) -> Option<usize> {
        if n < self.min_rows {
            return None;
        }
        let rows = ((n as f64 * self.fraction).ceil() as usize).max(self.min_sample);
        (2 * rows <= n).then_some(rows)
    }

    /// Check the ranges (named as `FitOptions` fields).
    pub fn validate(&self) -> Result<()> {
        if !(self.fraction > 0.0 && self.fraction < 1.0) {
            return Err(Error::invalid(
                "sample_start.fraction",
                self.fraction,
                "must lie in (0, 1)",
            ));
        }
        if self.min_sample == 0 {
            return Err(Error::invalid("sample_start.min_sample", 0, "must be >= 1"));
        }
        Ok(())
    }
}

/// What the sample's fit was and gave.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SampleFit {
    /// Rows of the sample (every k-th row of the data).
    pub rows: usize,
    /// Its objective evaluations (each on the sample's rows only).
    pub evaluations: usize,
    /// Whether it converged (to the loose tolerances).
    pub converged: bool,
    /// Its smoothing parameters.
    pub lambda: Vec<f64>,
    /// Its smooths' effective degrees of freedom.
    pub edf: Vec<f64>,
    /// The smoothing parameters the full fit's REML started from: the
    /// sample's, except for a smooth the sample all but shrank away
    /// ([`SAMPLE_EDF_FLOOR`]), which starts at the full data's reference.
    pub start_lambda: Vec<f64>,
    /// Seconds it took (its upload included).
    pub seconds: f64,
    /// Whether the full fit started from it (it does where the sample's
    /// fit converged).
    pub used: bool,
    /// Why the sample could not be fitted, where it could not (the full
    /// fit then starts from the rigid fit).
    pub error: Option<String>,
}

/// A start for the full fit: coefficients and smoothing parameters.
#[derive(Clone, Debug)]
pub(crate) struct Start {
    pub beta: Vec<f64>,
    pub lambda: Vec<f64>,
}

impl SampleFit {
    /// The start it gives the full fit, where it is used.
    pub(crate) fn start(&self, beta: &[f64]) -> Option<Start> {
        self.used.then(|| Start {
            beta: beta.to_vec(),
            lambda: self.start_lambda.clone(),
        })
    }
}

/// `opts` loosened for the sample's fit (bam fits its sample to a
/// convergence tolerance of 1e-2): REML to a decrement of 0.1 (rho within
/// a third of its standard error), a gradient of 1e-2 edf and a change of
/// 1e-2 in V, inner solves to a decrement of 1e-4 (beta within 1e-2
/// standard errors); no sample start of its own.
pub(crate) fn loosened(opts: &FitOptions) -> FitOptions {
    let mut o = opts.clone();
    o.sample_start = SampleStart::off();
    o.reml.decrement_tol = o.reml.decrement_tol.max(0.1);
    o.reml.grad_tol = o.reml.grad_tol.max(1e-2);
    o.reml.value_tol = o.reml.value_tol.max(1e-2);
    o.reml.newton.decrement_tol = o.reml.newton.decrement_tol.max(1e-4);
    o
}

/// The fit (REML, or at the fixed lambda) to an even subsample of at most
/// `rows` rows of `data`, on the same device, to [`loosened`] tolerances;
/// its report and coefficients. A sample that cannot be fitted is reported
/// (`error`) and not used; the caller's interrupt (`observer`) stops it as
/// it stops the fit.
pub(crate) fn sample_fit(
    device: &Device,
    gpus: usize,
    model: &BmsModel,
    data: &BmsData,
    opts: &FitOptions,
    rows: usize,
    observer: &dyn Observer,
) -> Result<(SampleFit, Vec<f64>)> {
    let t = Instant::now();
    let sample = data.strided(rows)?;
    let run = super::fit_on_device_observed(
        device,
        gpus,
        model,
        &sample,
        &loosened(opts),
        Display::Quiet,
        &Interrupts(observer),
    );
    let mut fit = SampleFit {
        rows: sample.n(),
        evaluations: 0,
        converged: false,
        lambda: Vec::new(),
        edf: Vec::new(),
        start_lambda: Vec::new(),
        seconds: 0.0,
        used: false,
        error: None,
    };
    let beta = match run {
        Ok(run) => {
            let f = run.fit;
            fit.evaluations = f.evaluations;
            fit.converged = f.converged;
            let ratio = data.n() as f64 / sample.n() as f64;
            fit.start_lambda = start_lambda(&f.lambda, &f.edf.blocks, &f.rho_ref, ratio);
            fit.edf = f.edf.blocks;
            fit.used = f.converged && f.beta.iter().chain(&fit.start_lambda).all(|v| v.is_finite());
            fit.lambda = f.lambda;
            f.beta
        }
        Err(e @ Error::Solver(SolverError::Interrupted)) => return Err(e),
        Err(e) => {
            fit.error = Some(e.to_string());
            Vec::new()
        }
    };
    fit.seconds = t.elapsed().as_secs_f64();
    Ok((fit, beta))
}

/// A smooth with fewer effective degrees of freedom than this in the
/// sample's fit starts the full fit at the full data's reference.
pub const SAMPLE_EDF_FLOOR: f64 = 0.5;

/// Where the full fit's REML starts, from the sample's fit (its `lambda`,
/// smooths' `edf` and reference `rho_ref`) to a `ratio`-th of the rows:
/// the sample's lambda, which with a fixed basis settles as n grows; but a
/// smooth the sample all but shrank away ([`SAMPLE_EDF_FLOOR`]) starts at
/// the full data's reference (mgcv's `initial.sp`, where the rigid start's
/// REML starts; the sample's reference moved by ln `ratio`, the Hessian
/// growing with the rows). Small samples often shrink a smooth the full
/// data support (at 2,000 rows one smooth in three ends at its upper
/// bound), and a start on that plateau, where V no longer sees the data,
/// keeps the full fit from the minimum: on 100,000 rows, a sample of
/// 10,000 pinned the link smooth, and the full fit started there ended on
/// the plateau with V 0.14 above the minimum.
fn start_lambda(lambda: &[f64], edf: &[f64], rho_ref: &[f64], ratio: f64) -> Vec<f64> {
    let restart = |k: usize| edf.get(k).is_some_and(|&e| e < SAMPLE_EDF_FLOOR);
    (0..lambda.len())
        .map(|k| match rho_ref.get(k) {
            Some(r) if restart(k) => (r + ratio.ln()).exp(),
            _ => lambda[k],
        })
        .collect()
}

/// Passes on only the caller's interrupt: the sample's fit shows nothing.
struct Interrupts<'a>(&'a dyn Observer);

impl Observer for Interrupts<'_> {
    fn interrupted(&self) -> bool {
        self.0.interrupted()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_rows_follow_the_fraction_floor_and_threshold() {
        let s = SampleStart::default();
        assert_eq!(s.rows(1_999_999), None);
        assert_eq!(s.rows(2_000_000), Some(200_000));
        assert_eq!(s.rows(4_000_001), Some(200_000));
        assert_eq!(s.rows(12_000_000), Some(240_000));
        assert_eq!(s.rows(100_000_001), Some(2_000_001));
        let small = SampleStart {
            min_rows: 0,
            fraction: 0.1,
            min_sample: 200_000,
        };
        // A sample of more than half the rows is no saving.
        assert_eq!(small.rows(300_000), None);
        assert_eq!(small.rows(400_000), Some(200_000));
        assert_eq!(SampleStart::off().rows(usize::MAX - 1), None);
    }

    #[test]
    fn a_smooth_the_sample_shrank_away_starts_at_the_full_reference() {
        let lambda = [12.0, 3.0e8];
        let got = start_lambda(&lambda, &[3.0, 0.01], &[2.0, 4.0], 10.0);
        assert_eq!(got[0], 12.0);
        assert!((got[1] - 10.0 * 4f64.exp()).abs() < 1e-9 * got[1], "{got:?}");
        assert_eq!(start_lambda(&lambda, &[3.0, 0.5], &[2.0, 4.0], 10.0), lambda);
        // At fixed lambda there is no reference: the lambda given.
        assert_eq!(start_lambda(&lambda, &[3.0, 0.01], &[], 10.0), lambda);
    }

    /// Estimates the full rows cannot be evaluated at (here, from a
    /// sample that never was: a marginal intercept of 1e6) leave the fit to
    /// the rigid start, with a note, instead of failing it.
    #[test]
    fn a_start_the_full_rows_reject_falls_back_to_the_rigid_start() {
        use crate::bms::io::generator::{generate, GeneratorConfig};
        use matfree_solvers::CpuBackend;
        let g = generate(GeneratorConfig::fit_shape(3_000, 3)).unwrap();
        let objective = g.model.objective(&g.data).unwrap();
        let opts = FitOptions {
            lambda: Some(vec![10.0, 100.0]),
            ..FitOptions::default()
        };
        let mut beta = vec![0.0; g.model.layout().p_total()];
        beta[0] = 1e6;
        let bad = Start {
            beta,
            lambda: vec![10.0, 100.0],
        };
        let fit = |from| {
            super::super::fit_from(&CpuBackend::new(), &objective, &(), &g.model, &g.data, &opts, from).map(|(f, _)| f)
        };
        let plain = fit(None).unwrap();
        let fell_back = fit(Some(&bad)).unwrap();
        assert!(fell_back.converged, "{}", fell_back.termination);
        assert_eq!(fell_back.beta, plain.beta);
        let note = fell_back.warnings.iter().find(|w| w.contains("sample start"));
        assert!(
            note.is_some_and(|w| w.contains("rigid fit instead")),
            "{:?}",
            fell_back.warnings
        );
    }

    #[test]
    fn sample_start_ranges_are_checked() {
        assert!(SampleStart::default().validate().is_ok());
        for fraction in [0.0, 1.0, -0.1, f64::NAN] {
            let s = SampleStart {
                fraction,
                ..SampleStart::default()
            };
            let e = s.validate().unwrap_err().to_string();
            assert!(e.contains("sample_start.fraction"), "{e}");
        }
        let s = SampleStart {
            min_sample: 0,
            ..SampleStart::default()
        };
        assert!(s.validate().unwrap_err().to_string().contains("min_sample"));
    }
}
