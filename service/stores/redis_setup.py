"""What the service checks of a Redis before it uses it: that it keeps its data (AOF or RDB,
read by ``CONFIG GET``, else ``INFO persistence``; none is refused unless
``AUCSTREAM_ALLOW_VOLATILE_REDIS``, a setting that loses the last writes at a crash warned
about), and whether acknowledged writes should wait for replicas.
"""

from __future__ import annotations

import logging
from typing import Any

import redis.exceptions

from service.stores.client import ReplicaWait, is_cluster

logger = logging.getLogger("aucstream.store")


class VolatileRedis(RuntimeError):
    """The Redis keeps nothing across a restart and the user did not accept it."""


def _masters(client: Any) -> list[tuple[str, Any]]:
    """``(name, client of that server)`` for the server, or every master of a cluster."""
    if is_cluster(client):
        return [(node.name, client.get_redis_connection(node)) for node in client.get_primaries()]
    kwargs = client.connection_pool.connection_kwargs
    name = kwargs.get("path") or f"{kwargs.get('host')}:{kwargs.get('port')}"
    return [(str(name), client)]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def persistence(server: Any) -> dict[str, str | None]:
    """``appendonly``, ``appendfsync`` and ``save`` of one server (None where unknown)."""
    try:
        names = ("appendonly", "appendfsync", "save")
        config = {_text(name): _text(value) for name, value in server.config_get(*names).items()}
        return {name: config.get(name) for name in names}
    except redis.exceptions.ResponseError:  # CONFIG renamed, disabled or not permitted
        info = server.info("persistence")
        return {
            "appendonly": "yes" if int(info.get("aof_enabled", 0)) else "no",
            "appendfsync": None,
            "save": None,
        }


def check_persistence(client: Any, allow_volatile: bool) -> None:
    """Refuse a Redis keeping nothing across a restart (unless ``allow_volatile``); warn of lossy
    ones."""
    volatile, risky = [], []
    for name, server in _masters(client):
        setting = persistence(server)
        aof = setting["appendonly"] == "yes"
        save = setting["save"]
        if not aof and save == "":
            volatile.append(name)
        elif aof and setting["appendfsync"] not in ("always", "everysec", None):
            risky.append(f"{name}: appendfsync {setting['appendfsync']} (the OS decides when)")
        elif not aof:
            risky.append(
                f"{name}: no AOF, "
                + (f"RDB snapshots only (save {save!r})" if save else "its RDB setting unknown")
            )
    if volatile and not allow_volatile:
        raise VolatileRedis(
            f"Redis {', '.join(volatile)} keeps nothing across a restart (appendonly no, "
            "save ''): every model would be lost with it.  Turn on AOF (appendonly yes, "
            "appendfsync everysec), or accept a volatile store with --allow-volatile-redis "
            "(AUCSTREAM_ALLOW_VOLATILE_REDIS=1)"
        )
    if volatile:
        logger.warning(
            "Redis %s keeps nothing across a restart (allowed by AUCSTREAM_ALLOW_VOLATILE_REDIS):"
            " a restart loses every model, and the service then answers 503 until the loss is "
            "acknowledged",
            ", ".join(volatile),
        )
    for risk in risky:
        logger.warning(
            "Redis %s: a crash loses the writes since the last sync; use appendonly yes with "
            "appendfsync everysec or always",
            risk,
        )


def replica_wait(client: Any, wanted: int | None, timeout_ms: int) -> ReplicaWait | None:
    """How acknowledged writes wait for replicas: ``wanted`` replicas, or when None one
    replica if every master has one (a master without replicas would refuse every write)."""
    if wanted == 0:
        return None
    if wanted is None:
        counts = {
            name: int(server.info("replication").get("connected_slaves", 0))
            for name, server in _masters(client)
        }
        if not counts or min(counts.values()) < 1:
            if any(counts.values()):
                alone = [name for name, count in counts.items() if count < 1]
                logger.warning(
                    "Redis masters %s have no replica: writes are acknowledged without WAIT "
                    "(set AUCSTREAM_REDIS_WAIT_REPLICAS to wait anyway)",
                    ", ".join(alone),
                )
            return None
        wanted = 1
    logger.info(
        "Redis: acknowledged writes wait for %d replica(s), at most %d ms (WAIT)",
        wanted,
        timeout_ms,
    )
    return ReplicaWait(wanted, timeout_ms)
