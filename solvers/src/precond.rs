//! Preconditioners: the identity (an unpreconditioned solve) and Jacobi
//! (inverse diagonal).

use crate::backend::Backend;
use crate::operator::expect_len;
use crate::{Result, SolverError};

/// z = M^{-1} r for a symmetric positive definite M.
pub trait Preconditioner<B: Backend> {
    /// z = M^{-1} r.
    fn apply(&self, r: &B::Vector, z: &mut B::Vector) -> Result<()>;

    /// d with M^{-1} = diag(d), for preconditioners that are diagonal (lets a
    /// backend fuse the whole PCG update; see `Backend::pcg_step_diagonal`).
    fn inverse_diagonal(&self) -> Option<&B::Vector> {
        None
    }

    /// Whether M = I. A solver then takes z = r with its own backend, so
    /// [`Identity`], which holds none, is usable on every backend.
    fn is_identity(&self) -> bool {
        false
    }
}

/// z = M^{-1} r as a solver applies it: a copy for the identity, `m.apply`
/// otherwise.
pub fn precondition<B: Backend>(
    backend: &B,
    m: &dyn Preconditioner<B>,
    r: &B::Vector,
    z: &mut B::Vector,
) -> Result<()> {
    if m.is_identity() {
        return backend.copy(r, z);
    }
    m.apply(r, z)
}

/// The identity preconditioner, M = I: an unpreconditioned solve, for an
/// operator of any dimension on any backend,
/// `cg(&backend, &op, &Identity, &b, None, &opts)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Identity;

impl<B: Backend> Preconditioner<B> for Identity {
    /// z = r. Solvers copy with their own backend ([`precondition`]); a call
    /// here works through a backend made on the spot
    /// ([`Backend::standalone`], the CPU's) and is an error naming the rule
    /// on a device backend.
    fn apply(&self, r: &B::Vector, z: &mut B::Vector) -> Result<()> {
        match B::standalone() {
            Some(backend) => backend.copy(r, z),
            None => Err(SolverError::invalid(
                "Identity.apply",
                std::any::type_name::<B>(),
                "needs a backend made on the spot (the CPU's); on this backend use precondition(backend, m, r, z)",
            )),
        }
    }

    fn is_identity(&self) -> bool {
        true
    }
}

/// The rule every backend's `invert_positive` names when it rejects an entry,
/// so CPU and GPU errors read the same.
pub const POSITIVE_DIAGONAL_RULE: &str = "diagonal + extra + ridge must be finite and > 0";

/// Jacobi preconditioner: M = diag(A) + extra + ridge, stored as its inverse
/// on the backend (on the GPU it never leaves the device).
pub struct Jacobi<'b, B: Backend> {
    backend: &'b B,
    inv_diag: B::Vector,
}

impl<'b, B: Backend> Jacobi<'b, B> {
    /// Build from a diagonal, an optional extra diagonal (e.g. the penalty's)
    /// and a ridge. A sum that is not finite and positive is an error naming
    /// its index: it is never silently replaced by its absolute value.
    pub fn new(backend: &'b B, diag: &B::Vector, extra: Option<&B::Vector>, ridge: f64) -> Result<Self> {
        if !(ridge.is_finite() && ridge >= 0.0) {
            return Err(SolverError::invalid("ridge", ridge, "must be finite and >= 0"));
        }
        let n = backend.len(diag);
        if let Some(e) = extra {
            expect_len("extra diagonal", backend.len(e), n)?;
        }
        let mut inv_diag = backend.zeros(n)?;
        backend.invert_positive(diag, extra, ridge, "jacobi diagonal", &mut inv_diag)?;
        Ok(Self { backend, inv_diag })
    }

    /// The identity preconditioner of dimension `n`, as a Jacobi with unit
    /// diagonal (an n-vector of ones on the backend). [`Identity`] is the
    /// same solve with no vector; on the CPU the two give the same bits.
    pub fn identity(backend: &'b B, n: usize) -> Result<Self> {
        let ones = backend.upload(&vec![1.0; n])?;
        Self::new(backend, &ones, None, 0.0)
    }
}

impl<B: Backend> Preconditioner<B> for Jacobi<'_, B> {
    fn apply(&self, r: &B::Vector, z: &mut B::Vector) -> Result<()> {
        self.backend.mul_elementwise(&self.inv_diag, r, z)
    }

    fn inverse_diagonal(&self) -> Option<&B::Vector> {
        Some(&self.inv_diag)
    }
}
