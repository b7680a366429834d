"""What one stream connection does with the messages that have arrived (docs/stream.md,
"Guarantees").  Consecutive messages of one kind (learn; score with the same ``keep`` and
``reasons``; label -- and the same encoding) form a **run**, applied by one engine call, runs in
arrival order.  A run is validated whole, else message by message (a refused message answered
with its own problem); an engine call refused with a client error (:mod:`service.groups`) is
redone message by message; any other error is every message's answer.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from operator import attrgetter
from typing import Any, TypeVar

import numpy as np

from core.validation import width_refused
from service.body import check_id_bytes
from service.deps import Services
from service.engine.delayed import LabelResult, Scored
from service.engine.learning import LearnResult
from service.errors import InvalidInput, ServiceError
from service.groups import refused_alone
from service.ingest import Batch, FeatureSpec, concatenate, joined_labels, label_items
from service.ingest import fields as checks
from service.ingest.fields import Locator
from service.ingest.objects import events_to_batch
from service.offload import in_thread_if, large_batch, model_spec
from service.queue.enqueue import enqueue
from service.stream.blocks import Block
from service.stream.protocol import Message
from service.stream.replies import Field, json_text, kept_by_each, listed, score_texts, texts, write

#: what a batch holds: single messages, and blocks of binary messages of one layout
Item = Message | Block
Labels = tuple[list[str], np.ndarray]
T = TypeVar("T")


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
    return [message for item in items for message in item.expand()]


def total(items: Sequence[Item], count: str = "n_events") -> int:
    """The events (or ``count="n_messages"``: the messages) of ``items``."""
    return sum(map(attrgetter(count), items))


def large(items: Sequence[Item]) -> bool:
    """Whether the work of ``items`` is done in the thread pool (:mod:`service.offload`)."""
    return large_batch(total(items), total(items, "n_messages"))


def offsets(items: Sequence[Item]) -> list[int]:
    """Where each item's events start, then their total."""
    return list(itertools.accumulate(map(attrgetter("n_events"), items), initial=0))


