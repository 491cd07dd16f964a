"""One watch per kind per process for the scheduler, the webhook and the agent, as for
the controllers (test_runtime_shared_informers.py): each reads a kind through one
informer, however many of its parts read that kind."""

from __future__ import annotations

from collections import Counter
from typing import Any

from pykatalyst.agent.agent import Agent
from pykatalyst.agent.enforcer import Enforcer
from pykatalyst.api import names
from pykatalyst.api.names import Kind
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.protocol import Watch
from pykatalyst.scheduler.config import default_config
from pykatalyst.scheduler.scheduler import Scheduler
from pykatalyst.topology.machine import CPUTopology
from pykatalyst.webhook.service import WebhookService
from tests.agent.inmemory_host import InMemoryHost, node_json, pod_json, reclaiming


class CountingCluster(MemoryCluster):
    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.watches: Counter[str] = Counter()

    def watch(self, kind: Kind, *args: Any, **kw: Any) -> Watch:
        self.watches[kind.kind] += 1
        return super().watch(kind, *args, **kw)


def _cluster() -> tuple[CountingCluster, VirtualClock]:
    clock = VirtualClock(1_000_000.0)
    cluster = CountingCluster(clock=clock)
    cluster.create(names.NODE, node_json("node-1"))
    cluster.create(names.POD, pod_json("web"), "default")
    return cluster, clock


def _once_each(cluster: CountingCluster) -> None:
    assert cluster.watches, "nothing was watched: the check would prove nothing"
    assert {kind: n for kind, n in cluster.watches.items() if n > 1} == {}


def test_the_scheduler_opens_one_watch_per_kind() -> None:
    cluster, clock = _cluster()
    sched = Scheduler(cluster, default_config())
    for _ in range(3):
        sched.run_until_idle(clock.advance(1.0))
    _once_each(cluster)
    assert cluster.watches[names.POD.kind] == 1


def test_the_webhook_opens_one_watch_per_kind() -> None:
    cluster, clock = _cluster()
    service = WebhookService(cluster)
    for _ in range(3):
        service.sync(clock.advance(1.0))
    _once_each(cluster)


def test_the_agent_opens_one_watch_per_kind() -> None:
    cluster, clock = _cluster()
    host = InMemoryHost(CPUTopology.synthetic(1, 4, 2))
    agent = Agent("node-1", cluster, host, clock, reclaiming(None), Enforcer(host, None, clock))
    for _ in range(3):
        agent.reconcile(clock.advance(5.0))
    _once_each(cluster)
    assert cluster.watches[names.POD.kind] == 1
