"""Leader election over a Lease: one leader at a time, renewal, takeover after expiry,
clean hand-over, and a leader that cannot renew stepping down in time."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.api.names import CONTROLLER_LEASE_NAME, LEASE, SYSTEM_NAMESPACE
from pykatalyst.api.timefmt import parse_rfc3339
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.protocol import JSON, ApiError
from pykatalyst.runtime.leader import (
    LeaderConfig,
    LeaderElector,
    LeaseRecord,
    decide,
)

CFG = LeaderConfig(lease_duration_s=15, renew_deadline_s=10, retry_period_s=2)


def _lease(cluster: MemoryCluster) -> JSON:
    return cluster.get(LEASE, CONTROLLER_LEASE_NAME, SYSTEM_NAMESPACE)


def _pair(clock: VirtualClock) -> tuple[MemoryCluster, LeaderElector, LeaderElector]:
    cluster = MemoryCluster(clock=clock)
    a = LeaderElector(cluster, "a", config=CFG)
    b = LeaderElector(cluster, "b", config=CFG)
    return cluster, a, b


def test_first_candidate_creates_the_lease_and_leads() -> None:
    clock = VirtualClock(1000.0)
    cluster, a, b = _pair(clock)
    st_a = a.tick(clock.now())
    assert st_a.leading and st_a.became_leader and st_a.action == "create"
    spec = _lease(cluster)["spec"]
    assert spec["holderIdentity"] == "a"
    assert spec["leaseDurationSeconds"] == 15
    assert parse_rfc3339(spec["renewTime"]) == pytest.approx(1000.0)
    st_b = b.tick(clock.now())
    assert not st_b.leading and st_b.holder == "a" and st_b.action == "follow"


def test_renewing_keeps_the_lease_for_as_long_as_the_leader_lives() -> None:
    clock = VirtualClock(0.0)
    cluster, a, b = _pair(clock)
    for _ in range(100):  # 200 s, far beyond one lease duration
        assert a.tick(clock.now()).leading
        assert not b.tick(clock.now()).leading
        clock.advance(2)
    spec = _lease(cluster)["spec"]
    assert spec["holderIdentity"] == "a"
    assert spec["leaseTransitions"] == 0
    assert parse_rfc3339(spec["renewTime"]) == pytest.approx(198.0)
    assert parse_rfc3339(spec["acquireTime"]) == pytest.approx(0.0)


def test_a_follower_takes_over_only_after_the_lease_expired() -> None:
    clock = VirtualClock(0.0)
    cluster, a, b = _pair(clock)
    a.tick(0.0)
    b.tick(0.0)  # b sees a's lease renewed at 0
    # a dies: it never ticks again. b must wait the whole lease duration.
    t = 0.0
    while True:
        t = clock.advance(1)
        st_b = b.tick(t)
        if st_b.leading:
            break
        assert t < 15
    assert t == 15
    assert st_b.became_leader and st_b.action == "takeover"
    # By then the dead leader would no longer consider itself leading either.
    assert not a.leading(t)
    spec = _lease(cluster)["spec"]
    assert spec["holderIdentity"] == "b"
    assert spec["leaseTransitions"] == 1


def test_expiry_is_judged_on_the_followers_own_clock_not_on_renew_time() -> None:
    # A lease whose renewTime is long past (another machine's clock, or a stale object)
    # still gets a full duration from the moment this candidate first sees it.
    clock = VirtualClock(10_000.0)
    cluster, _, b = _pair(clock)
    record = LeaseRecord("old", 15, 0.0, 0.0, 4)
    cluster.create(
        LEASE,
        {
            "metadata": {"name": CONTROLLER_LEASE_NAME, "namespace": SYSTEM_NAMESPACE},
            "spec": record.spec_json(),
        },
        SYSTEM_NAMESPACE,
    )
    assert not b.tick(10_000.0).leading
    assert not b.tick(10_014.0).leading
    st_b = b.tick(10_015.0)
    assert st_b.leading
    assert _lease(cluster)["spec"]["leaseTransitions"] == 5


def test_release_hands_the_lease_over_at_once() -> None:
    clock = VirtualClock(0.0)
    cluster, a, b = _pair(clock)
    a.tick(0.0)
    b.tick(0.0)
    assert a.release(1.0)
    assert not a.leading(1.0)
    assert _lease(cluster)["spec"]["holderIdentity"] == ""
    st_b = b.tick(2.0)
    assert st_b.leading and st_b.action == "acquire"
    assert not a.release(3.0)  # no longer ours: nothing to hand back
    assert _lease(cluster)["spec"]["holderIdentity"] == "b"


class _RacingCluster(MemoryCluster):
    """Lets a rival write the lease between this candidate's read and its write."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__(clock=clock)
        self.rival: LeaderElector | None = None

    def get(self, kind: Any, name: str, namespace: str | None = None) -> JSON:
        obj = super().get(kind, name, namespace)
        if kind == LEASE and self.rival is not None:
            rival, self.rival = self.rival, None
            rival.tick(self.clock.now())
        return obj


