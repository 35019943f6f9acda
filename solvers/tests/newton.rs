//! The Newton driver against an independent dense Newton reference on a
//! penalised logistic regression.

mod common;

use common::*;
use matfree_solvers::{
    newton, CostEstimate, CpuBackend, Evaluation, NewtonOptions, NewtonReport, Objective, Penalty, Result, StepSolver,
    Termination,
};

fn f1(x: f64) -> f64 {
    (2.0 * std::f64::consts::PI * x).sin()
}
fn f2(x: f64) -> f64 {
    2.0 * (x - 0.5) * (x - 0.5) - 0.2
}
fn f3(_: f64) -> f64 {
    0.0
}

fn data() -> Data {
    simulate(1000, -0.3, &[f1, f2, f3], 7)
}

const LAMBDA: [f64; 3] = [0.5, 2.0, 30.0];

/// A poor start: alternating +-1.5 saturates many rows.
fn poor_start(p: usize) -> Vec<f64> {
    (0..p).map(|j| if j % 2 == 0 { 1.5 } else { -1.5 }).collect()
}

fn opts(solver: StepSolver) -> NewtonOptions {
    NewtonOptions {
        solver,
        decrement_tol: 1e-16,
        ..NewtonOptions::default()
    }
}

fn check_converged(report: &NewtonReport, tol: f64) {
    assert!(report.converged, "{report:?}");
    assert_eq!(report.termination, Termination::Decrement);
    assert!(report.decrement <= tol, "{report:?}");
    let check = report.check.as_ref().expect("the converging solve is recorded");
    assert_eq!(check.damping, 0.0, "converged at a minimum: an undamped step");
}

#[test]
fn newton_reaches_reference_optimum_with_each_solver() {
    let d = data();
    let (obj, pen, be) = (Logistic::new(&d), penalty(&d), CpuBackend::new());
    let reference = reference_optimum(&obj, &pen, &LAMBDA, &vec![0.0; d.p]);
    for solver in [StepSolver::Pcg, StepSolver::Dense] {
        let fit = newton(&be, &obj, &pen, &LAMBDA, &poor_start(d.p), &opts(solver)).unwrap();
        let r = &fit.report;
        check_converged(r, 1e-16);
        let err = max_rel_diff(&fit.beta, &reference);
        assert!(err < 1e-8, "{solver:?}: rel err {err:e}");
        assert!(r.iterations.len() >= 3, "a poor start needs several steps");
        assert!(r.iterations.iter().all(|it| it.solver == solver));
        // The objective never increases.
        for w in r.iterations.windows(2) {
            assert!(w[1].objective <= w[0].objective);
        }
        if solver == StepSolver::Pcg {
            let rtols: Vec<f64> = r.iterations.iter().map(|it| it.pcg_rtol.unwrap()).collect();
            assert_eq!(rtols[0], 0.5, "first forcing term is eta_max");
            assert!(rtols.last().unwrap() < &1e-3, "forcing tightens: {rtols:?}");
            assert!(r.iterations.iter().all(|it| it.pcg_iterations > 0));
        } else {
            assert!(r.iterations.iter().all(|it| it.pcg_rtol.is_none()));
        }
        let json = serde_json::to_string(r).unwrap();
        let back: NewtonReport = serde_json::from_str(&json).unwrap();
        assert_eq!(back.iterations.len(), r.iterations.len());
        assert_eq!(back.termination, r.termination);
        assert!((back.objective - r.objective).abs() <= 1e-12 * r.objective.abs());
    }
}

/// Without a cheap value, line-search trials are full evaluations and the
/// accepted one is reused: the same iterates, one evaluation fewer per step.
#[test]
fn full_trials_reuse_the_accepted_evaluation() {
    let d = data();
    let (pen, be) = (penalty(&d), CpuBackend::new());
    let cheap = Logistic::new(&d);
    let full = Logistic {
        cheap_value: false,
        ..Logistic::new(&d)
    };
    for solver in [StepSolver::Dense, StepSolver::Pcg] {
        let (c0, f0) = (cheap.evaluations.get(), full.evaluations.get());
        let a = newton(&be, &cheap, &pen, &LAMBDA, &poor_start(d.p), &opts(solver)).unwrap();
        let b = newton(&be, &full, &pen, &LAMBDA, &poor_start(d.p), &opts(solver)).unwrap();
        assert_eq!(a.beta, b.beta, "{solver:?}: the iterates differ");
        assert_eq!(a.report.iterations.len(), b.report.iterations.len());
        let steps = a.report.iterations.iter().filter(|it| it.step_length > 0.0).count();
        assert!(steps >= 3);
        // The cheap objective makes full evaluations only at accepted points.
        assert_eq!(cheap.evaluations.get() - c0, 1 + steps, "{solver:?}");
        // Every trial of the other is a full evaluation, none repeated.
        let trials: usize = b.report.iterations.iter().map(|it| it.halvings + 1).sum();
        assert_eq!(full.evaluations.get() - f0, 1 + trials, "{solver:?}");
        assert_eq!(b.report.evaluations, a.report.evaluations - steps, "{solver:?}");
    }
}

