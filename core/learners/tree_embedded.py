"""Any learner on POISE's tree-path embedding ``[x, s, t(x)]`` (docs/algorithms/poise.md
(poise.8)-(poise.10)): the tree is fitted on the first labelled events (or on history by
``fit_history``), optionally refitted once on more of them, then frozen; its arrays are
state."""

from __future__ import annotations

import numpy as np

from core._kernels import tree_embedding as kernels
from core.csr import CSRMatrix
from core.errors import InvalidParameter, InvalidState
from core.learners import register
from core.learners._base import OnlineLearner
from core.learners._composed import ComposedState
from core.learners._event_rows import check_buffer_size, event_arrays
from core.learners._inner import INNER_CONSTRAINTS, INNER_PREFIX, WrapsInner
from core.learners._params import BOOLEAN, Interval, Options
from core.learners._state import Count, Finite, Grown, OneOf, with_prefix
from core.preprocessing import scale_batch
from core.tree_embedding import EMBEDDINGS, edge_capacity, empty_tree, fit_tree
from core.validation import check_batch, row_range

__all__ = ["TreeEmbedded"]

_PREFIX = INNER_PREFIX
#: events embedded and scored at a time by ``decision_function``
SCORE_CHUNK = 4096


@register
class TreeEmbedded(WrapsInner, ComposedState, OnlineLearner):
    """A linear learner on ``[x, s, t(x)]``: the features, the score ``s`` of a linear AUC
    scorer, and the path of ``x`` in a decision tree grown on ``[x, s]`` (POISE §4), so a linear
    scorer ranks with a learned non-linearity.

    The first ``n_fit_events`` labelled events are buffered while the inner learner already
    learns ``[x, 0, 0]``; once the buffer is full and holds two events of each class, the tree
    is fitted on it (scikit-learn, SMOTE from imbalanced-learn), and every later event is
    embedded by a numba kernel in O(nnz(x) + depth).  With ``refit_events`` the buffer keeps
    filling and the tree is fitted again, on all of the first ``refit_events`` events (a tree
    grown on more events splits better; the first fit serves until then); after its last fit
    the tree is frozen.  A first fit short of two events of a class waits for them while the
    buffer has room (``refit_events`` rows), so a stream of rare positives still gets a tree.
    A relearning fit (the refit always; the first fit with ``relearn``) rebuilds the inner
    learner and has it learn the buffered events again, embedded by the new tree, one pass in
    order: the paths then weigh as much as if the tree had been there from the first event, and
    a refit's columns, other edges than the old tree's, do not inherit its weights.
    ``fit_history(X, y)`` (what ``aucstream fit`` calls) fits the tree once, on up to the
    buffer's size of events of ``X`` (a uniform sample), and then the inner learner on all of
    ``X`` embedded.

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
        Labelled events the tree is first fitted on (the buffer, part of the state).
    refit_events : int or None, default None
        Refit the tree once, on the first this many labelled events (more than
        ``n_fit_events``; the buffer then holds this many rows), and relearn; None: one fit.
    relearn : bool, default False
        At the first fit too, rebuild the inner learner and have it learn the buffered events
        again, embedded by the new tree (one pass, in order).
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
    refit_events: int | None = None
    relearn: bool = False
    score_lam: float = 0.01
    max_iter = 5

    _parameter_constraints = {
        **OnlineLearner._parameter_constraints,
        **INNER_CONSTRAINTS,
        "max_depth": [Interval(int, 1, 12)],
        "embedding": [Options(EMBEDDINGS)],
        "append_score": [BOOLEAN],
        "append_features": [BOOLEAN],
        "smote": [BOOLEAN],
        "min_samples_leaf": [Interval(int, 1, None)],
        "n_fit_events": [Interval(int, 4, None)],
        "refit_events": [None, Interval(int, 5, None)],
        "relearn": [BOOLEAN],
        "score_lam": [Interval(float, 0, None, closed="neither")],
    }

    # ------------------------------------------------------------------ the inner learner
    # (its parameters, checks and state part: core.learners._inner.WrapsInner)
    def _check_params(self) -> None:
        if self.refit_events is not None and self.refit_events <= self.n_fit_events:
            raise InvalidParameter(
                f"refit_events must be more than n_fit_events ({self.n_fit_events}): the refit "
                f"grows the tree on more events than the first fit; got {self.refit_events!r}",
                param="refit_events",
            )
        self._check_inner_params()

    def _inner_width(self, n_features: int) -> int:
        own = n_features if self.append_features else 0
        return own + 1 + edge_capacity(self.max_depth, self.embedding)

    # ------------------------------------------------------------------ state
    # ``state_`` is the flat view of core.learners._composed: the inner learner's arrays
    # under "inner:" (WrapsInner's part) plus the tree and the buffer
    def _buffer_rows(self) -> int:
        """The buffer's size: the events of the last fit."""
        return self.n_fit_events if self.refit_events is None else self.refit_events

    def _final_fit(self) -> int:
        """``tree_fitted`` once the tree is frozen: 1, or 2 with a refit."""
        return 1 if self.refit_events is None else 2

    def _initial_state(self, n_features: int) -> dict[str, np.ndarray]:
        field = "n_fit_events" if self.refit_events is None else "refit_events"
        check_buffer_size(f"tree_embedded ({field})", self._buffer_rows(), n_features)
        inner = self._build_inner().initialize(self._inner_width(n_features))
        state: dict[str, np.ndarray] = {_PREFIX + k: v for k, v in inner.state_.items()}
        state.update(empty_tree(n_features, self.max_depth))
        state.update(
            {
                "buffer_X": np.zeros((self._buffer_rows(), n_features)),
                "buffer_y": np.zeros(self._buffer_rows(), dtype=np.int64),
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
                "tree_score_w": Grown(),
                "buffer_X": Finite(),
                "buffer_y": OneOf((-1, 0, 1)),
                "buffer_fill": Count(0, self._buffer_rows()),
                # the fits made: 0 before the first, then 1, then 2 after a refit
                "tree_fitted": OneOf(tuple(range(self._final_fit() + 1))),
            }
        )
        return invariants

    def _check_state(self, state: dict[str, np.ndarray]) -> None:
        self._check_inner_state(state)
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

    def _fit_tree(self, X: np.ndarray, y: np.ndarray, fits: int, relearn: bool) -> None:
        """Fit the tree on ``(X, y)`` and count the fit; with ``relearn`` the inner learner
        starts afresh on ``X`` embedded by it, one pass in order."""
        tree = fit_tree(
            X, y, max_depth=self.max_depth, min_samples_leaf=self.min_samples_leaf,
            embedding=self.embedding, smote=self.smote, score_lam=self.score_lam,
            random_state=0 if self.random_state is None else int(self.random_state),
        )  # fmt: skip
        for key, value in tree.items():
            self._own_state[key][:] = value
        self._own_state["tree_fitted"][0] = fits
        if relearn:
            self._inner = self._build_inner().initialize(self._inner_width(X.shape[1]))
            self._inner._learn(self.transform(X), y, np.empty(0))

    def _to_buffer(self, upcoming: np.ndarray) -> int:
        """How many of the ``upcoming`` labels to buffer before the next fit is decided (0: none
        to buffer, the tree is frozen or the buffer full).  The first fit is due at
        ``n_fit_events`` events; a buffer that reaches them without two events of each class
        keeps filling (up to its size: ``refit_events`` rows) until it has them, so that a
        stream of rare positives still gets its tree; the refit is due at ``refit_events``."""
        own = self._own_state
        fits, fill = int(own["tree_fitted"][0]), int(own["buffer_fill"][0])
        if fits == 0 and fill < self.n_fit_events:
            return min(len(upcoming), self.n_fit_events - fill)
        if fits == 0 and fill < self._buffer_rows():
            labels = own["buffer_y"][:fill]
            missing_pos = max(0, 2 - int((labels > 0).sum()))
            missing_neg = max(0, 2 - int((labels < 0).sum()))
            # the first event after which both classes have two (all of them when none is)
            enough = (np.cumsum(upcoming > 0) >= missing_pos) & (
                np.cumsum(upcoming < 0) >= missing_neg
            )
            wait = int(np.argmax(enough)) + 1 if enough.any() else len(upcoming)
            return min(wait, self._buffer_rows() - fill)
        if 0 < fits < self._final_fit() and fill < self._buffer_rows():
            return min(len(upcoming), self._buffer_rows() - fill)
        return 0

    def _buffer(self, X, y) -> None:
        """Append events that end at or before the next fit's decision; fit when it is due."""
        own = self._own_state
        fits = int(own["tree_fitted"][0])
        fill = int(own["buffer_fill"][0]) + len(y)
        rows = X.toarray() if isinstance(X, CSRMatrix) else X
        own["buffer_X"][fill - len(y) : fill] = rows
        own["buffer_y"][fill - len(y) : fill] = y
        own["buffer_fill"][0] = fill
        labels = own["buffer_y"][:fill]
        due = fill >= self.n_fit_events if fits == 0 else fill == self._buffer_rows()
        if due and min((labels > 0).sum(), (labels < 0).sum()) >= 2:
            # a refit, or a fit after restart_tree, always relearns: the new tree's columns are
            # other edges than the old tree's (an unfitted tree is a single leaf: no edges)
            replaces = fits > 0 or own["tree_left"][0] >= 0
            self._fit_tree(own["buffer_X"][:fill], labels, fits + 1, self.relearn or replaces)

    def restart_tree(self) -> None:
        """Grow the tree again on the events from now on (``auto`` with ``track_drift`` calls
        it after a change in the stream): the buffer empties, the fits are due again at
        ``n_fit_events`` and ``refit_events`` events from now, each relearning, and the current
        tree embeds the events until the first."""
        self._check_initialized()
        self._own_state["buffer_fill"][0] = 0
        self._own_state["tree_fitted"][0] = 0

    def _learn(self, X, y, scores) -> None:
        start = 0
        while start < len(y):
            # up to the next fit (its events are learned with the tree before it), or to the end
            take = self._to_buffer(y[start:])
            stop = start + take if take else len(y)
            part = row_range(X, start, stop)
            self._inner._learn(self.transform(part), y[start:stop],
                               scores[start:stop] if len(scores) else scores)  # fmt: skip
            if take:
                self._buffer(part, y[start:stop])
            start = stop
        self._refresh_view()

    def fit_history(self, X, y) -> TreeEmbedded:
        """Learn from scratch on a history: the tree once, on up to the buffer's size of events
        of ``X`` (a uniform sample, in order; no refit follows), then the inner learner (its own
        ``fit``: passes for an online learner, a solve for a batch one) on all of ``X``
        embedded.  (``fit`` is, as for every learner, ``max_iter`` passes of ``partial_fit``:
        the tree is fitted on the first events of the first pass.)"""
        self.validate_params()
        features, labels = check_batch(X, y, accept_sparse=True)
        self.initialize(features.shape[1])
        features = scale_batch(self.scaling, self.state_, features, learn=True)
        rng = np.random.default_rng(self.random_state)
        size = min(self._buffer_rows(), len(labels))
        sample = np.sort(rng.choice(len(labels), size=size, replace=False))
        rows = features.take_rows(sample) if isinstance(features, CSRMatrix) else features[sample]
        chosen = labels[sample]
        if min((chosen > 0).sum(), (chosen <= 0).sum()) < 2:
            raise ValueError("the tree embedding needs two events of each class to fit")
        own = self._own_state
        own["buffer_X"][:size] = rows.toarray() if isinstance(rows, CSRMatrix) else rows
        own["buffer_y"][:size] = chosen
        own["buffer_fill"][0] = size
        self._fit_tree(own["buffer_X"][:size], chosen, self._final_fit(), relearn=False)
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
            part = row_range(X, start, stop)
            out[start:stop] = self._inner._decision(self.transform(part))
        return out

    def _contributions(self, X) -> tuple[np.ndarray, np.ndarray]:
        """The inner learner's contributions over ``[x, s, t(x)]`` brought back to the features
        (docs/algorithms/reasons.md (reasons.3)-(reasons.4)): ``x``'s own; the score ``s`` by
        its linear terms (``w_s * score_w_j * x_j``); each path edge's weight to the feature
        its parent node splits on (Saabas), an edge below a split on ``s`` to the features by
        their shares ``|score_w_j * x_j|`` of it (the remainder when they are all 0)."""
        n_features = X.shape[1]
        inner, remainder = self._inner._contributions(self.transform(X))
        first = n_features if self.append_features else 0  # the column of s
        if self.append_features:
            contributions = inner[:, :n_features].copy()
        else:
            contributions = np.zeros((X.shape[0], n_features))
        rows = X.toarray() if isinstance(X, CSRMatrix) else np.asarray(X)
        score_terms = rows * self._own_state["tree_score_w"]
        if self.append_score:
            contributions += self._inner.coef_[first] * score_terms
        path = inner[:, first + 1 :]
        # each event's path has at most max_depth edges: scatter those (one bincount) into a
        # column per feature, one for s and one for columns of no edge (which hold nothing)
        n_events, width = X.shape[0], n_features + 2
        events, columns = np.nonzero(path)
        scattered = np.bincount(
            events * width + self._split_of_column()[columns],
            weights=path[events, columns],
            minlength=n_events * width,
        ).reshape(n_events, width)
        contributions += scattered[:, :n_features]
        on_score = scattered[:, n_features]
        weights = np.abs(score_terms)
        totals = weights.sum(axis=1)
        shared = totals > 0.0
        per_weight = np.divide(on_score, totals, out=np.zeros(n_events), where=shared)
        contributions += per_weight[:, None] * weights
        return contributions, remainder + np.where(shared, 0.0, on_score)

    def _split_of_column(self) -> np.ndarray:
        """For each embedding column, the feature split on at the parent of its edge
        (``n_features``: the score ``s``; past the features when no edge has the column)."""
        own = self._own_state
        n_features = own["tree_score_w"].shape[0]
        split = np.full(edge_capacity(self.max_depth, self.embedding), n_features + 1)
        left = own["tree_left"]
        parents = np.flatnonzero(left >= 0)
        children = np.concatenate((left[parents], own["tree_right"][parents]))
        columns = own["tree_column"][children]
        kept = columns >= 0
        features = own["tree_feature"][parents]
        split[columns[kept]] = np.concatenate((features, features))[kept]
        return split

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
