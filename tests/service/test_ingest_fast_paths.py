"""The fast parsing paths of ``service.ingest`` give exactly what the general paths give.

The JSON fast paths (simdjson for dense models; one event of a dense model) only ever accept:
on a body they do not take, the general orjson path must run and produce its own result or
error.  Each case here is parsed twice, with the fast paths on and with them switched off,
and the outcomes compared exactly (arrays bit for bit, ids, labels, or the error's class and
message).  NPZ bodies have one reader: each array as ``np.load`` reads it.
"""

from __future__ import annotations

import io
import struct
import zipfile

import numpy as np
import orjson
import pytest

from core.validation import FEATURE_BOUND
from service.errors import ServiceError
from service.ingest import FeatureSpec, json_events
from service.ingest import json as json_body
from service.ingest import npz as npz_body

DENSE = FeatureSpec(n_features=3, feature_mode="dense")


@pytest.fixture(autouse=True)
def fast_path_for_small_bodies(monkeypatch):
    """The cases here are small; production bodies under 4 KB take the general path."""
    monkeypatch.setattr(json_body, "_FAST_PATH_MIN_BYTES", 0)


def outcome(body: bytes, *, labelled: bool = True, max_events: int = 1000, spec=DENSE):
    try:
        batch = json_events(body, spec, labelled=labelled, max_events=max_events)
    except ServiceError as error:
        return ("error", type(error).__name__, str(error), error.problem())
    X = batch.X
    assert isinstance(X, np.ndarray)
    assert X.dtype == np.float64 and X.flags.c_contiguous and X.flags.writeable
    return (
        "batch",
        X.shape,
        X.tobytes(),  # bit for bit: -0.0 and 0.0 differ here
        None if batch.y is None else batch.y.tolist(),
        batch.ids,
    )


def general_outcome(monkeypatch, body: bytes, **kwargs):
    with monkeypatch.context() as patch:
        patch.setattr(json_body, "_dense_json_fast", lambda *args, **kw: None)
        patch.setattr(json_body, "_one_dense_event", lambda *args, **kw: None)
        return outcome(body, **kwargs)


def one_event_outcome(monkeypatch, body: bytes, **kwargs):
    """The outcome when the one-event path is the only fast path (as for bodies < 4 KB)."""
    with monkeypatch.context() as patch:
        patch.setattr(json_body, "_dense_json_fast", lambda *args, **kw: None)
        return outcome(body, **kwargs)


def fast_result(body: bytes, *, labelled: bool = True, max_events: int = 1000):
    return json_body._dense_json_fast(body, DENSE, labelled=labelled, max_events=max_events)


def number_texts(rng: np.random.Generator, count: int) -> list[str]:
    """Numbers written the ways clients write them: shortest repr, %.17g, fixed, integers,
    exponents, long digit strings, subnormals, signed zeros."""
    bits = rng.integers(0, 2**63, size=count, dtype=np.int64).view(np.float64)
    texts = []
    for number, value in enumerate(bits.tolist()):
        kind = number % 9
        if not abs(value) <= FEATURE_BOUND:  # NaN, infinities and values refused either way
            value = 1.0
        if kind == 0:
            texts.append(repr(value))
        elif kind == 1:
            texts.append(f"{value:.17g}".replace("inf", "1"))
        elif kind == 2:
            texts.append(repr(float(rng.normal() * 10.0 ** rng.integers(-5, 6))))
        elif kind == 3:
            texts.append(str(int(rng.integers(-(2**62), 2**62))))
        elif kind == 4:
            texts.append(f"{rng.random():.30f}")  # more digits than a double holds
        elif kind == 5:
            texts.append(f"{rng.normal():.6E}")
        elif kind == 6:
            texts.append(repr(float(rng.random() * 1e-310)))  # subnormal
        elif kind == 7:
            texts.append(["-0.0", "0.0", "-0", "0", "1e-400", "-1e-400"][number % 6])
        else:
            texts.append(str(int(rng.integers(0, 2**63)) + 2**63))  # uint64 range
    return texts


