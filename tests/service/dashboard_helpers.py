"""The dashboard's browser tests' pieces: the server whose live streams move quickly, the
page's state as its charts report it, the wait for it, shared by
test_dashboard_browser.py, test_dashboard_history.py, test_dashboard_operating_points.py and
test_dashboard_regret.py (their fixtures ``chromium`` and ``browser``, skipped without
Chromium: conftest.py)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import httpx

from tests.service.conftest import events_json, live_server

ROC_BLUE = (11, 92, 213)  # dashboard.js COLORS.auc


@contextlib.contextmanager
def fast_server(**env: str) -> Iterator[str]:
    """The real server, its live streams at 5 a second so that the charts move quickly."""
    fast = {"AUCSTREAM_STREAM_INTERVAL_SECONDS": "0.2", "AUCSTREAM_SSE_MIN_INTERVAL_SECONDS": "0.2"}
    with live_server({**fast, **env}) as (url, _):
        yield url


def wait_for(condition: Callable[[], object], what: str, timeout: float = 180.0) -> object:
    """``condition()``'s first true value, polled; 180 s is a hang detector (60 s was a clock a
    loaded machine's Chromium, drawing slowly, could miss)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def page_state(driver) -> dict:
    """The page's state and each chart's ``data-`` attributes (what it drew, which version)."""
    return driver.execute_script(
        """
        const data = (id) => ({...document.getElementById(id).dataset});
        return {state: document.body.dataset.state, roc: data('roc-chart'),
                history: data('history-chart'), regret: data('regret-chart'),
                throughput: data('throughput-chart')};
        """
    )


def post_events(http: httpx.Client, model: str, X, y, key: str | None = None) -> dict:
    """``X``, ``y`` learned by ``model`` (as the holder of ``key``, if any): the answer."""
    headers = {"X-API-Key": key} if key else {}
    response = http.post(f"/v1/models/{model}/events", json=events_json(X, y), headers=headers)
    assert response.status_code == 200, response.text
    return response.json()
