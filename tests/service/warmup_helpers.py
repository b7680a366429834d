"""The kernels' warm-up held at chosen groups, for the cold-start tests (test_cold_start.py)
and the dashboard's while the warm-up runs (test_dashboard_browser.py)."""

from __future__ import annotations

import threading

import core.warmup
import service.kernels


class WarmupPauses:
    """``compile_group`` holding before the groups given, each until released, on a fresh
    record of the groups run (another app of this process may have run them all)."""

    def __init__(self, monkeypatch, *groups: str) -> None:
        monkeypatch.setattr(service.kernels, "readiness", core.warmup.KernelReadiness())
        self.reached = {group: threading.Event() for group in groups}
        self.release = {group: threading.Event() for group in groups}
        self.order: list[str] = []
        real = service.kernels.compile_group

        def paused(group: str) -> float:
            self.order.append(group)
            if group in self.reached:
                self.reached[group].set()
                self.release[group].wait(60)
            return real(group)

        monkeypatch.setattr(service.kernels, "compile_group", paused)
