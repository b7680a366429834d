"""``Host`` (DNS rebinding) and the request head's bound (431), in-process and through a real
uvicorn started as ``aucstream serve`` starts it (service/cli/serve.py)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import orjson
import pytest
from pydantic import ValidationError
from starlette.websockets import WebSocketDisconnect
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from loadtest.local import free_port, stop, wait_ready
from service.cli.serve import allow_bound_name
from service.hosts import host_name
from service.http_limits import MAX_HEAD_BYTES
from service.settings import Settings
from tests.service.conftest import events_json, make_stream, started_apps

PROBLEM = "application/problem+json"
MODEL = {"n_features": 5, "learner": "spam", "scaling": "none", "regret_window": 0}


@pytest.fixture
def apps():
    with started_apps(store="memory") as build:
        yield build


def learned(client, model_id: str) -> int:
    return client.get(f"/v1/models/{model_id}").json()["counts"]["events_learned"]


def assert_host_refused(response: httpx.Response, host: str) -> None:
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == PROBLEM
    problem = response.json()
    assert problem["type"].endswith("/host-not-allowed")
    assert host in problem["detail"] and "AUCSTREAM_ALLOWED_HOSTS" in problem["detail"]


def test_a_rebound_name_can_neither_read_nor_write(apps):
    client = apps()
    assert client.post("/v1/models", json={"id": "m", **MODEL}).status_code == 201
    X, y = make_stream(20)
    evil = {"host": "evil.example:8000"}
    for method, path, body in [
        ("GET", "/v1/models/m", None),
        ("GET", "/v1/models/m/metrics/stream", None),  # server-sent events
        ("POST", "/v1/models/m/events", events_json(X, y)),  # the short lane
        ("POST", "/v1/models/m/score", events_json(X)),
        ("POST", "/v1/models", {"id": "n", **MODEL}),
        ("DELETE", "/v1/models/m", None),
        ("GET", "/healthz", None),
        ("GET", "/metrics", None),
    ]:
        response = client.request(method, path, json=body, headers=evil)
        assert_host_refused(response, "evil.example:8000")
    assert learned(client, "m") == 0
    assert client.get("/v1/models/n").status_code == 404
    counted = client.get("/metrics").text
    assert 'aucstream_requests_rejected_total{problem="host-not-allowed"} 8.0' in counted


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        "LOCALHOST:8000",
        "localhost.",
        "127.0.0.1:8000",
        "127.3.4.5",
        "[::1]:8000",
        "10.1.2.3",
        "[2001:db8::1]",
        "testserver",
    ],  # fmt: skip
)
def test_loopback_names_and_addresses_are_served(apps, host):
    assert apps().get("/healthz", headers={"host": host}).status_code == 200


@pytest.mark.parametrize(
    "host", ["evil.example", "localhost.evil.example", "127.0.0.1.evil.example", "a:b:c", ""]
)
def test_other_names_are_refused(apps, host):
    assert_host_refused(apps().get("/healthz", headers={"host": host}), repr(host))


def test_allowed_hosts_extend_the_names(apps):
    client = apps(allowed_hosts="api.example.com, *.svc.example.com,aucstream_api")
    for host in ["api.example.com", "API.example.com:443", "a.svc.example.com", "aucstream_api",
                 "b.a.svc.example.com:8000", "localhost"]:  # fmt: skip
        assert client.get("/healthz", headers={"host": host}).status_code == 200, host
    for host in ["svc.example.com", "example.com", "evilsvc.example.com", "api.example.com.evil"]:
        assert_host_refused(client.get("/healthz", headers={"host": host}), host)
    anything = apps(allowed_hosts="*")
    assert anything.get("/healthz", headers={"host": "evil.example"}).status_code == 200


@pytest.mark.parametrize("entry", ["http://api.example.com", "api.example.com:8000", "a/b", "*x"])
def test_a_malformed_allowed_host_stops_the_start(entry):
    with pytest.raises(ValidationError, match="AUCSTREAM_ALLOWED_HOSTS"):
        Settings(allowed_hosts=entry)


def test_allowed_host_entries_are_normalized():
    settings = Settings(allowed_hosts="API.Example.com., [2001:DB8::1], *")
    assert settings.allowed_hosts == ["api.example.com", "2001:db8::1", "*"]


def test_host_names_parse_as_browsers_send_them():
    assert host_name("Example.COM.:80") == "example.com"
    assert host_name("[::1]:8000") == "::1"
    assert host_name("[::1]x") is None
    assert host_name("::1") is None  # an IPv6 address is bracketed in Host
    assert host_name("example.com:http") is None


def test_the_stream_refuses_a_rebound_name_with_1008(apps):
    client = apps()
    assert client.post("/v1/models", json={"id": "m", **MODEL}).status_code == 201
    headers = {"host": "evil.example:8000", "origin": "http://evil.example:8000"}
    with client.websocket_connect("/v1/models/m/stream", headers=headers) as ws:
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.send_text(orjson.dumps({"seq": 1, "op": "learn", "x": [1.0] * 5, "y": 1}).decode())
            ws.receive_text()
    assert closed.value.code == 1008 and "evil.example" in closed.value.reason
    assert learned(client, "m") == 0


def test_serve_allows_the_name_it_is_bound_to(monkeypatch):
    monkeypatch.delenv("AUCSTREAM_ALLOWED_HOSTS", raising=False)
    for address in ["0.0.0.0", "127.0.0.1", "::", "localhost"]:
        allow_bound_name(address)
        assert "AUCSTREAM_ALLOWED_HOSTS" not in os.environ
    allow_bound_name("box.lan")
    assert os.environ["AUCSTREAM_ALLOWED_HOSTS"] == "box.lan"
    monkeypatch.setenv("AUCSTREAM_ALLOWED_HOSTS", "api.example.com")
    allow_bound_name("box.lan")
    assert Settings().allowed_hosts == ["api.example.com", "box.lan"]


@contextlib.contextmanager
def served() -> Iterator[tuple[str, int]]:
    """``aucstream serve`` on a free port of 127.0.0.1 (memory store, no warm-up)."""
    port = free_port()
    env = {**os.environ, "AUCSTREAM_WARMUP": "false"}
    env.pop("AUCSTREAM_ALLOWED_HOSTS", None)
    command = [sys.executable, "-m", "service.cli", "serve", "--host", "127.0.0.1",
               "--port", str(port), "--store", "memory", "--log-level", "warning"]  # fmt: skip
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_ready(f"http://127.0.0.1:{port}", process, timeout=300)
        yield f"http://127.0.0.1:{port}", port
    finally:
        stop(process)


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, int]]:
    with served() as running:
        yield running


def raw_request(port: int, head: bytes, *, chunk: int = 1 << 20, pause: float = 0.0) -> bytes:
    """Send ``head`` (a request without body) in pieces of ``chunk`` bytes and read the answer
    until the server closes the connection or has answered."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        try:
            for start in range(0, len(head), chunk):
                conn.sendall(head[start : start + chunk])
                if pause:
                    time.sleep(pause)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before the end: the answer was sent first
        answer = b""
        with contextlib.suppress(ConnectionResetError):
            while b"\r\n\r\n" not in answer or not answer.endswith(b"}"):
                data = conn.recv(65536)
                if not data:
                    break
                answer += data
        return answer


