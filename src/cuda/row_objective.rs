//! The objective of any model whose rows live on one GPU: the model
//! evaluates its rows there ([`DeviceRowEvaluator`]: each row's value,
//! gradient and Hessian in its coordinates, resident on the device) and
//! [`DeviceRowObjective`] does the rest, as [`RowObjective`] does on the
//! CPU: the joint value and gradient (a fixed-order device reduction), the
//! Hessian as a [`DeviceRowHessian`], the domain rule, the cost and the
//! coefficient scales. [`HostRows`] is the evaluator of a model with CPU
//! rows only: its rows are evaluated on the host and uploaded.

use std::rc::Rc;
use std::sync::Arc;

use cudarc::driver::CudaSlice;
use matfree_solvers::newton::{fd_hessian_derivative, traces_through_dense, CostEstimate, Evaluation, Objective};
use matfree_solvers::{CpuBackend, LinearOperator, Result as SolverResult};

use super::row_hessian::split_joint;
use super::{CudaBackend, DeviceDesigns, DeviceRowHessian, Gpu};
use crate::designs::Designs;
use crate::layout::Layout;
use crate::row_hessian::JointGradient;
use crate::row_objective::{
    column_scales, lower_factor, outside_domain, row_cost, HessianStorage, RowEvaluator, RowObjective,
};
use crate::{Error, Result};

/// One evaluation's per-row results on the device.
pub struct DeviceRowEvaluation {
    /// Per-row neglog (n).
    pub neglog: CudaSlice<f64>,
    /// Per-row gradients (n x r).
    pub grad: CudaSlice<f64>,
    /// The joint Hessian operator over the per-row Hessians.
    pub hessian: DeviceRowHessian,
    /// The joint gradient (p) and neglog (1), at the buffer's start, where
    /// the model summed them as it evaluated its rows (a fixed-order
    /// reduction of its own); `None`: summed from `neglog` and `grad`.
    pub joint: Option<CudaSlice<f64>>,
}

impl DeviceRowEvaluation {
    /// The joint neglog and its gradient in beta (fixed-order device
    /// reduction; one counted download).
    pub fn joint_gradient(&self) -> Result<JointGradient> {
        let Some(joint) = &self.joint else {
            return self.hessian.joint_gradient(&self.neglog, &self.grad);
        };
        let p = self.hessian.layout().p_total();
        if joint.len() < p + 1 {
            let rule = format!("must hold the gradient and the neglog, p + 1 = {}", p + 1);
            return Err(Error::invalid("joint.len", joint.len(), rule));
        }
        let mut sums = self.hessian.gpu().download(joint)?;
        sums.truncate(p + 1);
        Ok(split_joint(sums))
    }
}

/// The verdict a queued evaluation waits for.
type Verdict = Box<dyn FnOnce() -> Result<()>>;

/// A queued evaluation: its rows, and the check (a download of the model's
/// per-row status, say) that says whether every row is valid.
pub struct PendingRows {
    rows: DeviceRowEvaluation,
    verdict: Verdict,
}

impl PendingRows {
    /// Rows whose validity `verdict` tells when called: an error (a
    /// rejected row, [`Error::RowRejected`], for a point outside the
    /// model's domain) fails the evaluation.
    pub fn new(rows: DeviceRowEvaluation, verdict: impl FnOnce() -> Result<()> + 'static) -> Self {
        Self {
            rows,
            verdict: Box::new(verdict),
        }
    }

    /// Rows already known to be valid.
    pub fn ready(rows: DeviceRowEvaluation) -> Self {
        Self::new(rows, || Ok(()))
    }

    /// Wait for the verdict: the rows, or the error.
    pub fn finish(self) -> Result<DeviceRowEvaluation> {
        (self.verdict)()?;
        Ok(self.rows)
    }
}

/// What a model implements to evaluate its rows on one GPU.
pub trait DeviceRowEvaluator {
    /// The layout of a row's coordinates.
    fn layout(&self) -> &Layout;

