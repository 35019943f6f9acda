//! The row Hessian resident on the GPU: per-row Hessians and both designs
//! uploaded once; products, diagonal, dense matrix and joint gradient queued
//! on the GPU's stream with fixed-order reductions (no atomics).

use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaSlice, CudaView};
use matfree_solvers::operator::expect_len;
use matfree_solvers::{LinearOperator, Result as SolverResult, SolverError};

use super::backend::CudaBackend;
use super::kernels::{self, PullSource, RowArgs};
use super::runtime::{cuda_err, Gpu};
use super::tiled::{self, NotSingle, TiledRows};
use crate::designs::{check_matrix, Designs};
use crate::layout::{Layout, Via};
use crate::row_hessian::{check_design_widths, check_layout_designs, JointGradient, RowHessian, ROW_CHUNK};
use crate::{Error, Result};

/// The values a packed row Hessian of width r keeps: its upper triangle,
/// row by row.
pub(crate) fn packed_len(r: usize) -> usize {
    r * (r + 1) / 2
}

/// Upper bound on transient scratch for multi-RHS products and the dense
/// matrix; wider requests are processed in batches.
const SCRATCH_BYTES: usize = 512 << 20;

/// Most blocks of the fused HVP: enough to fill an H200 several times over,
/// few enough that the partials stay small. Depends only on n, so results
/// do not depend on the device.
const FUSED_BLOCKS: usize = 2048;

/// Fewest rows a fused-HVP block takes.
const FUSED_MIN_ROWS: usize = 16;

/// Most chunks of the dense reduction (each holds a p x p partial): many, so
/// that every thread of `dense_partial` walks only a few hundred rows.
const DENSE_CHUNKS: usize = 1024;

/// Most chunks of the tensor-core dense sum: four times DENSE_CHUNKS, so
/// that its blocks (six an SM at p = 51 on an H200) fill the device in
/// several waves rather than one and a third (3.4 ms at 10M x 51 with 1024).
const TENSOR_DENSE_CHUNKS: usize = 4096;

/// The single-RHS scratch, allocated once so that products inside a
/// recorded PCG block allocate nothing.
struct Scratch {
    t: CudaSlice<f64>,
    partial: CudaSlice<f64>,
}

/// Rows per block of the fused HVP, or `None` when p is too wide for its
/// shared-memory accumulators (the two-phase path serves those).
fn fused_rows_per_block(n: usize, r: usize, p_total: usize) -> Option<usize> {
    (kernels::hvp_fused_shared_bytes(r, p_total, 0) <= kernels::SHARED_LIMIT)
        .then(|| n.div_ceil(FUSED_BLOCKS).max(FUSED_MIN_ROWS))
}

/// The kernels serving one single-vector HVP: the staged pass with its plan,
/// the fused pass with its rows per block, or the two-phase path.
enum SingleHvp<'a> {
    Staged(&'a kernels::StagedPlan),
    StagedSingle(&'a CudaSlice<f32>, &'a kernels::StagedPlan),
    Tiled(&'a TiledRows),
    Fused(usize),
    TwoPhase,
}

/// The single-precision copy of the rows a single-vector HVP reads.
enum Single {
    /// Packed f32 rows streamed by the staged kernel, with its plan.
    Staged(CudaSlice<f32>, kernels::StagedPlan),
    /// Rows and designs in tiles of 32 rows (`tiled`).
    Tiled(TiledRows),
}

/// Which kernel reads a single-precision copy of the rows (see
/// [`DeviceRowHessian::with_single_precision_hvp`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SingleKernel {
    /// Tiles of 32 rows, a lane a row, the product in registers; shapes up
    /// to r = 40 and 48 design columns (wider ones take the staged kernel).
    Tiled,
    /// Packed rows streamed through shared memory.
    Staged,
}

impl SingleKernel {
    /// `MATFREE_F32_HVP=tiled|staged` (default tiled), for comparing the two.
    pub fn from_env() -> Result<Self> {
        match std::env::var("MATFREE_F32_HVP").as_deref() {
            Err(_) | Ok("tiled") => Ok(Self::Tiled),
            Ok("staged") => Ok(Self::Staged),
            Ok(other) => Err(Error::invalid("MATFREE_F32_HVP", other, "must be tiled or staged")),
        }
    }
}

/// Elements each design's start is rounded up to in the device buffer:
/// every design then starts 256-byte aligned, as the staged kernel's bulk
/// copies need (16 bytes) whatever n and the widths are.
const DESIGN_ALIGN: usize = 32;

/// Values a page-locked buffer of a large upload holds (64 MiB).
const UPLOAD_CHUNK: usize = 8 << 20;

