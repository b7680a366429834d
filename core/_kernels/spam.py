"""SPAM kernels: Natole thesis ch. 4, Alg. 20 (docs/algorithms/spam.md (spam.3)-(spam.10)).

One kernel call learns a whole batch in order.  Every kernel works on the same state layout,
whatever the input (dense rows or CSR rows), so a model can receive both:

* ``w = w_scale * w_unscaled``: the L2 prox multiplies ``w`` by ``1 / (1 + eta * l2)``; keeping
  that factor in one scalar makes the step O(nnz(x)) instead of O(n_features).  When the scale
  falls below 1e-3 the kernel folds it into the vector (O(n_features), rare): a smaller scale
  would cost digits in the lazy average below.
* the *sum* of the iterates is ``avg_offset + avg_coef * w_unscaled`` (the classic lazy
  averaging: adding ``delta`` to ``w_unscaled`` subtracts ``avg_coef * delta`` from
  ``avg_offset``; adding the new iterate adds its scale to ``avg_coef``), so the averaged
  iterate is recoverable in O(1) per coordinate.
* class sums (not means, so a new event only adds to them) and, for the CSR path, the two
  scalars ``w . sum_pos`` and ``w . sum_neg`` kept up to date incrementally.  Dense kernels
  compute ``w . sum_opposite`` directly (same O(n_features) as the rest of a dense step) and
  refresh the two scalars at the end of the batch, which does not depend on how the events were
  split into batches.
* the L2 kernels take the per-feature arrays as one (k, n_features) ``table``; for wide models
  it is the transposed view of an interleaved buffer, so one non-zero costs one cache line
  (``core.learners.spam.INTERLEAVE_FROM``).

Kernels take arrays and scalars only, validate nothing and read no globals.

Per-event code.  Every array reference numba creates costs an atomic increment and decrement
of the array's reference count (NRT_incref / NRT_decref, a ``lock``-prefixed instruction each,
which also stalls the loads around it).  LLVM removes the pairs it can see in straight-line
code, not those around a loop nor those of an array chosen by a condition.  A row view
``X[i]``, ``a if positive else b`` and a call of a helper that loops over its array arguments
cost four to six of them per event, a large share of a dense event's time (bench/README.md,
"versus_c.py").  So the per-event paths of the L2 kernels index ``X[i, j]``, choose a
class's sums by the row index of ``table``, loop in the kernel itself, and call per event only
helpers that take scalars or are straight-line code (inlining a helper that takes arrays at
numba's IR level, ``inlined_kernel``, does not help: its arguments are still references); the
O(n_features) folds and renormalisations, which are rare, still call helpers.

The elastic-net kernel, which keeps explicit weights instead of this layout, is
:mod:`core._kernels.spam_net`.
"""

from collections import namedtuple

import numpy as np

from core._kernels._config import kernel
from core._kernels._linalg import dot_dense, dot_sparse
from core._kernels.forgetting import (
    advance,
    class_share,
    class_total,
    inflation,
    scale_in_place,
    step_count,
)
from core._kernels.validation import ROW_SQUARED_NORM_BOUND

#: The learned arrays of every SPAM kernel (the L2 ones and
#: :func:`core._kernels.spam_net.spam_elastic_net`): ``w = w_scale * table[0]``, the iterate sum
#: ``table[1] + avg_coef * table[0]``, the class sums ``table[2]`` (negatives) and ``table[3]``
#: and ``w`` times each, the counters.
SpamTableState = namedtuple("SpamTableState", [
    "table", "w_scale", "avg_coef", "w_dot_sum_pos", "w_dot_sum_neg", "n_seen", "n_pos",
    "n_neg", "n_steps", "sq_norm_sum",
])  # fmt: skip
#: Hyper-parameters (``l1`` is read by the elastic net only; ``half_life`` 0.0 = off).
SpamOptions = namedtuple(
    "SpamOptions", ["eta0", "l2", "l1", "inverse", "average", "n_warmup", "half_life"]
)
#: The arrays of ``half_life`` (docs/algorithms/spam.md (spam.12)-(spam.14)): the clock and
#: epoch of (forgetting.3), the classes' weights ``[negatives, positives]`` and the weight of
#: the averaged iterates (all empty-or-unread when forgetting is off).
SpamForget = namedtuple("SpamForget", ["clock", "epoch", "class_weight", "avg_weight"])