def request_with_header(size: int) -> bytes:
    return (
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: "
        + b"a" * size
        + b"\r\nConnection: close\r\n\r\n"
    )


@pytest.mark.parametrize("size", [MAX_HEAD_BYTES + 1, 16 * 2**20])
def test_a_head_over_64_kib_is_431_without_reading_it_all(server, size):
    url, port = server
    started = time.monotonic()
    answer = raw_request(port, request_with_header(size))
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert b"application/problem+json" in answer and str(MAX_HEAD_BYTES).encode() in answer
    assert time.monotonic() - started < 10
    # the server is none the worse
    assert httpx.get(f"{url}/healthz", timeout=60).status_code == 200


def test_a_head_dripped_in_small_pieces_is_cut_off_at_the_bound(server):
    _, port = server
    answer = raw_request(port, request_with_header(4 * MAX_HEAD_BYTES), chunk=8192, pause=0.002)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]


def test_a_head_within_the_bound_is_served(server):
    _, port = server
    answer = raw_request(port, request_with_header(MAX_HEAD_BYTES - 200))
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
    # and a keep-alive connection serves its next request after a large one
    with httpx.Client(base_url=server[0], timeout=60) as http:
        for _ in range(3):
            big = http.get("/healthz", headers={"x-padding": "a" * (MAX_HEAD_BYTES // 2)})
            assert big.status_code == 200


def test_a_real_server_refuses_a_rebound_name(server):
    url, port = server
    with httpx.Client(base_url=url, timeout=60) as http:
        assert http.post("/v1/models", json={"id": "real", **MODEL}).status_code == 201
        evil = {"host": f"evil.example:{port}"}
        assert_host_refused(http.get("/v1/models/real", headers=evil), "evil.example")
        assert_host_refused(http.delete("/v1/models/real", headers=evil), "evil.example")
        assert http.get("/v1/models/real", headers={"host": f"localhost:{port}"}).is_success
        # a page rebound to 127.0.0.1: its handshake names its own host, and its own origin
        conn = socket.create_connection(("127.0.0.1", port), timeout=30)
        address = f"ws://evil.example:{port}/v1/models/real/stream"
        with connect(address, sock=conn, origin=f"http://evil.example:{port}") as ws:
            with pytest.raises(ConnectionClosed) as closed:
                ws.send(orjson.dumps({"seq": 1, "op": "learn", "x": [1.0] * 5, "y": 1}).decode())
                ws.recv(timeout=30)
        assert closed.value.rcvd.code == 1008 and "evil.example" in closed.value.rcvd.reason
        assert learned(http, "real") == 0
