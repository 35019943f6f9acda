//! The observer handed to the drivers: it is told of every Newton and REML
//! iteration in order, with the records the reports keep, of every
//! evaluation the drivers count (value-only ones as such), and of every
//! solve's end; and attaching it changes nothing in the solve.

mod common;

use std::cell::RefCell;

use common::*;
use matfree_solvers::{
    newton, newton_observed, reml, reml_observed, CpuBackend, EvaluationKind, EvaluationRecord, NewtonIteration,
    NewtonOptions, NewtonReport, Observer, OuterStep, RemlFit, RemlIteration, RemlOptions, RemlReport, SolverError,
    StepSolver, Termination,
};

fn f1(x: f64) -> f64 {
    (2.0 * std::f64::consts::PI * x).sin()
}
fn zero(_: f64) -> f64 {
    0.0
}

const LAMBDA: [f64; 2] = [0.5, 30.0];

/// What an observer is told, in order.
#[derive(Debug)]
enum Event {
    Newton(NewtonIteration),
    NewtonStop(NewtonReport),
    Reml(RemlIteration),
    RemlStop(RemlReport),
    Evaluation(EvaluationKind),
}

#[derive(Default)]
struct Recorder(RefCell<Vec<Event>>);

impl Observer for Recorder {
    fn newton_iteration(&self, it: &NewtonIteration) {
        self.0.borrow_mut().push(Event::Newton(it.clone()));
    }
    fn newton_stop(&self, report: &NewtonReport) {
        self.0.borrow_mut().push(Event::NewtonStop(report.clone()));
    }
    fn reml_iteration(&self, it: &RemlIteration) {
        self.0.borrow_mut().push(Event::Reml(it.clone()));
    }
    fn reml_stop(&self, report: &RemlReport) {
        self.0.borrow_mut().push(Event::RemlStop(report.clone()));
    }
    fn evaluation(&self, e: &EvaluationRecord) {
        assert!(e.seconds >= 0.0);
        assert_eq!(e.value.is_some(), e.kind != EvaluationKind::HessianDerivative, "{e:?}");
        self.0.borrow_mut().push(Event::Evaluation(e.kind));
    }
}

impl Recorder {
    fn count(&self, kind: EvaluationKind) -> usize {
        let events = self.0.borrow();
        events
            .iter()
            .filter(|e| matches!(e, Event::Evaluation(k) if *k == kind))
            .count()
    }

    fn evaluations(&self) -> usize {
        let events = self.0.borrow();
        events.iter().filter(|e| matches!(e, Event::Evaluation(_))).count()
    }

    /// Every Newton solve's stop, after checking that the iterations told
    /// since the previous stop are the stopped solve's, in order.
    fn newton_solves(&self) -> Vec<NewtonReport> {
        let (mut solves, mut since) = (Vec::new(), Vec::new());
        for e in self.0.borrow().iter() {
            match e {
                Event::Newton(it) => since.push(it.clone()),
                Event::NewtonStop(r) => {
                    assert_eq!(std::mem::take(&mut since), r.iterations, "solve {}", solves.len());
                    solves.push(r.clone());
                }
                _ => {}
            }
        }
        assert!(since.is_empty(), "iterations after the last stop");
        solves
    }

    fn reml_iterations(&self) -> Vec<RemlIteration> {
        let events = self.0.borrow();
        let its = events.iter().filter_map(|e| match e {
            Event::Reml(it) => Some(it.clone()),
            _ => None,
        });
        its.collect()
    }

    fn reml_stop(&self) -> RemlReport {
        match self.0.borrow().last() {
            Some(Event::RemlStop(r)) => r.clone(),
            last => panic!("the last event is not REML's stop: {last:?}"),
        }
    }
}

/// A Newton report without its wall times.
fn untimed(mut r: NewtonReport) -> NewtonReport {
    r.seconds = 0.0;
    for it in r.iterations.iter_mut().chain(r.check.as_mut()) {
        it.seconds = 0.0;
    }
    r
}

/// A REML report without its wall times.
fn untimed_reml(mut r: RemlReport) -> RemlReport {
    r.seconds = 0.0;
    for it in &mut r.iterations {
        it.seconds = 0.0;
    }
    r
}

/// The objective's own counts of (full, value-only) evaluations.
fn counts(obj: &Logistic) -> (usize, usize) {
    (obj.evaluations.get(), obj.values.get())
}

