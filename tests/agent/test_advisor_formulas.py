"""Sys-advisor formulas: estimate, regulator, assembly, headroom and report smoothing."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.agent.advisor import (
    HeadroomSmoother,
    MemoryUser,
    RegulatorState,
    assemble_pools,
    cpu_headroom,
    estimate_container,
    memory_headroom,
    regulate,
    reserved_for_reclaim_per_numa,
)
from pykatalyst.agent.config import AdvisorConfig
from pykatalyst.api import names
from pykatalyst.topology.cpuset import CPUSet

CFG = AdvisorConfig(enable_reclaim=True)
GI = 1 << 30


def est(request: float, usage: float | None, l1: float | None, l5: float | None, **kw: bool):  # type: ignore[no-untyped-def]
    return estimate_container(
        request,
        usage,
        l1,
        l5,
        ramping_up=kw.get("ramping", False),
        reclaim_enabled=kw.get("reclaim", True),
        cfg=CFG,
    )


def test_estimate_is_the_largest_of_scaled_usage_and_loads() -> None:
    assert est(2, 1.0, 0.8, 0.5).cores == pytest.approx(1.25)
    e = est(2, 1.0, 3.0, 2.0)
    assert (e.cores, e.source) == (3.0, "load1")
    assert est(2, 1.0, 1.0, 4.0).source == "load5"


def test_estimate_falls_back_to_request_then_to_four_cores() -> None:
    assert (est(2, None, None, None).cores, est(2, None, None, None).source) == (2, "request")
    # non-positive metrics say nothing: an idle container is held at its request
    assert est(2, 0.0, 0.0, 0.0).cores == 2
    assert est(0, None, None, None).cores == 4.0
    assert est(0, None, None, None).source == "fallback"


def test_ramping_up_or_reclaim_off_uses_the_request() -> None:
    assert est(2, 5.0, 5.0, 5.0, ramping=True).cores == 2
    assert est(2, 5.0, 5.0, 5.0, reclaim=False).cores == 2


def test_regulator_rounds_up_and_adds_the_burst_reserve() -> None:
    size, _, terms = regulate(1.25, 4, None, 0, 4, 44, CFG)
    assert size == 6 and terms["rounded"] == 6
    ht = AdvisorConfig(ht_align=True)
    assert regulate(1.0, 4, None, 0, 4, 44, ht)[0] == 6


def test_regulator_ramps_up_at_most_10_and_down_at_most_2_every_30s() -> None:
    size, st0, _ = regulate(30, 4, RegulatorState(6), 0, 4, 44, CFG)
    assert size == 16
    size, st1, _ = regulate(0, 4, st0, 5, 4, 44, CFG)
    assert size == 14 and st1.last_ramp_down == 5
    size, st2, terms = regulate(0, 4, st1, 20, 4, 44, CFG)
    assert size == 14 and terms["held_by_min_ramp_down_period"]
    size, _, _ = regulate(0, 4, st2, 36, 4, 44, CFG)
    assert size == 12


def test_regulator_keeps_within_bounds() -> None:
    assert regulate(0, 0, None, 0, 4, 44, CFG)[0] == 4
    assert regulate(100, 4, None, 0, 4, 44, CFG)[0] == 44


def test_assembly_gives_reclaim_the_rest_and_shrinks_pools_that_do_not_fit() -> None:
    sizes, reclaim, _ = assemble_pools(
        44, {"share": 6}, {"share": 2}, reclaim_enabled=True, reserved_for_reclaim=4
    )
    assert sizes == {"share": 6} and reclaim == 42
    sizes, reclaim, terms = assemble_pools(
        10, {"a": 10, "b": 10}, {}, reclaim_enabled=True, reserved_for_reclaim=2
    )
    assert sizes == {"a": 5, "b": 5} and reclaim == 2 and terms["throttled"]


def test_assembly_with_reclaim_off_gives_spare_cpus_to_share_pools() -> None:
    sizes, reclaim, _ = assemble_pools(
        44, {"share": 6}, {"share": 2.0}, reclaim_enabled=False, reserved_for_reclaim=4
    )
    assert sizes == {"share": 44} and reclaim == 4


def test_reclaim_reserve_is_spread_over_numa_nodes() -> None:
    assert reserved_for_reclaim_per_numa(4, [0, 1]) == {0: 2, 1: 2}
    assert reserved_for_reclaim_per_numa(4, [0, 1, 2, 3, 4, 5]) == dict.fromkeys(range(6), 1)


NUMA_OF = {c: (0 if c < 4 else 1) for c in range(8)}


def test_cpu_headroom_is_idle_reclaim_cpus_plus_reclaimed_usage() -> None:
    pool = CPUSet.parse("2-7")
    ratio = [1.0, 1.0, 0.5, 0.5, 1.0, 0.0, 0.0, 0.0]
    supply, per_numa, terms = cpu_headroom(pool, ratio, 1.5, None, NUMA_OF)
    # busy in pool: 0.5 + 0.5 + 1 = 2; idle 4; + reclaimed usage 1.5 = 5.5 cores,
    # split over the pool's 2 NUMA nodes and truncated: 2 + 2
    assert per_numa == {0: 2.0, 1: 2.0}
    assert supply == 4.0
    assert terms["reclaim_pool_busy_cpus"] == pytest.approx(2.0)


def _busy_cpu_by_cpu(
    pool: CPUSet, ratio: list[float] | None, numa_of: dict[int, int]
) -> tuple[dict[int, int], dict[int, float]]:
    """The pool's cpus and busy share per NUMA node, added up cpu by cpu (the plain rule
    that `cpu_headroom`'s grouped sums must reproduce to the last bit)."""
    cpus: dict[int, int] = {}
    busy: dict[int, float] = {}
    for cpu in pool:
        n = numa_of.get(cpu, 0)
        cpus[n] = cpus.get(n, 0) + 1
        if ratio and cpu < len(ratio):
            busy[n] = busy.get(n, 0.0) + min(max(ratio[cpu], 0.0), 1.0)
    return cpus, busy


