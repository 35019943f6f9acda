//! The kernels PCG declares (Ginkgo's split: an algorithm names the kernels
//! it needs, each executor implements them): the fused scalar updates on the
//! slot bank and the fused diagonal-preconditioned iteration. The CPU's are
//! the reference (`crate::cpu::pcg_alpha_slots`, `pcg_beta_slots`); a device
//! backend's are tested against them on traps (pAp = 0, NaN, a stopped
//! status).

use crate::backend::Backend;
use crate::Result;

/// Named slots of the PCG scalar bank. Their meaning is fixed so that every
/// backend's fused scalar kernels agree.
pub mod slot {
    use crate::backend::Slot;
    /// r^T z of the current iterate.
    pub const RZ: Slot = 0;
    /// p^T A p.
    pub const PAP: Slot = 1;
    /// alpha = rz / pAp (zero once the solve has stopped).
    pub const ALPHA: Slot = 2;
    /// -alpha.
    pub const NEG_ALPHA: Slot = 3;
    /// r^T z after the update.
    pub const RZ_NEW: Slot = 4;
    /// beta = rz_new / rz (zero once the solve has stopped).
    pub const BETA: Slot = 5;
    /// r^T r after the update (squared residual norm).
    pub const RR: Slot = 6;
    /// Stop status, see [`crate::pcg::status`].
    pub const STATUS: Slot = 7;
    /// Iterations completed before the status left `RUNNING`.
    pub const ITERS: Slot = 8;
    /// Squared stopping threshold max(rtol ||b||, atol)^2.
    pub const THRESH2: Slot = 9;
    /// The value that caused a breakdown (pAp, alpha, beta or rz).
    pub const CULPRIT: Slot = 10;
    /// b^T b.
    pub const BB: Slot = 11;
    /// r^T r at the start (kept while RR moves on).
    pub const RR0: Slot = 12;
    /// ||b - A x||^2 of the final x, recomputed at the end.
    pub const TRUE_RR: Slot = 13;
    /// Number of slots in a PCG bank.
    pub const COUNT: usize = 14;
}

/// The vectors one PCG iteration updates once q = A p is known.
pub struct PcgVectors<'a, V> {
    /// The iterate.
    pub x: &'a mut V,
    /// The residual.
    pub r: &'a mut V,
    /// The preconditioned residual.
    pub z: &'a mut V,
    /// The search direction.
    pub p: &'a mut V,
    /// A p.
    pub q: &'a V,
}

/// PCG's kernels on a backend.
pub trait PcgKernels: Backend {
    /// PCG's start, on the slots, once RZ, RR and BB hold r^T z, r^T r and
    /// b^T b: THRESH2 = max(rtol sqrt(BB), atol)^2, RR0 = RR, ITERS = 0,
    /// CULPRIT = RZ, and STATUS converged (sqrt(RR) <= the threshold), a
    /// preconditioner that is not positive (RZ <= 0 or not finite) or
    /// running. On the device, so the first iterations can be queued before
    /// the host has read anything.
    fn pcg_start(&self, s: &mut Self::Scalars, rtol: f64, atol: f64) -> Result<()>;
    /// PCG step 1, on the slots: if running, alpha = rz / pAp, with breakdown
    /// when pAp <= 0 or alpha is not finite; once stopped, alpha = 0.
    fn pcg_alpha(&self, s: &mut Self::Scalars) -> Result<()>;
    /// PCG step 2, on the slots: beta = rz_new / rz, rz = rz_new, count the
    /// iteration, and stop on convergence (rr <= thresh2), on a preconditioner
    /// that is not positive (rz_new < 0 or not finite) or on breakdown.
    fn pcg_beta(&self, s: &mut Self::Scalars) -> Result<()>;
    /// One whole PCG iteration after q = A p, for a diagonal preconditioner
    /// z = d .* r, fused into as few launches as the backend can: the same
    /// updates and slot rules as the sequence in [`crate::pcg`]. Returns
    /// `Ok(false)` (the default) when the backend does not fuse, and the
    /// caller then runs the sequence itself.
    fn pcg_step_diagonal(
        &self,
        _d: &Self::Vector,
        _v: PcgVectors<'_, Self::Vector>,
        _s: &mut Self::Scalars,
    ) -> Result<bool> {
        Ok(false)
    }
    /// PCG's (re)start for a diagonal preconditioner z = d .* r, fused where
    /// the backend can: z = d .* r, p = z, the slots RZ = r^T z, RR = r^T r
    /// and BB = b^T b, then [`PcgKernels::pcg_start`] (x and q untouched).
    /// `Ok(false)` (the default): the caller runs the sequence itself.
    fn pcg_restart_diagonal(
        &self,
        _d: &Self::Vector,
        _b: &Self::Vector,
        _v: PcgVectors<'_, Self::Vector>,
        _s: &mut Self::Scalars,
        _tol: (f64, f64),
    ) -> Result<bool> {
        Ok(false)
    }
    /// r = b - r (r holding A x) and the slot TRUE_RR = r^T r: the true
    /// residual of a finished solve, fused where the backend can.
    /// `Ok(false)` (the default): the caller runs the sequence itself.
    fn pcg_true_residual(&self, _b: &Self::Vector, _r: &mut Self::Vector, _s: &mut Self::Scalars) -> Result<bool> {
        Ok(false)
    }
}
