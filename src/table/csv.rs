//! [`Table::read_csv`]: a CSV file into numeric and factor columns.

use std::path::Path;

use super::records::{Location, Records};
use super::{require_rows, wanted_columns, Column, Levels, Table};
use crate::{Error, Result};

impl Table {
    /// Read a CSV file with a header row; see [`Table::parse_csv`] for the rules.
    /// An unreadable file (missing, a directory) is an error naming it.
    pub fn read_csv(path: &Path, wanted: Option<&[String]>) -> Result<Self> {
        let name = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| Error::invalid(&name, "", format!("cannot read file: {e}")))?;
        Self::parse_csv(&name, &bytes, wanted)
    }

    /// Parse CSV bytes; `name` (usually the path) leads every error's field.
    ///
    /// The file is RFC 4180 CSV as [`crate::data`] reads it (quoted fields
    /// with commas, quotes and line breaks; CRLF; a UTF-8 byte-order mark;
    /// whitespace trimmed; a quote left open, a UTF-16 file, a row of the
    /// wrong width and a duplicate name are errors naming the line). Only
    /// the `wanted` columns (in that order; `None`: every named column) are
    /// parsed, so others may hold anything. Rules for a wanted column:
    ///
    /// - every value a finite number: numeric (`inf`, `nan` and numbers
    ///   beyond the range of f64 are errors);
    /// - no more numbers than other values: a factor (levels sorted by bytes);
    /// - more numbers than other values, and some of those: an error naming
    ///   the first value that is not a number (R would make the column a
    ///   factor and the numbers its levels, without a word);
    /// - an empty cell or `NA` (R's missing value) anywhere: an error naming
    ///   the cell (drop or impute the row), where mgcv would drop the row
    ///   silently; so is a row of only separators (`,,,`).
    ///
    /// At least one data row is required.
    pub fn parse_csv(name: &str, bytes: &[u8], wanted: Option<&[String]>) -> Result<Self> {
        let first = Pass::read(name, bytes, wanted, &[])?;
        let again = first.lost_text()?;
        let pass = if again.is_empty() {
            first
        } else {
            // Factors whose first values looked like numbers kept those as
            // numbers only: read them again as text from the first row.
            Pass::read(name, bytes, wanted, &again)?
        };
        pass.finish()
    }
}

/// One reading of the file: the wanted columns, as far as they are known.
struct Pass {
    names: Vec<String>,
    cells: Vec<Cells>,
    n: usize,
}

impl Pass {
    /// Read every row; the columns in `as_text` (field indices) as text from the start.
    fn read(file: &str, bytes: &[u8], wanted: Option<&[String]>, as_text: &[usize]) -> Result<Self> {
        let mut records = Records::open(file, bytes)?;
        let chosen = wanted_columns(&format!("{file}: header"), records.names(), wanted)?;
        let mut cells: Vec<Cells> = chosen
            .iter()
            .map(|&j| Cells::new(j, &records.names()[j], as_text.contains(&j)))
            .collect();
        while let Some(at) = records.next_row()? {
            for c in &mut cells {
                c.push(&at, records.str(c.field))?;
            }
        }
        if let Some(line) = records.empty_lines().first() {
            return Err(Error::invalid(
                format!("{file}: line {line}"),
                "a row of only empty fields",
                "every value is missing: delete the row",
            ));
        }
        require_rows(file, records.rows())?;
        let names = cells.iter().map(|c| c.name.clone()).collect();
        Ok(Self {
            names,
            cells,
            n: records.rows(),
        })
    }

    /// Check each column's mix of numbers and text; the field indices of
    /// factors whose earlier values were kept as numbers only.
    fn lost_text(&self) -> Result<Vec<usize>> {
        for c in &self.cells {
            c.check_mix()?;
        }
        Ok(self.cells.iter().filter(|c| c.lost).map(|c| c.field).collect())
    }

    fn finish(self) -> Result<Table> {
        self.lost_text()?;
        let columns = self.cells.into_iter().map(Cells::finish).collect();
        Ok(Table::from_parts(self.names, columns, self.n))
    }
}

/// One wanted column as it is read: numbers while every value is one,
/// text (a factor's levels) from the first that is not.
struct Cells {
    field: usize,
    name: String,
    numbers: Vec<f64>,
    text: Option<Levels>,
    numeric_cells: usize,
    text_cells: usize,
    first_text: Option<(String, String)>,
    lost: bool,
}

impl Cells {
    fn new(field: usize, name: &str, as_text: bool) -> Self {
        Self {
            field,
            name: name.to_string(),
            numbers: Vec::new(),
            text: as_text.then(Levels::default),
            numeric_cells: 0,
            text_cells: 0,
            first_text: None,
            lost: false,
        }
    }

    /// One cell (`None`: not UTF-8).
    fn push(&mut self, at: &Location, raw: Option<&str>) -> Result<()> {
        let cell = || at.cell(&self.name);
        let raw = raw.ok_or_else(|| Error::invalid(cell(), "bytes that are not UTF-8", "save the file as UTF-8"))?;
        if raw.is_empty() || raw == "NA" {
            let shown = if raw.is_empty() { "an empty cell" } else { "NA" };
            return Err(Error::invalid(
                cell(),
                shown,
                "a missing value: drop or impute the row (mgcv would drop it silently)",
            ));
        }
        match raw.parse::<f64>() {
            Ok(x) if !x.is_finite() => Err(Error::invalid(
                cell(),
                format!("'{raw}'"),
                "must be a finite number (inf, nan and numbers beyond 1.8e308 are refused)",
            )),
            Ok(x) => {
                self.numeric_cells += 1;
                match &mut self.text {
                    None => self.numbers.push(x),
                    Some(levels) => levels.push(raw, cell)?,
                }
                Ok(())
            }
            Err(_) => {
                self.text_cells += 1;
                if self.first_text.is_none() {
                    self.first_text = Some((cell(), raw.to_string()));
                }
                if self.text.is_none() {
                    self.lost = !self.numbers.is_empty();
                    self.numbers = Vec::new();
                    self.text = Some(Levels::default());
                }
                // Some just above.
                self.text.as_mut().map_or(Ok(()), |levels| levels.push(raw, cell))
            }
        }
    }

    /// A column of mostly numbers with some other values is an error at the first of those.
    fn check_mix(&self) -> Result<()> {
        match &self.first_text {
            Some((field, value)) if self.numeric_cells > self.text_cells => Err(Error::invalid(
                field.clone(),
                format!("'{value}'"),
                format!(
                    "not a number, in a column of mostly numbers ({} of {} values are numbers, {} are not; this \
                     is the first): correct or drop the row (R would make the column a factor)",
                    self.numeric_cells,
                    self.numeric_cells + self.text_cells,
                    self.text_cells
                ),
            )),
            _ => Ok(()),
        }
    }

    fn finish(self) -> Column {
        match self.text {
            Some(levels) => levels.finish(),
            None => Column::Numeric(self.numbers),
        }
    }
}
