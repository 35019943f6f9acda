//! Load times of data tables: each FILE (`.parquet` or CSV) read whole with
//! `Table::read_parquet` / `Table::read_csv`, best of `--repeat` runs; a CSV
//! with columns y (0/1), z, x1..x4 is also read by `data::read_csv` (the
//! `fit_bms` loader) for comparison. The figures are in `benches/RESULTS.md`.
//!
//!     cargo run --release --example bench_table -- [--repeat R] FILE...

use std::path::Path;
use std::time::Instant;

use matfree::data::{read_csv, ColumnSpec};
use matfree::table::Table;

fn best<T>(repeat: usize, mut f: impl FnMut() -> matfree::Result<T>) -> matfree::Result<(f64, T)> {
    let mut out = None;
    for _ in 0..repeat.max(1) {
        let start = Instant::now();
        let value = f()?;
        let s = start.elapsed().as_secs_f64();
        if out.as_ref().is_none_or(|(b, _)| s < *b) {
            out = Some((s, value));
        }
    }
    // repeat >= 1, so one run at least.
    out.ok_or_else(|| matfree::Error::invalid("--repeat", repeat, "at least 1"))
}

fn main() -> matfree::Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut repeat = 1;
    if args.first().map(String::as_str) == Some("--repeat") && args.len() > 1 {
        repeat = args[1]
            .parse()
            .map_err(|_| matfree::Error::invalid("--repeat", &args[1], "a whole number"))?;
        args.drain(..2);
    }
    for file in &args {
        let path = Path::new(file);
        let parquet = path.extension().is_some_and(|e| e == "parquet");
        let (s, t) = best(repeat, || {
            if parquet {
                Table::read_parquet(path, None)
            } else {
                Table::read_csv(path, None)
            }
        })?;
        println!(
            "{file}: {} rows x {} columns in {s:.3} s (table)",
            t.n(),
            t.names().len()
        );
        if !parquet && ["y", "z", "x1", "x2", "x3", "x4"].iter().all(|c| t.column(c).is_some()) {
            let spec = ColumnSpec {
                label: "y".into(),
                score: "z".into(),
                weights: None,
                marginal: vec!["x1".into(), "x2".into()],
                slope: vec!["x3".into(), "x4".into()],
            };
            let (s, ds) = best(repeat, || read_csv(path, &spec, 1))?;
            println!("{file}: {} rows in {s:.3} s (data::read_csv)", ds.n);
        }
    }
    Ok(())
}
