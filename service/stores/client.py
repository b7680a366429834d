"""Connecting to Redis: the client (timeouts, the one-write connection), RESP packing, a
pooled connection for a plain round trip, a ``MULTI`` / ``EXEC`` read or a script, and the
mapping of a lost connection or an unavailable cluster to
:class:`~service.errors.StoreUnavailable` (503).

A ``redis+cluster://h1:p1,h2:p2`` URL names seed nodes of a Redis Cluster; every command of the
service names keys of one slot (:mod:`service.stores.keys`) and runs on that slot's master.
With :class:`ReplicaWait`, an acknowledged write is followed in the same round trip by
``WAIT``, and too few confirmations is :class:`~service.errors.ReplicasUnconfirmed` (503).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard, TypeVar

import redis
import redis.cluster
import redis.connection
import redis.exceptions

from service.errors import (
    LeaseLost,
    ModelNotFound,
    ReplicasUnconfirmed,
    StaleVersion,
    StoreUnavailable,
)

T = TypeVar("T")
logger = logging.getLogger("aucstream.store")

#: a Redis client: one server, or a cluster (``redis+cluster://``)
Client = redis.Redis | redis.cluster.RedisCluster

CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}

#: a cluster answered that a slot moved, is migrating, has no master or is down: after a
#: refresh of the slot map the same request may go through, so it is retried this many times
#: before the store counts as unavailable (503)
CLUSTER_ATTEMPTS = 3

#: replies of a cluster in the middle of a failover or a resharding (and redis-py's own
#: "cannot reach the cluster" errors): the store is unavailable for now, not broken
CLUSTER_UNAVAILABLE = (
    redis.exceptions.ClusterError,  # CLUSTERDOWN, MASTERDOWN, redirections exhausted
    redis.exceptions.AskError,  # MOVED, ASK
    redis.exceptions.TryAgainError,
    redis.exceptions.RedisClusterException,  # no reachable node, a slot without a master
)


def unavailable(method: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return method(*args, **kwargs)
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as error:
            # the error names the server's address: for the logs, never for clients
            logger.warning("Redis did not answer: %s", error)
            raise StoreUnavailable("the store (Redis) did not answer; retry later") from None
        except CLUSTER_UNAVAILABLE as error:
            if "same slot" in str(error):  # a command across slots is a bug, not an outage
                raise
            logger.warning("the Redis Cluster is not available: %s", error)
            raise StoreUnavailable(
                "the store (Redis Cluster) is failing over or resharding; retry later"
            ) from None

    return wrapper


def pack_commands(commands: Sequence[Sequence[bytes | str | int]]) -> bytes:
    """Redis commands in RESP, joined into one buffer for one ``sendall`` (cheaper than
    redis-py's ``pack_command``, which runs its encoder per argument)."""
    out: list[bytes] = []
    append = out.append
    for command in commands:
        append(b"*%d\r\n" % len(command))
        for argument in command:
            if isinstance(argument, str):
                argument = argument.encode()
            elif isinstance(argument, int):
                argument = b"%d" % argument
            append(b"$%d\r\n" % len(argument))
            append(argument)
            append(b"\r\n")
    return b"".join(out)


def flat_pairs(pairs: dict[str, Any]) -> list[Any]:
    """``{name: value}`` as the arguments ``name, value, ...`` of a command or script."""
    return [item for pair in pairs.items() for item in pair]


class _OneWriteConnection(redis.connection.Connection):
    """A TCP connection that writes a packed command with one ``sendall`` (redis-py sends each
    argument over 6,000 bytes with its own: a system call and a wake-up of Redis each)."""

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if isinstance(command, list) and len(command) > 1:
            command = [b"".join(command)]
        super().send_packed_command(command, check_health)


def cluster_seeds(url: str) -> tuple[str, list[tuple[str, int]]]:
    """``redis+cluster://[user:password@]h1:p1,h2:p2,.../0?options`` -> (a plain URL naming
    the first seed, with the credentials and options; every seed as ``(host, port)``)."""
    scheme, _, rest = url.partition("://")
    netloc, slash, tail = rest.partition("/")
    netloc, question, query = netloc.partition("?")
    credentials, at, hosts = netloc.rpartition("@")
    seeds: list[tuple[str, int]] = []
    for seed in hosts.split(","):
        host, colon, port = seed.strip().rpartition(":")
        if not colon:
            host, port = seed.strip(), "6379"
        if not host or not port.isdigit():
            raise ValueError(f"a Redis Cluster seed must be host:port, got {seed!r}")
        seeds.append((host.strip("[]"), int(port)))
    first_host, first_port = seeds[0]
    first = f"[{first_host}]:{first_port}" if ":" in first_host else f"{first_host}:{first_port}"
    plain = f"{CLUSTER_SCHEMES.get(scheme, scheme)}://{credentials}{at}{first}{question}{query}{slash}{tail}"
    return plain, seeds


def connect(url: str) -> Any:
    """A client for ``url`` (bytes replies): a :class:`redis.Redis`, or for a
    ``redis+cluster://`` URL a :class:`redis.cluster.RedisCluster` discovered from the first
    seed that answers (:class:`~service.errors.StoreUnavailable` naming them when none does)."""
    scheme, _, rest = url.partition("://")
    cluster = scheme in CLUSTER_SCHEMES
    seeds: list[tuple[str, int]] = []
    if cluster:
        url, seeds = cluster_seeds(url)
    # Timeouts turn a hung Redis into 503 responses instead of requests that never end.
    # unix:// and rediss:// URLs pick their own connection class; plain TCP gets ours
    tcp = "connection_class" not in redis.connection.parse_url(url)
    options: dict[str, Any] = {
        **({"connection_class": _OneWriteConnection} if tcp else {}),
        "decode_responses": False,
        "health_check_interval": 30,
        "socket_timeout": 10.0,
        "socket_connect_timeout": 5.0,
    }
    if cluster:
        others = [redis.cluster.ClusterNode(host, port) for host, port in seeds[1:]]
        try:
            return redis.cluster.RedisCluster.from_url(url, startup_nodes=others, **options)
        except (
            redis.exceptions.RedisError,
            redis.exceptions.RedisClusterException,
            OSError,
        ) as error:
            named = ", ".join(f"{host}:{port}" for host, port in seeds)
            logger.warning("no seed of the Redis Cluster answered: %s", error)
            raise StoreUnavailable(
                f"no seed node of the Redis Cluster answered ({named}); name a reachable node "
                "in redis+cluster://host1:port1,host2:port2,..."
            ) from None
    return redis.Redis.from_url(url, **options)


def is_cluster(client: Any) -> TypeGuard[redis.cluster.RedisCluster]:
    return isinstance(client, redis.cluster.RedisCluster)


def _pool(client: Any, key: str) -> redis.connection.ConnectionPool:
    """The pool of the server holding ``key``: the client's, or that of the key's slot's master."""
    if is_cluster(client):
        node = client.get_node_from_key(key)
        if node is None:
            raise redis.exceptions.SlotNotCoveredError(f"no master holds the slot of {key}")
        return client.get_redis_connection(node).connection_pool
    return client.connection_pool


def _refresh_slots(client: Any) -> None:
    """After a redirection, read the cluster's slot map again (the next attempt follows it)."""
    if is_cluster(client):
        client.nodes_manager.initialize()


@contextlib.contextmanager
def pooled(client: Any, key: str) -> Iterator[Callable[[list[list[Any]]], list[Any]]]:
    """A pooled connection to the server holding ``key``, as ``ask(commands) -> replies``
    (sent at once, no redis-py pipeline object), for keys of ``key``'s slot only; closed on
    any error but the store's own refusals, so no ``MULTI`` or unread reply outlives it."""
    pool = _pool(client, key)
    connection = pool.get_connection()

    def ask(commands: list[list[Any]]) -> list[Any]:
        connection.send_packed_command([pack_commands(commands)])
        return [connection.read_response() for _ in commands]

    try:
        yield ask
    except (StaleVersion, ModelNotFound, LeaseLost):
        raise
    except BaseException:
        connection.disconnect()
        raise
    finally:
        pool.release(connection)


def _following_the_cluster(client: Any, attempt: Callable[[], T]) -> T:
    """``attempt()``, tried again after a refresh of the slot map when a cluster answers that
    the slot moved or is unavailable (at most :data:`CLUSTER_ATTEMPTS` times).  Only for
    attempts that write nothing unless they succeed: a round trip of reads, or a
    transaction (a redirected command inside ``MULTI`` aborts the whole ``EXEC``)."""
    for remaining in range(CLUSTER_ATTEMPTS - 1, -1, -1):
        try:
            return attempt()
        except CLUSTER_UNAVAILABLE:
            if not remaining or not is_cluster(client):
                raise
            _refresh_slots(client)
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
            # a master that does not answer may have been replaced by a failover: the next
            # request follows the new slot map (this one is a 503)
            if is_cluster(client):
                with contextlib.suppress(Exception):
                    _refresh_slots(client)
            raise
    raise AssertionError("unreachable")


def round_trip(client: Any, key: str, commands: list[list[Any]]) -> list[Any]:
    """``commands`` (reads of ``key``'s slot) sent at once on a pooled connection; their replies."""

    def attempt() -> list[Any]:
        with pooled(client, key) as ask:  # an error reply (MOVED ...) is raised by ask
            return ask(commands)

    return _following_the_cluster(client, attempt)


def atomic_read(client: Any, key: str, commands: list[list[Any]]) -> list[Any]:
    """``commands`` (reads of ``key``'s slot) as one ``MULTI`` ... ``EXEC`` round trip: their
    replies."""
    return round_trip(client, key, [["MULTI"], *commands, ["EXEC"]])[-1]


@dataclass(frozen=True)
class ReplicaWait:
    """Acknowledge a write only once ``replicas`` replicas confirmed it (``WAIT``), waiting at
    most ``timeout_ms``.  Without it, a write is acknowledged when the primary applied it, and
    a failover before the asynchronous replication reached a replica loses it."""

    replicas: int
    timeout_ms: int

    def check(self, confirmed: Any, reply: Any = None) -> None:
        """:class:`ReplicasUnconfirmed` (carrying the ``reply``) when too few replicas confirmed."""
        if int(confirmed) < self.replicas:
            raise ReplicasUnconfirmed(
                f"the write reached the Redis primary but {int(confirmed)} of the "
                f"{self.replicas} replica(s) asked for confirmed it within {self.timeout_ms} ms "
                "(AUCSTREAM_REDIS_WAIT_REPLICAS); it is not acknowledged and a failover could "
                "lose it: retry (with event ids, a retry never learns an event twice)",
                headers={"Retry-After": "1"},
                reply=reply,
            )


def run_script(
    client: Any, script: Any, keys: list[str], args: list[Any], wait: ReplicaWait | None
) -> Any:
    """A registered Lua ``script`` on ``keys`` of one slot, by ``EVALSHA`` (``EVAL`` when the
    server lacks it) on the slot's master only (redis-py's own call loads a missing script on
    every master, failing while any is down); with ``wait``, followed by ``WAIT`` on the same
    connection in the same round trip (another connection's would not wait for this write)."""

    def attempt(command: list[Any]) -> Any:
        with pooled(client, keys[0]) as ask:
            if wait is None:
                return ask([command])[0]
            reply, confirmed = ask([command, ["WAIT", wait.replicas, wait.timeout_ms]])
        wait.check(confirmed, reply)
        return reply

    try:
        return _following_the_cluster(
            client, lambda: attempt(["EVALSHA", script.sha, len(keys), *keys, *args])
        )
    except redis.exceptions.NoScriptError:  # a restarted or flushed server: send the text
        return _following_the_cluster(
            client, lambda: attempt(["EVAL", script.script, len(keys), *keys, *args])
        )
