"""Write the small Parquet and CSV files of tests/table.rs with pyarrow,
an implementation independent of the Rust `parquet` crate that reads them.

    python3 tools/table_files.py tests/data/table

mixed.parquet / mixed.csv: the same 50 rows (three row groups of at most 20
rows in the Parquet file; Snappy pages, one string column dictionary-encoded
and one plain), columns of every numeric type the table reads and two
factors. compressed_<codec>.parquet: the same data with other codecs.
Files that must be refused: nulls.parquet (a null in row 7 of 'x'),
timestamp.parquet, list.parquet.
"""
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
n = 50
groups = ["b", "a", "B", "é", "a b", "10", "9"]
table = pa.table(
    {
        "i32": pa.array([i * 3 - 70 for i in range(n)], pa.int32()),
        "i64": pa.array([(i - 25) * 123456789 for i in range(n)], pa.int64()),
        "u8": pa.array([i % 7 for i in range(n)], pa.uint8()),
        "f32": pa.array([i * 0.25 - 3 for i in range(n)], pa.float32()),
        "f64": pa.array([(i * 0.1 - 2.0) ** 3 for i in range(n)], pa.float64()),
        "flag": pa.array([i % 3 == 0 for i in range(n)], pa.bool_()),
        "dec": pa.array([f"{i * 1.25 - 10:.2f}" for i in range(n)]).cast(pa.decimal128(9, 2)),
        # Nullable in the schema, with no null: read as numbers.
        "opt": pa.array([float(i) for i in range(n)], pa.float64()),
        "g": pa.array([groups[(i * 5) % len(groups)] for i in range(n)], pa.string()),
        "h": pa.array(["x" if i % 4 else "y, with comma" for i in range(n)], pa.string()),
    }
)
pq.write_table(table, out / "mixed.parquet", row_group_size=20, compression="snappy",
               use_dictionary=["g"])
for codec in ["zstd", "lz4", "gzip", "none"]:
    pq.write_table(table, out / f"compressed_{codec}.parquet", row_group_size=20, compression=codec)
# The CSV as pandas writes it (quotes where needed, 0/1 for the flag, the
# float32 values widened exactly, the decimals as text).
df = table.to_pandas()
df["flag"] = df["flag"].astype(int)
df["dec"] = df["dec"].astype(str)
df["f32"] = df["f32"].astype("float64")
df.to_csv(out / "mixed.csv", index=False, float_format="%.17g")

nulls = pa.table({"id": pa.array(range(10)), "x": pa.array([1.0] * 6 + [None] + [2.0] * 3)})
pq.write_table(nulls, out / "nulls.parquet")
ts = pa.table({"x": pa.array([1.0, 2.0]), "when": pa.array([0, 1], pa.timestamp("ms"))})
pq.write_table(ts, out / "timestamp.parquet")
lists = pa.table({"x": pa.array([1.0, 2.0]), "xs": pa.array([[1.0], [2.0, 3.0]])})
pq.write_table(lists, out / "list.parquet")
