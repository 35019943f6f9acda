//! CSV loading: a good file round-trips, every kind of bad file is rejected
//! with an error naming the file, the row and the column.

use matfree::data::{from_columns, parse_csv, read_csv, ColumnSpec, Dataset, INTERCEPT};
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
    matfree::bms::marginal_slope_designs(ds.n, ds.p_m, ds.p_g, ds.x_m, ds.x_g).unwrap();
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

/// 400 data rows of the test layout (id, y, z, w, x1, x2, x3, note).
fn rows(n: usize) -> String {
    let mut s = String::from("id,y,z,w,x1,x2,x3,note\n");
    for i in 0..n {
        s += &format!(
            "r{i},{},{},1,{},{},{},free text\n",
            i % 2,
            i as f64 * 0.01,
            i % 7,
            i % 3,
            i % 5
        );
    }
    s
}

/// A quote left open makes the rest of the file one field in every RFC 4180
/// reader; here it is an error naming where it opened, wherever that is,
/// never a fit on the rows before it (issue 38, item 1).
#[test]
fn an_unterminated_quote_is_named_not_truncated() {
    for (row, column, field) in [(301, "note", 7), (4, "z", 2), (1, "id", 0)] {
        let mut lines: Vec<String> = rows(400).lines().map(str::to_string).collect();
        let mut fields: Vec<String> = lines[row].split(',').map(str::to_string).collect();
        fields[field] = format!("\"{}", fields[field]);
        lines[row] = fields.join(",");
        let (at, rule) = invalid(parse(&(lines.join("\n") + "\n")));
        let line = row + 1;
        assert!(at.contains(&format!("line {line}, column '{column}'")), "{at}");
        assert!(
            rule.contains("never closed") && rule.contains(&format!("({} lines)", 401 - row)),
            "{rule}"
        );
    }
    // A quote in the header.
    let (at, _) = invalid(parse(&rows(3).replacen("note", "\"note", 1)));
    assert!(at.contains("line 1, field 8"), "{at}");
    // Closed quotes, doubled quotes inside, a quote inside an unquoted field:
    // all fine, and every row is read.
    let text = rows(3)
        .replacen("free text", "\"a \"\"b\"\", c\"", 2)
        .replacen("free text", "it\"s", 1);
    assert_eq!(parse(&text).unwrap().n, 3);
}

/// Lines of only separators are skipped like blank lines and listed, so the
/// caller can say how many (issue 38, item 8).
#[test]
fn rows_of_only_commas_are_counted_not_silent() {
    let text = rows(3).replacen("r1,", ",,,,,,,\nr1,", 1) + ",,,,,,,\r\n\n";
    let ds = parse(&text).unwrap();
    assert_eq!(ds.n, 3);
    assert_eq!(ds.empty_rows, [3, 6]);
    assert!(parse(&rows(3)).unwrap().empty_rows.is_empty());
}

/// A UTF-16 export gets a hint, not "no such column" (issue 38, item 9).
#[test]
fn a_utf16_file_is_named_as_such() {
    for bom in [&[0xff, 0xfe][..], &[0xfe, 0xff][..], &[][..]] {
        let mut bytes = bom.to_vec();
        for c in rows(3).encode_utf16() {
            bytes.extend_from_slice(&c.to_le_bytes());
        }
        let (at, rule) = invalid(matfree::data::parse_csv_bytes("data.csv", &bytes, &spec(Some("w")), 1));
        assert!(
            at == "data.csv: encoding" && rule.contains("UTF-16") && rule.contains("UTF-8"),
            "{at}: {rule}"
        );
    }
}

/// A small deterministic generator for the property tests.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A random valid table: values written in random but exact forms (quoted
/// or not, padded, exponent form), free text with commas, quotes and line
/// breaks in the unused column, CRLF or LF, blank lines between. Returns
/// each row's cells and the (y, z, w, x1, x2, x3) values they hold.
fn random_table(g: &mut Lcg, n: usize) -> (Vec<Vec<String>>, Vec<[f64; 6]>) {
    let mut cells = Vec::new();
    let mut want = Vec::new();
    for i in 0..n {
        let v = [
            (g.below(2)) as f64,
            (g.below(2001) as f64 - 1000.0) / 64.0,
            1.0 + g.below(9) as f64,
            (g.below(1 << 20) as f64 - 5e5) * 1e-3,
            g.below(3) as f64,
            -(g.below(100) as f64) * 1e5,
        ];
        let cell = |g: &mut Lcg, x: f64| match g.below(4) {
            0 => format!("\"{x}\""),
            1 => format!("  {x} "),
            2 => format!("{x:e}"),
            _ => format!("{x}"),
        };
        let note = ["plain", "\"a, b\"", "\"say \"\"hi\"\"\"", "\"two\nlines\"", ""][g.below(5)];
        let mut row = vec![format!("id{i}")];
        row.extend(v.iter().map(|&x| cell(g, x)));
        row.push(note.to_string());
        cells.push(row);
        want.push(v);
    }
    (cells, want)
}

