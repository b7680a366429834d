"""The dashboard marks the window's operating points on the ROC curve and lists them in a
table, in a real headless Chromium against the real app under uvicorn (as
test_dashboard_browser.py, whose server and browser fixtures it uses)."""

from __future__ import annotations

import json

import httpx

from loadtest.browser import colour_pixels, console_errors
from tests.service.conftest import make_stream
from tests.service.dashboard_helpers import fast_server, page_state, post_events, wait_for

OPERATING_GREEN = (8, 127, 91)  # charts.js COLORS.operating


def _percent(value: float) -> str:
    """charts.js percent(): 0.001 -> "0.1 %"."""
    return f"{round(100 * value, 3):g} %"


def test_operating_points_are_marked_on_the_roc_curve_and_tabled(browser):
    model = {"id": "fraud", "n_features": 5, "learner": "spam", "target_fprs": [0.02, 0.1, 0.3],
             "target_alert_rates": [0.05], "top_k": [25]}  # fmt: skip
    with fast_server() as url, httpx.Client(base_url=url, timeout=120) as http:
        assert http.post("/v1/models", json=model).status_code == 201
        X, y = make_stream(600, seed=8)
        post_events(http, "fraud", X, y)
        roc = http.get("/v1/models/fraud/metrics/roc").json()
        at_fpr = roc["operating_points"]["at_fpr"]
        assert all(point["tpr"] > 0 for point in at_fpr)  # each target flags something

        browser.get(url + "/")
        wait_for(lambda: page_state(browser)["roc"].get("version") == str(roc["version"]),
                 "the ROC curve")  # fmt: skip
        drawn = json.loads(page_state(browser)["roc"]["operatingPoints"])
        assert [(p["target"], p["fpr"], p["tpr"]) for p in drawn] == [
            (p["target"], p["fpr"], p["tpr"]) for p in at_fpr
        ]
        # each dot sits where the curve's axes put its (FPR, TPR), on the canvas in its colour
        canvas = browser.find_element("css selector", "#roc-chart canvas")
        bbox = browser.execute_script("const c = arguments[0]; return [c.width, c.height]", canvas)
        for point in drawn:
            assert 0 < point["x"] < bbox[0] and 0 < point["y"] < bbox[1]
        xs = [point["x"] for point in drawn]
        ys = [point["y"] for point in drawn]
        assert xs == sorted(xs) and ys == sorted(ys, reverse=True)  # up and right along the curve
        assert colour_pixels(browser, canvas, OPERATING_GREEN, tolerance=40) > 3 * 40

        # the table: one row per target, the service's numbers
        rows = [
            [cell.text for cell in row.find_elements("tag name", "td")]
            for row in browser.find_elements("css selector", "#operating-points tbody tr")
        ]
        expected = [
            [f"FPR ≤ {_percent(p['target'])}", f"{p['threshold']:.4f}", f"{p['tpr']:.4f}",
             f"{p['precision']:.4f}", _percent(p["fpr"]), _percent(p["alert_rate"])]
            for p in at_fpr
        ]  # fmt: skip
        alert = roc["operating_points"]["at_alert_rate"][0]
        expected.append(
            ["alerts ≤ 5 %", f"{alert['threshold']:.4f}", f"{alert['tpr']:.4f}",
             f"{alert['precision']:.4f}", _percent(alert["fpr"]), _percent(alert["alert_rate"])]
        )  # fmt: skip
        top = roc["operating_points"]["at_k"][0]
        expected.append(
            ["top 25", "–", f"{top['recall']:.4f}", f"{top['precision']:.4f}", "–", "–"]
        )
        assert rows == expected
        note = browser.find_element("id", "operating-note").text
        assert f"Average precision {roc['average_precision']:.4f}" in note

        # a new version moves the points with the curve
        learned = post_events(http, "fraud", X[:300], 1 - y[:300])
        version = str(learned["version"])
        wait_for(lambda: page_state(browser)["roc"].get("version") == version, "the new ROC")
        roc = http.get("/v1/models/fraud/metrics/roc").json()
        drawn = json.loads(page_state(browser)["roc"]["operatingPoints"])
        assert [(p["fpr"], p["tpr"]) for p in drawn] == [
            (p["fpr"], p["tpr"]) for p in roc["operating_points"]["at_fpr"] if p["tpr"] is not None
        ]
        assert console_errors(browser) == []


def test_a_one_class_window_says_why_and_marks_nothing(browser):
    with fast_server() as url, httpx.Client(base_url=url, timeout=120) as http:
        assert http.post("/v1/models", json={"id": "quiet", "n_features": 5}).status_code == 201
        X, _ = make_stream(40, seed=1)
        post_events(http, "quiet", X, [0] * 40)
        browser.get(url + "/")
        wait_for(lambda: page_state(browser)["roc"].get("version"), "the ROC curve")
        assert json.loads(page_state(browser)["roc"]["operatingPoints"]) == []
        note = browser.find_element("id", "operating-note").text
        assert note == "Undefined: window holds no positive event."
        first = browser.find_element("css selector", "#operating-points tbody tr").text
        assert first.startswith("FPR ≤ 0.1 %") and first.count("–") == 5
        assert console_errors(browser) == []
