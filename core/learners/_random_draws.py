"""The random numbers a learner draws as it learns (reservoir sampling, a solver's shuffled
passes), declared once for every learner: a learner that draws them says ``draws_random =
True``, and its state then holds their generator, ``rng_state`` (SplitMix64, one uint64,
:mod:`core._kernels.random`), seeded by its ``random_state`` (None: seed 0, so that learners
are deterministic by default, as a service needs) and declared
:data:`~core.learners._state.RNG_STATE`.

The array and its declaration are added to what the learner's own ``_initial_state`` and
``_state_invariants`` return, after its own entries, when its class is defined: a composite
that asks a part for its declarations (``auto``'s candidates, an embedding's inner learner)
gets them with the rest, as :meth:`~core.learners._stateful.StateContract.validate_state`
does.  Kept apart from :class:`core.learners._base.OnlineLearner`, which inherits it, because
it knows nothing of learning."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from core._kernels.random import seed_state
from core.learners._state import RNG_STATE, StateInvariant

__all__ = ["RandomDraws"]

#: the state array of the generator (the name every kernel that draws takes it under)
RNG_KEY = "rng_state"


def _seeded(learner: Any) -> dict[str, np.ndarray]:
    return {RNG_KEY: seed_state(learner.random_state)}


def _declared(learner: Any) -> dict[str, StateInvariant]:
    return {RNG_KEY: RNG_STATE}


#: each state hook of a learner, and the entries a learner that draws adds to what it returns
_HOOKS: dict[str, Callable[[Any], dict]] = {
    "_initial_state": _seeded,
    "_state_invariants": _declared,
}


def _with_random_state(hook: Callable, entries: Callable[[Any], dict]) -> Callable:
    @functools.wraps(hook)  # an abstract hook stays abstract (its __isabstractmethod__)
    def with_random_state(self: Any, n_features: int) -> dict:
        return {**hook(self, n_features), **entries(self)}

    return with_random_state


class RandomDraws:
    """Mixin of :class:`~core.learners._base.OnlineLearner`: the random state of a learner
    that declares ``draws_random = True`` (see the module docstring)."""

    #: True for a learner that draws random numbers as it learns: its state holds their
    #: generator, ``rng_state``, seeded by ``random_state``
    draws_random: ClassVar[bool] = False

    if TYPE_CHECKING:  # the learner's declared hyper-parameter (OnlineLearner's)
        random_state: int | None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        inherited = getattr(super(cls, cls), "draws_random", False)
        if not cls.draws_random:
            if inherited:  # the hooks it inherits add the generator all the same
                raise TypeError(f"{cls.__name__} cannot undo draws_random = True of its base")
            return
        for name, entries in _HOOKS.items():
            # the hooks of this class, and those it inherits from a class that did not draw
            # (one that draws has added the entries to its own)
            if name in vars(cls) or not inherited:
                setattr(cls, name, _with_random_state(getattr(cls, name), entries))
