"""Write turns (service/engine/turns.py): a process whose append of a model was stale takes the
model's turn, the other processes' appends are refused (writing nothing) until its append ends
it, and they wait for that instead of winning the race again -- on both shared stores, each
"process" here a store or engine of its own on one SQLite file or one Redis."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from service.engine.entries import Entry
from service.engine.turns import FIRST_PAUSE, LONGEST_PAUSE, Turns
from service.errors import TurnTaken
from service.stores.base import Commit
from service.stores.memory import MemoryStore
from service.stores.redis import RedisStore
from service.stores.sqlite import SQLiteStore
from tests.service.passes_helpers import (
    assert_same_models,
    batch,
    make_engine,
    racing_once,
    through_pass,
)

ARRAYS = {"learner:w": np.arange(4, dtype=np.float64)}


@pytest.fixture(params=["sqlite", "redis"])
def two_stores(request, tmp_path):
    """Two stores on one SQLite file or one Redis: two processes' views of it."""
    if request.param == "sqlite":
        stores = [SQLiteStore.open(tmp_path), SQLiteStore.open(tmp_path)]
    else:
        url = request.getfixturevalue("empty_redis")
        stores = [RedisStore.from_url(url), RedisStore.from_url(url)]
    yield stores
    for store in stores:
        store.close()


def _append(store, version: int, event_id: str) -> int:
    entry = Entry(1.0, np.zeros((1, 3)), np.array([1]))
    commit = Commit(version, "inc", entry=entry, learned_ids=[event_id], id_expiry=2e12)
    return store.commit("m", commit)


def test_a_turn_refuses_the_other_processes_appends_until_its_holder_appends(two_stores):
    mine, theirs = two_stores
    mine.create_model("m", {"id": "m"}, ARRAYS, "inc")
    assert mine.take_turn("m", 600.0) and mine.take_turn("m", 600.0)  # taken, then renewed
    assert theirs.turn_taken("m") and not mine.turn_taken("m")
    assert not theirs.take_turn("m", 600.0)
    with pytest.raises(TurnTaken):
        _append(theirs, 1, "refused")
    # the refused append wrote nothing: no version, no entry, no id
    stored = theirs.load("m")
    assert (stored.version, stored.entries) == (1, [])
    assert theirs.seen("m", ["refused"], 2.0).tolist() == [False]
    assert _append(mine, 1, "mine") == 2  # the holder's append ends its turn
    assert not theirs.turn_taken("m")
    assert _append(theirs, 2, "theirs") == 3
    assert theirs.seen("m", ["refused", "mine", "theirs"], 2.0).tolist() == [False, True, True]


def test_a_turn_given_back_or_lapsed_refuses_nothing(two_stores):
    mine, theirs = two_stores
    mine.create_model("m", {"id": "m"}, ARRAYS, "inc")
    assert mine.take_turn("m", 600.0)
    theirs.release_turn("m")  # not theirs to give back
    assert theirs.turn_taken("m")
    mine.release_turn("m")
    assert not theirs.turn_taken("m")
    assert theirs.take_turn("m", 0.001)  # lapses by itself (a holder killed holding it)
    deadline = time.monotonic() + 60
    while mine.turn_taken("m"):
        assert time.monotonic() < deadline, "the turn never lapsed"
        time.sleep(0.01)
    assert _append(mine, 1, "mine") == 2


def test_a_memory_store_has_no_other_process_to_take_turns_with():
    store = MemoryStore()
    assert store.take_turn("m", 1.0) and not store.turn_taken("m")


class _Store:
    """The turn calls of a store, with another process holding the turn for ``held`` asks."""

    def __init__(self, held: int, free: bool = True) -> None:
        self.held, self.free = held, free
        self.calls: list[str] = []

    def take_turn(self, model_id: str, seconds: float) -> bool:
        self.calls.append("take")
        return self.free

    def turn_taken(self, model_id: str) -> bool:
        self.calls.append("taken?")
        self.held -= 1
        return self.held >= 0

    def release_turn(self, model_id: str) -> None:
        self.calls.append("release")


def test_a_process_waits_with_growing_pauses_until_the_turn_is_over():
    pauses: list[float] = []
    store = _Store(held=7)
    turns = Turns(store, sleep=pauses.append, monotonic=lambda: 0.0)
    # refused: it waits for the other's turn to end, then takes the next
    assert turns.after_stale("m", refused_by_turn=True)
    assert store.calls == ["taken?"] * 8 + ["take"] and len(pauses) == 7
    for k, pause in enumerate(pauses):  # doubling up to the longest, each jittered +-50 %
        planned = min(FIRST_PAUSE * 2**k, LONGEST_PAUSE)
        assert 0.5 * planned <= pause <= 1.5 * planned
    assert turns.held == {"m"} and turns.waited == 1
    turns.appended("m")
    turns.release("m")  # its append ended it: nothing to give back
    assert store.calls[-1] == "take"


