//! A [`RowObjective`] whose Hessian lives on the GPU: the model's rows are
//! evaluated on the host as on the CPU, and each evaluation's row Hessians
//! are uploaded (n r^2 values) over designs uploaded once, so PCG, the
//! dense path and REML's factorisations run on the device.

use std::rc::Rc;
use std::sync::Arc;

use matfree_solvers::newton::{CostEstimate, Evaluation, Objective};
use matfree_solvers::{CpuBackend, Result as SolverResult};

use super::{CudaBackend, DeviceDesigns, DeviceRowHessian, Gpu};
use crate::row_objective::{RowEvaluator, RowObjective};
use crate::Result;

/// [`RowObjective`] on [`CudaBackend`].
pub struct DeviceRowObjective<E> {
    rows: RowObjective<E>,
    designs: Arc<DeviceDesigns>,
}

impl<E: RowEvaluator> DeviceRowObjective<E> {
    /// Upload the designs of `rows` to `gpu` once.
    pub fn new(gpu: Arc<Gpu>, rows: RowObjective<E>) -> Result<Self> {
        let designs = DeviceDesigns::upload(gpu, rows.designs())?;
        Ok(Self { rows, designs })
    }
    /// The host objective.
    pub fn host(&self) -> &RowObjective<E> {
        &self.rows
    }
}

impl<E: RowEvaluator> Objective<CudaBackend> for DeviceRowObjective<E> {
    fn dim(&self) -> usize {
        Objective::<CpuBackend>::dim(&self.rows)
    }
    fn evaluate(&self, beta: &[f64]) -> SolverResult<Option<Evaluation<'_, CudaBackend>>> {
        let Some((joint, hess)) = self.rows.host_evaluation(beta)? else {
            return Ok(None);
        };
        let on_device = self.designs.gpu().upload(&hess)?;
        let hessian = DeviceRowHessian::from_device(self.rows.layout().clone(), self.designs.clone(), on_device)?;
        Ok(Some(Evaluation {
            value: joint.neglog,
            gradient: joint.gradient,
            hessian: Rc::new(hessian),
        }))
    }
    fn value(&self, beta: &[f64]) -> SolverResult<Option<f64>> {
        Objective::<CpuBackend>::value(&self.rows, beta) // on the host: no upload
    }
    fn cheap_value(&self) -> bool {
        self.rows.evaluator().cheap_value()
    }
    fn cost(&self) -> CostEstimate {
        Objective::<CpuBackend>::cost(&self.rows)
    }
    fn coefficient_scales(&self) -> Option<Vec<f64>> {
        Objective::<CpuBackend>::coefficient_scales(&self.rows)
    }
    fn exact_hessian_derivative(&self) -> bool {
        self.rows.evaluator().has_hessian_derivative()
    }
    /// The host objective's (exact, or differenced on the host).
    fn hessian_derivative(
        &self,
        beta: &[f64],
        hessian: &[f64],
        direction: &[f64],
        step: f64,
    ) -> SolverResult<Vec<f64>> {
        Objective::<CpuBackend>::hessian_derivative(&self.rows, beta, hessian, direction, step)
    }
}
