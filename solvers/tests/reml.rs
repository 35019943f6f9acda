//! The exact dense path and REML against independent computations: faer
//! eigenvalues, an explicit Gauss-Jordan inverse, central differences of
//! V(rho), and data simulated with a known smooth effect.

mod common;

use common::*;
use matfree_solvers::{
    evaluate_laml, fellner_schall_step, newton, reml, CpuBackend, Evaluation, LamlEvaluation, NewtonOptions, Objective,
    OuterStep, PenalisedFactor, RemlFit, RemlOptions, Result,
};

fn f1(x: f64) -> f64 {
    (2.0 * std::f64::consts::PI * x).sin()
}
fn f2(x: f64) -> f64 {
    2.0 * (x - 0.5) * (x - 0.5) - 0.2
}
fn zero(_: f64) -> f64 {
    0.0
}

const LAMBDA: [f64; 3] = [0.5, 2.0, 30.0];

/// H + S_lambda at the penalised optimum, row-major.
fn penalised_hessian(d: &Data) -> (Vec<f64>, matfree_solvers::Penalty) {
    let (obj, pen, be) = (Logistic::new(d), penalty(d), CpuBackend::new());
    let fit = newton(&be, &obj, &pen, &LAMBDA, &vec![0.0; d.p], &NewtonOptions::default()).unwrap();
    let (_, h) = obj.derivatives(&fit.beta);
    let s = pen.dense(&LAMBDA).unwrap();
    (h.iter().zip(&s).map(|(a, b)| a + b).collect(), pen)
}

#[test]
fn logdet_and_traces_match_independent_computations() {
    let d = simulate(800, -0.3, &[f1, f2, zero], 11);
    let (a, pen) = penalised_hessian(&d);
    let p = d.p;
    let factor = PenalisedFactor::new(p, &a).unwrap();
    let eig_logdet: f64 = eigenvalues(p, &a).iter().map(|e| e.ln()).sum();
    let rel = (factor.logdet() - eig_logdet).abs() / eig_logdet.abs();
    assert!(rel < 1e-10, "logdet {} vs {eig_logdet}: {rel:e}", factor.logdet());
    let inv = inverse(p, &a);
    let traces = factor.penalty_traces(&pen).unwrap();
    for (k, b) in pen.blocks().iter().enumerate() {
        let mut unit = vec![0.0; pen.n_blocks()];
        unit[k] = 1.0;
        let sk = pen.dense(&unit.iter().map(|u| u + 1e-300).collect::<Vec<_>>()).unwrap();
        let want: f64 = (0..p)
            .map(|i| (0..p).map(|j| inv[i * p + j] * sk[j * p + i]).sum::<f64>())
            .sum();
        assert!((traces[k] - want).abs() < 1e-10 * want.abs(), "block {k} ({b:?})");
        assert!((factor.trace_inv(&sk).unwrap() - want).abs() < 1e-10 * want.abs());
    }
    // The explicit inverse and the factor's agree entrywise.
    assert!(max_rel_diff(factor.inverse().unwrap(), &inv) < 1e-10);
}

#[test]
fn log_pseudo_det_matches_positive_eigenvalues() {
    let d = simulate(50, 0.0, &[f1, f2, zero], 3);
    let pen = penalty(&d);
    let s = pen.dense(&LAMBDA).unwrap();
    let eig = eigenvalues(d.p, &s);
    let top = eig.iter().fold(0.0f64, |m, e| m.max(e.abs()));
    let positive: Vec<f64> = eig.into_iter().filter(|e| *e > 1e-10 * top).collect();
    assert_eq!(positive.len(), 3 * K, "the intercept is unpenalised");
    let want: f64 = positive.iter().map(|e| e.ln()).sum();
    let got = pen.log_pseudo_det(&LAMBDA).unwrap();
    assert!((got - want).abs() < 1e-10 * want.abs(), "{got} vs {want}");
}

