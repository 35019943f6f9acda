//! Stage 2 of the BMS model on the device: the row kernel (`kernels/bms_row.cu`)
//! turns the Stage-1 bundle (from `bms_stage1` on the device, or uploaded
//! from the CPU Stage 1) into per-row neglog, gradient and Hessian that stay
//! resident, wrapped as a [`DeviceRowHessian`]. The host receives the status
//! verdict (one download), then the joint neglog and gradient.

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaViewMut, LaunchArgs, LaunchConfig, PushKernelArg};

use super::stage1::DeviceStage1;
use crate::bms::model::bundle::RowKernelInputs;
use crate::cuda::packed_len;
use crate::cuda::{cuda_err, DeviceDesigns, DeviceRowEvaluation, DeviceRowHessian, Gpu, KernelModule};
use crate::layout::Layout;
use crate::{Error, Result};

/// The BMS model's kernels (Stage 1 and Stage 2 in one module: Stage 2
/// builds cells' arrays with Stage 1's functions), registered with the
/// runtime here, by the model.
pub static BMS_KERNELS: KernelModule = KernelModule {
    name: "bms_stage1.cu + bms_row.cu",
    // kernels/bms_stage1.cu's parts, in its order (the C++ replay includes
    // that file; NVRTC gets the parts themselves, having no file system).
    source: concat!(
        include_str!("../../../kernels/bms_stage1/basis.cuh"),
        "\n",
        include_str!("../../../kernels/bms_stage1/edges.cuh"),
        "\n",
        include_str!("../../../kernels/bms_stage1/pieces.cuh"),
        "\n",
        include_str!("../../../kernels/bms_stage1/quadrature.cuh"),
        "\n",
        include_str!("../../../kernels/bms_stage1/moments.cuh"),
        "\n",
        include_str!("../../../kernels/bms_stage1/calibration.cuh"),
        "\n",
        include_str!("../../../kernels/bms_stage1/cells.cuh"),
        "\n",
        include_str!("../../../kernels/bms_stage1/observed.cuh"),
        "\n",
        include_str!("../../../kernels/bms_row.cu"),
        "\n",
        include_str!("../../../kernels/bms_row_raw.cu")
    ),
    kernels: &[
        "bms_row",
        "bms_row_bases",
        "bms_row_raw",
        "bms_row_dense3",
        "bms_row_dense4",
        "bms_calibrate",
        "bms_cell_moments",
        "bms_cell_quadrature",
        "bms_observed",
        "merge_status",
        "first_rejected",
    ],
    staging: &[
        "bms_row",
        "bms_row_bases",
        "bms_row_raw",
        "bms_row_dense3",
        "bms_row_dense4",
    ],
};

/// Threads per row block of the row kernel. Two warps with small tiles
/// measured fastest at seed (see STAGE2_BLOCK_BYTES; earlier, 128 threads
/// with one 27-cell tile were 13% slower and 256 threads 41%): more
/// resident blocks hide the latency of each block's barrier-separated
/// phases. `bms_row_bases` is compiled with `__launch_bounds__(64, 12)`: a
/// larger block would fail to launch, so change them together.
const ROW_THREADS: u32 = 64;
// The Q sums' tensor-core steps take whole warps.
const _: () = assert!(ROW_THREADS.is_multiple_of(32));

/// The Stage-2 bundle's arrays on the device, in the row kernel's argument
/// order: `rows` = mu_1, mu_2, y, w; `cells` = c0..c3, a, aa, r, ar, sbb,
/// sbh, sbw, moments; `observed` = chi, xi, rho, tau, r_uv, e_obs.
pub(crate) struct DeviceBundle {
    pub rows: [CudaSlice<f64>; 4],
    pub offsets: CudaSlice<u32>,
    pub cells: [CudaSlice<f64>; 12],
    pub observed: [CudaSlice<f64>; 6],
}

fn upload(gpu: &Gpu, inp: &RowKernelInputs) -> Result<DeviceBundle> {
    // Zero-length arrays (no h or w block) still need a valid pointer.
    let up = |x: &[f64]| {
        if x.is_empty() {
            gpu.zeros::<f64>(1)
        } else {
            gpu.upload(x)
        }
    };
    let k = inp.kernel_arrays();
    let (rows, cells, observed) = (k.rows.map(up), k.cells.map(up), k.observed.map(up));
    Ok(DeviceBundle {
        rows: collect_array(rows)?,
        offsets: gpu.upload(&inp.cell_offsets)?,
        cells: collect_array(cells)?,
        observed: collect_array(observed)?,
    })
}

