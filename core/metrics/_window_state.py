"""The stored layout of :class:`core.metrics.window.PrequentialWindow` and its checks."""

from __future__ import annotations

import numpy as np

from core._arrays import LABELS

_STATE_DTYPES = {
    "window_parameters": np.int64,  # [capacity, reservoir_capacity]
    "window_scores": np.float64,  # ring buffer, filled part only, in ring (not time) order
    "window_labels": LABELS,  # -1 / +1, aligned with window_scores
    "window_cursor": np.int64,  # [next slot to write]; once full, also the oldest pair's slot
    "counts_since_start": np.int64,  # [events, positives, negatives]
    "reservoir_positive_scores": np.float64,  # filled part only
    "reservoir_negative_scores": np.float64,
    "rng_state": np.uint64,  # SplitMix64 state of the reservoir sampling
}


def state_arrays(state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Copies of the window state's arrays, each checked for its dtype and shape."""
    arrays: dict[str, np.ndarray] = {}
    for key, dtype in _STATE_DTYPES.items():
        if key not in state:
            raise ValueError(f"window state lacks the array {key!r}")
        array = np.asarray(state[key])
        if array.dtype != dtype or array.ndim != 1:
            raise ValueError(
                f"window state array {key!r} must be 1-d {np.dtype(dtype).name}, "
                f"got {array.ndim}-d {array.dtype.name}"
            )
        arrays[key] = np.array(array, dtype=dtype, order="C", copy=True)
    for key, length in (
        ("window_parameters", 2),
        ("window_cursor", 1),
        ("counts_since_start", 3),
        ("rng_state", 1),
    ):
        if arrays[key].size != length:
            raise ValueError(
                f"window state array {key!r} must hold {length} values, got {arrays[key].size}"
            )
    return arrays


def state_problems(arrays: dict[str, np.ndarray]) -> list[str]:
    """What is inconsistent between the window state's arrays (empty when nothing)."""
    capacity, reservoir_capacity = (int(value) for value in arrays["window_parameters"])
    size = arrays["window_scores"].size
    cursor = int(arrays["window_cursor"][0])
    events, positives, negatives = (int(count) for count in arrays["counts_since_start"])
    problems = []
    if arrays["window_labels"].size != size:
        problems.append("window_labels and window_scores differ in length")
    if size > capacity:
        problems.append(f"window_scores holds {size} pairs, more than capacity {capacity}")
    if not (0 <= cursor < capacity) or (size < capacity and cursor != size):
        problems.append(f"window_cursor {cursor} is inconsistent with {size} pairs")
    if not np.isin(arrays["window_labels"], (-1, 1)).all():
        problems.append("window_labels must be -1 or +1")
    if min(events, positives, negatives) < 0 or events != positives + negatives:
        problems.append("counts_since_start must be [events, positives, negatives] >= 0")
    if size > events:
        problems.append("the window holds more pairs than events seen since the start")
    for key, count in (
        ("reservoir_positive_scores", positives),
        ("reservoir_negative_scores", negatives),
    ):
        if arrays[key].size != min(reservoir_capacity, count):
            problems.append(f"{key} must hold min(reservoir_capacity, count) scores")
    for key in ("window_scores", "reservoir_positive_scores", "reservoir_negative_scores"):
        if not np.isfinite(arrays[key]).all():
            problems.append(f"{key} holds NaN or infinity")
    return problems
