//! Preconditioned conjugate gradients, written once for every backend.
//!
//! Per iteration (all queued on the backend, no host read):
//!
//! ```text
//! q = A p                  operator
//! pAp = p^T q              dot -> slot
//! alpha = rz / pAp         pcg_alpha (breakdown tests on the slots)
//! x = x + alpha p          axpy
//! r = r - alpha q          axpy
//! z = M^{-1} r             preconditioner
//! rz_new = r^T z; rr = r^T r
//! beta = rz_new / rz       pcg_beta (convergence and preconditioner tests)
//! p = z + beta p           xpay
//! ```
//!
//! Memory movement per iteration: one operator and one preconditioner apply,
//! three dots and three vector updates of length n. Once the slots record a
//! stop (convergence or breakdown), alpha and beta are zero, so the remaining
//! iterations of a block leave x untouched.
//!
//! The start (threshold, initial status) is computed on the slots too, and
//! the host reads them after every block of `check_every` iterations: a
//! solve of k iterations waits for at most `ceil(k / check_every) + 2` reads
//! (the start, one per block, the final true residual, which rides on the
//! last block's read when that block ends at `max_iter`). While the host
//! waits for one block's read, the next block is already queued whenever
//! the residual's trend says the solve will not stop within the block being
//! read (always, for a zero threshold), so the device does not idle at the
//! checks; a block queued after a stop costs its time and leaves x as it
//! was.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::operator::{expect_len, LinearOperator};
use crate::pcg_kernels::{slot, PcgKernels, PcgVectors};
use crate::precond::{precondition, Preconditioner};
use crate::{Result, SolverError};

/// Status codes stored in the `STATUS` slot.
pub mod status {
    /// Still iterating.
    pub const RUNNING: f64 = 0.0;
    /// ||r|| <= threshold.
    pub const CONVERGED: f64 = 1.0;
    /// p^T A p <= 0 or not finite.
    pub const BREAKDOWN_PAP: f64 = 2.0;
    /// alpha not finite.
    pub const BREAKDOWN_ALPHA: f64 = 3.0;
    /// beta not finite.
    pub const BREAKDOWN_BETA: f64 = 4.0;
    /// r^T z < 0 or not finite: M is not positive definite.
    pub const BAD_PRECONDITIONER: f64 = 5.0;
    /// r^T r not finite.
    pub const BREAKDOWN_RESIDUAL: f64 = 6.0;
}

/// Options of [`cg`] (SciPy's names). Stop when
/// `||r|| <= max(rtol * ||b||, atol)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PcgOptions {
    /// Relative tolerance on the residual norm (default 1e-8).
    pub rtol: f64,
    /// Absolute tolerance on the residual norm (default 0).
    pub atol: f64,
    /// Iteration cap (default 1000).
    pub max_iter: usize,
    /// Iterations between host reads of the residual (default 10).
    pub check_every: usize,
    /// Replace the recursive residual with b - A x every this many
    /// iterations, at the next check (0 = never; default 50).
    pub refresh_every: usize,
}

impl Default for PcgOptions {
    fn default() -> Self {
        Self {
            rtol: 1e-8,
            atol: 0.0,
            max_iter: 1000,
            check_every: 10,
            refresh_every: 50,
        }
    }
}

impl PcgOptions {
    /// Exactly `max_iter` iterations (tolerances 0, no residual refresh):
    /// the fixed-iteration solves that throughput benchmarks time. A solve
    /// still stops early on a breakdown or an exactly zero residual.
    pub fn fixed_iterations(max_iter: usize) -> Self {
        Self {
            rtol: 0.0,
            atol: 0.0,
            max_iter,
            check_every: 10,
            refresh_every: 0,
        }
    }

    fn validate(&self) -> Result<()> {
        for (field, v) in [("rtol", self.rtol), ("atol", self.atol)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(SolverError::invalid(field, v, "must be finite and >= 0"));
            }
        }
        if self.check_every == 0 {
            return Err(SolverError::invalid("check_every", 0, "must be >= 1"));
        }
        Ok(())
    }
}

/// The quantity whose value broke the iteration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BreakdownQuantity {
    /// p^T A p <= 0 or not finite (A is not positive definite along p).
    PAp,
    /// alpha = rz / pAp not finite.
    Alpha,
    /// beta = rz_new / rz not finite.
    Beta,
    /// r^T r not finite.
    Residual,
}

