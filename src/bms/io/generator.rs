//! A model-consistent data generator: z ~ N(0, 1) independent of the
//! designs, true coefficients with a smooth non-zero warp and link
//! deviation, a solved intercept per row, and y ~ Bernoulli(Phi(eta(z))).
//! Averaged over z, P(y = 1 | x) = Phi(q) by the calibration.

use std::sync::Arc;

use rayon::prelude::*;

use crate::bms::model::calibration::solve_root;
use crate::bms::model::cells::Bases;
use crate::bms::model::cubic_basis::CubicBasis;
use crate::bms::numerics::probit::norm_cdf;
#[cfg(feature = "cuda")]
use crate::bms::results::predict::{predict_gpu, Estimates};
use crate::bms::{BmsData, BmsModel};
use crate::device::Device;
use crate::rng::Rng;
use crate::{Error, Result};

/// Shape and seed of a generated data set.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GeneratorConfig {
    /// Rows.
    pub n: usize,
    /// Marginal design width (intercept column included), >= 1.
    pub p_m: usize,
    /// Slope design width (intercept column included), >= 1.
    pub p_g: usize,
    /// Score-warp basis size (0: no warp).
    pub p_h: usize,
    /// Link-deviation basis size (0: no deviation).
    pub p_w: usize,
    /// Frailty scale s_f in (0, 1].
    pub s_f: f64,
    /// Seed.
    pub seed: u64,
}

impl GeneratorConfig {
    /// `fit_bms`' default data with n rows: p_m 3, p_g 2 (intercepts
    /// included), score warp 8, link deviation 6 (r = 16, p = 19), no
    /// frailty.
    pub fn fit_shape(n: usize, seed: u64) -> Self {
        Self {
            n,
            p_m: 3,
            p_g: 2,
            p_h: 8,
            p_w: 6,
            s_f: 1.0,
            seed,
        }
    }

    /// The benchmarks' seed shape with n rows: p_m 14, p_g 12, p_h 10, p_w 8
    /// (r = 20, p = 44), no frailty, seed 1.
    pub fn seed_shape(n: usize) -> Self {
        Self {
            n,
            p_m: 14,
            p_g: 12,
            p_h: 10,
            p_w: 8,
            s_f: 1.0,
            seed: 1,
        }
    }
}

/// A generated data set with the model and the truth behind it.
#[derive(Clone, Debug)]
pub struct Generated {
    /// The model (bases on fixed knots: score on [-4, 4], link on [-6, 6]).
    pub model: BmsModel,
    /// The data.
    pub data: BmsData,
    /// The true beta = (beta_m, beta_g, beta_h, beta_w).
    pub beta: Vec<f64>,
    /// The true intercepts a_i.
    pub intercept: Vec<f64>,
}

/// The true coefficients: modest marginal effects, a positive slope, and a
/// smooth warp and link deviation (slowly varying in the basis index).
fn true_beta(cfg: &GeneratorConfig) -> Vec<f64> {
    let mut beta: Vec<f64> = (0..cfg.p_m)
        .map(|j| if j == 0 { -0.3 } else { 0.4 / j as f64 })
        .collect();
    beta.extend((0..cfg.p_g).map(|j| if j == 0 { 0.9 } else { 0.25 / j as f64 }));
    beta.extend((0..cfg.p_h).map(|j| 0.25 * (0.9 * j as f64 + 0.4).sin()));
    beta.extend((0..cfg.p_w).map(|l| 0.15 * (0.7 * l as f64 + 1.0).cos()));
    beta
}

/// A design with a leading intercept column and N(0, 0.5^2) covariates.
fn design(rng: &mut Rng, n: usize, p: usize) -> Vec<f64> {
    (0..n * p)
        .map(|k| if k % p == 0 { 1.0 } else { 0.5 * rng.normal() })
        .collect()
}

/// Generate a data set (each row's intercept solved on the CPU).
pub fn generate(cfg: GeneratorConfig) -> Result<Generated> {
    generate_on(cfg, &Device::Cpu { reason: "asked".into() })
}

