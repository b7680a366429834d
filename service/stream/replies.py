"""Every stream reply is written as JSON text by one builder (:func:`texts`, :func:`write`):
``{"seq":<seq>`` then its fields, each named with its value written as JSON once for all the
messages answered together (a shared text) or once per message (``None``: absent from that
reply).  So a block answered whole is its seqs joined, and no reply object is built; the text
is what ``orjson.dumps`` writes of the reply object (loadtest/stream_wire.py diffs it)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson

from service.stream.blocks import Block

#: a field of a reply: its name and its JSON text, shared by all or one per message
Field = tuple[str, "str | Sequence[str | None]"]


def seq_text(seq: Any) -> str:
    """A seq as JSON (an integer as ``str`` writes it, which is what orjson writes)."""
    return str(seq) if type(seq) is int else orjson.dumps(seq).decode()


def json_text(value: Any) -> str:
    return orjson.dumps(value).decode()


def _segments(fields: Sequence[Field]) -> list[str | Sequence[str]]:
    """The fields as the pieces between the seq and the closing brace: consecutive shared
    fields as one text, a per-message field as its list of texts."""
    segments: list[str | Sequence[str]] = [""]
    for name, value in fields:
        if type(value) is str:
            text = f',"{name}":{value}'
            last = segments[-1]
            if type(last) is str:
                segments[-1] = last + text
            else:
                segments.append(text)
        else:
            segments.append(["" if v is None else f',"{name}":{v}' for v in value])
    return segments


def texts(seqs: Sequence[Any], fields: Sequence[Field]) -> list[str]:
    """The reply of each message of ``seqs``, one text each."""
    heads = ['{"seq":' + seq_text(seq) for seq in seqs]
    columns = [
        itertools.repeat(segment) if type(segment) is str else segment
        for segment in _segments(fields)
    ]
    return ["".join(parts) + "}" for parts in zip(heads, *columns, strict=False)]


def write(seqs: np.ndarray | Sequence[Any], fields: Sequence[Field]) -> str:
    """The replies of ``seqs``, comma-joined."""
    values = seqs.tolist() if isinstance(seqs, np.ndarray) else seqs
    segments = _segments(fields)
    shared = segments[0]
    if len(segments) > 1 or type(shared) is not str:
        return ",".join(texts(values, fields))
    rest = shared + "}"
    return '{"seq":' + (rest + ',{"seq":').join(map(seq_text, values)) + rest


def score_texts(values: np.ndarray) -> list[str]:
    """Each value as orjson writes it in a reply (``null`` for NaN), written in one call."""
    if len(values) == 0:
        return []
    return orjson.dumps(values.tolist())[1:-1].decode().split(",")


def listed(values: Sequence[str]) -> str:
    """Values already written as JSON -> the JSON list of them."""
    return "[" + ",".join(values) + "]"


def kept_by_each(block: Block, ids: list[str | None] | None, start: int) -> int | None:
    """The events each message of a scored block keeps, when it is the same for all: none
    (no ids, or keep off), or one (one event a message, each with an id); None otherwise."""
    if not block.keep or ids is None or block.ids is None:
        return 0
    if block.n == 1 and None not in ids[start : start + block.n_events]:
        return 1
    return None
