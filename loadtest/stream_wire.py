"""The stream's replies of two checkouts on the same random frame mixes, byte for byte.

Each checkout runs :func:`drive` in a process of its own (its ``PYTHONPATH``): an app on the
memory store, models created over REST, then batches of random frames (binary and JSON, one
event or many per message, ids or none, duplicates, every option, and refusals: malformed
frames, frames over each frame limit, wrong widths, bad labels, misplaced options, a sparse
model sent binary rows) pushed into a connection's queue and handled as the endpoint does
(``Connection.take`` then ``Session.handle``), so each batch is the same on both sides
whatever the timing.  The text frames each side would send are compared as bytes.  Queue
mode (202 replies) is not driven: it needs Redis.  ``--cost`` times the reply builders of each
checkout instead (:func:`cost`), the checkouts alternated.  Usage::

    python3 -m loadtest.stream_wire --peer before=/work/wt/B --peer after=/work/wt/G
    python3 -m loadtest.stream_wire --peer before=/work/wt/B --peer after=/work/wt/G --cost
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from collections import deque
from types import SimpleNamespace
from typing import Any

import numpy as np

DENSE = {"n_features": 4, "learner": "spam", "scaling": "none", "regret_window": 0}
SPARSE = {**DENSE, "feature_mode": "sparse"}


def _frames(rng: np.random.Generator, batch: int) -> list[str | bytes]:
    """One batch of random frames: runs of one layout (blocks) and anything else."""
    from service.stream.protocol import encode_binary, encode_binary_rows

    frames: list[str | bytes] = []
    seq = batch * 10_000
    for _ in range(int(rng.integers(1, 8))):
        seq += 100
        kind = int(rng.integers(0, 13))
        n = int(rng.integers(1, 30))
        X = np.round(rng.normal(size=(n, 4)), 3)
        y = rng.integers(0, 2, n)
        pool = int(rng.integers(5, 400))  # small pools repeat ids: duplicates, kept ids
        ids = [f"e{int(i)}" if rng.random() < 0.9 else None for i in rng.integers(0, pool, n)]
        keep = bool(rng.random() < 0.7)
        if kind == 0:  # one binary event per frame, one layout: a block
            op = "learn" if rng.random() < 0.6 else "score"
            with_ids = rng.random() < 0.5
            frames += [
                encode_binary(op, seq + i, X[i : i + 1], y[i : i + 1] if op == "learn" else None,
                              [f"e{int(rng.integers(0, pool))}"] if with_ids else None, keep=keep,
                              scores=op == "learn" and bool(rng.random() < 0.2),
                              probabilities=op == "score" and bool(rng.random() < 0.2))
                for i in range(n)
            ]  # fmt: skip
        elif kind == 1:  # many messages a frame
            op = "learn" if rng.random() < 0.5 else "score"
            labels, row_ids = y if op == "learn" else None, ids if rng.random() < 0.5 else None
            frames.append(encode_binary_rows(op, seq, X, labels, row_ids, keep=keep))
        elif kind == 2:  # labels, binary
            label_ids = [i or "none" for i in ids]
            frames.append(encode_binary("label", seq, None, y, label_ids))
        elif kind == 3:  # JSON inline messages, one event each (score: keep or not)
            op = "learn" if rng.random() < 0.5 else "score"
            options = {"y": int(y[0])} if op == "learn" else {"keep": False} if keep else {}
            frames.append(json.dumps([
                {"seq": seq + i if rng.random() < 0.8 else f"s{seq + i}", "op": op,
                 "x": X[i].tolist(), **options, **({"id": ids[i]} if ids[i] else {})}
                for i in range(n)
            ]))  # fmt: skip
        elif kind == 4:  # JSON score messages, options
            frames.append(json.dumps({
                "seq": seq, "op": "score", "keep": keep,
                "events": [{"x": X[i].tolist(), **({"id": ids[i]} if ids[i] else {})}
                           for i in range(n)],
                "probabilities": bool(rng.random() < 0.5),
                "reasons": int(rng.integers(0, 3)),
            }))  # fmt: skip
        elif kind == 5:  # JSON learn with pre-update scores
            frames.append(json.dumps({
                "seq": seq, "op": "learn", "scores": True,
                "events": [{"x": X[i].tolist(), "y": int(y[i]), "id": ids[i]} for i in range(n)],
            }))  # fmt: skip
        elif kind == 6:  # JSON labels
            frames.append(json.dumps({"seq": seq, "op": "label", "labels": [
                {"id": i or "nobody", "y": int(v)} for i, v in zip(ids, y, strict=True)
            ]}))  # fmt: skip
        elif kind == 7:  # a bad event in the middle of good ones (refused message by message)
            events = [{"seq": seq + i, "op": "learn", "x": X[i].tolist(), "y": int(y[i])}
                      for i in range(n)]  # fmt: skip
            bad = int(rng.integers(0, n))
            faults: list[dict[str, Any]] = [
                {"y": 7}, {"x": [1.0, 2.0]}, {"x": [1.0, "a", 2.0, 3.0]}, {"op": "jump"},
                {"seq": 1.5}, {"keep": "yes"}, {"scores": True, "op": "score"},
            ]  # fmt: skip
            events[bad] = {**events[bad], **faults[int(rng.integers(0, len(faults)))]}
            frames.append(json.dumps(events))
        elif kind == 8:  # malformed frames
            malformed = ["not json", "[]", "{}", "[1, 2]", '{"op": "learn", "events": []}']
            frames.append(malformed[int(rng.integers(0, 5))])
        elif kind == 9:  # a corrupted or short binary frame
            frame = encode_binary_rows("learn", seq, X, y, None)
            cut = int(rng.integers(1, len(frame)))
            frames.append(frame[:cut] if rng.random() < 0.5 else b"\x00" + frame[1:])
        elif kind == 10 and rng.random() < 0.5:  # binary messages of three events: blocks
            op = "learn" if rng.random() < 0.5 else "score"
            frames += [
                encode_binary(op, seq + i, X[i : i + 3], y[i : i + 3] if op == "learn" else None,
                              keep=keep)
                for i in range(n)
            ]  # fmt: skip
        elif kind == 10:  # binary of the wrong width
            frames.append(encode_binary("learn", seq, np.ones((n, 3)), y))
        elif kind == 11:  # binary learn with scores and repeated ids
            frames.append(encode_binary("learn", seq, X, y, ids, scores=True))
        else:  # over a frame limit (bytes, messages, events: see drive's settings)
            oversized: list[str | bytes] = [
                encode_binary("score", seq, np.ones((1200, 4))),
                encode_binary_rows("score", seq, np.ones((70, 4)), None),
                json.dumps({"seq": seq, "op": "score", "events": [{"x": [1, 2, 3, 4]}] * 600}),
            ]
            frames.append(oversized[int(rng.integers(0, 3))])
    return frames


def drive(seed: int, batches: int) -> str:
    """The text frames of ``batches`` batches on this checkout, one a line."""
    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.settings import Settings
    from service.stream.endpoint import Connection
    from service.stream.session import Session

    settings = Settings(
        warmup=False, store="memory", history_catch_up_seconds=3600.0,
        ws_max_frame_bytes=30_000, ws_max_frame_messages=64, ws_max_frame_events=500,
    )  # fmt: skip
    rng = np.random.default_rng(seed)
    out: list[str] = []
    with TestClient(create_app(settings)) as client:
        for model_id, body in (("dense", DENSE), ("sparse", SPARSE)):
            assert client.post("/v1/models", json={"id": model_id, **body}).status_code == 201
        services = client.app.state.services  # type: ignore[attr-defined]

        async def batch(model_id: str, frames: list[str | bytes]) -> str:
            connection = Connection(None, Session(services, model_id), services)  # type: ignore[arg-type]
            connection.frames = deque(frames)
            connection.queued_bytes = sum(len(frame) for frame in frames)
            texts = []
            while connection.frames:
                texts.append(await connection.session.handle(await connection.take()))
            return "\n".join(texts)

        for k in range(batches):
            model_id = "sparse" if rng.random() < 0.1 else "dense"
            out.append(client.portal.call(batch, model_id, _frames(rng, k)))  # type: ignore[union-attr]
    return "\n".join(out) + "\n"


def cost(n: int = 2000) -> str:
    """CPU microseconds per message of a run's replies (the session's reply method, then the
    batch's text), on this checkout: JSON messages of one event (learn, score without ids)
    and one block of one-event binary messages (learn, score with ids kept); the mean of the
    best third of 30 tries."""
    from service.ingest import Batch
    from service.stream.blocks import Block
    from service.stream.protocol import Message
    from service.stream.session import Session

    counter = SimpleNamespace(inc=lambda *_: None)
    counter.labels = lambda *_: counter
    services = SimpleNamespace(
        telemetry=SimpleNamespace(stream_messages=counter, rejected=counter),
        settings=SimpleNamespace(max_batch_events=100_000),
    )
    rng = np.random.default_rng(0)
    X, values = rng.normal(size=(n, 4)), rng.normal(size=n)
    ids: list[str | None] = [f"e{i}" for i in range(n)]
    learned = SimpleNamespace(scores=values, version=7)
    scored = SimpleNamespace(scores=values, version=7, reasons=None, probabilities=None)
    cases = {
        "JSON learn": ("learn_replies", learned, False),
        "JSON score": ("score_replies", scored, False),
        "block learn": ("learn_replies", learned, True),
        "block score": ("score_replies", scored, True),
    }
    figures = []
    for name, (method, result, block) in cases.items():
        tries = []
        for _ in range(30):
            run: list[Any] = (
                [Block("x", np.arange(n, dtype=np.int64), 1, X, None, ids, True)] if block
                else [Message(i, "x", 1, events=[{}]) for i in range(n)]
            )  # fmt: skip
            session = Session(services, "m")  # type: ignore[arg-type]
            session.replies = {}
            start = time.process_time()
            getattr(session, method)(run, Batch(X, None, ids if block else None), result)
            session.written(run)
            tries.append(time.process_time() - start)
        figures.append(f"{name} {1e6 * sum(sorted(tries)[:10]) / 10 / n:.3f}")
    return ", ".join(figures)


def _run(checkout: str, seed: int, batches: int) -> str:
    # this file is run by path, the service imported from the checkout
    env = {**os.environ, "PYTHONPATH": checkout}
    mode = ["--cost"] if seed < 0 else ["--drive", str(seed), str(batches)]
    command = [sys.executable, os.path.abspath(__file__), *mode]
    done = subprocess.run(command, env=env, cwd=checkout, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{checkout} failed:\n{done.stderr[-4000:]}")
    return done.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peer", action="append", default=[], help="NAME=CHECKOUT (two)")
    parser.add_argument("--drive", type=int, nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--cost", action="store_true", help="time the reply builders instead")
    parser.add_argument("--rounds", type=int, default=3, help="--cost: rounds, peers alternated")
    args = parser.parse_args(argv)
    if args.drive:
        print(drive(*args.drive), end="")
        return 0
    peers = dict(peer.split("=", 1) for peer in args.peer)
    if args.cost and not peers:  # one checkout's figures (what the peers' runs call)
        print(cost())
        return 0
    if len(peers) != 2:
        parser.error("name two checkouts: --peer before=... --peer after=...")
    (a, path_a), (b, path_b) = peers.items()
    if args.cost:
        for round_ in range(args.rounds):
            for name, path in ((a, path_a), (b, path_b))[:: 1 if round_ % 2 == 0 else -1]:
                print(f"round {round_ + 1} {name}: {_run(path, -1, 0).strip()}", flush=True)
        return 0
    differ = 0
    for seed in args.seeds:
        texts: dict[str, Any] = {}
        for name, path in ((a, path_a), (b, path_b)):
            texts[name] = _run(path, seed, args.batches)
        lines = {name: text.splitlines() for name, text in texts.items()}
        same = texts[a] == texts[b]
        differ += not same
        digest = hashlib.sha256(texts[a].encode()).hexdigest()[:12]
        replies = sum(len(json.loads(line)) for line in lines[a] if line)
        print(f"seed {seed}: {len(lines[a])} frames, {replies} replies, {len(texts[a]):,} bytes,"
              f" {'identical' if same else 'DIFFERENT'} (sha256 {digest})")  # fmt: skip
        if not same:
            for line_a, line_b in zip(lines[a], lines[b], strict=False):
                if line_a != line_b:  # from a little before the first byte that differs
                    pairs = enumerate(zip(line_a, line_b, strict=False))
                    at = next((i for i, (x, y) in pairs if x != y), min(map(len, (line_a, line_b))))
                    at = max(0, at - 200)
                    print(f"  {a}: ...{line_a[at : at + 400]}\n  {b}: ...{line_b[at : at + 400]}")
                    break
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
