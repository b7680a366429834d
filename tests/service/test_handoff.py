"""The coalescer's hop to threads (service/engine/handoff.py): answers, errors, the bound on
threads, a waiter that went away, and closing."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from service.engine.handoff import Handoff


def test_each_call_gets_its_own_result_or_error_on_the_loop():
    handoff = Handoff(4, "test")

    def double(value: int) -> tuple[int, str]:
        return 2 * value, threading.current_thread().name

    def fail(message: str) -> None:
        raise KeyError(message)

    async def main():
        loop_thread = threading.current_thread().name
        results = await asyncio.gather(*(handoff.submit(double, k) for k in range(20)))
        assert [value for value, _ in results] == [2 * k for k in range(20)]
        assert all(name.startswith("test-") and name != loop_thread for _, name in results)
        with pytest.raises(KeyError, match="bad"):
            await handoff.submit(fail, "bad")
        value, _ = await handoff.submit(double, 5)  # the thread that raised serves on
        assert value == 10

    asyncio.run(main())
    handoff.close()


def test_threads_are_bounded_and_calls_beyond_the_bound_wait_their_turn():
    handoff = Handoff(2, "bounded")
    running, most = 0, 0
    guard = threading.Lock()

    def slow(value: int) -> int:
        nonlocal running, most
        with guard:
            running += 1
            most = max(most, running)
        time.sleep(0.02)
        with guard:
            running -= 1
        return value

    async def main():
        return await asyncio.gather(*(handoff.submit(slow, k) for k in range(8)))

    assert asyncio.run(main()) == list(range(8))
    assert most == 2
    assert len(handoff._threads) == 2  # noqa: SLF001
    handoff.close()
    for thread in handoff._threads:  # noqa: SLF001
        thread.join(timeout=60)
        assert not thread.is_alive()


def test_a_cancelled_waiter_leaves_the_thread_serving_the_next_call():
    handoff = Handoff(1, "cancel")
    started = threading.Event()

    def slow() -> str:
        started.set()
        time.sleep(0.05)
        return "late"

    async def main():
        waiter = asyncio.ensure_future(handoff.submit(slow))
        while not started.is_set():
            await asyncio.sleep(0.001)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        return await handoff.submit(lambda: "next")

    assert asyncio.run(main()) == "next"
    handoff.close()


def test_a_closed_handoff_refuses_calls():
    handoff = Handoff(1, "closed")
    handoff.close()

    async def main():
        await handoff.submit(lambda: None)

    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(main())
    with pytest.raises(ValueError, match="at least 1"):
        Handoff(0, "none")


def test_submit_settles_its_future_on_the_loop_for_callbacks_without_a_task():
    handoff = Handoff(2, "submit")

    def triple(value: int) -> int:
        return 3 * value

    def fail() -> None:
        raise KeyError("bad")

    async def main():
        loop_thread = threading.current_thread()
        seen: list[tuple[int | str, bool]] = []
        settled = asyncio.Event()

        def done(future: asyncio.Future) -> None:
            error = future.exception()
            value = repr(error) if error is not None else future.result()
            seen.append((value, threading.current_thread() is loop_thread))
            if len(seen) == 2:
                settled.set()

        for future in (handoff.submit(triple, 7), handoff.submit(fail)):
            future.add_done_callback(done)
        await asyncio.wait_for(settled.wait(), 30)
        return seen

    seen = asyncio.run(main())
    # each answer settled its future on the loop's thread, the error as the exception
    assert sorted(seen, key=repr) == [("KeyError('bad')", True), (21, True)]
    handoff.close()

    async def closed():
        handoff.submit(triple, 1)

    with pytest.raises(RuntimeError, match="closed"):  # at once, not through the future
        asyncio.run(closed())
