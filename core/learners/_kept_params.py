"""The scalars a learner passes to its kernels, converted once and kept between calls.

A learner called one event at a time (``auto``'s candidates, the service's one-event
requests) would otherwise read and convert each hyper-parameter (``float(self.alpha)``, ...)
and build the kernels' tuples again at every call: about a microsecond a candidate, a few
percent of ``auto``'s CPU per event (bench/README.md, "2026-12-02: AC2").

:class:`KeptParams` keeps the value of :meth:`KeptParams._build_kernel_params` in the instance's
``__dict__`` and drops it on every attribute set or delete, whatever the attribute, so no path
that changes a learner (``set_params``, ``__init__``, a state loaded, a composite swapping a
part) can leave a stale value: it is built again, from the attributes of the time, at the next
call that reads it.  It lives only in ``__dict__``: never in ``get_params`` (the declared
parameters), ``get_state`` (``state_``) nor anything stored.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["KEPT", "KeptParams", "LogisticParams"]

#: the ``__dict__`` key of the kept value (read directly on the hot paths:
#: ``self.__dict__.get(KEPT) or self._kernel_params()``)
KEPT = "_kept_params"


class KeptParams:
    """Mixin, listed first among a learner's bases: the learner defines
    :meth:`_build_kernel_params` (a NamedTuple of its kernels' converted scalars, which holds
    only what the hyper-parameters determine: no state, no attribute reassigned as it learns,
    which would drop the kept value at every call)."""

    def _build_kernel_params(self) -> Any:
        raise NotImplementedError

    def _kernel_params(self) -> Any:
        """The kept value, built from the attributes if none is kept."""
        kept = self.__dict__.get(KEPT)
        if kept is None:
            kept = self.__dict__[KEPT] = self._build_kernel_params()
        return kept

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        self.__dict__.pop(KEPT, None)

    def __delattr__(self, name: str) -> None:
        super().__delattr__(name)
        self.__dict__.pop(KEPT, None)


class LogisticParams(NamedTuple):
    """``logistic``'s kept scalars (here: logistic.py is at the line limit): FTRL's tuple, the
    Laplace solver's, its variant's with ``number_prior_variance`` (None without it), and the
    count per weight of the prior's re-estimate (logistic.18) (None: no re-estimate)."""

    ftrl: tuple[float, float, float, float, bool, float, bool]
    laplace: tuple[float, float, bool]
    kinds: tuple[float, float, float, bool] | None
    fit_intercept: bool
    base_rate_offset: bool
    evidence_per_weight: float | None
