"""uvicorn's httptools protocol with a bound on a request's head (httptools has none): 431 past
``MAX_HEAD_BYTES``, give or take one read of a pipelined request (docs/architecture.md)."""

from __future__ import annotations

import logging

import httptools
import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from service.errors import PROBLEM_MEDIA_TYPE, RequestHeadTooLarge

logger = logging.getLogger("aucstream.request")

#: most bytes of a request line and its headers together (nginx: 4 x 8 KiB by default)
MAX_HEAD_BYTES = 64 * 1024


def _head_too_large_response() -> bytes:
    error = RequestHeadTooLarge(f"the request line and headers exceed {MAX_HEAD_BYTES} bytes")
    body = orjson.dumps(error.problem())
    head = (
        "HTTP/1.1 431 Request Header Fields Too Large\r\n"
        f"content-type: {PROBLEM_MEDIA_TYPE}\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


HEAD_TOO_LARGE = _head_too_large_response()


class HeadTooLarge(Exception):
    """Raised by a parser callback to stop parsing a request whose head is over the bound."""


class HeadLimitedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, refusing a request head over ``MAX_HEAD_BYTES``."""

    head_pending = False  # a request has begun whose headers have not all arrived
    head_bytes = 0  # bytes of that request received in earlier reads
    read_bytes = 0  # bytes of the read being parsed
    ended_in_read = False  # a request ended within the read being parsed

    def data_received(self, data: bytes) -> None:
        # uvicorn's, with the head's bound (answered here, not by uvicorn's generic 400)
        self._unset_keepalive_if_required()
        self.ended_in_read = False
        self.read_bytes = len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as error:
            if isinstance(error.__context__, HeadTooLarge):
                self.refuse_head()
                return
            logger.warning("Invalid HTTP request received.")
            self.send_400_response("Invalid HTTP request received.")
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        if self.head_pending and not self.ended_in_read:
            # the whole read belongs to an incomplete head: refused once over the bound
            self.head_bytes += len(data)
            if self.head_bytes > MAX_HEAD_BYTES:
                self.refuse_head()

    def refuse_head(self) -> None:
        self.head_pending = False
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
        logger.warning("%s sent a request head over %d bytes: 431", client, MAX_HEAD_BYTES)
        self.transport.write(HEAD_TOO_LARGE)
        self.transport.close()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.head_pending = True
        self.head_bytes = 0

    def on_headers_complete(self) -> None:
        self.head_pending = False
        # measured only when this read and the earlier ones could hold that much
        if self.head_bytes + self.read_bytes > MAX_HEAD_BYTES and self.head_size() > MAX_HEAD_BYTES:
            raise HeadTooLarge
        super().on_headers_complete()

    def head_size(self) -> int:
        """Bytes of the request's head as parsed: its line and every header line."""
        line = len(self.parser.get_method()) + len(self.url) + len(" HTTP/1.1\r\n") + 1
        return line + sum(len(name) + len(value) + 4 for name, value in self.headers) + 2

    def on_message_complete(self) -> None:
        self.ended_in_read = True
        super().on_message_complete()
