"""Beside the kubelet's static cpu manager: its exclusive cpus stay its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pykatalyst.agent import cpu_policy, kubelet_cpu
from pykatalyst.agent.agent import Agent
from pykatalyst.agent.config import AgentConfig, CpuPolicyConfig
from pykatalyst.agent.enforcer import Enforcer
from pykatalyst.agent.host.base import Knob
from pykatalyst.agent.host.kubelet import (
    ContainerCpus,
    KubeletCpuAssignments,
    KubeletUnavailable,
)
from pykatalyst.agent.kubelet_cpu import (
    KubeletConfigError,
    KubeletPins,
    kubelet_previous,
    may_pin,
    parse_kubelet_config,
)
from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology
from tests.agent.inmemory_host import GIB, InMemoryHost, node_json, pod_json

TOPO = CPUTopology.synthetic(2, 12, 2, memory_per_numa=96 * GIB)
BIND = {names.MEMORY_ENHANCEMENT_ANNOTATION: '{"numa_binding": "true"}'}


# --- the kubelet's config ---------------------------------------------------------------------


def test_policy_and_reserved_cpus_are_read_from_the_kubelet_config() -> None:
    p = parse_kubelet_config(
        "kind: KubeletConfiguration\ncpuManagerPolicy: static\nreservedSystemCPUs: '0,2-3'\n",
        "k",
    )
    assert p.static and p.reserved == CPUSet.of([0, 2, 3])
    assert parse_kubelet_config("kind: KubeletConfiguration\n", "k").policy == "none"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("cpuManagerPolicy: dynamic\n", "cpuManagerPolicy"),
        ("cpuManagerPolicy: static\nreservedSystemCPUs: 'a-b'\n", "reservedSystemCPUs"),
        ("- a list\n", "mapping"),
    ],
)
def test_a_bad_kubelet_config_is_refused_naming_the_field(text: str, field: str) -> None:
    with pytest.raises(KubeletConfigError, match=field):
        parse_kubelet_config(text, "kubelet config x")


# --- the pure cut -----------------------------------------------------------------------------


def _layout(
    reqs: list[cpu_policy.DedicatedRequest], pins: KubeletPins, cfg: CpuPolicyConfig
) -> tuple[cpu_policy.Layout, CPUSet]:
    previous, foreign = kubelet_previous(TOPO, pins, reqs, {})
    lay = cpu_policy.layout(
        TOPO, cfg, reqs, previous, 4, foreign=foreign, kubelet_exclusive=pins.exclusive
    )
    return lay, foreign


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    exclusive=st.sets(st.integers(0, TOPO.num_cpus - 1), max_size=12),
    dedicated=st.lists(st.integers(1, 4), max_size=3),
    pinned_dedicated=st.integers(0, 3),
    reserved=st.integers(0, 4),
)
def test_the_agents_pools_never_overlap_a_kubelet_exclusive_cpu(
    exclusive: set[int], dedicated: list[int], pinned_dedicated: int, reserved: int
) -> None:
    cpus = sorted(exclusive)
    # The first cpus go to dedicated_cores pods the kubelet pinned, the rest to pods the
    # agent does not manage.
    by_pod: dict[str, dict[str, CPUSet]] = {}
    reqs: list[cpu_policy.DedicatedRequest] = []
    for i in range(min(pinned_dedicated, len(cpus))):
        by_pod[f"k{i}"] = {"app": CPUSet.of([cpus[i]])}
        reqs.append(cpu_policy.DedicatedRequest(f"k{i}", f"default/k{i}", 1))
    reqs += [
        cpu_policy.DedicatedRequest(f"d{i}", f"default/d{i}", n) for i, n in enumerate(dedicated)
    ]
    pins = KubeletPins(CPUSet.of(cpus), by_pod)
    lay, foreign = _layout(reqs, pins, CpuPolicyConfig(reserved_cpus=reserved))
    kubelet = CPUSet.of(cpus)
    assert lay.reserve.isdisjoint(kubelet)
    assert lay.share_domain.isdisjoint(kubelet) and lay.bound_leftover.isdisjoint(kubelet)
    for uid, a in lay.dedicated.items():
        if uid in by_pod:
            assert a.cpuset == pins.cpus_of(uid)  # the kubelet's cpus, kept
        else:
            assert a.cpuset.isdisjoint(kubelet)
    pools = cpu_policy.assign_pools(TOPO, lay.share_domain, {names.POOL_SHARE: 3}, {})
    assert pools[names.POOL_SHARE].isdisjoint(kubelet)
    assert foreign == kubelet - CPUSet().union(*(pins.cpus_of(u) for u in by_pod))


def test_an_agent_assignment_on_a_kubelet_cpu_is_placed_again() -> None:
    req = cpu_policy.DedicatedRequest("d", "default/d", 2)
    mine = cpu_policy.DedicatedAssignment("d", CPUSet.of([4, 5]), (0,), False)
    pins = KubeletPins(CPUSet.of([5]), {})
    previous, foreign = kubelet_previous(TOPO, pins, [req], {"d": mine})
    assert "d" not in previous and foreign == CPUSet.of([5])


# --- the agent --------------------------------------------------------------------------------


class FakeKubelet:
    def __init__(self) -> None:
        self.containers: list[ContainerCpus] = []
        self.down: str | None = None
        self.calls = 0

    def cpu_assignments(self) -> KubeletCpuAssignments:
        self.calls += 1
        if self.down is not None:
            raise KubeletUnavailable(self.down)
        return KubeletCpuAssignments(tuple(self.containers), TOPO.all_cpus)


class StaticNode:
    def __init__(self, tmp_path: Path, policy: str | None = "static") -> None:
        conf = tmp_path / "kubelet-config.yaml"
        if policy is not None:
            conf.write_text(f"cpuManagerPolicy: {policy}\nreservedSystemCPUs: '0'\n")
        self.clock = VirtualClock(50_000)
        self.cluster = MemoryCluster(clock=self.clock)
        self.cluster.create(names.NODE, node_json("node-1"))
        self.host = InMemoryHost(TOPO)
        self.kubelet = FakeKubelet()
        cfg: dict[str, Any] = {
            "kubelet": {"config_path": str(conf)},
            "cpu": {"ramp_up_period_s": 0},
        }
        self.agent = Agent(
            "node-1",
            self.cluster,
            self.host,
            self.clock,
            AgentConfig.model_validate(cfg),
            Enforcer(self.host, None, self.clock),
            kubelet=self.kubelet,
        )

    def pod(self, name: str, qos_class: str = "burstable", **kw: Any) -> str:
        obj = self.cluster.create(names.POD, pod_json(name, **kw), "default")
        uid = str(obj["metadata"]["uid"])
        self.host.add_pod(uid, qos_class=qos_class)
        return uid

    def pin(self, name: str, uid: str, cpus: CPUSet) -> None:
        """What the kubelet does: an exclusive cpuset, written on the container."""
        self.kubelet.containers.append(ContainerCpus("default", name, "app", cpus))
        self.host.knobs.setdefault(self.cgroup(uid), {})[Knob.CPUSET_CPUS] = cpus

    def cgroup(self, uid: str) -> str:
        return self.host.pods[uid].containers["app"].cgroup

    def cpus(self, uid: str) -> CPUSet:
        v = self.host.knobs[self.cgroup(uid)][Knob.CPUSET_CPUS]
        assert isinstance(v, CPUSet)
        return v

    def run(self, ticks: int = 4) -> Any:
        plan = None
        for _ in range(ticks):
            plan = self.agent.reconcile(self.clock.now())
            self.clock.advance(5)
        return plan


def test_a_pod_the_kubelet_pinned_keeps_its_cpus_and_shared_pods_go_elsewhere(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    n = StaticNode(tmp_path)
    # A Guaranteed pod without a QoS annotation: the kubelet pins it, the agent sees shared.
    pinned = n.pod("pinned", level=None, cpu="2", qos_class="guaranteed")
    n.pin("pinned", pinned, CPUSet.of([6, 7]))
    web = n.pod("web", cpu="2")
    batch = n.pod("batch", level="reclaimed_cores", cpu=None, memory=None, reclaimed_cpu="2k")
    with caplog.at_level("INFO", logger="pykatalyst.agent.kubelet"):
        plan = n.run()
    assert n.cpus(pinned) == CPUSet.of([6, 7])
    assert n.cpus(web).isdisjoint(CPUSet.of([6, 7])) and n.cpus(web)
    assert n.cpus(batch).isdisjoint(CPUSet.of([6, 7])) and n.cpus(batch)
    for pool in plan.pools:
        assert pool.cpuset.isdisjoint(CPUSet.of([6, 7])), pool.name
    assert Knob.CPUSET_CPUS not in plan.desired.get(n.cgroup(pinned), {})
    assert "exclusive cpus 6-7" in caplog.text and "default/pinned/app=6-7" in caplog.text


def test_a_dedicated_pod_the_kubelet_pinned_keeps_the_kubelets_cpus(tmp_path: Path) -> None:
    n = StaticNode(tmp_path)
    db = n.pod("db", level="dedicated_cores", cpu="2", annotations=BIND, qos_class="guaranteed")
    n.pin("db", db, CPUSet.of([13, 14]))
    other = n.pod("other", level="dedicated_cores", cpu="2", annotations=BIND)
    web = n.pod("web", cpu="1")
    plan = n.run()
    assert n.cpus(db) == CPUSet.of([13, 14])
    assert [p.cpuset for p in plan.pods if p.uid == db] == [CPUSet.of([13, 14])]
    assert n.cpus(other).isdisjoint(CPUSet.of([13, 14])) and len(n.cpus(other)) == 2
    assert n.cpus(web).isdisjoint(n.cpus(db) | n.cpus(other))


def test_unreachable_kubelet_is_said_once_and_the_agent_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    n = StaticNode(tmp_path)
    n.kubelet.down = "no pod-resources socket at /x.sock"
    web = n.pod("web", cpu="1500m")  # not whole cpus: the kubelet pins it nowhere
    with caplog.at_level("INFO", logger="pykatalyst.agent.kubelet"):
        n.run(3)
    assert n.cpus(web)
    said = [
        r for r in caplog.records if "cannot see the kubelet's cpu assignments" in r.getMessage()
    ]
    assert len(said) == 1 and "/x.sock" in said[0].getMessage()


def test_under_policy_none_the_kubelet_is_not_asked(tmp_path: Path) -> None:
    n = StaticNode(tmp_path, policy="none")
    n.pod("web", cpu="2")
    n.run(2)
    assert n.kubelet.calls == 0


def test_without_the_kubelet_config_the_pod_resources_api_is_asked(tmp_path: Path) -> None:
    # As in the DaemonSet, which mounts the pod-resources socket only.
    n = StaticNode(tmp_path, policy=None)
    pinned = n.pod("pinned", level=None, cpu="2", qos_class="guaranteed")
    n.pin("pinned", pinned, CPUSet.of([6, 7]))
    web = n.pod("web", cpu="2")
    n.run(2)
    assert n.kubelet.calls > 0
    assert n.cpus(pinned) == CPUSet.of([6, 7]) and n.cpus(web).isdisjoint(CPUSet.of([6, 7]))


def test_a_kubelet_restarting_leaves_its_pinned_cpus_alone(tmp_path: Path) -> None:
    n = StaticNode(tmp_path)
    pinned = n.pod("pinned", level=None, cpu="2", qos_class="guaranteed")
    n.pin("pinned", pinned, CPUSet.of([6, 7]))
    web = n.pod("web", cpu="2")
    n.run(2)
    n.kubelet.down = "pod-resources List: UNAVAILABLE"
    n.run(2)
    assert n.cpus(pinned) == CPUSet.of([6, 7]) and n.cpus(web).isdisjoint(CPUSet.of([6, 7]))


def test_while_the_kubelet_cannot_be_asked_containers_it_may_have_pinned_keep_their_cpus(
    tmp_path: Path,
) -> None:
    """The kubelet writes a pinned container's cpuset once and never looks again: a write of
    the share pool over it while the pod-resources socket is down would stick for good."""
    n = StaticNode(tmp_path)
    n.kubelet.down = "no pod-resources socket at /x.sock"
    pinned = n.pod("pinned", level=None, cpu="2", qos_class="guaranteed")
    n.pin("pinned", pinned, CPUSet.of([6, 7]))
    web = n.pod("web", cpu="1500m")
    plan = n.run(3)
    assert n.cpus(pinned) == CPUSet.of([6, 7])
    assert Knob.CPUSET_CPUS not in plan.desired.get(n.cgroup(pinned), {})
    assert n.cpus(web) and Knob.CPUSET_CPUS in plan.desired[n.cgroup(web)]
    # Once the kubelet answers, its pins are known and the rest is managed as before.
    n.kubelet.down = None
    n.run(2)
    assert n.cpus(pinned) == CPUSet.of([6, 7])
    assert n.cpus(web).isdisjoint(CPUSet.of([6, 7]))


def test_a_pinned_container_not_yet_in_the_pods_status_keeps_the_kubelets_cpus(
    tmp_path: Path,
) -> None:
    """Right after the kubelet starts a pinned container, the pod's status may not name the
    container yet, so the agent cannot tell its cgroup from the sandbox's: the kubelet wrote
    its cpuset once and never corrects it, so the agent must not write the share pool there."""
    n = StaticNode(tmp_path)
    uid = n.pod("pinned", level=None, cpu="2", qos_class="guaranteed")
    # The cgroups as the node has them: the sandbox and the container, neither named yet.
    n.host.remove_pod(uid)
    n.host.add_pod(uid, containers=("sandbox-0a1b", "ctr-9f8e"), qos_class="guaranteed")
    ctr = n.host.pods[uid].containers["ctr-9f8e"].cgroup
    n.kubelet.containers.append(ContainerCpus("default", "pinned", "app", CPUSet.of([6, 7])))
    n.host.knobs.setdefault(ctr, {})[Knob.CPUSET_CPUS] = CPUSet.of([6, 7])
    web = n.pod("web", cpu="1500m")
    for down in ("no pod-resources socket at /x.sock", None):
        n.kubelet.down = down
        plan = n.run(2)
        assert n.host.knobs[ctr][Knob.CPUSET_CPUS] == CPUSet.of([6, 7]), down
        assert Knob.CPUSET_CPUS not in plan.desired.get(ctr, {}), down
        assert n.cpus(web), down
    # Once the kubelet has answered, the shared pod keeps off its cpus too.
    assert n.cpus(web).isdisjoint(CPUSet.of([6, 7]))


def test_under_policy_none_a_pods_unnamed_cgroups_get_its_cpus(tmp_path: Path) -> None:
    n = StaticNode(tmp_path, policy="none")
    uid = n.pod("web", cpu="2", qos_class="guaranteed")
    n.host.remove_pod(uid)
    n.host.add_pod(uid, containers=("app", "sandbox-0a1b"), qos_class="guaranteed")
    sandbox = n.host.pods[uid].containers["sandbox-0a1b"].cgroup
    n.run(2)
    assert n.host.knobs[sandbox][Knob.CPUSET_CPUS] == n.cpus(uid)


@given(request=st.floats(0, 64, allow_nan=False), limit=st.floats(0, 64, allow_nan=False))
def test_only_whole_cpu_guaranteed_containers_may_be_pinned(request: float, limit: float) -> None:
    assert may_pin(request, limit) == (request >= 1 and request.is_integer() and limit == request)


_names = st.sampled_from(["app", "side", "init"])


@st.composite
def _pod_containers(draw: st.DrawFn, uid: str) -> tuple[kubelet_cpu.PodContainers, frozenset[str]]:
    """A pod's containers as the agent sees them, and the names the kubelet pinned."""
    matched = {n: f"pod{uid}/{n}" for n in draw(st.sets(_names))}
    unnamed = {f"pod{uid}/ctr-{i}" for i in range(draw(st.integers(0, 2)))}
    pinnable = frozenset(draw(st.sets(_names)))
    pinned = (
        frozenset(draw(st.sets(st.sampled_from(sorted(pinnable))))) if pinnable else frozenset()
    )
    pod = kubelet_cpu.PodContainers(matched, frozenset(matched.values()) | unnamed, pinnable)
    return pod, pinned


