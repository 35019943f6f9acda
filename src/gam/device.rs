//! The GLM's rows on one GPU ([`DeviceGlmRows`], a
//! [`DeviceRowEvaluator`]): the response, trials, prior weights and
//! offsets uploaded once beside the design; an evaluation uploads only beta
//! and makes one pass over the design (`kernels/glm.cu`: rows staged
//! through shared memory, eta = x_i . beta + offset, each row's value,
//! gradient and Hessian in eta by `kernels/glm_family.cuh`'s formulas,
//! which are the CPU's, and the joint gradient and value summed in the same
//! pass in a fixed order), so the floor of an evaluation is one read of X.
//! The value alone (line searches) is the same pass without the
//! outputs; REML's traces tr(A dH_k) = sum_i t_i (x_i . d_k) (x_i^T A x_i)
//! take a pass for the t_i (x_i . d_k), then the leverages from Z = X K
//! (K the Cholesky factor of A, cuBLAS by tiles of rows) and a fixed-order
//! reduction: only p x p and p x m values cross to the device. The scale
//! of a [`ScaledRows`](super::ScaledRows) objective is read from its
//! [`ScaleCell`] at every launch, so one upload serves every phi.
//!
//! The model registers its kernels ([`GLM_KERNELS`]); `src/cuda/` names no
//! model.

use std::rc::Rc;
use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaView, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg};
use matfree_solvers::operator::expect_len;

use super::{Distribution, GamModel, GlmRows, Link, ScaleCell};
use crate::cuda::{
    cuda_err, reduce_partials, shard_rows, DeviceDesigns, DeviceRowEvaluation, DeviceRowEvaluator, DeviceRowHessian,
    DeviceRowObjective, Gpu, GpuGroup, KernelModule, PendingRows, ShardedRowObjective,
};
use crate::{Designs, Error, Layout, Result};

/// The GLM's kernels, registered with the runtime by the model.
pub static GLM_KERNELS: KernelModule = KernelModule {
    name: "glm_family.cuh + glm.cu",
    source: concat!(
        include_str!("../../kernels/glm_family.cuh"),
        "\n",
        include_str!("../../kernels/glm.cu")
    ),
    kernels: &["glm_rows", "glm_leverage_partial"],
    staging: &["glm_rows"],
};

/// Threads a block of `glm_rows` (a staged row a thread).
const THREADS: usize = 256;
/// Most rows `glm_rows` stages at a time (at most THREADS, a multiple of 4).
const STAGE: usize = 128;
/// Most blocks of `glm_rows`; each takes at least MIN_BLOCK_ROWS rows. Both
/// depend only on n, so the sums do not depend on the device.
const MAX_BLOCKS: usize = 2048;
const MIN_BLOCK_ROWS: usize = 256;
/// Rows a block of `glm_leverage_partial` sums (a multiple of 4).
const LEVERAGE_ROWS: usize = 1024;
/// The bytes of the tile of Z = X K the traces form at a time.
const TILE_BYTES: usize = 256 << 20;

/// What a pass of `glm_rows` computes (MODE_* in kernels/glm.cu).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Each row's value, gradient and Hessian; sums [gradient, value, rejected].
    Rows = 0,
    /// Sums [value, rejected].
    Value = 1,
    /// u[i, k] = t_i (x_i . d_k) / phi; sums [0, non-finite].
    Third = 2,
}

/// How `glm_rows` cuts and stages the rows.
#[derive(Clone, Copy, Debug)]
struct Plan {
    /// The staged row's length (p made odd: lanes of a warp reading their
    /// own rows then fall on distinct banks).
    stride: usize,
    /// Rows staged at a time (a multiple of 4).
    stage: usize,
    /// Rows a block takes (a multiple of 4; depends on n alone).
    rows_per_block: usize,
    blocks: usize,
}

