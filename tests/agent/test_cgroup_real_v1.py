"""LinuxHost and the enforcer on this machine's real cgroup v1 hierarchies.

A kubelet-like hierarchy is built under a unique prefix (`CgroupTestbed`), with processes
running as the containers of a shared (burstable), a reclaimed (best-effort) and a
dedicated (guaranteed) pod. Here the kernel, not a fake tree, accepts or refuses each
write, and the processes' own affinity shows the cpusets took hold.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pykatalyst.agent.agent import Agent
from pykatalyst.agent.config import AgentConfig
from pykatalyst.agent.enforcer import Enforcer
from pykatalyst.agent.host.base import CpuQuota, Knob, KnobValue, KnobWrite
from pykatalyst.agent.host.linux import LinuxHost
from pykatalyst.agent.plan import AgentPlan
from pykatalyst.agent.regions import isolation_pool_name
from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import RealClock
from pykatalyst.topology.cpuset import CPUSet
from tests.agent.inmemory_host import node_json, pod_json, reclaiming
from tests.fixtures.cgroup_testbed import SANDBOX, CgroupTestbed, testbed_unavailable_reason
from tests.fixtures.fake_node import container_id

pytestmark = pytest.mark.cgroup

SHARED, RECLAIMED, DEDICATED = "5a4e0000-0000-4000-8000-00000000000a", "reclaimed-1", "dedicated-1"
BUSY = [sys.executable, "-c", "while True: pass"]
SLEEP = ["sleep", "600"]


@pytest.fixture
def testbed() -> Iterator[CgroupTestbed]:
    reason = testbed_unavailable_reason()
    if reason is not None:
        pytest.skip(f"real cgroup v1 test: {reason}")
    tb = CgroupTestbed()
    try:
        yield tb
    finally:
        tb.close()


def _all_cpus() -> CPUSet:
    return CPUSet.parse(Path("/sys/fs/cgroup/cpuset/cpuset.cpus").read_text())


def _allowed_cpus(pid: int) -> CPUSet:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return CPUSet.parse(line.split(":", 1)[1])
    raise AssertionError(f"no Cpus_allowed_list for pid {pid}")


def _pods(tb: CgroupTestbed) -> None:
    tb.add_pod(SHARED, "burstable", {"web": 500, "sidecar": 100})
    tb.add_pod(RECLAIMED, "besteffort", ["batch"])
    tb.add_pod(DEDICATED, "guaranteed", {"db": 1000})


def test_discover_finds_the_pods_the_hierarchy_holds(testbed: CgroupTestbed) -> None:
    _pods(testbed)
    testbed.spawn(SHARED, "web", SLEEP)
    found = {p.pod_uid: p for p in testbed.host().discover()}
    assert set(found) == {SHARED, RECLAIMED, DEDICATED}
    assert found[SHARED].qos_class == "burstable"
    assert found[RECLAIMED].qos_class == "besteffort"
    assert found[DEDICATED].qos_class == "guaranteed"
    assert {c.cgroup for c in found[SHARED].containers} == {
        testbed.container_cgroup(SHARED, "web"),
        testbed.container_cgroup(SHARED, "sidecar"),
    }
    # the kubelet's defaults are what the host reads back
    knobs = testbed.host().read_knobs(testbed.container_cgroup(SHARED, "web"))
    assert knobs[Knob.CPU_SHARES] == 512
    assert knobs[Knob.CPU_QUOTA] == CpuQuota(None, 100_000)


def test_enforced_knobs_are_in_the_files_and_hold_the_processes(testbed: CgroupTestbed) -> None:
    cpus = _all_cpus()
    if len(cpus) < 2:
        pytest.skip("needs at least 2 cpus to give a dedicated pod its own")
    _pods(testbed)
    web = testbed.spawn(SHARED, "web", BUSY)
    batch = testbed.spawn(RECLAIMED, "batch", BUSY)
    db = testbed.spawn(DEDICATED, "db", SLEEP)
    dedicated_cpus = CPUSet.of([cpus.max()])
    rest = cpus - dedicated_cpus
    t = testbed
    desired: dict[str, dict[Knob, KnobValue]] = {
        t.pod_cgroup(DEDICATED): {Knob.CPUSET_CPUS: dedicated_cpus},
        t.container_cgroup(DEDICATED, "db"): {Knob.CPUSET_CPUS: dedicated_cpus},
        t.pod_cgroup(SHARED): {Knob.CPUSET_CPUS: rest},
        t.container_cgroup(SHARED, "web"): {Knob.CPUSET_CPUS: rest, Knob.CPU_SHARES: 1024},
        t.container_cgroup(SHARED, "sidecar"): {Knob.CPUSET_CPUS: rest},
        t.pod_cgroup(RECLAIMED): {
            Knob.CPUSET_CPUS: rest,
            Knob.CPU_IDLE: 1,
            Knob.MEMORY_LIMIT: 256 << 20,
        },
        t.container_cgroup(RECLAIMED, "batch"): {
            Knob.CPUSET_CPUS: rest,
            Knob.CPU_QUOTA: CpuQuota(50_000, 100_000),
        },
    }
    enforcer = Enforcer(t.host(), clock=RealClock())
    report = enforcer.apply(desired)
    assert report.ok, report.failed
    # straight from the cgroup files
    assert (
        CPUSet.parse(t.read(t.container_cgroup(DEDICATED, "db"), "cpuset.cpus")) == dedicated_cpus
    )
    assert CPUSet.parse(t.read(t.container_cgroup(SHARED, "web"), "cpuset.cpus")) == rest
    assert t.read(t.container_cgroup(SHARED, "web"), "cpu.shares") == "1024"
    assert t.read(t.pod_cgroup(RECLAIMED), "cpu.idle") == "1"
    assert t.read(t.pod_cgroup(RECLAIMED), "memory.limit_in_bytes") == str(256 << 20)
    batch_cg = t.container_cgroup(RECLAIMED, "batch")
    assert t.read(batch_cg, "cpu.cfs_quota_us") == "50000"
    assert t.read(batch_cg, "cpu.cfs_period_us") == "100000"
    # and the kernel applies them to the tasks
    assert _allowed_cpus(db.pid) == dedicated_cpus
    assert _allowed_cpus(web.pid) == rest
    assert _allowed_cpus(batch.pid) == rest
    # converged: nothing left to write
    assert enforcer.plan(desired) == []


def test_cpus_move_from_child_to_child_in_an_order_the_kernel_accepts(
    testbed: CgroupTestbed,
) -> None:
    cpus = _all_cpus()
    if len(cpus) < 2:
        pytest.skip("needs at least 2 cpus to move one")
    first, last = CPUSet.of([cpus.min()]), CPUSet.of([cpus.max()])
    testbed.add_pod(SHARED, "burstable", {"web": 500})
    pod, ctr = testbed.pod_cgroup(SHARED), testbed.container_cgroup(SHARED, "web")
    proc = testbed.spawn(SHARED, "web", SLEEP)
    host = testbed.host()
    enforcer = Enforcer(host, clock=RealClock())
    assert enforcer.apply({ctr: {Knob.CPUSET_CPUS: first}}).ok
    # Written parent-first, as a naive writer would, the kernel refuses the move:
    naive = host.apply(
        [KnobWrite(pod, Knob.CPUSET_CPUS, last), KnobWrite(ctr, Knob.CPUSET_CPUS, last)]
    )
    assert naive.failed and naive.failed[0].errno == errno.EBUSY
    assert "cpuset.cpus" in naive.failed[0].error
    assert "narrow these children first" in naive.failed[0].error  # names the blocker
    # The enforcer widens the child to the union, then narrows child before parent.
    report = enforcer.apply({pod: {Knob.CPUSET_CPUS: last}, ctr: {Knob.CPUSET_CPUS: last}})
    assert report.ok, report.failed
    assert CPUSet.parse(testbed.read(pod, "cpuset.cpus")) == last
    assert _allowed_cpus(proc.pid) == last


def test_sample_sees_the_busy_loop(testbed: CgroupTestbed) -> None:
    _pods(testbed)
    spinner = testbed.spawn(SHARED, "web", BUSY)
    testbed.spawn(SHARED, "sidecar", SLEEP)
    host = testbed.host()
    busy, idle = (
        testbed.container_cgroup(SHARED, "web"),
        testbed.container_cgroup(SHARED, "sidecar"),
    )
    pod = testbed.pod_cgroup(SHARED)
    t0, cpu0 = time.time(), _process_cpu_s(spinner.pid)
    host.sample(t0, [busy, idle, pod])
    time.sleep(1.0)
    t1, cpu1 = time.time(), _process_cpu_s(spinner.pid)
    sample = host.sample(t1, [busy, idle, pod])
    b, i, p = sample.cgroups[busy], sample.cgroups[idle], sample.cgroups[pod]
    assert b.cpu_usage_cores is not None and i.cpu_usage_cores is not None
    # The spinner's rate is what the kernel says the process itself used over the same
    # second (however little of a cpu a loaded machine left it, in 10 ms ticks); a sleeper ~0.
    own = (cpu1 - cpu0) / (t1 - t0)
    assert own > 0.02, f"the spinner got {own:.3f} of a cpu: the machine is too loaded"
    assert b.cpu_usage_cores == pytest.approx(own, rel=0.2, abs=0.05)
    assert i.cpu_usage_cores < 0.05
    assert p.cpu_usage_cores is not None and p.cpu_usage_cores >= b.cpu_usage_cores * 0.9
    assert i.nr_running == 0
    assert sample.cpu_usage_ratio and max(sample.cpu_usage_ratio) > 0.2
    assert sample.memory is not None and sample.memory.total > 0


def test_kernel_refusals_are_named_and_vanished_pods_forgotten(testbed: CgroupTestbed) -> None:
    _pods(testbed)
    host = testbed.host()
    enforcer = Enforcer(host, clock=RealClock())
    web = testbed.container_cgroup(SHARED, "web")
    beyond = CPUSet.of([4095])  # no such cpu here
    report = enforcer.apply({web: {Knob.CPUSET_CPUS: beyond}})
    assert report.failed  # the widening write and the final one are both refused
    for failure in report.failed:
        assert failure.errno in (errno.EINVAL, errno.ERANGE, errno.EACCES)
        assert "cpuset.cpus" in failure.error and not failure.vanished
    assert len(report.new_failures) == 1  # one knob, one complaint
    assert enforcer.apply({web: {Knob.CPUSET_CPUS: beyond}}).new_failures == ()
    # memory.high has no v1 file: said once, then no longer tried
    pod = testbed.pod_cgroup(SHARED)
    high = enforcer.apply({pod: {Knob.MEMORY_HIGH: 1 << 30}})
    assert [f.unsupported for f in high.new_failures] == [True]
    assert enforcer.apply({pod: {Knob.MEMORY_HIGH: 1 << 30}}).planned == ()
    batch = testbed.container_cgroup(RECLAIMED, "batch")
    testbed.remove_pod(RECLAIMED)
    gone = enforcer.apply({batch: {Knob.CPU_IDLE: 1}})
    assert gone.vanished == (batch,) and gone.failed == ()
    assert batch not in enforcer.desired
    assert RECLAIMED not in {p.pod_uid for p in host.discover()}


def test_testbed_leaves_nothing_behind() -> None:
    reason = testbed_unavailable_reason()
    if reason is not None:
        pytest.skip(f"real cgroup v1 test: {reason}")
    tb = CgroupTestbed()
    _pods(tb)
    proc = tb.spawn(SHARED, "web", SLEEP)
    tb.close()
    assert proc.poll() is not None
    for ctl in ("cpu", "cpuacct", "cpuset", "memory"):
        assert not (Path("/sys/fs/cgroup") / ctl / tb.prefix).exists()
    assert not os.path.exists(f"/proc/{proc.pid}/status") or proc.returncode is not None


def test_this_machine_is_read_as_it_is() -> None:
    if not Path("/proc/self/mounts").exists() or not Path("/sys/devices/system/cpu").exists():
        pytest.skip("no /proc or /sys here")
    host = LinuxHost()
    assert host.cgroup_version in (1, 2)
    assert CPUSet.of(os.sched_getaffinity(0)).issubset(host.topology().all_cpus)
    host.sample(time.time(), [])
    time.sleep(0.2)
    sample = host.sample(time.time(), [])
    assert len(sample.cpu_usage_ratio) >= len(os.sched_getaffinity(0))
    assert all(0.0 <= r <= 1.0 for r in sample.cpu_usage_ratio)
    assert sample.memory is not None and 0 < sample.memory.available <= sample.memory.total
    assert sample.numa_memory and all(n.total > 0 for n in sample.numa_memory.values())
    assert sample.load[0] >= 0.0


def test_a_missing_hierarchy_is_named_not_assumed(tmp_path: Path) -> None:
    reason = testbed_unavailable_reason(tmp_path)
    assert reason is not None
    assert "root" in reason or str(tmp_path / "cpu") in reason
    with pytest.raises(RuntimeError, match="unavailable"):
        CgroupTestbed(base=tmp_path)


# -- the whole agent on the real hierarchy ---------------------------------------------------


class _AgentOnTestbed:
    """An in-memory cluster whose pods are the testbed's cgroups (uids from the cluster)."""

    def __init__(self, tb: CgroupTestbed, config: AgentConfig) -> None:
        self.tb = tb
        self.clock = RealClock()
        self.cluster = MemoryCluster(clock=self.clock)
        self.cluster.create(names.NODE, node_json("n1"))
        self.host = tb.host()
        self.enforcer = Enforcer(self.host, clock=self.clock)
        self.agent = Agent("n1", self.cluster, self.host, self.clock, config, self.enforcer)
        self.sandboxes: dict[str, subprocess.Popen[bytes]] = {}

    def pod(self, name: str, qos: str, **kw: Any) -> str:
        obj = self.cluster.create(names.POD, pod_json(name, node="n1", **kw), "default")
        uid = str(obj["metadata"]["uid"])
        cid = container_id(uid, "app")
        status = {"containerStatuses": [{"name": "app", "containerID": f"containerd://{cid}"}]}
        self.cluster.patch(names.POD, name, {"status": status}, "default", subresource="status")
        self.tb.add_pod(uid, qos, {"app": 1000 if qos != "besteffort" else 0}, sandbox=True)
        self.sandboxes[uid] = self.tb.spawn(uid, SANDBOX, SLEEP)  # the pause process
        return uid

    def run(self, ticks: int = 3) -> AgentPlan:
        plan = self.agent.reconcile()
        for _ in range(ticks - 1):
            plan = self.agent.reconcile()
        return plan


