"""The state of a learner made of learners (``auto``'s candidates, ``tree_embedded``'s inner
learner): one flat dict, the contract's ``state_``, over the parts' own ``state_`` dicts.

The parts keep their own ``state_`` (their kernels and caches work on them); the composite's
``state_`` is a view: each part's arrays under its prefix, plus the composite's own arrays,
the same array objects, so in-place updates show through.  After every batch the view is
checked when it is next read (:meth:`ComposedState._refresh_view`: a part may swap an array
for a view of a packed buffer while it learns, as ``spam`` does), and built again only when an
array was swapped; a one-event batch (the service's request path) reads it once, for the
check of its grown arrays: the base class reads the width and the scaler's arrays from the
composite's own, and a composite part's view is not built at all, its parent showing its
arrays directly.
"""

from __future__ import annotations

import operator
import sys
from itertools import chain
from typing import TYPE_CHECKING, Any

import numpy as np


def _same_objects(these: tuple, those: tuple) -> bool:
    return len(these) == len(those) and all(map(operator.is_, these, those))


class ComposedState:
    """Mixin of a composite learner: it defines :meth:`_new_parts` (fresh ``(prefix,
    learner)`` pairs for its parameters), :meth:`_set_parts` (keep them) and :meth:`_parts`
    (the current pairs); ``_own_state`` holds its own arrays."""

    _own_state: dict[str, np.ndarray]

    if TYPE_CHECKING:  # the learner's (StateContract)

        def _check_initialized(self) -> None: ...

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
        if self.__dict__.get("_view_stale"):
            view = self._build_view()
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

    # read at every batch: from the own arrays, without building a stale view
    @property
    def is_initialized(self) -> bool:
        return self.__dict__.get("_state_view") is not None

    @property
    def n_features_in_(self) -> int:
        self._check_initialized()
        return int(self._own_state["n_features"][0])

    @property
    def _scaler_arrays(self) -> dict[str, np.ndarray]:
        return self._own_state

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
        """The parts' arrays may have been swapped: the view is built again when it is next
        read (a composite part's, learned at every event, is not read by its parent's view,
        which shows its arrays directly: :meth:`_view_sources`)."""
        if "_state_view" in self.__dict__:
            self.__dict__["_view_stale"] = True
        else:
            self._build_view()

    def _view_sources(self) -> list[tuple[str, dict[str, np.ndarray]]]:
        """``(prefix, arrays)`` of every dict the view shows, in its order: the composite's own
        arrays, then each part's (a composite part's own sources, under its prefix)."""
        sources: list[tuple[str, dict[str, np.ndarray]]] = [("", self._own_state)]
        for prefix, learner in self._parts():
            if isinstance(learner, ComposedState) and "_state_view" in learner.__dict__:
                sources.extend((prefix + inner, part) for inner, part in learner._view_sources())
            else:
                sources.append((prefix, learner.state_))
        return sources

    def _build_view(self) -> dict[str, np.ndarray]:
        sources = self._view_sources()
        # most batches swap no array: the view built last, from the same dicts of the same
        # arrays, is kept
        shown = (
            tuple([part for _, part in sources]),
            tuple(chain.from_iterable([part.values() for _, part in sources])),
        )
        built, view = self.__dict__.get("_view_built"), self.__dict__.get("_state_view")
        if view is not None and built is not None and all(map(_same_objects, built, shown)):
            self.__dict__["_view_stale"] = False
            return view
        self.__dict__["_view_built"] = shown
        view = dict(sources[0][1])
        cache = self.__dict__.setdefault("_view_names", {})
        for prefix, part in sources[1:]:
            # the prefixed names, kept per source while its keys are the same (its arrays may be
            # swapped, its keys are not once initialised): one C-level update; interned, as
            # every model of a kind has the same names (one copy serves the cached models)
            names = cache.get(prefix)
            if names is None or names[0] is not part or len(names[1]) != len(part):
                names = cache[prefix] = (part, [sys.intern(prefix + key) for key in part])
            view.update(zip(names[1], part.values(), strict=True))
        self.__dict__["_state_view"] = view
        self.__dict__["_view_stale"] = False
        return view
