"""``solam``: the properties the service relies on.

The shared contract (tests/core/test_learner_contract.py) runs over ``solam`` with its defaults
and each configuration of tests/core/cases.py (no averaging, plain SOLAM, active projections, a
given radius, the shrink fold), and tests/core/test_naive_references.py runs the naive per-event
reference over them, on dense and CSR input.
"""

from __future__ import annotations

import numpy as np
import pytest

from core.learners import make_learner
from tests.core.cases import CONFIGURATIONS, check_a_heavy_tailed_row, stream
from tests.core.naive.learners import NaiveSOLAM

CONFIGS = CONFIGURATIONS["solam"]


def test_projections_are_active_in_the_projection_configuration():
    X, y = stream(2)
    config = CONFIGS["projections"]
    model = make_learner("solam", **config)
    on_ball = clipped = 0
    for i in range(len(y)):
        model.partial_fit(X[i : i + 1], y[i : i + 1])
        state = model.state_
        nu = state["sq_norm_sum"][0] / state["n_seen"][0]
        norm = abs(state["w_scale"][0]) * np.linalg.norm(state["w_unscaled"])
        limit = config["radius"] / np.sqrt(nu)
        assert norm <= limit * (1 + 1e-12)
        on_ball += norm > limit * (1 - 1e-9)
        bound = config["radius"] * config["kappa"]
        assert abs(state["a"][0]) <= bound and abs(state["b"][0]) <= bound
        assert abs(state["alpha"][0]) <= 2 * bound
        clipped += abs(state["alpha"][0]) == 2 * bound or bound in np.abs(
            [state["a"][0], state["b"][0]]
        )
        # the incrementally kept squared norm matches the vector
        assert state["w_sq_norm"][0] == pytest.approx(np.sum(state["w_unscaled"] ** 2), rel=1e-9)
    assert on_ball > 50 and clipped > 20


def test_a_heavy_tailed_row_does_not_flip_the_model():
    """As for spam: the second positive 100 standard deviations out on one feature; held-out
    AUC 0.35 with the uncapped w-step, 0.68 capped (clean stream: 0.82)."""
    check_a_heavy_tailed_row("solam", NaiveSOLAM, 0.6)
