//! Several GPUs of one host, driven from one thread: a [`GpuGroup`] (the
//! devices and their NCCL communicators) and [`MultiGpuBackend`], the
//! solvers' `Backend` whose vectors are replicated, one copy per device.
//!
//! Every vector and scalar operation runs the same single-GPU code
//! ([`CudaBackend`]) on every device with the same inputs, so the replicas
//! stay bitwise identical and every device computes the same alphas, betas
//! and stopping decisions without talking to the others. Only operators
//! exchange data (see `ShardedRowHessian`), and the host reads scalars from
//! device 0 alone, once per convergence check, as on one GPU.
//!
//! NCCL's `Comm` is not `Send`, so a group (and everything built on it)
//! stays on the thread that created it.

use std::rc::Rc;
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaSlice, CudaView, CudaViewMut};
use cudarc::nccl::safe::{group_end, group_start, Comm};
use matfree_solvers::{Backend, PcgKernels, PcgVectors, Result as SolverResult, Slot, SolverError};

use super::backend::CudaBackend;
use super::kernels;
use super::runtime::{cuda_err, Gpu};
use crate::{Error, Result};

/// Collectives of different groups on the same devices must be queued in
/// the same order on every device: otherwise group A's kernel on device 0
/// can wait for its peer on device 1 while that device runs group B's
/// kernel, which waits for its own peer queued behind A's on device 0. One
/// process-wide lock around each grouped launch keeps a single order.
static COLLECTIVE_ORDER: Mutex<()> = Mutex::new(());

/// The GPUs of one host that share a computation, in rank order, with one
/// NCCL communicator each (on each device's own stream).
pub struct GpuGroup {
    gpus: Vec<Arc<Gpu>>,
    comms: Vec<Comm>,
}

/// NVLink SHARP (multicast) collectives are left off on the target
/// machines (`NCCL_NVLS_ENABLE=0`); NCCL reads its environment when the
/// first communicator is created, so this runs before that.
fn disable_nvls() {
    if std::env::var("NCCL_NVLS_ENABLE").as_deref() != Ok("0") {
        std::env::set_var("NCCL_NVLS_ENABLE", "0");
    }
}

impl GpuGroup {
    /// A group over distinct started devices (rank d = `gpus[d]`).
    /// A missing NCCL library is an error naming it.
    pub fn new(gpus: Vec<Arc<Gpu>>) -> Result<Rc<Self>> {
        let mut ordinals: Vec<usize> = gpus.iter().map(|g| g.ordinal()).collect();
        ordinals.sort_unstable();
        ordinals.dedup();
        if gpus.is_empty() || ordinals.len() != gpus.len() {
            let listed: Vec<usize> = gpus.iter().map(|g| g.ordinal()).collect();
            return Err(Error::invalid(
                "GPU group ordinals",
                format!("{listed:?}"),
                "must list at least one device, each once",
            ));
        }
        // SAFETY: only tries to dlopen the library; no NCCL call is made.
        if !unsafe { cudarc::nccl::sys::is_culib_present() } {
            return Err(Error::Cuda("NCCL (libnccl) not found".into()));
        }
        disable_nvls();
        let streams = gpus.iter().map(|g| g.stream.clone()).collect();
        let comms = Comm::from_devices(streams).map_err(|e| cuda_err("creating NCCL communicators", e))?;
        Ok(Rc::new(Self { gpus, comms }))
    }

    /// A group over devices `0..count`.
    pub fn open(count: usize) -> Result<Rc<Self>> {
        Self::new(Gpu::open_first(count)?)
    }

    /// A group over every visible device.
    pub fn open_all() -> Result<Rc<Self>> {
        Self::open(Gpu::count()?)
    }

    /// Number of devices.
    pub fn len(&self) -> usize {
        self.gpus.len()
    }

    /// Always false: a group has at least one device.
    pub fn is_empty(&self) -> bool {
        self.gpus.is_empty()
    }

    /// The devices, in rank order.
    pub fn gpus(&self) -> &[Arc<Gpu>] {
        &self.gpus
    }

    /// A one-line description for logs and summaries.
    pub fn describe(&self) -> String {
        let names: Vec<String> = self
            .gpus
            .iter()
            .map(|g| format!("{}: {}", g.ordinal(), g.name()))
            .collect();
        format!("{} gpus (NCCL) [{}]", self.len(), names.join(", "))
    }

