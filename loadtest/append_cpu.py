"""CPU of one durable append on this disk: the SQLite store's transaction against an
append-only file synced with one ``os.fdatasync`` per append (issue 36: would a log file,
checkpoints kept in SQLite, cost less CPU at the same durability?).

    python -m loadtest.append_cpu --appends 2000 --rounds 2

Each variant appends ``--appends`` entries of ``--entry-bytes`` one after another, alone (no
group commit), in a fresh directory under ``--dir`` (the data directory's disk):

``sqlite full``     the store's append: ``BEGIN IMMEDIATE``, the version checked by its update,
                    the entry's row, one event id, ``COMMIT`` (WAL, ``synchronous=FULL``, pages
                    of 1 KiB as the store's)
``sqlite normal``   the same with ``synchronous=NORMAL`` (no sync at commit: the statements)
``file growing``    ``write`` of the entry and its id at the end of a file, ``fdatasync``
``file prealloc``   the same into a file written with zeros and synced first (no size change)

CPU is user + system time of the appending thread (``RUSAGE_THREAD``), so the disk's own
latency (wall) is apart.  Prints one line per variant and round, and the load average.
"""

from __future__ import annotations

import argparse
import os
import resource
import sqlite3
import tempfile
import time
from collections.abc import Callable


def _thread_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_utime + usage.ru_stime


def _sqlite(directory: str, appends: int, entry: bytes, synchronous: str) -> None:
    db = sqlite3.connect(os.path.join(directory, "log.sqlite3"), isolation_level=None)
    db.execute("PRAGMA page_size=1024")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={synchronous}")
    db.execute("CREATE TABLE models (id TEXT PRIMARY KEY, version INTEGER)")
    db.execute(
        "CREATE TABLE log (model_id TEXT, version INTEGER, entry BLOB, "
        "PRIMARY KEY (model_id, version)) WITHOUT ROWID"
    )
    db.execute(
        "CREATE TABLE ids (model_id TEXT, event_id TEXT, expiry REAL, "
        "PRIMARY KEY (model_id, event_id)) WITHOUT ROWID"
    )
    db.execute("INSERT INTO models VALUES ('m', 0)")
    for version in range(1, appends + 1):
        db.execute("BEGIN IMMEDIATE")
        db.execute(
            "UPDATE models SET version = ? WHERE id = 'm' AND version = ?", (version, version - 1)
        )
        db.execute("INSERT INTO log VALUES ('m', ?, ?)", (version, entry))
        db.execute("INSERT OR IGNORE INTO ids VALUES ('m', ?, 1e12)", (f"e{version}",))
        db.execute("COMMIT")
    db.close()


def _file(directory: str, appends: int, entry: bytes, preallocate: bool) -> None:
    descriptor = os.open(os.path.join(directory, "log"), os.O_WRONLY | os.O_CREAT, 0o600)
    if preallocate:
        os.write(descriptor, bytes(appends * (len(entry) + 32) + 4096))
        os.fsync(descriptor)
        os.lseek(descriptor, 0, os.SEEK_SET)
    for version in range(1, appends + 1):
        os.write(descriptor, entry + f"e{version:>31}".encode())
        os.fdatasync(descriptor)
    os.close(descriptor)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--entry-bytes", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dir", default=None, help="where the files go (the data disk)")
    args = parser.parse_args()
    entry = os.urandom(args.entry_bytes)
    variants: dict[str, Callable[[str], None]] = {
        "sqlite full": lambda d: _sqlite(d, args.appends, entry, "FULL"),
        "sqlite normal": lambda d: _sqlite(d, args.appends, entry, "NORMAL"),
        "file growing": lambda d: _file(d, args.appends, entry, preallocate=False),
        "file prealloc": lambda d: _file(d, args.appends, entry, preallocate=True),
    }
    print("load average at start:", open("/proc/loadavg").read().strip())
    for round_number in range(args.rounds):
        for name, run in variants.items():
            with tempfile.TemporaryDirectory(dir=args.dir) as directory:
                cpu, wall = _thread_cpu(), time.perf_counter()
                run(directory)
                cpu = (_thread_cpu() - cpu) / args.appends * 1e6
                wall = (time.perf_counter() - wall) / args.appends * 1e6
            print(f"round {round_number}  {name:<14} CPU {cpu:7.1f} us  wall {wall:8.1f} us")
    print("load average at end:", open("/proc/loadavg").read().strip())


if __name__ == "__main__":
    main()
