"""Operating points and average precision through the real app: the model's targets
(validated at creation), ``/metrics`` (window and since start), ``/metrics/roc`` and the
Prometheus gauges, equal to the core functions on the events' own prequential scores."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from core.metrics import average_precision, operating_points
from tests.service.conftest import create_model, events_json, make_stream

TARGETS = {"target_fprs": [0.05, 0.01], "target_alert_rates": [0.1], "top_k": [20, 5]}


def _gauges(text: str, name: str, model: str) -> dict[str, float]:
    """``{target label: value}`` of a per-model, per-target gauge."""
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels.get("model") == model:
                target = next(value for key, value in sample.labels.items() if key != "model")
                values[target] = sample.value
    return values


def _learn(client, model_id, X, y, start=0):
    """Learn a batch; returns its prequential (pre-update) scores, the window's content."""
    ids = [f"{model_id}-{start + index}" for index in range(len(y))]
    response = client.post(
        f"/v1/models/{model_id}/events?scores=true", json=events_json(X, y, ids=ids)
    )
    assert response.status_code == 200, response.text
    return np.asarray(response.json()["scores"])


def test_metrics_roc_and_gauges_report_the_models_operating_points(client):
    info = create_model(client, "m", window=300, **TARGETS)
    # stored in increasing order, each once
    assert info["config"]["target_fprs"] == [0.01, 0.05]
    assert info["config"]["top_k"] == [5, 20]
    X, y = make_stream(500, seed=11)
    scores = _learn(client, "m", X, y)
    expected_window = operating_points(y[-300:], scores[-300:], [0.01, 0.05], [0.1], [5, 20])
    expected_start = operating_points(y, scores, [0.01, 0.05], [0.1], [5, 20])

    metrics = client.get("/v1/models/m/metrics").json()
    assert metrics["window"]["operating_points"] == expected_window
    assert metrics["since_start"]["operating_points"] == expected_start
    assert metrics["window"]["average_precision"] == average_precision(y[-300:], scores[-300:])
    assert metrics["since_start"]["average_precision"] == average_precision(y, scores)
    at_fpr = metrics["window"]["operating_points"]["at_fpr"]
    assert [point["target"] for point in at_fpr] == [0.01, 0.05]
    assert all(point["fpr"] <= point["target"] for point in at_fpr)
    assert at_fpr[1]["tpr"] > at_fpr[0]["tpr"] > 0  # the stream is separable enough

    roc = client.get("/v1/models/m/metrics/roc").json()
    assert roc["operating_points"] == expected_window
    assert roc["average_precision"] == metrics["window"]["average_precision"]
    for point in at_fpr:  # each marked point is a vertex of the curve sent with it
        vertex = roc["thresholds"].index(point["threshold"])
        assert (roc["fpr"][vertex], roc["tpr"][vertex]) == (point["fpr"], point["tpr"])

    text = client.get("/metrics").text
    assert _gauges(text, "aucstream_model_window_tpr_at_fpr", "m") == {
        "0.01": at_fpr[0]["tpr"],
        "0.05": at_fpr[1]["tpr"],
    }
    assert (
        _gauges(text, "aucstream_model_window_threshold_at_fpr", "m")["0.05"]
        == (at_fpr[1]["threshold"])
    )
    assert _gauges(text, "aucstream_model_window_precision_at_alert_rate", "m") == {
        "0.1": expected_window["at_alert_rate"][0]["precision"]
    }
    assert _gauges(text, "aucstream_model_window_precision_at_k", "m") == {
        "5": expected_window["at_k"][0]["precision"],
        "20": expected_window["at_k"][1]["precision"],
    }
    average = [
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "aucstream_model_window_average_precision"
        and sample.labels["model"] == "m"
    ]
    assert average == [metrics["window"]["average_precision"]]
    assert client.delete("/v1/models/m").status_code == 204
    assert 'model="m"' not in client.get("/metrics").text


def test_default_targets_and_a_one_class_window(client):
    create_model(client, "one-class")
    X, _ = make_stream(30, seed=2)
    _learn(client, "one-class", X, np.zeros(30, dtype=np.int64))
    window = client.get("/v1/models/one-class/metrics").json()["window"]
    assert window["reason"] == "window holds no positive event"
    assert window["average_precision"] is None
    points = window["operating_points"]
    assert [point["target"] for point in points["at_fpr"]] == [0.001, 0.01, 0.05]
    assert [point["target"] for point in points["at_alert_rate"]] == [0.005, 0.01]
    assert [row["k"] for row in points["at_k"]] == [100, 1000]
    assert all(
        value is None
        for point in points["at_fpr"] + points["at_alert_rate"]
        for key, value in point.items()
        if key != "target"
    )
    roc = client.get("/v1/models/one-class/metrics/roc").json()
    assert roc["reason"] == window["reason"] and roc["operating_points"] == points
    text = client.get("/metrics").text
    assert all(
        math.isnan(v)
        for v in _gauges(text, "aucstream_model_window_tpr_at_fpr", "one-class").values()
    )


