"""``application/x-ndjson``: one event object per line, read line by line as the body streams
in (blank lines skipped); errors name the 1-based line."""

from __future__ import annotations

from typing import Any

import orjson

from service.errors import MalformedBody, PayloadTooLarge
from service.ingest.batch import Batch, FeatureSpec
from service.ingest.objects import events_to_batch


class NDJSONReader:
    """Decodes an NDJSON body chunk by chunk, one event per line (blank lines skipped)."""

    def __init__(self, max_events: int) -> None:
        self.max_events = max_events
        self.events: list[Any] = []
        self.lines: list[int] = []
        self._tail = b""
        self._line = 0

    def feed(self, chunk: bytes) -> None:
        data = self._tail + chunk
        parts = data.split(b"\n")
        self._tail = parts.pop()
        for part in parts:
            self._decode(part)

    def _decode(self, part: bytes) -> None:
        self._line += 1
        if not part.strip():
            return
        try:
            event = orjson.loads(part)
        except orjson.JSONDecodeError as error:
            raise MalformedBody(
                f"line {self._line}: not valid JSON: {error}", line=self._line
            ) from None
        if len(self.events) >= self.max_events:
            raise PayloadTooLarge(
                f"more than {self.max_events} events in one request", line=self._line
            )
        self.events.append(event)
        self.lines.append(self._line)

    def finish(self, spec: FeatureSpec, *, labelled: bool) -> Batch:
        if self._tail.strip():
            self._decode(self._tail)
            self._tail = b""
        return events_to_batch(
            self.events, spec, labelled=labelled, max_events=self.max_events, lines=self.lines
        )


def ndjson_events(body: bytes, spec: FeatureSpec, *, labelled: bool, max_events: int) -> Batch:
    reader = NDJSONReader(max_events)
    reader.feed(body)
    return reader.finish(spec, labelled=labelled)
