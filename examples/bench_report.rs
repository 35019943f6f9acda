//! Every performance figure of the toolkit in one process: device copy
//! bandwidth, HVP time against its byte floor (full, packed and packed f32
//! storage),
//! fixed-iteration PCG throughput and a PCG iteration's time beyond its
//! product (timed in adjacent pairs), and the dense Hessian + Cholesky
//! log-determinant, at the small / seed / tall shapes, and the full BMS row
//! evaluation (Stage 1 + Stage 2) at the seed shape, on the GPU (when there
//! is one) and the CPU (row evaluation on 5,000 rows there).
//! Prints a table and JSON (`--json FILE` also writes it). `--gpu-only`
//! skips the CPU rows, `--operators-only` the row evaluation.
//!
//!     cargo run --release --example bench_report [-- --json report.json] [--quick] [--gpu-only] [--operators-only]

use std::time::Instant;

use matfree::bms::device::DeviceStage1;
use matfree::bms::io::generator::{generate, GeneratorConfig};
use matfree::cuda::{
    select_device, CudaBackend, Device, DeviceCholesky, DeviceRowHessian, Gpu, GpuPolicy, HvpPrecision, SingleKernel,
};
use matfree::fixture::{random_row_problem, Rng, Shape};
use matfree::solvers::{cg, Backend, Cholesky, CpuBackend, Jacobi, LinearOperator, Pcg, PcgKernels, PcgOptions};
use matfree::RowHessian;
use serde::Serialize;

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

#[derive(Serialize)]
struct Row {
    device: String,
    shape: String,
    n: usize,
    operation: String,
    seconds: f64,
    bytes_floor: Option<f64>,
    floor_seconds_at_copy_bw: Option<f64>,
    fraction_of_copy_bw: Option<f64>,
    iterations_per_second: Option<f64>,
}

/// n (r^2 + p_m + p_g) doubles: every row Hessian and design row read once.
fn hvp_bytes(s: &Shape) -> f64 {
    let r = 2 + s.p_h + s.p_w;
    (s.n * (r * r + s.p_m + s.p_g) * 8) as f64
}

/// Median of `reps` timings of `f`.
fn median(reps: usize, mut f: impl FnMut() -> AnyResult<f64>) -> AnyResult<f64> {
    let mut t = (0..reps).map(|_| f()).collect::<AnyResult<Vec<f64>>>()?;
    t.sort_by(f64::total_cmp);
    Ok(t[reps / 2])
}

fn copy_bandwidth(gpu: &Gpu) -> AnyResult<f64> {
    let n = (1usize << 30) / 8;
    let (src, mut dst) = (gpu.zeros::<f64>(n)?, gpu.zeros::<f64>(n)?);
    let secs = median(11, || {
        gpu.synchronize()?;
        let t = Instant::now();
        gpu.copy(&src, &mut dst)?;
        gpu.synchronize()?;
        Ok(t.elapsed().as_secs_f64())
    })?;
    Ok(2.0 * (n * 8) as f64 / secs)
}

/// Iterations per second of a fixed-iteration Jacobi PCG solve: the whole
/// solve (set-up, graph capture, final residual) over its iterations.
fn pcg_rate<B: PcgKernels>(be: &B, op: &dyn LinearOperator<B>, b: &B::Vector, its: usize) -> AnyResult<f64> {
    let jac = jacobi(be, op)?;
    Ok(its as f64 / pcg_seconds(be, op, &jac, b, its, false)?)
}