def test_two_candidates_racing_for_a_free_lease_cannot_both_win() -> None:
    clock = VirtualClock(0.0)
    cluster = _RacingCluster(clock)
    a = LeaderElector(cluster, "a", config=CFG)
    b = LeaderElector(cluster, "b", config=CFG)
    # The lease exists but is free (released); both read it, b writes first.
    a.tick(0.0)
    a.release(0.0)
    cluster.rival = b
    st_a = a.tick(1.0)
    assert b.leading(1.0)
    assert not st_a.leading
    assert _lease(cluster)["spec"]["holderIdentity"] == "b"


class _FlakyCluster(MemoryCluster):
    def __init__(self, clock: VirtualClock) -> None:
        super().__init__(clock=clock)
        self.fail_writes = False

    def update(self, kind: Any, obj: JSON) -> JSON:
        if self.fail_writes:
            raise ApiError("etcd unavailable", "ServiceUnavailable", 503)
        return super().update(kind, obj)


def test_a_leader_that_cannot_renew_steps_down_before_anyone_may_take_over() -> None:
    clock = VirtualClock(0.0)
    cluster = _FlakyCluster(clock)
    a = LeaderElector(cluster, "a", config=CFG)
    b = LeaderElector(cluster, "b", config=CFG)
    a.tick(0.0)
    b.tick(0.0)
    cluster.fail_writes = True
    stepped_down = None
    took_over = None
    t = 0.0
    while took_over is None and t < 60:
        t = clock.advance(1)
        st_a = a.tick(t)
        if stepped_down is None and not st_a.leading:
            stepped_down = t
            assert st_a.lost_leadership
        if t == 20:
            cluster.fail_writes = False  # b's takeover write must go through
        if b.tick(t).leading:
            took_over = t
    assert stepped_down == 10  # the renew deadline
    assert took_over is not None and took_over >= 15
    assert stepped_down < took_over


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.sampled_from(["tick", "crash", "release", "wait"])),
        min_size=1,
        max_size=120,
    )
)
def test_never_two_leaders_at_once(schedule: list[tuple[int, str]]) -> None:
    clock = VirtualClock(0.0)
    cluster = MemoryCluster(clock=clock)
    electors = [LeaderElector(cluster, f"c{i}", config=CFG) for i in range(3)]
    alive = [True, True, True]
    for who, what in schedule:
        now = clock.now()
        if what == "tick" and alive[who]:
            electors[who].tick(now)
        elif what == "crash":
            alive[who] = not alive[who]  # a crashed candidate may come back later
        elif what == "release" and alive[who]:
            electors[who].release(now)
        else:
            clock.advance(3)
        now = clock.now()
        leaders = [e.identity for e in electors if e.leading(now)]
        assert len(leaders) <= 1, (now, leaders)
        if leaders:
            assert _lease(cluster)["spec"]["holderIdentity"] == leaders[0]


def test_decide_rejects_what_cannot_work() -> None:
    with pytest.raises(ValueError, match="identity"):
        decide(None, None, "", 0.0, 15)
    with pytest.raises(ValueError, match="duration_s"):
        decide(None, None, "a", 0.0, 0)


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"lease_duration_s": 10, "renew_deadline_s": 10, "retry_period_s": 2}, "lease_duration"),
        ({"lease_duration_s": 15, "renew_deadline_s": 2, "retry_period_s": 2}, "renew_deadline"),
        ({"lease_duration_s": 15, "renew_deadline_s": 10, "retry_period_s": 0}, "retry_period"),
    ],
)
def test_leader_config_names_the_bad_setting(kw: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        LeaderConfig(**kw)