#[test]
fn pcg_newton_reads_device_scalars_only_inside_pcg() {
    let d = data();
    let (obj, pen, be) = (Logistic::new(&d), penalty(&d), CpuBackend::new());
    let fit = newton(&be, &obj, &pen, &LAMBDA, &poor_start(d.p), &opts(StepSolver::Pcg)).unwrap();
    let solves: Vec<_> = fit.report.iterations.iter().chain(&fit.report.check).collect();
    let per_step: Vec<usize> = solves.iter().map(|it| it.pcg_host_reads).collect();
    assert_eq!(be.reads(), per_step.iter().sum::<usize>());
    // Each solve reads once per check block plus twice (PcgOptions::default
    // checks every 10 iterations); the converging check may solve twice.
    for it in &fit.report.iterations {
        assert!(it.pcg_host_reads <= it.pcg_iterations.div_ceil(10) + 2, "{it:?}");
    }
    let be2 = CpuBackend::new();
    newton(&be2, &obj, &pen, &LAMBDA, &poor_start(d.p), &opts(StepSolver::Dense)).unwrap();
    assert_eq!(be2.reads(), 0);
}

#[test]
fn non_finite_trial_objective_halves_the_step() {
    let d = data();
    let pen = penalty(&d);
    let be = CpuBackend::new();
    let free = Logistic::new(&d);
    let beta0 = poor_start(d.p);
    let reference = reference_optimum(&free, &pen, &LAMBDA, &vec![0.0; d.p]);
    // The first full Newton step from beta0, computed independently.
    let (mut g, mut h) = free.derivatives(&beta0);
    let s = pen.dense(&LAMBDA).unwrap();
    let sb = pen.apply(&LAMBDA, &beta0).unwrap();
    for i in 0..d.p {
        g[i] = -(g[i] + sb[i]);
    }
    for (hi, si) in h.iter_mut().zip(&s) {
        *hi += si;
    }
    let step = chol_solve(d.p, &h, &g);
    let inf = |v: &[f64]| v.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let first: Vec<f64> = beta0.iter().zip(&step).map(|(b, s)| b + s).collect();
    // A domain that holds beta0 and the optimum but not the first full step.
    let bound = 0.5 * (inf(&first) + inf(&beta0).max(inf(&reference)));
    assert!(inf(&first) > bound && bound > inf(&beta0) && bound > inf(&reference));
    let obj = Logistic {
        domain: Some(bound),
        ..Logistic::new(&d)
    };
    for solver in [StepSolver::Dense, StepSolver::Pcg] {
        let mut o = opts(solver);
        // A near-exact first PCG step, so that it leaves the domain too.
        o.forcing.eta_max = 1e-8;
        let fit = newton(&be, &obj, &pen, &LAMBDA, &beta0, &o).unwrap();
        let it0 = &fit.report.iterations[0];
        assert!(it0.non_finite_trials >= 1 && it0.halvings >= 1, "{it0:?}");
        assert!(it0.step_length <= 0.5);
        check_converged(&fit.report, 1e-16);
        assert!(max_rel_diff(&fit.beta, &reference) < 1e-8);
    }
}

/// H + S of `obj` at beta (dense, row-major).
fn penalised_hessian(obj: &Logistic<'_>, pen: &Penalty, beta: &[f64]) -> Vec<f64> {
    let s = pen.dense(&LAMBDA).unwrap();
    let (_, h) = obj.derivatives(beta);
    h.iter().zip(&s).map(|(h, s)| h + s).collect()
}

/// An indefinite start: near beta = 0 the double well contributes
/// -gamma I, and gamma twice the smallest curvature of H + S at beta0 makes
/// a few directions negative. The start beta0 and the objective.
fn double_well_start<'d>(d: &'d Data, pen: &Penalty) -> (Vec<f64>, Logistic<'d>) {
    let beta0: Vec<f64> = (0..d.p).map(|j| 0.01 * (j as f64 - 9.0)).collect();
    let convex = eigenvalues(d.p, &penalised_hessian(&Logistic::new(d), pen, &beta0));
    let obj = Logistic {
        double_well: 2.0 * convex[0],
        ..Logistic::new(d)
    };
    (beta0, obj)
}

