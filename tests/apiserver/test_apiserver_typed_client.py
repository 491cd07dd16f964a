"""The official client's own typed API and watch helper against the HTTP face: what other
Python tools written for Kubernetes would do with the embedded server."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, watch

from pykatalyst.api.names import POD
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.runtime.apiserver import ApiServer


@pytest.fixture
def store() -> MemoryCluster:
    return MemoryCluster()


@pytest.fixture
def core(store: MemoryCluster) -> Iterator[Any]:
    with ApiServer(store, bookmark_seconds=0) as server:
        configuration = client.Configuration()
        configuration.host = server.url
        api_client: Any = client.ApiClient(configuration)
        yield client.CoreV1Api(api_client)
        api_client.close()


def _pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


def test_typed_reads_decode_the_servers_json(core: Any, store: MemoryCluster) -> None:
    store.create(POD, _pod("p1"))
    pods = core.list_namespaced_pod("default", label_selector="app=web")
    assert [p.metadata.name for p in pods.items] == ["p1"]
    pod = core.read_namespaced_pod("p1", "default")
    assert pod.status.phase == "Pending" and pod.spec.containers[0].image == "busybox"
    assert (
        pod.metadata.resource_version
        == store.get(POD, "p1", "default")["metadata"]["resourceVersion"]
    )


def test_typed_watch_helper_streams_events(core: Any, store: MemoryCluster) -> None:
    start = store.resource_version
    store.create(POD, _pod("p1"))
    store.delete(POD, "p1", "default")
    watcher: Any = watch.Watch
    stream = watcher().stream(
        core.list_namespaced_pod, "default", resource_version=start, timeout_seconds=1
    )
    seen = [(e["type"], e["object"].metadata.name) for e in stream]
    # A pod's deletion is written (deletionTimestamp) before the pod goes.
    assert seen == [("ADDED", "p1"), ("MODIFIED", "p1"), ("DELETED", "p1")]


def test_typed_binding_binds_whatever_the_generated_decoder_makes_of_the_answer(
    core: Any, store: MemoryCluster
) -> None:
    # The server answers a binding with a Status, as a real one does; the generated
    # create_namespaced_binding may fail to read that as a Binding, but the pod is bound.
    store.create(POD, _pod("p1"))
    body = client.V1Binding(
        metadata=client.V1ObjectMeta(name="p1"),
        target=client.V1ObjectReference(api_version="v1", kind="Node", name="n1"),
    )
    with contextlib.suppress(ValueError):
        core.create_namespaced_binding("default", body)
    assert store.get(POD, "p1", "default")["spec"]["nodeName"] == "n1"
