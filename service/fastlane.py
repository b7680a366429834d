"""The short lane of the per-event routes: ``POST /v1/models/{model_id}/events`` and
``.../score`` served without FastAPI's per-request machinery.

These are the requests a fraud pipeline sends one event at a time, so what every request pays
besides the event counts.  FastAPI resolving the declared parameters and dependencies and
validating the response model, and the stack around the router (the native OpenTelemetry
check, FastAPI's body-limit and exception-telemetry middlewares, the exception middleware, the
AsyncExitStack, routing over every route) are skipped; what every request must pass is kept:
the app's own middlewares (request metrics, body guard, warm-up gate, ``no-store``) and
Starlette's 500 page outermost, as in FastAPI's stack.  Measured figures are in
``loadtest/README.md``.

* :class:`HotRoute` -- a plain Starlette route, which the app's router also holds (for the
  405 of other methods) and which records itself as ``scope["route"]`` as FastAPI's routes do
  (the request metrics are labelled with its path template);
* :func:`served` -- the endpoint called with its arguments read by hand: the API key, the
  model id and the boolean query flags (:func:`query_flag`, parsed as FastAPI parses ``bool``);
  the endpoint stays declared on a FastAPI router that only the OpenAPI document reads;
* :class:`HotLane` -- which requests take the lane, and their endpoint's call, a
  :class:`~service.errors.ServiceError` rendered by the app's handler;
* :class:`LaneApp` -- the FastAPI app whose ``__call__`` sends the lane's requests down it
  (:func:`install` builds its stack); anything else goes through FastAPI.

Only public Starlette interfaces are used.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.middleware import Middleware
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from service.auth import check_api_key
from service.deps import Services
from service.errors import InvalidInput, ServiceError

_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})


def query_flag(request: Request, name: str, default: bool) -> bool:
    """A boolean query parameter, read as FastAPI reads ``name: bool = default`` (the same
    spellings, any case); anything else is a 422 naming ``query.<name>``."""
    if not request.scope.get("query_string"):  # none at all: no need to parse it
        return default
    value = request.query_params.get(name)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise InvalidInput(
        f"query.{name}: Input should be a valid boolean (true or false), got {value!r}",
        field=f"query.{name}",
    )


def query_count(request: Request, name: str, most: int) -> int:
    """A count query parameter from 0 (the default, when absent) to ``most``; anything else
    is a 422 naming ``query.<name>``."""
    if not request.scope.get("query_string"):
        return 0
    value = request.query_params.get(name)
    if value is None:
        return 0
    count = int(value) if value.isascii() and value.isdigit() and len(value) <= 9 else -1
    if not 0 <= count <= most:
        raise InvalidInput(
            f"query.{name}: must be a whole number from 0 to {most}, got {value[:40]!r}",
            field=f"query.{name}",
        )
    return count


class HotRoute(Route):
    """A plain Starlette route for a per-event path, recording itself as ``scope["route"]``."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child_scope = super().matches(scope)
        if match is not Match.NONE:
            child_scope["route"] = self
        return match, child_scope


def served(
    route: Callable[..., Awaitable[Response]],
    flag: str,
    default: bool,
    options: tuple[str, ...] = (),
) -> Callable[[Request], Awaitable[Response]]:
    """``route`` served without FastAPI's dependency machinery: the API key, the model id,
    the route's boolean query ``flag`` (its 4th parameter) plus ``zero_based``, and its other
    boolean ``options`` (false by default) by name."""

    async def serve(request: Request) -> Response:
        services: Services = request.app.state.services
        check_api_key(request, services.settings, writes=True)  # a POST
        return await route(
            request.path_params["model_id"],
            request,
            services,
            query_flag(request, flag, default),
            query_flag(request, "zero_based", False),
            **{option: query_flag(request, option, False) for option in options},
        )

    return serve


def route_path(scope: Scope) -> str:
    """The path the app routes: ``path`` without the ``root_path`` it is mounted at."""
    path: str = scope["path"]
    root_path: str = scope.get("root_path", "")
    if not root_path or not path.startswith(root_path):
        return path
    if path == root_path:
        return ""
    return path[len(root_path) :] if path[len(root_path)] == "/" else path


class HotLane:
    """The end of the lane: the requests it :meth:`takes` (a ``POST`` matching one of
    ``routes``) are served by the route's endpoint, a :class:`ServiceError` by ``on_error``
    (the app's handler, as the exception middleware would)."""

    def __init__(
        self,
        routes: Sequence[HotRoute],
        on_error: Callable[[Request, ServiceError], Awaitable[Response]],
    ) -> None:
        #: the last path segment of each route (``score``) -> the route
        self.routes = {route.path.rsplit("/", 1)[1]: route for route in routes}
        self.on_error = on_error

    def takes(self, scope: Scope) -> bool:
        """Whether the request is the lane's; if so, ``scope`` gets what routing would have
        set (``endpoint``, ``path_params``, ``route``: the same values, without trying the
        app's other routes)."""
        if scope["method"] != "POST":
            return False
        path = route_path(scope)
        route = self.routes.get(path[path.rfind("/") + 1 :])
        if route is None:
            return False
        match = route.path_regex.match(path)
        if match is None:
            return False
        scope["endpoint"] = route.endpoint
        # ``{model_id}`` is a plain string: no convertor to apply
        scope["path_params"] = {**scope.get("path_params", {}), **match.groupdict()}
        scope["route"] = route
        return True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            response = await scope["endpoint"](request)
        except ServiceError as error:
            response = await self.on_error(request, error)
        await response(scope, receive, send)


class LaneApp(FastAPI):
    """A FastAPI app with the short lane in front (set up by :func:`install`)."""

    #: the lane's ASGI stack and the routes it takes
    lane: ASGIApp | None = None
    lane_routes: HotLane | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        lane, routes = self.lane, self.lane_routes
        if lane is not None and routes is not None and scope["type"] == "http":
            if self.root_path:  # as FastAPI does first
                scope["root_path"] = self.root_path
            if routes.takes(scope):
                scope["app"] = self
                await lane(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


def install(
    app: LaneApp,
    routes: Sequence[HotRoute],
    middlewares: Sequence[Middleware],
    on_error: Callable[[Request, ServiceError], Awaitable[Response]],
) -> None:
    """The lane of ``routes`` (which the app's router holds too, before its other routes, for
    the 405 of other methods), with ``middlewares`` (innermost first) added to both the app
    and the lane, which ends with Starlette's 500 page as FastAPI's stack does."""
    app.lane_routes = HotLane(routes, on_error)
    lane: ASGIApp = app.lane_routes
    for cls, args, kwargs in middlewares:
        app.add_middleware(cls, *args, **kwargs)
        lane = cls(lane, *args, **kwargs)
    app.lane = ServerErrorMiddleware(lane, debug=app.debug)


__all__ = ["HotLane", "HotRoute", "LaneApp", "install", "query_count", "query_flag", "served"]
