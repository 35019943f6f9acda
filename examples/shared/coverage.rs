//! What the coverage harnesses (`validate_fit`, `validate_gam`) report of
//! a coefficient over seeds: its z-errors' moments and the share of 95%
//! intervals that cover the truth.

use serde::Serialize;

/// The 97.5% normal quantile.
pub const Z975: f64 = 1.959_963_984_540_054;

/// Per coefficient over the seeds.
#[derive(Serialize)]
pub struct CoefficientSummary {
    pub name: String,
    pub mean_z: f64,
    pub sd_z: f64,
    pub max_abs_z: f64,
    pub coverage: f64,
}

impl CoefficientSummary {
    /// From the z-errors (estimate - truth) / SE of the seeds.
    pub fn new(name: &str, z: &[f64]) -> Self {
        let k = z.len().max(1) as f64;
        let mean = z.iter().sum::<f64>() / k;
        let var = z.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (k - 1.0).max(1.0);
        Self {
            name: name.to_string(),
            mean_z: mean,
            sd_z: var.sqrt(),
            max_abs_z: z.iter().fold(0.0f64, |m, v| m.max(v.abs())),
            coverage: covered_share(z),
        }
    }
}

/// The share of z-errors within +-1.96 (0 for none).
pub fn covered_share(z: &[f64]) -> f64 {
    z.iter().filter(|v| v.abs() <= Z975).count() as f64 / z.len().max(1) as f64
}
