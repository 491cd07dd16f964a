"""LinuxHost and the enforcer on a real cgroup v2 (unified) hierarchy.

The v1 tests' counterpart: a kubelet-like hierarchy under a unique prefix
(`CgroupTestbed`, which builds it in the one v2 tree), processes running as containers, and
the kernel — not a fake tree — accepting, refusing and enforcing each knob: cpusets and
weights, `cpu.max` and `cpu.idle`, `memory.max`/`high`/`low`/`min` and `memory.reclaim`, and
`io.max` on a loop device, per pod and on the reclaimed root (v2 throttling is
hierarchical). These skip on a kernel that mounts v1; `sudo scripts/vm-cgroup2.sh` runs them
in a guest that boots a kernel with only v2.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import pytest

from pykatalyst.agent.config import AgentConfig
from pykatalyst.agent.enforcer import Enforcer
from pykatalyst.agent.host import cgroupfs
from pykatalyst.agent.host.base import CpuQuota, IoLatency, IoLimits, Knob, KnobValue
from pykatalyst.agent.io_policy import decide_io
from pykatalyst.api import names
from pykatalyst.cluster.clock import RealClock
from pykatalyst.topology.cpuset import CPUSet
from tests.agent.test_cgroup_real_v1 import _allowed_cpus
from tests.fixtures import cgroup_testbed as testbeds
from tests.fixtures.cgroup_testbed import CgroupTestbed

pytestmark = pytest.mark.cgroup

SHARED, RECLAIMED, DEDICATED = "5a4e0000-0000-4000-8000-0000000000c2", "reclaimed-2", "dedicated-2"
SLEEP = ["sleep", "600"]
MIB = 1 << 20


@pytest.fixture
def testbed() -> Iterator[CgroupTestbed]:
    reason = testbeds.testbed_unavailable_reason(blkio=True, version=2)
    if reason is not None:
        pytest.skip(f"real cgroup v2 test: {reason}")
    tb = CgroupTestbed(blkio=True)
    try:
        yield tb
    finally:
        tb.close()


def _pods(tb: CgroupTestbed) -> None:
    tb.add_pod(SHARED, "burstable", {"web": 500})
    tb.add_pod(RECLAIMED, "besteffort", ["batch"])
    tb.add_pod(DEDICATED, "guaranteed", {"db": 1000})


def test_discover_finds_the_pods_in_the_unified_hierarchy(testbed: CgroupTestbed) -> None:
    _pods(testbed)
    testbed.spawn(SHARED, "web", SLEEP)
    host = testbed.host()
    assert host.cgroup_version == 2
    found = {p.pod_uid: p for p in host.discover()}
    assert set(found) == {SHARED, RECLAIMED, DEDICATED}
    assert found[RECLAIMED].qos_class == "besteffort"
    assert found[DEDICATED].qos_class == "guaranteed"
    web = testbed.container_cgroup(SHARED, "web")
    assert {c.cgroup for c in found[SHARED].containers} == {web}
    # the kubelet's defaults, read back: cpu.weight from 512 shares, no cpu.max quota
    assert testbed.read(web, "cpu.weight") == "20"
    assert host.read_knobs(web)[Knob.CPU_QUOTA] == CpuQuota(None, 100_000)


def test_cpu_and_memory_knobs_are_in_the_v2_files_and_hold_the_processes(
    testbed: CgroupTestbed,
) -> None:
    cpus = CPUSet.parse(testbed.all_cpus)
    if len(cpus) < 2:
        pytest.skip("needs at least 2 cpus to give a dedicated pod its own")
    t = testbed
    _pods(t)
    web, batch = t.spawn(SHARED, "web", SLEEP), t.spawn(RECLAIMED, "batch", SLEEP)
    db = t.spawn(DEDICATED, "db", SLEEP)
    mine = CPUSet.of([cpus.max()])
    rest = cpus - mine
    web_cg, batch_cg = t.container_cgroup(SHARED, "web"), t.container_cgroup(RECLAIMED, "batch")
    desired: dict[str, dict[Knob, KnobValue]] = {
        t.pod_cgroup(DEDICATED): {Knob.CPUSET_CPUS: mine},
        t.container_cgroup(DEDICATED, "db"): {Knob.CPUSET_CPUS: mine},
        t.pod_cgroup(SHARED): {Knob.CPUSET_CPUS: rest, Knob.MEMORY_LOW: 64 * MIB},
        web_cg: {
            Knob.CPUSET_CPUS: rest,
            Knob.CPU_SHARES: 1024,
            Knob.MEMORY_LOW: 64 * MIB,
            Knob.MEMORY_MIN: 16 * MIB,
        },
        t.pod_cgroup(RECLAIMED): {
            Knob.CPUSET_CPUS: rest,
            Knob.CPU_IDLE: 1,
            Knob.MEMORY_LIMIT: 256 * MIB,
            Knob.MEMORY_HIGH: 240 * MIB,
        },
        batch_cg: {Knob.CPUSET_CPUS: rest, Knob.CPU_QUOTA: CpuQuota(50_000, 100_000)},
    }
    enforcer = Enforcer(t.host(), clock=RealClock())
    report = enforcer.apply(desired)
    assert report.ok, report.failed
    assert CPUSet.parse(t.read(t.container_cgroup(DEDICATED, "db"), "cpuset.cpus")) == mine
    assert t.read(web_cg, "cpu.weight") == "39"  # 1024 shares, as runc converts them
    assert t.read(web_cg, "memory.low") == str(64 * MIB)
    assert t.read(web_cg, "memory.min") == str(16 * MIB)
    assert t.read(t.pod_cgroup(RECLAIMED), "cpu.idle") == "1"
    assert t.read(t.pod_cgroup(RECLAIMED), "memory.max") == str(256 * MIB)
    assert t.read(t.pod_cgroup(RECLAIMED), "memory.high") == str(240 * MIB)
    assert t.read(batch_cg, "cpu.max") == "50000 100000"
    assert _allowed_cpus(db.pid) == mine
    assert _allowed_cpus(web.pid) == rest and _allowed_cpus(batch.pid) == rest
    assert enforcer.plan(desired) == []  # read back as written: converged
    # unlimited again: v2 writes "max"
    assert enforcer.apply({t.pod_cgroup(RECLAIMED): {Knob.MEMORY_HIGH: None}}).ok
    assert t.read(t.pod_cgroup(RECLAIMED), "memory.high") == "max"


def test_a_reclaimed_pod_over_its_memory_limit_is_oom_killed_in_its_cgroup(
    testbed: CgroupTestbed,
) -> None:
    t = testbed
    t.add_pod(RECLAIMED, "besteffort", ["batch"])
    pod = t.pod_cgroup(RECLAIMED)
    assert Enforcer(t.host(), clock=RealClock()).apply({pod: {Knob.MEMORY_LIMIT: 32 * MIB}}).ok
    hog = [sys.executable, "-c", "b = bytearray(96 << 20); b[::4096] = b'x' * len(b[::4096])"]
    proc = t.spawn(RECLAIMED, "batch", hog)
    assert proc.wait(timeout=300) == -9  # SIGKILL, from the kernel's OOM killer
    events = cgroupfs.parse_keyed(t.read(pod, "memory.events"))
    assert events.get("oom_kill", 0) >= 1


def test_memory_reclaim_drops_a_reclaimed_pods_page_cache(
    testbed: CgroupTestbed, loop_device: tuple[str, str]
) -> None:
    dev, _ = loop_device
    t = testbed
    t.add_pod(RECLAIMED, "besteffort", ["batch"])
    pod = t.pod_cgroup(RECLAIMED)
    made = subprocess.run(["mkfs.ext4", "-q", "-F", dev], capture_output=True, timeout=300)
    if made.returncode != 0:
        pytest.skip(f"mkfs.ext4 on the loop device: {made.stderr.decode().strip()}")
    with tempfile.TemporaryDirectory(prefix="pykatalyst-fs-") as mnt:
        subprocess.run(["mount", dev, mnt], check=True, timeout=60)
        try:
            dd = ["dd", "if=/dev/zero", f"of={mnt}/data", "bs=1M", "count=24", "conv=fsync"]
            assert t.spawn(RECLAIMED, "batch", [*dd, "status=none"]).wait(timeout=300) == 0

            def cache() -> int:
                # a file's page cache; shmem (the loop device's own backing file, where
                # that is on tmpfs) only swap could take back
                stat = cgroupfs.parse_keyed(t.read(pod, "memory.stat"))
                return stat.get("file", 0) - stat.get("shmem", 0)

            before = cache()
            if before < 8 * MIB:
                pytest.skip(f"the write left only {before} bytes of page cache in the cgroup")
            enforcer = Enforcer(t.host(), clock=RealClock())
            report = enforcer.apply({pod: {Knob.MEMORY_RECLAIM: before}})
            assert report.ok, report.failed
            assert cache() < before // 4
        finally:
            subprocess.run(["umount", mnt], check=False, timeout=60)


def _dd(t: CgroupTestbed, uid: str, dev: str, mib: int, seek: int = 0) -> subprocess.Popen[bytes]:
    argv = ["dd", "if=/dev/zero", f"of={dev}", "bs=1M", f"count={mib}", f"seek={seek}"]
    return t.spawn(uid, "batch" if uid != SHARED else "web", [*argv, "oflag=direct", "status=none"])


def test_io_max_throttles_a_reclaimed_pod_and_not_a_shared_one(
    testbed: CgroupTestbed, loop_device: tuple[str, str]
) -> None:
    dev, majmin = loop_device
    t = testbed
    t.add_pod(SHARED, "burstable", {"web": 500})
    t.add_pod(RECLAIMED, "besteffort", ["batch"])
    cfg = AgentConfig.model_validate(
        {
            "io": {
                "levels": {
                    "reclaimed_cores": {
                        "weight": 10,
                        "limits": [{"device": majmin, "write_bps": "4Mi"}],
                    },
                    "shared_cores": {"weight": 500},
                }
            }
        }
    )
    pods = [
        ("default/web", names.QOS_SHARED_CORES, t.pod_cgroup(SHARED), ()),
        ("default/batch", names.QOS_RECLAIMED_CORES, t.pod_cgroup(RECLAIMED), ()),
    ]
    desired, _ = decide_io(pods, None, cfg.io.level_values(), None, 2)
    enforcer = Enforcer(t.host(), clock=RealClock())
    report = enforcer.apply(desired)
    assert report.ok, report.failed
    batch = t.pod_cgroup(RECLAIMED)
    assert t.read(batch, "io.max") == f"{majmin} rbps=max wbps={4 * MIB} riops=max wiops=max"
    assert enforcer.plan(desired) == []
    start = time.monotonic()
    assert _dd(t, SHARED, dev, 8).wait(timeout=300) == 0
    free = time.monotonic() - start
    start = time.monotonic()
    assert _dd(t, RECLAIMED, dev, 8).wait(timeout=300) == 0
    held = time.monotonic() - start
    print(f"8 MiB written: shared pod {free:.2f} s, reclaimed pod under 4 MiB/s {held:.2f} s")
    assert held >= 0.6 * 8 / 4, (free, held)  # ~2 s at 4 MiB/s
    assert held > free, (free, held)
    # lifting the limit clears the kernel's rule
    assert enforcer.apply({batch: {Knob.IO_MAX: IoLimits()}}).ok
    assert t.read(batch, "io.max") == ""


def test_the_reclaimed_roots_io_cap_binds_its_pods_together(
    testbed: CgroupTestbed, loop_device: tuple[str, str]
) -> None:
    """v2 throttling is hierarchical: the cap goes on the reclaimed root itself, and two
    pods writing at once share it."""
    dev, majmin = loop_device
    t = testbed
    uids = [f"{RECLAIMED}-{i}" for i in range(2)]
    for uid in uids:
        t.add_pod(uid, "besteffort", ["batch"])
    root = f"{t.kubepods}/besteffort"
    cfg = AgentConfig.model_validate(
        {"io": {"reclaimed_root": {"limits": [{"device": majmin, "write_bps": "8Mi"}]}}}
    )
    pods = [
        (
            f"default/{u}",
            names.QOS_RECLAIMED_CORES,
            t.pod_cgroup(u),
            (t.container_cgroup(u, "batch"),),
        )
        for u in uids
    ]
    desired, _ = decide_io(pods, root, {}, cfg.io.reclaimed_root.value(), 2)
    assert root in desired
    assert Enforcer(t.host(), clock=RealClock()).apply(desired).ok
    assert t.read(root, "io.max").startswith(f"{majmin} rbps=max wbps={8 * MIB}")
    start = time.monotonic()
    procs = [_dd(t, u, dev, 8, seek=8 * i) for i, u in enumerate(uids)]
    assert all(p.wait(timeout=300) == 0 for p in procs)
    took = time.monotonic() - start
    print(f"two pods under a root capped at 8 MiB/s wrote 16 MiB in {took:.2f} s")
    assert took >= 0.6 * 16 / 8, took  # ~2 s together, not ~1 s each on its own


def test_a_knob_this_kernel_lacks_is_reported_once_and_the_rest_applies(
    testbed: CgroupTestbed, loop_device: tuple[str, str]
) -> None:
    _, majmin = loop_device
    t = testbed
    t.add_pod(SHARED, "burstable", {"web": 500})
    pod = t.pod_cgroup(SHARED)
    has_latency = t.path(pod, "io.latency").exists()
    desired: dict[str, dict[Knob, KnobValue]] = {
        pod: {
            Knob.IO_LATENCY: IoLatency(((majmin, 5000),)),
            Knob.MEMORY_LOW: 32 * MIB,
        }
    }
    enforcer = Enforcer(t.host(), clock=RealClock())
    report = enforcer.apply(desired)
    assert t.read(pod, "memory.low") == str(32 * MIB)
    if has_latency:
        assert report.ok, report.failed
        assert t.read(pod, "io.latency").startswith(f"{majmin} target=5")
    else:  # a kernel built without io.latency (Debian's): said, not failed
        assert Knob.IO_LATENCY in report.unsupported
        assert not [f for f in report.failed if not f.unsupported]


def test_the_agent_runs_its_pools_on_the_unified_hierarchy(testbed: CgroupTestbed) -> None:
    """The whole agent, not single knobs: it finds the pods in the v2 tree, sizes its pools
    and writes them, the reclaimed root idle and capped by cpu.max, with no write refused."""
    from tests.agent.inmemory_host import reclaiming
    from tests.agent.test_cgroup_real_v1 import OVERLAP_IDLE_ROOT, RECLAIMED_POD, _AgentOnTestbed

    config = reclaiming(OVERLAP_IDLE_ROOT)
    world = _AgentOnTestbed(testbed, config)
    web = world.pod("web", "burstable", cpu="1")
    batch = world.pod("batch", "besteffort", **RECLAIMED_POD)
    web_proc = testbed.spawn(web, "app", SLEEP)
    batch_proc = testbed.spawn(batch, "app", [sys.executable, "-c", "while True: pass"])
    plan = world.run()
    assert plan.enforce.get("failed", 0) == 0, plan.warnings
    reclaim, share = plan.pool(names.POOL_RECLAIM), plan.pool(names.POOL_SHARE)
    assert reclaim is not None and share is not None
    assert _allowed_cpus(web_proc.pid) == share.cpuset
    assert _allowed_cpus(batch_proc.pid) == reclaim.cpuset
    root = f"{testbed.kubepods}/besteffort"
    assert testbed.read(root, "cpu.idle") == "1"
    size = reclaim.terms["reclaimed_cores_size"]
    assert testbed.read(root, "cpu.max") == f"{size * 100_000} 100000"
    # the reclaimed pod held to its reclaimed_memory
    assert testbed.read(testbed.pod_cgroup(batch), "memory.max") == str(256 * MIB)
