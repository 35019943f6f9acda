//! [`Table::read_parquet`]: a Parquet file into numeric and factor columns,
//! through the `parquet` crate's column readers (no Arrow).

use std::fs::File;
use std::path::Path;

use parquet::basic::{ConvertedType, LogicalType, Type as Physical};
use parquet::column::reader::{ColumnReader, ColumnReaderImpl};
use parquet::data_type::{ByteArray, DataType};
use parquet::errors::ParquetError;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::schema::types::ColumnDescriptor;

use super::{require_rows, wanted_columns, Column, Levels, Table};
use crate::{Error, Result};

/// Values decoded at a time from a column chunk.
const BATCH: usize = 64 * 1024;

/// Integers beyond 2^53 in magnitude are not exact as f64.
const EXACT: i128 = 1 << 53;

impl Table {
    /// Read the `wanted` columns (in that order; `None`: every column) of a
    /// Parquet file, row group after row group.
    ///
    /// BOOLEAN (as 0/1), INT32, INT64 (integers of at most 2^53 in
    /// magnitude, exact as f64; signed, unsigned or DECIMAL, scaled), FLOAT
    /// and DOUBLE (finite) columns are numeric (DECIMAL also as fixed-length
    /// bytes, pyarrow's default); BYTE_ARRAY columns of UTF-8
    /// strings (or unannotated) are factors, levels sorted by bytes as in
    /// [`Table::read_csv`]. A null is an error naming the column and row;
    /// so are other types (dates, timestamps, INT96, fixed-length bytes:
    /// convert them to numbers first) and repeated (list) columns. Pages
    /// compressed with Snappy (pyarrow's, pandas' and DuckDB's default),
    /// zstd (polars'), LZ4 or gzip are read.
    pub fn read_parquet(path: &Path, wanted: Option<&[String]>) -> Result<Self> {
        let file_name = path.display().to_string();
        let file = &file_name;
        let cannot = |e: ParquetError| Error::invalid(file, "", format!("cannot read Parquet: {e}"));
        let handle = File::open(path).map_err(|e| Error::invalid(file, "", format!("cannot read file: {e}")))?;
        let reader = SerializedFileReader::new(handle).map_err(cannot)?;
        let meta = reader.metadata();
        let schema = meta.file_metadata().schema_descr();
        let names: Vec<String> = schema.columns().iter().map(|c| c.path().parts().join(".")).collect();
        let chosen = wanted_columns(&format!("{file}: schema"), &names, wanted)?;
        let mut sinks = chosen
            .iter()
            .map(|&j| Sink::new(file, &names[j], &schema.columns()[j]))
            .collect::<Result<Vec<_>>>()?;
        let mut first_row = 0;
        for g in 0..reader.num_row_groups() {
            let rows = usize::try_from(meta.row_group(g).num_rows()).unwrap_or(0);
            let group = reader.get_row_group(g).map_err(cannot)?;
            for (sink, &j) in sinks.iter_mut().zip(&chosen) {
                let column = group.get_column_reader(j).map_err(cannot)?;
                sink.read(column, first_row, rows).map_err(|e| e.or_parquet(file))?;
            }
            first_row += rows;
        }
        require_rows(file, first_row)?;
        let names = chosen.iter().map(|&j| names[j].clone()).collect();
        Ok(Table::from_parts(
            names,
            sinks.into_iter().map(Sink::finish).collect(),
            first_row,
        ))
    }
}

/// How a column's stored values become f64 or levels.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Bool,
    Signed,
    Unsigned,
    Decimal(i32),
    Float,
    Text,
}