@pytest.mark.parametrize("seed", range(5))
def test_fast_path_equals_the_general_path_on_plain_bodies(monkeypatch, seed):
    rng = np.random.default_rng(seed)
    n_events = 200
    numbers = number_texts(rng, n_events * 3)
    events = []
    for index in range(n_events):
        row = "[" + ", ".join(numbers[3 * index : 3 * index + 3]) + "]"
        fields = [f'"x": {row}', f'"y": {["1", "0", "true", "false", "1.0"][index % 5]}']
        if index % 3:
            fields.append(f'"id": {orjson.dumps(f"e-{index}" if index % 2 else index).decode()}')
        rng.shuffle(fields)  # key order varies
        events.append("{" + ",".join(fields) + "}")
    body = ('{"events": [' + ",\n ".join(events) + "]}").encode()
    assert fast_result(body) is not None  # the fast path took it
    assert outcome(body) == general_outcome(monkeypatch, body)
    assert outcome(body, labelled=False) == general_outcome(monkeypatch, body, labelled=False)


def test_fast_path_equals_the_general_path_on_a_bare_list_and_on_score_bodies(monkeypatch):
    for body in (
        b'[{"x": [1, 2.5, -3e2], "y": 1}, {"y": 0, "x": [0, 0, 0]}]',
        b'{"events": [{"x": [1, 2, 3]}]}',
        b'{"events": [{"id": "a", "x": [1, 2, 3]}, {"x": [4, 5, 6], "id": 7}]}',
    ):
        labelled = b'"y"' in body
        assert fast_result(body, labelled=labelled) is not None
        assert outcome(body, labelled=labelled) == general_outcome(
            monkeypatch, body, labelled=labelled
        )


def test_doubles_round_trip_bit_for_bit():
    rng = np.random.default_rng(7)
    # down to subnormals, up to the feature bound (1e100)
    values = rng.normal(size=(100, 3)) * 10.0 ** rng.integers(-300, 100, size=(100, 3))
    body = orjson.dumps({"events": [{"x": row, "y": 1} for row in values.tolist()]})
    batch = fast_result(body)
    assert batch is not None
    assert struct.pack("300d", *values.ravel()) == batch.X.tobytes()


IRREGULAR = {
    "not json": b'{"events": [{"x": [1, 2, 3], "y": 1}',
    "byte order mark": b'\xef\xbb\xbf{"events": [{"x": [1, 2, 3], "y": 1}]}',
    "trailing garbage": b'{"events": [{"x": [1, 2, 3], "y": 1}]} x',
    "nested row": b'{"events": [{"x": [[1], 2, 3], "y": 1}]}',
    "nested row, wrong length": b'{"events": [{"x": [[1, 2], 3], "y": 1}]}',
    "short row": b'{"events": [{"x": [1, 2], "y": 1}]}',
    "long row": b'{"events": [{"x": [1, 2, 3, 4], "y": 1}]}',
    "ragged rows, right total": b'{"events": [{"x": [1, 2], "y": 1}, {"x": [3, 4, 5, 6], "y": 0}]}',
    "string feature": b'{"events": [{"x": [1, "2", 3], "y": 1}]}',
    "bool feature": b'{"events": [{"x": [1, true, 3], "y": 1}]}',
    "null feature": b'{"events": [{"x": [1, null, 3], "y": 1}]}',
    "object row": b'{"events": [{"x": {"a": 1}, "y": 1}]}',
    "missing x": b'{"events": [{"y": 1}]}',
    "missing y": b'{"events": [{"x": [1, 2, 3]}]}',
    "bad label": b'{"events": [{"x": [1, 2, 3], "y": 2}]}',
    "label list": b'{"events": [{"x": [1, 2, 3], "y": [1]}]}',
    "label object": b'{"events": [{"x": [1, 2, 3], "y": {}}]}',
    "labels mix 0 and -1": b'{"events": [{"x": [1, 2, 3], "y": 0}, {"x": [1, 2, 3], "y": -1}]}',
    "bad id": b'{"events": [{"x": [1, 2, 3], "y": 1, "id": 1.5}]}',
    "empty id": b'{"events": [{"x": [1, 2, 3], "y": 1, "id": ""}]}',
    "duplicate key x": b'{"events": [{"x": [1, 2, 3], "x": [4, 5, 6], "y": 1}]}',
    "duplicate key y": b'{"events": [{"x": [1, 2, 3], "y": 1, "y": 0}]}',
    "duplicate events": b'{"events": [{"x": [1, 2, 3], "y": 1}], "events": 3}',
    "extra event key": b'{"events": [{"x": [1, 2, 3], "y": 1, "w": 2}]}',
    "extra top-level key": b'{"events": [{"x": [1, 2, 3], "y": 1}], "model": "m"}',
    "no events key": b'{"evts": []}',
    "events not a list": b'{"events": {"x": [1, 2, 3]}}',
    "event not an object": b'{"events": [[1, 2, 3]]}',
    "empty batch": b'{"events": []}',
    "too many events": b"[" + b", ".join([b'{"x": [1, 2, 3], "y": 1}'] * 4) + b"]",
    "huge integer": b'{"events": [{"x": [123456789012345678901234567890, 2, 3], "y": 1}]}',
    "overflow": b'{"events": [{"x": [1e999, 2, 3], "y": 1}]}',
    "bracket in an id": b'{"events": [{"x": [1, 2, 3], "y": 1, "id": "a[0]"}]}',
    "scalar document": b"3",
}


