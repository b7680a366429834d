"""The Redis store: state shared by every process and machine (``AUCSTREAM_REDIS_URL``).

A model's log is the stream ``aucs:{m}:log`` (stream id ``<version>-0``) after its checkpoint,
the hashes ``aucs:{m}:state`` and ``aucs:{m}:layout`` at version ``log:saved``
(:mod:`service.stores.keys`; docs/architecture.md, "Stores").  The state arrays never pass
through Lua (Redis copies a script's arguments, costing it several times the CPU): a checkpoint
writes them into staged hashes that its script renames.  Layers, one module each: ids and
pending records (:mod:`.redis_events`), the loss watch (:mod:`.redis_watch`), the model
lifecycle (:mod:`.redis_models`), and here the connection, loads, appends, checkpoints, turns.
"""

from __future__ import annotations

import logging
import threading
import uuid
from typing import Any

import orjson
import redis
import redis.connection
import redis.exceptions

from service.engine.entries import Entry, decode, encode
from service.errors import LeaseLost, StaleVersion, StoreUnavailable, TurnTaken
from service.stores import keys
from service.stores.base import Commit, StoredState, writer_token
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
    ACKNOWLEDGE_SCRIPT,
    CHECKPOINT_SCRIPT,
    CREATE_SCRIPT,
    DELETE_SCRIPT,
    LOG_APPEND_SCRIPT,
    MARKER_SCRIPT,
    TURN_RELEASE_SCRIPT,
    TURN_SCRIPT,
)
from service.stores.redis_models import RedisModels
from service.stores.redis_setup import _text

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


class RedisStore(RedisModels):
    name = "redis"
    #: network round trips: the HTTP layer calls it from the thread pool
    blocking = True

    def __init__(self, client: redis.Redis, wait: ReplicaWait | None = None) -> None:
        super().__init__(client, wait)  # self.client, self.watch; ids and pending records
        (self._create, self._delete, self._marker, self._acknowledge, self._append, self._turn,
         self._turn_release) = map(client.register_script, (
            CREATE_SCRIPT, DELETE_SCRIPT, MARKER_SCRIPT, ACKNOWLEDGE_SCRIPT, LOG_APPEND_SCRIPT,
            TURN_SCRIPT, TURN_RELEASE_SCRIPT))  # fmt: skip
        #: this process among the writers of the store (its write turns: service.engine.turns)
        self.writer = writer_token()
        self._checking = threading.Lock()
        #: the settings whose checks (:meth:`open`) wait for Redis's first answer
        self._settings: Any = None

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
        """``Store.commit`` by ``LOG_APPEND_SCRIPT`` in one round trip (with ``WAIT`` when
        asked); a queue worker's fence is checked there too."""
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
