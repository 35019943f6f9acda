//! mgcv's `reTest` (with `recov`): Wood's (2013) test of a random effect
//! b_m = 0. The other random effects are integrated out (their penalty's
//! pseudo-inverse P adds X_r P X_r^T to the working covariance), the
//! non-random terms (this one included) are penalised, and with A =
//! X_o^T (I + X_r P X_r^T) X_o + S_o and M its Schur complement on b_m's
//! block, the statistic is b_m^T M b_m / scale, referred to a weighted sum
//! of chi^2(1) variables with the eigenvalues of M Ve_mm / scale as
//! weights (over a chi^2(rdf) / rdf denominator where the scale was
//! estimated). Ve_mm is Ve's block, or, with other random effects, the
//! covariance that treats them as random: Vp G Vp / scale with G = X^T
//! (I + X_r P X_r^T) X.

use super::davies::psum_chisq_upper;
use super::smooth_test::descending_eigen;
use super::{symmetric_part, SmoothKind, SummaryInput, TermTest};
use crate::gam::{matmul, transpose};
use crate::{Error, Result};

/// The test of smooth `m`, a random effect.
pub(crate) fn re_test(input: &SummaryInput, m: usize) -> Result<TermTest> {
    let p = input.p();
    let s = &input.smooths[m];
    let random: Vec<usize> = input
        .smooths
        .iter()
        .enumerate()
        .filter(|(i, t)| *i != m && t.kind == SmoothKind::RandomEffect)
        .flat_map(|(_, t)| t.first..t.last)
        .collect();
    let kept: Vec<usize> = (0..p).filter(|j| !random.contains(j)).collect();
    let xtx = crossprod(input);
    let (g, ve_mm) = if random.is_empty() {
        let ve = symmetric_part(&input.ve, p);
        (xtx, SummaryInput::block(&ve, p, &(s.first..s.last).collect::<Vec<_>>()))
    } else {
        integrate_out(input, &xtx, &random, s.first..s.last)?
    };
    let mut a = SummaryInput::block(&g, p, &kept);
    add_penalties(input, &kept, &mut a);
    let own: Vec<usize> = (s.first..s.last)
        .map(|j| {
            kept.iter()
                .position(|&c| c == j)
                .expect("a smooth's own columns are kept")
        })
        .collect();
    let schur = schur_complement(&a, kept.len(), &own, &s.label)?;
    let k = own.len();
    let b = &input.coefficients[s.first..s.last];
    let mb = matmul(&schur, b, k, k, 1);
    let stat = b.iter().zip(&mb).map(|(x, y)| x * y).sum::<f64>() / input.scale;
    let ev = weights(&schur, &ve_mm, k, input.scale, &s.label)?;
    let top = ev.iter().copied().fold(0.0, f64::max);
    if top <= 0.0 {
        return Err(Error::invalid(
            format!("ve ({})", s.label),
            "zero weights",
            "the random effect's covariance block must not vanish",
        ));
    }
    let rank = ev.iter().filter(|&&e| e > top * f64::EPSILON.powf(0.8)).count();
    let p_value = if input.scale_estimated {
        let k0 = input.df_residual.round_ties_even().max(1.0);
        let lb: Vec<f64> = ev.iter().copied().chain([-stat / k0]).collect();
        let df: Vec<f64> = ev.iter().map(|_| 1.0).chain([k0]).collect();
        psum_chisq_upper(0.0, &lb, &df)
    } else {
        psum_chisq_upper(stat, &ev, &vec![1.0; k])
    };
    Ok(TermTest {
        stat,
        rank: rank as f64,
        p_value,
    })
}

/// X^T X from x (p x p).
fn crossprod(input: &SummaryInput) -> Vec<f64> {
    let (n, p) = (input.x.nrow, input.x.ncol);
    let x = faer::MatRef::from_row_major_slice(&input.x.data, n, p);
    let g = x.transpose() * x;
    (0..p * p).map(|t| g[(t / p, t % p)]).collect()
}