impl Plan {
    /// The plan for n rows of p columns within `shared` bytes a block.
    fn new(n: usize, p: usize, shared: usize) -> Result<Self> {
        let stride = p | 1;
        let bytes = |stage: usize| Plan::bytes(p, stride, stage);
        let stage = (4..=STAGE).step_by(4).filter(|&s| bytes(s) <= shared).max();
        let Some(stage) = stage else {
            let rule = format!("four staged rows must fit the device's {shared} bytes of shared memory");
            return Err(Error::invalid("design width p", p, rule));
        };
        let rows_per_block = n.div_ceil(MAX_BLOCKS).max(MIN_BLOCK_ROWS).next_multiple_of(4);
        Ok(Self {
            stride,
            stage,
            rows_per_block,
            blocks: n.div_ceil(rows_per_block).max(1),
        })
    }

    fn shared_bytes(&self, p: usize) -> usize {
        Plan::bytes(p, self.stride, self.stage)
    }

    /// glm_rows' shared memory: the staged rows, beta, three values a
    /// staged row, the sums' parts (at most max(THREADS, p + 2)) and each
    /// residue's first rejected row (at most THREADS).
    fn bytes(p: usize, stride: usize, stage: usize) -> usize {
        (stage * stride + p + 3 * stage + THREADS.max(p + 2) + THREADS) * 8
    }
}

/// Check a stage asked for: a multiple of 4 in 4..=256 whose rows fit
/// `shared` bytes.
fn check_stage(plan: &Plan, p: usize, stage: usize, shared: usize) -> Result<()> {
    let fits = Plan { stage, ..*plan }.shared_bytes(p) <= shared;
    if !(4..=256).contains(&stage) || !stage.is_multiple_of(4) || !fits {
        let rule = format!("must be a multiple of 4 in 4..=256 whose rows fit the device's {shared} bytes");
        return Err(Error::invalid("stage", stage, rule));
    }
    Ok(())
}

/// The family's and the link's codes in kernels/glm_family.cuh.
fn codes(rows: &GlmRows) -> (i32, i32) {
    let family = match rows.family().distribution() {
        Distribution::Binomial => 0,
        Distribution::Poisson => 1,
        Distribution::Gaussian => 2,
        Distribution::Gamma => 3,
    };
    let link = match rows.family().link() {
        Link::Logit => 0,
        Link::Probit => 1,
        Link::Cloglog => 2,
        Link::Log => 3,
        Link::Identity => 4,
        Link::Inverse => 5,
    };
    (family, link)
}

/// The columns a row reads beside its design row; those at their default
/// (trials 1, weights 1, offset 0) are not uploaded.
struct Columns {
    y: CudaSlice<f64>,
    trials: Option<CudaSlice<f64>>,
    weights: Option<CudaSlice<f64>>,
    offset: Option<CudaSlice<f64>>,
    /// One value, passed for an absent column or an unused output.
    none: CudaSlice<f64>,
}

impl Columns {
    fn upload(gpu: &Gpu, rows: &GlmRows) -> Result<Self> {
        let unless = |x: &[f64], default: f64| -> Result<Option<CudaSlice<f64>>> {
            match x.iter().all(|v| *v == default) {
                true => Ok(None),
                false => gpu.upload(x).map(Some),
            }
        };
        Ok(Self {
            y: gpu.upload(rows.y())?,
            trials: unless(rows.trials(), 1.0)?,
            weights: unless(rows.weights(), 1.0)?,
            offset: unless(rows.offset(), 0.0)?,
            none: gpu.zeros(1)?,
        })
    }

    /// The bits of GIVEN_* in kernels/glm.cu.
    fn given(&self) -> i32 {
        [&self.trials, &self.weights, &self.offset]
            .iter()
            .enumerate()
            .map(|(k, c)| (c.is_some() as i32) << k)
            .sum()
    }

    /// Bytes a pass reads of them.
    fn bytes(&self) -> usize {
        let n = self.y.len();
        let given = [&self.trials, &self.weights, &self.offset]
            .iter()
            .filter(|c| c.is_some())
            .count();
        (1 + given) * n * 8
    }
}

/// A pass's outputs: the reduced sums, each block's first rejected row, and
/// the per-row arrays the mode writes.
struct Pass {
    sums: CudaSlice<f64>,
    first_bad: CudaSlice<i64>,
    rows: Option<[CudaSlice<f64>; 3]>,
    third: Option<CudaSlice<f64>>,
}

