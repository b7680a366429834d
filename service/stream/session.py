"""What one stream connection does with the messages that have arrived: one engine call per run.

Messages are applied in the order they arrived.  Consecutive messages of one kind (learn;
score with the same ``keep``; label -- and the same encoding) form a **run**, learned or scored
by one engine call, so a connection sending one event per message is learned in batches; runs
are applied one after the other, so a message sees the model after every earlier message of
its connection (a score after a learn is scored by the model that learned it).

Atomicity: each message is atomic, as a REST request is (all its events or none).  A run is
validated whole, and when anything in it is refused, message by message: a bad message is
answered with its own problem and its neighbours are applied.  An engine call that fails on
the data (a model that diverges on it) is redone message by message, so only the messages at
fault fail; a call that fails for another reason (the model deleted, the store unavailable,
the queue full) fails every message of the run, and none of them is applied.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import numpy as np

from service.body import check_id_bytes
from service.deps import Services
from service.errors import InvalidInput, ServiceError
from service.ingest import Batch, FeatureSpec, concatenate, label_items
from service.ingest import fields as checks
from service.ingest.fields import Locator
from service.ingest.objects import events_to_batch
from service.offload import model_spec, run_engine
from service.queue.enqueue import enqueue
from service.stream.protocol import Message

Reply = dict[str, Any]
Labels = tuple[list[str], np.ndarray]
#: a run larger than this many events is learned or scored in the thread pool (see run_engine)
OFFLOAD_EVENTS = 20_000


def runs(messages: list[Message], max_events: int) -> Iterator[list[Message]]:
    """Consecutive messages of one kind, at most ``max_events`` events each (messages that
    failed to decode are not in any run)."""
    run: list[Message] = []
    key: tuple[str, bool, bool, int] | None = None
    size = 0
    for message in messages:
        if message.error is not None:
            continue
        this = (message.op, message.keep, message.binary, message.reasons)
        if run and (this != key or size + message.n_events > max_events):
            yield run
            run, size = [], 0
        run.append(message)
        key, size = this, size + message.n_events
    if run:
        yield run


def offsets(messages: list[Message]) -> list[int]:
    bounds = [0]
    for message in messages:
        bounds.append(bounds[-1] + message.n_events)
    return bounds


def problem_reply(seq: Any, error: ServiceError) -> Reply:
    return {"seq": seq, "status": error.status, "problem": error.problem()}


class Session:
    """The stream of one model on one connection: ``await handle(messages)`` -> replies."""

    def __init__(self, services: Services, model_id: str) -> None:
        self.services = services
        self.model_id = model_id
        self.replies: dict[int, Reply] = {}
        #: (op, status) -> messages answered, flushed to the metrics once per batch
        self.answered: Counter[tuple[str, int]] = Counter()

    async def handle(self, messages: list[Message]) -> list[Reply]:
        self.replies = {}
        for message in messages:
            if message.error is not None:
                self.fail([message], message.error)
        settings = self.services.settings
        for run in runs(messages, settings.max_batch_events):
            try:
                await self.apply(run)
            except ServiceError as error:  # the model (gone), the store, the queue: all of it
                self.fail([m for m in run if id(m) not in self.replies], error)
        replies = [self.replies[id(message)] for message in messages]
        self.count(messages, replies)
        return replies

    def fail(self, messages: list[Message], error: ServiceError) -> None:
        self.services.telemetry.rejected.labels(error.slug).inc(len(messages))
        for message in messages:
            self.replies[id(message)] = problem_reply(message.seq, error)

    def count(self, messages: list[Message], replies: list[Reply]) -> None:
        answered = Counter((m.op, r["status"]) for m, r in zip(messages, replies, strict=True))
        for (op, status), n in answered.items():
            self.services.telemetry.stream_messages.labels(op, str(status)).inc(n)

    # ------------------------------------------------------------------ validation
    async def spec(self) -> FeatureSpec:
        return await model_spec(self.services.engine, self.model_id)

    def validated(self, run: list[Message], build: Callable[[list[Message]], Any]):
        """``(messages, what build made of them)``: the run whole, else message by message
        (each refused one answered with its problem)."""
        try:
            return run, build(run)
        except ServiceError as error:
            if len(run) == 1:
                self.fail(run, error)
                return [], None
        good, parts = [], []
        for message in run:
            try:
                parts.append(build([message]))
                good.append(message)
            except ServiceError as error:
                self.fail([message], error)
        return good, parts

    def batch(self, run: list[Message], spec: FeatureSpec, *, labelled: bool) -> Batch:
        settings = self.services.settings
        if run[0].binary:
            batch = binary_batch(run, spec, labelled=labelled)
        else:
            events = [event for message in run for event in message.events]  # type: ignore[union-attr]
            batch = events_to_batch(
                events, spec, labelled=labelled, max_events=settings.max_batch_events
            )
        return check_id_bytes(batch, settings.max_event_id_bytes)

    def batches(self, run: list[Message], spec: FeatureSpec, *, labelled: bool):
        good, made = self.validated(run, lambda part: self.batch(part, spec, labelled=labelled))
        return good, concatenate(made) if type(made) is list and made else made

    def labels(self, run: list[Message]) -> tuple[list[Message], Labels | None]:
        good, made = self.validated(run, self.label_parts)
        if type(made) is list and made:
            made = ([i for ids, _ in made for i in ids], np.concatenate([y for _, y in made]))
        return good, made

    def label_parts(self, run: list[Message]) -> Labels:
        max_events = self.services.settings.max_batch_events
        if not run[0].binary:
            return label_items([item for m in run for item in m.events], max_events)  # type: ignore[union-attr]
        ids = [i for message in run for i in message.ids or ()]
        locate = Locator(ids)
        if None in ids:
            raise locate.error(ids.index(None), "a label needs the event 'id'", field="id")
        y = np.concatenate([message.y for message in run])  # type: ignore[misc]
        return [str(i) for i in ids], checks.labels_from_array(y, len(ids), locate)

    # ------------------------------------------------------------------ engine calls
    async def apply(self, run: list[Message]) -> None:
        op = run[0].op
        if op == "label":
            good, labels = self.labels(run)
            if good:
                await self.each(good, labels, self.apply_labels)
            return
        spec = await self.spec()
        good, batch = self.batches(run, spec, labelled=op == "learn")
        if not good:
            return
        if op == "score":
            await self.each(good, batch, self.apply_scores)
        elif self.services.queue is not None:
            await self.enqueue_events(good, batch, spec)
        else:
            await self.each(good, batch, self.apply_learn)

    async def each(
        self,
        run: list[Message],
        data: Any,
        call: Callable[[list[Message], Any], Awaitable[None]],
    ) -> None:
        """``call`` on the whole run; redone message by message when the data is refused."""
        try:
            await call(run, data)
            return
        except InvalidInput as error:
            if len(run) == 1:
                self.fail(run, error)
                return
        bounds = offsets(run)
        for index, message in enumerate(run):
            part = slice_of(data, bounds[index], bounds[index + 1])
            try:
                await call([message], part)
            except InvalidInput as error:
                self.fail([message], error)

    async def apply_learn(self, run: list[Message], batch: Batch) -> None:
        engine, telemetry = self.services.engine, self.services.telemetry
        result = await run_engine(
            engine, engine.learn, self.model_id, batch, want_scores=True,
            offload=len(batch) > OFFLOAD_EVENTS,
        )  # fmt: skip
        telemetry.events_learned.labels(self.model_id).inc(result.learned)
        if result.duplicate_ids:
            telemetry.duplicates.labels(self.model_id).inc(len(result.duplicate_ids))
        assert result.scores is not None
        scores = result.scores.tolist()
        bounds = offsets(run)
        for index, message in enumerate(run):
            mine = scores[bounds[index] : bounds[index + 1]]
            skipped = [p for p, value in enumerate(mine) if math.isnan(value)]
            reply: Reply = {
                "seq": message.seq,
                "status": 200,
                "version": result.version,
                "learned": len(mine) - len(skipped),
                "duplicates": len(skipped),
            }
            if skipped:
                ids = batch.ids or []
                reply["duplicate_ids"] = [ids[bounds[index] + p] for p in skipped]
            if message.scores:
                reply["scores"] = [None if math.isnan(value) else value for value in mine]
            self.replies[id(message)] = reply

    async def apply_scores(self, run: list[Message], batch: Batch) -> None:
        engine = self.services.engine
        # one engine call for the run: probabilities for all of it when a message asks; a run
        # shares its reasons' k (see runs)
        scored = await run_engine(
            engine, engine.score, self.model_id, batch, keep=run[0].keep,
            probabilities=any(message.probabilities for message in run),
            reasons=run[0].reasons, offload=len(batch) > OFFLOAD_EVENTS,
        )  # fmt: skip
        version, values, explained = scored.version, scored.scores, scored.reasons
        self.services.telemetry.scored.labels(self.model_id).inc(len(values))
        scores = values.tolist()
        calibrated = scored.probabilities
        probabilities = None if calibrated is None else calibrated.tolist()
        bounds = offsets(run)
        for index, message in enumerate(run):
            kept = 0
            if message.keep and batch.ids is not None:
                kept = len({i for i in batch.ids[bounds[index] : bounds[index + 1]] if i})
            reply = {
                "seq": message.seq,
                "status": 200,
                "version": version,
                "scores": scores[bounds[index] : bounds[index + 1]],
                "kept": kept,
            }
            if message.probabilities and probabilities is not None:
                reply["probabilities"] = probabilities[bounds[index] : bounds[index + 1]]
            if explained is not None:
                reply["reasons"] = explained[bounds[index] : bounds[index + 1]]
            self.replies[id(message)] = reply

    async def apply_labels(self, run: list[Message], labels: Labels) -> None:
        services, model_id = self.services, self.model_id
        ids, y = labels
        if services.queue is not None:
            queue = services.queue
            appended = await enqueue(
                services, model_id, None, lambda inc: queue.append_labels(model_id, inc, ids, y)
            )
            self.queued(run, appended)
            return
        engine, telemetry = services.engine, services.telemetry
        result = await run_engine(
            engine, engine.labels, model_id, ids, y, offload=len(ids) > OFFLOAD_EVENTS
        )
        telemetry.events_learned.labels(model_id).inc(result.learned)
        for status, n in Counter(status for _, status in result.statuses).items():
            telemetry.labels.labels(model_id, status).inc(n)
        bounds = offsets(run)
        for index, message in enumerate(run):
            mine = result.statuses[bounds[index] : bounds[index + 1]]
            self.replies[id(message)] = {
                "seq": message.seq,
                "status": 200,
                "version": result.version,
                "learned": sum(status == "learned" for _, status in mine),
                "results": [{"id": i, "status": status} for i, status in mine],
            }

    async def enqueue_events(self, run: list[Message], batch: Batch, spec: FeatureSpec) -> None:
        """Queue mode: the run is appended to the model's stream as one batch (202 each)."""
        asked = [m for m in run if m.scores]
        if asked:
            self.fail(asked, InvalidInput(
                "pre-update scores need sync mode: in queue mode events are learned later",
                field="scores",
            ))  # fmt: skip
            bounds = offsets(run)
            kept = [i for i, message in enumerate(run) if not message.scores]
            if not kept:
                return
            rows = np.concatenate([np.arange(bounds[i], bounds[i + 1]) for i in kept])
            run, batch = [run[i] for i in kept], batch.take(rows)
        queue, model_id = self.services.queue, self.model_id
        assert queue is not None
        appended = await enqueue(
            self.services, model_id, spec, lambda inc: queue.append_events(model_id, inc, batch)
        )
        self.queued(run, appended)

    def queued(self, run: list[Message], appended: Any) -> None:
        for message in run:
            self.replies[id(message)] = {
                "seq": message.seq,
                "status": 202,
                "queued": message.n_events,
                "stream_ids": appended.stream_ids,
                "backlog_events": appended.backlog_events,
            }


