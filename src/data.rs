//! Loading a Bernoulli marginal-slope data set from a plain CSV file.
//!
//! The files are RFC 4180 CSV with one header row of column names, read by
//! the record reader this module shares with [`crate::table`] (encoding,
//! quotes, line numbers). Only the columns named in the [`ColumnSpec`] are parsed, so
//! other columns (ids, free text) may hold anything. Every rejected input is an
//! [`Error::InvalidInput`] whose field names the file, the line and data row,
//! and the column.

use std::path::Path;

use crate::table::records::{no_such_column, Location, Records};
use crate::{Error, Result};

/// Name of the intercept column added first to both designs.
pub const INTERCEPT: &str = "(Intercept)";

/// Which CSV columns feed which part of the model.
#[derive(Clone, Debug, Default)]
pub struct ColumnSpec {
    /// The 0/1 label column; empty: no label (new data to predict), and
    /// [`Dataset::y`] is then empty.
    pub label: String,
    /// The standardised score column.
    pub score: String,
    /// Optional weight column (each weight must be > 0); weights are 1 when absent.
    pub weights: Option<String>,
    /// Covariates of the marginal design (an intercept is added in front).
    pub marginal: Vec<String>,
    /// Covariates of the slope design (an intercept is added in front).
    pub slope: Vec<String>,
}

/// A validated data set: labels, scores, weights and the two row-major designs.
#[derive(Clone, Debug)]
pub struct Dataset {
    /// Number of data rows.
    pub n: usize,
    /// Labels, each 0.0 or 1.0 (empty when no label column was asked for).
    pub y: Vec<f64>,
    /// Scores.
    pub z: Vec<f64>,
    /// Weights, each finite and > 0.
    pub weights: Vec<f64>,
    /// Marginal design, n x p_m row-major, intercept column first.
    pub x_m: Vec<f64>,
    /// Slope design, n x p_g row-major, intercept column first.
    pub x_g: Vec<f64>,
    /// Marginal design width (1 + number of marginal covariates).
    pub p_m: usize,
    /// Slope design width (1 + number of slope covariates).
    pub p_g: usize,
    /// Column names of the marginal design, starting with [`INTERCEPT`].
    pub marginal_names: Vec<String>,
    /// Column names of the slope design, starting with [`INTERCEPT`].
    pub slope_names: Vec<String>,
    /// Lines (1-based) of rows whose every field was empty (`,,,`, as
    /// spreadsheets export), skipped like blank lines: not data rows, but
    /// counted here so that the caller can say so.
    pub empty_rows: Vec<usize>,
}

/// Read and validate a CSV file; see [`parse_csv`] for the rules.
///
/// An unreadable file (missing, a directory) is an error, not a panic; bytes
/// that are not UTF-8 are an error only where a used value holds them.
pub fn read_csv(path: &Path, spec: &ColumnSpec, min_rows: usize) -> Result<Dataset> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| Error::invalid(&name, "", format!("cannot read file: {e}")))?;
    parse_csv_bytes(&name, &bytes, spec, min_rows)
}

/// Parse and validate CSV text. `name_for_messages` (usually the path) leads
/// every error's field.
///
/// The text is RFC 4180 CSV, read with the `csv` crate: fields may be quoted
/// (with commas, doubled quotes and line breaks inside), lines may end in
/// CRLF, and a leading byte-order mark is ignored; whitespace around fields
/// is trimmed. Rules: a header row of unique names; every requested column
/// present; every data row with as many fields as the header; labels 0 or 1;
/// every used value a finite number; weights > 0; at least
/// `max(min_rows, 1)` data rows; no quote left open (an error naming its
/// line and column, where readers would silently make the rest of the file
/// one field); not UTF-16. Blank lines and lines of only separators are
/// skipped (they do not count as data rows; the latter are listed in
/// [`Dataset::empty_rows`]). Every error names the file, the line and the
/// column.
pub fn parse_csv(name_for_messages: &str, text: &str, spec: &ColumnSpec, min_rows: usize) -> Result<Dataset> {
    parse_csv_bytes(name_for_messages, text.as_bytes(), spec, min_rows)
}

