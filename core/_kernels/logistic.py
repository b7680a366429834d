"""Online logistic regression by per-coordinate FTRL-Proximal (McMahan et al., "Ad click
prediction: a view from the trenches", KDD 2013, Algorithm 1): docs/algorithms/logistic.md
(logistic.2)-(logistic.10), whose numbers the code below cites.  In short: the weight
(logistic.3) of each coordinate is computed lazily from its accumulators ``z_i``, ``n_i``; the
score is the logit (logistic.8), plus the base-rate offset (logistic.10) when it is on; the
log-loss gradient (logistic.2) drives the step (logistic.4)-(logistic.6); with ``half_life``
both accumulators are discounted (logistic.9) when an event next reads them (``touched[i]``
holds the event of coordinate i's last catch-up, slot ``n_features`` the intercept's).

The intercept ``b`` is a constant feature 1 with its own ``z``, ``n`` and no penalty
((logistic.3) with ``l1 = l2 = 0``).  A coordinate with ``x_i = 0`` has ``g_i = 0``, so the
step leaves it unchanged; the kernel therefore touches only the event's non-zeros (O(nnz) for
CSR rows, and dense rows skip their zeros), and a dense row and its CSR copy learn the same
thing.

Kernels take arrays and scalars only, validate nothing and read no globals.  The per-feature
loops take the catch-up (logistic.9) and the step (logistic.4)-(logistic.6) from the scalar
:func:`caught_up` and :func:`stepped`, and the per-row part from :func:`row_scored` and
:func:`row_learned` on scalars: a call that takes arrays costs numba reference-count updates
on each (see ``core._kernels.spam``, "Per-event code"), per non-zero or per row here.
"""

import numpy as np

from core._kernels._config import kernel
from core._kernels.calibration import sigmoid
from core._kernels.forgetting import decay_over


@kernel
def weight_from_root(z, root_n, inv_alpha, beta, l1, l2):
    """(logistic.3) given ``sqrt(n_i)`` and ``1 / alpha``: the FTRL-Proximal closed form of ``w_i``
    (McMahan et al. Alg. 1).  [CHOICE] Multiplying by ``1 / alpha`` (computed once per call)
    instead of dividing by ``alpha`` saves two of the three divisions of an update; it
    rounds differently from the literal formula (by ulps, not a contract: the kernels all use
    this one function)."""
    if z <= l1 and z >= -l1:
        return 0.0
    shrunk = z - l1 if z > 0.0 else z + l1
    return -shrunk / ((beta + root_n) * inv_alpha + l2)


@kernel
def ftrl_weight(z, n, inv_alpha, beta, l1, l2):
    """(logistic.3) from the accumulators."""
    return weight_from_root(z, np.sqrt(n), inv_alpha, beta, l1, l2)


@kernel
def catch_up_factor(elapsed, half_life, one_event):
    """(logistic.9)'s discount of an accumulator ``elapsed`` events behind.  ``one_event`` is
    ``decay_over(1, half_life)``, computed once per call: a coordinate of a dense stream is
    one event behind, and the exponential per non-zero would dominate the step."""
    return one_event if elapsed == 1 else decay_over(elapsed, half_life)


@kernel
def caught_up(z_j, n_j, elapsed, half_life, one_event):
    """(logistic.9): the accumulators ``(z_j, n_j)`` discounted for ``elapsed`` events (scalars
    only, so that the learning loops may call it per non-zero)."""
    factor = catch_up_factor(elapsed, half_life, one_event)
    return z_j * factor, n_j * factor


@kernel
def class_totals(class_counts, use_offset):
    """``(n_-, n_+)`` of (logistic.10) as scalars (``(0.0, 0.0)`` when the offset is off: the
    array is empty then), for the per-row code (see :func:`row_scored`)."""
    if use_offset:
        return class_counts[0], class_counts[1]
    return 0.0, 0.0


@kernel
def log_odds(counts):
    """(logistic.10): ``log((n_+ + 1/2) / (n_- + 1/2))`` (the Krichevsky-Trofimov estimate of the
    log-odds; 0 before any event) of ``counts = (n_-, n_+)``."""
    return np.log((counts[1] + 0.5) / (counts[0] + 0.5))


@kernel
def base_rate(class_counts, use_offset):
    """:func:`log_odds` of the counts' array, or 0.0 when the offset is off."""
    if not use_offset:
        return 0.0
    return log_odds(class_totals(class_counts, use_offset))


