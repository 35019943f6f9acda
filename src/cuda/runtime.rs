//! Finding the GPU once per process (the `MATFREE_GPU` policy is
//! [`crate::device`]'s).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream};

use crate::{Error, Result};

/// The GPU for a GPU test, under the `MATFREE_GPU` rule: `off` or (with
/// `auto`) no usable GPU prints that the test skipped and gives `None`;
/// `required` without a GPU panics, failing the test.
#[cfg(feature = "testing")]
pub fn gpu_for_test(test: &str) -> Option<Arc<Gpu>> {
    use crate::device::{select_device, Device, GpuPolicy};
    let policy = GpuPolicy::from_env().unwrap_or_else(|e| panic!("{test}: {e}"));
    match select_device(policy) {
        Ok(Device::Gpu(g)) => Some(g),
        Ok(Device::Cpu { reason }) => {
            println!("{test}: skipped: {reason}");
            None
        }
        Err(e) => panic!("{test}: MATFREE_GPU=required but the GPU is unusable: {e}"),
    }
}

/// The compiled kernels, looked up once.
pub(crate) struct Functions {
    pub row_action: CudaFunction,
    pub hvp_fused: CudaFunction,
    pub hvp_staged: CudaFunction,
    pub hvp_staged_f32: CudaFunction,
    pub hvp_staged_pair: CudaFunction,
    pub hvp_staged_f32_pair: CudaFunction,
    pub pullback_partial: CudaFunction,
    pub dense_partial: CudaFunction,
    pub dense_staged_partial: CudaFunction,
    pub pack_upper_rows: CudaFunction,
    pub pack_upper_rows_f32: CudaFunction,
    pub reduce_partials: CudaFunction,
    pub mirror_upper: CudaFunction,
    pub chunk_sum_partial: CudaFunction,
    pub pcg_alpha: CudaFunction,
    pub pcg_beta: CudaFunction,
    pub pcg_step_small: CudaFunction,
    pub xpay: CudaFunction,
    pub axpy: CudaFunction,
    pub pcg_start: CudaFunction,
    pub pcg_restart_small: CudaFunction,
    pub pcg_true_residual_small: CudaFunction,
    pub sub_from: CudaFunction,
    pub mul_elementwise: CudaFunction,
    pub invert_positive: CudaFunction,
    pub log_diag_sum: CudaFunction,
    pub add_into: CudaFunction,
    pub gram_r1_partial: CudaFunction,
}

/// One GPU: its context, the stream every operation is queued on, cuBLAS,
/// and the kernels compiled for its architecture.
pub struct Gpu {
    pub(crate) stream: Arc<CudaStream>,
    pub(crate) blas: CudaBlas,
    pub(crate) solver: cudarc::cusolver::DnHandle,
    pub(crate) f: Functions,
    /// Models' kernel modules compiled so far, by name.
    modules: Mutex<HashMap<&'static str, Arc<LoadedKernels>>>,
    _blas_workspace: CudaSlice<u8>,
    name: String,
    compute_capability: (i32, i32),
    /// Dynamic shared memory a block may use once a kernel opts in.
    pub(crate) shared_optin: usize,
    /// Streaming multiprocessors.
    pub(crate) sm_count: usize,
    /// Shared memory of one multiprocessor, and what it reserves a block
    /// (bytes): how many blocks of a given dynamic size fit one.
    pub(crate) shared_per_sm: usize,
    pub(crate) shared_reserved: usize,
    syncs: AtomicUsize,
    graph_launches: AtomicUsize,
    /// Executables of dropped recordings, for the next to update.
    pub(crate) execs: super::recorded::ExecPool,
    /// Page-locked buffers for scalar reads the host waits for later.
    pub(crate) staging: super::staging::StagingPool,
}

impl Drop for Gpu {
    /// Spare executables go with the context: let queued copies into the
    /// staging buffers finish, then destroy them with the context current.
    fn drop(&mut self) {
        let _ = self.stream.synchronize();
        if self.bind().is_ok() {
            self.execs.clear();
        }
    }
}

