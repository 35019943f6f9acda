//! The CUDA backend: one runtime per process (driver, NVRTC, cuBLAS found
//! through cudarc's dynamic loading), the device-resident row-Hessian
//! operator, and the vector backend the solvers run on; on several GPUs of
//! one host, a group with NCCL communicators, a backend over replicated
//! vectors and the row Hessian sharded by rows.
//!
//! Nothing here links CUDA at build time: on a machine without it, every entry
//! point returns an error naming what is missing, and [`select_device`]
//! falls back to the CPU under `MATFREE_GPU=auto`. Behind the `cuda` feature
//! (on by default); the device policy itself is [`crate::device`]'s, and is
//! re-exported here.

mod backend;
mod dense;
mod devices;
mod kernels;
mod memory;
mod multi;
mod recorded;
mod row_hessian;
mod row_objective;
mod runtime;
mod sharded;
mod sharded_objective;
mod staging;
mod tiled;

pub use crate::device::{select_device, Device, GpuPolicy};
pub use crate::row_objective::HessianStorage;
pub use backend::CudaBackend;
pub use dense::{DeviceCholesky, DeviceDenseFactor, DEVICE_DENSE_MIN_P};
#[cfg(feature = "testing")]
pub use devices::{gpus_for_test, setup_for_test};
pub(crate) use kernels::reduce_partials;
pub use memory::DeviceMemory;
pub use multi::{GpuGroup, MultiGpuBackend, Replicated};
pub use recorded::Recorded;
pub(crate) use row_hessian::packed_len;
pub use row_hessian::{DeviceDesigns, DeviceRowHessian, HvpPrecision, SingleKernel};
pub use row_objective::{DeviceRowEvaluation, DeviceRowEvaluator, DeviceRowObjective, HostRows, PendingRows};
pub(crate) use runtime::cuda_err;
#[cfg(feature = "testing")]
pub use runtime::gpu_for_test;
pub use runtime::{Gpu, KernelModule, LoadedKernels};
pub use sharded::{shard_rows, ShardedRowEvaluation, ShardedRowHessian};
pub use sharded_objective::{ShardRows, ShardedRowObjective};
pub use staging::ScalarCopy;
