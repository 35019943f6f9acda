//! The objective of any model with its rows sharded over the devices of a
//! [`GpuGroup`]: one [`DeviceRowEvaluator`] a device over contiguous rows
//! ([`shard_rows`]), all queued before any verdict is read so that the
//! devices work at once, the results joined as a [`ShardedRowEvaluation`]
//! whose Hessian is a [`ShardedRowHessian`](super::ShardedRowHessian).

use std::ops::Range;
use std::rc::Rc;
use std::sync::Arc;

use matfree_solvers::newton::{CostEstimate, Evaluation, Objective};
use matfree_solvers::Result as SolverResult;

use super::multi::{GpuGroup, MultiGpuBackend};
use super::row_objective::{DeviceRowEvaluator, HostRows};
use super::sharded::{shard_rows, ShardedRowEvaluation};
use crate::designs::Designs;
use crate::layout::Layout;
use crate::row_objective::{column_scales, outside_domain, row_cost, HessianStorage, RowEvaluator, RowObjective};
use crate::{Error, Result};

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
pub struct ShardedRowObjective<E> {
    group: Rc<GpuGroup>,
    shards: Vec<(Range<usize>, E)>,
    layout: Layout,
    n: usize,
    scales: Vec<f64>,
    storage: HessianStorage,
    backend: MultiGpuBackend,
}

impl<E: DeviceRowEvaluator> ShardedRowObjective<E> {
    /// The objective of `shards`: shard d on the group's device d, over
    /// the next rows of `host` (the whole data set's designs) in order.
    pub fn new(group: Rc<GpuGroup>, shards: Vec<E>, host: &Designs) -> Result<Self> {
        if shards.len() != group.len() {
            let rule = format!("must equal the group's device count {}", group.len());
            return Err(Error::invalid("shards", shards.len(), rule));
        }
        let layout = shards[0].layout().clone();
        let mut start = 0;
        let mut ranged = Vec::with_capacity(shards.len());
        for (d, (shard, gpu)) in shards.into_iter().zip(group.gpus()).enumerate() {
            let designs = shard.designs();
            if !Arc::ptr_eq(designs.gpu(), gpu) || *shard.layout() != layout || designs.widths() != host.widths() {
                return Err(Error::invalid(
                    format!("shard {d}"),
                    format!("device {}, widths {:?}", designs.gpu().ordinal(), designs.widths()),
                    format!(
                        "must live on the group's device {d} (ordinal {}) with shard 0's layout and the data's widths {:?}",
                        gpu.ordinal(),
                        host.widths()
                    ),
                ));
            }
            start += designs.n();
            ranged.push((start - designs.n()..start, shard));
        }
        if start != host.n() {
            let rule = format!("must equal the data's n = {}", host.n());
            return Err(Error::invalid("rows over all shards", start, rule));
        }
        crate::row_hessian::check_layout_designs(&layout, host)?;
        Ok(Self {
            scales: column_scales(&layout, host),
            backend: MultiGpuBackend::new(group.clone())?,
            group,
            shards: ranged,
            layout,
            n: host.n(),
            storage: HessianStorage::Auto,
        })
    }

    /// How each evaluation keeps its Hessian (default
    /// [`HessianStorage::Auto`]: the dense matrix on every device where
    /// every step is dense, the shards' rows otherwise).
    pub fn with_hessian_storage(mut self, storage: HessianStorage) -> Self {
        self.storage = storage;
        self
    }

    /// The shards' evaluators, in row order.
    pub fn shards(&self) -> impl Iterator<Item = &E> {
        self.shards.iter().map(|(_, e)| e)
    }

    /// Evaluate every shard on its device (all queued, then the verdicts
    /// in rank order) and join them. A rejected row is named by its index in
    /// the whole data set.
    pub fn evaluate_rows(&self, beta: &[f64]) -> Result<ShardedRowEvaluation> {
        let pending = self
            .shards
            .iter()
            .map(|(rows, s)| s.launch(beta).map_err(|e| in_full_data(e, rows.start)))
            .collect::<Result<Vec<_>>>()?;
        let evaluations = pending
            .into_iter()
            .zip(&self.shards)
            .map(|(p, (rows, _))| p.finish().map_err(|e| in_full_data(e, rows.start)))
            .collect::<Result<Vec<_>>>()?;
        ShardedRowEvaluation::from_shards(self.group.clone(), evaluations)
    }
}

