"""A stream connection and REST clients learning into the same model at once, through a real
uvicorn on SQLite (a store that blocks: every engine call goes through the coalescer's
threads): every frame of the stream is answered while the REST clients keep posting, and the
model holds exactly the events acknowledged on both sides."""

from __future__ import annotations

import threading

import httpx
import orjson

from tests.service.server_helpers import stream_socket, uvicorn_server

#: the README's model (learner auto) with the regret window it had by default when the stall
#: was found: every setting but these at its default
MODEL = {"id": "fraud", "n_features": 3, "pauc_range": [0, 0.1], "regret_window": 1000}
HTTP_CLIENTS = 8
FRAMES = 4
MESSAGES_PER_FRAME = 300  # more than the stream used to apply on a thread's own event loop
FRAME_TIMEOUT_SECONDS = 60  # generous: the machine is shared


def learn_messages(frame: int) -> list[dict]:
    return [
        {"seq": i, "op": "learn", "id": f"ws{frame}-{i}", "x": [i % 7, 1.5, -0.25], "y": i % 2}
        for i in range(MESSAGES_PER_FRAME)
    ]


def post_one_event_at_a_time(url: str, number: int, stop: threading.Event, acknowledged: list):
    with httpx.Client(base_url=url, timeout=60) as http:
        n = 0
        while not stop.is_set():
            event = {"id": f"c{number}-{n}", "x": [n % 5, -1.0, 0.5], "y": n % 2}
            response = http.post("/v1/models/fraud/events", json={"events": [event]})
            assert response.status_code == 200, response.text
            assert response.json()["learned"] == 1
            acknowledged.append(event["id"])
            n += 1


def test_stream_frames_are_answered_while_rest_clients_post_to_the_same_model(tmp_path):
    """A frame of 300 messages got no reply in 180 s while eight clients posted one event per
    request to its model (its events were committed all the same)."""
    env = {"AUCSTREAM_STORE": "sqlite", "AUCSTREAM_DATA_DIR": str(tmp_path / "data")}
    with uvicorn_server(**env) as url, httpx.Client(base_url=url, timeout=60) as http:
        assert http.post("/v1/models", json=MODEL).status_code == 201
        stop = threading.Event()
        acknowledged: list[str] = []
        failures: list[BaseException] = []

        def client(number: int) -> None:
            try:
                post_one_event_at_a_time(url, number, stop, acknowledged)
            except BaseException as error:  # noqa: BLE001 - reported by the test's thread
                failures.append(error)

        threads = [threading.Thread(target=client, args=(k,)) for k in range(HTTP_CLIENTS)]
        for thread in threads:
            thread.start()
        streamed = 0
        try:
            with stream_socket(url, "fraud") as ws:
                for frame in range(FRAMES):
                    ws.send(orjson.dumps(learn_messages(frame)).decode())
                    replies = orjson.loads(ws.recv(timeout=FRAME_TIMEOUT_SECONDS))
                    assert [reply["seq"] for reply in replies] == list(range(MESSAGES_PER_FRAME))
                    assert {(r["status"], r["learned"]) for r in replies} == {(200, 1)}, replies
                    streamed += len(replies)
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=120)
        assert failures == []
        assert len(acknowledged) > 0  # the REST clients were posting meanwhile
        counts = http.get("/v1/models/fraud").json()["counts"]
        assert counts["events_learned"] == len(acknowledged) + streamed
        assert counts["duplicates"] == 0
