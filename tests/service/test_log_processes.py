"""Two real API processes (uvicorn, real HTTP) writing one model on one store, SQLite file or
Redis: each applies the entries the other appended before appending its own (a replicated
state machine, service/engine/repository.py), and a stale append goes back to its undo point
and catches up instead of rebuilding the model from its checkpoint and log.

Every event is acknowledged once (0 lost, 0 doubled: each sent again is a duplicate), the state
equals a replay of the events learned, no request is answered 503 Contention under this load,
and the processes caught up on each other's entries rather than reloading."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from loadtest.local import create_model
from tests.service.kill_helpers import MODEL, X, check_nothing_lost, shared_writes, two_servers

THREADS_PER_PROCESS = 6
EVENTS_PER_THREAD = 40
#: times an event refused with 503 is sent again before its thread gives up
RETRIES = 20
#: how long the senders may take in all (10-20 s on a quiet machine, 1-2 min loaded; the
#: test's own timeout is 600 s)
SEND_SECONDS = 420


def _send(url: str, prefix: str, acknowledged: list[str], refused: list[str]) -> None:
    """``EVENTS_PER_THREAD`` events, one a request; an event answered 503 (nothing written) is
    sent again with its id, at most ``RETRIES`` times: its refusals are kept (status and
    detail) for the test's message, so that a model refusing for ever fails the test with
    its reason instead of holding it until the suite's timeout."""
    with httpx.Client(base_url=url, timeout=60) as http:
        for n in range(EVENTS_PER_THREAD):
            event_id = f"{prefix}-{n}"
            for _ in range(RETRIES):
                response = http.post(
                    "/v1/models/m/events", json={"events": [{"id": event_id, "x": X, "y": 1}]}
                )
                if response.status_code != 503:
                    break
                refused.append(f"{event_id}: {response.text[:300]}")
            assert response.status_code == 200, response.text
            acknowledged.append(event_id)


def _send_one(url: str, event_id: str, acknowledged: list[str]) -> None:
    response = httpx.post(
        f"{url}/v1/models/m/events", json={"events": [{"id": event_id, "x": X, "y": 1}]}, timeout=60
    )
    assert response.status_code == 200, response.text
    acknowledged.append(event_id)


@pytest.mark.parametrize("store", ["sqlite", "redis"])
def test_two_processes_on_one_store_catch_up_and_lose_nothing(store, tmp_path, request):
    if store == "redis":
        redis = request.getfixturevalue("synced_redis")
        environment = {"AUCSTREAM_STORE": "redis", "AUCSTREAM_REDIS_URL": redis.url}
    else:  # as the workers of `--workers 2` do: one file
        environment = {"AUCSTREAM_STORE": "sqlite", "AUCSTREAM_DATA_DIR": str(tmp_path / "data")}
    # checkpoints now and then: a process whose entries were truncated behind one reloads
    environment["AUCSTREAM_CHECKPOINT_EVENTS"] = "120"
    with two_servers(environment, tmp_path) as servers:
        with httpx.Client(base_url=servers[0].url, timeout=60) as http:
            create_model(http, MODEL)
        acknowledged: list[str] = []
        refused: list[str] = []
        threads = [
            threading.Thread(
                target=_send, args=(server.url, f"p{number}t{k}", acknowledged, refused)
            )
            for number, server in enumerate(servers)
            for k in range(THREADS_PER_PROCESS)
        ]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + SEND_SECONDS
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        log = _log_tail(tmp_path)
        assert not any(thread.is_alive() for thread in threads), (refused[-5:], log)
        total = len(servers) * THREADS_PER_PROCESS * EVENTS_PER_THREAD
        assert len(acknowledged) == len(set(acknowledged)) == total, (refused[-5:], log)
        assert refused == [], (refused[:5], log)
        # then one event to each process in turn: whatever the interleaving above (on a
        # busy machine one process can append all its events before the other's first),
        # each of these follows an append of the other process, which it catches up on
        # (or reads whole, counted as reread, when the other's checkpoint passed its
        # cache: a few turns, so that checkpoints every 120 events cannot cover them all)
        for turn, server in enumerate(servers * 4):
            _send_one(server.url, f"turn-{turn}", acknowledged)
        shared = [shared_writes(server.url) for server in servers]
        # each process applied the other's entries; a stale append was undone, not
        # rebuilt (at most a process's first one, before it knew the model contended)
        assert all(each["caught_up"] > 0 for each in shared), shared
        assert all("reread" in each for each in shared), shared
        assert sum(each["undone"] for each in shared) > 0, shared
        assert sum(each["reloaded"] for each in shared) <= len(servers), shared
        check_nothing_lost(servers[1].url, acknowledged, [], queue=False)


def _log_tail(tmp_path, lines: int = 40) -> str:
    """The servers' last lines of output (warnings and errors: their log level)."""
    path = tmp_path / "server.log"
    text = path.read_text(errors="replace") if path.exists() else ""
    return "\n".join(text.splitlines()[-lines:])
