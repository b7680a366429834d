"""Hostile input replayed over the real ASGI app: each attack is refused
with a problem response, leaves the state as it was, and keeps memory bounded.

1. Corrupt states: a snapshot whose arrays break the learner's invariants (huge fills, negative
   counts, NaN weights, wrong lengths) is a 422 naming the array; a corrupt state found in the
   store is a 500 ``corrupt-state`` problem for that model only, and never reaches a kernel.
2. Bombs: compressed uploads and headers that claim huge arrays are refused from the zip's
   central directory and the ``.npy`` headers, before anything is inflated or allocated.
3. Memory that only grows: Prometheus label sets, engine caches and locks, models, remembered
   ids and kept ``/score`` records are all bounded.
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib

import httpx
import numpy as np
import orjson
import pytest

from core.learners import available_learners, learner_class, make_learner
from core.learners._state import Fraction
from service.app import create_app
from service.settings import Settings
from service.stores.client import connect
from service.stores.memory import MemoryStore
from tests.service.conftest import (
    STORE_SETTING,
    create_model,
    events_json,
    live_server,
    make_stream,
)

ONLINE = [name for name in available_learners() if learner_class(name).online]
PROBLEM = "application/problem+json"


# ------------------------------------------------------------------------- snapshot helpers
def read_snapshot(body: bytes) -> tuple[dict, dict[str, np.ndarray]]:
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        manifest = orjson.loads(archive.read("manifest.json"))
        arrays = {
            name: np.load(io.BytesIO(archive.read(entry["file"])), allow_pickle=False)
            for name, entry in manifest["arrays"].items()
        }
    return manifest, arrays


def write_snapshot(manifest: dict, arrays: dict[str, np.ndarray]) -> bytes:
    """A snapshot whose manifest entries describe ``arrays`` as they are (so only the values,
    not the manifest, are at fault)."""
    manifest = {**manifest, "arrays": {}}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, array in arrays.items():
            payload = io.BytesIO()
            np.save(payload, array, allow_pickle=False)
            archive.writestr(f"arrays/{name}.npy", payload.getvalue())
            manifest["arrays"][name] = {
                "file": f"arrays/{name}.npy",
                "dtype": array.dtype.str,
                "shape": list(array.shape),
            }
        archive.writestr("manifest.json", orjson.dumps(manifest))
    return buffer.getvalue()


def put_snapshot(client, model_id: str, body: bytes, replace: bool = True):
    return client.put(
        f"/v1/models/{model_id}/snapshot",
        content=body,
        params={"replace": str(replace).lower()},
        headers={"content-type": "application/zip"},
    )


def corruptions(array: np.ndarray, invariant=None) -> list[tuple[str, np.ndarray]]:
    """Out-of-range versions of a state array: huge and negative counters, NaN, infinite and
    huge finite floats (values outside [0, 1] for a metric that is NaN until first evaluated),
    a wrong length."""
    changed = []
    flat = array.reshape(-1)
    values: list = []
    if array.dtype.kind == "i":
        # 2**40 is a valid count (a 2**40 fill: above); a narrow array (int8 labels) gets its
        # largest value
        values = [min(2**62, int(np.iinfo(array.dtype).max)), -2]
    elif isinstance(invariant, Fraction):
        values = [1.5, np.inf]
    elif array.dtype.kind == "f":
        values = [np.nan, np.inf, -1e308]  # -1e308: finite, beyond every state bound
    for value in values if flat.size else []:
        bad = array.copy()
        bad.reshape(-1)[0] = value
        changed.append((f"{value}", bad))
    changed.append(("longer", np.zeros(flat.size + 1, dtype=array.dtype)))
    return changed


def learned_model(client, name: str, model_id: str = "m"):
    create_model(client, model_id, n_features=5, learner=name)
    X, y = make_stream(120, seed=1)
    response = client.post(f"/v1/models/{model_id}/events", json=events_json(X, y))
    assert response.status_code == 200, response.text


# ------------------------------------------------------------------------- 1. corrupt states
def test_issue_case_oam_fill_neg_is_refused_and_the_process_survives(client):
    """Export an oam snapshot, set learner:fill_neg to 2**40, PUT it back: a 422.  Accepted,
    such a state kills the process (SIGSEGV) at the next event."""
    learned_model(client, "oam")
    exported = client.get("/v1/models/m/snapshot").content
    manifest, arrays = read_snapshot(exported)
    arrays["learner:fill_neg"] = np.array([2**40], dtype=np.int64)
    for model_id, replace in (("m", True), ("other", False)):
        response = put_snapshot(client, model_id, write_snapshot(manifest, arrays), replace)
        assert response.status_code == 422, response.text
        assert response.headers["content-type"] == PROBLEM
        problem = response.json()
        assert problem["field"] == "learner:fill_neg"
        assert "2**40" in problem["detail"] or "1099511627776" in problem["detail"]
    assert client.get("/v1/models/other").status_code == 404
    # unchanged, and still learning
    assert read_snapshot(client.get("/v1/models/m/snapshot").content)[1].keys() == arrays.keys()
    np.testing.assert_array_equal(
        read_snapshot(client.get("/v1/models/m/snapshot").content)[1]["learner:fill_neg"],
        read_snapshot(exported)[1]["learner:fill_neg"],
    )
    X, y = make_stream(3, seed=2)
    assert client.post("/v1/models/m/events", json=events_json(X, y)).status_code == 200


@pytest.mark.parametrize("name", ONLINE)
def test_every_corrupt_learner_array_of_a_snapshot_is_a_422_naming_it(client, name):
    """Every learner state array, made out of range in every way, is refused by name; the
    model is unchanged and goes on learning (the kernels never saw the state)."""
    learned_model(client, name)
    exported = client.get("/v1/models/m/snapshot").content
    manifest, arrays = read_snapshot(exported)
    learner_arrays = [key for key in arrays if key.startswith("learner:")]
    assert learner_arrays
    invariants = make_learner(name).initialize(5)._state_invariants(5)
    for key in learner_arrays:
        invariant = invariants.get(key.removeprefix("learner:"))
        for label, bad in corruptions(arrays[key], invariant):
            response = put_snapshot(client, "m", write_snapshot(manifest, {**arrays, key: bad}))
            assert response.status_code == 422, (key, label, response.text)
            assert response.headers["content-type"] == PROBLEM
            assert response.json()["field"] == key, (key, label, response.json())
    _, after = read_snapshot(client.get("/v1/models/m/snapshot").content)
    for key, array in arrays.items():
        if not key.startswith("stats:times"):
            np.testing.assert_array_equal(after[key], array, err_msg=key)
    X, y = make_stream(20, seed=3)
    assert client.post("/v1/models/m/events", json=events_json(X, y)).status_code == 200
    # the untouched snapshot is still accepted: the refusals above were about the values
    assert put_snapshot(client, "copy", exported, replace=False).status_code == 201


def test_a_snapshot_of_another_width_or_window_is_refused(client):
    learned_model(client, "spam")
    manifest, arrays = read_snapshot(client.get("/v1/models/m/snapshot").content)
    wider = {**manifest, "model": {**manifest["model"], "n_features": 6}}
    response = put_snapshot(client, "m", write_snapshot(wider, arrays))
    assert response.status_code == 422
    assert response.json()["field"] == "learner:n_features"
    bigger = {**manifest, "model": {**manifest["model"], "window": 500}}
    response = put_snapshot(client, "m", write_snapshot(bigger, arrays))
    assert response.status_code == 422
    assert response.json()["field"] == "window:window_parameters"
    regret = dict(arrays, **{"regret:parameters": np.array([2**40, 5], dtype=np.int64)})
    response = put_snapshot(client, "m", write_snapshot(manifest, regret))
    assert response.status_code == 422
    assert response.json()["field"] == "regret:parameters"


def corrupt_stored_state(client, store_kind: str, rclient, model_id: str, key: str, value):
    """Write ``value`` into the stored array ``key`` behind the service's back (a damaged or
    forged store entry), with a new version so every process reloads it."""
    if store_kind == "memory":
        from service.stores.fields import encode_fields

        model = client.app.state.store._models[model_id]  # noqa: SLF001 - the test's forgery
        fields, layouts = encode_fields({key: np.asarray(value)})
        # a forged checkpoint at a new version, the log folded into it
        model.fields[0].update(fields)
        model.fields[1].update(layouts)
        model.version += 1
        model.saved = model.version
        model.entries.clear()
        return
    array = np.asarray(value)
    if store_kind == "sqlite":
        import sqlite3

        db = sqlite3.connect(client.app.state.store.path)
        with db:  # one transaction
            # the array's fields, one or several chunks (service.stores.fields), become one
            db.execute("DELETE FROM state WHERE model_id = ? AND (field = ? OR field LIKE ?)",
                       (model_id, key, f"{key}@%"))  # fmt: skip
            db.execute("INSERT INTO state VALUES (?, ?, ?)", (model_id, key, array.tobytes()))
            db.execute("UPDATE layouts SET layout = ? WHERE model_id = ? AND name = ?",
                       (f"{array.dtype.str}|{array.shape[0]}", model_id, key))  # fmt: skip
            db.execute("UPDATE models SET version = version + 1 WHERE id = ?", (model_id,))
        db.close()
        return
    from service.stores import keys

    rclient.hset(keys.state(model_id), key, array.tobytes())
    rclient.hset(keys.layout(model_id), key, f"{array.dtype.str}|{array.shape[0]}")
    rclient.incr(keys.version(model_id))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("learner:fill_neg", np.array([2**40], dtype=np.int64)),
        ("learner:count_pos", np.array([-5], dtype=np.int64)),
        ("learner:w", np.full(5, np.nan)),
        ("learner:buffer_pos", np.zeros(3)),  # wrong length
    ],
    ids=["huge-fill", "negative-count", "nan-weights", "wrong-length"],
)
def test_a_corrupt_stored_state_is_a_problem_for_that_model_only(
    store_kind, redis_url, data_dir, request, key, value
):
    store = MemoryStore() if store_kind == "memory" else None
    settings = Settings(
        store=STORE_SETTING.get(store_kind, store_kind),
        redis_url=redis_url,
        data_dir=data_dir,
        warmup=False,
    )
    rclient = None if redis_url is None else connect(redis_url)
    from fastapi.testclient import TestClient

    with TestClient(create_app(settings, store=store)) as client:
        for model_id in ("bad", "good"):
            create_model(client, model_id, learner="oam", params={"buffer_size_neg": 100})
            X, y = make_stream(40, seed=4)
            assert (
                client.post(f"/v1/models/{model_id}/events", json=events_json(X, y)).status_code
                == 200
            )
        corrupt_stored_state(client, store_kind, rclient, "bad", key, value)
        X, y = make_stream(2, seed=5)
        for method, path, body in (
            ("POST", "/v1/models/bad/events", events_json(X, y)),
            ("POST", "/v1/models/bad/score", events_json(X)),
            ("GET", "/v1/models/bad/metrics", None),
            ("GET", "/v1/models/bad/snapshot", None),
        ):
            response = client.request(method, path, json=body)
            assert response.status_code == 500, (path, response.text)
            assert response.headers["content-type"] == PROBLEM
            problem = response.json()
            assert problem["type"].endswith("/corrupt-state")
            assert problem["field"] == key
            assert "'bad'" in problem["detail"]
        # the other model and the process are fine
        assert client.get("/healthz").status_code == 200
        assert client.post("/v1/models/good/events", json=events_json(X, y)).status_code == 200
        # the corrupt model can be reset (or deleted) and then learns again
        assert client.post("/v1/models/bad/reset").status_code == 200
        assert client.post("/v1/models/bad/events", json=events_json(X, y)).status_code == 200


# ------------------------------------------------------------------------- 2. bombs
_LOCAL = struct.Struct("<4s5H3L2H")
_CENTRAL = struct.Struct("<4s6H3L5H2L")
_END = struct.Struct("<4s4H2LH")


def raw_zip(members: list[tuple[str, bytes, int, int, int]]) -> bytes:
    """A zip archive from ``(name, data as stored, crc32, uncompressed size, method)``: lets a
    test write a deflate stream it built itself, or sizes that lie."""
    body, central = bytearray(), bytearray()
    for name, data, crc, size, method in members:
        encoded = name.encode()
        offset = len(body)
        body += _LOCAL.pack(b"PK\x03\x04", 20, 0, method, 0, 0x21, crc, len(data), size,
                            len(encoded), 0)  # fmt: skip
        body += encoded + data
        central += _CENTRAL.pack(b"PK\x01\x02", 20, 20, 0, method, 0, 0x21, crc, len(data),
                                 size, len(encoded), 0, 0, 0, 0, 0, offset)  # fmt: skip
        central += encoded
    end = _END.pack(b"PK\x05\x06", 0, 0, len(members), len(members), len(central), len(body), 0)
    return bytes(body + central + end)


def deflated(prefix: bytes, fill: bytes, size: int) -> tuple[bytes, int, int]:
    """``prefix`` then ``fill`` repeated to ``size`` bytes in all, deflated cheaply: after a full
    flush the compressor forgets its window, so every 64 MiB block of ``fill`` compresses to
    the same bytes and is compressed once.  Returns ``(data, crc32, size)``."""
    block = fill * (64 * 2**20 // len(fill))
    n_blocks, rest = divmod(size - len(prefix), len(block))
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = compressor.compress(prefix) + compressor.flush(zlib.Z_FULL_FLUSH)
    first = compressor.compress(block) + compressor.flush(zlib.Z_FULL_FLUSH)
    second = compressor.compress(block) + compressor.flush(zlib.Z_FULL_FLUSH)
    assert first == second
    tail = compressor.compress(block[:rest]) + compressor.flush()
    crc = zlib.crc32(prefix)
    block_crc = crc
    for _ in range(n_blocks):
        block_crc = zlib.crc32(block, block_crc)
    crc = zlib.crc32(block[:rest], block_crc)
    return head + first * n_blocks + tail, crc, size


def npy_header(shape: tuple[int, ...], descr: str = "<f8") -> bytes:
    buffer = io.BytesIO()
    header = {"descr": descr, "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue()


def stored(name: str, data: bytes) -> tuple[str, bytes, int, int, int]:
    return name, data, zlib.crc32(data), len(data), 0


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def peak_rss_bytes(pid: int) -> int:
    """The process's peak resident set size so far (VmHWM)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


