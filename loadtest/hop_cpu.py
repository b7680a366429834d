"""CPU of the coalescer's hop from the event loop to a thread and back: ``run_in_executor``
over a ``ThreadPoolExecutor`` against :class:`service.engine.handoff.Handoff`.

    python -m loadtest.hop_cpu --calls 4000 --rounds 3

The call blocks ``--block-ms`` (1 ms, as an fsync does), so that each hop wakes a sleeping
thread and the loop, as a request's does.  CPU is the process's (both threads), per call;
the two alternate in each round on one uvloop loop.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import uvloop

from service.engine.handoff import Handoff


async def _measure(args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    executor, handoff = ThreadPoolExecutor(32), Handoff(32, "hop")

    def blocking() -> int:
        time.sleep(args.block_ms / 1e3)
        return 1

    async def via_executor() -> None:
        await loop.run_in_executor(executor, blocking)

    async def via_handoff() -> None:
        await handoff.submit(blocking)

    for _ in range(100):
        await via_executor()
        await via_handoff()
    for round_number in range(args.rounds):
        for name, hop in (("executor", via_executor), ("handoff", via_handoff)):
            cpu = time.process_time()
            for _ in range(args.calls):
                await hop()
            cpu = (time.process_time() - cpu) / args.calls * 1e6
            print(f"round {round_number}  {name:<9} {cpu:6.1f} us of CPU per call")
    executor.shutdown()
    handoff.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--block-ms", type=float, default=1.0)
    args = parser.parse_args()
    print("load average at start:", open("/proc/loadavg").read().strip())
    uvloop.run(_measure(args))
    print("load average at end:", open("/proc/loadavg").read().strip())


if __name__ == "__main__":
    main()
