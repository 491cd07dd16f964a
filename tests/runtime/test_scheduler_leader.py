"""Two scheduler replicas behind one Lease: only the leader binds, the follower takes over
within the lease duration once the leader is gone, and no pod is ever bound twice."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.runtime.host import ComponentHost
from pykatalyst.runtime.leader import LeaderConfig, LeaderElector
from pykatalyst.runtime.scheduler import scheduler_host
from pykatalyst.scheduler.scheduler import Scheduler
from tests.scheduler.sched_helpers import node, pod

CFG = LeaderConfig(lease_duration_s=15, renew_deadline_s=10, retry_period_s=2)


class BindLog(MemoryCluster):
    """A MemoryCluster that remembers who asked to bind which pod."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__(clock=clock)
        self.binds: list[tuple[str, str]] = []
        self.caller = ""

    def bind(self, namespace: str, name: str, node_name: str, annotations: Any = None) -> None:
        self.binds.append((self.caller, f"{namespace}/{name}"))
        super().bind(namespace, name, node_name, annotations)


def _replica(cluster: BindLog, clock: VirtualClock, who: str) -> ComponentHost:
    elector = LeaderElector(
        cluster, who, name=names.SCHEDULER_LEASE_NAME, namespace="katalyst-system", config=CFG
    )
    return scheduler_host(
        Scheduler(cluster),
        clock,
        interval_s=1.0,
        schedule=True,
        report=lambda _outcome: None,
        elector=elector,
    )


def _setup() -> tuple[BindLog, VirtualClock, dict[str, ComponentHost]]:
    clock = VirtualClock(1000.0)
    cluster = BindLog(clock)
    for i in range(3):
        cluster.create(names.NODE, node(f"n{i}"))
    return cluster, clock, {w: _replica(cluster, clock, w) for w in ("a", "b")}


def _step(cluster: BindLog, hosts: dict[str, ComponentHost], now: float) -> None:
    for who, host in hosts.items():
        cluster.caller = who
        host.step(now)


def _add_pods(cluster: BindLog, prefix: str, n: int) -> None:
    for i in range(n):
        cluster.create(names.POD, pod(f"{prefix}-{i}", {"cpu": "100m"}))


def _bound(cluster: BindLog) -> set[str]:
    pods = cluster.list(names.POD).items
    return {f"default/{p['metadata']['name']}" for p in pods if p["spec"].get("nodeName")}


def test_only_the_leader_binds_and_the_follower_takes_over_within_the_lease() -> None:
    cluster, clock, hosts = _setup()
    _step(cluster, hosts, clock.now())  # a takes the lease
    hosts = {"b": hosts["b"], "a": hosts["a"]}  # from now on the follower looks first
    _add_pods(cluster, "first", 6)
    for _ in range(5):
        _step(cluster, hosts, clock.now())
        clock.advance(1)
    assert {who for who, _ in cluster.binds} == {"a"}
    assert len(_bound(cluster)) == 6
    # The leader dies without handing the lease back; new pods arrive.
    killed_at = clock.now()
    del hosts["a"]
    _add_pods(cluster, "second", 4)
    while len(_bound(cluster)) < 10:
        assert clock.now() - killed_at <= CFG.lease_duration_s + CFG.retry_period_s, (
            "the follower did not take over within the lease duration"
        )
        _step(cluster, hosts, clock.now())
        clock.advance(1)
    by_b = {p for who, p in cluster.binds if who == "b"}
    assert by_b == {f"default/second-{i}" for i in range(4)}
    assert len(cluster.binds) == len({p for _, p in cluster.binds}) == 10


