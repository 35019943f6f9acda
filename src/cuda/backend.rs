//! The solvers' `Backend` on the GPU: vectors and scalar slots are device
//! buffers; dot and axpy go through cuBLAS in device pointer mode, so alphas
//! and results never visit the host; the PCG scalar steps are one-thread
//! kernels. `read_scalars` is the one synchronising call, counted.

use std::sync::Arc;

use cudarc::cublas::sys::{self as blas, cublasPointerMode_t, cublasStatus_t};
use cudarc::driver::sys::CUstreamCaptureMode;
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};
use matfree_solvers::logdet::DenseFactor;
use matfree_solvers::{Backend, PcgKernels, PcgVectors, Result as SolverResult, Slot, SolverError};

use super::dense::{DeviceDenseFactor, DEVICE_DENSE_MIN_P};
use super::kernels;
use super::recorded::Recorded;
use super::runtime::Gpu;
use super::staging::ScalarCopy;

/// The CUDA implementation of [`Backend`].
#[derive(Clone)]
pub struct CudaBackend {
    gpu: Arc<Gpu>,
    /// 1.0 on the device: alpha and beta of cuBLAS calls in device pointer mode.
    one: Arc<CudaSlice<f64>>,
}

fn blas_ok(what: &str, s: cublasStatus_t) -> SolverResult<()> {
    match s {
        cublasStatus_t::CUBLAS_STATUS_SUCCESS => Ok(()),
        other => Err(SolverError::Backend(format!("cuBLAS {what}: {other:?}"))),
    }
}

fn same_len(field: &str, got: usize, want: usize) -> SolverResult<()> {
    matfree_solvers::operator::expect_len(field, got, want)
}

use super::runtime::PINNED_SLOTS;

const F64: u64 = std::mem::size_of::<f64>() as u64;

impl CudaBackend {
    /// A backend on `gpu`. cuBLAS is switched to device pointer mode here
    /// and stays there: every scalar it reads or writes lives in a slot bank.
    pub fn new(gpu: Arc<Gpu>) -> crate::Result<Self> {
        gpu.bind()?;
        gpu.blas
            .set_pointer_mode(cublasPointerMode_t::CUBLAS_POINTER_MODE_DEVICE)
            .map_err(|e| super::runtime::cuda_err("cuBLAS pointer mode", e))?;
        let one = Arc::new(gpu.upload(&[1.0])?);
        Ok(Self { gpu, one })
    }

    /// The GPU this backend runs on.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// Host synchronisations and device-to-host copies made so far.
    pub fn syncs(&self) -> usize {
        self.gpu.syncs()
    }

    /// The cuBLAS handle, with this device's context made current: one
    /// thread may drive several devices (see `MultiGpuBackend`).
    fn handle(&self) -> SolverResult<blas::cublasHandle_t> {
        self.gpu.bind()?;
        Ok(*self.gpu.blas.handle())
    }
}

impl Backend for CudaBackend {
    type Vector = CudaSlice<f64>;
    type Scalars = CudaSlice<f64>;
    type Recording = Recorded;

