"""``aucstream serve``: the HTTP API under uvicorn.  With several workers, the directory of
prometheus_client's multiprocess metrics: one per server, removed once its server is gone, told
by a lock it holds while it runs."""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from service.cli import add_command, load_settings
from service.cli._errors import CliError

LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")

DESCRIPTION = """\
Settings not given here come from AUCSTREAM_* environment variables (service/settings.py);
invalid ones stop the command before anything starts.  The first start compiles the numba
kernels (cached on disk for the next starts); /readyz answers 200 once they are ready.

examples:
  aucstream serve --port 8000                  # models kept in ./aucstream-data (SQLite)
  aucstream serve --workers 2 --data-dir /var/lib/aucstream
  aucstream serve --store memory               # throwaway: models live in this process only
  aucstream serve --workers 4 --redis-url redis://127.0.0.1:6379/0
  AUCSTREAM_MODE=queue aucstream serve --workers 2 --redis-url redis://127.0.0.1:6379/0"""


def register(commands: argparse._SubParsersAction) -> None:
    parser = add_command(commands, "serve", "run the HTTP API (uvicorn)", DESCRIPTION)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on")
    workers = "uvicorn worker processes (more than 1 needs the sqlite or the redis store)"
    parser.add_argument("--workers", type=int, default=1, help=workers)
    parser.add_argument(
        "--store",
        choices=("sqlite", "memory", "redis"),
        help="where models live (default: AUCSTREAM_STORE, else redis when a Redis URL is "
        "set, else sqlite: kept on disk across restarts)",
    )
    parser.add_argument(
        "--data-dir",
        help="the SQLite store's directory (default: AUCSTREAM_DATA_DIR, else ./aucstream-data)",
    )
    parser.add_argument("--redis-url", help="Redis to use, e.g. redis://127.0.0.1:6379/0")
    parser.add_argument(
        "--allow-volatile-redis",
        action="store_true",
        help="accept a Redis without AOF or RDB persistence (a restart of it loses every "
        "model; refused otherwise)",
    )
    parser.add_argument("--log-level", default="info", choices=LOG_LEVELS, help="uvicorn's")
    # [CHOICE] off by default, as gunicorn's access log; /metrics counts requests either way
    parser.add_argument(
        "--access-log",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="uvicorn's access line per request (off by default: each costs ~0.04 ms of CPU, a "
        "quarter of a one-event /score; AUCSTREAM_LOG_FORMAT=json writes its own request lines)",
    )
    parser.add_argument(
        "--mode",
        choices=("sync", "queue"),
        help="sync learns in the request; queue appends to Redis Streams for the queue "
        "workers, aucstream worker (default: AUCSTREAM_MODE, else sync)",
    )
    parser.set_defaults(handler=serve)


def serve(args: argparse.Namespace) -> int:
    allow_bound_name(args.host)
    settings = load_settings(
        {
            "AUCSTREAM_STORE": args.store or None,
            "AUCSTREAM_REDIS_URL": args.redis_url or None,
            "AUCSTREAM_DATA_DIR": args.data_dir or None,
            "AUCSTREAM_MODE": args.mode or None,
            "AUCSTREAM_ALLOW_VOLATILE_REDIS": "1" if args.allow_volatile_redis else None,
            "AUCSTREAM_WORKERS": args.workers,
        }
    )
    if settings.store == "sqlite":
        from service.stores.sqlite import SQLiteStore
        from service.stores.sqlite_file import StoreOpenError

        try:  # an unusable data directory or database: one line, before any worker starts
            SQLiteStore.open(settings.data_dir, settings.sqlite_synchronous).close()
        except StoreOpenError as error:
            raise CliError(str(error)) from None
    if settings.store == "redis":
        check_redis(settings)
    import shutil

    import uvicorn

    from service.http_limits import MAX_HEAD_BYTES, HeadLimitedProtocol

    made_dir, owner = None, None
    if args.workers > 1:
        # one Prometheus view across the workers, who write their values under this directory
        # (set before they start); emptied first, or a previous run's files would be summed in
        directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if not directory:
            # a new one, locked while this server runs; those of killed servers are removed
            made_dir, owner = make_multiprocess_dir()
            directory = made_dir
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
        reset_multiprocess_dir(directory)
    try:
        uvicorn.run(
            "service.app:create_app",
            factory=True,
            host=args.host,
            port=args.port,
            workers=args.workers,
            log_level=args.log_level,
            access_log=args.access_log,
            # 431 for a request head over 64 KiB (uvicorn's httptools protocol has no bound)
            http=HeadLimitedProtocol,
            h11_max_incomplete_event_size=MAX_HEAD_BYTES,
        )
    finally:
        if made_dir is not None:
            shutil.rmtree(made_dir, ignore_errors=True)
        if owner is not None:
            owner.close()
    return 0