@given(
    pods=st.fixed_dictionaries({}, optional={u: _pod_containers(u) for u in ("a", "b", "c")}),
    answered=st.booleans(),
    static=st.booleans(),
)
def test_the_agent_leaves_the_kubelet_every_cgroup_it_may_have_pinned(
    pods: dict[str, tuple[kubelet_cpu.PodContainers, frozenset[str]]],
    answered: bool,
    static: bool,
) -> None:
    pins = (
        KubeletPins(
            CPUSet(),
            {uid: {n: CPUSet.of([1]) for n in pinned} for uid, (_, pinned) in pods.items()},
        )
        if answered
        else None
    )
    owned = kubelet_cpu.kubelet_owned(pins, static, {u: p for u, (p, _) in pods.items()})
    for _uid, (pod, pinned) in pods.items():
        unnamed = pod.found - set(pod.matched.values())
        held = pinned if answered else (pod.pinnable if static else frozenset())
        for name, path in pod.matched.items():
            # A container the kubelet pinned (or, unanswered, may have) is never written.
            assert (path in owned) == (name in held)
        if held or (static and pod.pinnable):
            assert unnamed <= owned
        else:
            assert not unnamed & owned
    if not answered and not static:
        assert not owned


# --- what the CNR says of the kubelet's managers (Katalyst's overcommit annotations) ----------