// SAFETY: every field is used from one stream; cudarc's handles are
// thread-safe to move and share, and the module cache and the staging pool
// sit behind Mutexes.
unsafe impl Send for Gpu {}
unsafe impl Sync for Gpu {}

pub(crate) fn cuda_err(what: &str, e: impl std::fmt::Debug) -> Error {
    Error::Cuda(format!("{what}: {e:?}"))
}

/// Length of the pinned read-back buffer and of every scalar bank.
pub(crate) const PINNED_SLOTS: usize = 64;

/// The kernel sources, embedded at build time.
const SOURCES: [(&str, &str); 4] = [
    (
        "row_hessian.cu",
        concat!(
            include_str!("../../kernels/pdl.cuh"),
            include_str!("../../kernels/packed_index.cuh"),
            include_str!("../../kernels/row_hessian.cu")
        ),
    ),
    (
        "pcg.cu",
        concat!(
            include_str!("../../kernels/pdl.cuh"),
            include_str!("../../kernels/pcg.cu")
        ),
    ),
    ("dense.cu", include_str!("../../kernels/dense.cu")),
    ("gram.cu", include_str!("../../kernels/gram.cu")),
];

/// A model's kernels, registered with the runtime by the model's own code:
/// one CUDA C source, compiled with NVRTC for the device's architecture the
/// first time [`Gpu::kernels`] is asked for it (then cached per device),
/// the kernels it defines, and those that stage data through shared memory
/// (granted the device's opt-in limit). The runtime knows no model: a new
/// one declares its module and touches no runtime code.
pub struct KernelModule {
    /// A name unique among modules (the cache key and the error's file).
    pub name: &'static str,
    /// The CUDA C source.
    pub source: &'static str,
    /// The kernels to load from it.
    pub kernels: &'static [&'static str],
    /// Those of `kernels` that take the opt-in shared-memory limit.
    pub staging: &'static [&'static str],
}

/// A module's compiled kernels on one device.
pub struct LoadedKernels {
    module: &'static str,
    functions: HashMap<&'static str, CudaFunction>,
}

impl LoadedKernels {
    /// The kernel `name`; an error names the module when it was not declared.
    pub fn get(&self, name: &str) -> Result<&CudaFunction> {
        self.functions
            .get(name)
            .ok_or_else(|| Error::Cuda(format!("kernel {name} is not declared by module {}", self.module)))
    }
}

pub(super) fn check_libraries() -> Result<()> {
    // SAFETY: these only try to dlopen the library; no CUDA call is made.
    let present = unsafe {
        [
            ("CUDA driver (libcuda)", cudarc::driver::sys::is_culib_present()),
            ("NVRTC (libnvrtc)", cudarc::nvrtc::sys::is_culib_present()),
            ("cuBLAS (libcublas)", cudarc::cublas::sys::is_culib_present()),
            ("cuSOLVER (libcusolver)", cudarc::cusolver::sys::is_culib_present()),
        ]
    };
    match present.iter().find(|(_, ok)| !ok) {
        Some((name, _)) => Err(Error::Cuda(format!("{name} not found"))),
        None => Ok(()),
    }
}

impl Gpu {
    /// The process's GPU (device 0), started on first use. The error of a
    /// failed start is kept and returned to every later caller.
    pub fn get() -> Result<Arc<Gpu>> {
        Self::open(0)
    }

