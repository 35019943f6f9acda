//! A GAM's REML fit on a [`Device`]: the one place that turns "the CPU or
//! a GPU" into a backend and an objective, for every front end (`fit_gam`,
//! the Python package), so that a change to the GPU path reaches them all.

use matfree_solvers::observer::Observer;
use matfree_solvers::CpuBackend;

use super::{GamFit, GamModel, GamOptions};
use crate::device::Device;
use crate::Result;

impl GamModel {
    /// The REML fit on `device`: the CPU, or a GPU (the rows on the device,
    /// [`GamModel::device_objective`]; where the model is too wide for the
    /// device's rows, evaluated on the host and their Hessians uploaded,
    /// with a note in [`GamFit::notes`]), telling `observer` of its progress
    /// and stopping where it asks ([`GamModel::fit_observed`]).
    pub fn fit_on_device(&self, device: &Device, observer: &dyn Observer, opts: &GamOptions) -> Result<GamFit> {
        match device {
            #[cfg(feature = "cuda")]
            Device::Gpu(gpu) => {
                use crate::cuda::{CudaBackend, DeviceRowObjective};
                let backend = CudaBackend::new(gpu.clone())?;
                match self.device_objective(gpu.clone()) {
                    Ok(objective) => self.fit_observed(&backend, &objective, observer, opts),
                    Err(e) => {
                        let objective = DeviceRowObjective::from_host(gpu.clone(), self.objective()?)?;
                        let mut fit = self.fit_observed(&backend, &objective, observer, opts)?;
                        fit.notes.push(format!("the rows stayed on the host ({e})"));
                        Ok(fit)
                    }
                }
            }
            Device::Cpu { .. } => self.fit_observed(&CpuBackend::new(), &self.objective()?, observer, opts),
        }
    }
}