@pytest.fixture(scope="module")
def server():
    """A real uvicorn server (memory store, one process) whose peak RSS the tests read."""
    with live_server(access_log=False) as (url, process):
        with httpx.Client(base_url=url, timeout=120) as http:
            yield http, process.pid


@pytest.fixture(scope="module")
def warm_server(server):
    """The server with a 2,000-feature dense model that has learned from every content type
    and exported and imported a snapshot: every code path the bombs take is loaded, so the
    peak RSS measured after a bomb is the bomb's."""
    http, pid = server
    assert http.post("/v1/models", json={"id": "wide", "n_features": 2000, "learner": "spam"}
                     ).status_code == 201  # fmt: skip
    X, y = make_stream(200, n_features=2000, seed=7)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, X=X, y=y)
    npz = {"content-type": "application/x-npz"}
    assert http.post("/v1/models/wide/events", content=buffer.getvalue(), headers=npz
                     ).status_code == 200  # fmt: skip
    rows = zip(y.tolist(), X.tolist(), strict=True)
    libsvm = "\n".join(f"{label} 1:{row[0]!r} 7:{row[6]!r}" for label, row in rows).encode()
    assert http.post("/v1/models/wide/events", content=libsvm,
                     headers={"content-type": "text/x-libsvm"}).status_code == 200  # fmt: skip
    snapshot = http.get("/v1/models/wide/snapshot").content
    assert put_snapshot(http, "wide-copy", snapshot, replace=False).status_code == 201
    return http, pid