def test_a_stale_process_takes_the_turn_and_gives_it_back_unless_its_append_ended_it():
    store = _Store(held=0)
    turns = Turns(store, sleep=lambda _: None)
    assert turns.after_stale("m", refused_by_turn=False) and turns.held == {"m"}
    turns.appended("m")
    turns.release("m")
    assert store.calls == ["take"]
    assert turns.after_stale("m", refused_by_turn=False)
    turns.release("m")  # its write failed: the turn is given back
    assert store.calls == ["take", "take", "release"] and turns.held == set()
    busy = Turns(_Store(held=1, free=False), sleep=lambda _: None, monotonic=lambda: 0.0)
    assert not busy.after_stale("m", refused_by_turn=False) and busy.waited == 1


def test_while_contended_a_write_asks_for_the_turn_before_it_learns():
    now = [0.0]
    store = _Store(held=0)
    turns = Turns(store, sleep=lambda _: None, monotonic=lambda: now[0])
    turns.before_write("m")  # never contended: asks nothing
    assert store.calls == []
    assert turns.after_stale("m", refused_by_turn=False)
    turns.appended("m")
    store.held = 2  # another process holds the turn (two asks)
    turns.before_write("m")  # contended: waits for its end, then takes the next
    assert store.calls == ["take", "taken?", "taken?", "taken?", "take"]
    assert turns.held == {"m"} and turns.waited == 1
    turns.appended("m")
    now[0] = 1.5  # past ALTERNATING_SECONDS without a turn: asks nothing again
    turns.before_write("m")
    assert len(store.calls) == 5
    turns.refused.add("m")  # a pass's append refused by a turn: asks, the turn is over
    turns.before_write("m")
    assert store.calls[5:] == ["taken?"] and turns.refused == set()


def test_the_process_whose_append_was_stale_appends_next(tmp_path):
    """Its stale append takes the turn (its retried append ends it); an append of the other
    process meanwhile is refused, waits for the turn's end and appends after it: both caches,
    and the file, equal the events learned one after another."""
    engine = make_engine(tmp_path / "data", ["m"])
    other = make_engine(tmp_path / "data", ["m"])
    order = [batch(["first"], seed=0), batch(["second"], seed=1), batch(["theirs"], seed=5)]
    order += [batch(["x"], seed=9), batch(["x2"], seed=10), batch(["later"], seed=6)]
    engine.learn("m", order[0])
    other.learn("m", order[1])
    racing_once(engine, other, order[2])  # ``other`` appends first: ``engine``'s is stale
    assert engine.learn("m", order[3]).learned == 1
    turns = engine.repository.turns
    assert (turns.taken, turns.held, engine.repository.writes_retried) == (1, set(), 1)
    assert not other.store.turn_taken("m")  # ended by the retried append

    # ``engine`` holds the turn again (as after another stale append): ``other``'s append
    # is refused and waits; while it waits, ``engine`` appends, which ends the turn
    assert engine.store.take_turn("m", 600.0)
    other.repository.turns._sleep = lambda _: engine.learn("m", order[4])
    assert other.learn("m", order[5]).learned == 1
    assert (other.repository.turns.waited, other.repository.writes_retried) == (1, 1)
    expected = make_engine(tmp_path / "expected", ["m"])
    for each in order:
        expected.learn("m", each)
    for engine_now in (engine, other, make_engine(tmp_path / "data", ["m"])):
        assert_same_models(engine_now, expected, ["m"])


def test_a_pass_refused_by_a_turn_applies_its_group_again_after_the_turn(tmp_path):
    """A pass's append refused by another process's turn writes nothing; the group applied
    again first waits for the turn to end, then appends once."""
    engine = make_engine(tmp_path / "data", ["m0"])
    other = make_engine(tmp_path / "data", ["m0"])
    engine.learn("m0", batch(["first"], seed=0))
    assert other.store.take_turn("m0", 600.0)
    engine.repository.turns._sleep = lambda _: other.learn("m0", batch(["theirs"], seed=5))
    outcomes = through_pass(engine, [("m0", [batch(["x"], seed=9)])])
    assert outcomes[0][0].learned == 1 and outcomes[0][0].version == 4
    assert engine.repository.turns.waited == 1 and engine.repository.writes_retried == 1
    expected = make_engine(tmp_path / "expected", ["m0"])
    for each in (batch(["first"], seed=0), batch(["theirs"], seed=5), batch(["x"], seed=9)):
        expected.learn("m0", each)
    assert_same_models(engine, expected, ["m0"])


