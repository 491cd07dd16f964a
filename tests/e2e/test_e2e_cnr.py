"""The CNR on a real node, as Katalyst's agent writes it: the topology policy from the
kubelet's own configuration file, NUMA memory net of the reserve, reclaimed figures per
NUMA zone adding up to the node's, and every pod the agent places in the zones'
allocations with the cpus its containers run on. Runs `katalyst agent` on the node: take
the node lock."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from pykatalyst.agent.kubelet_cpu import parse_kubelet_config
from pykatalyst.api import names
from pykatalyst.api.quantity import Quantity
from pykatalyst.topology.machine import CPUTopology
from tests.e2e.conftest import WORKLOAD_IMAGE, Component, Kubectl, LocalNode, wait_until
from tests.e2e.pykatalyst_e2e import SLEEP, container_cpus, running_pods, start_agent

GIB = 1 << 30


def _pod(name: str, namespace: str, node: str, level: str, cpu: str | None) -> Any:
    res: dict[str, Any] = {}
    if cpu is not None:
        res = {"requests": {"cpu": cpu, "memory": "64Mi"}, "limits": {"memory": "64Mi"}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {names.QOS_LEVEL_ANNOTATION: level},
        },
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "app",
                    "image": WORKLOAD_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", SLEEP],
                    "resources": res,
                }
            ],
        },
    }


def _zones(cnr: dict[str, Any]) -> list[dict[str, Any]]:
    return [z for s in cnr["status"]["topologyZone"] for z in s["children"]]


def test_the_cnr_says_what_katalysts_agent_would(
    kubectl: Kubectl,
    local_node: LocalNode,
    namespace: str,
    components: Callable[..., Component],
    tmp_path: Path,
) -> None:
    real = local_node.state_dir / "kubelet-config.yaml"
    text = real.read_text()
    # The running kubelet's own file reads cleanly; the cluster's kubelet runs
    # topologyManagerPolicy none, which Katalyst publishes as None.
    kubelet = parse_kubelet_config(text, str(real))
    assert kubelet.topology_policy == names.TOPOLOGY_POLICY_NONE
    # The agent reads a copy that asks for single-numa-node at pod scope and reserves
    # memory, so that what it publishes can only come from the file.
    doc = yaml.safe_load(text)
    doc.update(
        topologyManagerPolicy="single-numa-node",
        topologyManagerScope="pod",
        kubeReserved={"memory": "1Gi"},
        systemReserved={"memory": "1Gi"},
    )
    copy = tmp_path / "kubelet-config.yaml"
    copy.write_text(yaml.safe_dump(doc))
    start_agent(
        components,
        tmp_path,
        local_node.name,
        "--kubelet-config",
        str(copy),
        config={
            "memory": {"use_kubelet_reserved": True},
            "reporter": {
                "period_s": 2,
                "headroom_sync_period_s": 2,
                "sliding_window_s": 6,
                "min_reclaimed_for_report_cpu": 0,
                "min_reclaimed_for_report_memory": 0,
                "enable_pod_resources_filter": False,
            },
        },
    )
    kubectl.apply(_pod("web", namespace, local_node.name, names.QOS_SHARED_CORES, "100m"))
    kubectl.apply(_pod("batch", namespace, local_node.name, names.QOS_RECLAIMED_CORES, None))
    live = wait_until(
        "the pods Running", lambda: running_pods(kubectl, namespace, ["web", "batch"]), 120
    )
    uids = {n: live[n]["metadata"]["uid"] for n in ("web", "batch")}
    topo = CPUTopology.from_sysfs()
    per_numa_reserve = math.ceil(2 / topo.num_numa_nodes) * GIB

    def published() -> dict[str, Any] | None:
        cnr = kubectl.json("get", "kcnr", local_node.name)
        status = cnr.get("status") or {}
        if status.get("topologyPolicy") != names.TOPOLOGY_POLICY_SINGLE_NUMA_POD:
            return None
        # The reclaimed figures of this agent (not those an earlier one left behind) once
        # its smoothing window has filled.
        if any(names.RECLAIMED_MILLICPU not in z["resources"]["capacity"] for z in _zones(cnr)):
            return None
        consumers = {
            a["consumer"].rsplit("/", 1)[-1] for z in _zones(cnr) for a in z.get("allocations", [])
        }
        return cnr if set(uids.values()) <= consumers else None

    cnr = wait_until("the agent's CNR", published, 90, interval=2)
    zones = _zones(cnr)
    for z in zones:
        cap = Quantity.parse(z["resources"]["capacity"][names.RESOURCE_MEMORY]).value()
        alloc = Quantity.parse(z["resources"]["allocatable"][names.RESOURCE_MEMORY]).value()
        assert alloc == max(cap - per_numa_reserve, 0)
    for side in ("allocatable", "capacity"):
        node_total = cnr["status"]["resources"][side]
        for res in (names.RECLAIMED_MILLICPU, names.RECLAIMED_MEMORY):
            zone_sum = sum(Quantity.parse(z["resources"][side][res]).milli_value() for z in zones)
            assert zone_sum == Quantity.parse(node_total[res]).milli_value()

    # Each pod is listed on the zones its container runs on, with those cpus.
    def listed(name: str) -> dict[str, int]:
        fresh = kubectl.json("get", "kcnr", local_node.name)
        out = {}
        for z in _zones(fresh):
            for a in z.get("allocations", []):
                if a["consumer"] == f"{namespace}/{name}/{uids[name]}":
                    out[z["name"]] = int(Quantity.parse(a["requests"]["cpu"]).value())
        return out

    def agrees(name: str) -> bool:
        cpus = container_cpus(local_node, live[name])["app"][0]
        expected = {
            str(n): len(cpus & topo.cpus_in_numa(n))
            for n in topo.numa_nodes
            if cpus & topo.cpus_in_numa(n)
        }
        return listed(name) == expected and bool(expected)

    for name in ("web", "batch"):
        wait_until(f"{name}'s allocation as its cpus", lambda n=name: agrees(n), 30, interval=2)
