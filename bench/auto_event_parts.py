"""Where ``auto``'s one-event call goes on Elec2 (issue 39): the parts of one warm call, and
what numba's dispatch costs for the arguments the per-event kernels take.

Not a test: prints a table.  ``make_learner("auto", random_state=0)`` learns Elec2's first
``--warm`` events in batches of 100, then ``--single`` one at a time; the parts are then timed
on the next event, each repeated (best of 5 on the thread's CPU clock, ``--number`` calls):

* the whole ``prequential_step``, its validation (``_coerce``) and the grown-state check;
* each candidate's ``_learn`` of the event (its rows as ``auto`` passes them);
* each per-event kernel on the arguments it took at that event (copies), beside a no-op
  kernel taking the same arguments: its dispatch (typing and unboxing them) apart from its
  arithmetic;
* a no-op kernel taking 26 float arrays as 26 arguments, as one tuple and as one numba
  ``structref`` holding them (the options for bundling a candidate's arrays).

Repeated learning of the same event moves the model (a fit may fall due: keep ``--number``
small); the figures are per call.  Run it in each tree to compare::

    PYTHONPATH=. python bench/auto_event_parts.py [--warm 8100] [--single 100] [--number 300]
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import timeit
from pathlib import Path

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from numba import njit, types  # noqa: E402
from numba.experimental import structref  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from streams import load_stream  # noqa: E402

#: (module, kernel, the modules that call it by a name of their own)
KERNELS = [
    ("core._kernels.auto", "serve_record_and_watch", ["core.learners._auto_drift"]),
    ("core._kernels.ftrl_pauc", "ftrl_learn", ["core.learners.ftrl_pauc"]),
    ("core._kernels.logistic_laplace", "laplace_dense", ["core.learners.logistic"]),
    ("core._kernels.logistic", "logistic_dense", ["core.learners.logistic"]),
    ("core._kernels.validation", "count_out_of_range_in", ["core.learners._grown"]),
    ("core._kernels.boosted_embedding", "learn_segment", ["core.learners._boosted_fused"]),
]


@structref.register
class _BagType(types.StructRef):
    def preprocess_fields(self, fields):
        return tuple((name, types.unliteral(kind)) for name, kind in fields)


class _Bag(structref.StructRefProxy):
    pass


_FIELDS = [f"a{i}" for i in range(26)]
structref.define_proxy(_Bag, _BagType, _FIELDS)


@njit
def _noop(*arguments):
    return 0


@njit
def _bag_noop(bag):
    return bag.a0.shape[0] + bag.a25.shape[0]


def best(call, number: int) -> float:
    """Microseconds per call: the best of 5 repeats on the thread's CPU clock."""
    return min(timeit.repeat(call, number=number, repeat=5, timer=time.thread_time)) / number * 1e6


def _copy(value):
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, tuple):
        return tuple(_copy(item) for item in value)
    return value


def captured_arguments(model, X, y) -> dict[str, tuple]:
    """The arguments each of :data:`KERNELS` took while ``model`` learned ``(X, y)``."""
    captured: dict[str, tuple] = {}
    restore = []

    def spy(name, kernel):
        def call(*arguments):
            captured.setdefault(name, arguments)
            return kernel(*arguments)

        return call

    for module, name, users in KERNELS:
        kernel = getattr(importlib.import_module(module), name)
        # the callers' own names for it, and its module's (callers that read it from there)
        owners = [importlib.import_module(name) for name in (*users, module)]
        for owner in owners:
            for attribute in dir(owner):
                if getattr(owner, attribute) is kernel:
                    setattr(owner, attribute, spy(name, kernel))
                    restore.append((owner, attribute, kernel))
    try:
        model.prequential_step(X, y)
    finally:
        for owner, attribute, kernel in restore:
            setattr(owner, attribute, kernel)
    return captured


