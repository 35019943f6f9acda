//! Your own model on matfree: a penalised logistic regression y ~ x1 + s(x2)
//! (the model is `own_model/model.rs`), fitted with REML; on the GPU where
//! one is found (`MATFREE_GPU`: auto, required or off), the rows evaluated
//! on the host and their Hessians uploaded.
//!
//! cargo run --release --example own_model [-- FILE.csv]   (default: tests/data/own_model.csv)

#[path = "own_model/model.rs"]
mod model;

use std::error::Error;

#[cfg(feature = "cuda")]
use matfree::cuda::{CudaBackend, DeviceRowObjective};
use matfree::device::{select_device, Device, GpuPolicy};
use matfree::solvers::reml::RemlFit;
use matfree::solvers::CpuBackend;

fn main() {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "tests/data/own_model.csv".into());
    if let Err(e) = run(&path) {
        eprintln!("own_model: {e}");
        std::process::exit(1);
    }
}

fn run(path: &str) -> Result<(), Box<dyn Error>> {
    let model::Problem {
        objective,
        penalty,
        null_space_dim,
        ..
    } = model::problem(path)?;
    let (fit, on) = match select_device(GpuPolicy::from_env()?)? {
        #[cfg(feature = "cuda")]
        Device::Gpu(gpu) => {
            let backend = CudaBackend::new(gpu.clone())?;
            let fit = model::fit_on(&backend, &DeviceRowObjective::from_host(gpu, objective)?, &penalty)?;
            (fit, "the GPU".to_string())
        }
        Device::Cpu { reason } => {
            let fit = model::fit_on(&CpuBackend::new(), &objective, &penalty)?;
            (fit, format!("the CPU ({reason})"))
        }
    };
    print(&fit, null_space_dim, &on);
    Ok(())
}

fn print(fit: &RemlFit, null_space_dim: usize, on: &str) {
    let (p, stats) = (fit.laml.beta.len(), &fit.statistics);
    let mut names = vec!["(Intercept)".to_string(), "x1".to_string()];
    names.extend((1..p - 1).map(|j| format!("s(x2).{j}")));
    println!("{:<12} {:>12} {:>10}", "", "estimate", "se");
    for (j, name) in names.iter().enumerate() {
        let se = stats.covariance[j * p + j].sqrt();
        println!("{name:<12} {:>12.6} {se:>10.6}", fit.laml.beta[j]);
    }
    let score = fit.laml.value - null_space_dim as f64 * (2.0 * std::f64::consts::PI).ln() / 2.0;
    let (edf, smooth) = (stats.edf.total, stats.edf.blocks[0]);
    println!("lambda {:.6e}, edf {edf:.4} (s(x2) {smooth:.4})", fit.lambda[0]);
    println!(
        "REML score {score:.6} (mgcv's scale; matfree's V = {:.6})",
        fit.laml.value
    );
    let (converged, termination) = (fit.report.converged, fit.report.termination);
    let iterations = fit.report.iterations.len();
    println!("converged: {converged} ({termination:?}, {iterations} outer iterations), on {on}");
}
