//! The outer Newton loop as a state machine: a probe of a vanished
//! smooth's other side, or the stopping tests and a Newton step with its
//! line search, then a check of the inner minimum from `beta0` where the
//! loop would stop.

use std::time::Instant;

use crate::logdet::PenalisedFactor;
use crate::newton::Evaluation;
use crate::pcg_kernels::PcgKernels;
use crate::Result;

use super::curvature::{measured_hessian, secant_update, POOR_MODEL_HALVINGS};
use super::direction::{Direction, Jumps};
use super::guards::{lower_mode, probe_other_side};
use super::laml::{Point, Trial};
use super::line_search::{outer_line_search, Search, Start};
use super::report::{keep, still};
use super::stop::{before_search, gradient_met, max_move, resolved, step_met};
use super::{Ctx, EvaluationCounts, LamlEvaluation, OuterStep, RemlIteration, RemlTermination};

/// The outer loop's state from one iteration to the next.
pub(super) struct Walk<'o, B: PcgKernels> {
    pub(super) cur: LamlEvaluation,
    /// The factor of H + S at cur.beta: moves with cur (see
    /// [`Walk::stand_on`]), so the point REML returns has its own.
    pub(super) factor: PenalisedFactor,
    /// The objective's evaluation at cur.beta, shared by every trial that
    /// starts there.
    at_cur: Evaluation<'o, B>,
    /// Where the next line search's first trial starts (cur.beta, or the
    /// optimum of a probe that did not improve V).
    start: Start<'o, B>,
    /// The last Newton iterate, for the exponential-tail test.
    prev: Option<LamlEvaluation>,
    /// The secant correction of the outer Hessian (m x m).
    correction: Vec<f64>,
    /// A trust radius on the outer step: cut to the accepted step after a
    /// line search that needed halvings, doubled (up to max_step) after a
    /// full step.
    radius: f64,
    probed: Vec<bool>,
    /// Whether the last line search showed the model's curvature wrong, and
    /// where the outer Hessian was last measured.
    model_poor: bool,
    measured_at: Option<Vec<f64>>,
    /// Whether the last accepted step's line search needed that many
    /// halvings: the minimum is then checked from beta0, since a branch of
    /// inner minima nearing its end is one way the model fails
    /// ([`lower_mode`]).
    suspect: bool,
    /// V before and after each of the consecutive accepted Newton steps.
    values: Vec<(f64, Vec<f64>)>,
    /// Where the minimum of cur was last checked from beta0, and how often.
    checked_at: Option<Vec<f64>>,
    pub(super) mode_checks: usize,
    pub(super) evaluations: EvaluationCounts,
    pub(super) iterations: Vec<RemlIteration>,
}

/// What a Newton iteration leads to.
enum Next {
    /// The next iteration, at once.
    Iterate,
    /// A check of cur's minimum from beta0 first; then stop with the
    /// termination, or (`None`) iterate.
    Check(Option<RemlTermination>),
}

impl<'o, B: PcgKernels> Walk<'o, B> {
    pub(super) fn new(point: Point<'o, B>, iterations: Vec<RemlIteration>, radius: f64) -> Self {
        let Point {
            laml: cur,
            factor,
            at_beta: at_cur,
        } = point;
        let m = cur.rho.len();
        Self {
            start: (cur.beta.clone(), Some(at_cur.clone())),
            cur,
            factor,
            at_cur,
            prev: None,
            correction: vec![0.0; m * m],
            radius,
            probed: vec![false; m],
            model_poor: false,
            measured_at: None,
            suspect: false,
            values: Vec::new(),
            checked_at: None,
            mode_checks: 0,
            evaluations: EvaluationCounts::default(),
            iterations,
        }
    }

    /// Outer iterations until a stop.
    pub(super) fn run(&mut self, ctx: &Ctx<'o, '_, B>) -> Result<RemlTermination> {
        loop {
            let t0 = Instant::now();
            if self.probe(ctx, t0)? {
                continue;
            }
            let stop = match self.newton(ctx, t0)? {
                Next::Iterate => continue,
                Next::Check(stop) => stop,
            };
            if self.several_minima(ctx, t0)? {
                return Ok(RemlTermination::SeveralMinima);
            }
            if let Some(t) = stop {
                return Ok(t);
            }
        }
    }

    /// The other side of a vanished smooth ([`probe_other_side`]); true
    /// where V is lower there and the walk moved to it.
    fn probe(&mut self, ctx: &Ctx<'o, '_, B>, t0: Instant) -> Result<bool> {
        let Some(probe) = probe_other_side(ctx, &self.cur, &mut self.probed, &mut self.start)? else {
            return Ok(false);
        };
        self.evaluations.probes += probe.evaluations;
        let Some(next) = probe.better else {
            return Ok(false);
        };
        let record = still(
            OuterStep::Probe,
            &self.cur,
            1.0,
            probe.newton_iterations,
            probe.evaluations,
            t0,
        );
        keep(ctx.watched.observer, &mut self.iterations, record);
        self.correction.iter_mut().for_each(|c| *c = 0.0);
        self.radius = ctx.outer.opts.max_step;
        self.values.clear();
        self.start = (next.laml.beta.clone(), Some(next.at_beta.clone()));
        self.prev = None;
        self.stand_on(next);
        Ok(true)
    }