    /// The designs on the device, one per predictor of the layout.
    fn designs(&self) -> &Arc<DeviceDesigns>;

    /// Queue every row's value, gradient and Hessian at beta without
    /// waiting for the verdict ([`PendingRows::finish`] waits), so that
    /// several devices' shards run at once. A row outside the model's
    /// domain is [`Error::RowRejected`] at the verdict.
    fn launch(&self, beta: &[f64]) -> Result<PendingRows>;

    /// Whether [`DeviceRowEvaluator::value`] is much cheaper than
    /// [`DeviceRowEvaluator::launch`] (default false).
    fn cheap_value(&self) -> bool {
        false
    }

    /// The joint value alone (`None` outside the domain); called only where
    /// [`DeviceRowEvaluator::cheap_value`] says so.
    fn value(&self, _beta: &[f64]) -> Result<Option<f64>> {
        Err(Error::invalid(
            "value",
            "not offered",
            "call it only where cheap_value() is true",
        ))
    }

    /// Whether every row's negative log-likelihood is convex in theta
    /// (default false; see [`Objective::convex`]).
    fn convex(&self) -> bool {
        false
    }

    /// Whether [`DeviceRowEvaluator::hessian_derivative`] is exact
    /// (default false: the objective differences Hessians instead).
    fn exact_hessian_derivative(&self) -> bool {
        false
    }

    /// d/dt H(beta + t direction) at t = 0, dense row-major p x p; called
    /// only where [`DeviceRowEvaluator::exact_hessian_derivative`] says so.
    fn hessian_derivative(&self, _beta: &[f64], _direction: &[f64]) -> Result<Vec<f64>> {
        Err(Error::invalid(
            "hessian_derivative",
            "not offered",
            "call it only where exact_hessian_derivative() is true",
        ))
    }

    /// Whether [`DeviceRowEvaluator::hessian_derivative_traces`] is offered
    /// (default false: the objective then forms each dense dH_k with
    /// [`DeviceRowEvaluator::hessian_derivative`] or by differences).
    fn has_hessian_derivative_traces(&self) -> bool {
        false
    }

    /// tr(A dH_k) for each direction d_k, dH_k the Hessian's derivative at
    /// beta along d_k and A = K K^T given by its lower Cholesky factor K
    /// (`factor`, row-major p x p); called only where
    /// [`DeviceRowEvaluator::has_hessian_derivative_traces`] says so.
    fn hessian_derivative_traces(&self, _beta: &[f64], _factor: &[f64], _directions: &[&[f64]]) -> Result<Vec<f64>> {
        Err(Error::invalid(
            "hessian_derivative_traces",
            "not offered",
            "call it only where has_hessian_derivative_traces() is true",
        ))
    }
}

/// Check that device designs have the host designs' shape.
pub(crate) fn check_same_designs(device: &DeviceDesigns, host: &Designs) -> Result<()> {
    if (device.n(), device.widths()) != (host.n(), host.widths()) {
        return Err(Error::invalid(
            "device designs (n, widths)",
            format!("({}, {:?})", device.n(), device.widths()),
            format!("must equal the host designs' ({}, {:?})", host.n(), host.widths()),
        ));
    }
    Ok(())
}

/// sum_i neglog_i(theta_i(beta)) with the rows, the Hessian operator and
/// the joint reductions on one GPU.
pub struct DeviceRowObjective<E> {
    rows: E,
    scales: Vec<f64>,
    single_precision_hvp: bool,
    storage: HessianStorage,
    backend: CudaBackend,
}

impl<E: DeviceRowEvaluator> DeviceRowObjective<E> {
    /// The objective of `rows`; `host` are its designs on the host (the
    /// coefficient scales are theirs).
    pub fn new(rows: E, host: &Designs) -> Result<Self> {
        check_same_designs(rows.designs(), host)?;
        crate::row_hessian::check_layout_designs(rows.layout(), host)?;
        let scales = column_scales(rows.layout(), host);
        let backend = CudaBackend::new(rows.designs().gpu().clone())?;
        Ok(Self {
            rows,
            scales,
            single_precision_hvp: false,
            storage: HessianStorage::Auto,
            backend,
        })
    }

