"""`katalyst agent`'s loop on an in-memory machine: the share pool follows a load step
within a watch period or two, not a reconcile period or two, and holds still after."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import pytest

from pykatalyst.agent.agent import Agent
from pykatalyst.agent.enforcer import Enforcer
from pykatalyst.agent.host.base import CgroupStats, HostSample
from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.runtime.agent import RECONCILE, agent_host
from pykatalyst.runtime.host import ComponentHost
from pykatalyst.topology.machine import CPUTopology
from tests.agent.inmemory_host import InMemoryHost, node_json, pod_json, reclaiming

TOPO = CPUTopology.synthetic(1, 8, 1)
WATCH_S = 0.5


class AveragingHost(InMemoryHost):
    """Samples rates as a real host does: cpu time since the previous sample over the time
    between them, so a step shows diluted in a sample taken soon after it."""

    def __init__(self, topology: CPUTopology) -> None:
        super().__init__(topology)
        self._last: tuple[float, dict[str, float]] | None = None

    def sample(self, now: float, cgroups: Sequence[str]) -> HostSample:
        s = super().sample(now, cgroups)
        last, self._last = self._last, (now, dict(self.cpu_seconds))
        stats: dict[str, CgroupStats] = {}
        for cg, st in s.cgroups.items():
            rate = None
            if last is not None and now > last[0] and cg in last[1]:
                rate = (self.cpu_seconds.get(cg, 0.0) - last[1][cg]) / (now - last[0])
            stats[cg] = CgroupStats(
                cpu_usage_cores=rate,
                nr_running=0,  # no load average: the estimate is the usage alone
                memory_rss=st.memory_rss,
                memory_cache=st.memory_cache,
                memory_shmem=0,
            )
        return HostSample(now, stats, s.cpu_usage_ratio, memory=s.memory)


class Node:
    def __init__(self, reaction: dict[str, Any] | None = None) -> None:
        self.clock = VirtualClock(10_000)
        cluster = MemoryCluster(clock=self.clock)
        cluster.create(names.NODE, node_json("node-1"))
        self.host = AveragingHost(TOPO)
        cfg = reclaiming(
            {
                "cpu": {"ramp_up_period_s": 0, "min_reclaim_pool_cpus": 1},
                "advisor": {
                    "reserved_for_allocate_cpu": 0,
                    "min_reclaimed_for_allocate_cpu": 1,
                    "min_share_cpu_requirement": 1,
                },
                "reaction": reaction or {},
            }
        )
        agent = Agent("node-1", cluster, self.host, self.clock, cfg, Enforcer(self.host))
        self.runtime: ComponentHost = agent_host(
            agent, self.clock, period_s=5.0, show=lambda plan: None
        )
        obj = cluster.create(names.POD, pod_json("web", cpu="4"), "default")
        self.uid = str(obj["metadata"]["uid"])
        self.host.add_pod(self.uid)
        self.sizes: list[tuple[float, int]] = []

    @property
    def reconciles(self) -> Any:
        return next(t for t in self.runtime.tickers if t.name == RECONCILE)

    def pool_size(self) -> int:
        return len(self.host.cpuset_of(self.host.pods[self.uid].containers["app"].cgroup))

    def run(self, seconds: float) -> None:
        """Let time pass in watch periods, the machine's counters with it."""
        for _ in range(round(seconds / WATCH_S)):
            self.host.advance(WATCH_S)
            self.clock.advance(WATCH_S)
            self.runtime.step(self.clock.now())
            size = self.pool_size()
            if not self.sizes or self.sizes[-1][1] != size:
                self.sizes.append((self.clock.now(), size))

    def grew_after(self, t: float) -> float | None:
        return next((at - t for at, size in self.sizes if at > t and size > 1), None)


def settled(reaction: dict[str, Any] | None = None, since_reconcile: float = 0.0) -> Node:
    """A node whose pool has settled at 1 cpu, `since_reconcile` seconds after a periodic
    reconcile (0: right after it, the worst moment for a pool that follows the period)."""
    node = Node(reaction)
    node.host.set_load(node.uid, 0.6)  # 15 % of the request: 0.75 cores of estimate
    node.run(40.0)  # from its request (4 cpus) down by 2 at most, once per 30 s
    assert node.pool_size() == 1
    while abs(node.reconciles.deadline - node.clock.now() - (5.0 - since_reconcile)) > 1e-9:
        node.run(WATCH_S)
    return node


@pytest.mark.parametrize("since_reconcile", [0.0, 2.0, 4.0])
def test_the_pool_grows_within_two_seconds_of_a_load_step(since_reconcile: float) -> None:
    # Late in a period the usage since the last reconcile is mostly the old load: the
    # early reconcile must size the pool from the watch's window instead.
    node = settled(since_reconcile=since_reconcile)
    kicked = node.reconciles.kicked
    step = node.clock.now()
    node.host.set_load(node.uid, 3.2)  # 80 % of the request
    node.run(3.0)
    grew = node.grew_after(step)
    assert grew is not None and grew <= 2.0
    assert node.reconciles.kicked > kicked


def test_without_the_watch_the_pool_waits_for_the_period() -> None:
    node = settled({"enabled": False})
    step = node.clock.now()
    node.host.set_load(node.uid, 3.2)
    node.run(12.0)
    grew = node.grew_after(step)
    assert grew is not None and grew >= 5.0
    assert node.reconciles.kicked == 0


def test_steady_load_moves_nothing_and_asks_for_no_early_reconcile() -> None:
    for load in (0.6, 3.2):
        node = settled()
        node.host.set_load(node.uid, load)
        node.run(20.0)  # let the pool follow, then hold
        kicked, changes = node.reconciles.kicked, len(node.sizes)
        node.run(90.0)
        assert node.reconciles.kicked == kicked
        assert len(node.sizes) == changes, node.sizes


def test_a_drop_is_left_to_the_period_and_the_regulator() -> None:
    node = settled()
    node.host.set_load(node.uid, 3.2)
    node.run(20.0)
    high = node.pool_size()
    assert high >= 4
    kicked = node.reconciles.kicked
    drop = node.clock.now()
    node.host.set_load(node.uid, 0.6)
    node.run(70.0)
    assert node.reconciles.kicked == kicked
    shrinks = [(at - drop, size) for at, size in node.sizes if at > drop]
    # −2 cpus per step at most, and no two shrinks within 30 s
    sizes = [high] + [size for _, size in shrinks]
    assert all(a - b <= 2 for a, b in itertools.pairwise(sizes))
    times = [at for at, _ in shrinks]
    assert all(b - a >= 30.0 for a, b in itertools.pairwise(times))
    assert shrinks and shrinks[0][0] >= 0.5
