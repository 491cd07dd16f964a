"""Plans applied to an API server: pods/eviction, Node and CNR taints, Events, records and
metrics — with Katalyst's colocation tutorial's reclaimed-overcommit case."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from pykatalyst.agent.eviction import (
    EvictionConfig,
    EvictionExecutor,
    EvictionManager,
    EvictionRecorder,
    EvictionSnapshot,
    pod_info,
    read_cnr_reclaimed,
    read_records,
)
from pykatalyst.agent.eviction.executor import sync_taints
from pykatalyst.agent.eviction.plugins import RECLAIMED_CONDITION
from pykatalyst.api import names
from pykatalyst.api.crds import new_cnr
from pykatalyst.apiserver.kubelet import StandInKubelet
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.protocol import JSON

GIB = 1 << 30
NODE = "node-1"
OVERCOMMIT_KEY = names.TAINT_PREFIX + names.CONDITION_RECLAIMED_RESOURCE_PRESSURE


def reclaimed_pod(name: str, milli: str, memory: str) -> JSON:
    res = {names.RECLAIMED_MILLICPU: milli, names.RECLAIMED_MEMORY: memory}
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "annotations": {names.QOS_LEVEL_ANNOTATION: names.QOS_RECLAIMED_CORES},
        },
        "spec": {
            "nodeName": NODE,
            "schedulerName": names.DEFAULT_SCHEDULER_NAME,
            "containers": [
                {"name": "stress", "image": "stress", "resources": {"requests": res, "limits": res}}
            ],
        },
    }


class Rig:
    def __init__(self, cfg: EvictionConfig | None = None) -> None:
        self.clock = VirtualClock(1_000)
        self.cluster = MemoryCluster(clock=self.clock)
        self.cluster.create(
            names.NODE,
            {
                "metadata": {"name": NODE},
                "spec": {"taints": [{"key": "example.com/gpu", "effect": "NoSchedule"}]},
            },
        )
        cnr = new_cnr(NODE).to_json()
        cnr["spec"] = {
            "taints": [
                {"key": names.UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule", "qosLevel": "x"}
            ]
        }
        self.cluster.create(names.CUSTOM_NODE_RESOURCE, cnr)
        self.registry = CollectorRegistry()
        self.recorder = EvictionRecorder(self.registry)
        self.manager = EvictionManager(NODE, cfg)
        self.executor = EvictionExecutor(self.cluster, NODE, self.recorder)

    def publish(self, milli: int, memory: int = 180 * GIB) -> None:
        status = {
            "resources": {
                "allocatable": {
                    names.RECLAIMED_MILLICPU: str(milli),
                    names.RECLAIMED_MEMORY: str(memory),
                },
            }
        }
        self.cluster.patch(
            names.CUSTOM_NODE_RESOURCE, NODE, {"status": status}, subresource="status"
        )

    def round(self) -> Any:
        pods = self.cluster.list(names.POD, field_selector=f"spec.nodeName={NODE}").items
        snap = EvictionSnapshot(
            now=self.clock.now(),
            node=NODE,
            pods=tuple(pod_info(p) for p in pods),
            reclaimed=read_cnr_reclaimed(self.cluster, NODE),
        )
        plan = self.manager.decide(snap)
        result = self.executor.apply(plan)
        self.clock.advance(5)
        return plan, result

    def events(self, reason: str | None = None) -> list[JSON]:
        items = self.cluster.list(names.EVENT).items
        return [e for e in items if reason is None or e.get("reason") == reason]

    def taint_keys(self, kind: names.Kind) -> list[str]:
        obj = self.cluster.get(kind, NODE)
        return [t["key"] for t in obj.get("spec", {}).get("taints", [])]


def test_tutorial_reclaimed_overcommit_evicts_exactly_the_largest_pod() -> None:
    rig = Rig()
    rig.cluster.create(names.POD, reclaimed_pod("reclaimed-large-pod-1", "12k", "24Gi"))
    rig.cluster.create(names.POD, reclaimed_pod("reclaimed-large-pod-2", "24k", "48Gi"))
    # 36k requested; shared load rises and the published reclaimed cpu falls
    for milli in (44_000, 30_000, 20_000, 10_000, 7_500, 7_200):
        rig.publish(milli)
        plan, _ = rig.round()
        assert not plan.evictions, milli  # 36k <= 5 x 7.2k: still tolerated
    assert OVERCOMMIT_KEY in rig.taint_keys(names.CUSTOM_NODE_RESOURCE)  # soft since < 24k
    rig.publish(7_000)  # 36k > 5 x 7k = 35k
    plan, result = rig.round()
    assert [v.pod.name for v in plan.evictions] == ["reclaimed-large-pod-2"]
    assert result.evicted == ("default/reclaimed-large-pod-2",)
    left = rig.cluster.get(names.POD, "reclaimed-large-pod-2", "default")
    assert left["metadata"].get("deletionTimestamp")  # evicted, terminating (grace 60 s)
    # the 12k pod stays: 12k <= 5 x 7k, and no second victim follows
    for _ in range(20):
        plan, _ = rig.round()
        assert not plan.evictions
        StandInKubelet(rig.cluster, rig.clock).finish_deletions()
    pods = rig.cluster.list(names.POD).items
    assert [p["metadata"]["name"] for p in pods] == ["reclaimed-large-pod-1"]
    (gone,) = rig.events(names.EVENT_REASON_EVICT_SUCCEEDED)
    assert gone["involvedObject"]["name"] == "reclaimed-large-pod-2"
    assert gone["type"] == "Normal"
    (event,) = rig.events(names.EVENT_REASON_EVICT_CREATED)
    assert event["involvedObject"]["name"] == "reclaimed-large-pod-2"
    assert event["involvedObject"]["kind"] == "Pod"
    message = event["message"]
    for text in (
        names.EVICTION_PLUGIN_RECLAIMED_RESOURCE,
        "sum of reclaimed_millicpu requests of reclaimed pods = 36000m > hard threshold 35000m",
        "#1 default/reclaimed-large-pod-2",
        "#2 default/reclaimed-large-pod-1",
        "overage 1000m",
    ):
        assert text in message


def test_taints_keep_others_and_follow_conditions() -> None:
    rig = Rig(EvictionConfig(condition_transition_period_s=10))
    rig.cluster.create(names.POD, reclaimed_pod("batch", "30k", "1Gi"))
    rig.publish(10_000)  # 30k > 1.5 x 10k: soft
    rig.round()
    assert rig.taint_keys(names.CUSTOM_NODE_RESOURCE) == [
        names.UNSCHEDULABLE_TAINT_KEY,
        OVERCOMMIT_KEY,
    ]
    cnr = rig.cluster.get(names.CUSTOM_NODE_RESOURCE, NODE)
    ours = [t for t in cnr["spec"]["taints"] if t["key"] == OVERCOMMIT_KEY]
    assert ours == [{"key": OVERCOMMIT_KEY, "effect": "NoSchedule", "qosLevel": "reclaimed_cores"}]
    assert rig.taint_keys(names.NODE) == ["example.com/gpu"]  # a CNR condition: Node untouched
    set_events = rig.events("ConditionSet")
    assert len(set_events) == 1 and set_events[0]["involvedObject"]["kind"] == "Node"
    rig.publish(100_000)
    for _ in range(4):
        rig.round()
    assert rig.taint_keys(names.CUSTOM_NODE_RESOURCE) == [names.UNSCHEDULABLE_TAINT_KEY]
    assert len(rig.events("ConditionCleared")) == 1


def test_records_metrics_and_file_agree(tmp_path: Any) -> None:
    rig = Rig()
    path = tmp_path / "records.jsonl"
    rig.recorder.path = path
    rig.cluster.create(names.POD, reclaimed_pod("batch", "30k", "1Gi"))
    rig.publish(1_000)
    rig.round()
    kinds = [r.kind for r in rig.recorder.records()]
    assert kinds == ["condition-set", "eviction"]
    assert [r.kind for r in read_records(path)] == kinds
    value = rig.registry.get_sample_value(
        "katalyst_eviction_victims_total",
        {"plugin": names.EVICTION_PLUGIN_RECLAIMED_RESOURCE, "reason": "reclaimed_millicpu hard"},
    )
    assert value == 1.0
    assert rig.recorder.records(pod="default/batch")[0].kind == "eviction"


def test_dry_run_executor_writes_nothing() -> None:
    rig = Rig()
    rig.executor.dry_run = True
    rig.cluster.create(names.POD, reclaimed_pod("batch", "30k", "1Gi"))
    rig.publish(1_000)
    plan, result = rig.round()
    assert plan.evictions and result.evicted == ("default/batch",)
    pod = rig.cluster.get(names.POD, "batch", "default")
    assert "deletionTimestamp" not in pod["metadata"]
    assert not rig.events() and rig.taint_keys(names.CUSTOM_NODE_RESOURCE) == [
        names.UNSCHEDULABLE_TAINT_KEY
    ]


def test_a_refused_eviction_is_recorded_and_counted() -> None:
    rig = Rig()
    rig.cluster.eviction_guard = lambda pod: "budget allows no disruption"
    rig.cluster.create(names.POD, reclaimed_pod("batch", "30k", "1Gi"))
    rig.publish(1_000)
    _, result = rig.round()
    assert result.failed and "disruption budget" in result.failed[0][1]
    assert len(rig.events(names.EVENT_REASON_EVICT_FAILED)) == 1
    assert (
        rig.registry.get_sample_value(
            "katalyst_eviction_failures_total",
            {"plugin": names.EVICTION_PLUGIN_RECLAIMED_RESOURCE, "reason": "TooManyRequests"},
        )
        == 1.0
    )


class RacingCluster(MemoryCluster):
    """Someone else adds a CNR taint between our read and our write, once."""

    raced = False

    def patch(self, kind: Any, name: str, patch: Any, *args: Any, **kw: Any) -> JSON:
        spec = patch.get("spec") if isinstance(patch, dict) else None
        if kind == names.CUSTOM_NODE_RESOURCE and spec and "taints" in spec and not self.raced:
            self.raced = True
            other = {"key": "example.com/drain", "effect": "NoSchedule", "qosLevel": "x"}
            current = self.get(kind, name)["spec"].get("taints", [])
            super().patch(kind, name, {"spec": {"taints": [*current, other]}})
        return super().patch(kind, name, patch, *args, **kw)


def test_a_concurrent_taint_writer_is_not_overwritten() -> None:
    cluster = RacingCluster(clock=VirtualClock(0))
    cluster.create(names.CUSTOM_NODE_RESOURCE, new_cnr(NODE).to_json())
    state = sync_taints(
        cluster,
        names.CUSTOM_NODE_RESOURCE,
        NODE,
        RECLAIMED_CONDITION.taints(),
        names.TAINT_PREFIX,
    )
    assert state == "patched" and cluster.raced
    keys = [t["key"] for t in cluster.get(names.CUSTOM_NODE_RESOURCE, NODE)["spec"]["taints"]]
    assert keys == ["example.com/drain", OVERCOMMIT_KEY]
