"""The vpa controller on MemoryCluster: a KVPA's recommendation (from its VPARec) reaches its
pods as Katalyst's annotation and an in-place resize; the kubelet's answers (simulated here
by writing the pod status as the kubelet does) drive completion, Deferred/Infeasible
fallbacks and evictions."""

from __future__ import annotations

import json
from typing import Any

from prometheus_client import CollectorRegistry

from pykatalyst.api import names, vpa
from pykatalyst.api.timefmt import rfc3339
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.protocol import JSON
from pykatalyst.controllers.resize import ResizeConfig
from pykatalyst.controllers.vertical import VPAController

NS = "default"
KVPA = names.KATALYST_VERTICAL_POD_AUTOSCALER


def res(cpu_req: str, cpu_lim: str, mem_req: str = "64Mi", mem_lim: str = "128Mi") -> JSON:
    return {
        "requests": {"cpu": cpu_req, "memory": mem_req},
        "limits": {"cpu": cpu_lim, "memory": mem_lim},
    }


class World:
    def __init__(self, *, strategy: str = "Inplace", **spec: Any) -> None:
        self.clock = VirtualClock(1000)
        self.mc = MemoryCluster(clock=self.clock)
        self.registry = CollectorRegistry()
        self.ctl = VPAController(
            self.mc, ResizeConfig(deferred_timeout_s=300), registry=self.registry
        )
        self.mc.create(
            names.DEPLOYMENT,
            {
                "metadata": {"name": "web", "namespace": NS},
                "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {}},
            },
        )
        self.strategy = strategy
        self.spec = spec

    def pod(self, name: str, resources: JSON | None = None, **extra: Any) -> JSON:
        body: JSON = {
            "metadata": {"name": name, "namespace": NS, "labels": {"app": "web"}},
            "spec": {
                "nodeName": "n1",
                "containers": [
                    {"name": "c", "image": "i", "resources": resources or res("200m", "400m")}
                ],
            },
        }
        body["spec"].update(extra)
        made = self.mc.create(names.POD, body)
        self.kubelet(name, running=True)
        return made

    def kvpa(self, policies: list[JSON] | None = None, **meta: Any) -> JSON:
        update = {"podUpdatingStrategy": self.strategy, **self.spec.get("update", {})}
        body = {
            "metadata": {"name": "web", "namespace": NS, **meta},
            "spec": {
                "targetRef": {"kind": "Deployment", "name": "web", "apiVersion": "apps/v1"},
                "updatePolicy": update,
                "resourcePolicy": {
                    "algorithmPolicy": {"recommender": "external"},
                    "containerPolicies": policies
                    if policies is not None
                    else [{"containerName": "c", "controlledResources": ["cpu", "memory"]}],
                },
            },
        }
        return self.mc.create(KVPA, body)

    def rec(self, kvpa: JSON, containers: list[JSON] | None = None, pods: Any = None) -> JSON:
        spec: JSON = {
            "containerRecommendations": containers
            if containers is not None
            else [
                {
                    "containerName": "c",
                    "requests": {"resources": {"cpu": "300m"}},
                    "limits": {"resources": {"cpu": "600m"}},
                }
            ]
        }
        if pods is not None:
            spec["podRecommendations"] = pods
        owner = {
            "apiVersion": KVPA.api_version,
            "kind": KVPA.kind,
            "name": kvpa["metadata"]["name"],
            "uid": kvpa["metadata"]["uid"],
        }
        return self.mc.create(
            names.VPA_RECOMMENDATION,
            {
                "metadata": {"name": "web", "namespace": NS, "ownerReferences": [owner]},
                "spec": spec,
            },
        )

    def kubelet(self, name: str, *, running: bool = False, condition: JSON | None = None) -> None:
        """What the kubelet writes: phase, and either the container's resources as the spec
        has them (the resize done) or a resize condition."""
        pod = self.mc.get(names.POD, name, NS)
        status = dict(pod.get("status") or {})
        status["phase"] = "Running"
        c = pod["spec"]["containers"][0]
        if condition is None:
            status["containerStatuses"] = [
                {"name": c["name"], "restartCount": 0, "resources": c["resources"]}
            ]
            status["conditions"] = []
        else:
            status["conditions"] = [{"status": "True", **condition}]
        pod["status"] = status
        self.mc.update_status(names.POD, pod)

    def step(self, dt: float = 10.0) -> Any:
        self.clock.advance(dt)
        return self.ctl.run(self.clock.now())

    def pod_now(self, name: str) -> JSON:
        return self.mc.get(names.POD, name, NS)

    def kvpa_now(self) -> JSON:
        return self.mc.get(KVPA, "web", NS)

    def condition(self, ctype: str) -> JSON:
        for c in self.kvpa_now()["status"]["conditions"]:
            if c["type"] == ctype:
                return dict(c)
        raise AssertionError(f"no condition {ctype}")

    def events(self, reason: str) -> list[JSON]:
        return [e for e in self.mc.list(names.EVENT, NS).items if e["reason"] == reason]

    def metric(self, outcome: str) -> float:
        total = 0.0
        for m in self.registry.collect():
            for s in m.samples:
                if s.name == "katalyst_vpa_resizes_total" and s.labels["outcome"] == outcome:
                    total += s.value
        return total


