//! Where a computation runs: the `MATFREE_GPU` policy and the device it
//! selects. In a build without the `cuda` feature there is no GPU: `auto`
//! gives the CPU, and any request for the GPU is an error saying how to get
//! one (build with the `cuda` feature, on by default).

#[cfg(feature = "cuda")]
use std::sync::Arc;

#[cfg(feature = "cuda")]
use crate::cuda::Gpu;
use crate::{Error, Result};

/// `bytes` in GB with two decimals (1 GB = 10^9 bytes; the unit is said).
pub(crate) fn gb(bytes: u64) -> String {
    format!("{:.2} GB", bytes as f64 / 1e9)
}

/// The device memory a fit used, in bytes: its peak (the memory pool's
/// high-water mark over the upload and the fit, data included) and the
/// device's total; over several GPUs, the GPU whose peak was largest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MemoryUse {
    /// The most the fit's allocations held at once.
    pub peak_bytes: u64,
    /// The device's memory.
    pub total_bytes: u64,
}

/// How to choose between the CPU and the GPU (`MATFREE_GPU`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuPolicy {
    /// Use the GPU when one is found, else the CPU (the default).
    Auto,
    /// Use the GPU or fail.
    Required,
    /// Always the CPU.
    Off,
}

impl GpuPolicy {
    /// Parse a policy (`auto`, `required`, `off`).
    pub fn parse(value: &str) -> Result<Self> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(Self::Auto),
            "required" | "require" | "on" => Ok(Self::Required),
            "off" | "cpu" | "0" => Ok(Self::Off),
            _ => Err(Error::invalid(
                "MATFREE_GPU",
                value,
                "must be one of auto, required, off",
            )),
        }
    }

    /// The policy from the environment variable `MATFREE_GPU` (unset: auto).
    pub fn from_env() -> Result<Self> {
        Self::parse(&std::env::var("MATFREE_GPU").unwrap_or_default())
    }
}

/// The device a computation runs on.
pub enum Device {
    /// The CPU, with the reason the GPU is not used.
    Cpu {
        /// Why not the GPU.
        reason: String,
    },
    /// The GPU.
    #[cfg(feature = "cuda")]
    Gpu(Arc<Gpu>),
}

impl Device {
    /// A one-line description for logs and summaries.
    pub fn describe(&self) -> String {
        match self {
            Device::Cpu { reason } => format!("cpu ({} threads; {reason})", rayon::current_num_threads()),
            #[cfg(feature = "cuda")]
            Device::Gpu(g) => g.describe(),
        }
    }

    /// Whether this is a GPU.
    pub fn is_gpu(&self) -> bool {
        !matches!(self, Device::Cpu { .. })
    }
}

/// The device a front end's backend option asks for: `auto` follows
/// `MATFREE_GPU`, `cpu` is the CPU, `gpu` the GPU or an error naming what
/// failed (in a build without the `cuda` feature, [`check_cuda_support`]'s);
/// `field` names the option in errors (`--backend`, `device`).
pub fn choose_device(field: &str, backend: &str) -> Result<Device> {
    let policy = match backend {
        "auto" => GpuPolicy::from_env()?,
        "cpu" => GpuPolicy::Off,
        "gpu" => {
            check_cuda_support(field, backend)?;
            GpuPolicy::Required
        }
        other => return Err(Error::invalid(field, format!("{other:?}"), "must be auto, cpu or gpu")),
    };
    select_device(policy)
}

/// Whether this build can use a GPU (the `cuda` feature).
pub const CUDA_SUPPORT: bool = cfg!(feature = "cuda");

/// `Ok` in a build with the `cuda` feature; otherwise the error for `field =
/// value`, a request for the GPU that this build cannot serve.
pub fn check_cuda_support(field: &str, value: impl std::fmt::Display) -> Result<()> {
    if CUDA_SUPPORT {
        Ok(())
    } else {
        Err(no_cuda_support(field, value))
    }
}

/// The error for a request for the GPU (`field = value`) in a build without
/// the `cuda` feature, which says how to get a build that has it.
fn no_cuda_support(field: &str, value: impl std::fmt::Display) -> Error {
    Error::invalid(
        field,
        value,
        "asks for the GPU, but this build of matfree has no CUDA support (built without the `cuda` feature): \
         build it with the `cuda` feature (on by default: drop `--no-default-features`, or add `--features cuda`)",
    )
}

/// Apply a policy: `Off` gives the CPU, `Auto` the GPU if it can be started
/// and the CPU otherwise, `Required` the GPU or an error naming what failed.
/// Without the `cuda` feature, `Auto` gives the CPU and `Required` is an
/// error ([`check_cuda_support`]).
pub fn select_device(policy: GpuPolicy) -> Result<Device> {
    match policy {
        GpuPolicy::Off => Ok(Device::Cpu {
            reason: "MATFREE_GPU=off".into(),
        }),
        #[cfg(feature = "cuda")]
        GpuPolicy::Auto => Ok(match Gpu::get() {
            Ok(g) => Device::Gpu(g),
            Err(e) => Device::Cpu {
                reason: format!("no usable GPU: {e}"),
            },
        }),
        #[cfg(feature = "cuda")]
        GpuPolicy::Required => Gpu::get().map(Device::Gpu),
        #[cfg(not(feature = "cuda"))]
        GpuPolicy::Auto => Ok(Device::Cpu {
            reason: "built without the cuda feature".into(),
        }),
        #[cfg(not(feature = "cuda"))]
        GpuPolicy::Required => Err(no_cuda_support("MATFREE_GPU", "required")),
    }
}