impl Kind {
    /// The kind of a leaf column, or an error naming its type.
    fn of(field: &str, c: &ColumnDescriptor) -> Result<Self> {
        let refuse = |rule: &str| {
            let seen = match c.logical_type_ref() {
                Some(l) => format!("{} ({l:?})", c.physical_type()),
                None if c.converted_type() != ConvertedType::NONE => {
                    format!("{} ({})", c.physical_type(), c.converted_type())
                }
                None => c.physical_type().to_string(),
            };
            Err(Error::invalid(field, seen, rule))
        };
        if c.max_rep_level() > 0 {
            return refuse("a repeated (list) column: only flat columns of one value a row are read");
        }
        let unsupported = "a type a table does not hold: numbers (BOOLEAN, INT32, INT64, FLOAT, DOUBLE, DECIMAL) \
                           and UTF-8 strings are read; convert the column to a number first";
        let logical = c.logical_type_ref();
        let converted = c.converted_type();
        match c.physical_type() {
            Physical::BOOLEAN if logical.is_none() => Ok(Kind::Bool),
            Physical::INT32 | Physical::INT64 => match (logical, converted) {
                (Some(LogicalType::Decimal(_)), _) | (None, ConvertedType::DECIMAL) => {
                    Ok(Kind::Decimal(c.type_scale()))
                }
                (Some(LogicalType::Integer(t)), _) if !t.is_signed => Ok(Kind::Unsigned),
                (None, ConvertedType::UINT_8 | ConvertedType::UINT_16 | ConvertedType::UINT_32)
                | (None, ConvertedType::UINT_64) => Ok(Kind::Unsigned),
                (Some(LogicalType::Integer(_)), _) => Ok(Kind::Signed),
                (None, ConvertedType::NONE | ConvertedType::INT_8 | ConvertedType::INT_16)
                | (None, ConvertedType::INT_32 | ConvertedType::INT_64) => Ok(Kind::Signed),
                _ => refuse(unsupported),
            },
            Physical::FLOAT | Physical::DOUBLE if logical.is_none() => Ok(Kind::Float),
            Physical::FIXED_LEN_BYTE_ARRAY if matches!(logical, Some(LogicalType::Decimal(_))) => {
                Ok(Kind::Decimal(c.type_scale()))
            }
            Physical::BYTE_ARRAY => match (logical, converted) {
                (Some(LogicalType::String | LogicalType::Enum), _) => Ok(Kind::Text),
                (None, ConvertedType::NONE | ConvertedType::UTF8 | ConvertedType::ENUM) => Ok(Kind::Text),
                _ => refuse(unsupported),
            },
            _ => refuse(unsupported),
        }
    }
}

/// Where one wanted column's values go as they are read.
struct Sink {
    field: String,
    kind: Kind,
    max_def: i16,
    numbers: Vec<f64>,
    levels: Levels,
}

/// An error while reading values: ours (a null, a bad value) or the crate's.
enum ReadError {
    Ours(Error),
    Parquet(ParquetError),
}

impl ReadError {
    fn or_parquet(self, file: &str) -> Error {
        match self {
            ReadError::Ours(e) => e,
            ReadError::Parquet(e) => Error::invalid(file, "", format!("cannot read Parquet: {e}")),
        }
    }
}

impl From<Error> for ReadError {
    fn from(e: Error) -> Self {
        ReadError::Ours(e)
    }
}

impl From<ParquetError> for ReadError {
    fn from(e: ParquetError) -> Self {
        ReadError::Parquet(e)
    }
}

impl Sink {
    fn new(file: &str, name: &str, c: &ColumnDescriptor) -> Result<Self> {
        let field = format!("{file}: column '{name}'");
        Ok(Self {
            kind: Kind::of(&field, c)?,
            field,
            max_def: c.max_def_level(),
            numbers: Vec::new(),
            levels: Levels::default(),
        })
    }

    /// The column's chunk in one row group, whose first row is `first_row`.
    fn read(&mut self, column: ColumnReader, first_row: usize, rows: usize) -> std::result::Result<(), ReadError> {
        let kind = self.kind;
        match column {
            ColumnReader::BoolColumnReader(r) => self.each(r, first_row, rows, |_, _, b| Ok(f64::from(u8::from(*b)))),
            ColumnReader::Int32ColumnReader(r) => self.each(r, first_row, rows, |f, row, &x| match kind {
                Kind::Unsigned => Ok(f64::from(x as u32)),
                _ => integer(f, row, x.into(), kind),
            }),
            ColumnReader::Int64ColumnReader(r) => self.each(r, first_row, rows, |f, row, &x| match kind {
                // The stored bits are those of a u64.
                Kind::Unsigned if x < 0 => Err(inexact(f, row, (x as u64).to_string())),
                _ => integer(f, row, x.into(), kind),
            }),
            // A DECIMAL's unscaled value, big-endian two's complement (pyarrow's default).
            ColumnReader::FixedLenByteArrayColumnReader(r) => self.each(r, first_row, rows, |f, row, v| {
                let x = big_endian(v.data()).ok_or_else(|| inexact(f, row, format!("{} bytes", v.data().len())))?;
                integer(f, row, x, kind)
            }),
            ColumnReader::FloatColumnReader(r) => self.each(r, first_row, rows, |f, row, &x| finite(f, row, x.into())),
            ColumnReader::DoubleColumnReader(r) => self.each(r, first_row, rows, |f, row, &x| finite(f, row, x)),
            ColumnReader::ByteArrayColumnReader(r) => self.each_text(r, first_row, rows),
            // Kind::of refused every other physical type.
            _ => Err(Error::invalid(&self.field, "", "an unsupported physical type").into()),
        }
    }

