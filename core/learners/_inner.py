"""A learner wrapped around another (the inner learner of ``tree_embedded`` and
``boosted_embedded``): its parameters
(``learner``, ``params``, ``pauc_range``), their checks, and the part under ``inner:`` of the
composed state (:mod:`core.learners._composed`)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from core.errors import InvalidParameter
from core.learners import learner_class, make_learner
from core.learners._base import OnlineLearner
from core.learners._params import PAUC_RANGE, Constraint, Structured
from core.validation import check_fpr_pair

INNER_PREFIX = "inner:"

#: the declared constraints of ``learner``, ``params`` and ``pauc_range``
INNER_CONSTRAINTS: dict[str, list[Constraint]] = {
    "learner": [Structured("the name of a registered learner")],
    "params": [None, Structured("a dict of the inner learner's hyper-parameters")],
    "pauc_range": [None, PAUC_RANGE],
}


class WrapsInner:
    """Mixin of a learner that feeds an embedding to an inner learner ``_inner``; the class
    declares ``learner``, ``params`` and ``pauc_range`` (and the shared ``max_iter``,
    ``shuffle``, ``random_state``, passed on)."""

    name: ClassVar[str]
    learner: str
    params: dict | None
    pauc_range: list | None
    _inner: OnlineLearner

    def _inner_params(self) -> dict[str, Any]:
        params = dict(self.params or {})
        # the shared parameters the wrapping learner declares (OnlineLearner's)
        shared = ("max_iter", "shuffle", "random_state")
        params.update(scaling="none", **{key: getattr(self, key) for key in shared})
        if self.pauc_range is not None and learner_class(self.learner).optimises_pauc:
            params["alpha"], params["beta"] = (float(bound) for bound in self.pauc_range)
        return params

    def _check_inner_params(self) -> None:
        if not isinstance(self.learner, str) or self.learner == self.name:
            raise InvalidParameter(
                f"learner must name another registered learner, got {self.learner!r}",
                param="learner",
            )
        if not isinstance(self.params, dict | None):
            raise InvalidParameter(f"params must be a dict, got {self.params!r}", param="params")
        if self.pauc_range is not None:
            check_fpr_pair(self.pauc_range)
        try:
            make_learner(self.learner, **self._inner_params())
        except (ValueError, TypeError) as error:
            raise InvalidParameter(
                f"inner learner {self.learner!r}: {error}", param="params"
            ) from None

    def _build_inner(self) -> OnlineLearner:
        return learner_class(self.learner)(**self._inner_params())

    # the composed state: the inner learner's arrays under "inner:"
    def _new_parts(self) -> list[tuple[str, OnlineLearner]]:
        return [(INNER_PREFIX, self._build_inner())]

    def _set_parts(self, parts: list[tuple[str, OnlineLearner]]) -> None:
        [(_, self._inner)] = parts

    def _parts(self) -> list[tuple[str, OnlineLearner]]:
        return [(INNER_PREFIX, self._inner)]

    def _check_inner_state(self, state: dict[str, np.ndarray]) -> None:
        own = len(INNER_PREFIX)
        inner = {k[own:]: v for k, v in state.items() if k.startswith(INNER_PREFIX)}
        self._build_inner()._check_state(inner)
