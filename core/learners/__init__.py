"""Learners, registered by name so the service can build one from posted JSON.

>>> learner = make_learner("spam", eta0=0.5)
>>> learner.name
'spam'
"""

from __future__ import annotations

import importlib
from typing import Any

from core.learners._base import NotFittedError, OnlineLearner

# One module per algorithm family; each registers its classes with @register on import.
_LEARNER_MODULES = (
    "core.learners.spam",
    "core.learners.solam",
    "core.learners.oam",
    "core.learners.opauc",
    "core.learners.ftrl_pauc",
    "core.learners.pmb",
    "core.learners.svm_pauc",
    "core.learners.logistic",
    "core.learners.auto",
)

LEARNERS: dict[str, type[OnlineLearner]] = {}


def register(cls: type[OnlineLearner]) -> type[OnlineLearner]:
    """Class decorator: make ``cls`` available to :func:`make_learner` as ``cls.name``."""
    if not cls.name:
        raise TypeError(f"{cls.__name__} has no registry name")
    LEARNERS[cls.name] = cls
    return cls


def _load_all() -> None:
    for module in _LEARNER_MODULES:
        importlib.import_module(module)


def available_learners() -> list[str]:
    _load_all()
    return sorted(LEARNERS)


def learner_class(name: str) -> type[OnlineLearner]:
    _load_all()
    try:
        return LEARNERS[name]
    except KeyError:
        raise ValueError(
            f"unknown learner {name!r}; available: {', '.join(sorted(LEARNERS))}"
        ) from None


def make_learner(name: str, **params: Any) -> OnlineLearner:
    """Build the learner called ``name`` with hyper-parameters ``params``.

    Unknown names and unknown or invalid parameters raise ValueError naming them.
    """
    cls = learner_class(name)
    accepted = cls._param_names()
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ValueError(
            f"unknown parameter(s) {', '.join(map(repr, unknown))} for learner {name!r}; "
            f"accepted: {', '.join(accepted)}"
        )
    learner = cls(**params)
    learner.validate_params()
    return learner


__all__ = [
    "LEARNERS",
    "NotFittedError",
    "OnlineLearner",
    "available_learners",
    "learner_class",
    "make_learner",
    "register",
]
