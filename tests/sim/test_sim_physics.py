"""The physics' building blocks: cpu sharing, queueing, the OOM killer."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.sim.physics import (
    MODEL_CONSTANTS,
    erlang_c,
    latency_p99,
    oom_victims,
    share_cpu,
    waterfill,
)

pods = st.lists(
    st.tuples(
        st.integers(0, 2),  # domain
        st.floats(0, 20),  # demand
        st.floats(0.1, 20),  # limit (cpuset size / quota)
        st.integers(2, 4096),  # shares
        st.booleans(),  # cpu.idle
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(pods, st.lists(st.floats(1, 16), min_size=3, max_size=3))
def test_share_cpu_conserves_and_respects_limits(
    spec: list[tuple[int, float, float, int, bool]], caps: list[float]
) -> None:
    domain = np.array([p[0] for p in spec], dtype=np.int64)
    demand = np.array([p[1] for p in spec])
    limit = np.array([p[2] for p in spec])
    weight = np.array([p[3] for p in spec], dtype=float)
    idle = np.array([p[4] for p in spec])
    cap = np.array(caps)
    got = share_cpu(domain, cap, demand, limit, weight, idle)
    assert np.all(got >= -1e-12)
    assert np.all(got <= np.minimum(demand, limit) + 1e-9)
    per_domain = np.bincount(domain, got, 3)
    assert np.all(per_domain <= cap + 1e-9)
    want = np.bincount(domain, np.minimum(demand, limit), 3)
    # work conserving: a domain is either full or everyone got what they wanted
    assert np.all(per_domain >= np.minimum(want, cap) - 1e-6)
    # SCHED_IDLE tasks get cpu only where normal tasks left some
    for d in range(3):
        normal = (domain == d) & ~idle
        lazy = (domain == d) & idle
        if got[lazy].sum() > 1e-9:
            assert got[normal].sum() + 1e-9 >= np.minimum(demand, limit)[normal].sum()


def test_weights_split_a_contended_domain_in_proportion() -> None:
    got = waterfill(
        np.array([0, 0]), np.array([6.0]), np.array([10.0, 10.0]), np.array([1024.0, 2048.0])
    )
    assert np.allclose(got, [2.0, 4.0])


def test_idle_task_yields_to_a_normal_one_with_a_tiny_weight() -> None:
    got = share_cpu(
        np.array([0, 0]),
        np.array([4.0]),
        np.array([3.0, 4.0]),
        np.array([8.0, 8.0]),
        np.array([2.0, 262144.0]),
        np.array([False, True]),
    )
    assert np.allclose(got, [3.0, 1.0])


def _erlang_c_direct(c: int, rho: float) -> float:
    a = rho * c
    top = a**c / math.factorial(c) / (1 - rho)
    bottom = sum(a**k / math.factorial(k) for k in range(c)) + top
    return top / bottom


def test_erlang_c_matches_the_textbook_formula() -> None:
    cases = [(1, 0.5), (2, 0.7), (8, 0.6), (16, 0.9), (4, 0.2)]
    got = erlang_c(np.array([c for c, _ in cases]), np.array([r for _, r in cases]))
    want = [_erlang_c_direct(c, r) for c, r in cases]
    assert np.allclose(got, want, rtol=1e-9)
    assert erlang_c(np.array([4]), np.array([1.2]))[0] == 1.0


def test_latency_grows_with_load_and_interference() -> None:
    def p99(rho: float, ht: float, starved: bool = False) -> float:
        return float(
            latency_p99(
                np.array([10.0]),
                np.array([2.0]),
                np.array([8]),
                np.array([rho]),
                np.array([0.5]),
                np.array([0.0]),
                np.array([ht]),
                np.array([0.0]),
                np.array([starved]),
                np.array([20.0]),
            )[0]
        )

    assert p99(0.1, 0.0) == 10.0
    assert p99(0.95, 0.0) > p99(0.7, 0.0) > 10.0
    assert p99(0.1, 1.0) > p99(0.1, 0.0)
    assert p99(0.1, 0.0, starved=True) >= 200.0


def test_oom_killer_takes_highest_score_until_it_fits() -> None:
    usage = np.array([10.0, 4.0, 4.0])
    adj = np.array([-997, 1000, 500], dtype=np.int64)
    assert oom_victims(usage, adj, 20.0) == []
    assert oom_victims(usage, adj, 15.0) == [1]
    assert oom_victims(usage, adj, 10.0) == [1, 2]
    assert oom_victims(usage, adj, 5.0) == [1, 2, 0]


def test_light_normal_batch_is_charged_its_preemption_and_not_a_queue() -> None:
    """Batch at the kubelet's 2 shares beside a service is preempted when the service wakes:
    the caller leaves it out of rho, and it costs light_preempt_ms per unit of busy share,
    far less than the same batch queued at the service's weight."""
    k = MODEL_CONSTANTS

    def p99(rho: float, bshare: float, light: float) -> float:
        return float(
            latency_p99(
                np.array([2.0]),
                np.array([0.4]),
                np.array([2]),
                np.array([rho]),
                np.array([bshare]),
                np.array([0.0]),
                np.array([0.0]),
                np.array([0.0]),
                np.array([False]),
                np.array([50.0]),
                k,
                light_busy=np.array([light]),
            )[0]
        )

    alone = p99(0.05, 0.0, 0.0)
    light = p99(0.05, 0.0, 0.9)
    queued = p99(0.95, 0.95, 0.0)
    assert light == pytest.approx(alone + k.light_preempt_ms * 0.9)
    assert alone < light < queued