/// Generate a data set, each row's intercept solved on `device`: on a GPU
/// by the GPU's predictions at the truth ([`predict_gpu`]: the fit's own
/// Stage-1 kernel, in chunks, the intercepts and eta(z_i) of the rows), on
/// the CPU by the calibration's root. The random draws come from one stream
/// in row order whatever the device or thread count, so a seed gives the
/// same covariates, scores and uniforms everywhere, and the same labels but
/// where a uniform falls within rounding of its row's probability.
pub fn generate_on(cfg: GeneratorConfig, device: &Device) -> Result<Generated> {
    let draws = Draws::new(&cfg)?;
    let rows = match device {
        Device::Cpu { .. } => draws.rows_on_cpu()?,
        #[cfg(feature = "cuda")]
        Device::Gpu(gpu) => draws.rows_on_gpu(gpu)?,
    };
    draws.finish(rows)
}

/// A data set's random draws: the model, the designs and scores (in data
/// with placeholder labels), the uniforms that draw the labels, the truth.
struct Draws {
    model: BmsModel,
    placeholder: BmsData,
    u: Vec<f64>,
    beta: Vec<f64>,
}

impl Draws {
    fn new(cfg: &GeneratorConfig) -> Result<Self> {
        if cfg.n == 0 {
            return Err(Error::invalid("n", 0, "at least one row is required"));
        }
        let score = (cfg.p_h > 0)
            .then(|| CubicBasis::uniform(-4.0, 4.0, cfg.p_h))
            .transpose()?;
        let link = (cfg.p_w > 0)
            .then(|| CubicBasis::uniform(-6.0, 6.0, cfg.p_w))
            .transpose()?;
        let model = BmsModel::new(Bases::new(score, link, cfg.s_f)?, cfg.p_m, cfg.p_g)?;
        let mut rng = Rng::new(cfg.seed);
        let x_m = design(&mut rng, cfg.n, cfg.p_m);
        let x_g = design(&mut rng, cfg.n, cfg.p_g);
        let designs = Arc::new(crate::bms::marginal_slope_designs(cfg.n, cfg.p_m, cfg.p_g, x_m, x_g)?);
        let z = rng.normals(cfg.n);
        let u: Vec<f64> = (0..cfg.n).map(|_| rng.uniform()).collect();
        let placeholder = BmsData::new(designs, z, vec![0.0; cfg.n], vec![1.0; cfg.n])?;
        Ok(Self {
            model,
            placeholder,
            u,
            beta: true_beta(cfg),
        })
    }

    /// The data set with its intercepts and labels.
    fn finish(self, (intercept, y): (Vec<f64>, Vec<f64>)) -> Result<Generated> {
        let Draws {
            model,
            placeholder,
            beta,
            ..
        } = self;
        let data = BmsData::new(placeholder.designs, placeholder.z, y, placeholder.weights)?;
        Ok(Generated {
            model,
            data,
            beta,
            intercept,
        })
    }

    /// Every row's intercept and label, in parallel on the CPU: the
    /// calibration's root alone (the intercept [`crate::bms::solve_intercept`]
    /// gives, without the cells and moments at it, which were two thirds
    /// of the time; a row whose F_a there is not positive is named by the
    /// fit instead).
    fn rows_on_cpu(&self) -> Result<(Vec<f64>, Vec<f64>)> {
        let (model, data, beta) = (&self.model, &self.placeholder, &self.beta);
        let rows: Vec<Result<(f64, f64)>> = (0..data.n())
            .into_par_iter()
            .map(|i| {
                let theta = model.theta(data, beta, i);
                let a = solve_root(model.bases(), &theta, i)?;
                Ok((a, self.label(i, model.bases().observed(&theta, a, data.z[i]).e)))
            })
            .collect();
        Ok(rows.into_iter().collect::<Result<Vec<_>>>()?.into_iter().unzip())
    }

    /// Every row's intercept and label from the GPU's predictions at the
    /// truth (no covariance); a row they reject is the error.
    #[cfg(feature = "cuda")]
    fn rows_on_gpu(&self, gpu: &Arc<crate::cuda::Gpu>) -> Result<(Vec<f64>, Vec<f64>)> {
        let est = Estimates {
            beta: &self.beta,
            covariance: None,
        };
        let data = &self.placeholder;
        let p = predict_gpu(gpu, &self.model, est, data.designs.clone(), &data.z)?;
        if let Some((row, reason)) = p.rejected.into_iter().next() {
            return Err(Error::RowRejected { row, reason });
        }
        let y = p.eta.iter().enumerate().map(|(i, &e)| self.label(i, e)).collect();
        Ok((p.intercept, y))
    }

    /// Row i's label: 1 where its uniform falls below Phi(eta(z_i)).
    fn label(&self, i: usize, eta: f64) -> f64 {
        if self.u[i] < norm_cdf(eta) {
            1.0
        } else {
            0.0
        }
    }
}
