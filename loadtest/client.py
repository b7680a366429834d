"""A minimal HTTP/1.1 keep-alive client on asyncio streams.

Why not httpx: on a 2-core machine the load generator shares the CPU with the server, and
httpx spends ~0.3 ms of CPU per request, which would be measured as server time.  This client
sends pre-encoded request bytes and reads ``Content-Length`` responses: a few microseconds per
request.  It only talks to loopback addresses.
"""

from __future__ import annotations

import asyncio
import ipaddress
import urllib.parse


def check_loopback(url: str) -> tuple[str, int]:
    parsed = urllib.parse.urlsplit(url)
    host = parsed.hostname or ""
    if host != "localhost" and not ipaddress.ip_address(host).is_loopback:
        raise SystemExit(f"loadtest: refusing to load {host!r}; only loopback addresses")
    return host, parsed.port or 80


def build_request(
    method: str,
    path: str,
    host: str,
    body: bytes = b"",
    content_type: str = "",
    extra_headers: dict[str, str] | None = None,
) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", "Connection: keep-alive"]
    if body or method in ("POST", "PUT"):
        lines.append(f"Content-Length: {len(body)}")
    if content_type:
        lines.append(f"Content-Type: {content_type}")
    for name, value in (extra_headers or {}).items():
        lines.append(f"{name}: {value}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class Connection:
    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> Connection:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        return self

    async def request(self, raw: bytes) -> tuple[int, bytes]:
        assert self.reader is not None and self.writer is not None
        self.writer.write(raw)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        body = await self.reader.readexactly(length) if length else b""
        return status, body

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except ConnectionError:
                pass