@pytest.mark.parametrize("case", sorted(IRREGULAR))
def test_irregular_bodies_get_the_general_paths_answer(monkeypatch, case):
    body = IRREGULAR[case]
    kwargs = {"max_events": 3}
    assert fast_result(body, **kwargs) is None
    assert outcome(body, **kwargs) == general_outcome(monkeypatch, body, **kwargs)


@pytest.mark.parametrize("case", sorted(IRREGULAR))
@pytest.mark.parametrize("labelled", [True, False])
def test_one_event_path_gives_the_general_paths_answer(monkeypatch, case, labelled):
    body = IRREGULAR[case]
    for max_events in (3, 0):
        kwargs = {"labelled": labelled, "max_events": max_events}
        assert one_event_outcome(monkeypatch, body, **kwargs) == general_outcome(
            monkeypatch, body, **kwargs
        )


ONE_EVENT = {
    "score body": b'{"events": [{"x": [1, 2.5, -3e2]}]}',
    "with an id": b'{"events": [{"id": "a", "x": [1, 2, 3]}]}',
    "integer id": b'{"events": [{"x": [4, 5, 6], "id": 7}]}',
    "bare list": b'[{"x": [1, 2.5, -3e2], "y": 1}]',
    "keys in another order": b'{"events": [{"y": 0, "id": "b", "x": [0, 0, 0]}]}',
    "signed zeros": b'{"events": [{"x": [-0.0, 0.0, -0], "y": -1}]}',
    "boolean label": b'{"events": [{"x": [1, 2, 3], "y": true}]}',
    "float label": b'{"events": [{"x": [1, 2, 3], "y": 0.0}]}',
    "null id": b'{"events": [{"x": [1, 2, 3], "y": 1, "id": null}]}',
    "boolean id": b'{"events": [{"x": [1, 2, 3], "y": 1, "id": true}]}',
    "long id": b'{"events": [{"x": [1, 2, 3], "y": 1, "id": "%s"}]}' % (b"i" * 257),
    "null label": b'{"events": [{"x": [1, 2, 3], "y": null}]}',
    "string label": b'{"events": [{"x": [1, 2, 3], "y": "1"}]}',
    "sum overflows": b'{"events": [{"x": [1e308, 1e308, 0], "y": 1}]}',
    "features by name": b'{"events": [{"x": {"a": 1, "b": 2, "c": 3}, "y": 1}]}',
}


@pytest.mark.parametrize("case", sorted(ONE_EVENT))
@pytest.mark.parametrize("labelled", [True, False])
def test_one_event_path_equals_the_general_path(monkeypatch, case, labelled):
    body = ONE_EVENT[case]
    assert one_event_outcome(monkeypatch, body, labelled=labelled) == general_outcome(
        monkeypatch, body, labelled=labelled
    )


