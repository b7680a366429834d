"""The dashboard's regret chart: an ``auto`` model (no regret: its score is not linear) draws
the pAUC gap the tile beside it shows, also when opened after it went quiet (the server's
history has no gaps, its one message has one); a chart whose values go negative keeps every
minus sign of its y-axis (the axis is as wide as its longest label).  In a real headless
Chromium against the real app under uvicorn (as test_dashboard_browser.py, whose fixtures it
uses)."""

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
from tests.service.dashboard_helpers import fast_server, page_state, wait_for

GAP_GREEN = (43, 138, 62)  # charts.js COLORS.gap
REGRET_PURPLE = (123, 44, 191)  # charts.js COLORS.regret


def axes(driver, chart: str) -> dict:
    """What the chart's y-axes drew, by scale (charts.js: data-axes): labels, size, room and
    the longest label's width, in CSS pixels."""
    data = driver.execute_script("return {...document.getElementById(arguments[0]).dataset}", chart)
    return json.loads(data.get("axes", "{}"))


def quiet_auto_snapshot() -> bytes:
    """An ``auto`` model that learned a batch a minute for ten minutes, an hour ago (an
    in-process app with a clock of its own: ten points of server history), exported."""
    start = time.time() - 3600
    with started_apps(store="memory") as build:
        client = build()
        clock = client.app.state.engine.clock = FixedClock(start)
        create_model(client, "quiet", n_features=5, learner="auto", regret_window=1000)
        X, y = make_stream(1000, seed=6)
        for minute in range(10):
            clock.now = start + 60 * minute
            rows = slice(100 * minute, 100 * (minute + 1))
            response = client.post("/v1/models/quiet/events", json=events_json(X[rows], y[rows]))
            assert response.status_code == 200, response.text
        return client.get("/v1/models/quiet/snapshot").content


def test_a_quiet_auto_model_opened_later_draws_its_pauc_gap(browser):
    snapshot = quiet_auto_snapshot()
    with fast_server() as url, httpx.Client(base_url=url, timeout=300) as http:
        response = http.put("/v1/models/quiet/snapshot", content=snapshot,
                            headers={"content-type": "application/zip"})  # fmt: skip
        assert response.status_code == 201, response.text
        stored = len(http.get("/v1/models/quiet/metrics/history").json()["points"])
        assert stored == 10
        regret = http.get("/v1/models/quiet/metrics").json()["regret"]
        assert regret["regret"] is None and regret["pauc_gap"] is not None
        browser.get(url + "/dashboard#/models/quiet")
        # the history's points (no regret kept) and the stream's one message
        wait_for(lambda: page_state(browser)["regret"].get("points") == str(stored + 1), "points")
        canvas = browser.find_element("css selector", "#regret-chart canvas")
        wait_for(lambda: colour_pixels(browser, canvas, GAP_GREEN) > 20, "the pAUC gap's dot")
        assert colour_pixels(browser, canvas, REGRET_PURPLE) == 0
        assert console_errors(browser) == []


def left_edge_ink(driver, canvas) -> int:
    """Pixels that are not background in the canvas' two leftmost columns: where a label too
    long for its axis is cut."""
    return driver.execute_script(
        """
        const canvas = arguments[0];
        const {data} = canvas.getContext('2d').getImageData(0, 0, 2, canvas.height);
        let ink = 0;
        for (let i = 0; i < data.length; i += 4) {
          if (data[i + 3] > 0 && data[i] + data[i + 1] + data[i + 2] < 600) ink++;
        }
        return ink;
        """,
        canvas,
    )


def test_negative_values_keep_their_minus_signs(browser):
    """The regret chart from -0.0075 to 0.0075 (ticks such as "-0.005", as long as the
    "-0.075" that lost its sign): every label fits beside the ticks, none is cut at the
    canvas' edge (uPlot's fixed 50 px cut the longest)."""
    with fast_server() as url:
        browser.get(url + "/dashboard")
        wait_for(lambda: page_state(browser)["state"] == "no-models", "the empty page")
        # the page's own charts, made and fed as for a model (no model: nothing else draws)
        browser.execute_script(
            """
            document.getElementById('model').hidden = false;
            const charts = AucstreamCharts.create({pauc_range: [0, 0.1]});
            const times = [1, 2, 3, 4, 5, 6, 7].map((k) => 1.8e9 + 60 * k);
            const values = [-0.0075, -0.005, -0.0025, 0, 0.0025, 0.005, 0.0075];
            charts.regret.setData([times, values, values.map((v) => v / 2)]);
            charts.throughput.setData([times, values.map((v) => 1e8 * (v + 0.01)), values]);
            """
        )
        wait_for(lambda: "y" in axes(browser, "regret-chart"), "the regret chart's axis")
        regret = axes(browser, "regret-chart")["y"]
        labels = [label for label in regret["labels"] if label]
        assert any(label[0] in "-\u2212" for label in labels), labels
        assert max(len(label) for label in labels) >= 6, labels  # "-0.005": as long as any
        canvas = browser.find_element("css selector", "#regret-chart canvas")
        assert left_edge_ink(browser, canvas) == 0
        for chart, scale in (("regret-chart", "y"), ("throughput-chart", "rate")):
            drawn = axes(browser, chart)[scale]
            assert 0 < drawn["longest"] <= drawn["room"], drawn  # no label cut at the edge
        assert console_errors(browser) == []
