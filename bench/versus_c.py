"""The numba kernels against plain C written from the same equations, on streams larger than
the cache.

Not a test: prints one table.  Usage::

    python bench/versus_c.py                          # 10**6 events, 3 alternated rounds
    python bench/versus_c.py --events 200000 --rounds 5 --cases spam-dense50

Method:

* ``bench/c_reference/spam.c`` (SPAM-L2 and SOLAM, dense and CSR) is compiled at bench time
  with the system compiler (``cc -O3 -march=native``), twice: ``C exact`` adds
  ``-ffp-contract=off`` (no fused multiply-add, the arithmetic numba does with ``fastmath``
  off, so the state must match the kernel's to the last bit, which the bench checks), ``C`` is
  the compiler's default.  Nothing of it is shipped.
* every round learns the whole stream once from a fresh state, in turn: the numba kernel
  alone (``_learn`` on the validated batch), ``partial_fit`` (validation and coercion of the
  raw batch included), then both C builds through ``ctypes`` on the same arrays, so the
  machine's load hits all alike.  A stream of 10**6 x 50 float64 is 400 MB: every event is
  read from memory, not from the cache.
* rates are events per CPU second of this process (``time.process_time``), best round; the
  ratio column is numba's rate over ``C``'s (>= 1 means as fast as C).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ["NUMBA_NUM_THREADS"] = "1"

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.kernels import chosen_cases, csr_events, dense_events  # noqa: E402
from core._kernels._config import drop_stale_cache  # noqa: E402
from core.csr import CSRMatrix
from core.learners import make_learner  # noqa: E402
from core.learners.spam import feature_table  # noqa: E402
from core.validation import check_batch  # noqa: E402

SOURCE = Path(__file__).with_name("c_reference") / "spam.c"
DOUBLE_P = ctypes.POINTER(ctypes.c_double)
INT64_P = ctypes.POINTER(ctypes.c_int64)


class SpamStateC(ctypes.Structure):
    _fields_ = [
        (name, DOUBLE_P)
        for name in (
            "w_unscaled", "w_scale", "avg_offset", "avg_coef", "sum_pos", "sum_neg",
            "w_dot_sum_pos", "w_dot_sum_neg",
        )
    ] + [(name, INT64_P) for name in ("n_seen", "n_pos", "n_neg", "n_steps")] + [
        ("sq_norm_sum", DOUBLE_P)
    ]  # fmt: skip


def compile_reference(exact: bool) -> ctypes.CDLL:
    compiler = os.environ.get("CC", "cc")
    flags = ["-O3", "-march=native", "-shared", "-fPIC"]
    if exact:
        flags.append("-ffp-contract=off")
    target = Path(tempfile.mkdtemp(prefix="aucstream-c-")) / "spam_reference.so"
    subprocess.run([compiler, *flags, "-o", str(target), str(SOURCE), "-lm"], check=True)
    library = ctypes.CDLL(str(target))
    for name in ("spam_l2_dense", "spam_l2_csr", "solam_dense", "solam_csr"):
        getattr(library, name).restype = None
    return library


def pointer(array: np.ndarray):
    kind = DOUBLE_P if array.dtype == np.float64 else INT64_P
    return array.ctypes.data_as(kind)


def spam_state(learner) -> SpamStateC:
    s = learner.state_
    return SpamStateC(
        pointer(s["w_unscaled"]), pointer(s["w_scale"]), pointer(s["avg_offset"]),
        pointer(s["avg_coef"]), pointer(s["class_sum_pos"]), pointer(s["class_sum_neg"]),
        pointer(s["w_dot_class_sum_pos"]), pointer(s["w_dot_class_sum_neg"]),
        pointer(s["n_seen"]), pointer(s["n_pos"]), pointer(s["n_neg"]), pointer(s["n_steps"]),
        pointer(s["sq_norm_sum"]),
    )  # fmt: skip


def run_c(library, learner, X, labels) -> None:
    """Learn the validated batch with the C step on ``learner``'s own state arrays."""
    n = len(labels)
    if learner.name == "solam":
        s = learner.state_
        keys = ("w_scale", "w_sq_norm", "a", "b", "alpha", "avg_coef", "avg_a", "avg_b",
                "avg_alpha", "gamma_sum", "sq_norm_sum", "max_norm")  # fmt: skip
        scalars = (DOUBLE_P * len(keys))(*(pointer(s[key]) for key in keys))
        counts = (INT64_P * 2)(pointer(s["n_seen"]), pointer(s["n_pos"]))
        steps = (ctypes.c_double(learner.eta0), ctypes.c_double(learner.l2),
                 ctypes.c_double(learner._radius()), ctypes.c_double(0.0))  # fmt: skip
        if isinstance(X, CSRMatrix):
            table = feature_table(learner, ("w_unscaled", "avg_offset"))
            row_stride, column_stride = (stride // 8 for stride in table.strides)
            library.solam_csr(
                pointer(X.indptr), pointer(X.indices), pointer(X.data), pointer(labels),
                ctypes.c_int64(n), ctypes.c_int64(X.shape[1]), None,
                table.ctypes.data_as(DOUBLE_P), ctypes.c_int64(row_stride),
                ctypes.c_int64(column_stride), scalars, counts, *steps,
            )  # fmt: skip
            return
        library.solam_dense(
            pointer(X), pointer(labels), ctypes.c_int64(n), ctypes.c_int64(X.shape[1]), None,
            pointer(s["w_unscaled"]), pointer(s["avg_offset"]), scalars, counts, *steps,
        )  # fmt: skip
    elif isinstance(X, CSRMatrix):
        table = feature_table(learner, ("w_unscaled", "avg_offset", "class_sum_neg",
                                        "class_sum_pos"))  # fmt: skip
        row_stride, column_stride = (stride // 8 for stride in table.strides)
        library.spam_l2_csr(
            pointer(X.indptr), pointer(X.indices), pointer(X.data), pointer(labels),
            ctypes.c_int64(n), ctypes.c_int64(X.shape[1]), None,
            table.ctypes.data_as(DOUBLE_P), ctypes.c_int64(row_stride),
            ctypes.c_int64(column_stride), spam_state(learner), ctypes.c_double(learner.eta0),
            ctypes.c_double(learner.l2), ctypes.c_int64(learner.n_warmup),
        )  # fmt: skip
    else:
        library.spam_l2_dense(
            pointer(X), pointer(labels), ctypes.c_int64(n), ctypes.c_int64(X.shape[1]), None,
            spam_state(learner), ctypes.c_double(learner.eta0), ctypes.c_double(learner.l2),
            ctypes.c_int64(learner.n_warmup),
        )  # fmt: skip


CASES = {
    "spam-dense50": ("spam", lambda n: dense_events(n, 50)),
    "solam-dense50": ("solam", lambda n: dense_events(n, 50)),
    # 20 non-zeros a row, columns uniform over 2**20: every access misses the cache
    "spam-csr": ("spam", lambda n: csr_events(n, 2**20, 20)),
    "solam-csr": ("solam", lambda n: csr_events(n, 2**20, 20)),
}


def fresh(name: str, n_features: int):
    learner = make_learner(name)
    learner.initialize(n_features)
    return learner


def cpu_seconds(function) -> float:
    """CPU seconds of ``function()``, with Python's cyclic garbage collector run before and
    off during the call (a collection inside one runner's timing would be charged to it)."""
    gc.collect()
    gc.disable()
    try:
        started = time.process_time()
        function()
        return time.process_time() - started
    finally:
        gc.enable()


def states_equal(a, b) -> bool:
    return all(np.array_equal(a.state_[key], b.state_[key]) for key in a.state_)


def measure(case: str, n_events: int, rounds: int, exact, natural) -> dict[str, float]:
    name, make = CASES[case]
    X_raw, y_raw = make(n_events)
    X, labels = check_batch(X_raw, y_raw)
    n_features = X.shape[1]
    tiny = X.take_rows(np.arange(8)) if isinstance(X, CSRMatrix) else X[:8]
    fresh(name, n_features).partial_fit(tiny, labels[:8])  # compile outside the timing
    runners = {
        "numba kernel": lambda learner: learner._learn(X, labels, np.empty(0)),
        "partial_fit": lambda learner: learner.partial_fit(X_raw, y_raw),
        "C exact": lambda learner: run_c(exact, learner, X, labels),
        "C": lambda learner: run_c(natural, learner, X, labels),
    }
    best = dict.fromkeys(runners, float("inf"))
    for _ in range(rounds):
        learned = {}
        for label, run in runners.items():
            learner = fresh(name, n_features)
            best[label] = min(best[label], cpu_seconds(lambda: run(learner)))  # noqa: B023
            learned[label] = learner
        if not states_equal(learned["numba kernel"], learned["C exact"]):
            raise SystemExit(f"{case}: the C step and the kernel disagree: not the same step")
    return {label: n_events / seconds for label, seconds in best.items()}


def main(argv=None):
    drop_stale_cache()  # an edited checkout's kernels compile afresh
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    cases = chosen_cases(parser, args.cases, CASES)
    exact, natural = compile_reference(exact=True), compile_reference(exact=False)
    print(
        f"{args.events:,} events per round, best of {args.rounds} alternated rounds, "
        f"events per CPU second; load average {os.getloadavg()[0]:.2f}"
    )
    print(f"{'case':<15} {'numba kernel':>13} {'partial_fit':>12} {'C exact':>12} {'C':>12} "
          f"{'kernel/C':>9} {'partial_fit/C':>14}")  # fmt: skip
    for case in cases:
        rates = measure(case, args.events, args.rounds, exact, natural)
        print(
            f"{case:<15} {rates['numba kernel']:>13,.0f} {rates['partial_fit']:>12,.0f} "
            f"{rates['C exact']:>12,.0f} {rates['C']:>12,.0f} "
            f"{rates['numba kernel'] / rates['C']:>9.2f} "
            f"{rates['partial_fit'] / rates['C']:>14.2f}"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
