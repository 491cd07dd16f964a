"""The stock kube-scheduler with `katalyst scheduler --extender` beside it, on the real API
server: a second upstream kube-scheduler (its own schedulerName, so the cluster's own
scheduler is not involved) runs deploy/extender's `extenders:` entry pointed at the
extender on loopback. Pods go to fake nodes with chosen CNRs; kube's own plugins (node
affinity, host ports, taints) keep deciding beside Katalyst's. The no-extra-scheduler path
— kube-scheduler alone, fitting reclaimed pods on extended resources in the Node's
allocatable — is here too."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from pykatalyst.api import names
from tests.e2e.conftest import REPO, Component, Kubectl, component_kubeconfig, wait_until
from tests.e2e.fake_nodes import (
    FakeNodes,
    HostProcess,
    fake_nodes,
    free_port,
    host_processes,
    kube_bin,
)
from tests.scheduler.sched_helpers import numa_zones

__all__ = ["fake_nodes", "host_processes"]

SNIPPET = REPO / "deploy" / "extender" / "kube-scheduler-extender.yaml"
NUMA_CONFIG = REPO / "examples" / "scheduler" / "katalyst-scheduler-numa.yaml"
RECLAIMED = {names.QOS_LEVEL_ANNOTATION: names.QOS_RECLAIMED_CORES}


def _reclaimed(cpu_milli: int, memory: str) -> dict[str, str]:
    return {names.RECLAIMED_MILLICPU: str(cpu_milli), names.RECLAIMED_MEMORY: memory}


def start_kube_scheduler(
    start: Callable[..., HostProcess],
    kubeconfig: str,
    tmp_path: Path,
    scheduler_name: str,
    extenders: list[dict[str, Any]],
    ignored_groups: list[str] | None = None,
) -> HostProcess:
    """An upstream kube-scheduler on loopback, no leader election, one profile (whose
    NodeResourcesFit ignores `ignored_groups`)."""
    profile: dict[str, Any] = {"schedulerName": scheduler_name}
    if ignored_groups:
        profile["pluginConfig"] = [
            {"name": "NodeResourcesFit", "args": {"ignoredResourceGroups": ignored_groups}}
        ]
    config: dict[str, Any] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": kubeconfig},
        "leaderElection": {"leaderElect": False},
        "profiles": [profile],
        "extenders": extenders,
    }
    path = tmp_path / "kube-scheduler.yaml"
    path.write_text(yaml.safe_dump(config))
    return start(
        "kube-scheduler",
        kube_bin("kube-scheduler"),
        f"--config={path}",
        "--secure-port=0",
        "--bind-address=127.0.0.1",
        "-v=2",
    )


@pytest.fixture(params=["managed"])
def extender_pair(
    request: pytest.FixtureRequest,
    kubeconfig: str,
    fake_nodes: FakeNodes,
    components: Callable[..., Component],
    host_processes: Callable[..., HostProcess],
    tmp_path: Path,
) -> str:
    """`katalyst scheduler --extender` and a kube-scheduler using it; its schedulerName.

    "managed": deploy/extender's entry as shipped (kube calls the extender for pods asking
    for reclaimed resources). "every-pod": the entry without managedResources, so that
    every pod is sent, and kube's NodeResourcesFit told to ignore Katalyst's resource
    group instead."""
    port = free_port()
    ext = components(
        "extender",
        "scheduler", "--extender", "--listen", f"127.0.0.1:{port}",
        "--config", str(NUMA_CONFIG), "--kubeconfig", component_kubeconfig("scheduler"),
        env={"PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    wait_until("the extender to listen", lambda: "extender listening" in ext.log(), 60)
    (entry,) = yaml.safe_load(SNIPPET.read_text())["extenders"]
    entry = dict(entry, urlPrefix=f"http://127.0.0.1:{port}")
    groups = None
    if request.param == "every-pod":
        entry.pop("managedResources")
        groups = [names.RESOURCE_GROUP]
    name = f"kube-with-katalyst-extender-{fake_nodes.run}"
    kube = start_kube_scheduler(host_processes, kubeconfig, tmp_path, name, [entry], groups)
    wait_until("kube-scheduler to start", lambda: kube.alive() and bool(kube.log()), 30)
    assert kube.alive(), kube.log()[-2000:]
    return name


def _placed(fakes: FakeNodes, namespace: str, n: int, settle_s: float = 0) -> dict[str, str]:
    """The placements once `n` pods are bound (the rest stay pending for `settle_s` more)."""
    wait_until(
        f"{n} pods bound",
        lambda: sum(1 for v in fakes.placements(namespace).values() if v) >= n,
        90,
    )
    if settle_s:
        import time

        time.sleep(settle_s)
    return fakes.placements(namespace)


@pytest.mark.parametrize("extender_pair", ["managed", "every-pod"], indirect=True)
def test_reclaimed_pods_land_only_where_the_cnr_has_room(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes, extender_pair: str
) -> None:
    small = fake_nodes.add("small", cnr_kwargs={"reclaimed_cpu": "1k", "reclaimed_memory": "2Gi"})
    big = fake_nodes.add("big", cnr_kwargs={"reclaimed_cpu": "8k", "reclaimed_memory": "16Gi"})
    none = fake_nodes.add("nocnr")
    for i in range(5):
        kubectl.apply(
            fake_nodes.pod(f"r{i}", namespace, _reclaimed(2000, "1Gi"),
                           scheduler=extender_pair, annotations=RECLAIMED)
        )  # fmt: skip
    placed = _placed(fake_nodes, namespace, 4, settle_s=5)
    assert sorted(placed.values()) == ["", big, big, big, big], placed
    assert small not in placed.values() and none not in placed.values()
    # A pod small's reclaimed cpu holds goes there once big is full.
    kubectl.apply(
        fake_nodes.pod("tiny", namespace, _reclaimed(500, "512Mi"), scheduler=extender_pair,
                       annotations=RECLAIMED)
    )  # fmt: skip
    assert _placed(fake_nodes, namespace, 5)["tiny"] == small


@pytest.mark.parametrize("extender_pair", ["every-pod"], indirect=True)
def test_a_numa_bound_dedicated_pod_lands_where_a_zone_fits(
    kubectl: Kubectl,
    namespace: str,
    fake_nodes: FakeNodes,
    extender_pair: str,
) -> None:
    policy = "SingleNUMANodeContainerLevel"
    narrow = fake_nodes.add(
        "narrow",
        cnr_kwargs={"zones": numa_zones([[(0, "2", "4Gi"), (1, "2", "4Gi")]]), "policy": policy},
    )
    wide = fake_nodes.add(
        "wide",
        cnr_kwargs={"zones": numa_zones([[(0, "4", "8Gi"), (1, "4", "8Gi")]]), "policy": policy},
    )
    ann = {
        names.QOS_LEVEL_ANNOTATION: names.QOS_DEDICATED_CORES,
        names.MEMORY_ENHANCEMENT_ANNOTATION: json.dumps({"numa_binding": "true"}),
    }
    for i in range(3):
        kubectl.apply(
            fake_nodes.pod(f"d{i}", namespace, {"cpu": "3", "memory": "2Gi"},
                           scheduler=extender_pair, annotations=ann)
        )  # fmt: skip
    # Both nodes have 8 cpus for kube's fit; only wide's two zones hold 3 cpus each.
    # The extender reserves a NUMA-bound pod on every zone of its node until the CNR lists
    # it (Katalyst's rule); these fake nodes have no agent to list it, so the second waits.
    placed = _placed(fake_nodes, namespace, 1, settle_s=5)
    assert sorted(placed.values()) == ["", "", wide], placed
    assert narrow not in placed.values()


def test_kube_schedulers_own_plugins_keep_deciding(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes, extender_pair: str
) -> None:
    roomy = {"reclaimed_cpu": "8k", "reclaimed_memory": "16Gi"}
    tainted = fake_nodes.add(
        "tainted",
        taints=[{"key": "e2e.pykatalyst.io/keep-off", "value": "x", "effect": "NoSchedule"}],
        cnr_kwargs=roomy,
    )
    a = fake_nodes.add("a", cnr_kwargs=roomy)
    b = fake_nodes.add("b", cnr_kwargs=roomy)

    def reclaimed_pod(name: str, **kw: Any) -> None:
        kubectl.apply(
            fake_nodes.pod(name, namespace, _reclaimed(100, "64Mi"), scheduler=extender_pair,
                           annotations=RECLAIMED, **kw)
        )  # fmt: skip

    # Node affinity: only b.
    reclaimed_pod("pinned", node_names=[b])
    # Host ports: three pods want port 8080; a and b hold one each.
    for i in range(3):
        reclaimed_pod(f"port-{i}", host_port=8080)
    # Taints: many small pods, none on the tainted node.
    for i in range(4):
        reclaimed_pod(f"free-{i}")
    placed = _placed(fake_nodes, namespace, 7, settle_s=5)
    assert placed["pinned"] == b
    ports = sorted(placed[f"port-{i}"] for i in range(3))
    assert ports == sorted(["", a, b]), placed
    assert tainted not in placed.values()
    assert all(placed[f"free-{i}"] in (a, b) for i in range(4))


def test_kube_scheduler_alone_fits_reclaimed_pods_on_node_extended_resources(
    kubectl: Kubectl,
    kubeconfig: str,
    namespace: str,
    fake_nodes: FakeNodes,
    host_processes: Callable[..., HostProcess],
    tmp_path: Path,
) -> None:
    """No extra scheduler: the reclaimed capacity as extended resources in the Node's
    status.allocatable (what the agent publishes there), and kube's NodeResourcesFit."""
    small = fake_nodes.add("small", extra=_reclaimed(1000, "2Gi"))
    big = fake_nodes.add("big", extra=_reclaimed(4000, "8Gi"))
    bare = fake_nodes.add("bare")
    name = f"kube-alone-{fake_nodes.run}"
    kube = start_kube_scheduler(host_processes, kubeconfig, tmp_path, name, [])
    for i in range(3):
        kubectl.apply(
            fake_nodes.pod(f"r{i}", namespace, _reclaimed(2000, "1Gi"), scheduler=name,
                           annotations=RECLAIMED)
        )  # fmt: skip
    placed = _placed(fake_nodes, namespace, 2, settle_s=5)
    assert kube.alive()
    assert sorted(placed.values()) == ["", big, big], placed
    # The agent publishes more room on small: the pending pod goes there.
    fake_nodes.patch_status(
        "node",
        small,
        {part: {names.RECLAIMED_MILLICPU: "3000"} for part in ("allocatable", "capacity")},
    )
    after = _placed(fake_nodes, namespace, 3)
    assert sorted(after.values()) == sorted([big, big, small]) and bare not in after.values()