@pytest.mark.parametrize("seed", range(3))
def test_one_event_path_reads_numbers_as_the_general_path(monkeypatch, seed):
    rng = np.random.default_rng(seed)
    numbers = number_texts(rng, 600)
    taken = 0
    for index in range(0, 600, 3):
        row = "[" + ", ".join(numbers[index : index + 3]) + "]"
        body = b'{"events": [{"id": "e", "x": ' + row.encode() + b', "y": 1}]}'
        fast = json_body._one_dense_event(orjson.loads(body)["events"][0], DENSE, True)
        taken += fast is not None
        assert one_event_outcome(monkeypatch, body) == general_outcome(monkeypatch, body)
    assert taken > 150  # most rows are plain numbers the path takes


def test_the_parser_survives_a_kept_reference():
    """A proxy of an earlier document still alive makes simdjson refuse to reuse its parser:
    the request falls back, and the next one gets a fresh parser."""
    body = b'{"events": [{"x": [1, 2, 3], "y": 1}]}'
    assert fast_result(body) is not None
    kept = json_body._parsers.parser.parse(body)  # a caller holding on to a document
    assert fast_result(body) is None
    assert fast_result(body) is not None
    del kept


def test_other_feature_modes_do_not_use_the_dense_fast_path(monkeypatch):
    called = []
    monkeypatch.setattr(json_body, "_dense_json_fast", lambda *args, **kw: called.append(1))
    sparse = FeatureSpec(n_features=3, feature_mode="sparse")
    body = b'{"events": [{"x": {"indices": [0], "values": [1.5]}, "y": 1}]}'
    json_events(body, sparse, labelled=True, max_events=10)
    assert called == []


# ---------------------------------------------------------------------------- NPZ
def npz_of(members: dict[str, np.ndarray], *, compressed=False, version=None) -> bytes:
    """An archive as np.savez writes it, or with .npy headers of a given format version."""
    buffer = io.BytesIO()
    if version is None:
        (np.savez_compressed if compressed else np.savez)(buffer, **members)
        return buffer.getvalue()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, array in members.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, array, version=version)
            archive.writestr(f"{name}.npy", member.getvalue())
    return buffer.getvalue()


def npz_outcome(body: bytes, spec=DENSE, *, labelled=True, max_events=1000):
    try:
        batch = npz_body.npz_events(body, spec, labelled=labelled, max_events=max_events)
    except ServiceError as error:
        return ("error", type(error).__name__, str(error), error.problem())
    return ("batch", batch)


def arrays_as_np_load_reads_them(body: bytes) -> None:
    """The one NPZ reader (bounded, pickle-free) gives each array as ``np.load`` does, as a
    writable C-contiguous copy."""
    arrays = npz_body._npz_arrays(body, 2**30)
    with np.load(io.BytesIO(body), allow_pickle=False) as reference:
        assert sorted(arrays) == sorted(name.removesuffix(".npy") for name in reference.files)
        for name, array in arrays.items():
            expected = reference[name]
            assert (array.dtype, array.shape) == (expected.dtype, expected.shape)
            assert array.tobytes() == np.ascontiguousarray(expected).tobytes()
            assert array.flags.c_contiguous and array.flags.writeable


RNG = np.random.default_rng(3)
X_F8 = RNG.normal(size=(6, 3))
Y = np.array([1, 0, 0, 1, 1, 0])
CSR = {
    "indptr": np.array([0, 1, 1, 3, 4, 4, 6]),
    "indices": np.array([0, 1, 2, 0, 1, 2]),
    "data": RNG.normal(size=6),
}
NPZ_TAKEN = {  # what np.savez writes: read as np.load reads it
    "float64": npz_of({"X": X_F8, "y": Y}),
    "float32, bool labels": npz_of({"X": X_F8.astype(np.float32), "y": Y.astype(bool)}),
    "int features, -1/+1": npz_of({"X": (X_F8 * 10).astype(np.int64), "y": 2 * Y - 1}),
    "fortran order": npz_of({"X": np.asfortranarray(X_F8), "y": Y}),
    "string ids": npz_of({"X": X_F8, "y": Y, "ids": np.array([f"e{i}" for i in range(6)])}),
    "integer ids": npz_of({"X": X_F8, "y": Y, "ids": np.arange(6)}),
    "csr": npz_of({**CSR, "y": Y}),
    "header v2": npz_of({"X": X_F8, "y": Y}, version=(2, 0)),
    "header v3": npz_of({"X": X_F8, "y": Y}, version=(3, 0)),
    "bad label": npz_of({"X": X_F8, "y": Y + 1}),
    "nan": npz_of({"X": np.where(X_F8 > 1, np.nan, X_F8), "y": Y}),
    "wrong width": npz_of({"X": X_F8[:, :2], "y": Y}),
    "no labels": npz_of({"X": X_F8}),
    "1-d X": npz_of({"X": X_F8[0], "y": Y[:1]}),
}


