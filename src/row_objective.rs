//! A Newton/REML objective from a model's rows. The model says, for row i
//! at its coordinates theta_i, the negative log-likelihood with its gradient
//! and Hessian in theta ([`RowEvaluator`]); [`RowObjective`] does the rest
//! for any [`Layout`]: theta_i = P_i beta for every row, the model's rows in
//! parallel, the joint gradient sum_i P_i^T g_i and the [`RowHessian`].
//!
//! Each row writes its own slots and every sum over rows is a fixed-order
//! chunked reduction (see [`crate::row_hessian`]), so an evaluation is
//! bitwise the same for any number of threads.

use std::rc::Rc;
use std::sync::Arc;

use faer::{MatRef, Side};
use matfree_solvers::newton::{fd_hessian_derivative, traces_through_dense, CostEstimate, Evaluation, Objective};
use matfree_solvers::operator::expect_len;
use matfree_solvers::{Backend, CpuBackend, LinearOperator, ResidentDense, Result as SolverResult};
use rayon::prelude::*;

use crate::designs::{first_non_finite, Designs};
use crate::layout::{Layout, Via};
use crate::pool::{BufferPool, PooledVec};
use crate::row_hessian::{
    check_layout_designs, joint_gradient, pulled_back_quadratic, reduce_chunks, row_direction, tile_directions,
    JointGradient, RowHessian, DENSE_TILE, ROW_CHUNK,
};
use crate::{Error, Result};

/// What a model implements: one row's negative log-likelihood in its r
/// coordinates theta (the layout's linear predictors, then its direct
/// blocks). A non-finite value, gradient or Hessian entry means theta is
/// outside the model's domain (Newton then shortens its step).
pub trait RowEvaluator: Sync {
    /// Row i's negative log-likelihood at `theta` (length r); its gradient
    /// goes to `grad` (r) and its Hessian to `hess` (r x r, row-major,
    /// symmetric). Both arrive zeroed, so only non-zero entries need
    /// writing.
    fn row(&self, i: usize, theta: &[f64], grad: &mut [f64], hess: &mut [f64]) -> f64;

    /// Rows `first..first + neglog.len()` at their coordinates `theta` (r
    /// a row, row-major), into `neglog`, `grad` (r a row) and `hess` (r^2
    /// a row), the last two zeroed. The default calls
    /// [`RowEvaluator::row`] for each; a model whose rows need working
    /// memory overrides it to set that up once a batch.
    fn rows(&self, first: usize, theta: &[f64], neglog: &mut [f64], grad: &mut [f64], hess: &mut [f64]) {
        let r = theta.len() / neglog.len().max(1);
        let each = theta
            .chunks_exact(r)
            .zip(grad.chunks_exact_mut(r))
            .zip(hess.chunks_exact_mut(r * r));
        for (k, ((t, g), h)) in each.enumerate() {
            neglog[k] = self.row(first + k, t, g, h);
        }
    }

    /// The value alone (default: [`RowEvaluator::row`] into scratch);
    /// override it together with [`RowEvaluator::cheap_value`].
    fn row_value(&self, i: usize, theta: &[f64]) -> f64 {
        let r = theta.len();
        let (mut grad, mut hess) = (vec![0.0; r], vec![0.0; r * r]);
        self.row(i, theta, &mut grad, &mut hess)
    }

    /// Whether [`RowEvaluator::row_value`] is much cheaper than
    /// [`RowEvaluator::row`] (default false: line searches then keep full
    /// evaluations, so none is repeated).
    fn cheap_value(&self) -> bool {
        false
    }

    /// Whether every row's negative log-likelihood is convex in theta
    /// (default false); the objective is then convex in beta
    /// ([`Objective::convex`]).
    fn convex(&self) -> bool {
        false
    }

    /// Whether [`RowEvaluator::row_hessian_derivative`] is implemented
    /// (default false: REML then differences Hessians, one extra
    /// evaluation a smoothing parameter, with an error of order its step).
    fn has_hessian_derivative(&self) -> bool {
        false
    }

    /// d/dt H_i(theta + t dtheta) at t = 0 into `out` (r x r, zeroed):
    /// the third derivatives contracted with `dtheta`. Called only where
    /// [`RowEvaluator::has_hessian_derivative`] says so.
    fn row_hessian_derivative(&self, _i: usize, _theta: &[f64], _dtheta: &[f64], _out: &mut [f64]) {}

