//! Runs each hot kernel a few times at the seed shape and nothing else, for
//! an external profiler (Nsight Compute), e.g.
//!
//!     ncu --kernel-name regex:'hvp_staged|hvp_staged_f32|bms_calibrate|bms_cell_moments|bms_row_bases' --launch-count 6 \
//!         --section SpeedOfLight --section Occupancy --section WarpStateStats \
//!         target/release/examples/profile_kernels
//!
//! Without a GPU it says so and exits.

use matfree::bms::device::DeviceStage1;
use matfree::bms::io::generator::{generate, GeneratorConfig};
use matfree::cuda::{select_device, CudaBackend, Device, DeviceRowHessian, GpuPolicy};
use matfree::fixture::{random_row_problem, Rng, Shape};
use matfree::solvers::{Backend, LinearOperator};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Device::Gpu(gpu) = select_device(GpuPolicy::from_env()?)? else {
        println!("profile_kernels: no GPU, nothing to profile");
        return Ok(());
    };
    let op = random_row_problem(Shape::SEED, 1.0, 7)?;
    let be = CudaBackend::new(gpu.clone())?;
    let v = be.upload(&Rng::new(1).normals(op.dim()))?;
    let mut y = be.zeros(op.dim())?;
    let full = DeviceRowHessian::from_cpu(gpu.clone(), &op)?;
    for _ in 0..2 {
        full.apply(&v, &mut y)?;
    }
    let packed = full.packed()?;
    for _ in 0..2 {
        packed.apply(&v, &mut y)?;
    }
    let single = packed.with_single_precision_hvp()?;
    for _ in 0..2 {
        single.apply(&v, &mut y)?;
    }
    let g = generate(GeneratorConfig::seed_shape(20_000))?;
    let stage1 = DeviceStage1::new(gpu.clone(), &g.model, &g.data)?;
    for _ in 0..2 {
        stage1.evaluate(&g.beta)?;
    }
    gpu.synchronize()?;
    println!("profile_kernels: done on {}", gpu.name());
    Ok(())
}
