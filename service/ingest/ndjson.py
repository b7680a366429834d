"""``application/x-ndjson``: one event object per line, read line by line as the body streams
in (blank lines skipped); errors name the 1-based line."""

from __future__ import annotations

from typing import Any

from service.errors import MalformedBody, PayloadTooLarge
from service.ingest.batch import Batch, FeatureSpec
from service.ingest.objects import events_to_batch, parse_json

_NEWLINE = ord("\n")


class NDJSONReader:
    """Decodes an NDJSON body chunk by chunk as it streams in.  The unread bytes are one
    ``bytearray``, searched for newlines only past the last search, so a line costs time linear
    in its length however many chunks it spans.  Past ``decode_inline_bytes`` fed (None:
    never) lines are only collected, for :meth:`finish` to decode in a thread."""

    def __init__(self, max_events: int, decode_inline_bytes: int | None = None) -> None:
        self.max_events = max_events
        self.events: list[Any] = []
        self.lines: list[int] = []
        #: bytes fed so far
        self.size = 0
        self._decode_inline_bytes = decode_inline_bytes
        self._pending = bytearray()  # bytes after the last decoded line
        self._searched = 0  # no newline in _pending[:_searched]
        self._line = 0

    @property
    def deferred(self) -> bool:
        """Lines are only collected now; :meth:`finish` decodes them."""
        return self._decode_inline_bytes is not None and self.size > self._decode_inline_bytes

    def feed(self, chunk: bytes) -> None:
        self.size += len(chunk)
        self._pending += chunk
        if not self.deferred:
            self._decode_lines()

    def _decode_lines(self) -> None:
        """Decode every complete line of ``_pending`` and drop it."""
        pending = self._pending
        start = 0
        end = pending.find(_NEWLINE, self._searched)
        while end >= 0:
            self._decode(pending[start:end])
            start = end + 1
            end = pending.find(_NEWLINE, start)
        del pending[:start]
        self._searched = len(pending)

    def _decode(self, part: bytes | bytearray) -> None:
        self._line += 1
        if not part.strip():
            return
        try:
            event = parse_json(bytes(part))
        except MalformedBody as error:
            raise MalformedBody(
                f"line {self._line}: {error.detail}", field=error.field, line=self._line
            ) from None
        if len(self.events) >= self.max_events:
            raise PayloadTooLarge(
                f"more than {self.max_events} events in one request", line=self._line
            )
        self.events.append(event)
        self.lines.append(self._line)

    def finish(self, spec: FeatureSpec, *, labelled: bool) -> Batch:
        self._decode_lines()
        if self._pending.strip():
            self._decode(self._pending)
        self._pending = bytearray()
        self._searched = 0
        return events_to_batch(
            self.events, spec, labelled=labelled, max_events=self.max_events, lines=self.lines
        )


def ndjson_events(body: bytes, spec: FeatureSpec, *, labelled: bool, max_events: int) -> Batch:
    reader = NDJSONReader(max_events)
    reader.feed(body)
    return reader.finish(spec, labelled=labelled)
