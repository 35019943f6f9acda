//! A formula on named columns as mgcv's `gam.setup` binds it: the
//! parametric terms first (the intercept, then single columns in the
//! formula's order, then interactions by degree, as R's `terms` orders
//! them), then the smooths in the formula's order; each smooth's spec with
//! mgcv's defaults (`k = 10` for `s()`, 5 a margin for `te()`, `m = 2` for
//! P-splines, "cr" margins).

use std::ops::Range;

use super::formula::{self, Basis as Bs, Formula, Response};
use super::{Column, Parametric, Smooth, Spec, Term};
use crate::{Error, Result};

/// One model term: what it is, the columns it reads and its coefficients.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelTerm {
    /// The term (it rebuilds its columns at new data).
    pub term: Term,
    /// The names of the covariate columns it reads, in order.
    pub columns: Vec<String>,
    /// Its coefficients' range in the model's.
    pub range: Range<usize>,
}

impl ModelTerm {
    /// The term's label: `(Intercept)`, `x`, `f`, `x1:x2`, `s(x)`, `te(x1,x2)`.
    pub fn label(&self) -> String {
        match &self.term {
            Term::Parametric(Parametric::Intercept) => "(Intercept)".into(),
            Term::Parametric(Parametric::Numeric { label } | Parametric::Factor { label, .. }) => label.clone(),
            Term::Parametric(Parametric::Interaction { labels }) => labels.join(":"),
            Term::Smooth(s) => s.label().into(),
        }
    }

    /// Its coefficients' names as mgcv gives them: `(Intercept)`, `x`,
    /// `fb` (factor f, level b), `s(x).1`, ...
    pub fn coefficient_names(&self) -> Vec<String> {
        match &self.term {
            Term::Parametric(t) => t.column_names(),
            Term::Smooth(s) => (1..=s.dim()).map(|j| format!("{}.{j}", s.label())).collect(),
        }
    }
}

/// The named columns of a data set, looked up by name.
pub(crate) struct Table<'d, 'a> {
    columns: &'d [(&'d str, Column<'a>)],
}

impl<'d, 'a> Table<'d, 'a> {
    /// The columns, checked for distinct names.
    pub(crate) fn new(columns: &'d [(&'d str, Column<'a>)]) -> Result<Self> {
        for (i, (name, _)) in columns.iter().enumerate() {
            if columns[..i].iter().any(|(other, _)| other == name) {
                return Err(Error::invalid(
                    format!("column {name}"),
                    "given twice",
                    "column names must be distinct",
                ));
            }
        }
        Ok(Self { columns })
    }

    /// The column called `name`.
    pub(crate) fn get(&self, name: &str) -> Result<Column<'a>> {
        self.find(name, "the formula reads it")
    }

    /// The column called `name`, which `reader` reads (for the error).
    fn find(&self, name: &str, reader: &str) -> Result<Column<'a>> {
        match self.columns.iter().find(|(n, _)| *n == name) {
            Some((_, c)) => Ok(*c),
            None => {
                let names: Vec<&str> = self.columns.iter().map(|(n, _)| *n).collect();
                Err(Error::invalid(
                    format!("column {name}"),
                    "missing",
                    format!("{reader}; the data have {}", names.join(", ")),
                ))
            }
        }
    }

    /// The columns called `names`.
    pub(crate) fn all(&self, names: &[String]) -> Result<Vec<Column<'a>>> {
        names.iter().map(|n| self.get(n)).collect()
    }

    /// The numeric column called `name` (the response's rule in `rule`).
    pub(crate) fn numeric(&self, name: &str, rule: &str) -> Result<&'a [f64]> {
        as_numeric(self.get(name)?, name, rule)
    }
}

/// Column `name`'s numbers, or an error with `rule` for a factor.
fn as_numeric<'a>(column: Column<'a>, name: &str, rule: &str) -> Result<&'a [f64]> {
    match column {
        Column::Numeric(x) => Ok(x),
        Column::Factor(_) => Err(Error::invalid(format!("column {name}"), "a factor column", rule)),
    }
}