/// GPU PCG rows from one 10- and one 40-iteration solve (one Jacobi set-up):
/// the whole 40-iteration solve over 40, and the steady-state rate, 30 over
/// the extra time of the longer solve, so the per-solve set-up drops out
/// (longer solves of these p = 44 problems end in a breakdown once the
/// residual underflows). `suffix` names the storage ("" or "_packed").
fn gpu_pcg_rows(
    ctx: &mut Ctx,
    shape: (&str, Shape),
    be: &CudaBackend,
    op: &DeviceRowHessian,
    b: &<CudaBackend as Backend>::Vector,
    suffix: &str,
) -> AnyResult<()> {
    let jac = jacobi(be, op)?;
    let (short, long) = (
        pcg_seconds(be, op, &jac, b, 10, false)?,
        pcg_seconds(be, op, &jac, b, 40, false)?,
    );
    let (whole, steady) = (40.0 / long, 30.0 / (long - short));
    let reused = 40.0 / pcg_seconds(be, op, &jac, b, 40, true)?;
    for (name, rate) in [
        ("pcg_reused_40", reused),
        ("pcg_fixed_40", whole),
        ("pcg_marginal_10_40", steady),
    ] {
        ctx.push("gpu", shape, &format!("{name}{suffix}"), 1.0 / rate, None, Some(rate));
    }
    let paired = paired_overhead(be, op, &jac, b)?;
    let name = format!("pcg_minus_hvp_paired{suffix}");
    ctx.push("gpu", shape, &name, paired, None, None);
    Ok(())
}

/// A reused 40-iteration solve's time an iteration less the product's,
/// timed in pairs so that both see the device in one state: 7 pairs of (20
/// back-to-back products, one solve), the median difference. The product's
/// own time can move by a third within a second (the packed f64 product at
/// a million rows: 545 us, or up to 770 us in stretches where the whole
/// device's memory system slows, benches/RESULTS.md session 17), which the
/// separately timed `hvp` and `pcg_*` rows would read as the iteration's
/// overhead.
fn paired_overhead(
    be: &CudaBackend,
    op: &DeviceRowHessian,
    jac: &Jacobi<'_, CudaBackend>,
    b: &<CudaBackend as Backend>::Vector,
) -> AnyResult<f64> {
    let opts = PcgOptions::fixed_iterations(40);
    let mut solver = Pcg::new(be, op, jac)?;
    solver.solve(b, None, &opts)?;
    let mut y = be.zeros(op.dim())?;
    median(7, || {
        be.download(&y)?;
        let t = Instant::now();
        for _ in 0..20 {
            op.apply(b, &mut y)?;
        }
        be.download(&y)?;
        let hvp = t.elapsed().as_secs_f64() / 20.0;
        let t = Instant::now();
        solver.solve(b, None, &opts)?;
        Ok(t.elapsed().as_secs_f64() / 40.0 - hvp)
    })
}

fn jacobi<'b, B: Backend>(be: &'b B, op: &dyn LinearOperator<B>) -> AnyResult<Jacobi<'b, B>> {
    let mut diag = be.zeros(op.dim())?;
    op.diagonal(&mut diag)?;
    Ok(Jacobi::new(be, &diag, None, 0.0)?)
}

/// Median seconds of a solve of exactly `its` iterations: a fresh `cg`
/// each time, or (`reused`) one solver whose vectors, slots and recorded
/// block were made in a first, untimed solve, the per-solve set-up a Newton
/// loop pays once per operator.
fn pcg_seconds<B: PcgKernels>(
    be: &B,
    op: &dyn LinearOperator<B>,
    jac: &Jacobi<'_, B>,
    b: &B::Vector,
    its: usize,
    reused: bool,
) -> AnyResult<f64> {
    let opts = PcgOptions::fixed_iterations(its);
    if !reused {
        return fixed_solve_seconds(its, || Ok(cg(be, op, jac, b, None, &opts)?.info.iterations));
    }
    let mut solver = Pcg::new(be, op, jac)?;
    solver.solve(b, None, &opts)?;
    fixed_solve_seconds(its, || Ok(solver.solve(b, None, &opts)?.iterations))
}

/// Median of 5 timings of `solve`, which must report `its` iterations.
fn fixed_solve_seconds(its: usize, mut solve: impl FnMut() -> AnyResult<usize>) -> AnyResult<f64> {
    median(5, || {
        let t = Instant::now();
        let done = solve()?;
        if done != its {
            return Err(format!("fixed-iteration solve stopped after {done} of {its}").into());
        }
        Ok(t.elapsed().as_secs_f64())
    })
}

