//! `RemlFit::statistics`, from the factor of H + S that REML kept at its
//! final point, against independent dense algebra: the test's own
//! Gauss-Jordan inverse of H + S_lambda (H from the test objective's own
//! derivatives at beta_hat), V_f = V_b H V_b and the edf tr(V_b H) summed by
//! hand, log|H + S| and log|S|_+ from faer's eigenvalues; and a backend that
//! records every dense factorisation, to show the statistics cost none.

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use common::*;
use matfree_solvers::backend::Slot;
use matfree_solvers::logdet::DenseFactor;
use matfree_solvers::pcg_kernels::PcgVectors;
use matfree_solvers::{
    reml, Backend, CostEstimate, CpuBackend, Evaluation, FitStatistics, LinearOperator, Objective, PcgKernels, Penalty,
    RemlFit, RemlOptions, Result, StepSolver,
};

/// The CPU backend, recording every matrix given to `dense_factor`.
#[derive(Default)]
struct Factoring {
    cpu: CpuBackend,
    factored: RefCell<Vec<Vec<f64>>>,
}

impl Factoring {
    fn calls(&self) -> usize {
        self.factored.borrow().len()
    }
}

impl Backend for Factoring {
    type Vector = Vec<f64>;
    type Scalars = Vec<f64>;
    type ScalarRead = Vec<f64>;
    type Recording = ();

    fn zeros(&self, n: usize) -> Result<Vec<f64>> {
        self.cpu.zeros(n)
    }
    fn upload(&self, x: &[f64]) -> Result<Vec<f64>> {
        self.cpu.upload(x)
    }
    fn download(&self, x: &Vec<f64>) -> Result<Vec<f64>> {
        self.cpu.download(x)
    }
    fn len(&self, x: &Vec<f64>) -> usize {
        self.cpu.len(x)
    }
    fn scalars(&self, n: usize) -> Result<Vec<f64>> {
        self.cpu.scalars(n)
    }
    fn write_scalars(&self, s: &mut Vec<f64>, start: Slot, values: &[f64]) -> Result<()> {
        self.cpu.write_scalars(s, start, values)
    }
    fn request_scalars(&self, s: &Vec<f64>) -> Result<Vec<f64>> {
        self.cpu.request_scalars(s)
    }
    fn wait_scalars(&self, read: Vec<f64>) -> Result<Vec<f64>> {
        self.cpu.wait_scalars(read)
    }
    fn copy(&self, src: &Vec<f64>, dst: &mut Vec<f64>) -> Result<()> {
        self.cpu.copy(src, dst)
    }
    fn dot(&self, x: &Vec<f64>, y: &Vec<f64>, s: &mut Vec<f64>, out: Slot) -> Result<()> {
        self.cpu.dot(x, y, s, out)
    }
    fn axpy(&self, s: &Vec<f64>, alpha: Slot, x: &Vec<f64>, y: &mut Vec<f64>) -> Result<()> {
        self.cpu.axpy(s, alpha, x, y)
    }
    fn xpay(&self, x: &Vec<f64>, s: &Vec<f64>, beta: Slot, y: &mut Vec<f64>) -> Result<()> {
        self.cpu.xpay(x, s, beta, y)
    }
    fn sub_from(&self, b: &Vec<f64>, r: &mut Vec<f64>) -> Result<()> {
        self.cpu.sub_from(b, r)
    }
    fn mul_elementwise(&self, d: &Vec<f64>, r: &Vec<f64>, z: &mut Vec<f64>) -> Result<()> {
        self.cpu.mul_elementwise(d, r, z)
    }
    fn invert_positive(
        &self,
        d: &Vec<f64>,
        extra: Option<&Vec<f64>>,
        ridge: f64,
        field: &str,
        out: &mut Vec<f64>,
    ) -> Result<()> {
        self.cpu.invert_positive(d, extra, ridge, field, out)
    }
    fn gemm_acc(&self, a: &Vec<f64>, n: usize, x: &Vec<f64>, y: &mut Vec<f64>) -> Result<()> {
        self.cpu.gemm_acc(a, n, x, y)
    }
    fn repeat(
        &self,
        times: usize,
        recording: &mut Option<(usize, ())>,
        body: &mut dyn FnMut() -> Result<()>,
    ) -> Result<()> {
        self.cpu.repeat(times, recording, body)
    }
    fn dense_factor(&self, p: usize, a: &[f64]) -> Result<Box<dyn DenseFactor>> {
        self.factored.borrow_mut().push(a.to_vec());
        self.cpu.dense_factor(p, a)
    }
}

