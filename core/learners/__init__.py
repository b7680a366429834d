"""Learners, registered by name so the service can build one from posted JSON.

Every public module of this package (a name without a leading underscore) is imported on first
use and registers its classes with ``@register``: adding a learner is adding its module (and its
kernel module and test), with no list to update.

>>> learner = make_learner("spam", eta0=0.5)
>>> learner.name
'spam'
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from core.errors import InvalidParameter
from core.learners._base import NotFittedError, OnlineLearner

LEARNERS: dict[str, type[OnlineLearner]] = {}
_loaded = False


def register(cls: type[OnlineLearner]) -> type[OnlineLearner]:
    """Class decorator: make ``cls`` available to :func:`make_learner` as ``cls.name``."""
    if not cls.name:
        raise TypeError(f"{cls.__name__} has no registry name")
    LEARNERS[cls.name] = cls
    return cls


def learner_modules() -> list[str]:
    """The learner modules of this package: every module whose name has no leading underscore."""
    return sorted(
        f"{__name__}.{module.name}"
        for module in pkgutil.iter_modules(__path__)
        if not module.name.startswith("_")
    )


def _load_all() -> None:
    global _loaded
    if not _loaded:
        for module in learner_modules():
            importlib.import_module(module)
        _loaded = True


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

    Unknown names raise ValueError; unknown or invalid parameters raise
    :class:`~core.errors.InvalidParameter` (a ValueError) whose ``param`` names the first one.
    """
    cls = learner_class(name)
    cls.check_param_names(params)
    learner = cls(**params)
    learner.validate_params()
    return learner


__all__ = [
    "LEARNERS",
    "InvalidParameter",
    "NotFittedError",
    "OnlineLearner",
    "available_learners",
    "learner_class",
    "learner_modules",
    "make_learner",
    "register",
]
