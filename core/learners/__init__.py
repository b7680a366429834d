"""Learners, registered by name so the service can build one from posted JSON.

Every public module of this package (a name without a leading underscore) registers its learner
with ``@register`` under the module's own name: adding a learner is adding its module (and its
kernel module and test), with no list to update.  A learner asked for by name imports its module
alone (a process that builds ``auto`` does not import the dozen learners it never runs: their
imports and numba dispatchers cost ~0.1-0.2 s of a stream's CPU); listing the learners, or a name
no module has, imports them all.

>>> learner = make_learner("spam", eta0=0.5)
>>> learner.name
'spam'
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from core.errors import InvalidParameter
from core.learners._base import OnlineLearner
from core.learners._stateful import NotFittedError
from core.validation import check_fpr_pair

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
    if name not in LEARNERS and f"{__name__}.{name}" in learner_modules():
        importlib.import_module(f"{__name__}.{name}")  # registers its learner, ``name``
    if name not in LEARNERS:
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


#: The hyper-parameters of a pAUC learner that hold its FPR range ``[alpha, beta]``.
PAUC_RANGE_PARAMS = ("alpha", "beta")


def is_pauc_learner(name: str) -> bool:
    """Whether learner ``name`` optimises a pAUC over the range of its ``alpha`` and ``beta``
    (``ftrl_pauc``, ``pmb``, ``svm_pauc``: their class attribute ``optimises_pauc``)."""
    return learner_class(name).optimises_pauc


def pauc_params_for(
    name: str, pauc_range: tuple[float, float] | None, params: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The hyper-parameters learner ``name`` runs with in a model whose pAUC range is
    ``pauc_range``: ``params`` with the range's ``alpha`` and ``beta`` added for a pAUC learner
    (so that the learner optimises the range the model's metrics report), ``params`` unchanged
    (a copy) for any other learner or when ``pauc_range`` is None.

    Raises :class:`~core.errors.InvalidParameter` with ``param="pauc_range"`` for a range outside
    ``0 <= alpha < beta <= 1``, and with ``param="alpha"`` / ``"beta"`` when ``params`` sets that
    parameter explicitly to another value than the range's (one range per model: the learner
    must not optimise another range than the one reported).  An explicit value equal to the
    range's is accepted.  Unknown learner names raise ValueError as :func:`make_learner` does.

    >>> pauc_params_for("ftrl_pauc", (0.0, 0.02), {"lam": 0.01})
    {'lam': 0.01, 'alpha': 0.0, 'beta': 0.02}
    >>> pauc_params_for("spam", (0.0, 0.02), {"l2": 0.001})
    {'l2': 0.001}
    >>> pauc_params_for("pmb", (0.0, 0.02), {"beta": 0.3})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    core.errors.InvalidParameter: params.beta = 0.3 contradicts pauc_range [0.0, 0.02] ...
    """
    params = dict(params or {})
    if pauc_range is None:
        return params
    cls = learner_class(name)
    # ``auto`` takes the range itself and hands it to its pAUC candidates
    takes_range = "pauc_range" in cls._param_names()
    if not (cls.optimises_pauc or takes_range):
        return params
    alpha, beta = check_fpr_pair(pauc_range)
    if takes_range:
        explicit = params.get("pauc_range")
        if explicit is not None and _as_range(explicit) != (alpha, beta):
            raise InvalidParameter(
                f"params.pauc_range = {explicit!r} contradicts the model's pauc_range "
                f"[{alpha!r}, {beta!r}]; omit params.pauc_range or make it equal",
                param="pauc_range",
            )
        params["pauc_range"] = [alpha, beta]
        return params
    for param, value in zip(PAUC_RANGE_PARAMS, (alpha, beta), strict=True):
        if param in params:
            explicit = params[param]
            # a number equal to the range's bound (0 == 0.0) is not a contradiction
            if (
                isinstance(explicit, bool)
                or not isinstance(explicit, int | float)
                or (float(explicit) != value)
            ):
                raise InvalidParameter(
                    f"params.{param} = {explicit!r} contradicts pauc_range [{alpha!r}, "
                    f"{beta!r}] ({param} = {value!r} for learner {name!r}); omit params.{param} "
                    "or make it equal",
                    param=param,
                )
        params[param] = value
    return params


def _as_range(value: Any) -> tuple[float, float] | None:
    try:
        alpha, beta = (float(bound) for bound in value)
    except (TypeError, ValueError):
        return None
    return alpha, beta


__all__ = [
    "LEARNERS",
    "InvalidParameter",
    "NotFittedError",
    "OnlineLearner",
    "PAUC_RANGE_PARAMS",
    "available_learners",
    "is_pauc_learner",
    "learner_class",
    "learner_modules",
    "make_learner",
    "pauc_params_for",
    "register",
]
