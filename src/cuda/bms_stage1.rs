//! Stage 1 of the BMS model on the device (`kernels/bms_stage1.cu`): q and b
//! from the resident designs, the intercept a per row, every cell's edges
//! and moments, and the observed-point jets; then Stage 2 (`bms_row_bases`),
//! which builds each cell's coefficient arrays from the bases in shared
//! memory instead of reading a bundle of them (about 2 KB a cell, 10.5 GB
//! at the seed shape, written and read once per evaluation before). Per
//! evaluation the host uploads only beta and the bases' per-segment
//! combinations (a few KB) and reads back the status verdict.
//!
//! Every row owns `slots = k_h + k_w + 1` cell slots (the most cells a row
//! can have: one more than the score and link knots together); a row with
//! fewer cells (b = 0, or coinciding edges) marks the rest empty, which
//! Stage 2 sums as exact zeros. The CPU Stage 1 (`bms::cells`,
//! `bms::calibration`) is the oracle: same cells; its adaptive rule's
//! acceptance test (the device integrates with the 21-point Kronrod rule).

use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaSlice, LaunchArgs, LaunchConfig, PushKernelArg};

use super::bms::{check_status, row_grid, stage2_tile, DeviceRowEvaluation, RowOutputs};
use super::row_hessian::DeviceDesigns;
use super::runtime::{cuda_err, Gpu};
use crate::bms::{BmsData, BmsModel, CubicBasis};
use crate::designs::check_matrix;
use crate::{Error, Result};

/// Threads per block of the Stage-1 kernels (one thread per row or cell).
/// `bms_calibrate` and `bms_cell_moments` are compiled with
/// `__launch_bounds__(128, 4)`: a larger block would fail to launch, so
/// change them together.
const THREADS: u32 = 128;

