"""What the agent's cheaper I/O must still get right: files and child cgroups that appear
after the first sample, load counted only where cpu was used, and an enforcer that trusts
its own writes yet still undoes drift once its verify period runs out."""

from __future__ import annotations

import errno
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from pykatalyst.agent.enforcer import Enforcer
from pykatalyst.agent.host.base import ApplyResult, Knob, KnobValue, KnobWrite, WriteFailure
from pykatalyst.agent.host.linux import LinuxHost
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.topology.cpuset import CPUSet
from tests.agent.wrapped_host import WrappedHost
from tests.fixtures.cgroup_testbed import CgroupTestbed, testbed_unavailable_reason
from tests.fixtures.fake_node import FakeNode, FakePod, make_kubelet_tree

UID = "5e1f0a6c-1111-4c3e-9a1e-00000000000a"


def _node(tmp_path: Path, version: int = 2) -> FakeNode:
    return make_kubelet_tree(tmp_path / "node", [FakePod(UID, "burstable", ("app",))], version)


def test_a_pressure_file_that_appears_later_is_read_within_the_recheck_period(
    tmp_path: Path,
) -> None:
    node = _node(tmp_path)
    host = node.host()
    cg = node.container_cgroup(UID, "app")
    node.path(cg, "cpu.pressure").unlink()
    assert host.sample(0.0, [cg]).cgroups[cg].cpu_psi_some_avg10 is None
    node.set_pressure(cg, "cpu", 12.5)
    assert host.sample(31.0, [cg]).cgroups[cg].cpu_psi_some_avg10 == pytest.approx(12.5)


@pytest.mark.parametrize("version", [1, 2])
def test_a_child_cgroup_made_later_has_its_runnable_tasks_counted_and_its_removal_is_survived(
    tmp_path: Path, version: int
) -> None:
    node = _node(tmp_path, version)
    host = node.host()
    ctr = node.container_cgroup(UID, "app")
    node.add_task(ctr, 500, "R")
    node.set_cpu_usage(ctr, 1.0)
    assert host.sample(0.0, [ctr]).cgroups[ctr].nr_running == 1
    child = f"{ctr}/worker"
    node.make_cgroup(child)
    node.add_task(child, 501, "R")
    node.set_cpu_usage(ctr, 40.0)
    assert host.sample(31.0, [ctr]).cgroups[ctr].nr_running == 2
    for ctl in ("cpu", "cpuacct", "cpuset", "memory") if version == 1 else ("cpu",):
        shutil.rmtree(node.controller_dir(ctl) / child)
    node.set_cpu_usage(ctr, 41.0)
    assert host.sample(32.0, [ctr]).cgroups[ctr].nr_running == 1
    node.set_cpu_usage(ctr, 42.0)
    assert host.sample(33.0, [ctr]).cgroups[ctr].nr_running == 1


def test_a_cgroup_that_used_no_cpu_since_the_last_sample_has_no_load(tmp_path: Path) -> None:
    node = _node(tmp_path, 1)
    host = node.host()
    cg = node.container_cgroup(UID, "app")
    node.add_task(cg, 600, "R")
    node.set_cpu_usage(cg, 5.0)
    assert host.sample(0.0, [cg]).cgroups[cg].nr_running == 1  # no interval yet: counted
    assert host.sample(1.0, [cg]).cgroups[cg].nr_running == 0  # nothing ran for a second
    node.set_cpu_usage(cg, 5.5)
    assert host.sample(2.0, [cg]).cgroups[cg].nr_running == 1


def test_samples_forget_cgroups_nobody_asks_about(tmp_path: Path) -> None:
    node = _node(tmp_path)
    host = node.host()
    pod, ctr = node.pod_cgroup(UID), node.container_cgroup(UID, "app")
    node.set_cpu_usage(ctr, 1.0)
    host.sample(0.0, [pod, ctr])
    host.sample(1.0, [pod])
    node.set_cpu_usage(ctr, 3.0)
    # asked for again: a fresh start, so no rate from a stale counter
    assert host.sample(2.0, [ctr]).cgroups[ctr].cpu_usage_cores is None
    node.set_cpu_usage(ctr, 4.0)
    assert host.sample(4.0, [ctr]).cgroups[ctr].cpu_usage_cores == pytest.approx(0.5)


