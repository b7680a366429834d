"""The one ASGI layer of every request (:class:`ServiceApp`: the ``Host`` check, HEAD as GET,
the warm-up gate, the body deadline, ``no-store`` on ``/v1``, ``X-Request-ID``, the request
metrics and a plain 500), and the lane: the routes marked :func:`lane`, served without FastAPI's
per-request machinery from their one declaration (docs/architecture.md, "Routes are declared
once"; figures: ``loadtest/README.md``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import RouteContext, iter_route_contexts
from pydantic import TypeAdapter, ValidationError
from starlette.exceptions import HTTPException
from starlette.responses import PlainTextResponse
from starlette.types import Message, Receive, Scope, Send

from service.auth import READ_METHODS, check_api_key, require_api_key
from service.body_guard import BodyDeadlines, GuardedReceive
from service.deps import Services, get_engine, get_services, get_settings, get_telemetry
from service.errors import PROBLEM_MEDIA_TYPE as PROBLEM
from service.errors import InvalidInput, MalformedBody, ServiceError
from service.hosts import HostCheck, close_handshake, header
from service.ingest.objects import json_error_detail
from service.kernels import warming_up
from service.openapi import complete
from service.telemetry import Telemetry, record_request

#: the order methods are listed in ``Allow``
_METHOD_ORDER = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
_NO_STORE = (b"cache-control", b"no-store")


F = TypeVar("F", bound=Callable[..., Awaitable[Response]])


def lane(endpoint: F) -> F:
    """Mark a route's endpoint as served by the lane (it returns a ``Response``)."""
    endpoint.__lane__ = True  # type: ignore[attr-defined]
    return endpoint


class SettingBound:
    """``Annotated`` metadata of an ``int`` query parameter: its most is a setting's value."""

    def __init__(self, setting: str) -> None:
        self.setting = setting


def _query_value(request: Request, name: str) -> str | None:
    if not request.scope.get("query_string"):  # none at all: no need to parse it
        return None
    return request.query_params.get(name)


_FLAG = TypeAdapter(bool)  # how FastAPI reads a ``bool`` query parameter


def query_flag(request: Request, name: str, default: bool) -> bool:
    """A boolean query parameter, read as FastAPI reads ``name: bool = default``; anything else
    is a 422 naming ``query.<name>``."""
    if (value := _query_value(request, name)) is None:
        return default
    try:
        return _FLAG.validate_python(value)
    except ValidationError:
        raise InvalidInput(
            f"query.{name}: Input should be a valid boolean (true or false), got {value!r}",
            field=f"query.{name}",
        ) from None


def query_count(request: Request, name: str, default: int, least: int, most: int) -> int:
    """A whole-number query parameter from ``least`` to ``most``; anything else is a 422
    naming ``query.<name>``."""
    if (value := _query_value(request, name)) is None:
        return default
    count = int(value) if value.isascii() and value.isdigit() and len(value) <= 9 else least - 1
    if not least <= count <= most:
        raise InvalidInput(
            f"query.{name}: must be a whole number from {least} to {most}, got {value[:40]!r}",
            field=f"query.{name}",
        )
    return count


Reader = Callable[[Request, Services], Any]


def _query_reader(field: Any) -> Reader:
    name, info = field.alias, field.field_info
    default, kind = info.default, info.annotation
    if kind is bool:
        return lambda request, services: query_flag(request, name, default)
    if kind is int:
        least = next((m.ge for m in info.metadata if hasattr(m, "ge")), 0)
        most = next((m.le for m in info.metadata if hasattr(m, "le")), 10**9 - 1)
        bound = next((m.setting for m in info.metadata if isinstance(m, SettingBound)), None)
        if bound is not None:
            return lambda request, services: query_count(
                request, name, default, least, getattr(services.settings, bound)
            )
        return lambda request, services: query_count(request, name, default, least, most)
    raise TypeError(f"the lane reads bool and int query parameters, not {name}: {kind}")


_SERVICES: dict[Any, Reader] = {
    get_services: lambda request, services: services,
    get_engine: lambda request, services: services.engine,
    get_settings: lambda request, services: services.settings,
    get_telemetry: lambda request, services: services.telemetry,
}


