//! Loading a Bernoulli marginal-slope data set from a plain CSV file.
//!
//! The files are simple: comma-separated, one header row of column names
//! (optionally double-quoted), optional whitespace around every field, no
//! embedded commas. Only the columns named in the [`ColumnSpec`] are parsed, so
//! other columns (ids, free text) may hold anything. Every rejected input is an
//! [`Error::InvalidInput`] whose field names the file, the line and data row,
//! and the column.

use std::collections::HashMap;
use std::path::Path;

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
    check_encoding(file, bytes)?;
    // A leading byte-order mark (spreadsheet exports) is not part of the first name.
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    check_quotes(file, bytes)?;
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(bytes);
    let mut empty = Vec::new();
    let mut records = reader.byte_records().filter_map(|r| match r {
        // A line of only separators: its position, to count it below.
        Ok(rec) if rec.iter().all(<[u8]>::is_empty) => {
            if rec.len() > 1 {
                empty.push(rec.position().map_or(0, |p| p.byte() as usize));
            }
            None
        }
        other => Some(other),
    });
    // Lines from the record's byte offset, past the empty lines the reader
    // skipped before it (its own line count leaves them out), counted
    // incrementally: one pass over the text.
    let mut lines = LineCounter::new(bytes);
    let mut line_of = |rec: &csv::ByteRecord| {
        rec.position().map_or(0, |p| {
            let start = p.byte() as usize;
            let skipped = bytes[start.min(bytes.len())..]
                .iter()
                .take_while(|&&b| b == b'\n' || b == b'\r')
                .count();
            lines.line_at(start + skipped)
        })
    };
    let header = records
        .next()
        .ok_or_else(|| Error::invalid(file, "", "the file is empty (no header row)"))?
        .map_err(|e| csv_error(file, &e))?;
    let names = parse_header(file, line_of(&header), &header)?;
    let cols = Columns::resolve(file, &names, spec)?;
    let mut acc = Accumulator::new(spec);
    for (row, rec) in records.by_ref().enumerate() {
        let rec = rec.map_err(|e| csv_error(file, &e))?;
        let at = Location {
            file,
            line: line_of(&rec),
            row: row + 1,
        };
        let fields: Vec<std::borrow::Cow<'_, str>> = rec.iter().map(String::from_utf8_lossy).collect();
        let fields: Vec<&str> = fields.iter().map(|f| unquote(f)).collect();
        if fields.len() != names.len() {
            return Err(field_count_error(&at, &names, &fields));
        }
        acc.push_row(&at, &names, &fields, &cols)?;
    }
    drop(records);
    let mut ds = acc.finish(file, min_rows)?;
    ds.empty_rows = lines_of(bytes, &empty);
    Ok(ds)
}

/// A record with the wrong number of fields; where a quoted field holds
/// separators or line breaks (a quote opened by mistake and closed by a
/// later one swallows them), that field's column and lines are named too.
fn field_count_error(at: &Location, names: &[String], fields: &[&str]) -> Error {
    let mut rule = format!(
        "expected {} fields (as in the header), found {}",
        names.len(),
        fields.len()
    );
    if let Some(j) = fields.iter().position(|f| f.contains([',', '\n'])) {
        let column = names
            .get(j)
            .map_or(format!("field {}", j + 1), |n| format!("column '{n}'"));
        let (first, last) = (at.line, at.line + fields[j].matches('\n').count());
        let lines = if last > first {
            format!("lines {first}-{last}")
        } else {
            format!("line {first}")
        };
        rule += &format!("; {column} holds a quoted value with separators in it ({lines}): check its quotes");
    }
    let mut shown: String = fields.join(",").chars().take(200).collect();
    if shown.len() < fields.iter().map(|f| f.len() + 1).sum::<usize>() - 1 {
        shown += "...";
    }
    Error::invalid(at.whole_row(), shown, rule)
}

