"""Every stream reply is written as JSON text by one builder (:func:`texts`, :func:`write`):
``{"seq":<seq>`` then its fields, each named with its value written as JSON once for all the
messages answered together (a shared text) or once per message (``None``: absent from that
reply).  So a block answered whole is its seqs joined, and no reply object is built; the text
is what ``orjson.dumps`` writes of the reply object (loadtest/stream_wire.py diffs it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson

from service.stream.blocks import Block

#: a field of a reply: its name and its JSON text, shared by all or one per message
Field = tuple[str, "str | Sequence[str | None]"]


def json_text(value: Any) -> str:
    return orjson.dumps(value).decode()


def _pieces(seqs: np.ndarray | Sequence[Any], fields: Sequence[Field], end: str) -> list[str]:
    """The pieces of the replies of ``seqs`` in order, ``period`` (one plus two per column) a reply:
    its head, then each per-message text followed by the shared text up to the next one (the
    last closing the reply, then ``end``).  Laid out by slice assignment and joined by the
    caller, in C: no per-message Python code but the per-message fields' own texts."""
    if isinstance(seqs, np.ndarray):  # integers: written as one list, then cut
        columns = [orjson.dumps(seqs.tolist())[1:-1].decode().split(",")]
    else:
        columns = [[str(seq) if type(seq) is int else json_text(seq) for seq in seqs]]
    segments = [""]
    for name, value in fields:
        if type(value) is str:
            segments[-1] += f',"{name}":{value}'
            continue
        if None in value:
            value = ["" if v is None else f',"{name}":{v}' for v in value]
        else:
            segments[-1] += f',"{name}":'
        columns.append(value)  # type: ignore[arg-type]
        segments.append("")
    segments[-1] += "}" + end
    n, period = len(columns[0]), 1 + 2 * len(columns)
    pieces = [""] * (n * period)
    pieces[0::period] = ['{"seq":'] * n
    for k, (column, segment) in enumerate(zip(columns, segments, strict=True)):
        pieces[1 + 2 * k :: period] = column
        pieces[2 + 2 * k :: period] = [segment] * n
    return pieces


def texts(seqs: Sequence[Any], fields: Sequence[Field]) -> list[str]:
    """The reply of each message of ``seqs``, one text each."""
    pieces = _pieces(seqs, fields, "")
    period = len(pieces) // len(seqs) if seqs else 1
    return list(map("".join, zip(*[iter(pieces)] * period, strict=True)))


def write(seqs: np.ndarray | Sequence[Any], fields: Sequence[Field]) -> str:
    """The replies of ``seqs``, comma-joined."""
    pieces = _pieces(seqs, fields, ",")
    if pieces:
        pieces[-1] = pieces[-1][:-1]  # the last reply is not followed by a comma
    return "".join(pieces)


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