def refused_within(http, pid, request, status: int, budget: int) -> tuple[dict, int]:
    """Send ``request`` (a callable taking the client); check the problem status and that the
    server's peak RSS grew by at most ``budget`` bytes; returns the problem and the growth."""
    before = peak_rss_bytes(pid)
    response = request(http)
    grown = peak_rss_bytes(pid) - before
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    assert grown <= budget, f"peak RSS grew by {grown / 2**20:.0f} MiB"
    assert http.get("/healthz").status_code == 200
    return response.json(), grown


def events_refused_within(http, pid, body: bytes, content_type: str, status: int, budget: int):
    """:func:`refused_within` for ``body`` posted to the ``wide`` model's events."""
    return refused_within(
        http, pid,
        lambda h: h.post("/v1/models/wide/events", content=body,
                         headers={"content-type": content_type}),
        status, budget,
    )  # fmt: skip


MIB = 2**20


def test_npz_that_inflates_to_2_gib_is_a_413_before_inflating(warm_server):
    """A 2 MB NPZ whose X.npy expands to 2 GiB: refused from its headers, before inflating
    (loadtest/README.md, "Hostile input")."""
    http, pid = warm_server
    n_rows = 2**31 // (2000 * 8)
    data, crc, size = deflated(npy_header((n_rows, 2000)), b"\0", 128 + n_rows * 2000 * 8)
    y = npy(np.zeros(n_rows, dtype=np.int64))
    body = raw_zip([("X.npy", data, crc, size, zipfile.ZIP_DEFLATED), stored("y.npy", y)])
    assert len(body) < 4 * MIB
    problem, grown = events_refused_within(http, pid, body, "application/x-npz", 413, 32 * MIB)
    assert "AUCSTREAM_MAX_INFLATED_BYTES" in problem["detail"]
    assert problem["field"] == "X.npy"
    GROWTH["npz inflating to 2 GiB"] = grown


