//! One safe wrapper per CUDA kernel: lengths are checked here, so the only
//! `unsafe { launch }` blocks of the crate sit behind these functions.

use std::ffi::c_void;

use cudarc::driver::{result, sys, CudaFunction, CudaSlice, CudaView, DevicePtr, LaunchConfig, PushKernelArg};

use super::row_hessian::packed_len;
use super::runtime::{cuda_err, Gpu};
use crate::{Error, Result};

/// Queue `f` as a programmatic dependent of the kernel before it on the
/// stream (sm_90 and later): it may be scheduled while that kernel
/// finishes, which hides its launch in the chain of small kernels a PCG
/// iteration is; it must call `after_previous()` (kernels/pdl.cuh) before
/// it touches global memory. Before sm_90, an ordinary launch.
///
/// # Safety
/// `params` are the kernel's parameters, in order and of its types, and
/// the launch must fit the kernel (the caller's checks).
pub(crate) unsafe fn launch_dependent(
    g: &Gpu,
    f: &CudaFunction,
    cfg: LaunchConfig,
    mut params: Params,
    what: &str,
) -> Result<()> {
    let args = &mut params.pointers()[..];
    g.bind()?;
    let stream = g.stream.cu_stream();
    let (grid, block, smem) = (cfg.grid_dim, cfg.block_dim, cfg.shared_mem_bytes);
    if !g.dependent_launches() {
        return result::launch_kernel(f.cu_function(), grid, block, smem, stream, args).map_err(|e| cuda_err(what, e));
    }
    let mut attr: sys::CUlaunchAttribute = std::mem::zeroed();
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    let config = sys::CUlaunchConfig {
        gridDimX: grid.0,
        gridDimY: grid.1,
        gridDimZ: grid.2,
        blockDimX: block.0,
        blockDimY: block.1,
        blockDimZ: block.2,
        sharedMemBytes: smem,
        hStream: stream,
        attrs: &mut attr,
        numAttrs: 1,
    };
    sys::cuLaunchKernelEx(&config, f.cu_function(), args.as_mut_ptr(), std::ptr::null_mut())
        .result()
        .map_err(|e| cuda_err(what, e))
}

/// The parameters of a [`launch_dependent`] kernel, each in an 8-byte cell
/// of its own (the driver reads a parameter's size from its cell's start:
/// an `int` is the low half of its cell on this little-endian host).
#[derive(Default)]
pub(crate) struct Params(Vec<u64>);

impl Params {
    /// An `int` parameter.
    pub(crate) fn int(mut self, v: i32) -> Self {
        self.0.push(u64::from(v as u32));
        self
    }
    /// A `long long` parameter.
    pub(crate) fn long(mut self, v: i64) -> Self {
        self.0.push(v as u64);
        self
    }
    /// A device buffer's address (event tracking is off: nothing to record).
    pub(crate) fn buf<T>(mut self, g: &Gpu, s: &CudaSlice<T>) -> Self {
        self.0.push(s.device_ptr(&g.stream).0);
        self
    }
    fn pointers(&mut self) -> Vec<*mut c_void> {
        self.0.iter_mut().map(|c| c as *mut u64 as *mut c_void).collect()
    }
}

/// Threads per block of the elementwise and partial kernels.
const THREADS: u32 = 256;

fn grid_1d(n: usize) -> LaunchConfig {
    let blocks = n.div_ceil(THREADS as usize).clamp(1, 1 << 16) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn need(field: &str, got: usize, want: usize) -> Result<()> {
    if got < want {
        return Err(Error::invalid(
            field,
            got,
            format!("device buffer must hold at least {want} values"),
        ));
    }
    Ok(())
}

/// The device arrays of a row-Hessian operator, as the kernels see them.
/// (See kernels/row_hessian.cu's head for what each map holds.)
pub(crate) struct RowArgs<'a> {
    pub n: usize,
    pub r: usize,
    pub p_total: usize,
    pub hess: &'a CudaSlice<f64>,
    /// Whether hess holds packed upper triangles (r (r + 1) / 2 a row).
    pub packed: bool,
    /// The design widths and each design's first element in `x`.
    pub widths: &'a [usize],
    pub bases: &'a [usize],
    /// Every design, in one buffer.
    pub x: &'a CudaSlice<f64>,
    pub col_kind: &'a CudaSlice<i32>,
    pub col_j: &'a CudaSlice<i32>,
    pub col_u: &'a CudaSlice<i32>,
    pub primary_to_beta: &'a CudaSlice<i32>,
    pub pred_width: &'a CudaSlice<i32>,
    pub pred_base: &'a CudaSlice<i64>,
    pub pred_beta: &'a CudaSlice<i32>,
    pub pred_off: &'a CudaSlice<i32>,
    /// (p_0, p_1) when beta = (beta_0, beta_1, copied blocks) with two
    /// predictors (the BMS shape): the fused and tiled kernels serve only
    /// these.
    pub pair: Option<(usize, usize)>,
}

impl<'a> RowArgs<'a> {
    /// Number of linear predictors.
    pub fn predictors(&self) -> usize {
        self.widths.len()
    }

    /// The designs' total width.
    pub fn design_width(&self) -> usize {
        self.widths.iter().sum()
    }

