"""A running scheduler's pass over a backlog ends after its time budget and goes on at the
next step, so the host's servers and signals are served between pods."""

from __future__ import annotations

from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.runtime.host import ComponentHost
from pykatalyst.runtime.scheduler import SCHEDULE, scheduler_host
from pykatalyst.scheduler.scheduler import Scheduler
from tests.scheduler.sched_helpers import node, pod


def _host(budget: float | None) -> tuple[MemoryCluster, VirtualClock, ComponentHost]:
    clock = VirtualClock(1000.0)
    cluster = MemoryCluster(clock=clock)
    cluster.create(names.NODE, node("n0"))
    for i in range(5):
        cluster.create(names.POD, pod(f"p{i}", {"cpu": "100m"}))
    host = scheduler_host(
        Scheduler(cluster),
        clock,
        interval_s=10.0,
        schedule=True,
        report=lambda _outcome: None,
        pass_budget_s=budget,
    )
    return cluster, clock, host


def _bound(cluster: MemoryCluster) -> int:
    return sum(1 for p in cluster.list(names.POD).items if p["spec"].get("nodeName"))


def test_a_spent_budget_ends_the_pass_and_the_next_step_goes_on_at_once() -> None:
    cluster, clock, host = _host(0.0)
    step = host.step(clock.now())
    assert SCHEDULE in step.ran and _bound(cluster) == 1
    # the rest is not left for the 10 s period: the host wakes at once
    assert step.next_wake == clock.now()
    for _ in range(4):
        step = host.step(clock.now())
    assert _bound(cluster) == 5
    # nothing left: back to the period
    step = host.step(clock.now())
    assert step.next_wake == clock.now() + 10.0


def test_without_a_budget_one_pass_empties_the_queue() -> None:
    cluster, clock, host = _host(None)
    step = host.step(clock.now())
    assert _bound(cluster) == 5 and step.next_wake == clock.now() + 10.0
