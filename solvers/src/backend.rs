//! The vector-operations trait every solver is written against.
//!
//! A backend owns vectors and a small bank of scalar slots. On the GPU both
//! live in device memory: `dot` writes its result into a slot, `axpy`/`xpay`
//! read their coefficient from a slot, and the fused scalar kernels
//! (PCG's, declared in [`crate::pcg_kernels::PcgKernels`]) update slots in place, so an
//! iteration is a queue of launches with no host round trip. The only call
//! that waits is [`Backend::read_scalars`] (or its split form,
//! [`Backend::request_scalars`] then [`Backend::wait_scalars`], which lets
//! work queued in between run while the host waits); solvers call them at
//! their convergence checks and nowhere else.

use crate::Result;

/// Index of one scalar slot in a backend's scalar bank.
pub type Slot = usize;

/// Vector operations and device-resident scalars.
///
/// Every method only queues work; results become visible to the host through
/// [`Backend::read_scalars`] (and, for whole vectors, [`Backend::download`]).
pub trait Backend {
    /// A vector of f64 (host `Vec<f64>` or a device buffer).
    type Vector;
    /// A bank of scalar slots (host array or device buffer).
    type Scalars;

    /// A backend made on the spot, with no context to share, for the
    /// default methods of [`crate::LinearOperator`] (which have none at
    /// hand). The CPU's is one; a device backend, whose vectors belong to a
    /// context, has none (the default).
    fn standalone() -> Option<Self>
    where
        Self: Sized,
    {
        None
    }
    /// A zero vector of length `n`.
    fn zeros(&self, n: usize) -> Result<Self::Vector>;
    /// A vector of length `n` whose entries are unspecified until written
    /// (the default: zeros; a device backend skips the fill). For work
    /// vectors every entry of which is written before it is read.
    fn uninit(&self, n: usize) -> Result<Self::Vector> {
        self.zeros(n)
    }
    /// Upload a host slice.
    fn upload(&self, x: &[f64]) -> Result<Self::Vector>;
    /// Download a vector (synchronises; not for use inside an iteration).
    fn download(&self, x: &Self::Vector) -> Result<Vec<f64>>;
    /// Length of a vector.
    fn len(&self, x: &Self::Vector) -> usize;
    /// A bank of `n` zeroed slots.
    fn scalars(&self, n: usize) -> Result<Self::Scalars>;
    /// Write slots from the host (queued; no sync).
    fn write_scalars(&self, s: &mut Self::Scalars, start: Slot, values: &[f64]) -> Result<()>;
    /// Read every slot back to the host. This is the one synchronising call:
    /// a request and its wait, so there is one read path to count.
    fn read_scalars(&self, s: &Self::Scalars) -> Result<Vec<f64>> {
        let read = self.request_scalars(s)?;
        self.wait_scalars(read)
    }
    /// A copy of a scalar bank on its way to the host.
    type ScalarRead;
    /// Queue a copy of every slot to the host and return without waiting.
    /// Work queued afterwards runs while the host waits in
    /// [`Backend::wait_scalars`] and does not change what the copy holds.
    /// Dropping the read without waiting is allowed.
    fn request_scalars(&self, s: &Self::Scalars) -> Result<Self::ScalarRead>;
    /// Wait for a requested copy and return the slots as they were when it
    /// was requested (counted as a read, as [`Backend::read_scalars`] is).
    fn wait_scalars(&self, read: Self::ScalarRead) -> Result<Vec<f64>>;

    /// dst = src.
    fn copy(&self, src: &Self::Vector, dst: &mut Self::Vector) -> Result<()>;
    /// `s[out] = x^T y`, summed in a fixed order.
    fn dot(&self, x: &Self::Vector, y: &Self::Vector, s: &mut Self::Scalars, out: Slot) -> Result<()>;
    /// `y += s[alpha] * x`; y is left as it is when `s[alpha]` is zero (a
    /// stopped PCG's iterate stays finite even where x is not).
    fn axpy(&self, s: &Self::Scalars, alpha: Slot, x: &Self::Vector, y: &mut Self::Vector) -> Result<()>;
    /// `y = x + s[beta] * y`; `y = x` when `s[beta]` is zero.
    fn xpay(&self, x: &Self::Vector, s: &Self::Scalars, beta: Slot, y: &mut Self::Vector) -> Result<()>;
    /// r = b - r (turns A x stored in r into the residual).
    fn sub_from(&self, b: &Self::Vector, r: &mut Self::Vector) -> Result<()>;
    /// z = d .* r (elementwise).
    fn mul_elementwise(&self, d: &Self::Vector, r: &Self::Vector, z: &mut Self::Vector) -> Result<()>;
    /// out = 1 / (d + extra + ridge), elementwise, with every denominator
    /// checked: returns the first index whose denominator is not finite and
    /// positive, with its value, as an error naming `field`.
    fn invert_positive(
        &self,
        d: &Self::Vector,
        extra: Option<&Self::Vector>,
        ridge: f64,
        field: &str,
        out: &mut Self::Vector,
    ) -> Result<()>;

    /// y += A x, with A a dense row-major `n x n` matrix stored as a backend
    /// vector of length `n * n`. `x` and `y` may hold `k >= 1` columns of
    /// length `n` back to back (then Y += A X, a gemm on the GPU). Each entry
    /// of A x is summed over its row in index order, so the CPU result is
    /// reproducible. Queued; no sync. Used for the dense penalty in
    /// [`crate::penalty::Penalised`].
    fn gemm_acc(&self, a: &Self::Vector, n: usize, x: &Self::Vector, y: &mut Self::Vector) -> Result<()>;

    /// A recorded block of work that a backend can replay (a CUDA graph on
    /// the GPU; `()` on the CPU).
    type Recording;

    /// Run `body` `times` times in a row. A backend may record the first
    /// run of a block of this length into `recording` and replay it later;
    /// `body` must then queue identical work every time it is called.
    fn repeat(
        &self,
        times: usize,
        recording: &mut Option<(usize, Self::Recording)>,
        body: &mut dyn FnMut() -> Result<()>,
    ) -> Result<()>;
    /// Factor a dense row-major symmetric positive definite `p x p` matrix
    /// for the exact path (Newton's dense step, REML's log-determinant and
    /// traces). The default is faer's Cholesky on the host; a device
    /// backend overrides it where factoring on the device pays.
    fn dense_factor(&self, p: usize, a: &[f64]) -> Result<Box<dyn crate::logdet::DenseFactor>> {
        crate::logdet::host_factor(p, a)
    }
}
