"""The scheduler end to end over MemoryCluster: policies, assume cache, binding failures,
unschedulable pods (condition, Event, retry on cluster events), bad input."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import pytest

from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.protocol import TooManyRequests
from pykatalyst.scheduler.config import load_config, load_config_text
from pykatalyst.scheduler.scheduler import Scheduler
from tests.scheduler.sched_helpers import (
    EXAMPLES,
    add_cnr,
    add_node,
    add_pod,
    cnr,
    events_for,
    node,
    pod,
)

RECLAIMED = {names.RECLAIMED_MILLICPU: "1k", names.RECLAIMED_MEMORY: "1Gi"}

# The three Katalyst policies, restated in v1 form so they are exercised on a fresh clone.
OWN_POLICY = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
  - schedulerName: katalyst-scheduler
    plugins:
      preFilter: {{enabled: [{{name: QoSAwareNodeResourcesFit}}]}}
      filter:
        enabled: [{{name: QoSAwareNodeResourcesFit}}]
        disabled: [{{name: NodeResourcesFit}}]
      score:
        enabled:
          - {{name: QoSAwareNodeResourcesFit, weight: {weight}}}
          - {{name: QoSAwareNodeResourcesBalancedAllocation, weight: 1}}
        disabled: [{{name: NodeResourcesFit}}, {{name: NodeResourcesBalancedAllocation}}]
      reserve: {{enabled: [{{name: QoSAwareNodeResourcesFit}}]}}
    pluginConfig:
      - name: QoSAwareNodeResourcesFit
        args:
          scoringStrategy:
            type: {strategy}
            requestedToCapacityRatio: {{shape: [{{utilization: 0, score: 0}},
                                                {{utilization: 100, score: 10}}]}}
"""
OWN = {
    "spread": OWN_POLICY.format(weight=4, strategy="LeastAllocated"),
    "binpack": OWN_POLICY.format(weight=15, strategy="MostAllocated"),
    "custom": OWN_POLICY.format(weight=15, strategy="RequestedToCapacityRatio"),
}


def cluster_with(nodes: int = 3, with_cnr: bool = True, cpu: str = "8") -> MemoryCluster:
    c = MemoryCluster(VirtualClock())
    for i in range(nodes):
        add_node(c, node(f"n{i}", cpu=cpu, memory="16Gi"))
        if with_cnr:
            add_cnr(c, cnr(f"n{i}", "8k", "16Gi"))
    return c


def placements(c: MemoryCluster, scheduler_name: str = "katalyst-scheduler") -> Counter[str]:
    pods = c.list(names.POD, "default").items
    return Counter(p["spec"].get("nodeName", "") for p in pods)


@pytest.mark.parametrize("source", ["katalyst", "own"])
@pytest.mark.parametrize("policy", ["spread", "binpack", "custom"])
def test_policies_spread_or_pack_reclaimed_pods(source: str, policy: str) -> None:
    if source == "katalyst":
        path = EXAMPLES / f"scheduler-policy-{policy}.yaml"
        if not path.exists():
            pytest.skip("Katalyst's example policies are not checked out next to this repo")
        config = load_config(path)
    else:
        config = load_config_text(OWN[policy])
    c = cluster_with(3)
    sched = Scheduler(c, config, seed=7)
    for i in range(10):
        add_pod(c, pod(f"r{i}", RECLAIMED, qos="reclaimed_cores", scheduler="katalyst-scheduler"))
    outcomes = sched.run_until_idle(0.0)
    assert all(o.node for o in outcomes)
    if policy == "spread":
        # the first pod on empty 8k/16Gi nodes, 1k/1Gi asked: cpu 87, memory 93 -> 90, x4;
        # balance: fractions 1/8 and 1/16 -> (1 - 0.03125) x 100 = 96, x1
        assert outcomes[0].scores == {
            "QoSAwareNodeResourcesFit": 360,
            "QoSAwareNodeResourcesBalancedAllocation": 96,
            "TaintToleration": 300,
            "NodeAffinity": 0,
        }
    counts = placements(c)
    if policy == "spread":
        assert sorted(counts.values()) == [3, 3, 4]
    else:
        # 8 reclaimed cores per node: as few nodes as possible means 8 + 2
        assert sorted(counts.values()) == [2, 8]


class DeferredBinding:
    """A cluster whose bindings land only when `deliver()` is called."""

    def __init__(self, inner: MemoryCluster, fail_first: int = 0) -> None:
        self.inner = inner
        self.pending: list[tuple[str, str, str]] = []
        self.defer = True
        self.fail_first = fail_first

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def bind(self, namespace: str, name: str, node_name: str, annotations: Any = None) -> None:
        if self.fail_first:
            self.fail_first -= 1
            raise TooManyRequests("apiserver is busy")
        if self.defer:
            self.pending.append((namespace, name, node_name, annotations))
        else:
            self.inner.bind(namespace, name, node_name, annotations)

    def deliver(self) -> None:
        for args in self.pending:
            self.inner.bind(*args)
        self.pending.clear()


