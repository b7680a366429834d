"""Throughput of the pAUC learners and the regret curve of ftrl_pauc.

Not a test: prints two short tables.  Usage::

    python bench/pauc.py                 # throughput + regret curve
    python bench/pauc.py --skip-regret

Throughput: dense float64 events with 50 features and 1 % positives, learned with
``partial_fit`` in batches of 10,000 events (one kernel call each), timed after a warm-up call
that pays the JIT (reported apart).  Targets: pmb (s = 500) >= 1,000,000 events/s,
ftrl_pauc >= 200,000 events/s amortised, svm_pauc on 100,000 x 50 with beta = 0.1 converging in
under 30 s.

Regret: one stationary stream (10 % positives, 20 features), ftrl_pauc with its defaults except
``first_update_every = update_every`` (so that its weights change only at round boundaries),
replayed in rounds of ``update_every`` events; for growing windows T (each the first T events)
the normalised regret and pAUC gap of :func:`core.regret.regret` against svm_pauc (C = 1/lam).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.learners import make_learner  # noqa: E402
from core.learners.svm_pauc import solve_svm_pauc  # noqa: E402
from core.regret import regret, replay  # noqa: E402


def stream(n, n_features, rate, seed=0, shift=0.4):
    rng = np.random.default_rng(seed)
    direction = np.random.default_rng(123).normal(size=n_features) * shift
    y = (rng.random(n) < rate).astype(np.int64)
    X = rng.normal(size=(n, n_features)) + y[:, None] * direction
    return X, y


def throughput(name, params, X, y, batch=10_000, repeats=3):
    warm = make_learner(name, **params)
    started = time.perf_counter()
    warm.partial_fit(X[:batch], y[:batch])
    compile_seconds = time.perf_counter() - started
    best = np.inf
    for _ in range(repeats):
        learner = make_learner(name, **params)
        started = time.perf_counter()
        for start in range(0, len(y), batch):
            learner.partial_fit(X[start : start + batch], y[start : start + batch])
        best = min(best, time.perf_counter() - started)
    return len(y) / best, compile_seconds


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--skip-regret", action="store_true")
    args = parser.parse_args(argv)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"python {platform.python_version()}")  # fmt: skip

    X, y = stream(args.events, 50, 0.01)
    print(f"\n{'learner':<28} {'events/s':>12} {'JIT s':>8}   target")
    for label, name, params, target in [
        ("pmb 1PMB s=500", "pmb", {}, 1_000_000),
        ("pmb 2PMB s=500", "pmb", {"passes": 2}, 1_000_000),
        ("pmb prbep s=500", "pmb", {"loss": "prbep"}, 1_000_000),
        ("ftrl_pauc (defaults)", "ftrl_pauc", {}, 200_000),
    ]:
        rate, jit = throughput(name, params, X, y)
        verdict = "met" if rate >= target else "MISSED"
        print(f"{label:<28} {rate:>12,.0f} {jit:>8.2f}   >= {target:,} {verdict}")

    X_svm, y_svm = stream(100_000, 50, 0.01, seed=1)
    labels = np.where(y_svm > 0, 1, -1)
    solve_svm_pauc(X_svm[:2000], labels[:2000])  # JIT
    for alpha, beta, method in [(0.0, 0.1, "tight"), (0.02, 0.05, "tight"), (0.02, 0.05, "dc")]:
        started = time.perf_counter()
        result = solve_svm_pauc(X_svm, labels, alpha=alpha, beta=beta, method=method)
        seconds = time.perf_counter() - started
        print(f"svm_pauc 100k x 50 [{alpha}, {beta}] {method:<5} {seconds:6.2f} s, "
              f"{result.n_iter} cutting-plane iterations, converged={result.converged}"
              + ("   (target < 30 s " + ("met)" if seconds < 30 else "MISSED)")
                 if (alpha, method) == (0.0, "tight") else ""))  # fmt: skip

    if args.skip_regret:
        return 0
    print("\nftrl_pauc regret on a stationary stream (10 % positives, 20 features, beta = 0.1)")
    print(f"{'T':>7} {'online loss':>12} {'hindsight':>10} {'regret':>9} "
          f"{'preq pAUC':>10} {'w* pAUC':>8} {'gap':>7}")  # fmt: skip
    X, y = stream(64_000, 20, 0.1, seed=2, shift=0.5)
    learner_params = make_learner("ftrl_pauc").get_params()
    learner_params["first_update_every"] = learner_params["update_every"]
    for T in (1000, 2000, 4000, 8000, 16000, 32000, 64000):
        learner = make_learner("ftrl_pauc", **learner_params)
        ends, weights, scores = replay(learner, X[:T], y[:T], learner_params["update_every"])
        report = regret(X[:T], y[:T], ends, weights, scores, C=1.0 / learner_params["lam"])
        print(f"{T:>7} {report.online_loss:>12.4f} {report.hindsight_loss:>10.4f} "
              f"{report.regret:>9.4f} {report.prequential_pauc:>10.4f} "
              f"{report.hindsight_pauc:>8.4f} {report.pauc_gap:>7.4f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