class LaneRoute:
    """A route the lane serves, its arguments read from its FastAPI declaration."""

    def __init__(self, route: RouteContext) -> None:
        if route.endpoint is None:
            raise TypeError(f"{route.path}: no endpoint")
        self.endpoint: Callable[..., Awaitable[Response]] = route.endpoint
        self.route, self.path_regex = route, route.path_regex
        #: ``scope["route"]``: the route object FastAPI's router would set there
        self.served_route = route.original_route
        #: the path of a route without parameters (matched by a lookup, not its pattern)
        self.fixed_path = None if route.dependant.path_params else route.path
        self.methods = frozenset(route.methods or ())
        dependant = route.dependant
        if dependant.header_params or dependant.cookie_params or dependant.body_params:
            raise TypeError(f"{route.path}: the lane reads no headers, cookies or body models")
        self.readers: list[tuple[str, Reader]] = []
        for field in dependant.path_params:
            if field.field_info.annotation is not str:
                raise TypeError(f"{route.path}: path parameters are strings on the lane")
            self.readers.append((field.name, _path_reader(field.alias)))
        self.readers.extend((field.name, _query_reader(field)) for field in dependant.query_params)
        if dependant.request_param_name:
            self.readers.append((dependant.request_param_name, lambda request, services: request))
        #: None: no key; else whether the route writes (a read-only key is refused)
        self.key_writes: bool | None = None
        for dependency in dependant.dependencies:
            if dependency.call is require_api_key:
                self.key_writes = not self.methods <= READ_METHODS
            elif dependency.call in _SERVICES and dependency.name:
                self.readers.append((dependency.name, _SERVICES[dependency.call]))
            else:
                raise TypeError(f"{route.path}: the lane cannot resolve {dependency.call}")

    async def respond(self, scope: Scope, receive: Receive, app: ServiceApp) -> Response:
        """The route's answer to a request (a problem for a :class:`ServiceError`)."""
        try:
            if not self.readers and self.key_writes is None:  # ``/healthz``: no request object
                return await self.endpoint()
            request = Request(scope, receive)
            services: Services = app.state.services
            if self.key_writes is not None:
                check_api_key(request, services.settings, writes=self.key_writes)
            return await self.endpoint(
                **{name: read(request, services) for name, read in self.readers}
            )
        except ServiceError as error:
            return app.on_error(error)


def _path_reader(name: str) -> Reader:
    return lambda request, services: request.scope["path_params"][name]


def route_path(scope: Scope) -> str:
    """The path the app routes: ``path`` without the ``root_path`` it is mounted at (as
    Starlette's router reads it; its own helper is private)."""
    path: str = scope["path"]
    root_path: str = scope.get("root_path", "")
    if not root_path or not path.startswith(root_path):
        return path
    if path == root_path:
        return ""
    return path[len(root_path) :] if path[len(root_path)] == "/" else path


def allowed_methods(routes: Sequence[Any], path: str) -> list[str] | None:
    """The methods the routes serve at ``path``, with HEAD beside GET and OPTIONS; None for a
    path no route has (Starlette names the methods of the first route matching only)."""
    served: set[str] = set()
    for route in iter_route_contexts(routes):
        methods, pattern = getattr(route, "methods", None), getattr(route, "path_regex", None)
        if methods and pattern is not None and pattern.match(path):
            served |= methods
    if not served:
        return None
    served.add("OPTIONS")
    if "GET" in served:
        served.add("HEAD")
    return sorted(served, key=_METHOD_ORDER.index)


