//! Scalar banks copied to the host without stopping the stream: each copy
//! lands in a page-locked buffer of its own and records an event after it,
//! so the host waits for that copy, not for the work queued behind it.
//! Buffers are pooled per GPU; a read dropped unwaited returns its buffer at
//! once, which is safe because every copy runs on the one stream: a later
//! copy into the same buffer cannot start before the earlier one ends, and
//! the host reads a buffer only after its own copy's event.

use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaEvent, CudaSlice, PinnedHostSlice};

use super::runtime::{cuda_err, Gpu, PINNED_SLOTS};
use crate::{Error, Result};

/// A page-locked buffer and the event recorded after the copy into it.
pub(crate) struct Staging {
    buf: PinnedHostSlice<f64>,
    done: CudaEvent,
}

/// The idle staging buffers of one GPU.
#[derive(Default)]
pub(crate) struct StagingPool(Mutex<Vec<Staging>>);

impl StagingPool {
    fn take(&self, gpu: &Gpu) -> Result<Staging> {
        if let Some(s) = self.0.lock().ok().and_then(|mut v| v.pop()) {
            return Ok(s);
        }
        let ctx = gpu.stream.context();
        // SAFETY: plain page-locked host memory (not write-combined: the host reads it).
        let buf = unsafe { ctx.alloc_pinned_with_flags::<f64>(PINNED_SLOTS, 0) }
            .map_err(|e| cuda_err("pinned staging", e))?;
        let done = ctx.new_event(None).map_err(|e| cuda_err("staging event", e))?;
        Ok(Staging { buf, done })
    }

    fn give(&self, s: Staging) {
        if let Ok(mut v) = self.0.lock() {
            v.push(s);
        }
    }
}

/// A bank's copy on its way to the host (see `Backend::request_scalars`).
pub struct ScalarCopy {
    staging: Option<Staging>,
    len: usize,
    gpu: Arc<Gpu>,
}

impl Drop for ScalarCopy {
    fn drop(&mut self) {
        if let Some(s) = self.staging.take() {
            self.gpu.staging.give(s);
        }
    }
}

impl ScalarCopy {
    /// Queue the copy of `s` and the event after it.
    pub(crate) fn request(gpu: &Arc<Gpu>, s: &CudaSlice<f64>) -> Result<Self> {
        if s.len() > PINNED_SLOTS {
            return Err(Error::invalid(
                "scalar slots",
                s.len(),
                format!("at most {PINNED_SLOTS} per bank"),
            ));
        }
        gpu.bind()?;
        let mut st = gpu.staging.take(gpu)?;
        gpu.stream
            .memcpy_dtoh(s, &mut st.buf)
            .map_err(|e| cuda_err("scalar copy", e))?;
        st.done
            .record(&gpu.stream)
            .map_err(|e| cuda_err("scalar copy event", e))?;
        Ok(Self {
            staging: Some(st),
            len: s.len(),
            gpu: gpu.clone(),
        })
    }

    /// Wait for the copy (not for later work) and return the values.
    pub(crate) fn wait(mut self) -> Result<Vec<f64>> {
        let st = self
            .staging
            .take()
            .ok_or_else(|| Error::Cuda("scalar copy already taken".into()))?;
        self.gpu.count_sync();
        let got = st.done.synchronize().map_err(|e| cuda_err("waiting for scalars", e));
        // The buffer's own event is never recorded (event tracking is off),
        // so as_slice does not wait again: `done` above was the wait.
        let values = got.and_then(|()| {
            let host = st.buf.as_slice().map_err(|e| cuda_err("staging", e))?;
            Ok(host[..self.len].to_vec())
        });
        self.gpu.staging.give(st);
        values
    }
}
