"""The pages a browser opens: the live dashboard (``/``, ``/dashboard``), Swagger UI (``/docs``)
and ReDoc (``/redoc``), served from the package's files (no CDN: docs/dashboard.md).  They hold
no data; the ``/v1`` API they read asks for the key, sent as a header, never in a query string."""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field

from service.deps import SettingsDep

STATIC_DIRECTORY = Path(__file__).resolve().parent.parent / "static"
STATIC_PREFIX = "/static"

#: The pages run only this origin's scripts and talk only to it, so an injected script could
#: not send the API key anywhere else; inline styles are allowed (uPlot and ReDoc use them).
#: Swagger UI and ReDoc also run their page's inline start-up script, by its hash, load fonts
#: from data: URLs, and ReDoc builds its search worker from a blob.
_POLICY = (
    "default-src 'none'; script-src 'self'{hashes}; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; {fonts}connect-src 'self'; {workers}"
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
DASHBOARD_POLICY = _POLICY.format(hashes="", fonts="", workers="")
PAGE_HEADERS = {
    "Content-Security-Policy": DASHBOARD_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)


def document_policy(html: str) -> str:
    """The policy of a documentation page, allowing exactly the inline scripts of ``html``."""
    hashes = "".join(
        " 'sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode() + "'"
        for script in _INLINE_SCRIPT.findall(html)
    )
    return _POLICY.format(
        hashes=hashes, fonts="font-src 'self' data:; ", workers="worker-src 'self' blob:; "
    )


router = APIRouter()


@router.get("/", response_class=FileResponse, include_in_schema=False)
@router.get("/dashboard", response_class=FileResponse, include_in_schema=False)
async def dashboard() -> FileResponse:
    """The live dashboard: models, ROC curve, AUC / pAUC over time, regret, counts, lag."""
    return FileResponse(
        STATIC_DIRECTORY / "dashboard.html", media_type="text/html", headers=PAGE_HEADERS
    )


class DashboardConfig(BaseModel):
    """What the dashboard needs to know before its first ``/v1`` request (public)."""

    auth_required: bool = Field(
        description="whether /v1 routes need an API key (X-API-Key or Authorization: Bearer)"
    )
    mode: Literal["sync", "queue"] = Field(
        description="sync: requests learn before they return; queue: workers learn, with a lag"
    )
    stream_interval_seconds: float = Field(
        description="seconds between two checks of a model by the metrics stream"
    )


@router.get("/dashboard/config", response_model=DashboardConfig, tags=["dashboard"])
async def dashboard_config(settings: SettingsDep) -> DashboardConfig:
    """Settings the dashboard page reads first: whether to ask for an API key (so that it asks
    before a request fails), the service mode and the stream's check interval."""
    return DashboardConfig(
        auth_required=settings.auth_enabled,
        mode=settings.mode,
        stream_interval_seconds=settings.stream_interval_seconds,
    )


def _asset(path: str) -> str:
    return f"{STATIC_PREFIX}/{path}"


def _document_page(render: Callable[..., HTMLResponse], name: str, **assets: Any) -> Any:
    """An endpoint serving FastAPI's page ``render`` of the document, with local ``assets``."""

    async def page(request: Request) -> HTMLResponse:
        app: FastAPI = request.app
        title = f"{app.title} - {name}"
        page = render(openapi_url=app.openapi_url or "/openapi.json", title=title, **assets)
        policy = document_policy(bytes(page.body).decode())
        page.headers.update({**PAGE_HEADERS, "Content-Security-Policy": policy})
        return page

    return page


# Swagger UI without spec validation by swagger.io's online validator (an external request)
swagger_ui = _document_page(
    get_swagger_ui_html,
    "Swagger UI",
    swagger_js_url=_asset("vendor/swagger-ui/swagger-ui-bundle.js"),
    swagger_css_url=_asset("vendor/swagger-ui/swagger-ui.css"),
    swagger_favicon_url=_asset("favicon.svg"),
    swagger_ui_parameters={"validatorUrl": None},
)
# ReDoc without Google Fonts (the system's fonts)
redoc = _document_page(
    get_redoc_html,
    "ReDoc",
    redoc_js_url=_asset("vendor/redoc/redoc.standalone.js"),
    redoc_favicon_url=_asset("favicon.svg"),
    with_google_fonts=False,
)
for path, endpoint in (("/docs", swagger_ui), ("/redoc", redoc)):
    router.add_api_route(path, endpoint, response_class=HTMLResponse, include_in_schema=False)


def install(app: FastAPI) -> None:
    """Add the pages (in place of FastAPI's CDN-backed ones) and mount the static files."""
    app.include_router(router)
    app.mount(STATIC_PREFIX, StaticFiles(directory=STATIC_DIRECTORY), name="static")