fn tight() -> RemlOptions {
    let mut o = RemlOptions::default();
    o.newton.decrement_tol = 1e-20;
    // An analytic objective: a small forward step is accurate.
    o.fd_step = 1e-5;
    o
}

/// The LAML at `rho` (from beta = 0), its dV/drho checked against central
/// differences of V through fresh inner solves (step 1e-4, to 1e-5 of the
/// largest component).
fn gradient_checked(obj: &Logistic<'_>, pen: &matfree_solvers::Penalty, rho: &[f64], label: &str) -> LamlEvaluation {
    let (be, opts) = (CpuBackend::new(), tight());
    let at = evaluate_laml(&be, obj, pen, rho, &vec![0.0; pen.dim()], &opts).unwrap();
    let v = |r: &[f64]| evaluate_laml(&be, obj, pen, r, &at.beta, &opts).unwrap().value;
    let h = 1e-4;
    let scale = at.gradient.iter().fold(0.0f64, |m, g| m.max(g.abs()));
    for k in 0..rho.len() {
        let (mut up, mut dn) = (rho.to_vec(), rho.to_vec());
        up[k] += h;
        dn[k] -= h;
        let fd = (v(&up) - v(&dn)) / (2.0 * h);
        let err = (at.gradient[k] - fd).abs() / scale;
        assert!(err < 1e-5, "{label}, k {k}: {} vs {fd} ({err:e})", at.gradient[k]);
    }
    at
}

#[test]
fn reml_gradient_matches_central_differences() {
    let d = simulate(600, -0.3, &[f1, f2, zero], 5);
    let pen = penalty(&d);
    let rho = [-0.5, 1.0, 3.0];
    for exact_dh in [false, true] {
        let obj = Logistic {
            exact_dh,
            ..Logistic::new(&d)
        };
        let at = gradient_checked(&obj, &pen, &rho, &format!("exact_dh {exact_dh}"));
        assert!(
            at.gradient.iter().all(|g| g.abs() > 1e-3),
            "a non-trivial point: {:?}",
            at.gradient
        );
    }
}

fn fit_simulated() -> (Data, RemlFit) {
    let d = simulate(2000, 0.2, &[f1, zero], 2024);
    let (obj, pen, be) = (Logistic::new(&d), penalty(&d), CpuBackend::new());
    let fit = reml(&be, &obj, &pen, None, &vec![0.0; d.p], &RemlOptions::default()).unwrap();
    (d, fit)
}

/// Effective degrees of freedom per block: sum over the block's diagonal of
/// (H + S)^{-1} H, computed with the test's own inverse.
fn block_edf(d: &Data, fit: &RemlFit) -> Vec<f64> {
    let p = d.p;
    let obj = Logistic::new(d);
    let pen = penalty(d);
    let (_, h) = obj.derivatives(&fit.laml.beta);
    let s = pen.dense(&fit.lambda).unwrap();
    let a: Vec<f64> = h.iter().zip(&s).map(|(x, y)| x + y).collect();
    let inv = inverse(p, &a);
    pen.blocks()
        .iter()
        .map(|b| {
            b.range()
                .map(|i| (0..p).map(|j| inv[i * p + j] * h[j * p + i]).sum::<f64>())
                .sum()
        })
        .collect()
}