struct Ctx {
    rows: Vec<Row>,
    copy_bw: Option<f64>,
}

impl Ctx {
    fn push(&mut self, device: &str, shape: (&str, Shape), op: &str, secs: f64, bytes: Option<f64>, rate: Option<f64>) {
        let floor = bytes.zip(self.copy_bw).map(|(b, bw)| b / bw);
        self.rows.push(Row {
            device: device.into(),
            shape: shape.0.into(),
            n: shape.1.n,
            operation: op.into(),
            seconds: secs,
            bytes_floor: bytes,
            floor_seconds_at_copy_bw: floor,
            fraction_of_copy_bw: floor.map(|f| f / secs),
            iterations_per_second: rate,
        });
    }
}

fn gpu_rows(ctx: &mut Ctx, gpu: &std::sync::Arc<Gpu>, shape: (&str, Shape), op: &RowHessian) -> AnyResult<()> {
    let dev = DeviceRowHessian::from_cpu(gpu.clone(), op)?;
    let be = CudaBackend::new(gpu.clone())?;
    let p = dev.dim();
    let v = be.upload(&Rng::new(1).normals(p))?;
    let hvp = hvp_time(gpu, &dev, &be, &v)?;
    ctx.push("gpu", shape, "hvp", hvp, Some(hvp_bytes(&shape.1)), None);
    gpu_pcg_rows(ctx, shape, &be, &dev, &v, "")?;
    let eye: Vec<f64> = (0..p * p).map(|e| if e / p == e % p { 1.0 } else { 0.0 }).collect();
    let dense = median(5, || {
        let t = Instant::now();
        DeviceCholesky::factor_penalised(&dev, &eye)?.logdet()?;
        Ok(t.elapsed().as_secs_f64())
    })?;
    ctx.push("gpu", shape, "dense_cholesky_logdet", dense, None, None);
    packed_rows(ctx, gpu, shape, op, dev, &be, &v)
}

/// Seconds per HVP: median of 5 batches of 50 back-to-back products, one
/// synchronisation per batch.
fn hvp_time(
    gpu: &Gpu,
    op: &DeviceRowHessian,
    be: &CudaBackend,
    v: &<CudaBackend as Backend>::Vector,
) -> AnyResult<f64> {
    let mut y = be.zeros(op.dim())?;
    let reps = 50;
    median(5, || {
        gpu.synchronize()?;
        let t = Instant::now();
        for _ in 0..reps {
            op.apply(v, &mut y)?;
        }
        gpu.synchronize()?;
        Ok(t.elapsed().as_secs_f64() / reps as f64)
    })
}

/// n r (r + 1) / 2 stored values of `value_bytes` each and n (p_m + p_g)
/// design values of `design_bytes`: the floor of the HVP over packed rows,
/// f64 (8) or f32 (4); the staged f32 kernel reads f64 designs, the tiled
/// one f32 designs.
fn packed_hvp_bytes(s: &Shape, value_bytes: usize, design_bytes: usize) -> f64 {
    let r = 2 + s.p_h + s.p_w;
    (s.n * (r * (r + 1) / 2 * value_bytes + (s.p_m + s.p_g) * design_bytes)) as f64
}