@settings(max_examples=300, deadline=None)
@given(
    mask=st.integers(min_value=0, max_value=(1 << 40) - 1),
    ratio=st.one_of(
        st.none(),
        st.lists(
            st.floats(min_value=-0.5, max_value=1.5, allow_nan=False), min_size=0, max_size=44
        ),
    ),
    numas=st.integers(min_value=1, max_value=4),
    used=st.one_of(st.none(), st.floats(min_value=0, max_value=16)),
    whole=st.booleans(),
)
def test_cpu_headroom_equals_the_cpu_by_cpu_sums(
    mask: int, ratio: list[float] | None, numas: int, used: float | None, whole: bool
) -> None:
    # cpus 36-39 are on no NUMA node of the map (counted on node 0); the ratio may be
    # shorter than the pool (cpus past it have no figure)
    numa_of = {c: (c * 7) % numas for c in range(36)}
    pool = CPUSet.from_mask(mask)
    cpus, busy = _busy_cpu_by_cpu(pool, ratio, numa_of)
    size, use = len(pool), max(used or 0.0, 0.0)
    taken = sum(busy.values()) if ratio else min(use, float(size))
    expected = max(size - taken, 0.0) + use
    if size:
        share = expected / len(cpus)
        expected = (math.floor(share + 1e-9) if whole else share) * len(cpus)
    for _ in range(2):  # the second call is answered from the remembered groups
        supply, per_numa, terms = cpu_headroom(pool, ratio, used, None, numa_of, whole)
        assert supply == expected
        assert list(per_numa) == (sorted(cpus) if size else [])
        assert terms["reclaim_pool_busy_cpus"] == round(taken, 3)
    # an equal map that is another object is grouped on its own, and alike
    assert cpu_headroom(pool, ratio, used, None, dict(numa_of), whole) == (
        supply,
        per_numa,
        terms,
    )


def test_cpu_headroom_is_capped_by_a_reclaimed_quota() -> None:
    supply, _, terms = cpu_headroom(CPUSet.parse("0-7"), [0.0] * 8, 0.0, 3.0, NUMA_OF)
    assert terms["capped_by_quota_cores"] == 3.0
    assert supply == 2.0  # 3 cores over 2 NUMA nodes: 1 whole core each


def test_missing_per_cpu_usage_never_means_zero_headroom() -> None:
    supply, _, terms = cpu_headroom(CPUSet.parse("0-7"), None, None, None, NUMA_OF)
    assert supply == 8
    assert "missing" in terms["per_cpu_usage"]


