"""BMS: a Python fit is `fit_bms`' on the same CSV, bit for bit; saved
fits cross between Python and `fit_bms`; bad input raises the named
exceptions; a fit that does not converge warns."""

import json
import math

import numpy as np
import pandas as pd
import pytest
from conftest import read_csv, write_csv

import matfree

COLUMNS = dict(label="y", score="z", marginal=["x1", "x2"], slope=["x1"])


def simulate(n, seed):
    """Rows of a probit model whose slope on the score moves with x1."""
    rng = np.random.default_rng(seed)
    x1, x2, z = rng.normal(size=n), rng.normal(size=n), rng.normal(size=n)
    eta = 0.3 + 0.5 * x1 - 0.4 * x2 + (1.0 + 0.3 * x1) * z
    p = np.array([0.5 * (1.0 + math.erf(e / math.sqrt(2.0))) for e in eta])
    y = (rng.uniform(size=n) < p).astype(float)
    return {"y": y, "z": z, "x1": x1, "x2": x2}


@pytest.fixture(scope="module")
def csv_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("bms") / "data.csv"
    write_csv(path, simulate(500, 7))
    return path


@pytest.fixture(scope="module")
def fitted(csv_file):
    return matfree.BMS(**COLUMNS, device="cpu").fit(read_csv(csv_file))


CLI_COLUMNS = ["--label", "y", "--score", "z", "--marginal", "x1,x2", "--slope", "x1", "--backend", "cpu"]


def same_bits(a, b):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def table(text):
    """The report without the lines that differ by run (data, timings)."""
    return [line for line in text.splitlines() if not line.startswith(("data:", "time (s):"))]


def test_a_python_fit_is_the_cli_fit_bit_for_bit(csv_file, fitted, run_cli, tmp_path):
    saved, summary = tmp_path / "cli.json", tmp_path / "summary.json"
    out = run_cli("fit_bms", "--data", csv_file, *CLI_COLUMNS, "--save", saved, "--json", summary, "--quiet")
    cli = json.loads(saved.read_text())["fit"]
    frame = pd.DataFrame(read_csv(csv_file))
    for m in (fitted, matfree.BMS(**COLUMNS, device="cpu").fit(frame)):
        assert same_bits(m.coef_, cli["beta"])
        assert same_bits(m.cov_.ravel(), cli["covariance"])
        assert same_bits(m.lambda_, cli["lambda"])
        assert same_bits(m.edf_, cli["edf"]["blocks"])
        assert m.converged_ is cli["converged"] is True
        assert table(str(m.summary())) == table(out.stdout)
    report = json.loads(summary.read_text())
    s = fitted.summary()
    assert list(s.coefficients.index) == ["marginal:(Intercept)", "marginal:x1", "marginal:x2",
                                          "slope:(Intercept)", "slope:x1"]
    assert same_bits(s.coefficients["Estimate"], [c["estimate"] for c in report["coefficients"][:5]])
    assert list(s.smooths.index) == ["score warp H(z)", "link deviation L(t)"]
    assert s.data["n"] == 500 and len(fitted.names_) == len(fitted.coef_) == 19


def cli_predictions(path):
    """fit_bms' predictions CSV: row, p, eta, se_eta."""
    return np.loadtxt(path, delimiter=",", skiprows=1)


def test_saved_fits_cross_between_python_and_the_cli(csv_file, fitted, run_cli, tmp_path):
    data = read_csv(csv_file)
    py_file, pred = tmp_path / "py.json", tmp_path / "pred.csv"
    fitted.save(py_file)
    run_cli("fit_bms", "--model", py_file, "--predict", csv_file, "--out", pred, "--backend", "cpu")
    got = cli_predictions(pred)
    p, se_p = fitted.predict(data, se=True)
    eta, se_eta = fitted.predict(pd.DataFrame(data), type="link", se=True)
    assert same_bits(got[:, 1], p) and same_bits(got[:, 2], eta) and same_bits(got[:, 3], se_eta)
    density = np.exp(-0.5 * eta**2) / math.sqrt(2 * math.pi)
    assert np.allclose(se_p, density * se_eta, rtol=1e-15)

    cli_file = tmp_path / "cli.json"
    run_cli("fit_bms", "--data", csv_file, *CLI_COLUMNS, "--save", cli_file, "--quiet")
    loaded = matfree.load(cli_file)
    assert isinstance(loaded, matfree.BMS)
    assert same_bits(loaded.coef_, fitted.coef_) and same_bits(loaded.cov_, fitted.cov_)
    assert same_bits(loaded.predict(data), p)
    assert "marginal:x1" in str(loaded.summary())
    again = tmp_path / "again.json"
    loaded.save(again)
    assert json.loads(again.read_text()) == json.loads(cli_file.read_text())


def test_bad_input_raises_value_errors_naming_the_column_and_row(csv_file):
    data = read_csv(csv_file)

    def fails(given, *needles, **kw):
        with pytest.raises(ValueError) as e:
            matfree.BMS(**{**COLUMNS, "device": "cpu", **kw}).fit(given)
        for n in needles:
            assert n in str(e.value), str(e.value)

    label = dict(data, y=data["y"].copy())
    label["y"][7] = 2.0
    fails(label, "row 7", "column 'y'", "0 or 1")
    nan = dict(data, x2=data["x2"].copy())
    nan["x2"][11] = np.nan
    fails(nan, "'x2'", "row 11")
    fails(dict(data, x2=["a"] * 500), "'x2'", "numbers only")
    fails(data, "'w'", weights="w")
    weights = dict(data, w=np.ones(500))
    weights["w"][3] = -1.0
    fails(weights, "row 3", "column 'w'", "> 0", weights="w")
    fails(data, "score", marginal=["z"])
    fails(data, "newton-tol", newton_tol=0.0)
    fails(data, "samfrac", "(0, 1]", samfrac=0.0)
    fails(data, "frailty_sd", frailty_sd=-1.0)


def test_a_fit_that_does_not_converge_warns():
    data = simulate(300, 3)
    with pytest.warns(matfree.ConvergenceWarning, match="did not converge"):
        m = matfree.BMS(**COLUMNS, device="cpu", fixed_lambda=[10, 10], newton_tol=1e-300).fit(data)
    assert not m.converged_ and np.all(np.isfinite(m.coef_))
    assert "converged: false" in str(m.summary())


def test_auto_runs_where_there_is_no_gpu():
    m = matfree.BMS(**COLUMNS, fixed_lambda=[1.0, 1.0]).fit(simulate(300, 5))
    assert m.converged_
    if not matfree.CUDA_SUPPORT:
        assert m.device_.startswith("cpu")
