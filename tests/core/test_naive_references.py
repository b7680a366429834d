"""Learners against their naive per-event references, over each learner's defaults and each of
its configurations (tests/core/cases.py), on dense and on CSR rows.

:func:`run_against_naive_reference` checks what every learner shows (prequential scores,
served weights, scores of the whole stream); :data:`NAIVE_REFERENCES` adds, per learner, a check
of the state those do not show.  A learner with a reference that follows this protocol joins by
one row there; the other learners' references have protocols of their own (their test files).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from core.learners import make_learner
from tests.core.cases import CONFIGURATIONS, close, naive_reference, stream
from tests.core.naive.learners import NaiveSOLAM, NaiveSPAM
from tests.core.naive.logistic import NaiveLogistic
from tests.core.naive.poise import NaivePOISE
from tests.core.naive.spdam import NaiveSPDAMStream


def run_against_naive_reference(name, naive_class, config, sparse):
    """Learn one stream with learner ``name`` and with its naive reference, in three uneven
    batches (state carried between kernel calls is exercised; one batch is one-class: the
    stream starts with 15 negatives); check the prequential scores, the served weights and the
    scores of the whole stream agree.  Returns ``(model, reference)``."""
    X, y = stream(1, density=0.5 if sparse else 1.0)
    model = make_learner(name, **config)
    reference = naive_reference(model, naive_class, X.shape[1])
    for batch in (slice(0, 10), slice(10, 157), slice(157, None)):
        batch_X = sp.csr_matrix(X[batch]) if sparse else X[batch]
        close(model.prequential_step(batch_X, y[batch]), reference.learn(X[batch], y[batch]))
    close(model.coef_, reference.served())
    # a reference with its own score (an intercept beside the weights) is asked for it
    if hasattr(reference, "score"):
        expected = np.array([reference.score(x) for x in X])
    else:
        expected = X @ reference.served()
    close(model.decision_function(X), expected)
    return model, reference


def _logistic_intercept(model, reference):
    close(np.array([model.intercept_]), np.array([reference.intercept() + reference.offset()]))
    if model.base_rate_offset:
        counts = [reference.negatives, reference.positives]
        close(model.state_["class_counts"], np.array(counts))


def _solam_saddle_point(model, reference):
    assert model.state_["n_seen"][0] == reference.t
    for key in ("a", "b", "alpha"):
        close(model.state_[key], [getattr(reference, key)])


def _spam_steps(model, reference):
    assert model.state_["n_steps"][0] == reference.n_steps > 0


def _poise_updates(model, reference):
    assert model.state_["n_updates"][0] == reference.updates > 0
    assert model.state_["auc_steps"][0] == reference.auc_steps
    assert (reference.auc_steps > 0) == (model.auc_weight > 0)


def _nothing_more(model, reference):
    pass  # the window learner's state is its window and w: the scores and weights show it


#: learner -> (its naive reference, a check of the learned state the scores do not show)
NAIVE_REFERENCES = {
    "logistic": (NaiveLogistic, _logistic_intercept),
    "poise": (NaivePOISE, _poise_updates),
    "solam": (NaiveSOLAM, _solam_saddle_point),
    "spam": (NaiveSPAM, _spam_steps),
    "spdam": (NaiveSPDAMStream, _nothing_more),
}


def _cases():
    for name in NAIVE_REFERENCES:
        for label, config in {"defaults": {}, **CONFIGURATIONS[name]}.items():
            yield pytest.param(name, config, id=f"{name}-{label}")


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
@pytest.mark.parametrize(("name", "config"), list(_cases()))
def test_learner_agrees_with_its_naive_reference(name, config, sparse):
    naive_class, check_state = NAIVE_REFERENCES[name]
    check_state(*run_against_naive_reference(name, naive_class, config, sparse))
