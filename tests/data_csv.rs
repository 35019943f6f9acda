//! CSV loading: a good file round-trips, every kind of bad file is rejected
//! with an error naming the file, the row and the column.

use matfree::data::{parse_csv, read_csv, ColumnSpec, Dataset, INTERCEPT};
use matfree::Error;

const GOOD: &str = "\
id, y, z, w, x1, x2, x3
a, 1, 0.5, 2, 1.5, -1, 10
b, 0, -1.25, 0.5, 2.5, 3e-1, 20
c, 1, 2, 1, -0.5, 0, 30
";

fn spec(weights: Option<&str>) -> ColumnSpec {
    ColumnSpec {
        label: "y".into(),
        score: "z".into(),
        weights: weights.map(str::to_string),
        marginal: vec!["x1".into(), "x2".into()],
        slope: vec!["x1".into(), "x3".into()],
    }
}

fn parse(text: &str) -> matfree::Result<Dataset> {
    parse_csv("data.csv", text, &spec(Some("w")), 1)
}

/// The (field, rule) of an input error; panics on success or another error kind.
fn invalid(r: matfree::Result<Dataset>) -> (String, String) {
    match r {
        Err(Error::InvalidInput { field, rule, .. }) => (field, rule),
        Err(e) => panic!("expected InvalidInput, got {e}"),
        Ok(ds) => panic!("expected an error, got {} rows", ds.n),
    }
}

/// Assert the error's field names the file, the line, the data row and the column.
fn assert_cell_error(text: &str, line: usize, row: usize, column: &str, rule_has: &str) {
    let (field, rule) = invalid(parse(text));
    assert!(field.starts_with("data.csv:"), "{field}");
    assert!(field.contains(&format!("line {line} ")), "{field}");
    assert!(field.contains(&format!("data row {row})")), "{field}");
    assert!(field.contains(&format!("column '{column}'")), "{field}");
    assert!(rule.contains(rule_has), "{rule}");
}

fn replace_line(line: usize, with: &str) -> String {
    let mut lines: Vec<&str> = GOOD.lines().collect();
    lines[line - 1] = with;
    lines.join("\n")
}

#[test]
fn good_file_round_trips() {
    let ds = parse(GOOD).unwrap();
    assert_eq!((ds.n, ds.p_m, ds.p_g), (3, 3, 3));
    assert_eq!(ds.y, [1.0, 0.0, 1.0]);
    assert_eq!(ds.z, [0.5, -1.25, 2.0]);
    assert_eq!(ds.weights, [2.0, 0.5, 1.0]);
    assert_eq!(ds.x_m, [1.0, 1.5, -1.0, 1.0, 2.5, 0.3, 1.0, -0.5, 0.0]);
    assert_eq!(ds.x_g, [1.0, 1.5, 10.0, 1.0, 2.5, 20.0, 1.0, -0.5, 30.0]);
    assert_eq!(ds.marginal_names, [INTERCEPT, "x1", "x2"]);
    assert_eq!(ds.slope_names, [INTERCEPT, "x1", "x3"]);
    assert_eq!(INTERCEPT, "(Intercept)");
}

#[test]
fn weights_default_to_one_and_designs_may_be_intercept_only() {
    let mut s = spec(None);
    s.slope.clear();
    let ds = parse_csv("data.csv", GOOD, &s, 3).unwrap();
    assert_eq!(ds.weights, [1.0; 3]);
    assert_eq!((ds.p_g, ds.x_g.clone()), (1, vec![1.0; 3]));
    assert_eq!(ds.slope_names, [INTERCEPT]);
    matfree::Designs::new(ds.n, ds.p_m, ds.p_g, ds.x_m, ds.x_g).unwrap();
}

#[test]
fn quoted_headers_crlf_bom_and_blank_lines_work() {
    let text = "\u{feff}\"id\" , \"y\",\"z\", \"w\",\"x1\",x2 ,\"x3\"\r\n\r\n\
                a,1,0.5,2,1.5,-1,10\r\n  \r\nb,0,-1.25,0.5,2.5,0.3,20\r\n\n\n   \n";
    let ds = parse(text).unwrap();
    assert_eq!(ds.n, 2);
    assert_eq!(ds.z, [0.5, -1.25]);
    assert_eq!(ds.x_g, [1.0, 1.5, 10.0, 1.0, 2.5, 20.0]);
}

#[test]
fn unused_columns_may_hold_anything_and_empty_names_are_allowed() {
    let text = "\"\",y,z,w,x1,x2,x3,notes\n1,1,0,1,0,0,0,free text\n2,0,0,1,0,0,0,\n";
    assert_eq!(parse(text).unwrap().n, 2);
}

