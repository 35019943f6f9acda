//! mgcv's tensor product smooth, `te(x1, x2, ...)`
//! (`smooth.construct.tensor.smooth.spec`): the row-wise Kronecker product
//! of the margins' designs, and one penalty per margin, S_j in its place in
//! I (x) .. (x) S_j (x) .. (x) I, each S_j first divided by its largest
//! eigenvalue. A margin without an interpolating parametrisation ("ps") is
//! first re-parametrised so that its coefficients are the function's values
//! at evenly spaced points (mgcv's `np = TRUE`); "cr" already is one.

use faer::linalg::solvers::DenseSolveCore;

use super::{expect_columns, identity, matmul, transpose, Basis, Column, Spec};
use crate::{Error, Result};

/// A tensor product's margins.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorBasis {
    margins: Vec<Margin>,
}

/// One margin: its basis, the re-parametrisation (if any) and its
/// normalised penalty.
#[derive(Clone, Debug, PartialEq)]
struct Margin {
    basis: Basis,
    /// The covariate's range at the fit, where XP was built over it ("ps").
    range: Option<(f64, f64)>,
    /// XP (dim x dim, row-major): the inverse of the basis at dim evenly
    /// spaced points over the covariate's range.
    xp: Option<Vec<f64>>,
    /// XP^T S XP divided by its largest eigenvalue.
    penalty: Vec<f64>,
}

/// mgcv skips the re-parametrisation when the basis at the points has a
/// singular value ratio below `.Machine$double.eps^0.66`.
fn reparam_tol() -> f64 {
    f64::EPSILON.powf(0.66)
}

impl TensorBasis {
    /// The product of the margins `specs` ("cr" or "ps", one covariate
    /// column each, in `columns`' order).
    pub fn new(label: &str, specs: &[Spec], columns: &[Column]) -> Result<Self> {
        if specs.len() < 2 {
            return Err(Error::invalid(
                label,
                format!("{} margins", specs.len()),
                "a tensor product needs 2 or more margins",
            ));
        }
        let columns = expect_columns(label, columns, specs.len())?;
        let margins = specs
            .iter()
            .zip(columns)
            .enumerate()
            .map(|(i, (spec, c))| Margin::new(&format!("{label} margin {i}"), spec, *c))
            .collect::<Result<_>>()?;
        Ok(Self { margins })
    }

    /// The product of known margins, each its basis ("cr" or "ps") and,
    /// for "ps", the covariate's range at the fit ([`TensorBasis::margins`]
    /// gives both back): the same basis, to the bit, as the one built on
    /// that data.
    pub fn rebuild(label: &str, margins: Vec<(Basis, Option<(f64, f64)>)>) -> Result<Self> {
        if margins.len() < 2 {
            let rule = "a tensor product needs 2 or more margins";
            return Err(Error::invalid(label, format!("{} margins", margins.len()), rule));
        }
        let margins = margins
            .into_iter()
            .enumerate()
            .map(|(i, (basis, range))| Margin::rebuild(&format!("{label} margin {i}"), basis, range))
            .collect::<Result<_>>()?;
        Ok(Self { margins })
    }

    /// Each margin's basis and, for "ps", the covariate's range at the fit.
    pub fn margins(&self) -> Vec<(&Basis, Option<(f64, f64)>)> {
        self.margins.iter().map(|m| (&m.basis, m.range)).collect()
    }

    /// The number of columns: the product of the margins'.
    pub fn dim(&self) -> usize {
        self.margins.iter().map(|m| m.basis.dim()).product()
    }

    /// The design (n x dim) at `columns`, one per margin: column
    /// (j_1, .., j_d) is the product of the margins' columns, j_1 slowest.
    pub fn design(&self, label: &str, columns: &[Column]) -> Result<Vec<f64>> {
        let columns = expect_columns(label, columns, self.margins.len())?;
        let n = columns[0].len();
        let mut out = vec![1.0; n];
        let mut p = 1;
        for (i, (m, c)) in self.margins.iter().zip(columns).enumerate() {
            let x = m.design(&format!("{label} margin {i}"), *c)?;
            out = row_kronecker(&out, p, &x, m.basis.dim(), n);
            p *= m.basis.dim();
        }
        Ok(out)
    }

    /// One penalty per margin, I (x) .. (x) S_j (x) .. (x) I (dim x dim).
    pub fn penalties(&self) -> Vec<Vec<f64>> {
        let dims: Vec<usize> = self.margins.iter().map(|m| m.basis.dim()).collect();
        (0..dims.len())
            .map(|j| {
                let before: usize = dims[..j].iter().product();
                let after: usize = dims[j + 1..].iter().product();
                let s = kronecker(&identity(before), before, &self.margins[j].penalty, dims[j]);
                kronecker(&s, before * dims[j], &identity(after), after)
            })
            .collect()
    }