    /// Design j, n x p_j row-major.
    pub fn design(&self, j: usize) -> CudaView<'a, f64> {
        self.x.slice(self.bases[j]..self.bases[j] + self.n * self.widths[j])
    }

    /// The design parameters every generic kernel takes (DESIGN_PARAMS).
    fn push_designs<'b>(&'b self, b: &mut cudarc::driver::LaunchArgs<'b>, l: &'b i32) {
        b.arg(l)
            .arg(self.x)
            .arg(self.pred_width)
            .arg(self.pred_base)
            .arg(self.pred_beta)
            .arg(self.pred_off);
    }

    /// Values one row Hessian occupies in `hess`.
    pub fn row_len(&self) -> usize {
        if self.packed {
            self.r * (self.r + 1) / 2
        } else {
            self.r * self.r
        }
    }
}

/// full[row] -> packed upper triangle of every row (`out` holds n r (r+1)/2).
pub(crate) fn pack_upper_rows(
    g: &Gpu,
    n: usize,
    r: usize,
    full: &CudaSlice<f64>,
    out: &mut CudaSlice<f64>,
) -> Result<()> {
    need("full", full.len(), n * r * r)?;
    need("packed", out.len(), n * packed_len(r))?;
    let (n64, r32) = (n as i64, r as i32);
    let cfg = LaunchConfig {
        grid_dim: ((n * packed_len(r)).div_ceil(THREADS as usize) as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut b = g.stream.launch_builder(&g.f.pack_upper_rows);
    b.arg(&n64).arg(&r32).arg(full).arg(out);
    // SAFETY: both lengths checked above; one thread per packed value.
    unsafe { b.launch(cfg) }.map_err(|e| cuda_err("pack_upper_rows", e))?;
    Ok(())
}

/// Single-precision packed rows from double rows (`packed`: `src` holds
/// packed rows, else full ones), each value rounded to nearest;
/// `overflow[0]` is set to 1 where a value is beyond the float range.
pub(crate) fn pack_upper_rows_f32(
    g: &Gpu,
    n: usize,
    r: usize,
    packed: bool,
    src: &CudaSlice<f64>,
    out: &mut CudaSlice<f32>,
    overflow: &mut CudaSlice<f64>,
) -> Result<()> {
    let per = packed_len(r);
    need("rows", src.len(), n * if packed { per } else { r * r })?;
    need("single-precision rows", out.len(), n * per)?;
    need("overflow flag", overflow.len(), 1)?;
    let (n64, r32, packed32) = (n as i64, r as i32, packed as i32);
    let cfg = LaunchConfig {
        grid_dim: ((n * per).div_ceil(THREADS as usize) as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut b = g.stream.launch_builder(&g.f.pack_upper_rows_f32);
    b.arg(&n64).arg(&r32).arg(&packed32).arg(src).arg(out).arg(overflow);
    // SAFETY: the three lengths checked above; one thread per packed value.
    unsafe { b.launch(cfg) }.map_err(|e| cuda_err("pack_upper_rows_f32", e))?;
    Ok(())
}

/// t[j, i, :] = H_i P_i v_j for k right-hand sides.
pub(crate) fn row_action(g: &Gpu, a: &RowArgs, k: usize, v: &CudaSlice<f64>, t: &mut CudaSlice<f64>) -> Result<()> {
    need("v", v.len(), k * a.p_total)?;
    need("t", t.len(), k * a.n * a.r)?;
    let (n, r, p, k32, l) = (
        a.n as i64,
        a.r as i32,
        a.p_total as i32,
        k as i32,
        a.predictors() as i32,
    );
    let warps_per_block = (THREADS / 32) as usize;
    let blocks = (a.n * k).div_ceil(warps_per_block).clamp(1, 1 << 20) as u32;
    let cfg = LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (THREADS, 1, 1),
        // Each warp's predictors.
        shared_mem_bytes: (warps_per_block * a.predictors() * 8) as u32,
    };
    let packed = a.packed as i32;
    let mut b = g.stream.launch_builder(&g.f.row_action);
    b.arg(&n).arg(&r).arg(&packed).arg(&p).arg(&k32);
    a.push_designs(&mut b, &l);
    b.arg(a.hess).arg(a.primary_to_beta).arg(v).arg(t);
    // SAFETY: hess holds n rows (r^2 or packed r (r + 1) / 2 values), each design n p_j values from its base
    // (checked when the operator was built); v and t were checked above.
    unsafe { b.launch(cfg) }.map_err(|e| cuda_err("row_action", e))?;
    Ok(())
}

/// Warps per block of the fused HVP.
pub(crate) const FUSED_WARPS: usize = 8;

/// Shared memory the fused HVP needs, in bytes: accumulators, dc and the
/// primary map, plus (packed rows staged: `staged_row_len` > 0) two rows per warp.
pub(crate) fn hvp_fused_shared_bytes(r: usize, p_total: usize, staged_row_len: usize) -> usize {
    ((FUSED_WARPS + 1) * p_total + r + r.div_ceil(2) + FUSED_WARPS * 2 * staged_row_len) * 8
}

/// Largest shared memory a kernel launch may ask for without opting in.
pub(crate) const SHARED_LIMIT: usize = 48 << 10;

/// The fused HVP's storage mode for an operator: 0 full rows, 1 packed rows
/// read in place, 2 packed rows staged through shared memory (when they fit).
pub(crate) fn hvp_fused_mode(a: &RowArgs) -> i32 {
    match a.packed {
        false => 0,
        true if hvp_fused_shared_bytes(a.r, a.p_total, a.row_len()) <= SHARED_LIMIT => 2,
        true => 1,
    }
}

/// partial[block, :] = sum over the block's rows of P_i^T H_i P_i v, one pass.
pub(crate) fn hvp_fused(
    g: &Gpu,
    a: &RowArgs,
    rows_per_block: usize,
    v: &CudaSlice<f64>,
    partial: &mut CudaSlice<f64>,
) -> Result<()> {
    let blocks = a.n.div_ceil(rows_per_block);
    need("v", v.len(), a.p_total)?;
    need("partial", partial.len(), blocks * a.p_total)?;
    let mode = hvp_fused_mode(a);
    let staged = if mode == 2 { a.row_len() } else { 0 };
    let shared = hvp_fused_shared_bytes(a.r, a.p_total, staged);
    if shared > SHARED_LIMIT {
        return Err(Error::invalid("hvp_fused shared bytes", shared, "must be <= 48 KiB"));
    }
    let cfg = LaunchConfig {
        grid_dim: (blocks as u32, 1, 1),
        block_dim: (FUSED_WARPS as u32 * 32, 1, 1),
        shared_mem_bytes: shared as u32,
    };
    let Some((p_m, p_g)) = a.pair else {
        return Err(Error::invalid(
            "layout",
            "not two leading predictors",
            "the fused HVP serves beta = (beta_0, beta_1, copied blocks)",
        ));
    };
    let (n, rpb, r, p_m, p_g, p) = (
        a.n as i64,
        rows_per_block as i32,
        a.r as i32,
        p_m as i32,
        p_g as i32,
        a.p_total as i32,
    );
    let (x_m, x_g) = (a.design(0), a.design(1));
    let mut b = g.stream.launch_builder(&g.f.hvp_fused);
    b.arg(&n).arg(&rpb).arg(&r).arg(&mode).arg(&p_m).arg(&p_g).arg(&p);
    b.arg(a.hess)
        .arg(&x_m)
        .arg(&x_g)
        .arg(a.primary_to_beta)
        .arg(v)
        .arg(partial);
    // SAFETY: operator arrays were validated at construction; v and partial
    // checked above; the dynamic shared memory matches the kernel's carve-up.
    unsafe { b.launch(cfg) }.map_err(|e| cuda_err("hvp_fused", e))?;
    Ok(())
}

/// The staged HVP's shape per storage, chosen by a sweep on an H200 at the
/// small, seed and tall shapes (warps 2-8, 2-4 buffers of 16-128 KiB;
/// benches/RESULTS.md): two buffers (one stage in flight while the other is
/// computed on) of 32 KiB for full rows and 16 KiB for packed rows, whose
/// smaller stages let more blocks share an SM; 4 warps a block. Packed f32
/// rows: two buffers of 32 KiB (up to 64 rows a stage) and 8 warps, the best
/// of 12 shapes at all three sizes (session 12's sweep in benches/RESULTS.md).
struct StagedShape {
    warps: usize,
    ring: usize,
    bytes: usize,
}

const STAGED_FULL: StagedShape = StagedShape {
    warps: 4,
    ring: 2,
    bytes: 64 << 10,
};

const STAGED_PACKED: StagedShape = StagedShape {
    warps: 4,
    ring: 2,
    bytes: 32 << 10,
};

const STAGED_SINGLE: StagedShape = StagedShape {
    warps: 8,
    ring: 2,
    bytes: 64 << 10,
};

/// Most rows a stage holds (f64 rows; f32 rows, half the bytes, 64).
const STAGED_MAX_ROWS: usize = 16;
const STAGED_MAX_ROWS_SINGLE: usize = 64;

/// `MATFREE_STAGED_SHAPE=warps,ring,kib,max_rows` replaces the staged HVP's
/// preset shape (all storages) for tuning sweeps; unset, the presets hold.
fn staged_override() -> Result<Option<(StagedShape, usize)>> {
    let Ok(text) = std::env::var("MATFREE_STAGED_SHAPE") else {
        return Ok(None);
    };
    let v: Vec<usize> = text.split(',').filter_map(|t| t.trim().parse().ok()).collect();
    match v[..] {
        [warps, ring @ 2..=4, kib, rows] if (1..=32).contains(&warps) && kib > 0 && rows >= 2 => Ok(Some((
            StagedShape {
                warps,
                ring,
                bytes: kib << 10,
            },
            rows,
        ))),
        _ => Err(Error::invalid(
            "MATFREE_STAGED_SHAPE",
            text,
            "must be warps (1-32),ring (2-4),KiB (> 0),max rows (>= 2)",
        )),
    }
}

/// The rows the staged HVP streams: the operator's own (f64, full or
/// packed) or its single-precision packed copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StagedRows {
    Double,
    Single,
}

/// How the staged HVP cuts the rows: `stage` rows per buffer (even; a
/// multiple of 4 for single-precision rows, so each stage's rows end on 16
/// bytes), `ring` buffers, each block a run of `rows_per_block` rows (a
/// multiple of `stage`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StagedPlan {
    pub stage: usize,
    pub ring: usize,
    pub warps: usize,
    pub rows_per_block: usize,
    pub shared_bytes: usize,
}

impl StagedPlan {
    /// The plan for an operator on a device: one wave of resident blocks
    /// (the device's SMs times the blocks an SM holds), so every block
    /// streams rows from start to end with no tail wave. `None` when not
    /// even two rows per buffer (four single-precision rows) fit the device
    /// (the fused kernel serves those f64 rows; f32 rows then stay f64).
    pub(crate) fn new(g: &Gpu, a: &RowArgs, rows: StagedRows) -> Result<Option<Self>> {
        let single = rows == StagedRows::Single;
        let preset = match (a.packed, single) {
            (_, true) => (STAGED_SINGLE, STAGED_MAX_ROWS_SINGLE),
            (true, false) => (STAGED_PACKED, STAGED_MAX_ROWS),
            (false, false) => (STAGED_FULL, STAGED_MAX_ROWS),
        };
        let (StagedShape { warps, ring, bytes }, max_rows) = staged_override()?.unwrap_or(preset);
        let (h_bytes, h_len, align) = match rows {
            StagedRows::Double => (8, a.row_len(), 2),
            StagedRows::Single => (4, a.r * (a.r + 1) / 2, 4),
        };
        let row = h_len * h_bytes + a.design_width() * 8;
        let budget = bytes.max(ring * align * row);
        let stage = (budget / (ring * row)).min(max_rows) / align * align;
        // Four mbarriers; v, the accumulators, dc, the predictors and t for
        // a stage, the constant 1; the column maps.
        let fixed = (4 + 2 * a.p_total + a.r + a.predictors() * stage + stage * a.r + 1) * 8 + 3 * a.p_total * 4;
        let shared_bytes = ring * stage * row + fixed;
        if stage < align || shared_bytes > g.shared_optin {
            return Ok(None);
        }
        let kernel = staged_kernel(g, a, single);
        let per_sm = kernel
            .occupancy_max_active_blocks_per_multiprocessor(warps as u32 * 32, shared_bytes, None)
            .map_err(|e| cuda_err("hvp_staged occupancy", e))? as usize;
        let blocks = (g.sm_count * per_sm.max(1)).max(1);
        let rows_per_block = a.n.div_ceil(blocks).max(stage).next_multiple_of(stage);
        Ok(Some(Self {
            stage,
            ring,
            warps,
            rows_per_block,
            shared_bytes,
        }))
    }

    pub(crate) fn blocks(&self, n: usize) -> usize {
        n.div_ceil(self.rows_per_block)
    }
}

/// The staged HVP's entry point: f64 or f32 rows, any layout or two leading
/// predictors (the BMS shape, which has its own).
fn staged_kernel<'g>(g: &'g Gpu, a: &RowArgs, single: bool) -> &'g CudaFunction {
    match (single, a.pair.is_some()) {
        (false, false) => &g.f.hvp_staged,
        (false, true) => &g.f.hvp_staged_pair,
        (true, false) => &g.f.hvp_staged_f32,
        (true, true) => &g.f.hvp_staged_f32_pair,
    }
}