def test_a_leader_that_cannot_renew_stops_binding_before_another_takes_over() -> None:
    cluster, clock, hosts = _setup()
    _step(cluster, hosts, clock.now())
    # The leader keeps running but its lease writes fail (partitioned from the API server).
    real_update = cluster.update
    partitioned = {"on": True}

    def update(kind, obj, *args, **kwargs):  # type: ignore[no-untyped-def]
        if kind == names.LEASE and cluster.caller == "a" and partitioned["on"]:
            from pykatalyst.cluster.protocol import ApiError

            raise ApiError("connection refused")
        return real_update(kind, obj, *args, **kwargs)

    cluster.update = update  # type: ignore[method-assign]
    lost_at = clock.now()
    binders_by_time: list[tuple[float, str]] = []
    for t in range(40):
        _add_pods(cluster, f"t{t}", 1)
        before = len(cluster.binds)
        _step(cluster, hosts, clock.now())
        binders_by_time += [(clock.now(), w) for w, _ in cluster.binds[before:]]
        clock.advance(1)
    a_times = [t for t, w in binders_by_time if w == "a"]
    b_times = [t for t, w in binders_by_time if w == "b"]
    assert a_times and b_times
    # a binds only inside its renew deadline, b only after the lease expired: never both.
    assert max(a_times) < lost_at + CFG.renew_deadline_s
    assert min(b_times) >= lost_at + CFG.lease_duration_s - CFG.retry_period_s
    assert max(a_times) < min(b_times)
    assert len(cluster.binds) == len({p for _, p in cluster.binds}) == 40


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 20)), min_size=1, max_size=8))
def test_no_pod_is_bound_twice_whatever_replica_dies_when(kills: list[tuple[str, int]]) -> None:
    """Replicas die at random moments and come back fresh: every pod is bound exactly once."""
    cluster, clock, hosts = _setup()
    pending = 0
    for victim, pause in kills:
        _add_pods(cluster, f"p{pending}", 2)
        pending += 1
        for _ in range(pause):
            _step(cluster, hosts, clock.now())
            clock.advance(1)
        hosts[victim] = _replica(cluster, clock, victim + "'")  # killed, restarted
    for _ in range(40):
        _step(cluster, hosts, clock.now())
        clock.advance(1)
    assert len(_bound(cluster)) == 2 * pending
    assert len(cluster.binds) == len({p for _, p in cluster.binds}) == 2 * pending


class ReadLog(BindLog):
    """A BindLog that also remembers who read pods and nodes (lists and watches)."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__(clock)
        self.reads: list[tuple[str, str]] = []

    def list(self, kind: Any, *args: Any, **kwargs: Any) -> Any:
        if kind in (names.POD, names.NODE):
            self.reads.append((self.caller, "list"))
        return super().list(kind, *args, **kwargs)

    def watch(self, kind: Any, *args: Any, **kwargs: Any) -> Any:
        if kind in (names.POD, names.NODE):
            self.reads.append((self.caller, "watch"))
        return super().watch(kind, *args, **kwargs)


def test_with_delay_cache_until_active_a_follower_reads_nothing_until_it_leads() -> None:
    clock = VirtualClock(1000.0)
    cluster = ReadLog(clock)
    for i in range(3):
        cluster.create(names.NODE, node(f"n{i}"))
    hosts = {}
    for who, delay in (("a", False), ("b", True), ("c", False)):
        elector = LeaderElector(
            cluster, who, name=names.SCHEDULER_LEASE_NAME, namespace="katalyst-system", config=CFG
        )
        hosts[who] = scheduler_host(
            Scheduler(cluster),
            clock,
            interval_s=1.0,
            schedule=True,
            report=lambda _outcome: None,
            elector=elector,
            delay_cache=delay,
        )
    _add_pods(cluster, "first", 3)
    for _ in range(5):
        _step(cluster, hosts, clock.now())
        clock.advance(1)
    assert {who for who, _ in cluster.binds} == {"a"}
    readers = {who for who, _ in cluster.reads}
    # c follows with its caches synced (a quick takeover); b, delaying, reads nothing
    assert readers == {"a", "c"}
    # a dies; b and c race for the lease: make b the only candidate left
    del hosts["a"], hosts["c"]
    _add_pods(cluster, "second", 2)
    for _ in range(int(CFG.lease_duration_s + 2 * CFG.retry_period_s) + 2):
        _step(cluster, hosts, clock.now())
        clock.advance(1)
    assert ("b", "list") in cluster.reads  # the caches filled once it led
    by_b = {p for who, p in cluster.binds if who == "b"}
    assert by_b == {"default/second-0", "default/second-1"}
    assert len(cluster.binds) == len({p for _, p in cluster.binds}) == 5