impl PcgKernels for Factoring {
    fn pcg_start(&self, s: &mut Vec<f64>, rtol: f64, atol: f64) -> Result<()> {
        self.cpu.pcg_start(s, rtol, atol)
    }
    fn pcg_alpha(&self, s: &mut Vec<f64>) -> Result<()> {
        self.cpu.pcg_alpha(s)
    }
    fn pcg_beta(&self, s: &mut Vec<f64>) -> Result<()> {
        self.cpu.pcg_beta(s)
    }
    fn pcg_step_diagonal(&self, d: &Vec<f64>, v: PcgVectors<'_, Vec<f64>>, s: &mut Vec<f64>) -> Result<bool> {
        self.cpu.pcg_step_diagonal(d, v, s)
    }
}

/// A CPU operator seen from the recording backend (the same vectors).
struct Forward<'a>(Rc<dyn LinearOperator<CpuBackend> + 'a>);

impl LinearOperator<Factoring> for Forward<'_> {
    fn dim(&self) -> usize {
        self.0.dim()
    }
    fn apply(&self, x: &Vec<f64>, y: &mut Vec<f64>) -> Result<()> {
        self.0.apply(x, y)
    }
    fn apply_multi(&self, x: &Vec<f64>, k: usize, y: &mut Vec<f64>) -> Result<()> {
        self.0.apply_multi(x, k, y)
    }
    fn diagonal(&self, out: &mut Vec<f64>) -> Result<()> {
        self.0.diagonal(out)
    }
    fn to_dense(&self) -> Result<Vec<f64>> {
        self.0.to_dense()
    }
}

/// The test logistic objective on the recording backend.
struct OnFactoring<'d>(Logistic<'d>);

impl Objective<Factoring> for OnFactoring<'_> {
    fn dim(&self) -> usize {
        Objective::<CpuBackend>::dim(&self.0)
    }
    fn evaluate(&self, beta: &[f64]) -> Result<Option<Evaluation<'_, Factoring>>> {
        Ok(self.0.evaluate(beta)?.map(|e| Evaluation {
            value: e.value,
            gradient: e.gradient,
            hessian: Rc::new(Forward(e.hessian)),
        }))
    }
    fn value(&self, beta: &[f64]) -> Result<Option<f64>> {
        Objective::<CpuBackend>::value(&self.0, beta)
    }
    fn cheap_value(&self) -> bool {
        Objective::<CpuBackend>::cheap_value(&self.0)
    }
    fn cost(&self) -> CostEstimate {
        Objective::<CpuBackend>::cost(&self.0)
    }
    fn exact_hessian_derivative(&self) -> bool {
        Objective::<CpuBackend>::exact_hessian_derivative(&self.0)
    }
    fn hessian_derivative(&self, beta: &[f64], h: &[f64], d: &[f64], step: f64) -> Result<Vec<f64>> {
        Objective::<CpuBackend>::hessian_derivative(&self.0, beta, h, d, step)
    }
}

/// `a b` for row-major p x p matrices (the test's own loop).
fn product(p: usize, a: &[f64], b: &[f64]) -> Vec<f64> {
    (0..p * p)
        .map(|t| (0..p).map(|k| a[(t / p) * p + k] * b[k * p + t % p]).sum())
        .collect()
}

/// The REML fit of `data` under `penalty` on the recording backend, with
/// the backend's record.
fn fit_recorded(data: &Data, penalty: &Penalty) -> (RemlFit, Factoring) {
    let backend = Factoring::default();
    let objective = OnFactoring(Logistic::new(data));
    let fit = reml(
        &backend,
        &objective,
        penalty,
        None,
        &vec![0.0; data.p],
        &RemlOptions::default(),
    )
    .unwrap();
    assert!(fit.report.converged, "{:?}", fit.report.termination);
    (fit, backend)
}

/// Each column set's edf, `sum_j (V H)_jj` over it.
fn edf_over(p: usize, vh: &[f64], cols: impl Iterator<Item = usize>) -> f64 {
    cols.map(|j| vh[j * p + j]).sum::<f64>()
}

