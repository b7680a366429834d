"""Fixtures of the core tests."""

from __future__ import annotations

import pytest

from core.metrics import PrequentialWindow


@pytest.fixture(scope="session")
def compiled_window_kernels():
    """Pay the JIT (or cache load) once, outside any timed or property test."""
    window = PrequentialWindow(4, reservoir_capacity=2)
    window.update([0.1, 0.5, 0.2, 0.9, 0.3], [0, 1, 0, 1, 1])
    window.summary()
    window.roc_curve()