#[test]
fn reml_selects_sensible_smoothing_on_known_truth() {
    let (d, fit) = fit_simulated();
    let r = &fit.report;
    assert!(r.converged, "{r:?}");
    let edf = block_edf(&d, &fit);
    // sin(2 pi x) needs a few cosine terms but not all six; the null effect
    // is shrunk far harder than the real one.
    assert!(edf[0] > 1.5 && edf[0] < 5.5, "edf {edf:?}, lambda {:?}", fit.lambda);
    assert!(edf[1] < 1.0, "edf {edf:?}");
    assert!(fit.lambda[1] > 10.0 * fit.lambda[0], "lambda {:?}", fit.lambda);
    // The fitted smooth follows the truth (up to its mean).
    let grid: Vec<f64> = (0..101).map(|i| i as f64 / 100.0).collect();
    let fitted: Vec<f64> = grid
        .iter()
        .map(|&x| basis(x).iter().zip(&fit.laml.beta[1..1 + K]).map(|(b, c)| b * c).sum())
        .collect();
    let rms = (grid.iter().zip(&fitted).map(|(x, f)| (f - f1(*x)).powi(2)).sum::<f64>() / grid.len() as f64).sqrt();
    assert!(rms < 0.25, "rms error {rms}");
    // Each outer record is serde-serialisable and V decreases.
    let json = serde_json::to_string(r).unwrap();
    assert!(json.contains("\"rho\""));
    for w in r.iterations.windows(2) {
        assert!(w[1].value <= w[0].value);
    }
    assert!(fit.laml.value <= r.iterations[0].value);
}

#[test]
fn reml_rejects_invalid_inputs_by_field() {
    let d = simulate(100, 0.0, &[f1, zero], 1);
    let (obj, pen, be) = (Logistic::new(&d), penalty(&d), CpuBackend::new());
    let beta0 = vec![0.0; d.p];
    let msg = |rho: &[f64], o: &RemlOptions| reml(&be, &obj, &pen, Some(rho), &beta0, o).err().unwrap().to_string();
    let o = RemlOptions::default();
    assert!(msg(&[0.0], &o).contains("rho0"));
    assert!(msg(&[0.0, f64::NAN], &o).contains("rho0[1]"));
    let bad = RemlOptions {
        rho_range: -1.0,
        ..RemlOptions::default()
    };
    assert!(msg(&[0.0, 0.0], &bad).contains("rho_range"));
    let bad = RemlOptions {
        fd_step: 0.0,
        ..RemlOptions::default()
    };
    assert!(msg(&[0.0, 0.0], &bad).contains("fd_step"));
    let e = evaluate_laml(&be, &obj, &pen, &[0.0, 0.0, 0.0], &beta0, &o)
        .err()
        .unwrap();
    assert!(e.to_string().contains("rho"));
}

/// The objective with a record of every beta it evaluated in full.
struct Recording<'d> {
    inner: Logistic<'d>,
    seen: std::cell::RefCell<Vec<Vec<u64>>>,
}

impl Objective<CpuBackend> for Recording<'_> {
    fn dim(&self) -> usize {
        self.inner.dim()
    }
    fn evaluate(&self, beta: &[f64]) -> Result<Option<Evaluation<'_, CpuBackend>>> {
        self.seen.borrow_mut().push(beta.iter().map(|b| b.to_bits()).collect());
        self.inner.evaluate(beta)
    }
    fn value(&self, beta: &[f64]) -> Result<Option<f64>> {
        self.inner.value(beta)
    }
    fn cheap_value(&self) -> bool {
        self.inner.cheap_value()
    }
}

/// Each outer trial's inner solve starts at the current beta_hat with the
/// evaluation the accepted solve handed over, so no beta is evaluated twice
/// in a whole REML fit (each trial used to evaluate beta_hat again) but
/// beta0, once more for each check of the mode from it (none here), and
/// the fit is the one the plain objective gives.
#[test]
fn reml_evaluates_no_beta_twice() {
    let d = simulate(2000, 0.2, &[f1, zero], 2024);
    let (pen, be) = (penalty(&d), CpuBackend::new());
    let rec = Recording {
        inner: Logistic::new(&d),
        seen: Default::default(),
    };
    let fit = reml(&be, &rec, &pen, None, &vec![0.0; d.p], &RemlOptions::default()).unwrap();
    assert!(fit.report.iterations.len() >= 2, "a fit of several outer steps");
    let mut seen = rec.seen.into_inner();
    let beta0 = seen.iter().filter(|b| b.iter().all(|&x| x == 0)).count();
    // H + S of a logistic likelihood stays positive definite, so no check
    // of the mode from beta0 is solved though the objective does not claim
    // convexity: beta0 is evaluated once.
    assert_eq!(fit.report.mode_checks, 0, "{:?}", fit.report.evaluations_by_purpose);
    assert_eq!(beta0, 1 + fit.report.mode_checks);
    seen.retain(|b| b.iter().any(|&x| x != 0));
    let n = seen.len();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), n, "{} of {n} evaluations repeat a beta", n - seen.len());
    let (_, plain) = fit_simulated();
    assert_eq!(fit.laml.value.to_bits(), plain.laml.value.to_bits());
    assert_eq!(fit.laml.beta, plain.laml.beta);
}

