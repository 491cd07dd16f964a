"""Churn on the real node: waves of shared and reclaimed pods created and deleted, with the
agent, the scheduler and the controller in the loop. Nothing leaks: no pod cgroup, no
checkpoint entry, no pool left for a pod that is gone; the agent's memory stays bounded
and its cpusets for a dedicated pod never move. The agent's resident memory per wave is
printed (see docs/e2e.md)."""

from __future__ import annotations

import copy
import json
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pykatalyst.api import names
from pykatalyst.runtime.agent import AGENT_PORT
from tests.e2e.conftest import Component, Kubectl, LocalNode, wait_until
from tests.e2e.pykatalyst_e2e import (
    container_cpus,
    example,
    fit_to_node,
    running_pods,
    start_components,
)

pytestmark = pytest.mark.timeout(900)  # three waves of 40 pods on a loaded 2-cpu machine

WAVES = 3
PODS_PER_WAVE = 40  # with the node's own pods, about a third of the kubelet's 110
RSS_GROWTH_MIB = 64  # what the agent may grow by from the first wave to the last


def _rss_mib(agent: Component) -> float:
    assert agent.proc is not None
    for line in Path(f"/proc/{agent.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _settled(kubectl: Kubectl, namespace: str, names_: list[str]) -> dict[str, Any]:
    """The wave's pods once each is Running, or is a reclaimed pod the kubelet refused at
    admission (`OutOf<reclaimed resource>`: the node's reclaimed capacity fell between the
    scheduler's choice and the kubelet's check, as it may on a busy node; such a pod goes
    through the same creation and deletion). A shared pod refused fails the test."""
    pods = {p["metadata"]["name"]: p for p in kubectl.json("get", "pods", "-n", namespace)["items"]}
    waiting = []
    for n in names_:
        status = pods[n]["status"] if n in pods else {}
        if status.get("phase") == "Failed":
            reason = str(status.get("reason", ""))
            level = (pods[n]["metadata"].get("annotations") or {}).get(names.QOS_LEVEL_ANNOTATION)
            assert reason.startswith("OutOf") and level == names.QOS_RECLAIMED_CORES, (
                f"{n} failed: {reason}: {status.get('message')}"
            )
            continue
        if status.get("phase") != "Running" or not all(
            cs.get("ready") for cs in status.get("containerStatuses", [])
        ):
            waiting.append(n)
    if waiting:
        running_pods(kubectl, namespace, waiting)  # raises, saying where each one is
    return pods


def _reconcile_totals() -> tuple[float, float]:
    """The agent's reconcile histogram, all tickers together: (seconds, count)."""
    from prometheus_client.parser import text_string_to_metric_families

    url = f"http://127.0.0.1:{AGENT_PORT}/metrics"
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    total = count = 0.0
    for family in text_string_to_metric_families(text):
        if family.name != "katalyst_agent_reconcile_duration_seconds":
            continue
        for sample in family.samples:
            if sample.name.endswith("_sum"):
                total += sample.value
            elif sample.name.endswith("_count"):
                count += sample.value
    return total, count


def _pod_cgroups(uids: set[str]) -> set[str]:
    """The pod cgroups left for these pods (the kubelet names them pod<uid>, with
    underscores under the systemd driver). Pods of other tests' namespaces, still being
    deleted as this test runs, do not count."""
    root = Path("/sys/fs/cgroup/cpuset/kubepods")
    wanted = {f"pod{u}" for u in uids} | {f"pod{u.replace('-', '_')}" for u in uids}
    return {p.name for p in root.rglob("pod*") if p.is_dir() and p.name in wanted}


def _checkpoint_keys(path: Path, uids: set[str]) -> set[str]:
    """The cgroups the agent's enforcer keeps desired knobs for (its checkpoint) that
    belong to these pods."""
    if not path.exists():
        return set()
    keys = set(json.loads(path.read_text()).get("desired") or {})
    forms = uids | {u.replace("-", "_") for u in uids}
    return {k for k in keys if any(f in k for f in forms)}


def _left(what: str, current: Callable[[], set[str]], timeout: float) -> None:
    """Wait until nothing of `what` is left; fail listing what still is."""
    left: set[str] = set()

    def gone() -> bool:
        left.clear()
        left.update(current())
        return not left

    try:
        wait_until(what, gone, timeout, 2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; still there: {sorted(left)}") from None


def _wave(namespace: str, wave: int) -> list[dict[str, Any]]:
    shared = fit_to_node(example("shared-normal-pod.yaml")[0], namespace)
    reclaimed = fit_to_node(example("reclaimed-normal-pod.yaml")[0], namespace)
    pods = []
    for i in range(PODS_PER_WAVE):
        base = reclaimed if i % 4 == 0 else shared
        pod = copy.deepcopy(base)
        pod["metadata"]["name"] = f"churn-{wave}-{i}"
        pod["metadata"]["labels"] = {"churn": str(wave)}
        for c in pod["spec"]["containers"]:
            res = c["resources"]
            for part in ("requests", "limits"):
                for key in list(res.get(part, {})):
                    if key == "cpu":
                        res[part][key] = "10m"
                    elif key in ("memory", names.RECLAIMED_MEMORY):
                        res[part][key] = "16Mi"
                    elif key == names.RECLAIMED_MILLICPU:
                        res[part][key] = "20"
        pods.append(pod)
    return pods


def test_waves_of_pods_leak_nothing_and_the_agent_stays_bounded(
    kubectl: Kubectl,
    local_node: LocalNode,
    namespace: str,
    components: Callable[..., Component],
    tmp_path: Path,
) -> None:
    agent, _, _ = start_components(components, tmp_path, local_node.name)
    dedicated = fit_to_node(example("dedicated-normal-pod.yaml")[0], namespace)
    kubectl.apply(dedicated)
    name = dedicated["metadata"]["name"]
    live = wait_until("the dedicated pod", lambda: running_pods(kubectl, namespace, [name]), 120)
    wait_until(
        "its own cpu",
        lambda: len(container_cpus(local_node, live[name])["stress"][0]) == 1,
        60,
        interval=1,
    )
    placed = container_cpus(local_node, live[name])["stress"][0]
    checkpoint = tmp_path / "agent-enforcer.json"
    churned: set[str] = set()
    refused_total = 0
    rss: list[float] = []
    reconcile_ms: list[float] = []
    for wave in range(WAVES):
        before = _reconcile_totals()
        pods = _wave(namespace, wave)
        kubectl.apply({"apiVersion": "v1", "kind": "List", "items": pods})
        names_ = [p["metadata"]["name"] for p in pods]
        running = wait_until(
            f"wave {wave} Running", lambda n=names_: _settled(kubectl, namespace, n), 420, 3
        )
        churned |= {running[n]["metadata"]["uid"] for n in names_}
        refused = [n for n in names_ if running[n]["status"].get("phase") == "Failed"]
        refused_total += len(refused)
        time.sleep(6)  # three agent periods with every pod of the wave on the node
        rss.append(_rss_mib(agent))
        after = _reconcile_totals()
        reconcile_ms.append(1000 * (after[0] - before[0]) / max(after[1] - before[1], 1))
        assert container_cpus(local_node, live[name])["stress"][0] == placed
        kubectl.run(
            "delete", "pods", "-n", namespace, "-l", f"churn={wave}",
            "--grace-period=0", "--force", "--wait=true", "--timeout=300s",
        )  # fmt: skip
        assert agent.alive(), agent.log()[-2000:]
    _left("the churned pods' cgroups gone", lambda: _pod_cgroups(churned), 180)
    _left(
        "the agent's checkpoint without the churned pods",
        lambda: _checkpoint_keys(checkpoint, churned),
        60,
    )
    assert container_cpus(local_node, live[name])["stress"][0] == placed
    print(f"\nagent RSS after each wave of {PODS_PER_WAVE} pods: {[f'{r:.0f} MiB' for r in rss]}")
    print(f"agent reconcile, mean per wave: {[f'{ms:.0f} ms' for ms in reconcile_ms]}")
    print(f"reclaimed pods the kubelet refused at admission: {refused_total}")
    assert rss[-1] - rss[0] <= RSS_GROWTH_MIB, f"the agent grew: {rss}"
