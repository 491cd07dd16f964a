"""One informer per kind per process: the controllers of one `katalyst controller` share
the host's informers, so the API server serves it one watch of each kind (one CNR watch,
not one per controller that reads CNRs); the scheduler, the webhook and the agent each read
a kind through one informer, however many of their parts read it."""

from __future__ import annotations

from collections import Counter
from typing import Any

from pykatalyst.agent.agent import Agent
from pykatalyst.agent.enforcer import Enforcer
from pykatalyst.api import names
from pykatalyst.api.names import Kind
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.informer import InformerFactory
from pykatalyst.cluster.protocol import Watch
from pykatalyst.controllers.backstop import BackstopConfig
from pykatalyst.runtime.controller import CONTROLLERS, ControllerRunner
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


def test_the_controllers_of_one_process_open_one_watch_per_kind() -> None:
    clock = VirtualClock(1_000_000.0)
    cluster = CountingCluster(clock=clock)
    cluster.create(names.NODE, {"metadata": {"name": "n1"}})
    runner = ControllerRunner(
        cluster, BackstopConfig(), period_s=10.0, clock=clock, controllers=CONTROLLERS
    )
    runner.step(clock.now())
    runner.step(clock.advance(10.0))
    assert set(runner.reconcilers) | {"backstop"} == set(CONTROLLERS)
    # lifecycle, overcommit, vpa and the backstop all read CNRs
    assert cluster.watches[names.CUSTOM_NODE_RESOURCE.kind] == 1
    assert cluster.watches[names.POD.kind] == 1
    twice = {kind: n for kind, n in cluster.watches.items() if n > 1}
    assert twice == {}


def test_one_informer_per_kind_and_filters() -> None:
    factory = InformerFactory(MemoryCluster())
    cnrs = factory.informer(names.CUSTOM_NODE_RESOURCE)
    assert factory.informer(names.CUSTOM_NODE_RESOURCE) is cnrs
    nodes = factory.informer(names.NODE, label_selector="pool=a")
    assert factory.informer(names.NODE, label_selector="pool=a") is nodes
    assert factory.informer(names.NODE) is not nodes
    assert len(factory.informers()) == 3


def test_a_shared_informer_brings_every_reader_up_to_date() -> None:
    cluster = MemoryCluster()
    factory = InformerFactory(cluster)
    first, second = factory.informer(names.NODE), factory.informer(names.NODE)
    first.sync()
    cluster.create(names.NODE, {"metadata": {"name": "n1"}})
    first.sync()
    second.sync()  # nothing new for the second reader, yet it sees the node
    assert [n["metadata"]["name"] for n in second.list()] == ["n1"]


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