    /// [`RowEvaluator::row_hessian_derivative`] along each of k directions
    /// (`dthetas`, k x r) into `out` (k x r^2, zeroed). The default calls
    /// it once a direction; a model whose third derivatives at theta serve
    /// every direction overrides it to compute them once.
    fn row_hessian_derivatives(&self, i: usize, theta: &[f64], dthetas: &[f64], out: &mut [f64]) {
        let r = theta.len();
        for (d, o) in dthetas.chunks_exact(r).zip(out.chunks_exact_mut(r * r)) {
            self.row_hessian_derivative(i, theta, d, o);
        }
    }
}

/// sum_i neglog_i(theta_i(beta)) over a layout and its designs, with the
/// Hessian as a [`RowHessian`] on the CPU.
pub struct RowObjective<E> {
    layout: Layout,
    designs: Arc<Designs>,
    evaluator: E,
    /// The row Hessians' memory, reused across evaluations.
    buffers: BufferPool,
    scales: Vec<f64>,
    storage: HessianStorage,
}

impl<E: RowEvaluator> RowObjective<E> {
    /// The objective of `evaluator` with one design per predictor of
    /// `layout`, each of the predictor's width.
    pub fn new(layout: Layout, designs: Arc<Designs>, evaluator: E) -> Result<Self> {
        check_layout_designs(&layout, &designs)?;
        let scales = column_scales(&layout, &designs);
        Ok(Self {
            layout,
            designs,
            evaluator,
            buffers: BufferPool::default(),
            scales,
            storage: HessianStorage::Auto,
        })
    }

