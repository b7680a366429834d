"""Where a server's CPU goes, process by process and thread by thread (``/proc``), and the
boosted fits it installed and the coalescer's groups meanwhile (``GET /metrics``): the split
``loadtest.log_path --split`` prints per phase.

A thread is named by its ``comm`` (the service names its own threads: ``refit``,
``checkpoints``, ``group-N``; service/threadnames.py), the server's main thread ``loop`` (the
event loop), any other thread still called as its process ``unnamed`` (the thread pool's, the
warm-up's).  Threads of one name less a ``-N`` suffix are summed.  A thread that ended between
two samples leaves its CPU in its process's total only: that rest is ``(ended)`` (its name's
figure goes down by what it had used at the first sample; the process's total and its
threads are read a few microseconds apart, so a figure may be off by a clock tick, 10 ms).
A process that ended between two samples (a fit child restarted) is not counted at all.
"""

from __future__ import annotations

import contextlib
import os
import re

import httpx

__all__ = ["COUNTERS", "FIT_STAGES", "fit_counters", "split_cpu", "tree_threads"]

_TICK = os.sysconf("SC_CLK_TCK")
_SUFFIX = re.compile(r"-\d+$")
#: the ``aucstream_boosted_fits`` stages read per phase (``patient``, ``raced``, ``race_lost``
#: and ``race_cpu_seconds``: core/boosted_fits.py's ``FitStats``, 0 while service/telemetry.py
#: does not export them), and the coalescer's groups (of one model: a pass each, one commit
#: and one wake-up of a group thread) and requests
FIT_STAGES = ("submitted", "fitted", "installed", "in_call", "waits", "wait_seconds", "patient",
              "raced", "race_lost", "race_cpu_seconds")  # fmt: skip
COUNTERS = (*FIT_STAGES, "groups", "requests")


def _stat(path: str) -> tuple[str, float]:
    """(comm, user + system seconds) of a ``stat`` file of ``/proc``."""
    with open(path) as handle:
        text = handle.read()
    head, _, tail = text.rpartition(")")
    fields = tail.split()
    return head.partition("(")[2], (int(fields[11]) + int(fields[12])) / _TICK


def _sleeps(path: str) -> int:
    """A thread's voluntary context switches (``status``): the times it slept, and so was
    woken again (a wait for a queue, a lock, the interpreter's lock, a sync, a socket)."""
    with open(path) as handle:
        for line in handle:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    return 0


def _process_label(pid: int, root: int) -> str:
    if pid == root:
        return "server"
    with open(f"/proc/{pid}/cmdline", "rb") as handle:
        command = handle.read().replace(b"\0", b" ").decode(errors="replace")
    return "fit child" if "fit_process" in command else f"child {pid}"


def tree_threads(root: int) -> dict[tuple[str, str], float]:
    """CPU seconds of ``root``'s process tree by (process, thread name); and by (process,
    ``"<name> (threads)"``) the count of live threads under each name, by (process,
    ``"<name> (sleeps)"``) their voluntary context switches so far."""
    seconds: dict[tuple[str, str], float] = {}
    pending = [root]
    while pending:
        pid = pending.pop()
        with contextlib.suppress(OSError):  # it ended meanwhile
            process = _process_label(pid, root)
            process_comm, total = _stat(f"/proc/{pid}/stat")
            live = 0.0
            for task in os.listdir(f"/proc/{pid}/task"):
                with contextlib.suppress(OSError):
                    comm, used = _stat(f"/proc/{pid}/task/{task}/stat")
                    sleeps = _sleeps(f"/proc/{pid}/task/{task}/status")
                    with open(f"/proc/{pid}/task/{task}/children") as handle:
                        pending.extend(int(child) for child in handle.read().split())
                    if int(task) == pid:
                        name = "loop" if pid == root else "main"
                    elif comm == process_comm:
                        name = "unnamed"
                    else:
                        name = _SUFFIX.sub("", comm)
                    seconds[process, name] = seconds.get((process, name), 0.0) + used
                    count = (process, name + " (threads)")
                    seconds[count] = seconds.get(count, 0) + 1
                    slept = (process, name + " (sleeps)")
                    seconds[slept] = seconds.get(slept, 0) + sleeps
                    live += used
            seconds[process, "(ended)"] = max(total - live, 0.0)
    return seconds


def split_cpu(
    before: dict[tuple[str, str], float], after: dict[tuple[str, str], float], requests: int
) -> dict[str, float]:
    """CPU ms per request by ``process/thread`` between two :func:`tree_threads` samples, the
    live threads of each name at the end (``process/thread threads``) and their sleeps per
    request (``process/thread sleeps``)."""
    split: dict[str, float] = {}
    for key, value in after.items():
        process, name = key
        if name.endswith(" (threads)"):
            split[f"{process}/{name.removesuffix(' (threads)')} threads"] = value
        elif name.endswith(" (sleeps)"):
            slept = value - before.get(key, 0)
            split[f"{process}/{name.removesuffix(' (sleeps)')} sleeps"] = slept / max(requests, 1)
        else:
            used = value - before.get(key, 0.0)
            split[f"{process}/{name}"] = used / max(requests, 1) * 1e3
    for (process, name), value in before.items():  # every thread of the name ended since:
        if (process, name) not in after and not name.endswith(")"):  # now in (ended)
            split[f"{process}/{name}"] = -value / max(requests, 1) * 1e3
    return split


def fit_counters(url: str) -> dict[str, float]:
    """The server's ``aucstream_boosted_fits`` counters by stage and its coalesced groups and
    requests (``GET /metrics``): :data:`COUNTERS`."""
    text = httpx.get(f"{url}/metrics", timeout=60).text
    counters = dict.fromkeys(COUNTERS, 0.0)
    for line in text.splitlines():
        labels, _, value = line.rpartition(" ")
        if labels.startswith("aucstream_boosted_fits{"):
            stage = labels.partition('stage="')[2].partition('"')[0]
            if stage in counters:
                counters[stage] = float(value)
        elif labels == "aucstream_boosted_fit_wait_seconds":
            counters["wait_seconds"] = float(value)
        elif labels in ("aucstream_coalesced_groups", "aucstream_coalesced_requests"):
            counters[labels.removeprefix("aucstream_coalesced_")] = float(value)
    return counters
