//! Predictions from a fit: for each row of new data, the linear predictor
//! eta(z) at the row's calibrated intercept, the probability
//! P(y = 1 | x, z) = Phi(eta), and the standard error of eta by the delta
//! method.
//!
//! The intercept a is not a coefficient but a function of the row's theta
//! (the root of the marginal calibration), so eta moves with beta through a
//! as well: `d eta / d theta_u = eta_a a_u + eta_theta_u` with
//! `a_u = -F_u / F_a`, the observed jet e_u that Stage 2 uses. With
//! `J_i = P_i^T e_i` (the design rows times e_q and e_b, then the warp and
//! link entries as they are), `se(eta_i) = sqrt(J_i^T V J_i)` for the fit's
//! penalised (Bayesian) covariance V, as mgcv's `predict(..., se.fit = TRUE)`.
//!
//! Scores and link arguments outside the bases' knots are extrapolated
//! linearly: every projected basis function is linear outside its knot
//! range (`shared/docs/bms-model.md`), so H(z) and L(t) continue along
//! their end tangents; nothing is clamped. A row whose calibration fails
//! there (F_a <= 0, possible when an extrapolated L'(t) < -1, or a value
//! far outside the fit's data) does not fail the others: it is listed in
//! [`Predictions::rejected`] with the reason, its values are NaN, and the
//! CSV leaves them empty.
//!
//! The CPU path evaluates Stage 1 and the first-order half of Stage 2 in
//! chunks of rows (a chunk's Stage-1 bundle is held at once). The GPU path
//! runs the device's Stage 1 and Stage 2 with every label 0 and weight 1,
//! so that a row's gradient is `lambda(-eta) e_u` with the Mills ratio
//! lambda > 0, and divides it out on the host; rows where lambda(-eta) is
//! too small for that to keep full precision (eta < -33, p < 1e-238) are
//! recomputed on the CPU. The two agree to rounding.

use crate::bms::MarginalSlope;
use std::ops::Range;
use std::sync::Arc;

use rayon::prelude::*;

use crate::bms::fit::BmsFit;
use crate::bms::model::stage2::eta_gradients;
use crate::bms::numerics::probit::norm_cdf;
use crate::bms::{BmsData, BmsModel, RowKernelInputs};
#[cfg(feature = "cuda")]
use crate::cuda::Gpu;
use crate::designs::check_matrix;
use crate::device::Device;
use crate::{Designs, Error, Result};

/// Rows per chunk of the CPU path: its Stage-1 bundle (about 10 KB a row at
/// fit_bms' default bases) stays in the tens of megabytes.
pub const CPU_CHUNK_ROWS: usize = 8_192;
/// Below this many rows the CPU predicts even where a GPU is given (the
/// upload and launches cost more than the rows).
pub const GPU_MIN_ROWS: usize = 4_096;
/// Rows per chunk of the GPU path (bounds the device memory of one chunk's
/// row Hessians, which Stage 2 writes whether or not they are used).
pub const GPU_CHUNK_ROWS: usize = 1 << 21;

/// Per-row predictions.
#[derive(Clone, Debug, PartialEq)]
pub struct Predictions {
    /// The linear predictor eta(z_i) (frailty scale included).
    pub eta: Vec<f64>,
    /// P(y_i = 1 | x_i, z_i) = Phi(eta_i).
    pub p: Vec<f64>,
    /// The standard error of eta_i by the delta method (`None` when the fit
    /// has no covariance: it did not end at a minimum).
    pub se_eta: Option<Vec<f64>>,
    /// The calibrated intercepts a_i.
    pub intercept: Vec<f64>,
    /// Rows that could not be predicted (0-based, in order) with the
    /// reason; their eta, p, se_eta and intercept are NaN.
    pub rejected: Vec<(usize, String)>,
}

impl Predictions {
    /// Write as CSV: `row` (1-based, the input's data row), `p`, `eta` and
    /// `se_eta` (empty when there is no covariance), each number in the
    /// shortest form that reads back to the same f64; a rejected row's
    /// values are empty.
    pub fn write_csv(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        let show = |v: f64| if v.is_nan() { String::new() } else { v.to_string() };
        writeln!(out, "row,p,eta,se_eta")?;
        for i in 0..self.eta.len() {
            let se = self.se_eta.as_ref().map_or(String::new(), |s| show(s[i]));
            writeln!(out, "{},{},{},{se}", i + 1, show(self.p[i]), show(self.eta[i]))?;
        }
        Ok(())
    }
}