    /// How each evaluation keeps its Hessian (default
    /// [`HessianStorage::Auto`]).
    pub fn with_hessian_storage(mut self, storage: HessianStorage) -> Self {
        self.storage = storage;
        self
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
    /// The designs.
    pub fn designs(&self) -> &Arc<Designs> {
        &self.designs
    }
    /// The model.
    pub fn evaluator(&self) -> &E {
        &self.evaluator
    }
    /// The layout, the designs and the model.
    pub fn into_parts(self) -> (Layout, Arc<Designs>, E) {
        (self.layout, self.designs, self.evaluator)
    }

    /// Row i's coordinates theta_i = P_i beta (r values).
    pub fn theta(&self, beta: &[f64], i: usize) -> Vec<f64> {
        let mut theta = vec![0.0; self.layout.r()];
        row_direction(&self.layout, &self.designs, i, beta, &mut theta);
        theta
    }

    /// f(i, k, theta_i) for the rows of chunk c (k the row's place in it).
    fn chunk_rows(&self, c: usize, beta: &[f64], mut f: impl FnMut(usize, usize, &[f64])) {
        let mut theta = vec![0.0; self.layout.r()];
        let rows = c * ROW_CHUNK..((c + 1) * ROW_CHUNK).min(self.designs.n());
        for (k, i) in rows.enumerate() {
            row_direction(&self.layout, &self.designs, i, beta, &mut theta);
            f(i, k, &theta);
        }
    }

    /// Every row's value, gradient and Hessian at beta (n, n r, n r^2),
    /// a chunk of rows a task ([`RowEvaluator::rows`]).
    fn rows(&self, beta: &[f64]) -> (Vec<f64>, Vec<f64>, PooledVec) {
        let (n, r) = (self.designs.n(), self.layout.r());
        let (mut neglog, mut grad) = (vec![0.0; n], vec![0.0; n * r]);
        let mut hess = self.buffers.take(n * r * r);
        let chunks = neglog
            .par_chunks_mut(ROW_CHUNK)
            .zip(grad.par_chunks_mut(ROW_CHUNK * r))
            .zip(hess.par_chunks_mut(ROW_CHUNK * r * r));
        chunks.enumerate().for_each(|(c, ((v, g), h))| {
            h.fill(0.0); // a pooled buffer holds the last evaluation's rows
            let first = c * ROW_CHUNK;
            let theta = tile_directions(&self.layout, &self.designs, first..first + v.len(), &[beta]);
            self.evaluator.rows(first, &theta, v, g, h);
        });
        (neglog, grad, hess)
    }

    /// Every row's value, gradient and Hessian at beta (n, n r, n r^2),
    /// all finite; a row with a non-finite entry is outside the model's
    /// domain, [`Error::RowRejected`].
    pub(crate) fn host_rows(&self, beta: &[f64]) -> Result<(Vec<f64>, Vec<f64>, PooledVec)> {
        expect_len("beta", beta.len(), self.layout.p_total())?;
        let r = self.layout.r();
        let (neglog, grad, hess) = self.rows(beta);
        let rejected = [(&neglog[..], 1), (&grad, r), (&hess, r * r)]
            .iter()
            .filter_map(|(x, width)| first_non_finite(x).map(|at| at / width))
            .min();
        match rejected {
            Some(row) => Err(Error::RowRejected {
                row,
                reason: "a non-finite value, gradient or Hessian entry (outside the model's domain)".into(),
            }),
            None => Ok((neglog, grad, hess)),
        }
    }

    /// The joint value and gradient at beta with the row Hessians (n r^2),
    /// on the host; `None` outside the model's domain (a non-finite row).
    fn host_evaluation(&self, beta: &[f64]) -> SolverResult<Option<(JointGradient, PooledVec)>> {
        let Some((neglog, grad, hess)) = outside_domain(self.host_rows(beta))? else {
            return Ok(None);
        };
        Ok(Some((
            joint_gradient(&self.layout, &self.designs, &neglog, &grad)?,
            hess,
        )))
    }

    /// The model's exact d/dt H(beta + t direction) at t = 0 (dense p x p),
    /// from [`RowEvaluator::row_hessian_derivative`].
    pub(crate) fn row_hessian_derivative(&self, beta: &[f64], direction: &[f64]) -> SolverResult<Vec<f64>> {
        expect_len("beta", beta.len(), self.layout.p_total())?;
        expect_len("direction", direction.len(), self.layout.p_total())?;
        let (n, r) = (self.designs.n(), self.layout.r());
        let mut dh = self.buffers.take(n * r * r);
        dh.par_chunks_mut(ROW_CHUNK * r * r).enumerate().for_each(|(c, h)| {
            h.fill(0.0);
            let mut d = vec![0.0; r];
            self.chunk_rows(c, beta, |i, k, theta| {
                row_direction(&self.layout, &self.designs, i, direction, &mut d);
                let out = &mut h[k * r * r..(k + 1) * r * r];
                self.evaluator.row_hessian_derivative(i, theta, &d, out);
            });
        });
        if let Some(at) = first_non_finite(&dh) {
            let field = format!("row_hessian_derivative[row {}][{}]", at / (r * r), at % (r * r));
            return Err(Error::invalid(field, dh[at], "must be finite at a point inside the domain").into());
        }
        Ok(RowHessian::with_storage(self.layout.clone(), self.designs.clone(), dh)?.dense_host())
    }
}

impl<E: RowEvaluator> RowObjective<E> {
    /// tr(A dH_k) = sum_i tr(P_i A P_i^T dH_i(P_i d_k)) for each direction
    /// d_k, A = K K^T given by its lower factor `k`, from the model's exact
    /// row derivatives: one pass over the rows for every direction (the
    /// rows' P_i A P_i^T by tiles of matrix products), no p x p matrix a
    /// direction.
    pub(crate) fn row_hessian_derivative_traces(
        &self,
        beta: &[f64],
        k: MatRef<f64>,
        directions: &[&[f64]],
    ) -> SolverResult<Vec<f64>> {
        let (n, r, p) = (self.designs.n(), self.layout.r(), self.layout.p_total());
        expect_len("beta", beta.len(), p)?;
        for d in directions {
            expect_len("direction", d.len(), p)?;
        }
        let m = directions.len();
        // Slot m of each partial counts non-finite row derivatives.
        let vectors: Vec<&[f64]> = std::iter::once(beta).chain(directions.iter().copied()).collect();
        let sums = reduce_chunks(n, m + 1, DENSE_TILE, |rows, acc| {
            let q = pulled_back_quadratic(&self.layout, &self.designs, rows.clone(), k);
            // Each row's theta, then its m directions (r each).
            let coords = tile_directions(&self.layout, &self.designs, rows.clone(), &vectors);
            let mut out = vec![0.0; m * r * r];
            for (k, i) in rows.enumerate() {
                let row = &coords[k * (m + 1) * r..(k + 1) * (m + 1) * r];
                let qi = &q[k * r * r..(k + 1) * r * r];
                out.fill(0.0);
                self.evaluator
                    .row_hessian_derivatives(i, &row[..r], &row[r..], &mut out);
                for c in 0..m {
                    let t: f64 = qi
                        .iter()
                        .zip(&out[c * r * r..(c + 1) * r * r])
                        .map(|(x, y)| x * y)
                        .sum();
                    match t.is_finite() {
                        true => acc[c] += t,
                        false => acc[m] += 1.0,
                    }
                }
            }
        });
        if sums[m] > 0.0 {
            let rule = "must be finite at a point inside the domain";
            return Err(Error::invalid("row_hessian_derivative", format!("{} non-finite rows", sums[m]), rule).into());
        }
        Ok(sums[..m].to_vec())
    }
}

/// An HVP reads each row's Hessian (r^2) and design rows (the predictors'
/// widths) once. The dense assembly ([`RowHessian::dense_host`]) is a
/// matrix product per pair of column groups: 2 |g| |h| flops a row, which
/// between two design blocks run at about [`GEMM_SPEEDUP`] times the rate
/// of the HVP's row loop (measured on this crate's CPU paths), and at its
/// rate where a direct column takes part. Both are in HVP-loop flops.
pub fn row_cost(layout: &Layout, n: usize) -> CostEstimate {
    let (n, r) = (n as f64, layout.r() as f64);
    let design: usize = layout.predictors().iter().map(|range| range.len()).sum();
    let widths: Vec<(f64, bool)> = layout
        .predictors()
        .iter()
        .map(|range| (range.len() as f64, true))
        .chain(
            layout
                .direct()
                .iter()
                .flat_map(|(range, _)| range.clone().map(|_| (1.0, false))),
        )
        .collect();
    let mut pairs = 0.0;
    for (a, &(wg, dg)) in widths.iter().enumerate() {
        for &(wh, dh) in &widths[a..] {
            pairs += wg * wh / if dg && dh { GEMM_SPEEDUP } else { 1.0 };
        }
    }
    CostEstimate {
        hvp: 2.0 * n * (r * r + design as f64),
        dense_assembly: 2.0 * n * pairs,
    }
}

/// How much faster a dense assembly's matrix product runs than the HVP's
/// row loop, per flop (see [`row_cost`]).
pub const GEMM_SPEEDUP: f64 = 8.0;

/// The lower Cholesky factor K (row-major p x p) of a symmetric `inverse`
/// (row-major p x p), A = K K^T; `None` where A is not positive definite.
pub(crate) fn lower_factor(inverse: &[f64], p: usize) -> SolverResult<Option<Vec<f64>>> {
    expect_len("inverse", inverse.len(), p * p)?;
    let Ok(factor) = MatRef::from_row_major_slice(inverse, p, p).llt(Side::Lower) else {
        return Ok(None);
    };
    let l = factor.L();
    Ok(Some((0..p * p).map(|t| l[(t / p, t % p)]).collect()))
}

/// A row a model rejects at beta ([`Error::RowRejected`]) means beta is
/// outside the model's domain: the Newton driver then shrinks its step.
/// Every other error is an error.
pub fn outside_domain<T>(result: Result<T>) -> SolverResult<Option<T>> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(Error::RowRejected { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// How an evaluation keeps its Hessian.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HessianStorage {
    /// Dense where [`CostEstimate::always_dense`] says every Newton step is
    /// a dense one (then the rows would only ever be summed into the dense
    /// matrix), the rows otherwise.
    #[default]
    Auto,
    /// The per-row Hessians, n r^2 values an evaluation: matrix-free
    /// products for PCG steps.
    Rows,
    /// The p x p matrix ([`ResidentDense`] on the objective's backend),
    /// summed as the evaluation ends; the per-row Hessians are freed with
    /// it, so a fit holds one evaluation's rows at a time whatever number
    /// of evaluations it keeps.
    Dense,
}

impl HessianStorage {
    /// Whether an objective of `cost` and dimension `p` keeps the dense
    /// matrix.
    pub fn keeps_dense(self, cost: CostEstimate, p: usize) -> bool {
        match self {
            Self::Auto => cost.always_dense(p),
            Self::Rows => false,
            Self::Dense => true,
        }
    }

    /// An evaluation's Hessian as this storage keeps it, for an objective
    /// of `cost` and dimension `p`: the dense matrix of `rows` resident on
    /// `backend` ([`ResidentDense`]; `rows` freed on return) where it keeps
    /// the dense matrix, else `rows`. A non-finite entry keeps the rows,
    /// for the solver to reject as it would have.
    pub fn keep<B: Backend + 'static>(
        self,
        cost: CostEstimate,
        p: usize,
        rows: Rc<dyn LinearOperator<B>>,
        backend: impl FnOnce() -> B,
    ) -> SolverResult<Rc<dyn LinearOperator<B>>> {
        if !self.keeps_dense(cost, p) {
            return Ok(rows);
        }
        let dense = rows.to_dense()?;
        if !dense.iter().all(|v| v.is_finite()) {
            return Ok(rows);
        }
        Ok(Rc::new(ResidentDense::new(backend(), p, dense)?))
    }
}

/// Each beta column's root mean square over the rows (1 for a direct
/// coefficient or an all-zero column): Newton's step cap is in these units.
/// One pass over each design, every column's squares summed in row order.
pub fn column_scales(layout: &Layout, designs: &Designs) -> Vec<f64> {
    let n = designs.n() as f64;
    let sums: Vec<Vec<f64>> = (0..designs.widths().len())
        .map(|design| {
            let p = designs.widths()[design];
            let mut ss = vec![0.0; p];
            for row in designs.matrix(design).chunks_exact(p.max(1)) {
                ss.iter_mut().zip(row).for_each(|(s, x)| *s += x * x);
            }
            ss
        })
        .collect();
    let rms = |design: usize, col: usize| {
        Some((sums[design][col] / n).sqrt())
            .filter(|s| *s > 0.0 && s.is_finite())
            .unwrap_or(1.0)
    };
    let scale = |via: Via| match via {
        Via::Design { design, col } => rms(design, col),
        Via::Direct => 1.0,
    };
    layout.column_map().into_iter().map(|(_, via)| scale(via)).collect()
}

impl<E: RowEvaluator> Objective<CpuBackend> for RowObjective<E> {
    fn dim(&self) -> usize {
        self.layout.p_total()
    }

