"""Every Redis key name of aucstream, defined here and nowhere else (tested as exact strings;
the table of what each holds is in docs/architecture.md, "Redis keys").

All keys of one model carry the model id as a hash tag, ``aucs:{<model>}:...``, so they share a
Redis Cluster slot and one transaction or Lua script may touch all of them.  The keys without
one (``aucs:models``, ``aucs:workers``, ``aucs:alarms``) are touched alone, never with a model
key.
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


def of(model_id: str, *parts: str) -> list[str]:
    """The keys ``parts`` of one model, in order (a script's KEYS)."""
    return [model_key(model_id, part) for part in parts]


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
