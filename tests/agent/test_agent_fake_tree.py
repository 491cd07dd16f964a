"""The agent on fake kubelet cgroup trees (v1 cgroupfs, v2 systemd): the files follow the plan.

Fake trees do not check writes the way a kernel does, so `KernelRulesHost` adds cgroup v1's
cpuset rules in front of the tree: a cpuset must lie within its parent's (EINVAL) and must
keep every cpu a child still holds (EBUSY).
"""

from __future__ import annotations

import errno
from collections.abc import Sequence
from pathlib import Path

import pytest

from pykatalyst.agent.agent import Agent
from pykatalyst.agent.enforcer import Enforcer
from pykatalyst.agent.host.base import ApplyResult, Knob, KnobWrite, WriteFailure
from pykatalyst.agent.host.linux import LinuxHost
from pykatalyst.agent.plan import AgentPlan
from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.topology.cpuset import CPUSet
from tests.agent.inmemory_host import node_json, pod_json, reclaiming
from tests.fixtures.fake_node import FakeNode, FakePod, container_id, make_kubelet_tree

DEDICATED = {names.MEMORY_ENHANCEMENT_ANNOTATION: '{"numa_binding": "true"}'}
SANDBOX = "POD"  # FakeNode's name for the pause container
CPUSET_FILES = {Knob.CPUSET_CPUS: "cpuset.cpus", Knob.CPUSET_MEMS: "cpuset.mems"}


class KernelRulesHost(LinuxHost):
    """A LinuxHost over a fake v1 tree that refuses cpuset writes as the kernel would."""

    def __init__(self, node: FakeNode) -> None:
        super().__init__(root=node.root, driver=node.driver, kubepods=node.kubepods, page_size=4096)
        self.node = node
        self.refused: list[WriteFailure] = []

    def apply(self, writes: Sequence[KnobWrite]) -> ApplyResult:
        applied: list[KnobWrite] = []
        failed: list[WriteFailure] = []
        for w in writes:
            problem = self._kernel_says(w)
            if problem is not None:
                failed.append(problem)
                self.refused.append(problem)
                continue
            got = super().apply([w])
            applied.extend(got.applied)
            failed.extend(got.failed)
        return ApplyResult(tuple(applied), tuple(failed))

    def _kernel_says(self, w: KnobWrite) -> WriteFailure | None:
        name = CPUSET_FILES.get(w.knob)
        if name is None:
            return None
        assert isinstance(w.value, CPUSet)
        d = self.node.path(w.cgroup, name).parent
        parent = CPUSet.parse((d.parent / name).read_text())
        if not w.value.issubset(parent):
            return WriteFailure(w, f"{w.cgroup}: outside the parent's {name}", errno=errno.EINVAL)
        for child in (c for c in d.iterdir() if c.is_dir()):
            if not CPUSet.parse((child / name).read_text()).issubset(w.value):
                return WriteFailure(w, f"{w.cgroup}: {child.name} holds more", errno=errno.EBUSY)
        return None


def _node(
    tmp_path: Path, version: int, driver: str
) -> tuple[MemoryCluster, VirtualClock, FakeNode, dict[str, str]]:
    clock = VirtualClock(10_000)
    cluster = MemoryCluster(clock=clock)
    cluster.create(names.NODE, node_json("n1"))
    specs = [
        ("web", {"cpu": "2"}, "burstable"),
        (
            "batch",
            {
                "level": "reclaimed_cores",
                "cpu": None,
                "memory": None,
                "reclaimed_cpu": "2k",
                "reclaimed_memory": "1Gi",
            },
            "besteffort",
        ),
        (
            "db",
            {"level": "dedicated_cores", "cpu": "2", "memory": "1Gi", "annotations": DEDICATED},
            "guaranteed",
        ),
    ]
    uids: dict[str, str] = {}
    fakes = []
    for name, kw, qos in specs:
        obj = cluster.create(names.POD, pod_json(name, node="n1", **kw), "default")
        uid = obj["metadata"]["uid"]
        uids[name] = uid
        fakes.append(FakePod(uid, qos, with_sandbox=True))  # type: ignore[arg-type]
        cid = container_id(uid, "app")
        status = {"containerStatuses": [{"name": "app", "containerID": f"containerd://{cid}"}]}
        cluster.patch(names.POD, name, {"status": status}, "default", subresource="status")
    node = make_kubelet_tree(tmp_path, fakes, version=version, driver=driver)  # type: ignore[arg-type]
    return cluster, clock, node, uids


