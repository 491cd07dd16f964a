"""Faults on the real node: the API server, etcd, the kubelet (with and without its state
checkpoints) and containerd stopped and started again, and the agent started while the API
server is down, and the agent killed by its memory limit and started again, with dedicated,
shared and reclaimed pods running under the agent, the scheduler and the controller.

After each fault and after recovery: no dedicated pod's cpuset moves, reclaimed pods never
run on a dedicated pod's cpus, the agent keeps running and enforcing what it last knew, and
its CNR heartbeat comes back without a manual step; at the end no Event was written twice
instead of counted, and the CNR holds still. The recovery times are printed (see
docs/e2e.md for the figures)."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from pykatalyst.api.names import (
    AGENT_COMPONENT,
    CONTROLLER_COMPONENT,
    RECLAIMED_MILLICPU,
    SCHEDULER_COMPONENT,
)
from pykatalyst.api.quantity import Quantity
from pykatalyst.topology.cpuset import CPUSet
from tests.e2e.conftest import (
    REPO,
    Component,
    Kubectl,
    LocalNode,
    controller_manager_state,
    has_default_service_account,
    wait_until,
)
from tests.e2e.pykatalyst_e2e import (
    example,
    fit_to_node,
    running_pods,
    start_agent,
    start_components,
)

pytestmark = pytest.mark.timeout(1200)

CLUSTER = REPO / "scripts" / "cluster.sh"
APISERVER_DOWN_S = 60  # how long the API server stays away (several agent periods and syncs)


def _cluster(*args: str) -> None:
    done = subprocess.run(
        ["bash", str(CLUSTER), *args], timeout=180, capture_output=True, text=True
    )
    assert done.returncode == 0, f"cluster.sh {' '.join(args)}: {done.stderr[-2000:]}"


def _logs(node: LocalNode, *names: str) -> str:
    """The last lines of these daemons' logs, for a failure's message."""
    out = []
    for name in names:
        path = node.state_dir / "logs" / f"{name}.log"
        lines = path.read_text(errors="replace").splitlines()[-15:] if path.exists() else []
        out.append(f"--- {name}.log\n" + "\n".join(lines))
    return "\n".join(out)


def _answers(kubectl: Kubectl) -> bool:
    try:
        return kubectl.run("get", "--raw", "/readyz", check=False, timeout=15).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def _api_ready(kubectl: Kubectl, node: LocalNode, what: str) -> None:
    """The API server answers /readyz again, or the test fails with its log."""
    try:
        wait_until(
            f"the API server ready after {what}",
            lambda: _answers(kubectl),
            180,
            interval=1,
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_logs(node, 'kube-apiserver', 'etcd')}") from None


def _leave_the_control_plane_working(kubectl: Kubectl) -> None:
    """The tests after this one need a controller manager that acts: start it again where it
    exited (`cluster.sh heal`), and where it runs but no longer makes a new namespace's
    ServiceAccount, restart it once. What was needed is printed, since it is upstream's
    behaviour under these faults, not the agent's."""
    healed = subprocess.run(
        ["bash", str(CLUSTER), "heal"], timeout=180, capture_output=True, text=True
    )
    if "had exited" in healed.stderr:
        print(f"\nafter the faults: {healed.stderr.strip()}")
    probe = f"faults-probe-{int(time.time())}"
    kubectl.run("create", "namespace", probe)
    try:
        try:
            wait_until(
                "the controller manager to act after the faults",
                lambda: has_default_service_account(kubectl, probe),
                60,
            )
        except AssertionError:
            print(
                f"\nafter the faults the controller manager made no ServiceAccount in 60 s:"
                f"\n{controller_manager_state()}\nrestarting it"
            )
            _cluster("pause", "kube-controller-manager")
            _cluster("resume", "kube-controller-manager")
            _cluster("heal")
            wait_until(
                "the restarted controller manager to act",
                lambda: has_default_service_account(kubectl, probe),
                90,
            )
    finally:
        kubectl.run("delete", "namespace", probe, "--wait=false", check=False)


