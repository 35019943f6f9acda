"""GAM: a Python fit is the command line's on the same CSV, bit for bit;
saved fits cross between Python and the command line; fits agree with
mgcv's (the references committed with the Rust tests); bad input raises
the named exceptions."""

import json
import os
import signal
import threading
import warnings

import numpy as np
import pandas as pd
import pytest
from conftest import DATA, read_csv

import matfree
from matfree import _data, _progress

FIT_CASES = json.loads((DATA / "gam_fit_mgcv.json").read_text())["cases"]
OFFSET_CASES = json.loads((DATA / "gam_offsets_mgcv.json").read_text())["cases"]


def case(name, cases=FIT_CASES):
    return next(c for c in cases if c["name"] == name)


def model(c, **kw):
    return matfree.GAM(c["formula"], family=c["family"], link=c["link"], weights=c.get("weights"), **kw)


def cli_args(c, csv):
    args = ["--data", csv, "--formula", c["formula"], "--family", c["family"], "--link", c["link"]]
    if c.get("weights"):
        args += ["--weights", c["weights"]]
    return args + ["--backend", "cpu"]


def same_bits(a, b):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("name", ["gaussian", "binomial", "gamma", "trials"])
def test_a_python_fit_is_the_cli_fit_bit_for_bit(name, run_cli, tmp_path):
    c = case(name)
    csv = DATA / f"gam_fit_{name}.csv"
    saved = tmp_path / "cli.json"
    out = run_cli("fit_gam", *cli_args(c, csv), "--save", saved)
    cli = json.loads(saved.read_text())
    data = read_csv(csv)
    for given in (data, pd.DataFrame(data)):
        m = model(c, device="cpu").fit(given)
        assert m.device_.startswith("cpu")
        assert same_bits(m.coef_, cli["coefficients"])
        assert same_bits(m.cov_.ravel(), cli["vp"])
        assert same_bits(m.cov_frequentist_.ravel(), cli["ve"])
        assert same_bits(m.edf_, cli["edf"])
        assert same_bits(m.lambda_, cli["sp"])
        assert m.names_ == cli["names"]
        assert m.scale_ == cli["scale"] and m.reml_score_ == cli["reml_score"]
        assert out.stdout == str(m.summary()) + "\n"


@pytest.mark.parametrize("c", FIT_CASES + OFFSET_CASES, ids=lambda c: c["name"] + "/" + c["formula"][:20])
def test_fits_agree_with_mgcv(c):
    prefix = "gam_fit" if c in FIT_CASES else "gam_offsets"
    data = read_csv(DATA / f"{prefix}_{c['name']}.csv")
    with warnings.catch_warnings():
        warnings.simplefilter("error", matfree.ConvergenceWarning)
        m = model(c, device="cpu").fit(data)
    assert m.converged_ and m.names_ == c["names"]

    def close(got, want, by_largest=False):
        got, want = np.asarray(got, float), np.asarray(want, float)
        scale = np.abs(want).max() if by_largest else np.abs(want)
        assert np.all(np.abs(got - want) <= 1e-5 * scale), (got, want)

    close(m.coef_, c["coefficients"], by_largest=True)
    close(np.sqrt(np.diag(m.cov_)), c["se"])
    close(m.lambda_, c["sp"])
    close(m.edf_, c["edf"], by_largest=True)
    close(list(m.smooth_edf_.values()), c["edf_smooth"])
    close([m.scale_], c["scale"])
    close([m.deviance_], c["deviance"])
    if "predict_rows" in c:
        rows = np.asarray(c["predict_rows"], dtype=int)
        new = {k: (v[rows] if isinstance(v, np.ndarray) else [v[i] for i in rows]) for k, v in data.items()}
        fit, se = m.predict(new, type="link", se=True)
        close(fit, c["predict_link"])
        close(se, c["predict_link_se"])
        fit, se = m.predict(pd.DataFrame(new), type="response", se=True)
        close(fit, c["predict_response"])
        close(se, c["predict_response_se"])
        assert np.array_equal(m.predict(new), fit)


