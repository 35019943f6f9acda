//! A smooth term as mgcv's `smoothCon(..., absorb.cons = TRUE,
//! scale.penalty = TRUE)` builds it: the basis's design and penalties, each
//! penalty rescaled to the design's size, and the sum-to-zero constraint
//! absorbed by a QR of the column means; and `PredictMat`, the same columns
//! at new data.

use matfree_solvers::Constraint;

use super::{expect_columns, Column, CrBasis, PsBasis, ReBasis, TensorBasis};
use rayon::prelude::*;

use crate::{Error, Result};

/// What to build: mgcv's `bs` and its options.
#[derive(Clone, Debug, PartialEq)]
pub enum Spec {
    /// `s(x, bs = "cr", k = k)`.
    Cr {
        /// The basis dimension (knots), at least 3.
        k: usize,
    },
    /// `s(x, bs = "ps", k = k, m = m)`.
    Ps {
        /// The basis dimension, at least 4.
        k: usize,
        /// (spline order - 2, penalty order): mgcv's default is (2, 2).
        m: [usize; 2],
    },
    /// `te(x1, x2, ...)` over one-covariate margins (`Cr` or `Ps`), one
    /// covariate column per margin; mgcv's default margin is `Cr { k: 5 }`.
    Te(Vec<Spec>),
    /// `s(f, bs = "re")` on a factor column.
    Re,
}

/// A constructed basis, unconstrained: what it needs to rebuild its columns.
#[derive(Clone, Debug, PartialEq)]
pub enum Basis {
    /// A cubic regression spline.
    Cr(CrBasis),
    /// A P-spline.
    Ps(PsBasis),
    /// A tensor product.
    Te(TensorBasis),
    /// A random effect.
    Re(ReBasis),
}

impl Basis {
    /// The basis of `spec` on `columns` (term `label`'s covariates).
    pub fn new(label: &str, spec: &Spec, columns: &[Column]) -> Result<Self> {
        Ok(match spec {
            Spec::Cr { k } => Self::Cr(CrBasis::new(label, one_numeric(label, columns)?, *k)?),
            Spec::Ps { k, m } => Self::Ps(PsBasis::new(label, one_numeric(label, columns)?, *k, *m)?),
            Spec::Te(margins) => Self::Te(TensorBasis::new(label, margins, columns)?),
            Spec::Re => Self::Re(ReBasis::new(expect_columns(label, columns, 1)?[0].factor(label)?)),
        })
    }

    /// mgcv's name of the basis (`bs`): cr, ps, te, re.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Cr(_) => "cr",
            Self::Ps(_) => "ps",
            Self::Te(_) => "te",
            Self::Re(_) => "re",
        }
    }

    /// The number of columns before any constraint.
    pub fn dim(&self) -> usize {
        match self {
            Self::Cr(b) => b.dim(),
            Self::Ps(b) => b.dim(),
            Self::Te(b) => b.dim(),
            Self::Re(b) => b.dim(),
        }
    }

    /// The unconstrained design (n x dim) at `columns`.
    pub fn design(&self, label: &str, columns: &[Column]) -> Result<Vec<f64>> {
        match self {
            Self::Cr(b) => Ok(b.design(one_numeric(label, columns)?)),
            Self::Ps(b) => Ok(b.design(one_numeric(label, columns)?)),
            Self::Te(b) => b.design(label, columns),
            Self::Re(b) => b.design(label, expect_columns(label, columns, 1)?[0].factor(label)?),
        }
    }

    /// The penalties before `smoothCon`'s scaling (dim x dim each).
    pub fn penalties(&self) -> Result<Vec<Vec<f64>>> {
        Ok(match self {
            Self::Cr(b) => vec![b.penalty().to_vec()],
            Self::Ps(b) => vec![b.penalty()?],
            Self::Te(b) => b.penalties(),
            Self::Re(b) => vec![b.penalty()],
        })
    }

    /// The penalties' ranks before any constraint.
    pub fn ranks(&self) -> Vec<usize> {
        match self {
            Self::Cr(b) => vec![b.dim() - 2],
            Self::Ps(b) => vec![b.dim() - b.penalty_order()],
            Self::Te(b) => b.ranks(),
            Self::Re(b) => vec![b.dim()],
        }
    }

    /// The dimension of the unpenalised space before any constraint.
    pub fn null_space_dim(&self) -> usize {
        match self {
            Self::Cr(_) => 2,
            Self::Ps(b) => b.penalty_order(),
            Self::Te(b) => b.null_space_dim(),
            Self::Re(_) => 0,
        }
    }

    /// Whether mgcv adds the sum-to-zero constraint (all but "re", whose
    /// constructor declares none).
    fn constrained(&self) -> bool {
        !matches!(self, Self::Re(_))
    }
}

