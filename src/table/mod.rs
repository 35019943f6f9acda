//! Data tables for model fits: named columns, each numeric or a factor,
//! read from CSV ([`Table::read_csv`]) or Parquet ([`Table::read_parquet`])
//! or built from vectors and ndarrays ([`Table::new`], [`Table::from_array`]).
//!
//! The table knows no model: a formula asks it for the columns it reads
//! ([`Table::numeric`], [`Table::factor`]). Its rules are those of the
//! files a statistician trusts:
//!
//! - every numeric value is finite;
//! - a factor's levels are unique; read from a file they are sorted by
//!   their bytes (UTF-8, so by code point), as R's `factor()` sorts strings
//!   in the C locale (`LC_COLLATE=C`; R in another locale may order them
//!   otherwise, upper and lower case mixed);
//! - a missing value (an empty cell, `NA`, a Parquet null) is an error
//!   naming where it is, never a row dropped in silence as mgcv's default
//!   `na.action` would: drop or impute the row first, and know you did.
//!
//! A row subset ([`Table::rows`], [`Table::range`]) keeps every factor's
//! levels, as R's `[` does, so that predictions and shards code a level as
//! the full table does.

mod csv;
mod parquet;
pub(crate) mod records;

use std::collections::HashMap;
use std::ops::Range;

use crate::{Error, Result};

/// One column of a [`Table`].
#[derive(Clone, Debug, PartialEq)]
pub enum Column {
    /// Finite numbers.
    Numeric(Vec<f64>),
    /// A factor: each row's level is `levels[codes[i]]`.
    Factor {
        /// The distinct levels, in order (the first is R's reference level).
        levels: Vec<String>,
        /// Each row's level, an index into `levels`.
        codes: Vec<u32>,
    },
}

impl Column {
    /// A factor of `values`, its levels the distinct values sorted by their
    /// bytes (R's `factor()` in the C locale).
    pub fn factor<S: AsRef<str>>(values: &[S]) -> Result<Self> {
        let mut levels = Levels::default();
        for (i, v) in values.iter().enumerate() {
            levels.push(v.as_ref(), || format!("factor value {i}"))?;
        }
        Ok(levels.finish())
    }

    /// The number of rows.
    pub fn len(&self) -> usize {
        match self {
            Column::Numeric(v) => v.len(),
            Column::Factor { codes, .. } => codes.len(),
        }
    }

    /// Whether the column has no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `numeric` or `factor`, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Column::Numeric(_) => "numeric",
            Column::Factor { .. } => "factor",
        }
    }

    /// The rows `idx` (checked by the caller), with every level kept.
    fn select(&self, idx: impl Iterator<Item = usize>) -> Column {
        match self {
            Column::Numeric(v) => Column::Numeric(idx.map(|i| v[i]).collect()),
            Column::Factor { levels, codes } => Column::Factor {
                levels: levels.clone(),
                codes: idx.map(|i| codes[i]).collect(),
            },
        }
    }

    /// The first rule this column breaks, as (value, rule), if any.
    fn check(&self) -> Option<(String, String)> {
        match self {
            Column::Numeric(v) => v.iter().position(|x| !x.is_finite()).map(|i| {
                (
                    format!("{} (row {})", v[i], i + 1),
                    "every value must be finite".to_string(),
                )
            }),
            Column::Factor { levels, codes } => {
                let mut seen = HashMap::new();
                if let Some(j) = levels.iter().enumerate().position(|(j, l)| seen.insert(l, j).is_some()) {
                    return Some((format!("'{}'", levels[j]), "the levels must be unique".into()));
                }
                codes.iter().position(|&c| c as usize >= levels.len()).map(|i| {
                    let rule = format!("each code must be below the number of levels ({})", levels.len());
                    (format!("{} (row {})", codes[i], i + 1), rule)
                })
            }
        }
    }
}