fn collect_array<const N: usize>(xs: [Result<CudaSlice<f64>>; N]) -> Result<[CudaSlice<f64>; N]> {
    let v = xs.into_iter().collect::<Result<Vec<_>>>()?;
    Ok(v.try_into()
        .unwrap_or_else(|_| unreachable!("length N in, length N out")))
}

/// Run Stage 2 on the device for a validated bundle over uploaded designs.
/// A rejected row (F_a <= 0 or non-finite, or non-finite outputs) fails the
/// whole evaluation with its index and reason; buffers of a failed
/// evaluation are dropped, never handed to a solver.
pub fn evaluate_rows_device(
    designs: &Arc<DeviceDesigns>,
    layout: &Layout,
    inp: &RowKernelInputs,
) -> Result<DeviceRowEvaluation> {
    inp.validate()?;
    let (n, r) = (inp.n_rows, inp.r);
    if n != designs.n() || r != layout.r() {
        let rule = format!(
            "must match the designs' n = {} and the layout's r = {}",
            designs.n(),
            layout.r()
        );
        return Err(Error::invalid("bundle (n_rows, r)", format!("({n}, {r})"), rule));
    }
    let bundle = upload(designs.gpu(), inp)?;
    let (rows, status) = stage2(designs, layout, (inp.p_h, inp.p_w), &bundle)?;
    check_status(designs.gpu(), &status)?;
    Ok(rows)
}

/// Stage 2's outputs: per-row neglog, gradient, Hessian (packed: its upper
/// triangle row by row, r (r + 1) / 2 values) and status.
pub(crate) struct RowOutputs {
    pub neglog: CudaSlice<f64>,
    pub grad: CudaSlice<f64>,
    pub hess: CudaSlice<f64>,
    pub status: CudaSlice<u32>,
}

/// Rows of Stage 2's outputs, for a launch over part of the rows.
pub(crate) struct RowOutputViews<'a> {
    neglog: CudaViewMut<'a, f64>,
    grad: CudaViewMut<'a, f64>,
    hess: CudaViewMut<'a, f64>,
    status: CudaViewMut<'a, u32>,
}

impl RowOutputViews<'_> {
    /// The trailing arguments of both row kernels (after the observed jets).
    pub(crate) fn push<'b>(&'b mut self, b: &mut LaunchArgs<'b>) {
        b.arg(&mut self.neglog)
            .arg(&mut self.grad)
            .arg(&mut self.hess)
            .arg(&mut self.status);
    }
}

impl RowOutputs {
    /// Outputs for n rows of width r, not initialised: the row kernels
    /// write every value of every row they take (the whole packed Hessian,
    /// also for a rejected row), and zeroing the n r^2 Hessians first cost
    /// a memset of 624 MB an evaluation at seed.
    pub(crate) fn allocate(gpu: &Gpu, n: usize, r: usize) -> Result<Self> {
        if n > i32::MAX as usize {
            return Err(Error::invalid("n_rows", n, "must be < 2^31 for the row kernel's grid"));
        }
        // SAFETY: see above; each buffer is written by the row kernel
        // before anything reads it.
        unsafe {
            Ok(Self {
                neglog: gpu.unset(n)?,
                grad: gpu.unset(n * r)?,
                hess: gpu.unset(n * packed_len(r))?,
                status: gpu.unset(n)?,
            })
        }
    }

    /// Rows `rows` of every output (rows of width r).
    pub(crate) fn rows_mut(&mut self, rows: &Range<usize>, r: usize) -> RowOutputViews<'_> {
        let span = |w: usize| rows.start * w..rows.end * w;
        RowOutputViews {
            neglog: self.neglog.slice_mut(span(1)),
            grad: self.grad.slice_mut(span(r)),
            hess: self.hess.slice_mut(span(packed_len(r))),
            status: self.status.slice_mut(span(1)),
        }
    }

    /// The trailing arguments of both row kernels (after the observed jets).
    pub(crate) fn push<'a>(&'a mut self, b: &mut LaunchArgs<'a>) {
        b.arg(&mut self.neglog)
            .arg(&mut self.grad)
            .arg(&mut self.hess)
            .arg(&mut self.status);
    }

    /// The rows as an evaluation over the designs, and the status to check.
    pub(crate) fn finish(
        self,
        designs: &Arc<DeviceDesigns>,
        layout: &Layout,
    ) -> Result<(DeviceRowEvaluation, CudaSlice<u32>)> {
        let hessian = DeviceRowHessian::from_device_packed(layout.clone(), designs.clone(), self.hess)?;
        let rows = DeviceRowEvaluation {
            neglog: self.neglog,
            grad: self.grad,
            hessian,
            joint: None,
        };
        Ok((rows, self.status))
    }
}