def test_an_assumed_pod_counts_before_its_binding_lands() -> None:
    inner = cluster_with(1, with_cnr=False, cpu="4")
    c = DeferredBinding(inner)
    sched = Scheduler(c, seed=1)  # type: ignore[arg-type]
    add_pod(inner, pod("a", {"cpu": "3"}))
    first = sched.schedule_one(0.0)
    assert first is not None and first.node == "n0"
    add_pod(inner, pod("b", {"cpu": "3"}))
    second = sched.schedule_one(0.0)
    assert second is not None and second.node is None
    assert second.message == "0/1 nodes are available: 1 Insufficient cpu."
    # the informer now sees the binding: the pod is counted once, not twice
    c.deliver()
    sched.sync(0.0)
    assert sched.snapshot.requested("n0", "cpu") == 3000
    assert not sched.snapshot.is_assumed(first.uid)


def test_failed_binding_forgets_the_pod_and_retries_after_backoff() -> None:
    inner = cluster_with(1, with_cnr=False)
    c = DeferredBinding(inner, fail_first=1)
    c.defer = False
    sched = Scheduler(c)  # type: ignore[arg-type]
    add_pod(inner, pod("a", {"cpu": "1"}))
    outcome = sched.schedule_one(0.0)
    assert outcome is not None and outcome.node is None and outcome.reason == "BindingFailed"
    assert sched.snapshot.requested("n0", "cpu") == 0
    (event,) = events_for(inner, "a")
    assert event["reason"] == "FailedScheduling"
    assert "apiserver is busy" in event["message"]
    assert sched.schedule_one(0.5) is None  # still backing off (1s)
    retry = sched.schedule_one(1.0)
    assert retry is not None and retry.node == "n0"


def test_unschedulable_pod_gets_condition_and_summed_event_then_retries() -> None:
    c = MemoryCluster(VirtualClock())
    for i in range(3):
        add_node(c, node(f"small{i}", cpu="1"))
    taint = {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}
    for i in range(2):
        add_node(c, node(f"tainted{i}", taints=[taint]))
    sched = Scheduler(c)
    add_pod(c, pod("p", {"cpu": "2"}))
    outcome = sched.schedule_one(0.0)
    expected = (
        "0/5 nodes are available: 2 node(s) had untolerated taint {dedicated: infra}, "
        "3 Insufficient cpu."
    )
    assert outcome is not None and outcome.message == expected
    stored = c.get(names.POD, "p", "default")
    (cond,) = [x for x in stored["status"]["conditions"] if x["type"] == "PodScheduled"]
    assert (cond["status"], cond["reason"], cond["message"]) == ("False", "Unschedulable", expected)
    (event,) = events_for(c, "p")
    assert (event["type"], event["reason"], event["message"]) == (
        "Warning",
        "FailedScheduling",
        expected,
    )
    # nothing changed in the cluster: no retry even after the backoff
    assert sched.run_until_idle(30.0) == []
    # a node that fits arrives: the pod is tried again and bound
    add_node(c, node("big", cpu="8"))
    (retry,) = sched.run_until_idle(31.0)
    assert retry.node == "big"
    assert c.get(names.POD, "p", "default")["spec"]["nodeName"] == "big"


def test_repeated_failures_bump_the_event_count() -> None:
    c = cluster_with(1, with_cnr=False, cpu="1")
    sched = Scheduler(c)
    add_pod(c, pod("p", {"cpu": "2"}))
    sched.schedule_one(0.0)
    add_node(c, node("also-small", cpu="1"))
    sched.run_until_idle(5.0)
    events = events_for(c, "p")
    messages = [e["message"] for e in events]
    assert "0/1 nodes are available: 1 Insufficient cpu." in messages
    assert "0/2 nodes are available: 2 Insufficient cpu." in messages
    sched.snapshot.upsert_node(node("also-small", cpu="1", labels={"x": "y"}))
    sched.queue.move_all_unschedulable(20.0)
    sched.run_until_idle(20.0)
    counts = {e["message"]: e["count"] for e in events_for(c, "p")}
    assert counts["0/2 nodes are available: 2 Insufficient cpu."] == 2


def test_deleting_a_pod_frees_room_for_a_waiting_one() -> None:
    c = cluster_with(1, with_cnr=False, cpu="4")
    sched = Scheduler(c)
    add_pod(c, pod("old", {"cpu": "3"}, node_name="n0"))
    add_pod(c, pod("new", {"cpu": "2"}))
    (first,) = sched.run_until_idle(0.0)
    assert first.node is None
    c.delete(names.POD, "old", "default", grace_period_seconds=0)
    (second,) = sched.run_until_idle(2.0)
    assert second.node == "n0"


