"""Shared helpers: the repository's paths, the command-line examples (the
oracle a Python fit is compared with), and CSV files read exactly."""

import csv
import os
import pathlib
import subprocess

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"


def cli_path(name):
    """The release build of example ``name`` (built here if missing; its
    folder may be given as MATFREE_CLI_DIR, else it is under cargo's target
    folder, CARGO_TARGET_DIR where that is set, as cargo itself puts it)."""
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    folder = pathlib.Path(os.environ.get("MATFREE_CLI_DIR", target / "release" / "examples"))
    path = folder / name
    if not path.exists():
        subprocess.run(["cargo", "build", "--release", "--example", name], cwd=ROOT, check=True)
    return path


@pytest.fixture(scope="session")
def run_cli():
    """Run a command-line example: ``run_cli("fit_gam", *args)`` ->
    CompletedProcess (text)."""

    def run(name, *args, check=True):
        out = subprocess.run([str(cli_path(name)), *map(str, args)], capture_output=True, text=True)
        if check and out.returncode not in (0,):
            raise AssertionError(f"{name} {args} exited {out.returncode}:\n{out.stdout}\n{out.stderr}")
        return out

    return run


def read_csv(path):
    """A CSV file as a dict of columns, as the command lines read it:
    numbers where every entry of a column parses (exactly, as float()
    does), else level names."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    out = {}
    for j, name in enumerate(header):
        cells = [r[j].strip() for r in body]
        try:
            out[name] = np.array([float(c) for c in cells])
        except ValueError:
            out[name] = cells
    return out


def write_csv(path, data):
    """Write a dict of columns, every number in its shortest exact form."""
    names = list(data)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(names)
        for i in range(len(data[names[0]])):
            w.writerow([repr(float(data[n][i])) for n in names])
