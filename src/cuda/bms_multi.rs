//! The BMS objective on several GPUs: the data split into contiguous row
//! shards ([`shard_rows`]), each evaluated on its own device by the
//! single-GPU row evaluation ([`DeviceStage1`]; all shards are queued before
//! any verdict is read, so the devices work at once), the results joined as a
//! [`ShardedRowEvaluation`] whose Hessian is a [`ShardedRowHessian`].

use std::ops::Range;
use std::rc::Rc;

use matfree_solvers::newton::{CostEstimate, Evaluation, Objective};
use matfree_solvers::Result as SolverResult;

use super::bms_stage1::DeviceStage1;
use super::multi::{GpuGroup, MultiGpuBackend};
use super::row_hessian::DeviceDesigns;
use super::sharded::{shard_rows, ShardedRowEvaluation};
use crate::bms::{BmsData, BmsModel};
use crate::{Error, Result};

/// One device's rows of the data, uploaded with their Stage-1 buffers.
struct Shard {
    rows: Range<usize>,
    stage1: DeviceStage1,
}

/// A shard's rejected row, renumbered as a row of the whole data set.
fn in_full_data(e: Error, first_row: usize) -> Error {
    match e {
        Error::RowRejected { row, reason } => Error::RowRejected {
            row: row + first_row,
            reason,
        },
        other => other,
    }
}

/// sum_i neglog_i(beta) with the rows sharded over a [`GpuGroup`].
pub struct BmsMultiObjective<'a> {
    model: &'a BmsModel,
    group: Rc<GpuGroup>,
    shards: Vec<Shard>,
    n: usize,
    scales: Vec<f64>,
}

impl<'a> BmsMultiObjective<'a> {
    /// Split the data over the group's devices and upload each shard's
    /// designs once; every evaluation reuses them.
    pub fn new(group: Rc<GpuGroup>, model: &'a BmsModel, data: &BmsData) -> Result<Self> {
        let shards = shard_rows(data.n(), group.len())?
            .into_iter()
            .zip(group.gpus())
            .map(|(rows, gpu)| {
                let data = data.rows(rows.clone())?;
                let designs = DeviceDesigns::upload(gpu.clone(), &data.designs)?;
                let stage1 = DeviceStage1::with_designs(designs, model, &data)?;
                Ok(Shard { rows, stage1 })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            model,
            group,
            shards,
            n: data.n(),
            scales: model.coefficient_scales(data),
        })
    }

    /// Evaluate every shard on its device (all queued, then the verdicts
    /// in rank order) and join them. A rejected row is named by its index in
    /// the whole data set.
    pub fn evaluate_rows(&self, beta: &[f64]) -> Result<ShardedRowEvaluation> {
        let pending = self
            .shards
            .iter()
            .map(|s| s.stage1.launch(beta))
            .collect::<Result<Vec<_>>>()?;
        let evaluations = pending
            .into_iter()
            .zip(&self.shards)
            .map(|(p, s)| p.finish().map_err(|e| in_full_data(e, s.rows.start)))
            .collect::<Result<Vec<_>>>()?;
        ShardedRowEvaluation::from_shards(self.group.clone(), evaluations)
    }
}

impl Objective<MultiGpuBackend> for BmsMultiObjective<'_> {
    fn dim(&self) -> usize {
        self.model.layout().p_total()
    }

    fn evaluate(&self, beta: &[f64]) -> SolverResult<Option<Evaluation<'_, MultiGpuBackend>>> {
        use crate::bms::objective::outside_domain;
        let Some(rows) = outside_domain(self.evaluate_rows(beta))? else {
            return Ok(None);
        };
        let joint = rows.joint_gradient()?;
        Ok(Some(Evaluation {
            value: joint.neglog,
            gradient: joint.gradient,
            hessian: std::rc::Rc::new(rows.hessian),
        }))
    }

    fn cost(&self) -> CostEstimate {
        crate::bms::objective::bms_cost(self.model, self.n)
    }

    fn coefficient_scales(&self) -> Option<Vec<f64>> {
        Some(self.scales.clone())
    }
}