/// Why the solve stopped.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum StopReason {
    /// The residual met the tolerance.
    Converged,
    /// `max_iter` iterations ran without convergence.
    MaxIter,
    /// A quantity of the recurrence broke down.
    Breakdown {
        /// Which quantity.
        quantity: BreakdownQuantity,
        /// Its value.
        value: f64,
    },
    /// r^T z < 0 or not finite: the preconditioner is not positive definite.
    BadPreconditioner {
        /// The offending r^T z.
        value: f64,
    },
}

/// What a solve did (SciPy's `info`, spelled out).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PcgInfo {
    /// Iterations completed.
    pub iterations: usize,
    /// ||b||.
    pub b_norm: f64,
    /// The stopping threshold max(rtol ||b||, atol).
    pub threshold: f64,
    /// ||b - A x0||.
    pub initial_residual_norm: f64,
    /// Recursive residual norm at the last check.
    pub final_residual_norm: f64,
    /// ||b - A x|| of the returned x, recomputed at the end.
    pub true_residual_norm: f64,
    /// (iterations, recursive residual norm) at each check, the start included.
    pub residual_history: Vec<(usize, f64)>,
    /// Whether the tolerance was met.
    pub converged: bool,
    /// Why the solve stopped.
    pub stop_reason: StopReason,
    /// Host reads of device scalars the solve waited for.
    pub host_reads: usize,
    /// Blocks of `check_every` iterations (or fewer, the last) queued: at
    /// most one more than the reads after the start show, a block queued
    /// before the read that showed the stop (it leaves x as it was).
    pub blocks_queued: usize,
}

/// The solution and the info record.
#[derive(Debug)]
pub struct PcgSolution<V> {
    /// The final iterate.
    pub x: V,
    /// What the solve did.
    pub info: PcgInfo,
}

/// The work vectors of a solve.
struct Work<V> {
    x: V,
    r: V,
    z: V,
    p: V,
    q: V,
}

impl<V> Work<V> {
    /// The vectors a fused step updates.
    fn vectors(&mut self) -> PcgVectors<'_, V> {
        PcgVectors {
            x: &mut self.x,
            r: &mut self.r,
            z: &mut self.z,
            p: &mut self.p,
            q: &self.q,
        }
    }
}

/// Solve A x = b by preconditioned CG. `x0` is the warm start (zero if
/// `None`). Hitting `max_iter` is reported in the info, not as an error.
pub fn cg<B: PcgKernels>(
    backend: &B,
    a: &dyn LinearOperator<B>,
    m: &dyn Preconditioner<B>,
    b: &B::Vector,
    x0: Option<&B::Vector>,
    opts: &PcgOptions,
) -> Result<PcgSolution<B::Vector>> {
    let mut solver = Pcg::new(backend, a, m)?;
    let info = solver.solve(b, x0, opts)?;
    Ok(PcgSolution {
        x: solver.into_x(),
        info,
    })
}

/// [`cg`] for repeated solves with one operator and preconditioner: the work
/// vectors, the scalar slots and the recorded iteration block (a CUDA graph
/// on the GPU) are made once and kept, so a solve after the first allocates
/// nothing and records nothing. The solver borrows A and M, so they outlive
/// what it recorded.
pub struct Pcg<'a, B: PcgKernels> {
    backend: &'a B,
    a: &'a dyn LinearOperator<B>,
    m: &'a dyn Preconditioner<B>,
    w: Work<B::Vector>,
    s: B::Scalars,
    recording: Option<(usize, B::Recording)>,
    /// A zero vector for a cold start, made at the first solve that needs
    /// one after x has been used.
    zero: Option<B::Vector>,
    /// Whether w.x still holds the zeros it was made with.
    x_is_zero: bool,
}

impl<'a, B: PcgKernels> Pcg<'a, B> {
    /// A solver for A x = b with preconditioner M.
    pub fn new(backend: &'a B, a: &'a dyn LinearOperator<B>, m: &'a dyn Preconditioner<B>) -> Result<Self> {
        let n = a.dim();
        Ok(Self {
            backend,
            a,
            m,
            w: Work {
                x: backend.zeros(n)?,
                // Written before they are read: r by b or b - A x0, z and p
                // at the start, q by the first product.
                r: backend.uninit(n)?,
                z: backend.uninit(n)?,
                p: backend.uninit(n)?,
                q: backend.uninit(n)?,
            },
            s: backend.scalars(slot::COUNT)?,
            recording: None,
            zero: None,
            x_is_zero: true,
        })
    }