/// Coefficients and their covariance, checked against a model.
#[derive(Clone, Copy, Debug)]
pub struct Estimates<'a> {
    /// beta = (beta_m, beta_g, beta_h, beta_w).
    pub beta: &'a [f64],
    /// The penalised covariance of beta (p x p, row-major), if any.
    pub covariance: Option<&'a [f64]>,
}

impl<'a> Estimates<'a> {
    /// The estimates of a fit.
    pub fn of(fit: &'a BmsFit) -> Self {
        Self {
            beta: &fit.beta,
            covariance: fit.covariance.as_deref(),
        }
    }

    fn check(&self, model: &BmsModel) -> Result<()> {
        let p = model.layout().p_total();
        check_matrix("beta", self.beta, p, 1)?;
        if let Some(v) = self.covariance {
            check_matrix("covariance", v, p, p)?;
        }
        Ok(())
    }
}

impl BmsFit {
    /// Predict new rows (designs and scores) from this fit of `model`, on
    /// `device` where it is a GPU and there are enough rows.
    pub fn predict(&self, device: &Device, model: &BmsModel, designs: Arc<Designs>, z: &[f64]) -> Result<Predictions> {
        predict(device, model, Estimates::of(self), designs, z)
    }
}

/// Predict rows of new data: on the GPU where `device` is one and there
/// are at least [`GPU_MIN_ROWS`] rows, on the CPU otherwise.
pub fn predict(
    device: &Device,
    model: &BmsModel,
    est: Estimates<'_>,
    designs: Arc<Designs>,
    z: &[f64],
) -> Result<Predictions> {
    let data = predictors(model, est, designs, z)?;
    match device {
        #[cfg(feature = "cuda")]
        Device::Gpu(gpu) if data.n() >= GPU_MIN_ROWS => gpu::rows(gpu, model, est, &data),
        _ => cpu_rows(model, est, &data),
    }
}

/// [`predict`] on the CPU.
pub fn predict_cpu(model: &BmsModel, est: Estimates<'_>, designs: Arc<Designs>, z: &[f64]) -> Result<Predictions> {
    cpu_rows(model, est, &predictors(model, est, designs, z)?)
}

/// [`predict`] on one GPU, whatever the number of rows.
#[cfg(feature = "cuda")]
pub fn predict_gpu(
    gpu: &Arc<Gpu>,
    model: &BmsModel,
    est: Estimates<'_>,
    designs: Arc<Designs>,
    z: &[f64],
) -> Result<Predictions> {
    gpu::rows(gpu, model, est, &predictors(model, est, designs, z)?)
}

/// The rows as a data set with every label 0 and weight 1 (neither enters
/// eta; the GPU path relies on the label), after checking the estimates
/// and the designs' widths against the model.
fn predictors(model: &BmsModel, est: Estimates<'_>, designs: Arc<Designs>, z: &[f64]) -> Result<BmsData> {
    est.check(model)?;
    crate::row_hessian::check_layout_designs(model.layout(), &designs)?;
    let n = designs.n();
    BmsData::new(designs, z.to_vec(), vec![0.0; n], vec![1.0; n])
}

/// Ranges of at most `chunk` rows covering 0..n.
fn chunks(n: usize, chunk: usize) -> impl Iterator<Item = Range<usize>> {
    (0..n).step_by(chunk).map(move |s| s..(s + chunk).min(n))
}

/// An error from a chunk of rows, with its row numbers made global.
fn in_chunk(e: Error, start: usize) -> Error {
    match e {
        Error::RowRejected { row, reason } => Error::RowRejected {
            row: row + start,
            reason,
        },
        Error::InvalidInput { field, value, rule } if start > 0 => Error::InvalidInput {
            field: format!("{field} (row numbers from {start})"),
            value,
            rule,
        },
        other => other,
    }
}

/// Per-row eta, intercept and d eta / d theta (n x r) of some rows, and the
/// rows (0-based within them) that could not be evaluated.
struct Jets {
    eta: Vec<f64>,
    intercept: Vec<f64>,
    grad: Vec<f64>,
    rejected: Vec<(usize, String)>,
}

impl Jets {
    fn with_capacity(n: usize, r: usize) -> Self {
        Self {
            eta: Vec::with_capacity(n),
            intercept: Vec::with_capacity(n),
            grad: Vec::with_capacity(n * r),
            rejected: Vec::new(),
        }
    }

    /// Appends `other`, whose rows follow this one's.
    fn append(&mut self, other: Jets) {
        let start = self.eta.len();
        self.rejected
            .extend(other.rejected.into_iter().map(|(i, why)| (i + start, why)));
        self.eta.extend(other.eta);
        self.intercept.extend(other.intercept);
        self.grad.extend(other.grad);
    }

