"""The embedded API server under hostile callers: malformed and oversized bodies get a 4xx
Status (never a 500), absurd grace periods are refused, watches are bounded, a token is
enforced, and the state file survives a kill."""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pykatalyst.api.names import NODE, POD
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.apiserver.strategy import MAX_GRACE_SECONDS
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.runtime.apiserver import (
    ApiServer,
    StateSaver,
    remove_stale_temp_files,
    save_snapshot,
)

PODS = "/api/v1/namespaces/default/pods"


def _pod(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "x"}], **spec},
    }


def _call(
    server: ApiServer,
    method: str,
    path: str,
    body: bytes | str | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        conn.request(method, path, body=body, headers=hdrs)
        resp = conn.getresponse()
        raw = resp.read()
        try:
            return resp.status, json.loads(raw)
        except ValueError:
            return resp.status, raw.decode(errors="replace")
    finally:
        conn.close()


@pytest.fixture(scope="module")
def server() -> Iterator[ApiServer]:
    store = MemoryCluster(clock=VirtualClock(1_700_000_000.0))
    store.create(NODE, {"metadata": {"name": "n1"}})
    with ApiServer(store, bookmark_seconds=0, max_body_bytes=256 * 1024) as srv:
        yield srv


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('{"apiVersion": 5, "kind": "Pod", "metadata": {"name": "a"}}', "apiVersion"),
        ('{"kind": "Pod", "metadata": {"name": "a"}, "spec": "x"}', "spec"),
        ('{"kind": "Pod", "metadata": {"name": "a"}, "spec": {"priority": NaN}}', "NaN"),
        ('{"kind": "Pod", "metadata": {"name": "a"}, "spec": {"priority": Infinity}}', "Inf"),
        ('{"kind": "Pod", "metadata": {"name": "a"}, "spec": {"priority": -Infinity}}', "Inf"),
        ("[" * 900 + "]" * 900, "nested"),
        ('{"kind": "Pod", "metadata": {"name": "a"}, "x": ' + "[" * 900 + "]" * 900 + "}", "nest"),
    ],
)
def test_malformed_bodies_get_a_400_status_naming_the_problem(
    server: ApiServer, body: str, field: str
) -> None:
    status, doc = _call(server, "POST", PODS, body)
    assert status == 400, doc
    assert doc["kind"] == "Status" and field in doc["message"], doc


def test_a_body_over_the_limit_is_a_413_status(server: ApiServer) -> None:
    big = json.dumps({**_pod("big"), "pad": "x" * (300 * 1024)})
    status, doc = _call(server, "POST", PODS, big)
    assert status == 413
    assert doc["reason"] == "RequestEntityTooLarge" and "262144 bytes" in doc["message"]


def test_a_non_integer_termination_grace_period_is_refused_at_create(server: ApiServer) -> None:
    status, doc = _call(
        server, "POST", PODS, json.dumps(_pod("g", terminationGracePeriodSeconds="abc"))
    )
    assert status == 400
    assert "spec.terminationGracePeriodSeconds" in doc["message"]
    assert _call(server, "GET", f"{PODS}/g")[0] == 404


def test_a_far_future_grace_period_is_refused_and_the_pod_stays_deletable(
    server: ApiServer,
) -> None:
    assert _call(server, "POST", PODS, json.dumps(_pod("far", nodeName="n1")))[0] == 201
    status, doc = _call(server, "DELETE", f"{PODS}/far?gracePeriodSeconds={10**12}")
    assert status == 422, doc
    assert f"at most {MAX_GRACE_SECONDS}" in doc["message"]
    assert "deletionTimestamp" not in _call(server, "GET", f"{PODS}/far")[1]["metadata"]
    body = json.dumps({"gracePeriodSeconds": 0})
    assert _call(server, "DELETE", f"{PODS}/far", body)[0] == 200


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
POD_KEYS = ["apiVersion", "kind", "metadata", "spec", "status"]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    doc=st.dictionaries(st.sampled_from(POD_KEYS), JSON_VALUES, max_size=5)
    | st.builds(
        lambda field, value: {**_pod("h"), "spec": {**_pod("h")["spec"], field: value}},
        st.sampled_from(
            ["terminationGracePeriodSeconds", "priority", "containers", "nodeName", "affinity"]
        ),
        JSON_VALUES,
    ),
    method=st.sampled_from(["POST", "PUT"]),
)
def test_no_body_makes_the_server_answer_5xx(
    server: ApiServer, doc: dict[str, Any], method: str
) -> None:
    path = PODS if method == "POST" else f"{PODS}/h"
    status, reply = _call(server, method, path, json.dumps(doc))
    assert status < 500, reply
    if status < 300:
        _call(server, "DELETE", f"{PODS}/h", json.dumps({"gracePeriodSeconds": 0}))


