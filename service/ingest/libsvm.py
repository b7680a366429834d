"""``text/x-libsvm``: ``<label> <index>:<value> ... [# <event id>]`` per line, indices 1-based
(``?zero_based=true``: 0-based); dense and sparse models only."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from core._kernels.validation import first_bad_csr_entry
from core.csr import CSRMatrix
from service.errors import MalformedBody
from service.ingest import fields
from service.ingest.batch import Batch, FeatureSpec
from service.ingest.fields import Locator

#: The LIBSVM grammar, which the OpenAPI document (``service.openapi``) states as one pattern:
#: whitespace as ``str.split`` takes it in ASCII, a value a decimal number (not what ``float``
#: also reads: ``inf``, ``1_0``), an index digits, a label 0 / 1 / -1 / +1 (or ``1.0``).
WHITESPACE = r"[\t\x0b\x0c\r\x1c-\x1f ]"
NUMBER = r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
PAIR = rf"[0-9]+:{NUMBER}"
LABEL = r"(?:[-+]?1|0)(?:\.0*)?"
_PAIR = re.compile(PAIR)
_PAIRS = re.compile(rf"{WHITESPACE}*(?:{PAIR}(?:{WHITESPACE}+{PAIR})*)?{WHITESPACE}*")
#: up to this many characters a regular expression checks the pairs faster than numpy's passes
_REGEX_MAX_CHARS = 2048
_LABEL = re.compile(LABEL)
_NUMBER = re.compile(NUMBER)
#: each ASCII character's part in a pair (``_well_formed_pairs``)
_OTHER, _SPACE, _DIGIT, _NUMBER_SIGN, _COLON = range(5)
_CHARACTER_KIND = np.full(256, _OTHER, dtype=np.uint8)
_CHARACTER_KIND[list(b"\t\x0b\x0c\r\x1c\x1d\x1e\x1f ")] = _SPACE
_CHARACTER_KIND[list(b"0123456789")] = _DIGIT
_CHARACTER_KIND[list(b"eE.+-")] = _NUMBER_SIGN
_CHARACTER_KIND[ord(":")] = _COLON


def libsvm_events(
    body: bytes,
    spec: FeatureSpec,
    *,
    labelled: bool,
    max_events: int,
    zero_based: bool = False,
    max_dense_cells: int = fields.MAX_DENSE_CELLS,
) -> Batch:
    """LIBSVM / svmlight text -> batch, the tokens of all lines converted by one numpy call."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise MalformedBody(f"LIBSVM body is not UTF-8 text: {error}") from None
    # no running mean: LIBSVM leaves zeros out, so a missing value cannot be told from one
    fills_missing = spec.fills_missing and not spec.marks_missing
    labels: list[str | None] = []
    raw_ids: list[str | None] = []
    rests: list[str] = []
    counts: list[int] = []
    lines: list[int] = []
    for number, line in enumerate(text.split("\n"), start=1):
        content, _, comment = line.partition("#")
        tokens = content.split(None, 1)  # label, then pairs; any whitespace separates
        if not tokens:
            continue  # blank or comment-only line
        if not content.isascii():  # str.split and float() also take Unicode spaces and digits
            raise MalformedBody(
                f"line {number}: LIBSVM features and labels are ASCII text", line=number
            )
        head: str | None = tokens[0]
        rest = tokens[1] if len(tokens) > 1 else ""
        if not labelled and ":" in tokens[0]:  # /score: the label is optional
            head, rest = None, content
        if fills_missing and "n" in rest.lower():
            rest = _MISSING_PAIR.sub("", rest)  # index:nan, a missing value: absent, so 0
        labels.append(head)
        raw_ids.append(comment.strip() or None)
        rests.append(rest)
        counts.append(rest.count(":"))
        lines.append(number)
    fields.check_size(len(labels), max_events)
    fields.check_dense_cells(len(labels), spec, max_dense_cells)
    locate = Locator(raw_ids, lines)
    y = _labels(labels, locate, labelled)
    pair_text = " ".join(rests)
    tokens = pair_text.replace(":", " ").split()
    pairs = None
    if _well_formed_pairs(pair_text):
        try:
            pairs = np.array(tokens, dtype=np.float64).reshape(-1, 2)
        except ValueError:
            pass
    if pairs is None:
        for index, rest in enumerate(rests):
            for token in rest.split():
                if _PAIR.fullmatch(token) is None:
                    _refuse_non_finite(locate, index, token, spec.marks_missing)
                    raise locate.error(
                        index,
                        f"malformed LIBSVM pair {token!r}; expected <index>:<value>, the index "
                        "an integer, the value a decimal number",
                        malformed=True,
                    )
        raise MalformedBody("malformed LIBSVM body")
    columns = pairs[:, 0]  # digits only (_well_formed_pairs)
    base = 0 if zero_based else 1
    outside = (columns < base) | (columns > spec.n_features - 1 + base)
    if outside.any():  # checked on the floats: an index beyond int64 must not wrap around
        position = int(np.flatnonzero(outside)[0])
        row = int(np.searchsorted(np.cumsum(counts), position, side="right"))
        hint = "" if zero_based else "; for a 0-based file add ?zero_based=true"
        raise locate.error(
            row,
            f"feature index {int(columns[position])} is outside [{base}, "
            f"{spec.n_features - 1 + base}] (this model has {spec.n_features} features; "
            f"indices are {base}-based here{hint})",
            field="x",
        )
    indices = columns.astype(np.int64) - base
    indptr = np.zeros(len(labels) + 1, dtype=np.int64)
    np.cumsum(np.asarray(counts, dtype=np.int64), out=indptr[1:])
    _check_pairs(indptr, indices, pairs[:, 1], spec.n_features, base, locate)
    sparse = fields.sparse(
        CSRMatrix(indptr, indices, np.ascontiguousarray(pairs[:, 1]), spec.n_features), spec, locate
    )
    X: np.ndarray | CSRMatrix = sparse.toarray() if spec.feature_mode == "dense" else sparse
    return Batch(X, y, fields.parse_ids(raw_ids, locate))