# ------------------------------------------------------------------------------ shared pieces
@kernel
def fold_scale(w_unscaled, w_scale, avg_offset, avg_coef, average):
    """Make ``w_scale`` 1 without changing ``w`` or the iterate sum: O(n_features), rare."""
    scale = w_scale[0]
    if average:
        coef = avg_coef[0]
        for j in range(w_unscaled.shape[0]):
            avg_offset[j] += coef * w_unscaled[j]
        avg_coef[0] = 0.0
    for j in range(w_unscaled.shape[0]):
        w_unscaled[j] *= scale
    w_scale[0] = 1.0


@kernel
def served_score(vx, ax, w_scale, avg_coef, n_averaged, average):
    """Score of the served model from ``vx = w_unscaled . x`` and ``ax = avg_offset . x``:
    the averaged iterate ``(avg_offset + avg_coef * w_unscaled) / n_averaged`` when averaging
    (0 before the first step: the average of no iterate is taken as w = 0), else ``w``."""
    if average:
        if n_averaged > 0.0:
            return (ax + avg_coef * vx) / n_averaged
        return 0.0
    return w_scale * vx


@kernel
def mean_sq_norm(sq_norm_sum, n_seen):
    """nu: the running mean of ||x||^2 (events seen so far, this one included); 1 while it is 0.

    [CHOICE] Steps are taken in the units of x / sqrt(nu) (see core.learners.spam)."""
    if sq_norm_sum > 0.0:
        return sq_norm_sum / n_seen
    return 1.0


@kernel
def spam_eta(n_steps, eta0, l2, inverse):
    """eta_t = eta0 / sqrt(t) (the authors' code, docs/algorithms/spam.md (spam.7)), or the
    O(1/t) schedule of Thm 4.2, eta_t = 1 / (l2 (t + t0)) with t0 = 1 / (eta0 l2) - 1 so that
    eta_1 = eta0."""
    if inverse:
        return eta0 / (1.0 + eta0 * l2 * (n_steps - 1))
    return eta0 / np.sqrt(n_steps)


@kernel
def averaged_weight(n_steps, avg_weight, half_life):
    """The divisor of the averaged iterate: the number of steps, or their weight (spam.14)."""
    if half_life <= 0.0:
        return float(n_steps)
    return avg_weight[0]


@kernel
def renormalise(factor, sums, class_weight, avg_offset, avg_coef, avg_weight, w_dots):
    """Multiply every weighted sum of (spam.12)-(spam.14) by ``factor`` (forgetting.3):
    ``sums`` and the class dot products ``w_dots`` are (2, n) / (2,) views or tuples."""
    for row in sums:
        scale_in_place(row, factor)
    scale_in_place(class_weight, factor)
    scale_in_place(avg_offset, factor)
    scale_in_place(avg_coef, factor)
    scale_in_place(avg_weight, factor)
    for dot in w_dots:
        scale_in_place(dot, factor)


@kernel
def counted(positive, n_pos, n_neg):
    """The class counts ``(n_pos, n_neg)`` once an event of class ``positive`` joined them.
    Scalars in and out, so that the per-event paths call it (see "Per-event code")."""
    if positive:
        return n_pos + 1, n_neg
    return n_pos, n_neg + 1


@kernel
def count_event(positive, c, n_pos, n_neg, class_weight, half_life):
    """The event joins its class's count (and weight, with ``c``, when forgetting)."""
    n_pos[0], n_neg[0] = counted(positive, n_pos[0], n_neg[0])
    if half_life > 0.0:
        class_weight[1 if positive else 0] += c


