//! Stage 2 of the BMS model on the device: the row kernel (`kernels/bms_row.cu`)
//! turns the Stage-1 bundle into per-row neglog, gradient and Hessian that stay
//! resident, wrapped as a [`DeviceRowHessian`]. The host receives the status
//! verdict (one download), then the joint neglog and gradient.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};

use super::row_hessian::{DeviceDesigns, DeviceRowHessian};
use super::runtime::{cuda_err, Gpu};
use crate::bms::inputs::RowKernelInputs;
use crate::layout::Layout;
use crate::row_hessian::JointGradient;
use crate::{Error, Result};

/// Threads per row block of the row kernel.
const ROW_THREADS: u32 = 128;

/// One evaluation's per-row results on the device.
pub struct DeviceRowEvaluation {
    /// Per-row neglog (n).
    pub neglog: CudaSlice<f64>,
    /// Per-row gradients (n x r).
    pub grad: CudaSlice<f64>,
    /// The joint Hessian operator over the per-row Hessians.
    pub hessian: DeviceRowHessian,
}

impl DeviceRowEvaluation {
    /// The joint neglog and its gradient in beta (fixed-order device reduction).
    pub fn joint_gradient(&self) -> Result<JointGradient> {
        self.hessian.joint_gradient(&self.neglog, &self.grad)
    }
}

/// The bundle's arrays on the device, in the kernel's argument order.
struct Uploaded {
    f64s: Vec<CudaSlice<f64>>,
    offsets: CudaSlice<u32>,
}

fn upload(gpu: &Gpu, inp: &RowKernelInputs) -> Result<Uploaded> {
    let arrays: [&[f64]; 4] = [&inp.mu_1, &inp.mu_2, &inp.y, &inp.w];
    let cells: [&[f64]; 12] = [
        &inp.cell_c0,
        &inp.cell_c1,
        &inp.cell_c2,
        &inp.cell_c3,
        &inp.cell_a,
        &inp.cell_aa,
        &inp.cell_r,
        &inp.cell_ar,
        &inp.cell_sbb,
        &inp.cell_sbh,
        &inp.cell_sbw,
        &inp.cell_moments,
    ];
    let observed: [&[f64]; 6] = [&inp.chi_obs, &inp.xi_obs, &inp.rho_u, &inp.tau_u, &inp.r_uv, &inp.e_obs];
    // Zero-length arrays (no h or w block) still need a valid pointer.
    let up = |x: &[f64]| {
        if x.is_empty() {
            gpu.zeros::<f64>(1)
        } else {
            gpu.upload(x)
        }
    };
    let f64s = arrays
        .iter()
        .chain(&cells)
        .chain(&observed)
        .map(|x| up(x))
        .collect::<Result<Vec<_>>>()?;
    Ok(Uploaded {
        f64s,
        offsets: gpu.upload(&inp.cell_offsets)?,
    })
}