    /// `out[d][..len] = local[0][..len] + local[1][..len] + ...` on every
    /// device d: an NCCL all-gather of the per-device partials, then the
    /// same fixed-order sum on each device, so every replica is bitwise the
    /// same for any device count (an NCCL all-reduce's order may differ
    /// between ranks). `gathered[d]` holds `len()` * `len` values. Queued.
    pub(crate) fn all_sum(
        &self,
        local: &[CudaSlice<f64>],
        len: usize,
        gathered: &mut [CudaSlice<f64>],
        out: &mut [CudaSlice<f64>],
    ) -> Result<()> {
        let world = self.len();
        self.check_buffers("partials", local.iter().map(|b| b.len()), len)?;
        self.check_buffers("gathered", gathered.iter().map(|b| b.len()), world * len)?;
        self.check_buffers("sums", out.iter().map(|b| b.len()), len)?;
        {
            let sends: Vec<CudaView<'_, f64>> = local.iter().map(|b| b.slice(..len)).collect();
            let mut recvs: Vec<CudaViewMut<'_, f64>> =
                gathered.iter_mut().map(|b| b.slice_mut(..world * len)).collect();
            let _order = COLLECTIVE_ORDER
                .lock()
                .map_err(|_| Error::Cuda("NCCL launch-order lock poisoned".into()))?;
            grouped(|| {
                self.comms
                    .iter()
                    .zip(sends.iter().zip(recvs.iter_mut()))
                    .try_for_each(|(comm, (s, r))| comm.all_gather(s, r).map(|_| ()))
            })?;
        }
        for (d, gpu) in self.gpus.iter().enumerate() {
            kernels::reduce_partials(gpu, world, len, &gathered[d], &mut out[d])?;
        }
        Ok(())
    }

    /// One buffer per device, each holding at least `want` values.
    fn check_buffers(&self, field: &str, lens: impl ExactSizeIterator<Item = usize>, want: usize) -> Result<()> {
        if lens.len() != self.len() {
            let rule = format!("must hold one buffer per device ({})", self.len());
            return Err(Error::invalid(format!("{field} buffers"), lens.len(), rule));
        }
        for (d, got) in lens.enumerate() {
            if got < want || want == 0 {
                let rule = format!("must hold at least {want} values (and at least one)");
                return Err(Error::invalid(format!("{field}[device {d}].len"), got, rule));
            }
        }
        Ok(())
    }
}

impl Drop for GpuGroup {
    /// cudarc aborts each communicator when it drops: let every queued
    /// collective finish first. A failed sync has nowhere to go here; the
    /// device's next call reports the (sticky) error.
    fn drop(&mut self) {
        for g in &self.gpus {
            let _ = g.stream.synchronize();
        }
    }
}

/// Run NCCL calls between `ncclGroupStart` and `ncclGroupEnd`, so one thread
/// can queue a collective on every device without deadlocking. The group is
/// closed even when a call fails.
fn grouped(calls: impl FnOnce() -> std::result::Result<(), cudarc::nccl::result::NcclError>) -> Result<()> {
    group_start().map_err(|e| cuda_err("ncclGroupStart", e))?;
    let queued = calls();
    let ended = group_end();
    queued.map_err(|e| cuda_err("NCCL all-gather", e))?;
    ended.map_err(|e| cuda_err("ncclGroupEnd", e))?;
    Ok(())
}

/// A vector replicated on every device of a group (replica d on device d).
pub struct Replicated {
    parts: Vec<CudaSlice<f64>>,
}

impl Replicated {
    /// The replicas, in the group's rank order.
    pub fn replicas(&self) -> &[CudaSlice<f64>] {
        &self.parts
    }

    pub(crate) fn from_parts(parts: Vec<CudaSlice<f64>>) -> Self {
        Self { parts }
    }

    pub(crate) fn replicas_mut(&mut self) -> &mut [CudaSlice<f64>] {
        &mut self.parts
    }

    /// Check that this vector has one replica on each device of `group`,
    /// in rank order.
    pub(crate) fn check_on(&self, field: &str, group: &GpuGroup) -> Result<()> {
        let on_group = self.parts.len() == group.len()
            && self
                .parts
                .iter()
                .zip(group.gpus())
                .all(|(x, g)| Arc::ptr_eq(x.stream(), &g.stream));
        if on_group {
            return Ok(());
        }
        let rule = format!(
            "must have one replica on each of the group's {} devices, in rank order",
            group.len()
        );
        Err(Error::invalid(format!("{field} replicas"), self.parts.len(), rule))
    }
}

/// The solvers' [`Backend`] over a [`GpuGroup`]: every operation runs on
/// every device with the single-GPU code; `read_scalars` and `download`
/// read device 0.
#[derive(Clone)]
pub struct MultiGpuBackend {
    group: Rc<GpuGroup>,
    devices: Vec<CudaBackend>,
}

impl MultiGpuBackend {
    /// A backend over the group's devices.
    pub fn new(group: Rc<GpuGroup>) -> Result<Self> {
        let devices = group
            .gpus()
            .iter()
            .map(|g| CudaBackend::new(g.clone()))
            .collect::<Result<_>>()?;
        Ok(Self { group, devices })
    }