/// A GLM's rows ([`GlmRows`], divided by a scale where one is given) over
/// its design on one GPU.
pub struct DeviceGlmRows {
    rows: GlmRows,
    layout: Layout,
    designs: Arc<DeviceDesigns>,
    columns: Columns,
    scale: Option<Arc<ScaleCell>>,
    plan: Plan,
}

impl DeviceGlmRows {
    /// Upload `rows` and their design (one design, n x p: `Layout::glm(p)`)
    /// to `gpu`.
    pub fn new(gpu: Arc<Gpu>, rows: &GlmRows, designs: &Designs) -> Result<Self> {
        Self::with_designs(DeviceDesigns::upload(gpu, designs)?, rows)
    }

    /// `rows` over a design already on the device (one design, n x p).
    pub fn with_designs(designs: Arc<DeviceDesigns>, rows: &GlmRows) -> Result<Self> {
        let [p] = designs.widths() else {
            let rule = "a GLM's rows have one design (Layout::glm)";
            return Err(Error::invalid(
                "designs",
                format!("{} designs", designs.widths().len()),
                rule,
            ));
        };
        if designs.n() != rows.n() {
            let rule = format!("must equal the design's {} rows", designs.n());
            return Err(Error::invalid("rows.n()", rows.n(), rule));
        }
        let gpu = designs.gpu().clone();
        gpu.kernels(&GLM_KERNELS)?;
        let plan = Plan::new(rows.n(), *p, gpu.shared_optin)?;
        Ok(Self {
            layout: Layout::glm(*p)?,
            columns: Columns::upload(&gpu, rows)?,
            rows: rows.clone(),
            designs,
            scale: None,
            plan,
        })
    }

    /// The rows divided by the scale in `scale`, read at every launch (as
    /// [`ScaledRows`](super::ScaledRows) divides them).
    pub fn with_scale(mut self, scale: Arc<ScaleCell>) -> Self {
        self.scale = Some(scale);
        self
    }

    /// The same rows staged `stage` at a time (default: the most, up to
    /// 128, that fit the device's shared memory): the sums are the same
    /// bits for every stage, so this only tunes the speed.
    pub fn with_stage(mut self, stage: usize) -> Result<Self> {
        check_stage(&self.plan, self.layout.p_total(), stage, self.gpu().shared_optin)?;
        self.plan.stage = stage;
        Ok(self)
    }

    /// Rows staged at a time.
    pub fn stage(&self) -> usize {
        self.plan.stage
    }

    /// The rows on the host.
    pub fn rows(&self) -> &GlmRows {
        &self.rows
    }

    /// Bytes one evaluation reads at least: the design and the row columns
    /// uploaded (see [`Columns`]); the outputs (3 n values) come on top.
    pub fn bytes_per_pass(&self) -> usize {
        self.designs.n() * self.layout.p_total() * 8 + self.columns.bytes()
    }

    fn gpu(&self) -> &Arc<Gpu> {
        self.designs.gpu()
    }

    fn inv_phi(&self) -> f64 {
        self.scale.as_ref().map_or(1.0, |s| 1.0 / s.get())
    }

    /// One pass of `glm_rows` at beta (with the directions, for THIRD).
    fn pass(&self, mode: Mode, beta: &[f64], directions: &[&[f64]]) -> Result<Pass> {
        let (n, p) = (self.designs.n(), self.layout.p_total());
        expect_len("beta", beta.len(), p)?;
        for d in directions {
            expect_len("direction", d.len(), p)?;
        }
        let gpu = self.gpu();
        let m = directions.len();
        let cols = if mode == Mode::Rows { p + 2 } else { 2 };
        let beta = gpu.upload(beta)?;
        let dirs = match m {
            0 => None,
            _ => Some(gpu.upload(&directions.concat())?),
        };
        // SAFETY: glm_rows writes every value of the outputs its mode has
        // (each row's, and each block's sums and first rejected row).
        let (mut partial, mut first_bad, rows, third) = unsafe {
            let rows = match mode {
                Mode::Rows => Some([gpu.unset(n)?, gpu.unset(n)?, gpu.unset(n)?]),
                _ => None,
            };
            let third = match mode {
                Mode::Third => Some(gpu.unset(n * m)?),
                _ => None,
            };
            (
                gpu.unset::<f64>(self.plan.blocks * cols)?,
                gpu.unset::<i64>(self.plan.blocks)?,
                rows,
                third,
            )
        };
        self.launch_rows(
            mode,
            &beta,
            dirs.as_ref(),
            m,
            rows.as_ref(),
            third.as_ref(),
            &mut partial,
            &mut first_bad,
        )?;
        let mut sums = gpu.zeros::<f64>(cols)?;
        reduce_partials(gpu, self.plan.blocks, cols, &partial, &mut sums)?;
        Ok(Pass {
            sums,
            first_bad,
            rows,
            third,
        })
    }

