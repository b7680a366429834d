"""The process that fits boosted ensembles for :mod:`service.engine.refit`: a child at a lower
priority, so a fit competes with the requests for neither the interpreter lock nor the CPU.
Jobs and results cross a pipe as length-prefixed ``.npz`` archives (``allow_pickle=False``).
The child runs :func:`main`, started with ``-c`` (``-m`` would import this module twice).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import typing
from typing import IO, Any

import numpy as np

from core.boosted_trees import EnsembleParams, fit_with_leaves

__all__ = ["FitProcess"]

#: the fit's parameters, each sent as a one-element array and read back as its declared type
_PARAMS = typing.get_type_hints(EnsembleParams)
#: the child's niceness: requests first, fits with the CPU left over
NICENESS = 10
#: the answer's array of the fitted rows' leaves, beside the ensemble's
ROW_LEAVES = "row_leaves"
_CHILD = "from service.engine.fit_process import main; raise SystemExit(main())"


def _send(stream: IO[bytes], arrays: dict[str, Any]) -> None:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    payload = buffer.getvalue()
    stream.write(len(payload).to_bytes(8, "little") + payload)
    stream.flush()


def _receive(stream: IO[bytes]) -> dict[str, np.ndarray] | None:
    header = stream.read(8)
    if len(header) < 8:
        return None
    payload = stream.read(int.from_bytes(header, "little"))
    with np.load(io.BytesIO(payload), allow_pickle=False) as archive:
        return {key: archive[key] for key in archive.files}


class FitProcess:
    """A child process fitting ensembles one at a time (:meth:`fit`), started on first use and
    again if it died; thread-safe (one fit at a time)."""

    def __init__(self) -> None:
        self._process: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def _start(self) -> subprocess.Popen:
        if self._process is None or self._process.poll() is not None:
            self._process = subprocess.Popen(
                [sys.executable, "-c", _CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE
            )
        return self._process

    def fit(
        self,
        X: np.ndarray,
        y: np.ndarray,
        params: EnsembleParams,
        sample_weight: np.ndarray | None = None,
    ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """The ensemble's arrays and the rows' leaves, as
        :func:`core.boosted_trees.fit_with_leaves` gives them."""
        job = {"X": X, "y": y}
        if sample_weight is not None:
            job["sample_weight"] = sample_weight
        job.update({name: np.array([getattr(params, name)]) for name in _PARAMS})
        with self._lock:
            process = self._start()
            assert process.stdin is not None and process.stdout is not None
            try:
                _send(process.stdin, job)
                result = _receive(process.stdout)
            except (BrokenPipeError, ValueError, OSError):
                result = None
            if result is None:
                self.close()
                raise RuntimeError("the fitting process ended without an answer")
        if "error" in result:
            raise ValueError(bytes(result["error"]).decode())
        row_leaves = result.pop(ROW_LEAVES)
        return result, row_leaves

    def close(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            if process.stdin is not None:
                process.stdin.close()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()


def set_niceness() -> None:
    """This process at ``NICENESS`` exactly: it inherits the starting thread's niceness (already
    ``NICENESS``), so a relative ``os.nice`` would add it twice; a process started lower keeps
    its own (raising needs privileges)."""
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if current < NICENESS:
        os.setpriority(os.PRIO_PROCESS, 0, NICENESS)


def main() -> int:
    set_niceness()
    reader, writer = sys.stdin.buffer, sys.stdout.buffer
    while (job := _receive(reader)) is not None:
        params = EnsembleParams(**{name: kind(job[name][0]) for name, kind in _PARAMS.items()})
        try:
            try:
                ensemble, row_leaves = fit_with_leaves(
                    job["X"], job["y"], params, job.get("sample_weight")
                )
                result = {**ensemble, ROW_LEAVES: row_leaves}
            except ValueError as error:
                result = {"error": np.frombuffer(str(error).encode(), dtype=np.uint8)}
            _send(writer, result)
        except BrokenPipeError:  # the service is gone (stopped or killed): so is the answer
            # what is left in the buffer would fail again when the interpreter flushes it
            os.dup2(os.open(os.devnull, os.O_WRONLY), writer.fileno())
            return 0
    return 0
