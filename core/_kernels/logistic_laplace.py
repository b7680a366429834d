"""Online logistic regression by a Gaussian (Laplace) posterior updated one event at a time:
``logistic(solver="laplace")`` (docs/algorithms/logistic.md (logistic.11)-(logistic.14)).

The weights ``m`` (the features' then the intercept's, ``D = n_features + 1``) and their
covariance ``P`` (D x D) are the mean and covariance of a Gaussian belief, starting at
``m = 0``, ``P = prior_variance * I``; an event ``(x, y)`` is folded in with ``x~ = (x, 1)``
(the intercept's slot is 0 without ``fit_intercept``, so it never moves): the score
(logistic.11), the rank-1 update of ``P`` (logistic.12) and of ``m`` (logistic.13), and before
them the random walk of the weights (logistic.14) with ``process_noise`` > 0.  That is one
Newton step per event on the log posterior (the extended Kalman filter of logistic
regression); the page says why, and what one pass approximates.  Cost: O(D^2) per event
(``u = P x~`` and the update), whatever the row's sparsity.  With an empirical-Bayes prior the
prior's variance is re-estimated once, by its evidence (logistic.18)-(logistic.19), O(D^3).

[CHOICE] ``h u_i u_j / (1 + h v)`` is formed as ``f * (u_i * u_j)`` so that ``P`` stays exactly
symmetric (IEEE products commute; ``(f * u_i) * u_j`` would not).  ``1 + h v >= 1`` while
``P`` is positive semi-definite, which the learner checks when it loads a state.
"""

import numpy as np

from core._kernels._config import inlined_kernel, kernel
from core._kernels.calibration import sigmoid
from core._kernels.logistic import base_rate, count_label


@kernel
def laplace_score(mean, row, class_counts, use_offset):
    """(logistic.11): ``m . x~ + o`` for a row holding at least the ``n_features`` features (the
    intercept's slot of ``x~`` is 1, or 0 with ``m``'s intercept 0 without ``fit_intercept``:
    adding ``m``'s last entry is the same either way).  The one sum the update and both
    scoring kernels use, so a prequential score equals ``decision_function`` bit for bit."""
    n_features = mean.shape[0] - 1
    s = 0.0
    for j in range(n_features):
        s += mean[j] * row[j]
    s += mean[n_features]
    if use_offset:
        s += base_rate(class_counts, use_offset)
    return s


@inlined_kernel  # scalars only, per slot: nothing to call
def drifted(variance, cap, process_noise):
    """(logistic.14) for one slot: its variance after the random walk, ``process_noise`` more
    but at most ``cap`` (its prior's variance; one already above it stays)."""
    room = cap - variance
    if room > 0.0:
        return variance + (process_noise if process_noise < room else room)
    return variance


@kernel
def laplace_update(x, label, mean, covariance, u, class_counts, hyper):
    """(logistic.11)-(logistic.14) for one event, ``x`` the extended row (D,); ``u`` is scratch
    (D,); ``hyper``: ``(prior_variance, process_noise, use_offset)``.  Returns the score
    (logistic.11) seen before the update."""
    prior_variance, process_noise, use_offset = hyper
    # (logistic.14): the weights drift, each variance gains q up to the prior's
    if process_noise > 0.0:
        for i in range(mean.shape[0]):
            covariance[i, i] = drifted(covariance[i, i], prior_variance, process_noise)
    return laplace_step(x, label, mean, covariance, u, class_counts, use_offset)


@kernel
def laplace_step(x, label, mean, covariance, u, class_counts, use_offset):
    """(logistic.11)-(logistic.13) for one event, after the random walk: the score seen before
    the update, returned, and the Newton step of ``m`` and ``P``."""
    size = mean.shape[0]
    s = laplace_score(mean, x, class_counts, use_offset)
    p = sigmoid(s)
    h = p * (1.0 - p)
    # u = P x~ as a sum of P's rows (P is symmetric: row j is column j), so the inner loop
    # has no reduction and vectorises; each u_i still adds its terms in the order of j
    for i in range(size):
        u[i] = 0.0
    for j in range(size):
        value = x[j]
        if value != 0.0:
            for i in range(size):
                u[i] += covariance[j, i] * value
    v = 0.0
    for i in range(size):
        v += x[i] * u[i]
    denominator = 1.0 + h * v
    f = h / denominator
    for i in range(size):
        for j in range(size):
            covariance[i, j] -= f * (u[i] * u[j])
    step = ((1.0 if label > 0 else 0.0) - p) / denominator
    for i in range(size):
        mean[i] += step * u[i]
    count_label(class_counts, label > 0, use_offset, 1.0)
    return s


#: [CHOICE] (logistic.18) compares the prior variances ``prior_variance * EVIDENCE_RANGE **
#: (k / EVIDENCE_STEPS)``, k = 0 .. EVIDENCE_STEPS: never below the prior the pass started with
#: (its first events' steps are what it bounds), at most ten times it (learned on under a wider
#: prior, the later one-pass steps overshoot: bench/README.md, "AB: an empirical-Bayes prior")
EVIDENCE_RANGE = 10.0
EVIDENCE_STEPS = 20