def test_memory_headroom_subtracts_reserve_and_scaled_usage() -> None:
    users = [
        MemoryUser(names.QOS_SHARED_CORES, 4 * GI, 2 * GI, 1 * GI, 0),
        MemoryUser(names.QOS_SYSTEM_CORES, 1 * GI, 1 * GI, 5 * GI, 0),
        MemoryUser(names.QOS_SHARED_CORES, 3 * GI, None, None, None),
    ]
    value, _, terms = memory_headroom(100 * GI, users, CFG)
    expected = 100 * GI - 5 * GI - (3 * GI * 1.1 + 1 * GI + 3 * GI)
    assert value == pytest.approx(expected)
    assert terms["pods_from_request"] == 1


def test_memory_headroom_never_negative() -> None:
    users = [MemoryUser(names.QOS_SHARED_CORES, 0, 200 * GI, 0, 0)]
    assert memory_headroom(100 * GI, users, CFG)[0] == 0


def smoother() -> HeadroomSmoother:
    return HeadroomSmoother(120, 30, 0.3, 4.0, 0.0, 4.0)


def test_smoother_publishes_nothing_until_the_window_is_full() -> None:
    sm = smoother()
    outs = []
    for t in (0, 30, 60):
        out, _, sm = sm.update(t, 44.0)
        outs.append(out)
    assert outs == [None, None, None]
    assert sm.update(90, 44.0)[0] == 44.0


def test_smoother_ignores_small_moves_and_limits_big_ones() -> None:
    sm = smoother()
    for t in (0, 30, 60, 90):
        _, _, sm = sm.update(t, 44.0)
    assert sm.update(120, 44.8)[0] == 44.0  # window avg moves by 0.2 < 0.3
    assert sm.update(120, 4.0)[0] == 40.0  # avg 34, but at most 4 per step


def test_smoother_floors_at_min_reclaimed_for_report() -> None:
    sm = smoother()
    for t in (0, 30, 60, 90):
        out, terms, sm = sm.update(t, 1.0)
    assert out == 4.0 and terms["floored_to"] == 4.0


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=64), min_size=4, max_size=30))
def test_smoothed_report_moves_at_most_max_step_per_sample(values: list[float]) -> None:
    sm = smoother()
    last = None
    for i, v in enumerate(values):
        out, _, sm = sm.update(i * 30.0, v)
        if out is not None and last is not None:
            assert abs(out - last) <= 4.0 + 1e-9
        if out is not None:
            assert out >= 4.0
            last = out


def test_headroom_keeps_fractions_of_a_core_when_asked() -> None:
    pool = CPUSet.parse("0-1")
    whole, _, _ = cpu_headroom(pool, [0.3, 0.3], None, None, {0: 0, 1: 0})
    frac, per_numa, terms = cpu_headroom(
        pool, [0.3, 0.3], None, None, {0: 0, 1: 0}, whole_cores=False
    )
    assert whole == 1.0
    assert abs(frac - 1.4) < 1e-9 and abs(per_numa[0] - 1.4) < 1e-9
    assert terms["per_numa_cores"] == 1.4


@settings(max_examples=60, deadline=None)
@given(
    st.integers(min_value=1, max_value=6),
    st.lists(st.floats(min_value=0.3, max_value=1.5), min_size=20, max_size=60),
)
def test_once_full_the_window_publishes_on_every_tick_of_an_uneven_ticker(
    need: int, gaps: list[float]
) -> None:
    """Ticks early or late against the sample period (here by up to half of it) never leave
    the window short: once it has filled, each tick has a figure to publish, rather than the
    last one staying on the CNR, unchanged, while the node's load moves."""
    period = 2.0
    sm = HeadroomSmoother(need * period, period, 0.0, 0.0, 0.0, 0.0)
    now, full = 0.0, False
    for i, gap in enumerate(gaps):
        out, terms, sm = sm.update(now, float(i))
        if out is not None:
            full = True
        elif full:
            raise AssertionError(f"no figure at {now:.2f} s once full: {terms}")
        now += gap * period


def test_a_ticker_a_hair_short_of_the_period_still_samples_every_tick() -> None:
    # The agent's ticks 1.999 s apart against a 2 s sample period: each one samples, and the
    # published figure follows the load within the window (3 samples of 6 s).
    sm = HeadroomSmoother(6.0, 2.0, 0.0, 0.0, 0.0, 0.0)
    outs = []
    for i, v in enumerate([2.0, 2.0, 2.0, 1.0, 1.0, 1.0, 1.0]):
        out, _, sm = sm.update(i * 1.999, v)
        outs.append(out)
    assert outs[:2] == [None, None]
    assert outs[2] == pytest.approx(2.0)
    assert outs[-1] == pytest.approx(1.0)