@kernel
def labels_counted(counts, positive, use_offset, one_event):
    """(logistic.10)'s counts ``(n_-, n_+)`` after an event: its class gains 1, then both are
    discounted by one event (``one_event`` is 1.0 without ``half_life``, an exact no-op), the
    order of (logistic.9)."""
    if not use_offset:
        return counts
    negatives, positives = counts
    if positive:
        positives += 1.0
    else:
        negatives += 1.0
    return negatives * one_event, positives * one_event


@kernel
def count_label(class_counts, positive, use_offset, one_event):
    """:func:`labels_counted` in place."""
    if use_offset:
        counts = class_totals(class_counts, use_offset)
        class_counts[0], class_counts[1] = labels_counted(counts, positive, use_offset, one_event)


@kernel
def served_score(s, w_bias, counts, use_offset):
    """(logistic.8) with (logistic.10) from the features' part ``s`` and the counts ``(n_-,
    n_+)``: the same additions, in the same order, in the learning and the scoring kernels (a
    prequential score equals ``decision_function`` bit for bit)."""
    s += w_bias
    if use_offset:
        s += log_odds(counts)
    return s


@kernel
def stepped(z_j, n_j, g, w, root_n, inv_alpha):
    """(logistic.4)-(logistic.6): the accumulators ``(z_j, n_j)`` after a step with gradient
    ``g``, current weight ``w`` and ``root_n = sqrt(n_j)`` (already computed for (logistic.3):
    a square root saved per non-zero, with the same bits, since ``sqrt`` is correctly rounded).
    Scalars only, so that the learning loops may call it per non-zero."""
    n_new = n_j + g * g
    sigma = (np.sqrt(n_new) - root_n) * inv_alpha
    return z_j + (g - sigma * w), n_new


# The per-row part the dense and CSR kernels share, on scalars: the intercept's accumulators
# and the class counts are read into scalars once per call and written back at its end, so
# that no per-row call passes an array (one that does costs their reference counts, 1.09-1.26x:
# bench/README.md, "logistic's step and catch-up as scalar helpers").
@kernel
def row_state(bias_z, bias_n, touched, class_counts, hyper):
    """``(bias, counts)``: the intercept's ``(z, n, last catch-up)`` (the catch-up's slot is
    the last of ``touched``, read when ``half_life`` is on) and :func:`class_totals`."""
    half_life, use_offset = hyper[5], hyper[6]
    last = touched[touched.shape[0] - 1] if half_life > 0.0 else 0
    return (bias_z[0], bias_n[0], last), class_totals(class_counts, use_offset)


@kernel
def store_row_state(bias, counts, now, bias_z, bias_n, clock, touched, class_counts, hyper):
    """Write back what :func:`row_state` read, and the clock at event ``now``."""
    half_life, use_offset = hyper[5], hyper[6]
    bias_z[0], bias_n[0], last = bias
    if half_life > 0.0:
        touched[touched.shape[0] - 1] = last
        clock[0] = now
    if use_offset:
        class_counts[0], class_counts[1] = counts


@kernel
def row_scored(s, positive, bias, counts, now, inv_alpha, one_event, hyper):
    """A row's score (logistic.8) from its features' part ``s``, the intercept caught up to
    event ``now`` (logistic.9) first, and its log-loss residual ``p - y01`` (logistic.2: the
    gradient is the residual times the feature): ``(score, residual, w_bias, bias)``."""
    _, beta, _, _, fit_intercept, half_life, use_offset = hyper
    bias_z, bias_n, last = bias
    if half_life > 0.0:
        bias_z, bias_n = caught_up(bias_z, bias_n, now - last, half_life, one_event)
        last = now
    w_bias = ftrl_weight(bias_z, bias_n, inv_alpha, beta, 0.0, 0.0) if fit_intercept else 0.0
    score = served_score(s, w_bias, counts, use_offset)
    residual = sigmoid(score) - (1.0 if positive else 0.0)
    return score, residual, w_bias, (bias_z, bias_n, last)


@kernel
def row_learned(residual, w_bias, positive, bias, counts, inv_alpha, one_event, hyper):
    """After a row's features stepped: the intercept's step (logistic.4)-(logistic.6) and the
    class counts (logistic.10), ``(bias, counts)``."""
    fit_intercept, use_offset = hyper[4], hyper[6]
    bias_z, bias_n, last = bias
    if fit_intercept:
        bias_z, bias_n = stepped(bias_z, bias_n, residual, w_bias, np.sqrt(bias_n), inv_alpha)
    return (bias_z, bias_n, last), labels_counted(counts, positive, use_offset, one_event)