# the agent with overlapping pools, the reclaimed root SCHED_IDLE and capped by a quota
OVERLAP_IDLE_ROOT = {
    "cpu": {"overlap_reclaim_with_share": True, "ramp_up_period_s": 0},
    "reclaimed_root_quota": True,
    "reclaimed_root_cpu_idle": True,
    "checkpoint_path": None,
}
RECLAIMED_POD = {
    "level": "reclaimed_cores",
    "cpu": None,
    "memory": None,
    "reclaimed_cpu": "1k",
    "reclaimed_memory": "256Mi",
}


def test_agent_confines_sandboxes_and_containers_without_ebusy(testbed: CgroupTestbed) -> None:
    """A kubelet pod has a sandbox cgroup beside its containers, holding every cpu: the
    agent's plan applies (no EBUSY, no refusal at all) and the processes, pause included,
    run where the plan says; the pod cgroups keep every cpu, as the kubelet leaves them."""
    cpus = _all_cpus()
    if len(cpus) < 2:
        pytest.skip("needs at least 2 cpus to split shared and reclaimed pods")
    config = reclaiming(
        {
            "cpu": {"overlap_reclaim_with_share": False, "ramp_up_period_s": 0},
            "checkpoint_path": None,
        }
    )
    world = _AgentOnTestbed(testbed, config)
    web = world.pod("web", "burstable", cpu="1")
    batch = world.pod("batch", "besteffort", **RECLAIMED_POD)
    web_proc = testbed.spawn(web, "app", SLEEP)
    batch_proc = testbed.spawn(batch, "app", BUSY)
    plan = world.run()
    assert plan.enforce.get("failed", 0) == 0, plan.warnings
    assert not [e for e in world.enforcer.explain() if e.outcome == "failed"]
    web_plan, batch_plan = plan.pod(web), plan.pod(batch)
    assert web_plan is not None and batch_plan is not None
    # the split is real: shared and reclaimed pods hold disjoint cpus here
    assert web_plan.cpuset.isdisjoint(batch_plan.cpuset)
    for uid, pp in ((web, web_plan), (batch, batch_plan)):
        for container in ("app", SANDBOX):
            cg = testbed.container_cgroup(uid, container)
            assert CPUSet.parse(testbed.read(cg, "cpuset.cpus")) == pp.cpuset
        assert CPUSet.parse(testbed.read(testbed.pod_cgroup(uid), "cpuset.cpus")) == cpus
    assert _allowed_cpus(web_proc.pid) == web_plan.cpuset
    assert _allowed_cpus(batch_proc.pid) == batch_plan.cpuset
    assert _allowed_cpus(world.sandboxes[web].pid) == web_plan.cpuset
    assert _allowed_cpus(world.sandboxes[batch].pid) == batch_plan.cpuset
    # the reclaimed pod runs SCHED_IDLE; the kubelet's QoS roots stay writable by it
    root = f"{testbed.kubepods}/besteffort"
    assert testbed.read(root, "cpu.idle") == "0"
    assert testbed.read(testbed.pod_cgroup(batch), "cpu.idle") == "1"
    assert testbed.read(f"{testbed.kubepods}/burstable", "cpu.idle") == "0"
    assert testbed.read(root, "cpu.cfs_quota_us") == "-1"


