//! The Bernoulli marginal-slope (BMS) model, one model of the toolkit;
//! `shared/docs/bms-model.md` fixes the math every piece follows. The tree
//! reads as the model's parts:
//!
//! - [`numerics`]: the normal's tails and the cells' quadrature;
//! - [`model`]: bases, calibration, Stage 1 (cells, moments), Stage 2 (a
//!   row's value, gradient and Hessian), the layout, and the rows as a
//!   [`crate::RowEvaluator`] ([`BmsRows`]);
//! - `device` (with the `cuda` feature): the same rows on the GPU, the
//!   model's kernels and its [`crate::cuda::DeviceRowEvaluator`];
//! - [`fit`]: the rigid start, the data checks, Newton or REML, progress;
//! - [`results`]: the summary, saved fits, predictions;
//! - [`io`]: problems from CSV or simulated, ndarray in and out, and one
//!   run of the command line as a library call.
//!
//! [`BmsModel::evaluate`] runs both stages for all rows; its output feeds
//! [`crate::RowHessian`] and [`crate::joint_gradient`].

#[cfg(feature = "cuda")]
pub mod device;
pub mod fit;
pub mod io;
pub mod model;
pub mod numerics;
pub mod results;

use std::borrow::Cow;
use std::sync::Arc;

use rayon::prelude::*;

use crate::designs::{check_matrix, Designs};
use crate::layout::Layout;
use crate::row_hessian::{joint_gradient, JointGradient, RowHessian};
use crate::{Error, Result};

pub use model::bases::Bases;
use model::bundle::RowHead;
pub use model::bundle::{KernelArrays, RowKernelInputs, RowStage1};
pub use model::calibration::solve_intercept;
use model::calibration::{checked_cells, solve_root};
pub use model::cubic_basis::CubicBasis;
pub use model::layout::{marginal_slope_designs, standard_layout, BlockLayout, MarginalSlope};
pub use model::rows::{bms_penalty, BmsObjective, BmsRows};
pub use model::stage2::{evaluate_rows, RowKernelOutputs};

/// A data set: designs, scores, labels and weights.
#[derive(Clone, Debug)]
pub struct BmsData {
    /// The marginal and slope designs (n rows).
    pub designs: Arc<Designs>,
    /// Standardised scores z_i.
    pub z: Vec<f64>,
    /// Labels in {0, 1}.
    pub y: Vec<f64>,
    /// Weights, > 0.
    pub weights: Vec<f64>,
}

impl BmsData {
    /// Check lengths, finiteness, labels and weights.
    pub fn new(designs: Arc<Designs>, z: Vec<f64>, y: Vec<f64>, w: Vec<f64>) -> Result<Self> {
        let n = designs.n();
        check_matrix("z", &z, n, 1)?;
        check_matrix("y", &y, n, 1)?;
        check_matrix("w", &w, n, 1)?;
        if let Some(i) = y.iter().position(|&v| v != 0.0 && v != 1.0) {
            return Err(Error::invalid(format!("y[{i}]"), y[i], "labels must be 0 or 1"));
        }
        if let Some(i) = w.iter().position(|&v| v <= 0.0) {
            return Err(Error::invalid(format!("w[{i}]"), w[i], "weights must be > 0"));
        }
        Ok(Self {
            designs,
            z,
            y,
            weights: w,
        })
    }
    /// Number of rows.
    pub fn n(&self) -> usize {
        self.designs.n()
    }

    /// The rows in `rows` as a data set of their own (a shard, a subsample).
    pub fn rows(&self, rows: std::ops::Range<usize>) -> Result<Self> {
        let designs = Arc::new(self.designs.rows(rows.clone())?);
        let part = |x: &[f64]| x[rows.clone()].to_vec();
        Self::new(designs, part(&self.z), part(&self.y), part(&self.weights))
    }