#[test]
fn newton_observer_sees_every_iteration_and_counted_evaluation() {
    let d = simulate(1000, -0.3, &[f1, zero], 7);
    let (pen, be) = (penalty(&d), CpuBackend::new());
    let start: Vec<f64> = (0..d.p).map(|j| if j % 2 == 0 { 1.5 } else { -1.5 }).collect();
    for (cheap, solver) in [
        (true, StepSolver::Dense),
        (true, StepSolver::Pcg),
        (false, StepSolver::Dense),
    ] {
        let opts = NewtonOptions {
            solver,
            ..NewtonOptions::default()
        };
        let objective = || Logistic {
            cheap_value: cheap,
            ..Logistic::new(&d)
        };
        let (plain_obj, watched_obj) = (objective(), objective());
        let plain = newton(&be, &plain_obj, &pen, &LAMBDA, &start, &opts).unwrap();
        let rec = Recorder::default();
        let fit = newton_observed(&be, &watched_obj, &pen, &LAMBDA, &start, &opts, &rec).unwrap();
        let label = format!("cheap {cheap}, {solver:?}");
        assert_eq!(fit.beta, plain.beta, "{label}: the observer changed the solve");
        assert_eq!(untimed(fit.report.clone()), untimed(plain.report.clone()), "{label}");
        assert_eq!(rec.newton_solves(), vec![fit.report.clone()], "{label}");
        // The counts reach the driver unwrapped: the objective's own, with
        // or without the observer, are what the driver reports and tells.
        assert_eq!(counts(&watched_obj), counts(&plain_obj), "{label}");
        let (full, values) = counts(&watched_obj);
        assert_eq!(rec.count(EvaluationKind::Full), full, "{label}");
        assert_eq!(rec.count(EvaluationKind::Value), values, "{label}");
        assert_eq!(rec.evaluations(), fit.report.evaluations, "{label}");
        let steps = fit.report.steps();
        let trials: usize = fit.report.iterations.iter().map(|it| it.halvings + 1).sum();
        assert!(steps >= 3, "{label}: a poor start needs several steps");
        if cheap {
            assert_eq!((full, values), (1 + steps, trials), "{label}: trials are values alone");
        } else {
            assert_eq!((full, values), (1 + trials, 0), "{label}: trials are full");
        }
    }
}

/// A REML fit with the recorder attached, checked against a plain fit of
/// the same objective; returns the observed fit and the recorder.
fn observed_reml(d: &Data, exact_dh: bool) -> (RemlFit, Recorder, Logistic<'_>) {
    let (pen, be) = (penalty(d), CpuBackend::new());
    let beta0 = vec![0.0; d.p];
    let opts = RemlOptions::default();
    let plain_obj = Logistic {
        exact_dh,
        ..Logistic::new(d)
    };
    let plain = reml(&be, &plain_obj, &pen, None, &beta0, &opts).unwrap();
    let obj = Logistic {
        exact_dh,
        ..Logistic::new(d)
    };
    let rec = Recorder::default();
    let fit = reml_observed(&be, &obj, &pen, None, &beta0, &opts, &rec).unwrap();
    assert_eq!(fit.laml.beta, plain.laml.beta, "the observer changed the fit");
    assert_eq!(untimed_reml(fit.report.clone()), untimed_reml(plain.report.clone()));
    assert_eq!(counts(&obj), counts(&plain_obj));
    (fit, rec, obj)
}

#[test]
fn reml_observer_sees_every_iteration_and_counted_evaluation() {
    let d = simulate(2000, 0.2, &[f1, zero], 2024);
    for exact_dh in [false, true] {
        let (fit, rec, obj) = observed_reml(&d, exact_dh);
        let r = &fit.report;
        assert!(r.converged && r.iterations.len() >= 2, "{r:?}");
        assert_eq!(rec.reml_iterations(), r.iterations, "exact_dh {exact_dh}");
        assert_eq!(rec.reml_stop(), *r);
        let solves = rec.newton_solves();
        assert!(solves.len() > r.iterations.len(), "an inner solve per trial");
        assert!(solves
            .iter()
            .any(|s| untimed(s.clone()) == untimed(fit.laml.newton.clone())));
        // Every evaluation the report counts is told, and is the objective's.
        assert_eq!(rec.evaluations(), r.evaluations, "exact_dh {exact_dh}");
        let (full, values) = counts(&obj);
        let derivatives = rec.count(EvaluationKind::HessianDerivative);
        assert!(derivatives > 0);
        let fd = if exact_dh { 0 } else { derivatives };
        assert_eq!(rec.count(EvaluationKind::Full) + fd, full, "exact_dh {exact_dh}");
        assert_eq!(rec.count(EvaluationKind::Value), values, "exact_dh {exact_dh}");
        assert!(values > 0, "the cheap value reaches the line search");
        evaluations_add_up(r, derivatives, penalty(&d).n_blocks());
    }
}

/// The report's evaluations by purpose against what the observer saw: they
/// add up to the total; dH/drho is one per block at the start and at each
/// accepted Newton iterate; the line searches' are the Newton iterations'.
fn evaluations_add_up(r: &RemlReport, derivatives_seen: usize, blocks: usize) {
    let by = r.evaluations_by_purpose;
    assert_eq!(by.total(), r.evaluations, "{by:?}");
    assert!(by.start >= 2, "the first evaluation and a Newton step: {by:?}");
    let newton = r.iterations.iter().filter(|it| it.kind == OuterStep::Newton);
    let accepted = newton.clone().filter(|it| it.step_length > 0.0).count();
    assert_eq!(by.hessian_derivatives, blocks * (1 + accepted), "{by:?}");
    let searched: usize = newton.map(|it| it.newton_evaluations).sum();
    assert_eq!(by.line_searches, searched, "{by:?}");
    if by.probes + by.mode_checks + by.measured_hessian == 0 {
        assert_eq!(derivatives_seen, by.hessian_derivatives, "{by:?}");
    } else {
        assert!(derivatives_seen >= by.hessian_derivatives, "{by:?}");
    }
}

