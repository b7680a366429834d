"""Fits recorded by one learner and installed from their arrays by another (core/logged_fits.py):
the same state bit for bit without fitting, in other batches too; a fit that does not match
or holds arrays out of range is refused, naming what is wrong."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import core.boosted_fits
from core.boosted_trees import EnsembleParams, fit_ensemble, fitted_ensemble_problem
from core.learners import make_learner
from core.logged_fits import LoggedFitRefused, fit_log
from tests.core.boosted_helpers import SMALL_EMBEDDED, xor_stream
from tests.core.cases import states_equal

PARAMS = {**SMALL_EMBEDDED, "fit_delay": 7}


def _recorded(learner_name: str, params: dict, X, y, batch: int):
    learner = make_learner(learner_name, **params).initialize(X.shape[1])
    fits = []
    for start in range(0, len(y), batch):
        with fit_log(learner) as log:
            learner.partial_fit(X[start : start + batch], y[start : start + batch])
        fits += log.recorded
    return learner, fits


@pytest.mark.parametrize(("learner_name", "params"), [("boosted_embedded", PARAMS), ("auto", {})])
def test_installing_recorded_fits_gives_the_fitted_state_without_fitting(
    learner_name, params, monkeypatch
):
    n_events = 700 if learner_name == "boosted_embedded" else 1300
    X, y = xor_stream(n_events, d=4)
    fitted, fits = _recorded(learner_name, params, X, y, batch=13)
    assert len(fits) >= 3 and len({fit.part for fit in fits}) == (1 if params else 2)

    def no_fit(job):
        raise AssertionError("fitted again")

    monkeypatch.setattr(core.boosted_fits.FitJob, "run", no_fit)
    replayed = make_learner(learner_name, **params).initialize(X.shape[1])
    with fit_log(replayed, fits) as log:  # other batches: the fits are found by key
        for start in range(0, n_events, 100):
            replayed.partial_fit(X[start : start + 100], y[start : start + 100])
    log.finish()
    states_equal(replayed.get_state(), fitted.get_state())


def test_a_fit_of_another_buffer_or_never_met_is_refused():
    X, y = xor_stream(400, d=4)
    _, fits = _recorded("boosted_embedded", PARAMS, X, y, batch=50)
    other = make_learner("boosted_embedded", **PARAMS).initialize(4)
    with pytest.raises(LoggedFitRefused, match="another buffer"):
        with fit_log(other, [replace(fits[0], digest="0" * 32, version=7)]):
            other.partial_fit(X, y)
    unmet = fit_log(other, [replace(fits[0], fit_from=10**6, version=9)])
    with pytest.raises(LoggedFitRefused, match="not due") as raised:
        unmet.finish()
    assert raised.value.version == 9


def test_an_ensemble_out_of_range_is_named():
    X, y = xor_stream(300, d=4)
    params = EnsembleParams(n_trees=4, max_leaves=5, learning_rate=0.1, min_samples_leaf=5,
                            l2_regularization=0.0, random_state=0)  # fmt: skip
    ensemble = fit_ensemble(X, y, params)
    assert fitted_ensemble_problem(ensemble, params, 4) is None
    assert "ens_feature_or_leaf" in fitted_ensemble_problem(ensemble, params, 1)  # splits on x1
    for key, change, says in (
        ("ens_left", lambda a: np.where(a >= 0, 0, a), "children after their parents"),
        ("ens_left", lambda a: a + 50, "outside"),
        ("ens_feature_or_leaf", lambda a: a - 1, "leaf's index outside"),
        ("ens_threshold_or_value", lambda a: np.full_like(a, np.inf), "not finite"),
        ("ens_trees", lambda a: a - 1, "outside"),
        ("ens_threshold_or_value", lambda a: a.astype(np.float32), "dtype"),
        ("ens_baseline", lambda a: a[:0], "shape"),
    ):
        broken = {**ensemble, key: change(ensemble[key])}
        problem = fitted_ensemble_problem(broken, params, 4)
        assert problem is not None and says in problem, (key, problem)
    assert "arrays" in fitted_ensemble_problem({"ens_left": ensemble["ens_left"]}, params, 4)
