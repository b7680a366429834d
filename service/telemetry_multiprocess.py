"""The directories of prometheus_client's multiprocess metrics (``aucstream serve --workers N``):
one per server, removed once its server is gone, told by a lock it holds while it runs."""

from __future__ import annotations

import os
import time
from typing import Any

#: the prefix of the metrics directories ``aucstream serve`` makes in the temporary directory
MULTIPROCESS_DIR_PREFIX = "aucstream-prometheus-"
#: the file in such a directory its server holds a lock on for as long as it runs
_OWNER_LOCK = "owner.lock"
#: a directory without an owner lock (being made) is left alone until this old (seconds)
_UNOWNED_GRACE_SECONDS = 600


def make_multiprocess_dir(parent: str | None = None) -> tuple[str, Any]:
    """A new metrics directory in ``parent`` (stale ones removed first), and the open lock file
    its server holds until it exits (even ``kill -9`` releases it)."""
    import fcntl
    import tempfile

    parent = parent or tempfile.gettempdir()
    remove_stale_multiprocess_dirs(parent)
    path = tempfile.mkdtemp(prefix=MULTIPROCESS_DIR_PREFIX, dir=parent)
    owner = open(os.path.join(path, _OWNER_LOCK), "wb")  # noqa: SIM115 - held while serving
    fcntl.flock(owner, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return path, owner


def remove_stale_multiprocess_dirs(parent: str) -> list[str]:
    """Remove (and return) this user's metrics directories whose owner lock nobody holds."""
    import fcntl
    import shutil

    removed = []
    for entry in os.scandir(parent):
        try:
            if (
                not entry.name.startswith(MULTIPROCESS_DIR_PREFIX)
                or not entry.is_dir(follow_symlinks=False)
                or entry.stat(follow_symlinks=False).st_uid != os.getuid()
            ):
                continue
            lock = os.path.join(entry.path, _OWNER_LOCK)
            age = time.time() - entry.stat(follow_symlinks=False).st_mtime
            if not os.path.exists(lock):
                if age < _UNOWNED_GRACE_SECONDS:
                    continue
            else:
                with open(lock, "rb") as handle:
                    try:
                        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:  # its server is running
                        continue
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
        except OSError:  # gone meanwhile, or not ours to read: leave it
            continue
    return removed


def reset_multiprocess_dir(path: str) -> None:
    """Empty ``PROMETHEUS_MULTIPROC_DIR`` of a previous run's values (they would be summed)."""
    os.makedirs(path, exist_ok=True)
    for name in os.listdir(path):
        if name.endswith(".db"):
            os.remove(os.path.join(path, name))
