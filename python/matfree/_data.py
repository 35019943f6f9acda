"""Data in: a pandas DataFrame, or a dict of numpy arrays (or sequences),
turned into the columns the compiled module reads: 1-D C-contiguous
float64 arrays (passed on without a copy when they already are) and, for
factors, lists of level names. Every value is checked here, so that a bad
one is a ValueError naming its column and row."""

import numpy as np


def _row_label(data, i):
    """Row ``i`` as the user indexes it: its position, and its index
    label where a DataFrame's index is not the positions."""
    index = getattr(data, "index", None)
    if index is None:
        return f"row {i}"
    label = index[i]
    label = label.item() if hasattr(label, "item") else label  # numpy scalars print plainly
    return f"row {i}" if label == i else f"row {i} (index {label!r})"


def _column(data, name):
    try:
        return data[name]
    except (KeyError, IndexError, TypeError):
        have = list(data.keys()) if hasattr(data, "keys") else []
        raise ValueError(f"column {name!r}: not in the data (columns: {', '.join(map(str, have))})") from None


def _is_text(values):
    dtype = getattr(values, "dtype", None)
    if dtype is None:
        return False
    kind = getattr(dtype, "kind", "O")
    return kind in "OUS" or str(dtype) in ("category", "string", "str") or str(dtype).startswith("string")


def _numeric(data, name, values):
    """float64, C-contiguous, finite; no copy where it already is."""
    to_numpy = getattr(values, "to_numpy", None)
    if to_numpy is not None:  # pandas: nullable dtypes' NA become NaN
        try:
            array = to_numpy(dtype=np.float64, na_value=np.nan)
        except (TypeError, ValueError):
            array = np.asarray(values)
    else:
        array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"column {name!r}: must be one-dimensional (shape {array.shape})")
    if array.dtype.kind not in "fiub":
        raise ValueError(f"column {name!r}: dtype {array.dtype} is neither numeric nor text")
    array = np.ascontiguousarray(array, dtype=np.float64)
    finite = np.isfinite(array)
    if not finite.all():
        i = int(np.argmin(finite))
        raise ValueError(
            f"column {name!r}, {_row_label(data, i)}: value {float(array[i])} is not a finite number "
            "(drop or fill missing values first)"
        )
    return array


def _factor(data, name, values):
    """Level names, one a row; a missing value is an error naming its row."""
    out = []
    for i, v in enumerate(np.asarray(values, dtype=object)):
        if v is None or (isinstance(v, float) and v != v) or _is_na(v):
            raise ValueError(f"column {name!r}, {_row_label(data, i)}: a missing value (drop or fill it first)")
        out.append(str(v))
    return out


def _is_na(v):
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is optional
        return False
    return v is pd.NA or v is pd.NaT


def columns(data, names, *, factors=True):
    """The columns ``names`` of ``data`` for the compiled module."""
    if not hasattr(data, "__getitem__"):
        raise TypeError(f"data must be a pandas DataFrame or a dict of arrays, not {type(data).__name__}")
    out = {}
    for name in names:
        values = _column(data, name)
        if getattr(values, "dtype", None) is None:  # a list, a tuple
            values = np.asarray(values)
        if _is_text(values):
            if not factors:
                raise ValueError(f"column {name!r}: holds text, but this model reads numbers only")
            out[name] = _factor(data, name, values)
        else:
            out[name] = _numeric(data, name, values)
    lengths = {name: len(v) for name, v in out.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"columns of different lengths: {lengths}")
    return out