/// dst[base..base + src.len()] = src. A large source goes through two
/// page-locked buffers in turn (the host fills one, in parallel, while the
/// other's copy runs): 1.5 s less than one copy from pageable memory for
/// 10M x 51 f64 on the H200's host.
fn upload_into(gpu: &Gpu, src: &[f64], dst: &mut CudaSlice<f64>, base: usize) -> Result<()> {
    use rayon::prelude::*;
    let err = |e| cuda_err("upload designs", e);
    if src.len() < 2 * UPLOAD_CHUNK {
        return gpu
            .stream
            .memcpy_htod(src, &mut dst.slice_mut(base..base + src.len()))
            .map_err(err);
    }
    let ctx = gpu.stream.context();
    let mut bufs = Vec::new();
    for _ in 0..2 {
        // SAFETY: write-combined page-locked memory, filled before each copy.
        let buf = unsafe { ctx.alloc_pinned::<f64>(UPLOAD_CHUNK) }.map_err(err)?;
        bufs.push((buf, ctx.new_event(None).map_err(err)?));
    }
    let copies = (|| {
        for (k, part) in src.chunks(UPLOAD_CHUNK).enumerate() {
            let at = base + k * UPLOAD_CHUNK;
            let mut to = dst.slice_mut(at..at + part.len());
            if part.len() < UPLOAD_CHUNK {
                gpu.stream.memcpy_htod(part, &mut to).map_err(err)?;
                continue;
            }
            let (buf, done) = &mut bufs[k % 2];
            // The buffer's copy of two chunks ago has ended (event tracking
            // is off, so the buffer's own event is never recorded: ours is).
            if k >= 2 {
                done.synchronize().map_err(err)?;
            }
            let ptr = buf.as_mut_ptr().map_err(err)?;
            // SAFETY: the buffer holds UPLOAD_CHUNK values and no copy reads it now.
            let host = unsafe { std::slice::from_raw_parts_mut(ptr, UPLOAD_CHUNK) };
            host.par_chunks_mut(1 << 16)
                .zip(part.par_chunks(1 << 16))
                .for_each(|(h, s)| h.copy_from_slice(s));
            gpu.stream.memcpy_htod(&*buf, &mut to).map_err(err)?;
            done.record(&gpu.stream).map_err(err)?;
        }
        Ok(())
    })();
    // Every copy ends before the buffers are freed, on success or not.
    let synced = gpu.stream.synchronize().map_err(err);
    copies.and(synced)
}

/// The designs on the device, uploaded once into one buffer (design j at
/// element `bases[j]`) and shared by every row Hessian built over them (one
/// per Newton iteration).
pub struct DeviceDesigns {
    gpu: Arc<Gpu>,
    n: usize,
    widths: Vec<usize>,
    bases: Vec<usize>,
    x: CudaSlice<f64>,
}

impl DeviceDesigns {
    /// Upload validated designs.
    pub fn upload(gpu: Arc<Gpu>, designs: &Designs) -> Result<Arc<Self>> {
        let (n, widths) = (designs.n(), designs.widths().to_vec());
        let mut bases = Vec::with_capacity(widths.len());
        let mut end = 0;
        for p in &widths {
            bases.push(end);
            end = (end + n * p).div_ceil(DESIGN_ALIGN) * DESIGN_ALIGN;
        }
        let mut x = gpu.zeros::<f64>(end)?;
        for (j, &base) in bases.iter().enumerate() {
            upload_into(&gpu, designs.matrix(j), &mut x, base)?;
        }
        Ok(Arc::new(Self {
            gpu,
            n,
            widths,
            bases,
            x,
        }))
    }

    /// Number of rows.
    pub fn n(&self) -> usize {
        self.n
    }

    /// The GPU they live on.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// The design widths.
    pub fn widths(&self) -> &[usize] {
        &self.widths
    }

    /// Rows `rows` of design j, row-major.
    pub(crate) fn rows(&self, j: usize, rows: &std::ops::Range<usize>) -> CudaView<'_, f64> {
        let (base, p) = (self.bases[j], self.widths[j]);
        self.x.slice(base + rows.start * p..base + rows.end * p)
    }

    /// Each design's first element in [`DeviceDesigns::buffer`].
    pub(crate) fn bases(&self) -> &[usize] {
        &self.bases
    }

    /// The buffer holding every design.
    pub(crate) fn buffer(&self) -> &CudaSlice<f64> {
        &self.x
    }
}

/// H = sum_i P_i^T H_i P_i with everything on the device.
pub struct DeviceRowHessian {
    gpu: Arc<Gpu>,
    layout: Layout,
    n: usize,
    hess: CudaSlice<f64>,
    /// Whether `hess` holds packed upper triangles (see [`DeviceRowHessian::packed`]).
    packed: bool,
    designs: Arc<DeviceDesigns>,
    maps: ColumnMaps,
    scratch: Mutex<Scratch>,
    /// How the staged HVP cuts the rows (`None`: rows too wide for it).
    staged: Option<kernels::StagedPlan>,
    /// A single-precision copy of the rows, read by the single-vector HVP
    /// when present (see [`DeviceRowHessian::with_single_precision_hvp`]).
    single: Option<Single>,
    /// Whether the dense matrix of a one-design r = 1 operator is summed on
    /// the FP64 tensor cores (see [`DeviceRowHessian::dense_path`]).
    tensor_dense: bool,
    /// The dense matrix once `to_dense` made it: a Newton solve's last
    /// check and REML's log-determinant at the same beta ask for it twice
    /// (at 10M rows 3.3 ms each). Cleared where the storage changes.
    dense_cache: Mutex<Option<Vec<f64>>>,
}