    /// One row that could not be evaluated: NaN values and the reason.
    fn rejected_row(r: usize, reason: String) -> Self {
        Self {
            eta: vec![f64::NAN],
            intercept: vec![f64::NAN],
            grad: vec![f64::NAN; r],
            rejected: vec![(0, reason)],
        }
    }
}

fn cpu_jets(model: &BmsModel, beta: &[f64], data: &BmsData) -> Result<Jets> {
    let mut out = Jets::with_capacity(data.n(), model.layout().r());
    // One bundle for every chunk: its memory is reused, not returned to the
    // system and faulted back in a chunk later.
    let mut inputs = RowKernelInputs::default();
    for range in chunks(data.n(), CPU_CHUNK_ROWS) {
        let start = range.start;
        let part = data.rows(range)?;
        let jets = match chunk_jets(model, beta, &part, &mut inputs) {
            Err(Error::RowRejected { .. }) => row_by_row(model, beta, &part, &mut inputs),
            other => other,
        };
        out.append(jets.map_err(|e| in_chunk(e, start))?);
    }
    Ok(out)
}

/// The jets of a chunk of rows at once.
fn chunk_jets(model: &BmsModel, beta: &[f64], part: &BmsData, inputs: &mut RowKernelInputs) -> Result<Jets> {
    let intercept = model.stage1_into(part, beta, inputs)?;
    let grad = eta_gradients(inputs)?;
    Ok(Jets {
        eta: inputs.e_obs.clone(),
        intercept,
        grad,
        rejected: Vec::new(),
    })
}

/// A chunk in which some row was rejected, one row at a time, so that the
/// others are predicted and each rejected row is listed with its reason.
fn row_by_row(model: &BmsModel, beta: &[f64], part: &BmsData, inputs: &mut RowKernelInputs) -> Result<Jets> {
    let r = model.layout().r();
    let mut out = Jets::with_capacity(part.n(), r);
    for i in 0..part.n() {
        let row = match chunk_jets(model, beta, &part.rows(i..i + 1)?, inputs) {
            Err(Error::RowRejected { reason, .. }) => Jets::rejected_row(r, reason),
            other => other?,
        };
        out.append(row);
    }
    Ok(out)
}

fn cpu_rows(model: &BmsModel, est: Estimates<'_>, data: &BmsData) -> Result<Predictions> {
    let jets = cpu_jets(model, est.beta, data)?;
    Ok(finish(model, est, &data.designs, jets))
}

/// Probabilities and delta-method standard errors from the jets.
fn finish(model: &BmsModel, est: Estimates<'_>, designs: &Designs, jets: Jets) -> Predictions {
    let r = model.layout().r();
    let p = jets.eta.iter().map(|&e| norm_cdf(e)).collect();
    let se_eta = est.covariance.map(|v| {
        jets.grad
            .par_chunks(r)
            .enumerate()
            .map(|(i, e)| delta_se(model, designs, i, e, v))
            .collect()
    });
    Predictions {
        eta: jets.eta,
        p,
        se_eta,
        intercept: jets.intercept,
        rejected: jets.rejected,
    }
}

/// sqrt(J^T V J) with J = P_i^T e: the marginal design row times e_q, the
/// slope design row times e_b, then e's warp and link entries. The quadratic
/// form of a positive semi-definite V can round below zero when J is
/// (nearly) in its null space; that is 0.
fn delta_se(model: &BmsModel, designs: &Designs, i: usize, e: &[f64], v: &[f64]) -> f64 {
    let blk = model.blocks();
    let mut j = vec![0.0; model.layout().p_total()];
    for (k, x) in designs.x_m_row(i).iter().enumerate() {
        j[blk.m_range().start + k] = x * e[0];
    }
    for (k, x) in designs.x_g_row(i).iter().enumerate() {
        j[blk.g_range().start + k] = x * e[1];
    }
    for (range, at) in model.layout().direct_blocks() {
        let len = range.len();
        j[range].copy_from_slice(&e[at..at + len]);
    }
    let p = j.len();
    let q: f64 = v
        .chunks_exact(p)
        .zip(&j)
        .map(|(row, ja)| ja * row.iter().zip(&j).map(|(a, b)| a * b).sum::<f64>())
        .sum();
    // A rejected row's NaN jet stays NaN (max would make it 0).
    if q.is_nan() {
        f64::NAN
    } else {
        q.max(0.0).sqrt()
    }
}