@kernel
def capped_rate(rate, curvature, xx):
    """``min(rate, 1 / (curvature xx))``: the rate of a step ``w - rate * coef * x`` on a loss
    whose second derivative in the score ``w . x`` is ``curvature``, capped so that the step
    moves the event's score at most to the minimiser of its own loss (the importance-aware
    step of Karampatziakis & Langford 2011, for a quadratic).

    [CHOICE] Why: the scale-free rate ``eta / nu`` is sized for a row of average squared norm
    ``nu``; a row with ``||x||^2`` many times ``nu`` (heavy-tailed features after
    standardisation, e.g. 25 standard deviations) overshoots its own minimiser by that factor
    and flips ``w`` along it.  One such row early in a stream decided the model: held-out AUC
    swung by 0.05-0.2 across shuffles on pc1 and flare-F.  Rows of ordinary norm are not
    affected once ``eta curvature ||x||^2 / nu <= 1``.
    """
    if rate * curvature * xx > 1.0:
        return 1.0 / (curvature * xx)
    return rate


@kernel
def spam_curvature(positive, p):
    """Second derivative in ``w . x`` of SPAM's per-event loss: 2(1-p) (y=+1), 2p (y=-1)."""
    return 2.0 * (1.0 - p) if positive else 2.0 * p


@kernel
def spam_gradient_coef(positive, wx, w_dot_mean_opposite, p):
    """The SPAM stochastic gradient is ``coef * x`` (docs/algorithms/spam.md (spam.3)):
    y=+1: 2(1-p)(w.x - w.m- - 1);  y=-1: 2p(w.x - w.m+ + 1)."""
    if positive:
        return 2.0 * (1.0 - p) * (wx - w_dot_mean_opposite - 1.0)
    return 2.0 * p * (wx - w_dot_mean_opposite + 1.0)


@kernel
def spam_l2_step(positive, wx, w_dot_mean, p, xx, n_steps, n_seen, sq_norm_sum, eta0, l2, inverse,
                 half_life):  # fmt: skip
    """Count one SPAM-L2 step and return ``(step, rho)``: Natole thesis Alg. 20 / eq. (4.11)
    then the L2 prox ``u / (1 + eta l2)`` (§4.3) give ``w' = rho (w - step x)``.  ``wx`` is
    ``w . x`` before the step.  The dense and CSR kernels differ only in how they get ``wx``
    and ``w_dot_mean``, so the step is written once."""
    n_steps[0] += 1
    eta = spam_eta(step_count(n_steps[0], half_life), eta0, l2, inverse)
    nu = mean_sq_norm(sq_norm_sum[0], n_seen[0])
    coef = spam_gradient_coef(positive, wx, w_dot_mean, p)
    step = capped_rate(eta / nu, spam_curvature(positive, p), xx) * coef
    return step, 1.0 / (1.0 + eta * l2)


@kernel
def csr_row_in_order(indices, start, end, n_features):
    """Whether the columns ``indices[start:end]`` increase and lie in ``[0, n_features)``: then
    the row may index the per-feature arrays (which the CSR kernels do without a bounds check,
    validation having proved the batch) and repeats none.  A row that does not is not
    necessarily at fault (its columns may be out of order): the caller checks it fully
    (``OnlineLearner._learn_rows``).  Scalars and one array only read: a per-event call that
    LLVM inlines without reference counts."""
    previous = -1
    in_order = True
    for k in range(start, end):
        in_order &= indices[k] > previous
        previous = indices[k]
    return in_order and previous < n_features