def _manager_annotations(n: StaticNode) -> dict[str, str]:
    ann = n.cluster.get(names.CUSTOM_NODE_RESOURCE, "node-1")["metadata"].get("annotations") or {}
    keys = (
        names.CNR_OVERCOMMIT_CPU_MANAGER_ANNOTATION,
        names.CNR_OVERCOMMIT_MEMORY_MANAGER_ANNOTATION,
        names.CNR_GUARANTEED_CPUS_ANNOTATION,
    )
    return {k.rsplit("/", 1)[1]: ann[k] for k in keys if k in ann}


def test_the_cnr_names_the_static_cpu_manager_and_the_cpus_it_pins(tmp_path: Path) -> None:
    n = StaticNode(tmp_path)
    pinned = n.pod("pinned", level=None, cpu="2", qos_class="guaranteed")
    n.pin("pinned", pinned, CPUSet.of([6, 7]))
    n.pod("web", cpu="1500m")  # Guaranteed, but not a whole number of cpus: not pinned
    n.pod("batch", level="reclaimed_cores", cpu=None, memory=None, reclaimed_cpu="2k")
    n.run(2)
    assert _manager_annotations(n) == {
        "overcommit_cpu_manager": "static",
        "overcommit_memory_manager": "None",
        "guaranteed_cpus": "2",
    }
    # a second Guaranteed pod with whole cpus, then the first one gone
    n.pod("db", cpu="3", qos_class="guaranteed")
    n.run(2)
    assert _manager_annotations(n)["guaranteed_cpus"] == "5"
    n.cluster.delete(names.POD, "pinned", "default", grace_period_seconds=0)
    n.run(2)
    assert _manager_annotations(n)["guaranteed_cpus"] == "3"


