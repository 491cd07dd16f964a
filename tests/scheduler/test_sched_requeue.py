"""Which waiting pods a cluster change wakes: only those it can help (kube-scheduler's
QueueingHints), while the five-minute flush still retries everyone; and the FailedScheduling
summary counted per reason."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.scheduler.config import load_config_text
from pykatalyst.scheduler.framework import Framework
from pykatalyst.scheduler.queue import DEFAULT_MAX_UNSCHEDULABLE_SECONDS
from pykatalyst.scheduler.scheduler import Scheduler
from tests.scheduler.sched_helpers import (
    add_cnr,
    add_node,
    add_pod,
    cnr,
    events_for,
    info,
    node,
    pod,
    profile,
    snapshot,
)

TAINT = {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}
QOS_PROFILE = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
  - schedulerName: katalyst-scheduler
    plugins:
      filter:
        enabled: [{name: QoSAwareNodeResourcesFit}]
        disabled: [{name: NodeResourcesFit}]
"""


def failed_attempts(c: MemoryCluster, name: str) -> int:
    return sum(
        int(e.get("count", 1)) for e in events_for(c, name) if e["reason"] == "FailedScheduling"
    )


def node_of(c: MemoryCluster, name: str) -> str:
    return str(c.get(names.POD, name, "default")["spec"].get("nodeName", ""))


def two_full_nodes() -> MemoryCluster:
    c = MemoryCluster(VirtualClock())
    for n in ("n0", "n1"):
        add_node(c, node(n, cpu="4", memory="16Gi"))
        add_pod(c, pod(f"busy-{n}", {"cpu": "3"}, node_name=n))
    return c


def test_a_deleted_pod_wakes_only_the_pods_that_fit_what_it_freed() -> None:
    c = two_full_nodes()
    sched = Scheduler(c)
    add_pod(c, pod("fits", {"cpu": "2"}))
    add_pod(c, pod("too-big", {"cpu": "6"}))
    assert [o.node for o in sched.run_until_idle(0.0)] == [None, None]
    c.delete(names.POD, "busy-n0", "default", grace_period_seconds=0)
    outcomes = sched.run_until_idle(10.0)
    assert [(o.pod, o.node) for o in outcomes] == [("default/fits", "n0")]
    # the pod the freed cpus cannot help was not tried again: one failed attempt only
    assert failed_attempts(c, "too-big") == 1
    assert sched.queue.location(sched.pods.get("too-big", "default")["metadata"]["uid"]) == (
        "unschedulable"
    )


def resize(c: MemoryCluster, name: str, cpu: str) -> None:
    res = {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}
    spec = {"containers": [{"name": "main", "resources": res}]}
    c.patch(
        names.POD, name, {"spec": spec}, "default", patch_type="strategic", subresource="resize"
    )


def test_a_pod_resized_to_smaller_requests_wakes_the_pods_that_now_fit() -> None:
    c = two_full_nodes()
    sched = Scheduler(c)
    add_pod(c, pod("fits", {"cpu": "2"}))
    add_pod(c, pod("too-big", {"cpu": "6"}))
    assert [o.node for o in sched.run_until_idle(0.0)] == [None, None]
    resize(c, "busy-n1", "1")
    # long before the five-minute flush: the resize itself wakes the pod it made room for
    outcomes = sched.run_until_idle(10.0)
    assert [(o.pod, o.node) for o in outcomes] == [("default/fits", "n1")]
    assert failed_attempts(c, "too-big") == 1


def test_a_pod_resized_to_larger_requests_wakes_nobody() -> None:
    c = two_full_nodes()
    sched = Scheduler(c)
    add_pod(c, pod("fits", {"cpu": "2"}))
    assert [o.node for o in sched.run_until_idle(0.0)] == [None]
    resize(c, "busy-n1", "4")
    assert sched.run_until_idle(10.0) == []
    assert failed_attempts(c, "fits") == 1


def test_freed_room_goes_to_the_higher_priority_pod_first() -> None:
    c = two_full_nodes()
    sched = Scheduler(c)
    add_pod(c, pod("low", {"cpu": "3"}, priority=1))
    add_pod(c, pod("high", {"cpu": "3"}, priority=10))
    sched.run_until_idle(0.0)
    c.delete(names.POD, "busy-n0", "default", grace_period_seconds=0)
    # both could use the room: both are tried, as kube-scheduler does, in priority order
    outcomes = sched.run_until_idle(10.0)
    assert [(o.pod, o.node) for o in outcomes] == [("default/high", "n0"), ("default/low", None)]
    # more room, later: the other one follows
    c.delete(names.POD, "busy-n1", "default", grace_period_seconds=0)
    assert [(o.pod, o.node) for o in sched.run_until_idle(20.0)] == [("default/low", "n1")]