    /// The group it runs on.
    pub fn group(&self) -> &Rc<GpuGroup> {
        &self.group
    }

    /// Host synchronisations made on device 0 (where the host reads).
    pub fn syncs(&self) -> usize {
        self.devices[0].syncs()
    }

    /// Every replica of `x`, downloaded (for checks that they agree).
    pub fn download_replicas(&self, x: &Replicated) -> SolverResult<Vec<Vec<f64>>> {
        self.check("vector", &[x])?;
        self.map(|d, be| be.download(&x.parts[d]))
    }

    fn check(&self, field: &str, vectors: &[&Replicated]) -> SolverResult<()> {
        vectors
            .iter()
            .try_for_each(|v| v.check_on(field, &self.group))
            .map_err(SolverError::from)
    }

    /// f(d, backend of device d) for every device, in rank order.
    fn map<T>(&self, mut f: impl FnMut(usize, &CudaBackend) -> SolverResult<T>) -> SolverResult<Vec<T>> {
        self.devices.iter().enumerate().map(|(d, be)| f(d, be)).collect()
    }

    fn each(&self, f: impl FnMut(usize, &CudaBackend) -> SolverResult<()>) -> SolverResult<()> {
        self.map(f).map(|_| ())
    }

    fn replicated(
        &self,
        f: impl FnMut(usize, &CudaBackend) -> SolverResult<CudaSlice<f64>>,
    ) -> SolverResult<Replicated> {
        Ok(Replicated { parts: self.map(f)? })
    }
}

impl Backend for MultiGpuBackend {
    type Vector = Replicated;
    type Scalars = Replicated;
    type Recording = ();

    fn zeros(&self, n: usize) -> SolverResult<Replicated> {
        self.replicated(|_, be| be.zeros(n))
    }
    fn uninit(&self, n: usize) -> SolverResult<Replicated> {
        self.replicated(|_, be| be.uninit(n))
    }
    fn upload(&self, x: &[f64]) -> SolverResult<Replicated> {
        self.replicated(|_, be| be.upload(x))
    }
    fn download(&self, x: &Replicated) -> SolverResult<Vec<f64>> {
        self.check("vector", &[x])?;
        self.devices[0].download(&x.parts[0])
    }
    fn len(&self, x: &Replicated) -> usize {
        x.parts.first().map_or(0, |p| p.len())
    }
    fn scalars(&self, n: usize) -> SolverResult<Replicated> {
        self.replicated(|_, be| be.scalars(n))
    }
    fn write_scalars(&self, s: &mut Replicated, start: Slot, values: &[f64]) -> SolverResult<()> {
        self.check("scalar slots", &[s])?;
        self.each(|d, be| be.write_scalars(&mut s.parts[d], start, values))
    }
    type ScalarRead = <CudaBackend as Backend>::ScalarRead;
    /// Every device holds the same slots: copy device 0's (waited for in
    /// `wait_scalars`, the one sync).
    fn request_scalars(&self, s: &Replicated) -> SolverResult<Self::ScalarRead> {
        self.check("scalar slots", &[s])?;
        self.devices[0].request_scalars(&s.parts[0])
    }
    fn wait_scalars(&self, read: Self::ScalarRead) -> SolverResult<Vec<f64>> {
        self.devices[0].wait_scalars(read)
    }
    fn copy(&self, src: &Replicated, dst: &mut Replicated) -> SolverResult<()> {
        self.check("copy", &[src, dst])?;
        self.each(|d, be| be.copy(&src.parts[d], &mut dst.parts[d]))
    }
    fn dot(&self, x: &Replicated, y: &Replicated, s: &mut Replicated, out: Slot) -> SolverResult<()> {
        self.check("dot", &[x, y, s])?;
        self.each(|d, be| be.dot(&x.parts[d], &y.parts[d], &mut s.parts[d], out))
    }
    fn axpy(&self, s: &Replicated, alpha: Slot, x: &Replicated, y: &mut Replicated) -> SolverResult<()> {
        self.check("axpy", &[s, x, y])?;
        self.each(|d, be| be.axpy(&s.parts[d], alpha, &x.parts[d], &mut y.parts[d]))
    }
    fn xpay(&self, x: &Replicated, s: &Replicated, beta: Slot, y: &mut Replicated) -> SolverResult<()> {
        self.check("xpay", &[x, s, y])?;
        self.each(|d, be| be.xpay(&x.parts[d], &s.parts[d], beta, &mut y.parts[d]))
    }
    fn sub_from(&self, b: &Replicated, r: &mut Replicated) -> SolverResult<()> {
        self.check("residual", &[b, r])?;
        self.each(|d, be| be.sub_from(&b.parts[d], &mut r.parts[d]))
    }
    fn mul_elementwise(&self, dg: &Replicated, r: &Replicated, z: &mut Replicated) -> SolverResult<()> {
        self.check("preconditioner", &[dg, r, z])?;
        self.each(|d, be| be.mul_elementwise(&dg.parts[d], &r.parts[d], &mut z.parts[d]))
    }
    /// Each device checks its own replica; all see the same values, so the
    /// first error (device 0's) names the same entry any device would.
    fn invert_positive(
        &self,
        dg: &Replicated,
        extra: Option<&Replicated>,
        ridge: f64,
        field: &str,
        out: &mut Replicated,
    ) -> SolverResult<()> {
        self.check("inverse diagonal", &[dg, out])?;
        extra.map(|e| self.check("extra diagonal", &[e])).transpose()?;
        self.each(|d, be| {
            be.invert_positive(
                &dg.parts[d],
                extra.map(|e| &e.parts[d]),
                ridge,
                field,
                &mut out.parts[d],
            )
        })
    }
    fn gemm_acc(&self, a: &Replicated, n: usize, x: &Replicated, y: &mut Replicated) -> SolverResult<()> {
        self.check("gemv", &[a, x, y])?;
        self.each(|d, be| be.gemm_acc(&a.parts[d], n, &x.parts[d], &mut y.parts[d]))
    }

