"""JSON objects that repeat a key are refused (400 naming it): JSON leaves its meaning to the
reader (RFC 8259 4), so ``{"y": 0, "y": 1}`` could be learned as a positive while a log showed
a negative.  The decoders keep no trace of it, so the colons of the body are counted against
those of the decoded document written back; only when they differ (or a colon may be escaped)
is the body decoded again with a hook that sees every key.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from service.errors import MalformedBody


def key_count(text: bytes | bytearray) -> int | None:
    """The colons of JSON ``text`` (one after each key, the others in strings), or None when
    one may be written as an escape."""
    if b"\\" in text and b"\\u003" in text:  # \u003a, \u003A (and a few other characters)
        return None
    return text.count(b":")


def document_key_count(document: Any) -> int | None:
    """:func:`key_count` of a decoded document, written back by orjson."""
    return key_count(orjson.dumps(document))


def repeated_key(text: bytes | bytearray) -> str | None:
    """The first key found twice in one object of the JSON ``text`` (which a decoder has
    accepted), else None."""
    found: list[str] = []

    def check(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        if not found:
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    found.append(key)
                    break
                seen.add(key)
        return {}  # the values are not used

    try:
        json.loads(text, object_pairs_hook=check)
    except ValueError:  # what orjson accepted but Python's decoder does not: not a repeat
        return None
    return found[0] if found else None


def refuse_repeated_keys(text: bytes | bytearray, decoded_keys: int | None) -> None:
    """MalformedBody naming a key that an object of ``text`` repeats; ``decoded_keys`` is
    :func:`document_key_count` of what the decoder made of ``text``."""
    written = key_count(text)
    if written is not None and decoded_keys is not None and written == decoded_keys:
        return
    key = repeated_key(text)
    if key is not None:
        shown = key if len(key) <= 100 else key[:100] + "..."
        raise MalformedBody(
            f"body is not accepted: the key {shown!r} appears twice in one object (JSON leaves "
            "which value counts to the reader); send each key once",
            field=shown,
        )
