"""The stand-in kubelet ends graceful pod deletions on a cluster without kubelets."""

from __future__ import annotations

from pykatalyst.api.names import POD
from pykatalyst.apiserver.kubelet import StandInKubelet
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from tests.apiserver.conformance import pod


def names(mc: MemoryCluster) -> set[str]:
    return {o["metadata"]["name"] for o in mc.list(POD).items}


def test_pods_go_when_their_grace_period_ends_and_finalizers_hold_them() -> None:
    clock = VirtualClock(100.0)
    mc = MemoryCluster(clock=clock)
    kubelet = StandInKubelet(mc, clock)
    mc.create(POD, pod("fast", node="n1", grace=5))
    mc.create(POD, pod("slow", node="n1", grace=60))
    held = pod("held", node="n1", grace=5)
    held["metadata"]["finalizers"] = ["example.com/wait"]
    mc.create(POD, held)
    for name in ("fast", "slow", "held"):
        mc.delete(POD, name, "default")
    clock.advance(4)
    assert kubelet.finish_deletions() == []
    clock.advance(6)
    assert kubelet.finish_deletions() == [("default", "fast")]
    assert names(mc) == {"slow", "held"}
    # The finalizer keeps "held" until it is removed; then it goes at once.
    mc.patch(POD, "held", {"metadata": {"finalizers": None}}, "default")
    assert names(mc) == {"slow"}
    clock.advance(60)
    assert kubelet.finish_deletions() == [("default", "slow")]
    assert names(mc) == set()


def test_a_kubelet_started_late_finishes_deletions_already_under_way() -> None:
    clock = VirtualClock(0.0)
    mc = MemoryCluster(clock=clock)
    mc.create(POD, pod("p1", node="n1", grace=30))
    mc.create(POD, pod("p2", node="n1", grace=30))
    mc.delete(POD, "p1", "default")
    clock.advance(31)
    assert StandInKubelet(mc, clock).finish_deletions(now=clock.now()) == [("default", "p1")]
    assert names(mc) == {"p2"}