def slice_of(data: Batch | Labels, start: int, stop: int) -> Batch | Labels:
    if isinstance(data, Batch):
        return data.take(np.arange(start, stop, dtype=np.int64))
    ids, y = data
    return ids[start:stop], y[start:stop]


def binary_batch(run: list[Message], spec: FeatureSpec, *, labelled: bool) -> Batch:
    """Binary messages (dense rows) -> a validated batch, checked as an NPZ body's arrays."""
    if spec.feature_mode != "dense":
        raise InvalidInput(
            f"binary messages carry dense rows; this model's features are {spec.feature_mode}: "
            "send JSON messages",
            field="x",
        )
    for message in run:
        assert message.X is not None
        if message.X.shape[1] != spec.n_features:
            detail = f"expected {spec.n_features} features, got {message.X.shape[1]}"
            raise InvalidInput(detail, field="x", event=0)
    raw_ids: list[str | None] = []
    if any(message.ids is not None for message in run):
        for message in run:
            raw_ids.extend(message.ids if message.ids is not None else [None] * message.n_events)
    locate = Locator(raw_ids or None)
    ids = checks.parse_ids(raw_ids, locate) if raw_ids else None
    X = checks.dense(np.concatenate([message.X for message in run]), spec, locate)  # type: ignore[misc]
    y = None
    if labelled:
        raw = np.concatenate([message.y for message in run])  # type: ignore[misc]
        y = checks.labels_from_array(raw, len(raw), locate)
    return Batch(X, y, ids)
