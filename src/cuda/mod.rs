//! The CUDA backend: one runtime per process (driver, NVRTC, cuBLAS found
//! through cudarc's dynamic loading), the device-resident row-Hessian
//! operator, and the vector backend the solvers run on.
//!
//! Nothing here links CUDA at build time: on a machine without it, every entry
//! point returns an error naming what is missing, and [`select_device`]
//! falls back to the CPU under `MATFREE_GPU=auto`.

mod backend;
mod bms;
mod bms_stage1;
mod dense;
mod kernels;
mod row_hessian;
mod runtime;

pub use backend::CudaBackend;
pub use bms::{evaluate_device, evaluate_rows_device, BmsDeviceObjective, DeviceRowEvaluation};
pub use bms_stage1::DeviceStage1;
pub use dense::DeviceCholesky;
pub use row_hessian::{DeviceDesigns, DeviceRowHessian};
pub use runtime::{gpu_for_test, select_device, Device, Gpu, GpuPolicy};
