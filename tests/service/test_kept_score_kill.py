"""Nothing a kept ``/score`` acknowledged is lost when the server is killed (``kill -9``): a real
uvicorn process, real HTTP, clients posting kept scores (each with its own id) beside clients
posting labelled events (so the model moves while it scores), on SQLite and on Redis (AOF
synced on every write, killed too).

Killed at a random moment, twice, each client sending its unanswered score again (same id)
after the restart.  Then: every acknowledged kept score's record is in the store once, with
the features sent and the score answered last for its id; the records are counted once each
(the count the bound reads equals the records held); each label joins its record once (a
second label is a duplicate) and the model learns exactly those; the events are as
tests/service/test_group_commit_kill.py requires."""

from __future__ import annotations

import random
import threading
import time

import httpx
import numpy as np

from service.codec import decode_pending
from service.stores.redis import RedisStore
from service.stores.sqlite import SQLiteStore
from tests.service.kill_helpers import MODEL, Senders, Server, check_nothing_lost, started_server

SCORERS = 8
#: kept scores acknowledged (over all scorers) before a kill falls, drawn in this range
KILL_AFTER = (60, 240)
ROUNDS = 2


def features_of(event_id: str) -> list[float]:
    """Features that differ by id, so that scores differ by id and by version."""
    seed = sum(event_id.encode()) * 7919 + len(event_id)
    rng = np.random.default_rng(seed)
    return [float(v) for v in rng.normal(size=MODEL["n_features"])]


class Scorers:
    """``SCORERS`` threads posting one kept score each, back to back, until the server dies:
    each id's last answered score (``answered``), and the id whose answer never came (at most
    one a client: sent first in the next round)."""

    def __init__(self, url: str, round_number: int, retry: dict[int, str]) -> None:
        self.url = url
        self.answered: dict[str, float] = {}
        self.unanswered: dict[int, str] = {}
        self.failures: list[str] = []
        self.threads = [
            threading.Thread(target=self._client, args=(k, round_number, retry.get(k)))
            for k in range(SCORERS)
        ]
        for thread in self.threads:
            thread.start()

    def _client(self, number: int, round_number: int, first: str | None) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as http:
            n = 0
            event_id = first or f"r{round_number}-k{number}-0"
            while len(self.answered) < 100_000:  # bounded: the kill ends it far sooner
                try:
                    response = http.post(
                        "/v1/models/m/score",
                        json={"events": [{"id": event_id, "x": features_of(event_id)}]},
                    )
                except httpx.TransportError:
                    self.unanswered[number] = event_id
                    return
                if response.status_code == 503:  # refused before anything was kept
                    time.sleep(0.05)
                    continue
                if response.status_code != 200 or response.json()["kept"] != 1:
                    self.failures.append(f"{event_id}: {response.status_code} {response.text}")
                    return
                self.answered[event_id] = response.json()["scores"][0]
                n += 1
                event_id = f"r{round_number}-k{number}-{n}"

    def wait_for(self, answered: int, events: Senders, server: Server) -> None:
        while len(self.answered) < answered:
            assert not self.failures, "\n".join(self.failures)
            assert any(t.is_alive() for t in self.threads), "every scorer stopped"
            events.check(server)
            time.sleep(0.02)

    def join(self) -> None:
        for thread in self.threads:
            thread.join(timeout=60)
        assert not self.failures, "\n".join(self.failures)


def kill_rounds(server: Server, after_kill=lambda: None):
    """``ROUNDS`` rounds of scorers and event senders, each ended by a kill at a random
    moment and a restart: the last answered score of each acknowledged id, the ids sent
    whose last answer never came, and the events acknowledged and unknown."""
    draw = random.Random()  # noqa: S311 - a moment, not a secret
    answered: dict[str, float] = {}
    retry: dict[int, str] = {}
    acknowledged: list[str] = []
    unknown: list[str] = []
    for round_number in range(ROUNDS):
        scorers = Scorers(server.url, round_number, retry)
        events = Senders(server.url, seconds=120, prefix=f"r{round_number}")
        moment = draw.randint(*KILL_AFTER)
        print(f"round {round_number}: killed after {moment} kept scores")
        scorers.wait_for(moment, events, server)
        server.kill()
        scorers.join()
        events.join()
        after_kill()
        server.start()
        answered.update(scorers.answered)
        retry = scorers.unanswered
        acknowledged += events.acknowledged
        unknown += events.unknown
    # an id answered in one round and unanswered when sent again in a later one cannot be:
    # a client sends its unanswered id first, so an answered id is never sent again
    return answered, set(retry.values()), acknowledged, unknown


