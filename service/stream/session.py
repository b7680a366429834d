"""What one stream connection does with the messages that have arrived: one engine call per run.

Messages are applied in the order they arrived.  Consecutive messages of one kind (learn;
score with the same ``keep``; label -- and the same encoding) form a **run**, learned or scored
by one engine call, so a connection sending one event per message is learned in batches; runs
are applied one after the other, so a message sees the model after every earlier message of
its connection (a score after a learn is scored by the model that learned it).

Atomicity: each message is atomic, as a REST request is (all its events or none).  A run is
validated whole, and when anything in it is refused, message by message: a bad message is
answered with its own problem and its neighbours are applied.  An engine call refused with a
client error (a model that diverges on the data: :mod:`service.groups`) is redone message by
message, so only the messages at fault fail; any other error (the model deleted, the store
unavailable) is the answer of every message of the run.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import numpy as np
import orjson

from core.validation import width_refused
from service.body import check_id_bytes
from service.deps import Services
from service.engine.delayed import LabelResult, Scored
from service.engine.learning import LearnResult
from service.errors import InvalidInput, ServiceError
from service.groups import refused_alone
from service.ingest import Batch, FeatureSpec, concatenate, label_items
from service.ingest import fields as checks
from service.ingest.fields import Locator
from service.ingest.objects import events_to_batch
from service.offload import in_thread_if, large_batch, model_spec
from service.queue.enqueue import enqueue
from service.stream.blocks import Block
from service.stream.protocol import Message
from service.stream.replies import joined, kept_by_each, plain, score_texts, scored_block

Reply = dict[str, Any]
#: what a batch holds: single messages, and blocks of binary messages of one layout
Item = Message | Block
Labels = tuple[list[str], np.ndarray]


def runs(messages: list[Item], max_events: int) -> Iterator[list[Item]]:
    """Consecutive messages of one kind, at most ``max_events`` events each (messages that
    failed to decode are not in any run; a block is at most ``max_events`` events, see
    :func:`~service.stream.protocol.decode_uniform`)."""
    run: list[Item] = []
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


def expanded(items: Sequence[Item]) -> list[Message]:
    """The messages of ``items``, blocks made into their messages."""
    messages: list[Message] = []
    for item in items:
        if type(item) is Block:
            messages.extend(item.expand())
        else:
            messages.append(item)  # type: ignore[arg-type]
    return messages


def count_messages(items: Sequence[Item]) -> int:
    return sum(item.n_messages if isinstance(item, Block) else 1 for item in items)


def sum_events(messages: Sequence[Item]) -> int:
    return sum(message.n_events for message in messages)


def large(items: Sequence[Item]) -> bool:
    """Whether the work of ``items`` is done in the thread pool (:mod:`service.offload`)."""
    return large_batch(sum_events(items), count_messages(items))


def offsets(messages: Sequence[Item]) -> list[int]:
    bounds = [0]
    for message in messages:
        bounds.append(bounds[-1] + message.n_events)
    return bounds


def problem_reply(seq: Any, error: ServiceError) -> Reply:
    return {"seq": seq, "status": error.status, "problem": error.problem()}


class Session:
    """The stream of one model on one connection: ``await handle(messages)`` -> replies.

    Used on the app's event loop, where every engine call is made and awaited (through the
    coalescer, which is the loop's); the validation and the replies of a run larger than
    :mod:`service.offload` allows inline are made in the thread pool meanwhile."""

    def __init__(self, services: Services, model_id: str) -> None:
        self.services = services
        self.model_id = model_id
        #: id(message) -> its reply, or the reply's JSON text when it is written ready
        self.replies: dict[int, Reply | str] = {}
        #: (op, status) -> messages answered, flushed to the metrics once per batch
        self.answered: Counter[tuple[str, int]] = Counter()

    async def handle(self, messages: list[Item]) -> str:
        """The replies to ``messages``, in their order, as the text of a JSON list."""
        self.replies = {}
        for message in messages:
            if message.error is not None:
                self.fail([message], message.error)
        settings = self.services.settings
        for run in runs(messages, settings.max_batch_events):
            try:
                await self.apply(run)
            except ServiceError as error:  # the model (gone), the store, the queue: all of it
                unanswered = [
                    m for m in expanded([i for i in run if getattr(i, "reply", None) is None])
                    if id(m) not in self.replies
                ]  # fmt: skip
                self.fail(unanswered, error)
        return await in_thread_if(large(messages), self.written, messages)

    def fail(self, items: Sequence[Item], error: ServiceError) -> None:
        messages = expanded(items)
        self.services.telemetry.rejected.labels(error.slug).inc(len(messages))
        for message in messages:
            self.replies[id(message)] = problem_reply(message.seq, error)

    def written(self, items: list[Item]) -> str:
        """The replies as one JSON list: a block answered whole, or a plain message (see
        :func:`~service.stream.replies.plain`), is its ready text -- so is each plain message
        of a block answered message by message (one of its messages was refused); the other
        replies are serialised together, a stretch between two ready texts at a time."""
        pieces: list[str] = []
        stretch: list[Reply] = []
        answered: Counter[tuple[str, int]] = Counter()
        for item in items:
            if type(item) is Block and item.reply is not None:
                # (op, reply, messages it answers)
                texts: Sequence[tuple[str, Reply | str, int]] = (
                    (item.op, item.reply, item.n_messages),
                )
            else:
                each = item.expand() if isinstance(item, Block) else (item,)
                texts = [(message.op, self.replies[id(message)], 1) for message in each]
            for op, reply, n in texts:
                if type(reply) is not str:
                    stretch.append(reply)  # type: ignore[arg-type]
                    answered[op, reply["status"]] += 1  # type: ignore[index]
                    continue
                answered[op, 200] += n
                if stretch:
                    pieces.append(orjson.dumps(stretch)[1:-1].decode())
                    stretch = []
                pieces.append(reply)
        if stretch:
            pieces.append(orjson.dumps(stretch)[1:-1].decode())
        for (op, status), n in answered.items():
            self.services.telemetry.stream_messages.labels(op, str(status)).inc(n)
        return "[" + ",".join(pieces) + "]"

    # ------------------------------------------------------------------ validation
    async def spec(self) -> FeatureSpec:
        return await model_spec(self.services.engine, self.model_id)

    def validated(self, run: list[Item], build: Callable[[list[Item]], Any]):
        """``(messages, what build made of them)``: the run whole, else message by message
        (each refused one answered with its problem)."""
        try:
            return run, build(run)
        except ServiceError as error:
            if len(run) == 1 and type(run[0]) is Message:
                self.fail(run, error)
                return [], None
        good: list[Item] = []
        parts = []
        for message in expanded(run):
            try:
                parts.append(build([message]))
                good.append(message)
            except ServiceError as error:
                self.fail([message], error)
        return good, parts

    def batch(self, run: list[Item], spec: FeatureSpec, *, labelled: bool) -> Batch:
        settings = self.services.settings
        if run[0].binary:
            batch = binary_batch(run, spec, labelled=labelled)
        else:
            events = [event for message in run for event in message.events]  # type: ignore[union-attr]
            batch = events_to_batch(
                events, spec, labelled=labelled, max_events=settings.max_batch_events
            )
        return check_id_bytes(batch, settings.max_event_id_bytes)

    def batches(self, run: list[Item], spec: FeatureSpec, *, labelled: bool):
        good, made = self.validated(run, lambda part: self.batch(part, spec, labelled=labelled))
        return good, concatenate(made) if type(made) is list and made else made

    def labels(self, run: list[Item]) -> tuple[list[Item], Labels | None]:
        good, made = self.validated(run, self.label_parts)
        if type(made) is list and made:
            made = ([i for ids, _ in made for i in ids], np.concatenate([y for _, y in made]))
        return good, made

    def label_parts(self, run: list[Item]) -> Labels:
        max_events = self.services.settings.max_batch_events
        if not run[0].binary:
            return label_items([item for m in run for item in m.events], max_events)  # type: ignore[union-attr]
        raw_ids = [i for message in run for i in message.ids or ()]
        locate = Locator(raw_ids)
        ids = checks.label_ids(raw_ids, locate)
        y = np.concatenate([message.y for message in run])  # type: ignore[misc]
        return ids, checks.labels_from_array(y, len(ids), locate)

    # ------------------------------------------------------------------ engine calls
    async def apply(self, run: list[Item]) -> None:
        op = run[0].op
        offload = large(run)
        if op == "label":
            good, labels = await in_thread_if(offload, self.labels, run)
            if good:
                await self.each(good, labels, self.apply_labels)
            return
        spec = await self.spec()
        good, batch = await in_thread_if(offload, self.batches, run, spec, labelled=op == "learn")
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
        run: list[Item],
        data: Any,
        call: Callable[[list[Item], Any], Awaitable[None]],
    ) -> None:
        """``call`` on the whole run.  Refused with a client error (:mod:`service.groups`),
        each message is handed to the engine as a request of its own, at once: the coalescer
        merges and splits them by the rule of concurrent requests, so only the messages at
        fault fail.  Any other error is every message's answer (:meth:`handle`)."""
        try:
            await call(run, data)
            return
        except ServiceError as error:
            if not refused_alone(error):
                raise
            if len(run) == 1 and type(run[0]) is Message:
                self.fail(run, error)
                return
        messages = expanded(run)
        bounds = offsets(messages)
        outcomes = await asyncio.gather(
            *(call([message], slice_of(data, bounds[k], bounds[k + 1]))
              for k, message in enumerate(messages)),
            return_exceptions=True,
        )  # fmt: skip
        for message, outcome in zip(messages, outcomes, strict=True):
            if isinstance(outcome, ServiceError):
                self.fail([message], outcome)
            elif isinstance(outcome, BaseException):
                raise outcome

    async def call_engine(self, method: str, run: list[Item], *args: Any, **options: Any) -> Any:
        """The session's one way into the engine: ``engine.coalesce.<method>(model, *args,
        **options)`` (learn, score, labels), merged with the concurrent requests to the same
        model from every connection and over HTTP (one engine call and one commit per group:
        service/engine/coalesce.py) for ``run``; a large run (:func:`large`) is applied in a
        thread."""
        coalesce = self.services.engine.coalesce
        return await getattr(coalesce, method)(self.model_id, *args, large=large(run), **options)

    async def apply_learn(self, run: list[Item], batch: Batch) -> None:
        telemetry = self.services.telemetry
        result = await self.call_engine("learn", run, batch, want_scores=True)
        telemetry.events_learned.labels(self.model_id).inc(result.learned)
        if result.duplicate_ids:
            telemetry.duplicates.labels(self.model_id).inc(len(result.duplicate_ids))
        await in_thread_if(large(run), self.learn_replies, run, batch, result)

    def learn_replies(self, run: list[Item], batch: Batch, result: LearnResult) -> None:
        """The replies of a learned run."""
        assert result.scores is not None
        values: np.ndarray = result.scores
        every = values.tolist()
        bounds = offsets(run)
        learned_one = f',"status":200,"version":{result.version},"learned":1,"duplicates":0}}'
        for index, item in enumerate(run):
            start, stop = bounds[index], bounds[index + 1]
            if type(item) is Block and not item.scores and not np.isnan(values[start:stop]).any():
                item.reply = joined(
                    item.seqs, f',"status":200,"version":{result.version},"learned":{item.n},'
                    '"duplicates":0}',
                )  # fmt: skip
                continue
            if plain(item) and not item.scores and not math.isnan(every[start]):  # type: ignore[union-attr]
                self.replies[id(item)] = f'{{"seq":{item.seq}{learned_one}'  # type: ignore[union-attr]
                continue
            scores = every[start:stop]
            first = start
            for message in expanded([item]):
                mine = scores[first - start : first - start + message.n_events]
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
                    reply["duplicate_ids"] = [ids[first + p] for p in skipped]
                if message.scores:
                    reply["scores"] = [None if math.isnan(value) else value for value in mine]
                self.replies[id(message)] = reply
                first += message.n_events

    async def apply_scores(self, run: list[Item], batch: Batch) -> None:
        # one engine call for the run: probabilities for all of it when a message asks; a run
        # shares its reasons' k (see runs)
        scored = await self.call_engine(
            "score", run, batch, keep=run[0].keep,
            probabilities=any(message.probabilities for message in run),
            reasons=run[0].reasons,
        )  # fmt: skip
        self.services.telemetry.scored.labels(self.model_id).inc(len(scored.scores))
        await in_thread_if(large(run), self.score_replies, run, batch, scored)

    def score_replies(self, run: list[Item], batch: Batch, scored: Scored) -> None:
        """The replies of a scored run."""
        version, values, explained = scored.version, scored.scores, scored.reasons
        calibrated = scored.probabilities
        bounds = offsets(run)
        scores: list[float] | None = None
        probabilities: list[float] | None = None
        texts: list[str] | None = None  # each score as JSON, for the plain messages
        for index, item in enumerate(run):
            start, stop = bounds[index], bounds[index + 1]
            if type(item) is Block and not item.probabilities and explained is None:
                kept = kept_by_each(item, batch.ids, start)
                if kept is not None:
                    item.reply = scored_block(item, values[start:stop], version, kept)
                    continue
            if plain(item) and not item.probabilities and explained is None:  # type: ignore[union-attr]
                if texts is None:
                    texts = score_texts(values)
                kept = int(item.keep and batch.ids is not None and bool(batch.ids[start]))
                self.replies[id(item)] = (
                    f'{{"seq":{item.seq},"status":200,"version":{version},'  # type: ignore[union-attr]
                    f'"scores":[{texts[start]}],"kept":{kept}}}'
                )
                continue
            if scores is None:
                scores = values.tolist()
                probabilities = None if calibrated is None else calibrated.tolist()
            first = start
            for message in expanded([item]):
                end = first + message.n_events
                kept = 0
                if message.keep and batch.ids is not None:
                    kept = len({i for i in batch.ids[first:end] if i})
                reply = {
                    "seq": message.seq,
                    "status": 200,
                    "version": version,
                    "scores": scores[first:end],
                    "kept": kept,
                }
                if message.probabilities and probabilities is not None:
                    reply["probabilities"] = probabilities[first:end]
                if explained is not None:
                    reply["reasons"] = explained[first:end]
                self.replies[id(message)] = reply
                first = end

    async def apply_labels(self, run: list[Item], labels: Labels) -> None:
        services, model_id = self.services, self.model_id
        ids, y = labels
        if services.queue is not None:
            self.queued(run, await enqueue(services, model_id, None, labels=labels))
            return
        telemetry = services.telemetry
        result = await self.call_engine("labels", run, ids, y)
        telemetry.events_learned.labels(model_id).inc(result.learned)
        for status, n in Counter(status for _, status in result.statuses).items():
            telemetry.labels.labels(model_id, status).inc(n)
        await in_thread_if(large(run), self.label_replies, run, result)

    def label_replies(self, run: list[Item], result: LabelResult) -> None:
        """The replies of a run of labels joined."""
        messages = expanded(run)
        bounds = offsets(messages)
        for index, message in enumerate(messages):
            mine = result.statuses[bounds[index] : bounds[index + 1]]
            self.replies[id(message)] = {
                "seq": message.seq,
                "status": 200,
                "version": result.version,
                "learned": sum(status == "learned" for _, status in mine),
                "results": [{"id": i, "status": status} for i, status in mine],
            }

    async def enqueue_events(self, run: list[Item], batch: Batch, spec: FeatureSpec) -> None:
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
        self.queued(run, await enqueue(self.services, self.model_id, spec, batch=batch))

    def queued(self, run: list[Item], appended: Any) -> None:
        for message in expanded(run):
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


def binary_batch(run: list[Item], spec: FeatureSpec, *, labelled: bool) -> Batch:
    """Binary messages (dense rows) -> a validated batch, checked as an NPZ body's arrays."""
    if spec.feature_mode != "dense":
        raise InvalidInput(
            f"binary messages carry dense rows; this model's features are {spec.feature_mode}: "
            "send JSON messages",
            field="x",
        )
    first = 0
    for message in run:
        assert message.X is not None
        if message.X.shape[1] != spec.n_features:
            detail = width_refused(spec.n_features, message.X.shape[1])
            raise Locator(None).error(first, detail, field="x")
        first += message.n_events
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
