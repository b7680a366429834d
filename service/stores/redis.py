"""The Redis store: state shared by every process and machine (``AUCSTREAM_REDIS_URL``).

A model's log is the stream ``aucs:{m}:log`` (stream id ``<version>-0``) after its checkpoint,
the hashes ``aucs:{m}:state`` and ``aucs:{m}:layout`` at version ``log:saved``
(:mod:`service.stores.keys`; docs/architecture.md, "Stores").  The state arrays never pass
through Lua (Redis copies a script's arguments, costing it several times the CPU): a checkpoint
writes them into staged hashes that its script renames.  The ids learned or expired
(``aucs:{m}:seen``, ``aucs:{m}:expired``: sorted sets scored by expiry) are written by the
commit that learned them; the records ``/score`` keeps for a label are ``aucs:{m}:pending``
with their deadlines in ``aucs:{m}:deadlines``.  The connection and the loss watch are
:mod:`.redis_watch`'s.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import orjson
import redis

from service.engine.entries import Entry, decode, encode
from service.errors import InsufficientStorage, LeaseLost, StaleVersion, StoreUnavailable, TurnTaken
from service.stores import keys
from service.stores.base import (
    CREATION_REFUSALS,
    Commit,
    StoredState,
    chunks,
    no_model,
    pending_full,
    writer_token,
)
from service.stores.client import (
    ReplicaWait,
    atomic_read,
    connect,
    flat_pairs,
    round_trip,
    run_script,
    unavailable,
)
from service.stores.fields import decode_fields, encode_fields
from service.stores.lua import (
    CHECKPOINT_SCRIPT,
    CREATE_SCRIPT,
    DELETE_SCRIPT,
    LOG_APPEND_SCRIPT,
    PENDING_SCRIPT,
    TURN_RELEASE_SCRIPT,
    TURN_SCRIPT,
)
from service.stores.redis_setup import _text
from service.stores.redis_watch import RedisWatch

logger = logging.getLogger("aucstream.store")

#: the meta field holding the version the stored state is the checkpoint of
SAVED = "log:saved"
#: how long a checkpoint's staged hashes live if the process writing them dies (ms)
STAGED_MS = 60_000


def _pairs(reply: list[bytes] | dict[bytes, bytes]) -> dict[str, bytes]:
    """An ``HGETALL`` reply read off the connection: a flat list (RESP2) or a map (RESP3)."""
    if isinstance(reply, dict):
        return {_text(name): value for name, value in reply.items()}
    return {reply[i].decode(): reply[i + 1] for i in range(0, len(reply), 2)}


def _texts(reply: list[bytes] | dict[bytes, bytes]) -> dict[str, str]:
    """An ``HGETALL`` reply of text values (layouts, meta fields)."""
    return {name: _text(value) for name, value in _pairs(reply).items()}


def _entries(reply: list[Any]) -> list[tuple[int, Entry]]:
    """An ``XRANGE`` reply of the log -> ``(version, entry)`` pairs, oldest first."""
    return [(int(_text(stream_id).partition("-")[0]), decode(_pairs(fields)["e"]))
            for stream_id, fields in reply]  # fmt: skip


class RedisStore(RedisWatch):
    name = "redis"
    #: network round trips: the HTTP layer calls it from the thread pool
    blocking = True

    def __init__(self, client: redis.Redis, wait: ReplicaWait | None = None) -> None:
        super().__init__(client, wait)  # self.client, self.wait, self.watch
        (self._create, self._delete, self._append, self._pending, self._turn,
         self._turn_release) = map(client.register_script, (
            CREATE_SCRIPT, DELETE_SCRIPT, LOG_APPEND_SCRIPT, PENDING_SCRIPT, TURN_SCRIPT,
            TURN_RELEASE_SCRIPT))  # fmt: skip
        #: this process among the writers of the store (its write turns: service.engine.turns)
        self.writer = writer_token()

    @classmethod
    def from_url(cls, url: str, wait: ReplicaWait | None = None) -> RedisStore:
        return cls(connect(url), wait)

    @classmethod
    def open(cls, settings: Any) -> RedisStore:
        """The store of ``settings`` (``redis_url``), checked (persistence, replicas, epoch
        markers: :meth:`_set_up`) now, or at Redis's first answer (503 meanwhile)."""
        store = cls(connect(settings.redis_url))
        store._settings = settings
        try:
            store._set_up()
        except StoreUnavailable as error:
            logger.warning("Redis did not answer at start (%s): checked when it does", error)
        except BaseException:
            store.close()
            raise
        return store

    # ------------------------------------------------------------------ models
    @unavailable
    def create_model(
        self, model_id, config, arrays, incarnation, *, replace=False, replaces=None
    ) -> int:
        self._guard()
        model_keys = keys.all_model_keys(model_id)
        ordered = keys.of(model_id, "config", "version", "meta", "state", "layout")
        ordered += [key for key in model_keys if key not in ordered]
        fields, layouts = encode_fields(arrays)
        if replaces is None:
            # registered before it is written, so that no failure leaves a model that is not
            # listed (see list_models); a reset's model is registered already
            self.client.sadd(keys.MODELS, model_id)
        result = run_script(
            self.client,
            self._create,
            ordered,
            [replaces or ("1" if replace else "0"), orjson.dumps(config), incarnation]
            + [len(fields), *flat_pairs(fields), len(layouts), *flat_pairs(layouts)],
            self.wait,
        )
        if int(result) < 0:  # the codes of service.stores.base.creation_refused
            raise CREATION_REFUSALS[int(result)](model_id)
        self.watch.saw(model_id, incarnation, 1)
        if replaces is None:
            # again: a deletion of the previous model of this id may have unregistered it
            # between the first registration and the script
            self.client.sadd(keys.MODELS, model_id)
        return 1

    @unavailable
    def list_models(self) -> list[str]:
        """The registered ids whose model exists (*registered before written, listed only if it
        exists*: docs/architecture.md, "Redis Cluster"), after a check of the epoch markers (an
        emptied store lists no models: a loss, not an answer)."""
        self._check_epoch(force=True)
        self.watch.guard()
        registered = sorted(_text(member) for member in self.client.smembers(keys.MODELS))
        with self.client.pipeline(transaction=False) as pipe:
            for model_id in registered:
                pipe.exists(keys.config(model_id))
            exists = pipe.execute() if registered else []
        return [model_id for model_id, found in zip(registered, exists, strict=True) if found]

    @unavailable
    def delete_model(self, model_id: str) -> None:
        self._guard(model_id)
        self.watch.forget(model_id)
        deleted = run_script(self.client, self._delete, keys.all_model_keys(model_id), [], None)
        self.client.srem(keys.MODELS, model_id)
        if self.client.exists(keys.config(model_id)):
            # created again between the script and SREM: it stays listed
            self.client.sadd(keys.MODELS, model_id)
        if not int(deleted):
            raise no_model(model_id)

    @unavailable
    def load(self, model_id, known_version=None, known_incarnation=None) -> StoredState:
        """The model's checkpoint and its log after it, read atomically (``MULTI`` ...
        ``EXEC``; plain reads: a script's large reply costs Redis several times the CPU), or
        for a cached ``(version, incarnation)`` only what it lacks (:meth:`_known`)."""
        self._guard(model_id)
        version_key, meta_key = keys.version(model_id), keys.meta(model_id)
        if known_version is not None:
            known = self._known(model_id, known_version, known_incarnation)
            if known is not None:
                return known
        version, config_json, raw_state, raw_layouts, raw_meta, raw_log = atomic_read(
            self.client,
            version_key,
            [
                ["GET", version_key],
                ["GET", keys.config(model_id)],
                ["HGETALL", keys.state(model_id)],
                ["HGETALL", keys.layout(model_id)],
                ["HGETALL", meta_key],
                ["XRANGE", keys.log(model_id), "-", "+"],
            ],
        )
        if version is None or config_json is None:
            raise self._missing(model_id)
        meta = _texts(raw_meta)
        arrays = decode_fields(_pairs(raw_state), _texts(raw_layouts))
        saved = int(meta.pop(SAVED, version))
        # entries past the version: a version key that went back (a loss, see epoch)
        entries = [pair for pair in _entries(raw_log) if saved < pair[0] <= int(version)]
        incarnation = meta["incarnation"]
        # with replicas waited for, a read may see a commit no replica has yet (a failover
        # can undo it without losing an acknowledged write): only checked, not recorded
        self._saw(model_id, incarnation, int(version), self.wait is None)
        config = orjson.loads(config_json)
        return StoredState(int(version), incarnation, config, arrays, meta, saved, entries)

    def _known(self, model_id: str, known: int, incarnation: str) -> StoredState | None:
        """A cache at version ``known`` of ``incarnation``: the model's version, meta fields
        and the log entries after ``known``, by one atomic read; None when the cache cannot
        catch up (re-created, or checkpointed past ``known``): the caller reads it whole."""
        version_key = keys.version(model_id)
        version, raw_meta, raw_log = atomic_read(
            self.client,
            version_key,
            [
                ["GET", version_key],
                ["HGETALL", keys.meta(model_id)],
                ["XRANGE", keys.log(model_id), f"{known + 1}-0", "+"],
            ],
        )
        if version is None:
            raise self._missing(model_id)
        version, meta = int(version), _texts(raw_meta)
        if meta.get("incarnation") != incarnation:
            return None
        if version == known:
            self._saw(model_id, incarnation, known, self.wait is None)
            return StoredState(known, incarnation)
        entries = [pair for pair in _entries(raw_log) if pair[0] <= version]
        saved = int(meta.pop(SAVED, version))
        # a version that went back (a loss) or a checkpoint past the cache: read it whole
        contiguous = [v for v, _ in entries] == list(range(known + 1, version + 1))
        if version < known or saved > known or not contiguous:
            return None
        self._saw(model_id, incarnation, version, self.wait is None)
        return StoredState(version, incarnation, meta=meta, entries=entries)

    @unavailable
    def checkpoint(self, model_id, incarnation, version, arrays) -> bool:
        """``Store.checkpoint`` in one round trip: the state written into staged hashes (they
        expire if this process dies), which ``CHECKPOINT_SCRIPT`` renames over it or deletes."""
        self._guard(model_id)
        staged = list(keys.staged(model_id, uuid.uuid4().hex))
        commands: list[list[Any]] = []
        hashes: tuple[dict[str, Any], ...] = encode_fields(arrays)
        for key, pairs in zip(staged, hashes, strict=True):
            if pairs:
                commands += [["HSET", key, *flat_pairs(pairs)], ["PEXPIRE", key, STAGED_MS]]
        script_keys = [*keys.of(model_id, "version", "meta", "state", "layout", "log"), *staged]
        commands.append(["EVAL", CHECKPOINT_SCRIPT, len(script_keys), *script_keys,
                         incarnation, version])  # fmt: skip
        return bool(int(round_trip(self.client, script_keys[0], commands)[-1]))

    @unavailable
    def commit(self, model_id: str, commit: Commit) -> int:
        """``Store.commit`` by ``LOG_APPEND_SCRIPT`` in one round trip (fence checked, ``WAIT``
        if asked)."""
        self._guard(model_id)
        fence = commit.fence
        args: list[Any] = [
            commit.expected_version,
            commit.incarnation,
            encode(commit.entry),
            repr(float(commit.now)),
            repr(float(commit.id_expiry)),
            commit.max_remembered_ids,
            "" if fence is None else fence.holder,
            0 if fence is None else fence.generation,
            self.writer,
        ]
        for items in (commit.learned_ids, commit.expired_ids, commit.remove_pending):
            args += [len(items), *items]
        args += [2 * len(commit.meta), *flat_pairs(commit.meta)]
        script_keys = keys.of(model_id, "version", "meta", "log", "seen", "expired", "pending",
                              "deadlines", "lease", "queue", "turn")  # fmt: skip
        reply = run_script(self.client, self._append, script_keys, args, self.wait)
        status = int(reply[0])
        if status == -1:
            raise self._missing(model_id)
        if status == -2:
            if _text(reply[2]) == commit.incarnation:
                # raises if it went back
                self._saw(model_id, commit.incarnation, int(reply[1]), self.wait is None)
            raise StaleVersion(model_id)
        if status == -4:
            raise TurnTaken(model_id)
        if status == -3:
            assert fence is not None
            raise LeaseLost(
                f"model {model_id!r}: the writer lease of {fence.holder} "
                f"(generation {fence.generation}) is lost; now {_text(reply[1]) or 'nobody'} "
                f"at generation {int(reply[2])}"
            )
        version = int(reply[1])
        self.watch.saw(model_id, commit.incarnation, version)
        return version

    # ------------------------------------------------------------------ write turns
    @unavailable
    def take_turn(self, model_id: str, seconds: float) -> bool:
        key = keys.turn(model_id)
        milliseconds = max(1, int(seconds * 1000))
        return bool(run_script(self.client, self._turn, [key], [self.writer, milliseconds], None))

    @unavailable
    def turn_taken(self, model_id: str) -> bool:
        (holder,) = round_trip(self.client, keys.turn(model_id), [["GET", keys.turn(model_id)]])
        return holder is not None and _text(holder) != self.writer

    @unavailable
    def release_turn(self, model_id: str) -> None:
        key = keys.turn(model_id)
        run_script(self.client, self._turn_release, [key], [self.writer], None)

    # ------------------------------------------------------------------ ids and pending records
    @unavailable
    def seen(self, model_id: str, ids: Sequence[str], now: float) -> np.ndarray:
        return self._remembered(keys.seen, model_id, ids, now)

    @unavailable
    def expired(self, model_id: str, ids: Sequence[str], now: float) -> np.ndarray:
        return self._remembered(keys.expired, model_id, ids, now)

    def _remembered(
        self, key: Callable[[str], str], model_id: str, ids: Sequence[str], now: float
    ) -> np.ndarray:
        """Which ``ids`` the model's set ``key`` (learned or expired) holds past ``now``."""
        self._guard(model_id)
        return np.array(
            [score is not None and score > now
             for part in chunks(ids) for score in self.client.zmscore(key(model_id), part)],
            dtype=bool,
        )  # fmt: skip

    @unavailable
    def put_pending(self, model_id, records, deadline, max_records=None, incarnation=None) -> None:
        self._guard(model_id)
        if not records:
            return
        args = [repr(float(deadline)), max_records or 0, incarnation or "", *flat_pairs(records)]
        script_keys = keys.of(model_id, "config", "pending", "deadlines", "meta")
        kept = run_script(self.client, self._pending, script_keys, args, self.wait)
        if int(kept) == -2:
            raise no_model(model_id)
        if int(kept) == -3:
            assert max_records is not None
            raise InsufficientStorage(pending_full(model_id, max_records))
        if int(kept) == -4:
            raise StaleVersion(f"model {model_id!r} was replaced since its scores were given")

    @unavailable
    def get_pending(self, model_id: str, ids: Sequence[str]) -> dict[str, tuple[bytes, float]]:
        self._guard(model_id)
        if not ids:
            return {}
        pending = keys.pending(model_id)
        records, deadlines = atomic_read(
            self.client,
            pending,
            [["HMGET", pending, *ids], ["ZMSCORE", keys.deadlines(model_id), *ids]],
        )
        return {
            event_id: (record, float(deadline))
            for event_id, record, deadline in zip(ids, records, deadlines, strict=True)
            if record is not None and deadline is not None
        }

    @unavailable
    def due_pending(self, model_id: str, now: float, limit: int) -> list[str]:
        self._guard(model_id)
        due = self.client.zrangebyscore(keys.deadlines(model_id), "-inf", now, start=0, num=limit)
        return [event_id.decode() if isinstance(event_id, bytes) else event_id for event_id in due]
