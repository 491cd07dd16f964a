"""LinuxHost on fake node trees: every kubelet layout, knob read-back, sampling, faults.

Fake trees hold plain files: a write is stored as written and nothing is enforced, so these
tests check layouts, formats and conversions; tests/agent/test_cgroup_real_v1.py checks the
kernel's side on this machine.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from pykatalyst.agent.host import cgroupfs
from pykatalyst.agent.host.base import CpuQuota, Knob, KnobValue, KnobWrite
from pykatalyst.agent.host.linux import LinuxHost
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology
from tests.fixtures.fake_node import FakeNode, FakePod, container_id, make_kubelet_tree

UID_SHARED = "8d6f0a6c-1111-4c3e-9a1e-000000000001"
UID_RECLAIMED = "8d6f0a6c-2222-4c3e-9a1e-000000000002"
UID_DEDICATED = "8d6f0a6c-3333-4c3e-9a1e-000000000003"

PODS = [
    FakePod(UID_SHARED, "burstable", ("web", "sidecar")),
    FakePod(UID_RECLAIMED, "besteffort", ("batch",)),
    FakePod(UID_DEDICATED, "guaranteed", ("db",)),
]

LAYOUTS = list(itertools.product((1, 2), ("cgroupfs", "systemd"), ("containerd", "crio", "docker")))


def _node(tmp_path: Path, version: int = 2, driver: str = "cgroupfs", **kw: object) -> FakeNode:
    return make_kubelet_tree(tmp_path, PODS, version=version, driver=driver, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("version", "driver", "runtime"), LAYOUTS)
def test_discover_finds_every_pod_and_container_in_kubelets_layouts(
    tmp_path: Path, version: int, driver: str, runtime: str
) -> None:
    node = _node(tmp_path, version, driver, runtime=runtime)
    host = LinuxHost(root=tmp_path)  # driver and version detected, not told
    assert host.cgroup_version == version
    assert host.driver == driver
    pods = {p.pod_uid: p for p in host.discover()}
    assert set(pods) == {UID_SHARED, UID_RECLAIMED, UID_DEDICATED}
    assert pods[UID_SHARED].qos_class == "burstable"
    assert pods[UID_RECLAIMED].qos_class == "besteffort"
    assert pods[UID_DEDICATED].qos_class == "guaranteed"
    for pod in PODS:
        found = pods[pod.uid]
        assert found.cgroup == node.pod_cgroup(pod.uid)
        assert {c.container_id for c in found.containers} == {
            container_id(pod.uid, name) for name in pod.containers
        }
        for c in found.containers:
            assert c.cgroup.startswith(found.cgroup + "/")
            assert node.path(c.cgroup, "cgroup.procs").exists()


def test_systemd_uids_get_their_dashes_back(tmp_path: Path) -> None:
    node = _node(tmp_path, 2, "systemd")
    assert "_" in node.pod_cgroup(UID_SHARED)  # systemd escapes '-' in unit names
    assert UID_SHARED in {p.pod_uid for p in node.host().discover()}


def test_discover_with_kubepods_nested_below_a_prefix(tmp_path: Path) -> None:
    node = make_kubelet_tree(tmp_path, PODS, version=1, kubepods="test-x/kubepods")
    host = LinuxHost(root=tmp_path, kubepods="test-x/kubepods")
    assert {p.cgroup for p in host.discover()} == {node.pod_cgroup(p.uid) for p in PODS}


def test_no_kubepods_cgroup_means_no_pods(tmp_path: Path) -> None:
    make_kubelet_tree(tmp_path, [], version=2)
    assert LinuxHost(root=tmp_path, kubepods="elsewhere").discover() == []


def test_bad_driver_is_refused(tmp_path: Path) -> None:
    make_kubelet_tree(tmp_path, [], version=2)
    with pytest.raises(ValueError, match=r"driver.*accepted"):
        LinuxHost(root=tmp_path, driver="runc")  # type: ignore[arg-type]


def test_sandbox_cgroups_show_up_as_containers(tmp_path: Path) -> None:
    node = make_kubelet_tree(tmp_path, [FakePod("p1", "burstable", ("app",), with_sandbox=True)])
    (pod,) = node.host().discover()
    assert len(pod.containers) == 2  # the pause container has a cgroup too


def test_co_mounted_cpu_and_cpuacct(tmp_path: Path) -> None:
    node = _node(tmp_path, 1, comount_cpu_cpuacct=True)
    host = node.host()
    cg = node.container_cgroup(UID_SHARED, "web")
    assert host.mounts.controller_dir("cpu") == tmp_path / "sys/fs/cgroup/cpu,cpuacct"
    node.set_cpu_usage(cg, 5.0)
    host.sample(10.0, [cg])
    node.set_cpu_usage(cg, 6.5)
    assert host.sample(11.0, [cg]).cgroups[cg].cpu_usage_cores == pytest.approx(1.5)


ALL_KNOBS: dict[Knob, KnobValue] = {
    Knob.CPUSET_CPUS: CPUSet.parse("2-3,10-11"),
    Knob.CPUSET_MEMS: CPUSet.parse("0"),
    Knob.CPU_SHARES: 2048,
    Knob.CPU_QUOTA: CpuQuota(150_000, 100_000),
    Knob.CPU_IDLE: 1,
    Knob.MEMORY_LIMIT: 3 << 30,
    Knob.MEMORY_HIGH: 2 << 30,
}

# What each knob must look like in the files, per version (spelled out independently).
EXPECTED_FILES = {
    1: {
        "cpuset.cpus": "2-3,10-11",
        "cpuset.mems": "0",
        "cpu.shares": "2048",
        "cpu.cfs_quota_us": "150000",
        "cpu.cfs_period_us": "100000",
        "cpu.idle": "1",
        "memory.limit_in_bytes": str(3 << 30),
    },
    2: {
        "cpuset.cpus": "2-3,10-11",
        "cpuset.mems": "0",
        "cpu.weight": "79",  # 1 + (2046 * 9999) // 262142
        "cpu.max": "150000 100000",
        "cpu.idle": "1",
        "memory.max": str(3 << 30),
        "memory.high": str(2 << 30),
    },
}


@pytest.mark.parametrize(("version", "driver"), [(1, "cgroupfs"), (2, "systemd"), (2, "cgroupfs")])
def test_knobs_land_in_the_right_files_and_read_back(
    tmp_path: Path, version: int, driver: str
) -> None:
    node = _node(tmp_path, version, driver)
    host = node.host()
    cg = node.container_cgroup(UID_SHARED, "web")
    result = host.apply([KnobWrite(cg, k, v) for k, v in ALL_KNOBS.items()])
    for name, text in EXPECTED_FILES[version].items():
        assert node.read(cg, name) == text, name
    back = host.read_knobs(cg)
    if version == 1:
        # memory.high has no v1 file: reported unsupported, everything else written
        assert [f.write.knob for f in result.failed] == [Knob.MEMORY_HIGH]
        assert result.failed[0].unsupported
        assert Knob.MEMORY_HIGH not in back
        assert {k: back[k] for k in ALL_KNOBS if k is not Knob.MEMORY_HIGH} == {
            k: v for k, v in ALL_KNOBS.items() if k is not Knob.MEMORY_HIGH
        }
    else:
        assert result.failed == ()
        for knob, value in ALL_KNOBS.items():
            assert cgroupfs.values_equal(knob, back[knob], value, 2, host.page_size), knob


@pytest.mark.parametrize("version", [1, 2])
def test_unlimited_values_read_back_as_none(tmp_path: Path, version: int) -> None:
    node = _node(tmp_path, version)
    host = node.host()
    cg = node.pod_cgroup(UID_SHARED)
    host.apply(
        [KnobWrite(cg, Knob.CPU_QUOTA, CpuQuota(50_000)), KnobWrite(cg, Knob.MEMORY_LIMIT, 1 << 30)]
    )
    host.apply(
        [KnobWrite(cg, Knob.CPU_QUOTA, CpuQuota(None)), KnobWrite(cg, Knob.MEMORY_LIMIT, None)]
    )
    back = host.read_knobs(cg)
    assert back[Knob.CPU_QUOTA] == CpuQuota(None, 100_000)
    assert back[Knob.MEMORY_LIMIT] is None
    quota_file = "cpu.cfs_quota_us" if version == 1 else "cpu.max"
    assert node.read(cg, quota_file) == ("-1" if version == 1 else "max 100000")


def test_a_vanished_cgroup_is_reported_as_vanished(tmp_path: Path) -> None:
    node = _node(tmp_path, 2)
    host = node.host()
    cg = node.container_cgroup(UID_RECLAIMED, "batch")
    node.remove_pod(UID_RECLAIMED)
    result = host.apply([KnobWrite(cg, Knob.CPU_IDLE, 1)])
    (failure,) = result.failed
    assert failure.vanished and "gone" in failure.error
    assert host.read_knobs(cg) == {}
    assert UID_RECLAIMED not in {p.pod_uid for p in host.discover()}


def test_a_missing_knob_file_is_unsupported_not_vanished(tmp_path: Path) -> None:
    node = _node(tmp_path, 1)
    host = node.host()
    cg = node.container_cgroup(UID_SHARED, "web")
    node.path(cg, "cpu.idle").unlink()  # a kernel older than 5.15 has no cpu.idle
    (failure,) = host.apply([KnobWrite(cg, Knob.CPU_IDLE, 1)]).failed
    assert failure.unsupported and not failure.vanished
    assert "cpu.idle" in failure.error
    assert Knob.CPU_IDLE not in host.read_knobs(cg)


def test_an_unwritable_knob_names_the_file_and_the_error(tmp_path: Path) -> None:
    node = _node(tmp_path, 2)
    host = node.host()
    cg = node.container_cgroup(UID_SHARED, "web")
    path = node.path(cg, "cpu.max")
    path.unlink()
    path.mkdir()  # writing now fails with EISDIR, a real OS refusal
    good = KnobWrite(cg, Knob.CPU_IDLE, 1)
    bad = KnobWrite(cg, Knob.CPU_QUOTA, CpuQuota(20_000))
    result = host.apply([bad, good])
    assert result.applied == (good,)  # one failure does not stop the others
    (failure,) = result.failed
    assert not failure.vanished and failure.errno is not None
    assert str(path) in failure.error and "EISDIR" in failure.error


def test_invalid_values_are_refused_before_touching_files(tmp_path: Path) -> None:
    node = _node(tmp_path, 2)
    host = node.host()
    cg = node.container_cgroup(UID_SHARED, "web")
    (failure,) = host.apply([KnobWrite(cg, Knob.CPUSET_CPUS, CPUSet())]).failed
    assert "cpuset.cpus" in failure.error and "accepted" in failure.error
    assert node.read(cg, "cpuset.cpus") == ""  # untouched


@pytest.mark.parametrize("version", [1, 2])
def test_sample_reports_cgroup_usage_throttling_and_memory(tmp_path: Path, version: int) -> None:
    node = _node(tmp_path, version)
    host = node.host()
    cg = node.container_cgroup(UID_SHARED, "web")
    node.set_cpu_usage(cg, 100.0)
    first = host.sample(1000.0, [cg])
    assert first.cgroups[cg].cpu_usage_cores is None  # no rate from one sample
    assert first.cgroups[cg].cpu_usage_total_s == pytest.approx(100.0)
    node.set_cpu_usage(cg, 103.0)
    node.set_throttling(cg, periods=20, throttled=5, throttled_s=0.25)
    gib = 1 << 30
    node.set_memory(
        cg, usage=3 * gib, rss=2 * gib, cache=gib, shmem=gib // 4, inactive_file=gib // 2
    )
    node.add_task(cg, 4001, "R")
    node.add_task(cg, 4002, "S")
    node.add_task(cg, 4003, "R")
    stats = host.sample(1002.0, [cg]).cgroups[cg]
    assert stats.cpu_usage_cores == pytest.approx(1.5)
    assert (stats.nr_periods, stats.nr_throttled) == (20, 5)
    assert stats.throttled_s == pytest.approx(0.25)
    assert stats.memory_usage == 3 * gib
    assert (stats.memory_rss, stats.memory_cache, stats.memory_shmem) == (2 * gib, gib, gib // 4)
    # the kubelet's working set: usage minus inactive file pages
    assert stats.memory_working_set == 3 * gib - gib // 2
    assert stats.nr_running == 2


def test_pod_sample_counts_runnable_tasks_of_its_containers(tmp_path: Path) -> None:
    node = _node(tmp_path, 2)
    node.add_task(node.container_cgroup(UID_SHARED, "web"), 11, "R")
    node.add_task(node.container_cgroup(UID_SHARED, "sidecar"), 12, "R")
    pod = node.pod_cgroup(UID_SHARED)
    assert node.host().sample(0.0, [pod]).cgroups[pod].nr_running == 2


def test_cgroup_pressure_on_v2(tmp_path: Path) -> None:
    node = _node(tmp_path, 2)
    host = node.host()
    cg = node.pod_cgroup(UID_SHARED)
    node.set_pressure(cg, "cpu", 12.5)
    node.set_pressure(cg, "memory", 3.25)
    node.set_pressure(None, "cpu", 7.0)
    sample = host.sample(0.0, [cg])
    assert sample.cgroups[cg].cpu_psi_some_avg10 == 12.5
    assert sample.cgroups[cg].memory_psi_some_avg10 == 3.25
    assert sample.cpu_psi_some_avg10 == 7.0


def test_sample_skips_vanished_cgroups(tmp_path: Path) -> None:
    node = _node(tmp_path, 1)
    host = node.host()
    gone = node.container_cgroup(UID_RECLAIMED, "batch")
    kept = node.container_cgroup(UID_SHARED, "web")
    host.sample(0.0, [gone, kept])
    node.remove_pod(UID_RECLAIMED)
    assert set(host.sample(1.0, [gone, kept]).cgroups) == {kept}


def test_machine_wide_sample(tmp_path: Path) -> None:
    topo = CPUTopology.synthetic(1, 2, 2, 1, memory_per_numa=8 << 30)
    node = make_kubelet_tree(tmp_path, [], topology=topo)
    host = node.host()
    assert host.topology().num_cpus == 4
    node.set_cpu_times(busy={0: 100, 1: 100, 2: 100, 3: 100}, idle={0: 100, 1: 100, 2: 100, 3: 100})
    node.set_kswapd_steal(1000)
    first = host.sample(10.0, [])
    assert first.cpu_usage_ratio == []  # unknown until a second sample
    node.set_cpu_times(busy={0: 200, 1: 100, 2: 150, 3: 100}, idle={0: 100, 1: 200, 2: 150, 3: 100})
    node.set_kswapd_steal(3000)
    node.set_loadavg(1.5, 2.5, 3.5)
    s = host.sample(12.0, [])
    assert list(s.cpu_usage_ratio) == [1.0, 0.0, 0.5, 0.0]
    assert s.load == (1.5, 2.5, 3.5)
    assert s.memory is not None
    assert s.memory.total == 8 << 30
    assert s.memory.kswapd_steal_pages_per_s == pytest.approx(1000.0)
    assert s.memory.watermark_scale_factor == 10
    (numa,) = s.numa_memory.values()
    assert numa.total == 8 << 30
    # zoneinfo watermarks are pages; the sample speaks bytes
    assert numa.watermark_min == 100 * host.page_size
    assert numa.watermark_low < numa.watermark_high


@pytest.mark.parametrize("version", [1, 2])
def test_an_explicit_cgroup_root_needs_no_mount_table(tmp_path: Path, version: int) -> None:
    node = _node(tmp_path, version)
    (tmp_path / "proc/self/mounts").unlink()
    host = LinuxHost(root=tmp_path, cgroup_root=tmp_path / "sys/fs/cgroup")
    assert host.cgroup_version == version
    assert {p.pod_uid for p in host.discover()} == {p.uid for p in PODS}
    # and without either, the usual place is probed
    assert LinuxHost(root=tmp_path).cgroup_version == version
    assert node.host().driver == "cgroupfs"


@pytest.mark.parametrize("version", [1, 2])
def test_cumulative_cpu_time_is_read_without_disturbing_the_samples_rates(
    tmp_path: Path, version: int
) -> None:
    node = _node(tmp_path, version)
    host = node.host()
    cg = node.container_cgroup(UID_SHARED, "web")
    node.set_cpu_usage(cg, 100.0)
    host.sample(1000.0, [cg])
    node.set_cpu_usage(cg, 101.5)
    assert host.cpu_usage_s(cg) == pytest.approx(101.5)
    node.set_cpu_usage(cg, 104.0)
    assert host.cpu_usage_s(cg) == pytest.approx(104.0)
    # the sample's rate still runs from the previous sample, not from the reads between
    assert host.sample(1002.0, [cg]).cgroups[cg].cpu_usage_cores == pytest.approx(2.0)
    assert host.cpu_usage_s(f"{cg}-gone") is None
