//! A model-consistent data generator: z ~ N(0, 1) independent of the
//! designs, true coefficients with a smooth non-zero warp and link
//! deviation, a solved intercept per row, and y ~ Bernoulli(Phi(eta(z))).
//! Averaged over z, P(y = 1 | x) = Phi(q) by the calibration.

use std::sync::Arc;

use rayon::prelude::*;

use crate::bms::model::cells::Bases;
use crate::bms::model::cubic_basis::CubicBasis;
use crate::bms::numerics::probit::norm_cdf;
use crate::bms::{solve_intercept, BmsData, BmsModel};
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

/// Generate a data set.
pub fn generate(cfg: GeneratorConfig) -> Result<Generated> {
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
    let beta = true_beta(&cfg);
    let placeholder = BmsData::new(designs.clone(), z.clone(), vec![0.0; cfg.n], vec![1.0; cfg.n])?;
    let rows: Vec<Result<(f64, f64)>> = (0..cfg.n)
        .into_par_iter()
        .map(|i| {
            let theta = model.theta(&placeholder, &beta, i);
            let a = solve_intercept(model.bases(), &theta, i)?.a;
            let e = model.bases().observed(&theta, a, z[i]).e;
            Ok((a, if u[i] < norm_cdf(e) { 1.0 } else { 0.0 }))
        })
        .collect();
    let rows = rows.into_iter().collect::<Result<Vec<_>>>()?;
    let (intercept, y): (Vec<f64>, Vec<f64>) = rows.into_iter().unzip();
    let data = BmsData::new(designs, z, y, vec![1.0; cfg.n])?;
    Ok(Generated {
        model,
        data,
        beta,
        intercept,
    })
}