/// Most cells a Stage-2 block takes at a time.
const STAGE2_TILE: usize = 32;
/// The kernel's static shared memory: F_a, F_aa and a flag.
const STAGE2_STATIC_BYTES: usize = 4 * 8;
/// The Stage-2 blocks an SM holds: `bms_row_bases`' registers are capped
/// for them (`__launch_bounds__(64, STAGE2_BLOCKS)` in bms_row.cu, which
/// defines the same number), and STAGE2_BLOCK_BYTES keeps their shared
/// memory within the SM's.
const STAGE2_BLOCKS: usize = 12;
/// The shared memory a Stage-2 block may take so that STAGE2_BLOCKS blocks
/// still fit an SM: an H100's or H200's 228 KiB over STAGE2_BLOCKS, less
/// the 1 KiB the driver reserves a block. A row takes the fewest tiles that stay within it: at
/// the fit's shape (r = 16, 23 cells) 2 tiles of 12 where a 12-KiB budget
/// for the cells gave 3 of 8 (Stage 2 at 1M rows, 10 blocks an SM then:
/// 15.36 -> 13.90 ms; one tile of 23, 8 blocks an SM, 16.56), at the seed
/// shape (r = 20, 27 cells) 3 tiles of 9 as before (2 of 14, 9 blocks an
/// SM: 21.2 -> 21.6 ms); H100, benches/RESULTS.md session 33. Measured at
/// seed before (Stage 2 ms, one process): 64 threads with 9-cell tiles 7.49
/// and 7.52, 7-cell 8.20, 14-cell 7.64; 96 threads 9.12 (9 cells), 8.86
/// (14); 128 threads 9.20 (9), 8.83 (14).
const STAGE2_BLOCK_BYTES: usize = (228 << 10) / STAGE2_BLOCKS - (1 << 10);
/// A row's Q sums G (their packed upper triangle) live in shared memory up
/// to this width, in the row's Hessian output beyond.
const G_SHARED_MAX_R: usize = 39;
/// The doubles a cell's read values take in the tile (CELL_STRIDE in
/// bms_row.cu: 14 read, padded to an odd stride), and its T_n.
const CELL_STRIDE: usize = 15;
const CELL_T: usize = 7;

/// How a Stage-2 block uses its dynamic shared memory (`tile_layout` in
/// bms_row.cu).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stage2Tile {
    /// Cells a tile holds.
    pub cells: usize,
    /// Dynamic shared-memory bytes.
    pub bytes: usize,
    /// Whether the row's Q sums G (r (r + 1) / 2 doubles) sit in shared
    /// memory (1) or in the row's Hessian output (0).
    pub g_shared: i32,
}

/// The Stage-2 tile for rows of at most `cells` cells: each cell takes
/// (4 r + 1) + 3 (r | 1) + CELL_STRIDE + CELL_T doubles (its X vectors,
/// three scalars a coordinate, its edges, segments and moments, its T_n,
/// each stride odd so that a warp's stores to consecutive cells meet no
/// bank conflict: `tile_layout` in bms_row.cu), the row 3 r more (the
/// running sums of D(S_1u), D(X_u), D(AR_u)) and, up to r = G_SHARED_MAX_R,
/// r (r + 1) / 2 more for G. (G in shared memory took 0.1 ms off Stage 2 at
/// seed, r = 20; at larger r it would cost blocks an SM, not measured, so G
/// stays in global memory there, as it always was.) The
/// tiles of a row are balanced, so a row of 40 cells is two tiles of 20,
/// not 32 and 8.
pub(crate) fn stage2_tile(gpu: &Gpu, r: usize, cells: usize) -> Result<Stage2Tile> {
    let cell = cell_bytes(r);
    let g_shared = r <= G_SHARED_MAX_R;
    let row = row_bytes(r);
    let tile = tile_cells(cell, row, cells);
    let bytes = tile * cell + row;
    if bytes + STAGE2_STATIC_BYTES > gpu.shared_optin {
        let rule = format!("one cell's Stage-2 arrays ({cell} bytes) must fit the device's shared memory");
        return Err(Error::invalid("r", r, rule));
    }
    Ok(Stage2Tile {
        cells: tile,
        bytes,
        g_shared: g_shared as i32,
    })
}