    /// Start device `ordinal` (see [`Gpu::open`], which caches it).
    pub(super) fn start(ordinal: usize) -> Result<Gpu> {
        let count = Self::count()?;
        if count < 1 {
            return Err(Error::Cuda("no CUDA device visible".into()));
        }
        if ordinal >= count {
            let rule = format!("must be below the {count} visible CUDA devices");
            return Err(Error::invalid("GPU ordinal", ordinal, rule));
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| cuda_err("creating a context", e))?;
        // One stream does the work, so cudarc's cross-stream events are not
        // needed; they would also break graph capture. (DeviceStage1's row
        // parts run on streams of their own, ordered against this one by
        // explicit joins.)
        // SAFETY: a buffer used on another stream is ordered by such joins.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(|e| cuda_err("creating a stream", e))?;
        keep_pool_memory(&ctx)?;
        let compute_capability = ctx
            .compute_capability()
            .map_err(|e| cuda_err("compute capability", e))?;
        let name = ctx.name().map_err(|e| cuda_err("device name", e))?;
        let f = compile(&ctx, compute_capability)?;
        let shared_optin = shared_optin(&ctx, &f)?;
        let sm_count = ctx
            .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(|e| cuda_err("multiprocessor count", e))?
            .max(1) as usize;
        let (shared_per_sm, shared_reserved) = shared_per_sm(&ctx)?;
        let blas = CudaBlas::new(stream.clone()).map_err(|e| cuda_err("creating cuBLAS", e))?;
        let solver = cudarc::cusolver::DnHandle::new(stream.clone()).map_err(|e| cuda_err("creating cuSOLVER", e))?;
        let workspace = stream
            .alloc_zeros::<u8>(4 << 20)
            .map_err(|e| cuda_err("cuBLAS workspace", e))?;
        set_blas_workspace(&blas, &stream, &workspace)?;
        Ok(Gpu {
            stream,
            blas,
            solver,
            f,
            modules: Mutex::new(HashMap::new()),
            _blas_workspace: workspace,
            name,
            compute_capability,
            shared_optin,
            sm_count,
            shared_per_sm,
            shared_reserved,
            syncs: AtomicUsize::new(0),
            graph_launches: AtomicUsize::new(0),
            execs: Default::default(),
            staging: Default::default(),
        })
    }

