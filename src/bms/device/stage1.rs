//! Stage 1 of the BMS model on the device (`kernels/bms_stage1.cu`): q and b
//! from the resident designs, the intercept a per row, every cell's edges
//! and moments, and the observed-point jets; then Stage 2, which builds each
//! cell from the bases in shared memory instead of reading a bundle of
//! coefficient arrays (about 2 KB a cell, 10.5 GB at the seed shape,
//! written and read once per evaluation before): `bms_row_raw`
//! (`kernels/bms_row_raw.cu`, a warp a row, summed over the row's raw
//! functions as the CPU's fused evaluation does) where a row's raw sums fit
//! the shared memory, else `bms_row_bases` (summed over theta). Per
//! evaluation the host uploads only beta and the bases' per-segment
//! combinations (a few KB) and reads back the status verdict (8 bytes: the
//! first rejected row, reduced on the device).
//!
//! An evaluation splits the rows into two parts (`part_ranges`), each on a
//! stream of its own forked from the device's: each part's stream waits for
//! beta's uploads and the outputs' allocation, and the device's stream waits
//! for both parts before anything reads the rows.
//!
//! Every row owns `slots = k_h + k_w + 1` cell slots (the most cells a row
//! can have: one more than the score and link knots together); a row with
//! fewer cells (b = 0, or coinciding edges) marks the rest empty, which
//! Stage 2 sums as exact zeros. The CPU Stage 1 (`bms::model::cells`,
//! `bms::model::calibration`) is the oracle: the same cells and the same adaptive
//! rule (21-point Kronrod, QUADPACK's error estimate), evaluated in another
//! order and with other math libraries, so the two agree to the parity
//! tests' tolerances, not bitwise.

use std::ops::Range;
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaSlice, CudaStream, CudaView, CudaViewMut, LaunchArgs, LaunchConfig, PushKernelArg};

use super::order::work_order;
use super::rows::{
    check_status, raw_grid, raw_tile, row_grid, stage2_tile, RawTile, RowOutputs, Stage2Tile, BMS_KERNELS,
};
use crate::bms::{BmsData, BmsModel, CubicBasis};
use crate::cuda::packed_len;
use crate::cuda::{cuda_err, DeviceDesigns, DeviceRowEvaluation, DeviceRowEvaluator, Gpu, LoadedKernels, PendingRows};
use crate::designs::check_matrix;
use crate::device::gb;
use crate::layout::Layout;
use crate::{Error, Result};

/// Threads per block of the Stage-1 kernels (one thread per row or cell).
/// `bms_calibrate` (at least 6 blocks an SM) and `bms_cell_quadrature` (4)
/// are compiled with `__launch_bounds__(128, ...)`, as is
/// `bms_cell_moments` (5), whose blocks are CELL_ROWS x CELL_SLOTS threads: a
/// larger block would fail to launch, so change them together.
const THREADS: u32 = 128;

/// An evaluation splits its rows into this many contiguous parts, each on a
/// stream of its own, so that one part's kernels run beside the other's and
/// fill the SMs a kernel's last blocks leave idle. Seed row evaluation on the
/// H200 (benches/RESULTS.md, session 7): one part 11.02-11.13 ms, two
/// 10.03-10.06; three were no faster than two.
const ROW_PARTS: usize = 2;
/// A part takes at least this many rows (fewer take one part; the tests'
/// problems of 300 and 500 rows take two).
const MIN_PART_ROWS: usize = 128;

/// The row ranges of an evaluation's parts.
fn part_ranges(n: usize) -> Vec<Range<usize>> {
    let parts = if n >= ROW_PARTS * MIN_PART_ROWS { ROW_PARTS } else { 1 };
    (0..parts).map(|k| k * n / parts..(k + 1) * n / parts).collect()
}

/// Rows `rows` of a buffer of `width` values a row.
fn rows_of<'a, T>(x: &'a CudaSlice<T>, rows: &Range<usize>, width: usize) -> CudaView<'a, T> {
    x.slice(rows.start * width..rows.end * width)
}

fn rows_of_mut<'a, T>(x: &'a mut CudaSlice<T>, rows: &Range<usize>, width: usize) -> CudaViewMut<'a, T> {
    x.slice_mut(rows.start * width..rows.end * width)
}

/// The rows one stream takes: part `index` of [`part_ranges`].
struct Part<'a> {
    index: usize,
    rows: Range<usize>,
    stream: &'a Arc<CudaStream>,
}

impl Part<'_> {
    fn n(&self) -> usize {
        self.rows.len()
    }
}

/// Rows and slots a block of `bms_cell_moments` takes (CELL_ROWS and
/// CELL_SLOTS in kernels/bms_stage1/cells.cuh): a lane a row, a warp a slot.
const CELL_ROWS: usize = 32;
const CELL_SLOTS: usize = 4;

