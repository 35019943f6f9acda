//! What a fit shows while it runs: an observer of the Newton and REML
//! drivers that counts and times the evaluations they make and shows them
//! and every Newton and REML iteration.
//!
//! [`Display::Status`] keeps one status line on stderr (REML iteration,
//! smoothing parameters, Newton step, evaluations, elapsed time), redrawn
//! in place with indicatif where stderr is a terminal; where it is not (a
//! log file, a pipe), it writes one plain line per REML iteration instead,
//! with no escape codes. [`Display::Verbose`] writes a line per evaluation
//! and per iteration; [`Display::Quiet`] writes nothing.

use std::cell::{Cell, RefCell};
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use matfree_solvers::newton::NewtonIteration;
use matfree_solvers::observer::{EvaluationKind, EvaluationRecord, Observer};
use matfree_solvers::reml::RemlIteration;

/// What a fit writes to stderr while it runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Display {
    /// Nothing.
    #[default]
    Quiet,
    /// One live status line on a terminal; a line per REML iteration
    /// elsewhere.
    Status,
    /// A line per objective evaluation and per Newton and REML iteration.
    Verbose,
}

impl Display {
    /// The display a `--quiet` and a `--verbose` flag ask for: quiet wins,
    /// neither gives [`Display::Status`].
    pub fn from_flags(quiet: bool, verbose: bool) -> Self {
        match (quiet, verbose) {
            (true, _) => Self::Quiet,
            (_, true) => Self::Verbose,
            _ => Self::Status,
        }
    }
}

/// Where the fit is, for the status line.
#[derive(Default)]
struct State {
    reml: usize,
    lambda: Vec<f64>,
    newton: usize,
    value: f64,
}

/// An observer that counts, times and shows the evaluations and the
/// iterations it is told of.
pub(crate) struct Progress {
    display: Display,
    bar: Option<ProgressBar>,
    start: Instant,
    count: Cell<usize>,
    evaluating: Cell<f64>,
    state: RefCell<State>,
}

impl Progress {
    pub(crate) fn new(display: Display) -> Self {
        let live = display == Display::Status && std::io::stderr().is_terminal();
        let bar = live.then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg}").unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Self {
            display,
            bar,
            start: Instant::now(),
            count: Cell::new(0),
            evaluating: Cell::new(0.0),
            state: RefCell::new(State::default()),
        }
    }

    /// Seconds spent in objective evaluations so far.
    pub(crate) fn evaluation_seconds(&self) -> f64 {
        self.evaluating.get()
    }

    /// Clear the status line (the fit is over).
    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }

    fn status(&self) -> String {
        let s = self.state.borrow();
        let lambda = if s.lambda.is_empty() {
            String::new()
        } else {
            let l: Vec<String> = s.lambda.iter().map(|l| format!("{l:.3e}")).collect();
            format!("lambda [{}]  ", l.join(", "))
        };
        format!(
            "REML iteration {}  {lambda}Newton step {}  objective {:.6}  evaluations {}  {:.1} s",
            s.reml,
            s.newton,
            s.value,
            self.count.get(),
            self.start.elapsed().as_secs_f64()
        )
    }

    fn redraw(&self) {
        if let Some(bar) = &self.bar {
            bar.set_message(self.status());
        }
    }

    fn reml_line(&self, it: &RemlIteration) -> String {
        let l: Vec<String> = it.rho.iter().map(|r| format!("{:.4e}", r.exp())).collect();
        format!(
            "REML iteration {} ({:?}): V {:.6}, lambda [{}], step {:.3}, evaluations {}  ({:.1} s)",
            self.state.borrow().reml,
            it.kind,
            it.value,
            l.join(", "),
            it.step_length,
            self.count.get(),
            self.start.elapsed().as_secs_f64()
        )
    }

    /// The verbose line of an evaluation: its value, or what it computed.
    fn evaluation_line(&self, e: &EvaluationRecord) -> String {
        let what = match e.kind {
            EvaluationKind::HessianDerivative => "Hessian derivative".to_string(),
            EvaluationKind::Full | EvaluationKind::Value => format!("neglog {:.6}", e.value.unwrap_or(f64::NAN)),
        };
        format!(
            "  evaluation {:>4}: {what}  ({:.1} s)",
            self.count.get(),
            self.start.elapsed().as_secs_f64()
        )
    }
}

impl Observer for Progress {
    fn evaluation(&self, e: &EvaluationRecord) {
        self.evaluating.set(self.evaluating.get() + e.seconds);
        self.count.set(self.count.get() + 1);
        if self.display == Display::Verbose {
            stderr_line(&self.evaluation_line(e));
        }
        self.redraw();
    }

    fn newton_iteration(&self, it: &NewtonIteration) {
        {
            let mut s = self.state.borrow_mut();
            s.newton += 1;
            s.value = it.objective;
        }
        if self.display == Display::Verbose {
            // A damped step met H + S not positive definite (what the
            // REML mode check keys on): say so, with its damping.
            let damped = if it.damping > 0.0 {
                format!(", damped (mu {:.3e})", it.damping)
            } else {
                String::new()
            };
            stderr_line(&format!(
                "  Newton step: objective {:.6}, decrement {:.3e}, step length {}{damped}",
                it.objective, it.decrement, it.step_length
            ));
        }
        self.redraw();
    }

    fn reml_iteration(&self, it: &RemlIteration) {
        {
            let mut s = self.state.borrow_mut();
            s.reml += 1;
            s.newton = 0;
            s.lambda = it.rho.iter().map(|r| r.exp()).collect();
        }
        let plain = self.display == Display::Verbose || (self.display == Display::Status && self.bar.is_none());
        if plain {
            stderr_line(&self.reml_line(it));
        }
        self.redraw();
    }
}

/// A line on stderr; a closed stderr (`2>&1 | head`) loses the line, never
/// the fit (`eprintln!` would panic on it).
fn stderr_line(text: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

#[cfg(test)]
mod tests {
    use super::Display;

    #[test]
    fn quiet_wins_over_verbose_and_neither_is_the_status_line() {
        assert_eq!(Display::from_flags(true, true), Display::Quiet);
        assert_eq!(Display::from_flags(true, false), Display::Quiet);
        assert_eq!(Display::from_flags(false, true), Display::Verbose);
        assert_eq!(Display::from_flags(false, false), Display::Status);
    }
}