def _open_watch(server: ApiServer) -> tuple[socket.socket, int]:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(f"GET {PODS}?watch=true HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    head = sock.recv(4096).decode()
    return sock, int(head.split()[1])


def test_watches_are_bounded_per_client_and_in_total() -> None:
    store = MemoryCluster(clock=VirtualClock(1_700_000_000.0))
    with ApiServer(store, bookmark_seconds=0) as srv:
        app_watch_limit = 100  # DEFAULT_MAX_WATCHES_PER_CLIENT: every caller here is 127.0.0.1
        socks = []
        try:
            for _ in range(app_watch_limit):
                sock, status = _open_watch(srv)
                socks.append(sock)
                assert status == 200
            extra, status = _open_watch(srv)
            extra.close()
            assert status == 429
            # ordinary calls still get threads while the watches wait
            assert _call(srv, "GET", PODS)[0] == 200
        finally:
            for s in socks:
                s.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # closed watches free their slots
            sock, status = _open_watch(srv)
            sock.close()
            if status == 200:
                break
            time.sleep(0.2)
        assert status == 200


def test_a_token_is_required_but_not_for_the_probes() -> None:
    store = MemoryCluster(clock=VirtualClock(1_700_000_000.0))
    with ApiServer(store, bookmark_seconds=0, token="t0k") as srv:
        status, doc = _call(srv, "GET", PODS)
        assert status == 401 and doc["reason"] == "Unauthorized"
        assert _call(srv, "GET", PODS, headers={"Authorization": "Bearer no"})[0] == 401
        assert _call(srv, "GET", PODS, headers={"Authorization": "Bearer t0k"})[0] == 200
        assert _call(srv, "GET", "/readyz")[0] == 200


def test_the_state_file_follows_every_change_and_leaves_no_temp_files(tmp_path: Path) -> None:
    state = tmp_path / "cluster.json"
    stale = tmp_path / ".cluster.json.abc123.tmp"
    stale.write_text("half a snap")
    assert remove_stale_temp_files(state) == [stale]
    store = MemoryCluster(clock=VirtualClock(1_700_000_000.0))
    saver = StateSaver(store, state)
    assert saver() is True
    assert saver() is False  # nothing changed: no write
    store.create(NODE, {"metadata": {"name": "n1"}})
    assert saver() is True
    loaded = MemoryCluster.from_snapshot(json.loads(state.read_text()), clock=VirtualClock(0))
    assert loaded.get(NODE, "n1")["metadata"]["name"] == "n1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cluster.json"]


def test_a_failed_save_keeps_the_old_snapshot_and_no_temp_file(tmp_path: Path) -> None:
    state = tmp_path / "cluster.json"
    store = MemoryCluster(clock=VirtualClock(1_700_000_000.0))
    save_snapshot(store, state)
    before = state.read_bytes()
    store.create(POD, _pod("p"), "default")
    store.snapshot = lambda: {"bad": {1, 2}}  # type: ignore[method-assign]
    with pytest.raises(TypeError):
        save_snapshot(store, state)
    assert state.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["cluster.json"]


def test_silent_sockets_are_closed_after_the_idle_timeout() -> None:
    from pykatalyst.runtime import apiserver as runtime_apiserver

    store = MemoryCluster(clock=VirtualClock(1_700_000_000.0))
    old = runtime_apiserver.IDLE_TIMEOUT_S
    runtime_apiserver.IDLE_TIMEOUT_S = 0.5
    try:
        srv = ApiServer(store, bookmark_seconds=0)
    finally:
        runtime_apiserver.IDLE_TIMEOUT_S = old
    with srv:
        host, port = srv.url.removeprefix("http://").rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=10)
        started = time.monotonic()
        assert sock.recv(1) == b""  # closed by the server, not by our timeout
        assert time.monotonic() - started < 5
        sock.close()