/// HVP and fixed-iteration PCG over packed upper-triangle storage.
fn packed_rows(
    ctx: &mut Ctx,
    gpu: &std::sync::Arc<Gpu>,
    shape: (&str, Shape),
    op: &RowHessian,
    dev: DeviceRowHessian,
    be: &CudaBackend,
    v: &<CudaBackend as Backend>::Vector,
) -> AnyResult<()> {
    let packed = dev.packed()?;
    let hvp = hvp_time(gpu, &packed, be, v)?;
    ctx.push(
        "gpu",
        shape,
        "hvp_packed",
        hvp,
        Some(packed_hvp_bytes(&shape.1, 8, 8)),
        None,
    );
    gpu_pcg_rows(ctx, shape, be, &packed, v, "_packed")?;
    // "_packed_f32" is the staged kernel (its name since session 12),
    // "_packed_f32_tiled" the tiled one (the default where the shape allows).
    let staged = DeviceRowHessian::from_cpu(gpu.clone(), op)?
        .packed()?
        .with_single_precision_hvp_kernel(SingleKernel::Staged)?;
    let tiled = packed.with_single_precision_hvp_kernel(SingleKernel::Tiled)?;
    for (single, suffix) in [(staged, "_packed_f32"), (tiled, "_packed_f32_tiled")] {
        if single.hvp_precision() != HvpPrecision::F32 || (suffix.ends_with("tiled") && single.hvp_path() != "tiled") {
            continue;
        }
        if let Some(detail) = single.hvp_kernel_detail() {
            eprintln!("{} ({}): {detail}", shape.0, shape.1.n);
        }
        let hvp = hvp_time(gpu, &single, be, v)?;
        let name = format!("hvp{suffix}");
        let design_bytes = if suffix.ends_with("tiled") { 4 } else { 8 };
        ctx.push(
            "gpu",
            shape,
            &name,
            hvp,
            Some(packed_hvp_bytes(&shape.1, 4, design_bytes)),
            None,
        );
        gpu_pcg_rows(ctx, shape, be, &single, v, suffix)?;
    }
    Ok(())
}

fn cpu_rows(ctx: &mut Ctx, shape: (&str, Shape), op: &RowHessian, quick: bool) -> AnyResult<()> {
    let p = op.dim();
    let v = Rng::new(1).normals(p);
    let mut y = vec![0.0; p];
    let hvp = median(3, || {
        let t = Instant::now();
        op.apply(&v, &mut y)?;
        Ok(t.elapsed().as_secs_f64())
    })?;
    ctx.push("cpu", shape, "hvp", hvp, Some(hvp_bytes(&shape.1)), None);
    let its = if quick || shape.1.n > 100_000 { 5 } else { 40 };
    let rate = pcg_rate(&CpuBackend::new(), op, &v, its)?;
    ctx.push("cpu", shape, &format!("pcg_fixed_{its}"), 1.0 / rate, None, Some(rate));
    let dense = median(3, || {
        let t = Instant::now();
        let mut a = LinearOperator::<CpuBackend>::to_dense(op)?;
        (0..p).for_each(|i| a[i * p + i] += 1.0);
        Cholesky::factor(p, &a)?.logdet();
        Ok(t.elapsed().as_secs_f64())
    })?;
    ctx.push("cpu", shape, "dense_cholesky_logdet", dense, None, None);
    Ok(())
}

/// Stage 1 + Stage 2 of the BMS model on seed-shape data: on the GPU all
/// 195,000 rows (10,000 with --quick), both stages on the device, median of
/// 5 after a warm-up; on the CPU the first 5,000 rows (1,000), median of 3.
fn row_evaluation(ctx: &mut Ctx, gpu: Option<&std::sync::Arc<Gpu>>, quick: bool, gpu_only: bool) -> AnyResult<()> {
    let n = match (gpu.is_some(), quick) {
        (true, false) => Shape::SEED.n,
        (true, true) => 10_000,
        (false, false) => 5_000,
        (false, true) => 1_000,
    };
    let g = generate(GeneratorConfig::seed_shape(n))?;
    if let Some(gpu) = gpu {
        let stage1 = DeviceStage1::new(gpu.clone(), &g.model, &g.data)?;
        stage1.evaluate(&g.beta)?;
        let secs = median(5, || {
            gpu.synchronize()?;
            let t = Instant::now();
            let rows = stage1.evaluate(&g.beta)?;
            gpu.synchronize()?;
            drop(rows);
            Ok(t.elapsed().as_secs_f64())
        })?;
        ctx.push(
            "gpu",
            ("seed", Shape { n, ..Shape::SEED }),
            "row_evaluation",
            secs,
            None,
            None,
        );
    }
    if gpu_only {
        return Ok(());
    }
    let cpu_n = n.min(if quick { 1_000 } else { 5_000 });
    let data = g.data.rows(0..cpu_n)?;
    let secs = median(3, || {
        let t = Instant::now();
        g.model.evaluate(&data, &g.beta)?;
        Ok(t.elapsed().as_secs_f64())
    })?;
    ctx.push(
        "cpu",
        (
            "seed",
            Shape {
                n: cpu_n,
                ..Shape::SEED
            },
        ),
        "row_evaluation",
        secs,
        None,
        None,
    );
    Ok(())
}

