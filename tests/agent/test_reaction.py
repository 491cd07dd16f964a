"""The share pools' fast watch: when a load step asks for an early reconcile, and when not."""

from __future__ import annotations

import itertools
import math

from hypothesis import given
from hypothesis import strategies as st

from pykatalyst.agent.config import ReactionConfig
from pykatalyst.agent.host.base import CgroupStats, HostSample
from pykatalyst.agent.metrics import MetricStore
from pykatalyst.agent.reaction import WatchedPool, WatchState, decide, window_usage

CFG = ReactionConfig()
K = 1.25  # the advisor's usage coefficient
PATHS = ("kubepods/burstable/poda", "kubepods/burstable/podb")


def pool(requirement: float, size: int, reserved: float = 0.0) -> WatchedPool:
    return WatchedPool("share", size, requirement, reserved, PATHS)


def feed(
    usages: list[list[float]], pools: list[WatchedPool], cfg: ReactionConfig = CFG
) -> list[bool]:
    """Readings every period, each path using the given cores over the window before it;
    the triggers, one per reading after the first."""
    state = WatchState()
    totals = dict.fromkeys(PATHS, 100.0)
    t = 1000.0
    _, state = decide(state, t, totals, pools, cfg, K)
    out = []
    for per_path in usages:
        t += cfg.period_s
        totals = {p: totals[p] + u * cfg.period_s for p, u in zip(PATHS, per_path, strict=True)}
        d, state = decide(state, t, totals, pools, cfg, K)
        out.append(d.trigger)
    return out


requirements = st.floats(0.2, 40.0)
shares = st.lists(st.floats(0.0, 1.0), min_size=2, max_size=2)


@given(
    requirements, st.integers(1, 64), st.lists(st.tuples(st.floats(0.0, 1.0), shares), max_size=40)
)
def test_no_early_reconcile_while_usage_stays_inside_the_band(
    requirement: float, size: int, noise: list[tuple[float, list[float]]]
) -> None:
    # Whatever the noise, a usage-based requirement up to the band's edge asks for nothing.
    edge = requirement * (1 + CFG.grow_band) / K * (1 - 1e-6)
    usages = []
    for level, split in noise:
        total = edge * level
        a = split[0] / max(sum(split), 1e-9)
        usages.append([total * a, total * (1 - a)])
    assert not any(feed(usages, [pool(requirement, max(size, math.ceil(requirement)))]))


@given(st.floats(0.1, 8.0), st.floats(1.3, 6.0), st.integers(0, 20))
def test_a_step_beyond_the_band_that_needs_a_cpu_more_reconciles_at_once(
    before: float, factor: float, steady: int
) -> None:
    # The pool was sized for the steady load; the load then jumps past the band and past
    # what the pool's cpus hold: the first reading after the step asks for a reconcile.
    requirement = K * before
    size = max(1, math.ceil(requirement))
    after = before * factor * (1 + CFG.grow_band)
    if math.ceil(K * after) <= size:
        after = (size + 0.5) / K
    usages = [[before / 2, before / 2]] * steady + [[after / 2, after / 2]]
    triggers = feed(usages, [pool(requirement, size)])
    assert triggers[-1]
    assert not any(triggers[:-1])


@given(
    st.lists(shares, min_size=1, max_size=80),
    st.floats(0.0, 4.0),
    st.floats(0.5, 10.0),
    st.floats(0.1, 5.0),
)
def test_early_reconciles_come_no_closer_than_the_cooldown(
    usages: list[list[float]], requirement: float, scale: float, cooldown: float
) -> None:
    cfg = ReactionConfig(cooldown_s=cooldown)
    triggers = feed([[u * scale for u in us] for us in usages], [pool(requirement, 1)], cfg)
    times = [i * cfg.period_s for i, hit in enumerate(triggers) if hit]
    assert all(b - a >= cooldown - 1e-9 for a, b in itertools.pairwise(times))
    assert len(times) <= 1 + len(usages) * cfg.period_s / cooldown


def test_a_pool_with_room_for_the_step_is_left_to_the_period() -> None:
    # 0.4 -> 1.2 cores triples the usage, but 1.5 cores of estimate still fit 2 cpus.
    assert feed([[0.2, 0.2], [0.6, 0.6]], [pool(0.5, 2)]) == [False, False]
    # the same step on a 1-cpu pool needs a cpu more
    assert feed([[0.2, 0.2], [0.6, 0.6]], [pool(0.5, 1)]) == [False, True]


def test_the_burst_buffer_counts_in_what_the_pool_needs() -> None:
    assert feed([[0.5, 0.5]], [pool(0.5, 2)]) == [False]
    assert feed([[0.5, 0.5]], [pool(0.5, 2, reserved=1.0)]) == [True]


def test_the_decision_says_why_and_hands_the_window_usage_to_the_reconcile() -> None:
    state = WatchState()
    p = pool(0.5, 1)
    _, state = decide(state, 10.0, {PATHS[0]: 1.0, PATHS[1]: 1.0}, [p], CFG, K)
    d, state = decide(state, 10.5, {PATHS[0]: 1.4, PATHS[1]: 1.1}, [p], CFG, K)
    assert d.trigger and d.grow == ("share",)
    assert set(d.usage) == set(PATHS)
    assert math.isclose(d.usage[PATHS[0]], 0.8) and math.isclose(d.usage[PATHS[1]], 0.2)
    terms = d.terms["share"]
    assert terms["fresh_requirement"] == 1.25 and terms["wanted"] == 2
    assert "share must grow" in d.reason
    # the next reading, still high, waits for the cooldown
    d2, _ = decide(state, 11.0, {PATHS[0]: 1.8, PATHS[1]: 1.2}, [p], CFG, K)
    assert not d2.trigger and "cooling down" in d2.reason


def test_a_counter_that_went_back_gives_no_usage() -> None:
    # a pod recreated under the same path starts its cpu time from zero again
    state = WatchState(10.0, {PATHS[0]: 50.0, PATHS[1]: 5.0})
    assert window_usage(state, 10.5, {PATHS[0]: 0.1, PATHS[1]: 5.5}) == {PATHS[1]: 1.0}
    assert window_usage(state, 10.0, {PATHS[0]: 60.0}) == {}


def test_staged_usage_replaces_the_samples_rate_once() -> None:
    store = MetricStore(60.0)
    cg = PATHS[0]
    store.ingest(HostSample(10.0, {cg: CgroupStats(cpu_usage_cores=0.4)}))
    store.stage_usage({cg: 1.0})
    store.ingest(HostSample(12.0, {cg: CgroupStats(cpu_usage_cores=0.55)}))  # diluted
    got = store.cpu(cg, 12.0)
    assert got is not None and got.usage == 1.0
    store.ingest(HostSample(17.0, {cg: CgroupStats(cpu_usage_cores=0.98)}))
    got = store.cpu(cg, 17.0)
    assert got is not None and got.usage == 0.98