def _cpuset_files(node: LocalNode, pods: dict[str, Any]) -> dict[str, Path]:
    """Each pod's container cpuset file, found once through crictl: read directly after,
    so the checks need neither the API server nor containerd."""
    out = {}
    for name, pod in pods.items():
        uid = pod["metadata"]["uid"]
        sandboxes = node.crictl_json("pods", "--label", f"io.kubernetes.pod.uid={uid}")
        (sandbox,) = [p["id"] for p in sandboxes["items"] if p["state"] == "SANDBOX_READY"]
        (container,) = node.crictl_json("ps", "--pod", sandbox)["containers"]
        info = node.crictl_json("inspect", container["id"])
        path = info["info"]["runtimeSpec"]["linux"]["cgroupsPath"].lstrip("/")
        out[name] = Path("/sys/fs/cgroup/cpuset") / path / "cpuset.cpus"
    return out


def _cpus(files: dict[str, Path]) -> dict[str, CPUSet]:
    return {n: CPUSet.parse(f.read_text()) for n, f in files.items()}


def _heartbeat(kubectl: Kubectl, node: str) -> float:
    cnr = kubectl.json("get", "kcnr", node)
    for cond in (cnr.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "AgentReady" and cond.get("lastHeartbeatTime"):
            stamp = str(cond["lastHeartbeatTime"]).replace("Z", "+00:00")
            return datetime.fromisoformat(stamp).timestamp()
    return 0.0


class Invariants:
    """What must hold through every fault, checked on the node itself (no API server)."""

    def __init__(self, files: dict[str, Path], dedicated: str, reclaimed: str):
        self.files, self.dedicated, self.reclaimed = files, dedicated, reclaimed
        self.placed = _cpus(files)[dedicated]

    def check(self, when: str, agent: Component | None = None) -> None:
        got = _cpus(self.files)
        assert got[self.dedicated] == self.placed, f"{when}: the dedicated pod's cpus moved"
        overlap = got[self.reclaimed] & self.placed
        assert not overlap, f"{when}: the reclaimed pod runs on dedicated cpus {overlap}"
        if agent is not None:
            assert agent.alive(), f"{when}: the agent stopped:\n{agent.log()[-2000:]}"

    def hold_for(self, seconds: float, when: str, agent: Component) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.check(when, agent)
            time.sleep(3)


def _recovered(
    kubectl: Kubectl, node: LocalNode, since: float, what: str, agent: Component
) -> float:
    """Seconds from `since` (wall clock) until the agent's heartbeat is newer than it."""
    _api_ready(kubectl, node, what)
    try:
        wait_until(
            f"the agent's CNR heartbeat after {what}",
            lambda: _heartbeat(kubectl, node.name) > since,
            180,
            interval=1,
        )
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}\n--- agent\n{agent.log()[-3000:]}\n{_logs(node, 'kube-apiserver')}"
        ) from None
    return time.time() - since


def _node_reclaimed_millicpu(kubectl: Kubectl, node: str) -> int:
    alloc = kubectl.json("get", "node", node)["status"].get("allocatable") or {}
    return Quantity.parse(str(alloc.get(RECLAIMED_MILLICPU, "0"))).value()


def _memory_cgroup(name: str) -> tuple[Path, str, str]:
    """A memory cgroup's folder and its limit and usage files (v1, else v2)."""
    v1 = Path("/sys/fs/cgroup/memory")
    if v1.is_dir():
        return v1 / name, "memory.limit_in_bytes", "memory.usage_in_bytes"
    return Path("/sys/fs/cgroup") / name, "memory.max", "memory.current"


def _oom_kill(agent: Component) -> int:
    """Kill the running agent as its memory limit would: its process moved into a memory
    cgroup of its own (its pages charged there where the kernel still moves charges, else
    only what it allocates from then on), whose limit is then lowered to what it uses and
    below, a MiB at a time, until the kernel's OOM killer takes it. Returns the cgroup's
    OOM-kill count."""
    assert agent.proc is not None and agent.alive()
    cg, limit, usage = _memory_cgroup(f"pykatalyst-e2e-oom-{agent.proc.pid}")
    cg.mkdir()
    try:
        with contextlib.suppress(OSError):  # v1 before 6.x: its pages follow it
            (cg / "memory.move_charge_at_immigrate").write_text("3")
        (cg / "cgroup.procs").write_text(str(agent.proc.pid))
        cap = int((cg / usage).read_text())
        deadline = time.monotonic() + 120
        while agent.alive() and time.monotonic() < deadline:
            with contextlib.suppress(OSError):  # busy: nothing more to reclaim yet
                (cg / limit).write_text(str(cap))
            cap = max(cap - (1 << 20), 256 << 10)
            time.sleep(0.5)
        assert agent.proc.wait(timeout=30) == -signal.SIGKILL, agent.log()[-2000:]
        return _oom_kills(cg)
    finally:
        with contextlib.suppress(OSError):
            cg.rmdir()