# ------------------------------------------------------------------------------ L2, dense
@kernel
def spam_l2_dense(X, y, scores, state, options, forget, check_rows):
    """SPAM-L2 on dense rows (``state``: :data:`SpamTableState`, the same table as the CSR
    kernel's; ``options``: :data:`SpamOptions`, ``forget``: :data:`SpamForget`).

    Returns the number of rows learned: all of them, or with ``check_rows`` the index of the
    first row whose ``||x||^2`` is above ``ROW_SQUARED_NORM_BOUND`` (a NaN or an infinity in
    it, a value beyond the feature bound, or many values near it), of which nothing was
    learned.  The value checks of a batch then cost
    no pass of its own over the rows (``core.learners._base``): ``||x||^2`` is needed anyway.

    Written for speed (bench/versus_c.py): the per-event path creates no array reference (see
    "Per-event code" above), the class sums are rows of ``table`` chosen by index, and the
    row's dot products are one loop in the kernel itself, not a call.
    """
    (table, w_scale, avg_coef, w_dot_sum_pos, w_dot_sum_neg,
     n_seen, n_pos, n_neg, n_steps, sq_norm_sum) = state  # fmt: skip
    eta0, l2, _, inverse, average, n_warmup, half_life = options
    clock, epoch, class_weight, avg_weight = forget
    want_scores = scores.shape[0] > 0
    with_average = want_scores and average
    n_features = X.shape[1]
    n_learned = X.shape[0]
    for i in range(X.shape[0]):
        positive = y[i] > 0
        own = 3 if positive else 2  # the table's rows: w, avg_offset, sum_neg, sum_pos
        opposite = 5 - own
        # one pass for ||x||^2, w_unscaled . x, w_unscaled . (sum of the opposite class) and,
        # for a prequential score, avg_offset . x: two accumulators each (even and odd
        # columns; the order of _linalg.dot_dense, so a prequential score equals
        # decision_function's bit for bit)
        xx0 = 0.0
        xx1 = 0.0
        vx0 = 0.0
        vx1 = 0.0
        vo0 = 0.0
        vo1 = 0.0
        ax0 = 0.0
        ax1 = 0.0
        j = 0
        while j + 2 <= n_features:
            u = X[i, j]
            v = X[i, j + 1]
            xx0 += u * u
            xx1 += v * v
            vx0 += table[0, j] * u
            vx1 += table[0, j + 1] * v
            vo0 += table[opposite, j] * table[0, j]
            vo1 += table[opposite, j + 1] * table[0, j + 1]
            if with_average:  # the same every iteration: predicted, costs nothing measurable
                ax0 += table[1, j] * u
                ax1 += table[1, j + 1] * v
            j += 2
        if j < n_features:
            u = X[i, j]
            xx0 += u * u
            vx0 += table[0, j] * u
            vo0 += table[opposite, j] * table[0, j]
            if with_average:
                ax0 += table[1, j] * u
        xx = xx0 + xx1
        vx = vx0 + vx1
        if check_rows and not xx <= ROW_SQUARED_NORM_BOUND:
            n_learned = i
            break
        c = inflation(clock, epoch, half_life)  # this event's weight in the sums (spam.12)
        if want_scores:
            n_averaged = averaged_weight(n_steps[0], avg_weight, half_life)
            scores[i] = served_score(vx, ax0 + ax1, w_scale[0], avg_coef[0], n_averaged, average)
        n_seen[0] += 1
        sq_norm_sum[0] += xx
        # [CHOICE] no step during warm-up nor before both classes were seen (OPAUC's code does
        # the same); p and the means are those of the events before this one (spam.10).
        if n_seen[0] > n_warmup and n_pos[0] > 0 and n_neg[0] > 0:
            p = class_share(n_pos[0], n_neg[0], class_weight, half_life)
            # w . m_opposite, directly (O(n_features) like the rest of a dense step)
            n_opposite = class_total(not positive, n_pos[0], n_neg[0], class_weight, half_life)
            w_dot_mean = w_scale[0] * (vo0 + vo1) / n_opposite
            step, rho = spam_l2_step(
                positive, w_scale[0] * vx, w_dot_mean, p, xx, n_steps, n_seen, sq_norm_sum,
                eta0, l2, inverse, half_life,
            )  # fmt: skip
            # w' = rho (w - step x), kept as scale' = rho scale, v' = v - (step / scale) x
            if w_scale[0] * rho < 1e-3:
                fold_scale(table[0], w_scale, table[1], avg_coef, average)
            delta = -step / w_scale[0]
            new_scale = w_scale[0] * rho
            # the class statistics take the event after the step (spam.10)
            if average:
                shift = avg_coef[0] * delta
                for j in range(n_features):
                    table[0, j] += delta * X[i, j]
                    table[1, j] -= shift * X[i, j]
                # a separate loop: with three arrays written in one loop LLVM does not
                # vectorise it (bench/versus_c.py)
                for j in range(n_features):
                    table[own, j] += c * X[i, j]
                # + the new iterate: uniform average (spam.9), weighted by c (spam.14)
                avg_coef[0] += new_scale * c
                if half_life > 0.0:
                    avg_weight[0] += c
            else:
                for j in range(n_features):
                    table[0, j] += delta * X[i, j]
                    table[own, j] += c * X[i, j]
            w_scale[0] = new_scale
        else:
            for j in range(n_features):
                table[own, j] += c * X[i, j]
        # count_event, written out but for its scalar part (faster: bench/README.md, "One
        # loop for dense and CSR rows"): a call that passes the arrays costs their references
        # (see above), inlined or not
        n_pos[0], n_neg[0] = counted(positive, n_pos[0], n_neg[0])
        if half_life > 0.0:
            class_weight[1 if positive else 0] += c
        factor = advance(clock, epoch, half_life)
        if factor != 1.0:
            renormalise(factor, (table[2], table[3]), class_weight, table[1], avg_coef,
                        avg_weight, (w_dot_sum_pos, w_dot_sum_neg))  # fmt: skip
    w_dot_sum_pos[0] = w_scale[0] * dot_dense(table[0], table[3])
    w_dot_sum_neg[0] = w_scale[0] * dot_dense(table[0], table[2])
    return n_learned