/// partial[block, :] = sum over the block's rows of P_i^T H_i P_i v, with
/// rows streamed through shared memory by asynchronous copies: the
/// operator's rows, or `single`, their single-precision packed copy (n r
/// (r + 1) / 2 values), with a plan made for it.
pub(crate) fn hvp_staged(
    g: &Gpu,
    a: &RowArgs,
    plan: &StagedPlan,
    single: Option<&CudaSlice<f32>>,
    v: &CudaSlice<f64>,
    partial: &mut CudaSlice<f64>,
) -> Result<()> {
    let blocks = plan.blocks(a.n);
    if let Some(h) = single {
        need("single-precision rows", h.len(), a.n * a.r * (a.r + 1) / 2)?;
    }
    need("v", v.len(), a.p_total)?;
    need("partial", partial.len(), blocks * a.p_total)?;
    if plan.shared_bytes > g.shared_optin {
        let rule = format!("must be <= the device's {} bytes", g.shared_optin);
        return Err(Error::invalid("hvp_staged shared bytes", plan.shared_bytes, rule));
    }
    let cfg = LaunchConfig {
        grid_dim: (blocks as u32, 1, 1),
        block_dim: (plan.warps as u32 * 32, 1, 1),
        shared_mem_bytes: plan.shared_bytes as u32,
    };
    let head = Params::default()
        .long(a.n as i64)
        .int(plan.rows_per_block as i32)
        .int(plan.stage as i32)
        .int(plan.ring as i32)
        .int(a.r as i32);
    let kernel = staged_kernel(g, a, single.is_some());
    let head = match single {
        Some(_) => head,
        None => head.int(a.packed as i32),
    };
    let head = head.int(a.p_total as i32);
    let head = match single {
        Some(h) => head.buf(g, h),
        None => head.buf(g, a.hess),
    };
    let params = head.int(a.design_width() as i32).int(a.predictors() as i32).buf(g, a.x);
    let params = params
        .buf(g, a.pred_width)
        .buf(g, a.pred_base)
        .buf(g, a.pred_beta)
        .buf(g, a.pred_off);
    let params = [a.primary_to_beta, a.col_kind, a.col_j, a.col_u]
        .iter()
        .fold(params, |p, b| p.buf(g, b));
    let params = params.buf(g, v).buf(g, partial);
    // SAFETY: the kernel's parameters in order; operator arrays were
    // validated at construction; v and partial checked above; the shared
    // memory matches the plan the kernel carves up (`ring` buffers of
    // `stage` rows, then the accumulators), and the function was opted in
    // to the device's limit at start-up.
    unsafe { launch_dependent(g, kernel, cfg, params, "hvp_staged") }
}