/// How many rows reach past the knots of the score warp (z) or of the link
/// deviation (t = a + b z), where both are extrapolated linearly.
pub fn extrapolation_notes(model: &BmsModel, beta: &[f64], designs: &Designs, z: &[f64], a: &[f64]) -> Vec<String> {
    let outside = |knots: &[f64], x: &mut dyn Iterator<Item = f64>| {
        let (lo, hi) = (knots[0], knots[knots.len() - 1]);
        (x.filter(|v| *v < lo || *v > hi).count(), lo, hi)
    };
    let g = model.blocks().g_range();
    let slope = |i: usize| -> f64 {
        designs
            .x_g_row(i)
            .iter()
            .zip(&beta[g.clone()])
            .map(|(x, b)| x * b)
            .sum()
    };
    let bases = model.bases();
    let mut notes = Vec::new();
    if let Some(score) = &bases.score {
        let (k, lo, hi) = outside(score.knots(), &mut z.iter().copied());
        notes.push((k, format!("scores outside the score warp's knots [{lo}, {hi}]")));
    }
    if let Some(link) = &bases.link {
        let (k, lo, hi) = outside(link.knots(), &mut (0..z.len()).map(|i| a[i] + slope(i) * z[i]));
        notes.push((
            k,
            format!("t = a + b z outside the link deviation's knots [{lo}, {hi}]"),
        ));
    }
    notes
        .into_iter()
        .filter(|(k, _)| *k > 0)
        .map(|(k, what)| format!("{k} of {} rows have {what}: extrapolated linearly", z.len()))
        .collect()
}

/// The GPU path (the `cuda` feature).
#[cfg(feature = "cuda")]
mod gpu {
    use std::sync::Arc;

    use rayon::prelude::*;

    use super::{chunks, cpu_jets, finish, in_chunk, BmsData, BmsModel, Estimates, Jets, Predictions, GPU_CHUNK_ROWS};
    use crate::bms::device::DeviceStage1;
    use crate::bms::numerics::probit::log_ndtr_mills_curvature;
    use crate::cuda::Gpu;
    use crate::{Error, Result};

    /// The smallest Mills ratio lambda(-eta) the GPU path divides by (eta >
    /// about -33.8): below it the device's gradient loses precision to
    /// underflow, and the row is recomputed on the CPU.
    const MIN_MILLS: f64 = 1e-250;

    pub(crate) fn rows(gpu: &Arc<Gpu>, model: &BmsModel, est: Estimates<'_>, data: &BmsData) -> Result<Predictions> {
        let r = model.layout().r();
        let mut out = Jets::with_capacity(data.n(), r);
        for range in chunks(data.n(), GPU_CHUNK_ROWS) {
            let start = range.start;
            let part = data.rows(range)?;
            let stage = DeviceStage1::new(gpu.clone(), model, &part).map_err(|e| in_chunk(e, start))?;
            let eval = match stage.evaluate(est.beta) {
                Ok(eval) => eval,
                // Some row rejected: the CPU predicts the chunk and lists them.
                Err(Error::RowRejected { .. }) => {
                    out.append(cpu_jets(model, est.beta, &part).map_err(|e| in_chunk(e, start))?);
                    continue;
                }
                Err(e) => return Err(in_chunk(e, start)),
            };
            let mut jets = Jets {
                eta: stage.observed_eta()?,
                intercept: stage.intercepts()?,
                grad: gpu.download(&eval.grad)?,
                rejected: Vec::new(),
            };
            drop(eval);
            let redo = divide_out_mills(&mut jets, r);
            for i in redo {
                let row = cpu_jets(model, est.beta, &part.rows(i..i + 1)?).map_err(|e| in_chunk(e, start + i))?;
                jets.eta[i] = row.eta[0];
                jets.intercept[i] = row.intercept[0];
                jets.grad[i * r..(i + 1) * r].copy_from_slice(&row.grad);
                jets.rejected.extend(row.rejected.into_iter().map(|(_, why)| (i, why)));
            }
            out.append(jets);
        }
        Ok(finish(model, est, &data.designs, out))
    }

    /// Turn the device's gradients `lambda(-eta) e_u` (label 0, weight 1) into
    /// e_u; returns the rows to recompute on the CPU (lambda too small).
    fn divide_out_mills(jets: &mut Jets, r: usize) -> Vec<usize> {
        let redo: Vec<bool> = jets
            .grad
            .par_chunks_mut(r)
            .zip(&jets.eta)
            .map(|(g, &eta)| {
                let (_, mills, _) = log_ndtr_mills_curvature(-eta);
                if !(mills >= MIN_MILLS && mills.is_finite()) {
                    return true;
                }
                g.iter_mut().for_each(|v| *v /= mills);
                g.iter().any(|v| !v.is_finite())
            })
            .collect();
        redo.iter().enumerate().filter(|(_, &r)| r).map(|(i, _)| i).collect()
    }
}
