"""The scheduler's /metrics under kube-scheduler's names: every attempt counted by result
and profile with its latency, and the pods waiting by queue, as Prometheus reads them."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.runtime.scheduler import scheduler_host
from pykatalyst.scheduler.metrics import QUEUES, SchedulerMetrics, attempt_result
from pykatalyst.scheduler.scheduler import ScheduleOutcome, Scheduler
from tests.scheduler.sched_helpers import node, pod


def _families(registry: CollectorRegistry) -> dict[str, Any]:
    text = generate_latest(registry).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def _value(family: Any, sample: str, **labels: str) -> float:
    for s in family.samples:
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
            return float(s.value)
    return 0.0


def test_attempts_latency_and_pending_pods_as_kube_scheduler_names_them() -> None:
    clock = VirtualClock(1000.0)
    cluster = MemoryCluster(clock=clock)
    cluster.create(names.NODE, node("n0", cpu="2"))
    for i in range(3):
        cluster.create(names.POD, pod(f"small-{i}", {"cpu": "500m"}))
    cluster.create(names.POD, pod("huge", {"cpu": "64"}))
    outcomes: list[ScheduleOutcome] = []
    host = scheduler_host(
        Scheduler(cluster), clock, interval_s=1.0, schedule=True, report=outcomes.append
    )
    host.step(clock.now())
    fam = _families(host.registry)
    attempts = fam["scheduler_schedule_attempts"]
    sample = "scheduler_schedule_attempts_total"
    profile = "default-scheduler"
    assert _value(attempts, sample, result="scheduled", profile=profile) == 3
    assert _value(attempts, sample, result="unschedulable", profile=profile) == 1
    bound = [o for o in outcomes if o.node]
    assert len(bound) == 3
    latency = fam["scheduler_scheduling_attempt_duration_seconds"]
    count = "scheduler_scheduling_attempt_duration_seconds_count"
    assert _value(latency, count, result="scheduled", profile=profile) == 3
    assert _value(latency, count, result="unschedulable", profile=profile) == 1
    pending = fam["scheduler_pending_pods"]
    assert _value(pending, "scheduler_pending_pods", queue="unschedulable") == 1
    assert _value(pending, "scheduler_pending_pods", queue="active") == 0
    # Deleting the pod that cannot fit empties the queue.
    cluster.delete(names.POD, "huge", "default")
    clock.advance(1)
    host.step(clock.now())
    pending = _families(host.registry)["scheduler_pending_pods"]
    assert {s.labels["queue"]: s.value for s in pending.samples} == dict.fromkeys(QUEUES, 0.0)


def test_an_extender_only_scheduler_attempts_nothing() -> None:
    clock = VirtualClock(1000.0)
    cluster = MemoryCluster(clock=clock)
    cluster.create(names.NODE, node("n0"))
    cluster.create(names.POD, pod("p", {"cpu": "100m"}))
    host = scheduler_host(
        Scheduler(cluster), clock, interval_s=1.0, schedule=False, report=lambda _o: None
    )
    host.step(clock.now())
    attempts = _families(host.registry)["scheduler_schedule_attempts"]
    assert [s for s in attempts.samples if s.name.endswith("_total")] == []


@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.just("n0")),
            st.sampled_from(["Unschedulable", "Error", "BindingFailed", "NoProfile", "x"]),
            st.sampled_from(["a", "b"]),
            st.floats(0, 30),
        ),
        max_size=30,
    )
)
def test_every_attempt_is_counted_once_under_its_result(
    attempts: list[tuple[str | None, str, str, float]],
) -> None:
    registry = CollectorRegistry()
    m = SchedulerMetrics(registry)
    want: dict[tuple[str, str], int] = {}
    for node_name, reason, profile, seconds in attempts:
        outcome = ScheduleOutcome("ns/p", "uid", node_name, reason, profile=profile)
        m.attempted(outcome, seconds)
        key = (attempt_result(outcome), profile)
        want[key] = want.get(key, 0) + 1
        if node_name is not None:
            assert key[0] == "scheduled"
    fam = _families(registry)
    got = {
        (s.labels["result"], s.labels["profile"]): int(s.value)
        for s in fam["scheduler_schedule_attempts"].samples
        if s.name.endswith("_total")
    }
    assert got == want
    counts = {
        (s.labels["result"], s.labels["profile"]): int(s.value)
        for s in fam["scheduler_scheduling_attempt_duration_seconds"].samples
        if s.name.endswith("_count")
    }
    assert counts == want


def test_attempts_with_binds_in_flight_are_counted_once_their_bind_ends() -> None:
    import time

    clock = VirtualClock(1000.0)
    cluster = MemoryCluster(clock=clock)
    cluster.create(names.NODE, node("n0", cpu="8"))
    for i in range(6):
        cluster.create(names.POD, pod(f"p{i}", {"cpu": "500m"}))
    outcomes: list[ScheduleOutcome] = []
    sched = Scheduler(cluster, bind_workers=3)
    host = scheduler_host(sched, clock, interval_s=1.0, schedule=True, report=outcomes.append)
    deadline = time.monotonic() + 10
    while len(outcomes) < 6 and time.monotonic() < deadline:
        host.step(clock.now())
        clock.advance(1)
        time.sleep(0.01)  # the binder threads' turn
    sched.close()
    # each pod reported once, once bound, and counted once as a scheduled attempt
    assert sorted(o.pod for o in outcomes) == [f"default/p{i}" for i in range(6)]
    assert {o.reason for o in outcomes} == {"Scheduled"}
    fam = _families(host.registry)
    profile = "default-scheduler"
    attempts = fam["scheduler_schedule_attempts"]
    assert _value(attempts, "scheduler_schedule_attempts_total", result="scheduled") == 6
    latency = fam["scheduler_scheduling_attempt_duration_seconds"]
    count = "scheduler_scheduling_attempt_duration_seconds_count"
    assert _value(latency, count, result="scheduled", profile=profile) == 6
