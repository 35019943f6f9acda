//! The observer a Python fit runs under: it relays the fit's progress to
//! a Python callback (the package's `verbose` lines or tqdm bar) and, at
//! every evaluation of the objective, lets Python run its signal handlers,
//! so that Ctrl-C raises `KeyboardInterrupt` in the fit's thread; an
//! exception there (or in the callback) stops the fit
//! ([`Observer::interrupted`]) and is what the call raises.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use matfree::solvers::newton::NewtonIteration;
use matfree::solvers::observer::{EvaluationRecord, Observer};
use matfree::solvers::reml::RemlIteration;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// What an event adds to the dict the callback is given.
type Fill<'a> = dyn Fn(&Bound<'_, PyDict>) -> PyResult<()> + 'a;

/// Progress for a Python callback, and Ctrl-C for the fit.
pub(crate) struct Watcher {
    callback: Option<Py<PyAny>>,
    stopped: AtomicBool,
    /// The exception that stopped the fit (KeyboardInterrupt, the callback's).
    error: Mutex<Option<PyErr>>,
    evaluations: AtomicUsize,
    reml: AtomicUsize,
    start: Instant,
}

impl Watcher {
    /// A watcher calling `callback(event: dict)` at each Newton and REML
    /// iteration (none: signals only).
    pub(crate) fn new(callback: Option<Py<PyAny>>) -> Self {
        Self {
            callback,
            stopped: AtomicBool::new(false),
            error: Mutex::new(None),
            evaluations: AtomicUsize::new(0),
            reml: AtomicUsize::new(0),
            start: Instant::now(),
        }
    }

    /// The exception a failed fit raises: the one that stopped it, if
    /// any, else `fallback` (the library's error, converted).
    pub(crate) fn raised(&self, fallback: PyErr) -> PyErr {
        self.error.lock().ok().and_then(|mut e| e.take()).unwrap_or(fallback)
    }

    /// With the interpreter: run pending signal handlers, then tell the
    /// callback `event` (if any); an exception from either stops the fit.
    fn poll(&self, event: Option<&Fill<'_>>) {
        if self.stopped.load(Ordering::Relaxed) {
            return;
        }
        let result = Python::attach(|py| -> PyResult<()> {
            py.check_signals()?;
            let (Some(callback), Some(fill)) = (&self.callback, event) else {
                return Ok(());
            };
            let dict = PyDict::new(py);
            dict.set_item("evaluations", self.evaluations.load(Ordering::Relaxed))?;
            dict.set_item("seconds", self.start.elapsed().as_secs_f64())?;
            fill(&dict)?;
            callback.call1(py, (dict,))?;
            Ok(())
        });
        if let Err(e) = result {
            if let Ok(mut slot) = self.error.lock() {
                *slot = Some(e);
            }
            self.stopped.store(true, Ordering::Relaxed);
        }
    }
}

impl Observer for Watcher {
    fn evaluation(&self, _: &EvaluationRecord) {
        self.evaluations.fetch_add(1, Ordering::Relaxed);
        self.poll(None);
    }

    fn newton_iteration(&self, it: &NewtonIteration) {
        self.poll(Some(&|d| {
            d.set_item("kind", "newton")?;
            d.set_item("objective", it.objective)?;
            d.set_item("decrement", it.decrement)
        }));
    }

    fn reml_iteration(&self, it: &RemlIteration) {
        let k = self.reml.fetch_add(1, Ordering::Relaxed) + 1;
        let lambda: Vec<f64> = it.rho.iter().map(|r| r.exp()).collect();
        self.poll(Some(&|d| {
            d.set_item("kind", "reml")?;
            d.set_item("iteration", k)?;
            d.set_item("score", it.value)?;
            d.set_item("lambda", lambda.clone())
        }));
    }

    fn interrupted(&self) -> bool {
        self.stopped.load(Ordering::Relaxed)
    }
}
