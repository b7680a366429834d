"""The state of a learner made of learners (``auto``'s candidates, ``tree_embedded``'s inner
learner): one flat dict, the contract's ``state_``, over the parts' own ``state_`` dicts.

The parts keep their own ``state_`` (their kernels and caches work on them); the composite's
``state_`` is a view: each part's arrays under its prefix, plus the composite's own arrays,
the same array objects, so in-place updates show through.  After every batch the view is
dropped and built again when it is next read (:meth:`ComposedState._refresh_view`: a part may
have swapped an array for a grown copy, an install's new trees or a view of a packed buffer,
and a stale view would keep the old ones alive).  The service's request path does not read it:
the base class reads the width and the scaler's arrays from the composite's own, the check of
the grown arrays reads them from the parts (:meth:`ComposedState._current_arrays`), and a
composite part's view is not built at all, its parent showing its arrays directly.
"""

from __future__ import annotations

import functools
import operator
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from core.learners._growing import Growth

#: the view of a composite whose parts' arrays may have been swapped since it was built
#: (:meth:`ComposedState._refresh_view`): not None (the learner is initialised), and never
#: shown (:attr:`ComposedState.state_` builds the view again first) nor changed
_DROPPED: dict[str, np.ndarray] = {}


def _same_objects(these: tuple, those: tuple) -> bool:
    # the same tuple first: a composite that keeps its parts' tuple gives it back every call
    return these is those or (len(these) == len(those) and all(map(operator.is_, these, those)))


