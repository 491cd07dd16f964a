"""Memory isolation decisions: pressure states, the memory guard, the cache reaper,
protection of latency-sensitive pods and the OOM priority ladder (Katalyst's memory
advisor and memory_enhancement semantics)."""

from __future__ import annotations

import errno
import itertools
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pykatalyst.agent.config import MemoryGuardConfig
from pykatalyst.agent.enforcer import Enforcer
from pykatalyst.agent.host.base import Knob, KnobWrite, MemoryInfo, NumaMemory
from pykatalyst.agent.memory_policy import (
    CacheHolder,
    MemoryInputs,
    MemoryPod,
    PressureLevel,
    cache_drop_victims,
    decide_memory,
    memory_guard,
    memory_pressure,
    oom_score_adj,
    protection,
    protection_totals,
)
from pykatalyst.api import names
from pykatalyst.api.qos import OOM_PRIORITY_RANGES
from pykatalyst.cluster.clock import VirtualClock
from tests.fixtures.fake_node import FakePod, make_kubelet_tree

GI = 1024**3
LEVEL_ORDER = (
    names.QOS_RECLAIMED_CORES,
    names.QOS_SHARED_CORES,
    names.QOS_DEDICATED_CORES,
    names.QOS_SYSTEM_CORES,
)

sizes = st.integers(min_value=0, max_value=1 << 40)


# -- pressure ------------------------------------------------------------------------------


@given(
    free=sizes,
    less=sizes,
    total=st.integers(1, 1 << 40),
    wsf=st.integers(1, 1000),
    floor=sizes,
)
def test_less_free_memory_never_means_less_pressure(
    free: int, less: int, total: int, wsf: int, floor: int
) -> None:
    rank = {PressureLevel.NONE: 0, PressureLevel.TUNE_MEMCG: 1, PressureLevel.DROP_CACHE: 2}
    hi = memory_pressure(free, total, wsf, floor)
    lo = memory_pressure(max(free - less, 0), total, wsf, floor)
    assert rank[lo.level] >= rank[hi.level]
    assert lo.target_reclaim >= hi.target_reclaim


@given(free=sizes, total=st.integers(1, 1 << 40), wsf=st.integers(1, 1000), floor=sizes)
def test_a_drop_asks_for_enough_to_get_back_above_twice_the_critical_watermark(
    free: int, total: int, wsf: int, floor: int
) -> None:
    p = memory_pressure(free, total, wsf, floor)
    assert p.critical >= floor
    if p.level is PressureLevel.DROP_CACHE:
        assert free + p.target_reclaim == 2 * p.critical
    else:
        assert p.target_reclaim == 0


def test_katalyst_thresholds() -> None:
    # critical = max(4Gi, 2 × 64Gi × 10 / 10000): the 4Gi floor wins
    assert memory_pressure(3 * GI, 64 * GI, 10, 4 * GI).level is PressureLevel.DROP_CACHE
    assert memory_pressure(3 * GI, 64 * GI, 10, 4 * GI).target_reclaim == 5 * GI
    assert memory_pressure(7 * GI, 64 * GI, 10, 4 * GI).level is PressureLevel.TUNE_MEMCG
    assert memory_pressure(8 * GI, 64 * GI, 10, 4 * GI).level is PressureLevel.NONE


# -- cache reaper --------------------------------------------------------------------------

holders = st.lists(
    st.builds(
        CacheHolder,
        uid=st.uuids().map(str),
        cgroup=st.just("cg"),
        cache=st.integers(0, 1 << 34),
        numas=st.sets(st.integers(0, 3), min_size=1).map(lambda s: tuple(sorted(s))),
    ),
    max_size=12,
    unique_by=lambda h: h.uid,
)


@given(hs=holders, target=st.integers(0, 1 << 36), ratio=st.floats(0, 0.1), numa=st.none())
def test_the_reaper_takes_the_largest_caches_and_stops_once_the_target_is_met(
    hs: list[CacheHolder], target: int, ratio: float, numa: None
) -> None:
    total = 64 * GI
    got = cache_drop_victims(hs, target, total, ratio, numa)
    floor = total * ratio
    assert all(h.cache >= floor and h.cache > 0 for h in got)
    assert [h.cache for h in got] == sorted((h.cache for h in got), reverse=True)
    eligible = [h for h in hs if h.cache >= floor and h.cache > 0]
    if target <= 0:
        assert got == []
    elif sum(h.cache for h in eligible) > target:
        assert sum(h.cache for h in got) > target
        # no pod more than needed: without the last one the target is not met
        assert sum(h.cache for h in got[:-1]) <= target
    else:
        assert len(got) == len(eligible)
    skipped = [h for h in eligible if h not in got]
    assert all(s.cache <= got[-1].cache for s in skipped) if got else True


