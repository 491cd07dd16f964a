"""Katalyst's own unit-test facts, as tables, run against pykatalyst.

Each table names the katalyst-core test it comes from. The machines are Katalyst's
dummy topologies (GenerateDummyCPUTopology(cpus, sockets, numas)): cpu i and
i + cpus/2 are siblings, and each NUMA node holds a run of cores.
"""

from __future__ import annotations

import pytest

from pykatalyst.agent.advisor import (
    HeadroomSmoother,
    MemoryUser,
    assemble_pools,
    cpu_headroom,
    memory_headroom,
    regulate,
)
from pykatalyst.agent.agent import Agent
from pykatalyst.agent.config import AdvisorConfig, CpuPolicyConfig
from pykatalyst.agent.cpu_policy import reserve_cpus
from pykatalyst.agent.enforcer import Enforcer
from pykatalyst.agent.eviction import (
    EvictionConfig,
    EvictionManager,
    EvictionSnapshot,
)
from pykatalyst.agent.eviction.config import NumaMemoryPressureConfig
from pykatalyst.agent.eviction.plugins import NumaMemoryPressurePlugin
from pykatalyst.agent.host.base import HostSample, NumaMemory
from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology
from tests.agent.eviction_pods import eviction_pod
from tests.agent.inmemory_host import InMemoryHost, node_json, reclaiming

GIB = 1 << 30


def dummy(cpus: int, sockets: int, numas: int) -> CPUTopology:
    """Katalyst's GenerateDummyCPUTopology(cpus, sockets, numas), two threads a core."""
    return CPUTopology.synthetic(
        sockets=sockets,
        cores_per_socket=cpus // 2 // sockets,
        threads_per_core=2,
        numa_per_socket=numas // sockets,
        memory_per_numa=64 * GIB,
    )


# --- qrm cpu plugin: the reserve pool (pkg/agent/qrm-plugins/cpu/util/util_test.go,
#     dynamicpolicy/policy_test.go) -----------------------------------------------------

RESERVE_CASES = [
    # (cpus, sockets, numas, reserved, reversely, Katalyst's reserve)
    (16, 2, 4, 4, False, "0,2,4,6"),
    (16, 2, 4, 4, True, "9,11,13,15"),
    (16, 2, 4, 2, False, "0,2"),
    (48, 2, 2, 4, False, "0,1,12,13"),
]


@pytest.mark.parametrize(("cpus", "sockets", "numas", "n", "rev", "want"), RESERVE_CASES)
def test_reserve_pool_is_a_hyperthread_per_numa_node_in_turn(
    cpus: int, sockets: int, numas: int, n: int, rev: bool, want: str
) -> None:
    topo = dummy(cpus, sockets, numas)
    got = reserve_cpus(topo, CpuPolicyConfig(reserved_cpus=n, reserve_cpus_reversely=rev))
    assert got == CPUSet.parse(want)


# --- sysadvisor provision assembler: normalizePoolSizes (provisionassembler/helper.go) --

POOL_CASES = [
    # (regulated requirements, available, Katalyst's sizes)
    ({"share": 60, "bmq": 120}, 90, {"share": 30, "bmq": 60}),
    ({"share": 100, "bmq": 200}, 90, {"share": 30, "bmq": 60}),
    ({"share": 9, "bmq": 8, "flink": 7}, 10, {"share": 4, "bmq": 3, "flink": 3}),
    ({"share": 30, "bmq": 1}, 10, {"share": 9, "bmq": 1}),
    ({"share": 20, "bmq": 20}, 40, {"share": 20, "bmq": 20}),
]


@pytest.mark.parametrize(("want", "available", "sizes"), POOL_CASES)
def test_share_pools_that_do_not_fit_are_scaled_together(
    want: dict[str, int], available: int, sizes: dict[str, int]
) -> None:
    cfg = AdvisorConfig(ht_align=False)
    regulated = {
        name: regulate(float(cores), 0.0, None, 0.0, 1.0, None, cfg)[0]
        for name, cores in want.items()
    }
    got, _reclaim, _ = assemble_pools(
        available, regulated, {}, reclaim_enabled=True, reserved_for_reclaim=4
    )
    assert got == sizes


# --- sysadvisor cpu headroom (headroomassembler/assembler_common.go getHeadroomDefault) --

HEADROOM_CASES = [
    # (reclaim pool, usage ratio per cpu, reclaimed usage, per-NUMA, total)
    ("0-7", [0.0] * 16, 0.0, {0: 4.0, 1: 4.0}, 8.0),
    ("0-7", [0.5] * 16, 0.0, {0: 2.0, 1: 2.0}, 4.0),
    ("0-2,4-6", [0.5] * 16, 0.0, {0: 1.0, 1: 1.0}, 2.0),  # 3 cores / 2 -> 1 each
    ("0-3", [0.0] * 16, 0.5, {0: 4.0}, 4.0),  # 4.5 cores on one NUMA node -> 4
]


@pytest.mark.parametrize(("pool", "ratio", "used", "per_numa", "total"), HEADROOM_CASES)
def test_cpu_headroom_is_whole_cores_per_numa(
    pool: str, ratio: list[float], used: float, per_numa: dict[int, float], total: float
) -> None:
    topo = dummy(16, 2, 2)  # NUMA 0: cpus 0-3,8-11; NUMA 1: 4-7,12-15
    numa_of = {c: topo.numa_of(c) for c in topo.all_cpus}
    supply, got, _ = cpu_headroom(CPUSet.parse(pool), ratio, used, None, numa_of)
    assert got == per_numa
    assert supply == total


