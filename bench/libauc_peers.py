"""LibAUC's linear pAUC learners as peers in ``bench/quality.py`` (optional: torch + libauc).

``pAUC_CVaR_Loss`` with ``SOPA`` and ``pAUC_DRO_Loss`` with ``SOPAs`` (Zhu et al., ICML 2022),
on a linear scorer ``sigmoid(w.x + b)`` (LibAUC's losses expect scores in [0, 1]), trained the way
LibAUC trains: mini-batches from a dual sampler (``libauc.sampler.DualSampler`` with
``sampling_rate = 0.5``: half of each batch positives drawn round-robin, half negatives, one
epoch = one pass over the negatives), Adam mode, the library's default hyper-parameters apart from
``beta = 0.1`` (the benchmark's pAUC range) and ``lr = 1e-2`` (1e-3, LibAUC's deep-net default,
barely moves a linear model in one epoch).  ``epochs`` = passes, to compare at equal passes.
Only ``libauc.losses`` and ``libauc.optimizers`` are used, so install with::

    pip install torch==2.13.0            # CPU
    pip install --no-deps libauc==2.0.1  # its declared dependencies (torchvision,
                                         # transformers, torch_geometric, ...) are not needed

Without them ``bench/quality.py`` simply has no LibAUC rows.
"""

from __future__ import annotations

import numpy as np


def available() -> bool:
    try:
        import libauc.losses  # noqa: F401
        import libauc.optimizers  # noqa: F401
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


class LibAUCLinear:
    """sklearn-style ``fit`` / ``decision_function`` over a LibAUC loss and optimizer."""

    def __init__(self, loss="cvar", epochs=1, batch_size=64, lr=1e-2, beta=0.1, seed=0):
        self.loss, self.epochs, self.batch_size = loss, epochs, batch_size
        self.lr, self.beta, self.seed = lr, beta, seed

    def fit(self, X, y):
        import torch
        from libauc.losses import pAUC_CVaR_Loss, pAUC_DRO_Loss
        from libauc.optimizers import SOPA, SOPAs

        torch.manual_seed(self.seed)
        rng = np.random.default_rng(self.seed)
        X = torch.as_tensor(np.asarray(X, dtype=np.float32))
        y = np.asarray(y).astype(np.int64)
        positives, negatives = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
        self.model = torch.nn.Linear(X.shape[1], 1)
        params = self.model.parameters()
        if self.loss == "cvar":
            loss_fn = pAUC_CVaR_Loss(data_len=len(y), pos_len=len(positives), beta=self.beta)
            optimizer = SOPA(params, mode="adam", lr=self.lr)
        else:
            loss_fn = pAUC_DRO_Loss(data_len=len(y))
            optimizer = SOPAs(params, mode="adam", lr=self.lr, verbose=False)
        labels = torch.as_tensor(y, dtype=torch.float32)
        half = self.batch_size // 2
        cursor = 0
        pos_order = rng.permutation(positives)
        for _ in range(self.epochs):
            neg_order = rng.permutation(negatives)
            for start in range(0, len(negatives), half):
                take = np.arange(cursor, cursor + half) % len(pos_order)
                cursor += half
                index = np.concatenate([pos_order[take], neg_order[start : start + half]])
                batch = torch.as_tensor(index)
                scores = torch.sigmoid(self.model(X[batch]))
                loss = loss_fn(scores, labels[batch], index=batch)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        return self

    def decision_function(self, X):
        import torch

        with torch.no_grad():
            scores = self.model(torch.as_tensor(np.asarray(X, dtype=np.float32)))
        return scores.numpy().ravel().astype(np.float64)


def peers() -> dict:
    """``LEARNERS`` entries for bench/quality.py: kind "batch" (fit, then held-out metrics)."""

    def spec(loss, epochs):
        return {"kind": "batch", "make": lambda seed, **extra: LibAUCLinear(
            loss=loss, epochs=epochs, seed=seed, **extra)}  # fmt: skip

    return {
        "sopa1": spec("cvar", 1),
        "sopa10": spec("cvar", 10),
        "sopas1": spec("dro", 1),
        "sopas10": spec("dro", 10),
    }
