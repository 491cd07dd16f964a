"""Bindings in flight while the next pods are scheduled (`bind_workers`), as kube-scheduler
binds asynchronously: the pod holds its node while its bind is on the way, a failed bind
gives the node back and retries, and every pod ends bound exactly once."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.protocol import TooManyRequests
from pykatalyst.scheduler.scheduler import REASON_BINDING, Scheduler
from tests.scheduler.sched_helpers import add_node, add_pod, events_for, node, pod


class GatedBinds:
    """A cluster whose binds wait until `release()` and count how many run at once;
    the first `fail` binds are refused with 429."""

    def __init__(self, inner: MemoryCluster, fail: int = 0) -> None:
        self.inner = inner
        self.gate = threading.Event()
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.fail = fail
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def release(self) -> None:
        self.gate.set()

    def bind(self, namespace: str, name: str, node_name: str, annotations: Any = None) -> None:
        with self.lock:
            self.calls += 1
            self.running += 1
            self.most = max(self.most, self.running)
            refuse = self.fail > 0
            self.fail -= 1 if refuse else 0
        try:
            assert self.gate.wait(10), "binds were never released"
            if refuse:
                raise TooManyRequests("the API server is busy")
            self.inner.bind(namespace, name, node_name, annotations)
        finally:
            with self.lock:
                self.running -= 1


def _cluster(nodes: int = 2, cpu: str = "4") -> MemoryCluster:
    c = MemoryCluster(VirtualClock())
    for i in range(nodes):
        add_node(c, node(f"n{i}", cpu=cpu, memory="16Gi"))
    return c


def _bound(c: MemoryCluster) -> dict[str, str]:
    return {
        p["metadata"]["name"]: p["spec"].get("nodeName", "")
        for p in c.list(names.POD, "default").items
    }


def test_pods_are_scheduled_while_earlier_binds_are_in_flight() -> None:
    inner = _cluster()
    gated = GatedBinds(inner)
    sched = Scheduler(gated, bind_workers=4)  # type: ignore[arg-type]
    for i in range(4):
        add_pod(inner, pod(f"p{i}", {"cpu": "1"}))
    first = [sched.schedule_one(0.0) for _ in range(4)]
    # every cycle ran and chose a node although no bind has completed yet
    assert all(o is not None and o.node and o.reason == REASON_BINDING for o in first)
    assert sched.bindings_in_flight == 4
    # the in-flight pods hold their nodes: 8 cpus, 4 taken
    assert sum(sched.snapshot.requested(f"n{i}", "cpu") for i in range(2)) == 4000
    gated.release()
    done = sched.finish_bindings(0.0, wait=10)
    assert sorted(o.reason for o in done) == ["Scheduled"] * 4
    assert gated.most == 4
    assert all(_bound(inner).values())
    sched.close()


def test_a_pod_does_not_get_a_node_its_predecessors_hold_while_binding() -> None:
    inner = _cluster(nodes=1, cpu="2")
    gated = GatedBinds(inner)
    sched = Scheduler(gated, bind_workers=2)  # type: ignore[arg-type]
    for i in range(3):
        add_pod(inner, pod(f"p{i}", {"cpu": "1"}))
    outcomes = [sched.schedule_one(0.0) for _ in range(3)]
    assert [o.node if o else None for o in outcomes] == ["n0", "n0", None]
    gated.release()
    sched.close()
    assert sorted(_bound(inner).values()) == ["", "n0", "n0"]


def test_a_failed_bind_gives_the_node_back_and_retries_after_backoff() -> None:
    inner = _cluster(nodes=1)
    gated = GatedBinds(inner, fail=1)
    gated.release()
    sched = Scheduler(gated, bind_workers=2)  # type: ignore[arg-type]
    add_pod(inner, pod("a", {"cpu": "1"}))
    assert sched.schedule_one(0.0) is not None
    (failed,) = sched.finish_bindings(0.0, wait=10)
    assert failed.node is None and failed.reason == "BindingFailed"
    assert "the API server is busy" in failed.message
    assert sched.snapshot.requested("n0", "cpu") == 0
    (event,) = events_for(inner, "a")
    assert event["reason"] == "FailedScheduling"
    assert sched.schedule_one(0.5) is None  # backing off (1s)
    assert sched.schedule_one(1.0) is not None
    (ok,) = sched.finish_bindings(1.0, wait=10)
    assert ok.node == "n0" and _bound(inner) == {"a": "n0"}
    sched.close()


def test_run_until_idle_reports_each_pod_once_its_bind_completed() -> None:
    inner = _cluster()
    sched = Scheduler(inner, bind_workers=3)
    for i in range(5):
        add_pod(inner, pod(f"p{i}", {"cpu": "1"}))
    reported = sched.run_until_idle(0.0)
    reported += sched.close()
    assert sorted(o.pod for o in reported) == [f"default/p{i}" for i in range(5)]
    assert all(o.reason == "Scheduled" for o in reported)
    scheduled = [e for i in range(5) for e in events_for(inner, f"p{i}")]
    assert sorted(e["reason"] for e in scheduled) == ["Scheduled"] * 5


def test_bind_workers_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="bind_workers must be >= 0, got -1"):
        Scheduler(_cluster(), bind_workers=-1)


@settings(max_examples=20, deadline=None)
@given(
    pods=st.lists(st.integers(1, 4), min_size=1, max_size=12),
    workers=st.integers(1, 6),
    fail=st.integers(0, 3),
)
def test_concurrent_binds_never_overcommit_and_bind_each_pod_once(
    pods: list[int], workers: int, fail: int
) -> None:
    inner = _cluster(nodes=2, cpu="6")
    gated = GatedBinds(inner, fail=fail)
    gated.release()
    sched = Scheduler(gated, bind_workers=workers)  # type: ignore[arg-type]
    for i, cpu in enumerate(pods):
        add_pod(inner, pod(f"p{i}", {"cpu": str(cpu)}))
    now = 0.0
    for _ in range(40):
        sched.run_until_idle(now)
        sched.finish_bindings(now, wait=10)
        now += 11.0  # past any backoff
    sched.close()
    placed = _bound(inner)
    used = {n: 0 for n in ("n0", "n1")}
    for i, cpu in enumerate(pods):
        if placed[f"p{i}"]:
            used[placed[f"p{i}"]] += cpu
    assert all(v <= 6 for v in used.values())
    # a pod stays pending only when no node had room for it
    for i, cpu in enumerate(pods):
        if not placed[f"p{i}"]:
            assert all(6 - v < cpu for v in used.values())
    assert gated.calls == sum(1 for v in placed.values() if v) + fail


def test_informers_count_their_relists() -> None:
    sched = Scheduler(_cluster())
    sched.sync(0.0)
    assert sched.relists == {"nodes": 0, "customnoderesources": 0, "pods": 0}
