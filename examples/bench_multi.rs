//! Multi-GPU scaling of the row-Hessian operator: HVP time and
//! fixed-iteration Jacobi PCG throughput at the tall shape (r = 20, p = 44)
//! with n = 4,000,000 rows, on one GPU (the single-GPU backend, graphs
//! included) and on groups of 1, 2, ... GPUs (rows sharded, products
//! combined through NCCL). Prints a table and JSON (`--json FILE` also
//! writes it). Needs a GPU (MATFREE_GPU=auto or required).
//!
//!     cargo run --release --example bench_multi [-- --n 4000000 --gpus 1,2 --json multi.json]
//!
//! HVP: median of 5 batches of 50 back-to-back products, one sync of every
//! device per batch. PCG: tolerance 0, `--iterations` (40) iterations, rate
//! = iterations / wall time of the solve (setup and the final true-residual
//! product included), median of 5 solves.

use std::time::Instant;

use clap::Parser;
use matfree::cuda::{CudaBackend, DeviceRowHessian, Gpu, GpuGroup, MultiGpuBackend, ShardedRowHessian};
use matfree::fixture::{random_row_problem, Rng, Shape};
use matfree::solvers::{cg, Jacobi, LinearOperator, PcgKernels, PcgOptions};
use matfree::RowHessian;
use serde::Serialize;

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