def _run(agent: Agent, clock: VirtualClock, ticks: int = 9) -> AgentPlan:
    plan = agent.reconcile(clock.now())
    for _ in range(ticks - 1):
        clock.advance(5)
        plan = agent.reconcile(clock.now())
    return plan


@pytest.mark.parametrize(("version", "driver"), [(1, "cgroupfs"), (2, "systemd")])
def test_cpusets_and_limits_land_in_the_cgroup_files(
    tmp_path: Path, version: int, driver: str
) -> None:
    cluster, clock, node, uids = _node(tmp_path, version, driver)
    host = node.host()
    before = {name: node.read(node.pod_cgroup(uid), "cpuset.cpus") for name, uid in uids.items()}
    agent = Agent("n1", cluster, host, clock, reclaiming(), Enforcer(host, None, clock))
    plan = _run(agent, clock)

    def cpus(name: str, container: str = "app") -> CPUSet:
        return CPUSet.parse(node.read(node.container_cgroup(uids[name], container), "cpuset.cpus"))

    share = plan.pool(names.POOL_SHARE)
    reclaim = plan.pool(names.POOL_RECLAIM)
    assert share is not None and reclaim is not None
    assert cpus("web") == share.cpuset
    # by default (as in Katalyst) reclaimed pods keep to the reclaim pool
    assert cpus("batch") == reclaim.cpuset
    assert share.cpuset.isdisjoint(reclaim.cpuset)
    db = cpus("db")
    assert len(db) == 2 and db.isdisjoint(share.cpuset | reclaim.cpuset)
    # every container of a pod, the sandbox included, gets the pod's cpus ...
    for name in uids:
        assert cpus(name, SANDBOX) == cpus(name)
    # ... and the pod cgroups keep what the kubelet gave them
    for name, uid in uids.items():
        assert node.read(node.pod_cgroup(uid), "cpuset.cpus") == before[name]
    assert all(
        node.pod_cgroup(uid) not in plan.desired
        or Knob.CPUSET_CPUS not in plan.desired[node.pod_cgroup(uid)]
        for uid in uids.values()
    )
    memory_file = "memory.limit_in_bytes" if version == 1 else "memory.max"
    assert int(node.read(node.pod_cgroup(uids["batch"]), memory_file)) == 1 << 30
    assert node.read(node.pod_cgroup(uids["batch"]), "cpu.idle") == "1"


@pytest.mark.parametrize(
    ("version", "driver", "root"),
    [
        (1, "cgroupfs", "kubepods/besteffort"),
        (2, "systemd", "kubepods.slice/kubepods-besteffort.slice"),
    ],
)
def test_the_reclaimed_root_is_idle_on_request_and_optionally_capped(
    tmp_path: Path, version: int, driver: str, root: str
) -> None:
    cluster, clock, node, _ = _node(tmp_path, version, driver)
    host = node.host()
    assert host.qos_cgroup("besteffort") == root
    agent = Agent("n1", cluster, host, clock, reclaiming(), Enforcer(host, None, clock))
    plan = _run(agent, clock)
    # the kubelet writes cpu.shares there, which an idle cgroup refuses: not idled by default
    assert node.read(root, "cpu.idle") == "0"
    idle_root = reclaiming({"reclaimed_root_cpu_idle": True})
    agent = Agent("n1", cluster, host, clock, idle_root, Enforcer(host, None, clock))
    plan = _run(agent, clock, ticks=2)
    assert node.read(root, "cpu.idle") == "1"
    quota_file = "cpu.cfs_quota_us" if version == 1 else "cpu.max"
    unlimited = node.read(root, quota_file)
    assert unlimited in ("-1", "max 100000")
    # the burstable root is nobody's business but the kubelet's
    assert node.read(node.qos_cgroup("burstable"), "cpu.idle") == "0"

    capped = reclaiming({"reclaimed_root_quota": True})
    agent = Agent("n1", cluster, host, clock, capped, Enforcer(host, None, clock))
    plan = _run(agent, clock, ticks=2)
    reclaim = plan.pool(names.POOL_RECLAIM)
    assert reclaim is not None
    quota = reclaim.size * 100_000
    if version == 1:
        assert node.read(root, "cpu.cfs_quota_us") == str(quota)
    else:
        assert node.read(root, "cpu.max") == f"{quota} 100000"

    off = reclaiming({"reclaimed_cpu_idle": False, "reclaimed_root": ""})
    agent = Agent("n1", cluster, host, clock, off, Enforcer(host, None, clock))
    plan = _run(agent, clock, ticks=2)
    assert root not in plan.desired


