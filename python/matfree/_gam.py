"""``GAM``: mgcv's ``gam(formula, family, method = "REML")``."""

import warnings

from . import _matfree
from ._common import Summary, _frame, warn_unconverged
from ._data import columns
from ._plot import plot_panels
from ._progress import Progress

_STAT = {"z": ("z value", "Pr(>|z|)"), "t": ("t value", "Pr(>|t|)"), "chi_sq": "Chi.sq", "f": "F"}


class GAM:
    """A penalised GLM / GAM, its smoothing parameters chosen by REML.

    ``formula`` is mgcv's (``y ~ x + f + s(z, bs = "cr", k = 10) + te(u, v)
    + s(g, bs = "re") + offset(o)``, ``cbind(successes, failures) ~ ...``
    for binomial counts); ``family`` is ``"gaussian"``, ``"binomial"``,
    ``"poisson"`` or ``"Gamma"``, ``link`` its link (default the canonical
    one), ``weights`` the name of a column of prior weights. ``device`` is
    ``"auto"`` (a GPU where one is found, as ``MATFREE_GPU`` says),
    ``"cpu"`` or ``"gpu"``; ``verbose`` 1 shows a progress bar (tqdm) or a
    line per REML iteration, 2 also a line per Newton step.

    Text columns (object, string, category) are factors, their levels
    sorted (as R's ``factor()`` sorts a character column); numeric columns
    must hold finite numbers.
    """

    def __init__(self, formula, family="gaussian", *, link=None, weights=None, device="auto", verbose=0):
        self.formula = formula
        self.family = family
        self.link = link
        self.weights = weights
        self.device = device
        self.verbose = verbose
        self._result = None

    # -- fitting -----------------------------------------------------------

    def fit(self, data):
        """Fit to ``data`` (a DataFrame, or a dict of arrays); returns self."""
        wanted = _matfree.gam_columns(self.formula, self.family, self.link, self.weights)
        cols = columns(data, wanted)
        progress = Progress(self.verbose, "GAM")
        try:
            self._result = _matfree.fit_gam(
                self.formula, self.family, cols, link=self.link, weights=self.weights,
                device=self.device, progress=progress.callback,
            )
        finally:
            progress.close()
        warn_unconverged(self._result)
        for note in self._result.notes:
            warnings.warn(note, stacklevel=2)
        return self

    @classmethod
    def _loaded(cls, result):
        model = cls(result.formula, result.family, link=result.link)
        model._result = result
        return model

    @property
    def result_(self):
        if self._result is None:
            raise AttributeError("this GAM is not fitted yet: call fit(data) first")
        return self._result

    # -- what mgcv's gam object holds --------------------------------------

    @property
    def coef_(self):
        """The coefficients (numpy), in the order of ``names_``."""
        return self.result_.coefficients

    @property
    def names_(self):
        """The coefficients' names, mgcv's: ``(Intercept)``, ``x``, ``s(z).1``, ..."""
        return self.result_.names

    @property
    def cov_(self):
        """The Bayesian covariance of the coefficients (mgcv's ``Vp``), p x p."""
        return self.result_.vp

    @property
    def cov_frequentist_(self):
        """The frequentist covariance (mgcv's ``Ve``), p x p."""
        return self.result_.ve

    @property
    def edf_(self):
        """The effective degrees of freedom per coefficient (mgcv's ``edf``)."""
        return self.result_.edf

    @property
    def smooth_edf_(self):
        """Each smooth's edf, by label."""
        return dict(self.result_.smooth_edf)

    @property
    def lambda_(self):
        """The smoothing parameters (mgcv's ``sp``), one per penalty."""
        return self.result_.sp

    @property
    def converged_(self):
        return self.result_.converged

    @property
    def scale_(self):
        """The scale (mgcv's ``scale``: Fletcher's estimate; 1 for binomial, Poisson)."""
        return self.result_.scalars()["scale"]

    @property
    def deviance_(self):
        return self.result_.scalars()["deviance"]

    @property
    def reml_score_(self):
        return self.result_.scalars()["reml_score"]

    @property
    def n_(self):
        return self.result_.scalars()["n"]

    @property
    def device_(self):
        """Where the fit ran."""
        return self.result_.device

    # -- summary, prediction, saving ---------------------------------------

    def summary(self):
        """mgcv's ``summary.gam``: printed, ``fit_gam``'s table; its
        ``coefficients``, ``parametric_terms`` and ``smooths`` as DataFrames."""
        r = self.result_
        return Summary.from_json(r.summary_text(), r.summary_json(), {
            "coefficients": _coefficients,
            "parametric_terms": lambda d: _tests(d, "parametric_terms", "df"),
            "smooths": lambda d: _tests(d, "smooths", "edf"),
        })

    def predict(self, data, type="response", se=False):
        """mgcv's ``predict.gam`` at the rows of ``data``: the mean
        (``type="response"``) or the linear predictor (``"link"``), the
        formula's offsets added; with ``se=True``, ``(fit, se)``."""
        cols = columns(data, self.result_.covariates)
        fit, stderr = self.result_.predict(cols, type)
        return (fit, stderr) if se else fit

    def save(self, path):
        """Write the fit as ``fit_gam --save`` does (``fit_gam --model`` and
        ``matfree.load`` read it)."""
        self.result_.save(str(path))

    def smooths(self):
        """``plot.gam``'s panels: each one-dimensional smooth on 100 points
        with a +-2 SE band (dicts of numpy arrays), and notes on the
        smooths not drawn."""
        return self.result_.smooths()

    def plot(self, axes=None):
        """Draw each one-dimensional smooth with its band (matplotlib)."""
        return plot_panels(self.smooths(), axes)

    def __repr__(self):
        args = [repr(self.formula), f"family={self.family!r}"]
        args += [f"{k}={getattr(self, k)!r}" for k in ("link", "weights") if getattr(self, k) is not None]
        return f"GAM({', '.join(args)})"


def _coefficients(d):
    value, p = _STAT[d["coefficient_statistic"]]
    columns = {"estimate": "Estimate", "std_error": "Std. Error", "statistic": value, "p_value": p}
    return _frame(d["coefficients"], columns, "name")


def _tests(d, table, df):
    stat = _STAT[d["term_statistic"]]
    columns = {df: df, "statistic": stat, "p_value": "p-value"}
    if table == "smooths":
        columns = {"edf": "edf", "ref_df": "Ref.df", "statistic": stat, "p_value": "p-value"}
    return _frame(d[table], columns, "label")
