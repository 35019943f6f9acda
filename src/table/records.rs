//! The careful CSV record reader shared by [`crate::data`] and
//! [`crate::table`]: an encoding check, a quote check, a header of unique
//! names, records with their 1-based line and data row, and the wording of
//! the errors about them.
//!
//! The text is RFC 4180 CSV, read with the `csv` crate: fields may be
//! quoted (with commas, doubled quotes and line breaks inside), lines may
//! end in CRLF, a leading byte-order mark is ignored and whitespace around
//! fields is trimmed. Blank lines and lines of only separators are skipped
//! (the latter are listed: [`Records::empty_lines`]).

use std::borrow::Cow;
use std::collections::HashMap;

use crate::{Error, Result};

/// Where a value sits, for error messages.
#[derive(Clone, Debug)]
pub(crate) struct Location<'a> {
    pub file: &'a str,
    pub line: usize,
    pub row: usize,
}

impl Location<'_> {
    /// `file: line L (data row R)`.
    pub fn whole_row(&self) -> String {
        format!("{}: line {} (data row {})", self.file, self.line, self.row)
    }

    /// `file: line L (data row R), column 'c'`.
    pub fn cell(&self, column: &str) -> String {
        format!(
            "{}: line {} (data row {}), column '{column}'",
            self.file, self.line, self.row
        )
    }
}

/// The data records of a CSV text, one at a time, after its header.
pub(crate) struct Records<'a> {
    file: &'a str,
    bytes: &'a [u8],
    reader: csv::Reader<&'a [u8]>,
    lines: LineCounter<'a>,
    record: csv::ByteRecord,
    names: Vec<String>,
    empty: Vec<usize>,
    row: usize,
}

impl<'a> Records<'a> {
    /// Check the encoding and the quotes, and read the header. `file` (usually
    /// the path) leads every error's field.
    pub fn open(file: &'a str, bytes: &'a [u8]) -> Result<Self> {
        check_encoding(file, bytes)?;
        // A leading byte-order mark (spreadsheet exports) is not part of the first name.
        let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
        check_quotes(file, bytes)?;
        let reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .trim(csv::Trim::All)
            .from_reader(bytes);
        let mut records = Self {
            file,
            bytes,
            reader,
            lines: LineCounter::new(bytes),
            record: csv::ByteRecord::new(),
            names: Vec::new(),
            empty: Vec::new(),
            row: 0,
        };
        if !records.advance()? {
            return Err(Error::invalid(file, "", "the file is empty (no header row)"));
        }
        let line = records.line();
        records.names = parse_header(file, line, &records.record)?;
        Ok(records)
    }

    /// The header's names (unquoted; empty names are allowed, as R writes one
    /// for its row-name column).
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The next data record, checked to have the header's number of fields:
    /// its location, or `None` at the end.
    pub fn next_row(&mut self) -> Result<Option<Location<'a>>> {
        if !self.advance()? {
            return Ok(None);
        }
        self.row += 1;
        let at = Location {
            file: self.file,
            line: self.line(),
            row: self.row,
        };
        if self.record.len() != self.names.len() {
            let fields: Vec<Cow<'_, str>> = (0..self.record.len()).map(|j| self.text(j)).collect();
            let fields: Vec<&str> = fields.iter().map(|f| f.as_ref()).collect();
            return Err(field_count_error(&at, &self.names, &fields));
        }
        Ok(Some(at))
    }

    /// Field `j` of the current record, unquoted, with bytes that are not
    /// UTF-8 replaced (so that they are an error only where a value is used).
    pub fn text(&self, j: usize) -> Cow<'_, str> {
        let raw = self.record.get(j).unwrap_or_default();
        match std::str::from_utf8(raw) {
            Ok(s) => Cow::Borrowed(unquote(s)),
            Err(_) => Cow::Owned(unquote(&String::from_utf8_lossy(raw)).to_string()),
        }
    }

    /// Field `j` of the current record as UTF-8, unquoted; `None` if it is
    /// not UTF-8.
    pub fn str(&self, j: usize) -> Option<&str> {
        std::str::from_utf8(self.record.get(j).unwrap_or_default())
            .ok()
            .map(unquote)
    }

    /// The data rows read so far.
    pub fn rows(&self) -> usize {
        self.row
    }

    /// Lines (1-based) of the rows of only separators (`,,,`) skipped so far.
    pub fn empty_lines(&self) -> Vec<usize> {
        lines_of(self.bytes, &self.empty)
    }

    /// Read the next record that is not only separators into `self.record`.
    fn advance(&mut self) -> Result<bool> {
        loop {
            let more = self
                .reader
                .read_byte_record(&mut self.record)
                .map_err(|e| csv_error(self.file, &e))?;
            if !more {
                return Ok(false);
            }
            if !self.record.iter().all(<[u8]>::is_empty) {
                return Ok(true);
            }
            if self.record.len() > 1 {
                self.empty.push(self.record.position().map_or(0, |p| p.byte() as usize));
            }
        }
    }

    /// The current record's line: from its byte offset, past the empty lines
    /// the reader skipped before it (its own line count leaves them out),
    /// counted incrementally, so one pass over the text in all.
    fn line(&mut self) -> usize {
        let start = self.record.position().map_or(0, |p| p.byte() as usize);
        self.lines.line_at(start + line_breaks_at(self.bytes, start))
    }
}

/// The line breaks at `start` (a record's position points before them).
fn line_breaks_at(bytes: &[u8], start: usize) -> usize {
    bytes[start.min(bytes.len())..]
        .iter()
        .take_while(|&&b| b == b'\n' || b == b'\r')
        .count()
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
        .map(|&start| lines.line_at(start + line_breaks_at(bytes, start)))
        .collect()
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

/// The error for a requested column the header lacks, listing those it has.
pub(crate) fn no_such_column(field: String, want: &str, names: &[String]) -> Error {
    let available = names.iter().map(|n| format!("'{n}'")).collect::<Vec<_>>().join(", ");
    Error::invalid(field, want, format!("no such column; available columns: {available}"))
}