# --- reporter smoothing (pkg/util/general/window_test.go, CappedSmoothWindow: window of
#     3 samples, min step 0.3, max step 4) ---------------------------------------------

SMOOTHING_CASE = [
    # (raw headroom, Katalyst's published figure; None: not yet)
    (0.6, None),
    (0.8, None),
    (0.4, 0.6),  # window full: avg 0.6
    (1.2, 0.6),  # avg 0.8, a move of 0.2 < min step: kept
    (1.4, 1.0),  # avg 1.0, a move of 0.4: taken
    (15.0, 5.0),  # avg 5.87, a move of 4.87: clamped to the max step
]


def test_capped_smooth_window() -> None:
    sm = HeadroomSmoother(30.0, 10.0, 0.3, 4.0, 0.0, 0.0)
    got = []
    for i, (raw, _) in enumerate(SMOOTHING_CASE):
        out, _, sm = sm.update(10.0 * (i + 1), raw)
        got.append(out)
    want = [w for _, w in SMOOTHING_CASE]
    assert got == [None if w is None else pytest.approx(w) for w in want]


# --- sysadvisor memory headroom (headroompolicy/policy_canonical.go) -------------------


def test_a_numa_exclusive_pod_holds_its_whole_numa_nodes_memory() -> None:
    cfg = AdvisorConfig(reserved_for_allocate_memory=0, enable_reclaim=True)
    shared = MemoryUser(names.QOS_SHARED_CORES, 4 * GIB, 2 * GIB, 0, 0)
    exclusive = MemoryUser(names.QOS_DEDICATED_CORES, 8 * GIB, 2 * GIB, 0, 0, 64 * GIB)
    value, _, terms = memory_headroom(128 * GIB, [shared, exclusive], cfg)
    assert value == pytest.approx(128 * GIB - 1.1 * 2 * GIB - 64 * GIB)
    assert terms["numa_exclusive_pods"] == 1


# --- eviction numa memory pressure (evictionmanager/plugin/memory/numa_pressure.go) ----

ZONE = {"total": 64 * GIB, "watermark_min": 1 * GIB, "watermark_low": 2 * GIB}
DEEP = int(1.2 * GIB)  # below low and below the middle of min and low
MILD = int(1.8 * GIB)  # below low, above the middle
OK = 10 * GIB
COUNTER_CASES = [
    # (free per round, Katalyst's counter after each round)
    ([DEEP] * 6, [1, 2, 4, 6, 8, 10]),
    ([MILD] * 4, [1, 2, 3, 4]),
    ([DEEP] * 5 + [OK, OK], [1, 2, 4, 6, 8, 6, 5]),  # recovery clamps to the reclaimed mark
    ([GIB // 2], [11]),  # below min: lifted to 12 - 1 at once
]


@pytest.mark.parametrize(("frees", "counters"), COUNTER_CASES)
def test_numa_below_watermark_counter(frees: list[int], counters: list[int]) -> None:
    plugin = NumaMemoryPressurePlugin(NumaMemoryPressureConfig())
    got = []
    for i, free in enumerate(frees):
        zones = {0: NumaMemory(free=free, **ZONE)}
        snap = EvictionSnapshot(i * 5.0, "n1", (), sample=HostSample(i * 5.0, numa_memory=zones))
        (t,) = plugin.observe(snap)
        got.append(t.terms["counter"])
    assert got == counters


RECLAIMED = names.QOS_RECLAIMED_CORES


def test_two_numa_nodes_under_pressure_each_get_a_victim_in_one_round() -> None:
    pods = [
        eviction_pod(
            "u0", "default", "batch0", names.QOS_RECLAIMED_CORES, numa_memory={0: 4 * GIB}
        ),
        eviction_pod(
            "u1", "default", "batch1", names.QOS_RECLAIMED_CORES, numa_memory={1: 4 * GIB}
        ),
    ]
    cfg = EvictionConfig.model_validate(
        {
            "reclaimed_resource": {"enabled": False},
            "system_memory": {"enabled": False},
            "numa_memory": {"enabled": True},
        }
    )
    mgr = EvictionManager("n1", cfg)
    zones = {n: NumaMemory(free=GIB // 2, **ZONE) for n in (0, 1)}
    plan = mgr.decide(
        EvictionSnapshot(0, "n1", tuple(pods), sample=HostSample(0, numa_memory=zones))
    )
    assert sorted(v.pod.name for v in plan.victims) == ["batch0", "batch1"]


# --- sys-advisor: a node without shared pods (provisionassembler/assembler_common_test.go,
#     "no share pool and isolated pool, allow shared_cores overlap reclaimed_cores") --------


@pytest.mark.parametrize("overlap", [True, False])
def test_a_node_without_shared_pods_has_only_the_reserve_and_reclaim_pools(
    overlap: bool,
) -> None:
    # Katalyst's figures: no pool infos on its 48-cpu machine gives reserve 0, reclaim 48
    clock = VirtualClock(50_000)
    cluster = MemoryCluster(clock=clock)
    cluster.create(names.NODE, node_json("node-1"))
    host = InMemoryHost(dummy(48, 2, 2))
    cfg = reclaiming({"cpu": {"overlap_reclaim_with_share": overlap}})
    agent = Agent("node-1", cluster, host, clock, cfg, Enforcer(host, None, clock))
    plan = agent.reconcile(clock.now())
    for _ in range(40):  # past the headroom's smoothing window
        clock.advance(5)
        plan = agent.reconcile(clock.now())
    assert {p.name: len(p.cpuset) for p in plan.pools} == {names.POOL_RECLAIM: 48}
    assert plan.reclaimed_cpu.reported == pytest.approx(48, abs=0.5)