def _cpu(pod: JSON) -> tuple[str, str]:
    r = pod["spec"]["containers"][0]["resources"]
    return r["requests"]["cpu"], r["limits"]["cpu"]


def test_inplace_resizes_then_reports_applied_from_the_kubelet() -> None:
    w = World()
    w.pod("web-1")
    w.rec(w.kvpa())
    w.step()
    pod = w.pod_now("web-1")
    assert _cpu(pod) == ("300m", "600m")
    ann = json.loads(pod["metadata"]["annotations"][names.POD_RESIZE_RESOURCES_ANNOTATION])
    assert ann == {"c": {"requests": {"cpu": "300m"}, "limits": {"cpu": "600m"}}}
    # the spec changed but the kubelet has not reported: not applied yet
    applied = w.condition(vpa.COND_RECOMMENDATION_APPLIED)
    assert applied["status"] == "False" and "failed to update 1 pods" in applied["message"]
    w.kubelet("web-1")
    w.step()
    assert w.condition(vpa.COND_RECOMMENDATION_APPLIED)["status"] == "True"
    assert w.condition(vpa.COND_RECOMMENDATION_UPDATED)["reason"] == vpa.REASON_UPDATED
    assert w.condition(vpa.COND_NO_PODS_MATCHED)["reason"] == vpa.REASON_PODS_MATCHED
    assert w.events("ResizeRequested") and w.events("Resized")
    assert w.metric("requested") == 1 and w.metric("completed") == 1
    # the workload names its KVPA, the KVPA its VPARec
    dep = w.mc.get(names.DEPLOYMENT, "web", NS)
    assert dep["metadata"]["annotations"][names.VPA_NAME_ANNOTATION] == "web"
    assert w.kvpa_now()["metadata"]["annotations"][names.VPA_REC_NAME_ANNOTATION] == "web"


def test_status_is_cropped_to_the_policy_and_mirrored_to_the_vparec() -> None:
    w = World()
    w.pod("web-1")
    policy = {
        "containerName": "c",
        "controlledResources": ["cpu"],
        "controlledValues": "RequestsOnly",
        "minAllowed": {"cpu": "250m"},
        "maxAllowed": {"cpu": "280m"},
    }
    w.rec(w.kvpa([policy]))
    w.step()
    entry = w.kvpa_now()["status"]["containerResources"][0]
    assert "limits" not in entry  # RequestsOnly
    assert entry["requests"]["uncappedTarget"] == {"cpu": "300m"}
    assert entry["requests"]["target"] == {"cpu": "280m"}
    assert entry["requests"]["upperBound"] == {"cpu": "280m"}
    assert _cpu(w.pod_now("web-1")) == ("280m", "400m")
    rec = w.mc.get(names.VPA_RECOMMENDATION, "web", NS)["status"]
    assert rec["containerRecommendations"][0]["requests"]["resources"] == {"cpu": "280m"}
    assert rec["conditions"][-1]["type"] == vpa.COND_UPDATED_TO_VPA