/// The table's text, with each record's line; `ends` picks line endings.
fn render(cells: &[Vec<String>], ends: &[usize]) -> (String, Vec<usize>) {
    let mut text = String::from("id,y,z,w,x1,x2,x3,note\n");
    let mut lines = Vec::new();
    for (row, end) in cells.iter().zip(ends) {
        lines.push(1 + text.matches('\n').count());
        text += &row.join(",");
        text += ["\n", "\r\n", "\n\n"][*end];
    }
    (text, lines)
}

/// Property: every random valid table reads back exactly, row for row (no
/// silent truncation); one fault put at a random row (an open quote, a
/// non-finite or non-number value, an empty value) is an error naming that
/// row's line and the column, never a panic or a shorter data set.
#[test]
fn random_tables_read_back_exactly_and_faults_name_their_line() {
    let mut g = Lcg(0x5EED);
    for case in 0..300 {
        let n = 1 + g.below(40);
        let (mut cells, want) = random_table(&mut g, n);
        let ends: Vec<usize> = (0..n).map(|_| g.below(3)).collect();
        let (text, lines) = render(&cells, &ends);
        let ds = parse(&text).unwrap_or_else(|e| panic!("case {case}: {e}\n{text}"));
        assert_eq!(ds.n, n, "case {case}");
        for (i, v) in want.iter().enumerate() {
            assert_eq!(
                [ds.y[i], ds.z[i], ds.weights[i]],
                [v[0], v[1], v[2]],
                "case {case} row {i}"
            );
            assert_eq!(&ds.x_m[i * 3 + 1..i * 3 + 3], &[v[3], v[4]], "case {case} row {i}");
            assert_eq!(&ds.x_g[i * 3 + 1..i * 3 + 3], &[v[3], v[5]], "case {case} row {i}");
        }
        let (k, column) = (g.below(n), 1 + g.below(6));
        let names = ["id", "y", "z", "w", "x1", "x2", "x3"];
        let fault = ["\"1", "NaN", "-inf", "x", ""][g.below(5)];
        cells[k][column] = fault.to_string();
        let (text, _) = render(&cells, &ends);
        let (at, rule) = invalid(parse(&text));
        // An open quote that a later quote closes merges records: the
        // record's count is wrong, and the rule names the column.
        let named = format!("column '{}'", names[column]);
        assert!(
            at.contains(&format!("line {}", lines[k])) && (at.contains(&named) || rule.contains(&named)),
            "case {case}, fault {fault:?} at line {}, column {}: {at}: {rule}",
            lines[k],
            names[column]
        );
    }
}

/// Named columns in memory (a front end's arrays) give the data set the
/// CSV of the same values gives, and break its rules with errors naming
/// the row (0-based, as the arrays index it) and the column.
#[test]
fn columns_in_memory_read_as_the_csv_reads_them() {
    let csv = parse(GOOD).unwrap();
    let col = |k: usize| -> Vec<f64> {
        let lines = GOOD.lines().skip(1);
        lines
            .map(|l| l.split(',').nth(k).unwrap().trim().parse().unwrap())
            .collect()
    };
    let names = ["y", "z", "w", "x1", "x2", "x3"];
    let values: Vec<Vec<f64>> = (1..=6).map(col).collect();
    let columns =
        |values: &[Vec<f64>]| -> Vec<(&str, Vec<f64>)> { names.iter().copied().zip(values.iter().cloned()).collect() };
    let read = |values: &[Vec<f64>]| {
        let owned = columns(values);
        let borrowed: Vec<(&str, &[f64])> = owned.iter().map(|(n, v)| (*n, v.as_slice())).collect();
        from_columns("data", &borrowed, &spec(Some("w")), 1)
    };
    let mem = read(&values).unwrap();
    assert_eq!(
        (mem.n, &mem.y, &mem.z, &mem.weights),
        (csv.n, &csv.y, &csv.z, &csv.weights)
    );
    assert_eq!((&mem.x_m, &mem.x_g), (&csv.x_m, &csv.x_g));
    assert_eq!(mem.marginal_names, csv.marginal_names);
    let broken = |j: usize, i: usize, v: f64| {
        let mut values = values.clone();
        values[j][i] = v;
        invalid(read(&values))
    };
    let (field, rule) = broken(0, 2, 0.5);
    assert_eq!(
        (field.as_str(), rule.as_str()),
        ("data: row 2, column 'y'", "label must be 0 or 1")
    );
    let (field, rule) = broken(4, 1, f64::NAN);
    assert_eq!(
        (field.as_str(), rule.as_str()),
        ("data: row 1, column 'x2'", "must be finite")
    );
    let (field, rule) = broken(2, 0, 0.0);
    assert_eq!(
        (field.as_str(), rule.as_str()),
        ("data: row 0, column 'w'", "weight must be > 0")
    );
    let mut short = values.clone();
    short[5].pop();
    let (field, rule) = invalid(read(&short));
    assert_eq!(field, "data: column 'x3'");
    assert!(rule.contains("rows of 'y' (3)"), "{rule}");
    let (field, _) = invalid(from_columns("data", &[("z", &[1.0][..])], &spec(None), 1));
    assert!(field.contains("column 'y'"), "{field}");
}