/// The fit's statistics against dense algebra done here; returns
/// `diag(V_b H)` for the per-smooth checks.
fn check_against_dense(data: &Data, penalty: &Penalty, fit: &RemlFit) -> Vec<f64> {
    let (p, st) = (data.p, &fit.statistics);
    let beta = &fit.laml.beta;
    let (_, h) = Logistic::new(data).derivatives(beta);
    let s = penalty.dense(&fit.lambda).unwrap();
    let a: Vec<f64> = h.iter().zip(&s).map(|(x, y)| x + y).collect();
    let vb = inverse(p, &a);
    let vb_err = max_rel_diff(&st.covariance, &vb);
    assert!(vb_err < 1e-10, "V_b vs Gauss-Jordan: {vb_err:e}");
    let ve = product(p, &product(p, &vb, &h), &vb);
    let ve_err = max_rel_diff(&st.frequentist_covariance, &ve);
    assert!(ve_err < 1e-10, "V_f vs V_b H V_b: {ve_err:e}");
    let vh = product(p, &vb, &h);
    let total = edf_over(p, &vh, 0..p);
    assert!(
        (st.edf.total - total).abs() < 1e-10 * total,
        "{} vs {total}",
        st.edf.total
    );
    for (k, b) in penalty.blocks().iter().enumerate() {
        let want = edf_over(p, &vh, b.range());
        assert!(
            (st.edf.blocks[k] - want).abs() < 1e-10 * want.max(1.0),
            "block {k}: {} vs {want}",
            st.edf.blocks[k]
        );
    }
    assert!(!st.edf.from_positive_part, "a logistic H is positive definite");
    // log|H + S| and the REML score V = f + log|H + S|/2 - log|S|_+/2, with
    // f the penalised neglog, from eigenvalues (S's positive ones).
    let logdet: f64 = eigenvalues(p, &a).iter().map(|e| e.ln()).sum();
    assert!((st.logdet_penalised_hessian - logdet).abs() < 1e-10 * logdet.abs());
    let log_pdet: f64 = penalty
        .groups()
        .iter()
        .map(|g| log_pseudo_det_over(p, &s, penalty, g))
        .sum();
    let quad: f64 = (0..p)
        .map(|i| beta[i] * (0..p).map(|j| s[i * p + j] * beta[j]).sum::<f64>())
        .sum();
    let f = Logistic::new(data).neglog(beta) + 0.5 * quad;
    let score = f + 0.5 * logdet - 0.5 * log_pdet;
    assert!(
        (fit.laml.value - score).abs() < 1e-10 * score.abs(),
        "V {} vs {score}",
        fit.laml.value
    );
    (0..p).map(|j| vh[j * p + j]).collect()
}

/// log|S|_+ of S's rows and columns of the blocks `group` (their union),
/// from its eigenvalues above 1e-9 of its largest: per group, since the
/// lambdas of separate smooths may differ by more than that.
fn log_pseudo_det_over(p: usize, s: &[f64], penalty: &Penalty, group: &[usize]) -> f64 {
    let mut cols: Vec<usize> = group.iter().flat_map(|&k| penalty.blocks()[k].range()).collect();
    cols.sort_unstable();
    cols.dedup();
    let m = cols.len();
    let sub: Vec<f64> = (0..m * m).map(|t| s[cols[t / m] * p + cols[t % m]]).collect();
    let e = eigenvalues(m, &sub);
    let top = e.iter().fold(0.0f64, |a, v| a.max(*v));
    e.iter().filter(|v| **v > 1e-9 * top).map(|v| v.ln()).sum()
}

/// The statistics cost no factorisation: H + S at the final point was
/// factored during the REML loop only, by LAML's evaluation there (and
/// before it by the inner Newton's convergence check, where that solved its
/// step densely), and `FitStatistics::new` on the same H (the one more
/// factorisation the fit no longer makes) gives the same bits.
fn check_factored_in_the_loop_only(penalty: &Penalty, fit: &RemlFit, backend: &Factoring) {
    let s = penalty.dense(&fit.lambda).unwrap();
    // As REML forms it: H + S entry by entry.
    let a: Vec<f64> = fit.laml.hessian.iter().zip(&s).map(|(h, s)| h + s).collect();
    let n = backend.factored.borrow().iter().filter(|m| **m == a).count();
    let check = fit.laml.newton.check.as_ref();
    let dense_check = check.is_some_and(|c| c.solver == StepSolver::Dense && c.damping == 0.0);
    assert_eq!(
        n,
        1 + usize::from(dense_check),
        "the final H + S: LAML's factor (and Newton's check)"
    );
    let during = backend.calls();
    let again = FitStatistics::new(backend, &fit.laml.hessian, penalty, &fit.lambda).unwrap();
    assert_eq!(backend.calls(), during + 1);
    assert_eq!(again, fit.statistics, "the same factorisation, the same bits");
}

