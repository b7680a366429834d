"""The numba kernels of a service process: the warm-up, group by group, the default path first,
and the 503 ``warming-up`` of requests whose kernels are not ready (a request never compiles:
it would hold the event loop).  docs/operations.md, "Compiling the kernels"."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import gc
import hashlib
import logging
import math
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

import core
from core._kernels._config import drop_stale_cache
from core.warmup import READY_GROUPS, compile_group, groups_for, kernel_groups, readiness
from service.errors import WarmingUp

logger = logging.getLogger("aucstream")


def cache_location() -> str:
    """Where numba's cache lives: ``NUMBA_CACHE_DIR``, else next to the sources."""
    return os.environ.get("NUMBA_CACHE_DIR") or os.path.join(
        os.path.dirname(core.__file__), "__pycache__"
    )


@functools.cache
def cache_stamp() -> str:
    """Changes whenever numba's cache key may have: sources, numba, cache place, CPU."""
    import numba

    digest = hashlib.sha256(
        f"{numba.__version__} {cache_location()} {os.environ.get('NUMBA_CPU_NAME')}".encode()
    )
    for path in sorted(Path(core.__file__).parent.rglob("*.py")):
        digest.update(f"{path} {path.stat().st_mtime_ns}".encode())
    return digest.hexdigest()


@contextlib.contextmanager
def group_lock(group: str) -> Iterator[None]:
    """Around the run of ``group``: until it has run into this cache (its lock file holds
    :func:`cache_stamp`), under a file lock, so that one of the processes sharing the cache
    compiles it while the others wait, then load it."""
    digest = hashlib.sha256(cache_location().encode()).hexdigest()[:16]
    path = os.path.join(tempfile.gettempdir(), f"aucstream-kernels-{digest}-{group}.lock")
    try:
        handle = open(path, "a+b")  # noqa: SIM115 - closed below, which releases the lock
    except OSError:
        yield
        return
    with handle:
        stamp = cache_stamp().encode()
        handle.seek(0)
        if handle.read() == stamp:
            yield
            return
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
        handle.truncate(0)
        handle.write(stamp)
        handle.flush()


#: the niceness the warm-up thread takes once the service is ready (Linux: per thread), so
#: that the rest of the warm-up gives way to the requests and the other workers' start
BACKGROUND_NICENESS = 10


def progress_bar_stream(log_format: str, workers: int) -> TextIO | None:
    """Where the warm-up draws its progress bar: stderr when it is a terminal, the log is text
    and one process writes to it; else None (no bar)."""
    if log_format == "json" or workers > 1 or not sys.stderr.isatty():
        return None
    return sys.stderr


def _progress_text(progress: dict[str, Any], ready: bool) -> str:
    """ "3 of 17 groups, 58 s so far; ready in ~12 s, every group in ~240 s"."""
    to_all = f"every group in ~{progress['seconds_to_all']:.0f} s"
    return (
        f"{progress['groups_done']} of {progress['groups_total']} groups, "
        f"{progress['elapsed_seconds']:.0f} s so far; "
        + (to_all if ready else f"ready in ~{progress['seconds_to_ready']:.0f} s, {to_all}")
    )


def warm_up(ready: threading.Event | None = None, bar_stream: TextIO | None = None) -> None:
    """Run every kernel group in this process, logging the progress (and drawing it on
    ``bar_stream``); set ``ready`` once :data:`~core.warmup.READY_GROUPS` have run."""
    drop_stale_cache()  # before the first kernel call reads numba's cache index
    readiness.plan(kernel_groups())
    cpu = os.environ.get("NUMBA_CPU_NAME") or "host"
    logger.info(
        "compiling or loading the numba kernels: %d groups, %s first (cache: %s, cpu: %s); "
        "ready in ~%.0f s if they all compile",
        readiness.total, ", ".join(READY_GROUPS), cache_location(), cpu,
        readiness.progress()["seconds_to_ready"],
    )  # fmt: skip
    bar = tqdm(total=readiness.total, desc="numba kernels", unit="group", file=bar_stream,
               disable=bar_stream is None, dynamic_ncols=True)  # fmt: skip
    console = [logging.getLogger(), logger]  # their lines are written above the bar
    with (
        bar,
        logging_redirect_tqdm(console) if bar_stream is not None else contextlib.nullcontext(),
    ):
        _run_groups(ready, bar)
    gc.freeze()  # the collector no longer walks numba's millions of objects