/// The terms of `formula` built on `table`, with their ranges, in mgcv's order.
pub(crate) fn build_terms(formula: &Formula, table: &Table) -> Result<Vec<ModelTerm>> {
    let mut parts: Vec<(Term, Vec<String>)> = Vec::new();
    if formula.intercept {
        parts.push((Term::Parametric(Parametric::Intercept), Vec::new()));
    }
    for t in &formula.terms {
        if let formula::Term::Column(name) = t {
            let term = match table.get(name)? {
                Column::Numeric(_) => Parametric::Numeric { label: name.clone() },
                Column::Factor(f) => Parametric::factor(name, f)?,
            };
            parts.push((Term::Parametric(term), vec![name.clone()]));
        }
    }
    let mut interactions: Vec<&Vec<String>> = formula
        .terms
        .iter()
        .filter_map(|t| match t {
            formula::Term::Interaction(v) => Some(v),
            _ => None,
        })
        .collect();
    interactions.sort_by_key(|v| v.len()); // stable: the formula's order within a degree
    for vars in interactions {
        let labels = vars.clone();
        parts.push((Term::Parametric(Parametric::Interaction { labels }), vars.clone()));
    }
    for t in &formula.terms {
        if let formula::Term::Smooth(s) = t {
            let columns = table.all(&s.vars)?;
            let smooth = Smooth::new(&s.label(), &spec(s)?, &columns)?;
            parts.push((Term::Smooth(smooth), s.vars.clone()));
        }
    }
    let mut start = 0;
    Ok(parts
        .into_iter()
        .map(|(term, columns)| {
            let range = start..start + term.dim();
            start = range.end;
            ModelTerm { term, columns, range }
        })
        .collect())
}

/// The spec of a smooth as written, with mgcv's defaults.
fn spec(s: &formula::Smooth) -> Result<Spec> {
    let label = s.label();
    let d = s.vars.len();
    if !s.tensor {
        if d != 1 {
            return Err(Error::invalid(
                &label,
                format!("{d} covariates"),
                "s() takes one covariate here; use te() for a smooth of several",
            ));
        }
        let bs = one(&label, "bs", s.bs.as_deref(), 1, Bs::ThinPlate)?[0];
        let k = one(&label, "k", s.k.as_deref(), 1, 10)?[0];
        return margin(&label, bs, k, s.m.as_deref());
    }
    let bs = one(&label, "bs", s.bs.as_deref(), d, Bs::CubicRegression)?;
    let k = one(&label, "k", s.k.as_deref(), d, 5)?;
    let margins = bs
        .iter()
        .zip(&k)
        .map(|(&b, &k)| margin(&label, b, k, s.m.as_deref()))
        .collect::<Result<_>>()?;
    Ok(Spec::Te(margins))
}

/// An option given once for all `d` margins, once a margin, or not (`default`).
fn one<T: Copy + std::fmt::Debug>(
    label: &str,
    what: &str,
    given: Option<&[T]>,
    d: usize,
    default: T,
) -> Result<Vec<T>> {
    match given {
        None => Ok(vec![default; d]),
        Some([v]) => Ok(vec![*v; d]),
        Some(v) if v.len() == d => Ok(v.to_vec()),
        Some(v) => Err(Error::invalid(
            format!("{label}: {what}"),
            format!("{v:?}"),
            format!("give one value or one per covariate ({d})"),
        )),
    }
}