/// `start_max_step` caps the first inner solve's steps: its first step
/// from beta0 reaches no further than the cap (a quarter of the uncapped
/// step), and the fit ends at the same optimum (the logistic likelihood is
/// convex) after more start steps.
#[test]
fn the_start_cap_bounds_the_first_solves_steps() {
    let d = simulate(2000, 0.2, &[f1, zero], 2024);
    let (pen, be) = (penalty(&d), CpuBackend::new());
    let run = |opts: &RemlOptions| {
        let rec = Recording {
            inner: Logistic::new(&d),
            seen: Default::default(),
        };
        let fit = reml(&be, &rec, &pen, None, &vec![0.0; d.p], opts).unwrap();
        let first = &rec.seen.borrow()[1];
        let reach = first.iter().fold(0.0f64, |m, b| m.max(f64::from_bits(*b).abs()));
        (fit, reach)
    };
    let (plain, free_reach) = run(&RemlOptions::default());
    let cap = free_reach / 4.0;
    let capped_opts = RemlOptions {
        start_max_step: Some(cap),
        ..RemlOptions::default()
    };
    let (capped, reach) = run(&capped_opts);
    assert!(reach <= cap * (1.0 + 1e-12), "first step {reach} beyond the cap {cap}");
    assert!(reach >= 0.5 * cap, "first step {reach} far short of the cap {cap}");
    assert!(capped.report.start_newton_steps > plain.report.start_newton_steps);
    let (v, w) = (capped.laml.value, plain.laml.value);
    assert!((v - w).abs() <= 1e-8 * w.abs(), "V {v} vs {w}");
    let bad = RemlOptions {
        start_max_step: Some(0.0),
        ..RemlOptions::default()
    };
    let err = reml(&be, &Logistic::new(&d), &pen, None, &vec![0.0; d.p], &bad).unwrap_err();
    assert!(err.to_string().contains("start_max_step"), "{err}");
}

/// The logistic objective plus a constant: every stopping rule must ignore it.
struct Shifted<'d> {
    inner: Logistic<'d>,
    offset: f64,
}

impl Objective<CpuBackend> for Shifted<'_> {
    fn dim(&self) -> usize {
        self.inner.dim()
    }
    fn evaluate(&self, beta: &[f64]) -> Result<Option<Evaluation<'_, CpuBackend>>> {
        Ok(self.inner.evaluate(beta)?.map(|mut e| {
            e.value += self.offset;
            e
        }))
    }
    fn value(&self, beta: &[f64]) -> Result<Option<f64>> {
        Ok(self.inner.value(beta)?.map(|v| v + self.offset))
    }
    fn cheap_value(&self) -> bool {
        self.inner.cheap_value()
    }
}