@inlined_kernel  # two scalars read per event
def rarer_count(class_counts, evidence_at):
    """The rarer class's count, ``min(n_-, n_+)`` of (logistic.10); 0 without a re-estimate
    (``evidence_at`` 0: the counts may be empty then)."""
    if evidence_at <= 0:
        return 0.0
    return min(class_counts[0], class_counts[1])


@kernel
def evidence_prior(mean, covariance, prior_variance):
    """(logistic.18)-(logistic.19): the belief ``N(m, P)`` learned under the prior ``N(0, a I)``
    (``a = prior_variance``) re-estimated under the prior ``N(0, b I)`` whose Laplace evidence
    is the largest of the :data:`EVIDENCE_RANGE` grid, ``b >= a``.  The data's curvature is
    ``H = P^-1 - I / a`` (its negative part, left by the random walk (logistic.14), dropped)
    and its linear term ``eta = P^-1 m``; in ``H``'s eigenvectors ``V`` (eigenvalues ``l``,
    ``t = V^T eta``) the evidence, the new covariance and the new mean are sums over them.
    Returns ``b`` (``a``: the belief is left as it is)."""
    size = mean.shape[0]
    precision = np.linalg.inv(covariance)
    curvature = np.empty((size, size))
    natural = np.zeros(size)
    for i in range(size):
        for j in range(size):
            curvature[i, j] = 0.5 * (precision[i, j] + precision[j, i])
            natural[i] += curvature[i, j] * mean[j]
        curvature[i, i] -= 1.0 / prior_variance
    values, vectors = np.linalg.eigh(curvature)
    t = np.zeros(size)
    for k in range(size):
        values[k] = max(values[k], 0.0)
        for i in range(size):
            t[k] += vectors[i, k] * natural[i]
    best, best_evidence = prior_variance, 0.0
    for step in range(EVIDENCE_STEPS + 1):
        b = prior_variance * EVIDENCE_RANGE ** (step / EVIDENCE_STEPS)
        evidence = 0.0
        for k in range(size):
            evidence += 0.5 * (t[k] * t[k] * b / (1.0 + b * values[k]) - np.log1p(b * values[k]))
        if step == 0 or evidence > best_evidence:
            best, best_evidence = b, evidence
    if best == prior_variance:
        return best
    # (logistic.19): P = V diag(b / (1 + b l)) V^T, formed for j >= i and mirrored (symmetric)
    shrink = np.empty(size)
    for k in range(size):
        shrink[k] = best / (1.0 + best * values[k])
    for i in range(size):
        mean[i] = 0.0
        for k in range(size):
            mean[i] += vectors[i, k] * (shrink[k] * t[k])
        for j in range(i, size):
            total = 0.0
            for k in range(size):
                total += vectors[i, k] * (shrink[k] * vectors[j, k])
            covariance[i, j] = total
            covariance[j, i] = total
    return best


@kernel
def extended_scratch(n_slots, fit_intercept):
    """``(x, u)``: the extended row ``x~ = (x, 1)`` (``(x, 0)`` without ``fit_intercept``, so
    the intercept never moves) with its ``n_slots`` features zero, and the scratch ``u`` (D,)."""
    x = np.zeros(n_slots + 1)
    x[n_slots] = 1.0 if fit_intercept else 0.0
    return x, np.empty(n_slots + 1)


@inlined_kernel  # per row: a call would cost more than a short row's loop
def scatter_row(x, indices, data, start, end):
    """The CSR row ``start:end`` added into the zero features of ``x``: duplicate columns add,
    in the order stored, as in a CSR product (the update and the scores expand rows alike)."""
    for k in range(start, end):
        x[indices[k]] += data[k]


@inlined_kernel
def clear_row(x, indices, start, end):
    """The features of ``x`` that :func:`scatter_row` set back to zero: the next row's start."""
    for k in range(start, end):
        x[indices[k]] = 0.0


@kernel
def laplace_dense(X, y, scores, mean, covariance, class_counts, fit_intercept, hyper, evidence_at):
    """Learn the dense rows ``X`` in order; row i's pre-update score goes to ``scores[i]`` when
    ``scores`` has one slot per row (an empty ``scores`` skips that).  ``evidence_at`` > 0:
    the prior's variance is re-estimated by :func:`evidence_prior` after the event at which the
    rarer class's count reaches it (``class_counts`` are the offset's)."""
    n_features = X.shape[1]
    x, u = extended_scratch(n_features, fit_intercept)
    want_scores = scores.shape[0] > 0
    for i in range(X.shape[0]):
        for j in range(n_features):
            x[j] = X[i, j]
        rarer = rarer_count(class_counts, evidence_at)
        s = laplace_update(x, y[i], mean, covariance, u, class_counts, hyper)
        if rarer < evidence_at <= rarer_count(class_counts, evidence_at):
            evidence_prior(mean, covariance, hyper[0])
        if want_scores:
            scores[i] = s