@kernel
def logistic_dense(X, y, scores, z, n, bias_z, bias_n, clock, touched, class_counts, hyper):
    """Learn the dense rows ``X`` in order.  ``z``, ``n``: the per-feature accumulators;
    ``bias_z``, ``bias_n``: the intercept's (shape (1,)); ``clock``, ``touched``: events
    learned and each accumulator's last catch-up ((logistic.9); empty when ``half_life`` is 0);
    ``class_counts``: ``[n_-, n_+]`` of (logistic.10) (empty when the offset is off); ``hyper``:
    ``(alpha, beta, l1, l2, fit_intercept, half_life, base_rate_offset)``.  When ``scores``
    has one slot per row, row i's pre-update score (logistic.8) is written into it (an empty
    ``scores`` skips that).

    Written out apart from :func:`logistic_csr` because it measures faster: one loop for both
    layouts learned dense rows 11-15 % slower (bench/README.md, "One loop for dense and CSR
    rows")."""
    alpha, beta, l1, l2, _, half_life, _ = hyper
    inv_alpha = 1.0 / alpha
    now = clock[0] if half_life > 0.0 else 0
    one_event = decay_over(1, half_life)
    want_scores = scores.shape[0] > 0
    n_features = X.shape[1]
    weights = np.zeros(n_features)
    roots = np.zeros(n_features)
    bias, counts = row_state(bias_z, bias_n, touched, class_counts, hyper)
    for i in range(X.shape[0]):
        # (logistic.3) for the non-zeros only, kept (with sqrt(n_j)) for the step
        # (logistic.4)-(logistic.6); the score (logistic.8) in order
        s = 0.0
        for j in range(n_features):
            value = X[i, j]
            if value != 0.0:
                if half_life > 0.0:  # (logistic.9)
                    z[j], n[j] = caught_up(z[j], n[j], now - touched[j], half_life, one_event)
                    touched[j] = now
                root = np.sqrt(n[j])
                w = weight_from_root(z[j], root, inv_alpha, beta, l1, l2)
                weights[j] = w
                roots[j] = root
                s += w * value
        s, residual, w_bias, bias = row_scored(
            s, y[i] > 0, bias, counts, now, inv_alpha, one_event, hyper
        )
        if want_scores:
            scores[i] = s
        for j in range(n_features):
            value = X[i, j]
            if value != 0.0:  # (logistic.4)-(logistic.6)
                z[j], n[j] = stepped(z[j], n[j], residual * value, weights[j], roots[j], inv_alpha)
        bias, counts = row_learned(
            residual, w_bias, y[i] > 0, bias, counts, inv_alpha, one_event, hyper
        )
        now += 1
    store_row_state(bias, counts, now, bias_z, bias_n, clock, touched, class_counts, hyper)


@kernel
def logistic_csr(
    indptr, indices, data, y, scores, z, n, bias_z, bias_n, clock, touched, class_counts, hyper
):
    """As :func:`logistic_dense` for CSR rows: O(nnz) per event (lazy weights: (logistic.3) is
    evaluated only for the row's columns)."""
    alpha, beta, l1, l2, _, half_life, _ = hyper
    inv_alpha = 1.0 / alpha
    now = clock[0] if half_life > 0.0 else 0
    one_event = decay_over(1, half_life)
    want_scores = scores.shape[0] > 0
    longest = 0
    for i in range(indptr.shape[0] - 1):
        longest = max(longest, indptr[i + 1] - indptr[i])
    weights = np.zeros(longest)
    roots = np.zeros(longest)
    bias, counts = row_state(bias_z, bias_n, touched, class_counts, hyper)
    for i in range(indptr.shape[0] - 1):
        start = indptr[i]
        end = indptr[i + 1]
        s = 0.0
        for k in range(start, end):
            value = data[k]
            if value != 0.0:
                j = indices[k]
                if half_life > 0.0:  # (logistic.9)
                    z[j], n[j] = caught_up(z[j], n[j], now - touched[j], half_life, one_event)
                    touched[j] = now
                root = np.sqrt(n[j])
                w = weight_from_root(z[j], root, inv_alpha, beta, l1, l2)
                weights[k - start] = w
                roots[k - start] = root
                s += w * value
        s, residual, w_bias, bias = row_scored(
            s, y[i] > 0, bias, counts, now, inv_alpha, one_event, hyper
        )
        if want_scores:
            scores[i] = s
        for k in range(start, end):
            value = data[k]
            if value != 0.0:  # (logistic.4)-(logistic.6)
                j = indices[k]
                w = weights[k - start]
                z[j], n[j] = stepped(z[j], n[j], residual * value, w, roots[k - start], inv_alpha)
        bias, counts = row_learned(
            residual, w_bias, y[i] > 0, bias, counts, inv_alpha, one_event, hyper
        )
        now += 1
    store_row_state(bias, counts, now, bias_z, bias_n, clock, touched, class_counts, hyper)