#[derive(Parser, Debug)]
#[command(about = "HVP and PCG scaling over several GPUs (NCCL)")]
struct Args {
    /// Rows of the tall shape (r = 20, p = 44).
    #[arg(long, default_value_t = 4_000_000)]
    n: usize,
    /// Group sizes to measure (default: 1 and every visible GPU).
    #[arg(long, value_delimiter = ',')]
    gpus: Vec<usize>,
    /// Iterations of each fixed-iteration PCG solve.
    #[arg(long, default_value_t = 40)]
    iterations: usize,
    /// Also write the JSON here.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

#[derive(Serialize)]
struct Row {
    config: String,
    gpus: usize,
    hvp_seconds: f64,
    pcg_iterations: usize,
    pcg_iterations_per_second: f64,
    hvp_speedup_vs_one_gpu: f64,
    pcg_speedup_vs_one_gpu: f64,
    hvp_max_rel_diff_vs_one_gpu: f64,
}

/// Median of `reps` timings of `f`.
fn median(reps: usize, mut f: impl FnMut() -> AnyResult<f64>) -> AnyResult<f64> {
    let mut t = (0..reps).map(|_| f()).collect::<AnyResult<Vec<f64>>>()?;
    t.sort_by(f64::total_cmp);
    Ok(t[reps / 2])
}

/// What one configuration measured.
struct Measured {
    hvp_seconds: f64,
    hvp: Vec<f64>,
    iterations: usize,
    rate: f64,
}

/// HVP time (with `sync` waiting for every device) and PCG rate of `op`.
fn measure<B: PcgKernels>(
    be: &B,
    op: &dyn LinearOperator<B>,
    sync: &dyn Fn() -> AnyResult<()>,
    its: usize,
) -> AnyResult<Measured> {
    let p = op.dim();
    let v = be.upload(&Rng::new(1).normals(p))?;
    let mut y = be.zeros(p)?;
    let reps = 50;
    let hvp_seconds = median(5, || {
        sync()?;
        let t = Instant::now();
        for _ in 0..reps {
            op.apply(&v, &mut y)?;
        }
        sync()?;
        Ok(t.elapsed().as_secs_f64() / reps as f64)
    })?;
    let hvp = be.download(&y)?;
    let mut diag = be.zeros(p)?;
    op.diagonal(&mut diag)?;
    let jac = Jacobi::new(be, &diag, None, 0.0)?;
    let mut iterations = 0;
    let per_iteration = median(5, || {
        let t = Instant::now();
        let info = cg(be, op, &jac, &v, None, &PcgOptions::fixed_iterations(its))?.info;
        iterations = info.iterations;
        Ok(t.elapsed().as_secs_f64() / info.iterations.max(1) as f64)
    })?;
    Ok(Measured {
        hvp_seconds,
        hvp,
        iterations,
        rate: 1.0 / per_iteration,
    })
}

fn one_gpu(op: &RowHessian, its: usize) -> AnyResult<Measured> {
    let gpu = Gpu::open(0)?;
    let be = CudaBackend::new(gpu.clone())?;
    let dev = DeviceRowHessian::from_cpu(gpu.clone(), op)?;
    measure(&be, &dev, &|| Ok(gpu.synchronize()?), its)
}

fn group(op: &RowHessian, count: usize, its: usize) -> AnyResult<Measured> {
    let group = GpuGroup::open(count)?;
    eprintln!("  {}", group.describe());
    let be = MultiGpuBackend::new(group.clone())?;
    let sharded = ShardedRowHessian::from_cpu(group.clone(), op)?;
    let sync = || -> AnyResult<()> {
        for g in group.gpus() {
            g.synchronize()?;
        }
        Ok(())
    };
    measure(&be, &sharded, &sync, its)
}

fn row(config: String, gpus: usize, m: &Measured, base: &Measured) -> Row {
    let scale = base.hvp.iter().fold(0.0f64, |a, v| a.max(v.abs()));
    let diff = m
        .hvp
        .iter()
        .zip(&base.hvp)
        .fold(0.0f64, |a, (x, y)| a.max((x - y).abs()));
    Row {
        config,
        gpus,
        hvp_seconds: m.hvp_seconds,
        pcg_iterations: m.iterations,
        pcg_iterations_per_second: m.rate,
        hvp_speedup_vs_one_gpu: base.hvp_seconds / m.hvp_seconds,
        pcg_speedup_vs_one_gpu: m.rate / base.rate,
        hvp_max_rel_diff_vs_one_gpu: diff / scale,
    }
}

fn table(rows: &[Row]) -> String {
    let mut s = format!(
        "{:<28} {:>5} {:>12} {:>10} {:>10} {:>12} {:>10}\n",
        "config", "gpus", "HVP", "HVP x", "PCG it/s", "PCG x", "HVP diff"
    );
    for r in rows {
        s += &format!(
            "{:<28} {:>5} {:>10.1}us {:>9.2}x {:>10.0} {:>11.2}x {:>10.1e}\n",
            r.config,
            r.gpus,
            r.hvp_seconds * 1e6,
            r.hvp_speedup_vs_one_gpu,
            r.pcg_iterations_per_second,
            r.pcg_speedup_vs_one_gpu,
            r.hvp_max_rel_diff_vs_one_gpu,
        );
    }
    s
}

fn main() -> AnyResult<()> {
    let args = Args::parse();
    let visible = Gpu::count()?;
    let counts = if args.gpus.is_empty() {
        let mut c = vec![1, visible];
        c.dedup();
        c
    } else {
        args.gpus.clone()
    };
    let shape = Shape {
        n: args.n,
        ..Shape::SEED
    };
    eprintln!("{visible} GPUs visible; shape {shape:?}; generating rows");
    let t = Instant::now();
    let op = random_row_problem(shape, 1.0, 7)?;
    eprintln!("generated in {:.1} s; one GPU", t.elapsed().as_secs_f64());
    let base = one_gpu(&op, args.iterations)?;
    let mut rows = vec![row("one gpu (CudaBackend)".into(), 1, &base, &base)];
    for count in counts {
        eprintln!("group of {count}");
        let m = group(&op, count, args.iterations)?;
        rows.push(row("group (MultiGpuBackend)".into(), count, &m, &base));
    }
    print!("{}", table(&rows));
    println!("target: HVP and PCG speedup >= 1.8x on two GPUs");
    let json = serde_json::to_string_pretty(&serde_json::json!({
        "shape": shape,
        "visible_gpus": visible,
        "pcg_fixed_iterations": args.iterations,
        "rows": rows,
    }))?;
    println!("{json}");
    if let Some(path) = args.json {
        std::fs::write(&path, &json).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}