/// With the random effects on `random` integrated out: G = X^T X + X^T X_r
/// P X_r^T X, and Ve's block on `own` as recov makes it, Vp G Vp / scale.
fn integrate_out(
    input: &SummaryInput,
    xtx: &[f64],
    random: &[usize],
    own: std::ops::Range<usize>,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let p = input.p();
    let q = random.len();
    let pinv = penalty_pinv(input, random)?;
    // C = X^T X_r (p x q).
    let c: Vec<f64> = (0..p)
        .flat_map(|i| random.iter().map(move |&j| xtx[i * p + j]))
        .collect();
    let cpc = matmul(&matmul(&c, &pinv, p, q, q), &transpose(&c, p, q), p, q, p);
    let g: Vec<f64> = xtx.iter().zip(&cpc).map(|(a, b)| a + b).collect();
    let k = own.len();
    let vp_rows: Vec<f64> = own
        .clone()
        .flat_map(|i| input.vp[i * p..(i + 1) * p].iter().copied())
        .collect();
    let ve = matmul(&matmul(&vp_rows, &g, k, p, p), &transpose(&vp_rows, k, p), k, p, k);
    Ok((g, ve.iter().map(|v| v / input.scale).collect()))
}

/// The pseudo-inverse of the random effects' penalty on `random`
/// (eigenvalues above eps^0.8 of the largest inverted, the rest dropped).
fn penalty_pinv(input: &SummaryInput, random: &[usize]) -> Result<Vec<f64>> {
    let q = random.len();
    let mut s2 = vec![0.0; q * q];
    add_penalties(input, random, &mut s2);
    let (values, v) = matfree_solvers::symmetric_eigen(q, &s2)?;
    let top = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let inv: Vec<f64> = values
        .iter()
        .map(|&e| if e > top * f64::EPSILON.powf(0.8) { 1.0 / e } else { 0.0 })
        .collect();
    Ok((0..q * q)
        .map(|t| (0..q).map(|c| v[(t / q) * q + c] * inv[c] * v[(t % q) * q + c]).sum())
        .collect())
}

/// Adds to `a` (indexed by `kept`) the penalty of each smooth whose
/// columns are in `kept` (a smooth's columns are kept or dropped together).
fn add_penalties(input: &SummaryInput, kept: &[usize], a: &mut [f64]) {
    let n = kept.len();
    for t in &input.smooths {
        let Some(at) = kept.iter().position(|&c| c == t.first) else {
            continue;
        };
        let k = t.last - t.first;
        for i in 0..k {
            for j in 0..k {
                a[(at + i) * n + at + j] += t.penalty[i * k + j];
            }
        }
    }
}

/// A_mm - A_mo A_oo^-1 A_om for the indices `own` of the n x n matrix a.
fn schur_complement(a: &[f64], n: usize, own: &[usize], label: &str) -> Result<Vec<f64>> {
    let other: Vec<usize> = (0..n).filter(|j| !own.contains(j)).collect();
    let k = own.len();
    let aoo = SummaryInput::block(a, n, &other);
    let aom: Vec<f64> = other
        .iter()
        .flat_map(|&i| own.iter().map(move |&j| a[i * n + j]))
        .collect();
    let mut out = SummaryInput::block(a, n, own);
    if other.is_empty() {
        return Ok(out);
    }
    let chol = matfree_solvers::Cholesky::factor(other.len(), &aoo).map_err(|e| {
        Error::invalid(
            format!("x and penalties ({label})"),
            e,
            "the penalised crossproduct of the other terms must be positive definite",
        )
    })?;
    // Solve column by column: the solver stores right-hand sides back to back.
    let no = other.len();
    let aom_ref = &aom;
    let rhs: Vec<f64> = (0..k).flat_map(|j| (0..no).map(move |i| aom_ref[i * k + j])).collect();
    let sol = chol.solve(&rhs, k)?;
    for i in 0..k {
        for j in 0..k {
            let dot: f64 = (0..other.len())
                .map(|r| aom[r * k + i] * sol[j * other.len() + r])
                .sum();
            out[i * k + j] -= dot;
        }
    }
    Ok(out)
}

/// The eigenvalues of M Ve_mm / scale (as those of L^T Ve_mm L with M = L
/// L^T), negatives set to 0.
fn weights(schur: &[f64], ve_mm: &[f64], k: usize, scale: f64, label: &str) -> Result<Vec<f64>> {
    let m = faer::MatRef::from_row_major_slice(schur, k, k);
    let llt = m.llt(faer::Side::Lower).map_err(|e| {
        Error::invalid(
            format!("x and penalties ({label})"),
            format!("{e:?}"),
            "the Schur complement on the random effect must be positive definite",
        )
    })?;
    let l = llt.L();
    let lt: Vec<f64> = (0..k * k).map(|t| l[(t % k, t / k)]).collect();
    let inner = matmul(&matmul(&lt, ve_mm, k, k, k), &transpose(&lt, k, k), k, k, k);
    let (values, _) = descending_eigen(k, &symmetric_part(&inner, k))?;
    Ok(values.iter().map(|&e| (e / scale).max(0.0)).collect())
}
