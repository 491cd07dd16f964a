"""The backstop on a real cluster: when the agent stops heartbeating, `katalyst controller`
taints the node's CNR against new reclaimed pods, then evicts the reclaimed pods through
the real `pods/eviction` subresource — which honours a PodDisruptionBudget — and clears
the taint once the agent is back."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pykatalyst.api import names
from pykatalyst.controllers.backstop import BACKSTOP_TAINT
from tests.e2e.conftest import Component, Kubectl, LocalNode, component_kubeconfig, wait_until
from tests.e2e.pykatalyst_e2e import (
    example,
    fit_to_node,
    node_controllers,
    running_pods,
    start_agent,
    start_scheduler,
)


def _backstop_tainted(kubectl: Kubectl, node: str) -> bool:
    cnr = kubectl.json("get", "kcnr", node)
    return any(t.get("key") == BACKSTOP_TAINT.key for t in cnr.get("spec", {}).get("taints") or [])


def _pods(kubectl: Kubectl, namespace: str) -> dict[str, Any]:
    items = kubectl.json("get", "pods", "-n", namespace)["items"]
    return {p["metadata"]["name"]: p for p in items if not p["metadata"].get("deletionTimestamp")}


def test_silent_agent_taints_then_evicts_within_the_pdb_and_clears_when_back(
    kubectl: Kubectl,
    local_node: LocalNode,
    namespace: str,
    components: Callable[..., Component],
    tmp_path: Path,
) -> None:
    node = local_node.name
    agent = start_agent(components, tmp_path, node)
    start_scheduler(components)
    batch: list[str] = []
    for i in range(2):
        pod = fit_to_node(example("reclaimed-normal-pod.yaml")[0], namespace)
        pod["metadata"]["name"] = f"batch-{i}"
        pod["metadata"].setdefault("labels", {})["app"] = "batch"
        # Small: both must fit in what the node's background load leaves reclaimable.
        res = pod["spec"]["containers"][0]["resources"]
        for part in ("requests", "limits"):
            res[part][names.RECLAIMED_MILLICPU] = "50"
        kubectl.apply(pod)
        batch.append(pod["metadata"]["name"])
    wait_until("the reclaimed pods Running", lambda: running_pods(kubectl, namespace, batch), 120)
    kubectl.apply(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "batch", "namespace": namespace},
            # An integer minAvailable: the disruption controller counts bare pods for it
            # (maxUnavailable needs pods with a scalable controller).
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "batch"}}},
        }
    )
    wait_until(
        "the PDB to be observed",
        lambda: (
            kubectl.json("get", "pdb", "batch", "-n", namespace)
            .get("status", {})
            .get("expectedPods")
            == 2
        ),
        30,
    )

    agent.stop()
    controller = components(
        "controller",
        "controller",
        "--kubeconfig",
        component_kubeconfig("controller"),
        *node_controllers(node, "lifecycle,backstop"),
        "--taint-after",
        "8s",
        "--evict-after",
        "16s",
        "--interval",
        "2s",
    )
    wait_until("the backstop's CNR taint", lambda: _backstop_tainted(kubectl, node), 60)

    # Past evict-after, the PDB allows no disruption: the real API server refuses (429),
    # and the controller says so (it tries one pod at a time, within its rate limit).
    def refused() -> bool:
        lines = controller.log().splitlines()
        return any(f"failed: evict {namespace}/" in ln and "(429)" in ln for ln in lines)

    wait_until("an eviction refused by the PDB", refused, 60)
    assert set(_pods(kubectl, namespace)) == set(batch), "the PDB did not hold the evictions"

    def warned() -> bool:
        events = kubectl.json("get", "events", "-n", namespace)["items"]
        return any(
            e["involvedObject"].get("name") in batch for e in events if e.get("type") == "Warning"
        )

    # The controller's Event is written after the refusal it logs: wait for it.
    wait_until("a Warning Event on a pod the PDB kept", warned, 30)

    kubectl.run("delete", "pdb", "batch", "-n", namespace)
    wait_until("the reclaimed pods evicted", lambda: not _pods(kubectl, namespace), 90)

    start_agent(components, tmp_path, node)
    wait_until("the CNR taint cleared", lambda: not _backstop_tainted(kubectl, node), 60)