@kernel
def served_weight(z_j, n_j, elapsed, half_life, inv_alpha, beta, l1, l2):
    """(logistic.3) of an accumulator pair ``elapsed`` events behind its last catch-up, discounted
    by (logistic.9) without writing: the same product ``z_j * factor`` the learning kernel stores,
    so the bits agree.  Scalars only, so that the scoring loops may call it per non-zero (an
    array-taking call there costs numba reference counts)."""
    factor = decay_over(elapsed, half_life)  # 1.0 when off or nothing elapsed
    return ftrl_weight(z_j * factor, n_j * factor, inv_alpha, beta, l1, l2)


@kernel
def served_intercept(bias_z, bias_n, clock, touched, hyper):
    alpha, beta, l1, l2, fit_intercept, half_life, _ = hyper
    if not fit_intercept:
        return 0.0
    elapsed = clock[0] - touched[touched.shape[0] - 1] if half_life > 0.0 else 0
    return served_weight(bias_z[0], bias_n[0], elapsed, half_life, 1.0 / alpha, beta, 0.0, 0.0)


@kernel
def decision_dense(X, z, n, bias_z, bias_n, clock, touched, class_counts, hyper, out):
    """(logistic.8) for every row, with the arithmetic (order included) of the learning kernel, so a
    prequential score equals ``decision_function`` before the event bit for bit.  The weights
    (:func:`all_weights`) are computed once per call: a dense row reads them all anyway."""
    use_offset = hyper[6]
    counts = class_totals(class_counts, use_offset)
    n_features = X.shape[1]
    weights = np.empty(n_features)
    all_weights(z, n, clock, touched, hyper, weights)
    w_bias = served_intercept(bias_z, bias_n, clock, touched, hyper)
    for i in range(X.shape[0]):
        s = 0.0
        for j in range(n_features):
            value = X[i, j]
            if value != 0.0:
                s += weights[j] * value
        out[i] = served_score(s, w_bias, counts, use_offset)


@kernel
def decision_csr(
    indptr, indices, data, z, n, bias_z, bias_n, clock, touched, class_counts, hyper, out
):
    """As :func:`decision_dense` for CSR rows, each non-zero's weight evaluated where it is
    read (:func:`served_weight`): O(nnz) whatever ``n_features`` is.  A batch with more
    non-zeros than features evaluates every weight once instead (:func:`all_weights`, the same
    numbers): a tree-embedded model's rows hold a third of its columns each, and the weight's
    square root and division then cost more than the product."""
    alpha, beta, l1, l2, fit_intercept, half_life, use_offset = hyper
    inv_alpha = 1.0 / alpha
    now = clock[0] if half_life > 0.0 else 0
    w_bias = served_intercept(bias_z, bias_n, clock, touched, hyper)
    counts = class_totals(class_counts, use_offset)
    n_rows = indptr.shape[0] - 1
    if n_rows > 0 and indptr[n_rows] > z.shape[0]:
        weights = np.empty(z.shape[0])
        all_weights(z, n, clock, touched, hyper, weights)
        for i in range(n_rows):
            s = 0.0
            for k in range(indptr[i], indptr[i + 1]):
                value = data[k]
                if value != 0.0:
                    s += weights[indices[k]] * value
            out[i] = served_score(s, w_bias, counts, use_offset)
        return
    for i in range(n_rows):
        s = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            value = data[k]
            if value != 0.0:
                j = indices[k]
                elapsed = now - touched[j] if half_life > 0.0 else 0
                w = served_weight(z[j], n[j], elapsed, half_life, inv_alpha, beta, l1, l2)
                s += w * value
        out[i] = served_score(s, w_bias, counts, use_offset)


@kernel
def all_weights(z, n, clock, touched, hyper, out):
    """(logistic.3) for every coordinate (``coef_``, the dense scores): O(n_features)."""
    alpha, beta, l1, l2, fit_intercept, half_life, _ = hyper
    inv_alpha = 1.0 / alpha
    now = clock[0] if half_life > 0.0 else 0
    for j in range(z.shape[0]):
        elapsed = now - touched[j] if half_life > 0.0 else 0
        out[j] = served_weight(z[j], n[j], elapsed, half_life, inv_alpha, beta, l1, l2)
