//! HVP time and fixed-iteration PCG throughput on CPU and GPU at three
//! shapes (small n = 10,000; seed n = 195,000; tall n = 1,000,000; all with
//! r = 20, p = 44). Throughput is reported as bytes/s for the HVP (bytes =
//! the floor: every row Hessian and design row read once) and as
//! iterations/s for PCG (tolerance 0, fixed max_iter).
//!
//!     cargo bench --bench pcg [-- FILTER]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use matfree::fixture::{random_row_problem, Rng, Shape};
use matfree::solvers::{cg, CpuBackend, Jacobi, LinearOperator, PcgKernels, PcgOptions};
use matfree::RowHessian;

fn shapes() -> [(&'static str, Shape); 3] {
    [
        (
            "small",
            Shape {
                n: 10_000,
                ..Shape::SEED
            },
        ),
        ("seed", Shape::SEED),
        (
            "tall",
            Shape {
                n: 1_000_000,
                ..Shape::SEED
            },
        ),
    ]
}

/// The HVP's byte floor: n (r^2 + p_m + p_g) doubles read once.
fn hvp_bytes(s: &Shape) -> u64 {
    let r = 2 + s.p_h + s.p_w;
    (s.n * (r * r + s.p_m + s.p_g) * 8) as u64
}

/// Run once to learn the iterations a fixed-iteration solve really makes
/// (a breakdown would stop it early and inflate the rate).
fn iterations_made<B: PcgKernels>(be: &B, op: &dyn LinearOperator<B>, m: &Jacobi<B>, b: &B::Vector, it: usize) -> u64 {
    let info = cg(be, op, m, b, None, &PcgOptions::fixed_iterations(it))
        .expect("pcg")
        .info;
    println!("  {} iterations, stop {:?}", info.iterations, info.stop_reason);
    info.iterations.max(1) as u64
}

fn bench_cpu(c: &mut Criterion, name: &str, shape: Shape, op: &RowHessian) {
    let p = op.dim();
    let v = Rng::new(1).normals(p);
    let mut g = c.benchmark_group(format!("cpu/{name}"));
    g.sample_size(10);
    g.throughput(Throughput::Bytes(hvp_bytes(&shape)));
    let mut y = vec![0.0; p];
    g.bench_function(BenchmarkId::new("hvp", shape.n), |bch| {
        bch.iter(|| op.apply(&v, &mut y).unwrap())
    });
    let be = CpuBackend::new();
    let jac = Jacobi::new(&be, &op.diagonal_host(), None, 0.0).unwrap();
    let it = if shape.n > 100_000 { 5 } else { 50 };
    let made = iterations_made(&be, op, &jac, &v, it);
    g.throughput(Throughput::Elements(made));
    g.bench_function(BenchmarkId::new("pcg_fixed", shape.n), |bch| {
        bch.iter(|| cg(&be, op, &jac, &v, None, &PcgOptions::fixed_iterations(it)).unwrap())
    });
    g.finish();
}

/// The GPU's benchmarks (the `cuda` feature).
#[cfg(feature = "cuda")]
mod gpu {
    use matfree::cuda::{gpu_for_test, CudaBackend, DeviceCholesky, DeviceRowHessian};
    use matfree::solvers::Backend;

    use super::*;

    /// Iterations of a GPU fixed-iteration solve: fewer than the ~60 after which
    /// the recursive residual of these p = 44 fixtures underflows to an exact
    /// zero direction (a pAp = 0 breakdown).
    const GPU_ITERATIONS: usize = 40;

    pub fn bench_gpu(c: &mut Criterion, name: &str, shape: Shape, op: &RowHessian) {
        let Some(gpu) = gpu_for_test("bench pcg (gpu)") else {
            return;
        };
        let dev = DeviceRowHessian::from_cpu(gpu.clone(), op).unwrap();
        let be = CudaBackend::new(gpu.clone()).unwrap();
        let p = dev.dim();
        let v = be.upload(&Rng::new(1).normals(p)).unwrap();
        let mut y = be.zeros(p).unwrap();
        let mut g = c.benchmark_group(format!("gpu/{name}"));
        g.throughput(Throughput::Bytes(hvp_bytes(&shape)));
        g.bench_function(BenchmarkId::new("hvp", shape.n), |bch| {
            bch.iter(|| {
                dev.apply(&v, &mut y).unwrap();
                gpu.download(&y).unwrap()
            })
        });
        let eye: Vec<f64> = (0..p * p).map(|e| if e / p == e % p { 1.0 } else { 0.0 }).collect();
        g.bench_function(BenchmarkId::new("dense_cholesky_logdet", shape.n), |bch| {
            bch.iter(|| DeviceCholesky::factor_penalised(&dev, &eye).unwrap().logdet().unwrap())
        });
        let mut diag = be.zeros(p).unwrap();
        dev.diagonal(&mut diag).unwrap();
        let jac = Jacobi::new(&be, &diag, None, 0.0).unwrap();
        let it = GPU_ITERATIONS;
        let made = iterations_made(&be, &dev, &jac, &v, it);
        g.throughput(Throughput::Elements(made));
        g.bench_function(BenchmarkId::new("pcg_fixed", shape.n), |bch| {
            bch.iter(|| cg(&be, &dev, &jac, &v, None, &PcgOptions::fixed_iterations(it)).unwrap())
        });
        // Packed upper-triangle storage: the same products from half the bytes.
        let packed = dev.packed().unwrap();
        g.throughput(Throughput::Bytes(packed_hvp_bytes(&shape)));
        g.bench_function(BenchmarkId::new("hvp_packed", shape.n), |bch| {
            bch.iter(|| {
                packed.apply(&v, &mut y).unwrap();
                gpu.download(&y).unwrap()
            })
        });
        g.throughput(Throughput::Elements(made));
        g.bench_function(BenchmarkId::new("pcg_fixed_packed", shape.n), |bch| {
            bch.iter(|| cg(&be, &packed, &jac, &v, None, &PcgOptions::fixed_iterations(it)).unwrap())
        });
        g.finish();
    }

    /// The packed HVP's floor: n (r (r + 1) / 2 + p_m + p_g) doubles.
    fn packed_hvp_bytes(s: &Shape) -> u64 {
        let r = 2 + s.p_h + s.p_w;
        (s.n * (r * (r + 1) / 2 + s.p_m + s.p_g) * 8) as u64
    }

    /// Device-to-device copy of 1 GiB: the bandwidth every byte-bound figure is
    /// compared with (bytes = read + write).
    pub fn bench_copy(c: &mut Criterion) {
        let Some(gpu) = gpu_for_test("bench copy (gpu)") else {
            return;
        };
        let n = (1usize << 30) / 8;
        let src = gpu.zeros::<f64>(n).unwrap();
        let mut dst = gpu.zeros::<f64>(n).unwrap();
        let mut g = c.benchmark_group("gpu/copy");
        g.throughput(Throughput::Bytes(2 * (n * 8) as u64));
        g.bench_function("dtod_1GiB", |bch| {
            bch.iter(|| {
                gpu.copy(&src, &mut dst).unwrap();
                gpu.synchronize().unwrap()
            })
        });
        g.finish();
    }
}

fn benches(c: &mut Criterion) {
    #[cfg(feature = "cuda")]
    gpu::bench_copy(c);
    for (name, shape) in shapes() {
        let op = random_row_problem(shape, 1.0, 7).unwrap();
        println!("{name}: {shape:?}, HVP floor {:.1} MB", hvp_bytes(&shape) as f64 / 1e6);
        #[cfg(feature = "cuda")]
        gpu::bench_gpu(c, name, shape, &op);
        bench_cpu(c, name, shape, &op);
    }
}

criterion_group!(pcg, benches);
criterion_main!(pcg);
