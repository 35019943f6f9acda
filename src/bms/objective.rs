//! The BMS negative log-likelihood as a Newton/REML objective: value and
//! gradient on the host, the Hessian as a row-Hessian operator (CPU here;
//! the device twin is `cuda::BmsDeviceObjective`).

use matfree_solvers::newton::{CostEstimate, Evaluation, Objective};
use matfree_solvers::{CpuBackend, Result as SolverResult};

use super::{BmsData, BmsModel};
use crate::pool::BufferPool;
use crate::row_hessian::RowHessian;
use crate::Error;

/// sum_i neglog_i(beta) of a model on a data set, evaluated on the CPU.
pub struct BmsObjective<'a> {
    model: &'a BmsModel,
    data: &'a BmsData,
    /// The row Hessians' memory, reused across evaluations.
    buffers: BufferPool,
    scales: Vec<f64>,
}

impl<'a> BmsObjective<'a> {
    /// The objective of `model` on `data`.
    pub fn new(model: &'a BmsModel, data: &'a BmsData) -> Self {
        Self {
            model,
            data,
            buffers: BufferPool::default(),
            scales: model.coefficient_scales(data),
        }
    }
}

/// A row rejected at beta means beta is outside the model's domain: the
/// Newton driver then shrinks its step. Every other error is an error.
pub(crate) fn outside_domain<T>(result: crate::Result<T>) -> SolverResult<Option<T>> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(Error::RowRejected { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Flop estimates of one HVP (each row Hessian and design row read once)
/// and of the dense assembly (p^2 per row).
pub fn bms_cost(model: &BmsModel, n: usize) -> CostEstimate {
    let (r, b) = (model.layout().r() as f64, model.blocks());
    let (n, p) = (n as f64, b.p_total as f64);
    CostEstimate {
        hvp: 2.0 * n * (r * r + (b.p_m + b.p_g) as f64),
        dense_assembly: 3.0 * n * p * p,
    }
}

impl Objective<CpuBackend> for BmsObjective<'_> {
    fn dim(&self) -> usize {
        self.model.layout().p_total()
    }

    fn evaluate(&self, beta: &[f64]) -> SolverResult<Option<Evaluation<'_, CpuBackend>>> {
        // The row Hessians go straight into a pooled buffer that the
        // operator owns and gives back when dropped (`pool`).
        let mut hess = self.buffers.take(self.data.n() * self.model.layout().r().pow(2));
        let Some(rows) = outside_domain(self.model.evaluate_fused_into(self.data, beta, &mut hess))? else {
            return Ok(None);
        };
        let joint = self.model.joint_gradient(self.data, &rows)?;
        let layout = self.model.layout().clone();
        let hessian = RowHessian::with_storage(layout, self.data.designs.clone(), hess)?;
        Ok(Some(Evaluation {
            value: joint.neglog,
            gradient: joint.gradient,
            hessian: std::rc::Rc::new(hessian),
        }))
    }

    fn cost(&self) -> CostEstimate {
        bms_cost(self.model, self.data.n())
    }

    fn coefficient_scales(&self) -> Option<Vec<f64>> {
        Some(self.scales.clone())
    }
}

/// The model's smoothing penalty S_lambda = lambda_h S_h (+) lambda_w S_w on
/// the h and w blocks of beta (one block per active smooth, h first).
pub fn bms_penalty(model: &BmsModel) -> crate::Result<matfree_solvers::Penalty> {
    let b = model.blocks();
    let mut blocks = Vec::new();
    for (range, s) in [(&b.h, model.penalty_h()), (&b.w, model.penalty_w())] {
        if let (Some(range), Some(s)) = (range, s) {
            blocks.push(matfree_solvers::PenaltyBlock {
                start: range.start,
                dim: range.len(),
                s: s.to_vec(),
            });
        }
    }
    Ok(matfree_solvers::Penalty::new(b.p_total, blocks)?)
}