#: Elec2 events after which the buffers the timed kernels append to are full (ftrl_pauc's
#: reservoirs keep every event until 1,000 positives and 2,000 negatives: ~3,500 events)
SETTLED_AT = 8100


def warmed_auto(warm: int, single: int):
    """``make_learner("auto")`` warmed on Elec2's first ``warm`` events in batches of 100,
    then ``single`` more one at a time (the one-event path's caches settled), with Elec2's
    ``X, y`` and the slice of the next event, the one the benchmarks time."""
    from core.learners import make_learner

    X, y = load_stream("elec2")
    model = make_learner("auto", random_state=0)
    for start in range(0, warm, 100):
        model.prequential_step(X[start : start + 100], y[start : start + 100])
    at = warm
    for at in range(warm, warm + single):
        model.prequential_step(X[at : at + 1], y[at : at + 1])
    return model, X, y, slice(at + 1, at + 2)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warm", type=int, default=SETTLED_AT)
    parser.add_argument("--single", type=int, default=100)
    parser.add_argument("--number", type=int, default=300)
    args = parser.parse_args(argv)
    if args.warm < SETTLED_AT:
        # the kernels are timed by calling them again and again on one copy of their arrays:
        # a candidate's buffer still filling would be written past its end (numba does not
        # check bounds), where a full one only replaces its rows
        parser.error(f"--warm must be at least {SETTLED_AT} (the candidates' buffers full)")
    from core.preprocessing import scale_batch

    model, X, y, event = warmed_auto(args.warm, args.single)
    at = event.start - 1
    captured = captured_arguments(model, X[event], y[event])
    number = args.number
    print(f"Elec2 event {at + 2}, load {os.getloadavg()[0]:.2f}; us per call, best of 5\n")
    print("| part | us |\n|---|---|")
    rows, labels = model._coerce(X[event], y[event], check_finite=False)
    parts = {
        "prequential_step": lambda: model.prequential_step(X[event], y[event]),
        "_coerce (validation)": lambda: model._coerce(X[event], y[event]),
        "grown-state check": lambda: model._check_grown_state(restored=False),
    }
    for part, call in parts.items():
        print(f"| {part} | {best(call, number):.2f} |")
    scaled = scale_batch(model.scaling, model._scaler_arrays, rows, learn=False)
    roles = model._candidate_roles()
    scores = np.empty(1)
    for k, candidate in enumerate(model._candidates):
        given = rows if roles.unscaled[k] else scaled
        took = best(lambda c=candidate, r=given: c._learn(r, labels, scores), number)
        print(f"| candidate {k} {type(candidate).__name__}._learn | {took:.2f} |")
    print("\n| kernel | arguments | arrays | call us | no-op, same arguments us |")
    print("|---|---|---|---|---|")
    for module, name, _ in KERNELS:
        if name not in captured:
            continue
        arguments = [_copy(value) for value in captured[name]]
        kernel = getattr(importlib.import_module(module), name)
        _noop(*arguments)
        arrays = sum(isinstance(value, np.ndarray) for value in arguments)
        call = best(lambda k=kernel, a=arguments: k(*a), number)
        dispatch = best(lambda a=arguments: _noop(*a), number)
        print(f"| {name} | {len(arguments)} | {arrays} | {call:.2f} | {dispatch:.2f} |")
    arrays = [np.zeros(8) for _ in _FIELDS]
    bundle, bag = tuple(arrays), _Bag(*arrays)
    _noop(*arrays), _noop(bundle), _bag_noop(bag)
    print("\n| 26 arrays passed as | no-op call us |\n|---|---|")
    print(f"| 26 arguments | {best(lambda: _noop(*arrays), 20 * number):.2f} |")
    print(f"| one tuple | {best(lambda: _noop(bundle), 20 * number):.2f} |")
    print(f"| one structref | {best(lambda: _bag_noop(bag), 20 * number):.2f} |")
    print(f"| (building the structref) | {best(lambda: _Bag(*arrays), number):.2f} |")


if __name__ == "__main__":
    main()
