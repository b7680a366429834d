"""Named features, ``"x": {"amount": 120.5, "n_items": 3}``, of a dense or sparse model created
with ``feature_names``, rewritten to the model's positional form for the usual checks.  A dense
model needs every name (unless it fills missing values), a sparse one any subset.
"""

from __future__ import annotations

import difflib
from typing import Any

from service.ingest.batch import FeatureSpec
from service.ingest.fields import Locator, first_of

#: names quoted in an error, and the characters kept of each (a client's key may be huge)
_QUOTED_NAMES = 3
_QUOTED_CHARS = 40


def _quote(names: list[str]) -> str:
    shown = (repr(n if len(n) <= _QUOTED_CHARS else n[:_QUOTED_CHARS] + "...") for n in names)
    return first_of(shown, len(names), _QUOTED_NAMES)


def _did_you_mean(name: str, names: tuple[str, ...]) -> str:
    """`` (did you mean 'amount'?)`` when a model's name is close to ``name``."""
    if len(name) > _QUOTED_CHARS * 4:  # a huge key is no misspelling (and costly to compare)
        return ""
    close = difflib.get_close_matches(name, names, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def is_sparse_form(row: Any) -> bool:
    """``{"indices": [...], "values": [...]}``, the positional form of a sparse event."""
    return (
        type(row) is dict
        and row.keys() == {"indices", "values"}
        and type(row["indices"]) is list
        and type(row["values"]) is list
    )


def needs_names(rows: list[Any], spec: FeatureSpec) -> bool:
    """Whether any event of a dense or sparse model gives its features by name."""
    if spec.feature_mode == "dense":
        return any(type(row) is dict for row in rows)
    return any(type(row) is dict and not is_sparse_form(row) for row in rows)


def positional_rows(rows: list[Any], spec: FeatureSpec, locate: Locator) -> list[Any]:
    """``rows`` with every named event rewritten to its model's positional form."""
    names = spec.feature_names
    dense = spec.feature_mode == "dense"
    if names is None:
        index = next(i for i, row in enumerate(rows) if type(row) is dict)
        shape = f"a list of {spec.n_features} numbers" if dense else "{indices, values}"
        raise locate.error(
            index,
            f"'x' gives features by name but this model has no feature_names; send {shape}, "
            "or create the model with feature_names",
            field="x",
        )
    position = {name: column for column, name in enumerate(names)}
    out = []
    for index, row in enumerate(rows):
        if type(row) is not dict or (not dense and is_sparse_form(row)):
            out.append(row)
            continue
        unknown = [name for name in row if name not in position]
        if unknown:
            raise locate.error(
                index,
                f"unknown feature name(s) {_quote(unknown)}{_did_you_mean(unknown[0], names)}; "
                f"the model's are {_quote(list(names))}",
                field="x",
            )
        if dense:
            if len(row) != len(names) and not spec.fills_missing:
                missing = [name for name in names if name not in row]
                raise locate.error(
                    index,
                    f"missing feature(s) {_quote(missing)}: a dense model needs all "
                    f"{len(names)} named features in every event",
                    field="x",
                )
            out.append([row.get(name) for name in names])  # absent: None, a missing value
        else:
            columns = sorted((position[name], value) for name, value in row.items())
            out.append({"indices": [c for c, _ in columns], "values": [v for _, v in columns]})
    return out
