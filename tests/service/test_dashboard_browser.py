"""The dashboard, /docs and /redoc in a real headless Chromium (Debian's ``chromium`` and
``chromium-driver``, driven by Selenium) against the real app under uvicorn.

The browser is offline (only the loopback resolves, see ``loadtest/browser.py``): every page
must work from the files the package serves.  Without Chromium the tests are skipped with a
message saying what to install, except with ``AUCSTREAM_REQUIRE_BROWSER=1`` (set by
``.ci/run``, which installs it), where a missing browser fails every test here.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator

import httpx
import pytest

from loadtest.browser import (
    canvas_stats,
    colour_pixels,
    console_errors,
    external_resources,
    png_stats,
    resource_urls,
)
from loadtest.local import free_port
from tests.service.conftest import events_json, make_stream
from tests.service.dashboard_helpers import ROC_BLUE, fast_server, page_state, post_events, wait_for
from tests.service.drift_helpers import DRIFT_FEATURES, flipping_stream

READ_WRITE_KEY = "dashboard-test-read-write"
READ_ONLY_KEY = "dashboard-test-read-only"
PAUC_SHADE = (217, 72, 15)  # the pAUC area, drawn translucent over white
DRIFT_MARK = (214, 51, 108)  # charts.js COLORS.drift
TIME_CHARTS = ("history-chart", "regret-chart", "throughput-chart")


def drift_marks(driver, chart: str) -> dict:
    """What a time chart marked (charts.js: data-drifts, data-x-range, data-plot)."""
    data = driver.execute_script("return {...document.getElementById(arguments[0]).dataset}", chart)
    return {
        "marks": json.loads(data.get("drifts", "[]")),
        "x_range": json.loads(data.get("xRange", "null")),
        "plot": json.loads(data.get("plot", "null")),
    }


def mark_columns(driver, canvas) -> dict[int, int]:
    """Canvas column -> pixels of the drift marker's colour in it, inside the plotting area's
    rows only (the columns of the "drift" labels count too)."""
    counts = driver.execute_script(
        """
        const [canvas, [r, g, b]] = arguments;
        const {data, width, height} = canvas.getContext('2d').getImageData(0, 0, canvas.width,
                                                                          canvas.height);
        const columns = {};
        for (let y = 0; y < height; y++) {
          for (let x = 0; x < width; x++) {
            const i = 4 * (y * width + x);
            const near = Math.abs(data[i] - r) <= 30 && Math.abs(data[i + 1] - g) <= 30
              && Math.abs(data[i + 2] - b) <= 30 && data[i + 3] > 200;
            if (near) columns[x] = (columns[x] || 0) + 1;
          }
        }
        return columns;
        """,
        canvas,
        list(DRIFT_MARK),
    )
    return {int(column): count for column, count in counts.items()}


def assert_marked_at(driver, chart: str, recent: list[dict]) -> list[dict]:
    """``chart`` marks each drift of ``recent`` (the API's drift.recent) where its time falls on
    the chart's time axis, and its canvas has a line of the marker's colour there."""
    drawn = drift_marks(driver, chart)
    marks = drawn["marks"]
    assert [(m["event"], m["time"]) for m in marks] == [(r["event"], r["time"]) for r in recent]
    (low, high), (left, width) = drawn["x_range"], drawn["plot"]
    canvas = driver.find_element("css selector", f"#{chart} canvas")
    columns = mark_columns(driver, canvas)
    height = driver.execute_script("return arguments[0].height", canvas)
    for mark in marks:
        expected = left + (mark["time"] - low) / (high - low) * width
        assert left < expected < left + width, (chart, mark, low, high)
        assert abs(mark["x"] - expected) <= 1, (chart, mark, expected)
        # a dashed line down the plot: at least a third of the canvas's height in that colour
        line = sum(columns.get(x, 0) for x in range(round(expected) - 2, round(expected) + 3))
        assert line > height / 3, (chart, mark, line, height)
    return marks


def test_dashboard_draws_the_posted_stream_live(browser, tmp_path):
    with fast_server() as url, httpx.Client(base_url=url, timeout=120) as http:
        # the default auto with a regret window (off by default for it): its pAUC gap is drawn
        model = {"id": "fraud", "n_features": 5, "regret_window": 1000}
        assert http.post("/v1/models", json=model).status_code == 201
        X, y = make_stream(900)
        post_events(http, "fraud", X[:500], y[:500])
        roc = http.get("/v1/models/fraud/metrics/roc").json()

        browser.get(url + "/")
        wait_for(lambda: page_state(browser)["roc"].get("version") == str(roc["version"]),
                 "the ROC curve of the posted events")  # fmt: skip
        state = page_state(browser)
        assert state["state"] == "live"
        assert state["roc"]["points"] == str(len(roc["fpr"]))
        assert browser.find_element("css selector", "#model-list a").text == "fraud"

        # the curve and the shaded pAUC area are on the canvas
        canvas = browser.find_element("css selector", "#roc-chart canvas")
        stats = canvas_stats(browser, canvas)
        assert stats["colours"] > 20 and stats["dominant_share"] < 0.98
        assert colour_pixels(browser, canvas, ROC_BLUE) > 300
        assert colour_pixels(browser, canvas, PAUC_SHADE, tolerance=90) > 500

        # the tiles show the service's numbers
        metrics = http.get("/v1/models/fraud/metrics").json()
        tiles = browser.find_element("id", "tiles").text
        assert f"{metrics['window']['auc']:.4f}" in tiles
        assert f"{metrics['window']['pauc']:.4f}" in tiles
        assert "DRIFTS DETECTED" in tiles.upper() and "on drift: none" in tiles  # the detector
        # the default auto does not score linearly in the features (its tree candidate): no
        # regret, and the page says why; the pAUC gap stands
        regret = metrics["regret"]
        assert regret["regret"] is None and f"{regret['pauc_gap']:.4f}" in tiles
        assert "undefined: the score is not linear" in tiles
        assert regret["online_loss_note"] in browser.find_element("id", "regret-note").text
        assert "500" in browser.find_element("id", "counts").text
        leaderboard = browser.find_element("id", "leaderboard")  # the default learner is auto
        assert leaderboard.is_displayed()
        rows = leaderboard.find_elements("css selector", "tbody tr")
        learners = [candidate["learner"] for candidate in metrics["leaderboard"]["candidates"]]
        assert [row.find_elements("tag name", "td")[1].text for row in rows] == learners
        shares = [f"{100 * c['weight']:.1f} %" for c in metrics["leaderboard"]["candidates"]]
        assert [row.find_elements("tag name", "td")[5].text for row in rows] == shares

        # more events: the stream brings a new version, the history grows, the ROC is re-read
        learned = post_events(http, "fraud", X[500:], y[500:])
        version = str(learned["version"])
        wait_for(lambda: page_state(browser)["roc"].get("version") == version, "the new ROC")
        wait_for(lambda: page_state(browser)["history"].get("version") == version, "the history")
        state = page_state(browser)
        assert int(state["history"]["points"]) >= 2
        assert state["roc"]["points"] == str(
            len(http.get("/v1/models/fraud/metrics/roc").json()["fpr"])
        )
        for chart in ("history-chart", "regret-chart", "throughput-chart"):
            canvas = browser.find_element("css selector", f"#{chart} canvas")
            assert canvas_stats(browser, canvas)["colours"] > 20, chart
        assert "900" in browser.find_element("id", "tiles").text

        png = browser.get_screenshot_as_png()
        (tmp_path / "dashboard.png").write_bytes(png)
        screenshot = png_stats(browser, png)
        assert screenshot["colours"] > 200 and screenshot["dominant_share"] < 0.9
        assert external_resources(browser, url) == []
        assert console_errors(browser) == []


def test_drifts_are_marked_on_the_time_charts_on_load_and_live(browser, tmp_path):
    """A flip of the labels' relation mid-stream is detected before the page opens, and marked;
    a flip back is detected while it is open, and marked too."""
    X, y = flipping_stream(n=9000, seed=0, changes=(3000, 6000))
    with fast_server() as url, httpx.Client(base_url=url, timeout=120) as http:
        # FTRL: its steps shrink as 1 / sqrt(n), so it follows each flip and its served scores
        # show both (the Laplace solver's shrink as 1 / n: it may keep the first concept)
        model = {"id": "drifting", "n_features": DRIFT_FEATURES, "learner": "logistic",
                 "params": {"solver": "ftrl"}}  # fmt: skip
        assert http.post("/v1/models", json=model).status_code == 201
        for start in range(0, 6000, 500):
            post_events(http, "drifting", X[start : start + 500], y[start : start + 500])
        recent = http.get("/v1/models/drifting/metrics").json()["drift"]["recent"]
        assert len(recent) == 1 and 3000 <= recent[0]["event"] < 6000  # the flip's, only

        browser.get(url + "/")
        for chart in TIME_CHARTS:
            wait_for(lambda chart=chart: drift_marks(browser, chart)["marks"], f"{chart}'s mark")
        for chart in TIME_CHARTS:
            [mark] = assert_marked_at(browser, chart, recent)
            # drawn before the page's first point (the time axis widened to it), not on its edge
            low, _ = drift_marks(browser, chart)["x_range"]
            assert low < mark["time"]
        tiles = browser.find_element("id", "tiles").text
        assert f"last at event {recent[0]['event']:,}" in tiles

        # the flip back, while the page is open: a second mark from the live stream
        for start in range(6000, 9000, 500):
            learned = post_events(http, "drifting", X[start : start + 500], y[start : start + 500])
        recent = http.get("/v1/models/drifting/metrics").json()["drift"]["recent"]
        assert len(recent) == 2 and recent[1]["event"] >= 6000
        version = str(learned["version"])
        wait_for(lambda: page_state(browser)["history"].get("version") == version, "the history")
        for chart in TIME_CHARTS:
            first, second = assert_marked_at(browser, chart, recent)
            assert first["x"] < second["x"]

        png = browser.get_screenshot_as_png()
        (tmp_path / "dashboard-drift.png").write_bytes(png)
        screenshot = png_stats(browser, png)
        assert screenshot["colours"] > 200 and screenshot["dominant_share"] < 0.9
        history = browser.find_element("css selector", "#history-chart canvas")
        assert colour_pixels(browser, history, DRIFT_MARK, tolerance=30) > 100
        assert external_resources(browser, url) == []
        assert console_errors(browser) == []


def test_model_list_follows_the_store_and_a_deleted_model_is_reported(browser):
    with fast_server() as url, httpx.Client(base_url=url, timeout=120) as http:
        browser.get(url + "/dashboard")
        wait_for(lambda: page_state(browser)["state"] == "no-models", "the empty state")
        assert browser.find_element("id", "models-empty").is_displayed()

        X, y = make_stream(300)
        for model in ("alpha", "beta"):
            http.post("/v1/models", json={"id": model, "n_features": 5, "learner": "spam"})
            post_events(http, model, X, y)
        browser.get(url + "/dashboard#/models/%E0%A4%A")  # a malformed escape: the first model
        wait_for(lambda: browser.find_element("id", "model-title").text == "alpha", "alpha")
        browser.get(url + "/dashboard#/models/beta")
        wait_for(lambda: page_state(browser)["roc"].get("points"), "beta's ROC")
        assert browser.find_element("id", "model-title").text == "beta"
        names = [a.text for a in browser.find_elements("css selector", "#model-list a")]
        assert names == ["alpha", "beta"]
        assert not browser.find_element("id", "leaderboard").is_displayed()  # not auto

        browser.find_element("link text", "alpha").click()
        wait_for(lambda: browser.find_element("id", "model-title").text == "alpha", "alpha")
        wait_for(lambda: page_state(browser)["roc"].get("points"), "alpha's ROC")
        assert console_errors(browser) == []

        assert http.delete("/v1/models/alpha").status_code == 204
        notice = browser.find_element("id", "notice")
        wait_for(lambda: "alpha does not exist" in notice.text, "the deleted model's notice")
        # ... and the page moves on to the model that is left
        wait_for(lambda: browser.find_element("id", "model-title").text == "beta", "beta again")
        names = [a.text for a in browser.find_elements("css selector", "#model-list a")]
        assert names == ["beta"]
        # the only console errors: the 404s of the deleted model (its metrics stream ends
        # with a "deleted" message, not a cut)
        errors = console_errors(browser)
        assert all("status of 404" in message for message in errors), errors


def test_api_key_is_asked_kept_in_the_tab_and_sent_as_a_header(browser):
    keys = {"AUCSTREAM_API_KEYS": READ_WRITE_KEY, "AUCSTREAM_READ_ONLY_API_KEYS": READ_ONLY_KEY}
    with fast_server(**keys) as url, httpx.Client(base_url=url, timeout=120) as http:
        headers = {"X-API-Key": READ_WRITE_KEY}
        assert http.post("/v1/models", json={"id": "m", "n_features": 5}, headers=headers)
        X, y = make_stream(400)
        post_events(http, "m", X, y, key=READ_WRITE_KEY)
        assert http.get("/v1/models").status_code == 401  # the API does need a key

        browser.get(url + "/")
        browser.execute_script("sessionStorage.clear()")
        browser.refresh()
        wait_for(lambda: page_state(browser)["state"] == "need-key", "the key prompt")
        dialog = browser.find_element("id", "key-dialog")
        assert dialog.get_attribute("open") is not None
        # asked before any /v1 request: nothing failed, nothing in the console
        assert not [u for u in resource_urls(browser) if "/v1/" in u]
        assert console_errors(browser) == []

        # a wrong key: refused, asked again, nothing shown
        browser.find_element("id", "api-key").send_keys("not-a-key")
        browser.find_element("id", "key-submit").click()
        wait_for(lambda: "refused" in browser.find_element("id", "key-message").text, "refusal")
        assert page_state(browser)["state"] == "need-key"
        assert all("401" in message for message in console_errors(browser))

        # a read-only key is enough: the page goes live and draws
        field = browser.find_element("id", "api-key")
        field.send_keys(READ_ONLY_KEY)
        browser.find_element("id", "key-submit").click()
        wait_for(lambda: page_state(browser)["roc"].get("points"), "the ROC with a key")
        assert page_state(browser)["state"] == "live"
        assert browser.execute_script("return sessionStorage.getItem('aucstream.apiKey')") == (
            READ_ONLY_KEY
        )
        assert not any(READ_ONLY_KEY in u for u in resource_urls(browser))  # never in a URL
        assert console_errors(browser) == []

        # a reload keeps the key (same tab); "forget" drops it and asks again
        browser.refresh()
        wait_for(lambda: page_state(browser)["roc"].get("points"), "the ROC after a reload")
        browser.find_element("id", "forget-key").click()
        wait_for(lambda: page_state(browser)["state"] == "need-key", "the prompt after forget")
        assert browser.execute_script("return sessionStorage.getItem('aucstream.apiKey')") is None
        assert console_errors(browser) == []


def test_queue_lag_is_shown_and_drains_when_a_worker_learns(browser, empty_redis, workers):
    queue = {"AUCSTREAM_MODE": "queue", "AUCSTREAM_STORE": "redis",
             "AUCSTREAM_REDIS_URL": empty_redis}  # fmt: skip
    with fast_server(**queue) as url, httpx.Client(base_url=url, timeout=120) as http:
        assert http.post("/v1/models", json={"id": "q", "n_features": 5}).status_code == 201
        X, y = make_stream(300)
        response = http.post("/v1/models/q/events", json=events_json(X, y))
        assert response.status_code == 202 and response.json()["backlog_events"] == 300

        browser.get(url + "/")
        tiles = browser.find_element("id", "tiles")
        wait_for(lambda: "300 ev" in tiles.text, "the lag of the queued events")
        assert "Queue mode: 300 events appended" in browser.find_element("id", "lag-note").text
        wait_for(lambda: page_state(browser)["roc"].get("version") == "1", "the first ROC")
        assert page_state(browser)["roc"]["points"] == "0"  # nothing learned yet
        assert "No curve yet" in browser.find_element("id", "roc-note").text

        workers(empty_redis, "w1")
        wait_for(lambda: page_state(browser)["roc"].get("points", "0") != "0", "the learned ROC")
        wait_for(lambda: "0 ev" in tiles.text and "300" in tiles.text, "the drained queue")
        metrics = http.get("/v1/models/q/metrics").json()
        assert metrics["counts"]["events_learned"] == 300 and metrics["queue"]["events"] == 0
        lag = browser.find_element("css selector", "#throughput-chart canvas")
        assert colour_pixels(browser, lag, (198, 40, 40)) > 50  # the lag series (COLORS.lag)
        assert console_errors(browser) == []


@pytest.mark.parametrize(
    ("path", "rendered"),
    [
        ("/docs", ".swagger-ui .opblock"),  # one block per operation
        ("/redoc", "[data-section-id^='operation/']"),
    ],
)
def test_api_docs_render_offline_from_local_assets(browser, path, rendered):
    with fast_server() as url:
        browser.get(url + path)
        wait_for(lambda: len(browser.find_elements("css selector", rendered)) >= 10,
                 f"{path} to render the operations")  # fmt: skip
        assert external_resources(browser, url) == []
        loaded = resource_urls(browser)
        assert any(u.endswith("/openapi.json") for u in loaded)
        assert any("/static/vendor/" in u for u in loaded)
        assert console_errors(browser) == []


@contextlib.contextmanager
def uvicorn_in_this_process(app) -> Iterator[str]:
    """The app under a real uvicorn on a thread of the test process, so that the test holds
    its warm-up at chosen groups (:class:`tests.service.warmup_helpers.WarmupPauses`)."""
    import threading

    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, "uvicorn to start")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


def test_a_banner_shows_the_warm_up_progress_until_the_models_load(browser, monkeypatch):
    """While the service compiles the kernels of its default path, every /v1 request is
    refused: the page says so in a banner, with the progress /readyz reports (groups done of
    the total, seconds so far, the estimate of the rest), then loads the models once ready."""
    import core.warmup
    from service.app import create_app
    from service.settings import Settings
    from tests.service.warmup_helpers import WarmupPauses

    pauses = WarmupPauses(monkeypatch, "regret", core.warmup.TREE)
    total = len(core.warmup.kernel_groups())
    app = create_app(Settings(warmup=True, store="memory"))
    with uvicorn_in_this_process(app) as url:
        assert pauses.reached["regret"].wait(300), "the warm-up never reached the regret kernels"
        browser.get(url + "/")
        banner = browser.find_element("id", "warmup")
        wait_for(banner.is_displayed, "the warm-up banner")
        data = browser.execute_script("return {...arguments[0].dataset}", banner)
        assert data["done"] == "2" and data["total"] == str(total), data
        assert float(data["secondsLeft"]) >= 0, data
        text = browser.find_element("id", "warmup-text").text
        assert re.fullmatch(
            rf"Warming up: compiling the kernels of the default path \(2 of {total} groups, "
            r"\d+ s so far\); ready in about \d+ s\.",
            text,
        ), text
        progress = browser.find_element("id", "warmup-bar")
        assert progress.get_attribute("value") is not None
        assert page_state(browser)["state"] == "loading"  # the API answered warming-up
        assert browser.find_element("id", "status").text == "warming up"

        pauses.release["regret"].set()  # ready: the banner goes, the (empty) model list loads
        wait_for(lambda: not banner.is_displayed(), "the banner to go")
        wait_for(lambda: page_state(browser)["state"] == "no-models", "the model list")
        # the refused requests (503) are the only errors the page logged
        assert all("503" in entry for entry in console_errors(browser))
    pauses.release[core.warmup.TREE].set()
