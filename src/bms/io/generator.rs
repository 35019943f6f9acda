//! A model-consistent data generator: z ~ N(0, 1) independent of the
//! designs, true coefficients with a smooth non-zero warp and link
//! deviation, a solved intercept per row, and y ~ Bernoulli(Phi(eta(z))).
//! Averaged over z, P(y = 1 | x) = Phi(q) by the calibration.

use std::ops::Range;
use std::sync::Arc;

use rayon::prelude::*;

use crate::bms::model::calibration::solve_root;
use crate::bms::model::cells::Bases;
use crate::bms::model::cubic_basis::CubicBasis;
use crate::bms::numerics::probit::norm_cdf;
#[cfg(feature = "cuda")]
use crate::bms::results::predict::{in_chunk, GPU_CHUNK_ROWS};
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
/// by the fit's own Stage-1 kernel (calibration and the observed eta), in
/// chunks as the GPU's predictions are
/// ([`crate::bms::results::predict::GPU_CHUNK_ROWS`]). The random draws
/// come from one stream in row order whatever the device or thread count,
/// so a seed gives the same covariates, scores and uniforms everywhere, and
/// the same labels but where a uniform falls within rounding of its row's
/// probability.
pub fn generate_on(cfg: GeneratorConfig, device: &Device) -> Result<Generated> {
    match device {
        Device::Cpu { .. } => {
            let draws = Draws::new(&cfg)?;
            let rows = draws.rows_on_cpu(0..cfg.n)?;
            draws.finish(rows)
        }
        #[cfg(feature = "cuda")]
        Device::Gpu(gpu) => generate_on_gpu(cfg, gpu, GPU_CHUNK_ROWS),
    }
}

/// As [`generate_on`] on `gpu`, `chunk` rows at a time.
#[cfg(feature = "cuda")]
pub fn generate_on_gpu(cfg: GeneratorConfig, gpu: &Arc<crate::cuda::Gpu>, chunk: usize) -> Result<Generated> {
    if chunk == 0 {
        return Err(Error::invalid("chunk", 0, "must be at least one row"));
    }
    let draws = Draws::new(&cfg)?;
    let rows = draws.rows_on_gpu(gpu, chunk)?;
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

    /// The intercepts and labels of `rows`, in parallel on the CPU: the
    /// calibration's root alone (the intercept [`crate::bms::solve_intercept`]
    /// gives, without the cells and moments at it, which were two thirds
    /// of the time; a row whose F_a there is not positive is named by the
    /// fit instead).
    fn rows_on_cpu(&self, rows: Range<usize>) -> Result<(Vec<f64>, Vec<f64>)> {
        let (model, data, beta) = (&self.model, &self.placeholder, &self.beta);
        let rows: Vec<Result<(f64, f64)>> = rows
            .into_par_iter()
            .map(|i| {
                let theta = model.theta(data, beta, i);
                let a = solve_root(model.bases(), &theta, i)?;
                Ok((a, self.label(i, model.bases().observed(&theta, a, data.z[i]).e)))
            })
            .collect();
        Ok(rows.into_iter().collect::<Result<Vec<_>>>()?.into_iter().unzip())
    }

    /// Every row's intercept and label, the intercepts and eta(z_i) from the
    /// device's Stage 1 at the truth, `chunk` rows at a time (as the GPU's
    /// predictions run; a chunk with a row the device rejects is solved on
    /// the CPU, which names the row).
    #[cfg(feature = "cuda")]
    fn rows_on_gpu(&self, gpu: &Arc<crate::cuda::Gpu>, chunk: usize) -> Result<(Vec<f64>, Vec<f64>)> {
        let n = self.placeholder.n();
        let (mut intercept, mut y) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for lo in (0..n).step_by(chunk) {
            let rows = lo..(lo + chunk).min(n);
            let part = self.placeholder.rows(rows.clone())?;
            let stage =
                crate::bms::device::DeviceStage1::new(gpu.clone(), &self.model, &part).map_err(|e| in_chunk(e, lo))?;
            match stage.evaluate(&self.beta) {
                Ok(_) => {
                    intercept.extend(stage.intercepts()?);
                    let eta = stage.observed_eta()?;
                    y.extend(rows.zip(eta).map(|(i, e)| self.label(i, e)));
                }
                Err(Error::RowRejected { .. }) => {
                    let (a, labels) = self.rows_on_cpu(rows)?;
                    intercept.extend(a);
                    y.extend(labels);
                }
                Err(e) => return Err(in_chunk(e, lo)),
            }
        }
        Ok((intercept, y))
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
