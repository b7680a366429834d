"""``DELETE`` racing ``POST .../reset`` on Redis, from two app instances (two processes' worth
of caches and locks): a reset replaces only the incarnation it read, so a deletion that
answered 204 is never undone."""

from __future__ import annotations

import threading

from service.stores import keys
from tests.service.conftest import create_model, started_apps

ROUNDS = 200


def _race(deleter, resetter) -> dict[str, int]:
    """DELETE on one app and POST .../reset on the other, released at once; their statuses."""
    start = threading.Barrier(2)
    answers: dict[str, int] = {}

    def delete() -> None:
        start.wait()
        answers["delete"] = deleter.delete("/v1/models/m").status_code

    def reset() -> None:
        start.wait()
        answers["reset"] = resetter.post("/v1/models/m/reset").status_code

    threads = [threading.Thread(target=delete), threading.Thread(target=reset)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def test_delete_racing_reset_never_brings_a_deleted_model_back(empty_redis, rclient):
    with started_apps(redis_url=empty_redis) as build:
        deleter, resetter = build(), build()
        resets = []
        for round_number in range(ROUNDS):
            create_model(deleter, n_features=3)
            assert resetter.get("/v1/models/m").status_code == 200  # cached by both apps
            answers = _race(deleter, resetter)
            resets.append(answers["reset"])
            assert answers["delete"] == 204, (round_number, answers)
            assert answers["reset"] in (200, 404, 409), (round_number, answers)
            # deleted for good: no key, not listed, not served by either app
            assert rclient.keys("aucs:{m}:*") == [], (round_number, answers)
            assert not rclient.sismember(keys.MODELS, "m"), (round_number, answers)
            for client in (deleter, resetter):
                assert client.get("/v1/models/m").status_code == 404, (round_number, answers)
                assert client.get("/v1/models").json()["models"] == []
    # both orders happened (else the test raced nothing)
    assert 200 in resets and {404, 409} & set(resets)
