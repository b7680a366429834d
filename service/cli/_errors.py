"""How every command fails: one line on stderr (``aucstream: ...``) and an exit status, never a
traceback (``AUCSTREAM_DEBUG=1`` shows that of an unexpected error).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

#: the command or its input is wrong (a missing file, a bad column, invalid settings), as
#: argparse's own usage errors
USAGE = 2
#: the work failed on the way (a server refused, was down or timed out; a health check)
FAILED = 1
INTERRUPTED = 130


class CliError(Exception):
    """A failure explained in one line; ``status`` is the exit status."""

    def __init__(self, message: str, status: int = USAGE) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def one_line(text: str, limit: int = 400) -> str:
    """``text`` on one line, at most ``limit`` characters (server answers may be long)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def explain(error: BaseException) -> tuple[str, int]:
    """``(message, exit status)`` of any error a command may raise."""
    import httpx
    from pydantic import ValidationError

    from service.errors import ServiceError

    if isinstance(error, CliError):
        return error.message, error.status
    if isinstance(error, ValidationError):
        return validation_message(error), USAGE
    if isinstance(error, ServiceError | ValueError):  # ValueError: core's typed errors
        field = getattr(error, "param", None) or getattr(error, "field", None)
        return f"{error}" + (f" ({field})" if field else ""), USAGE
    if isinstance(error, httpx.HTTPStatusError):  # raised by expect: the server's own words
        answer = error.response
        try:
            problem = answer.json()
            detail = problem.get("detail") or problem.get("title") or answer.text
            detail += f" ({problem['field']})" if problem.get("field") else ""
        except ValueError:
            detail = answer.text or answer.reason_phrase
        return f"{error}: HTTP {answer.status_code}: {one_line(detail, 300)}", FAILED
    if isinstance(error, httpx.TimeoutException):
        return f"the server did not answer in time ({type(error).__name__})", FAILED
    if isinstance(error, httpx.TransportError):
        url = error.request.url if _has_request(error) else "the server"
        return f"cannot reach {url}: {_reason(error)}", FAILED
    if isinstance(error, httpx.HTTPError):
        return f"HTTP error: {error}", FAILED
    if isinstance(error, OSError):
        name = f": {error.filename}" if error.filename else ""
        return f"{error.strerror or error}{name}", USAGE
    if isinstance(error, KeyboardInterrupt):
        return "interrupted", INTERRUPTED
    return f"unexpected {type(error).__name__}: {error} (AUCSTREAM_DEBUG=1 shows where)", FAILED


def expect(response: Any, what: str, *statuses: int) -> Any:
    """``response`` when its status is one of ``statuses`` (200 by default), else the error
    that :func:`explain` words as ``what`` and the server's problem."""
    import httpx

    if response.status_code not in (statuses or (200,)):
        raise httpx.HTTPStatusError(what, request=response.request, response=response)
    return response


def validation_message(error: Any) -> str:
    """The first error of a pydantic ``ValidationError``, naming its field when it has one."""
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"])
    message = first["msg"].removeprefix("Value error, ")
    more = error.error_count() - 1
    suffix = f" (and {more} more error{'s' if more > 1 else ''})" if more else ""
    return (f"invalid {field}: {message}" if field else message) + suffix


def _has_request(error: Any) -> bool:
    try:
        error.request  # noqa: B018  (raises RuntimeError when the error has none)
    except RuntimeError:
        return False
    return True


def _reason(error: Exception) -> str:
    text = str(error) or type(error).__name__
    if "Connection refused" in text or "Errno 111" in text:
        return "connection refused (is the server running?)"
    return text


def run(handler: Callable[[Any], int], args: Any) -> int:
    """Run a command's handler; any error becomes one line on stderr and its exit status."""
    try:
        return int(handler(args))
    except (Exception, KeyboardInterrupt) as error:
        if os.environ.get("AUCSTREAM_DEBUG") and not isinstance(error, CliError):
            raise
        message, status = explain(error)
        print(f"aucstream: {one_line(message)}", file=sys.stderr)
        return status
