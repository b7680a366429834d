"""The service's threads carry their names to the system (service/threadnames.py), and
loadtest/cpu_split.py reads a process's CPU by those names."""

from __future__ import annotations

import asyncio
import os
import threading
import time

from loadtest.cpu_split import split_cpu, tree_threads
from service.engine.handoff import Handoff
from service.engine.refit import Refitter
from service.threadnames import name_this_thread


def _comm(native_id: int) -> str:
    with open(f"/proc/self/task/{native_id}/comm") as handle:
        return handle.read().strip()


def test_a_thread_takes_its_python_name_without_the_prefix_within_15_bytes():
    seen: dict[str, str] = {}

    def run() -> None:
        name_this_thread()
        seen[threading.current_thread().name] = _comm(threading.get_native_id())

    for name in ("aucstream-checkpoints", "aucstream-a-very-long-thread-name", "other"):
        thread = threading.Thread(target=run, name=name)
        thread.start()
        thread.join()
    assert seen == {
        "aucstream-checkpoints": "checkpoints",
        "aucstream-a-very-long-thread-name": "a-very-long-thr",
        "other": "other",
    }


def test_the_hop_and_the_refitter_threads_are_named_and_split_by_name():
    handoff = Handoff(2, "aucstream-group")

    def busy() -> str:
        time.sleep(0.01)  # one sleep at least, counted as the thread's
        # this thread's CPU, not the process's: other tests' threads may run meanwhile
        deadline = time.thread_time() + 0.05
        while time.thread_time() < deadline:
            pass
        return _comm(threading.get_native_id())

    refitter = Refitter()
    refitter.start()
    try:
        before = tree_threads(os.getpid())

        async def main() -> str:
            return await handoff.submit(busy)

        assert asyncio.run(main()) == "group-0"
        after = tree_threads(os.getpid())
        deadline = time.monotonic() + 10  # the refitter's thread names itself once it runs
        while ("server", "refit (threads)") not in after and time.monotonic() < deadline:
            time.sleep(0.01)
            after = tree_threads(os.getpid())
        # at least: threads of earlier tests in this process may still be alive
        assert after["server", "refit (threads)"] >= 1
        assert after["server", "group (threads)"] >= 1
        split = split_cpu(before, after, 10)
        # 50 ms of the process's CPU in the hop's thread: 5 ms per "request" of ten (the
        # clock's ticks are 10 ms)
        assert split["server/group"] >= 3.0
        assert split["server/loop"] >= 0.0
        assert split["server/group sleeps"] >= 0.1  # its sleep, per "request" of ten
    finally:
        refitter.stop()
        handoff.close()


def test_a_thread_that_ends_between_samples_is_counted_once():
    go, named = threading.Event(), threading.Event()

    def run() -> None:
        name_this_thread()
        named.set()
        go.wait()
        deadline = time.thread_time() + 0.1
        while time.thread_time() < deadline:
            pass

    thread = threading.Thread(target=run, name="aucstream-brief")
    thread.start()
    named.wait()
    before, cpu = tree_threads(os.getpid()), time.process_time()
    go.set()
    thread.join()
    split, cpu = split_cpu(before, tree_threads(os.getpid()), 1), time.process_time() - cpu
    assert ("server", "brief") in before
    used = sum(value for part, value in split.items() if not part.endswith(("threads", "sleeps")))
    # the process's CPU meanwhile, the ended thread's 100 ms in it once (clock ticks apart)
    assert abs(used / 1e3 - cpu) < 0.035
    # as its name's while the system still lists it (a joined thread may linger), then as
    # (ended): once, either way
    assert split["server/brief"] + split["server/(ended)"] >= 70.0