@pytest.mark.parametrize(
    ("setting", "value", "field"),
    [
        ("target_fprs", [0.0], "target_fprs.0"),
        ("target_fprs", [0.01, 1.0], "target_fprs.1"),
        ("target_alert_rates", [-0.5], "target_alert_rates.0"),
        ("target_fprs", [0.01 * (index + 1) for index in range(9)], "target_fprs"),
        ("top_k", [0], "top_k.0"),
        ("top_k", [2.5], "top_k.0"),
        ("target_alert_rates", ["0.1"], "target_alert_rates.0"),
    ],
)
def test_bad_targets_are_refused_naming_the_field(client, setting, value, field):
    response = client.post("/v1/models", json={"id": "m", "n_features": 5, setting: value})
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["field"] == field
    assert client.get("/v1/models").json() == {"models": []}


def test_since_start_precision_weights_the_reservoirs_by_the_streams_class_mix(client):
    """Reservoirs of 50 per class over 400 events: the since-start alert rate and precision are
    the stream's, not the reservoirs' 50 / 50 mix."""
    create_model(client, "m", window=2000, reservoir=50, target_alert_rates=[0.5], top_k=[])
    X, y = make_stream(400, seed=4)
    scores = _learn(client, "m", X, y)
    section = client.get("/v1/models/m/metrics").json()["since_start"]
    assert section["cumulative_exact"] is False
    point = section["operating_points"]["at_alert_rate"][0]
    assert point["alert_rate"] <= 0.5
    # its threshold, applied to every event of the stream, flags about what it reports
    flagged = scores >= point["threshold"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exact_precision = float(y[flagged].mean())
    assert abs(flagged.mean() - point["alert_rate"]) < 0.15
    assert abs(exact_precision - point["precision"]) < 0.2


def test_operating_gauges_only_for_the_models_with_series(make_client):
    """The per-target gauges follow the window gauges' bound: with one model allowed series
    of its own, the one active most recently when scraped has them, the other none."""
    client = make_client(prometheus_model_series=1)
    X, y = make_stream(200, seed=6)
    for model in ("first", "second"):
        create_model(client, model, **TARGETS)
        _learn(client, model, X, y)
        client.get(f"/v1/models/{model}/metrics")
    # "first" took the one free place and got its gauges; the scrape ranks "second", the most
    # recently active, in and "first" out, gauges and all
    text = client.get("/metrics").text
    for model in ("first", "second", ""):
        assert _gauges(text, "aucstream_model_window_tpr_at_fpr", model) == {}, model
    # the next metrics request of "second" sets its own
    client.get("/v1/models/second/metrics")
    text = client.get("/metrics").text
    assert set(_gauges(text, "aucstream_model_window_tpr_at_fpr", "second")) == {"0.01", "0.05"}
    assert _gauges(text, "aucstream_model_window_tpr_at_fpr", "first") == {}


def test_the_targets_travel_with_a_snapshot(client):
    create_model(client, "m", **TARGETS)
    X, y = make_stream(120, seed=9)
    _learn(client, "m", X, y)
    exported = client.get("/v1/models/m/snapshot")
    assert exported.status_code == 200
    imported = client.put(
        "/v1/models/copy/snapshot",
        content=exported.content,
        headers={"content-type": "application/zip"},
    )
    assert imported.status_code == 201, imported.text
    config = client.get("/v1/models/copy").json()["config"]
    assert (config["target_fprs"], config["target_alert_rates"], config["top_k"]) == (
        [0.01, 0.05],
        [0.1],
        [5, 20],
    )
    original, copy = (client.get(f"/v1/models/{model}/metrics").json() for model in ("m", "copy"))
    assert copy["window"]["operating_points"] == original["window"]["operating_points"]
    assert copy["since_start"]["average_precision"] == original["since_start"]["average_precision"]


def test_gauges_of_targets_a_replaced_model_no_longer_has_go(client):
    X, y = make_stream(150, seed=10)
    create_model(client, "m", **TARGETS)
    create_model(client, "other", target_fprs=[0.2])
    for model in ("m", "other"):
        _learn(client, model, X, y)
    client.get("/v1/models/m/metrics")
    text = client.get("/metrics").text
    assert set(_gauges(text, "aucstream_model_window_tpr_at_fpr", "m")) == {"0.01", "0.05"}
    replaced = client.put(
        "/v1/models/m/snapshot?replace=true",
        content=client.get("/v1/models/other/snapshot").content,
        headers={"content-type": "application/zip"},
    )
    assert replaced.status_code in (200, 201), replaced.text
    client.get("/v1/models/m/metrics")
    text = client.get("/metrics").text
    assert set(_gauges(text, "aucstream_model_window_tpr_at_fpr", "m")) == {"0.2"}
    assert set(_gauges(text, "aucstream_model_window_precision_at_k", "m")) == {"100", "1000"}