    /// Runs the body directly. Each device's queue is ordered by its own
    /// stream and the operator's all-gathers, so nothing here waits on the
    /// host; capturing NCCL calls of several devices from one thread into
    /// CUDA graphs is left for when it is measured to matter.
    fn repeat(
        &self,
        times: usize,
        _recording: &mut Option<(usize, ())>,
        body: &mut dyn FnMut() -> SolverResult<()>,
    ) -> SolverResult<()> {
        (0..times).try_for_each(|_| body())
    }
}

impl PcgKernels for MultiGpuBackend {
    fn pcg_start(&self, s: &mut Replicated, rtol: f64, atol: f64) -> SolverResult<()> {
        self.check("scalar slots", &[s])?;
        self.each(|d, be| be.pcg_start(&mut s.parts[d], rtol, atol))
    }
    fn pcg_alpha(&self, s: &mut Replicated) -> SolverResult<()> {
        self.check("scalar slots", &[s])?;
        self.each(|d, be| be.pcg_alpha(&mut s.parts[d]))
    }
    fn pcg_beta(&self, s: &mut Replicated) -> SolverResult<()> {
        self.check("scalar slots", &[s])?;
        self.each(|d, be| be.pcg_beta(&mut s.parts[d]))
    }
    fn pcg_step_diagonal(
        &self,
        dg: &Replicated,
        mut v: PcgVectors<'_, Replicated>,
        s: &mut Replicated,
    ) -> SolverResult<bool> {
        self.check("pcg step", &[dg, v.x, v.r, v.z, v.p, v.q, s])?;
        let fused = self.map(|d, be| {
            let vd = device_part(&mut v, d);
            be.pcg_step_diagonal(&dg.parts[d], vd, &mut s.parts[d])
        })?;
        agreed(&fused)
    }
    fn pcg_restart_diagonal(
        &self,
        dg: &Replicated,
        b: &Replicated,
        mut v: PcgVectors<'_, Replicated>,
        s: &mut Replicated,
        tol: (f64, f64),
    ) -> SolverResult<bool> {
        self.check("pcg restart", &[dg, b, v.x, v.r, v.z, v.p, v.q, s])?;
        let fused = self.map(|d, be| {
            let vd = device_part(&mut v, d);
            be.pcg_restart_diagonal(&dg.parts[d], &b.parts[d], vd, &mut s.parts[d], tol)
        })?;
        agreed(&fused)
    }
    fn pcg_true_residual(&self, b: &Replicated, r: &mut Replicated, s: &mut Replicated) -> SolverResult<bool> {
        self.check("pcg true residual", &[b, r, s])?;
        let fused = self.map(|d, be| be.pcg_true_residual(&b.parts[d], &mut r.parts[d], &mut s.parts[d]))?;
        agreed(&fused)
    }
}

/// Device d's part of replicated PCG vectors.
fn device_part<'v>(v: &'v mut PcgVectors<'_, Replicated>, d: usize) -> PcgVectors<'v, CudaSlice<f64>> {
    PcgVectors {
        x: &mut v.x.parts[d],
        r: &mut v.r.parts[d],
        z: &mut v.z.parts[d],
        p: &mut v.p.parts[d],
        q: &v.q.parts[d],
    }
}

/// Every device's choice to fuse: it depends only on the length, so they
/// agree; a mix would leave the replicas apart, so it is an error.
fn agreed(fused: &[bool]) -> SolverResult<bool> {
    if fused.iter().any(|&f| f != fused[0]) {
        return Err(SolverError::Backend("devices disagreed on fusing a PCG step".into()));
    }
    Ok(fused[0])
}