fn grid(items: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (items.div_ceil(THREADS as usize) as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// A basis on the device: knots and per-segment pieces (`[(k + 1), dim, 4]`).
struct DeviceBasis {
    knots: usize,
    dim: usize,
    knots_buf: CudaSlice<f64>,
    pieces: CudaSlice<f64>,
}

impl DeviceBasis {
    fn upload(gpu: &Gpu, basis: Option<&CubicBasis>) -> Result<Self> {
        let Some(b) = basis else {
            return Ok(Self {
                knots: 0,
                dim: 0,
                knots_buf: gpu.zeros(1)?,
                pieces: gpu.zeros(1)?,
            });
        };
        let pieces: Vec<f64> = (0..b.segments()).flat_map(|s| b.segment(s).concat()).collect();
        Ok(Self {
            knots: b.knots().len(),
            dim: b.dim(),
            knots_buf: gpu.upload(b.knots())?,
            pieces: gpu.upload(&pieces)?,
        })
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

/// A queued evaluation: its rows and per-row status, not yet checked.
pub struct PendingRows {
    gpu: Arc<Gpu>,
    rows: DeviceRowEvaluation,
    status: CudaSlice<u32>,
}

impl PendingRows {
    /// Wait for the verdict: the rows, or the first rejected row's error.
    pub fn finish(self) -> Result<DeviceRowEvaluation> {
        check_status(&self.gpu, &self.status)?;
        Ok(self.rows)
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
    /// chi, xi, rho, tau, r_1v (row 1 of r_uv, its only non-zero row and
    /// column), e_obs at the observed points.
    observed: [CudaSlice<f64>; 6],
}

/// Stage 1 and Stage 2 of the BMS model on one GPU for a fixed data set:
/// everything per row is uploaded (or allocated) once, here.
pub struct DeviceStage1 {
    model: BmsModel,
    designs: Arc<DeviceDesigns>,
    score: DeviceBasis,
    link: DeviceBasis,
    slots: usize,
    /// Cells a Stage-2 tile holds, and its shared-memory bytes.
    tile: (usize, usize),
    z: CudaSlice<f64>,
    work: Mutex<Work>,
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
        let blk = model.layout().block();
        if (designs.n(), designs.p_m(), designs.p_g()) != (data.n(), blk.p_m, blk.p_g) {
            let rule = format!(
                "must equal the data's n = {} and the model's (p_m, p_g) = ({}, {})",
                data.n(),
                blk.p_m,
                blk.p_g
            );
            let got = format!("({}, {}, {})", designs.n(), designs.p_m(), designs.p_g());
            return Err(Error::invalid("device designs (n, p_m, p_g)", got, rule));
        }
        let gpu = designs.gpu().clone();
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
        let work = Work::allocate(&gpu, model, data, slots)?;
        let tile = stage2_tile(&gpu, bases.r(), slots)?;
        Ok(Self {
            model: model.clone(),
            designs,
            score,
            link,
            slots,
            tile,
            z: gpu.upload(&data.z)?,
            work: Mutex::new(work),
        })
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
        self.calibrate(&parts, &mut work)?;
        self.cells(&parts, &mut work)?;
        self.observed(&parts, &mut work)?;
        let (rows, mut status) = self.stage2(&parts, &work)?;
        self.merge_status(&work.status, &mut status)?;
        Ok(PendingRows {
            gpu: self.gpu().clone(),
            rows,
            status,
        })
    }

    /// Check beta, upload its parts and take the per-row buffers.
    fn prepare(&self, beta: &[f64]) -> Result<(BetaParts, std::sync::MutexGuard<'_, Work>)> {
        check_matrix("beta", beta, self.model.layout().p_total(), 1)?;
        let parts = self.beta_parts(beta)?;
        let work = self.lock_work()?;
        Ok((parts, work))
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
        let timed = |f: &mut dyn FnMut() -> Result<()>| -> Result<f64> {
            gpu.synchronize()?;
            let t = std::time::Instant::now();
            f()?;
            gpu.synchronize()?;
            Ok(t.elapsed().as_secs_f64())
        };
        Ok(vec![
            ("calibrate", timed(&mut || self.calibrate(&parts, &mut work))?),
            ("cells", timed(&mut || self.cells(&parts, &mut work))?),
            ("observed", timed(&mut || self.observed(&parts, &mut work))?),
            (
                "stage2",
                timed(&mut || {
                    let (_, mut status) = self.stage2(&parts, &work)?;
                    self.merge_status(&work.status, &mut status)?;
                    check_status(&gpu, &status)
                })?,
            ),
        ])
    }

    /// The intercepts a_i of the last evaluation (a download, for tests and
    /// summaries).
    pub fn intercepts(&self) -> Result<Vec<f64>> {
        let work = self.lock_work()?;
        self.gpu().download(&work.a)
    }

    /// The cell moments of the last evaluation, `[n, slots, 10]`.
    pub fn cell_moments(&self) -> Result<Vec<f64>> {
        let work = self.lock_work()?;
        self.gpu().download(&work.moments)
    }

    fn beta_parts(&self, beta: &[f64]) -> Result<BetaParts> {
        let (layout, bases, gpu) = (self.model.layout(), self.model.bases(), self.gpu());
        let blk = layout.block();
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

    fn calibrate(&self, parts: &BetaParts, work: &mut Work) -> Result<()> {
        let (gpu, d) = (self.gpu(), &self.designs);
        let (n, p_m, p_g) = (d.n() as i32, d.p_m() as i32, d.p_g() as i32);
        let s = self.scalars();
        let mut b = gpu.stream.launch_builder(&gpu.f.bms_calibrate);
        b.arg(&n).arg(&p_m).arg(&p_g).arg(d.x_m()).arg(d.x_g());
        b.arg(&parts.beta_m).arg(&parts.beta_g).arg(&parts.rigid);
        self.push_model(&mut b, &s, parts);
        let slots = self.slots as i32;
        b.arg(&mut work.q)
            .arg(&mut work.b)
            .arg(&mut work.a)
            .arg(&mut work.status)
            .arg(&slots)
            .arg(&mut work.bounds);
        // SAFETY: designs n x p_m and n x p_g, beta blocks of those widths,
        // basis buffers as uploaded; outputs hold n values, bounds 4 per
        // slot of the n x slots; one thread a row.
        unsafe { b.launch(grid(d.n())) }.map_err(|e| cuda_err("bms_calibrate", e))?;
        Ok(())
    }

    fn cells(&self, parts: &BetaParts, work: &mut Work) -> Result<()> {
        let gpu = self.gpu();
        let (n, slots) = (self.designs.n() as i32, self.slots as i32);
        let s = self.scalars();
        let mut b = gpu.stream.launch_builder(&gpu.f.bms_cell_moments);
        b.arg(&n).arg(&slots);
        self.push_model(&mut b, &s, parts);
        b.arg(&work.b).arg(&work.a).arg(&work.status);
        b.arg(&mut work.bounds).arg(&mut work.moments);
        // SAFETY: bounds holds 4 and moments 10 values per cell slot, n *
        // slots slots (Work::allocate); one thread per cell slot.
        unsafe { b.launch(grid(self.designs.n() * self.slots)) }.map_err(|e| cuda_err("bms_cell_moments", e))?;
        Ok(())
    }

    /// Stage 2 from the slots' edges and moments: each row's cells' arrays
    /// are built from the bases in shared memory, a tile at a time.
    fn stage2(&self, parts: &BetaParts, work: &Work) -> Result<(DeviceRowEvaluation, CudaSlice<u32>)> {
        let (gpu, layout, bases) = (self.gpu(), self.model.layout(), self.model.bases());
        let n = self.designs.n();
        let mut out = RowOutputs::allocate(gpu, n, layout.r())?;
        let (n32, r32) = (n as i32, layout.r() as i32);
        let (ph, pw, tile) = (bases.p_h() as i32, bases.p_w() as i32, self.tile.0 as i32);
        let s = self.scalars();
        let mut b = gpu.stream.launch_builder(&gpu.f.bms_row_bases);
        b.arg(&n32).arg(&r32).arg(&ph).arg(&pw);
        for a in &work.rows {
            b.arg(a);
        }
        b.arg(&work.offsets);
        self.push_model(&mut b, &s, parts);
        b.arg(&tile)
            .arg(&work.a)
            .arg(&work.b)
            .arg(&work.bounds)
            .arg(&work.moments);
        for a in &work.observed {
            b.arg(a);
        }
        out.push(&mut b);
        // SAFETY: row arrays hold n values, offsets n + 1, bounds and
        // moments 4 and 10 per slot, the observed jets n and n r; the
        // dynamic shared memory is the tile stage2_tile sized (the kernel
        // carves `tile` cells' vectors and scalars); one block per row.
        unsafe { b.launch(row_grid(n, self.tile.1)) }.map_err(|e| cuda_err("bms_row_bases", e))?;
        drop(b);
        out.finish(&self.designs, layout)
    }

    fn observed(&self, parts: &BetaParts, work: &mut Work) -> Result<()> {
        let gpu = self.gpu();
        let bases = self.model.bases();
        let (n, p_h, p_w) = (self.designs.n() as i32, bases.p_h() as i32, bases.p_w() as i32);
        let s = self.scalars();
        let Work {
            q,
            b: row_b,
            a,
            rows,
            observed,
            ..
        } = work;
        let [chi, xi, rho, tau, r1v, e_obs] = observed;
        let [mu_1, mu_2, _, _] = rows;
        let mut b = gpu.stream.launch_builder(&gpu.f.bms_observed);
        b.arg(&n).arg(&p_h).arg(&p_w);
        self.push_model(&mut b, &s, parts);
        b.arg(&parts.beta_h)
            .arg(&parts.beta_w)
            .arg(&*q)
            .arg(&*row_b)
            .arg(&*a)
            .arg(&self.z);
        b.arg(e_obs)
            .arg(chi)
            .arg(xi)
            .arg(rho)
            .arg(tau)
            .arg(r1v)
            .arg(mu_1)
            .arg(mu_2);
        // SAFETY: row arrays hold n values, rho, tau and r_1v n r.
        unsafe { b.launch(grid(self.designs.n())) }.map_err(|e| cuda_err("bms_observed", e))?;
        Ok(())
    }

    fn merge_status(&self, first: &CudaSlice<u32>, second: &mut CudaSlice<u32>) -> Result<()> {
        let gpu = self.gpu();
        let n = self.designs.n() as i32;
        let mut b = gpu.stream.launch_builder(&gpu.f.merge_status);
        b.arg(&n).arg(first).arg(second);
        // SAFETY: both status arrays hold n values.
        unsafe { b.launch(grid(self.designs.n())) }.map_err(|e| cuda_err("merge_status", e))?;
        Ok(())
    }
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
            rows: [z(n)?, z(n)?, gpu.upload(&data.y)?, gpu.upload(&data.w)?],
            offsets: gpu.upload(&offsets)?,
            bounds: z(4 * c)?,
            moments: z(10 * c)?,
            observed: [z(n)?, z(n)?, z(n * r)?, z(n * r)?, z(n * r)?, z(n)?],
        })
    }
}
