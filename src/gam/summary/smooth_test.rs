//! mgcv's `testStat` (type 0): Wood's (2013) Wald-type test of a smooth
//! f = X_j b_j against zero, with a rank-r pseudo-inverse of its covariance
//! where r = edf1 may be fractional. With R the triangular factor of X_j
//! (so that ||X_j b|| = ||R b||) and R V R^T = U diag(e) U^T, the statistic
//! is the squared norm of b's projection on the leading eigenvectors
//! scaled by 1 / sqrt(e); for fractional r = k + nu the k-th and (k+1)-th
//! directions are blended so that the reference distribution is a sum of
//! weighted chi^2(1) variables (weights 1, ..., (1 + nu +- sqrt(1 - nu^2))
//! / 2), averaged over the two blends (+-) of those directions.

use super::davies::psum_chisq_upper;
use super::distributions::{chisq_upper, f_upper};
use super::{SmoothTerm, SummaryInput, TermTest};
use crate::{Error, Result};

/// The test of smooth `s` at reference rank `rank` (min(k, edf1)); the
/// residual df for the F-type version, or <= 0 for the chi-square one.
pub(crate) fn test_stat(input: &SummaryInput, s: &SmoothTerm, rank: f64, res_df: f64) -> Result<TermTest> {
    let k = s.last - s.first;
    let cols: Vec<usize> = (s.first..s.last).collect();
    let r = triangular_factor(input, &s.label, s.first, k)?;
    let v = SummaryInput::block(&input.vp, input.p(), &cols);
    let rv = super::super::matmul(
        &super::super::matmul(&r, &v, k, k, k),
        &super::super::transpose(&r, k, k),
        k,
        k,
        k,
    );
    let sym = super::symmetric_part(&rv, k);
    let (values, vectors) = descending_eigen(k, &sym)?;
    let rb = super::super::matmul(&r, &input.coefficients[s.first..s.last], k, k, 1);
    Ok(statistic(&values, &vectors, &rb, rank, res_df))
}

/// The blended statistic and p-value from the eigen-decomposition of R V
/// R^T (values descending, vectors as columns, k x k row-major) and R b.
fn statistic(values: &[f64], vectors: &[f64], rb: &[f64], rank: f64, res_df: f64) -> TermTest {
    let n = values.len();
    let mut kk = rank.floor().max(0.0) as usize;
    let mut nu = (rank - kk as f64).abs();
    let mut k1 = if nu > 0.0 { kk + 1 } else { kk };
    let mut rank = rank;
    let r_est = values
        .iter()
        .filter(|&&e| e > values[0] * f64::EPSILON.powf(0.9))
        .count();
    if r_est < k1 {
        (k1, kk, nu, rank) = (r_est, r_est, 0.0, r_est as f64);
    }
    // R's vec[, 1:k1] with k1 = 0 keeps the first column.
    let cols = k1.clamp(1, n);
    // Projections of R b on the eigenvectors, each scaled by 1 / sqrt(e).
    let proj: Vec<f64> = (0..cols)
        .map(|c| (0..n).map(|i| vectors[i * n + c] * rb[i]).sum::<f64>() / values[c].sqrt())
        .collect();
    let (d, d1) = if nu > 0.0 && kk > 0 {
        blended(&proj, values, kk, nu)
    } else {
        if kk == 1 {
            rank = 1.0;
        }
        let d = proj[..if kk == 0 { 1 } else { kk.min(cols) }]
            .iter()
            .map(|x| x * x)
            .sum::<f64>();
        (d, d)
    };
    TermTest {
        stat: d,
        rank,
        p_value: p_value(d, d1, kk, k1, nu, rank, res_df).min(1.0),
    }
}

/// d and d1 where the k-th and (k+1)-th directions (scaled projections
/// proj[k-1], proj[k]) are mixed by the root of ev B ev, B = [[1, b12],
/// [b12, nu]], b12 = sqrt(nu (1 - nu) / 2), ev = diag(e_k, e_k+1)^-1/2,
/// and its reflection in the k-th direction for d1.
fn blended(proj: &[f64], values: &[f64], kk: usize, nu: f64) -> (f64, f64) {
    let head: f64 = proj[..kk - 1].iter().map(|x| x * x).sum();
    let b12 = (0.5 * nu * (1.0 - nu)).max(0.0).sqrt();
    let (s0, s1) = (values[kk - 1].powf(-0.5), values[kk].powf(-0.5));
    let b = [s0 * s0, s0 * b12 * s1, s0 * b12 * s1, s1 * s1 * nu];
    let root = sqrt_2x2(b);
    // The unscaled projections of the two directions.
    let (y0, y1) = (proj[kk - 1] * values[kk - 1].sqrt(), proj[kk] * values[kk].sqrt());
    let mix = |a: f64, c: f64| {
        let (u, w) = (root[0] * a + root[1] * c, root[2] * a + root[3] * c);
        u * u + w * w
    };
    (head + mix(y0, y1), head + mix(-y0, y1))
}