fn table(ctx: &Ctx) -> String {
    let mut s = format!(
        "copy bandwidth (device to device, read + write): {}\n\n",
        ctx.copy_bw
            .map_or("n/a (no GPU)".into(), |b| format!("{:.0} GB/s", b / 1e9))
    );
    s += &format!(
        "{:<5} {:<6} {:>9} {:<22} {:>12} {:>11} {:>12} {:>9} {:>10}\n",
        "dev", "shape", "n", "operation", "time", "floor MB", "floor time", "fraction", "it/s"
    );
    for r in &ctx.rows {
        let opt = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map_or("-".to_string(), f);
        s += &format!(
            "{:<5} {:<6} {:>9} {:<22} {:>10.1}us {:>11} {:>12} {:>9} {:>10}\n",
            r.device,
            r.shape,
            r.n,
            r.operation,
            r.seconds * 1e6,
            opt(r.bytes_floor, &|b| format!("{:.1}", b / 1e6)),
            opt(r.floor_seconds_at_copy_bw, &|f| format!("{:.1}us", f * 1e6)),
            opt(r.fraction_of_copy_bw, &|f| format!("{:.0}%", f * 100.0)),
            opt(r.iterations_per_second, &|i| format!("{i:.0}")),
        );
    }
    s
}

fn main() -> AnyResult<()> {
    let args: Vec<String> = std::env::args().collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    let (quick, gpu_only, operators_only) = (flag("--quick"), flag("--gpu-only"), flag("--operators-only"));
    let json_path = args
        .iter()
        .position(|a| a == "--json")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let device = select_device(GpuPolicy::from_env()?)?;
    eprintln!("device: {}", device.describe());
    let gpu = match &device {
        Device::Gpu(g) => Some(g.clone()),
        Device::Cpu { .. } => None,
    };
    let mut ctx = Ctx {
        rows: Vec::new(),
        copy_bw: gpu.as_deref().map(copy_bandwidth).transpose()?,
    };
    let mut shapes = vec![(
        "small",
        Shape {
            n: 10_000,
            ..Shape::SEED
        },
    )];
    if !quick {
        shapes.push(("seed", Shape::SEED));
        shapes.push((
            "tall",
            Shape {
                n: 1_000_000,
                ..Shape::SEED
            },
        ));
    }
    for shape in shapes {
        eprintln!("shape {}: {:?}", shape.0, shape.1);
        let op = random_row_problem(shape.1, 1.0, 7)?;
        if let Some(g) = &gpu {
            gpu_rows(&mut ctx, g, shape, &op)?;
        }
        if !gpu_only {
            cpu_rows(&mut ctx, shape, &op, quick)?;
        }
    }
    if !operators_only {
        row_evaluation(&mut ctx, gpu.as_ref(), quick, gpu_only)?;
    }
    print!("{}", table(&ctx));
    let json = serde_json::to_string_pretty(&serde_json::json!({
        "device": device.describe(),
        "copy_bandwidth_bytes_per_second": ctx.copy_bw,
        "rows": ctx.rows,
    }))?;
    println!("{json}");
    if let Some(path) = json_path {
        std::fs::write(&path, &json).map_err(|e| format!("{path}: {e}"))?;
    }
    Ok(())
}