/// Which per-row quantity a pullback reduces.
pub(crate) struct PullSource<'a> {
    /// The per-row values.
    pub t: &'a CudaSlice<f64>,
    /// Stride between right-hand sides.
    pub rhs_stride: usize,
    /// Stride between rows.
    pub row: usize,
    /// Stride between primary coordinates.
    pub col: usize,
    /// 1: coef * t; 2: coef^2 * t.
    pub power: i32,
    /// r when t is packed row Hessians read on their diagonal (row and col
    /// then unused but row = the packed stride); 0 otherwise.
    pub packed_r: usize,
}

/// partial[chunk, j, a] = sum over the chunk's rows of coef(a)^power t(row, u(a)).
pub(crate) fn pullback_partial(
    g: &Gpu,
    a: &RowArgs,
    k: usize,
    rows_per_chunk: usize,
    src: &PullSource,
    partial: &mut CudaSlice<f64>,
) -> Result<()> {
    let chunks = a.n.div_ceil(rows_per_chunk);
    need("partial", partial.len(), chunks * k * a.p_total)?;
    let last_row = match src.packed_r {
        0 => (a.n - 1) * src.row + (a.r - 1) * src.col + (k - 1) * src.rhs_stride,
        _ => a.n * src.row - 1 + (k - 1) * src.rhs_stride,
    };
    need("pullback source", src.t.len(), last_row + 1)?;
    let cfg = LaunchConfig {
        grid_dim: (chunks as u32, k as u32, 1),
        block_dim: (128, 1, 1),
        shared_mem_bytes: 0,
    };
    let (n, rpc, p, k32) = (a.n as i64, rows_per_chunk as i32, a.p_total as i32, k as i32);
    let (stride, row, col, packed_r) = (
        src.rhs_stride as i64,
        src.row as i32,
        src.col as i32,
        src.packed_r as i32,
    );
    let mut b = g.stream.launch_builder(&g.f.pullback_partial);
    b.arg(&n).arg(&rpc).arg(&p).arg(&k32);
    b.arg(a.col_kind)
        .arg(a.col_j)
        .arg(a.col_u)
        .arg(a.x)
        .arg(a.pred_width)
        .arg(a.pred_base);
    b.arg(src.t)
        .arg(&stride)
        .arg(&row)
        .arg(&col)
        .arg(&src.power)
        .arg(&packed_r)
        .arg(partial);
    // SAFETY: every index the kernel forms is bounded by the checks above and
    // by the column maps, which the operator built from a validated layout.
    unsafe { b.launch(cfg) }.map_err(|e| cuda_err("pullback_partial", e))?;
    Ok(())
}