    fn evaluate(&self, beta: &[f64]) -> SolverResult<Option<Evaluation<'_, CpuBackend>>> {
        let Some((joint, hess)) = self.host_evaluation(beta)? else {
            return Ok(None);
        };
        let rows = RowHessian::with_storage(self.layout.clone(), self.designs.clone(), hess)?;
        let hessian = self
            .storage
            .keep(self.cost(), self.dim(), Rc::new(rows), CpuBackend::new)?;
        Ok(Some(Evaluation {
            value: joint.neglog,
            gradient: joint.gradient,
            hessian,
        }))
    }

    fn value(&self, beta: &[f64]) -> SolverResult<Option<f64>> {
        if !self.evaluator.cheap_value() {
            return Ok(self.evaluate(beta)?.map(|e| e.value));
        }
        expect_len("beta", beta.len(), self.dim())?;
        let n = self.designs.n();
        let r = self.layout.r();
        let sum = reduce_chunks(n, 1, ROW_CHUNK, |rows, acc| {
            let theta = tile_directions(&self.layout, &self.designs, rows.clone(), &[beta]);
            for (k, i) in rows.enumerate() {
                acc[0] += self.evaluator.row_value(i, &theta[k * r..(k + 1) * r]);
            }
        })[0];
        Ok(sum.is_finite().then_some(sum))
    }