class Session:
    """The stream of one model on one connection: ``await handle(messages)`` -> replies, on
    the app's event loop (a large run validated and answered in the thread pool)."""

    def __init__(self, services: Services, model_id: str) -> None:
        self.services = services
        self.model_id = model_id
        #: id(message), or id(block) when a block is answered whole -> (status, reply text)
        self.replies: dict[int, tuple[int, str]] = {}

    async def handle(self, messages: list[Item]) -> str:
        """The replies to ``messages``, in their order, as the text of a JSON list."""
        self.replies = {}
        for message in messages:
            if message.error is not None:
                self.fail([message], message.error)
        for run in runs(messages, self.services.settings.max_batch_events):
            try:
                await self.apply(run)
            except ServiceError as error:  # the model (gone), the store, the queue: all of it
                unanswered = [
                    m for m in expanded([i for i in run if id(i) not in self.replies])
                    if id(m) not in self.replies
                ]  # fmt: skip
                self.fail(unanswered, error)
        return await in_thread_if(large(messages), self.written, messages)

    def fail(self, items: Sequence[Item], error: ServiceError) -> None:
        messages = expanded(items)
        self.services.telemetry.rejected.labels(error.slug).inc(len(messages))
        self.answer(messages, error.status, [("problem", json_text(error.problem()))])

    def answer(self, messages: list[Message], status: int, fields: list[Field]) -> None:
        """Each message's reply (:func:`~service.stream.replies.texts`)."""
        written = texts([message.seq for message in messages], [("status", str(status)), *fields])
        for message, text in zip(messages, written, strict=True):
            self.replies[id(message)] = (status, text)

    def answer_block(self, block: Block, fields: list[Field]) -> None:
        """The replies of a block answered whole (status 200), one text."""
        self.replies[id(block)] = (200, write(block.seqs, [("status", "200"), *fields]))

    def written(self, items: list[Item]) -> str:
        """The replies as one JSON list: a block answered whole is one text, the messages of
        any other block are answered one by one."""
        pieces: list[str] = []
        answered: Counter[tuple[str, int]] = Counter()
        replies = self.replies
        for item in items:
            for part in (item,) if id(item) in replies else item.expand():
                status, text = replies[id(part)]
                answered[part.op, status] += part.n_messages
                pieces.append(text)
        for (op, status), n in answered.items():
            self.services.telemetry.stream_messages.labels(op, str(status)).inc(n)
        return "[" + ",".join(pieces) + "]"

    # ------------------------------------------------------------------ validation
    def validated(
        self, run: list[Item], build: Callable[[list[Item]], T], join: Callable[[list[T]], T]
    ):
        """``(messages, what build made of them)``: the run whole, else message by message
        (each refused one answered with its problem, the others' parts joined)."""
        try:
            return run, build(run)
        except ServiceError as error:
            if len(run) == 1 and type(run[0]) is Message:
                self.fail(run, error)
                return [], None
        good: list[Item] = []
        parts: list[T] = []
        for message in expanded(run):
            try:
                parts.append(build([message]))
                good.append(message)
            except ServiceError as error:
                self.fail([message], error)
        return good, join(parts) if parts else None

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
            good, labels = await in_thread_if(
                offload, self.validated, run, self.label_parts, joined_labels
            )
            if good:
                await self.each(good, labels, self.apply_labels)
            return
        spec = await model_spec(self.services.engine, self.model_id)
        good, batch = await in_thread_if(
            offload, self.validated, run,
            lambda part: self.batch(part, spec, labelled=op == "learn"), concatenate,
        )  # fmt: skip
        if not good:
            return
        if op == "score":
            await self.each(good, batch, self.apply_scores)
        elif self.services.queue is not None:
            await self.enqueue_events(good, batch, spec)
        else:
            await self.each(good, batch, self.apply_learn)

    async def each(
        self, run: list[Item], data: Any, call: Callable[[list[Item], Any], Awaitable[None]]
    ) -> None:
        """``call`` on the whole run; refused with a client error, on each message as a
        request of its own, all at once: the coalescer splits them by its rule, so only the
        messages at fault fail."""
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
        """``engine.coalesce.<method>`` (learn, score, labels) for ``run``: merged with the
        concurrent requests to the model from every connection and over HTTP."""
        coalesce = self.services.engine.coalesce
        return await getattr(coalesce, method)(self.model_id, *args, large=large(run), **options)

    async def apply_learn(self, run: list[Item], batch: Batch) -> None:
        telemetry = self.services.telemetry
        result = await self.call_engine("learn", run, batch, want_scores=True)
        telemetry.count_learned(self.model_id, result.learned, result.drifts)
        if result.duplicate_ids:
            telemetry.duplicates.labels(self.model_id).inc(len(result.duplicate_ids))
        await in_thread_if(large(run), self.learn_replies, run, batch, result)

    def learn_replies(self, run: list[Item], batch: Batch, result: LearnResult) -> None:
        """The replies of a learned run: a block without scores asked or duplicates answered
        whole, any other message on its own."""
        assert result.scores is not None
        values: np.ndarray = result.scores
        version = ("version", str(result.version))

        def whole(item: Item, start: int, stop: int) -> bool:
            if type(item) is not Block or item.scores or np.isnan(values[start:stop]).any():
                return False
            self.answer_block(item, [version, ("learned", str(item.n)), ("duplicates", "0")])
            return True

        messages, firsts = self.one_by_one(run, whole)
        if not messages:
            return
        if not any(message.scores for message in messages) and not np.isnan(values).any():
            learned = [str(message.n_events) for message in messages]  # the common case
            self.answer(messages, 200, [version, ("learned", learned), ("duplicates", "0")])
            return
        every, ids = values.tolist(), batch.ids or []
        learned, duplicates, duplicate_ids, scores = [], [], [], []
        for message, first in zip(messages, firsts, strict=True):
            mine = every[first : first + message.n_events]
            skipped = [p for p, value in enumerate(mine) if math.isnan(value)]
            learned.append(str(len(mine) - len(skipped)))
            duplicates.append(str(len(skipped)))
            duplicate_ids.append(json_text([ids[first + p] for p in skipped]) if skipped else None)
            scores.append(json_text(mine) if message.scores else None)  # NaN is written null
        self.answer(messages, 200, [
            version, ("learned", learned), ("duplicates", duplicates),
            ("duplicate_ids", duplicate_ids), ("scores", scores),
        ])  # fmt: skip

    def one_by_one(
        self, run: list[Item], whole: Callable[[Item, int, int], bool] | None = None
    ) -> tuple[list[Message], list[int]]:
        """The messages of the items of ``run`` not answered ``whole`` (called with the item
        and its events' bounds), and the first event of each."""
        messages: list[Message] = []
        firsts: list[int] = []
        bounds = offsets(run)
        for index, item in enumerate(run):
            first = bounds[index]
            if whole is not None and whole(item, first, bounds[index + 1]):
                continue
            for message in item.expand():
                messages.append(message)
                firsts.append(first)
                first += message.n_events
        return messages, firsts

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
        """The replies of a scored run: each score written once, then cut per message."""
        version = ("version", str(scored.version))
        explained, calibrated, ids = scored.reasons, scored.probabilities, batch.ids

        def whole(item: Item, start: int, stop: int) -> bool:
            if type(item) is not Block or item.probabilities or explained is not None:
                return False
            kept = kept_by_each(item, ids, start)
            if kept is None:
                return False
            n, mine = item.n, score_texts(scored.scores[start:stop])
            each = [f"[{v}]" for v in mine] if n == 1 else [
                listed(mine[i : i + n]) for i in range(0, len(mine), n)
            ]  # fmt: skip
            self.answer_block(item, [version, ("scores", each), ("kept", str(kept))])
            return True

        messages, firsts = self.one_by_one(run, whole)
        if not messages:
            return
        values = score_texts(scored.scores)
        pairs = list(zip(messages, firsts, strict=True))
        fields: list[Field] = [version, ("scores", [
            f"[{values[first]}]" if m.n_events == 1 else listed(values[first : first + m.n_events])
            for m, first in pairs
        ])]  # fmt: skip
        if ids is None:
            fields.append(("kept", "0"))
        else:
            fields.append(("kept", [
                "0" if not m.keep
                else ("1" if ids[first] else "0") if m.n_events == 1
                else str(len({i for i in ids[first : first + m.n_events] if i}))
                for m, first in pairs
            ]))  # fmt: skip
        if calibrated is not None and any(m.probabilities for m in messages):
            fields.append(("probabilities", [
                json_text(calibrated[first : first + m.n_events].tolist())
                if m.probabilities else None
                for m, first in pairs
            ]))  # fmt: skip
        if explained is not None:
            fields.append(("reasons", [
                json_text(explained[first : first + m.n_events]) for m, first in pairs
            ]))  # fmt: skip
        self.answer(messages, 200, fields)

    async def apply_labels(self, run: list[Item], labels: Labels) -> None:
        services, model_id = self.services, self.model_id
        if services.queue is not None:
            self.queued(run, await enqueue(services, model_id, None, labels=labels))
            return
        telemetry = services.telemetry
        result = await self.call_engine("labels", run, *labels)
        telemetry.count_learned(model_id, result.learned, result.drifts)
        for status, n in Counter(status for _, status in result.statuses).items():
            telemetry.labels.labels(model_id, status).inc(n)
        await in_thread_if(large(run), self.label_replies, run, result)

    def label_replies(self, run: list[Item], result: LabelResult) -> None:
        """The replies of a run of labels joined."""
        messages, firsts = self.one_by_one(run)
        learned, results = [], []
        for message, first in zip(messages, firsts, strict=True):
            mine = result.statuses[first : first + message.n_events]
            learned.append(str(sum(status == "learned" for _, status in mine)))
            results.append(json_text([{"id": i, "status": status} for i, status in mine]))
        fields: list[Field] = [("version", str(result.version)), ("learned", learned)]
        self.answer(messages, 200, [*fields, ("results", results)])

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
        messages = expanded(run)
        self.answer(messages, 202, [
            ("queued", [str(message.n_events) for message in messages]),
            ("stream_ids", json_text(appended.stream_ids)),
            ("backlog_events", json_text(appended.backlog_events)),
        ])  # fmt: skip


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
    with_ids = any(message.ids is not None for message in run)
    raw_ids = [i for m in run for i in m.ids or [None] * m.n_events] if with_ids else []
    locate = Locator(raw_ids or None)
    ids = checks.parse_ids(raw_ids, locate) if raw_ids else None
    X = checks.dense(np.concatenate([message.X for message in run]), spec, locate)  # type: ignore[misc]
    y = None
    if labelled:
        raw = np.concatenate([message.y for message in run])  # type: ignore[misc]
        y = checks.labels_from_array(raw, len(raw), locate)
    return Batch(X, y, ids)
