"""What both models share: the convergence warning, the summary object,
the checks after a fit."""

import json
import warnings


class ConvergenceWarning(UserWarning):
    """A fit that ran to its end without converging: its estimates are the
    best point found, not an optimum (as statsmodels and scikit-learn warn)."""


def warn_unconverged(result, stacklevel=3):
    if not result.converged:
        warnings.warn(
            f"the fit did not converge ({result.termination}): its estimates are the best point found",
            ConvergenceWarning,
            stacklevel=stacklevel,
        )


def _frame(rows, columns, index):
    """A DataFrame of ``rows`` (dicts) with ``columns`` (key -> header),
    indexed by ``index``; the list of dicts where pandas is not installed."""
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is optional
        return rows
    frame = pd.DataFrame([{header: r[key] for key, header in columns.items()} for r in rows],
                         columns=list(columns.values()))
    frame.index = [r[index] for r in rows]
    return frame


class Summary:
    """A fit's summary: printed, the command line's table; its parts as
    DataFrames (``coefficients``, ``smooths``, and for a GAM
    ``parametric_terms``); ``data`` is the JSON the command line's
    ``--json`` writes, as a dict."""

    def __init__(self, text, data, tables):
        self.text = text
        self.data = data
        self._tables = tables

    @classmethod
    def from_json(cls, text, summary_json, tables):
        data = json.loads(summary_json)
        return cls(text, data, {name: build(data) for name, build in tables.items()})

    def __getattr__(self, name):
        tables = self.__dict__.get("_tables", {})
        if name in tables:
            return tables[name]
        raise AttributeError(name)

    def __str__(self):
        return self.text

    def __repr__(self):
        return self.text

    def _repr_pretty_(self, p, cycle):
        p.text(self.text)


def check_type(kind):
    if kind not in ("response", "link"):
        raise ValueError(f"type = {kind!r}: must be 'response' or 'link'")