    fn cheap_value(&self) -> bool {
        self.evaluator.cheap_value()
    }

    fn cost(&self) -> CostEstimate {
        row_cost(&self.layout, self.designs.n())
    }

    fn coefficient_scales(&self) -> Option<Vec<f64>> {
        Some(self.scales.clone())
    }

    fn exact_hessian_derivative(&self) -> bool {
        self.evaluator.has_hessian_derivative()
    }

    fn convex(&self) -> bool {
        self.evaluator.convex()
    }

    fn hessian_derivative(
        &self,
        beta: &[f64],
        hessian: &[f64],
        direction: &[f64],
        step: f64,
    ) -> SolverResult<Vec<f64>> {
        match self.evaluator.has_hessian_derivative() {
            true => self.row_hessian_derivative(beta, direction),
            false => fd_hessian_derivative(self, beta, hessian, direction, step),
        }
    }

    fn hessian_derivative_traces(
        &self,
        beta: &[f64],
        hessian: &[f64],
        inverse: &[f64],
        directions: &[&[f64]],
        steps: &[f64],
    ) -> SolverResult<Vec<f64>> {
        let p = self.dim();
        // The leverages need A = K K^T (A is (H + S)^{-1}, positive
        // definite); where the factor fails, or the model has no exact row
        // derivative, each dense dH_k.
        match (self.evaluator.has_hessian_derivative(), lower_factor(inverse, p)?) {
            (true, Some(k)) => {
                let k = MatRef::from_row_major_slice(&k, p, p);
                self.row_hessian_derivative_traces(beta, k, directions)
            }
            _ => traces_through_dense(self, beta, hessian, inverse, directions, steps),
        }
    }
}