/// Asks to stop once it has been told of `after` evaluations.
struct StopAfter {
    after: usize,
    told: std::cell::Cell<usize>,
}

impl Observer for StopAfter {
    fn evaluation(&self, _: &EvaluationRecord) {
        self.told.set(self.told.get() + 1);
    }
    fn interrupted(&self) -> bool {
        self.told.get() >= self.after
    }
}

/// An observer that asks to stop ends REML (and its inner Newton solves)
/// with `Interrupted` before the next evaluation, at any point of the fit;
/// a pair of observers stops when either asks, and tells both.
#[test]
fn an_interrupting_observer_stops_the_solve_before_its_next_evaluation() {
    let d = simulate(2000, 0.2, &[f1, zero], 2024);
    let (pen, be) = (penalty(&d), CpuBackend::new());
    let beta0 = vec![0.0; d.p];
    let opts = RemlOptions::default();
    for after in [0, 1, 5, 20] {
        let obj = Logistic::new(&d);
        let stop = StopAfter {
            after,
            told: Default::default(),
        };
        let rec = Recorder::default();
        let both: (&dyn Observer, &dyn Observer) = (&rec, &stop);
        let e = reml_observed(&be, &obj, &pen, None, &beta0, &opts, &both)
            .map(|_| ())
            .unwrap_err();
        assert!(matches!(e, SolverError::Interrupted), "after {after}: {e}");
        // The dH/drho traces of all blocks are one call, asked about once
        // and told as one record a block: a stop asked within a pair of
        // them ends the solve after the pair.
        let told = stop.told.get();
        assert!(
            (after..after + pen.n_blocks()).contains(&told),
            "after {after}: told {told}, no evaluation after the stop"
        );
        assert_eq!(rec.evaluations(), told, "both observers are told");
        let (full, values) = counts(&obj);
        assert!(full + values <= told, "after {after}: the objective ran past the stop");
    }
    let obj = Logistic::new(&d);
    let never = StopAfter {
        after: usize::MAX,
        told: Default::default(),
    };
    assert!(reml_observed(&be, &obj, &pen, None, &beta0, &opts, &never).is_ok());
}

/// The check of the inner minimum from beta0 where REML stops runs once an
/// inner solve has met H + S not positive definite, and not otherwise:
/// the logistic likelihood (convex, but not claimed so) never damps a
/// Newton step and is not checked; with a double well whose -gamma I
/// curvature near beta0 makes H + S indefinite there, an inner solve is
/// damped and the stop is checked from beta0. The check ends once a step
/// would land within 0.1 standard errors of the minimum it checks
/// (`Joined`); with a deeper well it ends without a minimum, and its
/// evaluations are counted all the same (they went uncounted before: the
/// fit reported 209 evaluations where it made 251).
#[test]
fn the_mode_is_checked_where_an_inner_solve_met_an_indefinite_hessian() {
    let d = simulate(2000, 0.2, &[f1, zero], 2024);
    let (pen, be) = (penalty(&d), CpuBackend::new());
    let beta0: Vec<f64> = (0..d.p).map(|j| 0.01 * (j as f64 - 9.0)).collect();
    for well in [0.0, 200.0, 400.0] {
        let obj = Logistic {
            double_well: well,
            ..Logistic::new(&d)
        };
        let rec = Recorder::default();
        let fit = reml_observed(&be, &obj, &pen, None, &beta0, &RemlOptions::default(), &rec).unwrap();
        let (r, solves) = (&fit.report, rec.newton_solves());
        assert!(r.converged, "well {well}: {:?}", r.termination);
        let by = &r.evaluations_by_purpose;
        assert_eq!(by.total(), r.evaluations, "{by:?}");
        assert_eq!(
            rec.evaluations(),
            r.evaluations,
            "well {well}: every evaluation made is counted"
        );
        let damped = |s: &NewtonReport| s.iterations.iter().any(|it| it.damping > 0.0);
        if well == 0.0 {
            assert!(!solves.iter().any(damped), "a logistic likelihood damped a step");
            assert_eq!(r.mode_checks, 0, "{by:?}");
            continue;
        }
        assert!(solves.iter().any(damped), "an inner solve met an indefinite H + S");
        assert!(r.mode_checks >= 1, "{by:?}");
        assert!(by.mode_checks > 0, "well {well}: {by:?}");
        if well == 200.0 {
            let check = solves.last().unwrap();
            assert_eq!(check.termination, Termination::Joined, "{check:?}");
            assert_eq!(check.evaluations, by.mode_checks);
        }
    }
}