    /// How each evaluation keeps its Hessian (default
    /// [`HessianStorage::Auto`]).
    pub fn with_hessian_storage(mut self, storage: HessianStorage) -> Self {
        self.storage = storage;
        self
    }

    /// Whether evaluations keep the dense matrix rather than the rows.
    pub fn keeps_dense(&self) -> bool {
        self.storage.keeps_dense(self.cost(), self.dim())
    }

    /// Whether each evaluation's Hessian operator gives its PCG products a
    /// packed f32 copy of the rows
    /// ([`DeviceRowHessian::with_single_precision_hvp`]; default off). The
    /// gradient, the dense steps and the log-determinants stay f64, so a
    /// fit converges to the same optimum; only its PCG steps are inexact.
    /// An evaluation that keeps the dense matrix ([`HessianStorage`]) makes
    /// no copy.
    pub fn with_single_precision_hvp(mut self, on: bool) -> Self {
        self.single_precision_hvp = on;
        self
    }

    /// The model's rows.
    pub fn evaluator(&self) -> &E {
        &self.rows
    }

    /// Every row at beta, on the device (verdict read).
    pub fn evaluate_rows(&self, beta: &[f64]) -> Result<DeviceRowEvaluation> {
        self.rows.launch(beta)?.finish()
    }
}

impl<E: DeviceRowEvaluator> Objective<CudaBackend> for DeviceRowObjective<E> {
    fn dim(&self) -> usize {
        self.rows.layout().p_total()
    }

    fn evaluate(&self, beta: &[f64]) -> SolverResult<Option<Evaluation<'_, CudaBackend>>> {
        let Some(rows) = outside_domain(self.evaluate_rows(beta))? else {
            return Ok(None);
        };
        let joint = rows.joint_gradient()?;
        // The f32 copy serves PCG products, which a kept dense matrix replaces.
        let rows: Rc<dyn LinearOperator<CudaBackend>> = match self.single_precision_hvp && !self.keeps_dense() {
            true => Rc::new(rows.hessian.with_single_precision_hvp()?),
            false => Rc::new(rows.hessian),
        };
        let hessian = self
            .storage
            .keep(self.cost(), self.dim(), rows, || self.backend.clone())?;
        Ok(Some(Evaluation {
            value: joint.neglog,
            gradient: joint.gradient,
            hessian,
        }))
    }

    fn value(&self, beta: &[f64]) -> SolverResult<Option<f64>> {
        match self.rows.cheap_value() {
            true => Ok(self.rows.value(beta)?),
            false => Ok(self.evaluate(beta)?.map(|e| e.value)),
        }
    }

    fn cheap_value(&self) -> bool {
        self.rows.cheap_value()
    }

    fn cost(&self) -> CostEstimate {
        row_cost(self.rows.layout(), self.rows.designs().n())
    }

    fn coefficient_scales(&self) -> Option<Vec<f64>> {
        Some(self.scales.clone())
    }

    fn exact_hessian_derivative(&self) -> bool {
        self.rows.exact_hessian_derivative()
    }

    fn convex(&self) -> bool {
        self.rows.convex()
    }

    fn hessian_derivative(
        &self,
        beta: &[f64],
        hessian: &[f64],
        direction: &[f64],
        step: f64,
    ) -> SolverResult<Vec<f64>> {
        match self.rows.exact_hessian_derivative() {
            true => Ok(self.rows.hessian_derivative(beta, direction)?),
            false => fd_hessian_derivative(self, beta, hessian, direction, step),
        }
    }

    /// The model's traces where it offers them and A = (H + S)^{-1} has a
    /// Cholesky factor (only p x p and p x m values cross to the device);
    /// otherwise each dense dH_k, as [`RowObjective`] does.
    fn hessian_derivative_traces(
        &self,
        beta: &[f64],
        hessian: &[f64],
        inverse: &[f64],
        directions: &[&[f64]],
        steps: &[f64],
    ) -> SolverResult<Vec<f64>> {
        if self.rows.has_hessian_derivative_traces() {
            if let Some(factor) = lower_factor(inverse, self.dim())? {
                return Ok(self.rows.hessian_derivative_traces(beta, &factor, directions)?);
            }
        }
        traces_through_dense(self, beta, hessian, inverse, directions, steps)
    }
}