def test_npz_headers_claiming_huge_or_0d_shapes_are_4xx(warm_server):
    http, pid = warm_server
    npz = {"content-type": "application/x-npz"}
    y = npy(np.ones(2, dtype=np.int64))
    # (2**32, 2**32) overflows int64 to 0 elements: a 4xx too, not a 500
    huge_2d = stored("X.npy", npy_header((2**32, 2**32)) + bytes(16))
    huge_1d = stored("X.npy", npy_header((2**40,)))
    cases = {
        "huge 2-d": (raw_zip([huge_2d, stored("y.npy", y)]), "X"),
        "huge 1-d": (raw_zip([huge_1d, stored("y.npy", y)]), "X"),
    }
    # the same claim in a deflated member takes the general path
    data, crc, size = deflated(npy_header((2**40, 2000)), b"\0", 4 * MIB)
    cases["deflated"] = (
        raw_zip([("X.npy", data, crc, size, zipfile.ZIP_DEFLATED), stored("y.npy", y)]),
        "X",
    )
    zero_d_ids = io.BytesIO()
    np.savez(zero_d_ids, X=np.zeros((2, 2000)), y=np.ones(2, dtype=np.int64), ids=np.array(7))
    cases["0-d ids"] = (zero_d_ids.getvalue(), "ids")
    for label, (body, field) in cases.items():
        problem, _ = refused_within(
            http, pid,
            lambda h, body=body: h.post("/v1/models/wide/events", content=body, headers=npz),
            422, 16 * MIB,
        )  # fmt: skip
        assert problem["field"] == field, (label, problem)
    # a central directory of 20,000 members is refused from its end record
    many = raw_zip([stored(f"{index}.npy", b"") for index in range(20_000)])
    problem, _ = refused_within(
        http, pid, lambda h: h.post("/v1/models/wide/events", content=many, headers=npz),
        422, 16 * MIB,
    )  # fmt: skip
    assert "declares 20000 members" in problem["detail"]