/// The bytes a cell takes in a Stage-2 tile (see [`stage2_tile`]).
fn cell_bytes(r: usize) -> usize {
    ((4 * r + 1) + 3 * (r | 1) + CELL_STRIDE + CELL_T) * 8
}

/// The bytes a row's running sums take in a Stage-2 block (see
/// [`stage2_tile`]).
fn row_bytes(r: usize) -> usize {
    (3 * r + if r <= G_SHARED_MAX_R { packed_len(r) } else { 0 }) * 8
}

/// The cells of a balanced tile for rows of `cells` cells: the fewest
/// tiles whose block (tile, the row's `row` bytes and the static arrays)
/// stays within STAGE2_BLOCK_BYTES, at most STAGE2_TILE cells; one cell
/// where even that does not fit.
fn tile_cells(cell: usize, row: usize, cells: usize) -> usize {
    let cells = cells.max(1);
    (cells.div_ceil(STAGE2_TILE)..=cells)
        .map(|tiles| cells.div_ceil(tiles))
        .find(|tile| tile * cell + row + STAGE2_STATIC_BYTES <= STAGE2_BLOCK_BYTES)
        .unwrap_or(1)
}

/// Rows (a warp each) a block of `bms_row_raw` takes: RAW_WARPS in
/// bms_row_raw.cu, whose `__launch_bounds__` allow no more threads.
const RAW_WARPS: usize = 4;
/// Blocks an SM the raw kernels' registers allow (RAW_BLOCKS there: at most
/// 128 registers a thread).
const RAW_BLOCKS: usize = 16 / RAW_WARPS;
/// Most cells a `bms_row_raw` tile holds (a lane builds each). A warp could
/// build 32 at once, but one tile of 27 cells at the seed shape left room
/// for 5 blocks an SM (occupancy 15.6%): Stage 2 took 20.9 ms at 1M rows,
/// where a first version with tiles of 14 (8 blocks) took 17.0, though it
/// executed 44% more instructions (H100, benches/RESULTS.md session 40).
/// The dense kernels, whose Q shares the tile's memory, take a row's cells
/// in one tile where that keeps as many blocks an SM (`dense_tile`).
const RAW_TILE: usize = 16;
/// The doubles a cell's values take in a `bms_row_raw` tile (CELL_VALUES).
const RAW_CELL_VALUES: usize = 65;

/// How `bms_row_raw` and `bms_row_dense<NT>` use their dynamic shared
/// memory (`raw_layout` in bms_row_raw.cu): a tile of cells and a row's raw
/// sums, a warp each; and which of them takes the rows.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawTile {
    /// Cells a tile holds.
    pub cells: usize,
    /// Dynamic shared-memory bytes of a block.
    pub bytes: usize,
    /// The kernel: `bms_row_dense3` or `bms_row_dense4` where the row's
    /// r + 2 raw functions fit 3 or 4 tensor-core tiles of 8, else (or when
    /// asked) `bms_row_raw`.
    pub kernel: &'static str,
}

/// The dense kernel for rows of r coordinates (r + 2 raw functions in
/// tiles of 8, the whole raw Q in a warp's registers): None past 4 tiles.
pub fn dense_kernel(r: usize) -> Option<&'static str> {
    match r + 2 {
        0..=24 => Some("bms_row_dense3"),
        25..=32 => Some("bms_row_dense4"),
        _ => None,
    }
}