@given(hs=holders, numa=st.integers(0, 3))
def test_a_numa_nodes_pressure_reaps_only_pods_that_allocate_there(
    hs: list[CacheHolder], numa: int
) -> None:
    got = cache_drop_victims(hs, 1 << 40, 64 * GI, 0.0, numa)
    assert all(numa in h.numas for h in got)


# -- memory guard --------------------------------------------------------------------------

numa_mem = st.builds(
    NumaMemory,
    total=st.just(64 * GI),
    free=st.integers(0, 64 * GI),
    watermark_low=st.integers(0, GI),
)


@given(
    used=sizes,
    more=sizes,
    mems=st.dictionaries(st.integers(0, 3), numa_mem, min_size=1),
    floor=st.integers(0, 8 * GI),
    factor=st.floats(0.1, 10),
)
def test_the_guard_lends_only_free_memory_above_the_watermarks(
    used: int, more: int, mems: dict[int, NumaMemory], floor: int, factor: float
) -> None:
    g = memory_guard(used, mems, mems, floor, factor)
    assert g is not None
    assert g.limit >= max(used, 1) and g.high <= g.limit
    assert g.high == max(int(g.limit * 0.95), 1)
    for n, m in mems.items():
        assert g.spare[n] <= max(m.free - floor, 0)
        assert g.spare[n] == max(m.free - max(floor, int(m.watermark_low * factor)), 0)
    # reclaimed pods using more (with the same free memory) get a larger limit, not smaller
    g2 = memory_guard(used + more, mems, mems, floor, factor)
    assert g2 is not None and g2.limit >= g.limit


