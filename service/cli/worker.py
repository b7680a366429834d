"""``aucstream worker``: learn the batches queued in Redis Streams (queue mode), or check that
a worker of this host is alive (``--check``, the container healthcheck)."""

from __future__ import annotations

import argparse
import sys

from service.cli import add_command, load_settings
from service.cli._errors import FAILED, CliError

DESCRIPTION = """\
Settings come from AUCSTREAM_* environment variables (AUCSTREAM_REDIS_URL,
AUCSTREAM_WORKER_*); the options override them.

examples:
  AUCSTREAM_REDIS_URL=redis://127.0.0.1:6379/0 aucstream worker
  aucstream worker --check --redis-url redis://127.0.0.1:6379/0"""


def register(commands: argparse._SubParsersAction) -> None:
    parser = add_command(
        commands, "worker", "learn queued batches (queue mode) from Redis", DESCRIPTION
    )
    parser.add_argument("--redis-url", help="default: AUCSTREAM_REDIS_URL")
    parser.add_argument("--name", help="consumer name (default: <hostname>-<pid>)")
    parser.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port")
    parser.add_argument(
        "--check",
        action="store_true",
        help="healthcheck: exit 0 if a worker of this host has a live heartbeat, else 1",
    )
    parser.set_defaults(handler=worker)


def worker(args: argparse.Namespace) -> int:
    settings = load_settings(
        {
            "AUCSTREAM_REDIS_URL": args.redis_url,
            "AUCSTREAM_WORKER_NAME": args.name,
            "AUCSTREAM_WORKER_METRICS_PORT": args.metrics_port,
        }
    )
    if settings.redis_url is None:
        raise CliError("the worker needs AUCSTREAM_REDIS_URL (or --redis-url)")
    if args.check:
        return check_worker(settings.redis_url, settings.worker_name)
    from service.cli.serve import check_redis
    from service.queue.worker import main as run_worker

    check_redis(settings)  # one line, not a traceback, for an unreachable or volatile Redis
    return run_worker(settings)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _pairs(reply: list) -> list[tuple[bytes, bytes]]:
    """A ``ZRANGE ... WITHSCORES`` reply: a flat list (RESP2) or a list of pairs (RESP3)."""
    if reply and isinstance(reply[0], list):
        return [(member, score) for member, score in reply]
    return [(reply[i], reply[i + 1]) for i in range(0, len(reply), 2)]


def check_worker(redis_url: str, name: str | None) -> int:
    """0 when a worker of this host (``<hostname>-<pid>``, or ``name``) has a live heartbeat in
    ``aucs:workers``, renewed on every loop (a hung worker turns unhealthy within its lease),
    else 1 and why on stderr."""
    import socket

    import redis

    from service.errors import StoreUnavailable
    from service.stores import keys
    from service.stores.client import connect, round_trip

    host = socket.gethostname()

    def mine(member: str) -> bool:
        if name:
            return member == name
        prefix, _, pid = member.rpartition("-")
        return prefix == host and pid.isdigit()

    client = None
    try:
        client = connect(redis_url)
        # the clock of the server holding aucs:workers, as the heartbeat script's
        (seconds, microseconds), members = round_trip(
            client, keys.WORKERS, [["TIME"], ["ZRANGE", keys.WORKERS, 0, -1, "WITHSCORES"]]
        )
        now_ms = int(seconds) * 1000 + int(microseconds) // 1000
        live = [_text(member) for member, expiry in _pairs(members) if float(expiry) >= now_ms]
    except (redis.RedisError, redis.exceptions.RedisClusterException) as error:
        raise CliError(
            f"unhealthy: Redis did not answer ({type(error).__name__})", FAILED
        ) from None
    except StoreUnavailable as error:  # no seed of a cluster answered
        raise CliError(f"unhealthy: Redis did not answer: {error.detail}", FAILED) from None
    finally:
        if client is not None:
            client.close()
    alive = [member for member in live if mine(member)]
    if not alive:
        who = f"worker {name!r}" if name else f"a worker of host {host!r}"
        print(f"aucstream: unhealthy: no live heartbeat of {who}", file=sys.stderr)
        return FAILED
    print(f"healthy: {', '.join(alive)}")
    return 0