    /// The stopping tests at cur, then a Newton step with its line search.
    fn newton(&mut self, ctx: &Ctx<'o, '_, B>, t0: Instant) -> Result<Next> {
        if gradient_met(&ctx.outer, &self.cur) {
            return Ok(Next::Check(Some(RemlTermination::Gradient)));
        }
        if self.suspect && self.checked_at.as_ref() != Some(&self.cur.rho) {
            return Ok(Next::Check(None));
        }
        let measured = self.measure(ctx)?;
        let step = self.direction(ctx, measured, Jumps::Tail)?;
        if let Some(stop) = before_search(&step, &self.values, self.iterations.len(), ctx.outer.opts) {
            return Ok(Next::Check(Some(stop)));
        }
        let (step, search, tried) = self.search(ctx, step, measured)?;
        let (cur, upper) = (&self.cur, &ctx.outer.upper);
        let jumped = (0..cur.rho.len()).any(|k| cur.rho[k] + step.d[k] >= upper[k] && step.d[k] > self.radius);
        self.evaluations.line_searches += tried + search.evaluations;
        let record = RemlIteration {
            kind: OuterStep::Newton,
            rho: cur.rho.clone(),
            value: cur.value,
            gradient: cur.gradient.clone(),
            decrement: step.decrement,
            hessian_measured: measured,
            step_length: 0.0,
            halvings: search.halvings,
            newton_iterations: search.newton_iterations,
            newton_evaluations: tried + search.evaluations,
            seconds: 0.0,
        };
        self.model_poor = search.halvings >= POOR_MODEL_HALVINGS;
        self.suspect = self.model_poor && search.accepted.is_some();
        let resolved = resolved(search.full_decrease, search.short_change, self.cur.value);
        self.accept(ctx, t0, record, search.accepted, jumped, resolved)
    }