def test_freed_resources_do_not_wake_a_pod_the_node_rejects_for_a_taint() -> None:
    c = MemoryCluster(VirtualClock())
    add_node(c, node("tainted", cpu="8", taints=[TAINT]))
    add_node(c, node("small", cpu="2"))
    add_pod(c, pod("busy", {"cpu": "1"}, node_name="tainted"))
    add_pod(c, pod("busy-small", {"cpu": "1"}, node_name="small"))
    sched = Scheduler(c)
    add_pod(c, pod("p", {"cpu": "4"}))
    sched.run_until_idle(0.0)
    c.delete(names.POD, "busy", "default", grace_period_seconds=0)
    c.delete(names.POD, "busy-small", "default", grace_period_seconds=0)
    assert sched.run_until_idle(10.0) == []
    assert failed_attempts(c, "p") == 1
    # the taint goes away: that change can help, the pod is tried and bound
    c.patch(names.NODE, "tainted", {"spec": {"taints": []}})
    assert [(o.pod, o.node) for o in sched.run_until_idle(20.0)] == [("default/p", "tainted")]


def test_a_new_or_grown_node_wakes_pods_rejected_for_resources() -> None:
    c = two_full_nodes()
    sched = Scheduler(c)
    add_pod(c, pod("a", {"cpu": "2"}))
    add_pod(c, pod("b", {"cpu": "2"}))
    sched.run_until_idle(0.0)
    add_node(c, node("new", cpu="2"))
    assert [o.node for o in sched.run_until_idle(10.0)] == ["new", None]
    # n1 is resized: its larger allocatable helps the pod still waiting
    c.patch(names.NODE, "n1", {"status": {"allocatable": {"cpu": "6"}}}, subresource="status")
    assert [(o.pod, o.node) for o in sched.run_until_idle(20.0)] == [("default/b", "n1")]


def test_grown_reclaimed_capacity_wakes_a_reclaimed_pod() -> None:
    c = MemoryCluster(VirtualClock())
    add_node(c, node("n0", cpu="8"))
    add_cnr(c, cnr("n0", "1k", "16Gi"))
    sched = Scheduler(c, load_config_text(QOS_PROFILE))
    reclaimed = {names.RECLAIMED_MILLICPU: "2k", names.RECLAIMED_MEMORY: "1Gi"}
    add_pod(c, pod("r", reclaimed, qos=names.QOS_RECLAIMED_CORES, scheduler="katalyst-scheduler"))
    (first,) = sched.run_until_idle(0.0)
    assert first.node is None and "Insufficient reclaimed_millicpu" in first.message
    stored = c.get(names.CUSTOM_NODE_RESOURCE, "n0")
    stored["status"]["resources"]["allocatable"][names.RECLAIMED_MILLICPU] = "4k"
    c.update_status(names.CUSTOM_NODE_RESOURCE, stored)
    assert [(o.pod, o.node) for o in sched.run_until_idle(10.0)] == [("default/r", "n0")]


def test_nothing_waits_longer_than_the_unschedulable_flush() -> None:
    c = two_full_nodes()
    sched = Scheduler(c)
    add_pod(c, pod("p", {"cpu": "2"}))
    sched.run_until_idle(0.0)
    # a change that cannot help it (a pod that held nothing it needs) does not wake it
    add_pod(c, pod("tiny", {"memory": "1Mi"}, node_name="n0"))
    sched.run_until_idle(1.0)
    c.delete(names.POD, "tiny", "default", grace_period_seconds=0)
    assert sched.run_until_idle(2.0) == []
    assert sched.run_until_idle(DEFAULT_MAX_UNSCHEDULABLE_SECONDS - 1.0) == []
    (retry,) = sched.run_until_idle(DEFAULT_MAX_UNSCHEDULABLE_SECONDS)
    assert retry.pod == "default/p" and retry.node is None
    assert failed_attempts(c, "p") == 2


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 8), st.integers(0, 16), st.integers(0, 3), st.booleans()),
        min_size=1,
        max_size=8,
    ),
    st.integers(1, 6),
    st.integers(1, 12),
)
def test_reason_counts_match_the_per_node_reasons(
    nodes: list[tuple[int, int, int, bool]], cpu: int, mem: int
) -> None:
    raws = [
        node(f"n{i}", cpu=str(c), memory=f"{m}Gi", pods=str(p), taints=[TAINT] if t else [])
        for i, (c, m, p, t) in enumerate(nodes)
    ]
    snap = snapshot(raws)
    for qos_yaml in (None, QOS_PROFILE):
        fw = Framework(profile(qos_yaml), 100, 0)
        p = info(pod("p", {"cpu": str(cpu), "memory": f"{mem}Gi"}))
        result = fw.schedule(p, snap)
        if result.node is not None:
            continue
        per_node: Counter[str] = Counter()
        for reasons in result.diagnosis.node_reasons(p, result.state, snap).values():
            per_node.update(reasons)
        summed: Counter[str] = Counter()
        for plugin, idx in result.diagnosis.rejected:
            summed.update(plugin.reason_counts(p, result.state, snap, idx))
        assert summed == per_node
