"""The ihpa controller: the HPA `ihpa-<name>` an IHPA stands for, Preview and Auto, the
VirtualWorkload, the SPD indicator, status, and bad input."""

from __future__ import annotations

import calendar
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.api import names
from pykatalyst.api.quantity import Quantity
from pykatalyst.api.timefmt import rfc3339
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.controllers import ihpaspec
from pykatalyst.controllers.cronbounds import CronMode
from pykatalyst.controllers.ihpa import IHPAConfig, IHPAController

HPA, VW, SPD = (
    names.HORIZONTAL_POD_AUTOSCALER,
    names.VIRTUAL_WORKLOAD,
    names.SERVICE_PROFILE_DESCRIPTOR,
)
IHPA, DEPLOY = names.INTELLIGENT_HPA, names.DEPLOYMENT
NOW = float(calendar.timegm((2026, 12, 2, 10, 0, 30, 0, 0, 0)))  # a Wednesday


def deployment(name: str = "web", cpu: str = "500m", replicas: int = 3) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {"name": "a", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}},
                        {"name": "b", "resources": {"requests": {"cpu": cpu}}},
                    ]
                },
            },
        },
        "status": {"replicas": replicas},
    }


def ihpa(
    name: str = "web-ihpa",
    strategy: str | None = None,
    metrics: list[dict[str, Any]] | None = None,
    **auto: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "autoscaler": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 1,
            "maxReplicas": 10,
            "metrics": metrics
            if metrics is not None
            else [
                {
                    "metric": {
                        "type": "Resource",
                        "resource": {
                            "name": "cpu",
                            "target": {"type": "Utilization", "averageUtilization": 50},
                        },
                    }
                },
                {"customMetric": {"identify": "cpu_utilization", "value": "0"}},
                {"customMetric": {"identify": "qps", "query": "sum(rate(x[1m]))", "value": "100"}},
            ],
            **auto,
        },
    }
    if strategy:
        spec["scaleStrategy"] = strategy
    return {"metadata": {"name": name, "namespace": "default"}, "spec": spec}


def cluster_with(*objs: tuple[names.Kind, dict[str, Any]]) -> MemoryCluster:
    c = MemoryCluster(clock=VirtualClock(NOW))
    for kind, obj in objs:
        made = c.create(kind, obj, "default")
        if "status" in obj:
            c.patch(
                kind,
                made["metadata"]["name"],
                {"status": obj["status"]},
                "default",
                subresource="status",
            )
    return c


def test_preview_makes_an_owned_hpa_on_the_virtual_workload_with_katalysts_metrics() -> None:
    c = cluster_with((DEPLOY, deployment()), (IHPA, ihpa()))
    ctl = IHPAController(c)
    _plan, result = ctl.run(NOW)
    assert not result.failed, result.failed
    hpa = c.get(HPA, "ihpa-web-ihpa", "default")
    owner = hpa["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("IntelligentHorizontalPodAutoscaler", "web-ihpa")
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "autoscaling.katalyst.kubewharf.io/v1alpha2",
        "kind": "VirtualWorkload",
        "name": "web-ihpa",
    }
    native, cpu, qps = hpa["spec"]["metrics"]
    assert native["type"] == "Resource"
    assert cpu["external"]["metric"] == {
        "name": "spd_agg_metrics",
        "selector": {
            "matchLabels": {
                "metric.katalyst.kubewharf.io/spd-name": "web",
                "metric.katalyst.kubewharf.io/spd-resource-name": "cpu_utilization",
                "metric.katalyst.kubewharf.io/spd-container-name": "ihpa-predict",
                "metric.katalyst.kubewharf.io/spd-scope-name": "ResourcePortraitIndicatorPlugin",
            }
        },
    }
    # value 0: Σ template cpu requests (1000m) × 50% = 500m
    assert cpu["external"]["target"] == {"type": "AverageValue", "averageValue": "500m"}
    assert qps["external"]["target"]["averageValue"] == "100"
    # the workload is untouched but for the SPD annotation
    dep = c.get(DEPLOY, "web", "default")
    assert dep["spec"]["replicas"] == 3
    assert dep["metadata"]["annotations"][names.SPD_ENABLE_ANNOTATION] == "true"
    vw = c.get(VW, "web-ihpa", "default")
    assert vw["spec"]["replicas"] == 3
    assert vw["status"] == {"replicas": 3, "selector": "app=web"}
    # once the SPD exists the status is written; then a period with nothing new writes nothing
    ctl.run(NOW + 30)
    assert ctl.run(NOW + 60)[0].actions == ()


