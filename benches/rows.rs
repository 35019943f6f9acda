//! Full BMS row evaluation (Stage 1 + Stage 2: intercepts, cells, moments,
//! observed jets, per-row neglog, gradient and Hessian) on the CPU and the
//! GPU, at the seed shape (n = 195,000, r = 20; p_m 14, p_g 12, p_h 10,
//! p_w 8). Throughput is rows/s. The CPU is timed on the first 5,000 rows of
//! the same data, both its own evaluation (`cpu_stage1_stage2`, fused per
//! row) and the bundle path the device kernels are checked against
//! (`cpu_bundle_path`), so that a regression of either shows.
//!
//!     cargo bench --bench rows [-- FILTER]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use matfree::bms::io::generator::{generate, Generated, GeneratorConfig};
use matfree::bms::RowKernelInputs;

fn seed_data(n: usize) -> Generated {
    generate(GeneratorConfig::seed_shape(n)).expect("generate")
}

fn benches(c: &mut Criterion) {
    // The seed shape's 195,000 rows where there is a GPU (none in a build
    // without the `cuda` feature), 5,000 for the CPU alone.
    #[cfg(feature = "cuda")]
    let gpu = matfree::cuda::gpu_for_test("bench rows (gpu)");
    #[cfg(not(feature = "cuda"))]
    let gpu = None::<std::convert::Infallible>;
    let n = if gpu.is_some() { 195_000 } else { 5_000 };
    let g = seed_data(n);
    let cpu_rows = 5_000.min(n);
    let cpu_data = g.data.rows(0..cpu_rows).expect("rows");
    let mut group = c.benchmark_group("rows");
    group.sample_size(10);
    group.throughput(Throughput::Elements(cpu_rows as u64));
    group.bench_function(BenchmarkId::new("cpu_stage1_stage2", cpu_rows), |b| {
        b.iter(|| g.model.evaluate(&cpu_data, &g.beta).expect("cpu rows"))
    });
    let mut bundle = RowKernelInputs::default();
    group.bench_function(BenchmarkId::new("cpu_bundle_path", cpu_rows), |b| {
        b.iter(|| {
            g.model
                .evaluate_bundled(&cpu_data, &g.beta, &mut bundle)
                .expect("cpu rows")
        })
    });
    #[cfg(feature = "cuda")]
    if let Some(gpu) = gpu {
        let stage1 = matfree::bms::device::DeviceStage1::new(gpu.clone(), &g.model, &g.data).expect("upload");
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function(BenchmarkId::new("gpu_stage1_stage2", n), |b| {
            b.iter(|| {
                let rows = stage1.evaluate(&g.beta).expect("device rows");
                gpu.synchronize().expect("sync");
                rows
            })
        });
    }
    group.finish();
}

criterion_group!(rows, benches);
criterion_main!(rows);
