//! The exact dense path on the device: Cholesky (cuSOLVER potrf), the
//! log-determinant, solves (potrs) and penalty traces, for REML.

use std::sync::Arc;

use cudarc::cusolver::sys::{self as sol, cusolverStatus_t};
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};
use matfree_solvers::logdet::DenseFactor;

use super::kernels;
use super::row_hessian::DeviceRowHessian;
use super::runtime::{cuda_err, Gpu};
use crate::{Error, Result};

/// The lower Cholesky factor of a symmetric positive definite n x n matrix,
/// resident on the device.
pub struct DeviceCholesky {
    gpu: Arc<Gpu>,
    n: usize,
    factor: CudaSlice<f64>,
}

fn solver_ok(what: &str, s: cusolverStatus_t) -> Result<()> {
    match s {
        cusolverStatus_t::CUSOLVER_STATUS_SUCCESS => Ok(()),
        other => Err(Error::Cuda(format!("cuSOLVER {what}: {other:?}"))),
    }
}

fn lower() -> sol::cublasFillMode_t {
    // A symmetric row-major matrix is its own column-major transpose, so
    // cuSOLVER's column-major lower triangle is our lower triangle too.
    sol::cublasFillMode_t::CUBLAS_FILL_MODE_LOWER
}

impl DeviceCholesky {
    /// Factor a copy of `a` (row-major, symmetric, n x n, on the device).
    /// A matrix that is not positive definite is the same error the CPU
    /// path gives, naming the failing pivot and its value.
    pub fn factor(gpu: Arc<Gpu>, n: usize, a: &CudaSlice<f64>) -> Result<Self> {
        if n == 0 || n > i32::MAX as usize || a.len() != n * n {
            return Err(Error::invalid(
                "dense matrix.len",
                a.len(),
                format!("must equal n^2 with 1 <= n = {n} < 2^31"),
            ));
        }
        let mut factor = gpu.zeros::<f64>(n * n)?;
        gpu.copy(a, &mut factor)?;
        let info = potrf(&gpu, n, &mut factor)?;
        if info != 0 {
            // Error path only: let the CPU factorisation name pivot and value.
            let host = gpu.download(a)?;
            matfree_solvers::Cholesky::factor(n, &host)?;
            return Err(Error::Cuda(format!(
                "potrf reported pivot {info} but the CPU factor succeeded"
            )));
        }
        Ok(Self { gpu, n, factor })
    }

    /// Factor H + S, with H the device row Hessian's dense matrix and S a
    /// dense row-major penalty (host), all assembled on the device.
    pub fn factor_penalised(rows: &DeviceRowHessian, s: &[f64]) -> Result<Self> {
        let (gpu, p) = (rows.gpu().clone(), rows.layout().p_total());
        crate::designs::check_matrix("penalty", s, p, p)?;
        let mut a = gpu.zeros::<f64>(p * p)?;
        rows.dense_into(&mut a)?;
        kernels::add_into(&gpu, &gpu.upload(s)?, &mut a)?;
        Self::factor(gpu, p, &a)
    }

    /// log det A = 2 sum ln L_ii (one counted download).
    pub fn logdet(&self) -> Result<f64> {
        let mut out = self.gpu.zeros::<f64>(1)?;
        kernels::log_diag_sum(&self.gpu, self.n, &self.factor, &mut out)?;
        Ok(self.gpu.download(&out)?[0])
    }

    /// B <- A^{-1} B in place for k columns stored back to back.
    pub fn solve_into(&self, b: &mut CudaSlice<f64>, k: usize) -> Result<()> {
        if b.len() != self.n * k || k > i32::MAX as usize {
            return Err(Error::invalid(
                "rhs.len",
                b.len(),
                format!("must equal n * k = {} * {k}", self.n),
            ));
        }
        let st = &self.gpu.stream;
        let mut info = self.gpu.zeros::<i32>(1)?;
        self.gpu.bind()?;
        {
            let ((ap, _a), (bp, _b), (ip, _c)) = (
                self.factor.device_ptr(st),
                b.device_ptr_mut(st),
                info.device_ptr_mut(st),
            );
            let n = self.n as i32;
            // SAFETY: the factor is n x n, B n x k, info one int; all on this stream.
            let status = unsafe {
                sol::cusolverDnDpotrs(
                    self.gpu.solver.cu(),
                    lower(),
                    n,
                    k as i32,
                    ap as *const f64,
                    n,
                    bp as *mut f64,
                    n,
                    ip as *mut i32,
                )
            };
            solver_ok("potrs", status)?;
        }
        Ok(())
    }