def test_pod_level_recommendation_wins_over_container_level() -> None:
    w = World()
    w.pod("web-1")
    w.pod("web-2")
    pods = [
        {
            "podName": "web-2",
            "containerRecommendations": [
                {"containerName": "c", "requests": {"resources": {"cpu": "350m"}}}
            ],
        }
    ]
    w.rec(w.kvpa(), pods=pods)
    w.step()
    assert _cpu(w.pod_now("web-1")) == ("300m", "600m")
    assert _cpu(w.pod_now("web-2")) == ("350m", "400m")


def test_off_keeps_the_recommendation_in_the_status_only() -> None:
    w = World(strategy="Off")
    w.pod("web-1")
    w.rec(w.kvpa())
    w.step()
    pod = w.pod_now("web-1")
    assert _cpu(pod) == ("200m", "400m")
    assert names.POD_RESIZE_RESOURCES_ANNOTATION not in (pod["metadata"].get("annotations") or {})
    assert w.kvpa_now()["status"]["containerResources"][0]["requests"]["target"] == {"cpu": "300m"}


def test_recreate_is_refused_as_katalyst_does() -> None:
    w = World(strategy="Recreate")
    w.pod("web-1")
    w.rec(w.kvpa())
    w.step()
    cond = w.condition(vpa.COND_RECOMMENDATION_UPDATED)
    assert (cond["status"], cond["reason"]) == ("False", vpa.REASON_ILLEGAL)
    assert "PodUpdatingStrategyRecreate" in cond["message"]
    assert _cpu(w.pod_now("web-1")) == ("200m", "400m")


def test_for_fresh_pod_leaves_the_older_pods_alone() -> None:
    w = World(update={"podMatchingStrategy": "PodMatchingStrategyForFreshPod"})
    w.pod("old")
    w.clock.advance(5)
    kvpa = w.kvpa()
    w.clock.advance(5)
    w.pod("new")
    w.rec(kvpa)
    w.step()
    assert _cpu(w.pod_now("old")) == ("200m", "400m")
    assert _cpu(w.pod_now("new")) == ("300m", "600m")


def test_best_effort_evicts_an_infeasible_resize_within_the_budget() -> None:
    w = World(strategy="BestEffortInplace")
    w.pod("web-1")
    w.rec(w.kvpa())
    w.step()
    w.kubelet(
        "web-1",
        condition={
            "type": "PodResizePending",
            "reason": "Infeasible",
            "message": "Node didn't have enough capacity: cpu",
        },
    )
    w.step()
    pod = w.pod_now("web-1")
    assert pod["metadata"].get("deletionTimestamp"), "the pod was evicted"
    assert w.events("ResizeFallbackEviction") and w.metric("evicted") == 1
    (ev,) = [e for e in w.events("ResizeFallbackEviction") if e["involvedObject"]["kind"] == "Pod"]
    assert "Infeasible" in ev["message"]


def test_inplace_never_evicts_and_says_why() -> None:
    w = World(strategy="Inplace")
    w.pod("web-1")
    w.rec(w.kvpa())
    w.step()
    w.kubelet(
        "web-1",
        condition={"type": "PodResizePending", "reason": "Infeasible", "message": "no room"},
    )
    w.step()
    assert not w.pod_now("web-1")["metadata"].get("deletionTimestamp")
    msg = w.condition(vpa.COND_RECOMMENDATION_APPLIED)["message"]
    assert "Infeasible" in msg and "never evicts" in msg


