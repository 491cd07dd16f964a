"""Katalyst's colocation walk-through on a real node: the example pods created with kubectl,
scheduled by `katalyst scheduler`, run by the kubelet as real containers, and given their
cpus by `katalyst agent` — checked on the node the way Katalyst's get_cpuset.sh does."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pykatalyst.api import names
from pykatalyst.topology.cpuset import CPUSet
from tests.e2e.conftest import Component, Kubectl, LocalNode, wait_until
from tests.e2e.pykatalyst_e2e import (
    BURN,
    container_cpus,
    example,
    fit_to_node,
    pod_cgroup_knob,
    reclaimed_millicpu,
    running_pods,
    start_components,
)


def test_example_pods_get_their_cpus(
    kubectl: Kubectl,
    local_node: LocalNode,
    namespace: str,
    components: Callable[..., Component],
    tmp_path: Path,
) -> None:
    agent, scheduler, _ = start_components(components, tmp_path, local_node.name)
    pods = [
        fit_to_node(p, namespace)
        for f in (
            "dedicated-normal-pod.yaml",
            "shared-normal-pod.yaml",
            "reclaimed-normal-pod.yaml",
        )
        for p in example(f)
    ]
    second = fit_to_node(example("shared-normal-pod.yaml")[0], namespace)
    second["metadata"]["name"] = "shared-normal-pod-2"
    pods.append(second)
    for p in pods:
        kubectl.apply(p)
    names = [p["metadata"]["name"] for p in pods]
    live = wait_until(
        "the example pods Running", lambda: running_pods(kubectl, namespace, names), 120
    )
    assert {live[n]["spec"]["nodeName"] for n in names} == {local_node.name}

    def placed() -> dict[str, CPUSet] | None:
        cpus = {n: container_cpus(local_node, live[n])["stress"] for n in names}
        # The cgroup's cpuset and what the kernel lets the process run on agree.
        if any(cg != proc for cg, proc in cpus.values()):
            return None
        got = {n: c[0] for n, c in cpus.items()}
        dedicated = got["dedicated-normal-pod"]
        others = CPUSet().union(*(c for n, c in got.items() if n != "dedicated-normal-pod"))
        if len(dedicated) != 1 or dedicated & others:
            return None
        if got["shared-normal-pod"] != got["shared-normal-pod-2"]:
            return None
        return got

    got = wait_until("the agent's cpusets on the node", placed, 60, interval=1)
    # The dedicated pod's cpu is its own; both shared pods run on the one share pool.
    assert len(got["dedicated-normal-pod"]) == 1
    assert got["shared-normal-pod"] == got["shared-normal-pod-2"]
    # The reclaimed pod runs SCHED_IDLE under its cgroup (or the besteffort root).
    reclaimed = live["reclaimed-normal-pod"]
    assert reclaimed["status"]["qosClass"] == "BestEffort"
    idle = pod_cgroup_knob(reclaimed, "cpu", "cpu.idle")
    parent = Path("/sys/fs/cgroup/cpu/kubepods/besteffort/cpu.idle").read_text().strip()
    assert "1" in (idle, parent)
    assert agent.alive() and scheduler.alive()


def test_reclaimed_capacity_falls_while_a_shared_pod_burns_and_recovers(
    kubectl: Kubectl,
    local_node: LocalNode,
    namespace: str,
    components: Callable[..., Component],
    tmp_path: Path,
) -> None:
    """A dedicated pod takes one of the node's two cpus; the other is the share pool, which
    reclaimed pods may use while shared pods leave it idle. A shared pod that burns that cpu
    takes it back: the CNR's reclaimed cpu falls, and comes back when the pod goes."""
    agent, _, _ = start_components(components, tmp_path, local_node.name)
    node = local_node.name
    dedicated = fit_to_node(example("dedicated-normal-pod.yaml")[0], namespace)
    kubectl.apply(dedicated)
    name = dedicated["metadata"]["name"]
    wait_until("the dedicated pod Running", lambda: running_pods(kubectl, namespace, [name]), 120)

    def settled() -> tuple[int] | None:
        # Four samples over more than the agent's sliding window (6 s) that agree, once it has
        # published a figure from a full window: a window that still holds the figures from
        # before the dedicated pod had its cpu (the whole node reclaimable) is not the baseline.
        samples = []
        for _ in range(4):
            samples.append(reclaimed_millicpu(kubectl, node))
            time.sleep(2)
        steady = max(samples) - min(samples) <= 250
        return (min(samples),) if steady and min(samples) >= 400 else None

    try:
        (baseline,) = wait_until("a steady reclaimed capacity", settled, 90, interval=0)
    except AssertionError:
        baseline = reclaimed_millicpu(kubectl, node)
    if baseline < 400:
        pytest.skip(
            f"background load leaves only {baseline}m reclaimable on this node: too little "
            "to show a fall"
        )
    burner = fit_to_node(example("shared-normal-pod.yaml")[0], namespace, command=BURN)
    burner["metadata"]["name"] = "burner"
    for part in ("requests", "limits"):
        burner["spec"]["containers"][0]["resources"][part]["cpu"] = "1"
    kubectl.apply(burner)
    wait_until("the burner Running", lambda: running_pods(kubectl, namespace, ["burner"]), 120)
    (low,) = wait_until(
        "reclaimed capacity to fall while the shared pod burns",
        lambda: (v := reclaimed_millicpu(kubectl, node)) <= baseline - 300 and (v,),
        60,
        interval=1,
    )
    kubectl.run("delete", "pod", "burner", "-n", namespace, "--grace-period=1")
    seen: list[int] = []

    def recovered() -> tuple[int] | None:
        seen.append(reclaimed_millicpu(kubectl, node))
        return (seen[-1],) if seen[-1] >= baseline - 200 else None

    try:
        (back,) = wait_until("reclaimed capacity to recover", recovered, 90, interval=1)
    except AssertionError as exc:
        cnr = kubectl.json("get", "kcnr", node)
        terms = cnr["metadata"].get("annotations", {}).get(names.RECLAIMED_TERMS_ANNOTATION)
        raise AssertionError(
            f"{exc}: baseline {baseline}m, low {low}m, then {seen}; the agent "
            f"{'runs' if agent.alive() else 'has exited'}; the CNR's conditions "
            f"{cnr.get('status', {}).get('conditions')}; its terms {terms}; the agent's log "
            f"ends:\n{agent.log()[-4000:]}"
        ) from None
    assert low < back