def test_auto_targets_the_workload_and_behavior_passes_through() -> None:
    behavior = {"scaleDown": {"stabilizationWindowSeconds": 60}}
    c = cluster_with((DEPLOY, deployment()), (IHPA, ihpa(strategy="Auto", behavior=behavior)))
    IHPAController(c).run(NOW)
    spec = c.get(HPA, "ihpa-web-ihpa", "default")["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}
    assert spec["behavior"] == behavior
    assert (spec["minReplicas"], spec["maxReplicas"]) == (1, 10)


def test_switching_preview_to_auto_rewrites_the_hpa_target() -> None:
    c = cluster_with((DEPLOY, deployment()), (IHPA, ihpa()))
    ctl = IHPAController(c)
    ctl.run(NOW)
    c.patch(IHPA, "web-ihpa", {"spec": {"scaleStrategy": "Auto"}}, "default")
    ctl.run(NOW + 30)
    assert c.get(HPA, "ihpa-web-ihpa", "default")["spec"]["scaleTargetRef"]["kind"] == "Deployment"


def test_the_virtual_workload_follows_the_target_as_katalyst_syncs_it() -> None:
    c = cluster_with((DEPLOY, deployment()), (IHPA, ihpa()))
    ctl = IHPAController(c)
    ctl.run(NOW)
    # the HPA scales the VirtualWorkload (through its scale subresource) to 7
    c.patch(VW, "web-ihpa", {"spec": {"replicas": 7}}, "default")
    ctl.run(NOW + 30)
    vw = c.get(VW, "web-ihpa", "default")
    # status shows what the HPA asked for; spec goes back to the real workload's count
    assert vw["status"]["replicas"] == 7
    assert vw["spec"]["replicas"] == 3
    assert c.get(DEPLOY, "web", "default")["spec"]["replicas"] == 3


def test_the_spd_carries_the_resource_portrait_config_with_katalyst_defaults() -> None:
    c = cluster_with((DEPLOY, deployment()), (IHPA, ihpa()))
    IHPAController(c).run(NOW)
    spd = c.get(SPD, "web", "default")
    assert spd["spec"]["targetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "web",
    }
    (ind,) = spd["spec"]["extendedIndicator"]
    assert ind["name"] == "ResourcePortrait"
    (cfg,) = ind["indicators"]["configs"]
    assert cfg["source"] == "ihpa"
    assert cfg["metrics"] == ["cpu_utilization"]
    assert cfg["customMetrics"] == {"qps": "sum(rate(x[1m]))"}
    algo = cfg["algorithmConfig"]
    assert (algo["method"], algo["resyncPeriod"]) == ("predict", 3600)
    assert algo["timeWindow"] == {
        "input": 60,
        "historySteps": 10080,
        "aggregator": "avg",
        "output": 1,
        "predictionSteps": 120,
    }


def test_an_existing_spds_other_indicators_are_kept() -> None:
    other = {"name": "ReclaimResource", "indicators": {"disableReclaimLevel": "Poor"}}
    spd = {
        "metadata": {"name": "web"},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "extendedIndicator": [other],
        },
    }
    c = cluster_with((DEPLOY, deployment()), (SPD, spd), (IHPA, ihpa()))
    IHPAController(c).run(NOW)
    got = c.get(SPD, "web", "default")["spec"]["extendedIndicator"]
    assert [e["name"] for e in got] == ["ReclaimResource", "ResourcePortrait"]