def test_the_guard_needs_free_memory_per_numa_node() -> None:
    assert memory_guard(GI, {}, [0], 4 * GI, 1.0) is None
    m = NumaMemory(total=64 * GI, free=10 * GI, watermark_low=GI // 4)
    g = memory_guard(GI, {0: m, 1: m}, [0], 4 * GI, 1.0)  # NUMA 1 is not reclaimed pods'
    assert g is not None and g.limit == GI + 6 * GI and dict(g.spare) == {0: 6 * GI}


# -- protection and OOM ladder -------------------------------------------------------------


@given(
    st.lists(
        st.tuples(st.sampled_from(LEVEL_ORDER), st.integers(0, 1 << 34)),
        max_size=10,
    ),
    st.sampled_from(("none", "low", "min")),
)
def test_ancestors_protect_exactly_what_their_pods_do(
    pods: list[tuple[str, int]], mode: str
) -> None:
    own = {}
    for i, (level, request) in enumerate(pods):
        prot = protection(level, request, mode)
        if level == names.QOS_RECLAIMED_CORES or mode == "none" or request == 0:
            assert prot is None
            continue
        assert prot is not None and prot[1] == request
        qos = "burstable" if i % 2 else "besteffort"
        own[f"kubepods/{qos}/pod{i}"] = prot
    totals = protection_totals(own, "kubepods")
    for knob in (Knob.MEMORY_MIN, Knob.MEMORY_LOW):
        want = sum(v for k, v in own.values() if k is knob)
        assert totals.get("kubepods", {}).get(knob, 0) == want
        for qos in ("burstable", "besteffort"):
            below = sum(v for cg, (k, v) in own.items() if k is knob and f"/{qos}/" in cg)
            assert totals.get(f"kubepods/{qos}", {}).get(knob, 0) == below
    assert "" not in totals  # nothing above kubepods


def test_min_mode_hard_protects_dedicated_and_system_pods_only() -> None:
    assert protection(names.QOS_DEDICATED_CORES, GI, "min") == (Knob.MEMORY_MIN, GI)
    assert protection(names.QOS_SYSTEM_CORES, GI, "min") == (Knob.MEMORY_MIN, GI)
    assert protection(names.QOS_SHARED_CORES, GI, "min") == (Knob.MEMORY_LOW, GI)
    assert protection(names.QOS_DEDICATED_CORES, GI, "low") == (Knob.MEMORY_LOW, GI)
    with pytest.raises(ValueError, match="accepted: none, low, min"):
        protection(names.QOS_SHARED_CORES, GI, "hard")


@given(st.integers(-100, 300), st.integers(-100, 300))
def test_a_higher_oom_priority_never_makes_a_process_likelier_to_be_killed(a: int, b: int) -> None:
    lo, hi = sorted((a, b))
    adj_lo, adj_hi = oom_score_adj(lo), oom_score_adj(hi)
    assert adj_lo is not None and adj_hi is not None
    assert -1000 <= adj_hi <= adj_lo <= 1000
    if lo < hi:
        assert adj_hi < adj_lo or adj_hi == adj_lo == -1000


def test_each_level_of_the_ladder_sits_below_the_next() -> None:
    def band(level: str) -> list[int]:
        low, high = OOM_PRIORITY_RANGES[level]
        return [a for p in range(low, high) if (a := oom_score_adj(p)) is not None]

    for lower, upper in itertools.pairwise(LEVEL_ORDER):
        assert min(band(lower)) > max(band(upper))
    assert oom_score_adj(-100) == 1000  # the reclaimed default: the kubelet's best-effort
    assert oom_score_adj(300) == -1000  # "never": exempt from the OOM killer
    assert oom_score_adj(-300) is None  # "ignore": the kubelet's value stays


# -- one pass ------------------------------------------------------------------------------


def _pod(uid: str, level: str, cache: int | None = None) -> MemoryPod:
    prio = OOM_PRIORITY_RANGES[level][0]
    return MemoryPod(
        uid,
        f"default/{uid}",
        level,
        f"kubepods/besteffort/pod{uid}"
        if level == names.QOS_RECLAIMED_CORES
        else f"kubepods/burstable/pod{uid}",
        (f"kubepods/x/pod{uid}/c1",),
        2 * GI,
        prio,
        cache,
        (0,),
    )


def _inputs(now: float, free: int, pods: tuple[MemoryPod, ...], version: int = 2) -> MemoryInputs:
    numa = NumaMemory(total=32 * GI, free=free, watermark_low=GI // 8)
    return MemoryInputs(
        now=now,
        cgroup_version=version,
        pods=pods,
        memory=MemoryInfo(total=32 * GI, free=free, available=free),
        numa_memory={0: numa},
        reclaimed_numas=(0,),
        root="kubepods/besteffort",
        root_usage=3 * GI,
        top="kubepods",
    )


def test_pressure_drops_reclaimed_cache_once_per_interval_and_never_a_shared_pods() -> None:
    cfg = MemoryGuardConfig(drop_cache=True, drop_cache_interval_s=60)
    pods = (
        _pod("r1", names.QOS_RECLAIMED_CORES, cache=3 * GI),
        _pod("s1", names.QOS_SHARED_CORES, cache=9 * GI),
    )
    calm = decide_memory(_inputs(0, 20 * GI, pods), cfg, {})
    assert all(Knob.MEMORY_RECLAIM not in k for k in calm.desired.values())
    hot = decide_memory(_inputs(0, GI, pods), cfg, {})
    assert hot.desired["kubepods/besteffort/podr1"][Knob.MEMORY_RECLAIM] == 3 * GI
    assert Knob.MEMORY_RECLAIM not in hot.desired.get("kubepods/burstable/pods1", {})
    assert hot.terms["drop_cache"] == [{"pod": "default/r1", "cache": 3 * GI, "pressure": "numa0"}]
    again = decide_memory(_inputs(30, GI, pods), cfg, hot.dropped_at)
    assert Knob.MEMORY_RECLAIM not in again.desired.get("kubepods/besteffort/podr1", {})
    later = decide_memory(_inputs(61, GI, pods), cfg, again.dropped_at)
    assert Knob.MEMORY_RECLAIM in later.desired["kubepods/besteffort/podr1"]


def test_the_guard_writes_limit_and_high_on_the_reclaimed_root_only_when_enabled() -> None:
    pods = (_pod("r1", names.QOS_RECLAIMED_CORES),)
    off = decide_memory(_inputs(0, 10 * GI, pods), MemoryGuardConfig(), {})
    assert "kubepods/besteffort" not in off.desired
    on = decide_memory(_inputs(0, 10 * GI, pods), MemoryGuardConfig(guard=True), {})
    root = on.desired["kubepods/besteffort"]
    assert root[Knob.MEMORY_LIMIT] == 3 * GI + 6 * GI  # used + (free − 4Gi floor)
    assert root[Knob.MEMORY_HIGH] == int(9 * GI * 0.95)
    assert on.terms["guard"]["spare_per_numa"] == {0: 6 * GI}


def test_protection_is_for_cgroup_v2_and_lands_on_pod_containers_and_ancestors() -> None:
    pods = (_pod("r1", names.QOS_RECLAIMED_CORES), _pod("s1", names.QOS_SHARED_CORES))
    cfg = MemoryGuardConfig(protection="low")
    v1 = decide_memory(_inputs(0, 10 * GI, pods, version=1), cfg, {})
    assert all(Knob.MEMORY_LOW not in k for k in v1.desired.values())
    v2 = decide_memory(_inputs(0, 10 * GI, pods), cfg, {}).desired
    assert v2["kubepods/burstable/pods1"][Knob.MEMORY_LOW] == 2 * GI
    assert v2["kubepods/x/pods1/c1"][Knob.MEMORY_LOW] == 2 * GI
    assert v2["kubepods/besteffort/podr1"][Knob.MEMORY_LOW] == 0
    assert v2["kubepods/burstable"][Knob.MEMORY_LOW] == 2 * GI
    assert v2["kubepods"][Knob.MEMORY_LOW] == 2 * GI


def test_the_oom_ladder_goes_on_the_containers_processes() -> None:
    pods = (_pod("r1", names.QOS_RECLAIMED_CORES), _pod("s1", names.QOS_SHARED_CORES))
    plan = decide_memory(_inputs(0, 10 * GI, pods), MemoryGuardConfig(oom_priority=True), {})
    assert plan.desired["kubepods/x/podr1/c1"] == {Knob.OOM_SCORE_ADJ: 1000}
    assert plan.desired["kubepods/x/pods1/c1"] == {Knob.OOM_SCORE_ADJ: 0}
    assert "kubepods/besteffort/podr1" not in plan.desired  # pod cgroups hold no process
    assert plan.terms["oom"]["default/r1"] == {"oom_priority": -100, "oom_score_adj": 1000}


# -- on cgroup files -----------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2])
def test_a_cache_drop_is_written_whenever_asked_and_never_replayed(
    tmp_path: Path, version: int
) -> None:
    node = make_kubelet_tree(tmp_path, [FakePod("p1", "besteffort")], version=version)
    host = node.host()
    pod = node.pod_cgroup("p1")
    ckpt = tmp_path / "ckpt.json"
    enforcer = Enforcer(host, ckpt, VirtualClock(0), verify_period_s=60)
    for _ in range(2):  # a one-shot action: never "already there"
        report = enforcer.apply({pod: {Knob.MEMORY_RECLAIM: GI}})
        assert [w.knob for w in report.applied] == [Knob.MEMORY_RECLAIM]
    name, text = ("memory.reclaim", str(GI)) if version == 2 else ("memory.force_empty", "0")
    assert node.read(pod, name) == text
    assert Knob.MEMORY_RECLAIM not in host.read_knobs(pod)
    # a restarted agent does not drop the cache again from its checkpoint
    assert Enforcer(host, ckpt, VirtualClock(0)).desired == {pod: {}}


def test_protection_lands_on_v2_and_is_unsupported_on_v1(tmp_path: Path) -> None:
    v2 = make_kubelet_tree(tmp_path / "v2", [FakePod("p1", "burstable")], version=2)
    host = v2.host()
    pod = v2.pod_cgroup("p1")
    assert host.apply([KnobWrite(pod, Knob.MEMORY_LOW, GI)]).applied
    assert v2.read(pod, "memory.low") == str(GI)
    assert host.read_knobs(pod)[Knob.MEMORY_LOW] == GI
    v1 = make_kubelet_tree(tmp_path / "v1", [FakePod("p1", "burstable")], version=1)
    failed = v1.host().apply([KnobWrite(v1.pod_cgroup("p1"), Knob.MEMORY_MIN, GI)]).failed
    assert failed and failed[0].unsupported and "does not exist on cgroup v1" in failed[0].error


@pytest.mark.parametrize("version", [1, 2])
def test_oom_score_adj_goes_to_every_process_of_the_cgroup(tmp_path: Path, version: int) -> None:
    node = make_kubelet_tree(tmp_path, [FakePod("p1", "burstable")], version=version)
    host = node.host()
    cg = node.container_cgroup("p1", "app")
    for pid in (4001, 4002):
        node.add_task(cg, pid)
    assert host.read_knobs(cg)[Knob.OOM_SCORE_ADJ] == 0
    assert host.apply([KnobWrite(cg, Knob.OOM_SCORE_ADJ, 333)]).applied
    for pid in (4001, 4002):
        assert (tmp_path / f"proc/{pid}/oom_score_adj").read_text() == "333"
    assert host.read_knobs(cg)[Knob.OOM_SCORE_ADJ] == 333
    # a process started since (an exec into the container) has another value: rewritten
    node.add_task(cg, 4003)
    assert Knob.OOM_SCORE_ADJ not in host.read_knobs(cg)


def test_a_reclaim_that_frees_less_than_asked_is_still_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = make_kubelet_tree(tmp_path, [FakePod("p1", "besteffort")], version=2)
    host = node.host()
    pod = node.pod_cgroup("p1")
    real_write = os.write

    def short(fd: int, data: bytes) -> int:
        if os.readlink(f"/proc/self/fd/{fd}").endswith("memory.reclaim"):
            raise OSError(errno.EAGAIN, "Resource temporarily unavailable")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", short)
    assert host.apply([KnobWrite(pod, Knob.MEMORY_RECLAIM, GI)]).applied

    # any other refusal is still a failure
    def refuse(fd: int, data: bytes) -> int:
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(os, "write", refuse)
    assert host.apply([KnobWrite(pod, Knob.MEMORY_RECLAIM, GI)]).failed