    /// Host convenience: A^{-1} B.
    pub fn solve(&self, b: &[f64], k: usize) -> Result<Vec<f64>> {
        let mut x = self.gpu.upload(b)?;
        self.solve_into(&mut x, k)?;
        self.gpu.download(&x)
    }

    /// tr(A^{-1} S) for a dense row-major n x n S (host): one multi-RHS
    /// solve on the device, then the diagonal summed in index order.
    pub fn trace_inv(&self, s: &[f64]) -> Result<f64> {
        let n = self.n;
        crate::designs::check_matrix("trace matrix", s, n, n)?;
        // Columns of S are rows of the row-major array when S is symmetric;
        // transpose explicitly so any S works.
        let cols: Vec<f64> = (0..n * n).map(|e| s[(e % n) * n + e / n]).collect();
        let x = self.solve(&cols, n)?;
        Ok((0..n).map(|i| x[i * n + i]).sum())
    }

    /// The dimension.
    pub fn dim(&self) -> usize {
        self.n
    }
}

/// The smallest p whose exact-path factor [`crate::cuda::CudaBackend`]
/// computes on the device: below it the host's faer Cholesky is faster than
/// the upload, potrf and the solves' round trips (`bench_dense` in
/// `benches/RESULTS.md`).
pub const DEVICE_DENSE_MIN_P: usize = 512;

/// A device Cholesky factor as the solvers' [`DenseFactor`]: the matrix
/// comes from the host (Newton and REML assemble it there), is factored on
/// the device, and each solve is a round trip.
pub struct DeviceDenseFactor {
    chol: DeviceCholesky,
    logdet: f64,
}

impl DeviceDenseFactor {
    /// Factor a row-major symmetric `p x p` matrix; the same errors as the
    /// host's Cholesky (a shape, an asymmetric entry, the failing pivot).
    pub fn factor(gpu: &Arc<Gpu>, p: usize, a: &[f64]) -> Result<Self> {
        if a.len() != p * p {
            return Err(Error::invalid(
                "dense matrix.len",
                a.len(),
                format!("must equal p^2 = {p}^2"),
            ));
        }
        if let Some((i, j, rule)) = matfree_solvers::symmetry_error(p, a) {
            return Err(Error::invalid(format!("a[{i},{j}]"), a[i * p + j], rule));
        }
        let chol = DeviceCholesky::factor(gpu.clone(), p, &gpu.upload(a)?)?;
        let logdet = chol.logdet()?;
        Ok(Self { chol, logdet })
    }
}

impl DenseFactor for DeviceDenseFactor {
    fn dim(&self) -> usize {
        self.chol.dim()
    }
    fn logdet(&self) -> f64 {
        self.logdet
    }
    fn solve(&self, b: &[f64], k: usize) -> matfree_solvers::Result<Vec<f64>> {
        Ok(self.chol.solve(b, k)?)
    }
}

/// In-place lower Cholesky; returns cuSOLVER's info (0 = success, i > 0 =
/// leading minor i not positive). One counted download of info.
fn potrf(gpu: &Gpu, n: usize, a: &mut CudaSlice<f64>) -> Result<i32> {
    let st = &gpu.stream;
    let n32 = n as i32;
    let mut lwork = 0i32;
    let mut info = gpu.zeros::<i32>(1)?;
    gpu.bind()?;
    {
        let (ap, _a) = a.device_ptr_mut(st);
        // SAFETY: a holds n^2 values; lwork is a host int.
        let status =
            unsafe { sol::cusolverDnDpotrf_bufferSize(gpu.solver.cu(), lower(), n32, ap as *mut f64, n32, &mut lwork) };
        solver_ok("potrf_bufferSize", status)?;
    }
    let mut work = gpu.zeros::<f64>(lwork.max(1) as usize)?;
    gpu.bind()?;
    {
        let ((ap, _a), (wp, _w), (ip, _i)) = (a.device_ptr_mut(st), work.device_ptr_mut(st), info.device_ptr_mut(st));
        // SAFETY: workspace of the size cuSOLVER asked for; info one int.
        let status = unsafe {
            sol::cusolverDnDpotrf(
                gpu.solver.cu(),
                lower(),
                n32,
                ap as *mut f64,
                n32,
                wp as *mut f64,
                lwork,
                ip as *mut i32,
            )
        };
        solver_ok("potrf", status)?;
    }
    gpu.count_sync();
    Ok(st.clone_dtoh(&info).map_err(|e| cuda_err("potrf info", e))?[0])
}
