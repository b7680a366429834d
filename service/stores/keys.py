"""Every Redis key name of aucstream, defined here and nowhere else (tested as exact strings).

All keys of one model carry the model id as a hash tag, ``aucs:{<model>}:...``, so they share a
Redis Cluster slot and one transaction or Lua script may touch all of them. The only keys
without a model hash tag are the global index of model ids, ``aucs:models``, the set of live
queue workers, ``aucs:workers``, and the alarms of lost data, ``aucs:alarms``; a command or
script touches at most one of them, and no model key with it (so ``aucs:models`` is written
before and after a model's create, and listed only where the model exists:
:meth:`service.stores.redis.RedisStore.list_models`).

======================= ====== ================================================================
key                     type   content
======================= ====== ================================================================
aucs:models             set    every model id
aucs:workers            zset   queue workers alive: name -> expiry of its heartbeat (unix ms)
aucs:alarms             hash   losses of data noticed and not yet acknowledged: ``store`` or
                               ``model:<m>`` -> the cause (:mod:`service.stores.epoch`)
aucs:{epoch-N}:marker   hash   the store's epoch marker (one per Redis Cluster master, N
                               chosen so that its slot is on that master): ``epoch`` (random
                               id), ``clock`` (Redis time, ms, of the last check),
                               ``acknowledged`` when written by an operator's acknowledgement
aucs:{m}:config         string the model's JSON configuration (learner, params, n_features ...)
aucs:{m}:version        string integer state version, incremented by every committed write
aucs:{m}:meta           hash   ``incarnation`` (changes when the model is re-created or
                               imported), ``log:saved`` (the version the state is the
                               checkpoint of; the version itself when absent), plus the
                               fields written with log entries (a queue worker's position)
aucs:{m}:state          hash   the checkpoint: one field per state array, its raw
                               little-endian bytes; an array over 1 KiB is split into fields
                               ``<name>@0``, ``<name>@1``, ... and its zero chunks left out
aucs:{m}:layout         hash   one field per state array: ``<dtype>|<shape>`` e.g. ``<f8|50``,
                               plus ``|<n chunks>`` for a split array
aucs:{m}:log            stream the model's log: one entry per change after the checkpoint,
                               stream id ``<version>-0``, field ``e`` the encoded entry
                               (:mod:`service.engine.entries`); trimmed by each checkpoint
aucs:{m}:checkpoint:<t> hash   a checkpoint being written (``<t>`` a token, ``:state`` and
                               ``:layout``), renamed over the state once checked (expires)
aucs:{m}:seen           zset   event ids already learned, scored by their expiry (unix s)
aucs:{m}:expired        zset   ids whose label never came before the TTL, scored by expiry
aucs:{m}:pending        hash   event id -> features + score kept by ``/score`` for a label
aucs:{m}:deadlines      zset   event id -> time after which its pending label expires
aucs:{m}:stream         stream queue mode: parsed batches waiting for a worker (consumer group
                               ``aucstream-workers``); applied entries are trimmed
aucs:{m}:queue          hash   queue mode: ``entries`` / ``events`` appended since creation,
                               ``lease_generation``: incremented at each taking of the lease
aucs:{m}:lease          string queue mode: name of the worker that writes this model (TTL);
                               with ``lease_generation`` the token its commits are fenced by
aucs:{m}:turn           string the process whose append of the model was stale holds its write
                               turn (TTL): the others' appends wait until its append ends it
aucs:{m}:append:<t>     string queue mode: the reply to the append of token ``<t>`` (backlog
                               and stream ids), kept a minute so that the append, sent again
                               after its reply was lost, answers instead of appending twice
======================= ====== ================================================================

A queue worker's checkpoint (last applied stream id, entries and events applied) lives in
``aucs:{m}:meta`` as the fields ``queue:last_id``, ``queue:entries`` and ``queue:events``,
written by the same atomic commit as the state it describes.
"""

from __future__ import annotations

from collections.abc import Callable

from service.errors import ModelNotFound

PREFIX = "aucs"
MODELS = f"{PREFIX}:models"
WORKERS = f"{PREFIX}:workers"
ALARMS = f"{PREFIX}:alarms"
#: the consumer group of every model stream
WORKER_GROUP = "aucstream-workers"


def _check(model_id: str) -> str:
    """A model id usable as a hash tag.  Created ids never hold braces (``ModelCreate``'s
    pattern), so an id with one is a lookup of a model that cannot exist: 404, not a 500."""
    if not model_id or "{" in model_id or "}" in model_id:
        raise ModelNotFound(
            f"no model {model_id!r}: model ids are never empty and never contain braces",
            field="model_id",
        )
    return model_id


def model_key(model_id: str, part: str) -> str:
    """``aucs:{<model_id>}:<part>``."""
    return f"{PREFIX}:{{{_check(model_id)}}}:{part}"


#: the keys every model owns (the table above), one function each, ``aucs:{<model_id>}:<part>``
PARTS = ("config", "version", "meta", "state", "layout", "seen", "expired", "pending",
         "deadlines", "log", "stream", "queue", "lease", "turn")  # fmt: skip


def _part_key(part: str) -> Callable[[str], str]:
    def key(model_id: str) -> str:
        return model_key(model_id, part)

    key.__name__ = key.__qualname__ = part
    key.__doc__ = f"``aucs:{{<model_id>}}:{part}``."
    return key


(config, version, meta, state, layout, seen, expired, pending,
 deadlines, log, stream, queue, lease, turn) = map(_part_key, PARTS)  # fmt: skip


def staged(model_id: str, token: str) -> tuple[str, str]:
    """The state and layout hashes of a checkpoint being written (renamed over the state)."""
    staging = f"checkpoint:{token}"
    return model_key(model_id, f"{staging}:state"), model_key(model_id, f"{staging}:layout")


def marker(number: int) -> str:
    """``aucs:{epoch-<number>}:marker``: an epoch marker (its own hash tag, placed by slot)."""
    return f"{PREFIX}:{{epoch-{number}}}:marker"


def append_reply(model_id: str, token: str) -> str:
    """``aucs:{<model_id>}:append:<token>``: the reply to one append (expires by itself)."""
    return model_key(model_id, f"append:{token}")


def all_model_keys(model_id: str) -> list[str]:
    """Every key one model owns (for deletion; the append replies expire by themselves, and a
    re-created model's appends are told apart by its incarnation)."""
    return [model_key(model_id, part) for part in PARTS]
