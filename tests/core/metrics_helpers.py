"""The tolerance and the FPR ranges drawn by the property tests of core/metrics/
(test_metrics.py, test_metrics_window.py)."""

from __future__ import annotations

from hypothesis import strategies as st

TOLERANCE = 1e-12
fpr_value = st.one_of(
    st.integers(0, 20).map(lambda k: k / 20),  # often on an ROC vertex
    st.floats(0.0, 1.0, allow_nan=False),
)


@st.composite
def fpr_range(draw):
    alpha, beta = sorted((draw(fpr_value), draw(fpr_value)))
    if alpha == beta:
        alpha, beta = (0.0, beta) if beta > 0 else (0.0, 1.0)
    return alpha, beta