def test_a_stale_append_in_a_pass_takes_the_turn_before_it_goes_back(tmp_path):
    """Another process appends between a pass's learning and its commit: the stale model takes
    the turn at once, so that process's appends are refused while this one goes back to its
    undo point and catches up; the group applied again appends once and ends the turn."""
    engine = make_engine(tmp_path / "data", ["m0"])
    other = make_engine(tmp_path / "data", ["m0"])
    engine.learn("m0", batch(["first"], seed=0))
    commit_many, stale = engine.store.commit_many, engine.repository.stale
    turn_while_going_back = []

    def racing(commits):
        engine.store.commit_many = commit_many  # type: ignore[method-assign]
        other.learn("m0", batch(["theirs"], seed=5))
        return commit_many(commits)

    def going_back(*args):
        turn_while_going_back.append(other.store.turn_taken("m0"))
        stale(*args)

    engine.store.commit_many = racing  # type: ignore[method-assign]
    engine.repository.stale = going_back  # type: ignore[method-assign]
    outcomes = through_pass(engine, [("m0", [batch(["x"], seed=9)])])
    assert outcomes[0][0].learned == 1 and outcomes[0][0].version == 4
    assert turn_while_going_back == [True]
    turns = engine.repository.turns
    assert (turns.taken, turns.waited, turns.held, turns.refused) == (1, 0, set(), set())
    assert not other.store.turn_taken("m0")  # ended by the append
    expected = make_engine(tmp_path / "expected", ["m0"])
    for each in (batch(["first"], seed=0), batch(["theirs"], seed=5), batch(["x"], seed=9)):
        expected.learn("m0", each)
    for engine_now in (engine, other, make_engine(tmp_path / "data", ["m0"])):
        assert_same_models(engine_now, expected, ["m0"])


def test_a_pass_asks_for_the_turn_of_contended_models_only():
    store = _Store(held=0)
    turns = Turns(store, sleep=lambda _: None, monotonic=lambda: 0.0)
    assert not turns.held_elsewhere("m") and store.calls == []  # never contended: no ask
    turns.stale_in_pass("m", refused_by_turn=True)  # contended, refused: it asks
    store.held = 1
    assert turns.held_elsewhere("m") and turns.refused == {"m"}
    assert not turns.held_elsewhere("m")  # the turn is over: the pass learns it
    assert store.calls == ["taken?", "taken?"]


def test_a_pass_leaves_out_a_model_in_another_process_turn_and_answers_the_others(tmp_path):
    """A model whose turn another process holds does not hold back the other models of its
    pass: they are answered while it waits, then it is applied alone after that turn, once,
    in order; while contended, a pass leaves it out before learning it (no stale append)."""
    engine = make_engine(tmp_path / "data", ["m0", "m1"])
    other = make_engine(tmp_path / "data", ["m0"])
    engine.repository.turns._monotonic = lambda: 0.0  # contended for as long as it runs
    expected = make_engine(tmp_path / "expected", ["m0", "m1"])

    async def round_of(k: int) -> None:
        assert other.store.take_turn("m0", 600.0)
        mine = [batch([f"x{k}"], seed=10 + k), batch([f"y{k}"], seed=20 + k)]
        first = asyncio.ensure_future(engine.coalesce.learn("m0", mine[0]))
        second = asyncio.ensure_future(engine.coalesce.learn("m1", mine[1]))
        assert (await asyncio.wait_for(second, 60)).learned == 1  # m0 still waits
        behind = batch([f"z{k}"], seed=40 + k)
        third = asyncio.ensure_future(engine.coalesce.learn("m0", behind))  # queued behind
        await asyncio.sleep(0)
        assert not first.done() and not third.done()
        theirs = batch([f"theirs{k}"], seed=30 + k)
        other.learn("m0", theirs)  # its append ends its turn
        assert (await asyncio.wait_for(first, 60)).learned == 1
        assert (await asyncio.wait_for(third, 60)).learned == 1
        for model_id, each in (("m0", theirs), ("m0", mine[0]), ("m1", mine[1]), ("m0", behind)):
            expected.learn(model_id, each)

    asyncio.run(round_of(0))  # learned in the pass, refused at its commit: applied alone
    assert engine.repository.writes_retried == 1
    asyncio.run(round_of(1))  # contended: left out before learning
    assert engine.repository.writes_retried == 1 and engine.coalesce.passes == 4
    for engine_now in (engine, other, make_engine(tmp_path / "data", ["m0", "m1"])):
        assert_same_models(engine_now, expected, ["m0", "m1"])
