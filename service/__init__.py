"""aucstream service: HTTP API, stores (SQLite, memory, Redis), ingest parsing, engine, CLI.

Quick start::

    aucstream serve --port 8000                       # SQLite store on disk, nothing else needed
    curl -X POST localhost:8000/v1/models -H 'content-type: application/json' \\
         -d '{"id": "fraud", "n_features": 3}'
    curl -X POST localhost:8000/v1/models/fraud/events -H 'content-type: application/json' \\
         -d '{"events": [{"id": "t1", "x": [120.5, 1, 0], "y": 0},
                         {"id": "t2", "x": [9800, 0, 1], "y": 1}]}'
    curl localhost:8000/v1/models/fraud/metrics

API (under ``/v1``; OpenAPI at ``/docs``; errors are ``application/problem+json`` with
``type``, ``title``, ``status``, ``detail`` and the offending ``field`` / ``line`` / ``event``):

======================================  ========================================================
``POST /v1/models``                     create: id, learner, params, n_features, feature_mode
                                        (dense | sparse | hashed), scaling, pauc_range, window,
                                        reservoir, default_label, label_ttl_seconds
``GET /v1/models``, ``GET|DELETE
/v1/models/{id}``, ``POST .../reset``   list, get (config, version, counts), delete, reset
``POST .../events``                     learn labelled events: JSON, NDJSON, LIBSVM, NPZ
                                        (see :mod:`service.ingest`); ``?scores=true`` returns
                                        the pre-update scores; ids make it idempotent.
                                        Queue mode: 202 with the stream ids, 429 +
                                        ``Retry-After`` when the backlog is full
``POST .../score``                      scores; events with an ``id`` are kept for a label;
                                        ``?probabilities=true`` adds calibrated probabilities
``POST .../labels``                     ``[{"id", "y"}]`` joined to kept events (queue
                                        mode: 202, joined by a worker)
``GET .../metrics``, ``.../metrics/roc``,
``.../metrics/stream``                  prequential AUC / pAUC (window and since start),
                                        counts, throughput; ROC of the window; server-sent
                                        events on every change
``GET .../weights``                     the served weights: on the scaled features
                                        (``coef``, ``intercept``) and on the features as
                                        posted (``raw_coef``, ``raw_intercept``), with the
                                        model's ``feature_names``
``GET|PUT .../snapshot``                export / import (:mod:`service.snapshot`: a zip of
                                        ``.npy`` files and a JSON manifest, pickle-free)
``GET /v1/learners``                    learner names
``GET /healthz``, ``/readyz``,
``/metrics``                            liveness; readiness (store answers, kernels
                                        compiled); Prometheus text format
``GET /``, ``/dashboard``               the live dashboard (:mod:`service.routers.dashboard`;
``GET /dashboard/config``               whether it must ask for an API key), Swagger UI and
``GET /docs``, ``/redoc``               ReDoc, all from files in the package (no CDN)
======================================  ========================================================

Decisions ([CHOICE], with the reason):

* Default scaling of models created over HTTP is ``auto``: ``standard`` (running mean and
  variance) for dense models, ``scale`` (running variance, keeps sparsity) for sparse and
  hashed ones.  Fraud teams post raw features — amounts in the thousands next to 0/1 flags —
  and every learner's step size assumes unit-scale features; an unscaled amount dominates the
  gradient and the model learns little else.  ``"scaling": "none"`` opts out.
* Status codes: 400 when the body cannot be read (malformed JSON / NDJSON line / LIBSVM pair,
  corrupt NPZ), 422 when it was read but is invalid (NaN, wrong width, bad label or id, object
  arrays), 404 unknown model, 409 model exists, 413 body or batch too large, 415 content type,
  401/403 API key, 503 store unavailable or persistent write contention.
* Event ids: a repeated id (within a batch or within ``AUCSTREAM_EVENT_ID_TTL_SECONDS``, one
  day by default) is skipped and reported in ``duplicate_ids``.  Events without an id are
  always learned.  Ids are strings (integers are turned into their decimal string).
* Delayed labels: ``/score`` keeps features and the score it returned for
  ``label_ttl_seconds`` (model) or ``AUCSTREAM_LABEL_TTL_SECONDS``.  A label is learned with
  the kept features and the metrics window receives the score given at scoring time (so the
  metrics measure what the fraud team saw).  Per id: ``learned``, ``duplicate``, ``expired``,
  ``unknown``.  With ``default_label`` set, an event whose label did not come in time is
  learned with it by a sweep every ``AUCSTREAM_SWEEP_INTERVAL_SECONDS``.
* The metrics window and the since-start reservoirs are part of the model's versioned state,
  committed atomically with the learner state, so metrics agree with what was learned even
  with several processes; since-start metrics are exact while each class has had at most
  ``reservoir`` events (10,000 by default), then a uniform-reservoir estimate.
* Regret (``GET /v1/models/{id}/metrics`` -> ``regret``): each model keeps a regret window
  (``regret_window`` events, default 1,000 when ``n_features <= 250``, else 0 = off) with the
  events' features as the learner saw them (after its scaling; sparse rows densified), labels,
  prequential scores and the rounds — one per learned request (per stream entry in queue mode,
  the same as sync mode) with the weights served when it began — committed atomically with the
  model state and kept by snapshots.  The report (``core.regret.RegretWindow``: Kar et al.'s
  batched eq. (6) against ``svm_pauc`` on the same window, plus the pAUC gap) is solved once
  per model version (and at most every 10x its own duration), outside the model lock and off
  the event loop.  Cost: ~10-150 ms per solve for 1,000 events x 50 features (1 to 1,000
  rounds), ~3 s at the cap (5,000 single-event rounds); every commit also stores the new
  events' features (on Redis, about 400 bytes per event at 50 features: ingest of 1,000-event
  batches measured ~2-4x slower with it on; set ``regret_window`` to 0 where throughput
  matters more).
* Queue mode (``AUCSTREAM_MODE=queue``, Redis only; :mod:`service.queue`, its
  :mod:`~service.queue.worker`): the routes validate a batch exactly as in sync mode, append the
  parsed arrays (raw bytes, ids as JSON, no pickle) to the model's Redis Stream and answer 202;
  ``aucstream worker`` processes learn it with the same engine and commit the state with the
  last applied stream id.  Exactly once per stream entry (the checkpoint), and per event id as
  in sync mode: a client that retries after a timeout should send event ids.  The backlog is
  bounded (429 + ``Retry-After``); ``GET .../metrics`` reports the lag under ``queue``.
  ``?scores=true`` is refused (422) in queue mode, and per-label outcomes are counted
  (``aucstream_labels_total``) instead of returned.
* Stores (:mod:`service.stores`): SQLite (the default without a Redis URL: one file in
  ``AUCSTREAM_DATA_DIR``, shared by the workers of one machine, kept across restarts), memory
  (per process, lost at exit) and Redis (``AUCSTREAM_REDIS_URL``: shared across machines;
  queue mode).  The memory store's calls run on the event loop (they never block); SQLite and
  Redis calls run in the thread pool (:mod:`service.offload`).  ``serve --workers N>1`` needs
  SQLite or Redis.
"""