    /// Every k-th row, k = ceil(n / max_rows) (at most `max_rows` rows,
    /// at least 1): an even subsample, which of data sorted by any column
    /// takes every stratum in proportion.
    pub fn strided(&self, max_rows: usize) -> Result<Self> {
        let d = &self.designs;
        let k = self.n().div_ceil(max_rows.max(1));
        let rows: Vec<usize> = (0..self.n()).step_by(k.max(1)).collect();
        let pick =
            |x: &[f64], w: usize| -> Vec<f64> { rows.iter().flat_map(|&i| x[i * w..(i + 1) * w].to_vec()).collect() };
        let designs = marginal_slope_designs(
            rows.len(),
            d.p_m(),
            d.p_g(),
            pick(d.x_m(), d.p_m()),
            pick(d.x_g(), d.p_g()),
        )?;
        Self::new(
            Arc::new(designs),
            pick(&self.z, 1),
            pick(&self.y, 1),
            pick(&self.weights, 1),
        )
    }
}

/// Per-row Stage-2 results for all rows.
#[derive(Clone, Debug, PartialEq)]
pub struct RowEvaluation {
    /// neglog_i.
    pub neglog: Vec<f64>,
    /// Gradients in theta, n x r.
    pub grad: Vec<f64>,
    /// Hessians in theta, n x r x r.
    pub hess: Vec<f64>,
    /// The solved intercepts a_i.
    pub intercept: Vec<f64>,
}

/// The BMS model: bases, frailty scale and the coefficient layout
/// beta = (beta_m, beta_g, beta_h, beta_w).
#[derive(Clone, Debug)]
pub struct BmsModel {
    bases: Bases,
    blocks: BlockLayout,
    layout: Layout,
}

impl BmsModel {
    /// A model with the given bases (absent blocks have width 0), frailty
    /// scale s_f in (0, 1] and design widths.
    pub fn new(bases: Bases, p_m: usize, p_g: usize) -> Result<Self> {
        let blocks = BlockLayout::standard(p_m, p_g, bases.p_h(), bases.p_w());
        let layout = blocks.layout()?;
        Ok(Self { bases, blocks, layout })
    }
    /// The bases.
    pub fn bases(&self) -> &Bases {
        &self.bases
    }
    /// The coefficient layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
    /// Where beta_m, beta_g, beta_h and beta_w sit in beta.
    pub fn blocks(&self) -> &BlockLayout {
        &self.blocks
    }
    /// S_h, the score-warp penalty (p_h x p_h), if the block is present.
    pub fn penalty_h(&self) -> Option<&[f64]> {
        self.bases.score.as_ref().map(|b| b.penalty())
    }
    /// S_w, the link-deviation penalty (p_w x p_w), if the block is present.
    pub fn penalty_w(&self) -> Option<&[f64]> {
        self.bases.link.as_ref().map(|b| b.penalty())
    }

    fn check(&self, data: &BmsData, beta: &[f64]) -> Result<()> {
        crate::row_hessian::check_layout_designs(&self.layout, &data.designs)?;
        check_matrix("beta", beta, self.layout.p_total(), 1)
    }

    /// The coefficients every row's theta takes from beta as they are:
    /// beta_h then beta_w (empty for an absent block).
    pub fn direct_beta(&self, beta: &[f64]) -> Vec<f64> {
        self.layout
            .direct_blocks()
            .into_iter()
            .flat_map(|(range, _)| beta[range].to_vec())
            .collect()
    }

    /// How far one unit of each coefficient moves a row's theta: the root
    /// mean square of its design column for the marginal and slope
    /// coefficients (1 for a column of zeros), 1 for the warp and link
    /// coefficients, which enter theta as they are. Newton caps its steps
    /// in these units, so a rescaled covariate changes nothing.
    pub fn coefficient_scales(&self, data: &BmsData) -> Vec<f64> {
        let d = &data.designs;
        let rms = |x: &[f64], p: usize| -> Vec<f64> {
            let mut ss = vec![0.0; p];
            for row in x.chunks_exact(p) {
                for (s, v) in ss.iter_mut().zip(row) {
                    *s += v * v;
                }
            }
            ss.iter()
                .map(|s| (s / d.n().max(1) as f64).sqrt())
                .map(|r| if r > 0.0 && r.is_finite() { r } else { 1.0 })
                .collect()
        };
        let mut out = rms(d.x_m(), d.p_m());
        out.extend(rms(d.x_g(), d.p_g()));
        out.resize(self.layout.p_total(), 1.0);
        out
    }

