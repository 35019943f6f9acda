//! Predictions on the device against the CPU path (the oracle), including
//! rows far in the lower tail (eta < -33), which the device path hands back
//! to the CPU.
#![cfg(feature = "cuda")]

use std::sync::Arc;

use matfree::bms::io::generator::{generate, GeneratorConfig};
use matfree::bms::results::predict::{predict, predict_cpu, predict_gpu, Estimates, GPU_MIN_ROWS};
use matfree::cuda::{gpu_for_test, Device};
use matfree::fixture::Rng;
use matfree::Designs;

/// The largest |a - b| / (scale + |b|) over two vectors.
fn worst(a: &[f64], b: &[f64], scale: f64) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() / (scale + y.abs()))
        .fold(0.0, f64::max)
}

#[test]
#[ignore = "needs a GPU: runs on the device with --include-ignored (tools/gpu-tests.sh)"]
fn gpu_predictions_match_the_cpu() {
    let Some(gpu) = gpu_for_test("gpu_predictions_match_the_cpu") else {
        return;
    };
    let n = 2 * GPU_MIN_ROWS + 37;
    let g = generate(GeneratorConfig::fit_shape(n, 4)).unwrap();
    let mut z = g.data.z.clone();
    // Tails both ways: eta about +-40 (the slope is about 0.9).
    for (k, zi) in z.iter_mut().take(6).enumerate() {
        *zi = if k % 2 == 0 { -39.0 } else { 39.0 };
    }
    // A steeper slope, so that z = -39 reaches eta < -33 (the CPU's rows).
    let mut beta = g.beta.clone();
    beta[g.model.blocks().g_range().start] *= 1.5;
    let p = beta.len();
    let mut rng = Rng::new(3);
    let l: Vec<f64> = (0..p * p).map(|_| 0.02 * rng.normal()).collect();
    let mut cov = vec![0.0; p * p];
    for a in 0..p {
        for b in 0..p {
            cov[a * p + b] = (0..p).map(|k| l[a * p + k] * l[b * p + k]).sum();
        }
    }
    let est = Estimates {
        beta: &beta,
        covariance: Some(&cov),
    };
    let designs: Arc<Designs> = g.data.designs.clone();
    let cpu = predict_cpu(&g.model, est, designs.clone(), &z).unwrap();
    let dev = predict_gpu(&gpu, &g.model, est, designs.clone(), &z).unwrap();
    assert!(cpu.eta[0] < -33.0, "a lower-tail row: eta {}", cpu.eta[0]);
    assert!(cpu.eta[1] > 33.0, "an upper-tail row: eta {}", cpu.eta[1]);
    let (se_c, se_d) = (cpu.se_eta.as_ref().unwrap(), dev.se_eta.as_ref().unwrap());
    let errors = [
        ("eta", worst(&dev.eta, &cpu.eta, 1.0)),
        ("p", worst(&dev.p, &cpu.p, 1.0)),
        ("intercept", worst(&dev.intercept, &cpu.intercept, 1.0)),
        ("se_eta", worst(se_d, se_c, 0.0)),
    ];
    println!("gpu vs cpu predictions, {n} rows: {errors:?}");
    for (name, err) in errors {
        assert!(err <= 1e-12, "{name}: {err:e}");
    }
    // predict() takes the device for this many rows and gives the same.
    let auto = predict(&Device::Gpu(gpu.clone()), &g.model, est, designs, &z).unwrap();
    assert_eq!(auto, dev);
}
