"""Every daemon loop against a stored object it cannot read: the object is skipped and
said so (a status condition, an Event or a warning), the loop does not raise, and the
other objects are still handled on the same tick.

MemoryCluster, like a real API server, refuses an ill-typed Pod or Node (400); custom
resources are stored as sent (a CRD schema with x-kubernetes-preserve-unknown-fields, or a
server without the schema, lets them through), so those are the objects tried here."""

from __future__ import annotations

from typing import Any

import pytest

from pykatalyst.agent.agent import Agent
from pykatalyst.agent.config import AgentConfig
from pykatalyst.agent.enforcer import Enforcer
from pykatalyst.api import names
from pykatalyst.api.names import Kind
from pykatalyst.cluster.admission import AdmissionRequest
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.memory import MemoryCluster
from pykatalyst.cluster.protocol import ApiError
from pykatalyst.controllers.backstop import BackstopConfig
from pykatalyst.runtime.controller import ControllerRunner
from pykatalyst.scheduler.extender import ExtenderService
from pykatalyst.scheduler.scheduler import Scheduler
from pykatalyst.topology.machine import CPUTopology
from pykatalyst.webhook.service import MUTATE_PODS, WebhookService
from tests.agent.inmemory_host import GIB, InMemoryHost, node_json

ILL_TYPED = ["x", 5, [1], {"targetType": 5, "nodeLabelSelectorAllowedKeyList": "x"}]


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
def test_an_eviction_beside_an_unreadable_disruption_budget_is_answered(
    field: str, value: Any
) -> None:
    # the eviction subresource, which the agent's and the backstop's evictions call
    cluster, _ = _cluster()
    body: dict[str, Any] = {
        "apiVersion": names.POD_DISRUPTION_BUDGET.api_version,
        "kind": names.POD_DISRUPTION_BUDGET.kind,
        "metadata": {"name": "pdb", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "a"}}},
    }
    body[field] = value
    cluster.create(names.POD_DISRUPTION_BUDGET, body)
    pod = {
        "metadata": {"name": "p1", "namespace": "default", "labels": {"app": "a"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
    }
    cluster.create(names.POD, pod)
    try:
        cluster.evict("default", "p1")
    except ApiError as exc:
        assert exc.code == 429 and "disruption budget" in exc.message
    else:
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