/// [`parse_csv`] on bytes: columns that are not used may hold any bytes.
pub fn parse_csv_bytes(name_for_messages: &str, bytes: &[u8], spec: &ColumnSpec, min_rows: usize) -> Result<Dataset> {
    let file = name_for_messages;
    let mut records = Records::open(file, bytes)?;
    let names = records.names().to_vec();
    let cols = Columns::resolve(file, &names, spec)?;
    let mut acc = Accumulator::new(spec);
    while let Some(at) = records.next_row()? {
        let get = |j: usize| number(&at, &names[j], &records.text(j));
        acc.push_row(&|c| at.cell(c), &get, &names, &cols)?;
    }
    let mut ds = acc.finish(file, min_rows)?;
    ds.empty_rows = records.empty_lines();
    Ok(ds)
}

/// A data set from named numeric columns in memory (a front end's
/// arrays), by [`parse_csv`]'s rules: every requested column present and
/// of one length, labels 0 or 1, used values finite, weights > 0, at least
/// `max(min_rows, 1)` rows. Errors name `name`, the row (0-based, as the
/// arrays index it) and the column.
pub fn from_columns(name: &str, columns: &[(&str, &[f64])], spec: &ColumnSpec, min_rows: usize) -> Result<Dataset> {
    let names: Vec<String> = columns.iter().map(|(c, _)| c.to_string()).collect();
    if let Some(j) = (1..names.len()).find(|&j| names[..j].contains(&names[j])) {
        return Err(Error::invalid(
            format!("{name}: column '{}'", names[j]),
            &names[j],
            "listed twice",
        ));
    }
    let cols = Columns::resolve(name, &names, spec)?;
    let n = columns.first().map_or(0, |(_, v)| v.len());
    if let Some((c, v)) = columns.iter().find(|(_, v)| v.len() != n) {
        let rule = format!("every column must have the rows of '{}' ({n})", columns[0].0);
        return Err(Error::invalid(
            format!("{name}: column '{c}'"),
            format!("{} rows", v.len()),
            rule,
        ));
    }
    let mut acc = Accumulator::new(spec);
    for i in 0..n {
        let cell = |c: &str| format!("{name}: row {i}, column '{c}'");
        let get = |j: usize| finite(cell(&names[j]), columns[j].1[i]);
        acc.push_row(&cell, &get, &names, &cols)?;
    }
    acc.finish(name, min_rows)
}

/// A value that must be finite (`field` names its cell).
fn finite(field: String, v: f64) -> Result<f64> {
    match v.is_finite() {
        true => Ok(v),
        false => Err(Error::invalid(field, v, "must be finite")),
    }
}

/// The note that says which lines of only separators (`,,,`) the reader
/// skipped ([`Dataset::empty_rows`]), at most 10 named; `None` for none.
pub fn empty_rows_note(file: &str, lines: &[usize]) -> Option<String> {
    let shown: Vec<String> = lines.iter().take(10).map(usize::to_string).collect();
    let more = if lines.len() > 10 { ", ..." } else { "" };
    (!lines.is_empty()).then(|| {
        format!(
            "{file}: {} rows of only empty fields skipped (lines {}{more})",
            lines.len(),
            shown.join(", ")
        )
    })
}

/// Field indices of every requested column.
struct Columns {
    label: Option<usize>,
    score: usize,
    weights: Option<usize>,
    marginal: Vec<usize>,
    slope: Vec<usize>,
}

impl Columns {
    fn resolve(file: &str, names: &[String], spec: &ColumnSpec) -> Result<Self> {
        let find = |role: &str, want: &str| -> Result<usize> {
            names
                .iter()
                .position(|n| !n.is_empty() && n == want)
                .ok_or_else(|| no_such_column(format!("{file}: header, column '{want}' ({role})"), want, names))
        };
        let list = |role: &str, wanted: &[String]| -> Result<Vec<usize>> {
            check_unique(file, role, wanted)?;
            check_roles(file, role, wanted, spec)?;
            wanted.iter().map(|c| find(role, c)).collect()
        };
        Ok(Self {
            label: (!spec.label.is_empty())
                .then(|| find("label", &spec.label))
                .transpose()?,
            score: find("score", &spec.score)?,
            weights: spec.weights.as_deref().map(|w| find("weights", w)).transpose()?,
            marginal: list("marginal", &spec.marginal)?,
            slope: list("slope", &spec.slope)?,
        })
    }
}

