"""The fit status of a model's boosted trees in ``GET /v1/models/{id}`` and ``/metrics``."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field


class FitStatus(BaseModel):
    part: str = Field(
        description="the state prefix of the boosted part ('' for a boosted_embedded model, "
        "'learner:c2:' for auto's third candidate)"
    )
    fits: int = Field(description="ensembles installed (state)")
    events: int = Field(description="labelled events the part learned (state)")
    fit_delay: int = Field(
        description="the most events from a fit's buffer (event N) to its install point: "
        "L(N) = min(fit_delay, max(fit_delay // 8, N // 16))"
    )
    due: bool = Field(description="a fit fell due and is not installed yet (state)")
    due_from: int | None = Field(description="the event count N whose buffer it learns")
    install_at: int | None = Field(description="N + L(N): the install point")
    fitter: str | None = Field(
        description="this process's background fitter on the due fit: queued, running, done, "
        "failed, taken (taken back by the learner); null when it has none (a library-like "
        "install point computes it)"
    )
    last_fit_from: int | None = Field(description="the last installed fit's N (state)")
    last_fit_at: int | None = Field(description="the event count it was installed at (state)")
    last_fit_seconds: float | None = Field(
        description="seconds the last fit installed in this process took to compute (fit and "
        "relearning), wherever it ran"
    )
    waits: int = Field(
        description="install points in this process the fitter had not finished by (the "
        "request then computed the fit, or took the fitter's result if it came first)"
    )
    wait_seconds: float = Field(description="the seconds those install points waited")
    fits_in_call: int = Field(
        description="fits computed by the request at the install point in this process (the "
        "fitter not done in time, or no result handed in: a model loaded with a fit due)"
    )


#: the ``fits`` member of a model's info and metrics
Fits = Annotated[
    list[FitStatus] | None,
    Field(description="boosted trees' fit status; present for models with them"),
]
