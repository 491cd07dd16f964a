"""The kubelet does not undo the agent: through the kubelet's housekeeping (every pod resynced
twice, what two minutes give at the kubelet's default one-minute sync), a pod update and a
kubelet restart (each followed by two more resyncs of every pod), the cpusets the agent wrote
hold, or are put back within one agent period; the node's reclaimed extended resources are
there again after the restart."""

from __future__ import annotations

import subprocess
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

PERIOD_S = float(AGENT_CONFIG["period_s"])
# Resyncs of every pod on the node the watch waits for in each phase (the kubelet's periodic
# SyncPod rewrites the pods' cgroups: it is the housekeeping that could undo the agent).
SYNCS_PER_POD = 2
# The cluster's kubelet resyncs every 10 s (syncFrequency of scripts/cluster.sh): a phase
# that sees no resync for this long is a kubelet that stopped housekeeping, not a slow one.
PHASE_TIMEOUT_S = 120
KUBELET_PORT = 10250  # port of scripts/cluster.sh's kubelet config
SYNC_COUNT = 'kubelet_pod_worker_duration_seconds_count{operation_type="sync"}'


def kubelet_syncs(node: LocalNode) -> int | None:
    """How many pod syncs this kubelet process has finished, from its own /metrics (None
    while it does not answer). Read on the node: the API server does not proxy to a
    loopback address."""
    pki = node.state_dir / "pki"
    proc = subprocess.run(
        ["curl", "-sf", "--max-time", "10", "--cacert", str(pki / "ca.crt"),
         "--cert", str(pki / "admin.crt"), "--key", str(pki / "admin.key"),
         f"https://127.0.0.1:{KUBELET_PORT}/metrics"],
        capture_output=True,
        text=True,
    )  # fmt: skip
    if proc.returncode != 0:
        return None
    for line in proc.stdout.splitlines():
        if line.startswith(SYNC_COUNT):
            return int(float(line.split()[-1]))
    return 0


def pods_on_node(kubectl: Kubectl, node: str) -> int:
    listed = kubectl.json("get", "pods", "-A", "--field-selector", f"spec.nodeName={node}")
    return sum(p["status"].get("phase") == "Running" for p in listed["items"])


def hold_through_resyncs(
    kubectl: Kubectl,
    node: LocalNode,
    what: str,
    base: int,
    cpus: Callable[[], dict[str, CPUSet]],
    placed: dict[str, CPUSet],
    drifts: list[str],
) -> None:
    """Read the cpusets every second until the kubelet has resynced every pod on the node
    SYNCS_PER_POD times since its sync count stood at `base`; where they moved (noted in
    `drifts`), the agent must put them back within one agent period (plus the time to read
    them back)."""
    wanted = base + SYNCS_PER_POD * pods_on_node(kubectl, node.name)
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    while (kubelet_syncs(node) or 0) < wanted:
        assert time.monotonic() < deadline, f"no {wanted - base} pod resyncs {what}"
        try:
            now = cpus()
        except AssertionError:  # the sandbox is briefly not ready while the kubelet restarts
            time.sleep(1)
            continue
        if now != placed:
            drifts.append(f"{what}: {now}")
            wait_until(
                f"the agent to restore the cpusets {what}",
                lambda: cpus() == placed,
                3 * PERIOD_S,
            )
        time.sleep(1)


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
    drifts: list[str] = []

    def watch(what: str, base: int) -> None:
        hold_through_resyncs(kubectl, local_node, what, base, cpus, placed, drifts)

    base = wait_until("the kubelet's metrics", lambda: kubelet_syncs(local_node))
    watch("of the kubelet's housekeeping", base)
    base = kubelet_syncs(local_node) or 0
    kubectl.run("label", "pod", names_[1], "-n", namespace, "e2e/updated=yes")
    watch("after the pod update", base)
    local_node.kubelet_restart()
    # A new kubelet process counts from zero; its first sync of each pod is a "create".
    watch("after the kubelet restart", 0)
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
