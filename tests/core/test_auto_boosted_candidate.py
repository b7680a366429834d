"""The default tournament's boosted candidate reads the trees' margin and leaves, not ``x``
(docs/algorithms/auto.md, the default candidates): the mix's other candidates rank ``x``."""

from __future__ import annotations

import numpy as np

from core.learners import make_learner
from tests.core.auto_helpers import rare_stream


def test_the_default_boosted_candidate_embeds_the_margin_and_the_leaves_only():
    X, y = rare_stream(7, n=1200, positive_rate=0.1)
    model = make_learner("auto", random_state=0)
    model.prequential_step(X, y)
    boosted = model._candidates[2]
    assert boosted.fits_ > 0
    embedded = boosted.transform(X).toarray()
    # column 0 is the margin; each tree puts one leaf indicator of 1 / sqrt(n_trees) after it
    np.testing.assert_allclose(embedded[:, 0], boosted.margin(X), rtol=1e-12)
    leaves = embedded[:, 1:]
    assert np.all(np.count_nonzero(leaves, axis=1) == boosted.n_trees)
    np.testing.assert_allclose(leaves[leaves != 0.0], 1.0 / np.sqrt(boosted.n_trees))