class ServiceApp(FastAPI):
    """The FastAPI app behind the one ASGI layer (module docstring); :meth:`install` sets it
    up once the routes are included."""

    telemetry: Telemetry
    hosts: HostCheck
    bodies: BodyDeadlines
    _lane_routes: list[LaneRoute]
    #: (method, path) -> the lane's route without parameters that a request of them takes
    _fixed_lane: dict[tuple[str, str], LaneRoute]
    #: the warm-up is over: no more checks
    warm_open = False

    @property
    def lane_routes(self) -> list[LaneRoute]:
        """The routes the lane serves, in the order they are matched."""
        return self._lane_routes

    @lane_routes.setter
    def lane_routes(self, routes: list[LaneRoute]) -> None:
        self._lane_routes, self._fixed_lane = routes, {}
        for position, route in enumerate(routes):
            path = route.fixed_path
            if (
                path is None
                or any(  # an earlier route matching the path would take it
                    route.methods & earlier.methods and earlier.path_regex.match(path)
                    for earlier in routes[:position]
                )
            ):
                continue
            for method in route.methods:
                self._fixed_lane.setdefault((method, path), route)

    def install(self, telemetry: Telemetry, hosts: HostCheck, bodies: BodyDeadlines) -> None:
        self.telemetry, self.hosts, self.bodies = telemetry, hosts, bodies
        self.add_exception_handler(ServiceError, self._service_error)  # type: ignore[arg-type]
        self.add_exception_handler(RequestValidationError, self._invalid)  # type: ignore[arg-type]
        self.add_exception_handler(HTTPException, self._http_error)  # type: ignore[arg-type]
        self.lane_routes = [
            LaneRoute(route)
            for route in iter_route_contexts(self.router.routes)
            if getattr(route.endpoint, "__lane__", False)
        ]

    def openapi(self) -> dict[str, Any]:
        """FastAPI's document of the routes, completed by :func:`service.openapi.complete`."""
        if self.openapi_schema is None:
            complete(super().openapi(), auth_enabled=self.state.settings.auth_enabled)
        return self.openapi_schema  # type: ignore[return-value]

    def on_error(self, error: ServiceError) -> Response:
        """Every problem's one rendering (the lane's, FastAPI's handlers', the Host check's),
        counted by its type."""
        self.telemetry.rejected.labels(error.slug).inc()
        return problem_response(error)

    async def _service_error(self, request: Request, error: ServiceError) -> Response:
        return self.on_error(error)

    async def _invalid(self, request: Request, error: RequestValidationError) -> Response:
        """FastAPI's parameter and body validation, as the problem the lane's readers give."""
        first: dict[str, Any] = error.errors()[0] if error.errors() else {}
        if first.get("type") == "json_invalid":  # as /events answers it: 400, not a field
            location = first.get("loc", ())
            position = location[-1] if location and isinstance(location[-1], int) else -1
            reason = (first.get("ctx") or {}).get("error") or first.get("msg", "JSON decode error")
            body = await request.body()  # already read (and kept) by FastAPI
            detail = json_error_detail(body, position, f"{reason} at character {position}")
            return self.on_error(MalformedBody(detail))
        field = ".".join(str(part) for part in first.get("loc", ()) if part != "body") or None
        message = first.get("msg", "invalid request")
        return self.on_error(InvalidInput(f"{field}: {message}" if field else message, field=field))

    async def _http_error(self, request: Request, error: HTTPException) -> Response:
        """Starlette's 404 / 405 as problems; ``Allow`` names every method of the path (a 405),
        and OPTIONS is answered with it."""
        headers = error.headers
        if error.status_code == 405:
            methods = allowed_methods(self.router.routes, route_path(request.scope))
            if methods is not None:
                if request.method == "OPTIONS":
                    return Response(status_code=204, headers={"Allow": ", ".join(methods)})
                headers = {**(headers or {}), "Allow": ", ".join(methods)}
        body = {
            "type": "about:blank",
            "title": str(error.detail),
            "status": error.status_code,
            "detail": f"{request.method} {request.url.path}: {error.detail}",
        }
        return JSONResponse(body, error.status_code, headers, media_type=PROBLEM)

    def lane_route(self, scope: Scope) -> LaneRoute | None:
        """The lane's route of a request, ``scope`` given what routing would set."""
        method, path = scope["method"], route_path(scope)
        fixed = self._fixed_lane.get((method, path))
        if fixed is not None:
            scope["endpoint"], scope["route"] = fixed.endpoint, fixed.served_route
            return fixed
        for candidate in self._lane_routes:
            if method in candidate.methods:
                match = candidate.path_regex.match(path)
                if match is not None:
                    scope["endpoint"] = candidate.endpoint
                    if parameters := match.groupdict():  # plain strings: no convertor to apply
                        scope["path_params"] = {**scope.get("path_params", {}), **parameters}
                    scope["route"] = candidate.served_route
                    return candidate
        return None

    def warming(self, path: str) -> bool:
        warm = getattr(self.state, "warm", None)
        if warm is not None and not warm.is_set():
            return path.startswith("/v1/")
        self.warm_open = warm is not None
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind != "http":
            if kind == "websocket" and (named := header(scope, b"host")) is not None:
                if (refusal := self.hosts.refusal(named, scope)) is not None:
                    self.telemetry.rejected.labels(refusal.slug).inc()
                    await close_handshake(refusal, receive, send)
                    return
            await super().__call__(scope, receive, send)
            return
        started = time.perf_counter()
        if self.root_path:  # as FastAPI does first
            scope["root_path"] = self.root_path
        log = self.telemetry.log_requests
        host: bytes | None = None
        has_body = False
        request_id = ""
        for name, value in scope["headers"]:
            if name == b"host":
                host = value
            elif name == b"content-length":
                has_body = value.strip() not in (b"0", b"")
            elif name == b"transfer-encoding":
                has_body = True
            elif name == b"x-request-id" and log:
                request_id = value.decode("latin-1")[:128]
        if log:
            request_id = request_id or uuid.uuid4().hex
            scope.setdefault("state", {})
        method = scope["method"]
        head = method == "HEAD"
        # a copy: the server reads the request's own scope to know that it answers a HEAD
        inner = {**scope, "method": "GET"} if head else scope
        no_store = scope["path"].startswith("/v1/")
        status = 500
        started_response = ended = False

        async def reply(message: Message) -> None:
            nonlocal status, started_response, ended
            if message["type"] == "http.response.start":
                status, started_response = message["status"], True
                if no_store or log:
                    message["headers"] = _added(message.get("headers") or (), no_store, request_id)
            elif head and message["type"] == "http.response.body":
                if ended:
                    return
                ended = True
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        guarded = GuardedReceive(self.bodies, scope, receive) if has_body else None
        try:
            refusal = None if host is None else self.hosts.refusal(host, scope)
            if refusal is not None:
                await self.on_error(refusal)(inner, receive, reply)
            elif not self.warm_open and self.warming(scope["path"]):
                await self.on_error(warming_up())(inner, receive, reply)
            elif (route := self.lane_route(inner)) is not None:
                response = await route.respond(inner, guarded or receive, self)
                if type(response).__call__ is not Response.__call__:  # a stream: through reply
                    await response(inner, receive, reply)
                else:  # a whole body: its two messages sent here, not through reply
                    status, started_response = response.status_code, True
                    headers = response.raw_headers
                    if no_store or log:
                        headers = _added(headers, no_store, request_id)
                    await send(
                        {"type": "http.response.start", "status": status, "headers": headers}
                    )
                    body = b"" if head else response.body
                    await send({"type": "http.response.body", "body": body})
                    if response.background is not None:
                        await response.background()
            else:
                await super().__call__(inner, guarded or receive, reply)
        except Exception:
            if not started_response:  # as Starlette's ServerErrorMiddleware
                await PlainTextResponse("Internal Server Error", status_code=500)(
                    inner, receive, reply
                )
            raise
        finally:
            if guarded is not None:
                guarded.release()
            record_request(self.telemetry, inner, method, status, started, request_id)


def _added(headers: Sequence[tuple[bytes, bytes]], no_store: bool, request_id: str) -> list:
    """An answer's headers with ``no-store`` (unless it has a ``Cache-Control``) and the
    request id (when logging): a new list, the response's own is left as it is."""
    added = list(headers)
    if no_store and not any(name.lower() == b"cache-control" for name, _ in added):
        added.append(_NO_STORE)
    if request_id:
        added.append((b"x-request-id", request_id.encode("latin-1")))
    return added


def problem_response(error: ServiceError) -> Response:
    """The one rendering of a problem (RFC 9457)."""
    return JSONResponse(
        error.problem(), status_code=error.status, media_type=PROBLEM, headers=error.headers
    )