def test_invalid_qos_annotation_keeps_the_pod_pending_with_an_event() -> None:
    c = cluster_with(1)
    sched = Scheduler(c)
    add_pod(c, pod("p", {"cpu": "1"}, qos="gold_cores"))
    (outcome,) = sched.run_until_idle(0.0)
    assert outcome.node is None and outcome.reason == "InvalidQoS"
    (event,) = events_for(c, "p")
    assert names.QOS_LEVEL_ANNOTATION in event["message"]
    assert "gold_cores" in event["message"]
    assert "spec" not in c.get(names.POD, "p", "default") or not c.get(names.POD, "p", "default")[
        "spec"
    ].get("nodeName")


def test_nodes_without_or_with_broken_cnr(caplog: pytest.LogCaptureFixture) -> None:
    c = MemoryCluster(VirtualClock())
    add_node(c, node("plain"))
    add_node(c, node("broken"))
    add_node(c, node("good"))
    bad = cnr("broken")
    bad["status"]["resources"]["allocatable"][names.RECLAIMED_MILLICPU] = "lots"
    with caplog.at_level(logging.WARNING):
        add_cnr(c, bad)
        add_cnr(c, cnr("good"))
        sched = Scheduler(c, load_config_text(OWN["spread"]))
        sched.sync(0.0)
    assert "CNR broken ignored" in caplog.text
    assert "broken" in sched.snapshot.cnr_problems
    for i in range(3):
        add_pod(c, pod(f"r{i}", RECLAIMED, qos="reclaimed_cores", scheduler="katalyst-scheduler"))
    add_pod(
        c,
        pod(
            "s",
            {"cpu": "1"},
            qos="shared_cores",
            scheduler="katalyst-scheduler",
            node_selector={"kubernetes.io/hostname": "plain"},
        ),
    )
    outcomes = {o.pod: o.node for o in sched.run_until_idle(0.0)}
    assert outcomes["default/s"] == "plain"
    # reclaimed pods go only where a readable CNR offers reclaimed capacity
    assert {outcomes[f"default/r{i}"] for i in range(3)} == {"good"}


def test_higher_priority_pods_go_first() -> None:
    c = cluster_with(1, with_cnr=False, cpu="2")
    sched = Scheduler(c)
    add_pod(c, pod("low", {"cpu": "2"}, priority=1))
    add_pod(c, pod("high", {"cpu": "2"}, priority=100))
    outcomes = sched.run_until_idle(0.0)
    assert [(o.pod, o.node) for o in outcomes] == [("default/high", "n0"), ("default/low", None)]


def test_only_pods_of_our_profiles_are_scheduled_and_success_is_recorded() -> None:
    c = cluster_with(1, with_cnr=False)
    sched = Scheduler(c)
    add_pod(c, pod("theirs", {"cpu": "1"}, scheduler="someone-else"))
    add_pod(c, pod("ours", {"cpu": "1"}))
    gated = pod("gated", {"cpu": "1"})
    gated["spec"]["schedulingGates"] = [{"name": "wait"}]
    add_pod(c, gated)
    outcomes = sched.run_until_idle(0.0)
    assert [o.pod for o in outcomes] == ["default/ours"]
    (event,) = events_for(c, "ours")
    assert event["reason"] == "Scheduled"
    assert event["message"] == "Successfully assigned default/ours to n0"


@pytest.mark.parametrize(
    ("annotations", "bound"),
    [
        ({names.MEMORY_ENHANCEMENT_ANNOTATION: '{"oom_priority": "' + "1" * 5000 + '"}'}, False),
        ({names.NUMA_IDS_ANNOTATION: ",".join(f"{i * 4097}-{i * 4097 + 4096}" for i in range(999))},
         False),
        # a bare JSON number too long to read: Katalyst reads the enhancement as empty
        ({names.CPU_ENHANCEMENT_ANNOTATION: '{"cpu_burst_percent": ' + "1" * 5000 + "}"}, True),
    ],
)  # fmt: skip
def test_a_hostile_pod_never_stops_the_others(annotations: dict[str, str], bound: bool) -> None:
    c = MemoryCluster(VirtualClock())
    add_node(c, node("n1", cpu="8"))
    sched = Scheduler(c)
    add_pod(c, pod("bad", {"cpu": "1"}, annotations=annotations))
    add_pod(c, pod("good", {"cpu": "1"}))
    outcomes = {o.pod: o for o in sched.run_until_idle(0.0)}
    assert outcomes["default/good"].node == "n1"
    assert (outcomes["default/bad"].node == "n1") is bound
    if not bound:
        (event,) = events_for(c, "bad")
        assert event["reason"] == "FailedScheduling" and "invalid QoS" in event["message"]
