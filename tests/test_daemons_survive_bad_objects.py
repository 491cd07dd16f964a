"""Every daemon loop against a stored object it cannot read: the object is skipped and
said so (a Warning Event on it and the component's `katalyst_<component>_objects_skipped`
counter, besides a status condition or a plan warning where the component has one), the
loop does not raise, and the other objects are still handled on the same tick.

MemoryCluster, like a real API server, refuses an ill-typed Pod or Node (400); custom
resources are stored as sent (a CRD schema with x-kubernetes-preserve-unknown-fields, or a
server without the schema, lets them through), so those are the objects tried here."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from pykatalyst.agent.agent import Agent
from pykatalyst.agent.config import AgentConfig
from pykatalyst.agent.enforcer import Enforcer
from pykatalyst.agent.factory import build_agent
from pykatalyst.api import names
from pykatalyst.api.names import Kind
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.admission import AdmissionRequest
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.protocol import ApiError
from pykatalyst.controllers.backstop import BackstopConfig
from pykatalyst.runtime.controller import ControllerRunner
from pykatalyst.scheduler.extender import ExtenderService
from pykatalyst.scheduler.scheduler import Scheduler
from pykatalyst.topology.machine import CPUTopology
from pykatalyst.webhook.service import MUTATE_PODS, WebhookService
from tests.agent.inmemory_host import GIB, InMemoryHost, node_json

ILL_TYPED = ["x", 5, [1], {"targetType": 5, "nodeLabelSelectorAllowedKeyList": "x"}]
SKIPPED = "katalyst_{}_objects_skipped_total"


def _events_on(cluster: MemoryCluster, kind: Kind, name: str) -> list[dict[str, Any]]:
    return [
        e
        for e in cluster.list(names.EVENT).items
        if e["involvedObject"].get("kind") == kind.kind and e["involvedObject"]["name"] == name
    ]


def _skipped(registry: CollectorRegistry, component: str, kind: Kind, reason: str) -> float:
    value = registry.get_sample_value(
        SKIPPED.format(component), {"kind": kind.kind, "reason": reason}
    )
    return value or 0.0


def _store(cluster: MemoryCluster, kind: Kind, name: str, field: str, value: Any) -> None:
    """Store `kind/name` with `field` (spec or status) holding `value`, as a client that
    writes the status subresource would."""
    meta: dict[str, Any] = {"name": name}
    if kind.namespaced:
        meta["namespace"] = "default"
    body: dict[str, Any] = {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": meta}
    body["spec"] = value if field == "spec" else {}
    cluster.create(kind, body)
    if field == "status":
        stored = cluster.get(kind, name, meta.get("namespace"))
        stored["status"] = value
        cluster.update_status(kind, stored)


def _cluster() -> tuple[MemoryCluster, VirtualClock]:
    clock = VirtualClock(10_000)
    cluster = MemoryCluster(clock=clock)
    for node in ("n1", "n2"):
        cluster.create(
            names.NODE,
            {
                "metadata": {"name": node, "labels": {names.OVERCOMMIT_NODE_POOL_LABEL: "pool"}},
                "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
            },
        )
    return cluster, clock


_BAD_CONFIGS = [
    (kind, field, value)
    for kind in (
        names.KATALYST_CUSTOM_CONFIG,
        names.CUSTOM_NODE_CONFIG,
        names.NODE_OVERCOMMIT_CONFIG,
        names.ADMIN_QOS_CONFIGURATION,
        names.CUSTOM_NODE_RESOURCE,
    )
    for field in ("spec", "status")
    for value in ILL_TYPED
]


@pytest.mark.parametrize(
    ("kind", "field", "value"),
    _BAD_CONFIGS,
    ids=[f"{k.kind}.{f}={v!r}" for k, f, v in _BAD_CONFIGS],
)
def test_the_controllers_skip_an_unreadable_config_and_serve_the_others(
    kind: Kind, field: str, value: Any
) -> None:
    cluster, clock = _cluster()
    _store(cluster, kind, "n1" if not kind.namespaced else "bad", field, value)
    good = {
        "apiVersion": names.NODE_OVERCOMMIT_CONFIG.api_version,
        "kind": names.NODE_OVERCOMMIT_CONFIG.kind,
        "metadata": {"name": "good"},
        "spec": {"nodeOvercommitSelectorVal": "pool", "resourceOvercommitRatio": {"cpu": "2"}},
    }
    cluster.create(names.NODE_OVERCOMMIT_CONFIG, good)
    runner = ControllerRunner(
        cluster,
        BackstopConfig(),
        period_s=10,
        controllers=("backstop", "lifecycle", "overcommit", "kcc"),
    )
    for _ in range(2):
        report = runner.step(clock.now())
        assert report.error is None, report.error
        clock.advance(10)
    # the good config still selects both nodes on the same ticks
    status = cluster.get(names.NODE_OVERCOMMIT_CONFIG, "good").get("status") or {}
    assert sorted(status.get("matchedNodeList") or []) == ["n1", "n2"]


def _aqc_kcc(cluster: MemoryCluster) -> None:
    kind = names.ADMIN_QOS_CONFIGURATION
    cluster.create(
        names.KATALYST_CUSTOM_CONFIG,
        {
            "apiVersion": names.KATALYST_CUSTOM_CONFIG.api_version,
            "kind": names.KATALYST_CUSTOM_CONFIG.kind,
            "metadata": {"name": "aqc", "namespace": "default"},
            "spec": {
                "targetType": {
                    "group": kind.group,
                    "version": kind.version,
                    "resource": kind.plural,
                }
            },
        },
    )


_TOLD = [
    (names.KATALYST_CUSTOM_CONFIG, "spec", "x", "unreadable", names.EVENT_REASON_INVALID_CONFIG),
    (names.KATALYST_CUSTOM_CONFIG, "spec", {"targetType": 5}, "invalid", "InvalidConfig"),
    (
        names.CUSTOM_NODE_CONFIG,
        "status",
        {"katalystCustomConfigList": 5},
        "invalid",
        "InvalidConfig",
    ),
    (names.CUSTOM_NODE_CONFIG, "status", "x", "unreadable", "InvalidConfig"),
    (names.ADMIN_QOS_CONFIGURATION, "spec", "x", "unreadable", "InvalidConfig"),
    (names.ADMIN_QOS_CONFIGURATION, "spec", {"priority": "high"}, "invalid", "InvalidConfig"),
    (
        names.NODE_OVERCOMMIT_CONFIG,
        "spec",
        {"nodeOvercommitSelectorVal": "pool", "resourceOvercommitRatio": {"cpu": "0.5"}},
        "invalid",
        names.EVENT_REASON_INVALID_OVERCOMMIT_CONFIG,
    ),
    (names.NODE_OVERCOMMIT_CONFIG, "spec", "x", "invalid", "InvalidOvercommitConfig"),
]


@pytest.mark.parametrize(
    ("kind", "field", "value", "reason", "event_reason"),
    _TOLD,
    ids=[f"{k.kind}.{f}={v!r}" for k, f, v, _, _ in _TOLD],
)
def test_the_controller_counts_every_skip_and_tells_each_object_once(
    kind: Kind, field: str, value: Any, reason: str, event_reason: str
) -> None:
    cluster, clock = _cluster()
    _aqc_kcc(cluster)
    name = "bad" if kind.namespaced else "n1"
    _store(cluster, kind, name, field, value)
    registry = CollectorRegistry()
    runner = ControllerRunner(
        cluster,
        BackstopConfig(),
        period_s=10,
        registry=registry,
        controllers=("overcommit", "kcc"),
    )
    for _ in range(3):
        assert runner.step(clock.now()).error is None
        clock.advance(10)
    # counted on every reconcile that skipped it, for as long as it stays bad
    assert _skipped(registry, "controller", kind, reason) == 3
    (event,) = _events_on(cluster, kind, name)
    assert event["type"] == "Warning" and event["reason"] == event_reason
    assert event["count"] == 1  # told once per version of the object
    assert event["source"]["component"] == names.CONTROLLER_COMPONENT
    assert event["message"].startswith(("spec", "status", "NodeOvercommitConfig")), event


def test_a_fixed_config_stops_being_counted_and_a_new_breakage_is_told_again() -> None:
    cluster, clock = _cluster()
    _store(cluster, names.KATALYST_CUSTOM_CONFIG, "bad", "spec", "x")
    registry = CollectorRegistry()
    runner = ControllerRunner(
        cluster, BackstopConfig(), period_s=10, registry=registry, controllers=("kcc",)
    )
    kind = names.KATALYST_CUSTOM_CONFIG

    def step() -> None:
        assert runner.step(clock.now()).error is None
        clock.advance(10)

    step()
    stored = cluster.get(kind, "bad", "default")
    stored["spec"] = {"targetType": {"group": kind.group, "version": "v1alpha1", "resource": "x"}}
    cluster.update(kind, stored)
    step()
    step()
    assert _skipped(registry, "controller", kind, "unreadable") == 1
    # the new spec is refused for another reason: a second Event says so
    assert _skipped(registry, "controller", kind, "invalid") == 2
    messages = sorted(e["message"] for e in _events_on(cluster, kind, "bad"))
    assert len(messages) == 2 and any("not a served config type" in m for m in messages)


@pytest.mark.parametrize("value", ["x", 5, {"targetType": 5}])
def test_an_unreadable_kcc_is_marked_invalid_on_its_status(value: Any) -> None:
    cluster, clock = _cluster()
    _store(cluster, names.KATALYST_CUSTOM_CONFIG, "bad", "spec", value)
    runner = ControllerRunner(cluster, BackstopConfig(), period_s=10, controllers=("kcc",))
    assert runner.step(clock.now()).error is None
    kcc = cluster.get(names.KATALYST_CUSTOM_CONFIG, "bad", "default")
    (cond,) = kcc["status"]["conditions"]
    assert cond["status"] == "False" and cond["reason"] == names.KCC_REASON_VALIDATE_FAILED
    assert cond["message"].startswith(("spec", "spec.targetType"))


@pytest.mark.parametrize(
    ("kind", "field", "value"),
    [(names.CUSTOM_NODE_CONFIG, "status", v) for v in ILL_TYPED[:3]]
    + [(names.CUSTOM_NODE_CONFIG, "status", {"katalystCustomConfigList": 5})]
    + [(names.ADMIN_QOS_CONFIGURATION, "spec", v) for v in ("x", {"config": 5})],
)
def test_the_agent_tick_runs_on_with_an_unreadable_dynamic_config(
    kind: Kind, field: str, value: Any
) -> None:
    clock = VirtualClock(50_000)
    cluster = MemoryCluster(clock=clock)
    cluster.create(names.NODE, node_json("node-1"))
    if kind == names.ADMIN_QOS_CONFIGURATION:
        _store(cluster, kind, "bad", field, value)
        base = AgentConfig.model_validate({"admin_qos_config": "default/bad"})
    else:
        _store(cluster, kind, "node-1", field, value)
        base = AgentConfig()
    host = InMemoryHost(CPUTopology.synthetic(1, 4, 2, memory_per_numa=16 * GIB))
    agent = Agent("node-1", cluster, host, clock, base, Enforcer(host, None, clock))
    for _ in range(2):
        plan = agent.reconcile()
        clock.advance(60)
    assert agent.config == base  # the configuration in force stays
    assert any("unreadable" in w or "invalid" in w for w in plan.warnings), plan.warnings
    assert cluster.get(names.CUSTOM_NODE_RESOURCE, "node-1")  # the tick still published


@pytest.mark.parametrize(
    ("kind", "value", "reason"),
    [
        (names.CUSTOM_NODE_CONFIG, "x", "unreadable"),
        (names.CUSTOM_NODE_CONFIG, {"katalystCustomConfigList": 5}, "invalid"),
        (names.ADMIN_QOS_CONFIGURATION, "x", "unreadable"),
        (names.ADMIN_QOS_CONFIGURATION, {"config": 5}, "invalid"),
    ],
)
def test_the_agent_counts_an_unreadable_dynamic_config_and_tells_it_once(
    kind: Kind, value: Any, reason: str
) -> None:
    clock = VirtualClock(50_000)
    cluster = MemoryCluster(clock=clock)
    cluster.create(names.NODE, node_json("node-1"))
    aqc = kind == names.ADMIN_QOS_CONFIGURATION
    name = "bad" if aqc else "node-1"
    _store(cluster, kind, name, "spec" if aqc else "status", value)
    base = AgentConfig.model_validate({"admin_qos_config": "default/bad"} if aqc else {})
    registry = CollectorRegistry()
    host = InMemoryHost(CPUTopology.synthetic(1, 4, 2, memory_per_numa=16 * GIB))
    agent = build_agent("node-1", cluster, host, clock, base, registry=registry)
    for _ in range(3):
        agent.reconcile()
        clock.advance(60)
    assert _skipped(registry, "agent", kind, reason) == 3  # every read of it, each 15s
    (event,) = _events_on(cluster, kind, name)  # the agent's one Event on it
    assert event["type"] == "Warning" and event["reason"] == names.EVENT_REASON_INVALID_CONFIG
    assert event["source"] == {"component": names.AGENT_COMPONENT, "host": "node-1"}
    assert event["count"] == 1
    assert "config" in event["message"] or "katalystCustomConfigList" in event["message"]


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("x", "unreadable"),
        ({"targetRef": "x"}, "invalid"),
        ({"targetRef": {"kind": "Deployment", "name": ""}}, "invalid"),
    ],
)
def test_the_webhook_counts_an_unusable_spd_and_tells_it_once(value: Any, reason: str) -> None:
    cluster, clock = _cluster()
    _store(cluster, names.SERVICE_PROFILE_DESCRIPTOR, "bad", "spec", value)
    service = WebhookService(cluster)
    registry = CollectorRegistry()
    registry.register(service.skips.total)
    for _ in range(3):
        service.sync(clock.now())
        clock.advance(1)
    kind = names.SERVICE_PROFILE_DESCRIPTOR
    assert _skipped(registry, "webhook", kind, reason) == 3
    (event,) = _events_on(cluster, kind, "bad")
    assert event["reason"] == names.EVENT_REASON_INVALID_CONFIG and event["count"] == 1
    assert event["source"]["component"] == names.WEBHOOK_COMPONENT
    assert event["message"].startswith("spec"), event["message"]
    # once the SPD names its workload it is no longer skipped
    stored = cluster.get(kind, "bad", "default")
    stored["spec"] = {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "w"}}
    cluster.update(kind, stored)
    service.sync(clock.now())
    assert _skipped(registry, "webhook", kind, reason) == 3


@pytest.mark.parametrize("value", ILL_TYPED)
def test_the_scheduler_and_extender_schedule_beside_an_unreadable_cnr(value: Any) -> None:
    cluster, clock = _cluster()
    _store(cluster, names.CUSTOM_NODE_RESOURCE, "n1", "status", value)
    _store(cluster, names.CUSTOM_NODE_RESOURCE, "n2", "spec", value)
    pod = {
        "metadata": {"name": "p1", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
    }
    stored = cluster.create(names.POD, pod)
    extender = ExtenderService(Scheduler(cluster))
    result = extender.filter({"Pod": stored, "NodeNames": ["n1", "n2"]}, clock.now())
    assert not result["Error"] and result["NodeNames"]
    scores = extender.prioritize({"Pod": stored, "NodeNames": ["n1", "n2"]}, clock.now())
    assert {s["Host"] for s in scores} == {"n1", "n2"}
    outcome = Scheduler(cluster).schedule_one(clock.now())
    assert outcome is not None and outcome.node in ("n1", "n2")


@pytest.mark.parametrize(
    ("field", "value"),
    [("spec", "x"), ("spec", {"selector": 5}), ("status", {"currentHealthy": "x"})],
)
def test_an_unreadable_disruption_budget_is_refused_and_evictions_are_answered(
    field: str, value: Any
) -> None:
    # The real API server refuses such a budget when it is written (400 naming the field),
    # so no eviction ever meets one; the eviction subresource, which the agent's and the
    # backstop's evictions call, answers as if there were none.
    cluster, _ = _cluster()
    body: dict[str, Any] = {
        "apiVersion": names.POD_DISRUPTION_BUDGET.api_version,
        "kind": names.POD_DISRUPTION_BUDGET.kind,
        "metadata": {"name": "pdb", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "a"}}},
    }
    body[field] = value
    with pytest.raises(ApiError) as err:
        cluster.create(names.POD_DISRUPTION_BUDGET, body)
    assert err.value.code == 400 and "cannot be handled as a PodDisruptionBudget" in str(err.value)
    pod = {
        "metadata": {"name": "p1", "namespace": "default", "labels": {"app": "a"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
    }
    cluster.create(names.POD, pod)
    cluster.evict("default", "p1")
    assert cluster.get(names.POD, "p1", "default")["metadata"].get("deletionTimestamp")


@pytest.mark.parametrize("value", ["x", 5, {"targetRef": "x"}])
def test_the_webhook_syncs_and_mutates_beside_an_unreadable_spd(value: Any) -> None:
    cluster, clock = _cluster()
    _store(cluster, names.SERVICE_PROFILE_DESCRIPTOR, "bad", "spec", value)
    good = {
        "apiVersion": names.SERVICE_PROFILE_DESCRIPTOR.api_version,
        "kind": names.SERVICE_PROFILE_DESCRIPTOR.kind,
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
    }
    cluster.create(names.SERVICE_PROFILE_DESCRIPTOR, good)
    service = WebhookService(cluster)
    service.sync(clock.now())
    assert service.sync_error is None
    pod = {
        "metadata": {
            "name": "web-abc",
            "namespace": "default",
            "ownerReferences": [{"kind": "Deployment", "name": "web"}],
        },
        "spec": {"containers": [{"name": "c"}]},
    }
    mutator = next(r.handler for r in service.routes if r.path == MUTATE_PODS)
    request = AdmissionRequest("u", names.POD, "CREATE", "", "default", pod, None)
    response = mutator(request)
    assert any(op["value"] == {names.SPD_NAME_ANNOTATION: "web"} for op in response.patch or [])
