"""``load``: a fit saved by ``save`` or by a command line's ``--save``."""

import json

from . import _matfree


def load(path):
    """The GAM or BMS fit saved at ``path`` (``GAM.save``, ``BMS.save``,
    ``fit_gam --save``, ``fit_bms --save``): summarised and predicted from
    without its data."""
    from ._bms import BMS
    from ._gam import GAM

    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        header = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not a saved fit (not JSON: {e})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: not a saved fit (not a JSON object)")
    if header.get("format") == "matfree-gam":
        return GAM._loaded(_matfree.gam_from_json(text))
    if "model" in header and "fit" in header:
        return BMS._loaded(_matfree.bms_from_json(text))
    raise ValueError(f"{path}: not a saved GAM (format 'matfree-gam') nor a saved BMS fit (model, fit)")