#[test]
fn indefinite_hessian_is_damped_and_reported() {
    let d = data();
    let pen = penalty(&d);
    let be = CpuBackend::new();
    let (beta0, obj) = double_well_start(&d, &pen);
    let penalised_h = |obj: &Logistic<'_>, beta: &[f64]| penalised_hessian(obj, &pen, beta);
    assert!(eigenvalues(d.p, &penalised_h(&obj, &beta0))[0] < 0.0);
    for solver in [StepSolver::Dense, StepSolver::Pcg] {
        let fit = newton(&be, &obj, &pen, &LAMBDA, &beta0, &opts(solver)).unwrap();
        let it0 = &fit.report.iterations[0];
        assert!(it0.damping > 0.0, "{solver:?}: {it0:?}");
        check_converged(&fit.report, 1e-16);
        // A minimum, not a saddle: the final penalised Hessian is positive definite.
        assert!(eigenvalues(d.p, &penalised_h(&obj, &fit.beta))[0] > 0.0);
        assert!(fit.report.objective < it0.objective);
    }
}

/// The logistic objective with coefficient 0 (the unpenalised intercept)
/// in units `s` times larger: beta'_0 = beta_0 / s, so g'_0 = s g_0, row and
/// column 0 of H scale by s, and its coefficient scale is s.
struct Rescaled<'d> {
    inner: Logistic<'d>,
    s: f64,
}

impl Objective<CpuBackend> for Rescaled<'_> {
    fn dim(&self) -> usize {
        self.inner.dim()
    }
    fn evaluate(&self, beta: &[f64]) -> Result<Option<Evaluation<'_, CpuBackend>>> {
        let mut b = beta.to_vec();
        b[0] *= self.s;
        let p = self.dim();
        let (mut gradient, mut h) = self.inner.derivatives(&b);
        gradient[0] *= self.s;
        for j in 0..p {
            h[j] *= self.s;
            h[j * p] *= self.s;
        }
        Ok(Some(Evaluation {
            value: self.inner.neglog(&b),
            gradient,
            hessian: std::rc::Rc::new(matfree_solvers::DenseOperator::new(p, h)?),
        }))
    }
    fn coefficient_scales(&self) -> Option<Vec<f64>> {
        let mut scales = vec![1.0; self.dim()];
        scales[0] = self.s;
        Some(scales)
    }
}

/// Damped steps mean the same in any units: with the intercept in units
/// 1e60 times larger (its Hessian entry 1e120 times larger), Newton from
/// the same point takes the same steps on an indefinite start, dampings
/// and objective values equal, to the same optimum. (Floored at 1e-12 of
/// the largest raw diagonal entry, the damping froze every other
/// coefficient there: a covariate times 1e60 stalled BMS fits.)
#[test]
fn damping_means_the_same_in_any_coefficient_units() {
    let d = data();
    let pen = penalty(&d);
    let be = CpuBackend::new();
    let fits: Vec<_> = [1.0, 1e60]
        .into_iter()
        .map(|s| {
            let (beta0, inner) = double_well_start(&d, &pen);
            let obj = Rescaled { inner, s };
            let mut b0 = beta0;
            b0[0] /= s;
            let mut fit = newton(&be, &obj, &pen, &LAMBDA, &b0, &opts(StepSolver::Dense)).unwrap();
            fit.beta[0] *= s;
            (fit.beta, fit.report)
        })
        .collect();
    let ((beta, plain), (beta_s, scaled)) = (&fits[0], &fits[1]);
    assert!(plain.iterations[0].damping > 0.0, "{:?}", plain.iterations[0]);
    check_converged(scaled, 1e-16);
    assert_eq!(plain.iterations.len(), scaled.iterations.len());
    for (a, b) in plain.iterations.iter().zip(&scaled.iterations) {
        assert!((a.damping - b.damping).abs() <= 1e-9 * a.damping, "{a:?} vs {b:?}");
        assert!(
            (a.objective - b.objective).abs() <= 1e-9 * a.objective.abs(),
            "{a:?} vs {b:?}"
        );
    }
    assert!(max_rel_diff(beta_s, beta) < 1e-8);
}

