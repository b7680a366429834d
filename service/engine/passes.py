"""A pass over several models (:meth:`ModelRepository.deferred
<service.engine.repository.ModelRepository.deferred>`): each model's write learned under its
lock, which stays held, its log entry's commit kept, and all of them committed by one
transaction (the store's ``commit_many``: one fsync for the events of every model), then the
locks released.  The coalescer's passes are its one user, through :func:`learn_pass`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from service.engine.undo import load_with_point
from service.errors import ServiceError, StaleVersion, TurnTaken
from service.groups import refused_alone

if TYPE_CHECKING:
    from service.engine import Engine
    from service.engine.learning import LearnResult
    from service.engine.model import Loaded
    from service.engine.repository import ModelLock, ModelRepository
    from service.engine.undo import UndoPoint
    from service.ingest import Batch
    from service.stores.base import Commit

R = TypeVar("R")

#: most event ids a one-model pass reads with its head (``head_and_seen``); more are read
#: by the model's own calls
MOST_IDS_READ_WITH_HEAD = 256


class Pass:
    """The writes of one pass (:meth:`ModelRepository.deferred`): for each model, its lock
    (held), the cached model it changed, the commit of its log entry and, for a contended
    model, the undo point a stale commit goes back to (as a write alone does)."""

    def __init__(self, repository: ModelRepository) -> None:
        self.repository = repository
        #: model id -> (its lock, the model, its deferred commit or None: nothing to write,
        #: its undo point or None)
        self._held: dict[str, tuple[ModelLock, Loaded, Commit | None, UndoPoint | None]] = {}
        #: model id -> (version, incarnation) in the store when the pass began
        self.heads: dict[str, tuple[int, str]] = {}
        #: model id -> (the event ids asked, those of them it had learned), read after the
        #: heads; dropped for a model not written at the head read
        self._seen: dict[str, tuple[set[str], set[str]]] = {}

    def read_heads(self, ids_of: Mapping[str, Sequence[str]]) -> None:
        """The heads of the models the pass writes (the keys of ``ids_of``) and which of their
        ``ids_of`` each has learned, one read each (a store with ``heads`` and ``seen_many``): a
        cached model at its head is used, and its duplicates found, with no read of its own. The
        ids are read after the heads, so a commit between the two makes that model's commit stale
        (applied again alone), as does a head that moves before the commit. On a failure nothing
        is read: each model's own reads answer."""
        store, now = self.repository.store, self.repository.clock()
        try:
            if len(ids_of) == 1:  # one statement (``head_and_seen``), for ids it reads at once
                read = getattr(store, "head_and_seen", None)
                ((model_id, ids),) = ids_of.items()
                if read is None or len(ids) > MOST_IDS_READ_WITH_HEAD:
                    return
                head, found = read(model_id, ids, now)
                heads, seen = {} if head is None else {model_id: head}, {model_id: found}
            else:
                read_heads = getattr(store, "heads", None)
                if read_heads is None:
                    return
                heads = read_heads(list(ids_of))
                seen = store.seen_many(ids_of, now)  # type: ignore[attr-defined]
        except ServiceError:  # the models' own reads answer for them
            return
        self.heads = heads
        self._seen = {model_id: (set(ids_of[model_id]), found) for model_id, found in seen.items()}

    def seen(self, model_id: str, ids: Sequence[str]) -> np.ndarray | None:
        """Which of ``ids`` the model had learned, as :meth:`read_heads` read them; None when
        they were not all read or the model is not written at its head read."""
        asked_and_found = self._seen.get(model_id)
        if asked_and_found is None or not asked_and_found[0].issuperset(ids):
            return None
        found = asked_and_found[1]
        return np.array([event_id in found for event_id in ids], dtype=bool)

    def write(self, model_id: str, step: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """``step`` on the loaded model under its lock, which stays held when the step
        deferred a commit (:meth:`defer`); on any error the cache is dropped, the lock
        released and the error raised (nothing of the model was written)."""
        if model_id in self._held:
            raise RuntimeError(f"model {model_id!r} is written twice in one pass")
        repository = self.repository
        lock = repository.lock(model_id)
        lock.__enter__()
        try:
            loaded, undo = load_with_point(repository, model_id)  # as a write alone
            if self.heads.get(model_id) != (loaded.version, loaded.incarnation):
                # loaded past its head read: the ids read then may miss what came after
                self._seen.pop(model_id, None)
            self._held[model_id] = (lock, loaded, None, undo)
            result = step(model_id, loaded, *args, **kwargs)
        except BaseException:
            self._held.pop(model_id, None)
            repository.drop(model_id)
            lock.__exit__()
            raise
        if self._held[model_id][2] is None:  # nothing to write (a retry of known ids)
            del self._held[model_id]
            lock.__exit__()
        return result

    def defer(self, model_id: str, loaded: Loaded, commit: Commit) -> int:
        """Keep ``commit`` for :meth:`commit`; the version it will write."""
        lock, held, deferred, undo = self._held[model_id]
        if held is not loaded or deferred is not None:
            raise RuntimeError(f"model {model_id!r}: a second commit in one pass")
        self._held[model_id] = (lock, loaded, commit, undo)
        return commit.expected_version + 1

    def commit(self) -> dict[str, Exception]:
        """Write every deferred commit in one transaction and release the locks; the models whose
        commit failed, with the error: their own (stale, gone: nothing of theirs written) or the
        transaction's, every model's (store down, disk full). A stale model is marked contended
        and goes back to its undo point (:meth:`ModelRepository.stale`); the others' caches are
        dropped."""
        repository = self.repository
        held = [
            (model_id, loaded, commit, undo)
            for model_id, (_, loaded, commit, undo) in self._held.items()
        ]
        commits = [(model_id, commit) for model_id, _, commit, _ in held if commit is not None]
        if not commits:
            self.release(drop=False)
            return {}
        try:
            outcomes = iter(repository.store.commit_many(commits))  # type: ignore[attr-defined]
        except Exception as error:  # noqa: BLE001 - every model's answer
            self.release(drop=True)
            return {model_id: error for model_id, _ in commits}
        failed: dict[str, Exception] = {}
        for model_id, loaded, commit, undo in held:
            if commit is None:
                continue
            outcome = next(outcomes)
            if isinstance(outcome, StaleVersion):  # the turn first, then the undo point
                repository.turns.stale_in_pass(model_id, isinstance(outcome, TurnTaken))
                repository.stale(model_id, loaded, undo)
                failed[model_id] = outcome
            elif isinstance(outcome, Exception):
                repository.drop(model_id)
                failed[model_id] = outcome
            else:
                repository.after_commit(model_id, loaded, commit, outcome)
        self.release(drop=False)
        return failed

    def release(self, *, drop: bool) -> None:
        """Release the locks still held (``drop``: their models' caches dropped first)."""
        held, self._held = self._held, {}
        for model_id, (lock, _, commit, _) in held.items():
            if drop and commit is not None:
                self.repository.drop(model_id)
            lock.__exit__()


#: a request to learn: its batch and whether its scores are wanted
Learn = tuple["Batch", bool]


def learn_pass(engine: Engine, items: Sequence[tuple[str, list[Learn]]]) -> list[list[Any] | None]:
    """Each group's outcomes: every group learned on its model, the log entries committed by one
    transaction (one fsync); None for a group to apply alone after the pass (its turn held
    elsewhere, refused as a whole with a client error, or its commit stale), so that it holds
    back no other group. A server error is its requests' answer, a failed transaction every
    request's."""
    outcomes: list[list[Any] | None] = [None] * len(items)
    turns = engine.repository.turns
    learned = [k for k, (model_id, _) in enumerate(items) if not turns.held_elsewhere(model_id)]
    if not learned:
        return outcomes
    again: set[int] = set()
    with engine.repository.deferred() as held:
        held.read_heads(
            {
                items[k][0]: [
                    event_id
                    for batch, _ in items[k][1]
                    for event_id in batch.ids or ()
                    if event_id is not None
                ]
                for k in learned
            }
        )
        for k in learned:
            model_id, group = items[k]
            try:
                if len(group) == 1:
                    outcomes[k] = [learn_one(engine, model_id, group[0])]
                else:
                    outcomes[k] = learn_merged(engine, model_id, group)
            except Exception as error:  # noqa: BLE001 - its answer, or its error path
                if refused_alone(error) and len(group) > 1:  # one request: its answer
                    again.add(k)
                else:
                    outcomes[k] = [error] * len(group)
        failed = held.commit()
    for k in learned:
        model_id, group = items[k]
        failure = failed.get(model_id)
        if k in again or isinstance(failure, StaleVersion):
            outcomes[k] = None
        elif failure is not None:
            outcomes[k] = [failure] * len(group)
    return outcomes


def learn_one(engine: Engine, model_id: str, payload: Learn) -> LearnResult:
    batch, want_scores = payload
    return engine.learn(model_id, batch, want_scores=want_scores)


def learn_merged(engine: Engine, model_id: str, payloads: list[Learn]) -> list[LearnResult]:
    return engine.learning.learn_group(
        model_id, [batch for batch, _ in payloads], [wants for _, wants in payloads]
    )