/// Adding a constant to the objective (1e9 to a V of about 1e3, and 1e7)
/// leaves the Newton and REML iterates as they were: the stopping rules are
/// absolute (decrements, gradients), not relative to |f| or |V|.
#[test]
fn shifted_objective_gives_the_same_iterates() {
    let d = simulate(1500, 0.2, &[f1, f2, zero], 11);
    let (pen, be) = (penalty(&d), CpuBackend::new());
    let plain = Shifted {
        inner: Logistic::new(&d),
        offset: 0.0,
    };
    let base = reml(&be, &plain, &pen, None, &vec![0.0; d.p], &RemlOptions::default()).unwrap();
    assert!(
        base.report.converged && !base.report.iterations.is_empty(),
        "{:?}",
        base.report
    );
    for offset in [1e7, 1e9] {
        let shifted = Shifted {
            inner: Logistic::new(&d),
            offset,
        };
        let fit = reml(&be, &shifted, &pen, None, &vec![0.0; d.p], &RemlOptions::default()).unwrap();
        assert!(fit.report.converged, "{offset}: {:?}", fit.report);
        assert!((fit.laml.value - offset - base.laml.value).abs() < 1e-6 * offset);
        assert_eq!(fit.report.iterations.len(), base.report.iterations.len(), "{offset}");
        for (a, b) in fit.report.iterations.iter().zip(&base.report.iterations) {
            assert_eq!(a.rho, b.rho, "{offset}: the outer iterates differ");
            assert_eq!(a.halvings, b.halvings);
        }
        assert!(
            max_rel_diff(&fit.lambda, &base.lambda) < 1e-12,
            "{offset}: {:?} vs {:?}",
            fit.lambda,
            base.lambda
        );
        assert!(max_rel_diff(&fit.laml.beta, &base.laml.beta) < 1e-12);
    }
}

/// The reference start follows the data's scale: doubling every row (twice
/// the information) doubles lambda_ref, and REML's optimum lambda scales
/// with it, so the start stays in the right decade at any n.
#[test]
fn reference_rho_scales_with_the_information() {
    let d = simulate(800, 0.2, &[f1, zero], 5);
    let pen = penalty(&d);
    let obj = Logistic::new(&d);
    let (_, h) = obj.derivatives(&vec![0.0; d.p]);
    let diag: Vec<f64> = (0..d.p).map(|i| h[i * d.p + i]).collect();
    let r1 = matfree_solvers::reference_rho(&pen, &diag).unwrap();
    let twice: Vec<f64> = diag.iter().map(|v| 2.0 * v).collect();
    let r2 = matfree_solvers::reference_rho(&pen, &twice).unwrap();
    for (a, b) in r1.iter().zip(&r2) {
        assert!((b - a - 2f64.ln()).abs() < 1e-12);
    }
    // mgcv's rule: lambda_k = mean |diag H| / mean diag S_k on the block.
    let b0 = &pen.blocks()[0];
    let hm = b0.range().map(|j| diag[j].abs()).sum::<f64>() / b0.dim as f64;
    let sm = (0..b0.dim).map(|i| b0.s[i * b0.dim + i]).sum::<f64>() / b0.dim as f64;
    assert!((r1[0] - (hm / sm).ln()).abs() < 1e-12);
}

/// Far above its optimum V grows like e^rho, and Newton on rho gains about
/// one unit a step; the Fellner-Schall start moves there in one. From
/// rho_ref + 8, the first (Fellner-Schall) step takes the real smooth at
/// least 4 units toward its optimum, and the fit ends where the default
/// start's does.
#[test]
fn a_start_far_above_the_optimum_is_left_in_one_step() {
    let (d, base) = fit_simulated();
    let (obj, pen, be) = (Logistic::new(&d), penalty(&d), CpuBackend::new());
    let far: Vec<f64> = base.report.rho_ref.iter().map(|r| r + 8.0).collect();
    let fit = reml(&be, &obj, &pen, Some(&far), &vec![0.0; d.p], &RemlOptions::default()).unwrap();
    assert!(fit.report.converged, "{:?}", fit.report);
    let first = &fit.report.iterations[0];
    assert_eq!(first.kind, OuterStep::FellnerSchall);
    assert!(first.step_length > 0.0, "{first:?}");
    let second = &fit.report.iterations[1];
    assert!(
        first.rho[0] - second.rho[0] >= 4.0,
        "one step from {} went to {} (optimum {})",
        first.rho[0],
        second.rho[0],
        base.laml.rho[0]
    );
    assert!(
        (fit.laml.rho[0] - base.laml.rho[0]).abs() < 0.05,
        "{:?} vs {:?}",
        fit.laml.rho,
        base.laml.rho
    );
    assert!((fit.laml.value - base.laml.value).abs() < 1e-3);
    // The null smooth is shrunk to nothing from either start.
    let edf = block_edf(&d, &fit);
    assert!(edf[1] < 0.05, "edf {edf:?}");
    // Without its dH/drho terms the Fellner-Schall step is of the size of
    // the fixed-point gap, and at the optimum that gap is the dH terms alone:
    // far smaller than the first step's.
    let at_optimum = fellner_schall_step(&pen, &fit.laml, 5.0);
    assert!(at_optimum[0].abs() < 0.5, "{at_optimum:?}");
}