def test_overlap_mode_lends_reclaimed_pods_the_share_pools_slack(tmp_path: Path) -> None:
    cluster, clock, node, uids = _node(tmp_path, 2, "cgroupfs")
    host = node.host()
    cfg = reclaiming({"cpu": {"overlap_reclaim_with_share": True}})
    agent = Agent("n1", cluster, host, clock, cfg, Enforcer(host, None, clock))
    plan = _run(agent, clock)
    reclaim, share = plan.pool(names.POOL_RECLAIM), plan.pool(names.POOL_SHARE)
    assert reclaim is not None and share is not None
    batch = node.container_cgroup(uids["batch"], "app")
    got = CPUSet.parse(node.read(batch, "cpuset.cpus"))
    assert got == reclaim.cpuset  # the reclaim pool is where reclaimed pods run
    lent = CPUSet.parse(reclaim.terms["overlap_cpus"])
    assert lent and got == lent | CPUSet.parse(reclaim.terms["own_cpus"])
    # the share pool fills what it may, and lends max(1, size - requirement) of its cpus,
    # the highest ones: its own pods keep the rest to themselves
    requirement = share.terms["size"]
    assert lent <= share.cpuset
    assert len(lent) == max(1, share.size - requirement) < share.size
    assert max(lent) == max(share.cpuset)
    # what is published is what reclaimed pods get: never above the reclaimed cores size
    assert plan.reclaimed_cpu.value <= reclaim.terms["reclaimed_cores_size"]
    assert reclaim.terms["regions"]["unbound"]["overlap"] == {names.POOL_SHARE: len(lent)}


def test_v1_kernel_rules_accept_every_write_with_sandboxes(tmp_path: Path) -> None:
    """With a sandbox cgroup holding every cpu, narrowing a pod cgroup would be refused
    (EBUSY); the agent writes containers only, so the kernel takes every write, and it
    keeps doing so as the pools move."""
    cluster, clock, node, uids = _node(tmp_path, 1, "cgroupfs")
    host = KernelRulesHost(node)
    # the rule holds: a pod cgroup cannot narrow below its sandbox
    web_pod = node.pod_cgroup(uids["web"])
    refused = host.apply([KnobWrite(web_pod, Knob.CPUSET_CPUS, CPUSet.of([0]))])
    assert [f.errno for f in refused.failed] == [errno.EBUSY]
    host.refused.clear()
    agent = Agent("n1", cluster, host, clock, reclaiming(), Enforcer(host, None, clock))
    plan = _run(agent, clock)
    assert host.refused == []
    assert plan.enforce.get("failed", 0) == 0
    # a dedicated pod leaving moves cpus back into the pools: still nothing refused
    cluster.delete(names.POD, "db", "default")
    node.remove_pod(uids["db"])
    plan = _run(agent, clock, ticks=4)
    assert host.refused == []
    share = plan.pool(names.POOL_SHARE)
    assert share is not None
    web = node.container_cgroup(uids["web"], SANDBOX)
    assert CPUSet.parse(node.read(web, "cpuset.cpus")) == share.cpuset


def test_a_restarted_container_is_found_without_waiting_for_the_rediscovery(
    tmp_path: Path,
) -> None:
    cluster, clock, node, uids = _node(tmp_path, 2, "cgroupfs")
    host = node.host()
    agent = Agent("n1", cluster, host, clock, reclaiming(), Enforcer(host, None, clock))
    plan = _run(agent, clock, ticks=3)
    # the container restarts: a new runtime id, a new cgroup with every cpu
    uid = uids["web"]
    node.make_cgroup(f"{node.pod_cgroup(uid)}/{container_id(uid, 'app-2')}")
    cid = container_id(uid, "app-2")
    status = {"containerStatuses": [{"name": "app", "containerID": f"containerd://{cid}"}]}
    cluster.patch(names.POD, "web", {"status": status}, "default", subresource="status")
    clock.advance(5)
    plan = agent.reconcile(clock.now())
    web = plan.pod(uid)
    assert web is not None and web.cpuset != node.topology.all_cpus
    new = f"{node.pod_cgroup(uid)}/{cid}"
    assert CPUSet.parse(node.read(new, "cpuset.cpus")) == web.cpuset