/// A smooth term: its basis, constraint and scaled, constrained penalties
/// (everything [`Smooth::predict`] and a fit's penalties need, nothing of
/// the size of the data: a saved fit rebuilds it with [`Smooth::rebuild`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Smooth {
    label: String,
    basis: Basis,
    /// The column means C (1 x basis dim) the constraint C beta = 0 was built from.
    constraint_means: Option<Vec<f64>>,
    constraint: Option<Constraint>,
    penalties: Vec<Vec<f64>>,
    penalty_scale: Vec<f64>,
    ranks: Vec<usize>,
    null_space_dim: usize,
}

impl Smooth {
    /// The term `label` of `spec` on `columns`, as `smoothCon` builds it.
    pub fn new(label: &str, spec: &Spec, columns: &[Column]) -> Result<Self> {
        let basis = Basis::new(label, spec, columns)?;
        let (n, p) = (columns[0].len(), basis.dim());
        let x = basis.design(label, columns)?;
        let (_, penalty_scale) = scale_penalties(&x, p, basis.penalties()?);
        let means = match basis.constrained() {
            true => Some(column_means(label, &x, n, p)?),
            false => None,
        };
        Self::rebuild(label, basis, means, penalty_scale)
    }

    /// The term from what [`Smooth::new`] derived from the data: the basis,
    /// the constraint's column means (none for "re") and each penalty's
    /// divisor (`S.scale`); the penalties and the constraint are computed
    /// as `new` computes them, so the term is the same to the bit.
    pub fn rebuild(label: &str, basis: Basis, means: Option<Vec<f64>>, penalty_scale: Vec<f64>) -> Result<Self> {
        let p = basis.dim();
        let raw = basis.penalties()?;
        if penalty_scale.len() != raw.len() {
            return Err(Error::invalid(
                format!("{label}: penalty_scale"),
                format!("{} values", penalty_scale.len()),
                format!("the basis has {} penalties", raw.len()),
            ));
        }
        if let Some(k) = penalty_scale.iter().position(|v| !(v.is_finite() && *v > 0.0)) {
            let rule = "a penalty's scale must be finite and > 0";
            return Err(Error::invalid(
                format!("{label}: penalty_scale[{k}]"),
                penalty_scale[k],
                rule,
            ));
        }
        let mut penalties: Vec<Vec<f64>> = raw
            .iter()
            .zip(&penalty_scale)
            .map(|(s, scale)| s.iter().map(|v| v / scale).collect())
            .collect();
        if means.is_some() != basis.constrained() {
            let rule = "mgcv constrains every basis but \"re\" to sum to zero";
            let given = if means.is_some() { "given" } else { "absent" };
            return Err(Error::invalid(format!("{label}: constraint"), given, rule));
        }
        let (mut ranks, mut null_space_dim) = (basis.ranks(), basis.null_space_dim());
        let constraint = match &means {
            None => None,
            Some(c) => Some(sum_to_zero(label, c, p)?),
        };
        if let Some(c) = &constraint {
            penalties = penalties
                .iter()
                .map(|s| c.apply_to_penalty(s))
                .collect::<std::result::Result<_, _>>()?;
            ranks.iter_mut().for_each(|r| *r = (*r).min(p - 1));
            null_space_dim = null_space_dim.saturating_sub(1);
        }
        Ok(Self {
            label: label.into(),
            basis,
            constraint_means: means,
            constraint,
            penalties,
            penalty_scale,
            ranks,
            null_space_dim,
        })
    }

    /// The columns at new data (`PredictMat`): the basis at `columns`, the
    /// fit's constraint applied; new rows x columns, row-major.
    pub fn predict(&self, columns: &[Column]) -> Result<Vec<f64>> {
        let x = self.basis.design(&self.label, columns)?;
        match &self.constraint {
            None => Ok(x),
            Some(c) => Ok(c.apply_to_design(&x, columns[0].len())?),
        }
    }

