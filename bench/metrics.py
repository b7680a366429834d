"""Cost of the exact metrics over a full prequential window (one core, steady state).

Run: ``python bench/metrics.py``.  The target: pAUC over a full window of 100,000
pairs in under 20 ms.  JIT compile (or cache load) time is reported apart from steady state;
each timing is the median of repeated calls on a window that is refilled between calls, so the
window's sort cache never answers.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np

from core.metrics import PrequentialWindow

WINDOW_SIZES = (1_000, 10_000, 100_000)
REPEATS = 15
UPDATE_BATCH = 1_000


def _synthetic_stream(n_events: int, rng: np.random.Generator):
    """Scores of a decent classifier on 10% positives, rounded so that ties occur."""
    labels = (rng.random(n_events) < 0.1).astype(np.int64)
    scores = np.round(rng.normal(size=n_events) + 1.5 * labels, 3)
    return scores, labels


def _median_ms(window, method, refill) -> float:
    timings = []
    for _ in range(REPEATS):
        refill()  # invalidate the window's sorted-scores cache
        start = time.perf_counter()
        method()
        timings.append(time.perf_counter() - start)
    return 1e3 * float(np.median(timings))


def measure_compile_time() -> float:
    start = time.perf_counter()
    window = PrequentialWindow(capacity=8, reservoir_capacity=4)
    window.update([0.1, 0.5, 0.2, 0.9, 0.4, 0.3], [0, 1, 0, 1, 0, 1])
    window.auc()
    window.pauc(0.0, 0.5)
    window.roc_curve()
    return time.perf_counter() - start


def measure(window_size: int, rng: np.random.Generator) -> dict:
    scores, labels = _synthetic_stream(window_size + UPDATE_BATCH, rng)
    window = PrequentialWindow(capacity=window_size)
    window.update(scores[:window_size], labels[:window_size])
    extra_scores, extra_labels = scores[window_size:], labels[window_size:]

    def refill():
        window.update(extra_scores[:1], extra_labels[:1])

    row = {
        "window": window_size,
        "auc_ms": _median_ms(window, window.auc, refill),
        "pauc_ms": _median_ms(window, lambda: window.pauc(0.0, 0.1), refill),
        "roc_ms": _median_ms(window, window.roc_curve, refill),
    }
    # Update throughput: batches of UPDATE_BATCH into a full window, reservoirs included.
    n_batches = max(20, 200_000 // UPDATE_BATCH)
    batch_scores, batch_labels = _synthetic_stream(UPDATE_BATCH * n_batches, rng)
    start = time.perf_counter()
    for batch in range(n_batches):
        chunk = slice(batch * UPDATE_BATCH, (batch + 1) * UPDATE_BATCH)
        window.update(batch_scores[chunk], batch_labels[chunk])
    row["update_events_per_s"] = UPDATE_BATCH * n_batches / (time.perf_counter() - start)
    return row


def measure_full_summary(rng: np.random.Generator) -> tuple[int, float]:
    """summary() as the metrics endpoint calls it: a full 100,000 window and both since-start
    reservoirs full (100,000 scores per class): AUC, pAUC and standardised pAUC of 300,000
    scores in all."""
    window = PrequentialWindow(capacity=100_000)
    n_events = 0
    while min(window.counts_since_start["positives"], window.counts_since_start["negatives"]) < (
        window.reservoir_capacity
    ):
        scores, labels = _synthetic_stream(200_000, rng)
        labels[::2] = 1 - labels[::2]  # about half positives, to fill both reservoirs quickly
        window.update(scores, labels)
        n_events += scores.size
    extra_scores, extra_labels = _synthetic_stream(REPEATS, rng)
    position = iter(range(REPEATS))

    def refill():
        index = next(position)
        window.update(extra_scores[index : index + 1], extra_labels[index : index + 1])

    return n_events, _median_ms(window, lambda: window.summary(0.0, 0.1), refill)


def main() -> None:
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, numpy {np.__version__}"
    )
    print(f"first call (JIT compile or cache load): {measure_compile_time():.2f} s")
    rng = np.random.default_rng(0)
    print(
        f"{'window':>8} {'auc ms':>8} {'pauc ms':>8} {'roc ms':>8} "
        f"{'update events/s':>16}  (batches of {UPDATE_BATCH})"
    )
    for window_size in WINDOW_SIZES:
        row = measure(window_size, rng)
        print(
            f"{row['window']:>8} {row['auc_ms']:>8.2f} {row['pauc_ms']:>8.2f} "
            f"{row['roc_ms']:>8.2f} {row['update_events_per_s']:>16,.0f}"
        )
    n_events, summary_ms = measure_full_summary(rng)
    print(
        f"summary() of a full 100,000 window with full reservoirs (2 x 100,000, after "
        f"{n_events:,} events): {summary_ms:.2f} ms"
    )
    print(f"load average during the run: {os.getloadavg()[0]:.1f} (other work shares the cores)")


if __name__ == "__main__":
    main()
