"""Beside the kubelet's static cpu manager: the node's kubelet is switched to
`cpuManagerPolicy: static` (reservedSystemCPUs "0") for this test and back to none at its
end, whatever happens. A Guaranteed pod with one whole cpu gets an exclusive cpu from the
kubelet; the agent reads it over the pod-resources socket, leaves it there and puts a
shared_cores pod on the other cpus, over several kubelet reconcile periods."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pykatalyst.api import names
from pykatalyst.topology.cpuset import CPUSet
from tests.e2e.conftest import WORKLOAD_IMAGE, Component, Kubectl, LocalNode, wait_until
from tests.e2e.pykatalyst_e2e import AGENT_CONFIG, SLEEP, container_cpus, running_pods, start_agent

RECONCILE_S = 10  # cpuManagerReconcilePeriod of scripts/cluster.sh
WATCH_S = 3 * RECONCILE_S
PERIOD_S = float(AGENT_CONFIG["period_s"])


def _pod(name: str, namespace: str, resources: dict[str, Any], level: str | None) -> Any:
    ann = {names.QOS_LEVEL_ANNOTATION: level} if level else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": ann},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "app",
                    "image": WORKLOAD_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", SLEEP],
                    "resources": resources,
                }
            ],
        },
    }


def _node_ready(kubectl: Kubectl, node: str) -> bool:
    conditions = kubectl.json("get", "node", node)["status"].get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


@pytest.fixture
def static_kubelet(kubectl: Kubectl, local_node: LocalNode) -> Iterator[Path]:
    """The kubelet under the static policy; its config file. Back to none afterwards."""
    if (os.cpu_count() or 0) < 2:
        pytest.skip("the static policy with reservedSystemCPUs 0 needs two cpus")
    try:
        local_node.kubelet_restart("static")
        local_node.kubelet_healthy()
        wait_until(
            "the node Ready under the static policy",
            lambda: _node_ready(kubectl, local_node.name),
            90,
        )
        yield local_node.state_dir / "kubelet-config.yaml"
    finally:
        local_node.kubelet_restart("none")
        local_node.kubelet_healthy()
        wait_until("the node Ready again", lambda: _node_ready(kubectl, local_node.name), 90)


def test_the_agent_keeps_the_kubelets_exclusive_cpu_and_puts_shared_pods_elsewhere(
    kubectl: Kubectl,
    local_node: LocalNode,
    namespace: str,
    components: Callable[..., Component],
    tmp_path: Path,
    static_kubelet: Path,
) -> None:
    sock = local_node.state_dir / "kubelet" / "pod-resources" / "kubelet.sock"
    agent = start_agent(
        components,
        tmp_path,
        local_node.name,
        "--kubelet-config",
        str(static_kubelet),
        config={"kubelet": {"pod_resources_socket": str(sock)}},
    )
    whole = {"cpu": "1", "memory": "64Mi"}
    kubectl.apply(_pod("pinned", namespace, {"requests": whole, "limits": whole}, None))
    shared = {"requests": {"memory": "64Mi"}, "limits": {"memory": "64Mi"}}
    kubectl.apply(_pod("web", namespace, shared, names.QOS_SHARED_CORES))
    live = wait_until(
        "the pods Running", lambda: running_pods(kubectl, namespace, ["pinned", "web"]), 120
    )
    assert live["pinned"]["status"]["qosClass"] == "Guaranteed"

    # The kubelet's own word on the cpu it gave: its checkpoint.
    state = json.loads((local_node.state_dir / "kubelet" / "cpu_manager_state").read_text())
    assert state["policyName"] == "static"
    given = CPUSet.parse(state["entries"][live["pinned"]["metadata"]["uid"]]["app"])
    assert len(given) == 1 and 0 not in given

    def cpus(name: str) -> CPUSet:
        return container_cpus(local_node, live[name])["app"][0]

    def settled() -> bool:
        pinned, web = cpus("pinned"), cpus("web")
        if pinned == given and web and web.isdisjoint(given):
            return True
        raise AssertionError(f"pinned on {pinned} (the kubelet gave {given}), web on {web}")

    # The kubelet applies its own assignment from its reconcile loop (every 10 s), after
    # the cpus of a pod that went before are freed; the agent's part takes a period or two.
    try:
        wait_until("the shared pod off the kubelet's cpu", settled, 60 + 10 * PERIOD_S, interval=1)
    except AssertionError as exc:
        # What the agent wrote, and what it read from the kubelet, say who moved the pod.
        raise AssertionError(f"{exc}\nthe agent's log ends:\n{agent.log()[-4000:]}") from None
    start = time.monotonic()
    seen: list[str] = []
    while time.monotonic() - start < WATCH_S:
        now = {n: cpus(n) for n in ("pinned", "web")}
        if now["pinned"] != given or not now["web"].isdisjoint(given):
            seen.append(f"{time.monotonic() - start:.0f}s: {now}")
        time.sleep(1)
    assert not seen, f"the agent and the kubelet fought over cpu {given}: {seen}"
    log = agent.log()
    assert "kubelet cpu manager policy static" in log
    assert f"{namespace}/pinned/app={given}" in log, log[-2000:]
    assert "cannot see the kubelet's cpu assignments" not in log
    # Katalyst's overcommit annotations on the CNR: the kubelet's policy and the cpus it
    # pins (the overcommit controller and the vpa controller read them)
    ann = kubectl.json("get", "kcnr", local_node.name)["metadata"].get("annotations") or {}
    assert ann.get(names.CNR_OVERCOMMIT_CPU_MANAGER_ANNOTATION) == "static", ann
    assert ann.get(names.CNR_OVERCOMMIT_MEMORY_MANAGER_ANNOTATION) == "None", ann
    assert int(ann.get(names.CNR_GUARANTEED_CPUS_ANNOTATION, "0")) >= 1, ann