/// One basis of dimension k; `m` is the P-spline's order(s), which mgcv's
/// "cr" and "re" ignore.
fn margin(label: &str, bs: Bs, k: usize, m: Option<&[usize]>) -> Result<Spec> {
    match bs {
        Bs::CubicRegression => Ok(Spec::Cr { k }),
        Bs::PSpline => {
            let m = match m {
                None => [2, 2],
                Some([a]) => [*a, *a],
                Some([a, b]) => [*a, *b],
                Some(v) => {
                    return Err(Error::invalid(
                        format!("{label}: m"),
                        format!("{v:?}"),
                        "a P-spline takes m = a or m = c(a, b)",
                    ))
                }
            };
            Ok(Spec::Ps { k, m })
        }
        Bs::RandomEffect => Ok(Spec::Re),
        Bs::ThinPlate => Err(Error::invalid(
            format!("{label}: bs"),
            "\"tp\"",
            "thin-plate splines (mgcv's default for s()) are not built: give bs = \"cr\", \"ps\" or \"re\"",
        )),
    }
}

/// The response's GLM data: one numeric column, or `cbind(s, f)` for the
/// binomial family (successes s of trials s + f).
pub(crate) fn response(formula: &Formula, table: &Table, binomial: bool) -> Result<(Vec<f64>, Option<Vec<f64>>)> {
    match &formula.response {
        Response::Column(y) => Ok((table.numeric(y, "the response must be numeric")?.to_vec(), None)),
        Response::Binomial { .. } if !binomial => Err(Error::invalid(
            "response",
            "cbind(successes, failures)",
            "applies to the binomial family only",
        )),
        Response::Binomial { successes, failures } => {
            let rule = "cbind(successes, failures) takes numeric columns";
            let (s, f) = (table.numeric(successes, rule)?, table.numeric(failures, rule)?);
            if s.len() != f.len() {
                return Err(Error::invalid(
                    format!("column {failures}"),
                    format!("{} rows", f.len()),
                    format!("must have the rows of {successes} ({})", s.len()),
                ));
            }
            Ok((s.to_vec(), Some(s.iter().zip(f).map(|(a, b)| a + b).collect())))
        }
    }
}

/// The prior weights from the column `name`: numeric, one a row, finite
/// and >= 0, not all 0 (mgcv's `weights = w`).
pub(crate) fn prior_weights(table: &Table, name: &str, n: usize) -> Result<Vec<f64>> {
    let reader = "the prior weights (Gam::with_weights) read it";
    let w = rows_of(table.find(name, reader)?, name, n, "prior weights must be numeric")?;
    if let Some(i) = w.iter().position(|v| !(v.is_finite() && *v >= 0.0)) {
        return Err(Error::invalid(
            format!("column {name}[{i}]"),
            w[i],
            "prior weights must be finite and >= 0",
        ));
    }
    if w.iter().all(|v| *v == 0.0) {
        return Err(Error::invalid(
            format!("column {name}"),
            "all 0",
            "prior weights must not all be 0 (no row would count)",
        ));
    }
    Ok(w.to_vec())
}

/// The formula's offsets summed row by row (R's `model.offset`), each
/// column numeric and finite; `None` without an offset.
pub(crate) fn offsets(names: &[String], table: &Table, n: usize) -> Result<Option<Vec<f64>>> {
    if names.is_empty() {
        return Ok(None);
    }
    let mut sum = vec![0.0; n];
    for name in names {
        let o = rows_of(table.get(name)?, name, n, "an offset must be numeric")?;
        if let Some(i) = o.iter().position(|v| !v.is_finite()) {
            return Err(Error::invalid(
                format!("column {name}[{i}]"),
                o[i],
                "offsets must be finite",
            ));
        }
        sum.iter_mut().zip(o).for_each(|(s, v)| *s += v);
    }
    Ok(Some(sum))
}

/// Column `name`'s numbers, `n` of them (`rule`: why it must be numeric).
fn rows_of<'a>(column: Column<'a>, name: &str, n: usize, rule: &str) -> Result<&'a [f64]> {
    let x = as_numeric(column, name, rule)?;
    if x.len() != n {
        return Err(Error::invalid(
            format!("column {name}"),
            format!("{} rows", x.len()),
            format!("must have the response's rows ({n})"),
        ));
    }
    Ok(x)
}