/// The label, the score or the weights given as a covariate: each has its
/// own place in the model, and as a covariate would separate the labels or
/// fit the score twice.
fn check_roles(file: &str, role: &str, wanted: &[String], spec: &ColumnSpec) -> Result<()> {
    let field = |c: &str| format!("{file}: {role} covariates, column '{c}'");
    for c in wanted {
        if *c == spec.score {
            return Err(Error::invalid(
                field(c),
                c,
                "is the score: the score enters the model through the slope (b z) and the score warp H(z); as a \
                 covariate it would enter twice. Drop it (a non-linear score effect is the warp's, --score-basis)",
            ));
        }
        if !spec.label.is_empty() && *c == spec.label {
            return Err(Error::invalid(
                field(c),
                c,
                "is the label: a covariate equal to the label separates it exactly; drop it",
            ));
        }
        if spec.weights.as_deref() == Some(c.as_str()) {
            return Err(Error::invalid(
                field(c),
                c,
                "is the weight column; drop one of the two uses",
            ));
        }
    }
    Ok(())
}

/// A covariate listed twice in one design would make that design singular.
fn check_unique(file: &str, role: &str, wanted: &[String]) -> Result<()> {
    for (j, c) in wanted.iter().enumerate() {
        if wanted[..j].contains(c) {
            let field = format!("{file}: {role} covariates, column '{c}'");
            return Err(Error::invalid(field, c, "listed more than once in the same design"));
        }
    }
    Ok(())
}

/// Parse one cell as a finite number.
fn number(at: &Location, column: &str, raw: &str) -> Result<f64> {
    let v: f64 = raw
        .parse()
        .map_err(|_| Error::invalid(at.cell(column), format!("'{raw}'"), "not a number"))?;
    if !v.is_finite() {
        return Err(Error::invalid(at.cell(column), raw, "must be finite"));
    }
    Ok(v)
}

/// A label must be 0 or 1 (`field` names its cell).
fn label(field: String, y: f64) -> Result<f64> {
    if y != 0.0 && y != 1.0 {
        return Err(Error::invalid(field, y, "label must be 0 or 1"));
    }
    Ok(y)
}

/// A weight must be > 0: a zero weight drops the row silently, a negative one breaks convexity.
fn positive(field: String, w: f64) -> Result<f64> {
    if w > 0.0 {
        Ok(w)
    } else {
        Err(Error::invalid(field, w, "weight must be > 0"))
    }
}

/// The columns of the data set, filled row by row.
struct Accumulator {
    ds: Dataset,
}

impl Accumulator {
    fn new(spec: &ColumnSpec) -> Self {
        let with_intercept = |cols: &[String]| {
            std::iter::once(INTERCEPT.to_string())
                .chain(cols.iter().cloned())
                .collect::<Vec<_>>()
        };
        let (marginal_names, slope_names) = (with_intercept(&spec.marginal), with_intercept(&spec.slope));
        let ds = Dataset {
            n: 0,
            y: vec![],
            z: vec![],
            weights: vec![],
            x_m: vec![],
            x_g: vec![],
            p_m: marginal_names.len(),
            p_g: slope_names.len(),
            marginal_names,
            slope_names,
            empty_rows: vec![],
        };
        Self { ds }
    }

    /// One row; `get(j)` is the number in field j (only the used ones are
    /// asked for), `cell(c)` names this row's cell of column c in errors.
    fn push_row(
        &mut self,
        cell: &dyn Fn(&str) -> String,
        get: &dyn Fn(usize) -> Result<f64>,
        names: &[String],
        cols: &Columns,
    ) -> Result<()> {
        let y = cols.label.map(|j| label(cell(&names[j]), get(j)?)).transpose()?;
        let z = get(cols.score)?;
        let w = match cols.weights {
            Some(j) => positive(cell(&names[j]), get(j)?)?,
            None => 1.0,
        };
        let ds = &mut self.ds;
        ds.x_m.push(1.0);
        for &j in &cols.marginal {
            ds.x_m.push(get(j)?);
        }
        ds.x_g.push(1.0);
        for &j in &cols.slope {
            ds.x_g.push(get(j)?);
        }
        ds.y.extend(y);
        ds.z.push(z);
        ds.weights.push(w);
        ds.n += 1;
        Ok(())
    }

    fn finish(self, file: &str, min_rows: usize) -> Result<Dataset> {
        let need = min_rows.max(1);
        if self.ds.n < need {
            let rule = format!("at least {need} data rows are required (one per coefficient of the model)");
            return Err(Error::invalid(format!("{file}: data rows"), self.ds.n, rule));
        }
        Ok(self.ds)
    }
}