def _oom_kills(cg: Path) -> int:
    for name in ("memory.oom_control", "memory.events"):
        if (cg / name).exists():
            for line in (cg / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    return 0


EVENT_SOURCES = (AGENT_COMPONENT, SCHEDULER_COMPONENT, CONTROLLER_COMPONENT)


def _duplicated_events(kubectl: Kubectl, namespace: str, node: str) -> list[str]:
    """Events pykatalyst's components wrote twice instead of counting the second time:
    the same object, reason, message and writer in two Event objects."""
    seen: dict[tuple[str, ...], int] = {}
    for ns in (namespace, "default"):
        for ev in kubectl.json("get", "events", "-n", ns)["items"]:
            source = ev.get("source") or {}
            if source.get("component") not in EVENT_SOURCES:
                continue
            obj = ev.get("involvedObject") or {}
            key = (
                str(obj.get("kind")), str(obj.get("name")), str(obj.get("uid")),
                str(ev.get("reason")), str(ev.get("message")),
                str(source.get("component")), str(source.get("host", "")),
            )  # fmt: skip
            seen[key] = seen.get(key, 0) + 1
    return [f"{n}x {' / '.join(k)}" for k, n in seen.items() if n > 1]


def _cnr_zones(kubectl: Kubectl, node: str) -> str:
    """The CNR's topology: its zones, their resources and the pods' allocations in them,
    without the reclaimed figures, which follow the node's live usage."""
    status = kubectl.json("get", "kcnr", node).get("status") or {}
    return json.dumps(_without_reclaimed(status.get("topologyZone") or []), sort_keys=True)


def _without_reclaimed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_reclaimed(v) for k, v in value.items() if "reclaimed" not in k}
    if isinstance(value, list):
        return [_without_reclaimed(v) for v in value]
    return value


def _assert_cnr_steady(kubectl: Kubectl, node: str, seconds: float) -> None:
    """After recovery the CNR holds still: the same zones and allocations every report."""
    first = _cnr_zones(kubectl, node)
    assert "allocations" in first, f"after recovery the CNR lists no allocation:\n{first}"
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(2)
        zones = _cnr_zones(kubectl, node)
        assert zones == first, f"after recovery the CNR's zones changed:\n{first}\n{zones}"


def _setup(
    kubectl: Kubectl,
    local_node: LocalNode,
    namespace: str,
    components: Callable[..., Component],
    tmp_path: Path,
) -> tuple[Component, Invariants]:
    agent, _, _ = start_components(components, tmp_path, local_node.name)
    manifests = [
        fit_to_node(example(f)[0], namespace)
        for f in (
            "dedicated-normal-pod.yaml",
            "shared-normal-pod.yaml",
            "reclaimed-normal-pod.yaml",
        )
    ]
    for m in manifests[:2]:
        kubectl.apply(m)
    # The reclaimed pod once the kubelet's Node shows reclaimed capacity (the agent has just
    # started: a pod placed before would be refused at admission, OutOfreclaimed_millicpu).
    wait_until(
        "reclaimed capacity on the Node",
        lambda: _node_reclaimed_millicpu(kubectl, local_node.name) >= 200,
        90,
        interval=1,
    )
    kubectl.apply(manifests[2])
    names = [m["metadata"]["name"] for m in manifests]
    pods = wait_until("the pods Running", lambda: running_pods(kubectl, namespace, names), 180)
    files = _cpuset_files(local_node, {n: pods[n] for n in names})

    def converged() -> bool:
        got = _cpus(files)
        return len(got[names[0]]) == 1 and not got[names[0]] & (got[names[1]] | got[names[2]])

    wait_until("the agent's cpusets", converged, 90, interval=1)
    _recovered(kubectl, local_node, time.time(), "start", agent)
    return agent, Invariants(files, names[0], names[2])


