import warnings

from core.learners import available_learners
from core.warmup import compile_kernels


def test_compile_kernels_runs_every_learner_the_metrics_and_regret_without_noise():
    reported: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the warm-up must not leak warnings into service logs
        timings = compile_kernels(lambda name, seconds: reported.append(name))
    assert set(timings) == set(available_learners()) | {"metrics", "regret"}
    assert reported == list(timings)  # one progress call per group, as it finishes
    assert all(seconds >= 0 for seconds in timings.values())