# ------------------------------------------------------------------------------ L2, CSR
@kernel
def spam_l2_csr(indptr, indices, data, y, scores, state, options, forget, check_rows):
    """As :func:`spam_l2_dense`, O(nnz) per event (plus a rare O(n_features) fold); ``state``
    is :data:`SpamTableState`.  With ``check_rows`` it also stops at the first row whose
    columns do not increase or leave ``[0, n_features)``, before any of them is used (see
    :func:`csr_row_in_order`).

    ``table`` is (4, n_features): rows w_unscaled, avg_offset, class_sum_neg, class_sum_pos
    (a transposed view of an interleaved buffer for wide models: the four values of a column
    share a cache line).  With 2**20 features the state does not fit in cache, so each pass
    over the row's columns pays memory latency: one pass gathers everything the step needs,
    one pass scatters."""
    (table, w_scale, avg_coef, w_dot_sum_pos, w_dot_sum_neg,
     n_seen, n_pos, n_neg, n_steps, sq_norm_sum) = state  # fmt: skip
    eta0, l2, _, inverse, average, n_warmup, half_life = options
    clock, epoch, class_weight, avg_weight = forget
    want_scores = average and scores.shape[0] > 0
    n_features = table.shape[1]
    n_learned = indptr.shape[0] - 1
    for i in range(indptr.shape[0] - 1):
        # unsigned positions and columns: numba wraps a negative signed index around (a test
        # and an add per access, and registers; bench/README.md, "versus_c.py"); validation
        # guarantees both are in range
        start = np.uint64(indptr[i])
        end = np.uint64(indptr[i + 1])
        if check_rows and not csr_row_in_order(indices, start, end, n_features):
            n_learned = i
            break
        c = inflation(clock, epoch, half_life)  # this event's weight in the sums (spam.12)
        xx = 0.0
        vx = 0.0
        ax = 0.0
        x_dot_sum_pos = 0.0
        x_dot_sum_neg = 0.0
        for k in range(start, end):
            j = np.uint64(indices[k])
            value = data[k]
            xx += value * value
            vx += table[0, j] * value
            x_dot_sum_neg += table[2, j] * value
            x_dot_sum_pos += table[3, j] * value
            if want_scores:
                ax += table[1, j] * value
        if check_rows and not xx <= ROW_SQUARED_NORM_BOUND:
            n_learned = i
            break
        if scores.shape[0] > 0:
            n_averaged = averaged_weight(n_steps[0], avg_weight, half_life)
            scores[i] = served_score(vx, ax, w_scale[0], avg_coef[0], n_averaged, average)
        n_seen[0] += 1
        sq_norm_sum[0] += xx
        positive = y[i] > 0
        step_taken = False
        delta = 0.0
        shift = 0.0
        if n_seen[0] > n_warmup and n_pos[0] > 0 and n_neg[0] > 0:
            step_taken = True
            p = class_share(n_pos[0], n_neg[0], class_weight, half_life)
            n_opposite = class_total(not positive, n_pos[0], n_neg[0], class_weight, half_life)
            if positive:
                w_dot_mean = w_dot_sum_neg[0] / n_opposite
            else:
                w_dot_mean = w_dot_sum_pos[0] / n_opposite
            step, rho = spam_l2_step(
                positive, w_scale[0] * vx, w_dot_mean, p, xx, n_steps, n_seen, sq_norm_sum,
                eta0, l2, inverse, half_life,
            )  # fmt: skip
            # w' . sum = rho (w . sum - step x . sum): O(nnz) instead of a full dot product
            w_dot_sum_pos[0] = rho * (w_dot_sum_pos[0] - step * x_dot_sum_pos)
            w_dot_sum_neg[0] = rho * (w_dot_sum_neg[0] - step * x_dot_sum_neg)
            if w_scale[0] * rho < 1e-3:
                vx *= w_scale[0]  # w_unscaled . x after the fold
                fold_scale(table[0], w_scale, table[1], avg_coef, average)
            delta = -step / w_scale[0]
            new_scale = w_scale[0] * rho
            shift = avg_coef[0] * delta
            if average:
                avg_coef[0] += new_scale * c  # weighted by c when forgetting (spam.14)
                if half_life > 0.0:
                    avg_weight[0] += c
            w_scale[0] = new_scale
            vx += delta * xx
        # the class statistics take the event after the step (spam.10); w' . x = scale' v' . x
        own = 3 if positive else 2
        # count_event, written out (see spam_l2_dense)
        if positive:
            n_pos[0] += 1
            w_dot_sum_pos[0] += c * (w_scale[0] * vx)
        else:
            n_neg[0] += 1
            w_dot_sum_neg[0] += c * (w_scale[0] * vx)
        if half_life > 0.0:
            class_weight[1 if positive else 0] += c
        if step_taken and average:
            for k in range(start, end):
                j = np.uint64(indices[k])
                table[0, j] += delta * data[k]
                table[1, j] -= shift * data[k]
                table[own, j] += c * data[k]
        elif step_taken:
            for k in range(start, end):
                j = np.uint64(indices[k])
                table[0, j] += delta * data[k]
                table[own, j] += c * data[k]
        else:
            for k in range(start, end):
                table[own, np.uint64(indices[k])] += c * data[k]
        factor = advance(clock, epoch, half_life)
        if factor != 1.0:
            renormalise(factor, (table[2], table[3]), class_weight, table[1], avg_coef,
                        avg_weight, (w_dot_sum_pos, w_dot_sum_neg))  # fmt: skip
    return n_learned


# ------------------------------------------------------------------------------ scoring
@kernel
def linear_scores_dense(X, w_unscaled, w_scale, avg_offset, avg_coef, n_averaged, average, out):
    """Served scores with exactly the arithmetic of the learning kernels' prequential scores."""
    for i in range(X.shape[0]):
        x = X[i]
        vx = dot_dense(w_unscaled, x)
        ax = dot_dense(avg_offset, x) if average else 0.0
        out[i] = served_score(vx, ax, w_scale, avg_coef, n_averaged, average)


@kernel
def linear_scores_csr(
    indptr, indices, data, w_unscaled, w_scale, avg_offset, avg_coef, n_averaged, average, out
):
    for i in range(indptr.shape[0] - 1):
        start = indptr[i]
        end = indptr[i + 1]
        vx = dot_sparse(w_unscaled, indices, data, start, end)
        ax = dot_sparse(avg_offset, indices, data, start, end) if average else 0.0
        out[i] = served_score(vx, ax, w_scale, avg_coef, n_averaged, average)
