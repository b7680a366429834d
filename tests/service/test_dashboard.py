"""The dashboard's routes and files, through the real ASGI app (the page itself runs in a real
browser in test_dashboard_browser.py): pages and assets are served from the package, public,
with no external URL; ``/dashboard/config``; the wheel ships the files."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from service.routers.dashboard import DASHBOARD_POLICY, STATIC_DIRECTORY
from tests.service.conftest import started_apps

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"api_keys": ["rw-key"], "read_only_api_keys": ["ro-key"]}
OWN_FILES = ["dashboard.html", "dashboard.js", "charts.js", "dashboard.css", "favicon.svg"]


@pytest.fixture
def make_client():
    with started_apps(store="memory") as build:
        yield build


@pytest.mark.parametrize("path", ["/", "/dashboard"])
def test_the_dashboard_page_is_public_and_runs_only_its_own_scripts(make_client, path):
    client = make_client(**KEYS)
    response = client.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["content-security-policy"] == DASHBOARD_POLICY
    assert "script-src 'self'" in DASHBOARD_POLICY and "connect-src 'self'" in DASHBOARD_POLICY
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.text == (STATIC_DIRECTORY / "dashboard.html").read_text()
    assert client.get("/v1/models").status_code == 401  # the data is not public


def test_every_file_the_page_references_is_served(make_client):
    client = make_client()
    page = client.get("/").text
    references = re.findall(r'(?:src|href)="([^"#]+)"', page)
    local = [url for url in references if url.startswith("/static/")]
    assert len(local) == 6  # favicon, uPlot css + js, dashboard css, charts + dashboard js
    for url in local:
        response = client.get(url)
        assert response.status_code == 200, url
        assert response.content == (STATIC_DIRECTORY / url.removeprefix("/static/")).read_bytes()
    assert set(references) - set(local) == {"/docs", "/redoc"}


def test_static_files_stay_inside_the_static_directory(make_client):
    client = make_client()
    for path in ["/static/../settings.py", "/static/%2e%2e/settings.py", "/static/nothing.js"]:
        response = client.get(path)
        assert response.status_code == 404, path
        assert response.headers["content-type"] == "application/problem+json"


@pytest.mark.parametrize(
    ("path", "assets"),
    [
        ("/docs", ["vendor/swagger-ui/swagger-ui-bundle.js", "vendor/swagger-ui/swagger-ui.css"]),
        ("/redoc", ["vendor/redoc/redoc.standalone.js"]),
    ],
)
def test_api_docs_pages_load_the_vendored_assets(make_client, path, assets):
    client = make_client()
    page = client.get(path)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "/openapi.json" in page.text
    external = [url for url in re.findall(r'(?:src|href)="([^"]+)"', page.text)
                if not url.startswith("/")]  # fmt: skip
    assert external == []
    for asset in assets:
        assert f"/static/{asset}" in page.text
        assert client.get(f"/static/{asset}").status_code == 200
    if path == "/docs":
        assert '"validatorUrl": null' in page.text  # no call to swagger.io's validator


def test_vendored_packages_carry_their_licences_and_no_cdn_address():
    vendor = STATIC_DIRECTORY / "vendor"
    packages = sorted(path for path in vendor.iterdir() if path.is_dir())
    assert [path.name for path in packages] == ["redoc", "swagger-ui", "uplot"]
    for package in packages:
        assert (package / "LICENSE").read_text().strip(), package
    notes = (vendor / "README.md").read_text()
    for package in ("uplot@1.6.32", "swagger-ui-dist@5.35.0", "redoc@2.5.4"):
        assert package in notes
    # the only address a bundle would load by itself (ReDoc's footer logo) is replaced
    assert "cdn.redoc.ly" not in (vendor / "redoc" / "redoc.standalone.js").read_text()
    for name in OWN_FILES:  # (an SVG names its XML namespace with a URL: not a request)
        text = (STATIC_DIRECTORY / name).read_text()
        assert not re.search(r"https?://(?!www\.w3\.org/2000/svg\b)", text), name


def test_dashboard_config_says_whether_a_key_is_needed(make_client):
    open_server = make_client()
    assert open_server.get("/dashboard/config").json() == {
        "auth_required": False,
        "mode": "sync",
        "stream_interval_seconds": 1.0,
    }
    keyed = make_client(**KEYS, stream_interval_seconds=0.5)
    response = keyed.get("/dashboard/config")  # no key: the page asks before it fails
    assert response.status_code == 200
    assert response.json() == {
        "auth_required": True,
        "mode": "sync",
        "stream_interval_seconds": 0.5,
    }


def test_openapi_documents_the_config_but_not_the_pages(make_client):
    document = make_client().get("/openapi.json").json()
    paths = document["paths"]
    assert "/dashboard/config" in paths
    schema = paths["/dashboard/config"]["get"]["responses"]["200"]["content"]
    assert schema["application/json"]["schema"] == {"$ref": "#/components/schemas/DashboardConfig"}
    assert set(document["components"]["schemas"]["DashboardConfig"]["required"]) == {
        "auth_required",
        "mode",
        "stream_interval_seconds",
    }
    for page in ("/", "/dashboard", "/docs", "/redoc"):
        assert page not in paths


def _package_data_globs() -> list[str]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return pyproject["tool"]["setuptools"]["package-data"]["service"]


def test_package_data_covers_every_static_file():
    service = ROOT / "service"
    globs = _package_data_globs()
    files = [path for path in STATIC_DIRECTORY.rglob("*") if path.is_file()
             and "__pycache__" not in path.parts]  # fmt: skip
    assert len(files) >= 15
    matched = {path for pattern in globs for path in service.glob(pattern) if path.is_file()}
    assert sorted(map(str, set(files) - matched)) == []


def test_the_wheel_ships_the_static_files(tmp_path):
    """``pip wheel`` of a copy of the project (pip builds in isolation with setuptools from
    PyPI, as ``pip install .`` does)."""
    source = tmp_path / "source"
    for name in ("pyproject.toml", "README.md"):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, source / name)
    for package in ("core", "service"):
        shutil.copytree(ROOT / package, source / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc"))  # fmt: skip
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path), "."],
        cwd=source,
        check=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("aucstream-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        "service/" + str(path.relative_to(ROOT / "service"))
        for path in STATIC_DIRECTORY.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert expected <= shipped
    assert "service/static/vendor/uplot/LICENSE" in shipped