/// The precision of the rows a single-vector HVP reads. Products and sums
/// are taken in f64 either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HvpPrecision {
    /// The operator's own f64 rows.
    F64,
    /// A packed f32 copy of them: half the bytes of packed f64.
    F32,
}

/// The kernels index with 32-bit sizes and grid dimensions: check them.
fn check_ranges(layout: &Layout, n: usize) -> Result<()> {
    let limit = i32::MAX as usize;
    let chunks = n.div_ceil(ROW_CHUNK);
    let checks = [
        ("n / ROW_CHUNK (grid size)", chunks, limit),
        ("r * r", layout.r() * layout.r(), limit),
        ("p_total * p_total", layout.p_total() * layout.p_total(), limit),
    ];
    for (field, value, max) in checks {
        if value > max {
            return Err(Error::invalid(
                field,
                value,
                format!("must be <= {max} for the CUDA kernels"),
            ));
        }
    }
    Ok(())
}

/// The maps the kernels read, on the device. Per beta column a: the design
/// it is pulled through (`col_kind`, -1 for a copied column), its column in
/// that design (`col_j`) and its row coordinate (`col_u`). Per row
/// coordinate u: the beta index copied there (`primary_to_beta`, for the
/// direct coordinates u >= L). Per design j (= predictor j = row
/// coordinate j): its width, its first element in the designs' buffer, its
/// first beta index, and the sum of the widths before it.
struct ColumnMaps {
    col_kind: CudaSlice<i32>,
    col_j: CudaSlice<i32>,
    col_u: CudaSlice<i32>,
    primary_to_beta: CudaSlice<i32>,
    pred_width: CudaSlice<i32>,
    pred_base: CudaSlice<i64>,
    pred_beta: CudaSlice<i32>,
    pred_off: CudaSlice<i32>,
}

impl ColumnMaps {
    fn upload(gpu: &Gpu, layout: &Layout, designs: &DeviceDesigns) -> Result<Self> {
        let map = layout.column_map();
        let kind: Vec<i32> = map
            .iter()
            .map(|(_, v)| match v {
                Via::Design { design, .. } => *design as i32,
                Via::Direct => -1,
            })
            .collect();
        let col: Vec<i32> = map
            .iter()
            .map(|(_, v)| match v {
                Via::Design { col, .. } => *col as i32,
                Via::Direct => 0,
            })
            .collect();
        let u: Vec<i32> = map.iter().map(|(u, _)| *u as i32).collect();
        let to_beta: Vec<i32> = layout
            .coordinate_sources()
            .iter()
            .map(|a| a.map_or(0, |a| a as i32))
            .collect();
        let widths: Vec<i32> = designs.widths().iter().map(|&p| p as i32).collect();
        let bases: Vec<i64> = designs.bases().iter().map(|&b| b as i64).collect();
        let beta: Vec<i32> = layout.predictors().iter().map(|r| r.start as i32).collect();
        let off: Vec<i32> = widths
            .iter()
            .scan(0, |acc, &p| Some(std::mem::replace(acc, *acc + p)))
            .collect();
        Ok(Self {
            col_kind: gpu.upload(&kind)?,
            col_j: gpu.upload(&col)?,
            col_u: gpu.upload(&u)?,
            primary_to_beta: gpu.upload(&to_beta)?,
            pred_width: upload_or_zero(gpu, &widths)?,
            pred_base: upload_or_zero(gpu, &bases)?,
            pred_beta: upload_or_zero(gpu, &beta)?,
            pred_off: upload_or_zero(gpu, &off)?,
        })
    }
}

/// (p_0, p_1) when beta = (beta_0, beta_1, copied blocks): the layouts the
/// fused and tiled kernels serve.
fn leading_pair(layout: &Layout) -> Option<(usize, usize)> {
    match layout.predictors() {
        [a, b] if a.start == 0 && b.start == a.end => Some((a.len(), b.len())),
        _ => None,
    }
}

/// A device copy of `x`, or one zero where x is empty (a layout without
/// designs): kernels never read it then, and cudarc allocates nothing empty.
fn upload_or_zero<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
    gpu: &Gpu,
    x: &[T],
) -> Result<CudaSlice<T>> {
    if x.is_empty() {
        gpu.zeros(1)
    } else {
        gpu.upload(x)
    }
}

