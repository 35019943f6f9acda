"""``BMS``: the Bernoulli marginal-slope model, as ``fit_bms`` fits it."""

import math

import numpy as np

from . import _matfree
from ._common import Summary, _frame, check_type, warn_unconverged
from ._data import columns
from ._plot import plot_panels
from ._progress import Progress


class BMS:
    """The Bernoulli marginal-slope model: a 0/1 ``label``, a standardised
    ``score``, the covariates of the marginal design (``marginal``) and of
    the slope design (``slope``; each with an intercept), a score warp H(z)
    and a link deviation L(t) (cubic bases of ``score_basis`` and
    ``link_basis`` functions, 0 for none) whose smoothing parameters REML
    chooses unless ``fixed_lambda`` gives them; optional ``weights`` (a
    column, each > 0) and a Gaussian frailty's ``frailty_sd``.

    A score that is not standardised (mean beyond 0.25, sd beyond a factor
    1.5 of 1) is standardised, with a note, unless ``keep_score``. The
    solver's tolerances are ``newton_tol`` and ``reml_tol``; ``samfrac``
    (mgcv bam's): REML first on that share of the rows, then on all of them
    from there (1: never; default: 0.02 of fits of 2M rows or more, at
    least 200,000 rows);
    ``device`` is
    ``"auto"``, ``"cpu"`` or ``"gpu"`` (``gpus`` of them, the rows sharded
    over them); ``verbose`` as for ``GAM``. These are ``fit_bms``' options.
    """

    def __init__(self, label="y", score="z", marginal=(), slope=(), *, weights=None, score_basis=8,
                 link_basis=6, frailty_sd=0.0, keep_score=False, fixed_lambda=None, newton_tol=1e-8,
                 reml_tol=1e-3, samfrac=None, device="auto", gpus=None, f64_hvp=False, verbose=0):
        self.label = label
        self.score = score
        self.marginal = list(marginal)
        self.slope = list(slope)
        self.weights = weights
        self.score_basis = score_basis
        self.link_basis = link_basis
        self.frailty_sd = frailty_sd
        self.keep_score = keep_score
        self.fixed_lambda = fixed_lambda
        self.newton_tol = newton_tol
        self.reml_tol = reml_tol
        self.samfrac = samfrac
        self.device = device
        self.gpus = gpus
        self.f64_hvp = f64_hvp
        self.verbose = verbose
        self._result = None

    def _spec(self):
        return {
            "label": self.label, "score": self.score, "weights": self.weights,
            "marginal": self.marginal, "slope": self.slope, "score_basis": self.score_basis,
            "link_basis": self.link_basis, "frailty_sd": float(self.frailty_sd),
            "keep_score": self.keep_score,
            "lambda": None if self.fixed_lambda is None else [float(v) for v in self.fixed_lambda],
            "newton_tol": float(self.newton_tol), "reml_tol": float(self.reml_tol), "gpus": self.gpus,
            "f64_hvp": self.f64_hvp,
            "samfrac": None if self.samfrac is None else float(self.samfrac),
        }

    def fit(self, data):
        """Fit to ``data`` (a DataFrame, or a dict of arrays); returns self."""
        wanted = [self.label, self.score, *([self.weights] if self.weights else []), *self.marginal, *self.slope]
        cols = columns(data, dict.fromkeys(wanted), factors=False)
        progress = Progress(self.verbose, "BMS")
        try:
            self._result = _matfree.fit_bms(cols, self._spec(), device=self.device, progress=progress.callback)
        finally:
            progress.close()
        warn_unconverged(self._result)
        return self

    @classmethod
    def _loaded(cls, result):
        cov = result.covariates
        model = cls(score=cov[0])
        model._result = result
        return model

    @property
    def result_(self):
        if self._result is None:
            raise AttributeError("this BMS model is not fitted yet: call fit(data) first")
        return self._result

    @property
    def coef_(self):
        """beta = (marginal, slope, score warp, link deviation), named by ``names_``."""
        return self.result_.coefficients

    @property
    def names_(self):
        return self.result_.names

    @property
    def cov_(self):
        """(H + S)^-1, p x p; None where the fit did not end at a minimum."""
        return self.result_.covariance

    @property
    def edf_(self):
        """The effective degrees of freedom of each smooth (H, then L)."""
        return self.result_.edf

    @property
    def lambda_(self):
        """The smoothing parameters, one per smooth."""
        return self.result_.lambda_

    @property
    def converged_(self):
        return self.result_.converged

    @property
    def warnings_(self):
        """The fit's notes (separation, an indefinite Hessian, ...)."""
        return self.result_.warnings

    @property
    def device_(self):
        return self.result_.device

    def summary(self):
        """``fit_bms``' report: printed, its table; ``coefficients`` and
        ``smooths`` as DataFrames."""
        r = self.result_
        coefficients = {"estimate": "Estimate", "std_error": "Std. Error", "z_value": "z value"}
        smooths = {"dim": "dim", "lambda": "lambda", "edf": "edf"}
        return Summary.from_json(r.summary_text(), r.summary_json(), {
            "coefficients": lambda d: _frame(_parametric(d["coefficients"]), coefficients, "name"),
            "smooths": lambda d: _frame(d["smooths"], smooths, "name"),
        })

    def predict(self, data, type="response", se=False, device="auto"):
        """P(y = 1 | x, z) (``type="response"``) or eta (``"link"``) at the
        rows of ``data``, as ``fit_bms --model --predict`` gives them; with
        ``se=True``, ``(fit, se)``: se of eta by the delta method, times
        phi(eta) on the response scale (NaN where the fit has no covariance).
        Rows that could not be predicted are NaN, with a warning."""
        check_type(type)
        cols = columns(data, self.result_.covariates, factors=False)
        p, eta, se_eta, notes = self.result_.predict(cols, device)
        for note in notes:
            import warnings

            warnings.warn(note, UserWarning, stacklevel=2)
        fit = p if type == "response" else eta
        if not se:
            return fit
        if se_eta is None:
            se_eta = np.full_like(eta, np.nan)
        if type == "response":
            return fit, se_eta * np.exp(-0.5 * eta * eta) / math.sqrt(2.0 * math.pi)
        return fit, se_eta

    def save(self, path):
        """Write the fit as ``fit_bms --save`` does (``fit_bms --model`` and
        ``matfree.load`` read it)."""
        self.result_.save(str(path))

    def smooths(self):
        """The fitted smooths (H(z), L(t)) on a grid with 95% bands."""
        return self.result_.smooths()

    def plot(self, axes=None):
        return plot_panels(self.smooths(), axes)

    def __repr__(self):
        return f"BMS(label={self.label!r}, score={self.score!r}, marginal={self.marginal!r}, slope={self.slope!r})"


def _parametric(rows):
    """The rows the printed table shows: the marginal and slope designs'."""
    return [r for r in rows if r["name"].startswith(("marginal:", "slope:"))]
