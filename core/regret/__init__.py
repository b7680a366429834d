"""Regret of an online pAUC learner on a window of events, after Kar et al. (2014) §2-3.

Definitions (notes 002 §2; all on one bounded window of ``T`` labelled events in arrival order)
---------------------------------------------------------------------------------------------
* ``l(x_{1:t}, w)``: the pAUC hinge surrogate of the prefix, Kar et al. eq. (5) with the hinge —
  the sum over (positive, top-``ceil(beta t_-)`` negative) pairs of ``max(0, 1 - w.(x_i - x_j))``
  (for ``alpha > 0`` the tight surrogate of Narasimhan & Agarwal eq. (18)), **unnormalised**, so
  that the thresholds grow with the prefix as in the paper.
* Online penalty of round ``b`` (eq. (6), batched form of §3.2): the learner serves ``w_b`` while
  the events ``Z_b = x_{e_{b-1}+1 .. e_b}`` arrive (``w_b`` = the model *before* it learns
  ``Z_b``: prequential), and pays
  ``L_b(w_b) = l(x_{1:e_b}, w_b) - l(x_{1:e_{b-1}}, w_b)``.  One event per round is the plain
  model; a learner that changes its weights once per buffer needs only those rounds.
* Comparator: ``w*`` from :func:`core.learners.svm_pauc.solve_svm_pauc` on the window with
  weight ``C``.  [CHOICE] The paper's ``min_{w in W}`` needs a bounded ``W`` (unconstrained,
  the hinge loss of separable data goes to 0); by Lagrange duality the SVM solution ``w_C``
  minimises ``l(x_{1:T}, .)`` over the ball ``||w|| <= ||w_C||``, so this *is* the best fixed
  model in hindsight over that ball (up to the solver's ``tol``).
* ``regret = (sum_b L_b(w_b) - l(x_{1:T}, w*)) / (T_+ (j_beta - j_alpha))``: the paper's
  Theorem 3 normalisation (per pair counted by pAUC; ``j_beta = ceil(beta T_-)``), so it is
  comparable across windows and tends to 0 as ``O(sqrt(1/T_+ + 1/T_-))`` for FTRL.
  ``regret_per_event`` is the paper's ``R(T)``: the same difference divided by ``T``.
* Metric gap: ``pauc(y, X w*) - pauc(y, prequential scores)`` with :func:`core.metrics.pauc`
  (trapezoid, ties 1/2), where the prequential score of an event is its pre-update score.

Telescoping: for one fixed ``w`` the penalties sum to ``l(x_{1:T}, w)``, whatever the order of
the rounds' boundaries — the property that makes ``w*`` the batch optimum (notes 002 §2).

For a service: :class:`RegretWindow` keeps the last N events of a stream with their rounds
(what a round is there, and what that implies for learners that step inside a batch, is written
in its docstring), serialises like :class:`core.metrics.PrequentialWindow`, and
:meth:`RegretWindow.report` is :func:`regret` on its content.  Cost of a report on ``T`` events
in ``R`` rounds: ``O(R T d)`` BLAS + ``O(R T)`` for the penalties, plus one ``svm_pauc`` solve.
"""

from core.regret.report import RegretReport, online_penalties, prefix_loss, regret, replay
from core.regret.window import RegretWindow, learner_inputs

__all__ = [
    "RegretReport",
    "RegretWindow",
    "learner_inputs",
    "online_penalties",
    "prefix_loss",
    "regret",
    "replay",
]
