//! The tiled single-precision HVP (`kernels/hvp_tiled.cu`): row Hessians
//! and designs rounded to f32 and laid out in tiles of 32 rows, entry-major
//! within a tile, so that a warp reads each entry of
//! its 32 rows in one 128-byte load and a lane holds its row's product in
//! registers. The kernel is compiled for the operator's shape (r, p_m,
//! p_g) the first time that shape asks for it, then cached per device.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{CudaSlice, CudaView, CudaViewMut, LaunchConfig, PushKernelArg};

use super::kernels::{launch_dependent, Params, RowArgs};
use super::runtime::{cuda_err, Gpu, KernelModule, LoadedKernels};
use crate::{Error, Result};

/// Rows a tile holds (a warp's lanes).
const TILE: usize = 32;

/// The tiled kernel's block (its TILED_WARPS and TILED_MIN_BLOCKS): 2
/// warps, as many blocks as the 254 registers allow (4 an SM on an H200),
/// the fastest of the shapes swept at every size (`benches/RESULTS.md`,
/// session 14).
const BLOCK: TiledBlock = TiledBlock {
    warps: 2,
    min_blocks: 1,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct TiledBlock {
    warps: usize,
    min_blocks: usize,
}

/// `MATFREE_TILED_SHAPE=warps,min_blocks` replaces [`BLOCK`] for tuning
/// sweeps; unset, the preset holds.
fn block() -> Result<TiledBlock> {
    let Ok(text) = std::env::var("MATFREE_TILED_SHAPE") else {
        return Ok(BLOCK);
    };
    let v: Vec<usize> = text.split(',').filter_map(|t| t.trim().parse().ok()).collect();
    match v[..] {
        [warps @ 1..=32, min_blocks @ 1..=32] => Ok(TiledBlock { warps, min_blocks }),
        _ => Err(Error::invalid(
            "MATFREE_TILED_SHAPE",
            text,
            "must be warps (1-32),min blocks (1-32)",
        )),
    }
}

/// Widest shape compiled: t (r doubles a lane) must stay in registers, and
/// the lanes' sums (p_total doubles each) fit shared memory. Wider
/// operators keep the staged kernel.
const MAX_R: usize = 40;
const MAX_DESIGN: usize = 48;

/// Whether the tiled kernel serves an operator of this shape.
pub(crate) fn supported(a: &RowArgs) -> bool {
    a.pair
        .is_some_and(|(p_m, p_g)| a.r >= 2 && a.r <= MAX_R && p_m + p_g <= MAX_DESIGN)
}

/// The tiled kernels' source, with the packed-index helper it shares with
/// `row_hessian.cu` ahead of it.
const TILED_SOURCE: &str = concat!(
    include_str!("../../kernels/pdl.cuh"),
    include_str!("../../kernels/packed_index.cuh"),
    include_str!("../../kernels/hvp_tiled.cu")
);

/// The module for one shape: its defines ahead of the shared source. Each
/// shape's module is made once a process (a fit has one shape; a test run a
/// handful), and lives as long as the process, as the cache keyed by its
/// name does.
fn module(r: usize, p_m: usize, p_g: usize, b: TiledBlock) -> Result<&'static KernelModule> {
    type Key = (usize, usize, usize, TiledBlock);
    static MODULES: OnceLock<Mutex<HashMap<Key, &'static KernelModule>>> = OnceLock::new();
    let mut modules = MODULES
        .get_or_init(Default::default)
        .lock()
        .map_err(|_| Error::Cuda("tiled kernel modules poisoned".into()))?;
    let made = modules.entry((r, p_m, p_g, b)).or_insert_with(|| {
        let (w, m) = (b.warps, b.min_blocks);
        let defines = format!(
            "#define TILED_R {r}\n#define TILED_PM {p_m}\n#define TILED_PG {p_g}\n\
             #define TILED_WARPS {w}\n#define TILED_MIN_BLOCKS {m}\n"
        );
        Box::leak(Box::new(KernelModule {
            name: Box::leak(
                format!("hvp_tiled.cu (r {r}, p_m {p_m}, p_g {p_g}, {w} warps, {m} blocks)").into_boxed_str(),
            ),
            source: Box::leak((defines + TILED_SOURCE).into_boxed_str()),
            kernels: &["hvp_tiled", "tile_rows_f32", "tile_design_f32"],
            staging: &["hvp_tiled"],
        }))
    });
    Ok(made)
}