def _run_groups(ready: threading.Event | None, bar: tqdm) -> None:
    started = time.perf_counter()
    while (group := readiness.next_group()) is not None:
        logger.info(
            "compiling or loading the kernels of %s (group %d of %d)",
            group, readiness.done + 1, readiness.total,
        )  # fmt: skip
        bar.set_postfix_str(group)
        try:
            with group_lock(group):
                compile_group(group)
        except Exception:  # its kernels then compile on first use: slower, still correct
            logger.exception("the warm-up of the kernels of %s failed", group)
        finally:
            readiness.finished(group)
        seconds = readiness.seconds.get(group, 0.0)
        progress = readiness.progress()
        is_ready = ready is None or ready.is_set() or not readiness.missing(READY_GROUPS)
        logger.info(
            "kernels of %s ready in %.2f s (%s)",
            group, seconds, _progress_text(progress, is_ready),
            extra={"fields": {"kernels": group, "seconds": round(seconds, 3),
                              "done": progress["groups_done"], "total": progress["groups_total"],
                              "elapsed_seconds": progress["elapsed_seconds"],
                              "seconds_to_ready": progress["seconds_to_ready"],
                              "seconds_to_all": progress["seconds_to_all"]}},
        )  # fmt: skip
        bar.update(1)
        if ready is not None and not ready.is_set() and is_ready:
            elapsed = time.perf_counter() - started
            logger.info(
                "ready after %.1f s: the kernels of the default path, the metrics and the "
                "regret window; the other %d groups follow in the background (~%.0f s)",
                elapsed, readiness.total - readiness.done, progress["seconds_to_all"],
                extra={"fields": {"kernels": "ready", "seconds": round(elapsed, 3)}},
            )  # fmt: skip
            gc.freeze()
            ready.set()
            with contextlib.suppress(OSError, AttributeError):
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICENESS)
    total = time.perf_counter() - started
    logger.info(
        "all kernels ready in %.1f s", total, extra={"fields": {"kernels": "all", "seconds": total}}
    )


#: bounds of the ``Retry-After`` of a ``warming-up`` problem (an estimate can be long and wrong)
RETRY_AFTER_BOUNDS = (1, 30)


def retry_after(seconds: float) -> str:
    low, high = RETRY_AFTER_BOUNDS
    return str(min(max(math.ceil(seconds), low), high))


def warming_up() -> WarmingUp:
    """The 503 ``warming-up`` of a ``/v1`` request before the service is ready."""
    progress = readiness.progress()
    return WarmingUp(
        f"the kernels of the default path are still being compiled or loaded "
        f"({_progress_text(progress, ready=False)}); retry when /readyz is 200",
        warmup=progress,
        headers={"Retry-After": retry_after(progress["seconds_to_ready"])},
    )


def require_kernels(
    learner: str, params: Mapping[str, Any], scaling: str, n_features: int | None = None
) -> None:
    """503 ``warming-up`` naming the kernel groups a model of ``learner`` needs that this
    process has not compiled yet."""
    missing = readiness.missing(groups_for(learner, params, scaling, n_features))
    if missing:
        groups = ", ".join(repr(name) for name in missing)
        wait = retry_after(readiness.progress(missing)["seconds_to_ready"])
        raise WarmingUp(
            f"the kernels of {groups} (learner {learner!r}) are still being compiled or loaded "
            f"in the background; retry in {wait} s",
            warmup=readiness.progress(),
            headers={"Retry-After": wait},
        )
