//! Prediction throughput: `bench_predict [N]` simulates N rows (fit_bms'
//! default shape, default 1,000,000) and predicts them with standard errors
//! on the CPU (every rayon thread) and, where a GPU is found, on the GPU;
//! prints seconds, rows per second and the largest GPU-CPU differences.
//!
//!     cargo run --release --example bench_predict -- 1000000

use std::error::Error;
use std::time::Instant;

use matfree::bms::io::generator::{generate, GeneratorConfig};
use matfree::bms::results::predict::{predict_cpu, predict_gpu, Estimates, Predictions};
use matfree::cuda::{select_device, Device, GpuPolicy};

fn main() -> Result<(), Box<dyn Error>> {
    let n: usize = std::env::args().nth(1).map_or(Ok(1_000_000), |a| a.parse())?;
    let t = Instant::now();
    let g = generate(GeneratorConfig::fit_shape(n, 1))?;
    println!("simulated {n} rows in {:.2} s", t.elapsed().as_secs_f64());
    let p = g.beta.len();
    // The values do not change the work; a diagonal covariance of SE 0.01.
    let cov: Vec<f64> = (0..p * p).map(|k| if k % (p + 1) == 0 { 1e-4 } else { 0.0 }).collect();
    let est = Estimates {
        beta: &g.beta,
        covariance: Some(&cov),
    };
    let designs = g.data.designs.clone();
    let time = |label: &str, f: &dyn Fn() -> matfree::Result<Predictions>| -> matfree::Result<Predictions> {
        let mut best = f64::INFINITY;
        let mut out = None;
        for _ in 0..3 {
            let t = Instant::now();
            out = Some(f()?);
            best = best.min(t.elapsed().as_secs_f64());
        }
        println!("{label}: {best:.4} s (best of 3), {:.3e} rows/s", n as f64 / best);
        Ok(out.expect("three runs"))
    };
    let threads = rayon::current_num_threads();
    let cpu = time(&format!("cpu ({threads} threads)"), &|| {
        predict_cpu(&g.model, est, designs.clone(), &g.data.z)
    })?;
    if let Device::Gpu(gpu) = select_device(GpuPolicy::from_env()?)? {
        let dev = time(&format!("gpu ({})", gpu.name()), &|| {
            predict_gpu(&gpu, &g.model, est, designs.clone(), &g.data.z)
        })?;
        let worst = |a: &[f64], b: &[f64], s: f64| {
            a.iter()
                .zip(b)
                .map(|(x, y)| (x - y).abs() / (s + y.abs()))
                .fold(0.0, f64::max)
        };
        let (se_d, se_c) = (
            dev.se_eta.as_deref().unwrap_or(&[]),
            cpu.se_eta.as_deref().unwrap_or(&[]),
        );
        println!(
            "gpu vs cpu: eta {:.1e}, p {:.1e}, se_eta {:.1e} (relative)",
            worst(&dev.eta, &cpu.eta, 1.0),
            worst(&dev.p, &cpu.p, 1.0),
            worst(se_d, se_c, 0.0)
        );
    }
    Ok(())
}