/// The symmetric square root of a symmetric positive semi-definite 2 x 2
/// M (row-major): (M + sqrt(det M) I) / sqrt(tr M + 2 sqrt(det M)).
fn sqrt_2x2(b: [f64; 4]) -> [f64; 4] {
    let root_det = (b[0] * b[3] - b[1] * b[2]).max(0.0).sqrt();
    let t = (b[0] + b[3] + 2.0 * root_det).sqrt();
    [(b[0] + root_det) / t, b[1] / t, b[2] / t, (b[3] + root_det) / t]
}

/// testStat's p-value: the mixture (averaged over d and d1) for a
/// fractional rank, else (or where Davies fails) chi-square or F on the
/// rank.
fn p_value(d: f64, d1: f64, kk: usize, k1: usize, nu: f64, rank: f64, res_df: f64) -> f64 {
    let mut rank1 = rank;
    let mut pval = 2.0;
    if nu > 0.0 {
        let val = if k1 == 1 {
            rank1 = 1.0;
            vec![1.0]
        } else {
            let mut val = vec![1.0; k1];
            let rp = nu + 1.0;
            val[kk - 1] = (rp + (rp * (2.0 - rp)).sqrt()) / 2.0;
            val[k1 - 1] = rp - val[kk - 1];
            val
        };
        pval = if res_df <= 0.0 {
            let df = vec![1.0; val.len()];
            (psum_chisq_upper(d, &val, &df) + psum_chisq_upper(d1, &val, &df)) / 2.0
        } else {
            let k0 = res_df.round_ties_even().max(1.0);
            let with = |x: f64| {
                let lb: Vec<f64> = val.iter().copied().chain([-x / k0]).collect();
                let df: Vec<f64> = val.iter().map(|_| 1.0).chain([k0]).collect();
                psum_chisq_upper(0.0, &lb, &df)
            };
            (with(d) + with(d1)) / 2.0
        };
    }
    if pval > 1.0 {
        pval = if res_df <= 0.0 {
            (chisq_upper(d, rank1) + chisq_upper(d1, rank1)) / 2.0
        } else {
            (f_upper(d / rank1, rank1, res_df) + f_upper(d1 / rank1, rank1, res_df)) / 2.0
        };
    }
    pval
}

/// The k x k triangular factor of x's columns first..first + k (Householder
/// QR; its rows' signs do not change the test).
fn triangular_factor(input: &SummaryInput, label: &str, first: usize, k: usize) -> Result<Vec<f64>> {
    let (n, p) = (input.x.nrow, input.x.ncol);
    if n < k {
        return Err(Error::invalid(
            format!("x ({label})"),
            format!("{n} rows"),
            format!("needs at least the term's {k} columns"),
        ));
    }
    let xt = faer::Mat::from_fn(n, k, |i, j| input.x.data[i * p + first + j]);
    let qr = xt.qr();
    let r = qr.thin_R();
    Ok((0..k * k)
        .map(|t| if t / k <= t % k { r[(t / k, t % k)] } else { 0.0 })
        .collect())
}

/// Eigenvalues descending and their vectors (columns of a row-major k x k),
/// each vector's first entry made non-negative, as testStat does.
pub(crate) fn descending_eigen(k: usize, a: &[f64]) -> Result<(Vec<f64>, Vec<f64>)> {
    let (values, vectors) = matfree_solvers::symmetric_eigen(k, a)?;
    let order: Vec<usize> = (0..k).rev().collect();
    let sorted: Vec<f64> = order.iter().map(|&c| values[c]).collect();
    let mut v = vec![0.0; k * k];
    for (new, &c) in order.iter().enumerate() {
        let sign = if vectors[c] < 0.0 { -1.0 } else { 1.0 };
        for i in 0..k {
            v[i * k + new] = sign * vectors[i * k + c];
        }
    }
    Ok((sorted, v))
}