    fn dense_factor(&self, p: usize, a: &[f64]) -> SolverResult<Box<dyn DenseFactor>> {
        if p < DEVICE_DENSE_MIN_P {
            return matfree_solvers::logdet::host_factor(p, a);
        }
        Ok(Box::new(DeviceDenseFactor::factor(&self.gpu, p, a)?))
    }
    fn zeros(&self, n: usize) -> SolverResult<CudaSlice<f64>> {
        self.gpu.zeros(n).map_err(SolverError::from)
    }
    fn uninit(&self, n: usize) -> SolverResult<CudaSlice<f64>> {
        self.gpu.bind()?;
        // SAFETY: f64 has no invalid bit patterns; callers write before reading.
        unsafe { self.gpu.stream.alloc::<f64>(n) }.map_err(|e| SolverError::Backend(format!("allocation: {e:?}")))
    }
    fn upload(&self, x: &[f64]) -> SolverResult<CudaSlice<f64>> {
        self.gpu.upload(x).map_err(SolverError::from)
    }
    fn download(&self, x: &CudaSlice<f64>) -> SolverResult<Vec<f64>> {
        self.gpu.download(x).map_err(SolverError::from)
    }
    fn len(&self, x: &CudaSlice<f64>) -> usize {
        x.len()
    }
    /// Banks are allocated at the pinned read-back buffer's full length, since
    /// a device-to-host copy moves the whole destination.
    fn scalars(&self, n: usize) -> SolverResult<CudaSlice<f64>> {
        if n > PINNED_SLOTS {
            return Err(SolverError::invalid(
                "scalar slots",
                n,
                format!("at most {PINNED_SLOTS} per bank"),
            ));
        }
        self.zeros(PINNED_SLOTS)
    }
    fn write_scalars(&self, s: &mut CudaSlice<f64>, start: Slot, values: &[f64]) -> SolverResult<()> {
        same_len("scalar slots", s.len().max(start + values.len()), s.len())?;
        let mut view = s.slice_mut(start..start + values.len());
        self.gpu
            .stream
            .memcpy_htod(values, &mut view)
            .map_err(|e| SolverError::Backend(format!("{e:?}")))
    }
    type ScalarRead = ScalarCopy;
    fn request_scalars(&self, s: &CudaSlice<f64>) -> SolverResult<ScalarCopy> {
        ScalarCopy::request(&self.gpu, s).map_err(SolverError::from)
    }
    fn wait_scalars(&self, read: ScalarCopy) -> SolverResult<Vec<f64>> {
        read.wait().map_err(SolverError::from)
    }
    fn copy(&self, src: &CudaSlice<f64>, dst: &mut CudaSlice<f64>) -> SolverResult<()> {
        same_len("copy destination", dst.len(), src.len())?;
        self.gpu
            .stream
            .memcpy_dtod(src, dst)
            .map_err(|e| SolverError::Backend(format!("copy: {e:?}")))
    }
    fn dot(&self, x: &CudaSlice<f64>, y: &CudaSlice<f64>, s: &mut CudaSlice<f64>, out: Slot) -> SolverResult<()> {
        same_len("dot operand", y.len(), x.len())?;
        let st = &self.gpu.stream;
        let ((xp, _a), (yp, _b), (sp, _c)) = (x.device_ptr(st), y.device_ptr(st), s.device_ptr_mut(st));
        // SAFETY: x and y hold n values; the result slot lies inside s; device
        // pointer mode is set, so the result is written on the device.
        let handle = self.handle()?;
        let status = unsafe {
            blas::cublasDdot_v2_64(
                handle,
                x.len() as i64,
                xp as *const f64,
                1,
                yp as *const f64,
                1,
                (sp + out as u64 * F64) as *mut f64,
            )
        };
        blas_ok("dot", status)
    }
    /// A kernel of our own rather than cuBLAS's daxpy: it must leave y
    /// untouched when the slot holds zero (a stopped PCG), which daxpy in
    /// device pointer mode cannot know.
    fn axpy(&self, s: &CudaSlice<f64>, alpha: Slot, x: &CudaSlice<f64>, y: &mut CudaSlice<f64>) -> SolverResult<()> {
        same_len("axpy operand", y.len(), x.len())?;
        kernels::axpy(&self.gpu, s, alpha, x, y).map_err(SolverError::from)
    }
    fn xpay(&self, x: &CudaSlice<f64>, s: &CudaSlice<f64>, beta: Slot, y: &mut CudaSlice<f64>) -> SolverResult<()> {
        same_len("xpay operand", y.len(), x.len())?;
        kernels::xpay(&self.gpu, x, s, beta, y).map_err(SolverError::from)
    }
    fn sub_from(&self, b: &CudaSlice<f64>, r: &mut CudaSlice<f64>) -> SolverResult<()> {
        same_len("residual", r.len(), b.len())?;
        kernels::sub_from(&self.gpu, b, r).map_err(SolverError::from)
    }
    fn mul_elementwise(&self, d: &CudaSlice<f64>, r: &CudaSlice<f64>, z: &mut CudaSlice<f64>) -> SolverResult<()> {
        same_len("preconditioner input", r.len(), d.len())?;
        same_len("preconditioner output", z.len(), d.len())?;
        kernels::mul_elementwise(&self.gpu, d, r, z).map_err(SolverError::from)
    }
    fn invert_positive(
        &self,
        d: &CudaSlice<f64>,
        extra: Option<&CudaSlice<f64>>,
        ridge: f64,
        field: &str,
        out: &mut CudaSlice<f64>,
    ) -> SolverResult<()> {
        same_len("inverse diagonal", out.len(), d.len())?;
        let mut first_bad = self.gpu.upload(&[i64::MAX]).map_err(SolverError::from)?;
        kernels::invert_positive(&self.gpu, d, extra, ridge, out, &mut first_bad).map_err(SolverError::from)?;
        self.gpu.count_sync();
        let bad = self
            .gpu
            .stream
            .clone_dtoh(&first_bad)
            .map_err(|e| SolverError::Backend(format!("{e:?}")))?[0];
        if bad == i64::MAX {
            return Ok(());
        }
        // Error path only: fetch the offending entry for the message.
        let i = bad as usize;
        let at = |v: &CudaSlice<f64>| self.download(v).map(|h| h[i]);
        let value = at(d)? + extra.map(at).transpose()?.unwrap_or(0.0) + ridge;
        Err(SolverError::invalid(
            format!("{field}[{i}]"),
            value,
            matfree_solvers::precond::POSITIVE_DIAGONAL_RULE,
        ))
    }
    fn gemm_acc(&self, a: &CudaSlice<f64>, n: usize, x: &CudaSlice<f64>, y: &mut CudaSlice<f64>) -> SolverResult<()> {
        same_len("gemv matrix", a.len(), n * n)?;
        same_len("gemv output", y.len(), x.len())?;
        if n == 0 || !x.len().is_multiple_of(n) {
            let rule = format!("length must be a positive multiple of n = {n}");
            return Err(SolverError::invalid("gemv input", x.len(), rule));
        }
        if n > i32::MAX as usize || x.len() / n > i32::MAX as usize {
            return Err(SolverError::invalid(
                "gemv n",
                n,
                "n and the column count must fit in i32 for cuBLAS",
            ));
        }
        let st = &self.gpu.stream;
        let (ap, _a) = a.device_ptr(st);
        let ((xp, _b), (yp, _c), (one, _d)) = (x.device_ptr(st), y.device_ptr_mut(st), self.one.device_ptr(st));
        let (n32, k32) = (n as i32, (x.len() / n) as i32);
        // Row-major A is column-major A^T, so Y += op(A^T) X with op = T.
        // SAFETY: A holds n^2 values, X and Y n k; alpha = beta = 1 on device.
        let handle = self.handle()?;
        let status = unsafe {
            blas::cublasDgemm_v2(
                handle,
                blas::cublasOperation_t::CUBLAS_OP_T,
                blas::cublasOperation_t::CUBLAS_OP_N,
                n32,
                k32,
                n32,
                one as *const f64,
                ap as *const f64,
                n32,
                xp as *const f64,
                n32,
                one as *const f64,
                yp as *mut f64,
                n32,
            )
        };
        blas_ok("gemm", status)
    }

