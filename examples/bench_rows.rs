//! Times one full BMS row evaluation (Stage 1 + Stage 2) at a given shape on
//! the CPU (`BmsModel::evaluate`, fused per row: median of 3, and in
//! microseconds per row and core; then as a fit evaluates, through the
//! model's objective, whose row Hessians reuse pooled buffers; then the
//! bundle path the device kernels are checked against, by stage) and, when
//! there is one, on the GPU: both stages on the device
//! (median of 5 after a warm-up, status verdict included), and Stage 2 alone
//! over the CPU's Stage-1 bundle (with its upload). Prints the phases as JSON
//! with the device bytes the bundle costs.
//!
//!     cargo run --release --example bench_rows [N_ROWS] [--gpu-only] [--fit-shape]   (default: seed shape, 195,000)
//!
//! `--cpu-evaluations=K` runs only K CPU evaluations and prints nothing, for
//! counting instructions: `RAYON_NUM_THREADS=1 valgrind --tool=callgrind`
//! on K = 1 and K = 2, the difference over N is the count a row.
//! `--objective-repeats=K` evaluates the objective K times (after a
//! warm-up) and prints the minimum, tenth and median in us a row and core
//! (`RAYON_NUM_THREADS` sets the threads). `--gpu-only` times only both
//! stages on the device (no CPU evaluation to compare with). `--fit-shape`
//! generates `fit_bms`' default data (p_m 3, p_g 2, score basis 8, link
//! basis 6: r = 16, seed 1) instead of the seed shape, so a fit's cost per
//! evaluation can be set beside a bare one.

use std::time::Instant;