    /// Row i's primary coordinates theta = (q, b, beta_h, beta_w).
    pub fn theta(&self, data: &BmsData, beta: &[f64], i: usize) -> Vec<f64> {
        let mut theta = Vec::with_capacity(self.bases.r());
        self.theta_into(data, beta, i, &mut theta);
        theta
    }

    /// [`BmsModel::theta`] into `theta` (cleared first).
    pub(crate) fn theta_into(&self, data: &BmsData, beta: &[f64], i: usize, theta: &mut Vec<f64>) {
        let blk = &self.blocks;
        let dot = |x: &[f64], b: &[f64]| x.iter().zip(b).map(|(x, b)| x * b).sum::<f64>();
        theta.clear();
        theta.push(dot(data.designs.x_m_row(i), &beta[blk.m_range()]));
        theta.push(dot(data.designs.x_g_row(i), &beta[blk.g_range()]));
        for (range, _) in self.layout.direct_blocks() {
            theta.extend_from_slice(&beta[range]);
        }
    }

    /// Stage 1 for one row: solve a, build cells and moments, and the
    /// observed-point jets.
    pub fn stage1_row(&self, theta: &[f64], z: f64, y: f64, w: f64, row: usize) -> Result<RowStage1> {
        let calibrated = solve_intercept(&self.bases, theta, row)?;
        let observed = self.bases.observed(theta, calibrated.a, z);
        Ok(RowStage1 {
            q: theta[0],
            b: theta[1],
            z_obs: z,
            y,
            weights: w,
            calibrated,
            observed,
        })
    }

    /// Stage 1 for all rows (in parallel), packed into the kernel bundle,
    /// with the solved intercepts. The first failing row (lowest index) is
    /// the error.
    pub fn stage1(&self, data: &BmsData, beta: &[f64]) -> Result<(RowKernelInputs, Vec<f64>)> {
        let mut inputs = RowKernelInputs::default();
        let intercept = self.stage1_into(data, beta, &mut inputs)?;
        Ok((inputs, intercept))
    }

    /// [`BmsModel::stage1`] packed into `inputs`, reusing its memory;
    /// returns the intercepts. Two passes over the rows, each in parallel:
    /// the intercepts and per-row values first, then, with the bundle sized
    /// from the rows' cell counts, each row's cells straight into its share
    /// of the bundle. (Holding every row's cells until a serial pack kept
    /// about 80 MB of small allocations alive at once at 1,500 rows; the
    /// allocator returned them to the system after each evaluation and
    /// page-faulted them back in the next, 3.6 of a CPU fit's 20 CPU
    /// seconds.)
    pub fn stage1_into(&self, data: &BmsData, beta: &[f64], inputs: &mut RowKernelInputs) -> Result<Vec<f64>> {
        self.check(data, beta)?;
        let mut heads: Vec<Result<(RowHead, f64)>> = (0..data.n())
            .into_par_iter()
            .map(|i| self.row_head(data, beta, i))
            .collect();
        if let Some(k) = heads.iter().position(Result::is_err) {
            let failed = heads.split_off(k).into_iter().find_map(Result::err);
            let earlier = self.first_cells_rejection(data, beta, &heads);
            return Err(earlier.or(failed).unwrap_or_else(|| Error::invalid("row", k, "failed")));
        }
        let (heads, intercept): (Vec<RowHead>, Vec<f64>) = heads.into_iter().flatten().unzip();
        let shares = inputs.pack_heads(self.bases.p_h(), self.bases.p_w(), self.bases.s_f, &heads)?;
        let verdicts: Vec<Option<Error>> = shares
            .into_par_iter()
            .zip(&intercept)
            .enumerate()
            .map(|(i, (mut share, &a))| {
                let (cells, _) = match checked_cells(&self.bases, &self.theta(data, beta, i), a, i) {
                    Ok(c) => c,
                    Err(e) => return Some(e),
                };
                if cells.len() != share.cells() {
                    let rule = format!("{} cells at the root, {} counted before", cells.len(), share.cells());
                    return Some(Error::invalid("cells", i, rule));
                }
                cells.iter().enumerate().find_map(|(j, c)| share.put(j, c).err())
            })
            .collect();
        if let Some(e) = verdicts.into_iter().flatten().next() {
            // Half rebuilt (new rows, some old cells): leave no rows rather
            // than a bundle that would validate.
            inputs.discard();
            return Err(e);
        }
        inputs.validate()?;
        Ok(intercept)
    }

