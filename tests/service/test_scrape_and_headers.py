"""Prometheus ``/metrics`` behind the API keys, with series by model for the most recently
active models only (the others under ``model=""``), dropped when a model is deleted or evicted;
``Cache-Control: no-store`` on ``/v1`` and a Content-Security-Policy on ``/docs`` and
``/redoc``.  Through a real uvicorn."""

from __future__ import annotations

import base64
import hashlib
import re

import httpx

from tests.service.server_helpers import live_url

WRITER = "scrape-writer"
READER = "scrape-reader"
ONE_EVENT = {"events": [{"x": [0.1, 0.2, 0.3, 0.4, 0.5]}]}


def models_in(text: str) -> set[str]:
    """The model ids with a series of their own in an exposition."""
    return set(re.findall(r'model="([^"]+)"', text))


def sample(text: str, name: str, model: str) -> float | None:
    match = re.search(rf'^{name}{{model="{re.escape(model)}"}} (\S+)$', text, re.MULTILINE)
    return float(match.group(1)) if match else None


def create_and_score(http: httpx.Client, model: str) -> None:
    body = {"id": model, "learner": "spam", "n_features": 5}
    assert http.post("/v1/models", json=body).status_code == 201
    assert http.post(f"/v1/models/{model}/score", json=ONE_EVENT, timeout=900).status_code == 200


def test_metrics_need_a_key_when_keys_are_set():
    env = {"AUCSTREAM_API_KEYS": WRITER, "AUCSTREAM_READ_ONLY_API_KEYS": READER}
    with live_url(**env) as url, httpx.Client(base_url=url, timeout=30) as http:
        anonymous = http.get("/metrics")
        assert anonymous.status_code == 401
        assert anonymous.headers["content-type"] == "application/problem+json"
        assert anonymous.headers["www-authenticate"] == "Bearer"
        assert http.get("/metrics", headers={"X-API-Key": "unknown"}).status_code == 401
        for headers in ({"X-API-Key": READER}, {"Authorization": f"Bearer {READER}"}):
            scraped = http.get("/metrics", headers=headers)
            assert scraped.status_code == 200
            assert "aucstream_http_requests_total" in scraped.text
        assert http.get("/healthz").status_code == 200  # the probes stay public


def test_series_by_model_only_for_the_most_recently_active_models():
    with (
        live_url(AUCSTREAM_PROMETHEUS_MODEL_SERIES="3") as url,
        httpx.Client(base_url=url, timeout=30) as http,
    ):
        models = [f"m{index}" for index in range(6)]
        for model in models:
            create_and_score(http, model)
        # the first three took the free places; the scrape ranks by activity: the last three
        text = http.get("/metrics").text
        assert models_in(text) == {"m3", "m4", "m5"}
        assert "aucstream_models_with_series 3.0" in text
        # their events of before are counted with every other model's, under model=""
        assert sample(text, "aucstream_events_scored_total", "") == 3.0
        assert sample(text, "aucstream_events_scored_total", "m0") is None
        for model in ("m0", "m4"):
            http.post(f"/v1/models/{model}/score", json=ONE_EVENT)
        text = http.get("/metrics").text
        assert models_in(text) == {"m0", "m4", "m5"}
        assert sample(text, "aucstream_events_scored_total", "m4") == 1.0
        # a model without series is still counted
        http.post("/v1/models/m1/score", json=ONE_EVENT)
        assert sample(http.get("/metrics").text, "aucstream_events_scored_total", "") == 5.0


def test_series_go_with_a_deleted_or_evicted_model():
    with (
        live_url(AUCSTREAM_MAX_CACHED_MODELS="2") as url,
        httpx.Client(base_url=url, timeout=30) as http,
    ):
        for model in ("a", "b"):
            create_and_score(http, model)
        assert {"a", "b"} <= models_in(http.get("/metrics").text)
        create_and_score(http, "c")  # the cache holds two: "a" leaves the process
        assert models_in(http.get("/metrics").text) == {"b", "c"}
        assert http.delete("/v1/models/b").status_code == 204
        assert models_in(http.get("/metrics").text) == {"c"}
        # used again, read back from the store: series again, from zero
        http.post("/v1/models/a/score", json=ONE_EVENT)
        assert sample(http.get("/metrics").text, "aucstream_events_scored_total", "a") == 1.0


def test_v1_responses_are_not_stored_and_the_doc_pages_have_a_policy():
    with live_url() as url, httpx.Client(base_url=url, timeout=30) as http:
        for response in (
            http.get("/v1/models"),
            http.get("/v1/models/missing"),  # problems too
            http.post("/v1/models", json={"id": "m", "learner": "spam", "n_features": 5}),
        ):
            assert response.headers["cache-control"] == "no-store", response.request.url
        assert "cache-control" not in http.get("/healthz").headers
        for path in ("/docs", "/redoc"):
            page = http.get(path)
            policy = page.headers["content-security-policy"]
            directives = dict(part.split(" ", 1) for part in policy.split("; "))
            assert directives["default-src"] == "'none'"
            assert directives["connect-src"] == "'self'"
            assert directives["frame-ancestors"] == "'none'"
            # this origin's scripts, and the page's own inline script by its hash only
            allowed = directives["script-src"].split()
            inline = re.findall(r"<script>(.*?)</script>", page.text, re.DOTALL)
            digests = [hashlib.sha256(script.encode()).digest() for script in inline]
            hashes = [f"'sha256-{base64.b64encode(digest).decode()}'" for digest in digests]
            assert allowed == ["'self'", *hashes]
            assert "'unsafe-inline'" not in allowed and "'unsafe-eval'" not in allowed
            assert page.headers["x-content-type-options"] == "nosniff"