    /// Queue `glm_rows` (the outputs each at least as long as the mode writes).
    #[allow(clippy::too_many_arguments)]
    fn launch_rows(
        &self,
        mode: Mode,
        beta: &CudaSlice<f64>,
        dirs: Option<&CudaSlice<f64>>,
        m: usize,
        rows: Option<&[CudaSlice<f64>; 3]>,
        third: Option<&CudaSlice<f64>>,
        partial: &mut CudaSlice<f64>,
        first_bad: &mut CudaSlice<i64>,
    ) -> Result<()> {
        let (n, p) = (self.designs.n(), self.layout.p_total());
        let gpu = self.gpu();
        let c = &self.columns;
        let plan = &self.plan;
        let (family, link) = codes(&self.rows);
        let x = self.designs.rows(0, &(0..n));
        let none = &c.none;
        let opt = |v| given_or(v, none);
        let [neglog, grad, hess] = match rows {
            Some([a, b, c]) => [a, b, c],
            None => [none; 3],
        };
        let (n64, p32, stride, stage) = (n as i64, p as i32, plan.stride as i32, plan.stage as i32);
        let (rpb, mode32, m32, given) = (plan.rows_per_block as i64, mode as i32, m as i32, c.given());
        let inv_phi = self.inv_phi();
        let kernels = gpu.kernels(&GLM_KERNELS)?;
        let mut b = gpu.stream.launch_builder(kernels.get("glm_rows")?);
        b.arg(&n64).arg(&p32).arg(&stride).arg(&stage).arg(&rpb).arg(&mode32);
        b.arg(&family).arg(&link).arg(&inv_phi).arg(&x).arg(beta).arg(&c.y);
        b.arg(opt(&c.trials))
            .arg(opt(&c.weights))
            .arg(opt(&c.offset))
            .arg(&given);
        b.arg(dirs.unwrap_or(none)).arg(&m32).arg(neglog).arg(grad).arg(hess);
        b.arg(third.unwrap_or(none)).arg(partial).arg(first_bad);
        let cfg = LaunchConfig {
            grid_dim: (plan.blocks as u32, 1, 1),
            block_dim: (THREADS as u32, 1, 1),
            shared_mem_bytes: plan.shared_bytes(p) as u32,
        };
        // SAFETY: x is the n x p design, beta p values, the row columns n
        // each (or absent, flagged in `given`, and then not read); the
        // outputs of the mode are n (ROWS), n m (THIRD, with dirs m p), and
        // blocks x cols sums and blocks first rows, as `pass` allocates;
        // the shared memory is the plan's, within the opt-in limit the
        // kernel was granted; n < 2^31 blocks of rows.
        unsafe { b.launch(cfg) }.map_err(|e| cuda_err("glm_rows", e))?;
        Ok(())
    }

    /// The reduced sums on the host, and the first rejected row when the
    /// last sum (the count of rejected rows) is not 0 (one more download).
    fn read_sums(gpu: &Gpu, sums: &CudaSlice<f64>, first_bad: &CudaSlice<i64>) -> Result<(Vec<f64>, Option<usize>)> {
        let host = gpu.download(sums)?;
        if host.last().is_some_and(|bad| *bad == 0.0) {
            return Ok((host, None));
        }
        gpu.count_sync();
        let firsts = gpu
            .stream
            .clone_dtoh(first_bad)
            .map_err(|e| cuda_err("first rejected rows", e))?;
        let row = firsts.into_iter().filter(|r| *r >= 0).min().unwrap_or(0);
        Ok((host, Some(row as usize)))
    }

