//! The fit summary users read (mgcv's `summary.gam`, for this model):
//! coefficients with standard errors from the penalised Hessian, smoothing
//! parameters and effective degrees of freedom per smooth, and the fitted
//! smooths with pointwise confidence bands.

use serde::{Deserialize, Serialize};

use crate::bms::model::cubic_basis::CubicBasis;
use crate::plot::Band;
use crate::{Error, Result};

/// One coefficient row of the table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Coefficient {
    /// Block and column name, e.g. `marginal:(Intercept)`.
    pub name: String,
    /// The estimate.
    pub estimate: f64,
    /// Its standard error, sqrt of the diagonal of (H + S)^{-1}.
    pub std_error: f64,
    /// estimate / std_error.
    pub z_value: f64,
    /// The true value, when the data were simulated.
    pub truth: Option<f64>,
}

/// One smooth term.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SmoothTerm {
    /// Its name.
    pub name: String,
    /// Basis dimension.
    pub dim: usize,
    /// Smoothing parameter.
    pub lambda: f64,
    /// Effective degrees of freedom, the block's part of tr((H + S)^{-1} H).
    pub edf: f64,
}

/// Posterior-style covariance (H + S)^{-1}, row-major p x p, from the dense
/// unpenalised Hessian and the dense penalty at the estimate.
pub fn penalised_covariance(p: usize, h: &[f64], s: &[f64]) -> Result<Vec<f64>> {
    let a: Vec<f64> = h.iter().zip(s).map(|(x, y)| x + y).collect();
    let factor = matfree_solvers::PenalisedFactor::new(p, &a)?;
    Ok(factor.inverse()?.to_vec())
}

/// Coefficient rows for the given beta indices and names.
pub fn coefficients(beta: &[f64], cov: &[f64], names: &[(usize, String)], truth: Option<&[f64]>) -> Vec<Coefficient> {
    let p = beta.len();
    names
        .iter()
        .map(|(j, name)| {
            let se = cov[j * p + j].max(0.0).sqrt();
            Coefficient {
                name: name.clone(),
                estimate: beta[*j],
                std_error: se,
                z_value: beta[*j] / se,
                truth: truth.map(|t| t[*j]),
            }
        })
        .collect()
}

/// The effective degrees of freedom of the coefficients in `range`: the
/// diagonal of F = (H + S)^{-1} H summed over the range.
pub fn edf(cov: &[f64], h: &[f64], range: std::ops::Range<usize>) -> f64 {
    let p = (cov.len() as f64).sqrt() as usize;
    range
        .map(|j| (0..p).map(|k| cov[j * p + k] * h[k * p + j]).sum::<f64>())
        .sum()
}

/// The smooth f(x) = sum_j beta_j B_j(x) on a grid with pointwise bands
/// f +- 2 se(x), se(x)^2 = b(x)^T V b(x) for the block's covariance V, and
/// the true curve when the true coefficients are known.
pub fn smooth_band(
    basis: &CubicBasis,
    beta: &[f64],
    cov_block: &[f64],
    grid: &[f64],
    truth: Option<&[f64]>,
) -> Result<Band> {
    let d = basis.dim();
    if beta.len() != d || cov_block.len() != d * d {
        return Err(Error::invalid(
            "smooth block",
            beta.len(),
            format!("must have the basis dimension {d}"),
        ));
    }
    let (mut b, mut d1, mut d2) = (vec![0.0; d], vec![0.0; d], vec![0.0; d]);
    let mut band = Band {
        x: grid.to_vec(),
        ..Default::default()
    };
    let mut true_curve = Vec::new();
    for &x in grid {
        basis.eval(x, &mut b, &mut d1, &mut d2);
        let f: f64 = b.iter().zip(beta).map(|(u, v)| u * v).sum();
        let var: f64 = (0..d)
            .map(|j| b[j] * (0..d).map(|k| cov_block[j * d + k] * b[k]).sum::<f64>())
            .sum();
        let se = var.max(0.0).sqrt();
        band.fit.push(f);
        band.lower.push(f - 2.0 * se);
        band.upper.push(f + 2.0 * se);
        if let Some(t) = truth {
            true_curve.push(b.iter().zip(t).map(|(u, v)| u * v).sum());
        }
    }
    band.truth = truth.map(|_| true_curve);
    Ok(band)
}

/// The sub-block `range x range` of a row-major p x p matrix.
pub fn sub_block(a: &[f64], p: usize, range: std::ops::Range<usize>) -> Vec<f64> {
    range
        .clone()
        .flat_map(|i| range.clone().map(move |j| a[i * p + j]))
        .collect()
}

/// The panels of the fitted smooths with 95% bands, for `crate::plot`,
/// each on its [`crate::bms::results::report::Smooth::plot_range`] (121 points), with the
/// truth where the data were simulated.
pub fn smooth_panels(
    model: &crate::bms::BmsModel,
    beta: &[f64],
    cov: &[f64],
    truth: Option<&[f64]>,
) -> Result<Vec<crate::plot::Panel>> {
    let p = beta.len();
    let bases = model.bases();
    let mut panels = Vec::new();
    for (smooth, range) in crate::bms::results::report::smooth_blocks(model) {
        let name = smooth.name();
        let basis = smooth
            .basis(bases)
            .ok_or_else(|| Error::invalid(name, "a smooth block", "has no basis in the model"))?;
        let (lo, hi) = smooth.plot_range();
        let grid: Vec<f64> = (0..=120).map(|k| lo + (hi - lo) * k as f64 / 120.0).collect();
        let truth = truth.map(|t| &t[range.clone()]);
        let band = smooth_band(basis, &beta[range.clone()], &sub_block(cov, p, range), &grid, truth)?;
        panels.push(crate::plot::Panel {
            title: name.to_string(),
            x_label: smooth.x_label().into(),
            y_label: "effect".into(),
            band,
        });
    }
    Ok(panels)
}