    /// Numbers: each stored value through `convert` (field, 1-based row, value).
    fn each<T: DataType>(
        &mut self,
        reader: ColumnReaderImpl<T>,
        first_row: usize,
        rows: usize,
        convert: impl Fn(&str, usize, &T::T) -> Result<f64>,
    ) -> std::result::Result<(), ReadError> {
        let (field, numbers) = (&self.field, &mut self.numbers);
        numbers.reserve(rows);
        each_value(reader, field, self.max_def, first_row, rows, |row, v| {
            numbers.push(convert(field, row, v)?);
            Ok(())
        })
    }

    fn each_text(
        &mut self,
        reader: ColumnReaderImpl<parquet::data_type::ByteArrayType>,
        first_row: usize,
        rows: usize,
    ) -> std::result::Result<(), ReadError> {
        let (field, levels) = (&self.field, &mut self.levels);
        each_value(reader, field, self.max_def, first_row, rows, |row, v: &ByteArray| {
            let at = || format!("{field}, row {row}");
            let text = v.as_utf8().map_err(|_| {
                Error::invalid(at(), "bytes that are not UTF-8", "a factor's levels must be UTF-8 text")
            })?;
            levels.push(text, at)
        })
    }

    fn finish(self) -> Column {
        match self.kind {
            Kind::Text => self.levels.finish(),
            _ => Column::Numeric(self.numbers),
        }
    }
}

/// Every value of a column chunk of `rows` rows in order, with its 1-based
/// row in the file; a null (a definition level below the column's maximum)
/// is an error at its row.
fn each_value<T: DataType>(
    mut reader: ColumnReaderImpl<T>,
    field: &str,
    max_def: i16,
    first_row: usize,
    rows: usize,
    mut sink: impl FnMut(usize, &T::T) -> Result<()>,
) -> std::result::Result<(), ReadError> {
    let (mut values, mut defs) = (Vec::with_capacity(BATCH.min(rows)), Vec::new());
    let mut done = 0;
    while done < rows {
        values.clear();
        defs.clear();
        let levels = (max_def > 0).then_some(&mut defs);
        let (records, _, _) = reader.read_records(BATCH.min(rows - done), levels, None, &mut values)?;
        if records == 0 {
            let rule = format!("the row group holds {rows} rows, this column only {done}");
            return Err(Error::invalid(field, format!("row {}", first_row + done + 1), rule).into());
        }
        if let Some(k) = defs.iter().position(|&d| d < max_def) {
            return Err(Error::invalid(
                format!("{field}, row {}", first_row + done + k + 1),
                "null",
                "a missing value: drop or impute the row (mgcv would drop it silently)",
            )
            .into());
        }
        for (k, v) in values.iter().enumerate() {
            sink(first_row + done + k + 1, v)?;
        }
        done += records;
    }
    Ok(())
}

/// A big-endian two's complement integer of at most 16 bytes.
fn big_endian(bytes: &[u8]) -> Option<i128> {
    if bytes.is_empty() || bytes.len() > 16 {
        return None;
    }
    let fill = if bytes[0] & 0x80 != 0 { 0xff } else { 0 };
    let mut wide = [fill; 16];
    wide[16 - bytes.len()..].copy_from_slice(bytes);
    Some(i128::from_be_bytes(wide))
}

/// A stored integer as f64: exact (at most 2^53 in magnitude), a decimal scaled.
fn integer(field: &str, row: usize, x: i128, kind: Kind) -> Result<f64> {
    if !(-EXACT..=EXACT).contains(&x) {
        return Err(inexact(field, row, x.to_string()));
    }
    match kind {
        Kind::Decimal(scale) => finite(field, row, x as f64 / 10f64.powi(scale)),
        _ => Ok(x as f64),
    }
}

fn inexact(field: &str, row: usize, shown: String) -> Error {
    Error::invalid(
        format!("{field}, row {row}"),
        shown,
        "an integer beyond 2^53 in magnitude is not exact as a double; rescale it (or store it as DOUBLE)",
    )
}

fn finite(field: &str, row: usize, x: f64) -> Result<f64> {
    if x.is_finite() {
        Ok(x)
    } else {
        Err(Error::invalid(
            format!("{field}, row {row}"),
            x,
            "must be a finite number",
        ))
    }
}