def test_summary_tables_are_the_cli_tables_as_frames():
    c = case("gaussian")
    s = model(c, device="cpu").fit(read_csv(DATA / "gam_fit_gaussian.csv")).summary()
    assert list(s.coefficients.columns) == ["Estimate", "Std. Error", "t value", "Pr(>|t|)"]
    assert list(s.coefficients.index) == ["(Intercept)", "facb", "facc"]
    assert list(s.smooths.columns) == ["edf", "Ref.df", "F", "p-value"]
    assert list(s.smooths.index) == c["smooth_labels"]
    p_table = np.asarray(c["p_table"]).reshape(-1, 4)
    assert np.allclose(s.coefficients.to_numpy(), p_table, rtol=1e-5, atol=1e-300)
    assert s.data["n"] == 500 and "R-sq.(adj)" in str(s)


def test_saved_fits_cross_between_python_and_the_cli(run_cli, tmp_path):
    c = case("gaussian")
    csv = DATA / "gam_fit_gaussian.csv"
    data = read_csv(csv)
    m = model(c, device="cpu").fit(data)

    # Python saves; the command line reads it, prints the same summary and
    # predicts what Python predicts.
    py_file, pred = tmp_path / "py.json", tmp_path / "pred.csv"
    m.save(py_file)
    out = run_cli("fit_gam", "--model", py_file, "--predict", csv, "--out", pred, "--type", "link")
    assert out.stdout == str(m.summary()) + "\n"
    cli_pred = np.loadtxt(pred, delimiter=",", skiprows=1)
    fit, se = m.predict(data, type="link", se=True)
    assert same_bits(cli_pred[:, 0], fit) and same_bits(cli_pred[:, 1], se)

    # The command line saves; Python loads it and predicts what it predicts.
    cli_file = tmp_path / "cli.json"
    run_cli("fit_gam", *cli_args(c, csv), "--save", cli_file, "--predict", csv, "--out", pred)
    loaded = matfree.load(cli_file)
    assert isinstance(loaded, matfree.GAM) and loaded.formula == c["formula"]
    fit, se = loaded.predict(data, se=True)
    cli_pred = np.loadtxt(pred, delimiter=",", skiprows=1)
    assert same_bits(cli_pred[:, 0], fit) and same_bits(cli_pred[:, 1], se)
    assert same_bits(loaded.coef_, m.coef_)
    # And a round trip through Python keeps every bit of the file.
    again = tmp_path / "again.json"
    loaded.save(again)
    assert json.loads(again.read_text()) == json.loads(cli_file.read_text())


def test_bad_input_raises_value_errors_naming_the_column_and_row():
    c = case("gaussian")
    data = read_csv(DATA / "gam_fit_gaussian.csv")
    frame = pd.DataFrame(data, index=np.arange(500) + 1000)

    def fails(given, *needles, m=None):
        with pytest.raises(ValueError) as e:
            (m or model(c, device="cpu")).fit(given)
        for n in needles:
            assert n in str(e.value), str(e.value)

    bad = dict(data, x1=data["x1"].copy())
    bad["x1"][17] = np.nan
    fails(bad, "'x1'", "row 17", "nan")
    framed = frame.copy()
    framed.loc[1003, "y"] = np.inf
    fails(framed, "'y'", "row 3", "index 1003")
    missing = {k: v for k, v in data.items() if k != "x2"}
    fails(missing, "'x2'", "not in the data")
    factor = dict(data, fac=list(data["fac"]))
    factor["fac"][5] = None
    fails(factor, "'fac'", "row 5", "missing")
    fails(data, "formula", m=matfree.GAM("y ~ s(x0", device="cpu"))
    fails(data, "family", m=matfree.GAM("y ~ x0", family="tweedie"))
    fails(data, "device", m=matfree.GAM("y ~ x0", device="tpu"))
    fails(dict(data, x0=np.array(["a"] * 500, dtype=object)), "x0", m=matfree.GAM("y ~ s(x0)", device="cpu"))
    fitted = model(c, device="cpu").fit(data)
    new = dict(data, fac=["z"] * 500)
    with pytest.raises(ValueError, match="not a level seen in fitting"):
        fitted.predict(new)
    with pytest.raises(ValueError, match="type"):
        fitted.predict(data, type="terms")
    with pytest.raises(AttributeError, match="not fitted"):
        matfree.GAM("y ~ x0").coef_