    /// The Hessian's derivatives' weights u[i, k] = t_i (x_i . d_k) / phi at
    /// beta (n x m, row-major), all finite.
    fn third_weights(&self, beta: &[f64], directions: &[&[f64]]) -> Result<CudaSlice<f64>> {
        let pass = self.pass(Mode::Third, beta, directions)?;
        let (sums, bad) = Self::read_sums(self.gpu(), &pass.sums, &pass.first_bad)?;
        if bad.is_some() {
            let rule = "must be finite at a point inside the domain";
            return Err(Error::invalid(
                "row_hessian_derivative",
                format!("{} non-finite rows", sums[1]),
                rule,
            ));
        }
        pass.third
            .ok_or_else(|| Error::Cuda("glm_rows: a THIRD pass without its weights".into()))
    }

    /// sum_i ||z_i||^2 u[i, k] for each k, z_i = K^T x_i: tiles of Z = X K
    /// by cuBLAS, then `glm_leverage_partial` and a fixed-order reduction.
    fn leverage_sums(&self, u: &CudaSlice<f64>, m: usize, factor: &[f64]) -> Result<Vec<f64>> {
        let (n, p) = (self.designs.n(), self.layout.p_total());
        let gpu = self.gpu();
        let k = gpu.upload(factor)?;
        let tile = (TILE_BYTES / (p * 8) / LEVERAGE_ROWS).max(1) * LEVERAGE_ROWS;
        let tile = tile.min(n.next_multiple_of(LEVERAGE_ROWS));
        let blocks = n.div_ceil(LEVERAGE_ROWS);
        let ones = gpu.upload(&[1.0, 0.0])?;
        // SAFETY: each tile's rows of z are written by the gemm before the
        // kernel reads them; every partial is written by its block.
        let (mut z, mut partial) = unsafe { (gpu.unset::<f64>(tile * p)?, gpu.unset::<f64>(blocks * m)?) };
        let kernels = gpu.kernels(&GLM_KERNELS)?;
        for t0 in (0..n).step_by(tile) {
            let rows = tile.min(n - t0);
            gemm_times_factor(gpu, &self.designs.rows(0, &(t0..t0 + rows)), &k, &ones, rows, p, &mut z)?;
            let first = t0 / LEVERAGE_ROWS;
            let count = rows.div_ceil(LEVERAGE_ROWS);
            let (rows64, p32, m32, per) = (rows as i64, p as i32, m as i32, LEVERAGE_ROWS as i64);
            let uv = u.slice(t0 * m..(t0 + rows) * m);
            let mut part = partial.slice_mut(first * m..(first + count) * m);
            let mut b = gpu.stream.launch_builder(kernels.get("glm_leverage_partial")?);
            b.arg(&rows64)
                .arg(&p32)
                .arg(&m32)
                .arg(&per)
                .arg(&z)
                .arg(&uv)
                .arg(&mut part);
            let cfg = LaunchConfig {
                grid_dim: (count as u32, 1, 1),
                block_dim: (THREADS as u32, 1, 1),
                shared_mem_bytes: (4 * m * 8) as u32,
            };
            // SAFETY: z holds the tile's rows x p values, u its rows x m,
            // part its count blocks x m; 4 m doubles of shared memory (m is
            // REML's smoothing parameters: far below the default limit).
            unsafe { b.launch(cfg) }.map_err(|e| cuda_err("glm_leverage_partial", e))?;
        }
        let mut out = gpu.zeros::<f64>(m)?;
        reduce_partials(gpu, blocks, m, &partial, &mut out)?;
        gpu.download(&out)
    }
}

/// A given column, or the placeholder for an absent one.
fn given_or<'a>(column: &'a Option<CudaSlice<f64>>, none: &'a CudaSlice<f64>) -> &'a CudaSlice<f64> {
    column.as_ref().unwrap_or(none)
}