/// The doubles a warp's row takes in a raw kernel's block (`raw_row_doubles`
/// in bms_row_raw.cu): the side sums, then the tile and the row's Q sums
/// and finish values, which in the dense kernels (`dense`) share the
/// tile's memory.
pub fn raw_row_doubles(r: usize, p_w: usize, tile: usize, dense: bool) -> usize {
    let nr = r + 2;
    let (cells, sums) = (tile * RAW_CELL_VALUES, nr * ((nr + 1) | 1) + 8 * r);
    3 + 2 * p_w + if dense { cells.max(sums) } else { cells + sums }
}

/// The dense kernels' tile for rows of at most `cells` cells: the fewest
/// balanced tiles (at most 32 cells: a lane builds a cell) whose blocks of
/// `block_bytes(tile)` fit as many an SM (`per_sm` bytes, `reserved` a
/// block, at most RAW_BLOCKS) as any split's. At the seed shape one tile
/// of 27 cells: one build where two tiles of 14 took two, each with half
/// the warp's lanes idle.
fn dense_tile(cells: usize, block_bytes: impl Fn(usize) -> usize, per_sm: usize, reserved: usize) -> usize {
    let blocks = |tile: usize| (per_sm / (block_bytes(tile) + reserved)).min(RAW_BLOCKS);
    let tiles = || (cells.div_ceil(32)..=cells).map(|k| cells.div_ceil(k));
    let most = tiles().map(blocks).max().unwrap_or(0);
    tiles().find(|&t| blocks(t) == most).unwrap_or(1)
}

/// The raw kernels' tile for rows of at most `cells` cells with r
/// coordinates and p_w link functions, or None where a block's rows do not
/// fit the device's shared memory (the raw Q sums grow as r^2):
/// `bms_row_bases` takes those. `dense` takes `bms_row_dense<NT>` where it
/// applies (its tile by `dense_tile`), else `bms_row_raw` (balanced tiles
/// of at most RAW_TILE: 27 cells are two tiles of 14). `most` caps either
/// as RAW_TILE does.
pub(crate) fn raw_tile(
    gpu: &Gpu,
    (r, p_w): (usize, usize),
    cells: usize,
    most: Option<usize>,
    dense: bool,
) -> Option<RawTile> {
    let kernel = dense.then(|| dense_kernel(r)).flatten();
    let dense = kernel.is_some();
    let cells = cells.max(1);
    let block_bytes = |tile| RAW_WARPS * raw_row_doubles(r, p_w, tile, dense) * 8;
    let tile = match most {
        None if dense => dense_tile(cells, block_bytes, gpu.shared_per_sm, gpu.shared_reserved),
        _ => cells.div_ceil(cells.div_ceil(most.unwrap_or(RAW_TILE).max(1))),
    };
    let bytes = block_bytes(tile);
    (bytes <= gpu.shared_optin).then_some(RawTile {
        cells: tile,
        bytes,
        kernel: kernel.unwrap_or("bms_row_raw"),
    })
}

/// `bms_row_raw`'s grid: a warp a row, RAW_WARPS rows a block.
pub(crate) fn raw_grid(n: usize, shared_bytes: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.div_ceil(RAW_WARPS) as u32, 1, 1),
        block_dim: ((32 * RAW_WARPS) as u32, 1, 1),
        shared_mem_bytes: shared_bytes as u32,
    }
}

/// One block per row.
pub(crate) fn row_grid(n: usize, shared_bytes: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n as u32, 1, 1),
        block_dim: (ROW_THREADS, 1, 1),
        shared_mem_bytes: shared_bytes as u32,
    }
}

/// Launch the row kernel over a bundle on the device; the caller checks the
/// returned per-row status before handing the rows to anyone.
pub(crate) fn stage2(
    designs: &Arc<DeviceDesigns>,
    layout: &Layout,
    (p_h, p_w): (usize, usize),
    bundle: &DeviceBundle,
) -> Result<(DeviceRowEvaluation, CudaSlice<u32>)> {
    let (n, r) = (designs.n(), layout.r());
    let gpu = designs.gpu().clone();
    let mut out = RowOutputs::allocate(&gpu, n, r)?;
    let (n32, r32, ph, pw) = (n as i32, r as i32, p_h as i32, p_w as i32);
    let tile = stage2_tile(&gpu, r, STAGE2_TILE)?;
    let tile32 = tile.cells as i32;
    let kernels = gpu.kernels(&BMS_KERNELS)?;
    let mut b = gpu.stream.launch_builder(kernels.get("bms_row")?);
    b.arg(&n32).arg(&r32).arg(&ph).arg(&pw);
    for a in &bundle.rows {
        b.arg(a);
    }
    b.arg(&bundle.offsets).arg(&tile32).arg(&tile.g_shared);
    for a in bundle.cells.iter().chain(&bundle.observed) {
        b.arg(a);
    }
    out.push(&mut b);
    // SAFETY: every bundle array holds its n, r, p_h, p_w and cell-count
    // length (validated on upload); outputs are sized n, n r, n r (r + 1) / 2; one
    // block per row, with the shared memory stage2_tile sized.
    unsafe { b.launch(row_grid(n, tile.bytes)) }.map_err(|e| cuda_err("bms_row", e))?;
    drop(b);
    out.finish(designs, layout)
}

