//! Data tables: CSV and Parquet into named numeric and factor columns.
//!
//! The files under `tests/data/table` were written by pyarrow and pandas
//! (`python3 tools/table_files.py tests/data/table`), an implementation
//! independent of the reader; the factor orders are R's.

use std::path::{Path, PathBuf};

use matfree::table::{Column, Table};
use matfree::Error;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/table")
        .join(name)
}

fn csv(text: &str, wanted: Option<&[&str]>) -> matfree::Result<Table> {
    let wanted: Option<Vec<String>> = wanted.map(|w| w.iter().map(|s| s.to_string()).collect());
    Table::parse_csv("data.csv", text.as_bytes(), wanted.as_deref())
}

/// The (field, value, rule) of an input error; panics on success or another error kind.
fn invalid(r: matfree::Result<Table>) -> (String, String, String) {
    match r {
        Err(Error::InvalidInput { field, value, rule }) => (field, value, rule),
        Err(e) => panic!("expected InvalidInput, got {e}"),
        Ok(t) => panic!("expected an error, got a table of {} rows", t.n()),
    }
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// The values of `mixed.*` (tools/table_files.py) computed here, row `i`.
fn expected_numbers(i: usize) -> [(&'static str, f64); 8] {
    let x = i as f64;
    [
        ("i32", x * 3.0 - 70.0),
        ("i64", (x - 25.0) * 123_456_789.0),
        ("u8", (i % 7) as f64),
        ("f32", x * 0.25 - 3.0),
        ("f64", (x * 0.1 - 2.0).powi(3)),
        ("flag", f64::from(u8::from(i.is_multiple_of(3)))),
        ("dec", x * 1.25 - 10.0),
        ("opt", x),
    ]
}

/// R (LC_COLLATE=C): levels(factor(read.csv("mixed.csv")$g)) and the first
/// ten as.integer codes (6 1 7 4 2 5 3 6 1 7, 1-based).
const R_LEVELS_G: [&str; 7] = ["10", "9", "B", "a", "a b", "b", "é"];
const R_CODES_G: [u32; 10] = [5, 0, 6, 3, 1, 4, 2, 5, 0, 6];

fn check_mixed(t: &Table) {
    assert_eq!(t.n(), 50);
    for i in 0..50 {
        for (name, want) in expected_numbers(i) {
            let got = t.numeric(name).unwrap()[i];
            // f64 is x^3 computed in Python and here: equal to the last bit or two.
            assert!(
                (got - want).abs() <= 1e-15 * want.abs().max(1.0),
                "{name}[{i}]: {got} vs {want}"
            );
        }
    }
    let g = t.factor("g").unwrap();
    assert_eq!(g.levels, R_LEVELS_G);
    assert_eq!(&g.codes[..10], R_CODES_G);
    let h = t.factor("h").unwrap();
    assert_eq!(h.levels, ["x", "y, with comma"]);
    assert!(h
        .codes
        .iter()
        .enumerate()
        .all(|(i, &c)| c == u32::from(i.is_multiple_of(4))));
}

#[test]
fn pyarrow_parquet_reads_as_computed() {
    let t = Table::read_parquet(&data("mixed.parquet"), None).unwrap();
    assert_eq!(
        t.names(),
        strings(&["i32", "i64", "u8", "f32", "f64", "flag", "dec", "opt", "g", "h"])
    );
    check_mixed(&t);
}

#[test]
fn pandas_csv_reads_as_computed() {
    let t = Table::read_csv(&data("mixed.csv"), None).unwrap();
    check_mixed(&t);
}

#[test]
fn csv_and_parquet_of_the_same_data_give_the_same_table() {
    let a = Table::read_csv(&data("mixed.csv"), None).unwrap();
    let b = Table::read_parquet(&data("mixed.parquet"), None).unwrap();
    assert_eq!(a, b);
    for codec in ["zstd", "lz4", "gzip", "none"] {
        let c = Table::read_parquet(&data(&format!("compressed_{codec}.parquet")), None).unwrap();
        assert_eq!(c, b, "{codec}");
    }
}

#[test]
fn wanted_columns_in_their_order_and_others_unread() {
    let wanted = strings(&["h", "f64", "h"]);
    let t = Table::read_parquet(&data("mixed.parquet"), Some(&wanted)).unwrap();
    assert_eq!(t.names(), ["h", "f64"]);
    let c = Table::read_csv(&data("mixed.csv"), Some(&wanted)).unwrap();
    assert_eq!(c, t);
    // A column that is not wanted may hold anything, bad bytes included.
    let mut bytes = b"junk,x\n".to_vec();
    bytes.extend_from_slice(b"\xff\xfe\",1\n,2\nNA,3\n");
    let t = Table::parse_csv("data.csv", &bytes, Some(&strings(&["x"]))).unwrap();
    assert_eq!(t.numeric("x").unwrap(), [1.0, 2.0, 3.0]);
    // An absent column is named, with the columns there are.
    let (field, value, rule) = invalid(csv("a,b\n1,2\n", Some(&["c"])));
    assert_eq!((field.as_str(), value.as_str()), ("data.csv: header, column 'c'", "c"));
    assert!(rule.contains("'a', 'b'"), "{rule}");
    let (field, _, rule) = invalid(Table::read_parquet(&data("mixed.parquet"), Some(&strings(&["zz"]))));
    assert!(
        field.ends_with("mixed.parquet: schema, column 'zz'") && rule.contains("'i32'"),
        "{field}: {rule}"
    );
}

#[test]
fn factor_levels_sort_as_r_does_in_the_c_locale() {
    // R: Sys.setlocale("LC_COLLATE", "C"); levels(factor(c("b", "a", "B", "é", "a b", "_", "Z")))
    let t = csv("f\nb\na\nB\né\na b\n_\nZ\na\n", None).unwrap();
    let f = t.factor("f").unwrap();
    assert_eq!(f.levels, ["B", "Z", "_", "a", "a b", "b", "é"]);
    assert_eq!(f.codes, [5, 3, 0, 6, 4, 2, 1, 3]);
    let Column::Factor { levels, codes } = Column::factor(&["b", "a", "b"]).unwrap() else {
        panic!("a factor")
    };
    assert_eq!((levels, codes), (strings(&["a", "b"]), vec![1, 0, 1]));
}

#[test]
fn a_factor_whose_first_values_look_like_numbers_keeps_their_text() {
    // Two numbers, then three levels that are not: a factor, "1.0" and "01"
    // kept as written (R's read.csv keeps the text too).
    let t = csv("g,x\n1.0,1\n01,2\nlow,3\nhigh,4\nmid,5\n", None).unwrap();
    let g = t.factor("g").unwrap();
    assert_eq!(g.levels, ["01", "1.0", "high", "low", "mid"]);
    assert_eq!(g.codes, [1, 0, 3, 2, 4]);
    assert_eq!(t.numeric("x").unwrap(), [1.0, 2.0, 3.0, 4.0, 5.0]);
}

#[test]
fn a_mostly_numeric_column_with_a_bad_cell_is_an_error_at_the_cell() {
    let text = "id,x\na,1\nb,2\nc,1O\nd,4\ne,x\n";
    let (field, value, rule) = invalid(csv(text, None));
    assert_eq!(field, "data.csv: line 4 (data row 3), column 'x'");
    assert_eq!(value, "'1O'");
    assert!(rule.contains("3 of 5 values are numbers, 2 are not"), "{rule}");
    // The id column (all text) is a factor, and fine alone.
    assert_eq!(csv(text, Some(&["id"])).unwrap().factor("id").unwrap().levels.len(), 5);
}

#[test]
fn missing_values_are_errors_naming_the_cell() {
    for (text, line, row, shown) in [
        ("x,y\n1,2\n3,\n", 3, 2, "an empty cell"),
        ("x,y\n1,2\n\n3,NA\n", 4, 2, "NA"),
        ("x,y\n1,a\n3,\"\"\n", 3, 2, "an empty cell"),
    ] {
        let (field, value, rule) = invalid(csv(text, None));
        assert_eq!(field, format!("data.csv: line {line} (data row {row}), column 'y'"));
        assert_eq!(value, shown);
        assert!(rule.contains("drop or impute the row"), "{rule}");
    }
    let (field, _, rule) = invalid(csv("x,y\n1,2\n,\n3,4\n", None));
    assert_eq!(field, "data.csv: line 3");
    assert!(rule.contains("delete the row"), "{rule}");
    let (field, value, rule) = invalid(Table::read_parquet(&data("nulls.parquet"), None));
    assert!(field.ends_with("nulls.parquet: column 'x', row 7"), "{field}");
    assert_eq!(value, "null");
    assert!(rule.contains("drop or impute the row"), "{rule}");
    // Without the column that has the null, the file reads.
    let t = Table::read_parquet(&data("nulls.parquet"), Some(&strings(&["id"]))).unwrap();
    assert_eq!(t.numeric("id").unwrap(), (0..10).map(f64::from).collect::<Vec<_>>());
}

#[test]
fn non_finite_numbers_are_errors() {
    for bad in ["inf", "-Infinity", "NaN", "1e400"] {
        let (field, value, rule) = invalid(csv(&format!("x\n1\n{bad}\n"), None));
        assert_eq!(field, "data.csv: line 3 (data row 2), column 'x'");
        assert_eq!(value, format!("'{bad}'"));
        assert!(rule.contains("finite"), "{rule}");
    }
}

#[test]
fn quoted_fields_crlf_and_a_byte_order_mark() {
    let text =
        "\u{feff}\"name\",\"x\" , note\r\n\"Smith, J.\",1.5,\"said \"\"hi\"\"\"\r\n\r\nJones,-2,\"two\nlines\"\r\n";
    let t = csv(text, None).unwrap();
    assert_eq!(t.names(), ["name", "x", "note"]);
    assert_eq!(t.numeric("x").unwrap(), [1.5, -2.0]);
    assert_eq!(t.factor("name").unwrap().levels, ["Jones", "Smith, J."]);
    assert_eq!(t.factor("note").unwrap().levels, ["said \"hi\"", "two\nlines"]);
    // Line numbers count the quoted line break and the blank line.
    let text = "x,note\r\n1,\"two\nlines\"\r\n\r\n2,ok\r\nbad,ok\r\n3,ok\r\n4,ok\r\n";
    let (field, ..) = invalid(csv(text, None));
    assert_eq!(field, "data.csv: line 6 (data row 3), column 'x'");
}

#[test]
fn the_shared_file_checks_apply() {
    let (field, _, rule) = invalid(csv("x,y\n1,2\n3\n", None));
    assert_eq!(field, "data.csv: line 3 (data row 2)");
    assert!(rule.contains("expected 2 fields"), "{rule}");
    let (field, _, rule) = invalid(csv("x,y\n1,\"2\n3,4\n", None));
    assert!(
        field.contains("line 2, column 'y'") && rule.contains("never closed"),
        "{field}: {rule}"
    );
    let (field, _, rule) = invalid(csv("x,x\n1,2\n", None));
    assert!(
        field.contains("(header), column 'x'") && rule.contains("duplicate"),
        "{field}: {rule}"
    );
    let (field, ..) = invalid(csv("x,y\n", None));
    assert_eq!(field, "data.csv: data rows");
    let utf16: Vec<u8> = "x\n1\n".encode_utf16().flat_map(u16::to_le_bytes).collect();
    assert_eq!(
        invalid(Table::parse_csv("data.csv", &utf16, None)).0,
        "data.csv: encoding"
    );
    let (field, value, _) = invalid(Table::parse_csv("data.csv", b"x\n\xe9t\xe9\n", None));
    assert_eq!(
        (field.as_str(), value.as_str()),
        ("data.csv: line 2 (data row 1), column 'x'", "bytes that are not UTF-8")
    );
    let (field, _, rule) = invalid(Table::read_csv(Path::new("/no/such/file.csv"), None));
    assert!(
        field == "/no/such/file.csv" && rule.contains("cannot read"),
        "{field}: {rule}"
    );
}

#[test]
fn parquet_types_it_cannot_hold_are_named() {
    let (field, value, rule) = invalid(Table::read_parquet(&data("timestamp.parquet"), None));
    assert!(field.ends_with("timestamp.parquet: column 'when'"), "{field}");
    assert!(value.starts_with("INT64") && value.contains("Timestamp"), "{value}");
    assert!(rule.contains("convert the column to a number"), "{rule}");
    let (field, _, rule) = invalid(Table::read_parquet(&data("list.parquet"), None));
    assert!(field.contains("column 'xs.list."), "{field}");
    assert!(rule.contains("repeated"), "{rule}");
    assert_eq!(
        Table::read_parquet(&data("list.parquet"), Some(&strings(&["x"])))
            .unwrap()
            .numeric("x")
            .unwrap(),
        [1.0, 2.0]
    );
    let (field, _, rule) = invalid(Table::read_parquet(&data("mixed.csv"), None));
    assert!(
        field.ends_with("mixed.csv") && rule.contains("cannot read Parquet"),
        "{field}: {rule}"
    );
}

#[test]
fn accessors_name_the_column_and_what_it_is() {
    let t = csv("x,f\n1,a\n2,b\n", None).unwrap();
    let (field, value, rule) = match t.numeric("f") {
        Err(Error::InvalidInput { field, value, rule }) => (field, value, rule),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (field.as_str(), value.as_str()),
        ("table column 'f'", "a factor of 2 levels")
    );
    assert!(rule.contains("numeric"), "{rule}");
    assert!(matches!(t.factor("x"), Err(Error::InvalidInput { rule, .. }) if rule.contains("factor")));
    match t.numeric("z") {
        Err(Error::InvalidInput { rule, .. }) => assert!(rule.contains("'x', 'f'"), "{rule}"),
        other => panic!("{other:?}"),
    }
    assert!(t.column("z").is_none());
    assert_eq!(t.column("x"), Some(&Column::Numeric(vec![1.0, 2.0])));
}

#[test]
fn row_subsets_keep_every_level() {
    let t = csv("x,f\n1,a\n2,b\n3,c\n4,b\n", None).unwrap();
    let s = t.rows(&[3, 0, 3]).unwrap();
    assert_eq!(s.n(), 3);
    assert_eq!(s.numeric("x").unwrap(), [4.0, 1.0, 4.0]);
    let f = s.factor("f").unwrap();
    assert_eq!((f.levels, f.codes), (&strings(&["a", "b", "c"])[..], &[1, 0, 1][..]));
    let r = t.range(1..3).unwrap();
    assert_eq!(r.numeric("x").unwrap(), [2.0, 3.0]);
    assert_eq!(r.factor("f").unwrap().codes, [1, 2]);
    assert_eq!(t.range(0..4).unwrap(), t);
    assert!(matches!(t.rows(&[0, 4]), Err(Error::InvalidInput { field, .. }) if field == "rows[1]"));
    assert!(t.range(2..5).is_err());
}

#[test]
fn tables_from_vectors_and_arrays() {
    let x = matfree::ndarray::array![[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]];
    let t = Table::from_array(&["a", "b"], x.view()).unwrap();
    assert_eq!((t.n(), t.numeric("b").unwrap()), (3, &[10.0, 20.0, 30.0][..]));
    let f = Column::Factor {
        levels: strings(&["hi", "lo"]),
        codes: vec![1, 0, 1],
    };
    let t = Table::new(vec![
        ("x".into(), Column::Numeric(vec![1.0, 2.0, 3.0])),
        ("f".into(), f.clone()),
    ])
    .unwrap();
    assert_eq!(t.factor("f").unwrap().levels, ["hi", "lo"]);
    let bad = |columns: Vec<(String, Column)>, needle: &str| match Table::new(columns) {
        Err(Error::InvalidInput { field, value, rule }) => {
            assert!(
                format!("{field} {value} {rule}").contains(needle),
                "{field} {value} {rule}"
            )
        }
        other => panic!("{other:?}"),
    };
    bad(vec![("x".into(), Column::Numeric(vec![1.0, f64::NAN]))], "finite");
    bad(
        vec![("x".into(), Column::Numeric(vec![1.0])), ("y".into(), f.clone())],
        "as many rows",
    );
    bad(vec![("x".into(), f.clone()), ("x".into(), f.clone())], "duplicate");
    bad(vec![("".into(), f)], "a name is required");
    let codes = Column::Factor {
        levels: strings(&["a"]),
        codes: vec![0, 1],
    };
    bad(vec![("g".into(), codes)], "below the number of levels");
    let twice = Column::Factor {
        levels: strings(&["a", "a"]),
        codes: vec![0],
    };
    bad(vec![("g".into(), twice)], "unique");
    assert!(Table::from_array(&["a"], x.view()).is_err());
}
