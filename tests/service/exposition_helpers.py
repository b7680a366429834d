"""Reading what the service exposes: Prometheus series and server-sent event messages."""

from __future__ import annotations

import re


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the series ``name`` whose labels include ``labels``, or None."""
    for line in text.splitlines():
        match = re.match(rf"^{name}{{(.*)}} (\S+)$", line)
        if match and all(f'{key}="{value}"' in match.group(1) for key, value in labels.items()):
            return float(match.group(2))
    return None


def sse_messages(lines):
    """The messages of a server-sent event stream's ``lines``, each a dict of its fields
    (comments left out)."""
    message = {}
    for line in lines:
        if line == "":
            if message:
                yield message
            message = {}
        elif not line.startswith(":"):
            key, _, value = line.partition(": ")
            message[key] = value
