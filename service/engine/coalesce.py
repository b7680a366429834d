"""Requests to one model merged into one engine call and one durable commit: the entry point of
the per-event operations (``/events``, ``/score``, ``/labels``, and the stream through the same
calls), a drain task per busy model or, for events on a store with ``commit_many``, one pass
over every model waiting.  A group gives the same state, bit for bit, as its requests one after
another; the rules and their reasons: docs/architecture.md, "The coalescer and group commit".
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Unpack

import numpy as np

from service.engine.delayed import LabelResult, Scored, ScoreOptions, ScoreRequest
from service.engine.handoff import Handoff, settle
from service.engine.learning import LearnResult
from service.engine.passes import learn_merged, learn_one, learn_pass
from service.errors import InsufficientStorage, StaleVersion
from service.groups import each_alone
from service.ingest import Batch

if TYPE_CHECKING:
    from service.engine import Engine

#: most events one group carries (a larger request is still applied, alone): bounds the
#: latency a request waits behind the group before it
MAX_GROUP_EVENTS = 4096
#: threads applying groups of a blocking store (one group per model at a time)
MAX_THREADS = 32

EVENTS, SCORE, LABELS = "events", "score", "labels"


@dataclass(eq=False)
class _Request:
    kind: str
    #: the engine's arguments: a Batch and want_scores (events), a ScoreRequest (score),
    #: (ids, labels) (labels)
    payload: Any
    size: int
    #: whether the request's work is large (parsed in the thread pool): applied in a thread
    large: bool
    future: asyncio.Future


class Coalescer:
    """The per-model queues and their drain tasks.  Used from one event loop (the app's):
    a request awaits a future of its loop that the drain settles, which only that loop's
    drain can do safely, so while drains run a call from another loop is refused
    (RuntimeError) rather than left waiting for ever.  The engine calls run inline for a
    store that never blocks (memory) and small work, else in a thread of the coalescer's own
    pool, one hop per group."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._queues: dict[str, deque[_Request]] = {}
        #: the drains, and the pass running (a thread's future: no task awaits it)
        self._tasks: set[asyncio.Future] = set()
        #: the loop of the drains (while any runs, every request must come from it)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._threads: Handoff | None = None
        #: groups applied and requests they held (the mean group size is their ratio)
        self.groups = self.requests = 0
        #: whether groups of events go through passes (a blocking store that commits the
        #: entries of several models in one transaction: ``commit_many``)
        self._passes = engine.store.blocking and hasattr(engine.store, "commit_many")
        #: whether kept records can be written only while the model is at the head that
        #: scored them (``put_pending_at``: SQLite), with no read of the head first
        self._store_keeps_at_head = hasattr(engine.store, "put_pending_at")
        #: groups waiting for the next pass: (model id, group, the future of its outcomes)
        self._waiting: list[tuple[str, list[_Request], asyncio.Future]] = []
        #: models whose queue the passes drain (no drain task), waiting for the next pass:
        #: its first request is a group of events a pass takes (:meth:`_pass_drains`)
        self._pass_drained: dict[str, None] = {}
        #: a pass is to start at the loop's next turn (:meth:`_pass_now`)
        self._pass_soon = False
        self._pass_running = False
        #: passes applied and the groups they held
        self.passes = self.passed_groups = 0

    # ------------------------------------------------------------------ the entry points
    async def learn(
        self, model_id: str, batch: Batch, *, want_scores: bool = False, large: bool = False
    ) -> LearnResult:
        """``Engine.learn(model_id, batch, want_scores=...)``, merged with its neighbours."""
        return await self._submit(model_id, EVENTS, (batch, want_scores), len(batch), large)

    async def score(
        self, model_id: str, batch: Batch, *, large: bool = False, **options: Unpack[ScoreOptions]
    ) -> Scored:
        """``Engine.score(...)``, merged with its neighbours (one write of the kept records)."""
        request = ScoreRequest(batch, **options)
        if model_id not in self._queues:  # nothing queued before it: scored now if it can be
            now = self._score_now(model_id, [request], large)
            if now is not None:
                self.groups += 1
                self.requests += 1
                if isinstance(now[0], BaseException):
                    raise now[0]
                return now[0]
            if self._keeps_at_head([request], large):
                return await self._kept_alone(model_id, request)
        return await self._submit(model_id, SCORE, request, len(batch), large)

    async def labels(
        self, model_id: str, ids: list[str], labels: np.ndarray, *, large: bool = False
    ) -> LabelResult:
        """``Engine.labels(model_id, ids, labels)``, merged with its neighbours."""
        return await self._submit(model_id, LABELS, (ids, labels), len(ids), large)

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, which must be the drains' while any runs (class docstring)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            if any(not task.done() for task in self._tasks):
                raise RuntimeError(
                    "the coalescer is used from another event loop than its drains': call it "
                    "from the app's event loop (a thread hands work back to it)"
                )
            self._loop = loop
        return loop

    async def _submit(self, model_id: str, kind: str, payload: Any, size: int, large: bool):
        loop = self._running_loop()
        request = _Request(kind, payload, size, large, loop.create_future())
        queue = self._queues.get(model_id)
        if queue is None:  # the model is idle: this request starts its drain, or a pass's
            queue = self._queues[model_id] = deque([request])
            if self._pass_drains(request):
                self._pass_drained[model_id] = None
                if not self._pass_running and not self._pass_soon:
                    # once the requests of this turn of the loop are queued (the clients
                    # answered together send again together): one pass, not one and the rest
                    self._pass_soon = True
                    loop.call_soon(self._pass_now)
            else:
                self._start_drain(model_id, queue)
        else:
            queue.append(request)
        return await request.future

    def _pass_drains(self, first: _Request) -> bool:
        """Whether a queue whose first request is ``first`` is drained by the passes."""
        return self._passes and first.kind == EVENTS and not first.large

    def _pass_now(self) -> None:
        self._pass_soon = False
        if not self._pass_running and (self._waiting or self._pass_drained):
            self._start_pass()

    def _start_drain(self, model_id: str, queue: deque[_Request]) -> None:
        self._track(asyncio.get_running_loop().create_task(self._drain(model_id, queue)))

    def _track(self, running: asyncio.Future) -> None:
        """Count ``running`` (a drain, a pass, a kept score's thread) as this loop's work until
        done (:meth:`_running_loop`)."""
        self._tasks.add(running)
        running.add_done_callback(self._tasks.discard)

    async def _kept_alone(self, model_id: str, request: ScoreRequest) -> Scored:
        """A score that keeps records, at an idle model: handed to a thread at once
        (:meth:`_score_kept`), with no drain task, which would cost a one-event request as much
        as its parse. The model's queue is held, empty, meanwhile: what arrives waits in it."""
        self._running_loop()
        queue: deque[_Request] = deque()
        self._queues[model_id] = queue
        self.groups += 1
        self.requests += 1
        try:
            running = self._pool().submit(self._score_kept, model_id, [request])
            self._track(running)
            outcome = (await running)[0]
        finally:  # answered, failed or cancelled: the requests queued meanwhile go on
            if queue:
                self._start_drain(model_id, queue)
            else:
                del self._queues[model_id]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    # ------------------------------------------------------------------ the drain
    def _next_group(self, model_id: str, queue: deque[_Request]) -> list[_Request]:
        """The longest run of queued requests of the first one's kind, within the bound."""
        first = queue.popleft()
        group = [first]
        if first.kind == EVENTS and not self._mergeable(model_id):
            return group
        total = first.size
        while queue and queue[0].kind == first.kind:
            if total + queue[0].size > MAX_GROUP_EVENTS:
                break
            total += queue[0].size
            group.append(queue.popleft())
        return group

    def _mergeable(self, model_id: str) -> bool:
        cached = self.engine.repository.cached(model_id)
        return cached is None or cached.config.on_drift != "reset"

    async def _drain(self, model_id: str, queue: deque[_Request]) -> None:
        """Apply the model's queue group by group until it is empty; the queue is removed in the
        same step as the last check, with no await between."""
        try:
            while queue:
                group = self._next_group(model_id, queue)
                self.groups += 1
                self.requests += len(group)
                payloads = [r.payload for r in group]
                large = any(r.large for r in group)
                try:
                    if self._pass_drains(group[0]):
                        outcomes = await self._in_pass(model_id, group)
                    elif group[0].kind == SCORE and (
                        now := self._score_now(model_id, payloads, large)
                    ):
                        outcomes = now
                    elif group[0].kind == SCORE and self._keeps_at_head(payloads, large):
                        outcomes = await self._pool().submit(self._score_kept, model_id, payloads)
                    elif self.engine.store.blocking or large:
                        outcomes = await self._pool().submit(
                            self.apply, group[0].kind, model_id, payloads
                        )
                    else:
                        outcomes = self.apply(group[0].kind, model_id, payloads)
                except BaseException as error:  # noqa: BLE001 - every waiter gets it
                    outcomes = [error] * len(group)
                    if not isinstance(error, Exception):
                        self._settle(group, outcomes)
                        raise
                self._settle(group, outcomes)
        finally:  # the loop stops (or the task was cancelled): nothing waits forever
            del self._queues[model_id]
            for request in queue:
                request.future.cancel()

    def _score_now(
        self, model_id: str, requests: list[ScoreRequest], large: bool
    ) -> list[Any] | None:
        """The outcomes of a group of scores that keeps nothing, applied on the event loop when
        that needs no wait and no store call but one read of the model's head
        (``ModelRepository.current``: the hop to a thread would cost more than the scoring). None
        otherwise: the group then goes to a thread."""
        if large or not self.engine.store.blocking or any(_keeps(r) for r in requests):
            return None
        repository = self.engine.repository
        if repository.cached(model_id) is None:
            return None
        lock = repository.lock(model_id)
        if not lock.acquire_now():  # a thread holds it (a write, a checkpoint): no waiting
            return None
        try:
            loaded = repository.current(model_id)
            if loaded is None:
                return None
            outcomes, _ = self.engine.delayed.score_loaded(loaded, requests)
        finally:
            lock.__exit__()
        return outcomes

    def _keeps_at_head(self, requests: Sequence[ScoreRequest], large: bool) -> bool:
        """Whether a group of scores goes to :meth:`_score_kept`: it keeps records, its work is
        small and the store writes records at a head (SQLite)."""
        return self._store_keeps_at_head and not large and any(_keeps(r) for r in requests)

    def _score_kept(self, model_id: str, requests: list[ScoreRequest]) -> list[Any]:
        """A group of scores that keeps records, in a thread: scored by the cached model with no
        read of the store's head, the records written only while the head is the version that
        scored (``put_pending_at``). Done the usual way (:meth:`apply`) when the model is not
        cached, nothing is kept, the head moved or the bound refuses the group (that write wrote
        nothing)."""
        engine, repository = self.engine, self.engine.repository
        with repository.lock(model_id):
            loaded = repository.cached(model_id)
            if loaded is not None:
                head = (loaded.version, loaded.incarnation)
                outcomes, records = engine.delayed.score_loaded(loaded, requests)
        if loaded is None or not any(records):
            return self.apply(SCORE, model_id, requests)
        try:
            engine.delayed.keep(model_id, loaded, outcomes, records, head)
        except (StaleVersion, InsufficientStorage):
            return self.apply(SCORE, model_id, requests)
        repository.touch(model_id)
        return outcomes

    # ------------------------------------------------------------------ passes
    async def _in_pass(self, model_id: str, group: list[_Request]) -> list[Any]:
        """The group's outcomes, applied in the next pass (one pass at a time: what arrives
        during one is the next)."""
        future = asyncio.get_running_loop().create_future()
        self._waiting.append((model_id, group, future))
        if not self._pass_running:
            self._start_pass()
        return await future

    def _start_pass(self) -> None:
        items: list[tuple[str, list[_Request], asyncio.Future | None]]
        items, self._waiting = self._waiting, []  # type: ignore[assignment]
        for model_id in self._pass_drained:  # their groups, taken here (None: no drain's)
            group = self._next_group(model_id, self._queues[model_id])
            self.groups += 1
            self.requests += len(group)
            items.append((model_id, group, None))
        self._pass_drained = {}
        self._pass_running = True
        self.passes += 1
        self.passed_groups += len(items)
        groups = [(model_id, group) for model_id, group, _ in items]
        self._in_thread(partial(self._pass_done, items), self.learn_in_pass, groups)

    def _in_thread(self, then: Callable[[asyncio.Future], None], function: Callable, *args) -> None:
        """``function(*args)`` in a thread (this loop's work); ``then(its future)`` once done."""
        try:
            running = self._pool().submit(function, *args)
        except RuntimeError as error:  # the threads are closed: every waiter's answer
            running = asyncio.get_running_loop().create_future()
            running.set_exception(error)
        self._track(running)
        running.add_done_callback(then)

    def _pass_done(self, items: list, done: asyncio.Future) -> None:
        self._pass_running = False
        results = _result(done, lambda error: [[error] * len(group) for _, group, _ in items])
        for (model_id, group, future), outcomes in zip(items, results, strict=True):
            if outcomes is None:  # applied alone in a thread: the next pass does not wait
                answer = partial(self._answered_alone, model_id, group, future)
                payloads = [request.payload for request in group]
                self._in_thread(answer, self.apply, EVENTS, model_id, payloads)
            else:
                self._answer(model_id, group, future, outcomes)
        if self._waiting or self._pass_drained:
            self._start_pass()

    def _answered_alone(self, model_id: str, group: list, future: Any, done: Any) -> None:
        self._answer(model_id, group, future, _result(done, lambda error: [error] * len(group)))
        self._pass_now()  # its model's next group may wait for a pass, and none runs

    def _answer(self, model_id: str, group: list, future: Any, outcomes: Any) -> None:
        """A group of a pass answered: its requests (no ``future``), else its drain's future."""
        if future is None:
            self._settle(group, outcomes)
            self._after_pass(model_id)
        elif not future.done():  # else its drain was cancelled (the app stops)
            future.set_result(outcomes)

    def _after_pass(self, model_id: str) -> None:
        """A queue the passes drain, its group answered: removed when empty, else its next group
        waits for the next pass or, when its first request is of another kind, a drain task takes
        it over."""
        queue = self._queues[model_id]
        if not queue:
            del self._queues[model_id]
        elif self._pass_drains(queue[0]):
            self._pass_drained[model_id] = None
        else:
            self._start_drain(model_id, queue)

    def learn_in_pass(self, items: Sequence[tuple[str, Sequence[_Request]]]) -> list:
        """Each group's outcomes in one pass (:func:`learn_pass`); None for a group to apply
        alone after it."""
        payloads = [(model_id, [r.payload for r in group]) for model_id, group in items]
        return learn_pass(self.engine, payloads)

    @staticmethod
    def _settle(group: Sequence[_Request], outcomes: Sequence[Any]) -> None:
        for request, outcome in zip(group, outcomes, strict=True):
            error = outcome if isinstance(outcome, BaseException) else None
            settle(request.future, outcome, error)

    def _pool(self) -> Handoff:
        if self._threads is None:
            self._threads = Handoff(MAX_THREADS, "aucstream-group")
        return self._threads

    def close(self) -> None:
        """Stop the threads (the app's shutdown; the drains have ended with the requests)."""
        if self._threads is not None:
            self._threads.close()
            self._threads = None

    # ------------------------------------------------------------------ one group
    def apply(self, kind: str, model_id: str, payloads: list[Any]) -> list[Any]:
        """Each request's result or error: the group as one call, or, refused with a client
        error, request by request (:func:`service.groups.each_alone`)."""
        engine, delayed = self.engine, self.engine.delayed
        merged: Callable[..., list[Any]]
        single: Callable[..., Any]
        if kind == EVENTS:
            merged, single = partial(learn_merged, engine), partial(learn_one, engine)
        elif kind == SCORE:  # score_group answers each request: never refused as a whole
            merged, single = delayed.score_group, partial(_score_one, engine)
        else:
            merged, single = delayed.labels_group, partial(_labels_one, engine)
        return each_alone(partial(merged, model_id), partial(single, model_id), payloads)


def _result(done: asyncio.Future, of_error: Callable[[BaseException], Any]) -> Any:
    try:
        return done.result()
    except BaseException as error:  # noqa: BLE001 - every waiter gets it
        return of_error(error)


def _keeps(request: ScoreRequest) -> bool:
    ids = request.batch.ids
    return request.keep and ids is not None and any(i is not None for i in ids)


def _score_one(engine: Engine, model_id: str, payload: ScoreRequest) -> Scored:
    return engine.score(
        model_id,
        payload.batch,
        keep=payload.keep,
        probabilities=payload.probabilities,
        reasons=payload.reasons,
    )


def _labels_one(engine: Engine, model_id: str, payload: tuple[list[str], np.ndarray]) -> Any:
    return engine.labels(model_id, *payload)
