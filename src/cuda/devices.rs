//! Every visible GPU, each started once per process: its own context,
//! stream, cuBLAS and cuSOLVER handles and kernels ([`Gpu::open`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::CudaContext;

#[cfg(feature = "testing")]
use super::runtime::gpu_for_test;
use super::runtime::{check_libraries, cuda_err, Gpu};
#[cfg(feature = "testing")]
use crate::device::GpuPolicy;
use crate::{Error, Result};

impl Gpu {
    /// Number of CUDA devices visible to this process (an error, never a
    /// panic, when the CUDA libraries are missing).
    pub fn count() -> Result<usize> {
        check_libraries()?;
        CudaContext::device_count()
            .map(|c| c.max(0) as usize)
            .map_err(|e| cuda_err("counting devices", e))
    }

    /// Device `ordinal`, started on first use and shared afterwards
    /// (`Gpu::get()` is `Gpu::open(0)`). The error of a failed start is kept
    /// and returned to every later caller for that ordinal.
    pub fn open(ordinal: usize) -> Result<Arc<Gpu>> {
        type Started = std::result::Result<Arc<Gpu>, String>;
        static OPENED: Mutex<BTreeMap<usize, Started>> = Mutex::new(BTreeMap::new());
        let mut opened = OPENED
            .lock()
            .map_err(|_| Error::Cuda("the table of started GPUs is poisoned".into()))?;
        let started = opened.entry(ordinal).or_insert_with(|| {
            Gpu::start(ordinal).map(Arc::new).map_err(|e| match e {
                Error::Cuda(m) => m,
                other => other.to_string(),
            })
        });
        started.clone().map_err(Error::Cuda)
    }

    /// Devices `0..count`, each started once (see [`Gpu::open`]).
    pub fn open_first(count: usize) -> Result<Vec<Arc<Gpu>>> {
        let visible = Self::count()?;
        if count == 0 || count > visible {
            let rule = format!("must be between 1 and the {visible} visible CUDA devices");
            return Err(Error::invalid("GPU count", count, rule));
        }
        (0..count).map(Self::open).collect()
    }

    /// The device's ordinal.
    pub fn ordinal(&self) -> usize {
        self.stream.context().ordinal()
    }

    /// Make this device's context current on the calling thread. cudarc does
    /// this for its own launches and copies; raw cuBLAS and cuSOLVER calls
    /// need it when one thread drives several devices.
    pub(crate) fn bind(&self) -> Result<()> {
        self.stream
            .context()
            .bind_to_thread()
            .map_err(|e| cuda_err("binding the device context", e))
    }
}

/// Set up what a GPU test needs under the `MATFREE_GPU` rule of
/// [`gpu_for_test`]: with `off`, or with `auto` when device 0 or `start`
/// fails (no GPU, no NCCL), print that the test skipped and give `None`;
/// with `required`, such a failure panics, failing the test.
#[cfg(feature = "testing")]
pub fn setup_for_test<T>(test: &str, start: impl FnOnce() -> Result<T>) -> Option<T> {
    gpu_for_test(test)?;
    let required = GpuPolicy::from_env().is_ok_and(|p| p == GpuPolicy::Required);
    match start() {
        Ok(v) => Some(v),
        Err(e) if required => panic!("{test}: MATFREE_GPU=required but the GPU setup failed: {e}"),
        Err(e) => {
            println!("{test}: skipped: {e}");
            None
        }
    }
}

/// Every visible GPU for a GPU test (see [`setup_for_test`]).
#[cfg(feature = "testing")]
pub fn gpus_for_test(test: &str) -> Option<Vec<Arc<Gpu>>> {
    setup_for_test(test, || Gpu::count().and_then(Gpu::open_first))
}