class _CountingHost(WrappedHost):
    """A LinuxHost that counts knob reads and can refuse writes of one knob."""

    def __init__(self, inner: LinuxHost) -> None:
        self.inner = inner
        self.reads = 0
        self.refuse: Knob | None = None

    def read_knobs(self, cgroup: str) -> dict[Knob, KnobValue]:
        self.reads += 1
        return self.inner.read_knobs(cgroup)

    def apply(self, writes: Sequence[KnobWrite]) -> ApplyResult:
        bad = [w for w in writes if w.knob is self.refuse]
        ok = self.inner.apply([w for w in writes if w not in bad])
        fails = tuple(WriteFailure(w, "EBUSY", errno=errno.EBUSY) for w in bad)
        return ApplyResult(ok.applied, ok.failed + fails)


def test_a_trusting_enforcer_reads_once_per_period_and_then_undoes_drift(tmp_path: Path) -> None:
    node = _node(tmp_path, 1)
    host = _CountingHost(node.host())
    clock = VirtualClock(100.0)
    enf = Enforcer(host, clock=clock, verify_period_s=30.0)  # type: ignore[arg-type]
    pod, ctr = node.pod_cgroup(UID), node.container_cgroup(UID, "app")
    desired: dict[str, dict[Knob, KnobValue]] = {
        pod: {Knob.CPU_SHARES: 2048, Knob.CPUSET_CPUS: CPUSet.parse("0-3")},
        ctr: {Knob.CPU_SHARES: 1024, Knob.CPUSET_CPUS: CPUSet.parse("0-1")},
    }
    assert enf.apply(desired).ok
    assert host.reads == 2
    node.write(ctr, "cpu.shares", "7\n")  # someone else writes behind the agent's back
    clock.advance(10)
    desired[ctr][Knob.CPUSET_CPUS] = CPUSet.parse("2-3")
    report = enf.apply(desired)
    # only the knob the agent changed: its own earlier writes are trusted, not re-read
    assert {w.knob for w in report.planned} == {Knob.CPUSET_CPUS}  # widened, then narrowed
    assert host.reads == 2
    assert node.read(ctr, "cpuset.cpus") == "2-3"
    clock.advance(20)
    report = enf.apply(desired)
    assert [(w.cgroup, w.knob, w.value) for w in report.planned] == [(ctr, Knob.CPU_SHARES, 1024)]
    assert node.read(ctr, "cpu.shares") == "1024"


def test_a_failed_write_makes_the_next_pass_read_the_cgroup_again(tmp_path: Path) -> None:
    node = _node(tmp_path, 1)
    host = _CountingHost(node.host())
    clock = VirtualClock()
    enf = Enforcer(host, clock=clock, verify_period_s=30.0)  # type: ignore[arg-type]
    cg = node.container_cgroup(UID, "app")
    host.refuse = Knob.MEMORY_LIMIT
    desired: dict[str, dict[Knob, KnobValue]] = {
        cg: {Knob.MEMORY_LIMIT: 1 << 30, Knob.CPU_SHARES: 512}
    }
    assert len(enf.apply(desired).failed) == 1
    host.refuse = None
    clock.advance(1)
    report = enf.apply(desired)
    assert report.ok and [w.knob for w in report.planned] == [Knob.MEMORY_LIMIT]
    assert host.reads == 2
    assert node.read(cg, "memory.limit_in_bytes") == str(1 << 30)


def test_a_negative_verify_period_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="verify_period_s"):
        Enforcer(_node(tmp_path).host(), verify_period_s=-1.0)


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


@pytest.mark.cgroup
def test_on_real_cgroups_the_kernels_count_matches_the_threads_states(
    testbed: CgroupTestbed,
) -> None:
    testbed.add_pod(UID, "burstable", {"spin": 500, "idle": 100})
    testbed.spawn(UID, "spin", [sys.executable, "-c", "while True: pass"])
    testbed.spawn(UID, "idle", ["sleep", "600"])
    spin, idle = testbed.container_cgroup(UID, "spin"), testbed.container_cgroup(UID, "idle")
    pod = testbed.pod_cgroup(UID)
    host = testbed.host()
    time.sleep(0.5)  # past the interpreter's start-up, into the loop
    # the first sample of a cgroup always counts its tasks
    first = host.sample(time.time(), [spin, idle, pod]).cgroups
    # a spinning thread is always runnable (running or waiting for a cpu), a sleeper never
    assert first[spin].nr_running == 1
    assert first[idle].nr_running == 0
    assert first[pod].nr_running == 1  # the pod's count covers its containers' cgroups