def corrupt(body: bytes) -> bytes:
    data = bytearray(body)
    data[len(data) // 3] ^= 0xFF  # inside the first member's data
    return bytes(data)


def single_npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def renamed(body: bytes, old: bytes, new: bytes) -> bytes:
    return body.replace(old, new)


NPZ_IRREGULAR = {  # each refused with its own answer (a compressed body is read)
    "compressed": (npz_of({"X": X_F8, "y": Y}, compressed=True), None),
    "bad crc": (corrupt(npz_of({"X": X_F8, "y": Y})), "'X' is corrupt (bad CRC-32)"),
    "truncated": (
        npz_of({"X": X_F8, "y": Y})[:-200],
        "body is not a readable .npz archive: File is not a zip file",
    ),
    "object array": (
        npz_of({"X": X_F8, "y": np.array([1, "a", None], dtype=object)}),
        "'y' holds Python objects (dtype object), which are never unpickled",
    ),
    "unexpected name": (
        npz_of({"X": X_F8, "y": Y, "w": Y}),
        "unexpected array(s) 'w'; accepted: X, y, ids, indptr, indices, data",
    ),
    "name without .npy": (
        renamed(npz_of({"X": X_F8, "y": Y}), b"y.npy", b"y.np_"),
        "unexpected array(s) 'y.np_'; accepted: X, y, ids, indptr, indices, data",
    ),
    "single .npy": (
        single_npy(X_F8),
        "body is a single .npy array; send an .npz archive (np.savez)",
    ),
    "not an archive": (
        b"PK\x03\x04 not really a zip",
        "body is not a readable .npz archive: File is not a zip file",
    ),
    "empty": (b"", "body is not a readable .npz archive: File is not a zip file"),
}


@pytest.mark.parametrize("case", sorted(NPZ_TAKEN))
def test_npz_bodies_read_as_np_load_reads_them(case):
    body = NPZ_TAKEN[case]
    arrays_as_np_load_reads_them(body)
    refused = case in ("bad label", "nan", "wrong width", "no labels", "1-d X")
    assert (npz_outcome(body)[0] == "error") == refused


@pytest.mark.parametrize("case", sorted(NPZ_IRREGULAR))
def test_npz_irregular_bodies_get_their_answer(case):
    body, refused = NPZ_IRREGULAR[case]
    if refused is None:
        arrays_as_np_load_reads_them(body)
        assert npz_outcome(body)[0] == "batch"
    else:
        answer = npz_outcome(body)
        assert answer[0] == "error" and answer[2] == refused


def test_npz_arrays_do_not_alias_the_body():
    body = NPZ_TAKEN["float64"]
    arrays = npz_body._npz_arrays(body, 2**30)
    arrays["X"][0, 0] = 1e300  # writable, and a copy: the body is unchanged
    assert npz_body._npz_arrays(body, 2**30)["X"][0, 0] == X_F8[0, 0]


def test_small_bodies_take_the_general_path(monkeypatch):
    monkeypatch.setattr(json_body, "_FAST_PATH_MIN_BYTES", 4096)
    called = []
    monkeypatch.setattr(json_body, "_dense_json_fast", lambda *args, **kw: called.append(1))
    json_events(b'{"events": [{"x": [1, 2, 3]}]}', DENSE, labelled=False, max_events=10)
    assert called == []
    body = orjson.dumps({"events": [{"x": [0.1, 0.2, 0.3], "y": 1}] * 200})
    json_events(body, DENSE, labelled=True, max_events=1000)
    assert called == [1]
