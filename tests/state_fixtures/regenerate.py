"""Write the golden stored states checked by ``tests/service/test_state_format.py``.

Run after a change of the stored state's layout, together with a bump of
``service.engine.model.STATE_FORMAT_VERSION`` (docs/architecture.md §3, "Stored state
format")::

    PYTHONPATH=. python3 -m tests.state_fixtures.regenerate

For each registered learner, and for one model of the service's defaults (``auto``, with the
missing-value means and a regret window so that every part of a model is held), it learns a
fixed seeded stream and writes two files next to this module:

* ``<name>.npz``: the state arrays (``numpy.savez_compressed``; read with
  ``allow_pickle=False``),
* ``<name>.json``: the state format version, the parameters (or the model's configuration) to
  rebuild it with, each array's layout (dtype and number of dimensions) and the scores of a
  fixed batch, written as Python floats (``repr`` round-trips them exactly).

The functions below are also what the test calls to build the *current* code's states, so the
fixtures and the test learn the same stream the same way.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np

from core.learners import available_learners, learner_class, make_learner
from core.learners._base import OnlineLearner
from service.engine import Engine
from service.engine.model import STATE_FORMAT_VERSION, Loaded
from service.ingest import Batch
from service.models import create_model
from service.schemas import ModelCreate
from service.stores.memory import MemoryStore

HERE = pathlib.Path(__file__).resolve().parent
#: the name of the fixture of a whole service model (the others are learners' names)
MODEL = "model"
N_FEATURES = 4
#: enough events for every learner to leave its initial phase (``boosted_embedded`` and
#: ``auto``'s boosted candidate fit their first trees at 250 events)
N_EVENTS = 400
N_SCORED = 16
#: a fixed clock for the service model (its counters, rate and history hold times)
CLOCK = 1_700_000_000.0


def stream(n_events: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A seeded stream of ``N_FEATURES`` features: positives shifted along the first two."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n_events) < 0.3).astype(np.int64)
    X = rng.normal(size=(n_events, N_FEATURES)) + 1.5 * y[:, None] * (np.arange(N_FEATURES) < 2)
    return X, y


def scored_batch() -> np.ndarray:
    """The batch every fixture's scores are of."""
    return stream(N_SCORED, seed=1)[0]


def learner_params(name: str) -> dict[str, Any]:
    """The parameters a learner's fixture is written with: its defaults, seeded."""
    params = learner_class(name)().get_params()
    return {"random_state": 0} if "random_state" in params else {}


def learned_learner(name: str) -> OnlineLearner:
    """Learner ``name`` after the fixed stream (learned in batches of 50 events)."""
    learner = make_learner(name, **learner_params(name))
    X, y = stream(N_EVENTS, seed=0)
    for start in range(0, N_EVENTS, 50):
        learner.partial_fit(X[start : start + 50], y[start : start + 50])
    return learner


def learned_model() -> Loaded:
    """A model of the service's defaults after the fixed stream, through the engine."""
    engine = Engine(MemoryStore(), clock=lambda: CLOCK)
    request = ModelCreate(
        id="golden",
        n_features=N_FEATURES,
        params={"random_state": 0},
        missing_values="mean",
        regret_window=50,
    )
    create_model(engine, request)
    X, y = stream(N_EVENTS, seed=0)
    X[::7, 2] = np.nan  # the missing-value means learn something
    for start in range(0, N_EVENTS, 50):
        engine.learn("golden", Batch(X[start : start + 50], y[start : start + 50], None))
    return engine.repository.read("golden")


def layout(arrays: dict[str, np.ndarray]) -> dict[str, list]:
    """What a state's format fixes of each array: its dtype and its number of dimensions
    (sizes follow from the parameters and the width, which the format does not fix)."""
    described = {name: np.asarray(array) for name, array in sorted(arrays.items())}
    return {name: [array.dtype.str, array.ndim] for name, array in described.items()}


def fixture_names() -> list[str]:
    return [*available_learners(), MODEL]


def current(name: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The arrays and the description the current code writes for fixture ``name``."""
    if name == MODEL:
        loaded = learned_model()
        arrays = {key: np.array(value) for key, value in loaded.arrays().items()}
        scores = loaded.learner.decision_function(scored_batch())
        # the incarnation is a fresh random id: a fixed one keeps regenerated files unchanged
        config = loaded.config.model_copy(update={"incarnation": "golden"})
        rebuild: dict[str, Any] = {"config": config.model_dump(mode="json")}
    else:
        learner = learned_learner(name)
        arrays = learner.get_state()
        scores = learner.decision_function(scored_batch())
        rebuild = {"learner": name, "params": learner.get_params(), "n_features": N_FEATURES}
    description = {
        "state_format_version": STATE_FORMAT_VERSION,
        **rebuild,
        "layout": layout(arrays),
        "scores": [float(score) for score in scores],
    }
    return arrays, description


def load(name: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The checked-in arrays and description of fixture ``name``."""
    with np.load(HERE / f"{name}.npz", allow_pickle=False) as stored:
        arrays = {key: stored[key] for key in stored.files}
    return arrays, json.loads((HERE / f"{name}.json").read_text())


def write(name: str) -> None:
    arrays, description = current(name)
    np.savez_compressed(HERE / f"{name}.npz", allow_pickle=False, **arrays)
    text = json.dumps(description, indent=1, sort_keys=True)
    (HERE / f"{name}.json").write_text(text + "\n")


def main() -> None:
    for stale in [*HERE.glob("*.npz"), *HERE.glob("*.json")]:
        stale.unlink()
    for name in fixture_names():
        write(name)
        print(f"wrote {name}.npz and {name}.json")
    total = sum(path.stat().st_size for path in HERE.glob("*.*") if path.suffix != ".py")
    print(f"{total:,} bytes in all")


if __name__ == "__main__":
    main()
