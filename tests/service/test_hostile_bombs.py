"""Bombs sent to a real uvicorn server: compressed uploads and headers that claim huge arrays
are refused with a problem response from the zip's central directory and the ``.npy`` headers,
before anything is inflated or allocated, and the server's peak RSS stays bounded."""

from __future__ import annotations

import io
import zipfile

import httpx
import numpy as np
import orjson
import pytest

from tests.service.conftest import (
    PROBLEM,
    live_server,
    make_stream,
    put_snapshot,
    read_snapshot,
    write_snapshot,
)
from tests.service.zip_helpers import deflated, npy, npy_header, raw_zip, stored


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