def test_snapshot_bombs_are_refused_before_inflating(warm_server):
    """A 1 MB snapshot whose manifest.json expands to 1 GiB, a member inflating past the limit,
    and a member whose header claims shape (2**40,): each a 4xx, memory bounded."""
    http, pid = warm_server
    manifest, arrays = read_snapshot(http.get("/v1/models/wide/snapshot").content)
    data, crc, size = deflated(b'{"format": "aucstream-snapshot", "x": "', b" ", 2**30)
    bomb = raw_zip([("manifest.json", data, crc, size, zipfile.ZIP_DEFLATED)])
    assert len(bomb) < 2 * MIB
    problem, grown = refused_within(http, pid, lambda h: put_snapshot(h, "wide", bomb), 413,
                                    32 * MIB)  # fmt: skip
    assert problem["field"] == "manifest.json"
    GROWTH["snapshot manifest inflating to 1 GiB"] = grown
    # an array member inflating past the limit, the manifest being small
    data, crc, size = deflated(npy_header((2**28,)), b"\0", 128 + 2**31)
    member = raw_zip([("arrays/learner:w.npy", data, crc, size, zipfile.ZIP_DEFLATED),
                      stored("manifest.json", orjson.dumps(manifest))])  # fmt: skip
    problem, grown = refused_within(http, pid, lambda h: put_snapshot(h, "wide", member), 413,
                                    32 * MIB)  # fmt: skip
    assert problem["field"] == "arrays/learner:w.npy"
    GROWTH["snapshot member inflating to 2 GiB"] = grown
    # a header claiming shape (2**40,) for 8 bytes of data
    liar = write_snapshot(manifest, arrays)
    with zipfile.ZipFile(io.BytesIO(liar)) as archive:
        members = [stored(info.filename, archive.read(info)) for info in archive.infolist()]
    members = [
        stored(name, npy_header((2**40,)) + bytes(8)) if name == "arrays/learner:w_unscaled.npy"
        else (name, data, crc, size, method)
        for name, data, crc, size, method in members
    ]  # fmt: skip
    problem, _ = refused_within(http, pid, lambda h: put_snapshot(h, "wide", raw_zip(members)),
                                422, 16 * MIB)  # fmt: skip
    assert problem["field"] == "learner:w_unscaled"
    assert "claims shape (1099511627776,)" in problem["detail"]
    _, after = read_snapshot(http.get("/v1/models/wide/snapshot").content)
    np.testing.assert_array_equal(after["learner:w_unscaled"], arrays["learner:w_unscaled"])


def test_libsvm_body_densified_for_a_dense_model_is_bounded(warm_server):
    """A 200 KB LIBSVM body of label-only lines to a 2,000-feature dense model is refused
    before its 100,000 rows are densified (loadtest/README.md, "Hostile input")."""
    http, pid = warm_server
    body = b"1\n" * 100_000
    problem, grown = events_refused_within(http, pid, body, "text/x-libsvm", 413, 64 * MIB)
    assert "AUCSTREAM_MAX_DENSE_CELLS" in problem["detail"]
    GROWTH["200 KB LIBSVM to a 2,000-feature dense model"] = grown
    # the same as CSR arrays in an NPZ
    csr = io.BytesIO()
    np.savez(csr, indptr=np.zeros(100_001, dtype=np.int64), indices=np.zeros(0, dtype=np.int64),
             data=np.zeros(0), y=np.ones(100_000, dtype=np.int64))  # fmt: skip
    events_refused_within(http, pid, csr.getvalue(), "application/x-npz", 413, 64 * MIB)
    assert http.get("/v1/models/wide").json()["counts"]["events_learned"] == 400


#: peak RSS growth per bomb, printed at the end of the module (``pytest -s``) for the record
GROWTH: dict[str, int] = {}


def test_zz_server_peak_rss_stays_bounded_after_every_bomb(warm_server):
    """Runs after the bombs above (file order): the server's peak RSS over its whole life,
    bombs included, stays that of a small server (loadtest/README.md, "Hostile input").
    Prints each bomb's growth for the record (``pytest -s``)."""
    for label, grown in GROWTH.items():
        print(f"peak RSS growth, {label}: {grown / MIB:.1f} MiB")
    peak = peak_rss_bytes(warm_server[1])
    print(f"server peak RSS after every bomb: {peak / MIB:.0f} MiB")
    assert peak < 768 * MIB


