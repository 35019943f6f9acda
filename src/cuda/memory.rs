//! Device memory: what is available to an allocation, the high-water mark
//! of what this process's allocations held, and an out-of-memory error that
//! says how much was asked for and how much there was.
//!
//! cudarc allocates from the device's default memory pool (stream-ordered
//! allocation), and the pool keeps what is freed ([`super::runtime`]'s
//! release threshold), so the driver's free memory understates what an
//! allocation can take: the pool's reserved but unused bytes count too.

use cudarc::driver::sys::{self, CUmemPool_attribute};
use cudarc::driver::DriverError;

use super::runtime::{cuda_err, Gpu};
use crate::device::gb;
use crate::{Error, Result};

/// A device's memory, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DeviceMemory {
    /// What an allocation can take now: the driver's free memory and the
    /// pool's reserved but unused bytes.
    pub available: u64,
    /// The device's memory.
    pub total: u64,
    /// The most this process's pool allocations held at once since the
    /// last [`Gpu::reset_memory_peak`] (`None`: no memory pool).
    pub peak: Option<u64>,
}

impl Gpu {
    /// The device's memory now (see [`DeviceMemory`]).
    pub fn memory(&self) -> Result<DeviceMemory> {
        let (free, total) = self
            .stream
            .context()
            .mem_get_info()
            .map_err(|e| cuda_err("device memory", e))?;
        let pool = self.pool_bytes()?;
        let unused = pool.map_or(0, |(reserved, used, _)| reserved.saturating_sub(used));
        Ok(DeviceMemory {
            available: free as u64 + unused,
            total: total as u64,
            peak: pool.map(|(_, _, high)| high),
        })
    }

    /// Start the high-water mark of [`DeviceMemory::peak`] again from what
    /// is held now.
    pub fn reset_memory_peak(&self) -> Result<()> {
        let Some(pool) = self.default_pool()? else {
            return Ok(());
        };
        let mut zero = 0u64;
        // SAFETY: the device's default pool; USED_MEM_HIGH takes a u64 and
        // may only be set to zero.
        unsafe {
            sys::cuMemPoolSetAttribute(
                pool,
                CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH,
                (&mut zero as *mut u64).cast(),
            )
        }
        .result()
        .map_err(|e| cuda_err("resetting the memory peak", e))
    }

    /// The error of `what` (an allocation of `bytes`) failing with `e`:
    /// out of memory says what was asked for and what the device had.
    pub(crate) fn alloc_error(&self, what: &str, bytes: usize, e: DriverError) -> Error {
        if e.0 != sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            return cuda_err(what, e);
        }
        let had = match self.memory() {
            Ok(m) => format!("{} available of {}", gb(m.available), gb(m.total)),
            Err(_) => "its memory unreadable".into(),
        };
        Error::Cuda(format!(
            "out of device memory allocating {} on {} ({had})",
            gb(bytes as u64),
            self.name()
        ))
    }

    fn default_pool(&self) -> Result<Option<sys::CUmemoryPool>> {
        let ctx = self.stream.context();
        let pools = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)
            .map_err(|e| cuda_err("memory pools supported", e))?;
        if pools == 0 {
            return Ok(None);
        }
        self.bind()?;
        let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: the context's device, bound to this thread.
        unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device()) }
            .result()
            .map_err(|e| cuda_err("default memory pool", e))?;
        Ok(Some(pool))
    }

    /// The pool's (reserved, used, used high-water mark) bytes.
    fn pool_bytes(&self) -> Result<Option<(u64, u64, u64)>> {
        let Some(pool) = self.default_pool()? else {
            return Ok(None);
        };
        let read = |attr: CUmemPool_attribute| -> Result<u64> {
            let mut v = 0u64;
            // SAFETY: the device's default pool; these attributes are u64.
            unsafe { sys::cuMemPoolGetAttribute(pool, attr, (&mut v as *mut u64).cast()) }
                .result()
                .map_err(|e| cuda_err("memory pool attribute", e))?;
            Ok(v)
        };
        Ok(Some((
            read(CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)?,
            read(CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_CURRENT)?,
            read(CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH)?,
        )))
    }
}