def allow_bound_name(host: str) -> None:
    """``--host NAME``: requests naming ``NAME`` are served (added to AUCSTREAM_ALLOWED_HOSTS for
    the workers); addresses and localhost are allowed anyway."""
    from service.hosts import LOOPBACK_NAMES, host_name, is_address

    name = host_name(host) or host
    if is_address(name) or name in LOOPBACK_NAMES:
        return
    listed = os.environ.get("AUCSTREAM_ALLOWED_HOSTS", "")
    os.environ["AUCSTREAM_ALLOWED_HOSTS"] = f"{listed},{name}" if listed.strip() else name


def check_redis(settings: object) -> None:
    """Before any worker starts: a reachable Redis that keeps its data, else one line."""
    from service.errors import ServiceError
    from service.stores.redis import RedisStore
    from service.stores.redis_setup import VolatileRedis

    try:
        RedisStore.open(settings).close()
    except (ServiceError, VolatileRedis) as error:
        raise CliError(str(error)) from None


#: the prefix of the metrics directories ``aucstream serve`` makes in the temporary directory
MULTIPROCESS_DIR_PREFIX = "aucstream-prometheus-"
#: the file in such a directory its server holds a lock on for as long as it runs
_OWNER_LOCK = "owner.lock"
#: a directory without an owner lock (being made) is left alone until this old (seconds)
_UNOWNED_GRACE_SECONDS = 600


def make_multiprocess_dir(parent: str | None = None) -> tuple[str, Any]:
    """A new metrics directory in ``parent`` (stale ones removed first), and the open lock file
    its server holds until it exits (even ``kill -9`` releases it)."""
    import fcntl
    import tempfile

    parent = parent or tempfile.gettempdir()
    remove_stale_multiprocess_dirs(parent)
    path = tempfile.mkdtemp(prefix=MULTIPROCESS_DIR_PREFIX, dir=parent)
    owner = open(os.path.join(path, _OWNER_LOCK), "wb")  # noqa: SIM115 - held while serving
    fcntl.flock(owner, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return path, owner


def remove_stale_multiprocess_dirs(parent: str) -> list[str]:
    """Remove (and return) this user's metrics directories whose owner lock nobody holds."""
    import fcntl
    import shutil

    removed = []
    for entry in os.scandir(parent):
        try:
            if (
                not entry.name.startswith(MULTIPROCESS_DIR_PREFIX)
                or not entry.is_dir(follow_symlinks=False)
                or entry.stat(follow_symlinks=False).st_uid != os.getuid()
            ):
                continue
            lock = os.path.join(entry.path, _OWNER_LOCK)
            age = time.time() - entry.stat(follow_symlinks=False).st_mtime
            if not os.path.exists(lock):
                if age < _UNOWNED_GRACE_SECONDS:
                    continue
            else:
                with open(lock, "rb") as handle:
                    try:
                        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:  # its server is running
                        continue
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
        except OSError:  # gone meanwhile, or not ours to read: leave it
            continue
    return removed


def reset_multiprocess_dir(path: str) -> None:
    """Empty ``PROMETHEUS_MULTIPROC_DIR`` of a previous run's values (they would be summed)."""
    os.makedirs(path, exist_ok=True)
    for name in os.listdir(path):
        if name.endswith(".db"):
            os.remove(os.path.join(path, name))
