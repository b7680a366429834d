"""Does one WebSocket connection sending the largest frames hold the server?  ``/healthz``
latency, polled every 10 ms over a second connection, while one stream connection sends frames
back to back (each after the reply to the one before), through a real uvicorn::

    python -m loadtest.stream_stall                  # this checkout's service
    python -m loadtest.stream_stall --server-path /path/to/another/checkout   # e.g. before

Frames (a dense ``spam`` model of ``--features`` features, memory store, one uvicorn worker,
kernels compiled before: ``/readyz``):

``json 1,000 x 1``        the largest batch whose work stays on the event loop
                          (``service.offload.INLINE_EVENTS``), one event a message (JSON)
``json 4,096 x 1``        the most messages a frame may hold, one event each (JSON)
``json 4,000 x 5``        the most events a frame may carry (20,000), in 4,000 JSON messages
``json 1 x 20,000``       the same events in one JSON message
``binary 4,000 x 5``      20,000 events in 4,000 binary messages
``json 100,000 x 1``      a frame over the message limit (refused)

Prints, per kind of frame: frames sent, seconds per frame, the reply's size, how many
``/healthz`` answered meanwhile and their median, p99 and maximum latency, and how far the
server's resident memory rose above where it was (peak, reset before each kind).
"""

from __future__ import annotations

import os
import subprocess
import threading
import time

import numpy as np
import orjson

from loadtest.local import checkout_parser, checkout_server, create_model, latency_ms

MIB = 2**20


def json_frame(n_messages: int, events_each: int, n_features: int, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    messages = []
    for seq in range(n_messages):
        X = np.round(rng.normal(size=(events_each, n_features)), 6).tolist()
        y = rng.integers(0, 2, events_each).tolist()
        if events_each == 1:
            messages.append({"seq": seq, "op": "learn", "x": X[0], "y": y[0]})
        else:
            events = [{"x": row, "y": label} for row, label in zip(X, y, strict=True)]
            messages.append({"seq": seq, "op": "learn", "events": events})
    return orjson.dumps(messages).decode()


def binary_frame(n_messages: int, n_events: int, n_features: int) -> bytes:
    from service.stream.protocol import encode_binary

    rng = np.random.default_rng(1)
    sizes = np.full(n_messages, n_events // n_messages)
    sizes[: n_events % n_messages] += 1
    parts = []
    for seq, size in enumerate(sizes.tolist()):
        X = rng.normal(size=(size, n_features))
        parts.append(encode_binary("learn", seq, X, rng.integers(0, 2, size)))
    return b"".join(parts)


def rss(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(field)


def attack(url: str, model: str, frame: str | bytes | None, seconds: float, pid: int) -> dict:
    """Send ``frame`` again and again for ``seconds`` on one connection while polling
    /healthz; returns what the table prints."""
    import httpx
    from websockets.sync.client import connect

    address = url.replace("http://", "ws://") + f"/v1/models/{model}/stream"
    outcome: dict = {"frames": 0, "reply_bytes": 0, "statuses": set()}
    done = threading.Event()

    def run() -> None:
        if frame is None:  # nothing sent: the reference row
            time.sleep(seconds)
            outcome["seconds"] = 0.0
            done.set()
            return
        with connect(address, compression=None, max_size=None, open_timeout=60) as ws:
            deadline = time.perf_counter() + seconds
            started = time.perf_counter()
            while time.perf_counter() < deadline or outcome["frames"] == 0:
                ws.send(frame)
                reply = ws.recv(timeout=600)
                outcome["frames"] += 1
                outcome["reply_bytes"] = len(reply)
                outcome["statuses"] |= {item["status"] for item in orjson.loads(reply)}
            outcome["seconds"] = (time.perf_counter() - started) / outcome["frames"]
        done.set()

    with open(f"/proc/{pid}/clear_refs", "w") as clear:
        clear.write("5")  # the peak RSS restarts from the current
    before = rss(pid, "VmRSS")
    thread = threading.Thread(target=run)
    latencies = []
    with httpx.Client(base_url=url, timeout=300) as http:
        http.get("/healthz")
        thread.start()
        while not done.is_set() and thread.is_alive():
            started = time.perf_counter()
            http.get("/healthz")
            latencies.append(time.perf_counter() - started)
            time.sleep(0.01)
    thread.join()
    outcome["latencies"] = latencies
    outcome["rss_rise"] = rss(pid, "VmHWM") - before
    return outcome


def main(argv: list[str] | None = None) -> int:
    import httpx

    parser = checkout_parser(__doc__)
    parser.add_argument("--features", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=10.0, help="per kind of frame")
    args = parser.parse_args(argv)
    d = args.features
    one_event = json_frame(1, 1, d)
    frames = {
        "json 1,000 x 1": json_frame(1000, 1, d),
        "json 4,096 x 1": json_frame(4096, 1, d),
        "json 4,000 x 5": json_frame(4000, 5, d),
        "json 1 x 20,000": json_frame(1, 20_000, d),
        "binary 4,000 x 5": binary_frame(4000, 20_000, d),
        "json 100,000 x 1": json_frame(100_000, 1, d),
    }
    rows = []
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}
    with checkout_server(args.server_path, access_log=False, **quiet) as (url, process):
        # the reference: /healthz with nothing else going on (the machine's own noise)
        rows.append(("(no stream)", 0, attack(url, "", None, args.seconds, process.pid)))
        with httpx.Client(base_url=url, timeout=600) as http:
            for index, (name, frame) in enumerate(frames.items()):
                model = f"m{index}"
                body = {"id": model, "n_features": d, "learner": "spam", "scaling": "none"}
                create_model(http, body)
                # one small frame first: the connection's code paths are loaded
                attack(url, model, one_event, 0.0, process.pid)
                rows.append((name, len(frame), attack(url, model, frame, args.seconds,
                                                      process.pid)))  # fmt: skip
    print(f"server code: {args.server_path}   load: {os.getloadavg()[0]:.2f} (1 min)")
    print(f"{'frame':22s} {'MiB':>5} {'frames':>6} {'s/frame':>8} {'reply KiB':>9} "
          f"{'status':>7} {'healthz':>7} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} "
          f"{'RSS+ MiB':>8}")  # fmt: skip
    for name, size, out in rows:
        p50, p99, worst = latency_ms(out["latencies"])
        statuses = "/".join(str(status) for status in sorted(out["statuses"]))
        print(f"{name:22s} {size / MIB:5.1f} {out['frames']:6d} {out['seconds']:8.3f} "
              f"{out['reply_bytes'] / 1024:9.0f} {statuses:>7} {len(out['latencies']):7d} "
              f"{p50:7.1f} {p99:7.1f} {worst:7.1f} {out['rss_rise'] / MIB:8.0f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