/// An inner solve that cannot converge within its cap is a NoConvergence
/// error carrying the gradient norms it went through, not an input error.
#[test]
fn an_unconverged_inner_solve_is_no_convergence_with_its_history() {
    let d = simulate(400, -0.3, &[f1, f2, zero], 6);
    let (pen, be) = (penalty(&d), CpuBackend::new());
    let mut opts = tight();
    opts.newton.max_iter = 2;
    match evaluate_laml(&be, &Logistic::new(&d), &pen, &[0.0, 0.0, 0.0], &vec![0.0; d.p], &opts) {
        Err(matfree_solvers::SolverError::NoConvergence {
            solver,
            iterations,
            history,
            ..
        }) => {
            assert!(solver.contains("inner Newton"), "{solver}");
            assert_eq!(history.len(), iterations);
            assert!(
                iterations >= 1 && history.iter().all(|g| g.is_finite() && *g > 0.0),
                "{history:?}"
            );
        }
        other => panic!("expected NoConvergence, got {:?}", other.map(|e| e.value)),
    }
}

/// One second-difference block per smooth, after the unpenalised intercept.
fn null_space_penalty(d: &Data) -> matfree_solvers::Penalty {
    let blocks = (0..(d.p - 1) / K)
        .map(|k| matfree_solvers::PenaltyBlock {
            start: 1 + k * K,
            dim: K,
            s: second_difference(K),
        })
        .collect();
    matfree_solvers::Penalty::new(d.p, blocks).unwrap()
}

/// log|S_lambda|_+ of a dense matrix from its eigenvalues above 1e-10 of
/// the largest: the independent computation.
fn dense_log_pdet(p: usize, s: &[f64]) -> (f64, usize) {
    let eig = eigenvalues(p, s);
    let top = eig.iter().fold(0.0f64, |m, e| m.max(e.abs()));
    let positive: Vec<f64> = eig.into_iter().filter(|e| *e > 1e-10 * top).collect();
    (positive.iter().map(|e| e.ln()).sum(), positive.len())
}