    /// A model's kernels on this device, compiled the first time they are
    /// asked for (NVRTC, for this architecture) and cached.
    pub fn kernels(&self, module: &'static KernelModule) -> Result<Arc<LoadedKernels>> {
        let mut cache = self
            .modules
            .lock()
            .map_err(|_| Error::Cuda("kernel module cache poisoned".into()))?;
        if let Some(k) = cache.get(module.name) {
            return Ok(k.clone());
        }
        let arch = arch_of(self.compute_capability);
        let loaded = compile_module(self.stream.context(), &arch, module.name, module.source)?;
        let optin = i32::try_from(self.shared_optin).unwrap_or(i32::MAX);
        let mut functions = HashMap::new();
        for &name in module.kernels {
            let k = loaded
                .load_function(name)
                .map_err(|e| cuda_err(&format!("kernel {name} of module {}", module.name), e))?;
            if module.staging.contains(&name) {
                grant_shared(optin, name, &k)?;
            }
            functions.insert(name, k);
        }
        let loaded = Arc::new(LoadedKernels {
            module: module.name,
            functions,
        });
        cache.insert(module.name, loaded.clone());
        Ok(loaded)
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A one-line description, e.g. `gpu: NVIDIA H200 (sm_90)`.
    pub fn describe(&self) -> String {
        format!(
            "gpu: {} (sm_{}{})",
            self.name, self.compute_capability.0, self.compute_capability.1
        )
    }

    /// Host synchronisations and device-to-host copies made so far.
    pub fn syncs(&self) -> usize {
        self.syncs.load(Ordering::Relaxed)
    }

    /// CUDA graph launches (replayed PCG blocks) so far.
    pub fn graph_launches(&self) -> usize {
        self.graph_launches.load(Ordering::Relaxed)
    }

    /// Recorded blocks whose executable was a spare one updated, and those
    /// instantiated anew, so far.
    pub fn graph_executables(&self) -> (usize, usize) {
        self.execs.counts()
    }

    pub(crate) fn count_graph_launch(&self) {
        self.graph_launches.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether kernels may be launched as programmatic dependents (sm_90+).
    pub(crate) fn dependent_launches(&self) -> bool {
        self.compute_capability.0 >= 9
    }

    /// Whether the FP64 tensor cores' `mma.m8n8k4` is available (sm_80+).
    pub(crate) fn f64_mma(&self) -> bool {
        self.compute_capability.0 >= 8
    }

    pub(crate) fn count_sync(&self) {
        self.syncs.fetch_add(1, Ordering::Relaxed);
    }

    /// Upload a host slice (queued on the stream).
    pub fn upload<T: cudarc::driver::DeviceRepr>(&self, x: &[T]) -> Result<CudaSlice<T>> {
        self.stream
            .clone_htod(x)
            .map_err(|e| self.alloc_error("upload", std::mem::size_of_val(x), e))
    }

    /// Download a device buffer (a counted synchronisation).
    pub fn download(&self, x: &CudaSlice<f64>) -> Result<Vec<f64>> {
        self.count_sync();
        self.stream.clone_dtoh(x).map_err(|e| cuda_err("download", e))
    }

    /// dst = src on the device (queued).
    pub fn copy(&self, src: &CudaSlice<f64>, dst: &mut CudaSlice<f64>) -> Result<()> {
        self.stream.memcpy_dtod(src, dst).map_err(|e| cuda_err("copy", e))
    }

    /// Wait for everything queued (a counted synchronisation).
    pub fn synchronize(&self) -> Result<()> {
        self.count_sync();
        self.stream.synchronize().map_err(|e| cuda_err("synchronize", e))
    }

    /// A device buffer whose values are not set (at least one value).
    ///
    /// # Safety
    /// The caller writes every value before anything reads it.
    pub(crate) unsafe fn unset<T: cudarc::driver::DeviceRepr>(&self, n: usize) -> Result<CudaSlice<T>> {
        // SAFETY: passed on to the caller.
        unsafe { self.stream.alloc(n.max(1)) }.map_err(|e| self.alloc_error("alloc", n * std::mem::size_of::<T>(), e))
    }

    /// A zeroed device buffer.
    pub fn zeros<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
        &self,
        n: usize,
    ) -> Result<CudaSlice<T>> {
        self.stream
            .alloc_zeros(n.max(1))
            .map_err(|e| self.alloc_error("alloc", n * std::mem::size_of::<T>(), e))
    }
}

/// Let the device's default memory pool keep what is freed: by default it
/// returns freed memory to the system at each synchronisation, so every
/// evaluation's outputs (624 MB of row Hessians at seed) were mapped afresh
/// (seed row evaluation on the H200: 10.61-10.69 -> 10.03-10.06 ms). The
/// process then holds its peak device memory, as caching allocators do. A
/// device without memory pools (where cudarc allocates synchronously) is
/// left as it is.
fn keep_pool_memory(ctx: &CudaContext) -> Result<()> {
    use cudarc::driver::sys;
    let pools = ctx
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)
        .map_err(|e| cuda_err("memory pools supported", e))?;
    if pools == 0 {
        return Ok(());
    }
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    let mut keep = u64::MAX;
    // SAFETY: the context's device and its default pool, an attribute whose
    // value is a u64.
    unsafe {
        ctx.bind_to_thread().map_err(|e| cuda_err("binding the context", e))?;
        sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device())
            .result()
            .map_err(|e| cuda_err("default memory pool", e))?;
        sys::cuMemPoolSetAttribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut keep as *mut u64).cast(),
        )
        .result()
        .map_err(|e| cuda_err("memory pool release threshold", e))?;
    }
    Ok(())
}

