"""Memory and disk I/O knobs on this machine's real cgroup v1 hierarchies.

Pods are cgroups under a unique prefix (`CgroupTestbed`, with blkio); a file-backed loop
device is the disk. The io settings come from an agent configuration through
`io_policy`, and the kernel, not a fake tree, decides what a process can do.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pykatalyst.agent.config import AgentConfig
from pykatalyst.agent.enforcer import Enforcer
from pykatalyst.agent.host import cgroupfs
from pykatalyst.agent.host.base import IoLimits, Knob
from pykatalyst.agent.io_policy import decide_io
from pykatalyst.agent.memory_policy import oom_score_adj
from pykatalyst.api import names
from pykatalyst.cluster.clock import RealClock
from tests.fixtures.cgroup_testbed import CgroupTestbed, testbed_unavailable_reason

pytestmark = pytest.mark.cgroup

SHARED, RECLAIMED = "5a4e0000-0000-4000-8000-0000000000b1", "reclaimed-io-1"
MIB = 1 << 20
WRITE_MIB = 8
LIMIT_MIB_S = 4


def _v1_reason() -> str | None:
    if not Path("/sys/fs/cgroup/blkio/cgroup.procs").exists():
        return "no cgroup v1 blkio hierarchy at /sys/fs/cgroup/blkio"
    return testbed_unavailable_reason(blkio=True)


@pytest.fixture
def testbed() -> Iterator[CgroupTestbed]:
    reason = _v1_reason()
    if reason is not None:
        pytest.skip(f"real cgroup v1 test: {reason}")
    tb = CgroupTestbed(blkio=True, move_memory=True)
    try:
        yield tb
    finally:
        tb.close()


def _dd_seconds(tb: CgroupTestbed, uid: str, container: str, dev: str) -> float:
    argv = [
        "dd",
        "if=/dev/zero",
        f"of={dev}",
        "bs=1M",
        f"count={WRITE_MIB}",
        "oflag=direct",
        "status=none",
    ]
    start = time.monotonic()
    proc = tb.spawn(uid, container, argv)
    assert proc.wait(timeout=120) == 0
    return time.monotonic() - start


def test_reclaimed_pods_writes_are_throttled_and_a_shared_pods_are_not(
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
                        "limits": [{"device": majmin, "write_bps": f"{LIMIT_MIB_S}Mi"}]
                    },
                }
            }
        }
    )
    batch = t.container_cgroup(RECLAIMED, "batch")
    pods = [
        ("default/web", names.QOS_SHARED_CORES, t.pod_cgroup(SHARED), ()),
        ("default/batch", names.QOS_RECLAIMED_CORES, t.pod_cgroup(RECLAIMED), (batch,)),
    ]
    desired, _ = decide_io(pods, None, cfg.io.level_values(), None, 1)
    host = t.host()
    enforcer = Enforcer(host, clock=RealClock())
    report = enforcer.apply(desired)
    assert report.ok, report.failed
    assert t.read(batch, "blkio.throttle.write_bps_device") == f"{majmin} {LIMIT_MIB_S * MIB}"
    assert enforcer.plan(desired) == []  # read back as written: converged

    free = _dd_seconds(t, SHARED, "web", dev)
    held = _dd_seconds(t, RECLAIMED, "batch", dev)
    # 8 MiB at 4 MiB/s: about 2 s (the throttle lets one slice through at once)
    assert held >= 0.6 * WRITE_MIB / LIMIT_MIB_S, (free, held)
    assert held > 3 * free, (free, held)

    # lifting the limit (the configuration no longer has it) clears the kernel's rule
    assert enforcer.apply({batch: {Knob.IO_MAX: IoLimits()}}).ok
    assert t.read(batch, "blkio.throttle.write_bps_device") == ""


def test_the_reclaimed_roots_cap_holds_on_v1_split_over_its_pods(
    testbed: CgroupTestbed, loop_device: tuple[str, str]
) -> None:
    """On v1 a limit on the root binds nobody (throttling is flat): the agent splits the
    root's cap over the containers below it, so two reclaimed pods writing at once get
    half of it each."""
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
            f"default/{uid}",
            names.QOS_RECLAIMED_CORES,
            t.pod_cgroup(uid),
            (t.container_cgroup(uid, "batch"),),
        )
        for uid in uids
    ]
    desired, terms = decide_io(pods, root, {}, cfg.io.reclaimed_root.value(), 1)
    assert root not in desired and "2 containers" in terms[root]["io.max"]
    report = Enforcer(t.host(), clock=RealClock()).apply(desired)
    assert report.ok, report.failed
    for uid in uids:
        assert t.read(t.container_cgroup(uid, "batch"), "blkio.throttle.write_bps_device") == (
            f"{majmin} {4 * MIB}"
        )
    start = time.monotonic()
    argv = ["dd", "if=/dev/zero", f"of={dev}", "bs=1M", f"count={WRITE_MIB}", "oflag=direct"]
    procs = [
        t.spawn(uid, "batch", [*argv, f"seek={i * WRITE_MIB}", "status=none"])
        for i, uid in enumerate(uids)
    ]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    took = time.monotonic() - start
    print(f"two pods under a root capped at 8 MiB/s wrote {2 * WRITE_MIB} MiB in {took:.2f} s")
    # 16 MiB in all at 8 MiB/s together: about 2 s (each 8 MiB at 4 MiB/s), not 1 s
    assert took >= 0.6 * 2 * WRITE_MIB / 8, took


def test_oom_score_adj_reaches_the_containers_processes(testbed: CgroupTestbed) -> None:
    t = testbed
    t.add_pod(RECLAIMED, "besteffort", ["batch"])
    proc = t.spawn(RECLAIMED, "batch", ["sleep", "60"])
    cg = t.container_cgroup(RECLAIMED, "batch")
    adj = oom_score_adj(-50)
    assert adj == 500
    enforcer = Enforcer(t.host(), clock=RealClock())
    assert enforcer.apply({cg: {Knob.OOM_SCORE_ADJ: adj}}).ok
    assert Path(f"/proc/{proc.pid}/oom_score_adj").read_text().strip() == "500"
    assert enforcer.plan({cg: {Knob.OOM_SCORE_ADJ: adj}}) == []


def test_force_empty_drops_a_reclaimed_pods_page_cache(testbed: CgroupTestbed) -> None:
    t = testbed
    t.add_pod(RECLAIMED, "besteffort", ["batch"])
    with tempfile.TemporaryDirectory(prefix="pykatalyst-cache-", dir="/var/tmp") as d:
        target = Path(d) / "data"
        proc = t.spawn(
            RECLAIMED, "batch", ["dd", "if=/dev/zero", f"of={target}", "bs=1M", "count=32"]
        )
        assert proc.wait(timeout=60) == 0

        def cache() -> int:
            stat = cgroupfs.parse_keyed(t.read(t.pod_cgroup(RECLAIMED), "memory.stat"))
            return stat.get("total_cache", 0)

        before = cache()
        if before < 8 * MIB:
            pytest.skip(f"the write left only {before} bytes of page cache in the cgroup")
        report = Enforcer(t.host(), clock=RealClock()).apply(
            {t.pod_cgroup(RECLAIMED): {Knob.MEMORY_RECLAIM: before}}
        )
        assert report.ok, report.failed
        assert cache() < before // 4