impl DeviceRowHessian {
    /// Validate (the rules of [`RowHessian::new`] and the kernels' 32-bit
    /// ranges) and upload per-row Hessians and designs.
    pub fn new(gpu: Arc<Gpu>, layout: Layout, designs: &Designs, hess: &[f64]) -> Result<Self> {
        check_layout_designs(&layout, designs)?;
        check_matrix("hess", hess, designs.n(), layout.r() * layout.r())?;
        let hess = gpu.upload(hess)?;
        Self::from_device(layout, DeviceDesigns::upload(gpu, designs)?, hess)
    }

    /// Wrap per-row Hessians already on the device (`n * r * r`, row-major,
    /// produced there) over uploaded designs.
    pub fn from_device(layout: Layout, designs: Arc<DeviceDesigns>, hess: CudaSlice<f64>) -> Result<Self> {
        Self::wrap(layout, designs, hess, false)
    }

    /// Wrap packed per-row Hessians already on the device (`n * r (r + 1) /
    /// 2`: each row's upper triangle row by row, as the BMS row kernel
    /// writes them) over uploaded designs: the operator of
    /// [`DeviceRowHessian::packed`].
    pub fn from_device_packed(layout: Layout, designs: Arc<DeviceDesigns>, hess: CudaSlice<f64>) -> Result<Self> {
        Self::wrap(layout, designs, hess, true)
    }

    fn wrap(layout: Layout, designs: Arc<DeviceDesigns>, hess: CudaSlice<f64>, packed: bool) -> Result<Self> {
        let (n, r) = (designs.n, layout.r());
        check_design_widths(&layout, designs.widths())?;
        let (per, rule) = match packed {
            true => (packed_len(r), "n r (r + 1) / 2"),
            false => (r * r, "n r^2"),
        };
        if hess.len() != n * per {
            return Err(Error::invalid(
                "hess.len",
                hess.len(),
                format!("must equal {rule} = {}", n * per),
            ));
        }
        check_ranges(&layout, n)?;
        let gpu = designs.gpu.clone();
        let maps = ColumnMaps::upload(&gpu, &layout, &designs)?;
        let scratch = Scratch {
            t: gpu.zeros(n * r)?,
            partial: gpu.zeros(n.div_ceil(ROW_CHUNK).max(FUSED_BLOCKS) * layout.p_total())?,
        };
        let mut op = Self {
            hess,
            maps,
            scratch: Mutex::new(scratch),
            staged: None,
            single: None,
            packed,
            tensor_dense: true,
            dense_cache: Mutex::new(None),
            designs,
            gpu,
            layout,
            n,
        };
        op.plan_staged()?;
        Ok(op)
    }

    /// Choose the staged HVP's plan for the current storage, growing the
    /// partials scratch to its block count.
    fn plan_staged(&mut self) -> Result<()> {
        self.staged = kernels::StagedPlan::new(&self.gpu, &self.args(), kernels::StagedRows::Double)?;
        let single = match &self.single {
            Some(Single::Staged(_, plan)) => plan.blocks(self.n),
            Some(Single::Tiled(t)) => t.blocks(),
            None => 0,
        };
        self.grow_partials(self.staged.map_or(0, |plan| plan.blocks(self.n)).max(single))
    }

    /// Grow the partials scratch to hold `blocks` partials.
    fn grow_partials(&self, blocks: usize) -> Result<()> {
        let want = blocks * self.layout.p_total();
        let mut s = self.lock()?;
        if s.partial.len() < want {
            s.partial = self.gpu.zeros(want)?;
        }
        Ok(())
    }

    /// Upload a CPU operator.
    pub fn from_cpu(gpu: Arc<Gpu>, op: &RowHessian) -> Result<Self> {
        Self::new(gpu, op.layout().clone(), op.designs(), op.hess())
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
    /// Number of rows.
    pub fn n(&self) -> usize {
        self.n
    }
    /// The GPU it lives on.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// The designs it is built over.
    pub fn designs(&self) -> &Arc<DeviceDesigns> {
        &self.designs
    }

    fn args(&self) -> RowArgs<'_> {
        let m = &self.maps;
        RowArgs {
            n: self.n,
            r: self.layout.r(),
            p_total: self.layout.p_total(),
            hess: &self.hess,
            packed: self.packed,
            widths: self.designs.widths(),
            bases: self.designs.bases(),
            x: self.designs.buffer(),
            col_kind: &m.col_kind,
            col_j: &m.col_j,
            col_u: &m.col_u,
            primary_to_beta: &m.primary_to_beta,
            pred_width: &m.pred_width,
            pred_base: &m.pred_base,
            pred_beta: &m.pred_beta,
            pred_off: &m.pred_off,
            pair: leading_pair(&self.layout),
        }
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Scratch>> {
        self.scratch
            .lock()
            .map_err(|_| Error::Cuda("row-Hessian scratch lock poisoned".into()))
    }

    /// Which kernels serve [`DeviceRowHessian::hvp_into`]: `"staged"` (rows
    /// streamed through shared memory), `"fused"` (a warp per row, for rows
    /// too wide to stage on this device) or `"two-phase"` (p too wide for
    /// the fused kernel's shared accumulators).
    pub fn hvp_path(&self) -> &'static str {
        match self.single_hvp() {
            SingleHvp::Staged(_) | SingleHvp::StagedSingle(..) => "staged",
            SingleHvp::Tiled(_) => "tiled",
            SingleHvp::Fused(_) => "fused",
            SingleHvp::TwoPhase => "two-phase",
        }
    }

