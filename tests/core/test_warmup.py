import subprocess
import sys
import warnings

from core.learners import available_learners
from core.warmup import READY_GROUPS, TREE, compile_kernels, kernel_groups


def test_compile_kernels_runs_every_learner_the_metrics_and_regret_without_noise():
    reported: list[str] = []
    with warnings.catch_warnings():
        # the warm-up must not leak warnings into service logs: its stream is learnable, so
        # that no solver rightly warns that w = 0 minimises its surrogate
        warnings.simplefilter("error")
        timings = compile_kernels(lambda name, seconds: reported.append(name))
    assert set(timings) == set(available_learners()) | {"default", "metrics", "regret", "tree"}
    assert reported == list(timings) == kernel_groups()  # one call per group, as it finishes
    assert kernel_groups()[: len(READY_GROUPS) + 1] == [*READY_GROUPS, TREE]
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
