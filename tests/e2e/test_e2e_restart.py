"""Restart safety on a real node: the agent killed with SIGKILL at random moments, ten
times over, and started again. No pod's cpus move, nothing is left half-applied, no cgroup
is created or left behind (the other lanes' pods come and go beside it: their cgroups are
not counted)."""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pykatalyst.topology.cpuset import CPUSet
from tests.e2e.conftest import Component, Kubectl, LocalNode, wait_until
from tests.e2e.pykatalyst_e2e import (
    container_cpus,
    example,
    fit_to_node,
    running_pods,
    start_agent,
    start_scheduler,
)

KILLS = 10


def _cpus(node: LocalNode, pods: dict[str, Any], names: list[str]) -> dict[str, CPUSet]:
    return {n: container_cpus(node, pods[n])["stress"][0] for n in names}


def _cgroups(ours: set[str]) -> set[str]:
    """The cgroups under kubepods, but for other tests' pods (the lanes beside this one
    start and stop pods on the node): every cgroup that is not a pod's, and ours (`ours`:
    the pods' uids)."""
    root = Path("/sys/fs/cgroup/cpuset/kubepods")
    out = set()
    for p in root.rglob("*"):
        if not p.is_dir():
            continue
        rel = p.relative_to(root)
        pod = next((part[3:] for part in rel.parts if part.startswith("pod")), None)
        if pod is None or pod.replace("_", "-") in ours:
            out.add(str(rel))
    return out


def test_kill_9_at_random_moments_moves_no_cpuset_and_leaks_no_cgroup(
    kubectl: Kubectl,
    local_node: LocalNode,
    namespace: str,
    components: Callable[..., Component],
    tmp_path: Path,
) -> None:
    seed = int(os.environ.get("PYKATALYST_E2E_SEED", str(int(time.time()))))
    rng = random.Random(seed)
    agent = start_agent(components, tmp_path, local_node.name)
    start_scheduler(components)
    pods = [fit_to_node(example("dedicated-normal-pod.yaml")[0], namespace)]
    pods.append(fit_to_node(example("shared-normal-pod.yaml")[0], namespace))
    for p in pods:
        kubectl.apply(p)
    names = [p["metadata"]["name"] for p in pods]
    live = wait_until("the pods Running", lambda: running_pods(kubectl, namespace, names), 120)

    def converged() -> dict[str, CPUSet] | None:
        got = _cpus(local_node, live, names)
        ded, shared = got[names[0]], got[names[1]]
        return got if len(ded) == 1 and not ded & shared else None

    placed = wait_until("the agent's cpusets", converged, 60, interval=1)
    ours = {live[n]["metadata"]["uid"] for n in names}
    before = _cgroups(ours)
    assert {f"pod{u}" for u in ours} <= {Path(c).name for c in before}, before
    for i in range(KILLS):
        agent.kill(signal.SIGKILL)
        assert _cpus(local_node, live, names) == placed, f"cpus moved after kill {i} (seed {seed})"
        agent = start_agent(components, tmp_path, local_node.name)
        time.sleep(rng.uniform(0.3, 4.0))
    agent.kill(signal.SIGKILL)
    agent = start_agent(components, tmp_path, local_node.name)
    time.sleep(3 * 2)  # three agent periods
    assert agent.alive()
    assert _cpus(local_node, live, names) == placed, f"cpus moved after restarts (seed {seed})"
    assert _cgroups(ours) == before, "the agent created or removed cgroups"
    leftovers = [p.name for p in tmp_path.iterdir() if ".tmp" in p.name]
    assert not leftovers, f"half-written files left behind: {leftovers}"
