"""``aucstream worker``: learns the queued batches of queue mode with the same engine as sync
mode (docs/architecture.md §4 Modes, §5 Scale-out, which say why each step is safe).  Each
worker **discovers** the models and takes the writer lease (:mod:`service.queue.lease`) of its
share of them, **recovers** a model it takes (claims what others left pending and idle, applies
its own pending entries), then **reads** new entries and applies them
(:mod:`service.queue.apply`), each commit fenced by the lease.  SIGTERM / SIGINT: the current
read (or recovery) is learned, committed and acknowledged, the leases released, and the
process exits 0.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import redis.exceptions

from service.engine import Engine
from service.engine.refit import Refitter
from service.errors import CorruptState, LeaseLost, ModelNotFound, ServiceError
from service.queue.apply import EntryApplier, OutOfOrder, logger
from service.queue.lease import Leases
from service.queue.streams import Entry, StreamQueue
from service.settings import LEARNING_SETTINGS, Settings
from service.stores.base import Fence
from service.stores.redis import RedisStore
from service.telemetry import Telemetry, configure_logging

#: seconds before a model whose stored state was refused as corrupt is tried again
CORRUPT_RETRY_SECONDS = 5.0


class Worker:
    """One worker process's loop; :meth:`run` until :meth:`stop`."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: RedisStore | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        if settings.redis_url is None:
            raise ValueError("aucstream worker needs AUCSTREAM_REDIS_URL")
        self.settings = settings
        self.store = store or RedisStore.open(settings)
        # One stale write is enough: the worker itself reloads the checkpoint and filters the
        # entries again (the engine's own retry would re-learn entries another writer applied).
        self.engine = Engine(
            self.store, max_write_retries=1, **settings.model_dump(include=LEARNING_SETTINGS)
        )
        self.queue = StreamQueue(
            self.store.client, cluster_block_ms=settings.worker_cluster_block_ms
        )
        self.leases = Leases(self.store.client)
        self.telemetry = telemetry or Telemetry(model_series=settings.prometheus_model_series)
        self.name = settings.worker_name or f"{socket.gethostname()}-{os.getpid()}"
        self.applier = EntryApplier(self.engine, self.queue, self.telemetry, self.name)
        #: models this worker writes -> whether their pending entries were recovered (the
        #: lease generation it took is its fence's: ``engine.repository.fences``)
        self.owned: dict[str, bool] = {}
        self.fences = self.engine.repository.fences
        #: models whose last apply stopped before entries not yet applied (held elsewhere)
        self._gaps: set[str] = set()
        self._stop = threading.Event()
        self._next_discovery = 0.0
        #: when the metrics histories of the models this worker wrote are next caught up
        self._next_history = 0.0
        #: models whose stored state is corrupt -> when to try them again (monotonic s)
        self._corrupt: dict[str, float] = {}

    def _log(self, level: int, message: str, *args: Any, model: str | None = None) -> None:
        """A log line with the worker's name (and the model's) as fields of a JSON line."""
        fields = {"worker": self.name} if model is None else {"worker": self.name, "model": model}
        logger.log(level, message, *args, extra={"fields": fields})

    # ------------------------------------------------------------------ lifecycle
    def stop(self, *_: Any) -> None:
        """Finish the current read (learn, commit, acknowledge), then leave :meth:`run`."""
        self._stop.set()

    def run(self, *, until: Callable[[], bool] | None = None) -> None:
        """Loop until :meth:`stop` (or ``until()`` is true); survives Redis outages."""
        backoff = 0.1
        self._log(logging.INFO, "worker %s started", self.name)
        # the boosted ensembles of the models this worker writes are fitted beside it
        refitter = Refitter()
        refitter.start()
        try:
            while not self._stop.is_set() and not (until is not None and until()):
                try:
                    self.step()
                    backoff = 0.1
                except (
                    ServiceError,
                    redis.exceptions.RedisError,
                    redis.exceptions.RedisClusterException,  # not a RedisError
                ) as error:
                    # Redis down or loading (503 in the API), persistent contention, a reply
                    # we did not expect: back off and start over from the checkpoints
                    self._log(logging.WARNING, "%s; retrying in %.1f s", error, backoff)
                    # entries read before the failure may be unacknowledged: read our pending
                    # lists again
                    self.owned.update(dict.fromkeys(self.owned, False))
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, 2.0)
        finally:
            refitter.stop()
            self.engine.repository.close()  # checkpoints, while the models are cached
            self.release_all()
            self._log(logging.INFO, "worker %s stopped", self.name)

    def release_all(self) -> None:
        """Give every lease back and leave the list of live workers (graceful stop)."""
        with contextlib.suppress(ServiceError):
            for model in list(self.owned):
                self.leases.release(model, self.name, self.fences[model].generation)
            self.leases.leave(self.name)
        for model in list(self.owned):
            self._drop(model)

    # ------------------------------------------------------------------ one loop
    def step(self) -> int:
        """Discover, renew leases, recover, read and apply once.  Returns entries handled."""
        now = time.monotonic()
        if now >= self._next_discovery:
            self.discover()
            self._next_discovery = now + self.settings.worker_discover_seconds
        self.renew()
        if now >= self._next_history:
            # the points a model's next batch would have written, for models gone quiet
            # (service/engine/history.py); through this worker's fenced commits
            self.engine.catch_up_history()
            self._next_history = now + self.settings.history_catch_up_seconds
        handled = 0
        for model in [m for m, recovered in self.owned.items() if not recovered]:
            if self._corrupt.get(model, 0.0) <= now:
                handled += self._guarded(model, self.recover, model)
        ready = {model: ">" for model, recovered in self.owned.items() if recovered}
        if not ready:
            if not handled:
                self._stop.wait(min(self.settings.worker_block_ms / 1000.0, 0.2))
            return handled
        try:
            read = self.queue.read(
                ready,
                self.name,
                self.settings.worker_batch_entries,
                self.settings.worker_block_ms,
            )
        except redis.exceptions.ResponseError as error:
            self._check_groups(error, list(self.owned))  # which model's is unknown: all
            return handled
        for model, entries in read.items():
            handled += self._guarded(model, self.apply, model, entries)
        return handled

    def _guarded(self, model: str, work: Callable[..., int], *args: Any) -> int:
        """``work(*args)``, except that a model whose stored state is corrupt (refused before
        any kernel sees it) stops only itself: its entries stay pending, unacknowledged, and
        it is recovered again after a pause (a reset or a snapshot import repairs it)."""
        try:
            return work(*args)
        except CorruptState as error:
            logger.error(
                "%s; its entries stay pending", error.detail, extra={"fields": {"model": model}}
            )
            if model in self.owned:
                self.owned[model] = False
            self._corrupt[model] = time.monotonic() + CORRUPT_RETRY_SECONDS
            return 0

    def discover(self) -> None:
        """Follow created / deleted models and take this worker's share of them: at most
        ``ceil(models / live workers)``.  Above it (a worker joined), one model is given back
        per discovery, so workers settle without taking models from each other in bursts."""
        live = self.leases.heartbeat(self.name, self.settings.worker_lease_ms)
        models = set(self.engine.list_models())
        for model in list(self.owned):
            if model not in models:
                self._drop(model)
                self.telemetry.forget_model(model)  # deleted: its label sets go with it
        share = -(-len(models) // max(live, 1))
        if len(self.owned) > share:
            model = sorted(self.owned)[-1]
            self.leases.release(model, self.name, self.fences[model].generation)
            self._drop(model)
            self._log(logging.INFO, "handing model %s over (share of %d workers: %d models)",
                      model, live, share, model=model)  # fmt: skip
        free = sorted(models - set(self.owned))
        random.shuffle(free)  # workers starting together do not all try the same model first
        for model in free:
            if len(self.owned) >= share:
                break
            lease = self.leases.hold(model, self.name, self.settings.worker_lease_ms)
            if lease is not None:
                if self.queue.ensure_group(model):
                    self._take(model, lease.generation)
                    self._log(logging.INFO, "writing model %s", model, model=model)
                else:
                    self.leases.release(model, self.name, lease.generation)

    def renew(self) -> None:
        for model in list(self.owned):
            generation = self.fences[model].generation
            lease = self.leases.hold(model, self.name, self.settings.worker_lease_ms, generation)
            if lease is None:
                self._log(logging.WARNING, "lost the lease of model %s", model, model=model)
                self._drop(model)
            elif lease.taken:
                # the lease lapsed (this process stalled) and was free: another worker may
                # have written the model meanwhile, so start over as a new writer
                self._log(logging.WARNING, "the lease of model %s lapsed and was taken again: "
                          "recovering", model, model=model)  # fmt: skip
                self._take(model, lease.generation)

    def _take(self, model: str, generation: int) -> None:
        """Write ``model`` under lease ``generation``: commits fenced by it, the state reloaded
        and the pending entries recovered before new ones are read."""
        self.owned[model] = False
        self.fences[model] = Fence(self.name, generation)
        self.engine.repository.drop(model)

    def _drop(self, model: str) -> None:
        self.owned.pop(model, None)
        self._gaps.discard(model)
        self.fences.pop(model, None)
        self.engine.repository.drop(model)
        # no history catch-up without the lease: a model's writes are its owner's alone
        self.engine.repository.history_caught_up(model)
        self.applier.forget(model)
        self._corrupt.pop(model, None)

    def _check_groups(self, error: redis.exceptions.ResponseError, models: list[str]) -> None:
        """After ``error``: a NOGROUP (a model deleted or re-created since it was taken) has
        ``models`` recovered again or dropped, any other error is raised."""
        if "NOGROUP" not in str(error):
            raise error
        for model in models:
            if self.queue.ensure_group(model):
                self.owned[model] = False
            else:
                self._drop(model)

    def recover(self, model: str) -> int:
        """Claim what dead consumers left pending, then apply our own pending entries; the
        model is read with ``">"`` only once nobody else holds pending entries of it.  A stop
        does not cut this short: what was claimed is applied and acknowledged first, so a
        graceful stop leaves nothing pending under this worker's name for others to wait
        ``worker_claim_min_idle_ms`` for."""
        try:
            min_idle_ms = self.settings.worker_claim_min_idle_ms
            self.queue.claim(model, self.name, min_idle_ms)
            if self.queue.pending_of_others(model, self.name, min_idle_ms):
                return 0  # a consumer still holds entries: wait until they are idle enough
            handled = 0
            while True:
                entries = self.queue.read(
                    {model: "0"}, self.name, self.settings.worker_batch_entries, None
                ).get(model)
                if not entries:
                    break
                handled += self.apply(model, entries)
                if model not in self.owned or model in self._gaps:
                    self._gaps.discard(model)  # wait until the entries before are claimable
                    return handled
        except redis.exceptions.ResponseError as error:
            self._check_groups(error, [model])
            return 0
        if model in self.owned and not self._stop.is_set():
            self.owned[model] = True
        return handled

    # ------------------------------------------------------------------ applying entries
    def apply(self, model: str, entries: list[Entry]) -> int:
        """Apply entries read from ``model``'s stream (see :mod:`service.queue.apply`)."""
        try:
            return self.applier.apply(model, entries)
        except ModelNotFound:
            self._drop(model)
            return 0
        except LeaseLost as error:
            self._log(logging.WARNING, "%s", error, model=model)
            self._drop(model)
            return 0
        except OutOfOrder as error:
            # another consumer holds entries before these: claim them (once idle) and apply
            # the pending list in order
            self._log(logging.WARNING, "%s", error, model=model)
            if model in self.owned:
                self.owned[model] = False
                self._gaps.add(model)
            return len(entries)


def main(settings: Settings) -> int:
    """The ``aucstream worker`` process: warm up, serve metrics, loop until SIGTERM."""
    if settings.log_format == "text":
        # no uvicorn here to print the lines: the root logger's handler, with the time, and
        # the only one (configure_logging adds its own only when the root has none)
        logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    configure_logging(settings.log_format, settings.log_level)
    worker = Worker(settings)
    signal.signal(signal.SIGTERM, worker.stop)
    signal.signal(signal.SIGINT, worker.stop)
    if settings.warmup:
        from service.app import warm_up

        warm_up()
    if settings.worker_metrics_port:
        from prometheus_client import start_http_server

        start_http_server(settings.worker_metrics_port, registry=worker.telemetry.registry)
    worker.run()
    worker.store.close()
    return 0
