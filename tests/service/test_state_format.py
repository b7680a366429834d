"""The stored state's format version (docs/architecture.md §3, "Stored state format"): every
store holds it, a state of another version is refused with what to do, and golden states
written by the current format's code (tests/state_fixtures) still load, score the same, and
have the layout the version promises."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

from core.learners import learner_class
from service.engine import Engine
from service.engine.entries import Entry
from service.engine.model import (
    FORMAT_ARRAY,
    STATE_FORMAT_VERSION,
    UNMARKED_FORMAT_VERSION,
    OtherStateFormat,
    check_state_format,
    from_arrays,
)
from service.errors import CorruptState
from service.ingest import Batch
from service.models import create_model, reset_model
from service.schemas import ModelConfig, ModelCreate
from service.stores.base import Commit
from tests.service.conftest import make_stream
from tests.state_fixtures import regenerate
from tests.state_fixtures.regenerate import MODEL, fixture_names

REGENERATE = "PYTHONPATH=. python3 -m tests.state_fixtures.regenerate"


# ---------------------------------------------------------------------- golden states
def test_every_registered_learner_has_a_golden_state():
    stored = sorted(path.stem for path in regenerate.HERE.glob("*.npz"))
    assert stored == sorted(fixture_names()), (
        f"the golden states in tests/state_fixtures are not one per learner and one model; "
        f"regenerate them: {REGENERATE}"
    )


def test_the_golden_states_are_small():
    total = sum(path.stat().st_size for path in regenerate.HERE.glob("*.np*"))
    assert total < 2_000_000


@pytest.mark.parametrize("name", fixture_names())
def test_a_golden_state_loads_and_scores_its_batch_exactly(name):
    arrays, description = regenerate.load(name)
    assert description["state_format_version"] == STATE_FORMAT_VERSION, (
        f"the golden state {name!r} is of format {description['state_format_version']}, the "
        f"code writes {STATE_FORMAT_VERSION}; regenerate the golden states: {REGENERATE}"
    )
    if name == MODEL:
        config = ModelConfig.model_validate(description["config"])
        learner = from_arrays(config, config.incarnation, 1, arrays).learner
    else:
        learner = learner_class(name).from_state(
            description["params"], arrays, n_features=description["n_features"]
        )
    scores = learner.decision_function(regenerate.scored_batch())
    np.testing.assert_array_equal(scores, np.array(description["scores"]))


@pytest.mark.parametrize("name", fixture_names())
def test_the_layout_is_the_one_of_the_state_format_version(name):
    """A renamed, added or removed array, or one of another dtype or number of dimensions,
    is a new format: the state of the current code must have the golden state's layout
    while the version is the same."""
    _, golden = regenerate.load(name)
    _, current = regenerate.current(name)
    if golden["state_format_version"] != STATE_FORMAT_VERSION:
        pytest.fail(f"the golden state {name!r} is of another format; regenerate: {REGENERATE}")
    old, new = golden["layout"], current["layout"]
    changes = [
        f"{key}: {old.get(key, 'absent')} in the golden state, {new.get(key, 'absent')} now"
        for key in sorted(old.keys() | new.keys())
        if old.get(key) != new.get(key)
    ]
    assert not changes, (
        f"the stored state of {name!r} changed layout ({'; '.join(changes)}) but "
        f"STATE_FORMAT_VERSION is still {STATE_FORMAT_VERSION}: every deployed model would be "
        "refused as corrupt.  Bump STATE_FORMAT_VERSION in service/engine/model.py and "
        f"regenerate the golden states: {REGENERATE}"
    )


# ---------------------------------------------------------------------- version on load
def _engine_with_model(store) -> Engine:
    engine = Engine(store)
    create_model(engine, ModelCreate(id="m", n_features=5, learner="spam"))
    engine.learn("m", Batch(*make_stream(40), None))
    return engine


def _commit_arrays(engine: Engine, arrays: dict[str, np.ndarray]) -> None:
    """Overwrite the stored state of model ``m`` (as another version of aucstream would)."""
    loaded = engine.repository.read("m")
    version = engine.store.commit("m", Commit(loaded.version, loaded.incarnation, Entry(1.0)))
    assert engine.store.checkpoint("m", loaded.incarnation, version, arrays)


def test_every_store_holds_the_format_version(store):
    _engine_with_model(store)
    stored = store.load("m").arrays
    assert stored is not None
    np.testing.assert_array_equal(stored[FORMAT_ARRAY], [STATE_FORMAT_VERSION])


@pytest.mark.parametrize("version", [STATE_FORMAT_VERSION - 1, STATE_FORMAT_VERSION + 1])
def test_a_state_of_another_format_is_refused_and_a_reset_recovers(store, version):
    engine = _engine_with_model(store)
    arrays = engine.repository.read("m").arrays()
    arrays[FORMAT_ARRAY] = np.array([version], dtype=np.int64)
    _commit_arrays(engine, arrays)
    engine.repository.clear()
    with pytest.raises(CorruptState) as refused:
        engine.info("m")
    message = str(refused.value)
    assert f"stored state format {version}, this server reads {STATE_FORMAT_VERSION}" in message
    assert "reset the model" in message and "run the version of aucstream that wrote it" in message
    assert refused.value.field == FORMAT_ARRAY
    reset_model(engine, "m")
    assert engine.info("m").counts.events_learned == 0


def test_a_state_without_the_version_array_is_of_the_first_format(store):
    """States committed before the version array existed have the layout of version 1: read as
    such, so refused once the format has moved on (a commit carries only the arrays that changed,
    so the check is driven directly with the array left out)."""
    arrays = _engine_with_model(store).repository.read("m").arrays()
    del arrays[FORMAT_ARRAY]
    if STATE_FORMAT_VERSION == UNMARKED_FORMAT_VERSION:
        check_state_format(arrays)
    else:
        with pytest.raises(
            OtherStateFormat, match=f"stored state format {UNMARKED_FORMAT_VERSION}"
        ):
            check_state_format(arrays)


def test_a_malformed_version_array_is_refused_naming_it(store):
    engine = _engine_with_model(store)
    arrays = engine.repository.read("m").arrays()
    arrays[FORMAT_ARRAY] = np.array([1.0, 2.0])
    _commit_arrays(engine, arrays)
    engine.repository.clear()
    with pytest.raises(CorruptState, match="expected one integer") as refused:
        engine.info("m")
    assert refused.value.field == FORMAT_ARRAY


@pytest.mark.parametrize("store_kind", ["memory"])
def test_a_snapshot_of_another_format_is_refused_with_what_to_do(client):
    client.post("/v1/models", json={"id": "m", "n_features": 5, "learner": "spam"})
    exported = client.get("/v1/models/m/snapshot").content
    rewritten = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(exported)) as archive,
        zipfile.ZipFile(rewritten, "w") as copy,
    ):
        for member in archive.namelist():
            data = archive.read(member)
            if member == f"arrays/{FORMAT_ARRAY}.npy":
                payload = io.BytesIO()
                np.save(payload, np.array([STATE_FORMAT_VERSION + 1], dtype=np.int64))
                data = payload.getvalue()
            copy.writestr(member, data)
    response = client.put(
        "/v1/models/copy/snapshot",
        content=rewritten.getvalue(),
        headers={"content-type": "application/zip"},
    )
    assert response.status_code == 422, response.text
    problem = response.json()
    assert response.headers["content-type"].startswith("application/problem+json")
    assert f"state format {STATE_FORMAT_VERSION + 1}, this server reads" in problem["detail"]
    assert "import it with the version of aucstream that exported it" in problem["detail"]
    assert client.get("/v1/models/copy").status_code == 404  # nothing was created