/// `bms_cell_moments`' blocks: the row groups of each group of slots.
fn cell_grid(n: usize, slots: usize) -> LaunchConfig {
    let blocks = n.div_ceil(CELL_ROWS) * slots.div_ceil(CELL_SLOTS);
    LaunchConfig {
        grid_dim: (blocks as u32, 1, 1),
        block_dim: ((CELL_ROWS * CELL_SLOTS) as u32, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Blocks an SM of `bms_cell_quadrature`, whose threads stride over the
/// queued cells (about one in sixteen at the fit's shape): the
/// `__launch_bounds__(128, 4)` minimum, so one wave covers the device (8
/// and 16 measured the same, benches/RESULTS.md session 33).
const QUADRATURE_BLOCKS_PER_SM: usize = 4;

/// Rows a block of `bms_observed` takes (OBS_ROWS in bms_stage1.cu).
const OBS_ROWS: usize = 128;

fn grid(items: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (items.div_ceil(THREADS as usize) as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// A basis on the device: knots and per-segment pieces (`[(k + 1), dim, 4]`),
/// and for `bms_row_raw` its raw B-spline blocks (`[(k + 1), 4, 4]`), their
/// first functions (`[(k + 1)]`) and the functions' linear parts (`[dim, 2]`).
struct DeviceBasis {
    knots: usize,
    dim: usize,
    knots_buf: CudaSlice<f64>,
    pieces: CudaSlice<f64>,
    raw: CudaSlice<f64>,
    first: CudaSlice<f64>,
    linear: CudaSlice<f64>,
}

impl DeviceBasis {
    fn upload(gpu: &Gpu, basis: Option<&CubicBasis>) -> Result<Self> {
        let Some(b) = basis else {
            return Ok(Self {
                knots: 0,
                dim: 0,
                knots_buf: gpu.zeros(1)?,
                pieces: gpu.zeros(1)?,
                raw: gpu.zeros(1)?,
                first: gpu.zeros(1)?,
                linear: gpu.zeros(1)?,
            });
        };
        let segments = 0..b.segments();
        let pieces: Vec<f64> = segments.clone().flat_map(|s| b.segment(s).concat()).collect();
        let raw: Vec<f64> = segments.clone().flat_map(|s| b.raw_block(s).pieces.concat()).collect();
        let first: Vec<f64> = segments.map(|s| b.raw_block(s).first as f64).collect();
        Ok(Self {
            knots: b.knots().len(),
            dim: b.dim(),
            knots_buf: gpu.upload(b.knots())?,
            pieces: gpu.upload(&pieces)?,
            raw: gpu.upload(&raw)?,
            first: gpu.upload(&first)?,
            linear: gpu.upload(&b.linear_parts().concat())?,
        })
    }
}

/// The raw kernels' tile where they take the rows, None where
/// `bms_row_bases` does. Two benchmark knobs, the values the same either
/// way: `MATFREE_BMS_STAGE2=dense` (the default: `bms_row_dense<NT>` where
/// the row's raw functions fit 4 tiles of 8, else `bms_row_raw` where its
/// sums fit), `raw` (`bms_row_raw` where they fit) or `bases` (the kernel
/// over theta), and `most` (`MATFREE_BMS_RAW_TILE=K`, [`raw_tile_most`])
/// the raw kernels' most cells a tile; any other value is an error.
fn stage2_choice(gpu: &Gpu, r: usize, p_w: usize, slots: usize, most: Option<usize>) -> Result<Option<RawTile>> {
    match std::env::var("MATFREE_BMS_STAGE2").as_deref() {
        Ok("bases") => Ok(None),
        Ok("dense") | Err(_) => Ok(raw_tile(gpu, (r, p_w), slots, most, true)),
        Ok("raw") => Ok(raw_tile(gpu, (r, p_w), slots, most, false)),
        Ok(v) => Err(Error::invalid("MATFREE_BMS_STAGE2", v, "must be dense, raw or bases")),
    }
}

/// `MATFREE_BMS_RAW_TILE`: the raw kernels' most cells a tile, if set.
fn raw_tile_most() -> Result<Option<usize>> {
    match std::env::var("MATFREE_BMS_RAW_TILE") {
        Ok(v) => match v.parse::<usize>() {
            Ok(k) if k > 0 => Ok(Some(k)),
            _ => Err(Error::invalid("MATFREE_BMS_RAW_TILE", v, "must be a positive integer")),
        },
        Err(_) => Ok(None),
    }
}

/// sum_j beta_j piece_j on every segment, `[(k + 1), 4]` (one zero cubic
/// when the block is absent).
fn combinations(basis: Option<&CubicBasis>, beta: &[f64]) -> Vec<f64> {
    match basis {
        Some(b) => (0..b.segments()).flat_map(|s| b.combine(s, beta)).collect(),
        None => vec![0.0; 4],
    }
}

/// Per-row and per-cell-slot buffers written by Stage 1 and read by Stage 2.
struct Work {
    q: CudaSlice<f64>,
    b: CudaSlice<f64>,
    a: CudaSlice<f64>,
    status: CudaSlice<u32>,
    /// mu_1, mu_2 (written per evaluation), y, w (uploaded once).
    rows: [CudaSlice<f64>; 4],
    /// Row i's cell slots are [offsets[i], offsets[i + 1]) = [i slots, ...).
    offsets: CudaSlice<u32>,
    /// Each slot's edges (NaN: empty), its score and link segments, and its
    /// moments: `[n slots, 4]` (lo, hi, seg_h, seg_w), `[n slots, 10]`.
    bounds: CudaSlice<f64>,
    moments: CudaSlice<f64>,
    /// The cells whose moments need the quadrature, by index within their
    /// part (`[n slots]`, each part's at its rows' slots), and how many each
    /// part queued (`[ROW_PARTS]`): `bms_cell_moments` fills them,
    /// `bms_cell_quadrature` takes them.
    queue: CudaSlice<u32>,
    queued: CudaSlice<u32>,
    /// chi, xi, rho, tau, r_1v (row 1 of r_uv, its only non-zero row and
    /// column), e_obs at the observed points.
    observed: [CudaSlice<f64>; 6],
    /// The rows of each part in the order Stage 1's threads take them
    /// (indices within the part; see [`super::order`]): data order until
    /// the second evaluation, then [`super::order::work_order`] of the
    /// first evaluation's q and b.
    order: CudaSlice<u32>,
    /// Evaluations launched.
    launches: usize,
}

/// Stage 1 and Stage 2 of the BMS model on one GPU for a fixed data set:
/// everything per row is uploaded (or allocated) once, here.
pub struct DeviceStage1 {
    model: BmsModel,
    designs: Arc<DeviceDesigns>,
    score: DeviceBasis,
    link: DeviceBasis,
    slots: usize,
    /// How a Stage-2 block uses its shared memory: `bms_row_raw`'s where
    /// its rows fit (`raw`), else `bms_row_bases`' (`tile`).
    tile: Stage2Tile,
    raw: Option<RawTile>,
    /// `MATFREE_BMS_RAW_TILE`, read once: the raw kernels' most cells a tile.
    raw_most: Option<usize>,
    z: CudaSlice<f64>,
    work: Mutex<Work>,
    /// One stream a part of the rows (`part_ranges`); none where one part
    /// takes them all (on the device's stream).
    streams: Vec<Arc<CudaStream>>,
    /// The model's kernels on this device.
    kernels: Arc<LoadedKernels>,
    /// Whether Stage 1 takes the rows in [`work_order`] from the second
    /// evaluation on (`MATFREE_BMS_ROW_ORDER=data` keeps data order, to
    /// measure what the order saves; the values are the same either way).
    sort_rows: bool,
}

impl DeviceRowEvaluator for DeviceStage1 {
    fn layout(&self) -> &Layout {
        self.model.layout()
    }
    fn designs(&self) -> &Arc<DeviceDesigns> {
        &self.designs
    }
    fn launch(&self, beta: &[f64]) -> Result<PendingRows> {
        DeviceStage1::launch(self, beta)
    }
}

/// The scalars of the kernels' shared model arguments, kept alive for a launch.
struct ModelScalars {
    kh: i32,
    dh: i32,
    kw: i32,
    dw: i32,
    s_f: f64,
}

/// One evaluation's small uploads: beta's blocks and the bases' combinations.
struct BetaParts {
    beta_m: CudaSlice<f64>,
    beta_g: CudaSlice<f64>,
    beta_h: CudaSlice<f64>,
    beta_w: CudaSlice<f64>,
    comb_h: CudaSlice<f64>,
    comb_w: CudaSlice<f64>,
    rigid: i32,
}

impl DeviceStage1 {
    /// Upload the data set (designs, scores, labels, weights), the bases and
    /// the quadrature rules, and allocate the per-row and per-cell-slot
    /// buffers: `slots` cells per row.
    pub fn new(gpu: Arc<Gpu>, model: &BmsModel, data: &BmsData) -> Result<Self> {
        let designs = DeviceDesigns::upload(gpu, &data.designs)?;
        Self::with_designs(designs, model, data)
    }

    /// As [`DeviceStage1::new`] over designs already on the device.
    pub fn with_designs(designs: Arc<DeviceDesigns>, model: &BmsModel, data: &BmsData) -> Result<Self> {
        crate::row_hessian::check_layout_designs(model.layout(), &data.designs)?;
        let blk = model.blocks();
        if (designs.n(), designs.widths()) != (data.n(), &[blk.p_m, blk.p_g][..]) {
            let rule = format!(
                "must equal the data's n = {} and the model's (p_m, p_g) = ({}, {})",
                data.n(),
                blk.p_m,
                blk.p_g
            );
            let got = format!("({}, {:?})", designs.n(), designs.widths());
            return Err(Error::invalid("device designs (n, p_m, p_g)", got, rule));
        }
        let gpu = designs.gpu().clone();
        // The model's kernels compile here, with the upload, the first time
        // (not inside the first evaluation, whose time a fit reports), and
        // are kept for every launch.
        let kernels = gpu.kernels(&BMS_KERNELS)?;
        let bases = model.bases();
        let (score, link) = (
            DeviceBasis::upload(&gpu, bases.score.as_ref())?,
            DeviceBasis::upload(&gpu, bases.link.as_ref())?,
        );
        let slots = score.knots + link.knots + 1;
        let n = data.n();
        if n > i32::MAX as usize || (n * slots) as u64 > u32::MAX as u64 {
            let rule = format!("n and n * {slots} cell slots must fit the kernels' 32-bit indices");
            return Err(Error::invalid("n", n, rule));
        }
        check_memory(&gpu, n, bases.r(), slots)?;
        let work = Work::allocate(&gpu, model, data, slots)?;
        let tile = stage2_tile(&gpu, bases.r(), slots)?;
        let raw_most = raw_tile_most()?;
        let raw = stage2_choice(&gpu, bases.r(), bases.p_w(), slots, raw_most)?;
        // One part runs on the device's stream; more take a stream each.
        let parts = part_ranges(n).len();
        let streams = (0..if parts > 1 { parts } else { 0 })
            .map(|_| gpu.stream.fork())
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| cuda_err("creating a stream", e))?;
        Ok(Self {
            model: model.clone(),
            designs,
            score,
            link,
            slots,
            tile,
            raw,
            raw_most,
            z: gpu.upload(&data.z)?,
            work: Mutex::new(work),
            streams,
            kernels,
            sort_rows: std::env::var("MATFREE_BMS_ROW_ORDER").map_or(true, |v| v != "data"),
        })
    }

    /// The same evaluator with Stage 2 summed over theta (`bms_row_bases`)
    /// where it would sum over the raw functions: for tests and benchmarks
    /// of the kernel that rows too wide for the raw kernels' shared memory
    /// take.
    pub fn stage2_over_theta(mut self) -> Self {
        self.raw = None;
        self
    }

    /// The same evaluator with Stage 2 over the raw functions by each
    /// cell's block added at its places (`bms_row_raw`) where the dense
    /// tiles (`bms_row_dense<NT>`) would take its rows: for tests and
    /// benchmarks of the kernel that rows of more than 30 coordinates take.
    pub fn stage2_scattered(mut self) -> Self {
        // Its own tile and shared memory: the dense kernels' Q shares the
        // tile's memory, the scattered kernel's does not.
        if self.raw.is_some() {
            let bases = self.model.bases();
            self.raw = raw_tile(self.gpu(), (bases.r(), bases.p_w()), self.slots, self.raw_most, false);
        }
        self
    }

    /// The Stage-2 kernel this evaluator launches.
    pub fn stage2_kernel(&self) -> &'static str {
        self.raw.map_or("bms_row_bases", |raw| raw.kernel)
    }

    /// Cell slots per row.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// The designs on the device.
    pub fn designs(&self) -> &Arc<DeviceDesigns> {
        &self.designs
    }

    fn gpu(&self) -> &Arc<Gpu> {
        self.designs.gpu()
    }

    /// Both stages at beta. Per-row results stay on the device; a row whose
    /// intercept or outputs fail is reported with its index and reason.
    pub fn evaluate(&self, beta: &[f64]) -> Result<DeviceRowEvaluation> {
        self.launch(beta)?.finish()
    }

    /// Queue both stages at beta without waiting: several devices' shards
    /// then run at once, and [`PendingRows::finish`] reads each verdict.
    /// The stream orders the next launch's reuse of the buffers after this one.
    pub fn launch(&self, beta: &[f64]) -> Result<PendingRows> {
        let (parts, mut work) = self.prepare(beta)?;
        if work.launches == 1 && self.sort_rows {
            self.order_rows(&mut work)?;
        }
        work.launches += 1;
        let mut out = RowOutputs::allocate(self.gpu(), self.designs.n(), self.model.layout().r())?;
        // Each part's stream waits for beta's uploads and the outputs.
        self.on_parts(|part| {
            self.calibrate(&parts, &mut work, part)?;
            self.cells(&parts, &mut work, part)?;
            self.observed(&parts, &mut work, part)?;
            self.stage2(&parts, &work, &mut out, part)?;
            self.merge_status(&work.status, &mut out.status, part)
        })?;
        let (rows, status) = out.finish(&self.designs, self.model.layout())?;
        let gpu = self.gpu().clone();
        Ok(PendingRows::new(rows, move || check_status(&gpu, &status)))
    }

    /// Queue work for each part of the rows on its stream, then make the
    /// device's stream wait for every part, also when queueing fails: what
    /// the caller then frees on the device's stream (beta's uploads, the
    /// outputs) must not be reused while a part's kernels still run.
    fn on_parts(&self, mut queue: impl FnMut(&Part) -> Result<()>) -> Result<()> {
        let queued = self.parts().and_then(|parts| parts.iter().try_for_each(&mut queue));
        self.join_parts()?;
        queued
    }

    /// The parts of the rows with their streams, each made to wait for the
    /// work queued so far on the device's stream.
    fn parts(&self) -> Result<Vec<Part<'_>>> {
        let main = &self.gpu().stream;
        let ranges = part_ranges(self.designs.n());
        if self.streams.is_empty() {
            return Ok(ranges
                .into_iter()
                .enumerate()
                .map(|(index, rows)| Part {
                    index,
                    rows,
                    stream: main,
                })
                .collect());
        }
        ranges
            .into_iter()
            .enumerate()
            .zip(&self.streams)
            .map(|((index, rows), stream)| {
                stream.join(main).map_err(|e| cuda_err("stream order", e))?;
                Ok(Part { index, rows, stream })
            })
            .collect()
    }

    /// Make the device's stream wait for every part's work.
    fn join_parts(&self) -> Result<()> {
        let main = &self.gpu().stream;
        for stream in &self.streams {
            main.join(stream).map_err(|e| cuda_err("stream order", e))?;
        }
        Ok(())
    }

    /// Check beta, upload its parts and take the per-row buffers.
    fn prepare(&self, beta: &[f64]) -> Result<(BetaParts, std::sync::MutexGuard<'_, Work>)> {
        check_matrix("beta", beta, self.model.layout().p_total(), 1)?;
        let parts = self.beta_parts(beta)?;
        let work = self.lock_work()?;
        Ok((parts, work))
    }

    /// The order Stage 1's threads take each part's rows in (indices
    /// within the part, the parts one after another).
    pub fn row_order(&self) -> Result<Vec<u32>> {
        let work = self.lock_work()?;
        self.gpu().count_sync();
        self.gpu()
            .stream
            .clone_dtoh(&work.order)
            .map_err(|e| cuda_err("downloading the row order", e))
    }

    /// Order each part's rows for Stage 1's threads by the last
    /// evaluation's q and b ([`work_order`]; one download of 2n values).
    fn order_rows(&self, work: &mut Work) -> Result<()> {
        let gpu = self.gpu();
        let (q, b) = (gpu.download(&work.q)?, gpu.download(&work.b)?);
        let order = part_indices(q.len(), |rows| work_order(&q[rows.clone()], &b[rows]));
        gpu.stream
            .memcpy_htod(&order, &mut work.order)
            .map_err(|e| cuda_err("uploading the row order", e))
    }

    fn lock_work(&self) -> Result<std::sync::MutexGuard<'_, Work>> {
        self.work
            .lock()
            .map_err(|_| Error::Cuda("stage-1 buffers poisoned".into()))
    }

    /// Seconds per kernel of one evaluation (calibration, cells, observed
    /// jets, Stage 2 with its verdict), each followed by a synchronisation:
    /// where the time of [`DeviceStage1::evaluate`] goes.
    pub fn profile(&self, beta: &[f64]) -> Result<Vec<(&'static str, f64)>> {
        let (parts, mut work) = self.prepare(beta)?;
        let gpu = self.gpu().clone();
        let mut out = RowOutputs::allocate(&gpu, self.designs.n(), self.model.layout().r())?;
        // Each kernel over every part, then the parts joined and waited for.
        let mut timed = |f: &mut dyn FnMut(&mut Work, &mut RowOutputs, &Part) -> Result<()>| -> Result<f64> {
            gpu.synchronize()?;
            let t = std::time::Instant::now();
            self.on_parts(|part| f(&mut work, &mut out, part))?;
            gpu.synchronize()?;
            Ok(t.elapsed().as_secs_f64())
        };
        let calibrate = timed(&mut |w, _, p| self.calibrate(&parts, w, p))?;
        let cells = timed(&mut |w, _, p| self.cells(&parts, w, p))?;
        let observed = timed(&mut |w, _, p| self.observed(&parts, w, p))?;
        let stage2 = timed(&mut |w, o, p| {
            self.stage2(&parts, w, o, p)?;
            self.merge_status(&w.status, &mut o.status, p)
        })?;
        check_status(&gpu, &out.status)?;
        Ok(vec![
            ("calibrate", calibrate),
            ("cells", cells),
            ("observed", observed),
            ("stage2", stage2),
        ])
    }

    /// The row kernels' registers and local (spilled) bytes a thread, as
    /// the driver compiled them for this device: what a register cap
    /// (`__launch_bounds__`) costs shows here first.
    pub fn kernel_resources(&self) -> Result<Vec<(&'static str, i32, i32)>> {
        let kernels = self.gpu().kernels(&BMS_KERNELS)?;
        let names = [
            "bms_calibrate",
            "bms_cell_moments",
            "bms_cell_quadrature",
            "bms_observed",
            "bms_row_bases",
            "bms_row_raw",
            "bms_row_dense3",
            "bms_row_dense4",
        ];
        names
            .into_iter()
            .map(|name| {
                let f = kernels.get(name)?;
                let attr = |v: std::result::Result<i32, _>| v.map_err(|e| cuda_err(name, e));
                Ok((name, attr(f.num_regs())?, attr(f.local_size_bytes())?))
            })
            .collect()
    }

    /// The intercepts a_i of the last evaluation (a download, for tests and
    /// summaries).
    pub fn intercepts(&self) -> Result<Vec<f64>> {
        let work = self.lock_work()?;
        self.gpu().download(&work.a)
    }

    /// eta(z_i) at the solved intercepts of the last evaluation (a
    /// download, for predictions).
    pub fn observed_eta(&self) -> Result<Vec<f64>> {
        let work = self.lock_work()?;
        self.gpu().download(&work.observed[5])
    }

    /// The cell moments of the last evaluation, `[n, slots, 10]`.
    pub fn cell_moments(&self) -> Result<Vec<f64>> {
        let work = self.lock_work()?;
        self.gpu().download(&work.moments)
    }

    fn beta_parts(&self, beta: &[f64]) -> Result<BetaParts> {
        let (bases, gpu) = (self.model.bases(), self.gpu());
        let blk = self.model.blocks();
        let direct = self.model.direct_beta(beta);
        let (beta_h, beta_w) = direct.split_at(bases.p_h());
        let up = |x: &[f64]| if x.is_empty() { gpu.zeros(1) } else { gpu.upload(x) };
        Ok(BetaParts {
            beta_m: up(&beta[blk.m_range()])?,
            beta_g: up(&beta[blk.g_range()])?,
            beta_h: up(beta_h)?,
            beta_w: up(beta_w)?,
            comb_h: up(&combinations(bases.score.as_ref(), beta_h))?,
            comb_w: up(&combinations(bases.link.as_ref(), beta_w))?,
            rigid: direct.iter().all(|v| *v == 0.0) as i32,
        })
    }

    fn scalars(&self) -> ModelScalars {
        ModelScalars {
            kh: self.score.knots as i32,
            dh: self.score.dim as i32,
            kw: self.link.knots as i32,
            dw: self.link.dim as i32,
            s_f: self.model.bases().s_f,
        }
    }

    /// The kernels' shared model arguments, in MODEL_PARAMS order.
    fn push_model<'a>(&'a self, b: &mut LaunchArgs<'a>, s: &'a ModelScalars, parts: &'a BetaParts) {
        b.arg(&s.kh)
            .arg(&s.dh)
            .arg(&self.score.knots_buf)
            .arg(&self.score.pieces)
            .arg(&parts.comb_h)
            .arg(&s.kw)
            .arg(&s.dw)
            .arg(&self.link.knots_buf)
            .arg(&self.link.pieces)
            .arg(&parts.comb_w)
            .arg(&s.s_f);
    }

    fn calibrate(&self, parts: &BetaParts, work: &mut Work, part: &Part) -> Result<()> {
        let (d, rows) = (&self.designs, &part.rows);
        let (n, p_m, p_g) = (part.n() as i32, d.widths()[0] as i32, d.widths()[1] as i32);
        let s = self.scalars();
        let (x_m, x_g) = (d.rows(0, rows), d.rows(1, rows));
        let mut q = rows_of_mut(&mut work.q, rows, 1);
        let mut row_b = rows_of_mut(&mut work.b, rows, 1);
        let mut a = rows_of_mut(&mut work.a, rows, 1);
        let mut status = rows_of_mut(&mut work.status, rows, 1);
        let mut bounds = rows_of_mut(&mut work.bounds, rows, 4 * self.slots);
        let order = rows_of(&work.order, rows, 1);
        let mut b = part.stream.launch_builder(self.kernels.get("bms_calibrate")?);
        b.arg(&n).arg(&order).arg(&p_m).arg(&p_g).arg(&x_m).arg(&x_g);
        b.arg(&parts.beta_m).arg(&parts.beta_g).arg(&parts.rigid);
        self.push_model(&mut b, &s, parts);
        let slots = self.slots as i32;
        b.arg(&mut q)
            .arg(&mut row_b)
            .arg(&mut a)
            .arg(&mut status)
            .arg(&slots)
            .arg(&mut bounds);
        // SAFETY: the part's rows of the designs (n x p_m and n x p_g) and
        // of every output (a value a row, bounds 4 a slot); beta blocks of
        // the designs' widths, basis buffers as uploaded; one thread a row.
        unsafe { b.launch(grid(part.n())) }.map_err(|e| cuda_err("bms_calibrate", e))?;
        Ok(())
    }

    /// The cells' segments and moments: the closed forms a thread a slot,
    /// then the queued cells' quadrature.
    fn cells(&self, parts: &BetaParts, work: &mut Work, part: &Part) -> Result<()> {
        let (rows, slots) = (&part.rows, self.slots);
        let n = part.n() as i32;
        let s = self.scalars();
        let Work {
            b: row_b,
            a,
            status,
            bounds,
            moments,
            order,
            queue,
            queued,
            ..
        } = work;
        let (row_b, a, status) = (rows_of(row_b, rows, 1), rows_of(a, rows, 1), rows_of(status, rows, 1));
        let mut bounds = rows_of_mut(bounds, rows, 4 * slots);
        let mut moments = rows_of_mut(moments, rows, 10 * slots);
        let mut queue = rows_of_mut(queue, rows, slots);
        let mut count = queued.slice_mut(part.index..part.index + 1);
        let order = rows_of(order, rows, 1);
        part.stream
            .memset_zeros(&mut count)
            .map_err(|e| cuda_err("bms_cell_moments queue", e))?;
        let slots32 = slots as i32;
        let mut b = part.stream.launch_builder(self.kernels.get("bms_cell_moments")?);
        b.arg(&n).arg(&order).arg(&slots32);
        self.push_model(&mut b, &s, parts);
        b.arg(&row_b).arg(&a).arg(&status);
        b.arg(&mut bounds).arg(&mut moments).arg(&mut queue).arg(&mut count);
        // SAFETY: the part's rows: bounds 4, moments 10 values and a queue
        // entry per cell slot, `slots` slots a row (Work::allocate), and its
        // count; a block per CELL_ROWS rows and CELL_SLOTS slots.
        unsafe { b.launch(cell_grid(part.n(), slots)) }.map_err(|e| cuda_err("bms_cell_moments", e))?;
        let mut b = part.stream.launch_builder(self.kernels.get("bms_cell_quadrature")?);
        b.arg(&slots32);
        self.push_model(&mut b, &s, parts);
        b.arg(&row_b)
            .arg(&a)
            .arg(&mut bounds)
            .arg(&mut moments)
            .arg(&mut queue)
            .arg(&mut count);
        // SAFETY: as above; the kernel reads at most `count` (<= the part's
        // slots) queue entries, each a slot of the part.
        unsafe { b.launch(self.quadrature_grid(part.n() * slots)) }.map_err(|e| cuda_err("bms_cell_quadrature", e))?;
        Ok(())
    }

    /// `bms_cell_quadrature`'s blocks: a grid-strided loop over a queue that
    /// holds at most `cells` entries, QUADRATURE_BLOCKS_PER_SM blocks an SM.
    fn quadrature_grid(&self, cells: usize) -> LaunchConfig {
        let blocks = cells
            .div_ceil(THREADS as usize)
            .min(self.gpu().sm_count * QUADRATURE_BLOCKS_PER_SM)
            .max(1);
        LaunchConfig {
            grid_dim: (blocks as u32, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// Stage 2 from the slots' edges and moments: each row's cells are built
    /// from the bases in shared memory, a tile at a time, and summed over
    /// the raw functions (`bms_row_raw`) or over theta (`bms_row_bases`).
    /// Both take the same arguments but for their tile's.
    fn stage2(&self, parts: &BetaParts, work: &Work, out: &mut RowOutputs, part: &Part) -> Result<()> {
        let (layout, bases, rows) = (self.model.layout(), self.model.bases(), &part.rows);
        let (n32, r) = (part.n() as i32, layout.r());
        let (r32, ph, pw) = (r as i32, bases.p_h() as i32, bases.p_w() as i32);
        let tile = self.raw.map_or(self.tile.cells, |t| t.cells) as i32;
        let s = self.scalars();
        let row_arrays = work.rows.each_ref().map(|x| rows_of(x, rows, 1));
        // Slot offsets are i * slots: the first n + 1 serve any part, whose
        // slot arrays start at its first row's.
        let offsets = work.offsets.slice(0..part.n() + 1);
        let (a, row_b) = (rows_of(&work.a, rows, 1), rows_of(&work.b, rows, 1));
        let bounds = rows_of(&work.bounds, rows, 4 * self.slots);
        let moments = rows_of(&work.moments, rows, 10 * self.slots);
        let widths = [1, 1, r, r, r, 1];
        let observed: Vec<_> = work
            .observed
            .iter()
            .zip(widths)
            .map(|(x, w)| rows_of(x, rows, w))
            .collect();
        let mut outs = out.rows_mut(rows, r);
        let name = self.stage2_kernel();
        let mut b = part.stream.launch_builder(self.kernels.get(name)?);
        b.arg(&n32).arg(&r32).arg(&ph).arg(&pw);
        for x in &row_arrays {
            b.arg(x);
        }
        b.arg(&offsets);
        self.push_model(&mut b, &s, parts);
        let config = match self.raw {
            Some(raw) => {
                for basis in [&self.score, &self.link] {
                    b.arg(&basis.raw).arg(&basis.first).arg(&basis.linear);
                }
                b.arg(&tile);
                raw_grid(part.n(), raw.bytes)
            }
            None => {
                b.arg(&tile).arg(&self.tile.g_shared);
                row_grid(part.n(), self.tile.bytes)
            }
        };
        b.arg(&a).arg(&row_b).arg(&bounds).arg(&moments);
        for x in &observed {
            b.arg(x);
        }
        outs.push(&mut b);
        // SAFETY: the part's rows of every array: a value a row, bounds and
        // moments 4 and 10 per slot, the observed jets n and n r, outputs
        // n, n r and n r (r + 1) / 2; offsets n + 1; the bases' raw blocks,
        // first functions and linear parts as uploaded (DeviceBasis). The
        // dynamic shared memory is the tile raw_tile sized (a warp a row,
        // RAW_WARPS rows a block, each warp's tile and sums) or stage2_tile
        // sized (a block a row, its cells' vectors and scalars).
        unsafe { b.launch(config) }.map_err(|e| cuda_err(name, e))?;
        Ok(())
    }

    fn observed(&self, parts: &BetaParts, work: &mut Work, part: &Part) -> Result<()> {
        let rows = &part.rows;
        let bases = self.model.bases();
        let r = bases.r();
        let (n, p_h, p_w) = (part.n() as i32, bases.p_h() as i32, bases.p_w() as i32);
        let s = self.scalars();
        let Work {
            q,
            b: row_b,
            a,
            rows: row_arrays,
            observed,
            ..
        } = work;
        let (q, row_b, a, z) = (
            rows_of(q, rows, 1),
            rows_of(row_b, rows, 1),
            rows_of(a, rows, 1),
            rows_of(&self.z, rows, 1),
        );
        let [chi, xi, rho, tau, r1v, e_obs] = observed;
        let [mu_1, mu_2, _, _] = row_arrays;
        let mut views = [
            rows_of_mut(e_obs, rows, 1),
            rows_of_mut(chi, rows, 1),
            rows_of_mut(xi, rows, 1),
            rows_of_mut(rho, rows, r),
            rows_of_mut(tau, rows, r),
            rows_of_mut(r1v, rows, r),
            rows_of_mut(mu_1, rows, 1),
            rows_of_mut(mu_2, rows, 1),
        ];
        let mut b = part.stream.launch_builder(self.kernels.get("bms_observed")?);
        b.arg(&n).arg(&p_h).arg(&p_w);
        self.push_model(&mut b, &s, parts);
        b.arg(&parts.beta_h)
            .arg(&parts.beta_w)
            .arg(&q)
            .arg(&row_b)
            .arg(&a)
            .arg(&z);
        for v in &mut views {
            b.arg(v);
        }
        let cfg = LaunchConfig {
            grid_dim: (part.n().div_ceil(OBS_ROWS) as u32, 1, 1),
            ..grid(part.n())
        };
        // SAFETY: the part's rows: a value a row, rho, tau and r_1v r a
        // row; each block takes OBS_ROWS rows (any block size).
        unsafe { b.launch(cfg) }.map_err(|e| cuda_err("bms_observed", e))?;
        Ok(())
    }

    fn merge_status(&self, first: &CudaSlice<u32>, second: &mut CudaSlice<u32>, part: &Part) -> Result<()> {
        let n = part.n() as i32;
        let first = rows_of(first, &part.rows, 1);
        let mut second = rows_of_mut(second, &part.rows, 1);
        let mut b = part.stream.launch_builder(self.kernels.get("merge_status")?);
        b.arg(&n).arg(&first).arg(&mut second);
        // SAFETY: both status views hold the part's n values.
        unsafe { b.launch(grid(part.n())) }.map_err(|e| cuda_err("merge_status", e))?;
        Ok(())
    }
}

/// Each part's rows as `within` orders them (indices within the part),
/// the parts one after another.
fn part_indices(n: usize, within: impl Fn(Range<usize>) -> Vec<u32>) -> Vec<u32> {
    part_ranges(n).into_iter().flat_map(within).collect()
}

/// Device bytes a row takes: [`Work`] (Stage 1's `slots` cells and the
/// observed jets) and one evaluation's [`RowOutputs`] with its operator's
/// n x r scratch (at the fit's shape, 23 slots and r = 16, 4,500 bytes;
/// the memory pool's peak over a 12M-row fit was 4,549 a row, data and
/// designs included: 54.59 GB, H100, benches/RESULTS.md session 34).
fn bytes_per_row(r: usize, slots: usize) -> u64 {
    let (f64s, u32s) = (3 + 4 + 14 * slots + 3 + 3 * r, 3 + slots);
    let outputs = 8 * (1 + r + packed_len(r) + r) + 4;
    (8 * f64s + 4 * u32s + outputs) as u64
}

/// Whether the rows' buffers fit the device's available memory; where they
/// do not, an error naming the rows, the bytes a row takes and the memory
/// there is, before anything is allocated.
fn check_memory(gpu: &Gpu, n: usize, r: usize, slots: usize) -> Result<()> {
    let m = gpu.memory()?;
    memory_rule(n, r, slots, (m.available, m.total), gpu.name())
}

/// [`check_memory`] against `(available, total)` bytes of device `name`.
fn memory_rule(n: usize, r: usize, slots: usize, (available, total): (u64, u64), name: &str) -> Result<()> {
    let need = n as u64 * bytes_per_row(r, slots);
    if need <= available {
        return Ok(());
    }
    let rule = format!(
        "needs {} of device memory ({} bytes a row: Stage 1's {slots} cell slots and one evaluation's \
         outputs), more than the {} available on {name} ({} in all): shard the rows over several GPUs \
         (fit_bms --gpus), fit fewer rows, or fit on the CPU",
        gb(need),
        bytes_per_row(r, slots),
        gb(available),
        gb(total),
    );
    Err(Error::invalid("n", n, rule))
}

impl Work {
    fn allocate(gpu: &Gpu, model: &BmsModel, data: &BmsData, slots: usize) -> Result<Self> {
        let n = data.n();
        let r = model.bases().r();
        let c = n * slots;
        let z = |len: usize| gpu.zeros::<f64>(len);
        let offsets: Vec<u32> = (0..=n).map(|i| (i * slots) as u32).collect();
        Ok(Self {
            q: z(n)?,
            b: z(n)?,
            a: z(n)?,
            status: gpu.zeros(n)?,
            rows: [z(n)?, z(n)?, gpu.upload(&data.y)?, gpu.upload(&data.weights)?],
            offsets: gpu.upload(&offsets)?,
            bounds: z(4 * c)?,
            moments: z(10 * c)?,
            queue: gpu.zeros(c)?,
            queued: gpu.zeros(ROW_PARTS)?,
            observed: [z(n)?, z(n)?, z(n * r)?, z(n * r)?, z(n * r)?, z(n)?],
            order: gpu.upload(&part_indices(n, |rows| (0..rows.len() as u32).collect()))?,
            launches: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 12M rows at the fit's shape (r = 16, 23 slots) need 54.0 GB: they fit
    /// 79 GB available and are refused, naming n and the bytes a row, with 40.
    #[test]
    fn rows_beyond_the_device_memory_are_refused_by_name() {
        assert_eq!(bytes_per_row(16, 23), 4_500);
        let gb = 1_000_000_000;
        assert!(memory_rule(12_000_000, 16, 23, (79 * gb, 85 * gb), "H100").is_ok());
        let err = memory_rule(12_000_000, 16, 23, (40 * gb, 85 * gb), "H100").unwrap_err();
        let msg = err.to_string();
        for part in [
            "n",
            "12000000",
            "54.00 GB",
            "4500 bytes a row",
            "40.00 GB available on H100",
            "--gpus",
        ] {
            assert!(msg.contains(part), "{part:?} missing from {msg}");
        }
    }

    #[test]
    fn parts_cover_the_rows_in_order_and_small_sets_take_one() {
        for n in [1, 2, 255, 256, 257, 1000, 195_001] {
            let parts = part_ranges(n);
            let want = if n >= ROW_PARTS * MIN_PART_ROWS { ROW_PARTS } else { 1 };
            assert_eq!(parts.len(), want, "n = {n}");
            assert_eq!(parts[0].start, 0, "n = {n}");
            assert_eq!(parts[parts.len() - 1].end, n, "n = {n}");
            for w in parts.windows(2) {
                assert_eq!(w[0].end, w[1].start, "n = {n}: parts must be contiguous");
            }
            // Balanced: sizes differ by at most one row, and none is empty.
            let sizes: Vec<usize> = parts.iter().map(|p| p.len()).collect();
            let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            assert!(*lo >= 1 && hi - lo <= 1, "n = {n}: sizes {sizes:?}");
        }
    }
}
