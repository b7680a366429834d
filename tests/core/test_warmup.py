import subprocess
import sys
import warnings

import core.warmup
from core.learners import available_learners
from core.warmup import (
    DEFAULT_REST,
    READY_GROUPS,
    TREE,
    KernelReadiness,
    compile_kernels,
    group_cost,
    kernel_groups,
)


def test_compile_kernels_runs_every_learner_the_metrics_and_regret_without_noise():
    reported: list[str] = []
    with warnings.catch_warnings():
        # the warm-up must not leak warnings into service logs: its stream is learnable, so
        # that no solver rightly warns that w = 0 minimises its surrogate
        warnings.simplefilter("error")
        timings = compile_kernels(lambda name, seconds: reported.append(name))
    assert set(timings) == set(available_learners()) | {*READY_GROUPS, DEFAULT_REST, TREE}
    assert reported == list(timings) == kernel_groups()  # one call per group, as it finishes
    assert kernel_groups()[: len(READY_GROUPS) + 2] == [*READY_GROUPS, DEFAULT_REST, TREE]
    assert all(seconds >= 0 for seconds in timings.values())


def test_the_tree_libraries_are_imported_by_the_tree_group_not_before_ready():
    """The first tree fit in a process imports scikit-learn's trees and SMOTE (seconds on a
    busy machine): the tree group pays it after the service is ready, not the ready path nor
    the request that brings a model's 2,000th event.  In a fresh interpreter, since this one
    may have imported them already."""
    code = (
        "import sys\n"
        "from core.warmup import READY_GROUPS, TREE, compile_group\n"
        "for group in READY_GROUPS:\n"
        "    compile_group(group)\n"
        "loaded = {'sklearn', 'imblearn'} & {name.split('.')[0] for name in sys.modules}\n"
        "assert not loaded, loaded\n"
        "compile_group(TREE)\n"
        "assert {'imblearn.over_sampling', 'sklearn.tree'} <= set(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=600)


def test_the_warm_up_stream_is_learnable_so_svm_pauc_does_not_warn():
    """The warm-up's stream was noise, on which svm_pauc rightly warns that w = 0 minimises
    its surrogate: the warning every start printed.  Positives now lie apart."""
    from core.learners import make_learner
    from core.warmup import _as_csr, _tiny_stream

    X, y = _tiny_stream()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for scaling in ("none", "unit_norm", "standard", "scale"):
            make_learner("svm_pauc", scaling=scaling).fit(X, y)
        make_learner("svm_pauc", scaling="scale").fit(_as_csr(X), y)


class Clock:
    """``time.monotonic`` of :mod:`core.warmup`, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_progress_estimates_the_time_left_from_the_groups_typical_costs(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(core.warmup.time, "monotonic", clock)
    readiness = KernelReadiness()
    groups = ["default", "metrics", "regret", DEFAULT_REST, "opauc"]
    readiness.plan(groups)
    cost = {name: group_cost(name) for name in groups}
    # before any group ran: the typical costs as they are
    fresh = readiness.progress()
    assert fresh["groups_done"] == 0 and fresh["groups_total"] == 5 and fresh["compiling"] is None
    assert fresh["seconds_to_ready"] == round(cost["default"] + cost["metrics"] + cost["regret"], 1)
    assert fresh["seconds_to_all"] == round(sum(cost.values()), 1)
    # the default path took half its typical cost: the rest is expected twice as fast
    assert readiness.next_group() == "default"
    clock.now += cost["default"] / 2
    readiness.finished("default")
    half = readiness.progress()
    assert half["groups_done"] == 1 and half["elapsed_seconds"] == round(cost["default"] / 2, 1)
    assert half["seconds_to_ready"] == round((cost["metrics"] + cost["regret"]) / 2, 1)
    # a group running past its share slows the estimate down: here three times its cost
    assert readiness.next_group() == "metrics"
    clock.now += 3 * cost["metrics"]
    slow = readiness.progress()
    scale = (cost["default"] / 2 + 3 * cost["metrics"]) / (cost["default"] + cost["metrics"])
    assert slow["compiling"] == "metrics"
    assert slow["seconds_to_ready"] == round(cost["regret"] * scale, 1)  # metrics: overdue, 0
    readiness.finished("metrics")
    readiness.next_group()
    readiness.finished("regret")
    ready = readiness.progress()
    assert ready["groups_done"] == 3 and ready["seconds_to_ready"] == 0
    assert ready["seconds_to_all"] > 0
    # a request's groups moved to the front: the estimate for them counts them alone
    assert readiness.missing(["opauc"]) == ["opauc"]
    assert 0 < readiness.progress(["opauc"])["seconds_to_ready"] < ready["seconds_to_all"]
    while (name := readiness.next_group()) is not None:
        readiness.finished(name)
    done = readiness.progress()
    assert done["groups_done"] == done["groups_total"] == 5
    assert done["seconds_to_ready"] == done["seconds_to_all"] == 0 and done["compiling"] is None
