//! Identifiability constraints absorbed into a smooth's basis, as mgcv's
//! `smoothCon(..., absorb.cons = TRUE)` does (R/smooth.r): a linear
//! constraint `C beta = 0` (C m x p; sum-to-zero is `C = 1^T X`, the column
//! sums of the smooth's design) is met by every `beta = Z beta_tilde`,
//! where Z is the last p - m columns of the orthogonal factor of a QR
//! decomposition of `C^T`. The constrained smooth is then fitted
//! unconstrained in beta_tilde, with design `X Z` and penalty `Z^T S Z`,
//! and `beta = Z beta_tilde`, `V_beta = Z V Z^T` map the fit back.
//!
//! Why sum-to-zero: a smooth's basis usually spans the constant, which the
//! intercept also spans, so the model is not identifiable without it.
//! Absorbing it removes the constant from the smooth's penalty null space
//! (a second-difference penalty's null space {1, t} becomes one
//! dimensional).

use faer::{Mat, MatRef};
use rayon::prelude::*;

use crate::operator::expect_len;
use crate::{Result, SolverError};

/// Rows of a design a task of [`Constraint::apply_to_design`] takes.
const DESIGN_ROWS: usize = 1 << 14;

/// Rows of C whose QR pivot is at most this fraction of the largest are
/// linearly dependent on the others (or C is zero).
pub const CONSTRAINT_RANK_TOL: f64 = 1e-10;

/// A linear constraint `C beta = 0` on p coefficients, held as an
/// orthonormal basis Z (p x (p - m), `C Z = 0`, `Z^T Z = I`) of its null
/// space.
#[derive(Clone, Debug, PartialEq)]
pub struct Constraint {
    p: usize,
    m: usize,
    /// Z, row-major p x (p - m).
    z: Vec<f64>,
}

impl Constraint {
    /// The constraint `C beta = 0` with `c` row-major m x p: 1 <= m < p,
    /// finite entries, linearly independent rows.
    pub fn new(c: &[f64], m: usize, p: usize) -> Result<Self> {
        if m == 0 || m >= p {
            return Err(SolverError::invalid(
                "m",
                m,
                format!("the number of constraints must lie in 1..p (p = {p})"),
            ));
        }
        expect_len("c", c.len(), m * p)?;
        if let Some(i) = c.iter().position(|v| !v.is_finite()) {
            return Err(SolverError::invalid(
                format!("c[{},{}]", i / p, i % p),
                c[i],
                "must be finite",
            ));
        }
        let ct = Mat::from_fn(p, m, |i, j| c[j * p + i]);
        let qr = ct.col_piv_qr();
        check_rank(qr.R(), m)?;
        let q = qr.compute_Q();
        let z = (0..p * (p - m)).map(|t| q[(t / (p - m), m + t % (p - m))]).collect();
        Ok(Self { p, m, z })
    }

    /// The sum-to-zero constraint of a smooth with design `design`
    /// (row-major n x p): `sum_i (X beta)_i = 0`, i.e. C = 1^T X.
    pub fn sum_to_zero(design: &[f64], n: usize, p: usize) -> Result<Self> {
        expect_len("design", design.len(), n * p)?;
        let sums: Vec<f64> = (0..p).map(|j| (0..n).map(|i| design[i * p + j]).sum()).collect();
        Self::new(&sums, 1, p).map_err(|e| match e {
            SolverError::InvalidInput { value, rule, .. } => SolverError::invalid(
                "design column sums",
                value,
                format!("{rule} (a design whose columns all sum to zero already meets the constraint)"),
            ),
            other => other,
        })
    }

    /// The number of coefficients p before the constraint.
    pub fn dim(&self) -> usize {
        self.p
    }

    /// The number of constraints m.
    pub fn n_constraints(&self) -> usize {
        self.m
    }

    /// The number of coefficients after it, p - m.
    pub fn reduced_dim(&self) -> usize {
        self.p - self.m
    }

    /// Z, row-major p x (p - m).
    pub fn basis(&self) -> &[f64] {
        &self.z
    }

    fn z(&self) -> MatRef<'_, f64> {
        MatRef::from_row_major_slice(&self.z, self.p, self.p - self.m)
    }

    /// The constrained design `X Z` (n x (p - m)) of a row-major n x p
    /// design, a block of rows a task.
    pub fn apply_to_design(&self, x: &[f64], n: usize) -> Result<Vec<f64>> {
        expect_len("design", x.len(), n * self.p)?;
        let r = self.p - self.m;
        let mut out = vec![0.0; n * r];
        let blocks = out
            .par_chunks_mut(DESIGN_ROWS * r)
            .zip(x.par_chunks(DESIGN_ROWS * self.p));
        blocks.for_each(|(o, xb)| {
            let xz = MatRef::from_row_major_slice(xb, xb.len() / self.p, self.p) * self.z();
            o.copy_from_slice(&row_major(xz.as_ref()));
        });
        Ok(out)
    }

    /// The constrained penalty `Z^T S Z` ((p - m) x (p - m)) of a row-major
    /// p x p penalty, exactly symmetric (so it is a valid penalty block).
    pub fn apply_to_penalty(&self, s: &[f64]) -> Result<Vec<f64>> {
        expect_len("penalty", s.len(), self.p * self.p)?;
        let zsz = self.z().transpose() * MatRef::from_row_major_slice(s, self.p, self.p) * self.z();
        let r = self.p - self.m;
        Ok((0..r * r)
            .map(|t| 0.5 * (zsz[(t / r, t % r)] + zsz[(t % r, t / r)]))
            .collect())
    }

    /// The coefficients `beta = Z beta_tilde` of a constrained fit.
    pub fn expand_coefficients(&self, beta_tilde: &[f64]) -> Result<Vec<f64>> {
        let r = self.p - self.m;
        expect_len("beta_tilde", beta_tilde.len(), r)?;
        let z = self.z();
        Ok((0..self.p)
            .map(|i| (0..r).map(|j| z[(i, j)] * beta_tilde[j]).sum())
            .collect())
    }

    /// The covariance `Z V Z^T` (p x p) of the coefficients from the
    /// covariance V (row-major (p - m) x (p - m)) of beta_tilde.
    pub fn expand_covariance(&self, v: &[f64]) -> Result<Vec<f64>> {
        let r = self.p - self.m;
        expect_len("covariance", v.len(), r * r)?;
        let zvz = self.z() * MatRef::from_row_major_slice(v, r, r) * self.z().transpose();
        Ok(row_major(zvz.as_ref()))
    }
}

/// A column-pivoted R whose trailing pivot is small next to the first means
/// the rows of C are dependent; the message names the row count and the
/// pivots.
fn check_rank(r: MatRef<'_, f64>, m: usize) -> Result<()> {
    let first = r[(0, 0)].abs();
    let last = r[(m - 1, m - 1)].abs();
    if !(first > 0.0 && last > CONSTRAINT_RANK_TOL * first) {
        return Err(SolverError::invalid(
            "c",
            format!("QR pivots {first:e} .. {last:e} over {m} rows"),
            format!("the rows must be linearly independent and not zero (pivot ratio > {CONSTRAINT_RANK_TOL:e})"),
        ));
    }
    Ok(())
}

fn row_major(a: MatRef<'_, f64>) -> Vec<f64> {
    (0..a.nrows())
        .flat_map(|i| (0..a.ncols()).map(move |j| a[(i, j)]))
        .collect()
}