@kernel
def laplace_csr(
    indptr, indices, data, y, scores, mean, covariance, class_counts, fit_intercept, hyper,
    evidence_at,
):  # fmt: skip
    """As :func:`laplace_dense` for CSR rows (each row expanded into a dense scratch row: the
    update is O(D^2) either way)."""
    x, u = extended_scratch(mean.shape[0] - 1, fit_intercept)
    want_scores = scores.shape[0] > 0
    for i in range(indptr.shape[0] - 1):
        scatter_row(x, indices, data, indptr[i], indptr[i + 1])
        rarer = rarer_count(class_counts, evidence_at)
        s = laplace_update(x, y[i], mean, covariance, u, class_counts, hyper)
        if rarer < evidence_at <= rarer_count(class_counts, evidence_at):
            evidence_prior(mean, covariance, hyper[0])
        clear_row(x, indices, indptr[i], indptr[i + 1])
        if want_scores:
            scores[i] = s


#: ``magnitudes`` of a slot whose non-zero values have had more than one magnitude (a number)
VARIED = -1.0


@kernel
def reprior_slot(slot, mean, covariance, u, old_variance, new_variance):
    """(logistic.17): slot ``slot``'s prior ``N(0, old_variance)`` divided out of the belief and
    ``N(0, new_variance)`` multiplied in, i.e. ``P^-1 <- P^-1 - c e e^T`` with ``c = 1 / old -
    1 / new`` (Sherman-Morrison) and ``P^-1 m`` unchanged (the prior's mean is 0).  ``u`` is
    scratch (D,).  ``1 - c P_kk > 0`` because ``P_kk`` is at most ``old_variance``."""
    size = mean.shape[0]
    c = 1.0 / old_variance - 1.0 / new_variance
    for i in range(size):
        u[i] = covariance[slot, i]
    f = c / (1.0 - c * u[slot])
    step = f * mean[slot]
    for i in range(size):
        for j in range(size):
            covariance[i, j] += f * (u[i] * u[j])
    for i in range(size):
        mean[i] += step * u[i]


@kernel
def laplace_kinds_csr(
    indptr, indices, data, y, scores, mean, covariance, class_counts, magnitudes,
    fit_intercept, hyper,
):  # fmt: skip
    """As :func:`laplace_csr` with a prior per kind of slot (docs/algorithms/logistic.md
    (logistic.16)-(logistic.17)): ``magnitudes[k]`` is the magnitude of slot ``k``'s non-zero
    values while they have had one (0 before the first), :data:`VARIED` once they have had
    two; such a slot (a number) has the prior variance ``number_variance``, the others (an
    indicator: a one-hot or hashed category) and the intercept ``prior_variance``.  ``hyper``:
    ``(prior_variance, number_variance, process_noise, use_offset)``.  A slot's kind is read
    from the event's values before the event is learned, so the event that shows a slot is a
    number is learned under the number's prior."""
    prior_variance, number_variance, process_noise, use_offset = hyper
    n_slots = mean.shape[0] - 1
    x, u = extended_scratch(n_slots, fit_intercept)
    want_scores = scores.shape[0] > 0
    for i in range(indptr.shape[0] - 1):
        scatter_row(x, indices, data, indptr[i], indptr[i + 1])
        for k in range(indptr[i], indptr[i + 1]):
            slot = indices[k]
            size = abs(x[slot])
            seen = magnitudes[slot]
            if size == 0.0 or seen == VARIED or seen == size:
                continue
            if seen == 0.0:
                magnitudes[slot] = size
                continue
            reprior_slot(slot, mean, covariance, u, prior_variance, number_variance)
            magnitudes[slot] = VARIED
        # (logistic.14) with each slot's own prior as its cap
        if process_noise > 0.0:
            for j in range(n_slots + 1):
                cap = prior_variance
                if j < n_slots and magnitudes[j] == VARIED:
                    cap = number_variance
                covariance[j, j] = drifted(covariance[j, j], cap, process_noise)
        s = laplace_step(x, y[i], mean, covariance, u, class_counts, use_offset)
        clear_row(x, indices, indptr[i], indptr[i + 1])
        if want_scores:
            scores[i] = s


@kernel
def laplace_scores_dense(X, mean, class_counts, use_offset, out):
    """(logistic.11) for each row."""
    for i in range(X.shape[0]):
        out[i] = laplace_score(mean, X[i], class_counts, use_offset)


@kernel
def laplace_scores_csr(indptr, indices, data, mean, class_counts, use_offset, out):
    """(logistic.11) for CSR rows, each expanded into a dense scratch row as the update expands it
    (duplicate columns add in the same order)."""
    x = np.zeros(mean.shape[0] - 1)
    for i in range(indptr.shape[0] - 1):
        scatter_row(x, indices, data, indptr[i], indptr[i + 1])
        out[i] = laplace_score(mean, x, class_counts, use_offset)
        clear_row(x, indices, indptr[i], indptr[i + 1])
