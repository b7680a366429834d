"""Online Platt scaling of prequential scores, shrunk toward the base rate until both classes
have been seen enough (docs/algorithms/calibration.md (calibration.1)-(calibration.8)).

Kernels take arrays and scalars only, validate nothing and read no globals.
"""

import math

from core._kernels._config import kernel


@kernel
def sigmoid(z):
    """The logistic of ``z``, written so that neither branch overflows."""
    if z >= 0.0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


@kernel
def standardized(score, mean, variance, score_bound, standard_bound):
    """(calibration.2): the score clipped to ``score_bound``, centred and scaled by the running
    moments (unscaled while their variance is 0), clipped to ``standard_bound``."""
    s = min(max(score, -score_bound), score_bound) - mean
    if variance > 0.0:
        s /= math.sqrt(variance)
    return min(max(s, -standard_bound), standard_bound)


@kernel
def platt_update(scores, labels, theta, curvature, moments, counters, label_counts, decay,
                 ridge, score_bound, standard_bound, theta_bound):  # fmt: skip
    """Feed the (pre-update score, label) pairs in order: per event, the discounted moments of
    the scores, then one Newton step of the logistic loss of ``theta[0] * u + theta[1]`` on
    the standardised score ``u`` with the discounted curvature.

    ``theta`` = [slope a, offset b]; ``curvature`` = the upper triangle [h_uu, h_u1, h_11] of
    the discounted Gauss-Newton matrix (calibration.3); ``moments`` = [discounted weight,
    mean, discounted sum of squared deviations] (calibration.1); ``counters`` = [events fed];
    ``label_counts`` = [negatives fed, positives fed] (calibration.6); labels are -1 / +1 (or
    0 / 1); the bounds as in (calibration.5).
    """
    a, b = theta[0], theta[1]
    h_uu, h_u1, h_11 = curvature[0], curvature[1], curvature[2]
    weight, mean, squares = moments[0], moments[1], moments[2]
    positives = 0
    for i in range(len(scores)):
        s = min(max(scores[i], -score_bound), score_bound)
        # (calibration.1): discounted mean and variance (West's update)
        weight = decay * weight + 1.0
        deviation = s - mean
        mean += deviation / weight
        squares = decay * squares + deviation * (s - mean)
        u = standardized(s, mean, squares / weight, score_bound, standard_bound)
        p = sigmoid(a * u + b)
        w = p * (1.0 - p)
        # (calibration.3): the discounted curvature
        h_uu = decay * h_uu + w * u * u
        h_u1 = decay * h_u1 + w * u
        h_11 = decay * h_11 + w
        # (calibration.4): theta -= (H + ridge I)^-1 (p - t) (u, 1), the 2x2 inverse by hand;
        # H is a sum of outer products, so det(H + ridge I) >= ridge (m_uu + m_11 - ridge) in
        # exact arithmetic: the bound keeps rounding (scores all alike) from cancelling it
        m_uu, m_11 = h_uu + ridge, h_11 + ridge
        determinant = max(m_uu * m_11 - h_u1 * h_u1, ridge * (m_uu + m_11 - ridge))
        positive = labels[i] > 0
        if positive:
            positives += 1
        residual = p - (1.0 if positive else 0.0)
        a -= residual * (m_11 * u - h_u1) / determinant
        b -= residual * (m_uu - h_u1 * u) / determinant
        a = min(max(a, -theta_bound), theta_bound)
        b = min(max(b, -theta_bound), theta_bound)
    theta[0], theta[1] = a, b
    curvature[0], curvature[1], curvature[2] = h_uu, h_u1, h_11
    moments[0], moments[1], moments[2] = weight, mean, squares
    counters[0] += len(scores)
    label_counts[0] += len(scores) - positives
    label_counts[1] += positives


@kernel
def base_rate_shrinkage(label_counts, prior_strength):
    """``(pi, lam)``: the running base rate (calibration.6) and the weight of the Platt
    probability against it (calibration.7)-(calibration.8); ``lam = 1`` (no shrinkage) when
    ``prior_strength`` is 0."""
    negatives, positives = float(label_counts[0]), float(label_counts[1])
    base_rate = (positives + 0.5) / (positives + negatives + 1.0)
    if prior_strength <= 0.0:
        return base_rate, 1.0
    evidence = 0.0
    if positives > 0.0 and negatives > 0.0:
        evidence = positives * negatives / (positives + negatives)
    return base_rate, evidence / (evidence + prior_strength)


@kernel
def platt_probabilities(scores, theta, moments, label_counts, prior_strength, score_bound,
                        standard_bound, out):  # fmt: skip
    """(calibration.2) shrunk toward the base rate by (calibration.8), for a batch:
    ``out[i]`` = the probability of ``scores[i]``."""
    variance = moments[2] / moments[0] if moments[0] > 0.0 else 0.0
    base_rate, weight = base_rate_shrinkage(label_counts, prior_strength)
    for i in range(len(scores)):
        u = standardized(scores[i], moments[1], variance, score_bound, standard_bound)
        p = sigmoid(theta[0] * u + theta[1])
        # (calibration.8); the weight 1 of an unshrunk calibrator leaves p bit for bit
        out[i] = p if weight == 1.0 else weight * p + (1.0 - weight) * base_rate