    /// The last solve's x.
    pub fn x(&self) -> &B::Vector {
        &self.w.x
    }

    /// The last solve's x, keeping nothing else.
    pub fn into_x(self) -> B::Vector {
        self.w.x
    }

    /// Solve A x = b from `x0` (zero if `None`); x is then [`Pcg::x`].
    pub fn solve(&mut self, b: &B::Vector, x0: Option<&B::Vector>, opts: &PcgOptions) -> Result<PcgInfo> {
        let info = self.solve_unscaled(b, x0, opts)?;
        if info.b_norm.is_finite() && info.initial_residual_norm.is_finite() {
            return Ok(info);
        }
        self.solve_scaled(b, x0, opts)
    }

    /// The solve again where ||b|| or ||b - A x0|| is not finite: a
    /// non-finite entry of b or x0 is an error naming it; a finite b whose
    /// norm overflows (entries near 1e155 and beyond) is solved as
    /// `A (x / c) = b / c` with c = max |b_i| and x scaled back, with the
    /// info's norms in the original units. This path reads b (and x0) back
    /// once; a finite-norm solve never takes it.
    fn solve_scaled(&mut self, b: &B::Vector, x0: Option<&B::Vector>, opts: &PcgOptions) -> Result<PcgInfo> {
        let backend = self.backend;
        let host_b = backend.download(b)?;
        finite_entries("b", &host_b)?;
        let host_x0 = x0.map(|x| backend.download(x)).transpose()?;
        if let Some(x) = &host_x0 {
            finite_entries("x0", x)?;
        }
        let c = host_b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        if !(c.is_finite() && c > 0.0) {
            return Err(SolverError::numerical(
                "b - A x0",
                "not finite",
                "the operator overflowed at x0",
            ));
        }
        let scaled = |v: &[f64]| -> Vec<f64> { v.iter().map(|x| x / c).collect() };
        let b_s = backend.upload(&scaled(&host_b))?;
        let x0_s = host_x0.as_deref().map(|x| backend.upload(&scaled(x))).transpose()?;
        let opts_s = PcgOptions {
            atol: opts.atol / c,
            ..opts.clone()
        };
        let mut info = self.solve_unscaled(&b_s, x0_s.as_ref(), &opts_s)?;
        if !(info.b_norm.is_finite() && info.initial_residual_norm.is_finite()) {
            return Err(SolverError::numerical(
                "b - A x0",
                "not finite even with b scaled",
                "A x0 overflows",
            ));
        }
        let x: Vec<f64> = backend.download(&self.w.x)?.iter().map(|v| v * c).collect();
        self.w.x = backend.upload(&x)?;
        info.b_norm *= c;
        info.threshold *= c;
        info.initial_residual_norm *= c;
        info.final_residual_norm *= c;
        info.true_residual_norm *= c;
        info.residual_history.iter_mut().for_each(|(_, r)| *r *= c);
        Ok(info)
    }

    fn solve_unscaled(&mut self, b: &B::Vector, x0: Option<&B::Vector>, opts: &PcgOptions) -> Result<PcgInfo> {
        opts.validate()?;
        let (backend, a) = (self.backend, self.a);
        let n = a.dim();
        expect_len("b", backend.len(b), n)?;
        let w = &mut self.w;
        match x0 {
            Some(x0) => {
                expect_len("x0", backend.len(x0), n)?;
                backend.copy(x0, &mut w.x)?;
                residual(backend, a, b, &w.x, &mut w.r)?;
            }
            None => {
                if !self.x_is_zero {
                    let zero = match &mut self.zero {
                        Some(z) => z,
                        none => none.insert(backend.zeros(n)?),
                    };
                    backend.copy(zero, &mut w.x)?;
                }
                backend.copy(b, &mut w.r)?;
            }
        }
        self.x_is_zero = false;
        self.run(b, opts)
    }