/// Penalties with a null space (issue 39): a second-difference block has
/// rank K - 2, and log|S_lambda|_+ with its derivative in ln lambda_k (the
/// rank) match a dense eigen computation at lambdas from 1e-8 to 1e8 (one
/// lambda for all blocks, so the dense matrix resolves them) and at mixed
/// lambdas within 1e-3..1e3.
#[test]
fn semidefinite_penalties_log_pseudo_det_and_derivatives_match_dense() {
    let d = simulate(50, 0.0, &[f1, f2, zero], 3);
    let pen = null_space_penalty(&d);
    assert_eq!(pen.ranks(), &[K - 2; 3]);
    let common = [1e-8, 1e-4, 1.0, 1e4, 1e8].map(|l| [l; 3]);
    let mixed = [[1e-3, 1.0, 1e3], [1e3, 1e-3, 2.0], [0.37, 25.0, 1e-2]];
    for lambda in common.iter().chain(&mixed) {
        let (want, rank) = dense_log_pdet(d.p, &pen.dense(lambda).unwrap());
        assert_eq!(rank, 3 * (K - 2), "{lambda:?}");
        let got = pen.log_pseudo_det(lambda).unwrap();
        assert!(
            (got - want).abs() < 1e-9 * (1.0 + want.abs()),
            "{lambda:?}: {got} vs {want}"
        );
        for k in 0..3 {
            let h = 1e-3;
            let at = |t: f64| {
                let mut l = *lambda;
                l[k] *= t.exp();
                dense_log_pdet(d.p, &pen.dense(&l).unwrap()).0
            };
            let fd = (at(h) - at(-h)) / (2.0 * h);
            assert!((fd - (K - 2) as f64).abs() < 1e-6, "{lambda:?}, k {k}: d/drho {fd}");
        }
    }
    // A zero block, and one with a negative eigenvalue, are refused by name.
    let zero_block = matfree_solvers::PenaltyBlock {
        start: 1,
        dim: K,
        s: vec![0.0; K * K],
    };
    let e = matfree_solvers::Penalty::new(d.p, vec![zero_block])
        .unwrap_err()
        .to_string();
    assert!(e.contains("blocks[0].s") && e.contains("must not be zero"), "{e}");
}

/// dV/drho with null-space penalties matches central differences of V: the
/// `d log|S|_+ / d rho_k = rank_k` term (K - 2 here, not K) is right.
#[test]
fn reml_gradient_with_null_space_penalties_matches_central_differences() {
    let d = simulate(600, -0.3, &[f1, f2, zero], 5);
    let (pen, be) = (null_space_penalty(&d), CpuBackend::new());
    let obj = Logistic::new(&d);
    let rho = [0.5, 2.0, 4.0];
    gradient_checked(&obj, &pen, &rho, "null spaces");
    // A REML fit with them converges, and each smooth keeps at least its
    // null space's 2 degrees of freedom.
    let fit = matfree_solvers::reml(&be, &obj, &pen, None, &vec![0.0; d.p], &RemlOptions::default()).unwrap();
    assert!(fit.report.converged, "{:?}", fit.report.termination);
    let st = &fit.statistics;
    for (k, e) in st.edf.blocks.iter().enumerate() {
        assert!(*e >= 2.0 - 1e-6 && *e <= K as f64 + 1e-9, "smooth {k}: edf {e}");
    }
}

/// Penalised least squares with unit variance: f = |y - X beta|^2 / 2, its
/// Hessian X^T X constant (so dH/drho = 0 and the fixed-H outer Hessian is
/// exact).
struct Gaussian<'d> {
    data: &'d Data,
}

impl Gaussian<'_> {
    fn residuals(&self, beta: &[f64]) -> Vec<f64> {
        let p = self.data.p;
        (0..self.data.n)
            .map(|i| (0..p).map(|j| self.data.x[i * p + j] * beta[j]).sum::<f64>() - self.data.y[i])
            .collect()
    }
}

impl Objective<CpuBackend> for Gaussian<'_> {
    fn dim(&self) -> usize {
        self.data.p
    }
    fn evaluate(&self, beta: &[f64]) -> Result<Option<Evaluation<'_, CpuBackend>>> {
        let (n, p, x) = (self.data.n, self.data.p, &self.data.x);
        let r = self.residuals(beta);
        let gradient = (0..p).map(|j| (0..n).map(|i| x[i * p + j] * r[i]).sum()).collect();
        let h = (0..p * p)
            .map(|t| (0..n).map(|i| x[i * p + t / p] * x[i * p + t % p]).sum())
            .collect();
        Ok(Some(Evaluation {
            value: 0.5 * r.iter().map(|v| v * v).sum::<f64>(),
            gradient,
            hessian: std::rc::Rc::new(matfree_solvers::DenseOperator::new(p, h)?),
        }))
    }
    fn exact_hessian_derivative(&self) -> bool {
        true
    }
    fn hessian_derivative(&self, _: &[f64], _: &[f64], _: &[f64], _: f64) -> Result<Vec<f64>> {
        Ok(vec![0.0; self.data.p * self.data.p])
    }
}

