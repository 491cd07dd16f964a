from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.agent.config import IsolationConfig
from pykatalyst.agent.regions import (
    IsolationCandidate,
    IsolationState,
    decide_isolation,
    dedicated_reclaim_size,
    overlap_sizes,
    pick_cpus,
    spread_overlap,
)
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology

TOPO = CPUTopology.synthetic(sockets=2, cores_per_socket=4, threads_per_core=2)
ALL = sorted(TOPO.all_cpus)

cpusets = st.sets(st.sampled_from(ALL)).map(CPUSet.of)
pool_maps = st.dictionaries(
    st.sampled_from(["share", "flink", "batch", "web"]), st.integers(0, 24), max_size=4
)


# --- pick_cpus ------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(cpusets, st.integers(0, 20), cpusets)
def test_picked_cpus_come_from_the_pool_sized_and_sticky(
    cpus: CPUSet, n: int, previous: CPUSet
) -> None:
    got = pick_cpus(TOPO, cpus, n, previous)
    assert got <= cpus
    assert len(got) == min(n, len(cpus))
    assert got == pick_cpus(TOPO, cpus, n, previous)  # deterministic
    kept = previous & cpus
    if len(kept) <= n:
        assert kept <= got  # reclaimed pods keep the cpus they had


def test_picks_take_whole_cores_from_the_top() -> None:
    pool = TOPO.cpus_in_numa(0)
    got = pick_cpus(TOPO, pool, 2)
    (core,) = {TOPO.core_of(c) for c in got}
    assert max(pool) in got and TOPO.siblings(max(pool)) == got
    assert core == TOPO.core_of(max(pool))


# --- partial overlap --------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(pool_maps, st.integers(-5, 40))
def test_spread_overlap_never_exceeds_a_pool_and_adds_up(sizes: dict[str, int], total: int) -> None:
    got = spread_overlap(sizes, total)
    assert all(0 < got[p] <= sizes[p] for p in got)
    assert sum(got.values()) == max(0, min(total, sum(sizes.values())))


def test_spread_overlap_is_proportional_largest_pool_first() -> None:
    # Katalyst: ceil(total x size / sum) from the largest pool, the rest to the next
    assert spread_overlap({"share": 6, "flink": 2}, 4) == {"share": 3, "flink": 1}


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["share", "flink", "web"]), st.integers(1, 16), min_size=1),
    st.dictionaries(st.sampled_from(["share", "flink", "web"]), st.integers(0, 20)),
    st.integers(0, 6),
    st.booleans(),
    st.booleans(),
)
def test_overlap_stays_inside_each_pool_and_reclaim_keeps_its_minimum(
    sizes: dict[str, int],
    requirements: dict[str, int],
    reserve: int,
    reclaim_on: bool,
    whole: bool,
) -> None:
    available = sum(sizes.values())
    overlap, size, terms = overlap_sizes(
        sizes,
        requirements,
        available,
        reserve,
        reclaim_enabled=reclaim_on,
        whole_pools=whole,
    )
    assert set(overlap) <= set(sizes)
    assert all(0 < v <= sizes[p] for p, v in overlap.items())
    assert size >= min(reserve, available)  # never below the reclaim reserve
    assert size <= available
    if reclaim_on and size > reserve and not whole:
        # each reclaimable pool: max(1, size - requirement)
        for p, s in sizes.items():
            assert overlap[p] == min(max(1, s - requirements.get(p, s)), s)
    if whole:
        assert all(overlap[p] == sizes[p] for p in overlap)
    assert terms["reclaimed_cores_size"] == size


def test_overlap_of_a_busy_pool_is_one_cpu_and_of_an_idle_one_its_slack() -> None:
    overlap, size, _ = overlap_sizes(
        {"share": 10, "flink": 6}, {"share": 10, "flink": 2}, 16, 2, reclaim_enabled=True
    )
    assert overlap == {"share": 1, "flink": 4}
    assert size == 4  # 16 - 10 - 2


def test_overlap_spreads_the_reserve_when_pools_need_everything() -> None:
    overlap, size, terms = overlap_sizes(
        {"share": 12, "flink": 4}, {"share": 12, "flink": 4}, 16, 4, reclaim_enabled=True
    )
    assert size == 4 and sum(overlap.values()) == 4 and terms["spread_reserve"]
    assert overlap == {"share": 3, "flink": 1}


def test_overlap_with_reclaim_off_is_the_reserve_only() -> None:
    overlap, size, _ = overlap_sizes({"share": 16}, {"share": 2}, 16, 4, reclaim_enabled=False)
    assert size == 4 and overlap == {"share": 4}