#[test]
fn missing_column_lists_the_available_ones() {
    let mut s = spec(Some("w"));
    s.slope.push("x9".into());
    let (field, rule) = invalid(parse_csv("data.csv", GOOD, &s, 1));
    assert!(
        field.starts_with("data.csv:") && field.contains("column 'x9'"),
        "{field}"
    );
    assert!(rule.contains("no such column"), "{rule}");
    assert!(
        rule.contains("'x1'") && rule.contains("'x3'") && rule.contains("'id'"),
        "{rule}"
    );
    let (field, _) = invalid(parse_csv("data.csv", GOOD, &spec(Some("weight")), 1));
    assert!(field.contains("column 'weight' (weights)"), "{field}");
}

#[test]
fn duplicate_header_and_duplicate_covariate_are_rejected() {
    let (field, rule) = invalid(parse(&replace_line(1, "id,y,z,w,x1,x2,x1")));
    assert!(
        field.starts_with("data.csv: line 1 (header)") && field.contains("column 'x1'"),
        "{field}"
    );
    assert!(rule.contains("duplicate") && rule.contains("5 and 7"), "{rule}");
    let mut s = spec(None);
    s.marginal.push("x1".into());
    let (field, rule) = invalid(parse_csv("data.csv", GOOD, &s, 1));
    assert!(field.contains("marginal") && field.contains("column 'x1'"), "{field}");
    assert!(rule.contains("more than once"), "{rule}");
}

#[test]
fn wrong_field_count_names_line_and_row() {
    for bad in ["b, 0, -1.25, 0.5, 2.5, 3e-1", "b, 0, -1.25, 0.5, 2.5, 3e-1, 20, 7"] {
        let (field, rule) = invalid(parse(&replace_line(3, bad)));
        assert_eq!(field, "data.csv: line 3 (data row 2)");
        assert!(rule.contains("expected 7 fields"), "{rule}");
    }
}

#[test]
fn bad_labels_are_rejected() {
    for label in ["2", "-1", "0.5", "yes", ""] {
        let (line, row) = (4, 3);
        let text = replace_line(line, &format!("c, {label}, 2, 1, -0.5, 0, 30"));
        let rule = if label.parse::<f64>().is_ok() {
            "label must be 0 or 1"
        } else {
            "not a number"
        };
        assert_cell_error(&text, line, row, "y", rule);
    }
}

#[test]
fn unparsable_and_non_finite_values_are_rejected() {
    assert_cell_error(&replace_line(2, "a, 1, abc, 2, 1.5, -1, 10"), 2, 1, "z", "not a number");
    assert_cell_error(
        &replace_line(3, "b, 0, 1, 0.5, 2.5, 3e-1, NaN"),
        3,
        2,
        "x3",
        "must be finite",
    );
    assert_cell_error(&replace_line(4, "c, 1, 2, 1, inf, 0, 30"), 4, 3, "x1", "must be finite");
    assert_cell_error(
        &replace_line(4, "c, 1, 2, 1, -0.5, 1e999, 30"),
        4,
        3,
        "x2",
        "must be finite",
    );
    assert_cell_error(&replace_line(2, "a, 1, 0.5, 2, 1.5, , 10"), 2, 1, "x2", "not a number");
}

#[test]
fn non_positive_weights_are_rejected() {
    for w in ["0", "-2", "-0"] {
        assert_cell_error(
            &replace_line(3, &format!("b, 0, -1.25, {w}, 2.5, 3e-1, 20")),
            3,
            2,
            "w",
            "weight must be > 0",
        );
    }
    assert_cell_error(
        &replace_line(3, "b, 0, -1.25, NaN, 2.5, 3e-1, 20"),
        3,
        2,
        "w",
        "must be finite",
    );
}

#[test]
fn blank_lines_shift_line_numbers_but_not_row_numbers() {
    let text = GOOD.replacen("\nb,", "\n\n\nb,", 1).replace("-1.25", "x");
    assert_cell_error(&text, 5, 2, "z", "not a number");
}

#[test]
fn too_few_rows_and_empty_files_are_rejected() {
    let (field, rule) = invalid(parse_csv("data.csv", GOOD, &spec(None), 4));
    assert_eq!(field, "data.csv: data rows");
    assert!(rule.contains("at least 4"), "{rule}");
    let (field, rule) = invalid(parse("id,y,z,w,x1,x2,x3\n\n"));
    assert_eq!(field, "data.csv: data rows");
    assert!(rule.contains("at least 1"), "{rule}");
    for empty in ["", "\n \n\r\n"] {
        let (field, rule) = invalid(parse(empty));
        assert_eq!(field, "data.csv");
        assert!(rule.contains("empty"), "{rule}");
    }
}