/// Z[..rows p] = X K (row-major rows x p) for a tile X of the design and the
/// lower factor K (row-major p x p), by cuBLAS in device pointer mode
/// (`ab` = [1, 0] on the device): column-major, Z^T = K^T X^T, where the
/// row-major K read column-major is K^T and the row-major X is X^T.
fn gemm_times_factor(
    gpu: &Gpu,
    x: &CudaView<f64>,
    k: &CudaSlice<f64>,
    ab: &CudaSlice<f64>,
    rows: usize,
    p: usize,
    z: &mut CudaSlice<f64>,
) -> Result<()> {
    use cudarc::cublas::sys as blas;
    if rows * p > z.len() || x.len() != rows * p || k.len() != p * p || rows > i32::MAX as usize {
        return Err(Error::invalid(
            "gemm rows",
            rows,
            "the tile must fit z and match x (and rows < 2^31)",
        ));
    }
    gpu.bind()?;
    let st = &gpu.stream;
    let (xp, _x) = x.device_ptr(st);
    let (kp, _k) = k.device_ptr(st);
    let (abp, _ab) = ab.device_ptr(st);
    let (zp, _z) = z.device_ptr_mut(st);
    let handle = *gpu.blas.handle();
    let (p32, rows32) = (p as i32, rows as i32);
    let ok = |what: &str, s: blas::cublasStatus_t| match s {
        blas::cublasStatus_t::CUBLAS_STATUS_SUCCESS => Ok(()),
        other => Err(cuda_err(what, other)),
    };
    // SAFETY: the handle is the GPU's; x holds rows p values, k p^2, z at
    // least rows p (checked above); alpha and beta are ab's two values on
    // the device, read in device pointer mode (the mode the CUDA backend
    // keeps the handle in).
    unsafe {
        ok(
            "cuBLAS pointer mode",
            blas::cublasSetPointerMode_v2(handle, blas::cublasPointerMode_t::CUBLAS_POINTER_MODE_DEVICE),
        )?;
        ok(
            "cuBLAS gemm (X K)",
            blas::cublasDgemm_v2(
                handle,
                blas::cublasOperation_t::CUBLAS_OP_N,
                blas::cublasOperation_t::CUBLAS_OP_N,
                p32,
                rows32,
                p32,
                abp as *const f64,
                kp as *const f64,
                p32,
                xp as *const f64,
                p32,
                (abp + 8) as *const f64,
                zp as *mut f64,
                p32,
            ),
        )
    }
}

impl DeviceRowEvaluator for DeviceGlmRows {
    fn layout(&self) -> &Layout {
        &self.layout
    }

    fn designs(&self) -> &Arc<DeviceDesigns> {
        &self.designs
    }

    fn launch(&self, beta: &[f64]) -> Result<PendingRows> {
        let pass = self.pass(Mode::Rows, beta, &[])?;
        let gpu = self.gpu().clone();
        let Some([neglog, grad, hess]) = pass.rows else {
            return Err(Error::Cuda("glm_rows: a ROWS pass without its rows".into()));
        };
        let hessian = DeviceRowHessian::from_device(self.layout.clone(), self.designs.clone(), hess)?;
        let mut sums = gpu.zeros::<f64>(pass.sums.len())?;
        gpu.copy(&pass.sums, &mut sums)?;
        let rows = DeviceRowEvaluation {
            neglog,
            grad,
            hessian,
            joint: Some(pass.sums),
        };
        let first_bad = pass.first_bad;
        Ok(PendingRows::new(rows, move || {
            match Self::read_sums(&gpu, &sums, &first_bad)?.1 {
                None => Ok(()),
                Some(row) => Err(Error::RowRejected {
                    row,
                    reason: "a non-finite value, gradient or Hessian entry (outside the model's domain)".into(),
                }),
            }
        }))
    }

    fn cheap_value(&self) -> bool {
        true
    }

    /// One pass without the outputs; `None` where a row is outside the domain.
    fn value(&self, beta: &[f64]) -> Result<Option<f64>> {
        let pass = self.pass(Mode::Value, beta, &[])?;
        let sums = self.gpu().download(&pass.sums)?;
        Ok((sums[1] == 0.0 && sums[0].is_finite()).then_some(sums[0]))
    }

    fn convex(&self) -> bool {
        self.rows.family().is_convex()
    }

