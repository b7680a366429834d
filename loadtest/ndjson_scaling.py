"""How NDJSON reading scales with the length of one line: a single event line of 10 MB and of
20 MB fed in 64 KiB chunks (as uvicorn delivers a body), through ``NDJSONReader`` and through
a naive line splitting (the pending tail joined to every chunk, then split)::

    python -m loadtest.ndjson_scaling            # --sizes-mb 10 20 --chunk-kib 64

Linear reading takes about twice as long for twice the line; the naive splitting about four
times (each chunk copied the whole pending line: quadratic).  CPU seconds of this process,
best of ``--repeats``; the decode of the line (orjson, linear) is included in both.
"""

from __future__ import annotations

import argparse
import time

import orjson

from service.ingest import FeatureSpec, NDJSONReader


class ConcatenatingReader:
    """The naive splitting: ``data = tail + chunk; tail = data.split()[-1]``."""

    def __init__(self) -> None:
        self.tail = b""
        self.lines: list[bytes] = []

    def feed(self, chunk: bytes) -> None:
        parts = (self.tail + chunk).split(b"\n")
        self.tail = parts.pop()
        self.lines.extend(parts)

    def finish(self) -> list:
        lines = [*self.lines, self.tail]
        return [orjson.loads(line) for line in lines if line.strip()]


def one_line_body(megabytes: float) -> tuple[bytes, int]:
    """One NDJSON event whose ``x`` makes the line ``megabytes`` long; (body, n_features)."""
    value = b"0.123456789012,"  # 15 bytes per feature
    n_features = int(megabytes * 1e6) // len(value)
    row = b"[" + (value * n_features)[:-1] + b"]"
    return b'{"y": 1, "x": ' + row + b"}\n", n_features


def chunks(body: bytes, size: int) -> list[bytes]:
    return [body[start : start + size] for start in range(0, len(body), size)]


def best_cpu(function, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        function()
        best = min(best, time.process_time() - started)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes-mb", type=float, nargs="+", default=[10.0, 20.0])
    parser.add_argument("--chunk-kib", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    rows = []
    for megabytes in args.sizes_mb:
        body, n_features = one_line_body(megabytes)
        pieces = chunks(body, args.chunk_kib * 1024)
        spec = FeatureSpec(n_features, "dense")

        def linear(pieces=pieces, spec=spec) -> None:
            reader = NDJSONReader(10)
            for piece in pieces:
                reader.feed(piece)
            assert len(reader.finish(spec, labelled=True)) == 1

        def concatenating(pieces=pieces) -> None:
            reader = ConcatenatingReader()
            for piece in pieces:
                reader.feed(piece)
            assert len(reader.finish()) == 1

        rows.append((megabytes, len(pieces), best_cpu(linear, args.repeats),
                     best_cpu(concatenating, args.repeats)))  # fmt: skip
    print(f"{'line MB':>8}  {'chunks':>6}  {'NDJSONReader s':>14}  {'tail+chunk split s':>18}")
    for megabytes, n_chunks, linear_s, concat_s in rows:
        print(f"{megabytes:8.1f}  {n_chunks:6d}  {linear_s:14.3f}  {concat_s:18.3f}")
    if len(rows) >= 2:
        (size0, _, linear0, concat0), (size1, _, linear1, concat1) = rows[0], rows[-1]
        print(
            f"\ntime ratio for {size1 / size0:g}x the line: NDJSONReader {linear1 / linear0:.2f}x, "
            f"tail+chunk split {concat1 / concat0:.2f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
