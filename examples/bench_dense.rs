//! The exact path's cost by p, for p = 44, 300, 1,000 and 3,000 (a random
//! row Hessian of n = 2,000 rows, r = 20): the dense H + S, its Cholesky
//! factor and log-determinant on the host (faer, every rayon thread) and on
//! the device (H assembled on the device, cuSOLVER potrf), and the CUDA
//! backend's `dense_factor` (what Newton and REML call) on the host's dense
//! matrix. Best of 3 (the host's dense H: one run above p = 300).
//!
//!     cargo run --release --example bench_dense

use std::error::Error;
use std::time::Instant;

use matfree::cuda::{select_device, CudaBackend, Device, DeviceCholesky, DeviceRowHessian, GpuPolicy};
use matfree::fixture::{random_row_problem, Shape};
use matfree::solvers::{Backend, Cholesky, LinearOperator};

type AnyResult<T> = Result<T, Box<dyn Error>>;

/// The best time of `runs` calls, and the last call's value.
fn best<T>(runs: usize, f: &mut dyn FnMut() -> AnyResult<T>) -> AnyResult<(f64, T)> {
    let mut best = f64::INFINITY;
    let mut value = None;
    for _ in 0..runs {
        let t = Instant::now();
        value = Some(f()?);
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok((best, value.ok_or("no run")?))
}

fn main() -> AnyResult<()> {
    let gpu = match select_device(GpuPolicy::from_env()?)? {
        Device::Gpu(g) => Some(g),
        Device::Cpu { .. } => None,
    };
    println!("p | host dense H (s) | host factor + logdet (s) | device dense H + factor + logdet (s) | backend dense_factor + logdet from the host matrix (s) | logdet host, device");
    for p in [44usize, 300, 1000, 3000] {
        let shape = Shape {
            n: 2_000,
            p_m: p - 20,
            p_g: 2,
            p_h: 10,
            p_w: 8,
        };
        let op = random_row_problem(shape, 1.0, 1)?;
        let (dense_s, mut a) = best(if p > 300 { 1 } else { 3 }, &mut || Ok(op.to_dense()?))?;
        (0..p).for_each(|i| a[i * p + i] += 1.0);
        let (factor_s, logdet) = best(3, &mut || Ok(Cholesky::factor(p, &a)?.logdet()))?;
        let Some(gpu) = &gpu else {
            println!("{p} | {dense_s:.5} | {factor_s:.5} | - | - | {logdet:.6}");
            continue;
        };
        let dev_op = DeviceRowHessian::from_cpu(gpu.clone(), &op)?;
        let eye: Vec<f64> = (0..p * p).map(|e| f64::from(e / p == e % p)).collect();
        let (device_s, dev_logdet) = best(
            3,
            &mut || Ok(DeviceCholesky::factor_penalised(&dev_op, &eye)?.logdet()?),
        )?;
        let backend = CudaBackend::new(gpu.clone())?;
        let (via_s, _) = best(3, &mut || Ok(backend.dense_factor(p, &a)?.logdet()))?;
        println!("{p} | {dense_s:.5} | {factor_s:.5} | {device_s:.5} | {via_s:.5} | {logdet:.6}, {dev_logdet:.6}");
    }
    Ok(())
}
