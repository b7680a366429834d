"""Any learner on POISE's tree-path embedding ``[x, s, t(x)]`` (docs/algorithms/poise.md
(poise.8)-(poise.10)): the tree is fitted once on the first labelled events (or on history by
``fit``) and frozen; its arrays are state."""

from __future__ import annotations

from typing import Any

import numpy as np

from core._kernels import tree_embedding as kernels
from core.errors import InvalidParameter, InvalidState
from core.learners import learner_class, make_learner, register
from core.learners._base import OnlineLearner
from core.learners._composed import ComposedState
from core.learners._params import BOOLEAN, PAUC_RANGE, Interval, Options, Structured
from core.learners._state import Count, Finite, OneOf, with_prefix
from core.learners.pmb import check_buffer_size, event_arrays
from core.preprocessing import scale_batch
from core.tree_embedding import EMBEDDINGS, edge_capacity, empty_tree, fit_tree
from core.validation import CSRMatrix, check_batch, check_fpr_range

__all__ = ["TreeEmbedded"]

_PREFIX = "inner:"
#: events embedded and scored at a time by ``decision_function``
SCORE_CHUNK = 4096


@register
class TreeEmbedded(ComposedState, OnlineLearner):
    """A linear learner on ``[x, s, t(x)]``: the features, the score ``s`` of a linear AUC
    scorer, and the path of ``x`` in a decision tree grown on ``[x, s]`` (POISE §4), so a linear
    scorer ranks with a learned non-linearity.

    The first ``n_fit_events`` labelled events are buffered while the inner learner already
    learns ``[x, 0, 0]``; once the buffer is full and holds two events of each class, the tree
    is fitted on it (scikit-learn, SMOTE from imbalanced-learn) and frozen, and every later
    event is embedded by a numba kernel in O(nnz(x) + depth).  ``fit_history(X, y)`` (what
    ``aucstream fit`` calls) fits the tree on up to ``n_fit_events`` events of ``X`` (a uniform
    sample) and then the inner learner on all of ``X`` embedded.

    Parameters
    ----------
    learner : str, default "poise"
        The inner learner (any registered learner; linear learners are the point).
    params : dict or None
        Its hyper-parameters (its ``scaling`` is "none": this wrapper scales ``x``).
    pauc_range : [alpha, beta] or None
        Given to an inner pAUC learner as its ``alpha`` / ``beta`` (a model's ``pauc_range``).
    max_depth : int, default 6
        Depth of the tree (root split included); the embedding has ``2^(D+1) - 2`` columns
        (``full``) or ``2^D - 1`` (``frugal``), at most ``D`` non-zero per event.
    embedding : {"full", "frugal"}
        One column per edge, or one per internal node (its left edge) (poise.9), (poise.10).
    append_score : bool, default True
        Give the inner learner the score ``s`` as a feature too (the tree always splits on it).
    append_features : bool, default True
        Give the inner learner the features ``x`` themselves; False gives it ``[s, t(x)]``
        only (``x`` is still routed down the tree), at most ``1 + depth`` non-zeros per event,
        for a candidate beside a learner that already has ``x`` (``auto``'s default).
    smote : bool, default True
        Upsample each side of the root split with SMOTE before growing its subtree.
    min_samples_leaf : int, default 20
        scikit-learn's leaf size for every split.
    n_fit_events : int, default 2000
        Labelled events the tree is fitted on (the buffer, part of the state).
    score_lam : float, default 0.01
        L2 penalty of the linear AUC scorer ``s`` (the square-loss AUC minimiser of
        docs/algorithms/spdam.md (spdam.1), solved in closed form).
    scaling, max_iter, shuffle, random_state
        As for every learner; ``max_iter`` and ``shuffle`` are the inner learner's in ``fit``.
    """

    name = "tree_embedded"
    #: the tree path is not linear in x: no raw-space weights (``raw_weights()`` is None)
    linear_in_features = False

    learner: str = "poise"
    params: dict | None = None
    pauc_range: list | None = None
    max_depth: int = 6
    embedding: str = "full"
    append_score: bool = True
    append_features: bool = True
    smote: bool = True
    min_samples_leaf: int = 20
    n_fit_events: int = 2000
    score_lam: float = 0.01
    max_iter = 5

    _parameter_constraints = {
        **OnlineLearner._parameter_constraints,
        "learner": [Structured("the name of a registered learner")],
        "params": [None, Structured("a dict of the inner learner's hyper-parameters")],
        "pauc_range": [None, PAUC_RANGE],
        "max_depth": [Interval(int, 1, 12)],
        "embedding": [Options(EMBEDDINGS)],
        "append_score": [BOOLEAN],
        "append_features": [BOOLEAN],
        "smote": [BOOLEAN],
        "min_samples_leaf": [Interval(int, 1, None)],
        "n_fit_events": [Interval(int, 4, None)],
        "score_lam": [Interval(float, 0, None, closed="neither")],
    }

    # ------------------------------------------------------------------ the inner learner
    def _inner_params(self) -> dict[str, Any]:
        params = dict(self.params or {})
        params.update(scaling="none", max_iter=self.max_iter, shuffle=self.shuffle,
                      random_state=self.random_state)  # fmt: skip
        if self.pauc_range is not None and learner_class(self.learner).optimises_pauc:
            params["alpha"], params["beta"] = (float(bound) for bound in self.pauc_range)
        return params

    def _check_params(self) -> None:
        if not isinstance(self.learner, str) or self.learner == self.name:
            raise InvalidParameter(
                f"learner must name another registered learner, got {self.learner!r}",
                param="learner",
            )
        if not isinstance(self.params, dict | None):
            raise InvalidParameter(f"params must be a dict, got {self.params!r}", param="params")
        if self.pauc_range is not None:
            try:
                alpha, beta = (float(bound) for bound in self.pauc_range)
                check_fpr_range(alpha, beta)
            except (TypeError, ValueError):
                raise InvalidParameter(
                    f"pauc_range must be [alpha, beta] with 0 <= alpha < beta <= 1, got "
                    f"{self.pauc_range!r}",
                    param="pauc_range",
                ) from None
        try:
            make_learner(self.learner, **self._inner_params())
        except (ValueError, TypeError) as error:
            raise InvalidParameter(
                f"inner learner {self.learner!r}: {error}", param="params"
            ) from None

    @classmethod
    def saved_params(cls, params: dict, state: dict, prefix: str = "") -> dict:
        """``params`` of a state saved by an earlier version: the inner learner's params as its
        class's ``saved_params`` makes them for its ``inner:`` arrays (``poise`` saved before
        its all-negatives term: ``auc_weight=0``)."""
        own = params.get("params") or {}
        try:
            inner = learner_class(params.get("learner", cls.learner))
        except (TypeError, ValueError):
            return params  # the parameter check names it
        if not isinstance(own, dict):
            return params
        saved = inner.saved_params(own, state, prefix=prefix + _PREFIX)
        return params if saved is own else {**params, "params": saved}

    def _build_inner(self) -> OnlineLearner:
        return learner_class(self.learner)(**self._inner_params())

    def _inner_width(self, n_features: int) -> int:
        own = n_features if self.append_features else 0
        return own + 1 + edge_capacity(self.max_depth, self.embedding)

    # ------------------------------------------------------------------ state
    # ``state_`` is the flat view of core.learners._composed: the inner learner's arrays
    # under "inner:" plus the tree and the buffer
    def _new_parts(self) -> list[tuple[str, OnlineLearner]]:
        return [(_PREFIX, self._build_inner())]

    def _set_parts(self, parts: list[tuple[str, OnlineLearner]]) -> None:
        [(_, self._inner)] = parts

    def _parts(self) -> list[tuple[str, OnlineLearner]]:
        return [(_PREFIX, self._inner)]

    def _initial_state(self, n_features: int) -> dict[str, np.ndarray]:
        check_buffer_size("tree_embedded (n_fit_events)", self.n_fit_events, n_features)
        inner = self._build_inner().initialize(self._inner_width(n_features))
        state: dict[str, np.ndarray] = {_PREFIX + k: v for k, v in inner.state_.items()}
        state.update(empty_tree(n_features, self.max_depth))
        state.update(
            {
                "buffer_X": np.zeros((self.n_fit_events, n_features)),
                "buffer_y": np.zeros(self.n_fit_events, dtype=np.int64),
                "buffer_fill": np.zeros(1, dtype=np.int64),
                "tree_fitted": np.zeros(1, dtype=np.int64),
            }
        )
        return state

    def _state_invariants(self, n_features: int) -> dict:
        inner = self._build_inner()
        width = self._inner_width(n_features)
        own: dict = {"n_features": Count(width, width)}
        own.update(inner._state_invariants(width))
        invariants = with_prefix(own, _PREFIX)
        nodes = len(empty_tree(1, self.max_depth)["tree_left"])
        invariants.update(
            {
                "tree_left": Count(-1, nodes - 1),
                "tree_right": Count(-1, nodes - 1),
                "tree_feature": Count(-1, n_features),  # n_features: the score s
                "tree_threshold": Finite(),
                "tree_leaf_label": Finite(),
                "tree_column": Count(-1, edge_capacity(self.max_depth, self.embedding) - 1),
                "tree_score_w": Finite(),
                "buffer_X": Finite(),
                "buffer_y": OneOf((-1, 0, 1)),
                "buffer_fill": Count(0, self.n_fit_events),
                "tree_fitted": OneOf((0, 1)),
            }
        )
        return invariants

    def _check_state(self, state: dict[str, np.ndarray]) -> None:
        inner = {k[len(_PREFIX) :]: v for k, v in state.items() if k.startswith(_PREFIX)}
        self._build_inner()._check_state(inner)
        # preorder: children after their parent (routing ends within max_depth steps), both or none
        left, right = state["tree_left"], state["tree_right"]
        nodes = np.arange(len(left))
        internal = left >= 0
        if (
            ((right >= 0) != internal).any()
            or (left[internal] <= nodes[internal]).any()
            or (right[internal] <= left[internal]).any()
        ):
            raise InvalidState(
                "state arrays 'tree_left' / 'tree_right' do not describe a tree in preorder",
                field="tree_left",
            )
        depth = np.zeros(len(left), dtype=np.int64)
        for node in nodes[internal]:
            depth[left[node]] = depth[right[node]] = depth[node] + 1
        if depth.max() > self.max_depth:
            raise InvalidState(f"the tree is deeper than {self.max_depth}", field="tree_left")

    # ------------------------------------------------------------------ embedding
    def _tree(self) -> kernels.TreeArrays:
        s = self._own_state
        return kernels.TreeArrays(
            s["tree_left"], s["tree_right"], s["tree_feature"], s["tree_threshold"],
            s["tree_leaf_label"], s["tree_column"], s["tree_score_w"],
        )  # fmt: skip

    def transform(self, X) -> CSRMatrix:
        """``[x, s, t(x)]`` of a scaled batch as CSR (the inner learner's input)."""
        indptr, indices, data = kernels.embed(
            *event_arrays(X), self._tree(), bool(self.append_score),
            bool(self.append_features), int(self.max_depth),
        )  # fmt: skip
        return CSRMatrix(indptr, indices, data, self._inner_width(X.shape[1]))

    def _freeze_tree(self, X: np.ndarray, y: np.ndarray) -> None:
        tree = fit_tree(
            X, y, max_depth=self.max_depth, min_samples_leaf=self.min_samples_leaf,
            embedding=self.embedding, smote=self.smote, score_lam=self.score_lam,
            random_state=0 if self.random_state is None else int(self.random_state),
        )  # fmt: skip
        for key, value in tree.items():
            self._own_state[key][:] = value
        self._own_state["tree_fitted"][0] = 1

    def _buffer(self, X, y) -> None:
        own = self._own_state
        fill = int(own["buffer_fill"][0])
        rows = X.toarray() if isinstance(X, CSRMatrix) else X
        own["buffer_X"][fill : fill + len(y)] = rows
        own["buffer_y"][fill : fill + len(y)] = y
        own["buffer_fill"][0] = fill + len(y)
        labels = own["buffer_y"]
        if fill + len(y) == self.n_fit_events and min((labels > 0).sum(), (labels < 0).sum()) >= 2:
            self._freeze_tree(own["buffer_X"], labels)

    def _learn(self, X, y, scores) -> None:
        own = self._own_state
        start = 0
        while start < len(y):
            fill = int(own["buffer_fill"][0])
            stop = len(y)
            if not own["tree_fitted"][0] and fill < self.n_fit_events:
                stop = min(len(y), start + self.n_fit_events - fill)
            rows = np.arange(start, stop)
            part = X.take_rows(rows) if isinstance(X, CSRMatrix) else X[start:stop]
            self._inner._learn(self.transform(part), y[start:stop],
                               scores[start:stop] if len(scores) else scores)  # fmt: skip
            if not own["tree_fitted"][0] and fill < self.n_fit_events:
                self._buffer(part, y[start:stop])
            start = stop
        self._refresh_view()

    def fit_history(self, X, y) -> TreeEmbedded:
        """Learn from scratch on a history: the tree on up to ``n_fit_events`` events of ``X``
        (a uniform sample, in order), then the inner learner (its own ``fit``: passes for an
        online learner, a solve for a batch one) on all of ``X`` embedded.  (``fit`` is, as for
        every learner, ``max_iter`` passes of ``partial_fit``: the tree is fitted on the first
        ``n_fit_events`` events of the first pass.)"""
        self.validate_params()
        features, labels = check_batch(X, y, accept_sparse=True)
        self.initialize(features.shape[1])
        features = scale_batch(self.scaling, self.state_, features, learn=True)
        rng = np.random.default_rng(self.random_state)
        size = min(self.n_fit_events, len(labels))
        sample = np.sort(rng.choice(len(labels), size=size, replace=False))
        rows = features.take_rows(sample) if isinstance(features, CSRMatrix) else features[sample]
        self._buffer(rows, labels[sample])
        if not self._own_state["tree_fitted"][0]:
            chosen = labels[sample]
            if min((chosen > 0).sum(), (chosen <= 0).sum()) < 2:
                raise ValueError("the tree embedding needs two events of each class to fit")
            self._freeze_tree(self._own_state["buffer_X"][:size], chosen)
        self._inner.fit(self.transform(features), labels)
        self._refresh_view()
        return self

    def _decision(self, X) -> np.ndarray:
        # in chunks, so the embedded rows stay in cache between the two kernels
        n_events = X.shape[0]
        if n_events <= SCORE_CHUNK:
            return self._inner._decision(self.transform(X))
        out = np.empty(n_events)
        for start in range(0, n_events, SCORE_CHUNK):
            stop = min(n_events, start + SCORE_CHUNK)
            part = (
                X.take_rows(np.arange(start, stop)) if isinstance(X, CSRMatrix) else X[start:stop]
            )
            out[start:stop] = self._inner._decision(self.transform(part))
        return out

    @property
    def coef_(self) -> np.ndarray:
        """The inner learner's weights on the features ``x`` themselves (the served score adds
        those of ``s`` and of the path: :attr:`inner_coef_`); zeros without
        ``append_features``, where ``x`` reaches the score only through ``s`` and the path."""
        if not self.append_features:
            self._check_initialized()
            return np.zeros(self.n_features_in_)
        return self.inner_coef_[: self.n_features_in_]

    @property
    def inner_coef_(self) -> np.ndarray:
        """The inner learner's weights over ``[x, s, t]`` (``[s, t]`` without
        ``append_features``)."""
        self._check_initialized()
        return self._inner.coef_

    @property
    def tree_fitted_(self) -> bool:
        self._check_initialized()
        return bool(self._own_state["tree_fitted"][0])