/// The device's opt-in shared-memory limit per block, granted to the kernels
/// that stage rows or cells through shared memory (the default limit is
/// 48 KiB): each may take that limit less its own static shared memory.
fn shared_optin(ctx: &CudaContext, f: &Functions) -> Result<usize> {
    use cudarc::driver::sys::CUdevice_attribute;
    let optin = ctx
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        .map_err(|e| cuda_err("shared-memory opt-in limit", e))?;
    grant_shared(optin, "hvp_staged", &f.hvp_staged)?;
    grant_shared(optin, "hvp_staged_f32", &f.hvp_staged_f32)?;
    grant_shared(optin, "hvp_staged_pair", &f.hvp_staged_pair)?;
    grant_shared(optin, "hvp_staged_f32_pair", &f.hvp_staged_f32_pair)?;
    grant_shared(optin, "gram_r1_partial", &f.gram_r1_partial)?;
    Ok(optin.max(0) as usize)
}

/// A multiprocessor's shared memory and the share it reserves a block.
fn shared_per_sm(ctx: &CudaContext) -> Result<(usize, usize)> {
    use cudarc::driver::sys::CUdevice_attribute as A;
    let get = |a, what| {
        ctx.attribute(a)
            .map(|v| v.max(0) as usize)
            .map_err(|e| cuda_err(what, e))
    };
    Ok((
        get(
            A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
            "shared memory a multiprocessor",
        )?,
        get(
            A::CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK,
            "shared memory reserved a block",
        )?,
    ))
}

/// Let kernel `k` take the opt-in shared-memory limit less its static share.
fn grant_shared(optin: i32, name: &str, k: &CudaFunction) -> Result<()> {
    use cudarc::driver::sys::CUfunction_attribute;
    let err = |e| cuda_err(&format!("{name} shared-memory opt-in"), e);
    let fixed = k
        .get_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
        .map_err(err)?;
    k.set_attribute(
        CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        (optin - fixed).max(0),
    )
    .map_err(err)
}

fn set_blas_workspace(blas: &CudaBlas, stream: &CudaStream, ws: &CudaSlice<u8>) -> Result<()> {
    use cudarc::driver::DevicePtr;
    let (ptr, _guard) = ws.device_ptr(stream);
    // SAFETY: the workspace lives as long as the Gpu that owns the handle.
    let status =
        unsafe { cudarc::cublas::sys::cublasSetWorkspace_v2(*blas.handle(), ptr as *mut std::ffi::c_void, ws.len()) };
    match status {
        cudarc::cublas::sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS => Ok(()),
        s => Err(cuda_err("cublasSetWorkspace", s)),
    }
}

/// NVRTC's failure with its parts kept as fields.
fn compile_error(file: &str, arch: &str, e: cudarc::nvrtc::CompileError) -> Error {
    use cudarc::nvrtc::CompileError as C;
    let (code, options, log) = match e {
        C::CompileError { nvrtc, options, log } => (format!("{nvrtc:?}"), options, log.to_string_lossy().into_owned()),
        C::CreationError(n) => (format!("creating the program: {n:?}"), Vec::new(), String::new()),
        C::GetLogError(n) => (format!("reading the log: {n:?}"), Vec::new(), String::new()),
        C::GetPtxError(n) => (format!("reading the PTX: {n:?}"), Vec::new(), String::new()),
        C::DestroyError(n) => (format!("destroying the program: {n:?}"), Vec::new(), String::new()),
    };
    Error::Compile {
        file: file.into(),
        arch: arch.into(),
        code,
        options,
        log,
    }
}

/// The architecture NVRTC compiles for, e.g. `sm_90`.
fn arch_of((major, minor): (i32, i32)) -> String {
    format!("sm_{major}{minor}")
}

/// `MATFREE_NVRTC_OPTIONS`: further NVRTC options, split at whitespace, for
/// tuning experiments (`-DCAL_BLOCKS=8` changes bms_calibrate's launch
/// bounds); a bad option fails the compile with the options named.
fn extra_nvrtc_options() -> Vec<String> {
    std::env::var("MATFREE_NVRTC_OPTIONS")
        .map(|v| v.split_whitespace().map(String::from).collect())
        .unwrap_or_default()
}