    /// The iteration of one solve from x (in `w.x`) with r = b - A x (in `w.r`).
    fn run(&mut self, b: &B::Vector, opts: &PcgOptions) -> Result<PcgInfo> {
        let Self {
            backend,
            a,
            m,
            w,
            s,
            recording,
            ..
        } = self;
        let (backend, a, m) = (*backend, *a, *m);
        start(backend, m, b, w, s, opts)?;
        let mut blocks = Blocks::new(opts);
        let mut reads = Reads::new(backend, backend.request_scalars(s)?);
        let (mut info, mut state) = (None::<PcgInfo>, Vec::new());
        loop {
            let running = info.is_none() || state[slot::STATUS] == status::RUNNING;
            while running
                && blocks.left()
                && (reads.none_pending() || reads.one_pending() && blocks.ahead(info.as_ref()))
            {
                let last = blocks.queue(backend, a, m, b, w, s, recording)?;
                reads.request(s, last)?;
            }
            let Some(next) = reads.next()? else { break };
            state = next;
            match &mut info {
                None => info = Some(start_info(&state, opts)),
                Some(info) => info
                    .residual_history
                    .push((state[slot::ITERS] as usize, state[slot::RR].sqrt())),
            }
            if state[slot::STATUS] != status::RUNNING {
                break;
            }
        }
        let mut info = info.expect("the start is always read");
        if blocks.queued_blocks > 0 {
            info.final_residual_norm = state[slot::RR].sqrt();
            let rr = match reads.true_rr()? {
                Some(v) => v,
                None => {
                    true_residual(backend, a, b, w, s)?;
                    reads.request(s, true)?;
                    reads.true_rr()?.expect("requested above")
                }
            };
            info.true_residual_norm = rr.sqrt();
        }
        info.host_reads = reads.count;
        info.iterations = state[slot::ITERS] as usize;
        info.stop_reason = stop_reason(&state);
        info.converged = info.stop_reason == StopReason::Converged;
        info.blocks_queued = blocks.queued_blocks;
        Ok(info)
    }
}

/// The slot reads of one solve: queued, waited for in order, counted.
struct Reads<'b, B: PcgKernels> {
    backend: &'b B,
    /// Requested and not yet waited for, each with whether it carries the
    /// true residual.
    pending: VecDeque<(B::ScalarRead, bool)>,
    /// The true residual from a read waited for.
    true_rr: Option<f64>,
    /// Reads waited for.
    count: usize,
}

impl<'b, B: PcgKernels> Reads<'b, B> {
    fn new(backend: &'b B, first: B::ScalarRead) -> Self {
        Self {
            backend,
            pending: VecDeque::from([(first, false)]),
            true_rr: None,
            count: 0,
        }
    }

    fn none_pending(&self) -> bool {
        self.pending.is_empty()
    }

    fn one_pending(&self) -> bool {
        self.pending.len() == 1
    }

    fn request(&mut self, s: &B::Scalars, carries_true: bool) -> Result<()> {
        self.pending.push_back((self.backend.request_scalars(s)?, carries_true));
        Ok(())
    }

    /// The oldest pending read's slots, waited for.
    fn next(&mut self) -> Result<Option<Vec<f64>>> {
        let Some((read, carries_true)) = self.pending.pop_front() else {
            return Ok(None);
        };
        let state = self.backend.wait_scalars(read)?;
        self.count += 1;
        if carries_true {
            self.true_rr = Some(state[slot::TRUE_RR]);
        }
        Ok(Some(state))
    }

    /// The true residual's square, if a read carries it: one waited for,
    /// or one queued ahead of the stop (x has not moved since the stop, so
    /// it is the one wanted).
    fn true_rr(&mut self) -> Result<Option<f64>> {
        if self.true_rr.is_none() {
            if let Some(i) = self.pending.iter().position(|(_, t)| *t) {
                let (read, _) = self.pending.remove(i).expect("found above");
                self.true_rr = Some(self.backend.wait_scalars(read)?[slot::TRUE_RR]);
                self.count += 1;
            }
        }
        Ok(self.true_rr)
    }
}

/// The blocks of iterations one solve queues, and when to queue the next one
/// before the host has read how the last one ended.
struct Blocks<'o> {
    opts: &'o PcgOptions,
    queued: usize,
    queued_blocks: usize,
    next_refresh: usize,
}

impl<'o> Blocks<'o> {
    fn new(opts: &'o PcgOptions) -> Self {
        Self {
            opts,
            queued: 0,
            queued_blocks: 0,
            next_refresh: opts.refresh_every,
        }
    }

    /// Whether iterations remain under `max_iter`.
    fn left(&self) -> bool {
        self.queued < self.opts.max_iter
    }