def test_agent_overlap_mode_and_root_quota_on_the_real_hierarchy(testbed: CgroupTestbed) -> None:
    cpus = _all_cpus()
    config = reclaiming(OVERLAP_IDLE_ROOT)
    world = _AgentOnTestbed(testbed, config)
    web = world.pod("web", "burstable", cpu="1")
    batch = world.pod("batch", "besteffort", **RECLAIMED_POD)
    batch_proc = testbed.spawn(batch, "app", BUSY)
    plan = world.run()
    assert plan.enforce.get("failed", 0) == 0, plan.warnings
    reclaim, share = plan.pool(names.POOL_RECLAIM), plan.pool(names.POOL_SHARE)
    assert reclaim is not None and share is not None
    web_plan = plan.pod(web)
    assert web_plan is not None and web_plan.cpuset == share.cpuset
    # reclaimed pods may use every pooled cpu, under SCHED_IDLE ...
    assert _allowed_cpus(batch_proc.pid) == reclaim.cpuset
    assert share.cpuset <= reclaim.cpuset
    root = f"{testbed.kubepods}/besteffort"
    assert testbed.read(root, "cpu.idle") == "1"
    # ... and no more cpu time in all than the reclaimed cores size (Katalyst's quota
    # knob: whole pools overlapped, the time capped)
    size = reclaim.terms["reclaimed_cores_size"]
    assert size >= 1
    assert testbed.read(root, "cpu.cfs_quota_us") == str(size * 100_000)
    assert reclaim.size <= len(cpus)


