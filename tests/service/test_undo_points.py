"""Undo points (service/engine/undo.py): where a stale append of a model that several processes
write goes back to instead of rebuilding the model from its checkpoint and log tail, and when
they are kept, taken again or dropped."""

from __future__ import annotations

import pytest

from service.engine import undo
from tests.service.passes_helpers import (
    assert_same_models,
    batch,
    make_engine,
    racing_once,
    through_pass,
)


@pytest.mark.parametrize("writes_before", [0, 3])
def test_the_first_stale_append_of_a_model_loaded_whole_goes_back_to_its_load(
    tmp_path, writes_before
):
    """A process that loaded the model from the store (another one created it) meets its
    first stale append with the undo point of that load: no rebuild, nothing lost."""
    creator = make_engine(tmp_path / "data", ["m"])
    creator.learn("m", batch(["first"], seed=0))
    engine = make_engine(tmp_path / "data", ["m"])
    mine = [batch([f"mine-{k}"], seed=10 + k) for k in range(writes_before)]
    for each in mine:
        engine.learn("m", each)
    theirs = batch(["theirs"], seed=5)
    racing_once(engine, creator, theirs)
    result = engine.learn("m", batch(["x"], seed=9))
    assert result.learned == 1
    repository = engine.repository
    assert (repository.writes_retried, repository.writes_undone, repository.writes_reloaded) == (
        1,
        1,
        0,
    )
    expected = make_engine(tmp_path / "expected", ["m"])
    for each in [batch(["first"], seed=0), *mine, theirs, batch(["x"], seed=9)]:
        expected.learn("m", each)
    assert_same_models(engine, expected, ["m"])
    assert_same_models(make_engine(tmp_path / "data", ["m"]), expected, ["m"])


def test_a_standing_point_is_taken_again_when_shared_and_dropped_when_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(undo, "STANDING_AGE", 2)
    engine = make_engine(tmp_path / "data", ["m"])
    other = make_engine(tmp_path / "data", ["m"])
    repository = engine.repository
    created = repository.undo_point("m")
    assert created is not None and created[0] == 1
    for k in range(3):  # alone: the point lags 3 versions, and no one else wrote
        engine.learn("m", batch([f"a{k}"], seed=k))
    assert repository.undo_point("m") is None
    assert repository.undo_point("m") is None  # dropped, not taken again
    other.learn("m", batch(["theirs"], seed=7))
    engine.learn("m", batch(["b"], seed=8))  # its first catch-up: shared now, a point taken
    assert repository.caught_up == 1 and repository.undo_point("m")[0] == 5
    for k in range(3):  # another process writes it: the lagging point is taken again
        other.learn("m", batch([f"t{k}"], seed=20 + k))
        engine.learn("m", batch([f"c{k}"], seed=30 + k))
    assert repository.caught_up == 4
    point = repository.undo_point("m")
    assert point is not None and point[0] == engine.info("m").version == 12


def test_standing_points_are_kept_for_the_latest_models_only(tmp_path, monkeypatch):
    monkeypatch.setattr(undo, "STANDING_POINTS", 3)
    models = [f"m{k}" for k in range(5)]
    engine = make_engine(tmp_path / "data", models)
    kept = [model_id for model_id in models if engine.repository.undo_point(model_id)]
    assert kept == models[-3:]


def _alone_past_its_point(tmp_path, monkeypatch):
    """An engine writing ``m`` alone for long enough that its standing point was dropped, and
    another process on the same file; the events learned so far, in order."""
    monkeypatch.setattr(undo, "STANDING_AGE", 2)
    engine = make_engine(tmp_path / "data", ["m"])
    other = make_engine(tmp_path / "data", ["m"])
    learned = [batch([f"a{k}"], seed=k) for k in range(3)]
    for each in learned:
        engine.learn("m", each)
    assert engine.repository.undo_point("m") is None
    return engine, other, learned


def test_a_cached_model_at_its_head_is_asked_for_an_undo_point_once_a_write(tmp_path, monkeypatch):
    """A write alone and a write in a pass, each of a cached model at the store's head that
    keeps no undo point: one question each (before the load; the load moved nothing)."""
    engine, _, learned = _alone_past_its_point(tmp_path, monkeypatch)
    asked = []
    point = undo.UndoPoints.point

    def counted(self, model_id, cached):
        asked.append(model_id)
        return point(self, model_id, cached)

    monkeypatch.setattr(undo.UndoPoints, "point", counted)
    learned.append(batch(["alone"], seed=10))
    assert engine.learn("m", learned[-1]).learned == 1
    assert asked == ["m"]
    learned.append(batch(["in-a-pass"], seed=11))
    outcomes = through_pass(engine, [("m", [learned[-1]])])
    assert outcomes[0][0].learned == 1
    assert asked == ["m", "m"]
    expected = make_engine(tmp_path / "expected", ["m"])
    for each in learned:
        expected.learn("m", each)
    assert_same_models(engine, expected, ["m"])


def test_a_write_that_catches_up_first_goes_back_to_the_point_its_load_took(tmp_path, monkeypatch):
    """The write of a cached model without an undo point catches up on another process's
    entry, for the first time (its load takes a standing point), and its append is then
    stale: it goes back to that point (no rebuild), nothing lost, nothing twice."""
    engine, other, learned = _alone_past_its_point(tmp_path, monkeypatch)
    theirs = [batch(["theirs-0"], seed=20), batch(["theirs-1"], seed=21)]
    other.learn("m", theirs[0])
    racing_once(engine, other, theirs[1])
    assert engine.learn("m", batch(["x"], seed=9)).learned == 1
    repository = engine.repository
    assert (repository.writes_retried, repository.writes_undone, repository.writes_reloaded) == (
        1,
        1,
        0,
    )
    expected = make_engine(tmp_path / "expected", ["m"])
    for each in [*learned, *theirs, batch(["x"], seed=9)]:
        expected.learn("m", each)
    assert_same_models(engine, expected, ["m"])
    assert_same_models(make_engine(tmp_path / "data", ["m"]), expected, ["m"])
