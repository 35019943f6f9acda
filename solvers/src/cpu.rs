//! The CPU backend: plain loops over `Vec<f64>`, parallel with rayon, and the
//! reference oracle for every device backend.
//!
//! Reductions are split into fixed chunks of [`REDUCE_CHUNK`] elements whose
//! partial sums are added in chunk order, so results are bitwise identical for
//! any number of rayon threads.

use rayon::prelude::*;

use crate::backend::{Backend, Slot};
use crate::pcg::status;
use crate::pcg_kernels::{slot, PcgKernels};
use crate::{Result, SolverError};

/// Elements per partial sum in every fixed-order reduction.
pub const REDUCE_CHUNK: usize = 4096;

/// The CPU backend. Counts its synchronising reads like a device backend
/// would, so tests can hold both to the same sync budget.
#[derive(Debug, Default)]
pub struct CpuBackend {
    reads: std::sync::atomic::AtomicUsize,
}

impl CpuBackend {
    /// A new CPU backend.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of [`Backend::read_scalars`] calls made so far.
    pub fn reads(&self) -> usize {
        self.reads.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Vectors shorter than this are updated on the calling thread. A PCG over
/// a few hundred coefficients runs five vector operations an iteration;
/// handing each to the rayon pool wakes its workers for a microsecond of
/// work and puts them back to sleep. Below this length one core does the
/// work in about the time a wake-up takes.
pub const PAR_MIN_LEN: usize = 1 << 15;

/// x^T y summed in fixed chunks, partials added in chunk order (the same
/// bits whether the chunks run in parallel or not).
pub fn fixed_order_dot(x: &[f64], y: &[f64]) -> f64 {
    let chunk_dot = |(a, b): (&[f64], &[f64])| a.iter().zip(b).map(|(u, v)| u * v).sum::<f64>();
    if x.len() < PAR_MIN_LEN {
        return x.chunks(REDUCE_CHUNK).zip(y.chunks(REDUCE_CHUNK)).map(chunk_dot).sum();
    }
    let partials: Vec<f64> = x
        .par_chunks(REDUCE_CHUNK)
        .zip(y.par_chunks(REDUCE_CHUNK))
        .map(chunk_dot)
        .collect();
    partials.iter().sum()
}

/// `f(y_i, x_i)` for every i, in parallel only for long vectors
/// ([`PAR_MIN_LEN`]); elementwise, so the same bits either way.
fn update(y: &mut [f64], x: &[f64], f: impl Fn(&mut f64, f64) + Sync) {
    if y.len() < PAR_MIN_LEN {
        y.iter_mut().zip(x).for_each(|(yi, xi)| f(yi, *xi));
    } else {
        y.par_iter_mut().zip(x.par_iter()).for_each(|(yi, xi)| f(yi, *xi));
    }
}

fn check_len(field: &str, got: usize, want: usize) -> Result<()> {
    if got != want {
        return Err(SolverError::invalid(field, got, format!("length must equal {want}")));
    }
    Ok(())
}

impl Backend for CpuBackend {
    type Vector = Vec<f64>;
    type Scalars = Vec<f64>;
    type Recording = ();

    fn standalone() -> Option<Self> {
        Some(Self::new())
    }
    fn zeros(&self, n: usize) -> Result<Vec<f64>> {
        Ok(vec![0.0; n])
    }
    fn upload(&self, x: &[f64]) -> Result<Vec<f64>> {
        Ok(x.to_vec())
    }
    fn download(&self, x: &Vec<f64>) -> Result<Vec<f64>> {
        Ok(x.clone())
    }
    fn len(&self, x: &Vec<f64>) -> usize {
        x.len()
    }
    fn scalars(&self, n: usize) -> Result<Vec<f64>> {
        Ok(vec![0.0; n])
    }
    fn write_scalars(&self, s: &mut Vec<f64>, start: Slot, values: &[f64]) -> Result<()> {
        check_len("scalar slots", s.len().max(start + values.len()), s.len())?;
        s[start..start + values.len()].copy_from_slice(values);
        Ok(())
    }
    type ScalarRead = Vec<f64>;
    /// Work runs as it is queued here, so the copy is taken at once.
    fn request_scalars(&self, s: &Vec<f64>) -> Result<Vec<f64>> {
        Ok(s.clone())
    }
    fn wait_scalars(&self, read: Vec<f64>) -> Result<Vec<f64>> {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(read)
    }
    fn copy(&self, src: &Vec<f64>, dst: &mut Vec<f64>) -> Result<()> {
        check_len("copy destination", dst.len(), src.len())?;
        dst.copy_from_slice(src);
        Ok(())
    }
    fn dot(&self, x: &Vec<f64>, y: &Vec<f64>, s: &mut Vec<f64>, out: Slot) -> Result<()> {
        check_len("dot operand", y.len(), x.len())?;
        s[out] = fixed_order_dot(x, y);
        Ok(())
    }
    fn axpy(&self, s: &Vec<f64>, alpha: Slot, x: &Vec<f64>, y: &mut Vec<f64>) -> Result<()> {
        check_len("axpy operand", y.len(), x.len())?;
        let a = s[alpha];
        if a == 0.0 {
            return Ok(()); // a stopped solve's x stays finite whatever x holds
        }
        update(y, x, |yi, xi| *yi += a * xi);
        Ok(())
    }
    fn xpay(&self, x: &Vec<f64>, s: &Vec<f64>, beta: Slot, y: &mut Vec<f64>) -> Result<()> {
        check_len("xpay operand", y.len(), x.len())?;
        let b = s[beta];
        if b == 0.0 {
            y.copy_from_slice(x); // whatever y held (a direction gone non-finite)
            return Ok(());
        }
        update(y, x, |yi, xi| *yi = xi + b * *yi);
        Ok(())
    }
    fn sub_from(&self, b: &Vec<f64>, r: &mut Vec<f64>) -> Result<()> {
        check_len("residual", r.len(), b.len())?;
        update(r, b, |ri, bi| *ri = bi - *ri);
        Ok(())
    }
    fn mul_elementwise(&self, d: &Vec<f64>, r: &Vec<f64>, z: &mut Vec<f64>) -> Result<()> {
        check_len("preconditioner input", r.len(), d.len())?;
        check_len("preconditioner output", z.len(), d.len())?;
        z.copy_from_slice(r);
        update(z, d, |zi, di| *zi *= di);
        Ok(())
    }
    fn invert_positive(
        &self,
        d: &Vec<f64>,
        extra: Option<&Vec<f64>>,
        ridge: f64,
        field: &str,
        out: &mut Vec<f64>,
    ) -> Result<()> {
        if let Some(e) = extra {
            check_len("extra diagonal", e.len(), d.len())?;
        }
        check_len("inverse diagonal", out.len(), d.len())?;
        for (i, o) in out.iter_mut().enumerate() {
            let v = d[i] + extra.map_or(0.0, |e| e[i]) + ridge;
            if !(v.is_finite() && v > 0.0) {
                return Err(SolverError::invalid(
                    format!("{field}[{i}]"),
                    v,
                    crate::precond::POSITIVE_DIAGONAL_RULE,
                ));
            }
            *o = 1.0 / v;
        }
        Ok(())
    }
    fn gemm_acc(&self, a: &Vec<f64>, n: usize, x: &Vec<f64>, y: &mut Vec<f64>) -> Result<()> {
        check_len("gemv matrix", a.len(), n * n)?;
        check_len("gemv output", y.len(), x.len())?;
        if n == 0 || !x.len().is_multiple_of(n) {
            return Err(SolverError::invalid(
                "gemv input",
                x.len(),
                format!("length must be a positive multiple of n = {n}"),
            ));
        }
        for (xc, yc) in x.chunks(n).zip(y.chunks_mut(n)) {
            // Rows are independent and each is summed in index order, so the
            // parallel split does not change the result.
            let row = |(i, yi): (usize, &mut f64)| {
                *yi += a[i * n..(i + 1) * n].iter().zip(xc).map(|(u, v)| u * v).sum::<f64>();
            };
            if n * n < PAR_MIN_LEN {
                yc.iter_mut().enumerate().for_each(row);
            } else {
                yc.par_iter_mut().enumerate().for_each(row);
            }
        }
        Ok(())
    }
    fn repeat(
        &self,
        times: usize,
        _recording: &mut Option<(usize, ())>,
        body: &mut dyn FnMut() -> Result<()>,
    ) -> Result<()> {
        for _ in 0..times {
            body()?;
        }
        Ok(())
    }
}

impl PcgKernels for CpuBackend {
    fn pcg_start(&self, s: &mut Vec<f64>, rtol: f64, atol: f64) -> Result<()> {
        pcg_start_slots(s, rtol, atol);
        Ok(())
    }
    fn pcg_alpha(&self, s: &mut Vec<f64>) -> Result<()> {
        pcg_alpha_slots(s);
        Ok(())
    }
    fn pcg_beta(&self, s: &mut Vec<f64>) -> Result<()> {
        pcg_beta_slots(s);
        Ok(())
    }
}

/// PCG's start on a slot bank (the specification of every backend's
/// `pcg_start`; `kernels/pcg.cu` implements the same lines).
pub fn pcg_start_slots(s: &mut [f64], rtol: f64, atol: f64) {
    let threshold = (rtol * s[slot::BB].sqrt()).max(atol);
    let (rr, rz) = (s[slot::RR], s[slot::RZ]);
    s[slot::THRESH2] = threshold * threshold;
    s[slot::RR0] = rr;
    s[slot::ITERS] = 0.0;
    s[slot::CULPRIT] = rz;
    s[slot::STATUS] = if rr.sqrt() <= threshold {
        status::CONVERGED
    } else if !(rz > 0.0 && rz.is_finite()) {
        status::BAD_PRECONDITIONER
    } else {
        status::RUNNING
    };
}

/// PCG scalar step 1 on a slot bank (the specification of every backend's
/// `pcg_alpha`; `kernels/pcg.cu` implements the same lines).
pub fn pcg_alpha_slots(s: &mut [f64]) {
    let (mut alpha, running) = (0.0, s[slot::STATUS] == status::RUNNING);
    if running {
        let pap = s[slot::PAP];
        let a = s[slot::RZ] / pap;
        if !(pap > 0.0 && pap.is_finite()) {
            s[slot::STATUS] = status::BREAKDOWN_PAP;
            s[slot::CULPRIT] = pap;
        } else if !a.is_finite() {
            s[slot::STATUS] = status::BREAKDOWN_ALPHA;
            s[slot::CULPRIT] = a;
        } else {
            alpha = a;
        }
    }
    s[slot::ALPHA] = alpha;
    s[slot::NEG_ALPHA] = -alpha;
}

/// PCG scalar step 2 on a slot bank (see [`pcg_alpha_slots`]).
pub fn pcg_beta_slots(s: &mut [f64]) {
    let mut beta = 0.0;
    if s[slot::STATUS] == status::RUNNING {
        s[slot::ITERS] += 1.0;
        let (rz_new, rr) = (s[slot::RZ_NEW], s[slot::RR]);
        let b = rz_new / s[slot::RZ];
        if !rr.is_finite() {
            s[slot::STATUS] = status::BREAKDOWN_RESIDUAL;
            s[slot::CULPRIT] = rr;
        } else if rr <= s[slot::THRESH2] {
            s[slot::STATUS] = status::CONVERGED;
        } else if !(rz_new >= 0.0 && rz_new.is_finite()) {
            s[slot::STATUS] = status::BAD_PRECONDITIONER;
            s[slot::CULPRIT] = rz_new;
        } else if !b.is_finite() {
            s[slot::STATUS] = status::BREAKDOWN_BETA;
            s[slot::CULPRIT] = b;
        } else {
            beta = b;
            s[slot::RZ] = rz_new;
        }
    }
    s[slot::BETA] = beta;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vector(n: usize, seed: f64) -> Vec<f64> {
        (0..n)
            .map(|i| ((i as f64 + seed) * 0.7548776662).fract() - 0.5)
            .collect()
    }

    /// Short vectors run on the calling thread, long ones in parallel: both
    /// give what a plain loop gives (the dot in chunk order), bit for bit.
    #[test]
    fn vector_operations_match_plain_loops_on_both_sides_of_the_parallel_cut() {
        let be = CpuBackend::new();
        for n in [1, 19, PAR_MIN_LEN - 1, PAR_MIN_LEN, 3 * PAR_MIN_LEN + 7] {
            let (x, y0) = (vector(n, 0.3), vector(n, 1.9));
            let want_dot: f64 = x
                .chunks(REDUCE_CHUNK)
                .zip(y0.chunks(REDUCE_CHUNK))
                .map(|(a, b)| a.iter().zip(b).map(|(u, v)| u * v).sum::<f64>())
                .collect::<Vec<_>>()
                .iter()
                .sum();
            assert_eq!(fixed_order_dot(&x, &y0).to_bits(), want_dot.to_bits(), "dot, n = {n}");
            let s = vec![0.37, -1.25];
            let mut y = y0.clone();
            be.axpy(&s, 0, &x, &mut y).unwrap();
            be.xpay(&x, &s, 1, &mut y).unwrap();
            be.sub_from(&x, &mut y).unwrap();
            let mut z = vec![0.0; n];
            be.mul_elementwise(&x, &y, &mut z).unwrap();
            let want: Vec<f64> = x
                .iter()
                .zip(&y0)
                .map(|(xi, yi)| {
                    let y = xi + -1.25 * (yi + 0.37 * xi);
                    xi * (xi - y)
                })
                .collect();
            assert!(z.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "n = {n}");
        }
    }
}