/// A factor column's levels and codes, borrowed from a [`Table`].
#[derive(Clone, Copy, Debug)]
pub struct Factor<'a> {
    /// The distinct levels, in order.
    pub levels: &'a [String],
    /// Each row's level, an index into `levels`.
    pub codes: &'a [u32],
}

/// Named columns of equal length; see the [module docs](self).
#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    names: Vec<String>,
    columns: Vec<Column>,
    n: usize,
}

impl Table {
    /// A table of `columns`: names non-empty and unique, columns of one
    /// length, numbers finite, factor levels unique and codes in range.
    pub fn new(columns: Vec<(String, Column)>) -> Result<Self> {
        let n = columns.first().map_or(0, |(_, c)| c.len());
        let mut seen = HashMap::new();
        for (j, (name, column)) in columns.iter().enumerate() {
            let field = format!("table column '{name}'");
            if name.is_empty() {
                return Err(Error::invalid(
                    format!("table column {}", j + 1),
                    "''",
                    "a name is required",
                ));
            }
            if let Some(first) = seen.insert(name.as_str(), j) {
                let rule = format!("duplicate column name (columns {} and {})", first + 1, j + 1);
                return Err(Error::invalid(field, name, rule));
            }
            if column.len() != n {
                let rule = format!("every column must have as many rows as the first ({n})");
                return Err(Error::invalid(field, format!("{} rows", column.len()), rule));
            }
            if let Some((value, rule)) = column.check() {
                return Err(Error::invalid(field, value, rule));
            }
        }
        let (names, columns) = columns.into_iter().unzip();
        Ok(Self { names, columns, n })
    }

    /// Numeric columns from the columns of `x` (n x names.len()), named in order.
    pub fn from_array(names: &[&str], x: ndarray::ArrayView2<'_, f64>) -> Result<Self> {
        if names.len() != x.ncols() {
            let rule = format!("one name per column of the array ({} columns)", x.ncols());
            return Err(Error::invalid("table names", names.len(), rule));
        }
        let columns = names
            .iter()
            .zip(x.columns())
            .map(|(name, c)| (name.to_string(), Column::Numeric(c.to_vec())))
            .collect();
        Self::new(columns)
    }

    /// A table read from a file, whose columns were checked as they were
    /// read; `n` counts the rows also where no column was asked for.
    fn from_parts(names: Vec<String>, columns: Vec<Column>, n: usize) -> Self {
        Self { names, columns, n }
    }

    /// The number of rows.
    pub fn n(&self) -> usize {
        self.n
    }

    /// The column names, in order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The columns with their names, in order.
    pub fn columns(&self) -> impl Iterator<Item = (&str, &Column)> {
        self.names.iter().map(String::as_str).zip(&self.columns)
    }

    /// The column `name`, if there is one.
    pub fn column(&self, name: &str) -> Option<&Column> {
        self.names.iter().position(|n| n == name).map(|j| &self.columns[j])
    }

    /// The numeric column `name`: an error naming it if it is a factor or
    /// absent (listing the columns there are).
    pub fn numeric(&self, name: &str) -> Result<&[f64]> {
        match self.get(name)? {
            Column::Numeric(v) => Ok(v),
            Column::Factor { levels, .. } => Err(Error::invalid(
                format!("table column '{name}'"),
                format!("a factor of {} levels", levels.len()),
                "a numeric column is needed here",
            )),
        }
    }