/// 1-based lines of increasing byte offsets (past the line breaks before
/// each, as the reader's positions point at them).
fn lines_of(bytes: &[u8], offsets: &[usize]) -> Vec<usize> {
    let mut lines = LineCounter::new(bytes);
    offsets
        .iter()
        .map(|&start| {
            let skipped = bytes[start.min(bytes.len())..]
                .iter()
                .take_while(|&&b| b == b'\n' || b == b'\r')
                .count();
            lines.line_at(start + skipped)
        })
        .collect()
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

/// A UTF-16 or UTF-32 file (a byte-order mark, or NUL bytes, which no text
/// CSV holds) is named as such, with what to do.
fn check_encoding(file: &str, bytes: &[u8]) -> Result<()> {
    let head = &bytes[..bytes.len().min(4096)];
    let bom = if head.starts_with(b"\xff\xfe") || head.starts_with(b"\xfe\xff") {
        Some("a UTF-16 byte-order mark")
    } else {
        head.contains(&0).then_some("NUL bytes")
    };
    match bom {
        Some(seen) => Err(Error::invalid(
            format!("{file}: encoding"),
            seen,
            "the file looks UTF-16 (or UTF-32) encoded; CSV is read as UTF-8: save or export it as UTF-8 \
             (for example `iconv -f UTF-16 -t UTF-8`)",
        )),
        None => Ok(()),
    }
}

/// A quote opened at the start of a field and never closed makes the rest
/// of the file one field (RFC 4180 readers, the `csv` crate among them,
/// say nothing): an error naming the line and field where it opened. The
/// states follow the `csv` crate's: a quote opens a field only as its first
/// byte, a doubled quote inside is a quote.
fn check_quotes(file: &str, bytes: &[u8]) -> Result<()> {
    #[derive(PartialEq)]
    enum State {
        Start,
        Unquoted,
        Quoted,
        QuoteInQuoted,
    }
    let (mut state, mut opened, mut field) = (State::Start, 0, 0usize);
    let (mut open_field, mut line, mut open_line) = (0, 1, 1);
    for (i, &b) in bytes.iter().enumerate() {
        let ends = b == b',' || b == b'\n' || b == b'\r';
        state = match state {
            State::Start | State::Unquoted | State::QuoteInQuoted if ends => {
                field = if b == b',' { field + 1 } else { 0 };
                State::Start
            }
            State::Start if b == b'"' => {
                (opened, open_field, open_line) = (i, field, line);
                State::Quoted
            }
            State::Quoted if b == b'"' => State::QuoteInQuoted,
            State::QuoteInQuoted if b == b'"' => State::Quoted,
            State::Quoted => State::Quoted,
            _ => State::Unquoted,
        };
        line += usize::from(b == b'\n');
    }
    if state != State::Quoted {
        return Ok(());
    }
    let header = csv::ReaderBuilder::new()
        .has_headers(false)
        .from_reader(&bytes[..opened])
        .byte_records()
        .next()
        .and_then(|r| r.ok());
    let name = header
        .as_ref()
        .filter(|_| open_line > 1)
        .and_then(|h| h.get(open_field))
        .map_or(format!("field {}", open_field + 1), |n| {
            format!("column '{}'", unquote(&String::from_utf8_lossy(n)))
        });
    let tail = &bytes[opened..];
    let rest = tail.iter().filter(|&&b| b == b'\n').count() + usize::from(!tail.ends_with(b"\n"));
    Err(Error::invalid(
        format!("{file}: line {open_line}, {name}"),
        "an opening quote (\")",
        format!(
            "the quote is never closed, so the rest of the file ({rest} lines) would be one field; close it or \
             remove it"
        ),
    ))
}

/// 1-based line numbers of byte offsets, for offsets that only grow.
struct LineCounter<'a> {
    bytes: &'a [u8],
    offset: usize,
    line: usize,
}

impl<'a> LineCounter<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self {
            bytes,
            offset: 0,
            line: 1,
        }
    }

    fn line_at(&mut self, offset: usize) -> usize {
        let end = offset.min(self.bytes.len()).max(self.offset);
        self.line += self.bytes[self.offset..end].iter().filter(|&&b| b == b'\n').count();
        self.offset = end;
        self.line
    }
}

/// A field quoted with spaces outside its quotes (` "y"`), which RFC 4180
/// leaves as written, loses the quotes too, as spreadsheet users expect.
fn unquote(field: &str) -> &str {
    let t = field.trim();
    match t.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
        Some(inner) if t.len() >= 2 => inner.trim(),
        _ => t,
    }
}

/// A malformed record (an unterminated quote, say), with its line.
fn csv_error(file: &str, e: &csv::Error) -> Error {
    let line = e.position().map_or(String::new(), |p| format!(": line {}", p.line()));
    Error::invalid(format!("{file}{line}"), "", format!("malformed CSV: {e}"))
}

/// Where a value sits, for error messages.
struct Location<'a> {
    file: &'a str,
    line: usize,
    row: usize,
}

impl Location<'_> {
    fn whole_row(&self) -> String {
        format!("{}: line {} (data row {})", self.file, self.line, self.row)
    }
    fn cell(&self, column: &str) -> String {
        format!(
            "{}: line {} (data row {}), column '{column}'",
            self.file, self.line, self.row
        )
    }
}

/// Header names, rejecting duplicates. Empty names are allowed (R writes one
/// for its row-name column) but can never be requested.
fn parse_header(file: &str, line: usize, header: &csv::ByteRecord) -> Result<Vec<String>> {
    let names: Vec<String> = header
        .iter()
        .map(|f| unquote(&String::from_utf8_lossy(f)).to_string())
        .collect();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (j, name) in names.iter().enumerate().filter(|(_, n)| !n.is_empty()) {
        if let Some(first) = seen.insert(name.as_str(), j) {
            let field = format!("{file}: line {line} (header), column '{name}'");
            let rule = format!("duplicate column name (fields {} and {})", first + 1, j + 1);
            return Err(Error::invalid(field, name, rule));
        }
    }
    Ok(names)
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
            names.iter().position(|n| !n.is_empty() && n == want).ok_or_else(|| {
                let available = names.iter().map(|n| format!("'{n}'")).collect::<Vec<_>>().join(", ");
                let field = format!("{file}: header, column '{want}' ({role})");
                Error::invalid(field, want, format!("no such column; available columns: {available}"))
            })
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

/// A label must be 0 or 1.
fn label(at: &Location, column: &str, raw: &str) -> Result<f64> {
    let y = number(at, column, raw)?;
    if y != 0.0 && y != 1.0 {
        return Err(Error::invalid(at.cell(column), y, "label must be 0 or 1"));
    }
    Ok(y)
}

/// A weight must be > 0: a zero weight drops the row silently, a negative one breaks convexity.
fn positive(at: &Location, column: &str, w: f64) -> Result<f64> {
    if w > 0.0 {
        Ok(w)
    } else {
        Err(Error::invalid(at.cell(column), w, "weight must be > 0"))
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

    fn push_row(&mut self, at: &Location, names: &[String], fields: &[&str], cols: &Columns) -> Result<()> {
        let get = |j: usize| number(at, &names[j], fields[j]);
        let y = cols.label.map(|j| label(at, &names[j], fields[j])).transpose()?;
        let z = get(cols.score)?;
        let w = match cols.weights {
            Some(j) => positive(at, &names[j], get(j)?)?,
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