def test_agent_isolates_a_noisy_shared_pod_on_the_real_hierarchy(testbed: CgroupTestbed) -> None:
    """A shared pod with more runnable threads than its cpus ends up in a pool of its own:
    its processes run there, apart from the quiet pod's."""
    if len(_all_cpus()) < 2:
        pytest.skip("needs at least 2 cpus for a share pool and an isolation pool")
    isolation = {"enabled": True, "lockin_threshold": 1, "max_resource_ratio": 1.0}
    config = reclaiming(
        {
            "cpu": {"ramp_up_period_s": 0},
            "advisor": {"isolation": {**isolation, "max_pod_ratio": 1.0}},
            "checkpoint_path": None,
        }
    )
    world = _AgentOnTestbed(testbed, config)
    web = world.pod("web", "burstable", cpu="1")
    noisy = world.pod("noisy", "burstable", cpu="100m")
    web_proc = testbed.spawn(web, "app", SLEEP)
    noisy_procs = [testbed.spawn(noisy, "app", BUSY) for _ in range(2)]
    plan = world.run()
    assert plan.enforce.get("failed", 0) == 0, plan.warnings
    pool = plan.pool(isolation_pool_name(noisy))
    share = plan.pool(names.POOL_SHARE)
    assert pool is not None and share is not None, [p.name for p in plan.pools]
    assert pool.cpuset.isdisjoint(share.cpuset)
    for proc in noisy_procs:
        assert _allowed_cpus(proc.pid) == pool.cpuset
    assert _allowed_cpus(web_proc.pid) == share.cpuset


def _process_cpu_s(pid: int) -> float:
    """User + system cpu seconds of a process, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
