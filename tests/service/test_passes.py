"""Passes (service.engine.coalesce, service.engine.passes): the groups of events waiting for
several models on the SQLite store learned in one thread and committed by one transaction (one
fsync), each request answered with what it would get alone."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from service.engine import Engine
from service.errors import ModelChanged, StoreUnavailable
from service.ingest import Batch
from tests.service.passes_helpers import (
    MODELS,
    N_FEATURES,
    assert_same_models,
    batch,
    make_engine,
    statements_of,
    through_pass,
)


async def send(engine: Engine, requests: list[tuple[str, Batch]]):
    return await asyncio.gather(
        *(engine.coalesce.learn(m, b, want_scores=True) for m, b in requests),
        return_exceptions=True,
    )


def check_one_after_another(engine: Engine, requests, results, path) -> None:
    """Each result is what the request gets applied alone, in order, on a second engine, and
    both engines (and a fresh one reading the first one's file) hold the same models."""
    sequential = make_engine(path / "sequential")
    for (model_id, b), result in zip(requests, results, strict=True):
        if b.X.shape[1] != N_FEATURES:
            assert isinstance(result, ModelChanged)
            continue
        alone = sequential.learn(model_id, b, want_scores=True)
        assert (result.received, result.learned) == (alone.received, alone.learned)
        assert result.duplicate_ids == alone.duplicate_ids
        np.testing.assert_array_equal(result.scores, alone.scores)
    assert_same_models(engine, sequential)
    # what was acknowledged is in the file: a fresh process reads the same models
    assert_same_models(make_engine(engine.store.path.parent), sequential)


def test_requests_to_many_models_share_transactions_and_equal_one_after_another(tmp_path):
    requests = [(MODELS[k % len(MODELS)], batch([f"e{k}"], seed=k)) for k in range(240)]
    requests.append((MODELS[3], batch(["e3", "e15", "new"], seed=7)))  # ids learned before
    engine = make_engine(tmp_path / "a")
    transactions = engine.store.database.groups
    results = asyncio.run(send(engine, requests))
    coalescer = engine.coalesce
    # several models' groups per pass, and one transaction per pass
    assert coalescer.passes < coalescer.passed_groups
    assert engine.store.database.groups - transactions == coalescer.passes
    assert results[-1].duplicate_ids == ["e3", "e15"]
    check_one_after_another(engine, requests, results, tmp_path)


def test_a_bad_request_in_a_pass_fails_alone(tmp_path):
    requests = [(MODELS[k % 4], batch([f"e{k}"], seed=k)) for k in range(40)]
    requests.insert(21, (MODELS[1], batch(["bad"], seed=1, width=N_FEATURES + 1)))
    engine = make_engine(tmp_path / "a")
    results = asyncio.run(send(engine, requests))
    assert isinstance(results[21], ModelChanged)
    assert engine.coalesce.passes < engine.coalesce.passed_groups
    check_one_after_another(engine, requests, results, tmp_path)


def test_a_model_written_by_another_process_during_a_pass_is_applied_again(tmp_path):
    """The other process's append makes this model's commit stale inside the shared
    transaction: it writes nothing, the other models' entries are written, and its group is
    applied again on the model caught up (nothing lost, nothing twice)."""
    engine, other = two_processes(tmp_path)
    commit_many = engine.store.commit_many
    raced = []

    def racing(commits):
        if not raced:  # the other process appends to m1 between the learning and the commit
            raced.append(other.learn("m1", batch(["theirs"], seed=5)))
        return commit_many(commits)

    engine.store.commit_many = racing  # type: ignore[method-assign]
    items = [(m, [batch([f"{m}-x"], seed=9)]) for m in MODELS[:3]]
    outcomes = through_pass(engine, items)
    assert [outcome[0].learned for outcome in outcomes] == [1, 1, 1]
    # the pass redid it once: the stale commit took m1 back to the standing undo point its
    # creation here left (no rebuild) and made it contended, as a write alone's does, with
    # no stale retry loop
    repository = engine.repository
    assert (repository.writes_retried, repository.writes_reloaded) == (1, 0)
    assert repository.writes_undone == 1
    contended = repository.undo_point("m1")
    assert contended is not None and contended is not repository.undo_point("m1")  # copies
    standing = repository.undo_point("m0")
    assert standing is not None and standing is repository.undo_point("m0")  # kept
    expected = _first_theirs_then_x(tmp_path / "expected", MODELS[:3], "m1")
    assert_same_models(engine, expected, MODELS[:3])
    assert_same_models(make_engine(tmp_path / "data", MODELS[:3]), expected, MODELS[:3])


def two_processes(tmp_path):
    """Two engines on one SQLite file (two processes) with ``MODELS[:3]``, each model's first
    batch learned by the first, which caches them."""
    engine = make_engine(tmp_path / "data", MODELS[:3])
    other = make_engine(tmp_path / "data", MODELS[:3])
    for model_id in MODELS[:3]:
        engine.learn(model_id, batch([f"{model_id}-first"], seed=0))
    return engine, other


def _first_theirs_then_x(path, model_ids, theirs: str):
    """An engine at ``path`` whose models learned their first batch, ``theirs`` the other
    process's batch, then each its pass's batch, one at a time (what a pass must equal)."""
    expected = make_engine(path, model_ids)
    for model_id in model_ids:
        expected.learn(model_id, batch([f"{model_id}-first"], seed=0))
    expected.learn(theirs, batch(["theirs"], seed=5))
    for model_id in model_ids:
        expected.learn(model_id, batch([f"{model_id}-x"], seed=9))
    return expected


def test_a_pass_of_one_model_made_stale_is_applied_again(tmp_path):
    engine = make_engine(tmp_path / "data", MODELS[:1])
    other = make_engine(tmp_path / "data", MODELS[:1])
    engine.learn("m0", batch(["first"], seed=0))
    commit_many = engine.store.commit_many

    def racing(commits):
        other.learn("m0", batch(["theirs"], seed=5))
        engine.store.commit_many = commit_many  # type: ignore[method-assign]
        return commit_many(commits)

    engine.store.commit_many = racing  # type: ignore[method-assign]
    outcomes = through_pass(engine, [("m0", [batch(["x"], seed=9)])])
    assert outcomes[0][0].learned == 1 and outcomes[0][0].version == 4
    expected = make_engine(tmp_path / "expected", MODELS[:1])
    for b in (batch(["first"], seed=0), batch(["theirs"], seed=5), batch(["x"], seed=9)):
        expected.learn("m0", b)
    assert_same_models(engine, expected, MODELS[:1])


def test_a_model_made_stale_in_a_pass_goes_back_to_its_undo_point_when_contended(tmp_path):
    """The rule of a write alone: a model's first stale commit in a pass goes back to the
    standing undo point its creation left and makes it contended, so the next pass takes an
    undo point before learning it, and a second stale commit goes back there; each catches up
    on the other process's entries (no rebuild)."""
    models = MODELS[:3]
    engine, other = two_processes(tmp_path)
    commit_many = engine.store.commit_many
    theirs = [batch(["theirs-1"], seed=5), batch(["theirs-2"], seed=6)]
    appends = iter(theirs)

    def racing(commits):  # the other process appends to m1 in each pass's commit
        other.learn("m1", next(appends))
        return commit_many(commits)

    engine.store.commit_many = racing  # type: ignore[method-assign]
    repository = engine.repository
    counts = []
    for k in range(2):
        items = [(m, [batch([f"{m}-x{k}"], seed=9 + k)]) for m in models]
        outcomes = through_pass(engine, items)
        assert [outcome[0].learned for outcome in outcomes] == [1, 1, 1]
        counts.append(
            (repository.writes_retried, repository.writes_reloaded, repository.writes_undone)
        )
    assert counts == [(1, 0, 1), (2, 0, 2)]
    expected = make_engine(tmp_path / "expected", models)
    for model_id in models:
        expected.learn(model_id, batch([f"{model_id}-first"], seed=0))
    for k in range(2):
        expected.learn("m1", theirs[k])
        for model_id in models:
            expected.learn(model_id, batch([f"{model_id}-x{k}"], seed=9 + k))
    assert_same_models(engine, expected, models)
    assert_same_models(make_engine(tmp_path / "data", models), expected, models)


def test_a_pass_reads_the_heads_once_and_catches_up_a_model_behind(tmp_path):
    """The heads of a pass's models are one query; a cached model at its head is used as it
    is, and one another process appended to is caught up by replay, not rebuilt or retried."""
    engine = make_engine(tmp_path / "data", MODELS[:4])
    other = make_engine(tmp_path / "data", MODELS[:4])
    for model_id in MODELS[:4]:
        engine.learn(model_id, batch([f"{model_id}-first"], seed=0))
    other.learn("m2", batch(["theirs"], seed=5))
    items = [(m, [batch([f"{m}-x"], seed=9)]) for m in MODELS[:4]]
    outcomes, statements = statements_of(engine, lambda: through_pass(engine, items))
    assert [outcome[0].learned for outcome in outcomes] == [1, 1, 1, 1]
    reads = [s for s in statements if s.startswith("SELECT version, incarnation FROM models")]
    assert len(reads) == 1  # m2's own load: the transaction checks each version by its update
    updates = [s for s in statements if s.startswith("UPDATE models SET version")]
    assert len(updates) == 4
    assert sum(s.startswith("SELECT id, version, incarnation FROM models") for s in statements)
    assert (engine.repository.caught_up, engine.repository.writes_retried) == (1, 0)
    expected = _first_theirs_then_x(tmp_path / "expected", MODELS[:4], "m2")
    assert_same_models(engine, expected, MODELS[:4])


def test_a_pass_finds_its_models_duplicates_by_one_read(tmp_path):
    """The learned ids of a pass's models are read with their heads, one query for all: no
    model reads its own, and each request gets the duplicates it would get alone."""
    models = MODELS[:4]
    engine = make_engine(tmp_path / "data", models)
    for model_id in models:
        engine.learn(model_id, batch([f"{model_id}-first"], seed=0))
    items = [(m, [batch([f"{m}-first", f"{m}-x"], seed=9)]) for m in models]
    outcomes, statements = statements_of(engine, lambda: through_pass(engine, items))
    assert [(o[0].learned, o[0].duplicate_ids) for o in outcomes] == [
        (1, [f"{m}-first"]) for m in models
    ]
    assert sum(s.startswith("SELECT ids.model_id, ids.event_id") for s in statements) == 1
    assert not [s for s in statements if s.startswith("SELECT event_id FROM ids")]
    expected = make_engine(tmp_path / "expected", models)
    for model_id in models:
        expected.learn(model_id, batch([f"{model_id}-first"], seed=0))
        expected.learn(model_id, batch([f"{model_id}-first", f"{model_id}-x"], seed=9))
    assert_same_models(engine, expected, models)


def test_a_pass_of_one_model_reads_its_head_and_duplicates_by_one_statement(tmp_path):
    """A pass of one model (one sender's request) reads its head and which of its ids it
    learned by one statement, not a read each; a model another process appended to is caught
    up by replay, and the request gets the duplicates it would get alone."""
    engine, other = two_processes(tmp_path)
    other.learn("m0", batch(["theirs"], seed=5))
    request = batch(["m0-first", "theirs", "m0-x"], seed=9)
    outcomes, statements = statements_of(engine, lambda: through_pass(engine, [("m0", [request])]))
    assert (outcomes[0][0].learned, outcomes[0][0].duplicate_ids) == (1, ["m0-first", "theirs"])
    assert sum(s.startswith("SELECT 0, version, incarnation FROM models") for s in statements) == 1
    assert not [s for s in statements if s.startswith("SELECT event_id FROM ids")]
    assert (engine.repository.caught_up, engine.repository.writes_retried) == (1, 0)
    expected = make_engine(tmp_path / "expected", MODELS[:1])
    for b in (batch(["m0-first"], seed=0), batch(["theirs"], seed=5), request):
        expected.learn("m0", b)
    assert_same_models(engine, expected, MODELS[:1])
    assert_same_models(make_engine(tmp_path / "data", MODELS[:1]), expected, MODELS[:1])


def test_an_id_another_process_learns_after_the_pass_read_the_ids_is_not_learned_twice(tmp_path):
    """The ids read with the heads miss what another process commits after: that model's
    commit is then stale, and its group applied again finds the id learned."""
    models = MODELS[:3]
    engine, other = two_processes(tmp_path)
    seen_many = engine.store.seen_many

    def racing(ids_of, now):
        found = seen_many(ids_of, now)
        engine.store.seen_many = seen_many  # type: ignore[method-assign]
        other.learn("m1", batch(["shared"], seed=5))
        return found

    engine.store.seen_many = racing  # type: ignore[method-assign]
    items = [(m, [batch(["shared"], seed=5)]) for m in models]
    outcomes = through_pass(engine, items)
    assert [(o[0].learned, o[0].duplicate_ids) for o in outcomes] == [
        (1, []),
        (0, ["shared"]),
        (1, []),
    ]
    assert engine.repository.writes_retried == 1
    expected = make_engine(tmp_path / "expected", models)
    for model_id in models:
        expected.learn(model_id, batch([f"{model_id}-first"], seed=0))
        expected.learn(model_id, batch(["shared"], seed=5))
    assert_same_models(engine, expected, models)


def test_a_failed_transaction_answers_every_request_and_keeps_nothing(tmp_path):
    engine = make_engine(tmp_path / "data", MODELS[:3])
    for model_id in MODELS[:3]:
        engine.learn(model_id, batch([f"{model_id}-first"], seed=0))
    commit_many = engine.store.commit_many

    def failing(commits):
        raise StoreUnavailable("the store (SQLite) failed (SQLITE_IOERR); retry later")

    engine.store.commit_many = failing  # type: ignore[method-assign]
    items = [(m, [batch([f"{m}-x"], seed=9)]) for m in MODELS[:3]]
    outcomes = through_pass(engine, items)
    assert all(isinstance(outcome[0], StoreUnavailable) for outcome in outcomes)
    engine.store.commit_many = commit_many  # type: ignore[method-assign]
    # the cached models that learned the lost entries were dropped: sent again, learned once
    again = through_pass(engine, items)
    assert [outcome[0].learned for outcome in again] == [1, 1, 1]
    expected = make_engine(tmp_path / "expected", MODELS[:3])
    for model_id in MODELS[:3]:
        expected.learn(model_id, batch([f"{model_id}-first"], seed=0))
        expected.learn(model_id, batch([f"{model_id}-x"], seed=9))
    assert_same_models(engine, expected, MODELS[:3])


def test_a_model_is_written_once_per_pass(tmp_path):
    engine = make_engine(tmp_path / "data", MODELS[:1])
    with engine.repository.deferred() as held:
        engine.learn("m0", batch(["a"], seed=0))
        with pytest.raises(RuntimeError, match="written twice"):
            engine.learn("m0", batch(["b"], seed=1))
        assert held.commit() == {}
    assert engine.info("m0").counts.events_learned == 1


def test_requests_of_every_kind_queued_behind_passes_keep_their_order(tmp_path):
    """The passes drain a queue of events themselves (no drain task for traffic spread over
    many models); a score or labels request queued behind a model's events is answered after
    them and before the events queued behind it, as one after another."""
    from service.engine.coalesce import Coalescer

    drains = 0
    drain = Coalescer._drain

    async def counted(self, model_id, queue):
        nonlocal drains
        drains += 1
        await drain(self, model_id, queue)

    engine = make_engine(tmp_path / "a", MODELS[:4])
    engine.coalesce._drain = counted.__get__(engine.coalesce)  # type: ignore[method-assign]
    spread = [(MODELS[k % 4], batch([f"s{k}"], seed=k)) for k in range(40)]
    asyncio.run(send(engine, spread))
    assert drains == 0  # only events: the passes drained every queue
    assert engine.coalesce.passes < engine.coalesce.passed_groups

    # per model: events, a score, a kept score, events; then labels of the kept one, events
    probe = Batch(np.random.default_rng(99).normal(size=(1, N_FEATURES)), None, None)

    async def mixed():
        coalescer = engine.coalesce
        calls = []
        for k, model_id in enumerate(MODELS[:4]):
            calls += [
                coalescer.learn(model_id, batch([f"a{k}"], seed=100 + k)),
                coalescer.score(model_id, probe, keep=False),
                coalescer.score(model_id, batch([f"kept{k}"], seed=200 + k), keep=True),
                coalescer.learn(model_id, batch([f"b{k}"], seed=300 + k)),
            ]
        first = await asyncio.gather(*calls)
        second = await asyncio.gather(
            *(coalescer.labels(m, [f"kept{k}"], np.array([1])) for k, m in enumerate(MODELS[:4])),
            *(coalescer.learn(m, batch([f"c{k}"], seed=400 + k)) for k, m in enumerate(MODELS[:4])),
        )
        return first, second

    first, second = asyncio.run(mixed())
    assert drains > 0  # a queue whose first request was a score went to a drain task
    sequential = make_engine(tmp_path / "sequential", MODELS[:4])
    for model_id, b in spread:
        sequential.learn(model_id, b)
    for k, model_id in enumerate(MODELS[:4]):
        sequential.learn(model_id, batch([f"a{k}"], seed=100 + k))
        scored = sequential.score(model_id, probe, keep=False)
        np.testing.assert_array_equal(first[4 * k + 1].scores, scored.scores)
        kept = sequential.score(model_id, batch([f"kept{k}"], seed=200 + k), keep=True)
        np.testing.assert_array_equal(first[4 * k + 2].scores, kept.scores)
        assert first[4 * k + 2].kept == 1
        sequential.learn(model_id, batch([f"b{k}"], seed=300 + k))
    for k, model_id in enumerate(MODELS[:4]):
        assert second[k].learned == 1  # the kept score's label, learned
        sequential.labels(model_id, [f"kept{k}"], np.array([1]))
        sequential.learn(model_id, batch([f"c{k}"], seed=400 + k))
    assert_same_models(engine, sequential, MODELS[:4])


def test_requests_to_idle_models_sent_together_share_one_pass(tmp_path):
    """Requests queued in one turn of the event loop to idle models are one pass (the first
    does not start a pass of its own with the others in the next)."""
    engine = make_engine(tmp_path / "a")
    requests = [(model_id, batch([f"e{k}"], seed=k)) for k, model_id in enumerate(MODELS)]
    results = asyncio.run(send(engine, requests))
    assert (engine.coalesce.passes, engine.coalesce.passed_groups) == (1, len(MODELS))
    check_one_after_another(engine, requests, results, tmp_path)