# --- dedicated regions ------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 64), st.floats(0, 80), st.integers(0, 8), st.booleans())
def test_dedicated_reclaim_is_within_the_node_and_never_when_reclaim_is_off(
    available: int, requirement: float, reserve: int, on: bool
) -> None:
    size, terms = dedicated_reclaim_size(available, requirement, reserve, reclaim_enabled=on)
    assert 0 <= size <= available
    if not on:
        assert size == 0
    else:
        assert size >= min(reserve, available)
        more, _ = dedicated_reclaim_size(available, requirement + 1, reserve, reclaim_enabled=on)
        assert more <= size  # a busier pod leaves no more to reclaim
    assert terms["size"] == size


def test_dedicated_reclaim_is_the_idle_part_of_the_node() -> None:
    assert dedicated_reclaim_size(24, 5.2, 2, reclaim_enabled=True)[0] == 18
    assert dedicated_reclaim_size(24, 23.5, 2, reclaim_enabled=True)[0] == 2


# --- isolation --------------------------------------------------------------------------

ON = IsolationConfig(enabled=True)


def _cand(
    uid: str, runnable: float | None, r: float = 2.0, pool: str = "share"
) -> IsolationCandidate:
    return IsolationCandidate(uid, pool, {"app": r}, {"app": runnable})


def _run(
    ticks: list[list[IsolationCandidate]], cfg: IsolationConfig = ON, period: float = 5.0
) -> list[frozenset[str]]:
    isolated: frozenset[str] = frozenset()
    states: dict[tuple[str, str], IsolationState] = {}
    out = []
    for i, cands in enumerate(ticks):
        isolated, states, _ = decide_isolation(cands, isolated, states, i * period, cfg)
        out.append(isolated)
    return out


def test_isolation_is_off_by_default() -> None:
    noisy = [_cand("a", 50), *(_cand(f"q{i}", 0) for i in range(4))]
    assert _run([noisy] * 5, IsolationConfig()) == [frozenset()] * 5


def test_a_noisy_pod_is_isolated_after_lockin_ticks_and_released_after_lockout() -> None:
    quiet = [_cand(f"q{i}", 1) for i in range(9)]
    noisy = [_cand("a", 6), *quiet]  # 6 > max(1.5 x 2, 2 + 2)
    calm = [_cand("a", 1), *quiet]
    # 3 ticks to lock in; 120 s (24 ticks of 5 s) below the threshold to lock out
    got = _run([noisy] * 3 + [calm] * 26)
    assert got[0] == got[1] == frozenset() and got[2] == {"a"}
    assert all(g == {"a"} for g in got[2:26])
    assert got[27] == frozenset()


def test_either_threshold_triggers_as_in_katalyst() -> None:
    """Katalyst isolates a container whose runnable threads exceed ratio x r *or* r + size,
    that is the smaller of the two."""
    quiet = [_cand(f"q{i}", 1) for i in range(9)]
    # r = 2: 1.5 x 2 = 3 is the lower bar
    assert _run([[_cand("a", 3), *quiet]] * 4)[-1] == frozenset()
    assert _run([[_cand("a", 3.5), *quiet]] * 4)[-1] == {"a"}
    # r = 10: 10 + 2 = 12 is the lower bar
    big = [_cand(f"q{i}", 1, r=10) for i in range(9)]
    assert _run([[_cand("a", 12, r=10), *big]] * 4)[-1] == frozenset()
    assert _run([[_cand("a", 12.5, r=10), *big]] * 4)[-1] == {"a"}


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["share", "flink"]), st.floats(0.5, 8), st.floats(0, 40)),
        min_size=1,
        max_size=12,
    ),
    st.floats(0, 1),
    st.floats(0, 1),
)
def test_isolation_caps_hold_in_every_pool(
    pods: list[tuple[str, float, float]], res_ratio: float, pod_ratio: float
) -> None:
    cfg = IsolationConfig(
        enabled=True, max_resource_ratio=res_ratio, max_pod_ratio=pod_ratio, lockin_threshold=1
    )
    cands = [_cand(f"p{i:02d}", load, r, pool) for i, (pool, r, load) in enumerate(pods)]
    isolated, _, _ = decide_isolation(cands, frozenset(), {}, 0.0, cfg)
    again, _, _ = decide_isolation(cands, frozenset(), {}, 0.0, cfg)
    assert isolated == again  # deterministic
    for pool in {"share", "flink"}:
        members = [c for c in cands if c.pool == pool]
        total = sum(c.resources["app"] for c in members)
        chosen = [c for c in members if c.uid in isolated]
        assert sum(c.resources["app"] for c in chosen) <= total * res_ratio + 1e-6
        assert len(chosen) <= max(0, min(len(members) - 1, int(len(members) * pod_ratio)))


def test_ramping_and_unmeasured_pods_are_left_alone() -> None:
    quiet = [_cand(f"q{i}", 1) for i in range(9)]
    ramping = IsolationCandidate("a", "share", {"app": 2.0}, {"app": 50.0}, ramping=True)
    assert _run([[ramping, *quiet]] * 4)[-1] == frozenset()
    assert _run([[_cand("a", None), *quiet]] * 4)[-1] == frozenset()