def test_pinned_cpus_hold_and_the_node_recovers_through_control_plane_and_runtime_faults(
    kubectl: Kubectl,
    local_node: LocalNode,
    namespace: str,
    components: Callable[..., Component],
    tmp_path: Path,
) -> None:
    agent, inv = _setup(kubectl, local_node, namespace, components, tmp_path)
    timings: dict[str, float] = {}
    try:
        # the API server away for a minute: the agent keeps enforcing what it knew
        _cluster("halt", "kube-apiserver")
        inv.hold_for(APISERVER_DOWN_S, "API server down", agent)
        back = time.time()
        _cluster("revive", "kube-apiserver")
        timings["kube-apiserver down 60s"] = _recovered(kubectl, local_node, back, "it", agent)
        inv.check("after the API server came back", agent)

        # etcd away: the API server answers errors instead of nothing
        _cluster("halt", "etcd")
        inv.hold_for(20, "etcd down", agent)
        back = time.time()
        _cluster("revive", "etcd")
        timings["etcd down 20s"] = _recovered(kubectl, local_node, back, "etcd", agent)
        inv.check("after etcd came back", agent)

        # the kubelet restarted, then restarted with its checkpoints gone (a reboot's view)
        for label, forget in (("kubelet restart", False), ("kubelet without checkpoints", True)):
            _cluster("halt", "kubelet")
            if forget:
                kubelet_dir = local_node.state_dir / "kubelet"
                for f in ("cpu_manager_state", "memory_manager_state"):
                    (kubelet_dir / f).unlink(missing_ok=True)
            inv.check(f"{label}: kubelet down", agent)
            back = time.time()
            _cluster("revive", "kubelet")
            local_node.kubelet_healthy(90)
            timings[f"{label} (to the kubelet's /healthz)"] = time.time() - back
            inv.hold_for(10, f"{label}: kubelet back", agent)
            _recovered(kubectl, local_node, back, label, agent)

        # containerd restarted: the containers keep running under their shims
        _cluster("halt", "containerd")
        inv.hold_for(5, "containerd down", agent)
        back = time.time()
        _cluster("revive", "containerd")
        wait_until("containerd", lambda: local_node.crictl_json("info"), 60, interval=1)
        timings["containerd restart (to the runtime answering)"] = time.time() - back
        inv.hold_for(10, "containerd back", agent)
        _recovered(kubectl, local_node, back, "containerd", agent)

        # the agent started while the API server is down, then the API server comes back
        agent.stop()
        _cluster("halt", "kube-apiserver")
        agent = start_agent(components, tmp_path, local_node.name)
        inv.hold_for(20, "agent started without an API server", agent)
        back = time.time()
        _cluster("revive", "kube-apiserver")
        timings["agent started without API server"] = _recovered(
            kubectl, local_node, back, "the agent's first contact", agent
        )
        inv.check("after the agent's first contact", agent)

        # the agent killed by its memory limit, then started again by its supervisor
        kills = _oom_kill(agent)
        assert kills >= 1, "the agent died, but not by the OOM killer"
        inv.check("agent OOM-killed")
        back = time.time()
        agent = start_agent(components, tmp_path, local_node.name)
        timings["agent OOM-killed, started again"] = _recovered(
            kubectl, local_node, back, "the agent's restart", agent
        )
        inv.hold_for(10, "agent restarted after its OOM kill", agent)

        # after recovery: nothing written twice, nothing flapping
        dup = _duplicated_events(kubectl, namespace, local_node.name)
        assert not dup, "Events written again instead of counted:\n" + "\n".join(dup[:10])
        _assert_cnr_steady(kubectl, local_node.name, 20)
        inv.check("at the end", agent)
    finally:
        for name in ("kube-apiserver", "etcd", "kubelet", "containerd"):
            subprocess.run(["bash", str(CLUSTER), "revive", name], capture_output=True)
        _leave_the_control_plane_working(kubectl)
    print("\nrecovery (fault over -> the agent's CNR heartbeat again, unless said):")
    for label, seconds in timings.items():
        print(f"  {label}: {seconds:.1f} s")
    if not timings:
        pytest.fail("no fault was injected")