# ------------------------------------------------------------------------- 3. memory that grows
def label_sets(client) -> set[tuple[str, ...]]:
    """Every label set of the app's Prometheus metrics labelled by model."""
    telemetry = client.app.state.telemetry
    return {labels for metric in telemetry._per_model for labels in metric._metrics}  # noqa: SLF001


def test_unknown_and_unauthenticated_ids_leave_no_labels_locks_or_cache(make_client):
    """1,200 requests for long random ids (401 without a key, 404 with one) leave nothing
    behind: a Prometheus label set or an engine lock per id would grow without bound."""
    client = make_client(api_keys="secret")
    key = {"x-api-key": "secret"}
    assert client.post("/v1/models", json={"id": "m", "n_features": 5}, headers=key
                       ).status_code == 201  # fmt: skip
    X, y = make_stream(30)
    assert client.post("/v1/models/m/events", json=events_json(X, y), headers=key
                       ).status_code == 200  # fmt: skip
    before = label_sets(client)
    rng = np.random.default_rng(0)
    ids = ["".join(rng.choice(list("abcdef0123456789"), 200)) for _ in range(600)]
    for model_id in ids:
        assert client.get(f"/v1/models/{model_id}/metrics").status_code == 401
        assert client.get(f"/v1/models/{model_id}/metrics", headers=key).status_code == 404
        assert client.post(f"/v1/models/{model_id}/events", json=events_json(X[:1], y[:1]),
                           headers=key).status_code == 404  # fmt: skip
    assert label_sets(client) - before == {
        ("GET", "/v1/models/{model_id}/metrics", "401", ""),
        ("GET", "/v1/models/{model_id}/metrics", "404", ""),
        ("POST", "/v1/models/{model_id}/events", "404", ""),
    }
    exposition = client.get("/metrics").text
    assert not any(model_id in exposition for model_id in ids[:50])
    repository = client.app.state.engine.repository
    assert set(repository._cache) == {"m"}  # noqa: SLF001
    assert set(repository._locks) <= {"m"}  # noqa: SLF001 - weakly held: none for unknown ids
    reporting = client.app.state.engine.reporting
    assert set(reporting._metrics) | set(reporting._regret) <= {"m"}  # noqa: SLF001


def test_a_deleted_model_loses_its_labels(client):
    create_model(client, "gone")
    X, y = make_stream(20)
    ids = [f"e{i}" for i in range(20)]
    assert client.post("/v1/models/gone/events", json=events_json(X, y, ids)).status_code == 200
    assert client.post("/v1/models/gone/score", json=events_json(X, None, ids)).status_code == 200
    assert client.get("/v1/models/gone/metrics").status_code == 200
    assert 'model="gone"' in client.get("/metrics").text
    assert client.delete("/v1/models/gone").status_code == 204
    assert client.get("/v1/models/gone/metrics").status_code == 404
    assert 'model="gone"' not in client.get("/metrics").text
    assert not [labels for labels in label_sets(client) if "gone" in labels]


def test_number_of_models_is_capped(make_client):
    client = make_client(max_models=3)
    for model_id in ("a", "b", "c"):
        create_model(client, model_id)
    response = client.post("/v1/models", json={"id": "d", "n_features": 5})
    assert response.status_code == 507
    assert response.headers["content-type"] == PROBLEM
    assert "AUCSTREAM_MAX_MODELS" in response.json()["detail"]
    snapshot = client.get("/v1/models/a/snapshot").content
    assert put_snapshot(client, "d", snapshot, replace=False).status_code == 507
    assert sorted(client.get("/v1/models").json()["models"]) == ["a", "b", "c"]
    # replacing or resetting a model is not a new one; after a delete there is room again
    assert put_snapshot(client, "a", snapshot, replace=True).status_code == 201
    assert client.post("/v1/models/b/reset").status_code == 200
    assert client.delete("/v1/models/c").status_code == 204
    create_model(client, "d")


def test_model_memory_is_capped(make_client):
    """``n_features`` 2**24 cost ~770 MB per create."""
    client = make_client()  # the default AUCSTREAM_MAX_MODEL_BYTES
    response = client.post(
        "/v1/models",
        json={"id": "huge", "n_features": 2**24, "feature_mode": "hashed", "learner": "spam"},
    )
    assert response.status_code == 507, response.text
    assert response.json()["field"] == "n_features"
    assert "AUCSTREAM_MAX_MODEL_BYTES" in response.json()["detail"]
    assert client.get("/v1/models/huge").status_code == 404
    small = make_client(max_model_bytes=4 * MIB)
    create_model(small, "fits", n_features=1000, learner="spam")
    snapshot = small.get("/v1/models/fits/snapshot").content
    response = small.post("/v1/models", json={"id": "wide", "n_features": 2**17, "learner": "spam"})
    assert response.status_code == 507
    assert put_snapshot(small, "copy", snapshot, replace=False).status_code == 201
    # what the windows will hold counts too: a million-event metrics window is 16 MB
    response = small.post("/v1/models", json={"id": "long", "n_features": 5, "window": 10**6})
    assert response.status_code == 507
    assert "once its windows are full" in response.json()["detail"]


