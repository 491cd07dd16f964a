"""The kubelet does not undo the agent: over two minutes of kubelet housekeeping, a pod
update and a kubelet restart, the cpusets the agent wrote hold, or are put back within one
agent period; the node's reclaimed extended resources are there again after the restart."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from pykatalyst.api import names
from pykatalyst.topology.cpuset import CPUSet
from tests.e2e.conftest import Component, Kubectl, LocalNode, wait_until
from tests.e2e.pykatalyst_e2e import (
    AGENT_CONFIG,
    container_cpus,
    example,
    fit_to_node,
    running_pods,
    start_agent,
    start_scheduler,
)

WATCH_S = 130
PERIOD_S = float(AGENT_CONFIG["period_s"])


def test_cpusets_hold_through_kubelet_housekeeping_a_pod_update_and_a_restart(
    kubectl: Kubectl,
    local_node: LocalNode,
    namespace: str,
    components: Callable[..., Component],
    tmp_path: Path,
) -> None:
    start_agent(components, tmp_path, local_node.name)
    start_scheduler(components)
    pods = [
        fit_to_node(example("dedicated-normal-pod.yaml")[0], namespace),
        fit_to_node(example("shared-normal-pod.yaml")[0], namespace),
    ]
    for p in pods:
        kubectl.apply(p)
    names_ = [p["metadata"]["name"] for p in pods]
    live = wait_until("the pods Running", lambda: running_pods(kubectl, namespace, names_), 120)

    def cpus() -> dict[str, CPUSet]:
        return {n: container_cpus(local_node, live[n])["stress"][0] for n in names_}

    def converged() -> dict[str, CPUSet] | None:
        got = cpus()
        ded, shared = got[names_[0]], got[names_[1]]
        return got if len(ded) == 1 and not ded & shared else None

    placed = wait_until("the agent's cpusets", converged, 60, interval=1)
    start = time.monotonic()
    updated = restarted = False
    drifts: list[str] = []
    while time.monotonic() - start < WATCH_S:
        elapsed = time.monotonic() - start
        if not updated and elapsed > 30:
            kubectl.run("label", "pod", names_[1], "-n", namespace, "e2e/updated=yes")
            updated = True
        if not restarted and elapsed > 60:
            local_node.kubelet_restart()
            restarted = True
        try:
            now = cpus()
        except AssertionError:  # the sandbox is briefly not ready while the kubelet restarts
            time.sleep(1)
            continue
        if now != placed:
            drifts.append(f"{elapsed:.0f}s: {now}")
            # Put back within one agent period (plus the time to read it back).
            wait_until("the agent to restore the cpusets", lambda: cpus() == placed, 3 * PERIOD_S)
        time.sleep(1)
    assert updated and restarted
    assert cpus() == placed, f"cpus moved for good; drifts seen: {drifts}"

    def kubelet_ready() -> bool:
        node = kubectl.json("get", "node", local_node.name)
        conditions = node["status"].get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    # The restarted kubelet runs beside the agent's knobs (it writes its QoS cgroups first).
    local_node.kubelet_healthy()
    wait_until("the node Ready after the kubelet restart", kubelet_ready, 60)

    def published() -> bool:
        node = kubectl.json("get", "node", local_node.name)
        return names.RECLAIMED_MILLICPU in node["status"].get("allocatable", {})

    wait_until("the node's reclaimed resources after the restart", published, 10 * PERIOD_S)
