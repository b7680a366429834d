"""Zip members a real server must never inflate beyond their bound: bzip2 and LZMA members (which
zipfile inflates a whole chunk of input at a time, unbounded) are refused from the central
directory with a 415 naming the member and its codec, and a deflate member that declares fewer
bytes than it inflates to is stopped at what it declared.  Each bomb is sent to a real uvicorn
server whose resident memory is measured around the request: a body of at most 1 KB costs at
most 64 MiB (before, a 700-byte NPZ with a bzip2 member cost 512 MiB)."""

from __future__ import annotations

import base64
import bz2
import io
import zipfile
import zlib

import httpx
import numpy as np
import pytest

from tests.service.conftest import PROBLEM, live_server, make_stream, put_snapshot, read_snapshot
from tests.service.zip_helpers import deflated, npy, npy_header, raw_zip, stored

MIB = 2**20
#: the target: what a body of 1 KB may cost the server
SMALL_BODY_BUDGET = 64 * MIB
#: ``bz2.compress(bytes(2**29), 9)``: 402 bytes that inflate to 512 MiB of zeros (compressing
#: takes ~10 s, so the result is kept here)
BZIP2_512_MIB = base64.b64decode(
    "QlpoOTFBWSZTWQ4J4t8BX45AAMAAAAggADCATUZCoCWpCoCXMUFZJlNZDgni3wFfjkAAwAAACCAAMIBNRkKgJakK"
    "gJcxQVkmU1kOCeLfAV+OQADAAAAIIAAwgE1GQqAlqQqAlzFBWSZTWQ4J4t8BX45AAMAAAAggADCATUZCoCWpCoCX"
    "MUFZJlNZDgni3wFfjkAAwAAACCAAMIBNRkKgJakKgJcxQVkmU1kOCeLfAV+OQADAAAAIIAAwgE1GQqAlqQqAlzFB"
    "WSZTWQ4J4t8BX45AAMAAAAggADCATUZCoCWpCoCXMUFZJlNZDgni3wFfjkAAwAAACCAAMIBNRkKgJakKgJcxQVkm"
    "U1kOCeLfAV+OQADAAAAIIAAwgE1GQqAlqQqAlzFBWSZTWQ4J4t8BX45AAMAAAAggADCATUZCoCWpCoCXMUFZJlNZ"
    "Dgni3wFfjkAAwAAACCAAMIBNRkKgJakKgJcxQVkmU1kCGMe7APTw4ADAAAAEAAggADDMCapplUFIbVKgpDxdyRTh"
    "QkIPy1I4"
)
MODEL = {"n_features": 20, "learner": "spam", "scaling": "none"}


def rss_bytes(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field}")


def memory_cost(pid: int, send) -> tuple[httpx.Response, int]:
    """``send()``'s response and how far the server's resident memory rose above where it was
    while it was answered: the peak (VmHWM) is reset first, through ``clear_refs``."""
    with open(f"/proc/{pid}/clear_refs", "w") as clear:
        clear.write("5")  # resets VmHWM to the current RSS
    before = rss_bytes(pid, "VmRSS")
    response = send()
    return response, rss_bytes(pid, "VmHWM") - before


@pytest.fixture(scope="module")
def server():
    """A real uvicorn server (memory store) that has learned from a compressed NPZ and taken a
    snapshot back, so that what is measured after is the bomb's, not first-use imports."""
    with live_server(access_log=False) as (url, process):
        with httpx.Client(base_url=url, timeout=120) as http:
            assert http.post("/v1/models", json={"id": "m", **MODEL}).status_code == 201
            X, y = make_stream(100, n_features=20, seed=3)
            buffer = io.BytesIO()
            np.savez_compressed(buffer, X=X, y=y)
            response = post_npz(http, buffer.getvalue())
            assert response.status_code == 200, response.text
            snapshot = http.get("/v1/models/m/snapshot").content
            assert put_snapshot(http, "m", snapshot).status_code in (200, 201)
            yield http, process.pid


def post_npz(http: httpx.Client, body: bytes) -> httpx.Response:
    return http.post(
        "/v1/models/m/events", content=body, headers={"content-type": "application/x-npz"}
    )


def lzma_member(data: bytes) -> bytes:
    """``data`` as zipfile writes an LZMA member (its own properties header, then LZMA1)."""
    compressor = zipfile.LZMACompressor()
    return compressor.compress(data) + compressor.flush()


def check_refused(response: httpx.Response, cost: int, status: int, field: str) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    problem = response.json()
    assert problem["field"] == field, problem
    assert cost <= SMALL_BODY_BUDGET, f"resident memory rose by {cost / MIB:.0f} MiB"
    return problem


def learned(http: httpx.Client) -> int:
    return http.get("/v1/models/m").json()["counts"]["events_learned"]


def test_the_bzip2_constant_is_what_it_claims():
    head = bz2.BZ2Decompressor().decompress(BZIP2_512_MIB, max_length=MIB)
    assert head == bytes(MIB) and len(BZIP2_512_MIB) == 402


