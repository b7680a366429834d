"""Nothing a stream acknowledged is lost when the server is killed (``kill -9``) while it
learns pipelined one-event messages: a real uvicorn process on SQLite, connections each
keeping a window of binary messages unanswered, so the messages that have arrived are learned
and committed as groups (service/stream/session.py) merged across the connections
(service/engine/coalesce.py).  After a restart, the checks of
tests/service/test_group_commit_kill.py: every acknowledged event is in once, none of the
others twice, and the state equals a replay of the events learned."""

from __future__ import annotations

import threading
import time

import numpy as np
import orjson
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from service.stream.protocol import encode_binary
from tests.service.kill_helpers import X, check_nothing_lost, sqlite_server

CONNECTIONS = 4
#: messages each connection keeps unanswered
WINDOW = 256


class Sender:
    """One connection sending one-event learn messages (ids ``m:w<k>-<n>``) until the server
    goes away: the ids acknowledged (a 200 reply) and those whose reply never came."""

    # The senders stop when the server goes away (killed): 600 s is only a bound on a hung
    # test.  60 s made a count of events within a time: a loaded machine that acknowledged
    # fewer than the 2,000 awaited below in 60 s stopped every sender, and the test failed.
    def __init__(self, url: str, number: int, seconds: float = 600.0) -> None:
        self.address = url.replace("http://", "ws://") + "/v1/models/m/stream"
        self.number = number
        self.deadline = time.monotonic() + seconds
        self.acknowledged: list[str] = []
        self.unknown: list[str] = []
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self.run)

    def run(self) -> None:
        x, y = np.array([X]), np.array([1], dtype=np.int8)
        sent: list[str] = []
        try:
            with connect(self.address, compression=None, max_size=None, open_timeout=30) as ws:
                while time.monotonic() < self.deadline:
                    event_id = f"m:w{self.number}-{len(sent)}"
                    ws.send(encode_binary("learn", len(sent), x, y, [event_id]))
                    sent.append(event_id)
                    while len(sent) - len(self.acknowledged) >= WINDOW:
                        for reply in orjson.loads(ws.recv(timeout=60)):
                            if reply["seq"] != len(self.acknowledged) or reply["status"] != 200:
                                self.errors.append(str(reply))
                                return
                            self.acknowledged.append(sent[reply["seq"]])
        except (ConnectionClosed, OSError):
            pass
        self.unknown = sent[len(self.acknowledged) :]


def test_sqlite_kill_while_the_stream_learns_groups(tmp_path):
    with sqlite_server(tmp_path) as server:
        senders = [Sender(server.url, k) for k in range(CONNECTIONS)]
        for sender in senders:
            sender.thread.start()
        while sum(len(s.acknowledged) for s in senders) < 2000:  # groups are committed
            assert any(s.thread.is_alive() for s in senders), [s.errors for s in senders]
            time.sleep(0.02)
        server.kill()
        for sender in senders:
            sender.thread.join(timeout=120)
            assert not sender.thread.is_alive()
            assert sender.errors == []
        acknowledged = [i for s in senders for i in s.acknowledged]
        unknown = [i for s in senders for i in s.unknown]
        assert unknown  # killed with messages in flight
        server.start()
        check_nothing_lost(server.url, acknowledged, unknown, queue=False)
