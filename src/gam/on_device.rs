//! A GAM's REML fit on a [`Device`]: the one place that turns "the CPU or
//! a GPU" into a backend and an objective, for every front end (`fit_gam`,
//! the Python package), so that a change to the GPU path reaches them all.

use matfree_solvers::observer::Observer;
use matfree_solvers::CpuBackend;

use super::{GamFit, GamModel, GamOptions};
use crate::device::Device;
use crate::Result;

impl GamModel {
    /// The REML fit on `device`: the CPU, or a GPU (rows evaluated on the
    /// host, their Hessians uploaded), telling `observer` of its progress
    /// and stopping where it asks ([`GamModel::fit_observed`]).
    pub fn fit_on_device(&self, device: &Device, observer: &dyn Observer, opts: &GamOptions) -> Result<GamFit> {
        match device {
            #[cfg(feature = "cuda")]
            Device::Gpu(gpu) => {
                use crate::cuda::{CudaBackend, DeviceRowObjective};
                let objective = DeviceRowObjective::from_host(gpu.clone(), self.objective()?)?;
                self.fit_observed(&CudaBackend::new(gpu.clone())?, &objective, observer, opts)
            }
            Device::Cpu { .. } => self.fit_observed(&CpuBackend::new(), &self.objective()?, observer, opts),
        }
    }
}