/// Three separate smooths (one nearly vanished): V_b, V_f, edf per block
/// and in total, log|H + S| and V against dense algebra.
#[test]
fn reml_statistics_match_dense_algebra_with_no_second_factorisation() {
    let effects: [fn(f64) -> f64; 3] = [
        |x| (2.0 * std::f64::consts::PI * x).sin(),
        |x| 2.0 * (x - 0.5).powi(2) - 0.2,
        |_| 0.0,
    ];
    let d = simulate(600, -0.3, &effects, 5);
    let pen = penalty(&d);
    let (fit, backend) = fit_recorded(&d, &pen);
    check_against_dense(&d, &pen, &fit);
    assert_eq!(
        fit.statistics.edf.smooths, fit.statistics.edf.blocks,
        "no overlap: a smooth a block"
    );
    check_factored_in_the_loop_only(&pen, &fit, &backend);
}

/// A tensor product's two overlapping penalties: one smooth, whose edf is
/// its 20 columns' share, each block reporting the same, and the total the
/// intercept plus the smooth.
#[test]
fn reml_statistics_with_overlapping_blocks_match_dense_algebra() {
    let d = tensor_data(800, 8, false);
    let pen = tensor_penalty(d.p);
    let (fit, backend) = fit_recorded(&d, &pen);
    let diag = check_against_dense(&d, &pen, &fit);
    let edf = &fit.statistics.edf;
    let smooth: f64 = diag[1..].iter().sum();
    assert_eq!(edf.smooths.len(), 1);
    assert!(
        (edf.smooths[0] - smooth).abs() < 1e-10 * smooth,
        "{} vs {smooth}",
        edf.smooths[0]
    );
    for b in &edf.blocks {
        assert!(
            (b - smooth).abs() < 1e-10 * smooth,
            "a block spans the smooth: {b} vs {smooth}"
        );
    }
    assert!((edf.total - diag[0] - smooth).abs() < 1e-10 * edf.total);
    check_factored_in_the_loop_only(&pen, &fit, &backend);
}

/// Whatever the stop, the statistics are those of the point returned:
/// bit for bit `FitStatistics::new` on its own H (the walk moves each
/// point's factor with it): a converged fit, one stopped by `max_iter`
/// (counting the Fellner-Schall steps) with every tolerance out of reach, one
/// whose first inner solve did not converge, and a double well on 50 rows
/// where V falls toward a singular H + S.
#[test]
fn every_stop_returns_the_statistics_of_its_own_point() {
    use matfree_solvers::RemlTermination as T;
    let effects: [fn(f64) -> f64; 2] = [|x| (2.0 * std::f64::consts::PI * x).sin(), |_| 0.0];
    let unreachable = RemlOptions {
        max_iter: 1,
        grad_tol: 1e-12,
        decrement_tol: 1e-300,
        step_tol: 1e-300,
        value_tol: 1e-300,
        ..RemlOptions::default()
    };
    let mut one_step = RemlOptions::default();
    one_step.newton.max_iter = 1;
    // (rows, seed, double well, beta0, options, the stop).
    let cases = [
        (400, 7, 0.0, 0.5, RemlOptions::default(), T::Decrement),
        (400, 7, 0.0, 0.5, unreachable, T::MaxIterations),
        (400, 7, 0.0, 0.5, one_step, T::InnerNotConverged),
        (50, 7, 20.0, 1.0, RemlOptions::default(), T::Degenerate),
    ];
    let be = CpuBackend::new();
    for (n, seed, well, b0, opts, stop) in cases {
        let d = simulate(n, 0.2, &effects, seed);
        let pen = penalty(&d);
        let mut obj = Logistic::new(&d);
        obj.double_well = well;
        let fit = reml(&be, &obj, &pen, None, &vec![b0; d.p], &opts).unwrap();
        assert_eq!(fit.report.termination, stop);
        let again = FitStatistics::new(&be, &fit.laml.hessian, &pen, &fit.lambda).unwrap();
        assert_eq!(again, fit.statistics, "{stop:?}");
    }
}