    /// Records the first block of each length as a CUDA graph and replays it.
    /// If capture is refused (an operation in the body is not capturable),
    /// the body runs directly, which queues the same work.
    fn repeat(
        &self,
        times: usize,
        recording: &mut Option<(usize, Recorded)>,
        body: &mut dyn FnMut() -> SolverResult<()>,
    ) -> SolverResult<()> {
        if !matches!(recording, Some((len, _)) if *len == times) {
            // The old executable goes back to the GPU's pool first, so
            // the new capture can update it instead of instantiating.
            *recording = None;
            let st = &self.gpu.stream;
            st.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
                .map_err(|e| SolverError::Backend(format!("begin graph capture: {e:?}")))?;
            let queued = (0..times).try_for_each(|_| body());
            // SAFETY: the stream is capturing (begun above, on this thread).
            let graph = unsafe { cudarc::driver::result::stream::end_capture(st.cu_stream()) };
            match (queued, graph) {
                (Ok(()), Ok(g)) if !g.is_null() => match Recorded::from_graph(&self.gpu, g) {
                    Ok(r) => *recording = Some((times, r)),
                    // Instantiation refused: the captured work never ran.
                    Err(_) => return (0..times).try_for_each(|_| body()),
                },
                (_, g) => {
                    if let Some(g) = g.ok().filter(|g| !g.is_null()) {
                        // SAFETY: a finished capture's graph, held by no one.
                        let _ = unsafe { cudarc::driver::result::graph::destroy(g) };
                    }
                    // Capture refused or failed: nothing ran, so run directly.
                    return (0..times).try_for_each(|_| body());
                }
            }
        }
        let (_, graph) = recording.as_ref().expect("recorded above");
        self.gpu.count_graph_launch();
        graph.launch().map_err(SolverError::from)
    }
}