    /// Which kernel sums [`DeviceRowHessian::dense_into`]: `"tensor"` (one
    /// design, r = 1, on a device with FP64 mma: X^T diag(h) X by 8 x 8
    /// blocks on the tensor cores, reading each row once), `"staged"` (an
    /// entry a thread over rows staged through shared memory) or `"direct"`.
    pub fn dense_path(&self) -> &'static str {
        let args = self.args();
        match kernels::dense_stage_rows(args.row_len(), args.design_width()) {
            _ if self.tensor_dense && kernels::gram_serves(&self.gpu, &args) => "tensor",
            Some(_) => "staged",
            None => "direct",
        }
    }

    /// The same operator with the tensor-core dense path on or off (on by
    /// default; off, the dense matrix takes the entry-a-thread kernels: for
    /// comparing the two).
    pub fn with_tensor_dense(mut self, on: bool) -> Self {
        self.tensor_dense = on;
        self.dense_cache = Mutex::new(None);
        self
    }

    /// What the single-vector HVP's kernel uses, where it is the tiled one
    /// (registers, spills, occupancy, blocks); `None` otherwise.
    pub fn hvp_kernel_detail(&self) -> Option<String> {
        match &self.single {
            Some(Single::Tiled(t)) => Some(t.describe()),
            _ => None,
        }
    }

    /// The single-vector HVP's path, in order of preference.
    fn single_hvp(&self) -> SingleHvp<'_> {
        match &self.single {
            Some(Single::Staged(h, plan)) => return SingleHvp::StagedSingle(h, plan),
            Some(Single::Tiled(t)) => return SingleHvp::Tiled(t),
            None => {}
        }
        let fused =
            leading_pair(&self.layout).and(fused_rows_per_block(self.n, self.layout.r(), self.layout.p_total()));
        match (&self.staged, fused) {
            (Some(plan), _) => SingleHvp::Staged(plan),
            (None, Some(rows)) => SingleHvp::Fused(rows),
            (None, None) => SingleHvp::TwoPhase,
        }
    }

    /// out = H v, queued on the stream (no host sync): the staged pass when
    /// rows fit its shared-memory buffers, else the fused warp-per-row pass
    /// when p fits its accumulators, else the two-phase path (see
    /// [`DeviceRowHessian::hvp_path`]).
    pub fn hvp_into(&self, v: &CudaSlice<f64>, out: &mut CudaSlice<f64>) -> Result<()> {
        let (p, r, n) = (self.layout.p_total(), self.layout.r(), self.n);
        let mut s = self.lock()?;
        let Scratch { t, partial } = &mut *s;
        match self.single_hvp() {
            SingleHvp::Staged(plan) => {
                kernels::hvp_staged(&self.gpu, &self.args(), plan, None, v, partial)?;
                return kernels::reduce_partials(&self.gpu, plan.blocks(n), p, partial, out);
            }
            SingleHvp::StagedSingle(h, plan) => {
                kernels::hvp_staged(&self.gpu, &self.args(), plan, Some(h), v, partial)?;
                return kernels::reduce_partials(&self.gpu, plan.blocks(n), p, partial, out);
            }
            SingleHvp::Tiled(t) => {
                t.hvp(&self.gpu, &self.args(), v, partial)?;
                return kernels::reduce_partials(&self.gpu, t.blocks(), p, partial, out);
            }
            SingleHvp::Fused(rows) => {
                kernels::hvp_fused(&self.gpu, &self.args(), rows, v, partial)?;
                return kernels::reduce_partials(&self.gpu, n.div_ceil(rows), p, partial, out);
            }
            SingleHvp::TwoPhase => {}
        }
        kernels::row_action(&self.gpu, &self.args(), 1, v, t)?;
        let src = PullSource {
            t,
            rhs_stride: 0,
            row: r,
            col: 1,
            power: 1,
            packed_r: 0,
        };
        kernels::pullback_partial(&self.gpu, &self.args(), 1, ROW_CHUNK, &src, partial)?;
        kernels::reduce_partials(&self.gpu, n.div_ceil(ROW_CHUNK), p, partial, out)
    }

    /// out = H V for k columns stored back to back, in batches that keep the
    /// scratch under a fixed bound.
    pub fn hvp_multi_into(&self, v: &CudaSlice<f64>, k: usize, out: &mut CudaSlice<f64>) -> Result<()> {
        let (p, r, n) = (self.layout.p_total(), self.layout.r(), self.n);
        for (field, len) in [("v.len", v.len()), ("out.len", out.len())] {
            if len != k * p {
                return Err(Error::invalid(
                    field,
                    len,
                    format!("must equal k * p_total = {}", k * p),
                ));
            }
        }
        let chunks = n.div_ceil(ROW_CHUNK);
        let per_rhs = (n * r + chunks * p) * 8;
        let batch = (SCRATCH_BYTES / per_rhs).clamp(1, 65_535).min(k.max(1));
        let mut t = self.gpu.zeros::<f64>(batch * n * r)?;
        let mut partial = self.gpu.zeros::<f64>(batch * chunks * p)?;
        let (mut vb, mut ob) = (self.gpu.zeros::<f64>(batch * p)?, self.gpu.zeros::<f64>(batch * p)?);
        let copy = |what: &str, e| cuda_err(what, e);
        for j0 in (0..k).step_by(batch) {
            let kb = batch.min(k - j0);
            let cols = j0 * p..(j0 + kb) * p;
            self.gpu
                .stream
                .memcpy_dtod(&v.slice(cols.clone()), &mut vb.slice_mut(..kb * p))
                .map_err(|e| copy("rhs", e))?;
            kernels::row_action(&self.gpu, &self.args(), kb, &vb, &mut t)?;
            let src = PullSource {
                t: &t,
                rhs_stride: n * r,
                row: r,
                col: 1,
                power: 1,
                packed_r: 0,
            };
            kernels::pullback_partial(&self.gpu, &self.args(), kb, ROW_CHUNK, &src, &mut partial)?;
            // Partials are laid out [chunk, j, a]: reduce over chunks for all kb * p entries.
            kernels::reduce_partials(&self.gpu, chunks, kb * p, &partial, &mut ob)?;
            self.gpu
                .stream
                .memcpy_dtod(&ob.slice(..kb * p), &mut out.slice_mut(cols))
                .map_err(|e| copy("out", e))?;
        }
        Ok(())
    }

    /// out = diag(H), queued on the stream.
    pub fn diagonal_into(&self, out: &mut CudaSlice<f64>) -> Result<()> {
        let (p, r) = (self.layout.p_total(), self.layout.r());
        let mut s = self.lock()?;
        let src = PullSource {
            t: &self.hess,
            rhs_stride: 0,
            row: self.args().row_len(),
            col: r + 1,
            power: 2,
            packed_r: if self.packed { r } else { 0 },
        };
        kernels::pullback_partial(&self.gpu, &self.args(), 1, ROW_CHUNK, &src, &mut s.partial)?;
        kernels::reduce_partials(&self.gpu, self.n.div_ceil(ROW_CHUNK), p, &s.partial, out)
    }

    /// out = H as a dense row-major p x p matrix on the device.
    pub fn dense_into(&self, out: &mut CudaSlice<f64>) -> Result<()> {
        let p = self.layout.p_total();
        let most = if self.dense_path() == "tensor" {
            TENSOR_DENSE_CHUNKS
        } else {
            DENSE_CHUNKS
        };
        let max_chunks = (SCRATCH_BYTES / (p * p * 8)).clamp(1, most);
        let rows_per_chunk = self.n.div_ceil(max_chunks).max(ROW_CHUNK.min(self.n));
        let chunks = self.n.div_ceil(rows_per_chunk);
        let mut partial = self.gpu.zeros::<f64>(chunks * p * p)?;
        let args = self.args();
        match (
            self.dense_path(),
            kernels::dense_stage_rows(args.row_len(), args.design_width()),
        ) {
            ("tensor", _) => kernels::gram_r1_partial(&self.gpu, &args, rows_per_chunk, &mut partial)?,
            (_, Some(stage)) => kernels::dense_staged_partial(&self.gpu, &args, rows_per_chunk, stage, &mut partial)?,
            (_, None) => kernels::dense_partial(&self.gpu, &args, rows_per_chunk, &mut partial)?,
        }
        kernels::reduce_partials(&self.gpu, chunks, p * p, &partial, out)?;
        kernels::mirror_upper(&self.gpu, p, out)
    }

    /// The joint negative log-likelihood and its gradient from per-row values
    /// and gradients already on the device (one counted download).
    pub fn joint_gradient(&self, neglog: &CudaSlice<f64>, grad: &CudaSlice<f64>) -> Result<JointGradient> {
        let p = self.layout.p_total();
        let mut out = self.gpu.zeros::<f64>(p + 1)?;
        self.joint_gradient_into(neglog, grad, &mut out)?;
        Ok(split_joint(self.gpu.download(&out)?))
    }

    /// Queue the joint gradient into `out[..p]` and the joint neglog into
    /// `out[p]` (no host sync), so several shards can combine them on the
    /// device.
    pub fn joint_gradient_into(
        &self,
        neglog: &CudaSlice<f64>,
        grad: &CudaSlice<f64>,
        out: &mut CudaSlice<f64>,
    ) -> Result<()> {
        let (n, r, p) = (self.n, self.layout.r(), self.layout.p_total());
        let lengths = [
            ("neglog.len", neglog.len(), n, "n"),
            ("grad.len", grad.len(), n * r, "n * r"),
            ("out.len", out.len(), p + 1, "p_total + 1"),
        ];
        for (field, got, want, what) in lengths {
            if got != want {
                return Err(Error::invalid(field, got, format!("must equal {what} = {want}")));
            }
        }
        let chunks = n.div_ceil(ROW_CHUNK);
        let mut total = self.gpu.zeros::<f64>(1)?;
        let mut s = self.lock()?;
        let src = PullSource {
            t: grad,
            rhs_stride: 0,
            row: r,
            col: 1,
            power: 1,
            packed_r: 0,
        };
        kernels::pullback_partial(&self.gpu, &self.args(), 1, ROW_CHUNK, &src, &mut s.partial)?;
        kernels::reduce_partials(&self.gpu, chunks, p, &s.partial, out)?;
        kernels::chunk_sum_partial(&self.gpu, n, ROW_CHUNK, neglog, &mut s.partial)?;
        kernels::reduce_partials(&self.gpu, chunks, 1, &s.partial, &mut total)?;
        self.gpu
            .stream
            .memcpy_dtod(&total, &mut out.slice_mut(p..p + 1))
            .map_err(|e| cuda_err("joint neglog", e))
    }

    /// Host convenience: the per-row Hessians, row-major `n x r x r`.
    pub fn hess_host(&self) -> Result<Vec<f64>> {
        let stored = self.gpu.download(&self.hess)?;
        if !self.packed {
            return Ok(stored);
        }
        let r = self.layout.r();
        let mut full = vec![0.0; self.n * r * r];
        for (row, packed) in stored.chunks_exact(packed_len(r)).enumerate() {
            let h = &mut full[row * r * r..(row + 1) * r * r];
            let mut k = 0;
            for s in 0..r {
                for u in s..r {
                    (h[s * r + u], h[u * r + s]) = (packed[k], packed[k]);
                    k += 1;
                }
            }
        }
        Ok(full)
    }

    /// The same operator over packed storage: each row keeps only its upper
    /// triangle (r (r + 1) / 2 values instead of r^2, about half the memory
    /// and half the bytes an HVP reads). Every operation reads H[s][u] as
    /// H[min][max]: the lower triangle is dropped, which is exact for rows
    /// that are symmetric (the BMS kernel writes both halves from one value).
    /// The full buffer is freed.
    pub fn packed(mut self) -> Result<Self> {
        if self.packed {
            return Ok(self);
        }
        let r = self.layout.r();
        let mut out = self.gpu.zeros::<f64>(self.n * packed_len(r))?;
        kernels::pack_upper_rows(&self.gpu, self.n, r, &self.hess, &mut out)?;
        self.hess = out;
        self.packed = true;
        self.dense_cache = Mutex::new(None);
        self.plan_staged()?;
        Ok(self)
    }

    /// The same operator with its single-vector HVP (the PCG's product)
    /// reading a packed f32 copy of the rows: a quarter of the bytes of full
    /// f64 rows, half of packed ones, each value within 2^-24 relative of
    /// its f64 value, with every product and sum still in f64. The f64 rows
    /// stay and serve everything else (the diagonal, the dense matrix and so
    /// the log-determinant, multi-vector products), so only the HVP is
    /// inexact. The kernel is [`SingleKernel::from_env`]'s (tiled unless
    /// `MATFREE_F32_HVP=staged`); see
    /// [`DeviceRowHessian::with_single_precision_hvp_kernel`].
    pub fn with_single_precision_hvp(self) -> Result<Self> {
        self.with_single_precision_hvp_kernel(SingleKernel::from_env()?)
    }

    /// [`DeviceRowHessian::with_single_precision_hvp`] read by `kernel`.
    /// Tiled serves shapes up to r = 40 and 48 design columns (the tiles
    /// take as many bytes as packed f32 rows, plus an f32 tiled copy of the
    /// designs, so its products also carry the designs' rounding, 2^-24
    /// relative); wider ones take the staged kernel, which reads the f64
    /// designs, as do designs with a value beyond the float range or a
    /// non-zero below its normal range. Where even four single-precision
    /// rows a stage do not fit the staged kernel's shared memory, or a row
    /// value is beyond the float range, the operator is returned unchanged
    /// (`hvp_precision` says F64). The values are checked on the device and
    /// each kernel's verdict read back once (the tiled one's, then, where
    /// the designs do not fit it, the staged one's).
    pub fn with_single_precision_hvp_kernel(mut self, kernel: SingleKernel) -> Result<Self> {
        if self.single.is_some() {
            return Ok(self);
        }
        if kernel == SingleKernel::Tiled && tiled::supported(&self.args()) {
            match TiledRows::new(&self.gpu, &self.args())? {
                Ok(rows) => {
                    self.grow_partials(rows.blocks())?;
                    self.single = Some(Single::Tiled(rows));
                    return Ok(self);
                }
                Err(NotSingle::Rows) => return Ok(self),
                Err(NotSingle::Designs) => {}
            }
        }
        let Some(plan) = kernels::StagedPlan::new(&self.gpu, &self.args(), kernels::StagedRows::Single)? else {
            return Ok(self);
        };
        let r = self.layout.r();
        let mut rows = self.gpu.zeros::<f32>(self.n * packed_len(r))?;
        let mut overflow = self.gpu.zeros::<f64>(1)?;
        kernels::pack_upper_rows_f32(&self.gpu, self.n, r, self.packed, &self.hess, &mut rows, &mut overflow)?;
        if self.gpu.download(&overflow)?[0] != 0.0 {
            return Ok(self);
        }
        self.grow_partials(plan.blocks(self.n))?;
        self.single = Some(Single::Staged(rows, plan));
        Ok(self)
    }

    /// The precision of the rows the single-vector HVP reads.
    pub fn hvp_precision(&self) -> HvpPrecision {
        match self.single {
            Some(_) => HvpPrecision::F32,
            None => HvpPrecision::F64,
        }
    }

    /// Whether the rows are stored packed (see [`DeviceRowHessian::packed`]).
    pub fn is_packed(&self) -> bool {
        self.packed
    }

    /// Host convenience: H v.
    pub fn hvp_host(&self, v: &[f64]) -> Result<Vec<f64>> {
        let p = self.layout.p_total();
        if v.len() != p {
            return Err(Error::invalid("v.len", v.len(), format!("must equal p_total = {p}")));
        }
        let mut out = self.gpu.zeros(p)?;
        self.hvp_into(&self.gpu.upload(v)?, &mut out)?;
        self.gpu.download(&out)
    }

    /// Host convenience: diag(H).
    pub fn diagonal_host(&self) -> Result<Vec<f64>> {
        let mut out = self.gpu.zeros(self.layout.p_total())?;
        self.diagonal_into(&mut out)?;
        self.gpu.download(&out)
    }

    /// Host convenience: the dense joint Hessian, row-major.
    pub fn dense_host(&self) -> Result<Vec<f64>> {
        let p = self.layout.p_total();
        let mut out = self.gpu.zeros(p * p)?;
        self.dense_into(&mut out)?;
        self.gpu.download(&out)
    }

    /// Host convenience: the joint gradient from host per-row values.
    pub fn joint_gradient_host(&self, neglog: &[f64], grad: &[f64]) -> Result<JointGradient> {
        check_matrix("neglog", neglog, self.n, 1)?;
        check_matrix("grad", grad, self.n, self.layout.r())?;
        self.joint_gradient(&self.gpu.upload(neglog)?, &self.gpu.upload(grad)?)
    }
}

