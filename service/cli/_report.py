"""What ``aucstream replay`` prints: the model's metrics table and this run's figures."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class RunTally:
    """What this run did (not the model's totals): events sent, learned, skipped as already
    learned, queued (a queue-mode server), and the seconds spent reading and learning."""

    sent: int = 0
    learned: int = 0
    duplicates: int = 0
    queued: int = 0
    read_seconds: float = 0.0
    learn_seconds: float = 0.0

    def add(self, answer: dict[str, Any], n_events: int) -> None:
        """Count one batch from its answer (``LearnResponse`` or ``QueuedResponse``)."""
        self.sent += n_events
        if "queued" in answer:
            self.queued += int(answer["queued"])
        else:
            self.learned += int(answer["learned"])
            self.duplicates += int(answer["duplicates"])

    def summary(self) -> str:
        rate = self.sent / self.learn_seconds if self.learn_seconds > 0 else float("nan")
        done = (
            f"{self.queued:,} events queued (a queue-mode server: workers learn them)"
            if self.queued
            else f"{self.learned:,} events learned, {self.duplicates:,} already learned "
            "(skipped by id)"
        )
        return (
            f"this run: {self.sent:,} events sent, {done}, in {self.learn_seconds:.2f} s: "
            f"{rate:,.0f} events/s (file read in {self.read_seconds:.2f} s)"
        )


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def metrics_table(metrics: dict[str, Any]) -> str:
    """The window and since-start metrics of ``GET /v1/models/{id}/metrics`` as a table."""
    window, since = metrics["window"], metrics["since_start"]
    alpha, beta = metrics["alpha"], metrics["beta"]
    rows = [
        ("metric", "window", "since start"),
        ("events", window["events"], since["events"]),
        ("positives", window["positives"], since["positives"]),
        ("negatives", window["negatives"], since["negatives"]),
        ("AUC", window["auc"], since["auc"]),
        (f"pAUC [{alpha:g}, {beta:g}]", window["pauc"], since["pauc"]),
        ("pAUC (McClish)", window["pauc_standardized"], since["pauc_standardized"]),
    ]
    widths = [max(len(_cell(row[i])) for row in rows) for i in range(3)]
    lines = [
        "  ".join(_cell(cell).ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))  # under the header
    counts = metrics["counts"]
    lines.append("")
    lines.append(
        f"model {metrics['model']} ({metrics['learner']}), version {metrics['version']}: "
        f"{counts['events_learned']:,} events learned since its creation"
    )
    reason = window.get("reason") or since.get("reason")
    if reason:
        lines.append(f"note: {reason}")
    return "\n".join(lines)