    /// Whether to queue a block while the one before it is still unread:
    /// only when the solve is not expected to stop within the unread block
    /// (a block queued after a stop leaves x as it is, but costs its time).
    /// Before anything is read that is known only for a zero threshold; after,
    /// from the residual's last drop per block, which must leave the
    /// residual above the threshold for two more blocks.
    fn ahead(&self, info: Option<&PcgInfo>) -> bool {
        let Some(info) = info else {
            return self.opts.rtol == 0.0 && self.opts.atol == 0.0;
        };
        if info.threshold == 0.0 {
            return true; // only an exact zero or a breakdown stops it
        }
        let [.., (_, before), (_, last)] = info.residual_history[..] else {
            return false;
        };
        let drop = if before > 0.0 { (last / before).min(1.0) } else { 0.0 };
        last * drop * drop > info.threshold
    }

    /// Queue the next block (and a residual replacement when one is due; and
    /// the true residual after the last block by count). Returns whether the
    /// true residual was queued.
    #[allow(clippy::too_many_arguments)]
    fn queue<B: PcgKernels>(
        &mut self,
        backend: &B,
        a: &dyn LinearOperator<B>,
        m: &dyn Preconditioner<B>,
        b: &B::Vector,
        w: &mut Work<B::Vector>,
        s: &mut B::Scalars,
        recording: &mut Option<(usize, B::Recording)>,
    ) -> Result<bool> {
        let opts = self.opts;
        let block = opts.check_every.min(opts.max_iter - self.queued);
        backend.repeat(block, recording, &mut || iteration(backend, a, m, w, s))?;
        self.queued += block;
        self.queued_blocks += 1;
        if opts.refresh_every > 0 && self.queued >= self.next_refresh {
            // Residual replacement keeps the search direction p.
            residual(backend, a, b, &w.x, &mut w.r)?;
            precondition(backend, m, &w.r, &mut w.z)?;
            backend.dot(&w.r, &w.z, s, slot::RZ)?;
            backend.dot(&w.r, &w.r, s, slot::RR)?;
            self.next_refresh = self.queued + opts.refresh_every;
        }
        let last = !self.left();
        if last {
            true_residual(backend, a, b, w, s)?;
        }
        Ok(last)
    }
}

/// The info record as the start's slots give it.
fn start_info(state: &[f64], opts: &PcgOptions) -> PcgInfo {
    let b_norm = state[slot::BB].sqrt();
    let r0 = state[slot::RR0].sqrt();
    PcgInfo {
        iterations: 0,
        b_norm,
        threshold: (opts.rtol * b_norm).max(opts.atol),
        initial_residual_norm: r0,
        final_residual_norm: r0,
        true_residual_norm: r0,
        residual_history: vec![(0, r0)],
        converged: false,
        stop_reason: StopReason::MaxIter,
        host_reads: 0,
        blocks_queued: 0,
    }
}

/// r = b - A x and its squared norm in the TRUE_RR slot.
fn true_residual<B: PcgKernels>(
    backend: &B,
    a: &dyn LinearOperator<B>,
    b: &B::Vector,
    w: &mut Work<B::Vector>,
    s: &mut B::Scalars,
) -> Result<()> {
    a.apply(&w.x, &mut w.r)?;
    if backend.pcg_true_residual(b, &mut w.r, s)? {
        return Ok(());
    }
    backend.sub_from(b, &mut w.r)?;
    backend.dot(&w.r, &w.r, s, slot::TRUE_RR)
}

/// r = b - A x.
fn residual<B: PcgKernels>(
    backend: &B,
    a: &dyn LinearOperator<B>,
    b: &B::Vector,
    x: &B::Vector,
    r: &mut B::Vector,
) -> Result<()> {
    a.apply(x, r)?;
    backend.sub_from(b, r)
}

/// z = M^{-1} r, p = z, the slots rz = r^T z, rr = r^T r, bb = b^T b, and
/// the start on them (fused for a diagonal M where the backend can).
fn start<B: PcgKernels>(
    backend: &B,
    m: &dyn Preconditioner<B>,
    b: &B::Vector,
    w: &mut Work<B::Vector>,
    s: &mut B::Scalars,
    opts: &PcgOptions,
) -> Result<()> {
    if let Some(d) = m.inverse_diagonal() {
        let v = w.vectors();
        if backend.pcg_restart_diagonal(d, b, v, s, (opts.rtol, opts.atol))? {
            return Ok(());
        }
    }
    precondition(backend, m, &w.r, &mut w.z)?;
    backend.copy(&w.z, &mut w.p)?;
    backend.dot(&w.r, &w.z, s, slot::RZ)?;
    backend.dot(&w.r, &w.r, s, slot::RR)?;
    backend.dot(b, b, s, slot::BB)?;
    backend.pcg_start(s, opts.rtol, opts.atol)
}