use matfree::bms::io::generator::{generate, Generated, GeneratorConfig};
use matfree::bms::model::stage2::evaluate_rows;
use matfree::device::check_cuda_support;
use matfree_solvers::Objective;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let gpu_only = args.iter().any(|a| a == "--gpu-only");
    let n = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(195_000);
    let cfg = if args.iter().any(|a| a == "--fit-shape") {
        GeneratorConfig::fit_shape(n, 1)
    } else {
        GeneratorConfig::seed_shape(n)
    };
    let t = Instant::now();
    let g = generate(cfg)?;
    let generate_s = t.elapsed().as_secs_f64();
    if let Some(k) = args.iter().find_map(|a| a.strip_prefix("--cpu-evaluations=")) {
        // Only k CPU evaluations: for an instruction count, the difference
        // of two runs (k and k + 1) under `valgrind --tool=callgrind`.
        for _ in 0..k.parse::<usize>()? {
            std::hint::black_box(g.model.evaluate(&g.data, &g.beta)?);
        }
        return Ok(());
    }
    if let Some(k) = args.iter().find_map(|a| a.strip_prefix("--objective-repeats=")) {
        let k: usize = k.parse()?;
        if k == 0 {
            return Err("--objective-repeats=K: K must be at least 1".into());
        }
        return objective_repeats(&g, k);
    }
    if gpu_only {
        check_cuda_support("--gpu-only", "given")?;
        #[cfg(feature = "cuda")]
        return gpu::only(&g, n);
    }
    let threads = rayon::current_num_threads();
    let per_row_core = |s: f64| s * threads as f64 * 1e6 / n as f64;
    // The CPU's own evaluation (fused per row): median of 3 after a warm-up.
    g.model.evaluate(&g.data, &g.beta)?;
    let mut fused = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        g.model.evaluate(&g.data, &g.beta)?;
        fused.push(t.elapsed().as_secs_f64());
    }
    fused.sort_by(f64::total_cmp);
    // As a fit evaluates: the objective's value, gradient and row Hessians,
    // which reuse pooled buffers where `evaluate` allocates its n r^2
    // Hessians afresh each time (and its threads page-fault them in).
    let pooled = objective_seconds(&g, 3)?;
    // The bundle path (the device kernels' reference), by stage.
    let t = Instant::now();
    let (inputs, _) = g.model.stage1(&g.data, &g.beta)?;
    let stage1_s = t.elapsed().as_secs_f64();
    let cells = inputs.cell_offsets[n] as f64;
    let bundle_mb = 8.0 * (inputs.cell_r.len() * 2 + inputs.r_uv.len() + inputs.cell_moments.len()) as f64 / 1e6;
    let t = Instant::now();
    let cpu = evaluate_rows(&inputs)?;
    let stage2_cpu_s = t.elapsed().as_secs_f64();
    #[cfg(feature = "cuda")]
    let (gpu_s, device) = gpu::beside_cpu(&g, &inputs, &cpu)?;
    #[cfg(not(feature = "cuda"))]
    let (gpu_s, device, _) = (None::<f64>, serde_json::Value::Null, cpu);
    let report = serde_json::json!({
        "n": n, "r": inputs.r, "cells_per_row": cells / n as f64, "rayon_threads": threads,
        "generate_s": generate_s,
        "cpu_evaluate_median_s": fused[1], "cpu_evaluate_us_per_row_and_core": per_row_core(fused[1]),
        "cpu_objective_evaluate_median_s": pooled[1],
        "cpu_objective_evaluate_us_per_row_and_core": per_row_core(pooled[1]),
        "bundle_path_stage1_cpu_s": stage1_s, "bundle_path_stage2_cpu_s": stage2_cpu_s,
        "bundle_path_us_per_row_and_core": per_row_core(stage1_s + stage2_cpu_s),
        "stage2_gpu_with_upload_and_verdict_s": gpu_s, "bundle_mb_main_arrays": bundle_mb,
        "device_stage1_and_stage2": device,
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

/// `--objective-repeats=K`: the objective's evaluation (as a fit calls it)
/// K times after a warm-up, in us a row and core: the minimum, the tenth
/// and the median (on a host whose timings move, the minimum is the
/// figure to compare binaries by).
fn objective_repeats(g: &Generated, k: usize) -> Result<(), Box<dyn std::error::Error>> {
    let scale = rayon::current_num_threads() as f64 * 1e6 / g.data.n() as f64;
    let t: Vec<f64> = objective_seconds(g, k)?.iter().map(|s| s * scale).collect();
    let at = |q: f64| t[((t.len() - 1) as f64 * q) as usize];
    let report = serde_json::json!({
        "n": g.data.n(), "rayon_threads": rayon::current_num_threads(), "repeats": k,
        "objective_us_per_row_and_core": { "min": at(0.0), "q10": at(0.1), "median": at(0.5) },
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

/// The objective's evaluation at the generator's beta, k times after a
/// warm-up: the seconds of each, sorted.
fn objective_seconds(g: &Generated, k: usize) -> Result<Vec<f64>, Box<dyn std::error::Error>> {
    let objective = g.model.objective(&g.data)?;
    let mut t = Vec::with_capacity(k);
    for i in 0..=k {
        let start = Instant::now();
        let e = objective.evaluate(&g.beta)?.ok_or("the objective rejected beta")?;
        let s = start.elapsed().as_secs_f64();
        drop(e);
        if i > 0 {
            t.push(s);
        }
    }
    t.sort_by(f64::total_cmp);
    Ok(t)
}

/// The GPU's phases (the `cuda` feature), where the policy gives a GPU.
#[cfg(feature = "cuda")]
mod gpu {
    use std::sync::Arc;
    use std::time::Instant;

    use matfree::bms::device::{evaluate_rows_device, DeviceStage1};
    use matfree::bms::io::generator::Generated;
    use matfree::bms::model::stage2::RowKernelOutputs;
    use matfree::bms::RowKernelInputs;
    use matfree::cuda::{DeviceDesigns, Gpu};
    use matfree::device::{select_device, Device, GpuPolicy};

    type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

    /// `--gpu-only`: both stages on the device, printed.
    pub fn only(g: &Generated, n: usize) -> AnyResult<()> {
        let Device::Gpu(gpu) = select_device(GpuPolicy::from_env()?)? else {
            return Err("--gpu-only needs a GPU".into());
        };
        let device = device_stages(&gpu, g, f64::NAN)?;
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "n": n, "device_stage1_and_stage2": device }))?
        );
        Ok(())
    }

    /// Stage 2 on the device over the CPU's bundle (seconds, with its
    /// upload and verdict) and both stages on the device, beside the CPU's
    /// rows `cpu`; `(None, null)` where there is no GPU.
    pub fn beside_cpu(
        g: &Generated,
        inputs: &RowKernelInputs,
        cpu: &RowKernelOutputs,
    ) -> AnyResult<(Option<f64>, serde_json::Value)> {
        let Device::Gpu(gpu) = select_device(GpuPolicy::from_env()?)? else {
            return Ok((None, serde_json::Value::Null));
        };
        let designs = DeviceDesigns::upload(gpu.clone(), &g.data.designs)?;
        let _warm = evaluate_rows_device(&designs, g.model.layout(), inputs)?;
        let t = Instant::now();
        let dev = evaluate_rows_device(&designs, g.model.layout(), inputs)?;
        let jg = dev.joint_gradient()?;
        let gpu_s = t.elapsed().as_secs_f64();
        let cpu_total: f64 = cpu.neglog.iter().sum();
        println!("check: device joint neglog {} vs cpu {}", jg.neglog, cpu_total);
        Ok((Some(gpu_s), device_stages(&gpu, g, cpu_total)?))
    }

    /// Both stages on the device: median of 5 evaluations after a warm-up, and
    /// the bytes of the cell slots (edges and moments, written by Stage 1, read
    /// by Stage 2) and
    /// of the row Hessians (written once).
    fn device_stages(gpu: &Arc<Gpu>, g: &Generated, cpu_total: f64) -> AnyResult<serde_json::Value> {
        let t = Instant::now();
        let stage1 = DeviceStage1::new(gpu.clone(), &g.model, &g.data)?;
        let setup_s = t.elapsed().as_secs_f64();
        let warm = stage1.evaluate(&g.beta)?.joint_gradient()?;
        println!("check: device stages joint neglog {} vs cpu {}", warm.neglog, cpu_total);
        let mut times = Vec::new();
        for _ in 0..5 {
            gpu.synchronize()?;
            let t = Instant::now();
            let rows = stage1.evaluate(&g.beta)?;
            gpu.synchronize()?;
            times.push(t.elapsed().as_secs_f64());
            drop(rows);
        }
        times.sort_by(f64::total_cmp);
        let kernels: Vec<_> = stage1
            .profile(&g.beta)?
            .into_iter()
            .map(|(k, s)| serde_json::json!({ "kernel": k, "s": s }))
            .collect();
        let resources: Vec<_> = stage1
            .kernel_resources()?
            .into_iter()
            .map(|(k, regs, local)| serde_json::json!({ "kernel": k, "registers": regs, "local_bytes": local }))
            .collect();
        let b = g.model.bases();
        let (n, r, slots) = (g.data.n(), b.r(), stage1.slots());
        // Each slot's edges, segments and moments; Stage 2 builds the rest in
        // shared memory.
        let slot_bytes = (8 * n * slots * (4 + 10)) as f64;
        // Packed: each row's upper triangle.
        let hess_bytes = (8 * n * r * (r + 1) / 2) as f64;
        Ok(serde_json::json!({
            "setup_upload_and_allocate_s": setup_s, "evaluate_median_s": times[2], "evaluate_all_s": times,
            "cell_slots_per_row": slots, "slot_bytes_written_then_read": slot_bytes,
            "row_hessian_bytes_written": hess_bytes, "per_kernel_synchronised": kernels,
            "kernel_resources": resources,
        }))
    }
}
