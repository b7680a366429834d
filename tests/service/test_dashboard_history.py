"""The dashboard's time charts start from the history the server keeps and go on live; an idle
model's chart spans its history and says so; the ``auto`` leaderboard is readable at 1,366 px.
In a real headless Chromium against the real app under uvicorn (as test_dashboard_browser.py,
whose server and browser fixtures it uses)."""

from __future__ import annotations

import json
import time

import httpx

from loadtest.browser import colour_pixels, console_errors
from tests.service.clock_helpers import FixedClock
from tests.service.conftest import (
    create_model,
    events_json,
    make_stream,
    started_apps,
)
from tests.service.dashboard_helpers import ROC_BLUE, fast_server, page_state, post_events, wait_for


def _snapshot_with_history(start: float, minutes: int, every: int) -> bytes:
    """A model ``hist`` that learned a batch every ``every`` minutes for ``minutes`` minutes
    from ``start`` (an in-process app with a clock of its own), exported as a snapshot."""
    with started_apps(store="memory") as build:
        client = build()
        clock = FixedClock(start)
        client.app.state.engine.clock = clock
        create_model(client, "hist", n_features=5, scaling="none")
        X, y = make_stream(40 * (minutes // every + 1), seed=5)
        for step, minute in enumerate(range(0, minutes, every)):
            clock.now = start + 60 * minute
            rows = slice(40 * step, 40 * (step + 1))
            response = client.post("/v1/models/hist/events", json=events_json(X[rows], y[rows]))
            assert response.status_code == 200, response.text
        return client.get("/v1/models/hist/snapshot").content


def _chart(driver, chart: str = "history-chart") -> dict:
    data = driver.execute_script("return {...document.getElementById(arguments[0]).dataset}", chart)
    return {**data, "x_range": json.loads(data.get("xRange", "null"))}


def test_the_time_charts_start_from_the_servers_history_and_say_when_idle(browser, tmp_path):
    # two hours of learning, a batch every 5 minutes, that ended an hour ago
    start = time.time() - 3 * 3600
    snapshot = _snapshot_with_history(start, minutes=120, every=5)
    with fast_server() as url, httpx.Client(base_url=url, timeout=120) as http:
        response = http.put("/v1/models/hist/snapshot", content=snapshot,
                            headers={"content-type": "application/zip"})  # fmt: skip
        assert response.status_code == 201, response.text
        minutes = http.get("/v1/models/hist/metrics/history").json()["points"]
        hours = http.get("/v1/models/hist/metrics/history?resolution=hour").json()["points"]
        assert len(minutes) == 24
        older_hours = [p for p in hours if p["time"] < minutes[0]["time"]]
        stored = len(older_hours) + len(minutes)

        browser.get(url + "/dashboard#/models/hist")
        wait_for(lambda: page_state(browser)["state"] == "live", "the stream")
        wait_for(lambda: int(_chart(browser).get("points", 0)) > stored, "history and stream")
        chart = _chart(browser)
        assert chart["serverPoints"] == str(stored)
        # the axis spans the history (its first point) to now, not years around a lone point
        low, high = chart["x_range"]
        first = (older_hours or minutes)[0]["time"]
        assert low <= first < low + 600 and time.time() - 60 < high < time.time() + 3600
        note = browser.find_element("id", "history-note").text
        assert "No events since" in note and f"{stored + 1} points" in note
        canvas = browser.find_element("css selector", "#history-chart canvas")
        assert colour_pixels(browser, canvas, ROC_BLUE) > 300  # the window AUC's line
        browser.get_screenshot_as_file(str(tmp_path / "history.png"))

        # live: a new batch is drawn after the history, and the model is no longer idle
        X, y = make_stream(100, seed=9)
        learned = post_events(http, "hist", X, y)
        wait_for(lambda: _chart(browser).get("version") == str(learned["version"]), "live point")
        assert "No events since" not in browser.find_element("id", "history-note").text
        assert _chart(browser)["serverPoints"] == str(stored)
        assert console_errors(browser) == []


def test_a_model_that_never_learned_has_a_sane_axis_and_says_so(browser):
    with fast_server() as url, httpx.Client(base_url=url, timeout=120) as http:
        model = {"id": "quiet", "n_features": 5, "learner": "spam"}
        assert http.post("/v1/models", json=model).status_code == 201
        browser.get(url + "/dashboard#/models/quiet")
        wait_for(lambda: _chart(browser).get("points") == "1", "the stream's first message")
        wait_for(lambda: _chart(browser).get("x_range"), "the axis")
        low, high = _chart(browser)["x_range"]
        assert 600 <= high - low <= 700  # ten minutes up to now, not "Mar 2027 ... Jul 2029"
        assert high >= time.time() - 60
        assert "No events learned yet" in browser.find_element("id", "history-note").text
        canvas = browser.find_element("css selector", "#history-chart canvas")
        assert colour_pixels(browser, canvas, (217, 72, 15)) == 0  # nothing to draw: no pAUC
        assert console_errors(browser) == []


def test_the_leaderboard_is_readable_at_1366_pixels(browser, tmp_path):
    size = browser.get_window_size()
    browser.set_window_size(1366, 900)
    try:
        with fast_server() as url, httpx.Client(base_url=url, timeout=300) as http:
            assert http.post("/v1/models", json={"id": "auto", "n_features": 5}).status_code == 201
            X, y = make_stream(600, seed=2)
            metrics = post_events(http, "auto", X, y)
            assert metrics["learned"] == 600
            browser.get(url + "/dashboard#/models/auto")
            leaderboard = wait_for(
                lambda: (e := browser.find_element("id", "leaderboard")).is_displayed() and e,
                "the leaderboard",
            )
            candidates = http.get("/v1/models/auto/metrics").json()["leaderboard"]["candidates"]
            cells = leaderboard.find_elements("css selector", "td.params")
            assert len(cells) == len(candidates)
            for cell, candidate in zip(cells, candidates, strict=True):
                lines = cell.text.splitlines()
                # one "key = value" line per parameter, in key order
                assert [line.split(" = ")[0] for line in lines] == sorted(candidate["params"])
                line_height = browser.execute_script(
                    "return 1.5 * parseFloat(getComputedStyle(arguments[0]).fontSize)", cell
                )
                # no line wrapped (a value wraps at most once), none character by character
                assert cell.size["height"] <= 2 * line_height * len(lines) + 10, cell.text
                assert cell.size["width"] > 150
            box = browser.execute_script(
                "const r = (e) => e.getBoundingClientRect();"
                "const s = document.getElementById('leaderboard');"
                "return [r(s).right, r(s.querySelector('table')).right, s.scrollWidth,"
                " s.clientWidth, document.documentElement.scrollWidth, innerWidth]"
            )
            section_right, table_right, scroll_width, client_width, page_width, inner = box
            assert table_right <= section_right and scroll_width <= client_width  # in its card
            assert page_width <= inner  # and the page does not scroll sideways
            browser.execute_script("arguments[0].scrollIntoView()", leaderboard)
            browser.get_screenshot_as_file(str(tmp_path / "leaderboard.png"))
            assert console_errors(browser) == []
    finally:
        browser.set_window_size(size["width"], size["height"])
