"""The Cluster conformance suite, unchanged, against the real kube-apiserver through
KubeCluster: the same tests MemoryCluster passes. Where the two disagree, MemoryCluster is
the one to fix.

A real API server cannot be made fresh for every test, so each test starts from a cleaned
one: the objects the suite creates (pods, config maps, disruption budgets, nodes without a
kubelet, CNRs, the CRDs of its example.com group) are removed before it runs, and lists and
watches across all namespaces see only the suite's namespaces. Tests that need a
controllable clock, the backing store or a small watch window skip, saying so (the suite's
own `need`)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from pykatalyst.api.names import (
    CONFIG_MAP,
    CRD,
    CUSTOM_NODE_RESOURCE,
    NODE,
    POD,
    POD_DISRUPTION_BUDGET,
    Kind,
)
from pykatalyst.cluster.protocol import JSON, Gone, NotFound, ObjectList, Watch, WatchEvent
from tests.apiserver.conformance import *  # noqa: F403
from tests.apiserver.conformance import collect
from tests.e2e.conftest import REPO

KEEP_CONFIG_MAPS = {"kube-root-ca.crt", "extension-apiserver-authentication"}
NAMESPACES = ("default", "kube-system")
SUITE_CRD_GROUP = "example.com"
PAUSED = ("kube-scheduler", "kube-controller-manager")


def _ours(kind: Kind, obj: JSON) -> bool:
    return not kind.namespaced or obj.get("metadata", {}).get("namespace") in NAMESPACES


class _SuiteWatch:
    def __init__(self, kind: Kind, inner: Watch) -> None:
        self.kind, self.inner = kind, inner

    def next_events(self, timeout: float = 0.0) -> list[WatchEvent]:
        events = self.inner.next_events(timeout)
        return [e for e in events if e.type in ("BOOKMARK", "ERROR") or _ours(self.kind, e.object)]

    def close(self) -> None:
        self.inner.close()


class _SuiteView:
    """The admin client, with lists and watches across all namespaces narrowed to the
    suite's namespaces: others' workloads share the cluster. The requests are unchanged;
    only what comes back from other namespaces is set aside."""

    def __init__(self, admin: Any) -> None:
        self._admin = admin

    def __getattr__(self, name: str) -> Any:
        return getattr(self._admin, name)

    def list(self, kind: Kind, namespace: str | None = None, **kw: Any) -> ObjectList:
        result: ObjectList = self._admin.list(kind, namespace, **kw)
        items = [o for o in result.items if _ours(kind, o)]
        return ObjectList(items=items, resource_version=result.resource_version)

    def watch(self, kind: Kind, namespace: str | None = None, **kw: Any) -> Watch:
        return _SuiteWatch(kind, self._admin.watch(kind, namespace, **kw))


def _real_nodes(admin: Any) -> set[str]:
    """Nodes with a kubelet behind them: they have a Ready condition."""
    items = admin.list(NODE).items
    return {
        n["metadata"]["name"]
        for n in items
        if any(c.get("type") == "Ready" for c in n.get("status", {}).get("conditions", []))
    }


def _clean(admin: Any, keep_nodes: set[str]) -> None:
    for ns in NAMESPACES:
        for pdb in admin.list(POD_DISRUPTION_BUDGET, namespace=ns).items:
            with contextlib.suppress(NotFound):
                admin.delete(POD_DISRUPTION_BUDGET, pdb["metadata"]["name"], ns)
        for p in admin.list(POD, namespace=ns).items:
            meta = p["metadata"]
            if meta.get("finalizers"):
                admin.patch(POD, meta["name"], {"metadata": {"finalizers": None}}, ns)
            with contextlib.suppress(NotFound):
                admin.delete(POD, meta["name"], ns, grace_period_seconds=0)
        for cm in admin.list(CONFIG_MAP, namespace=ns).items:
            if cm["metadata"]["name"] not in KEEP_CONFIG_MAPS:
                if cm["metadata"].get("finalizers"):
                    admin.patch(
                        CONFIG_MAP, cm["metadata"]["name"], {"metadata": {"finalizers": None}}, ns
                    )
                with contextlib.suppress(NotFound):
                    admin.delete(CONFIG_MAP, cm["metadata"]["name"], ns)
    for n in admin.list(NODE).items:
        if n["metadata"]["name"] not in keep_nodes:
            with contextlib.suppress(NotFound):
                admin.delete(NODE, n["metadata"]["name"])
    for cnr in admin.list(CUSTOM_NODE_RESOURCE).items:
        if cnr["metadata"]["name"] not in keep_nodes:
            with contextlib.suppress(NotFound):
                admin.delete(CUSTOM_NODE_RESOURCE, cnr["metadata"]["name"])
    for crd in _suite_crds(admin):
        with contextlib.suppress(NotFound):
            admin.delete(CRD, crd)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = sum(len(admin.list(POD, namespace=ns).items) for ns in NAMESPACES)
        left += sum(
            cm["metadata"]["name"] not in KEEP_CONFIG_MAPS
            for ns in NAMESPACES
            for cm in admin.list(CONFIG_MAP, namespace=ns).items
        )
        left += len(admin.list(NODE).items) - len(keep_nodes)
        left += len(_suite_crds(admin))  # a CRD goes once its custom resources are gone
        if left == 0:
            return
        time.sleep(0.2)


def _suite_crds(admin: Any) -> list[str]:
    return [
        c["metadata"]["name"]
        for c in admin.list(CRD).items
        if c.get("spec", {}).get("group") == SUITE_CRD_GROUP
    ]


def _pause(*names: str) -> None:
    script = str(REPO / "scripts" / "cluster.sh")
    subprocess.run(["bash", script, "pause", *names], check=True, capture_output=True)


@pytest.fixture(scope="module")
def keep_nodes(admin: Any) -> Iterator[set[str]]:
    """The cluster's real nodes. While the suite runs, the cluster's kube-scheduler and
    controller manager are paused: the suite tests the API server's semantics, and those
    would bind its pods and taint its nodes under it."""
    if not os.environ.get("PYKATALYST_CLUSTER_DIR"):
        pytest.skip(
            "the conformance suite pauses the scheduler and controller manager: it needs the "
            "cluster of scripts/cluster.sh"
        )
    _pause(*PAUSED)
    try:
        yield _real_nodes(admin)
    finally:
        script = str(REPO / "scripts" / "cluster.sh")
        subprocess.run(["bash", script, "resume", *PAUSED], check=True, capture_output=True)


@pytest.fixture
def clock() -> None:
    return None


@pytest.fixture
def backend() -> None:
    return None


@pytest.fixture
def cluster(admin: Any, keep_nodes: set[str]) -> Iterator[Any]:
    # Others share the cluster: should a run of theirs have resumed the scheduler or the
    # controller manager meanwhile, pause them again (a no-op when they are paused).
    _pause(*PAUSED)
    _clean(admin, keep_nodes)
    yield _SuiteView(admin)
    _clean(admin, keep_nodes)


@pytest.fixture
def small_history_cluster() -> None:
    pytest.skip("a real API server's watch window is etcd's compaction, not settable per test")


def test_watch_from_before_the_watch_cache_is_gone(cluster: Any) -> None:
    """The window of the real server is its watch cache, which begins after the cluster's
    first versions: a watch from one of them gets the same 410 as a MemoryCluster watch past
    its history (test_watch_from_a_version_past_the_window_is_gone)."""
    try:
        with pytest.raises(Gone) as err:
            w = cluster.watch(CONFIG_MAP, "default", resource_version="2")
            try:
                collect(w, 1)
            finally:
                w.close()
    except pytest.fail.Exception:
        # A young API server may still hold resourceVersion 2 in its watch cache.
        pytest.skip("this API server still serves resourceVersion 2 from its history")
    assert err.value.code == 410 and err.value.reason == "Expired"
    assert err.value.message.startswith("too old resource version: 2 (")