    /// Row i's intercept, per-row values and cell count (Stage 1 without
    /// the cells).
    fn row_head(&self, data: &BmsData, beta: &[f64], i: usize) -> Result<(RowHead<'static>, f64)> {
        let theta = self.theta(data, beta, i);
        let a = solve_root(&self.bases, &theta, i)?;
        let head = RowHead {
            q: theta[0],
            b: theta[1],
            z_obs: data.z[i],
            y: data.y[i],
            weights: data.weights[i],
            observed: Cow::Owned(self.bases.observed(&theta, a, data.z[i])),
            cells: self.bases.cell_count(theta[1], a),
        };
        Ok((head, a))
    }

    /// The first of `heads` (the rows before the first failed intercept)
    /// whose cells fail their check (F_a at the root), as they would in
    /// [`BmsModel::stage1_row`]: the error reported is the lowest row's.
    fn first_cells_rejection(&self, data: &BmsData, beta: &[f64], heads: &[Result<(RowHead, f64)>]) -> Option<Error> {
        let verdicts: Vec<Option<Error>> = heads
            .par_iter()
            .enumerate()
            .map(|(i, h)| {
                let a = h.as_ref().map(|(_, a)| *a).ok()?;
                checked_cells(&self.bases, &self.theta(data, beta, i), a, i).err()
            })
            .collect();
        verdicts.into_iter().flatten().next()
    }

    /// Stage 1 and Stage 2 for all rows at beta, fused per row on the CPU
    /// (no bundle in memory; `fused` says how). Equal to
    /// [`BmsModel::evaluate_bundled`] to rounding.
    pub fn evaluate(&self, data: &BmsData, beta: &[f64]) -> Result<RowEvaluation> {
        self.evaluate_fused(data, beta)
    }

    /// The reference evaluation: Stage 1 packed into `bundle` (the layout
    /// the device kernels read), then [`evaluate_rows`] over it, which the
    /// device results are checked against. `bundle`'s memory is reused.
    pub fn evaluate_bundled(
        &self,
        data: &BmsData,
        beta: &[f64],
        bundle: &mut RowKernelInputs,
    ) -> Result<RowEvaluation> {
        let intercept = self.stage1_into(data, beta, bundle)?;
        let out = evaluate_rows(bundle)?;
        Ok(RowEvaluation {
            neglog: out.neglog,
            grad: out.grad,
            hess: out.hess,
            intercept,
        })
    }

    /// The joint Hessian operator H = sum_i P_i^T H_i P_i of an evaluation.
    pub fn row_hessian(&self, data: &BmsData, eval: &RowEvaluation) -> Result<RowHessian> {
        RowHessian::new(self.layout.clone(), data.designs.clone(), eval.hess.clone())
    }

    /// The joint neglog and its gradient in beta of an evaluation.
    pub fn joint_gradient(&self, data: &BmsData, eval: &RowEvaluation) -> Result<JointGradient> {
        joint_gradient(&self.layout, &data.designs, &eval.neglog, &eval.grad)
    }
}

/// One row's neglog evaluated from scratch at theta: solve a, then
/// `-w log Phi(s eta(z))` with s = 2y - 1. The oracle of the derivative tests.
pub fn row_neglog(bases: &Bases, theta: &[f64], z: f64, y: f64, w: f64) -> Result<f64> {
    let a = solve_intercept(bases, theta, 0)?.a;
    let e = bases.observed(theta, a, z).e;
    Ok(-w * numerics::probit::log_ndtr((2.0 * y - 1.0) * e))
}
