"""The Redis store's model lifecycle: creating (or re-creating for a reset), listing and
deleting models, and the registry ``aucs:models`` kept right across Redis Cluster slots."""

from __future__ import annotations

from typing import Any

from service.stores import keys
from service.stores.base import CREATION_REFUSALS, no_model
from service.stores.client import flat_pairs, run_script, unavailable
from service.stores.fields import encode_fields
from service.stores.redis_setup import _text
from service.stores.redis_watch import RedisWatch


class RedisModels(RedisWatch):
    """Creating, listing and deleting models (the base class of
    :class:`~service.stores.redis.RedisStore`, which sets the attributes below)."""

    #: the Lua scripts creating and deleting a model's keys
    _create: Any
    _delete: Any

    @unavailable
    def create_model(
        self, model_id, config, arrays, incarnation, *, replace=False, replaces=None
    ) -> int:
        import orjson

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