    /// Record a Newton iteration and move to its accepted (t, trial), if
    /// any (`jumped`: the step jumped to a bound): the step test there, or
    /// where none was accepted, a stop if V no longer resolves the step
    /// (`resolved`), else the curvature measured and the search run again
    /// once a point before the line search counts as failed.
    fn accept(
        &mut self,
        ctx: &Ctx<'o, '_, B>,
        t0: Instant,
        mut record: RemlIteration,
        accepted: Option<(f64, Trial<'o, B>)>,
        jumped: bool,
        resolved: bool,
    ) -> Result<Next> {
        let opts = ctx.outer.opts;
        let Some((t, trial)) = accepted else {
            record.seconds = t0.elapsed().as_secs_f64();
            keep(ctx.watched.observer, &mut self.iterations, record);
            if resolved {
                return Ok(Next::Check(Some(RemlTermination::Resolved)));
            }
            if self.measured_at.as_ref() != Some(&self.cur.rho) {
                // Once per point: measure the curvature and search again.
                return Ok(Next::Iterate);
            }
            return Ok(Next::Check(Some(RemlTermination::LineSearchFailed)));
        };
        self.evaluations.hessian_derivatives += ctx.penalty.n_blocks();
        let next = ctx.gradient(trial)?;
        let moved = max_move(&next.laml.rho, &self.cur.rho);
        let small = step_met(t, moved, opts);
        self.radius = if t == 1.0 {
            (2.0 * self.radius).min(opts.max_step)
        } else {
            moved.clamp(opts.step_tol, opts.max_step)
        };
        record.step_length = t;
        record.seconds = t0.elapsed().as_secs_f64();
        keep(ctx.watched.observer, &mut self.iterations, record);
        self.advance(next, jumped);
        Ok(if small {
            Next::Check(Some(RemlTermination::Step))
        } else {
            Next::Iterate
        })
    }

    /// Measure the outer Hessian at cur where the last line search showed
    /// the model poor (once a point); whether it is measured at cur.
    fn measure(&mut self, ctx: &Ctx<'o, '_, B>) -> Result<bool> {
        if self.model_poor && self.measured_at.as_ref() != Some(&self.cur.rho) {
            let (hessian, spent) = measured_hessian(ctx, &self.cur, &self.at_cur)?;
            self.evaluations.measured_hessian += spent;
            if let Some(h) = hessian {
                self.correction = h.iter().zip(&self.cur.outer_hessian).map(|(a, b)| a - b).collect();
            }
            self.measured_at = Some(self.cur.rho.clone());
        }
        Ok(self.measured_at.as_ref() == Some(&self.cur.rho))
    }

    /// The outer step at cur, with the jumps `jumps` allows.
    fn direction(&self, ctx: &Ctx<'o, '_, B>, measured: bool, jumps: Jumps) -> Result<Direction> {
        let prev = if jumps == Jumps::Tail { self.prev.as_ref() } else { None };
        let (cur, correction, radius) = (&self.cur, &self.correction, self.radius);
        ctx.outer
            .direction(cur, prev, correction, ctx.penalty, radius, measured, jumps)
    }

    /// The line search along `step` (a tail jump is tried whole, once; if V
    /// is not lower at the bound, the step without the tail test is
    /// searched as usual; where a vanished smooth's jump finds no lower V
    /// even halved, as where V has a shallow minimum short of the bound,
    /// the step without jumps is searched): the step searched, the search,
    /// and the evaluations of the searches tried before it.
    fn search(
        &mut self,
        ctx: &Ctx<'o, '_, B>,
        step: Direction,
        measured: bool,
    ) -> Result<(Direction, Search<'o, B>, usize)> {
        let opts = ctx.outer.opts;
        let from = match std::mem::replace(&mut self.start, (self.cur.beta.clone(), None)) {
            (_, None) => (self.cur.beta.clone(), Some(self.at_cur.clone())),
            kept => kept,
        };
        let here = (&self.cur, &self.at_cur);
        let along = |d: &[f64], from, max_halvings, gain| outer_line_search(ctx, here, d, from, max_halvings, gain);
        let at_cur = || (self.cur.beta.clone(), Some(self.at_cur.clone()));
        let (mut step, mut spent, mut jumps) = (step, 0, Jumps::Tail);
        let mut search = if step.tail {
            along(&step.d, from, 0, step.tail_gain)?
        } else {
            along(&step.d, from, opts.max_halvings, 0.0)?
        };
        while search.accepted.is_none() && step.jumping && jumps != Jumps::Off {
            jumps = if step.tail { Jumps::Vanished } else { Jumps::Off };
            spent += search.evaluations;
            step = self.direction(ctx, measured, jumps)?;
            search = along(&step.d, at_cur(), opts.max_halvings, 0.0)?;
        }
        Ok((step, search, spent))
    }

    /// Move to an accepted Newton iterate: the secant correction (reset
    /// after a jump to a bound, which says nothing of the curvature near
    /// the iterates), V's record, and where the next search starts.
    fn advance(&mut self, next: Point<'o, B>, jumped: bool) {
        if jumped {
            self.correction.iter_mut().for_each(|c| *c = 0.0);
        } else {
            secant_update(&mut self.correction, &self.cur, &next.laml);
        }
        if self.values.is_empty() {
            self.values.push((self.cur.value, self.cur.rho.clone()));
        }
        self.values.push((next.laml.value, next.laml.rho.clone()));
        self.start = (next.laml.beta.clone(), Some(next.at_beta.clone()));
        self.prev = Some(self.stand_on(next));
    }

    /// Move cur to `point`, with its factor and evaluation (the one place
    /// cur changes after [`Walk::new`]); the point left.
    fn stand_on(&mut self, point: Point<'o, B>) -> LamlEvaluation {
        self.factor = point.factor;
        self.at_cur = point.at_beta;
        std::mem::replace(&mut self.cur, point.laml)
    }

    /// The inner solve from beta0 at cur (once a point): true where it
    /// found a lower minimum, which becomes cur ([`lower_mode`]).
    fn several_minima(&mut self, ctx: &Ctx<'o, '_, B>, t0: Instant) -> Result<bool> {
        if self.checked_at.as_ref() == Some(&self.cur.rho) {
            return Ok(false);
        }
        self.checked_at = Some(self.cur.rho.clone());
        // A convex objective has one minimum: checked without a solve. Nor
        // is one solved where every inner solve so far met H + S positive
        // definite (the start's from beta0 after its first step: see
        // Ctx::saw) and the last line search needed no run of halvings:
        // nothing seen says the penalised objective is not convex where the
        // solves went, and the check would cost about a quarter of such a
        // fit's evaluations.
        if ctx.watched.objective.convex() || !(ctx.indefinite.get() || self.suspect) {
            return Ok(false);
        }
        self.mode_checks += 1;
        let (lower, newton_iterations, spent) = lower_mode(ctx, &self.cur)?;
        self.evaluations.mode_checks += spent;
        let Some(lower) = lower else {
            return Ok(false);
        };
        let record = still(OuterStep::ColdStart, &self.cur, 0.0, newton_iterations, spent, t0);
        keep(ctx.watched.observer, &mut self.iterations, record);
        self.stand_on(lower);
        Ok(true)
    }
}
