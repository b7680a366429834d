import warnings

from core.learners import available_learners
from core.warmup import compile_kernels


def test_compile_kernels_runs_every_learner_and_the_metrics_without_noise():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the warm-up must not leak warnings into service logs
        timings = compile_kernels()
    assert set(timings) == set(available_learners()) | {"metrics"}
    assert all(seconds >= 0 for seconds in timings.values())
