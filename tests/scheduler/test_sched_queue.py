"""The scheduling queue: priority order, backoff doubling to its cap, and requeueing."""

from __future__ import annotations

from pykatalyst.scheduler.queue import SchedulingQueue
from tests.scheduler.sched_helpers import info, pod


def p(name: str, priority: int = 0) -> object:
    return info(pod(name, priority=priority, uid=f"uid-{name}"))


def test_priority_then_arrival_order() -> None:
    q = SchedulingQueue()
    for name, prio in (("a", 0), ("b", 5), ("c", 0), ("d", 5)):
        q.add(info(pod(name, priority=prio, uid=name)), 0.0)
    order = []
    while (entry := q.pop(0.0)) is not None:
        order.append(entry.info.name)
        q.done(entry.info.uid)
    assert order == ["b", "d", "a", "c"]


def test_backoff_doubles_up_to_the_maximum() -> None:
    q = SchedulingQueue(initial_backoff=1.0, max_backoff=10.0)
    q.add(info(pod("a", uid="a")), 0.0)
    now = 0.0
    waits = []
    for _ in range(6):
        entry = q.pop(now)
        assert entry is not None
        q.retry(entry, now)
        due = q.next_due()
        assert due is not None
        waits.append(due - now)
        assert q.pop(due - 0.01) is None
        now = due
    assert waits == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_unschedulable_pods_wait_for_an_event_or_the_flush() -> None:
    q = SchedulingQueue(max_unschedulable_seconds=300.0)
    q.add(info(pod("a", uid="a")), 0.0)
    entry = q.pop(0.0)
    assert entry is not None
    q.unschedulable(entry, 0.0)
    assert q.pop(50.0) is None  # backoff over, but nothing happened in the cluster
    assert q.move_all_unschedulable(50.0) == 1
    again = q.pop(50.0)
    assert again is not None and again.attempts == 2
    q.unschedulable(again, 50.0)
    assert q.pop(349.0) is None
    assert q.pop(350.0) is not None  # flushed after 5 minutes


def test_an_event_during_backoff_waits_for_the_backoff_to_end() -> None:
    q = SchedulingQueue(initial_backoff=1.0)
    q.add(info(pod("a", uid="a")), 0.0)
    entry = q.pop(0.0)
    assert entry is not None
    q.unschedulable(entry, 0.0)
    q.move_all_unschedulable(0.2)
    assert q.pop(0.5) is None
    assert q.pop(1.0) is not None


def test_deleted_pods_leave_the_queue() -> None:
    q = SchedulingQueue()
    q.add(info(pod("a", uid="a")), 0.0)
    q.add(info(pod("b", uid="b")), 0.0)
    q.delete("a")
    entry = q.pop(0.0)
    assert entry is not None and entry.info.name == "b"
    assert q.pop(0.0) is None
