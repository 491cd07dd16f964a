"""`katalyst explain` on a real kube-apiserver: what the agent's reporter writes passes the
CRD's structural schema and is read back whole. A pod that the real kube-scheduler cannot
place is explained with kube-scheduler's own "0/N nodes are available" reasons."""

from __future__ import annotations

import contextlib
import json
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

from pykatalyst.agent.config import ReporterConfig
from pykatalyst.agent.reporter import NumaAllocation, PodCpus, Reporter, ReportInput
from pykatalyst.api import names
from pykatalyst.cluster.clock import RealClock
from pykatalyst.cluster.protocol import NotFound
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology
from tests.e2e.conftest import WORKLOAD_IMAGE, Kubectl, wait_until

GIB = 1 << 30


def explain(kubeconfig: str, *args: str) -> subprocess.CompletedProcess[str]:
    katalyst = str(Path(sys.executable).parent / "katalyst")
    return subprocess.run(
        [katalyst, "explain", *args, "--kubeconfig", kubeconfig, "-o", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )


def report_input() -> ReportInput:
    topo = CPUTopology.synthetic(2, 4, 2, memory_per_numa=16 * GIB)
    pools = {names.POOL_SHARE: CPUSet.parse("2-7"), names.POOL_RECLAIM: CPUSet.parse("8-15")}
    terms = {names.RECLAIMED_MILLICPU: {"value": 8.0, "reclaim_pool_cpus": 8}, "time": "now"}
    return ReportInput(
        topo,
        CPUSet.parse("0-1"),
        8.0,
        16 * GIB,
        {0: 4.0, 1: 4.0},
        {0: 8.0 * GIB, 1: 8.0 * GIB},
        [NumaAllocation("default/db/uid-db", 1, 2, GIB)],
        terms,
        pools,
        [PodCpus("default/web", "uid-web", names.POOL_SHARE, pools[names.POOL_SHARE])],
    )


def test_explain_node_reads_back_what_the_reporter_wrote(admin: Any, kubeconfig: str) -> None:
    node = f"e2e-explain-{secrets.token_hex(3)}"
    admin.create(names.NODE, {"metadata": {"name": node}})
    try:
        out = Reporter(node, admin, ReporterConfig()).report(report_input(), RealClock().now())
        assert "error" not in out, out
        result = explain(kubeconfig, "node", node)
        assert result.returncode == 0, result.stderr
        data = json.loads(result.stdout)
    finally:
        for kind in (names.CUSTOM_NODE_RESOURCE, names.NODE):
            with contextlib.suppress(NotFound):
                admin.delete(kind, node)
    assert data["reclaimed"]["cpu"]["allocatable"] == "8k"
    assert data["reclaimed"]["cpu"]["terms"]["reclaim_pool_cpus"] == 8
    pools = {p["name"]: p for p in data["pools"]}
    assert pools[names.POOL_SHARE]["cpuset"] == "2-7"
    assert pools[names.POOL_SHARE]["pods"] == ["default/web"]
    numa1 = next(z for z in data["numa"] if z["numa"] == "1")
    assert [a["consumer"] for a in numa1["allocations"]] == ["default/db/uid-db"]
    assert data["health"]["status"] == "True" and not data["health"]["silent"]
    assert data["problems"] == []


def test_a_missing_node_is_exit_code_1(kubeconfig: str) -> None:
    result = explain(kubeconfig, "node", f"e2e-none-{secrets.token_hex(3)}")
    assert result.returncode == 1
    assert "not found" in result.stderr and "Traceback" not in result.stderr


def test_explain_pod_shows_why_kube_scheduler_leaves_it_pending(
    kubectl: Kubectl, kubeconfig: str, namespace: str
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "too-big",
            "namespace": namespace,
            "annotations": {names.QOS_LEVEL_ANNOTATION: names.QOS_SHARED_CORES},
        },
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": WORKLOAD_IMAGE,
                    "resources": {"requests": {"cpu": "100000"}},
                }
            ]
        },
    }
    kubectl.apply(pod)

    def failed() -> bool:
        items = kubectl.json("get", "events", "-n", namespace)["items"]
        return any(e.get("reason") == "FailedScheduling" for e in items)

    wait_until("kube-scheduler's FailedScheduling Event", failed, timeout=90)
    result = explain(kubeconfig, "pod", f"{namespace}/too-big")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["qos"]["valid"] and data["qos"]["level"] == names.QOS_SHARED_CORES
    sched = data["scheduling"]
    assert sched["message"].startswith("0/") and "Insufficient cpu" in sched["message"]
    assert sched["component"] == "default-scheduler"