    /// The term's label.
    pub fn label(&self) -> &str {
        &self.label
    }
    /// The basis (knots, levels) before the constraint.
    pub fn basis(&self) -> &Basis {
        &self.basis
    }
    /// The absorbed constraint (none for "re").
    pub fn constraint(&self) -> Option<&Constraint> {
        self.constraint.as_ref()
    }
    /// The column means of the unconstrained design at the fit's data,
    /// the constraint's one row (none for "re").
    pub fn constraint_means(&self) -> Option<&[f64]> {
        self.constraint_means.as_deref()
    }
    /// The number of coefficients (columns), after the constraint.
    pub fn dim(&self) -> usize {
        self.constraint
            .as_ref()
            .map_or(self.basis.dim(), Constraint::reduced_dim)
    }
    /// The penalties S_k (dim x dim row-major): one, or one per te margin.
    pub fn penalties(&self) -> &[Vec<f64>] {
        &self.penalties
    }
    /// What each penalty was divided by (mgcv's `S.scale`).
    pub fn penalty_scale(&self) -> &[f64] {
        &self.penalty_scale
    }
    /// The penalties' ranks.
    pub fn ranks(&self) -> &[usize] {
        &self.ranks
    }
    /// The dimension of the unpenalised space after the constraint.
    pub fn null_space_dim(&self) -> usize {
        self.null_space_dim
    }
}

/// The single finite numeric column of a one-covariate basis.
fn one_numeric<'a>(label: &str, columns: &[Column<'a>]) -> Result<&'a [f64]> {
    expect_columns(label, columns, 1)?[0].numeric(label)
}

/// `scale.penalty = TRUE`: S / (||S||_1 / ||X||_inf^2), so that penalties
/// and X^T X are of one size whatever the covariate's units.
fn scale_penalties(x: &[f64], p: usize, penalties: Vec<Vec<f64>>) -> (Vec<Vec<f64>>, Vec<f64>) {
    let row_sum = x
        .par_chunks(p)
        .map(|r| r.iter().map(|v| v.abs()).sum::<f64>())
        .reduce(|| 0.0, f64::max);
    let ma_xx = row_sum * row_sum;
    penalties
        .into_iter()
        .map(|s| {
            let col_sum = (0..p)
                .map(|j| (0..p).map(|i| s[i * p + j].abs()).sum::<f64>())
                .fold(0.0, f64::max);
            let scale = col_sum / ma_xx;
            (s.iter().map(|v| v / scale).collect(), scale)
        })
        .unzip()
}

/// The column means of the design x (n x p).
fn column_means(label: &str, x: &[f64], n: usize, p: usize) -> Result<Vec<f64>> {
    if n == 0 {
        return Err(Error::invalid(label, "0 rows", "a smooth needs data"));
    }
    // One pass over the rows, each column's sum in row order.
    let mut sums = vec![0.0; p];
    for row in x.chunks_exact(p).take(n) {
        sums.iter_mut().zip(row).for_each(|(s, v)| *s += v);
    }
    Ok(sums.into_iter().map(|s| s / n as f64).collect())
}

/// mgcv's identifiability constraint: the column means of the design sum
/// to zero, absorbed by the Householder QR of C^T (the solvers' Constraint
/// takes the same reflector as R's `qr`, so the columns are mgcv's).
fn sum_to_zero(label: &str, means: &[f64], p: usize) -> Result<Constraint> {
    if means.len() != p {
        return Err(Error::invalid(
            format!("{label}: constraint"),
            format!("{} column means", means.len()),
            format!("the basis has {p} columns"),
        ));
    }
    if let Some(j) = means.iter().position(|m| !m.is_finite()) {
        return Err(Error::invalid(
            format!("{label}: constraint[{j}]"),
            means[j],
            "must be finite",
        ));
    }
    if let Some(j) = means.iter().position(|m| *m == 0.0) {
        // mgcv then absorbs the constraint over the other columns only
        // (its `indi` branch), which is not built here.
        return Err(Error::invalid(
            format!("{label}: column {j}"),
            "mean 0",
            "a basis function with zero column mean (no data under it) is not supported: reduce k",
        ));
    }
    Ok(Constraint::new(means, 1, p)?)
}