#[test]
fn read_csv_reads_files_and_reports_unreadable_ones() {
    let dir = std::env::temp_dir().join(format!("matfree-data-csv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("good.csv");
    std::fs::write(&path, GOOD).unwrap();
    let ds = read_csv(&path, &spec(Some("w")), 3).unwrap();
    assert_eq!(ds.weights, [2.0, 0.5, 1.0]);
    let (field, rule) = invalid(read_csv(&dir.join("missing.csv"), &spec(None), 1));
    assert!(field.ends_with("missing.csv"), "{field}");
    assert!(rule.contains("cannot read file"), "{rule}");
    // A directory is not a readable file either.
    let (_, rule) = invalid(read_csv(&dir, &spec(None), 1));
    assert!(rule.contains("cannot read file"), "{rule}");
    // Errors inside the file name its path.
    std::fs::write(&path, GOOD.replace("-1.25", "oops")).unwrap();
    let (field, _) = invalid(read_csv(&path, &spec(None), 1));
    assert!(
        field.starts_with(&path.display().to_string()) && field.contains("column 'z'"),
        "{field}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// RFC 4180: quoted fields with commas, doubled quotes and line breaks in a
/// column that is not used, and bytes that are not UTF-8 (Latin-1) there;
/// the same byte in a used column, or an unterminated quote, is an error
/// with the line and column.
#[test]
fn rfc_4180_quoting_and_foreign_bytes() {
    let text = "id,y,z,w,x1,x2,x3,note\r\n\
                a,1,0.5,2,1.5,-1,10,\"Smith, J.\"\r\n\
                b,0,-1.25,0.5,2.5,0.3,20,\"said \"\"hi\"\"\"\r\n\
                c,1,2,1,-0.5,0,30,\"two\nlines\"\r\n";
    let ds = parse(text).unwrap();
    assert_eq!(ds.n, 3);
    assert_eq!(ds.z, [0.5, -1.25, 2.0]);
    let mut latin1 = b"id,y,z,w,x1,x2,x3,note\na,1,0.5,2,1.5,-1,10,caf".to_vec();
    latin1.push(0xe9);
    latin1.extend_from_slice(b"\nb,0,-1.25,0.5,2.5,0.3,20,ok\n");
    let ds = matfree::data::parse_csv_bytes("data.csv", &latin1, &spec(Some("w")), 1).unwrap();
    assert_eq!(ds.n, 2);
    let mut bad = b"id,y,z,w,x1,x2,x3\na,1,0.5,2,1.5,-1,10\nb,0,".to_vec();
    bad.push(0xe9);
    bad.extend_from_slice(b",0.5,2.5,0.3,20\n");
    let (field, rule) = invalid(matfree::data::parse_csv_bytes("data.csv", &bad, &spec(Some("w")), 1));
    assert!(field.contains("line 3") && field.contains("column 'z'"), "{field}");
    assert!(rule.contains("not a number"), "{rule}");
    let (field, _) = invalid(parse("id,y,z,w,x1,x2,x3\na,1,0.5,2,1.5,-1,10\nb,0,\"1,2,3,4,5\n"));
    assert!(field.starts_with("data.csv"), "{field}");
}

/// Random bytes, random shapes and random non-finite entries never panic,
/// and every error names the file.
#[test]
fn random_input_never_panics_and_errors_name_the_file() {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let alphabet = b"0123456789.,-+eE\"\n\r ,yzwx1NaNinf\xe9\xff";
    for case in 0..2000 {
        let len = (next() % 200) as usize;
        let mut bytes: Vec<u8> = if case % 2 == 0 {
            b"id,y,z,w,x1,x2,x3\n".to_vec()
        } else {
            Vec::new()
        };
        bytes.extend((0..len).map(|_| alphabet[(next() % alphabet.len() as u64) as usize]));
        match matfree::data::parse_csv_bytes("data.csv", &bytes, &spec(Some("w")), 1) {
            Ok(ds) => {
                assert!(ds.z.iter().chain(&ds.x_m).chain(&ds.x_g).all(|v| v.is_finite()));
                assert!(ds.y.iter().all(|&y| y == 0.0 || y == 1.0));
            }
            Err(Error::InvalidInput { field, .. }) => assert!(field.starts_with("data.csv"), "{field}"),
            Err(e) => panic!("case {case}: unexpected error kind {e}"),
        }
    }
}