/// The status verdict: the first rejected row, if any (one counted download).
pub(crate) fn check_status(gpu: &Gpu, status: &CudaSlice<u32>) -> Result<()> {
    let n = status.len();
    let mut key = gpu.zeros::<u64>(1)?;
    let n32 = n as i32;
    let kernels = gpu.kernels(&BMS_KERNELS)?;
    let mut b = gpu.stream.launch_builder(kernels.get("first_rejected")?);
    b.arg(&n32).arg(status).arg(&mut key);
    let cfg = LaunchConfig {
        grid_dim: (n.div_ceil(256) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: status holds n values (n < 2^31, checked by
    // RowOutputs::allocate), key one; one thread a status.
    unsafe { b.launch(cfg) }.map_err(|e| cuda_err("first_rejected", e))?;
    drop(b);
    gpu.count_sync();
    let key = gpu.stream.clone_dtoh(&key).map_err(|e| cuda_err("row status", e))?[0];
    match key {
        0 => Ok(()),
        key => {
            let row = (u32::MAX - (key >> 32) as u32) as usize;
            let reason = match key as u32 {
                1 => "F_a <= 0 or not finite (the calibration has no increasing root)".to_string(),
                2 => "non-finite neglog, gradient or Hessian".to_string(),
                3 => "no sign change of F found while bracketing the intercept a".to_string(),
                4 => "the intercept's Newton iteration did not converge".to_string(),
                5 => "F(a) or a is not finite while solving for the intercept".to_string(),
                c => format!("status code {c}"),
            };
            Err(Error::RowRejected { row, reason })
        }
    }
}

/// The one call of a device row evaluation: Stage 1 and Stage 2 on the
/// device (see [`DeviceStage1`]) over designs already uploaded. Per-row
/// results stay on the device; the host gets the status verdict here and the
/// joint neglog and gradient from [`DeviceRowEvaluation::joint_gradient`].
/// Repeated evaluations of one data set should hold a [`DeviceStage1`] (as
/// [`super::BmsDeviceObjective`] does), which uploads the rows only once.
pub fn evaluate_device(
    model: &crate::bms::BmsModel,
    data: &crate::bms::BmsData,
    designs: &Arc<DeviceDesigns>,
    beta: &[f64],
) -> Result<DeviceRowEvaluation> {
    DeviceStage1::with_designs(designs.clone(), model, data)?.evaluate(beta)
}

#[cfg(test)]
mod module_tests {
    use super::*;

    /// The fit's shape takes 2 tiles of 12 cells, the seed shape 3 of 9;
    /// every tile but a single cell keeps 12 blocks an SM, and takes the
    /// fewest tiles that do.
    #[test]
    fn tiles_are_the_fewest_that_keep_twelve_blocks_an_sm() {
        let define = format!("#define STAGE2_BLOCKS {STAGE2_BLOCKS}\n");
        assert!(BMS_KERNELS.source.contains(&define), "bms_row.cu must {define:?}");
        let row = row_bytes;
        assert_eq!(tile_cells(cell_bytes(16), row(16), 23), 12);
        assert_eq!(tile_cells(cell_bytes(20), row(20), 27), 9);
        assert_eq!(tile_cells(cell_bytes(4), row(4), 40), 20);
        for r in [2, 4, 16, 20, 33, 64, 200] {
            for cells in [1, 5, 23, 27, 64] {
                let (cell, row) = (cell_bytes(r), row(r));
                let tile = tile_cells(cell, row, cells);
                let fits = |t: usize| t * cell + row + STAGE2_STATIC_BYTES <= STAGE2_BLOCK_BYTES;
                assert!(
                    (1..=STAGE2_TILE.min(cells)).contains(&tile),
                    "r {r}, {cells} cells: {tile}"
                );
                assert!(tile == 1 || fits(tile), "r {r}, {cells} cells: tile {tile} too large");
                // One tile fewer would not fit.
                let tiles = cells.div_ceil(tile);
                if tiles > 1 {
                    let fewer = cells.div_ceil(tiles - 1);
                    assert!(
                        fewer > STAGE2_TILE || !fits(fewer),
                        "r {r}, {cells} cells: {tiles} tiles of {tile}"
                    );
                }
            }
        }
    }

    /// NVRTC gets kernels/bms_stage1.cu's parts in the order that file
    /// includes them (what the C++ replay compiles), then bms_row.cu and
    /// bms_row_raw.cu.
    #[test]
    fn the_embedded_source_is_the_stage1_files_parts_in_order() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
        let top = std::fs::read_to_string(dir.join("bms_stage1.cu")).unwrap();
        let mut want = String::new();
        for line in top.lines().filter(|l| l.starts_with("#include")) {
            let part = line.trim_start_matches("#include").trim().trim_matches('"');
            want += &std::fs::read_to_string(dir.join(part)).unwrap();
            want += "\n";
        }
        want += &std::fs::read_to_string(dir.join("bms_row.cu")).unwrap();
        want += "\n";
        want += &std::fs::read_to_string(dir.join("bms_row_raw.cu")).unwrap();
        assert!(top.lines().filter(|l| l.starts_with("#include")).count() >= 8);
        assert_eq!(BMS_KERNELS.source, want);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An H100's or H200's shared memory: 228 KiB an SM, 1 KiB reserved a block.
    const PER_SM: usize = 228 * 1024;
    const RESERVED: usize = 1024;

    fn bytes(r: usize, p_w: usize) -> impl Fn(usize) -> usize {
        move |tile| RAW_WARPS * raw_row_doubles(r, p_w, tile, true) * 8
    }

    #[test]
    fn the_seed_shapes_cells_take_one_tile_at_full_occupancy() {
        // r = 20, p_w = 8, 27 cells: 19 side sums and 27 x 65 doubles a
        // warp, 4 blocks of 4 warps an SM (the registers' limit).
        let b = bytes(20, 8);
        assert_eq!(raw_row_doubles(20, 8, 27, true), 19 + 27 * 65);
        assert_eq!(PER_SM / (b(27) + RESERVED), 4);
        assert_eq!(dense_tile(27, &b, PER_SM, RESERVED), 27);
    }

    #[test]
    fn a_tile_is_split_only_where_that_fits_more_blocks() {
        // 32 cells a warp do not fit 4 blocks (32 x 65 x 8 x 4 > 57 KB): the
        // fewest tiles that do are two of 16.
        let b = bytes(20, 8);
        assert!(PER_SM / (b(32) + RESERVED) < 4);
        assert_eq!(dense_tile(32, &b, PER_SM, RESERVED), 16);
        // Past 32 cells a lane would build two: at least two tiles.
        assert_eq!(dense_tile(40, &b, PER_SM, RESERVED), 20);
        // Where no split reaches RAW_BLOCKS, the fewest tiles of the most
        // blocks: at a third of the memory, tiles of 27, 14 and 9 cells fit
        // 1, 2 and 3 blocks, and no smaller tile more (Q and the finish's
        // 666 doubles outgrow tiles of 10 cells or fewer).
        let small = PER_SM / 3;
        let blocks = |t: usize| small / (b(t) + RESERVED);
        assert_eq!([27, 14, 9, 1].map(blocks), [1, 2, 3, 3]);
        assert_eq!(dense_tile(27, &b, small, RESERVED), 9);
    }

    #[test]
    fn dense_rows_share_the_tiles_memory_with_q_and_the_scattered_do_not() {
        // r = 20: Q is 22 x 23 doubles and the finish's values 160.
        let sums = 22 * 23 + 160;
        assert_eq!(raw_row_doubles(20, 8, 14, false), 19 + 14 * 65 + sums);
        assert_eq!(raw_row_doubles(20, 8, 14, true), 19 + 14 * 65);
        assert_eq!(raw_row_doubles(20, 8, 1, true), 19 + sums);
    }
}