def _taker(keys: list[str]) -> Callable[[dict], tuple]:
    """The tuple of a dict's values of ``keys``, in one C call for two keys or more."""
    if len(keys) > 1:
        return operator.itemgetter(*keys)
    key = keys[0]
    return lambda arrays: (arrays[key],)


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

    def _part_learners(self) -> tuple:
        """The learners of :meth:`_parts`, in their order (what the caches below are kept
        for; a composite that holds them in a list gives them without the pairs)."""
        return tuple([learner for _, learner in self._parts()])

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
                own[sys.intern(key)] = value
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
    def _scaler_arrays(self) -> dict[str, np.ndarray]:
        return self._own_state

    def _width_array(self) -> np.ndarray:
        return self._own_state["n_features"]

    def _current_arrays(self, keys: tuple[str, ...]) -> tuple[np.ndarray, ...]:
        """The arrays of ``keys`` read from the view's sources, without building the view (the
        check of the grown arrays after every batch: the view is built when it is read).  Which
        source holds each key is kept while the sources are the same dicts; the later source
        wins a name, as in the view."""
        # most calls: the keys live in the composite's own arrays and its plain parts' (not
        # composites themselves), read from there without walking every source (~3 us a call)
        learners = self._part_learners()
        plan = self.__dict__.get("_key_plan")
        if plan is None or plan[0] is not keys or not _same_objects(plan[1], learners):
            plan = self.__dict__["_key_plan"] = (keys, learners, self._key_owners(keys))
        if plan[2] is not None:
            own = self._own_state
            arrays: tuple[np.ndarray, ...] = ()
            for part, take in plan[2]:
                arrays += take(own if part is None else part.state_)
            return arrays
        sources = self._view_sources()
        dicts = tuple([part for _, part in sources])
        cached = self.__dict__.get("_key_sources")
        if cached is None or cached[0] is not keys or not _same_objects(cached[1], dicts):
            where: dict[str, tuple[int, str]] = {}
            for index, (prefix, part) in enumerate(sources):
                for key in part:
                    where[prefix + key] = (index, key)
            cached = self.__dict__["_key_sources"] = (keys, dicts, [where[key] for key in keys])
        return tuple([dicts[index][key] for index, key in cached[2]])

    def _key_owners(self, keys: tuple[str, ...]) -> list[tuple[Any, Callable]] | None:
        """Where ``keys`` live, as :meth:`_current_arrays` reads them: runs of consecutive keys
        of one owner, each ``(owner, take)``: ``take`` gives the tuple of the run's arrays from
        the composite's own arrays (owner None) or from a plain part's ``state_`` (one C call
        a run); None when one lives in a composite part (read through :meth:`_view_sources`
        then)."""
        where: dict[str, tuple[Any, str] | None] = {key: (None, key) for key in self._own_state}
        for prefix, learner in self._parts():
            composite = "_state_view" in learner.__dict__ and isinstance(learner, ComposedState)
            for key in learner.state_:
                where[prefix + key] = None if composite else (learner, key)
        owners = [owner for key in keys if (owner := where.get(key)) is not None]
        if len(owners) != len(keys):
            return None
        runs: list[tuple[Any, list[str]]] = []
        for owner, key in owners:
            if runs and runs[-1][0] is owner:
                runs[-1][1].append(key)
            else:
                runs.append((owner, [key]))
        return [(owner, _taker(run_keys)) for owner, run_keys in runs]

    def _settling_parts(self) -> tuple[tuple[str, Any], ...]:
        """The parts that may name unchanged grown arrays (:mod:`core.learners._grown`), kept
        while the parts are the same learners: most composites have none, and their check
        then asks nothing more of them."""
        learners = self._part_learners()
        cached = self.__dict__.get("_settling")
        if cached is None or not _same_objects(cached[0], learners):
            parts = self._parts()
            settling = tuple([(p, part) for p, part in parts if part._settles_grown_arrays()])
            cached = self.__dict__["_settling"] = (learners, settling)
        return cached[1]

    def _settles_grown_arrays(self) -> bool:
        """Whether a part may name unchanged grown arrays: it depends on the parts' kinds,
        which the parameters fix, so it is kept per state layout (a wrong False would only
        read every array; the parts themselves are looked up by :meth:`_settling_parts`)."""
        width = self._width_array()
        cached = self.__dict__.get("_settles")
        if cached is None or cached[0] is not width:
            settles = any([part._settles_grown_arrays() for _, part in self._parts()])
            cached = self.__dict__["_settles"] = (width, settles)
        return cached[1]

    def _unchanged_grown_keys(self) -> frozenset[str]:
        """The parts' unchanged grown arrays, under their prefixes (the composite's own are
        read every time)."""
        unchanged: list[str] = []
        for prefix, learner in self._settling_parts():
            unchanged.extend([prefix + key for key in learner._unchanged_grown_keys()])
        return frozenset(unchanged)

    def _grown_state_checked(self) -> None:
        for _, learner in self._settling_parts():
            learner._grown_state_checked()

    def _own_growing_arrays(self) -> dict[str, Growth]:
        """The composite's own growing arrays (:mod:`core.learners._growing`); none by
        default."""
        return {}

    def _growing_arrays(self) -> dict[str, Growth]:
        """Its own growing arrays and its parts', under their prefixes."""
        growing = dict(self._own_growing_arrays())
        for prefix, learner in self._parts():
            growing.update({prefix + k: v for k, v in learner._growing_arrays().items()})
        return growing

    def _refresh_view(self) -> None:
        """The parts' arrays may have been swapped: the view is built again when it is next
        read (a composite part's, learned at every event, is not read by its parent's view,
        which shows its arrays directly: :meth:`_view_sources`).  Until then it is
        :data:`_DROPPED`, which holds no array: a stale view kept the arrays a part swapped
        out (an install's replaced trees, a grown buffer's smaller copy) alive until it was
        next read, which the service does at a checkpoint (a part's, only at its next fit):
        up to a quarter of a cached default model's memory (loadtest/README.md, "F")."""
        if "_state_view" in self.__dict__:
            self.__dict__["_state_view"] = _DROPPED
            self.__dict__["_view_stale"] = True
        else:
            self._build_view()

    def _view_sources(self) -> list[tuple[str, dict[str, np.ndarray]]]:
        """``(prefix, arrays)`` of every dict the view shows, in its order: the composite's own
        arrays, then each part's (a composite part's own sources, under its prefix)."""
        sources: list[tuple[str, dict[str, np.ndarray]]] = [("", self._own_state)]
        for prefix, learner in self._parts():
            # the instance's dict first: an isinstance check through the learners' ABCMeta
            # costs ~0.4 us a part, and this runs after every batch
            if "_state_view" in learner.__dict__ and isinstance(learner, ComposedState):
                for inner, part in learner._view_sources():
                    sources.append((_joined(prefix, inner), part))
            else:
                sources.append((prefix, learner.state_))
        return sources

    def _build_view(self) -> dict[str, np.ndarray]:
        sources = self._view_sources()
        view = dict(sources[0][1])
        for prefix, part in sources[1:]:
            view.update(zip(_prefixed(prefix, tuple(part)), part.values(), strict=True))
        self.__dict__["_state_view"] = view
        self.__dict__["_view_stale"] = False
        return view


@functools.lru_cache(maxsize=256)
def _joined(prefix: str, inner: str) -> str:
    """A nested part's prefix under its parent's (interned: the same few pairs every call)."""
    return sys.intern(prefix + inner)


@functools.lru_cache(maxsize=4096)
def _prefixed(prefix: str, keys: tuple[str, ...]) -> tuple[str, ...]:
    """A part's names under its prefix, interned: every model of a kind has the same names, so
    one tuple of them serves every cached model (a list of them per model and part cost ~2.4
    KB a default ``auto`` model)."""
    return tuple([sys.intern(prefix + key) for key in keys])