impl<E: DeviceRowEvaluator> Objective<MultiGpuBackend> for ShardedRowObjective<E> {
    fn dim(&self) -> usize {
        self.layout.p_total()
    }

    fn evaluate(&self, beta: &[f64]) -> SolverResult<Option<Evaluation<'_, MultiGpuBackend>>> {
        let Some(rows) = outside_domain(self.evaluate_rows(beta))? else {
            return Ok(None);
        };
        let joint = rows.joint_gradient()?;
        let hessian = self
            .storage
            .keep(self.cost(), self.dim(), Rc::new(rows.hessian), || self.backend.clone())?;
        Ok(Some(Evaluation {
            value: joint.neglog,
            gradient: joint.gradient,
            hessian,
        }))
    }

    fn cost(&self) -> CostEstimate {
        row_cost(&self.layout, self.n)
    }

    fn coefficient_scales(&self) -> Option<Vec<f64>> {
        Some(self.scales.clone())
    }

    fn convex(&self) -> bool {
        self.shards.iter().all(|(_, e)| e.convex())
    }
}

/// Rows `first..` of a model with CPU rows, as a model of their own (row
/// 0 is the model's row `first`): one shard's evaluator.
pub struct ShardRows<E> {
    model: Arc<E>,
    first: usize,
}

impl<E: RowEvaluator + Send> RowEvaluator for ShardRows<E> {
    fn row(&self, i: usize, theta: &[f64], grad: &mut [f64], hess: &mut [f64]) -> f64 {
        self.model.row(self.first + i, theta, grad, hess)
    }
    fn rows(&self, first: usize, theta: &[f64], neglog: &mut [f64], grad: &mut [f64], hess: &mut [f64]) {
        self.model.rows(self.first + first, theta, neglog, grad, hess)
    }
    fn row_value(&self, i: usize, theta: &[f64]) -> f64 {
        self.model.row_value(self.first + i, theta)
    }
    fn cheap_value(&self) -> bool {
        self.model.cheap_value()
    }
    fn has_hessian_derivative(&self) -> bool {
        self.model.has_hessian_derivative()
    }
    fn convex(&self) -> bool {
        self.model.convex()
    }
    fn row_hessian_derivatives(&self, i: usize, theta: &[f64], dthetas: &[f64], out: &mut [f64]) {
        self.model.row_hessian_derivatives(self.first + i, theta, dthetas, out)
    }
    fn row_hessian_derivative(&self, i: usize, theta: &[f64], dtheta: &[f64], out: &mut [f64]) {
        self.model.row_hessian_derivative(self.first + i, theta, dtheta, out)
    }
}

impl<E: RowEvaluator + Send> ShardedRowObjective<HostRows<ShardRows<E>>> {
    /// [`RowObjective`] on [`MultiGpuBackend`]: the rows sharded over
    /// `group`, each device's rows evaluated on the host and uploaded to it
    /// (their designs once).
    pub fn from_host(group: Rc<GpuGroup>, host: RowObjective<E>) -> Result<Self> {
        let (layout, designs, model) = host.into_parts();
        let model = Arc::new(model);
        let shards = shard_rows(designs.n(), group.len())?
            .into_iter()
            .zip(group.gpus())
            .map(|(rows, gpu)| {
                let part = Arc::new(designs.rows(rows.clone())?);
                let evaluator = ShardRows {
                    model: model.clone(),
                    first: rows.start,
                };
                let host = RowObjective::new(layout.clone(), part, evaluator)?;
                HostRows::new(gpu.clone(), host)
            })
            .collect::<Result<Vec<_>>>()?;
        Self::new(group, shards, &designs)
    }
}