/// One PCG iteration, queued on the backend.
fn iteration<B: PcgKernels>(
    backend: &B,
    a: &dyn LinearOperator<B>,
    m: &dyn Preconditioner<B>,
    w: &mut Work<B::Vector>,
    s: &mut B::Scalars,
) -> Result<()> {
    a.apply(&w.p, &mut w.q)?;
    if let Some(d) = m.inverse_diagonal() {
        let v = w.vectors();
        if backend.pcg_step_diagonal(d, v, s)? {
            return Ok(());
        }
    }
    backend.dot(&w.p, &w.q, s, slot::PAP)?;
    backend.pcg_alpha(s)?;
    backend.axpy(s, slot::ALPHA, &w.p, &mut w.x)?;
    backend.axpy(s, slot::NEG_ALPHA, &w.q, &mut w.r)?;
    precondition(backend, m, &w.r, &mut w.z)?;
    backend.dot(&w.r, &w.z, s, slot::RZ_NEW)?;
    backend.dot(&w.r, &w.r, s, slot::RR)?;
    backend.pcg_beta(s)?;
    backend.xpay(&w.z, s, slot::BETA, &mut w.p)
}

/// The first non-finite entry of a host vector, as an error naming it.
fn finite_entries(field: &str, v: &[f64]) -> Result<()> {
    match v.iter().position(|x| !x.is_finite()) {
        Some(i) => Err(SolverError::invalid(format!("{field}[{i}]"), v[i], "must be finite")),
        None => Ok(()),
    }
}

fn stop_reason(s: &[f64]) -> StopReason {
    let value = s[slot::CULPRIT];
    let breakdown = |quantity| StopReason::Breakdown { quantity, value };
    match s[slot::STATUS] {
        x if x == status::CONVERGED => StopReason::Converged,
        x if x == status::BREAKDOWN_PAP => breakdown(BreakdownQuantity::PAp),
        x if x == status::BREAKDOWN_ALPHA => breakdown(BreakdownQuantity::Alpha),
        x if x == status::BREAKDOWN_BETA => breakdown(BreakdownQuantity::Beta),
        x if x == status::BREAKDOWN_RESIDUAL => breakdown(BreakdownQuantity::Residual),
        x if x == status::BAD_PRECONDITIONER => StopReason::BadPreconditioner { value },
        _ => StopReason::MaxIter,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(threshold: f64, history: &[(usize, f64)]) -> PcgInfo {
        PcgInfo {
            threshold,
            residual_history: history.to_vec(),
            ..start_info(&[0.0; slot::COUNT], &PcgOptions::default())
        }
    }

    #[test]
    fn a_block_is_queued_ahead_only_where_the_solve_cannot_stop_within_the_unread_one() {
        let fixed = PcgOptions::fixed_iterations(40);
        let tol = PcgOptions::default();
        // Before the first read: only a zero threshold is known.
        assert!(Blocks::new(&fixed).ahead(None));
        assert!(!Blocks::new(&tol).ahead(None));
        let b = Blocks::new(&tol);
        // One point: no trend yet.
        assert!(!b.ahead(Some(&info(1e-6, &[(0, 1.0)]))));
        // Halving a block: two more blocks leave 0.125, far above 1e-6.
        assert!(b.ahead(Some(&info(1e-6, &[(0, 1.0), (10, 0.5)]))));
        // 1000x a block: the next would pass the threshold; wait instead.
        assert!(!b.ahead(Some(&info(1e-6, &[(0, 1.0), (10, 1e-3)]))));
        // A residual that grew counts as no drop (CG's is not monotone).
        assert!(b.ahead(Some(&info(1e-6, &[(0, 1.0), (10, 1e-2), (20, 2e-2)]))));
        // The rule is a ratio: the same in any units of b.
        for scale in [1e-200, 1.0, 1e200] {
            let h = [(0, scale), (10, 0.5 * scale)];
            assert!(b.ahead(Some(&info(1e-6 * scale, &h))));
            let h = [(0, scale), (10, 1e-3 * scale)];
            assert!(!b.ahead(Some(&info(1e-6 * scale, &h))));
        }
        // A zero threshold: always.
        assert!(b.ahead(Some(&info(0.0, &[(0, 1.0)]))));
    }
}
