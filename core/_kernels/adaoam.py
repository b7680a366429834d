"""AdaOAM's step (Ding et al., AAAI 2015; Natole thesis Alg. 9): diagonal Adagrad with the
H-weighted projection onto ``||w|| <= 1/sqrt(lambda)``; with ``adaptive`` off, OPAUC's plain
gradient step (Alg. 8).  The OPAUC kernels (:mod:`core._kernels.opauc`) call it once per
event."""

import numpy as np

from core._kernels._config import kernel
from core._kernels._linalg import dot_dense4


@kernel
def project_weighted(u, h, radius, out):
    """AdaOAM's projection ``argmin_{||w|| <= r} (w - u)ᵀ diag(h) (w - u)``.

    Thesis Alg. 9; docs/algorithms/opauc.md (opauc.8).

    Outside the ball the solution is ``w_i = h_i u_i / (h_i + μ)`` with ``μ > 0`` solving
    ``||w(μ)|| = r``; ``||w(μ)||`` decreases in ``μ`` and ``μ_hi = max(h) ||u|| / r`` is
    feasible, so bisection down to adjacent doubles finds it; the feasible end is returned.
    """
    d = u.shape[0]
    norm2 = dot_dense4(u, u)
    radius2 = radius * radius
    if norm2 <= radius2:
        out[:] = u
        return
    h_max = 0.0
    for i in range(d):
        h_max = max(h_max, h[i])
    low = 0.0
    high = h_max * np.sqrt(norm2) / radius
    for _ in range(2100):
        middle = 0.5 * (low + high)
        if middle <= low or middle >= high:
            break
        total = 0.0
        for i in range(d):
            value = h[i] * u[i] / (h[i] + middle)
            total += value * value
        if total > radius2:
            low = middle
        else:
            high = middle
    for i in range(d):
        out[i] = h[i] * u[i] / (h[i] + high)


@kernel
def gradient_step(w, g, eta, adaptive, grad_sq, delta, radius, u, h, grad_decay):
    """``w <- w - η g`` (OPAUC, Alg. 8), or AdaOAM (Alg. 9):
    ``G += g²; H = δ + sqrt(G); w <- Π^H_{||w|| <= r}(w - η g / H)``; with forgetting
    ``G <- grad_decay G + g²`` (1.0: off; docs/algorithms/opauc.md (opauc.13))."""
    d = w.shape[0]
    if not adaptive:
        for i in range(d):
            w[i] -= eta * g[i]
        return
    for i in range(d):
        grad_sq[i] = grad_sq[i] * grad_decay + g[i] * g[i]
        h[i] = delta + np.sqrt(grad_sq[i])
        u[i] = w[i] - eta * g[i] / h[i] if h[i] > 0.0 else w[i]
    if np.isfinite(radius):
        project_weighted(u, h, radius, w)
    else:
        w[:] = u