/// The device evaluator of a model with CPU rows ([`RowEvaluator`]): each
/// evaluation's rows are computed on the host, as [`RowObjective`] does,
/// and uploaded (n (1 + r + r^2) values) over designs uploaded once.
pub struct HostRows<E> {
    host: RowObjective<E>,
    designs: Arc<DeviceDesigns>,
}

impl<E: RowEvaluator> HostRows<E> {
    /// Upload the designs of `host` to `gpu` once.
    pub fn new(gpu: Arc<Gpu>, host: RowObjective<E>) -> Result<Self> {
        let designs = DeviceDesigns::upload(gpu, host.designs())?;
        Ok(Self { host, designs })
    }

    /// The host objective.
    pub fn host(&self) -> &RowObjective<E> {
        &self.host
    }
}

impl<E: RowEvaluator> DeviceRowEvaluator for HostRows<E> {
    fn layout(&self) -> &Layout {
        self.host.layout()
    }

    fn designs(&self) -> &Arc<DeviceDesigns> {
        &self.designs
    }

    fn launch(&self, beta: &[f64]) -> Result<PendingRows> {
        let (neglog, grad, hess) = self.host.host_rows(beta)?;
        let gpu = self.designs.gpu();
        let hessian = DeviceRowHessian::from_device(self.layout().clone(), self.designs.clone(), gpu.upload(&hess)?)?;
        Ok(PendingRows::ready(DeviceRowEvaluation {
            neglog: gpu.upload(&neglog)?,
            grad: gpu.upload(&grad)?,
            hessian,
            joint: None,
        }))
    }

    fn cheap_value(&self) -> bool {
        self.host.evaluator().cheap_value()
    }

    /// On the host: nothing uploaded.
    fn value(&self, beta: &[f64]) -> Result<Option<f64>> {
        Ok(Objective::<CpuBackend>::value(&self.host, beta)?)
    }

    fn exact_hessian_derivative(&self) -> bool {
        self.host.evaluator().has_hessian_derivative()
    }

    fn convex(&self) -> bool {
        self.host.evaluator().convex()
    }

    fn hessian_derivative(&self, beta: &[f64], direction: &[f64]) -> Result<Vec<f64>> {
        Ok(self.host.row_hessian_derivative(beta, direction)?)
    }

    fn has_hessian_derivative_traces(&self) -> bool {
        self.host.evaluator().has_hessian_derivative()
    }

    /// On the host, from the rows' leverages (as [`RowObjective`] does).
    fn hessian_derivative_traces(&self, beta: &[f64], factor: &[f64], directions: &[&[f64]]) -> Result<Vec<f64>> {
        let p = self.layout().p_total();
        matfree_solvers::operator::expect_len("factor", factor.len(), p * p)?;
        let k = faer::MatRef::from_row_major_slice(factor, p, p);
        Ok(self.host.row_hessian_derivative_traces(beta, k, directions)?)
    }
}

impl<E: RowEvaluator> DeviceRowObjective<HostRows<E>> {
    /// [`RowObjective`] on [`CudaBackend`]: the rows on the host, their
    /// Hessians uploaded each evaluation, the designs once.
    pub fn from_host(gpu: Arc<Gpu>, host: RowObjective<E>) -> Result<Self> {
        let designs = host.designs().clone();
        Self::new(HostRows::new(gpu, host)?, &designs)
    }

    /// The host objective.
    pub fn host(&self) -> &RowObjective<E> {
        self.rows.host()
    }
}