    /// The factor column `name`: an error naming it if it is numeric or
    /// absent (listing the columns there are).
    pub fn factor(&self, name: &str) -> Result<Factor<'_>> {
        match self.get(name)? {
            Column::Factor { levels, codes } => Ok(Factor { levels, codes }),
            Column::Numeric(_) => Err(Error::invalid(
                format!("table column '{name}'"),
                "a numeric column",
                "a factor is needed here (R: factor(x)); numbers are not turned into levels silently",
            )),
        }
    }

    /// The rows `idx` (each below [`Table::n`], in the order given; repeats
    /// allowed), every factor keeping all its levels.
    pub fn rows(&self, idx: &[usize]) -> Result<Self> {
        if let Some(k) = idx.iter().position(|&i| i >= self.n) {
            let rule = format!("row indices must be below the number of rows ({})", self.n);
            return Err(Error::invalid(format!("rows[{k}]"), idx[k], rule));
        }
        Ok(self.select(idx.len(), || idx.iter().copied()))
    }

    /// The rows in `range` (a shard), every factor keeping all its levels.
    pub fn range(&self, range: Range<usize>) -> Result<Self> {
        if range.start > range.end || range.end > self.n {
            let rule = format!("a range of rows within 0..{}", self.n);
            return Err(Error::invalid("rows", format!("{range:?}"), rule));
        }
        Ok(self.select(range.len(), || range.clone()))
    }

    fn select<I: Iterator<Item = usize>>(&self, n: usize, idx: impl Fn() -> I) -> Self {
        let columns = self.columns.iter().map(|c| c.select(idx())).collect();
        Self::from_parts(self.names.clone(), columns, n)
    }

    fn get(&self, name: &str) -> Result<&Column> {
        self.column(name).ok_or_else(|| {
            let available = self
                .names
                .iter()
                .map(|n| format!("'{n}'"))
                .collect::<Vec<_>>()
                .join(", ");
            Error::invalid(
                format!("table column '{name}'"),
                name,
                format!("no such column; the table has: {available}"),
            )
        })
    }
}

/// The distinct strings of a factor as they arrive, coded in order of first
/// sight; [`Levels::finish`] sorts them and recodes.
#[derive(Default)]
pub(crate) struct Levels {
    index: HashMap<Box<str>, u32>,
    codes: Vec<u32>,
}

impl Levels {
    /// Code one value; `field` names it in the (only) error, a 2^32nd level.
    pub(crate) fn push(&mut self, value: &str, field: impl FnOnce() -> String) -> Result<()> {
        let code = match self.index.get(value) {
            Some(&c) => c,
            None => {
                let c = u32::try_from(self.index.len())
                    .map_err(|_| Error::invalid(field(), value, "a factor has at most 2^32 - 1 levels"))?;
                self.index.insert(value.into(), c);
                c
            }
        };
        self.codes.push(code);
        Ok(())
    }

    /// The factor, its levels sorted by their bytes (R's C-locale order).
    pub(crate) fn finish(self) -> Column {
        let mut seen: Vec<(Box<str>, u32)> = self.index.into_iter().collect();
        seen.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        let mut recode = vec![0u32; seen.len()];
        for (new, (_, old)) in seen.iter().enumerate() {
            // Fewer than 2^32 levels (push), so the index fits.
            recode[*old as usize] = new as u32;
        }
        Column::Factor {
            levels: seen.into_iter().map(|(l, _)| l.into_string()).collect(),
            codes: self.codes.into_iter().map(|c| recode[c as usize]).collect(),
        }
    }
}

/// The columns to read from a file of `names`: `wanted` (first mention
/// kept, each one there) or every column with a name. `field` names the
/// header in the error.
fn wanted_columns(field: &str, names: &[String], wanted: Option<&[String]>) -> Result<Vec<usize>> {
    let Some(wanted) = wanted else {
        return Ok((0..names.len()).filter(|&j| !names[j].is_empty()).collect());
    };
    let mut out: Vec<usize> = Vec::with_capacity(wanted.len());
    for want in wanted {
        let j = names
            .iter()
            .position(|n| !n.is_empty() && n == want)
            .ok_or_else(|| records::no_such_column(format!("{field}, column '{want}'"), want, names))?;
        if !out.contains(&j) {
            out.push(j);
        }
    }
    Ok(out)
}

/// A file of no data rows is refused: no model fits on it.
fn require_rows(file: &str, n: usize) -> Result<()> {
    if n == 0 {
        return Err(Error::invalid(
            format!("{file}: data rows"),
            0,
            "at least one data row is required",
        ));
    }
    Ok(())
}