/// partial[chunk, a * p + b] of the dense joint Hessian's upper triangle.
/// The column maps, row Hessians, designs and output of the dense kernels.
fn push_dense_maps<'a>(b: &mut cudarc::driver::LaunchArgs<'a>, a: &'a RowArgs) {
    b.arg(a.col_kind).arg(a.col_j).arg(a.col_u).arg(a.hess);
}

pub(crate) fn dense_partial(g: &Gpu, a: &RowArgs, rows_per_chunk: usize, partial: &mut CudaSlice<f64>) -> Result<()> {
    let chunks = a.n.div_ceil(rows_per_chunk);
    let entries = a.p_total * a.p_total;
    need("partial", partial.len(), chunks * entries)?;
    let blocks = entries.div_ceil(THREADS as usize) as u32;
    let cfg = LaunchConfig {
        grid_dim: (blocks, chunks as u32, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let (n, rpc, r, p) = (a.n as i64, rows_per_chunk as i32, a.r as i32, a.p_total as i32);
    let packed = a.packed as i32;
    let mut b = g.stream.launch_builder(&g.f.dense_partial);
    b.arg(&n).arg(&rpc).arg(&r).arg(&packed).arg(&p);
    push_dense_maps(&mut b, a);
    b.arg(a.x).arg(a.pred_width).arg(a.pred_base).arg(partial);
    // SAFETY: as for pullback_partial; partial was checked above.
    unsafe { b.launch(cfg) }.map_err(|e| cuda_err("dense_partial", e))?;
    Ok(())
}

/// Threads per block of `dense_staged_partial` (one upper-triangle entry each).
pub(crate) const DENSE_STAGED_THREADS: usize = 512;

/// Shared memory `dense_staged_partial` may use for its staged rows.
const DENSE_STAGED_BYTES: usize = 40 << 10;

/// Rows `dense_staged_partial` stages at a time (None: one row does not fit
/// in its shared memory, so the caller uses `dense_partial`).
pub(crate) fn dense_stage_rows(row_len: usize, design_width: usize) -> Option<usize> {
    let row_bytes = (row_len + design_width) * 8;
    let rows = (DENSE_STAGED_BYTES / row_bytes).min(16);
    (rows > 0).then_some(rows)
}

/// `dense_partial`'s result (upper triangle) with rows staged through shared
/// memory `stage` at a time; `partial` must arrive zeroed.
pub(crate) fn dense_staged_partial(
    g: &Gpu,
    a: &RowArgs,
    rows_per_chunk: usize,
    stage: usize,
    partial: &mut CudaSlice<f64>,
) -> Result<()> {
    let chunks = a.n.div_ceil(rows_per_chunk);
    need("partial", partial.len(), chunks * a.p_total * a.p_total)?;
    let upper = a.p_total * (a.p_total + 1) / 2;
    let shared = stage * (a.row_len() + a.design_width()) * 8;
    if shared > DENSE_STAGED_BYTES {
        return Err(Error::invalid(
            "dense stage bytes",
            shared,
            "must fit the staged kernel's shared memory",
        ));
    }
    let cfg = LaunchConfig {
        grid_dim: (upper.div_ceil(DENSE_STAGED_THREADS) as u32, chunks as u32, 1),
        block_dim: (DENSE_STAGED_THREADS as u32, 1, 1),
        shared_mem_bytes: shared as u32,
    };
    let (n, rpc, st, r, p) = (
        a.n as i64,
        rows_per_chunk as i32,
        stage as i32,
        a.r as i32,
        a.p_total as i32,
    );
    let (packed, l) = (a.packed as i32, a.predictors() as i32);
    let mut b = g.stream.launch_builder(&g.f.dense_staged_partial);
    b.arg(&n).arg(&rpc).arg(&st).arg(&r).arg(&packed).arg(&p);
    push_dense_maps(&mut b, a);
    a.push_designs(&mut b, &l);
    b.arg(partial);
    // SAFETY: as for dense_partial; the shared memory holds `stage` rows.
    unsafe { b.launch(cfg) }.map_err(|e| cuda_err("dense_staged_partial", e))?;
    Ok(())
}

/// Warps a block of `gram_r1_partial` and the 8 x 8 blocks each owns
/// (GRAM_ACC in gram.cu).
const GRAM_WARPS: usize = 8;
const GRAM_ACC: usize = 4;
/// Most rows `gram_r1_partial` stages at a time.
const GRAM_STAGE: usize = 64;

/// Whether `gram_r1_partial` serves the operator: one design and r = 1
/// (every beta column a design column), on a device with FP64 mma.
pub(crate) fn gram_serves(g: &Gpu, a: &RowArgs) -> bool {
    a.r == 1 && a.predictors() == 1 && a.widths[0] == a.p_total && g.f64_mma()
}

/// The staged row length of `gram_r1_partial` for p columns: at least the
/// 8-column blocks' width, and 4 mod 16 (so each half-warp's fragment loads
/// fall on distinct banks).
pub(crate) fn gram_stride(p: usize) -> usize {
    let width = p.div_ceil(8) * 8;
    width + (20 - width % 16) % 16
}

/// X^T diag(h) X's upper 8 x 8 blocks, a chunk of `rows_per_chunk` rows a
/// partial, on the FP64 tensor cores (only where [`gram_serves`]);
/// `partial` must arrive zeroed.
pub(crate) fn gram_r1_partial(g: &Gpu, a: &RowArgs, rows_per_chunk: usize, partial: &mut CudaSlice<f64>) -> Result<()> {
    let (n, p) = (a.n, a.p_total);
    let chunks = n.div_ceil(rows_per_chunk);
    need("partial", partial.len(), chunks * p * p)?;
    need("hess", a.hess.len(), n)?;
    let stride = gram_stride(p);
    let most = (g.shared_optin / ((stride + 1) * 8)) / 4 * 4;
    let stage = most.min(GRAM_STAGE);
    if stage == 0 {
        let rule = format!(
            "four staged rows must fit the device's {} bytes of shared memory",
            g.shared_optin
        );
        return Err(Error::invalid("gram_r1_partial p", p, rule));
    }
    let tiles = p.div_ceil(8);
    let groups = (tiles * (tiles + 1) / 2).div_ceil(GRAM_WARPS * GRAM_ACC);
    let cfg = LaunchConfig {
        grid_dim: (groups as u32, chunks as u32, 1),
        block_dim: (GRAM_WARPS as u32 * 32, 1, 1),
        shared_mem_bytes: (stage * (stride + 1) * 8) as u32,
    };
    let (n64, p32, rpc, stride32, stage32) = (n as i64, p as i32, rows_per_chunk as i32, stride as i32, stage as i32);
    let x = a.design(0);
    let mut b = g.stream.launch_builder(&g.f.gram_r1_partial);
    b.arg(&n64)
        .arg(&p32)
        .arg(&rpc)
        .arg(&stride32)
        .arg(&stage32)
        .arg(&x)
        .arg(a.hess)
        .arg(partial);
    // SAFETY: x is the one design (n x p), hess n values (checked), partial
    // chunks p^2 (checked); the shared memory holds `stage` rows of
    // `stride` and their weights, within the limit the kernel was granted.
    unsafe { b.launch(cfg) }.map_err(|e| cuda_err("gram_r1_partial", e))?;
    Ok(())
}

/// out[e] = sum over chunks of partial[c * len + e], in a fixed tree.
pub(crate) fn reduce_partials(
    g: &Gpu,
    chunks: usize,
    len: usize,
    partial: &CudaSlice<f64>,
    out: &mut CudaSlice<f64>,
) -> Result<()> {
    need("partial", partial.len(), chunks * len)?;
    need("out", out.len(), len)?;
    let cfg = LaunchConfig {
        grid_dim: (len.min(1 << 16) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let params = Params::default()
        .long(chunks as i64)
        .long(len as i64)
        .buf(g, partial)
        .buf(g, out);
    // SAFETY: the kernel's (i64, i64, const double*, double*); lengths
    // checked above; blockDim is the 256 the kernel requires.
    unsafe { launch_dependent(g, &g.f.reduce_partials, cfg, params, "reduce_partials") }
}

/// Copy the upper triangle of a p x p matrix into its lower triangle.
pub(crate) fn mirror_upper(g: &Gpu, p: usize, a: &mut CudaSlice<f64>) -> Result<()> {
    need("dense", a.len(), p * p)?;
    let p32 = p as i32;
    let mut b = g.stream.launch_builder(&g.f.mirror_upper);
    b.arg(&p32).arg(a);
    let cfg = LaunchConfig {
        grid_dim: ((p * p).div_ceil(THREADS as usize) as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: a holds p^2 values.
    unsafe { b.launch(cfg) }.map_err(|e| cuda_err("mirror_upper", e))?;
    Ok(())
}

/// partial[chunk] = sum of x over the chunk's rows.
pub(crate) fn chunk_sum_partial(
    g: &Gpu,
    n: usize,
    rows_per_chunk: usize,
    x: &CudaSlice<f64>,
    partial: &mut CudaSlice<f64>,
) -> Result<()> {
    need("x", x.len(), n)?;
    let chunks = n.div_ceil(rows_per_chunk);
    need("partial", partial.len(), chunks)?;
    let (n64, rpc) = (n as i64, rows_per_chunk as i32);
    let mut b = g.stream.launch_builder(&g.f.chunk_sum_partial);
    b.arg(&n64).arg(&rpc).arg(x).arg(partial);
    // SAFETY: lengths checked above.
    unsafe { b.launch(grid_1d(chunks)) }.map_err(|e| cuda_err("chunk_sum_partial", e))?;
    Ok(())
}

/// The launch of the one-thread scalar kernels.
const ONE_THREAD: LaunchConfig = LaunchConfig {
    grid_dim: (1, 1, 1),
    block_dim: (1, 1, 1),
    shared_mem_bytes: 0,
};

/// The launch of the one-block short-vector PCG kernels.
const ONE_BLOCK: LaunchConfig = LaunchConfig {
    grid_dim: (1, 1, 1),
    block_dim: (256, 1, 1),
    shared_mem_bytes: 0,
};

/// The PCG scalar kernels (`pcg_alpha`, `pcg_beta`) on a slot bank.
pub(crate) fn pcg_scalar(g: &Gpu, beta_step: bool, s: &mut CudaSlice<f64>) -> Result<()> {
    need("scalar slots", s.len(), matfree_solvers::pcg_kernels::slot::COUNT)?;
    let f = if beta_step { &g.f.pcg_beta } else { &g.f.pcg_alpha };
    let mut b = g.stream.launch_builder(f);
    b.arg(s);
    // SAFETY: the bank holds every slot the kernel touches (checked above).
    unsafe { b.launch(ONE_THREAD) }.map_err(|e| cuda_err("pcg scalar step", e))?;
    Ok(())
}

/// PCG's start on the slots (see `PcgKernels::pcg_start`).
pub(crate) fn pcg_start(g: &Gpu, s: &mut CudaSlice<f64>, rtol: f64, atol: f64) -> Result<()> {
    need("scalar slots", s.len(), matfree_solvers::pcg_kernels::slot::COUNT)?;
    let mut b = g.stream.launch_builder(&g.f.pcg_start);
    b.arg(s).arg(&rtol).arg(&atol);
    // SAFETY: the bank holds every slot the kernel touches (checked above).
    unsafe { b.launch(ONE_THREAD) }.map_err(|e| cuda_err("pcg start", e))?;
    Ok(())
}

/// y += s[slot] * x, nothing when the slot is zero.
pub(crate) fn axpy(g: &Gpu, s: &CudaSlice<f64>, slot: usize, x: &CudaSlice<f64>, y: &mut CudaSlice<f64>) -> Result<()> {
    need("y", y.len(), x.len())?;
    need("scalar slots", s.len(), slot + 1)?;
    let (n, slot) = (x.len() as i64, slot as i32);
    let mut b = g.stream.launch_builder(&g.f.axpy);
    b.arg(&n).arg(s).arg(&slot).arg(x).arg(y);
    // SAFETY: x and y hold n values; s holds the slot.
    unsafe { b.launch(grid_1d(x.len())) }.map_err(|e| cuda_err("axpy", e))?;
    Ok(())
}

/// Vectors up to this length take the single-block fused PCG step.
pub(crate) const SMALL_PCG: usize = 1 << 14;

/// One fused PCG iteration after q = A p with z = d .* r, in one block.
pub(crate) fn pcg_step_small(
    g: &Gpu,
    d: &CudaSlice<f64>,
    v: matfree_solvers::PcgVectors<'_, CudaSlice<f64>>,
    s: &mut CudaSlice<f64>,
) -> Result<()> {
    let n = d.len();
    for (field, len) in [
        ("x", v.x.len()),
        ("r", v.r.len()),
        ("z", v.z.len()),
        ("p", v.p.len()),
        ("q", v.q.len()),
    ] {
        need(field, len, n)?;
    }
    need("scalar slots", s.len(), matfree_solvers::pcg_kernels::slot::COUNT)?;
    let params = [d, &*v.x, &*v.r, &*v.z, &*v.p, v.q, &*s]
        .iter()
        .fold(Params::default().long(n as i64), |a, b| a.buf(g, b));
    // SAFETY: the kernel's (i64, then seven double*); every vector holds n
    // values, the bank every slot; one block of the 256 threads the
    // kernel's reductions assume.
    unsafe { launch_dependent(g, &g.f.pcg_step_small, ONE_BLOCK, params, "pcg_step_small") }
}

/// The fused start for z = d .* r on short vectors (see
/// `PcgKernels::pcg_restart_diagonal`), one block.
pub(crate) fn pcg_restart_small(
    g: &Gpu,
    d: &CudaSlice<f64>,
    b_vec: &CudaSlice<f64>,
    v: matfree_solvers::PcgVectors<'_, CudaSlice<f64>>,
    s: &mut CudaSlice<f64>,
    (rtol, atol): (f64, f64),
) -> Result<()> {
    let n = d.len();
    for (field, len) in [("b", b_vec.len()), ("r", v.r.len()), ("z", v.z.len()), ("p", v.p.len())] {
        need(field, len, n)?;
    }
    need("scalar slots", s.len(), matfree_solvers::pcg_kernels::slot::COUNT)?;
    let n64 = n as i64;
    let mut b = g.stream.launch_builder(&g.f.pcg_restart_small);
    b.arg(&n64)
        .arg(d)
        .arg(b_vec)
        .arg(&*v.r)
        .arg(v.z)
        .arg(v.p)
        .arg(s)
        .arg(&rtol)
        .arg(&atol);
    // SAFETY: every vector holds n values, the bank every slot; one block of 256.
    unsafe { b.launch(ONE_BLOCK) }.map_err(|e| cuda_err("pcg restart", e))?;
    Ok(())
}

/// r = b - r and the TRUE_RR slot on short vectors, one block.
pub(crate) fn pcg_true_residual_small(
    g: &Gpu,
    b_vec: &CudaSlice<f64>,
    r: &mut CudaSlice<f64>,
    s: &mut CudaSlice<f64>,
) -> Result<()> {
    need("r", r.len(), b_vec.len())?;
    need("scalar slots", s.len(), matfree_solvers::pcg_kernels::slot::COUNT)?;
    let n64 = b_vec.len() as i64;
    let mut b = g.stream.launch_builder(&g.f.pcg_true_residual_small);
    b.arg(&n64).arg(b_vec).arg(r).arg(s);
    // SAFETY: both vectors hold n values, the bank every slot; one block of 256.
    unsafe { b.launch(ONE_BLOCK) }.map_err(|e| cuda_err("pcg true residual", e))?;
    Ok(())
}

/// y = x + s[slot] * y.
pub(crate) fn xpay(g: &Gpu, x: &CudaSlice<f64>, s: &CudaSlice<f64>, slot: usize, y: &mut CudaSlice<f64>) -> Result<()> {
    need("y", y.len(), x.len())?;
    need("scalar slots", s.len(), slot + 1)?;
    let (n, slot) = (x.len() as i64, slot as i32);
    let mut b = g.stream.launch_builder(&g.f.xpay);
    b.arg(&n).arg(x).arg(s).arg(&slot).arg(y);
    // SAFETY: x and y hold n values; s holds the slot.
    unsafe { b.launch(grid_1d(x.len())) }.map_err(|e| cuda_err("xpay", e))?;
    Ok(())
}

/// r = b - r.
pub(crate) fn sub_from(g: &Gpu, b_vec: &CudaSlice<f64>, r: &mut CudaSlice<f64>) -> Result<()> {
    need("r", r.len(), b_vec.len())?;
    let n = b_vec.len() as i64;
    let mut b = g.stream.launch_builder(&g.f.sub_from);
    b.arg(&n).arg(b_vec).arg(r);
    // SAFETY: both hold n values.
    unsafe { b.launch(grid_1d(b_vec.len())) }.map_err(|e| cuda_err("sub_from", e))?;
    Ok(())
}

/// z = d .* r.
pub(crate) fn mul_elementwise(g: &Gpu, d: &CudaSlice<f64>, r: &CudaSlice<f64>, z: &mut CudaSlice<f64>) -> Result<()> {
    need("r", r.len(), d.len())?;
    need("z", z.len(), d.len())?;
    let n = d.len() as i64;
    let mut b = g.stream.launch_builder(&g.f.mul_elementwise);
    b.arg(&n).arg(d).arg(r).arg(z);
    // SAFETY: all three hold n values.
    unsafe { b.launch(grid_1d(d.len())) }.map_err(|e| cuda_err("mul_elementwise", e))?;
    Ok(())
}

/// out = 1 / (d + extra + ridge); first_bad receives the smallest index
/// whose denominator is not finite and positive (it must start at i64::MAX).
pub(crate) fn invert_positive(
    g: &Gpu,
    d: &CudaSlice<f64>,
    extra: Option<&CudaSlice<f64>>,
    ridge: f64,
    out: &mut CudaSlice<f64>,
    first_bad: &mut CudaSlice<i64>,
) -> Result<()> {
    need("out", out.len(), d.len())?;
    if let Some(e) = extra {
        need("extra", e.len(), d.len())?;
    }
    let n = d.len() as i64;
    let null: u64 = 0;
    let mut b = g.stream.launch_builder(&g.f.invert_positive);
    b.arg(&n).arg(d);
    match extra {
        Some(e) => b.arg(e),
        None => b.arg(&null),
    };
    b.arg(&ridge).arg(out).arg(first_bad);
    // SAFETY: d, out and extra (when given) hold n values; a null extra is
    // tested in the kernel.
    unsafe { b.launch(grid_1d(d.len())) }.map_err(|e| cuda_err("invert_positive", e))?;
    Ok(())
}

/// out[0] = 2 sum ln a[i, i] of an n x n matrix, in a fixed order.
pub(crate) fn log_diag_sum(g: &Gpu, n: usize, a: &CudaSlice<f64>, out: &mut CudaSlice<f64>) -> Result<()> {
    need("factor", a.len(), n * n)?;
    need("out", out.len(), 1)?;
    let n32 = n as i32;
    let mut b = g.stream.launch_builder(&g.f.log_diag_sum);
    b.arg(&n32).arg(a).arg(out);
    let cfg = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: a holds n^2 values, out one; blockDim is the kernel's 256.
    unsafe { b.launch(cfg) }.map_err(|e| cuda_err("log_diag_sum", e))?;
    Ok(())
}

/// y += x.
pub(crate) fn add_into(g: &Gpu, x: &CudaSlice<f64>, y: &mut CudaSlice<f64>) -> Result<()> {
    need("y", y.len(), x.len())?;
    let n = x.len() as i64;
    let mut b = g.stream.launch_builder(&g.f.add_into);
    b.arg(&n).arg(x).arg(y);
    // SAFETY: both hold n values.
    unsafe { b.launch(grid_1d(x.len())) }.map_err(|e| cuda_err("add_into", e))?;
    Ok(())
}