/// Scales whose squares are not normal floats, or not positive, are
/// refused before any evaluation, naming the coefficient.
#[test]
fn coefficient_scales_out_of_range_are_named_errors() {
    let d = data();
    let (pen, be) = (penalty(&d), CpuBackend::new());
    for s in [0.0, -1.0, 1e-151, 1e151, f64::INFINITY, f64::NAN] {
        let obj = Rescaled {
            inner: Logistic::new(&d),
            s,
        };
        let err = newton(&be, &obj, &pen, &LAMBDA, &vec![0.0; d.p], &opts(StepSolver::Dense))
            .err()
            .unwrap_or_else(|| panic!("scale {s} accepted"))
            .to_string();
        assert!(
            err.contains("coefficient_scales[0]") && err.contains("1e150"),
            "{s}: {err}"
        );
    }
}

/// Delegates to the logistic objective but reports its own costs.
struct Costed<'d>(Logistic<'d>, CostEstimate);

impl Objective<CpuBackend> for Costed<'_> {
    fn dim(&self) -> usize {
        self.0.dim()
    }
    fn evaluate(&self, beta: &[f64]) -> Result<Option<Evaluation<'_, CpuBackend>>> {
        self.0.evaluate(beta)
    }
    fn cost(&self) -> CostEstimate {
        self.1
    }
}

#[test]
fn auto_follows_the_cost_estimate() {
    let d = data();
    let (pen, be) = (penalty(&d), CpuBackend::new());
    let p = d.p;
    let cheap_dense = Costed(Logistic::new(&d), CostEstimate::dense(p));
    let dear_dense = Costed(
        Logistic::new(&d),
        CostEstimate {
            hvp: 1.0,
            dense_assembly: 1e12,
        },
    );
    let o = opts(StepSolver::Auto);
    let fit = newton(&be, &cheap_dense, &pen, &LAMBDA, &vec![0.0; p], &o).unwrap();
    assert!(fit.report.iterations.iter().all(|it| it.solver == StepSolver::Dense));
    let fit = newton(&be, &dear_dense, &pen, &LAMBDA, &vec![0.0; p], &o).unwrap();
    assert!(fit.report.iterations.iter().all(|it| it.solver == StepSolver::Pcg));
    assert!(fit.report.converged);
}

#[test]
fn invalid_inputs_are_rejected_with_their_field() {
    let d = data();
    let (obj, pen, be) = (Logistic::new(&d), penalty(&d), CpuBackend::new());
    let err = |o: &NewtonOptions, lambda: &[f64], beta0: &[f64]| {
        newton(&be, &obj, &pen, lambda, beta0, o).err().unwrap().to_string()
    };
    let beta0 = vec![0.0; d.p];
    let bad = NewtonOptions {
        armijo: 0.7,
        ..NewtonOptions::default()
    };
    assert!(err(&bad, &LAMBDA, &beta0).contains("armijo"));
    assert!(err(&NewtonOptions::default(), &[1.0, 0.0, 1.0], &beta0).contains("lambda[1]"));
    assert!(err(&NewtonOptions::default(), &LAMBDA, &beta0[1..]).contains("beta0"));
    let outside = Logistic {
        domain: Some(0.1),
        ..Logistic::new(&d)
    };
    let e = newton(&be, &outside, &pen, &LAMBDA, &vec![1.0; d.p], &NewtonOptions::default());
    assert!(e.err().unwrap().to_string().contains("beta0"));
}

/// A damped step that would leave `max_step` is damped more until it fits
/// (a Levenberg-Marquardt trust region), not cut to the cap: with the cap
/// at a quarter of the free damped step, the first step is more damped,
/// within the cap and at least half of it, and the solve ends at the free
/// solve's minimum.
#[test]
fn a_long_damped_step_is_damped_to_the_cap() {
    let d = data();
    let pen = penalty(&d);
    let be = CpuBackend::new();
    let (beta0, obj) = double_well_start(&d, &pen);
    let free = newton(&be, &obj, &pen, &LAMBDA, &beta0, &opts(StepSolver::Dense)).unwrap();
    let first = &free.report.iterations[0];
    assert!(first.damping > 0.0, "{first:?}");
    for solver in [StepSolver::Dense, StepSolver::Pcg] {
        let mut o = opts(solver);
        o.max_step = first.direction_norm / 4.0;
        let capped = newton(&be, &obj, &pen, &LAMBDA, &beta0, &o).unwrap();
        let it0 = &capped.report.iterations[0];
        assert!(it0.damping > first.damping, "{it0:?}");
        // Near the cap, not a factor of the damping's growth below it.
        let cap = o.max_step;
        assert!(it0.direction_norm <= cap && it0.direction_norm >= 0.5 * cap, "{it0:?}");
        check_converged(&capped.report, 1e-16);
        assert!(max_rel_diff(&capped.beta, &free.beta) < 1e-8);
    }
}