def test_deferred_falls_back_only_past_the_timeout_and_a_budget_can_block_it() -> None:
    w = World(strategy="BestEffortInplace")
    w.pod("web-1")
    w.mc.create(
        names.POD_DISRUPTION_BUDGET,
        {
            "metadata": {"name": "web", "namespace": NS},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": 0},
            "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1},
        },
    )
    w.rec(w.kvpa())
    w.step()
    w.kubelet(
        "web-1", condition={"type": "PodResizePending", "reason": "Deferred", "message": "waiting"}
    )
    w.step(10)
    w.step(200)
    assert not w.events("ResizeEvictionBlocked")  # 200 s < 300 s: still waiting
    w.step(120)
    assert w.events("ResizeEvictionBlocked"), "the budget refused the eviction"
    assert not w.pod_now("web-1")["metadata"].get("deletionTimestamp")


def test_memory_limit_decrease_is_not_tried_in_place() -> None:
    w = World(strategy="BestEffortInplace")
    w.pod("web-1")
    recs = [{"containerName": "c", "limits": {"resources": {"memory": "100Mi"}}}]
    w.rec(w.kvpa(), containers=recs)
    w.step()
    assert w.pod_now("web-1")["metadata"].get("deletionTimestamp")
    (ev,) = [e for e in w.events("ResizeFallbackEviction") if e["involvedObject"]["kind"] == "Pod"]
    assert "memory limit" in ev["message"]


def test_static_cpu_pinned_pods_are_not_resized_in_place() -> None:
    w = World(strategy="Inplace")
    w.mc.create(
        names.CUSTOM_NODE_RESOURCE,
        {
            "metadata": {
                "name": "n1",
                "annotations": {names.CNR_OVERCOMMIT_CPU_MANAGER_ANNOTATION: "static"},
            }
        },
    )
    w.pod("web-1", res("1", "1", "64Mi", "64Mi"))
    recs = [
        {
            "containerName": "c",
            "requests": {"resources": {"cpu": "2"}},
            "limits": {"resources": {"cpu": "2"}},
        }
    ]
    w.rec(w.kvpa(), containers=recs)
    w.step()
    assert _cpu(w.pod_now("web-1")) == ("1", "1")
    assert "static cpu manager" in w.condition(vpa.COND_RECOMMENDATION_APPLIED)["message"]
    assert w.events("ResizeRefused")
    # and `katalyst explain pod` gives the same reason, read from the node's CNR
    from pykatalyst.cli.explain_pod import explain_pod

    why = explain_pod(w.mc, NS, "web-1", w.clock.now())["vertical"]["why"]
    assert why.startswith("refused") and "static cpu manager" in why, why


def test_a_qos_class_change_is_refused() -> None:
    w = World()
    w.pod("web-1", res("1", "1", "64Mi", "64Mi"))  # Guaranteed
    w.rec(w.kvpa())  # 300m / 600m would make it Burstable
    w.step()
    assert _cpu(w.pod_now("web-1")) == ("1", "1")
    assert "qos changed" in w.condition(vpa.COND_RECOMMENDATION_APPLIED)["message"]


def test_a_malformed_kvpa_gets_a_condition_and_an_event_naming_the_field() -> None:
    w = World()
    w.pod("web-1")
    policy = {"containerName": "c", "minAllowed": {"cpu": "2"}, "maxAllowed": {"cpu": "1"}}
    w.rec(w.kvpa([policy]))
    w.step()
    cond = w.condition(vpa.COND_RECOMMENDATION_UPDATED)
    assert cond["reason"] == vpa.REASON_ILLEGAL
    assert "spec.resourcePolicy.containerPolicies[0].minAllowed.cpu" in cond["message"]
    assert w.events("InvalidKVPA")
    assert _cpu(w.pod_now("web-1")) == ("200m", "400m")  # nothing half-applied


def test_missing_workload_and_no_pods_are_conditions() -> None:
    w = World()
    w.kvpa()
    w.step()
    cond = w.condition(vpa.COND_NO_PODS_MATCHED)
    assert cond["status"] == "True"
    assert cond["message"] == "No pods match this VPA object, label selector: app=web"
    w.mc.delete(names.DEPLOYMENT, "web", NS)
    w.step()
    cond = w.condition(vpa.COND_NO_PODS_MATCHED)
    assert cond["status"] == "True" and "TargetRef workload not found" in cond["message"]