/// A tensor-product pair on a Gaussian model: dV/drho (with d log|S|_+ /
/// drho_k = lambda_k tr(S^+ S_k), not a rank) matches central differences
/// of V, the outer Hessian (with -d2 log|S|_+ / drho2 / 2) matches central
/// differences of dV/drho, and REML converges.
#[test]
fn tensor_product_reml_on_gaussian_matches_central_differences() {
    let d = tensor_data(400, 21, true);
    let (pen, be, opts) = (tensor_penalty(d.p), CpuBackend::new(), tight());
    let obj = Gaussian { data: &d };
    let beta0 = vec![0.0; d.p];
    for rho in [[0.5, 2.0], [-1.0, 4.0], [3.0, -2.0]] {
        let at = evaluate_laml(&be, &obj, &pen, &rho, &beta0, &opts).unwrap();
        assert!(
            at.log_pseudo_det_hessian.iter().any(|&h| h != 0.0),
            "the blocks overlap"
        );
        let eval = |r: &[f64]| evaluate_laml(&be, &obj, &pen, r, &at.beta, &opts).unwrap();
        let h = 1e-4;
        let scale = at.gradient.iter().fold(0.0f64, |m, g| m.max(g.abs()));
        let hscale = at.outer_hessian.iter().fold(0.0f64, |m, g| m.max(g.abs()));
        for k in 0..2 {
            let (mut up, mut dn) = (rho.to_vec(), rho.to_vec());
            up[k] += h;
            dn[k] -= h;
            let (eu, ed) = (eval(&up), eval(&dn));
            let fd = (eu.value - ed.value) / (2.0 * h);
            let err = (at.gradient[k] - fd).abs() / scale;
            assert!(err < 1e-6, "{rho:?}, k {k}: {} vs {fd} ({err:e})", at.gradient[k]);
            for l in 0..2 {
                let fd = (eu.gradient[l] - ed.gradient[l]) / (2.0 * h);
                let err = (at.outer_hessian[l * 2 + k] - fd).abs() / hscale;
                assert!(
                    err < 1e-6,
                    "{rho:?}, ({l},{k}): {} vs {fd} ({err:e})",
                    at.outer_hessian[l * 2 + k]
                );
            }
        }
    }
    // A default fit converges to what its stop promises: by the decrement,
    // V within 5e-4 of its minimum (here the gradient can be 0.02 where V
    // curves steeply); the minimum from a fit to 1e-9 edf.
    let fit = reml(&be, &obj, &pen, None, &beta0, &RemlOptions::default()).unwrap();
    assert!(fit.report.converged, "{:?}", fit.report.termination);
    let best = reml(&be, &obj, &pen, None, &beta0, &RemlOptions::tight()).unwrap();
    let g = best.report.projected_gradient.unwrap_or(f64::INFINITY);
    assert!(
        best.report.converged && g < 1e-6,
        "{:?}, gradient {g}",
        best.report.termination
    );
    let above = fit.laml.value - best.laml.value;
    assert!((-1e-9..=5e-4).contains(&above), "V {above:e} above the minimum");
}

/// The same pair on a logistic model: dV/drho matches central differences
/// of V, and a REML fit converges.
#[test]
fn tensor_product_reml_on_logistic_converges() {
    let d = tensor_data(800, 8, false);
    let (pen, be) = (tensor_penalty(d.p), CpuBackend::new());
    let obj = Logistic::new(&d);
    gradient_checked(&obj, &pen, &[1.0, 3.0], "tensor product");
    gradient_checked(&obj, &pen, &[4.0, -1.0], "tensor product");
    let fit = reml(&be, &obj, &pen, None, &vec![0.0; d.p], &RemlOptions::default()).unwrap();
    assert!(fit.report.converged, "{:?}", fit.report.termination);
}