/// Run Stage 2 on the device for a validated bundle over uploaded designs.
/// A rejected row (F_a <= 0 or non-finite, or non-finite outputs) fails the
/// whole evaluation with its index and reason; buffers of a failed
/// evaluation are dropped, never handed to a solver.
pub fn evaluate_rows_device(
    designs: &Arc<DeviceDesigns>,
    layout: &Layout,
    inp: &RowKernelInputs,
) -> Result<DeviceRowEvaluation> {
    inp.validate()?;
    let (n, r) = (inp.n_rows, inp.r);
    if n != designs.n() || r != layout.r() {
        let rule = format!(
            "must match the designs' n = {} and the layout's r = {}",
            designs.n(),
            layout.r()
        );
        return Err(Error::invalid("bundle (n_rows, r)", format!("({n}, {r})"), rule));
    }
    if n > i32::MAX as usize {
        return Err(Error::invalid("n_rows", n, "must be < 2^31 for the row kernel's grid"));
    }
    let gpu = designs.gpu().clone();
    let up = upload(&gpu, inp)?;
    let mut neglog = gpu.zeros::<f64>(n)?;
    let mut grad = gpu.zeros::<f64>(n * r)?;
    let mut hess = gpu.zeros::<f64>(n * r * r)?;
    let mut f_au = gpu.zeros::<f64>(n * r)?;
    let mut status = gpu.zeros::<u32>(n)?;
    let (n32, r32, ph, pw) = (n as i32, r as i32, inp.p_h as i32, inp.p_w as i32);
    let mut b = gpu.stream.launch_builder(&gpu.f.bms_row);
    b.arg(&n32).arg(&r32).arg(&ph).arg(&pw);
    for (k, a) in up.f64s.iter().enumerate() {
        // The offsets go after mu_1, mu_2, y, w (argument order of bms_row).
        if k == 4 {
            b.arg(&up.offsets);
        }
        b.arg(a);
    }
    b.arg(&mut f_au)
        .arg(&mut neglog)
        .arg(&mut grad)
        .arg(&mut hess)
        .arg(&mut status);
    let cfg = LaunchConfig {
        grid_dim: (n as u32, 1, 1),
        block_dim: (ROW_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: validate() checked every array's length against n, r, p_h, p_w
    // and the cell count; outputs are sized n, n r, n r^2; one block per row.
    unsafe { b.launch(cfg) }.map_err(|e| cuda_err("bms_row", e))?;
    check_status(&gpu, &status)?;
    let hessian = DeviceRowHessian::from_device(layout.clone(), designs.clone(), hess)?;
    Ok(DeviceRowEvaluation { neglog, grad, hessian })
}

/// The status verdict: the first rejected row, if any (one counted download).
fn check_status(gpu: &Gpu, status: &CudaSlice<u32>) -> Result<()> {
    gpu.count_sync();
    let codes = gpu.stream.clone_dtoh(status).map_err(|e| cuda_err("row status", e))?;
    match codes.iter().position(|&c| c != 0) {
        None => Ok(()),
        Some(row) => {
            let reason = match codes[row] {
                1 => "F_a <= 0 or not finite (the calibration has no increasing root)".to_string(),
                2 => "non-finite neglog, gradient or Hessian".to_string(),
                c => format!("status code {c}"),
            };
            Err(Error::RowRejected { row, reason })
        }
    }
}

/// The one call of a device row evaluation: Stage 1 for every row on the
/// CPU (see benches/RESULTS.md for its cost), Stage 2 on the device over
/// designs uploaded once. Per-row results stay on the device; the host gets
/// the status verdict here and the joint neglog and gradient from
/// [`DeviceRowEvaluation::joint_gradient`].
pub fn evaluate_device(
    model: &crate::bms::BmsModel,
    data: &crate::bms::BmsData,
    designs: &Arc<DeviceDesigns>,
    beta: &[f64],
) -> Result<DeviceRowEvaluation> {
    let (inputs, _) = model.stage1(data, beta)?;
    evaluate_rows_device(designs, model.layout(), &inputs)
}

/// sum_i neglog_i(beta) with Stage 1 on the CPU and Stage 2, the Hessian
/// operator and the joint reductions on the device.
pub struct BmsDeviceObjective<'a> {
    model: &'a crate::bms::BmsModel,
    data: &'a crate::bms::BmsData,
    designs: Arc<DeviceDesigns>,
}

impl<'a> BmsDeviceObjective<'a> {
    /// Upload the designs once; every evaluation reuses them.
    pub fn new(gpu: Arc<Gpu>, model: &'a crate::bms::BmsModel, data: &'a crate::bms::BmsData) -> Result<Self> {
        Ok(Self {
            model,
            data,
            designs: DeviceDesigns::upload(gpu, &data.designs)?,
        })
    }

    fn rows(&self, beta: &[f64]) -> Result<DeviceRowEvaluation> {
        evaluate_device(self.model, self.data, &self.designs, beta)
    }
}

impl matfree_solvers::newton::Objective<super::CudaBackend> for BmsDeviceObjective<'_> {
    fn dim(&self) -> usize {
        self.model.layout().p_total()
    }

    fn evaluate(
        &self,
        beta: &[f64],
    ) -> matfree_solvers::Result<Option<matfree_solvers::newton::Evaluation<'_, super::CudaBackend>>> {
        use crate::bms::objective::outside_domain;
        let Some(rows) = outside_domain(self.rows(beta))? else {
            return Ok(None);
        };
        let joint = rows.joint_gradient()?;
        Ok(Some(matfree_solvers::newton::Evaluation {
            value: joint.neglog,
            gradient: joint.gradient,
            hessian: Box::new(rows.hessian),
        }))
    }

    fn cost(&self) -> matfree_solvers::newton::CostEstimate {
        crate::bms::objective::bms_cost(self.model, self.data.n())
    }
}