/// Split `[gradient (p), neglog]` as [`DeviceRowHessian::joint_gradient_into`] lays it out.
pub(crate) fn split_joint(mut packed: Vec<f64>) -> JointGradient {
    let neglog = packed.pop().unwrap_or(f64::NAN);
    JointGradient {
        neglog,
        gradient: packed,
    }
}

impl LinearOperator<CudaBackend> for DeviceRowHessian {
    fn dim(&self) -> usize {
        self.layout.p_total()
    }
    fn apply(&self, x: &CudaSlice<f64>, y: &mut CudaSlice<f64>) -> SolverResult<()> {
        expect_len("x", x.len(), self.dim())?;
        expect_len("y", y.len(), self.dim())?;
        self.hvp_into(x, y).map_err(SolverError::from)
    }
    fn apply_multi(&self, x: &CudaSlice<f64>, k: usize, y: &mut CudaSlice<f64>) -> SolverResult<()> {
        expect_len("x", x.len(), self.dim() * k)?;
        expect_len("y", y.len(), self.dim() * k)?;
        self.hvp_multi_into(x, k, y).map_err(SolverError::from)
    }
    fn diagonal(&self, out: &mut CudaSlice<f64>) -> SolverResult<()> {
        expect_len("diagonal", out.len(), self.dim())?;
        self.diagonal_into(out).map_err(SolverError::from)
    }
    fn to_dense(&self) -> SolverResult<Vec<f64>> {
        let mut cache = self.dense_cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(dense) = cache.as_ref() {
            return Ok(dense.clone());
        }
        let dense = self.dense_host()?;
        *cache = Some(dense.clone());
        Ok(dense)
    }
}