def portrait_spd(points: list[tuple[float, dict[str, str]]]) -> dict[str, Any]:
    items = [
        {
            "timestamp": rfc3339(t),
            "window": "1m0s",
            "containers": [{"name": "ihpa-predict", "usage": u}],
        }
        for t, u in points
    ]
    return {
        "metadata": {"name": "web"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
        "status": {
            "aggMetrics": [
                {"aggregator": "avg", "scope": "ResourcePortraitIndicatorPlugin", "items": items}
            ]
        },
    }


def test_status_takes_the_hpas_and_desired_replicas_from_the_latest_past_point() -> None:
    spd = portrait_spd(
        [
            (NOW - 120, {"cpu_utilization": "1", "qps": "100"}),
            (NOW - 60, {"cpu_utilization": "2600m", "qps": "300"}),  # 2.6/0.5 -> 6; 300/100 -> 3
            (NOW + 60, {"cpu_utilization": "9", "qps": "900"}),  # the future is not used
        ]
    )
    hpa_status = {"currentReplicas": 3, "desiredReplicas": 3, "lastScaleTime": rfc3339(NOW - 600)}
    c = cluster_with((DEPLOY, deployment()), (SPD, spd), (IHPA, ihpa()))
    ctl = IHPAController(c)
    ctl.run(NOW)
    c.patch(HPA, "ihpa-web-ihpa", {"status": hpa_status}, "default", subresource="status")
    ctl.run(NOW + 1)
    status = c.get(IHPA, "web-ihpa", "default")["status"]
    assert status["desiredReplicas"] == 6
    assert status["currentReplicas"] == 3
    assert status["lastScaleTime"] == rfc3339(NOW - 600)


def test_a_missing_target_is_an_event_and_the_hpa_keeps_its_last_target() -> None:
    c = cluster_with((DEPLOY, deployment()), (IHPA, ihpa(strategy="Auto")))
    ctl = IHPAController(c)
    ctl.run(NOW)
    before = c.get(HPA, "ihpa-web-ihpa", "default")
    c.delete(DEPLOY, "web", "default")
    c.patch(IHPA, "web-ihpa", {"spec": {"autoscaler": {"maxReplicas": 20}}}, "default")
    _plan, _result = ctl.run(NOW + 30)
    assert c.get(HPA, "ihpa-web-ihpa", "default")["spec"] == before["spec"]
    (event,) = [
        e for e in c.list(names.EVENT, "default").items if e["reason"] == "FailedGetScaleTarget"
    ]
    assert "spec.autoscaler.scaleTargetRef" in event["message"]
    assert event["involvedObject"]["name"] == "web-ihpa"


def test_invalid_fields_are_named_and_change_nothing() -> None:
    c = cluster_with((DEPLOY, deployment()), (IHPA, ihpa(strategy="Auto")))
    ctl = IHPAController(c)
    ctl.run(NOW)
    before = c.get(HPA, "ihpa-web-ihpa", "default")["spec"]
    for patch, field in (
        ({"spec": {"autoscaler": {"maxReplicas": 0}}}, "spec.autoscaler.maxReplicas"),
        ({"spec": {"scaleStrategy": "Sometimes"}}, "spec.scaleStrategy"),
        ({"spec": {"autoscaler": {"scaleTargetRef": {"kind": "DaemonSet"}}}}, "scaleTargetRef"),
    ):
        fresh = ihpa(strategy="Auto")
        c.update(IHPA, {**c.get(IHPA, "web-ihpa", "default"), "spec": fresh["spec"]})
        c.patch(IHPA, "web-ihpa", patch, "default")
        plan, _ = ctl.run(NOW + 30)
        assert any(field in p.message for p in plan.problems), (field, plan.problems)
        assert c.get(HPA, "ihpa-web-ihpa", "default")["spec"] == before


def test_an_invalid_cron_is_reported_and_skipped_the_rest_applies() -> None:
    bounds = [
        {
            "bounds": [
                {"cronTab": "every morning", "minReplicas": 5},
                {"cronTab": "* * * * *", "maxReplicas": 8},
            ]
        }
    ]
    obj = ihpa(strategy="Auto")
    obj["spec"]["timeBounds"] = bounds
    c = cluster_with((DEPLOY, deployment()), (IHPA, obj))
    plan, _ = IHPAController(c).run(NOW)
    assert [p.reason for p in plan.problems] == ["InvalidCronTab"]
    assert "spec.timeBounds[0].bounds[0].cronTab" in plan.problems[0].message
    spec = c.get(HPA, "ihpa-web-ihpa", "default")["spec"]
    assert (spec["minReplicas"], spec["maxReplicas"]) == (1, 8)


def test_cron_modes_differ_on_a_single_minute_cron() -> None:
    obj = ihpa(strategy="Auto")
    obj["spec"]["timeBounds"] = [{"bounds": [{"cronTab": "0 8 * * *", "minReplicas": 5}]}]
    d = deployment()["spec"]["template"]
    at_8 = float(calendar.timegm((2026, 12, 2, 8, 0, 10, 0, 0, 0)))
    for mode, t, want in (
        (CronMode.MINUTE, at_8, 5),
        (CronMode.MINUTE, at_8 + 60, 1),
        (CronMode.WINDOW, at_8, 5),
        (CronMode.WINDOW, at_8 + 3 * 3600, 5),
    ):
        spec = ihpaspec.desired_hpa(obj, d, t, mode).hpa["spec"]
        assert spec["minReplicas"] == want, (mode, t)


def test_the_controller_config_switch_selects_katalysts_minute_semantics() -> None:
    obj = ihpa(strategy="Auto")
    obj["spec"]["timeBounds"] = [{"bounds": [{"cronTab": "0 8 * * *", "minReplicas": 5}]}]
    at_9 = float(calendar.timegm((2026, 12, 2, 9, 0, 0, 0, 0, 0)))
    for mode, want in ((CronMode.MINUTE, 1), (CronMode.WINDOW, 5)):
        c = cluster_with((DEPLOY, deployment()), (IHPA, obj))
        IHPAController(c, IHPAConfig(cron_mode=mode)).run(at_9)
        assert c.get(HPA, "ihpa-web-ihpa", "default")["spec"]["minReplicas"] == want


@settings(max_examples=60, deadline=None)
@given(
    cpu_m=st.integers(1, 64_000),
    containers=st.integers(1, 4),
    util=st.integers(1, 200),
    value_m=st.integers(0, 10_000_000),
)
def test_custom_metric_target_follows_katalysts_rule(
    cpu_m: int, containers: int, util: int, value_m: int
) -> None:
    template = {
        "spec": {
            "containers": [
                {"name": f"c{i}", "resources": {"requests": {"cpu": f"{cpu_m}m"}}}
                for i in range(containers)
            ]
        }
    }
    metrics = [
        {
            "metric": {
                "type": "Resource",
                "resource": {
                    "name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": util},
                },
            }
        },
        {"customMetric": {"identify": "cpu_utilization", "value": f"{value_m}m"}},
        {"customMetric": {"identify": "rps", "value": f"{value_m}m"}},
    ]
    specs = ihpaspec.metric_specs(ihpa(metrics=metrics), template)
    assert specs[0] == metrics[0]["metric"]  # native passes through unchanged
    cpu_target = Quantity.parse(specs[1]["external"]["target"]["averageValue"]).milli_value()
    rps_target = Quantity.parse(specs[2]["external"]["target"]["averageValue"]).milli_value()
    want = value_m if value_m else int(cpu_m * containers * util / 100)
    assert cpu_target == want
    assert rps_target == value_m  # only cpu*/memory* get the template rule
    for s in specs[1:]:
        assert s["type"] == "External" and s["external"]["metric"]["name"] == "spd_agg_metrics"


def test_a_hand_edit_of_the_hpa_is_put_back() -> None:
    c = cluster_with((DEPLOY, deployment()), (IHPA, ihpa(strategy="Auto")))
    ctl = IHPAController(c)
    ctl.run(NOW)
    c.patch(HPA, "ihpa-web-ihpa", {"spec": {"maxReplicas": 99}}, "default")
    ctl.run(NOW + 30)
    assert c.get(HPA, "ihpa-web-ihpa", "default")["spec"]["maxReplicas"] == 10
