"""Which ``Host`` a request may name, against DNS rebinding: ``localhost``, an IP address, the
connection's own address or one of ``AUCSTREAM_ALLOWED_HOSTS``; else a 400 ``host-not-allowed``
(a handshake: a 1008 close).  docs/architecture.md, "Host names and request heads"."""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from starlette.types import Scope

from service.errors import ServiceError

#: names that always reach this machine's loopback
LOOPBACK_NAMES = frozenset({"localhost"})

#: most distinct accepted ``Host`` values remembered (``*.example.com`` admits any number)
REMEMBERED_HOSTS = 256

#: a host name: letters, digits, ``-``, ``_`` and dots (``_`` appears in container names)
_NAME = re.compile(r"^[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?$")


class HostNotAllowed(ServiceError, status=400, title="Host not allowed"):
    """The request's ``Host`` is not a name this server answers to (:mod:`service.hosts`)."""


def host_name(header: str) -> str | None:
    """The host of a ``Host`` value, lower case, bare; None when it is not ``host[:port]``."""
    value = header.strip().lower()
    if value.startswith("["):  # [IPv6]:port
        address, bracket, rest = value[1:].partition("]")
        if not bracket or (rest and not (rest[0] == ":" and rest[1:].isdigit())):
            return None
        return address
    name, colon, port = value.rpartition(":")
    if not colon:
        name = value
    elif not port.isdigit() or ":" in name:
        return None
    name = name.rstrip(".")
    return name or None


def is_address(name: str) -> bool:
    """Whether ``name`` is an IPv4 or IPv6 address (not a name a resolver answers for)."""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def allowed_host_entry(entry: str) -> str:
    """An ``AUCSTREAM_ALLOWED_HOSTS`` entry as :class:`HostCheck` compares it (ValueError)."""
    normalized = entry.strip().lower().rstrip(".")
    if normalized == "*":
        return normalized
    bare = normalized[1:-1] if normalized.startswith("[") and normalized.endswith("]") else None
    if bare is not None and is_address(bare):
        return bare
    if is_address(normalized):
        return normalized
    name = normalized[2:] if normalized.startswith("*.") else normalized
    if not _NAME.match(name):
        raise ValueError(
            f"AUCSTREAM_ALLOWED_HOSTS: {entry!r} is not a host name (a name such as "
            "api.example.com, *.example.com for every name under it, an IP address, or * for "
            "any; no scheme, port or path)"
        )
    return normalized


class HostCheck:
    """The check of each HTTP request and WebSocket handshake; ``allowed``: the normalized
    allowed-hosts entries."""

    def __init__(self, allowed: list[str]) -> None:
        self.any = "*" in allowed
        self.names = LOOPBACK_NAMES | {entry for entry in allowed if not entry.startswith("*.")}
        #: ``.example.com`` for ``*.example.com``
        self.suffixes = tuple(entry[1:] for entry in allowed if entry.startswith("*."))
        #: raw ``Host`` values already accepted: the usual request costs a set lookup
        self.accepted: set[bytes] = set()

    def allows(self, name: str) -> bool:
        """Whether a request naming ``name`` may be served on any connection."""
        return (
            self.any
            or name in self.names
            or (bool(self.suffixes) and name.endswith(self.suffixes))
            or is_address(name)
        )

    def refusal(self, value: bytes, scope: Scope) -> HostNotAllowed | None:
        """None when the raw ``Host`` ``value`` may be served on this connection."""
        if self.any or value in self.accepted or self._admits(value, scope):
            return None
        host = value.decode("latin-1")
        shown = host if len(host) <= 100 else host[:100] + "..."
        return HostNotAllowed(
            f"Host {shown!r} is not a name this server answers to: localhost, an IP address, or "
            "one of AUCSTREAM_ALLOWED_HOSTS (a page whose name was rebound to this server's "
            "address names itself)"
        )

    def _admits(self, value: bytes, scope: Scope) -> bool:
        name = host_name(value.decode("latin-1"))
        if name is None:
            return False
        server = scope.get("server")
        server_host = server[0].lower() if server and isinstance(server[0], str) else None
        if not self.allows(name):
            return name == server_host  # not remembered: it holds for this connection only
        if len(self.accepted) < REMEMBERED_HOSTS:
            self.accepted.add(value)
        return True


def header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return value  # type: ignore[no-any-return]
    return None


def close_reason(text: str) -> str:
    """``text`` cut to the 123 bytes a WebSocket close reason holds."""
    return text.encode()[:123].decode(errors="ignore")


async def close_handshake(error: HostNotAllowed, receive: Any, send: Any) -> None:
    """Accept, then close with the reason (a browser's close event shows it)."""
    await receive()  # websocket.connect
    await send({"type": "websocket.accept"})
    await send({"type": "websocket.close", "code": 1008, "reason": close_reason(error.detail)})
