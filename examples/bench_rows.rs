//! Times one full BMS row evaluation (Stage 1 + Stage 2) at a given shape on
//! the CPU and, when there is one, on the GPU (Stage 2 there; Stage 1 stays
//! on the CPU), and prints the phases as JSON.
//!
//!     cargo run --release --example bench_rows [N_ROWS]     (default: seed shape, 195,000)

use std::time::Instant;

use matfree::bms::generator::{generate, GeneratorConfig};
use matfree::bms::row_kernel::evaluate_rows;
use matfree::cuda::{evaluate_rows_device, select_device, Device, DeviceDesigns, GpuPolicy};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(195_000);
    let cfg = GeneratorConfig {
        n,
        p_m: 14,
        p_g: 12,
        p_h: 10,
        p_w: 8,
        s_f: 1.0,
        seed: 1,
    };
    let t = Instant::now();
    let g = generate(cfg)?;
    let generate_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let (inputs, _) = g.model.stage1(&g.data, &g.beta)?;
    let stage1_s = t.elapsed().as_secs_f64();
    let cells = inputs.cell_offsets[n] as f64;
    let bundle_mb = 8.0 * (inputs.cell_r.len() * 2 + inputs.r_uv.len() + inputs.cell_moments.len()) as f64 / 1e6;
    let t = Instant::now();
    let cpu = evaluate_rows(&inputs)?;
    let stage2_cpu_s = t.elapsed().as_secs_f64();
    let mut gpu_s = None;
    if let Device::Gpu(gpu) = select_device(GpuPolicy::from_env()?)? {
        let designs = DeviceDesigns::upload(gpu.clone(), &g.data.designs)?;
        let _warm = evaluate_rows_device(&designs, g.model.layout(), &inputs)?;
        let t = Instant::now();
        let dev = evaluate_rows_device(&designs, g.model.layout(), &inputs)?;
        let jg = dev.joint_gradient()?;
        gpu_s = Some(t.elapsed().as_secs_f64());
        let cpu_total: f64 = cpu.neglog.iter().sum();
        println!("check: device joint neglog {} vs cpu {}", jg.neglog, cpu_total);
    }
    let report = serde_json::json!({
        "n": n, "r": inputs.r, "cells_per_row": cells / n as f64, "rayon_threads": rayon::current_num_threads(),
        "generate_s": generate_s, "stage1_cpu_s": stage1_s, "stage2_cpu_s": stage2_cpu_s,
        "stage2_gpu_with_upload_and_verdict_s": gpu_s, "bundle_mb_main_arrays": bundle_mb,
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