/// One source compiled with NVRTC for `arch` and loaded into `ctx`.
fn compile_module(ctx: &Arc<CudaContext>, arch: &str, file: &str, src: &str) -> Result<Arc<CudaModule>> {
    // NVRTC keeps the option's string; a leaked copy per compile (a handful
    // per process) lives as long.
    let arch_static: &'static str = Box::leak(arch.to_string().into_boxed_str());
    let opts = cudarc::nvrtc::CompileOptions {
        arch: Some(arch_static),
        options: extra_nvrtc_options(),
        ..Default::default()
    };
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(src, opts).map_err(|e| compile_error(file, arch, e))?;
    ctx.load_module(ptx)
        .map_err(|e| cuda_err(&format!("loading kernels/{file}"), e))
}

fn compile(ctx: &Arc<CudaContext>, compute_capability: (i32, i32)) -> Result<Functions> {
    let arch = arch_of(compute_capability);
    let arch = arch.as_str();
    let mut modules = Vec::new();
    for (file, src) in SOURCES {
        modules.push(compile_module(ctx, arch, file, src)?);
    }
    let get = |m: usize, name: &str| {
        modules[m]
            .load_function(name)
            .map_err(|e| cuda_err(&format!("kernel {name}"), e))
    };
    Ok(Functions {
        row_action: get(0, "row_action")?,
        hvp_fused: get(0, "hvp_fused")?,
        hvp_staged: get(0, "hvp_staged")?,
        hvp_staged_f32: get(0, "hvp_staged_f32")?,
        hvp_staged_pair: get(0, "hvp_staged_pair")?,
        hvp_staged_f32_pair: get(0, "hvp_staged_f32_pair")?,
        pullback_partial: get(0, "pullback_partial")?,
        dense_partial: get(0, "dense_partial")?,
        dense_staged_partial: get(0, "dense_staged_partial")?,
        pack_upper_rows: get(0, "pack_upper_rows")?,
        pack_upper_rows_f32: get(0, "pack_upper_rows_f32")?,
        reduce_partials: get(0, "reduce_partials")?,
        mirror_upper: get(0, "mirror_upper")?,
        chunk_sum_partial: get(0, "chunk_sum_partial")?,
        pcg_alpha: get(1, "pcg_alpha")?,
        pcg_beta: get(1, "pcg_beta")?,
        pcg_step_small: get(1, "pcg_step_small")?,
        xpay: get(1, "xpay")?,
        axpy: get(1, "axpy")?,
        pcg_start: get(1, "pcg_start")?,
        pcg_restart_small: get(1, "pcg_restart_small")?,
        pcg_true_residual_small: get(1, "pcg_true_residual_small")?,
        sub_from: get(1, "sub_from")?,
        mul_elementwise: get(1, "mul_elementwise")?,
        invert_positive: get(1, "invert_positive")?,
        log_diag_sum: get(2, "log_diag_sum")?,
        add_into: get(2, "add_into")?,
        gram_r1_partial: get(3, "gram_r1_partial")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_nvrtc_failure_keeps_its_code_options_and_log() {
        use cudarc::nvrtc::{result::NvrtcError, sys::nvrtcResult, CompileError};
        let e = CompileError::CompileError {
            nvrtc: NvrtcError(nvrtcResult::NVRTC_ERROR_COMPILATION),
            options: vec!["--gpu-architecture=sm_90".into()],
            log: std::ffi::CString::new("kernels/x.cu(3): error: identifier \"y\" is undefined").unwrap(),
        };
        match compile_error("x.cu", "sm_90", e) {
            Error::Compile {
                file,
                arch,
                code,
                options,
                log,
            } => {
                assert_eq!((file.as_str(), arch.as_str()), ("x.cu", "sm_90"));
                assert!(code.contains("COMPILATION"), "{code}");
                assert_eq!(options, ["--gpu-architecture=sm_90"]);
                assert!(log.contains("undefined"), "{log}");
            }
            other => panic!("expected Error::Compile, got {other}"),
        }
    }
}
