import subprocess
import sys
import warnings

from core.learners import available_learners
from core.warmup import compile_kernels


def test_compile_kernels_runs_every_learner_the_metrics_and_regret_without_noise():
    reported: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the warm-up must not leak warnings into service logs
        timings = compile_kernels(lambda name, seconds: reported.append(name))
    assert set(timings) == set(available_learners()) | {"metrics", "regret", "tree"}
    assert reported == list(timings)  # one progress call per group, as it finishes
    assert all(seconds >= 0 for seconds in timings.values())


def test_the_warm_up_imports_the_tree_fit_s_libraries():
    """The first tree fit in a process imports scikit-learn's trees and SMOTE (about a second):
    the warm-up pays it, not the request that brings a model's 2,000th event.  In a fresh
    interpreter, since this one may have imported them already."""
    code = (
        "import sys\n"
        "from core.warmup import _fit_tree\n"
        "assert 'imblearn.over_sampling' not in sys.modules\n"
        "_fit_tree()\n"
        "assert {'imblearn.over_sampling', 'sklearn.tree'} <= set(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