def _labels(heads: list[str | None], locate: Locator, labelled: bool) -> np.ndarray | None:
    """Each line's label (None: a /score line without one) checked; in {-1, +1} if ``labelled``,
    else None (``/score`` does not use them)."""
    values: list[int] = []
    for index, head in enumerate(heads):
        if head is None:
            continue
        if _LABEL.fullmatch(head) is None:
            optional = "" if labelled else " (or no label: the line starts with <index>:<value>)"
            raise fields.label_refused(locate, index, _as_written(head), optional)
        values.append(int(float(head)))
    return fields.labels_from_values(values, locate) if labelled else None


def _as_written(token: str) -> Any:
    """A label token as a JSON event would carry it (``2.0`` as 2), for the error to name."""
    if _NUMBER.fullmatch(token) is None:
        return token
    number = float(token)
    return int(number) if number.is_integer() else number


def _well_formed_pairs(text: str) -> bool:
    """Whether ``text`` (the lines' pairs, ASCII) is whitespace-separated ``<index>:<value>``
    tokens, digits then one colon then a number's characters (numpy's conversion checks the
    numbers), by a few numpy passes over its bytes rather than per pair."""
    if len(text) <= _REGEX_MAX_CHARS:
        return _PAIRS.fullmatch(text) is not None
    kinds = _CHARACTER_KIND[np.frombuffer(text.encode("ascii"), dtype=np.uint8)]
    if (kinds == _OTHER).any():
        return False
    filled = kinds != _SPACE
    starts = np.flatnonzero(filled[1:] & ~filled[:-1]) + 1
    if kinds.size and filled[0]:
        starts = np.concatenate(([0], starts))
    colons = np.flatnonzero(kinds == _COLON)
    if starts.size != colons.size:
        return False
    if not starts.size:
        return True
    values = colons + 1  # where each value starts
    if (
        (starts >= colons).any()  # no index
        or (colons[:-1] >= starts[1:]).any()  # a token without its colon, one with two
        or values[-1] >= kinds.size
        or not filled[values].all()  # no value
    ):
        return False
    index_part = np.zeros(kinds.size + 1, dtype=np.int8)
    index_part[starts] = 1
    index_part[colons] = -1
    in_index = np.cumsum(index_part[:-1], dtype=np.int8).astype(bool)
    return not (in_index & (kinds == _NUMBER_SIGN)).any()


#: a pair whose value is NaN (a missing value), for a model that reads missing values as 0
_MISSING_PAIR = re.compile(r"(?<!\S)\d+:[+-]?nan(?!\S)", re.IGNORECASE)


#: why a dense model whose missing values are its running means refuses one in LIBSVM
_NO_MEAN_IN_LIBSVM = (
    "missing_values 'mean' fills a missing value of a JSON, NDJSON or NPZ event; in LIBSVM, "
    "leave the pair out to send 0, or send the events as JSON (null) or NPZ (NaN)"
)


def _refuse_non_finite(locate: Locator, index: int, token: str, mean: bool = False) -> None:
    """A pair whose value reads as infinity or NaN: the feature checks' 422, not "malformed"."""
    key, _, value = token.partition(":")
    try:
        number = float(value)
    except ValueError:
        return
    if not math.isfinite(number) and key.isascii() and key.isdigit():
        if not math.isnan(number):
            raise fields.not_finite(locate, index, key, number)
        if not mean:
            raise fields.missing_refused(locate, index, key, "NaN")
        detail = f"feature {key} is {value}; values must be finite numbers ({_NO_MEAN_IN_LIBSVM})"
        raise locate.error(index, detail, field="x")


def _check_pairs(
    indptr: np.ndarray,
    indices: np.ndarray,
    values: np.ndarray,
    n_features: int,
    base: int,
    locate: Locator,
) -> None:
    """Repeated indices and non-finite values named as the file numbers features (from
    ``base``), before ``core.validation``'s checks, which count from 0."""
    row, column, reason = first_bad_csr_entry(indptr, indices, n_features)
    if reason != 0:  # 2: repeated (the range was checked before)
        raise locate.error(int(row), f"feature index {int(column) + base} is repeated", field="x")
    finite = np.isfinite(values)
    if not finite.all():
        position = int(np.flatnonzero(~finite)[0])
        row = int(np.searchsorted(indptr, position, side="right")) - 1
        feature = str(int(indices[position]) + base)
        raise fields.not_finite(locate, row, feature, float(values[position]))
