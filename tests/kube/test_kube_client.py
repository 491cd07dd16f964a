"""KubeCluster's own behaviour: error mapping, watch resume and re-list, binding, rate
limits and connection choice, against the HTTP face on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from pykatalyst.api.names import CONFIG_MAP, NODE, POD
from pykatalyst.apiserver.http import kubeconfig_for
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.connect import ConnectError, connect
from pykatalyst.cluster.informer import Informer
from pykatalyst.cluster.kube import KubeCluster, KubeWatch, RateLimiter, error_from_response
from pykatalyst.cluster.protocol import (
    AlreadyExists,
    ApiError,
    BadRequest,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    TooManyRequests,
    WatchEvent,
)
from pykatalyst.runtime.apiserver import ApiServer


@pytest.fixture
def store() -> MemoryCluster:
    return MemoryCluster(clock=VirtualClock(1_700_000_000.0), seed=3)


@pytest.fixture
def server(store: MemoryCluster) -> Iterator[ApiServer]:
    with ApiServer(store, bookmark_seconds=0) as srv:
        yield srv


@pytest.fixture
def kube(server: ApiServer) -> Iterator[KubeCluster]:
    client = KubeCluster.from_url(server.url, qps=0)
    yield client
    client.close()


def _pod(name: str, node: str | None = None) -> dict[str, object]:
    spec: dict[str, object] = {"containers": [{"name": "c", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": "default"}, "spec": spec}


def _cm(name: str) -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": "default"}, "data": {}}


def _drain(w: KubeWatch, n: int, wait: float = 3.0) -> list[WatchEvent]:
    out: list[WatchEvent] = []
    deadline = time.monotonic() + wait
    while len(out) < n and time.monotonic() < deadline:
        out += w.next_events(0.1)
    return out


# --- errors ---------------------------------------------------------------------------------


def _status(code: int, reason: str, message: str = "m", **details: object) -> bytes:
    body = {"kind": "Status", "code": code, "reason": reason, "message": message}
    if details:
        body["details"] = details
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    ("code", "reason", "expected"),
    [
        (404, "NotFound", NotFound),
        (409, "AlreadyExists", AlreadyExists),
        (409, "Conflict", Conflict),
        (410, "Expired", Gone),
        (410, "Gone", Gone),
        (422, "Invalid", Invalid),
        (400, "BadRequest", BadRequest),
        (403, "Forbidden", Forbidden),
        (429, "TooManyRequests", TooManyRequests),
    ],
)
def test_status_codes_map_to_typed_errors(code: int, reason: str, expected: type) -> None:
    error = error_from_response(code, _status(code, reason, "the message"))
    assert type(error) is expected
    assert error.code == code and error.message == "the message"


def test_retry_after_comes_from_the_header_or_the_status_details() -> None:
    assert error_from_response(429, _status(429, "TooManyRequests"), "7").retry_after_seconds == 7
    from_details = error_from_response(429, _status(429, "TooManyRequests", retryAfterSeconds=3))
    assert from_details.retry_after_seconds == 3


def test_unknown_failures_keep_their_code_and_body() -> None:
    error = error_from_response(503, b"upstream connect error")
    assert type(error) is ApiError
    assert error.code == 503 and "upstream connect error" in error.message
    odd = error_from_response(500, _status(500, "ServerTimeout", "slow"))
    assert odd.reason == "ServerTimeout" and odd.code == 500


def test_errors_over_the_wire_are_typed(kube: KubeCluster, store: MemoryCluster) -> None:
    kube.create(POD, _pod("p1"))
    with pytest.raises(AlreadyExists):
        kube.create(POD, _pod("p1"))
    stale = kube.get(POD, "p1", "default")
    kube.patch(POD, "p1", {"metadata": {"labels": {"a": "1"}}}, "default")
    with pytest.raises(Conflict):
        kube.update(POD, stale)
    with pytest.raises(NotFound) as missing:
        kube.get(POD, "nope", "default")
    assert missing.value.details.get("name") == "nope"
    store.eviction_guard = lambda pod: "budget exhausted"
    kube.create(POD, _pod("p2", node="n1"))
    with pytest.raises(TooManyRequests) as refused:
        kube.evict("default", "p2")
    assert refused.value.retry_after_seconds == 10


def test_unreachable_server_is_service_unavailable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = KubeCluster.from_url(f"http://127.0.0.1:{port}", qps=0, request_timeout=2)
    with pytest.raises(ApiError) as err:
        client.get(NODE, "n1")
    assert err.value.code == 503 and f"127.0.0.1:{port}" in err.value.message
    client.close()


def test_bad_patch_is_refused_before_it_is_sent(kube: KubeCluster) -> None:
    with pytest.raises(BadRequest, match="list of operations"):
        kube.patch(POD, "p1", {"op": "add"}, "default", patch_type="json")
    with pytest.raises(BadRequest, match="not supported"):
        kube.patch(POD, "p1", {}, "default", patch_type="apply")  # type: ignore[arg-type]


# --- binding and eviction -------------------------------------------------------------------


def test_bind_succeeds_when_the_server_answers_with_a_status(
    kube: KubeCluster, store: MemoryCluster
) -> None:
    # A real API server answers a binding with a Status, not a Binding: the typed
    # create_namespaced_binding of the generated client cannot decode that.
    kube.create(POD, _pod("p1"))
    kube.bind("default", "p1", "node-a")
    assert store.get(POD, "p1", "default")["spec"]["nodeName"] == "node-a"
    with pytest.raises(Conflict, match="already assigned"):
        kube.bind("default", "p1", "node-b")


def test_eviction_with_a_grace_period(kube: KubeCluster, store: MemoryCluster) -> None:
    kube.create(POD, _pod("p1", node="n1"))
    kube.evict("default", "p1", grace_period_seconds=15)
    meta = store.get(POD, "p1", "default")["metadata"]
    assert meta["deletionGracePeriodSeconds"] == 15
    kube.create(POD, _pod("p2", node="n1"))
    kube.evict("default", "p2", grace_period_seconds=0)
    with pytest.raises(NotFound):
        store.get(POD, "p2", "default")


# --- watch ----------------------------------------------------------------------------------


def test_watch_resumes_from_its_last_version_when_the_server_ends_the_stream(
    server: ApiServer, store: MemoryCluster
) -> None:
    # Each watch request lasts one second: events keep flowing across reconnects, none
    # lost and none repeated.
    client = KubeCluster.from_url(server.url, qps=0, watch_seconds=1)
    start = client.list(CONFIG_MAP, "default").resource_version
    w = client.watch(CONFIG_MAP, "default", resource_version=start)
    seen: list[WatchEvent] = []
    for i in range(6):
        store.create(CONFIG_MAP, _cm(f"c{i}"))
        if i % 2 == 1:  # let the server end the current stream before going on
            opened = w.connections
            deadline = time.monotonic() + 5
            while w.connections == opened and time.monotonic() < deadline:
                seen += w.next_events(0.1)
    seen += _drain(w, 6 - len(seen))
    connections = w.connections
    w.close()
    client.close()
    assert connections >= 4
    assert [e.object["metadata"]["name"] for e in seen] == [f"c{i}" for i in range(6)]
    assert all(e.type == "ADDED" for e in seen)


def test_an_informer_relists_when_its_watch_resumes_past_the_window() -> None:
    # The server goes away while more changes happen than its history keeps; the watch
    # resumes from its last version, gets 410, and the informer lists again.
    store = MemoryCluster(watch_history=4)
    store.create(CONFIG_MAP, _cm("c0"))
    first = ApiServer(store, bookmark_seconds=0)
    first.start()
    client = KubeCluster.from_url(first.url, qps=0)
    informer = Informer(client, CONFIG_MAP, "default")
    informer.sync()
    first.stop()
    for i in range(1, 10):
        store.create(CONFIG_MAP, _cm(f"c{i}"))
    store.delete(CONFIG_MAP, "c0", "default")
    with ApiServer(store, port=first.port, bookmark_seconds=0):
        deadline = time.monotonic() + 10
        while informer.relists == 0 and time.monotonic() < deadline:
            informer.sync(timeout=0.1)
        assert informer.relists == 1
        informer.sync(timeout=0.2)
        expected = [o["metadata"]["name"] for o in store.list(CONFIG_MAP, "default").items]
        assert [o["metadata"]["name"] for o in informer.list()] == expected
        informer.close()
        client.close()


def test_watch_from_a_stale_version_raises_gone_from_next_events() -> None:
    store = MemoryCluster(watch_history=2)
    with ApiServer(store, bookmark_seconds=0) as srv:
        client = KubeCluster.from_url(srv.url, qps=0)
        first = store.create(CONFIG_MAP, _cm("c0"))
        for i in range(1, 5):
            store.create(CONFIG_MAP, _cm(f"c{i}"))
        w = client.watch(CONFIG_MAP, "default", first["metadata"]["resourceVersion"])
        with pytest.raises(Gone):
            _drain(w, 1)
        with pytest.raises(Gone):  # the stream stays failed: the caller must list again
            w.next_events()
        w.close()
        assert w.next_events() == []
        client.close()


def test_bookmarks_reach_watches_that_asked_for_them(
    kube: KubeCluster, store: MemoryCluster
) -> None:
    start = kube.list(POD).resource_version
    with_bm = kube.watch(POD, resource_version=start, allow_bookmarks=True)
    store.create(NODE, {"metadata": {"name": "n1"}})
    version = store.bookmark()
    events = _drain(with_bm, 1)
    assert [(e.type, e.object["metadata"]["resourceVersion"]) for e in events] == [
        ("BOOKMARK", version)
    ]
    # a later watch resumes after the bookmark: nothing is replayed
    assert with_bm.resource_version == version
    with_bm.close()


def test_closing_a_watch_stops_its_thread(kube: KubeCluster) -> None:
    w = kube.watch(POD, "default")
    w.close()
    assert not w._thread.is_alive()
    assert w.next_events(0.1) == []


# --- rate limit -----------------------------------------------------------------------------


class FakeTime:
    def __init__(self) -> None:
        self.t = 100.0
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))
        self.t += seconds


def test_token_bucket_allows_a_burst_then_the_rate() -> None:
    clock = FakeTime()
    bucket = RateLimiter(qps=5, burst=10, now=clock.now, sleep=clock.sleep)
    for _ in range(10):
        bucket.acquire()
    assert clock.slept == []
    bucket.acquire()
    bucket.acquire()
    assert clock.slept == [0.2, 0.2]
    clock.t += 60  # idle: the bucket refills, but never beyond the burst
    for _ in range(10):
        bucket.acquire()
    assert clock.slept == [0.2, 0.2]
    bucket.acquire()
    assert clock.slept == [0.2, 0.2, 0.2]


def test_token_bucket_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="qps"):
        RateLimiter(qps=-1, burst=1)
    with pytest.raises(ValueError, match="burst"):
        RateLimiter(qps=1, burst=0)
    unlimited = RateLimiter(qps=0, burst=0)
    assert all(unlimited.acquire() == 0 for _ in range(1000))


def test_requests_wait_for_the_rate_limit(server: ApiServer) -> None:
    clock = FakeTime()
    client = KubeCluster.from_url(server.url, qps=2, burst=1, now=clock.now, sleep=clock.sleep)
    for _ in range(3):
        client.list(NODE)
    assert clock.slept == [0.5, 0.5]
    client.close()


# --- connect ----------------------------------------------------------------------------------


def test_connect_refuses_contradictions(tmp_path: Path) -> None:
    with pytest.raises(ConnectError, match="give --kubeconfig PATH or --in-cluster"):
        connect()
    with pytest.raises(ConnectError, match="exclude each other"):
        connect(tmp_path / "kc", in_cluster=True)
    with pytest.raises(ConnectError, match="no such file"):
        connect(tmp_path / "missing")
    with pytest.raises(ConnectError, match="--context needs --kubeconfig"):
        connect(context="prod")
    broken = tmp_path / "broken"
    broken.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    with pytest.raises(ConnectError, match="broken"):
        connect(broken)


def test_connect_through_a_kubeconfig(
    server: ApiServer, store: MemoryCluster, tmp_path: Path
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig_for(server.url)))
    cluster = connect(path)
    assert isinstance(cluster, KubeCluster)
    cluster.create(NODE, {"metadata": {"name": "from-kubeconfig"}})
    assert store.get(NODE, "from-kubeconfig")["metadata"]["name"] == "from-kubeconfig"
    cluster.close()


def test_watch_survives_a_server_restart(store: MemoryCluster) -> None:
    first = ApiServer(store, bookmark_seconds=0)
    first.start()
    port = first.port
    client = KubeCluster.from_url(first.url, qps=0)
    w = client.watch(CONFIG_MAP, "default", resource_version=store.resource_version)
    store.create(CONFIG_MAP, _cm("before"))
    seen = _drain(w, 1)
    first.stop()
    store.create(CONFIG_MAP, _cm("while-down"))
    with ApiServer(store, port=port, bookmark_seconds=0):
        store.create(CONFIG_MAP, _cm("after"))
        seen += _drain(w, 2, wait=10)
        assert w.connections >= 2
    w.close()
    client.close()
    assert [e.object["metadata"]["name"] for e in seen] == ["before", "while-down", "after"]


def test_get_raw_reads_a_path_that_is_not_a_resource(kube: KubeCluster) -> None:
    assert kube.get_raw("/healthz") == b"ok"
    assert b"# TYPE" in kube.get_raw("/metrics")
    with pytest.raises(NotFound):
        kube.get_raw("/api/v1/namespaces/default/pods/nobody")
    with pytest.raises(BadRequest, match="must start with '/'"):
        kube.get_raw("metrics")


def test_the_connection_pool_holds_a_scheduler_s_concurrent_binds(server: ApiServer) -> None:
    from concurrent.futures import ThreadPoolExecutor

    client = KubeCluster.from_url(server.url, qps=0, pool_size=8)
    try:
        assert client._client.configuration.connection_pool_maxsize == 8
        with ThreadPoolExecutor(8) as pool:
            names_ = list(
                pool.map(
                    lambda i: client.create(CONFIG_MAP, _cm(f"c{i}"))["metadata"]["name"], range(16)
                )
            )
        assert sorted(names_) == sorted(f"c{i}" for i in range(16))
    finally:
        client.close()