def test_retention_policy_retain_owns_the_kvpa_by_its_workload() -> None:
    w = World()
    w.kvpa(annotations={names.VPA_RETENTION_POLICY_ANNOTATION: "retain"})
    w.step()
    (ref,) = w.kvpa_now()["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["name"]) == ("Deployment", "web")


def test_avg_load_to_cpu_request_writes_the_vparec() -> None:
    w = World()
    w.pod("web-1")
    body = w.kvpa()
    body["spec"]["resourcePolicy"]["algorithmPolicy"] = {"recommender": "AvgLoadToCpuRequest"}
    w.mc.update(KVPA, body)
    w.mc.create(
        names.SERVICE_PROFILE_DESCRIPTOR,
        {
            "metadata": {"name": "web", "namespace": NS},
            "spec": {"targetRef": {"kind": "Deployment", "name": "web"}},
            "status": {},
        },
    )
    spd = w.mc.get(names.SERVICE_PROFILE_DESCRIPTOR, "web", NS)
    items = [
        {"window": "1m", "containers": [{"name": "c", "usage": {"pod_cpu_load_1min": "1"}}]},
        {"window": "3m", "containers": [{"name": "c", "usage": {"pod_cpu_load_1min": "200m"}}]},
    ]
    spd["status"] = {"aggMetrics": [{"aggregator": "avg", "items": items}]}
    w.mc.update_status(names.SERVICE_PROFILE_DESCRIPTOR, spd)
    w.step()
    rec = w.mc.get(names.VPA_RECOMMENDATION, "web", NS)
    # (1·60 + 0.2·180) / 240 = 0.4
    assert rec["spec"]["containerRecommendations"][0]["requests"]["resources"] == {"cpu": "400m"}
    w.step()
    w.step()
    assert _cpu(w.pod_now("web-1"))[0] == "400m"


def test_a_vparec_that_cannot_be_read_changes_nothing() -> None:
    w = World()
    w.pod("web-1")
    w.rec(w.kvpa(), containers=[{"containerName": "c", "requests": {"resources": {"cpu": "lots"}}}])
    w.step()
    rec = w.mc.get(names.VPA_RECOMMENDATION, "web", NS)["status"]
    (cond,) = [c for c in rec["conditions"] if c["type"] == vpa.COND_UPDATED_TO_VPA]
    assert cond["status"] == "False" and "spec.containerRecommendations[0]" in cond["message"]
    assert _cpu(w.pod_now("web-1")) == ("200m", "400m")


def test_timestamps_are_rfc3339() -> None:
    w = World()
    w.kvpa()
    w.step()
    assert w.condition(vpa.COND_NO_PODS_MATCHED)["lastTransitionTime"] == rfc3339(1010)


def test_explain_pod_shows_the_recommendation_and_why() -> None:
    from pykatalyst.cli.explain_pod import explain_pod

    w = World(strategy="Inplace")
    w.pod("web-1")
    w.rec(w.kvpa())
    w.step()
    w.kubelet(
        "web-1",
        condition={"type": "PodResizePending", "reason": "Infeasible", "message": "no room"},
    )
    w.step()
    report = explain_pod(w.mc, NS, "web-1", w.clock.now())
    v = report["vertical"]
    assert v["kvpa"] == "default/web" and v["strategy"] == "Inplace"
    assert v["targets"]["c"]["requests"] == {"cpu": "300m"}
    assert v["source"]["c"] == "status.containerResources"
    assert v["why"].startswith("refused: resize Infeasible: no room")
    assert any("PodResizePending/Infeasible" in c for c in v["conditions"])
    assert v["last_event"]["reason"] == "ResizeRefused"


def test_a_settled_kvpa_is_not_written_again() -> None:
    w = World()
    w.pod("web-1")
    w.rec(w.kvpa())
    w.step()
    w.kubelet("web-1")
    w.step()
    w.step()
    rv = w.kvpa_now()["metadata"]["resourceVersion"]
    _, result = w.step()
    assert not [d for d in result.done if d.startswith("status")], result.done
    assert w.kvpa_now()["metadata"]["resourceVersion"] == rv
