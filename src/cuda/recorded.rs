//! Recorded blocks of work (CUDA graphs) whose executable outlives them.
//!
//! Instantiating a graph costs the host more than capturing it, and a
//! fresh solver records its block anew. So a dropped recording's executable
//! goes back to a small pool on its GPU, and the next recording updates it
//! in place (`cuGraphExecUpdate`), which succeeds when the new graph has the
//! same shape (nodes, kinds, edges) and only the kernels' arguments (the
//! new solver's vectors) differ. An update that is refused falls back to
//! instantiation; either way the executable then runs exactly the graph just
//! captured.

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::result::graph;
use cudarc::driver::sys::{self, CUgraphInstantiate_flags, CUresult};

use super::runtime::{cuda_err, Gpu};
use crate::{Error, Result};

/// Spare executables a GPU keeps at most.
const SPARE_EXECS: usize = 8;

/// An instantiated graph that is not in use.
pub(crate) struct SpareExec(sys::CUgraphExec);

// SAFETY: an executable may be used from any thread of its context; the
// pool's Mutex serialises access to a spare one.
unsafe impl Send for SpareExec {}

/// The spare executables of one GPU, and how recordings got theirs.
#[derive(Default)]
pub(crate) struct ExecPool {
    spare: Mutex<Vec<SpareExec>>,
    updates: AtomicUsize,
    instantiations: AtomicUsize,
}

impl ExecPool {
    fn take(&self) -> Option<sys::CUgraphExec> {
        self.spare.lock().ok()?.pop().map(|s| s.0)
    }

    /// Recordings that updated a spare executable, and those instantiated
    /// anew.
    pub(crate) fn counts(&self) -> (usize, usize) {
        (
            self.updates.load(Ordering::Relaxed),
            self.instantiations.load(Ordering::Relaxed),
        )
    }

    /// Keep `exec` for a later recording, or destroy it when the pool is full.
    fn give(&self, exec: sys::CUgraphExec) {
        if let Ok(mut spare) = self.spare.lock() {
            if spare.len() < SPARE_EXECS {
                spare.push(SpareExec(exec));
                return;
            }
        }
        // SAFETY: exec is valid and no longer referenced by anyone.
        let _ = unsafe { graph::exec_destroy(exec) };
    }

    /// Destroy every spare executable (the GPU's context is current).
    pub(crate) fn clear(&self) {
        let spare = self
            .spare
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default();
        for SpareExec(exec) in spare {
            // SAFETY: as in give.
            let _ = unsafe { graph::exec_destroy(exec) };
        }
    }
}

/// A recorded block, replayed with [`Recorded::launch`] on the GPU's stream.
pub struct Recorded {
    exec: sys::CUgraphExec,
    gpu: Arc<Gpu>,
}

impl Drop for Recorded {
    fn drop(&mut self) {
        self.gpu.execs.give(self.exec);
    }
}

impl Recorded {
    /// Turn a captured graph into an executable (a spare one updated, or a
    /// new one); the graph itself is destroyed.
    pub(crate) fn from_graph(gpu: &Arc<Gpu>, g: sys::CUgraph) -> Result<Self> {
        let exec = executable(gpu, g);
        // SAFETY: g came from a finished capture and nothing else holds it;
        // an executable does not need its graph.
        let _ = unsafe { graph::destroy(g) };
        Ok(Self {
            exec: exec?,
            gpu: gpu.clone(),
        })
    }

    /// Queue the recorded work on the GPU's stream.
    pub(crate) fn launch(&self) -> Result<()> {
        self.gpu.bind()?;
        // SAFETY: exec is a live executable of this context; the stream is the GPU's.
        unsafe { graph::launch(self.exec, self.gpu.stream.cu_stream()) }.map_err(|e| cuda_err("graph launch", e))
    }
}

fn executable(gpu: &Gpu, g: sys::CUgraph) -> Result<sys::CUgraphExec> {
    let pool = &gpu.execs;
    let spare = if driver_updates_graphs() { pool.take() } else { None };
    if let Some(exec) = spare {
        let mut info = MaybeUninit::<sys::CUgraphExecUpdateResultInfo>::zeroed();
        // SAFETY: exec and g are valid; info is written by the call.
        let updated = unsafe { sys::cuGraphExecUpdate_v2(exec, g, info.as_mut_ptr()) };
        if updated == CUresult::CUDA_SUCCESS {
            pool.updates.fetch_add(1, Ordering::Relaxed);
            return Ok(exec);
        }
        // SAFETY: the refused executable is ours and unused.
        let _ = unsafe { graph::exec_destroy(exec) };
    }
    // SAFETY: g is a valid, finished graph.
    let exec = unsafe { graph::instantiate(g, CUgraphInstantiate_flags(0)) }
        .map_err(|e| Error::Cuda(format!("graph instantiation: {e:?}")))?;
    pool.instantiations.fetch_add(1, Ordering::Relaxed);
    Ok(exec)
}

/// Whether the driver has `cuGraphExecUpdate_v2` (CUDA 12.0 on). cudarc
/// panics on a missing symbol, so an older driver's recordings instantiate
/// instead.
fn driver_updates_graphs() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    // SAFETY: a Gpu exists, so the driver library is loaded; the symbol is
    // only looked up, never called through this pointer.
    *HAS.get_or_init(|| unsafe {
        sys::culib()
            .get::<unsafe extern "C" fn()>(b"cuGraphExecUpdate_v2\0")
            .is_ok()
    })
}
