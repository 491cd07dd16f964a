"""The Cluster conformance suite, unchanged, against the real kube-apiserver through
KubeCluster: the same tests MemoryCluster passes. Where the two disagree, MemoryCluster is
the one to fix.

A real API server cannot be made fresh for every test, so each test starts from a cleaned
one: the objects the suite creates (pods, config maps, nodes without a kubelet, CNRs) are
removed before it runs. Tests that need a controllable clock, the backing store or a small
watch window skip, saying so (the suite's own `need`)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from pykatalyst.api.names import CONFIG_MAP, CUSTOM_NODE_RESOURCE, NODE, POD
from pykatalyst.cluster.protocol import NotFound
from tests.cluster.conformance import *  # noqa: F403
from tests.e2e.conftest import REPO

KEEP_CONFIG_MAPS = {"kube-root-ca.crt", "extension-apiserver-authentication"}
NAMESPACES = ("default", "kube-system")


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
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = sum(len(admin.list(POD, namespace=ns).items) for ns in NAMESPACES)
        left += sum(
            cm["metadata"]["name"] not in KEEP_CONFIG_MAPS
            for ns in NAMESPACES
            for cm in admin.list(CONFIG_MAP, namespace=ns).items
        )
        left += len(admin.list(NODE).items) - len(keep_nodes)
        if left == 0:
            return
        time.sleep(0.2)


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
    script = str(REPO / "scripts" / "cluster.sh")
    paused = ["kube-scheduler", "kube-controller-manager"]
    subprocess.run(["bash", script, "pause", *paused], check=True, capture_output=True)
    try:
        yield _real_nodes(admin)
    finally:
        subprocess.run(["bash", script, "resume", *paused], check=True, capture_output=True)


@pytest.fixture
def clock() -> None:
    return None


@pytest.fixture
def backend() -> None:
    return None


@pytest.fixture
def cluster(admin: Any, keep_nodes: set[str]) -> Iterator[Any]:
    _clean(admin, keep_nodes)
    yield admin
    _clean(admin, keep_nodes)


@pytest.fixture
def small_history_cluster() -> None:
    pytest.skip("a real API server's watch window is etcd's compaction, not settable per test")
