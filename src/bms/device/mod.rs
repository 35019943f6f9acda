//! The BMS model's rows on the GPU: Stage 1 and Stage 2 as device kernels
//! (`kernels/bms_stage1/`, `kernels/bms_row.cu`), registered with the
//! runtime by the model ([`BMS_KERNELS`]). [`DeviceStage1`] is the model's
//! [`DeviceRowEvaluator`]; the objectives on one GPU and on several are the
//! generic ones ([`DeviceRowObjective`], [`ShardedRowObjective`]), as the
//! CPU's is [`crate::RowObjective`] over [`super::BmsRows`].

mod order;
mod rows;
mod stage1;

use std::rc::Rc;
use std::sync::Arc;

/// The doubles a warp's row takes in a raw Stage-2 kernel's shared memory,
/// and the dense kernel for rows of r coordinates, for the replay's checks
/// against the kernels' own.
#[doc(hidden)]
pub use rows::{dense_kernel, raw_row_doubles};
pub use rows::{evaluate_device, evaluate_rows_device, BMS_KERNELS};
pub use stage1::DeviceStage1;

use super::{BmsData, BmsModel};
use crate::cuda::{shard_rows, DeviceDesigns, DeviceRowObjective, Gpu, GpuGroup, ShardedRowObjective};
use crate::Result;

/// The BMS objective on one GPU.
pub type BmsDeviceObjective = DeviceRowObjective<DeviceStage1>;

/// The BMS objective with its rows sharded over several GPUs.
pub type BmsMultiObjective = ShardedRowObjective<DeviceStage1>;

impl BmsModel {
    /// The model's objective on `data` on `gpu`: the data set uploaded
    /// once, every evaluation's rows resident there.
    pub fn device_objective(&self, gpu: Arc<Gpu>, data: &BmsData) -> Result<BmsDeviceObjective> {
        DeviceRowObjective::new(DeviceStage1::new(gpu, self, data)?, &data.designs)
    }

    /// The model's objective on `data` with its rows split over the
    /// group's devices in contiguous shards ([`shard_rows`]), each uploaded
    /// once.
    pub fn sharded_objective(&self, group: Rc<GpuGroup>, data: &BmsData) -> Result<BmsMultiObjective> {
        let shards = shard_rows(data.n(), group.len())?
            .into_iter()
            .zip(group.gpus())
            .map(|(rows, gpu)| {
                let part = data.rows(rows)?;
                let designs = DeviceDesigns::upload(gpu.clone(), &part.designs)?;
                DeviceStage1::with_designs(designs, self, &part)
            })
            .collect::<Result<Vec<_>>>()?;
        ShardedRowObjective::new(group, shards, &data.designs)
    }
}
