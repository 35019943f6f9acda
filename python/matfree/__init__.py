"""matfree: GAMs (as mgcv's ``gam(method = "REML")``) and the Bernoulli
marginal-slope model, fitted matrix-free on the CPU or an NVIDIA GPU.

    >>> import matfree
    >>> m = matfree.GAM("y ~ x + s(z, bs = 'cr')", family="binomial").fit(df)
    >>> print(m.summary())
    >>> p, se = m.predict(new, se=True)
    >>> m.save("model.json"); matfree.load("model.json")

The fitting is the Rust library's (the same calls as the ``fit_gam`` and
``fit_bms`` command lines, whose ``--save`` files ``load`` reads and whose
``--model`` reads the files ``save`` writes).
"""

from ._bms import BMS
from ._common import ConvergenceWarning, Summary
from ._gam import GAM
from ._io import load
from ._matfree import CUDA_SUPPORT

__all__ = ["BMS", "CUDA_SUPPORT", "ConvergenceWarning", "GAM", "Summary", "load"]