def test_bzip2_and_lzma_npz_members_are_a_415_naming_member_and_codec(server):
    """A 700-byte NPZ whose X.npy is 512 MiB of bzip2 zeros declaring 16 KB is refused before
    anything is inflated (inflating first holds the 512 MiB); LZMA members, honest or not, are
    refused the same way: only stored and deflated members are read."""
    http, pid = server
    y = stored("y.npy", npy(np.ones(1, dtype=np.int64)))
    bomb = raw_zip([("X.npy", BZIP2_512_MIB, 0, 128 + 160, zipfile.ZIP_BZIP2), y])
    assert len(bomb) <= 1024
    before = learned(http)
    response, cost = memory_cost(pid, lambda: post_npz(http, bomb))
    problem = check_refused(response, cost, 415, "X.npy")
    assert "'X.npy'" in problem["detail"] and "bzip2" in problem["detail"]
    # an honest LZMA member (what zipfile writes with ZIP_LZMA), and one whose size lies
    X = np.zeros((1, 20))
    honest = io.BytesIO()
    with zipfile.ZipFile(honest, "w", compression=zipfile.ZIP_LZMA) as archive:
        archive.writestr("X.npy", npy(X))
        archive.writestr("y.npy", npy(np.ones(1, dtype=np.int64)))
    data = lzma_member(npy_header((1, 20)) + bytes(32 * MIB))
    lying = raw_zip([("X.npy", data, zlib.crc32(npy(X)), len(npy(X)), zipfile.ZIP_LZMA), y])
    for body in (honest.getvalue(), lying):
        response, cost = memory_cost(pid, lambda body=body: post_npz(http, body))
        problem = check_refused(response, cost, 415, "X.npy")
        assert "'X.npy'" in problem["detail"] and "LZMA" in problem["detail"]
    assert learned(http) == before


def test_bzip2_and_lzma_snapshot_members_are_a_415_and_change_nothing(server):
    """A snapshot whose array member is bzip2: a 415 before inflating (a 306-byte one inflates
    by 500 MB), and the model unchanged."""
    http, pid = server
    exported = http.get("/v1/models/m/snapshot").content
    manifest, arrays = read_snapshot(exported)
    with zipfile.ZipFile(io.BytesIO(exported)) as archive:
        manifest_bytes = archive.read("manifest.json")
    target = "arrays/learner:w_unscaled.npy"
    assert target in manifest_bytes.decode()
    for method, data, codec in (
        (zipfile.ZIP_BZIP2, BZIP2_512_MIB, "bzip2"),
        (zipfile.ZIP_LZMA, lzma_member(bytes(32 * MIB)), "LZMA"),
    ):
        members = [stored("manifest.json", manifest_bytes)]
        for name, array in arrays.items():
            path = f"arrays/{name}.npy"
            if path == target:  # declares the size of the real array
                members.append((path, data, 0, len(npy(array)), method))
            else:
                members.append(stored(path, npy(array)))
        body = raw_zip(members)
        response, cost = memory_cost(pid, lambda body=body: put_snapshot(http, "m", body))
        problem = check_refused(response, cost, 415, target)
        assert f"'{target}'" in problem["detail"] and codec in problem["detail"]
    # a snapshot of nothing but a 1 KB bzip2 manifest
    bomb = raw_zip([("manifest.json", BZIP2_512_MIB, 0, 100, zipfile.ZIP_BZIP2)])
    assert len(bomb) <= 1024
    response, cost = memory_cost(pid, lambda: put_snapshot(http, "m", bomb))
    check_refused(response, cost, 415, "manifest.json")
    _, after = read_snapshot(http.get("/v1/models/m/snapshot").content)
    for name, array in arrays.items():
        np.testing.assert_array_equal(after[name], array)


def test_a_deflate_member_that_lies_about_its_size_is_cut_at_what_it_declares(server):
    """A 1 MB snapshot whose manifest.json declares 100 bytes but inflates to 1 GiB: zipfile
    inflated all of it in one call (2 GiB resident) before its CRC check failed."""
    http, pid = server
    data, crc, _ = deflated(b'{"format": "aucstream-snapshot", "x": "', b" ", 2**30)
    bomb = raw_zip([("manifest.json", data, crc, 100, zipfile.ZIP_DEFLATED)])
    response, cost = memory_cost(pid, lambda: put_snapshot(http, "m", bomb))
    problem = check_refused(response, cost, 400, "manifest.json")
    assert "more than the 100 bytes it declares" in problem["detail"]
    # the same lie in an NPZ body's array
    y = stored("y.npy", npy(np.ones(1, dtype=np.int64)))
    header = npy_header((1, 20))
    data, crc, _ = deflated(header, b"\0", 2**30)
    lying = raw_zip([("X.npy", data, crc, len(header) + 160, zipfile.ZIP_DEFLATED), y])
    before = learned(http)
    response, cost = memory_cost(pid, lambda: post_npz(http, lying))
    problem = check_refused(response, cost, 400, "X")
    assert "more than the 288 bytes it declares" in problem["detail"]
    # and one that declares more than it holds is refused too, not read past its end
    one_row = npy_header((51, 20)) + bytes(160)  # a header claiming 51 rows, one row of data
    data = zlib.compress(one_row, 9, wbits=-15)
    claimed = len(one_row) + 50 * 160
    padded = raw_zip([("X.npy", data, zlib.crc32(one_row), claimed, zipfile.ZIP_DEFLATED), y])
    response = post_npz(http, padded)
    assert response.status_code == 400, response.text
    assert response.json()["field"] == "X"
    assert f"inflates to 288 bytes but declares {claimed:,}" in response.json()["detail"]
    assert learned(http) == before
    # an honest deflate member of the same archive is learned
    X = npy(np.zeros((1, 20)))
    data = zlib.compress(X, 9, wbits=-15)
    honest = raw_zip([("X.npy", data, zlib.crc32(X), len(X), zipfile.ZIP_DEFLATED), y])
    assert post_npz(http, honest).status_code == 200
    assert learned(http) == before + 1