/// Why an operator's values cannot be tiled in single precision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NotSingle {
    /// A row Hessian value is beyond the float range.
    Rows,
    /// A design value is beyond the float range, or a non-zero below its
    /// normal range (the f64 designs of the staged kernel serve it).
    Designs,
}

/// An operator's rows and designs in tiles, and the kernel for its shape.
pub(crate) struct TiledRows {
    kernels: Arc<LoadedKernels>,
    h: CudaSlice<f32>,
    x_m: CudaSlice<f32>,
    x_g: CudaSlice<f32>,
    tiles: usize,
    tiles_per_block: usize,
    warps: usize,
    shared_bytes: usize,
    /// Blocks an SM holds, and the kernel's registers and spilled bytes
    /// a thread ([`TiledRows::describe`]).
    per_sm: usize,
    regs: i32,
    local_bytes: i32,
}

fn launch_1d(len: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (len.div_ceil(256).max(1) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

impl TiledRows {
    /// Tile the operator's rows and designs, both rounded to f32; the
    /// caller has checked [`supported`]. Values that do not fit a float
    /// (read back once, one synchronisation) give [`NotSingle`].
    pub(crate) fn new(g: &Gpu, a: &RowArgs) -> Result<std::result::Result<Self, NotSingle>> {
        let shape = block()?;
        let shared_bytes = shared_bytes(a, shape.warps);
        if shared_bytes > g.shared_optin {
            let rule = format!("must be <= the device's {} bytes", g.shared_optin);
            return Err(Error::invalid("hvp_tiled shared bytes", shared_bytes, rule));
        }
        let Some((p_m, p_g)) = a.pair else {
            return Err(Error::invalid(
                "layout",
                "not two leading predictors",
                "the tiled HVP serves beta = (beta_0, beta_1, copied blocks)",
            ));
        };
        let kernels = g.kernels(module(a.r, p_m, p_g, shape)?)?;
        let tiles = a.n.div_ceil(TILE);
        let per = a.r * (a.r + 1) / 2;
        let mut h = g.zeros::<f32>(tiles * TILE * per)?;
        let cfg = launch_1d(h.len());
        let (n, packed) = (a.n as i64, a.packed as i32);
        // flags[0]: a row value overflowed; flags[1]: a design value did
        // not fit.
        let mut flags = g.zeros::<f64>(2)?;
        let mut b = g.stream.launch_builder(kernels.get("tile_rows_f32")?);
        b.arg(&n).arg(&packed).arg(a.hess).arg(&mut h).arg(&mut flags);
        // SAFETY: `a.hess` holds n rows of the operator's storage (checked
        // at its construction); `h` holds every tile; one thread a value.
        unsafe { b.launch(cfg) }.map_err(|e| cuda_err("tile_rows_f32", e))?;
        let x_m = tile_design(g, &kernels, a.n, p_m, &a.design(0), &mut flags.slice_mut(1..2))?;
        let x_g = tile_design(g, &kernels, a.n, p_g, &a.design(1), &mut flags.slice_mut(1..2))?;
        match g.download(&flags)?[..] {
            [rows, _] if rows != 0.0 => return Ok(Err(NotSingle::Rows)),
            [_, designs] if designs != 0.0 => return Ok(Err(NotSingle::Designs)),
            _ => {}
        }
        // One wave of resident blocks, each warp taking many tiles (one
        // tile a warp left every warp a single latency-bound pass): as the
        // staged kernel, the count follows the device.
        let k = kernels.get("hvp_tiled")?;
        let threads = (shape.warps * TILE) as u32;
        let per_sm = k
            .occupancy_max_active_blocks_per_multiprocessor(threads, shared_bytes, None)
            .map_err(|e| cuda_err("hvp_tiled occupancy", e))?
            .max(1) as usize;
        let blocks = (g.sm_count * per_sm).min(tiles.div_ceil(shape.warps)).max(1);
        let attr = |what, v: std::result::Result<i32, _>| v.map_err(|e| cuda_err(what, e));
        Ok(Ok(Self {
            regs: attr("hvp_tiled registers", k.num_regs())?,
            local_bytes: attr("hvp_tiled local bytes", k.local_size_bytes())?,
            per_sm,
            warps: shape.warps,
            shared_bytes,
            kernels,
            h,
            x_m,
            x_g,
            tiles,
            tiles_per_block: tiles.div_ceil(blocks).max(1),
        }))
    }

    /// The kernel's resources: registers and spilled bytes a thread, blocks
    /// an SM, blocks and tiles a block.
    pub(crate) fn describe(&self) -> String {
        format!(
            "tiled: {} warps a block, {} registers, {} local bytes a thread; {} blocks an SM; {} blocks of {} tiles",
            self.warps,
            self.regs,
            self.local_bytes,
            self.per_sm,
            self.blocks(),
            self.tiles_per_block
        )
    }

    /// Blocks, and so partials, a product writes.
    pub(crate) fn blocks(&self) -> usize {
        self.tiles.div_ceil(self.tiles_per_block).max(1)
    }

    /// partial[block, :] = the block's tiles' sum of P_i^T H_i P_i v.
    pub(crate) fn hvp(&self, g: &Gpu, a: &RowArgs, v: &CudaSlice<f64>, partial: &mut CudaSlice<f64>) -> Result<()> {
        let blocks = self.blocks();
        for (field, got, want) in [
            ("v", v.len(), a.p_total),
            ("partial", partial.len(), blocks * a.p_total),
        ] {
            if got < want {
                let rule = format!("device buffer must hold at least {want} values");
                return Err(Error::invalid(field, got, rule));
            }
        }
        let cfg = LaunchConfig {
            grid_dim: (blocks as u32, 1, 1),
            block_dim: ((self.warps * TILE) as u32, 1, 1),
            shared_mem_bytes: self.shared_bytes as u32,
        };
        let params = Params::default()
            .long(self.tiles as i64)
            .long(self.tiles_per_block as i64)
            .buf(g, &self.h)
            .buf(g, &self.x_m)
            .buf(g, &self.x_g)
            .buf(g, a.primary_to_beta)
            .buf(g, v)
            .buf(g, partial);
        let f = self.kernels.get("hvp_tiled")?;
        // SAFETY: the kernel's (i64, i64, const float* x3, const int*,
        // const double*, double*); the tiles were made for this operator's
        // shape, which the module was compiled for; v and partial checked above.
        unsafe { launch_dependent(g, f, cfg, params, "hvp_tiled") }
    }
}

/// The kernel's dynamic shared memory: each lane's sums of every
/// coordinate, then v's design part and dc.
fn shared_bytes(a: &RowArgs, warps: usize) -> usize {
    (warps * a.p_total * TILE + a.design_width() + a.r) * 8
}

/// A row-major n x width design in float tiles of 32 rows (zero padded);
/// `flag[0]` is set where a value does not fit a float.
fn tile_design(
    g: &Gpu,
    k: &LoadedKernels,
    n: usize,
    width: usize,
    x: &CudaView<'_, f64>,
    flag: &mut CudaViewMut<'_, f64>,
) -> Result<CudaSlice<f32>> {
    let mut out = g.zeros::<f32>((n.div_ceil(TILE) * TILE * width).max(1))?;
    if width == 0 {
        return Ok(out);
    }
    let (n64, w32, cfg) = (n as i64, width as i32, launch_1d(out.len()));
    let mut b = g.stream.launch_builder(k.get("tile_design_f32")?);
    b.arg(&n64).arg(&w32).arg(x).arg(&mut out).arg(flag);
    // SAFETY: x holds n rows of `width` (the operator's design); out every
    // tile; flag one value.
    unsafe { b.launch(cfg) }.map_err(|e| cuda_err("tile_design_f32", e))?;
    Ok(out)
}