def test_a_bad_saved_file_is_a_value_error(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"format": "matfree-gam", "format_version": 99}')
    with pytest.raises(ValueError, match="format_version"):
        matfree.load(path)
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a saved fit"):
        matfree.load(path)


def test_numpy_columns_go_in_without_a_copy():
    x = np.linspace(0.0, 1.0, 50)
    assert _data.columns({"x": x}, ["x"])["x"] is x
    frame = pd.DataFrame({"x": x, "y": x * 2})
    assert np.shares_memory(_data.columns(frame, ["y"])["y"], frame["y"].to_numpy())
    ints = {"k": np.arange(5)}
    assert _data.columns(ints, ["k"])["k"].dtype == np.float64
    strided = np.linspace(0.0, 1.0, 100)[::2]
    assert _data.columns({"s": strided}, ["s"])["s"].flags.c_contiguous


def test_ctrl_c_stops_a_fit_with_keyboard_interrupt(monkeypatch):
    """SIGINT sent from another thread while the fit runs (in Rust, the GIL
    released): the fit stops with KeyboardInterrupt, and the next fit runs
    as usual. The fit's first progress event waits until the signal has
    been sent, so that a fit quicker than the other thread cannot end
    first (the handler then raises in the callback or at the next
    evaluation's signal check: either stops the fit)."""
    c = case("gaussian")
    data = read_csv(DATA / "gam_fit_gaussian.csv")
    big = {k: (np.tile(v, 20) if isinstance(v, np.ndarray) else v * 20) for k, v in data.items()}
    started, sent, events = threading.Event(), threading.Event(), []

    def first_event(self, event):
        events.append(event)
        started.set()
        sent.wait(30)

    def press_ctrl_c():
        started.wait(30)
        os.kill(os.getpid(), signal.SIGINT)
        sent.set()

    monkeypatch.setattr(_progress.Progress, "__call__", first_event)
    # Python's own handler, as in an interactive session: a runner started
    # in the background of a shell inherits SIGINT ignored, which Python
    # then leaves ignored.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    thread = threading.Thread(target=press_ctrl_c)
    thread.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            model(c, device="cpu", verbose=2).fit(big)
    finally:
        started.set()
        thread.join()
        signal.signal(signal.SIGINT, previous)
    stopped_at = events[-1]["evaluations"]
    events.clear()
    assert model(c, device="cpu", verbose=2).fit(big).converged_
    assert stopped_at < events[-1]["evaluations"], "the fit stopped before its end"


def test_verbose_shows_each_reml_iteration(capsys):
    c = case("binomial")
    model(c, device="cpu", verbose=1).fit(read_csv(DATA / "gam_fit_binomial.csv"))
    err = capsys.readouterr().err
    assert "REML iteration 1:" in err or "REML" in err, err


def test_smooths_give_plot_gams_panels():
    c = case("gaussian")
    m = model(c, device="cpu").fit(read_csv(DATA / "gam_fit_gaussian.csv"))
    s = m.smooths()
    assert [p["title"] for p in s["panels"]] == ["s(x0)", "s(x1)"]
    panel = s["panels"][0]
    assert len(panel["x"]) == 100 and np.all(panel["lower"] <= panel["upper"])
    assert any("te(x2,x3)" in n for n in s["notes"])