impl PcgKernels for CudaBackend {
    fn pcg_start(&self, s: &mut CudaSlice<f64>, rtol: f64, atol: f64) -> SolverResult<()> {
        kernels::pcg_start(&self.gpu, s, rtol, atol).map_err(SolverError::from)
    }
    fn pcg_alpha(&self, s: &mut CudaSlice<f64>) -> SolverResult<()> {
        kernels::pcg_scalar(&self.gpu, false, s).map_err(SolverError::from)
    }
    fn pcg_beta(&self, s: &mut CudaSlice<f64>) -> SolverResult<()> {
        kernels::pcg_scalar(&self.gpu, true, s).map_err(SolverError::from)
    }
    /// Short vectors (p up to 16,384) take one single-block kernel for the
    /// whole update: at those sizes launch latency, not bandwidth, is the
    /// cost. Longer ones use the cuBLAS sequence.
    fn pcg_step_diagonal(
        &self,
        d: &CudaSlice<f64>,
        v: PcgVectors<'_, CudaSlice<f64>>,
        s: &mut CudaSlice<f64>,
    ) -> SolverResult<bool> {
        if d.len() > kernels::SMALL_PCG {
            return Ok(false);
        }
        kernels::pcg_step_small(&self.gpu, d, v, s)?;
        Ok(true)
    }
    /// Short vectors: one single-block kernel for the whole start.
    fn pcg_restart_diagonal(
        &self,
        d: &CudaSlice<f64>,
        b: &CudaSlice<f64>,
        v: PcgVectors<'_, CudaSlice<f64>>,
        s: &mut CudaSlice<f64>,
        tol: (f64, f64),
    ) -> SolverResult<bool> {
        if d.len() > kernels::SMALL_PCG {
            return Ok(false);
        }
        kernels::pcg_restart_small(&self.gpu, d, b, v, s, tol)?;
        Ok(true)
    }
    fn pcg_true_residual(
        &self,
        b: &CudaSlice<f64>,
        r: &mut CudaSlice<f64>,
        s: &mut CudaSlice<f64>,
    ) -> SolverResult<bool> {
        if b.len() > kernels::SMALL_PCG {
            return Ok(false);
        }
        kernels::pcg_true_residual_small(&self.gpu, b, r, s)?;
        Ok(true)
    }
}
