"""The state of a learner made of learners (``auto``'s candidates, ``tree_embedded``'s inner
learner): one flat dict, the contract's ``state_``, over the parts' own ``state_`` dicts.

The parts keep their own ``state_`` (their kernels and caches work on them); the composite's
``state_`` is a view: each part's arrays under its prefix, plus the composite's own arrays,
the same array objects, so in-place updates show through.  The view is rebuilt after every
batch (:meth:`ComposedState._refresh_view`: a part may swap an array for a view of a packed
buffer while it learns, as ``spam`` does) instead of at every access, since the base class
reads ``state_`` several times per batch.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np


class ComposedState:
    """Mixin of a composite learner: it defines :meth:`_new_parts` (fresh ``(prefix,
    learner)`` pairs for its parameters), :meth:`_set_parts` (keep them) and :meth:`_parts`
    (the current pairs); ``_own_state`` holds its own arrays."""

    _own_state: dict[str, np.ndarray]

    def _new_parts(self) -> list[tuple[str, Any]]:
        raise NotImplementedError

    def _set_parts(self, parts: list[tuple[str, Any]]) -> None:
        raise NotImplementedError

    def _parts(self) -> list[tuple[str, Any]]:
        raise NotImplementedError

    @property
    def state_(self) -> dict[str, np.ndarray]:
        view = self.__dict__.get("_state_view")
        if view is None:
            raise AttributeError("state_")
        return view

    @state_.setter
    def state_(self, state: dict[str, np.ndarray]) -> None:
        parts = self._new_parts()
        split: list[dict[str, np.ndarray]] = [{} for _ in parts]
        own = {}
        for key, value in state.items():
            for index, (prefix, _) in enumerate(parts):
                if key.startswith(prefix):
                    split[index][sys.intern(key[len(prefix) :])] = value
                    break
            else:
                own[key] = value
        for (_, learner), part_state in zip(parts, split, strict=True):
            learner.state_ = part_state
        self._set_parts(parts)
        self._own_state = own
        self._refresh_view()

    def _own_growing_arrays(self) -> dict[str, tuple[int, int]]:
        """The composite's own growing arrays (:mod:`core.learners._growing`); none by
        default."""
        return {}

    def _growing_arrays(self) -> dict[str, tuple[int, int]]:
        """Its own growing arrays and its parts', under their prefixes."""
        growing = dict(self._own_growing_arrays())
        for prefix, learner in self._parts():
            growing.update({prefix + k: v for k, v in learner._growing_arrays().items()})
        return growing

    def _refresh_view(self) -> None:
        view = dict(self._own_state)
        for prefix, learner in self._parts():
            part = learner.state_
            # the prefixed names, kept per part while its keys are the same (a part's arrays
            # may be swapped, its keys are not once initialised): one C-level update; interned,
            # as every model of a kind has the same names (one copy serves the cached models)
            # a part that is itself composite gives a new dict after each batch, of the same
            # names in the same order: compared as a tuple before interning them again
            names = self.__dict__.get("_view_names", {}).get(prefix)
            if names is None or names[0] is not part or len(names[1]) != len(part):
                keys = tuple(part)
                if names is None or names[1] != keys:
                    names = (part, keys, [sys.intern(prefix + key) for key in keys])
                else:
                    names = (part, keys, names[2])
                self.__dict__.setdefault("_view_names", {})[prefix] = names
            view.update(zip(names[2], part.values(), strict=True))
        self.__dict__["_state_view"] = view