def check_kept(url: str, store, answered: dict[str, float], unanswered: set[str]) -> None:
    """Every answered id's record holds its features and its answered score; the records are
    counted once; each label joins once and is learned once."""
    ids = [*answered, *unanswered]
    records = store.get_pending("m", ids)
    missing = [i for i in answered if i not in records]
    assert not missing, f"acknowledged kept scores lost: {missing[:10]} ({len(missing)})"
    X, scores = decode_pending([records[i][0] for i in answered], MODEL["n_features"], True)
    np.testing.assert_array_equal(scores, list(answered.values()))
    np.testing.assert_array_equal(X, [features_of(i) for i in answered])
    assert kept_count(store) == len(records)
    print(f"{len(answered)} kept scores answered; {len(records) - len(answered)} of the "
          f"{len(unanswered)} never answered were kept")  # fmt: skip
    with httpx.Client(base_url=url, timeout=60) as http:
        before = http.get("/v1/models/m").json()["counts"]
        labels = [{"id": i, "y": 1 if k % 2 else -1} for k, i in enumerate(ids)]
        results = http.post("/v1/models/m/labels", json=labels).json()["results"]
        statuses = {r["id"]: r["status"] for r in results}
        assert all(statuses[i] == "learned" for i in answered)
        assert all(statuses[i] == ("learned" if i in records else "unknown") for i in unanswered)
        again = http.post("/v1/models/m/labels", json=labels).json()
        assert again["learned"] == 0
        assert {r["status"] for r in again["results"] if r["id"] in records} == {"duplicate"}
        after = http.get("/v1/models/m").json()["counts"]
    assert after["labels_joined"] - before["labels_joined"] == len(records)
    assert after["events_learned"] - before["events_learned"] == len(records)
    assert kept_count(store) == 0


def kept_count(store) -> int:
    """The records the store counts for model ``m`` (what ``AUCSTREAM_MAX_PENDING_RECORDS``
    is checked against), checked against the records it holds."""
    if isinstance(store, SQLiteStore):
        db = store.database.connection()
        (counted,) = db.execute("SELECT pending FROM models WHERE id = 'm'").fetchone()
        (held,) = db.execute("SELECT COUNT(*) FROM pending WHERE model_id = 'm'").fetchone()
        assert counted == held
        return int(counted)
    from service.stores import keys

    return int(store.client.hlen(keys.pending("m")))


def test_sqlite_kill_during_kept_scores(tmp_path):
    data = tmp_path / "data"
    environment = {"AUCSTREAM_STORE": "sqlite", "AUCSTREAM_DATA_DIR": str(data)}
    with started_server(tmp_path, environment) as server:
        answered, unanswered, acknowledged, unknown = kill_rounds(server)
        check_nothing_lost(server.url, acknowledged, unknown, queue=False)
        store = SQLiteStore.open(data)
        try:
            check_kept(server.url, store, answered, unanswered)
        finally:
            store.close()


def test_redis_kill_during_kept_scores(tmp_path, synced_redis):
    environment = {"AUCSTREAM_STORE": "redis", "AUCSTREAM_REDIS_URL": synced_redis.url}
    with started_server(tmp_path, environment) as server:
        answered, unanswered, acknowledged, unknown = kill_rounds(
            server, after_kill=lambda: (synced_redis.kill(), synced_redis.start())
        )
        check_nothing_lost(server.url, acknowledged, unknown, queue=False)
        store = RedisStore.from_url(synced_redis.url)
        try:
            check_kept(server.url, store, answered, unanswered)
        finally:
            store.close()