def test_buffers_that_grow_as_they_fill_count_at_their_capacity(make_client):
    """pmb keeps its buffered rows sparse and grows them as they fill: empty at creation, but
    dense events fill every cell.  2PMB over 2**18 hashed features may come to hold ~418 MiB,
    over the default limit (it was counted at its empty size); 1PMB's ~214 MiB fits."""
    client = make_client()  # the default AUCSTREAM_MAX_MODEL_BYTES (256 MiB)
    hashed = {"n_features": 2**18, "feature_mode": "hashed", "learner": "pmb"}
    response = client.post("/v1/models", json={"id": "two", **hashed, "params": {"passes": 2}})
    assert response.status_code == 507, response.text
    assert "once its windows are full" in response.json()["detail"]
    assert client.get("/v1/models/two").status_code == 404
    response = client.post("/v1/models", json={"id": "one", **hashed, "params": {"passes": 1}})
    assert response.status_code == 201, response.text


def test_remembered_ids_per_request_are_capped(make_client):
    """100,000 ids of 256 characters in one request were remembered for 24 h (+31 MB)."""
    client = make_client(max_event_id_bytes=64 * 1024)
    create_model(client)
    X, y = make_stream(1000)
    long_ids = [f"{i:0256d}" for i in range(1000)]  # 256 KB of ids
    for path, body in (
        ("/v1/models/m/events", events_json(X, y, long_ids)),
        ("/v1/models/m/score", events_json(X, None, long_ids)),
    ):
        response = client.post(path, json=body)
        assert response.status_code == 413, response.text
        assert response.json()["field"] == "id"
        assert "AUCSTREAM_MAX_EVENT_ID_BYTES" in response.json()["detail"]
    assert client.get("/v1/models/m").json()["counts"]["events_learned"] == 0
    short_ids = [f"e{i}" for i in range(1000)]
    assert client.post("/v1/models/m/events", json=events_json(X, y, short_ids)
                       ).status_code == 200  # fmt: skip


def test_remembered_event_ids_are_capped_oldest_first(make_client):
    """``max_remembered_ids``: a model remembers at most that many ids; beyond it the oldest
    are forgotten (their events would be learned again), the newest still deduplicated."""
    client = make_client(max_remembered_ids=5)
    create_model(client)
    X, y = make_stream(8)
    ids = [f"e{i}" for i in range(8)]
    for rows in (slice(0, 4), slice(4, 8)):
        response = client.post("/v1/models/m/events", json=events_json(X[rows], y[rows], ids[rows]))
        assert response.json()["learned"] == 4
    again = client.post("/v1/models/m/events", json=events_json(X[3:], y[3:], ids[3:])).json()
    assert again["duplicates"] == 5 and again["learned"] == 0  # the last 5 ids: remembered
    oldest = client.post("/v1/models/m/events", json=events_json(X[:3], y[:3], ids[:3])).json()
    assert oldest["duplicates"] == 0 and oldest["learned"] == 3  # forgotten early
    assert client.get("/v1/models/m").json()["counts"]["events_learned"] == 11


def test_records_kept_by_score_are_capped(make_client):
    client = make_client(max_pending_records=10)
    create_model(client)
    X, _ = make_stream(20)
    first = [f"a{i}" for i in range(8)]
    response = client.post("/v1/models/m/score", json=events_json(X[:8], None, first))
    assert response.status_code == 200
    more = [f"b{i}" for i in range(5)]
    response = client.post("/v1/models/m/score", json=events_json(X[:5], None, more))
    assert response.status_code == 507, response.text
    assert "AUCSTREAM_MAX_PENDING_RECORDS" in response.json()["detail"]
    # nothing of the refused request was kept; ids already kept can be scored again
    response = client.post("/v1/models/m/labels", json=[{"id": i, "y": 1} for i in more])
    assert response.json()["learned"] == 0
    assert client.post("/v1/models/m/score", json=events_json(X[:8], None, first)
                       ).status_code == 200  # fmt: skip
    # labels free room
    labels = [{"id": event_id, "y": i % 2} for i, event_id in enumerate(first)]
    assert client.post("/v1/models/m/labels", json=labels).status_code == 200
    assert client.post("/v1/models/m/score", json=events_json(X[:5], None, more)
                       ).status_code == 200  # fmt: skip


