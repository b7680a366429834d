"""A screenshot of the live dashboard (``docs/dashboard.png``, shown in docs/dashboard.md).

Run (needs Debian's ``chromium`` and ``chromium-driver``; loopback only, about a minute)::

    python -m loadtest.screenshot                      # writes docs/dashboard.png
    python -m loadtest.screenshot --out /tmp/d.png --batches 40

It starts the app under uvicorn (memory store) on a free port, creates an ``auto`` model of
card transactions (``loadtest.fraud.Transactions``: 2 % fraud, the amount in currency units),
opens the dashboard in the system's headless Chromium, then posts ``--batches`` labelled NPZ
batches of ``--batch-events`` events, one every ``--pause`` seconds, so that the page's
history charts fill from the metrics stream (the fraud pattern changes at ``--change-at``, so
the time charts mark a drift), and finally screenshots the whole page.
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import time
from pathlib import Path

import httpx
import numpy as np

from loadtest.browser import console_errors, headless_chromium
from loadtest.fraud import Transactions
from loadtest.local import free_port, start_uvicorn, stop, wait_ready

ROOT = Path(__file__).resolve().parents[1]
MODEL = "card-fraud"
WIDTH = 1400


def npz(X: np.ndarray, y: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, X=X, y=y)
    return buffer.getvalue()


def wait_for_page(driver, condition: str, timeout: float = 60.0) -> None:
    """Until the JavaScript expression ``condition`` is true in the page."""
    deadline = time.monotonic() + timeout
    while not driver.execute_script(f"return Boolean({condition});"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the dashboard did not reach: {condition}")
        time.sleep(0.2)


def capture(url: str, out: Path, args: argparse.Namespace) -> None:
    source = Transactions(n_features=args.features, fraud_rate=0.02, seed=args.seed)
    with httpx.Client(base_url=url, timeout=300) as http:
        created = http.post("/v1/models", json={"id": MODEL, "n_features": args.features})
        created.raise_for_status()
        post = {"headers": {"content-type": "application/x-npz"}}
        http.post(f"/v1/models/{MODEL}/events", content=npz(*source.draw(2_000)), **post)
        with headless_chromium(width=WIDTH, height=1000) as driver:
            driver.get(f"{url}/#/models/{MODEL}")
            wait_for_page(driver, "document.getElementById('roc-chart').dataset.points")
            for batch in range(args.batches):
                if batch == args.change_at:
                    source.adapt()  # the fraud pattern changes: the charts mark the drift
                learned = http.post(
                    f"/v1/models/{MODEL}/events",
                    content=npz(*source.draw(args.batch_events)),
                    **post,
                )
                learned.raise_for_status()
                time.sleep(args.pause)
            version = learned.json()["version"]
            wait_for_page(
                driver, f"document.getElementById('roc-chart').dataset.version === '{version}'"
            )
            time.sleep(1.0)  # the last stream message and redraw
            for _ in range(3):  # the whole page: resize until nothing is left below the fold
                inner, height = driver.execute_script(
                    "return [innerHeight, document.documentElement.scrollHeight];"
                )
                if height <= inner:
                    break
                size = driver.get_window_size()
                driver.set_window_size(WIDTH, size["height"] + height - inner)
                time.sleep(0.5)
            errors = console_errors(driver)
            if errors:
                raise RuntimeError(f"the page logged errors: {errors}")
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(driver.get_screenshot_as_png())
    print(f"wrote {out} ({out.stat().st_size:,} bytes) after {args.batches} batches")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "dashboard.png",
                        help="where to write the PNG (default: docs/dashboard.png)")  # fmt: skip
    parser.add_argument("--batches", type=int, default=30, help="batches posted (default 30)")
    parser.add_argument("--batch-events", type=int, default=1_000,
                        help="events per batch (default 1000)")  # fmt: skip
    parser.add_argument("--pause", type=float, default=0.5,
                        help="seconds between batches (default 0.5)")  # fmt: skip
    parser.add_argument("--features", type=int, default=12, help="features (default 12)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--change-at", type=int, default=15,
        help="batch at which the fraud pattern changes, so a drift is marked (default 15; "
        "a number >= --batches for none)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if not 1 <= args.batches <= 1_000:
        parser.error("--batches must be within 1..1000")

    port = free_port()
    env = {**os.environ, "AUCSTREAM_STORE": "memory", "AUCSTREAM_STREAM_INTERVAL_SECONDS": "0.5"}
    process = start_uvicorn(port, env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, process, timeout=600)  # the warm-up compiles on an empty numba cache
        capture(url, args.out, args)
    finally:
        stop(process)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