def test_under_policy_none_the_cnr_counts_no_pinned_cpus(tmp_path: Path) -> None:
    n = StaticNode(tmp_path, policy="none")
    n.pod("web", cpu="2", qos_class="guaranteed")
    n.run(2)
    assert _manager_annotations(n) == {
        "overcommit_cpu_manager": "none",
        "overcommit_memory_manager": "None",
        "guaranteed_cpus": "0",
    }


def test_without_the_kubelet_config_the_cnr_says_nothing_of_its_managers(tmp_path: Path) -> None:
    n = StaticNode(tmp_path, policy=None)
    n.pod("web", cpu="2", qos_class="guaranteed")
    n.run(2)
    assert _manager_annotations(n) == {}


@pytest.mark.parametrize(
    ("text", "cpu", "memory"),
    [
        ("cpuManagerPolicy: static\nmemoryManagerPolicy: Static\n", "static", "Static"),
        ("cpuManagerPolicy: static\nfeatureGates: {CPUManager: false}\n", "none", "None"),
        ("memoryManagerPolicy: Static\nfeatureGates: {MemoryManager: false}\n", "none", "None"),
        ("{}\n", "none", "None"),
    ],
)
def test_the_managers_are_read_as_katalyst_reads_them(text: str, cpu: str, memory: str) -> None:
    from pykatalyst.agent.publish import manager_annotations

    kp = kubelet_cpu.parse_kubelet_config(text, "kubelet config")
    got = manager_annotations(kp, [2, 4])
    assert got[names.CNR_OVERCOMMIT_CPU_MANAGER_ANNOTATION] == cpu
    assert got[names.CNR_OVERCOMMIT_MEMORY_MANAGER_ANNOTATION] == memory
    assert got[names.CNR_GUARANTEED_CPUS_ANNOTATION] == ("6" if cpu == "static" else "0")


def test_feature_gates_that_are_not_a_mapping_are_refused_naming_the_field() -> None:
    with pytest.raises(kubelet_cpu.KubeletConfigError, match="featureGates"):
        kubelet_cpu.parse_kubelet_config("featureGates: [CPUManager]\n", "kubelet config")