    fn exact_hessian_derivative(&self) -> bool {
        true
    }

    /// X^T diag(t_i (x_i . d) / phi) X, summed by the row Hessian's dense
    /// path (on the tensor cores where the device has them).
    fn hessian_derivative(&self, beta: &[f64], direction: &[f64]) -> Result<Vec<f64>> {
        let u = self.third_weights(beta, &[direction])?;
        DeviceRowHessian::from_device(self.layout.clone(), self.designs.clone(), u)?.dense_host()
    }

    fn has_hessian_derivative_traces(&self) -> bool {
        true
    }

    fn hessian_derivative_traces(&self, beta: &[f64], factor: &[f64], directions: &[&[f64]]) -> Result<Vec<f64>> {
        let p = self.layout.p_total();
        expect_len("factor", factor.len(), p * p)?;
        if directions.is_empty() {
            return Ok(Vec::new());
        }
        let u = self.third_weights(beta, directions)?;
        self.leverage_sums(&u, directions.len(), factor)
    }
}

impl GamModel {
    /// The objective with its rows on `gpu` ([`DeviceGlmRows`]: the data
    /// and the model matrix uploaded once, every evaluation on the device),
    /// divided by the model's scale as [`GamModel::objective`]'s rows are:
    /// give it to [`GamModel::fit_on`] with a `CudaBackend` on the same GPU.
    pub fn device_objective(&self, gpu: Arc<Gpu>) -> Result<DeviceRowObjective<DeviceGlmRows>> {
        let rows = DeviceGlmRows::new(gpu, self.rows(), self.designs())?.with_scale(self.scale_cell().clone());
        DeviceRowObjective::new(rows, self.designs())
    }

    /// The objective with its rows split over the group's devices in
    /// contiguous shards ([`shard_rows`]), each shard's data and model
    /// matrix uploaded once to its device and divided by the model's
    /// scale: give it to [`GamModel::fit_on`] with a `MultiGpuBackend` on
    /// the same group.
    pub fn sharded_objective(&self, group: Rc<GpuGroup>) -> Result<ShardedRowObjective<DeviceGlmRows>> {
        let shards = shard_rows(self.rows().n(), group.len())?
            .into_iter()
            .zip(group.gpus())
            .map(|(range, gpu)| {
                let designs = self.designs().rows(range.clone())?;
                let rows = DeviceGlmRows::new(gpu.clone(), &self.rows().rows(range)?, &designs)?;
                Ok(rows.with_scale(self.scale_cell().clone()))
            })
            .collect::<Result<Vec<_>>>()?;
        ShardedRowObjective::new(group, shards, self.designs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plan: stages of whole groups of 4 rows within the shared memory,
    /// blocks of rows that depend on n alone, a staged row of odd length.
    #[test]
    fn the_plan_stages_rows_within_the_shared_memory() {
        let plan = Plan::new(10_000_000, 46, 227 << 10).unwrap();
        assert_eq!((plan.stride, plan.stage), (47, 128));
        assert_eq!(plan.rows_per_block, 4884);
        assert_eq!(plan.blocks, 2048);
        assert!(plan.shared_bytes(46) <= 227 << 10);
        let small = Plan::new(10_000_000, 46, 48 << 10).unwrap();
        assert_eq!(small.rows_per_block, plan.rows_per_block);
        assert!(small.stage < 128 && small.stage.is_multiple_of(4) && small.shared_bytes(46) <= 48 << 10);
        let few = Plan::new(10, 3, 48 << 10).unwrap();
        assert_eq!((few.rows_per_block, few.blocks), (256, 1));
        let wide = Plan::new(1000, 20_000, 227 << 10);
        assert!(wide.unwrap_err().to_string().contains("design width p"));
        assert!(check_stage(&plan, 46, 64, 48 << 10).is_ok());
        for stage in [0, 6, 260] {
            assert!(check_stage(&plan, 46, stage, 227 << 10).is_err(), "stage {stage}");
        }
        assert!(
            check_stage(&plan, 46, 128, 48 << 10).is_err(),
            "128 rows do not fit 48 KiB"
        );
    }
}
