"""The service's threads named for the operating system (``/proc/<pid>/task/<tid>/comm``), so
that ``top -H``, ``py-spy`` and ``loadtest.cpu_split`` tell them apart: Python before 3.14
leaves every thread named as its process."""

from __future__ import annotations

import contextlib
import threading

#: the prefix of the service's thread names, left out of the system's 15 bytes
PREFIX = "aucstream-"


def name_this_thread() -> None:
    """Give the calling thread its Python name (less ``PREFIX``) as its system name.  Linux
    only; elsewhere, or refused, the thread keeps the name it had."""
    name = threading.current_thread().name.removeprefix(PREFIX)[:15]
    with contextlib.suppress(OSError):
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as handle:
            handle.write(name)