def test_scoring_one_id_again_and_again_keeps_memory_bounded():
    store = MemoryStore()
    store.create_model("m", {}, {}, "i1")
    for round_ in range(5000):
        store.put_pending("m", {"same": b"record"}, deadline=1000.0 + round_)
    model = store._models["m"]  # noqa: SLF001
    assert len(model.pending) == 1
    assert len(model.deadlines) <= 2 * len(model.pending) + 1024
    assert store.due_pending("m", now=1e9, limit=10) == ["same"]


# ------------------------------------------------------------------------- 8. small 4xx fixes
def test_ids_with_braces_are_404_not_500(client):
    """On Redis, ``{`` / ``}`` in an id broke the key's hash tag (a 500); no model can have
    such an id (the creation pattern refuses it), so it names no model."""
    create_model(client)
    X, y = make_stream(2)
    for path in ("/v1/models/a{b}", "/v1/models/%7Bm%7D/metrics", "/v1/models/m}/snapshot"):
        response = client.get(path)
        assert response.status_code == 404, (path, response.text)
        assert response.headers["content-type"] == PROBLEM
    response = client.post("/v1/models/{m}/events", json=events_json(X, y))
    assert response.status_code == 404
    assert client.delete("/v1/models/{m}").status_code == 404
    response = client.put(
        "/v1/models/{m}/snapshot",
        content=client.get("/v1/models/m/snapshot").content,
        headers={"content-type": "application/zip"},
    )
    assert response.status_code == 422
    assert client.get("/v1/models/m").status_code == 200


def test_metrics_stream_interval_has_a_lower_bound(client):
    create_model(client)
    response = client.get("/v1/models/m/metrics/stream", params={"interval": 0.000001})
    assert response.status_code == 422
    assert response.json()["field"] == "query.interval"


def test_a_queue_worker_forgets_the_labels_of_a_deleted_model(make_app, make_worker, rclient):
    from tests.service.test_queue import drain

    app = make_app("queue")
    create_model(app, "gone")
    X, y = make_stream(20)
    assert app.post("/v1/models/gone/events", json=events_json(X, y)).status_code == 202
    worker = make_worker()
    drain(worker, rclient, ["gone"])
    rendered = worker.telemetry.render().decode()
    assert 'aucstream_events_learned_total{model="gone"}' in rendered
    assert app.delete("/v1/models/gone").status_code == 204
    worker.discover()
    assert 'model="gone"' not in worker.telemetry.render().decode()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("stats:events_learned", np.array([-1], dtype=np.int64)),
        ("stats:rate", np.array([np.nan])),
        ("stats:times", np.zeros(3)),
    ],
)
def test_corrupt_counters_of_a_snapshot_are_refused(client, key, value):
    learned_model(client, "spam")
    manifest, arrays = read_snapshot(client.get("/v1/models/m/snapshot").content)
    response = put_snapshot(client, "m", write_snapshot(manifest, {**arrays, key: value}))
    assert response.status_code == 422
    assert response.json()["field"] == key


def test_a_corrupt_model_stops_only_itself_in_a_queue_worker(make_app, make_worker, rclient):
    """Queue mode: the worker refuses the corrupt state, keeps that model's entries pending
    (never rejected as bad input), learns the other models, and learns again once the model
    is repaired by a snapshot import."""
    from tests.service.test_queue import drain

    app = make_app("queue")
    for model_id in ("bad", "good"):
        create_model(app, model_id, learner="oam", params={"buffer_size_neg": 100})
    worker = make_worker()
    X, y = make_stream(40, seed=8)
    for model_id in ("bad", "good"):
        assert app.post(f"/v1/models/{model_id}/events", json=events_json(X, y)).status_code == 202
    drain(worker, rclient, ["bad", "good"])
    snapshot = app.get("/v1/models/bad/snapshot").content
    corrupt_stored_state(app, "redis", rclient, "bad", "learner:fill_neg", [2**40])
    for model_id in ("bad", "good"):
        assert app.post(f"/v1/models/{model_id}/events", json=events_json(X, y)).status_code == 202
    drain(worker, rclient, ["good"])
    for _ in range(5):
        worker.step()  # the corrupt model is refused, nothing crashes, nothing is rejected
    assert worker.queue.lag("bad")["events"] == 40
    assert 'outcome="rejected"' not in worker.telemetry.render().decode()
    assert app.get("/v1/models/good").json()["counts"]["events_learned"] == 80
    # repaired by importing the snapshot taken before the damage (a new incarnation, which
    # starts with an empty queue, as a reset does), it learns again
    assert put_snapshot(app, "bad", snapshot).status_code == 201
    worker._corrupt.clear()  # noqa: SLF001 - skip the pause before the model is tried again
    assert app.post("/v1/models/bad/events", json=events_json(X, y)).status_code == 202
    drain(worker, rclient, ["bad"])
    assert app.get("/v1/models/bad").json()["counts"]["events_learned"] == 80
