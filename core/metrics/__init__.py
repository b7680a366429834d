"""Exact ROC metrics: AUC, partial AUC, the ROC curve (:mod:`core.metrics.ranking`), operating
points and average precision (:mod:`core.metrics.operating`), and a prequential window
(:mod:`core.metrics.window`).

Conventions shared by every function here:

* Labels are {0, 1}, {-1, +1} or bool (:func:`core.validation.as_labels`); 1 / +1 / True is the
  positive class.  Scores are finite real numbers; a higher score means "more positive".
* Ties count one half: the ROC curve goes *diagonally* across a group of tied scores (the
  trapezoid rule), exactly as :func:`sklearn.metrics.roc_auc_score` does.
* A metric that needs both classes returns NaN and emits :class:`UndefinedMetricWarning` when one
  class is missing; it never raises, so a stream keeps flowing.  Invalid input (NaN or infinite
  scores, lengths that differ, a bad FPR range) raises ValueError naming the problem.

The count-based pAUC definitions of the papers (:func:`pauc_narasimhan_agarwal`,
:func:`pauc_kar_top_negatives`) round the FPR range outwards to whole negatives and are there to
reproduce the papers' tables; :func:`pauc` is the exact area.  See
docs/algorithms/metrics.md (metrics.5)-(metrics.6).

Decisions ([CHOICE]) a user may want to know:

* ``pauc(standardized=True)`` with alpha > 0 generalises McClish with the diagonal's area over
  [alpha, beta] as the minimum and beta - alpha as the maximum (sklearn has no alpha).
* ``roc_curve`` keeps every distinct threshold (sklearn's ``drop_intermediate=False``).
* Count-based pAUCs follow each paper literally: Narasimhan & Agarwal count a tie as an error
  (">"), Kar et al. as correct (">=").  ``n * beta`` within a few ulps of an integer is taken as
  that integer before floor / ceil, so ``beta = 0.3`` with 10 negatives takes 3, not 4.
* :class:`PrequentialWindow` places a batch's pairs in the ring slots they would have had one
  event at a time, so its state never depends on how the stream was cut into batches.
"""

# the batch metrics are re-exported whole (ranking.__all__), the window by name
from core.metrics import operating, ranking
from core.metrics.operating import *  # noqa: F403
from core.metrics.ranking import *  # noqa: F403
from core.metrics.window import PrequentialWindow

__all__ = ["PrequentialWindow", *ranking.__all__, *operating.__all__]
