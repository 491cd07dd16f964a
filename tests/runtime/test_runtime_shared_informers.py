"""One informer per kind per process: the controllers of one `katalyst controller` share
the host's informers, so the API server serves it one watch of each kind (one CNR watch,
not one per controller that reads CNRs)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from pykatalyst.api import names
from pykatalyst.api.names import Kind
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.informer import InformerFactory
from pykatalyst.cluster.protocol import Watch
from pykatalyst.controllers.backstop import BackstopConfig
from pykatalyst.runtime.controller import CONTROLLERS, ControllerRunner


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