    /// Each penalty's rank: its margin's times the other margins' dims.
    pub fn ranks(&self) -> Vec<usize> {
        let dim = self.dim();
        self.margins
            .iter()
            .map(|m| m.basis.ranks()[0] * dim / m.basis.dim())
            .collect()
    }

    /// The product of the margins' null space dimensions.
    pub fn null_space_dim(&self) -> usize {
        self.margins.iter().map(|m| m.basis.null_space_dim()).product()
    }
}

impl Margin {
    fn new(label: &str, spec: &Spec, column: Column) -> Result<Self> {
        if !matches!(spec, Spec::Cr { .. } | Spec::Ps { .. }) {
            return Err(Error::invalid(
                label,
                format!("{spec:?}"),
                "tensor product margins are \"cr\" or \"ps\"",
            ));
        }
        let basis = Basis::new(label, spec, &[column])?;
        let range = match &basis {
            Basis::Ps(_) => Some(super::range(column.numeric(label)?)),
            _ => None,
        };
        Self::rebuild(label, basis, range)
    }

    /// The margin of `basis`, re-parametrised over `range` ("ps" only).
    fn rebuild(label: &str, basis: Basis, range: Option<(f64, f64)>) -> Result<Self> {
        let xp = match (&basis, range) {
            (Basis::Cr(_), None) => None,
            (Basis::Ps(_), Some(r)) => interpolating(label, &basis, r)?,
            (b, r) => {
                return Err(Error::invalid(
                    label,
                    format!("a {} margin, range {r:?}", b.name()),
                    "tensor product margins are \"cr\" (no range) or \"ps\" (with the covariate's range)",
                ))
            }
        };
        let k = basis.dim();
        let mut s = basis.penalties()?.remove(0);
        if let Some(xp) = &xp {
            s = matmul(&matmul(&transpose(xp, k, k), &s, k, k, k), xp, k, k, k);
        }
        let (values, _) = matfree_solvers::symmetric_eigen(k, &s)?;
        let top = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Ok(Self {
            basis,
            range,
            xp,
            penalty: s.iter().map(|v| v / top).collect(),
        })
    }

    fn design(&self, label: &str, column: Column) -> Result<Vec<f64>> {
        let x = self.basis.design(label, &[column])?;
        let k = self.basis.dim();
        Ok(match &self.xp {
            Some(xp) => matmul(&x, xp, column.len(), k, k),
            None => x,
        })
    }
}

/// XP, the inverse of the basis at k evenly spaced points over the range
/// (lo, hi) of x (so that X XP's coefficients are values there), or none
/// where that basis is too ill-conditioned (mgcv then keeps the basis as it is).
fn interpolating(label: &str, basis: &Basis, (lo, hi): (f64, f64)) -> Result<Option<Vec<f64>>> {
    let k = basis.dim();
    if !(lo.is_finite() && hi.is_finite() && lo < hi) {
        return Err(Error::invalid(
            label,
            format!("range {lo}..{hi}"),
            "must be finite with lo < hi",
        ));
    }
    let points: Vec<f64> = (0..k).map(|i| lo + (hi - lo) * i as f64 / (k - 1) as f64).collect();
    let p = basis.design(label, &[Column::Numeric(&points)])?;
    let pm = faer::MatRef::from_row_major_slice(&p, k, k);
    let sv = pm.singular_values().map_err(|e| {
        Error::invalid(
            label,
            format!("{e:?}"),
            "the SVD of the margin's basis did not converge",
        )
    })?;
    if sv[k - 1] / sv[0] < reparam_tol() {
        return Ok(None);
    }
    let inv = pm.partial_piv_lu().inverse();
    Ok(Some((0..k * k).map(|t| inv[(t / k, t % k)]).collect()))
}

/// The row-wise Kronecker product of a (n x p) and b (n x q): n x pq.
fn row_kronecker(a: &[f64], p: usize, b: &[f64], q: usize, n: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(n * p * q);
    for i in 0..n {
        for u in &a[i * p..(i + 1) * p] {
            out.extend(b[i * q..(i + 1) * q].iter().map(|v| u * v));
        }
    }
    out
}

/// The Kronecker product a (x) b of square a (p x p) and b (q x q).
fn kronecker(a: &[f64], p: usize, b: &[f64], q: usize) -> Vec<f64> {
    let r = p * q;
    (0..r * r)
        .map(|t| {
            let (i, j) = (t / r, t % r);
            a[(i / q) * p + j / q] * b[(i % q) * q + j % q]
        })
        .collect()
}
