"""The ResourceRecommend controller on MemoryCluster: Katalyst's example, its validation
reasons, the condition machine, the cadence, and Prometheus failing."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.api import names
from pykatalyst.api.manifests import load_documents
from pykatalyst.api.quantity import Quantity
from pykatalyst.api.timefmt import rfc3339
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.controllers import rr_status as rs
from pykatalyst.controllers.resource_recommend import (
    ResourceRecommendConfig,
    ResourceRecommendController,
    parse_oom_records,
)
from pykatalyst.recommend import KatalystSettings, UsageSeries, get_recommender
from pykatalyst.recommend.prometheus import PrometheusClient, PrometheusError

RR = names.RESOURCE_RECOMMEND
TERMS = names.RECOMMENDATION_TERMS_ANNOTATION
EXAMPLE = Path(__file__).resolve().parents[3] / "shared" / "katalyst-examples"
QUICKSTART = EXAMPLE / "resource-recommend-quickstart.yaml"
NOW = 2_000_000.0
HOUR = 3600.0


def series(hours: float, cpu: float = 1.5, mem: float = 600e6) -> UsageSeries:
    t = np.arange(NOW - hours * HOUR, NOW, 60.0)
    wave = 1 + 0.3 * np.sin(t / 5000)
    return UsageSeries.of(t, cpu * wave, mem * wave)


class FakeSource:
    def __init__(self, data: Mapping[str, UsageSeries] | Exception) -> None:
        self.data = data
        self.calls: list[tuple[str, str, float, float]] = []

    def read(
        self, namespace: str, workload: str, kind: str, start: float, end: float
    ) -> Mapping[str, UsageSeries]:
        self.calls.append((namespace, workload, start, end))
        if isinstance(self.data, Exception):
            raise self.data
        return self.data


def deployment(
    name: str = "shared-normal-deployment", containers: tuple[str, ...] = ("stress",)
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": c, "image": "x"} for c in containers]},
            },
        },
    }


def rr(**policy: Any) -> dict[str, Any]:
    crp = {"resourceName": "cpu", "bufferPercent": 10, "controlledValues": "RequestsOnly"}
    body: dict[str, Any] = {
        "apiVersion": RR.api_version,
        "kind": RR.kind,
        "metadata": {"name": "rec", "namespace": "default"},
        "spec": {
            "targetRef": {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": "shared-normal-deployment",
            },
            "resourcePolicy": {
                "algorithmPolicy": {"recommender": "default", "algorithm": "percentile"},
                "containerPolicies": [{"containerName": "*", "controlledResourcesPolicies": [crp]}],
            },
        },
    }
    body["spec"]["resourcePolicy"].update(policy)
    return body


def cluster() -> MemoryCluster:
    c = MemoryCluster(clock=VirtualClock(NOW))
    c.register_kind(names.DEPLOYMENT, unconditional_update=True)
    return c


def conditions(c: MemoryCluster, name: str = "rec") -> dict[str, dict[str, Any]]:
    status = c.get(RR, name, "default").get("status") or {}
    return {x["type"]: x for x in status.get("conditions") or []}


@pytest.mark.skipif(not QUICKSTART.is_file(), reason="Katalyst's examples are not present")
def test_katalysts_quickstart_applies_unchanged_and_gets_its_recommendation() -> None:
    c = cluster()
    for doc in load_documents(QUICKSTART):
        kind = names.DEPLOYMENT if doc.kind == "Deployment" else RR
        c.create(kind, copy.deepcopy(doc.obj), "default")
    data = {"stress": series(30)}
    ctl = ResourceRecommendController(c, source=FakeSource(data))
    plan, result = ctl.run(NOW)
    assert not result.failed and plan.updates[0].ok
    conds = conditions(c, "shared-normal-deployment-recommendation")
    assert [(t, x["status"]) for t, x in conds.items()] == [
        ("Initialized", "True"),
        ("RecommendationProvided", "True"),
        ("Validated", "True"),
    ]
    status = c.get(RR, "shared-normal-deployment-recommendation", "default")["status"]
    assert status["observedGeneration"] == 1
    assert status["lastRecommendationTime"] == rfc3339(NOW)
    (rec,) = status["recommendResources"]["containerRecommendations"]
    want = get_recommender("katalyst").recommend(
        data["stress"],
        NOW,
        KatalystSettings(cpu_buffer_percent=10, memory_buffer_percent=10, task_start_s=NOW),
    )
    assert rec["containerName"] == "stress"
    assert rec["requests"]["target"] == {
        "cpu": rs.cpu_quantity(want.cpu_request or 0),
        "memory": rs.memory_quantity(want.memory_request or 0),
    }


def test_short_history_is_not_ready_with_katalysts_message_and_retries_backing_off() -> None:
    c = cluster()
    c.create(names.DEPLOYMENT, deployment(), "default")
    c.create(RR, rr(), "default")
    source = FakeSource({"stress": series(3)})
    ctl = ResourceRecommendController(c, source=source)
    plan, _ = ctl.run(NOW)
    provided = conditions(c)["RecommendationProvided"]
    assert (provided["status"], provided["reason"]) == ("False", "RecommendationNotReady")
    assert provided["message"] == "The data sample is insufficient to obtain the predicted value"
    # the log line says which RR and why, in figures
    line = plan.summary()
    assert "default/rec: stress: The data sample is insufficient" in line
    assert "of the 86400 s needed" in line
    assert "recommendResources" not in c.get(RR, "rec", "default")["status"]
    # retried after 1 min, then 2 min: not before
    assert ctl.run(NOW + 30)[0].updates == ()
    assert len(ctl.run(NOW + 61)[0].updates) == 1
    assert ctl.run(NOW + 61 + 100)[0].updates == ()
    assert len(ctl.run(NOW + 61 + 121)[0].updates) == 1


def test_after_a_recommendation_it_waits_for_the_resync_or_a_new_generation() -> None:
    c = cluster()
    c.create(names.DEPLOYMENT, deployment(), "default")
    c.create(RR, rr(), "default")
    cfg = ResourceRecommendConfig(resync_s=600)
    ctl = ResourceRecommendController(c, cfg, source=FakeSource({"stress": series(30)}))
    assert ctl.run(NOW)[0].updates[0].ok
    first = conditions(c)["Validated"]["lastTransitionTime"]
    assert ctl.run(NOW + 300)[0].updates == ()
    assert len(ctl.run(NOW + 600)[0].updates) == 1
    assert conditions(c)["Validated"]["lastTransitionTime"] == first  # unchanged condition
    obj = c.get(RR, "rec", "default")
    obj["spec"]["resourcePolicy"]["containerPolicies"][0]["controlledResourcesPolicies"][0][
        "bufferPercent"
    ] = 20
    c.update(RR, obj)
    plan, _ = ctl.run(NOW + 601)
    assert len(plan.updates) == 1
    assert c.get(RR, "rec", "default")["status"]["observedGeneration"] == 2


@pytest.mark.parametrize(
    ("change", "reason", "field"),
    [
        (
            lambda b: b["spec"]["targetRef"].update(name=""),
            "WorkloadNameIsEmpty",
            "spec.targetRef.name",
        ),
        (
            lambda b: b["spec"]["targetRef"].update(kind="StatefulSet"),
            "WorkloadsUnsupported",
            "spec.targetRef.kind StatefulSet",
        ),
        (
            lambda b: b["spec"]["resourcePolicy"]["algorithmPolicy"].update(algorithm="ewma"),
            "AlgorithmUnsupported",
            "algorithm ewma",
        ),
        (
            lambda b: b["spec"]["resourcePolicy"].update(containerPolicies=[]),
            "ContainerPoliciesNotFound",
            "spec.containerPolicies",
        ),
        (
            lambda b: b["spec"]["targetRef"].update(name="nope"),
            "WorkloadNotFound",
            "workload not found",
        ),
        (
            lambda b: b["spec"]["resourcePolicy"]["containerPolicies"][0].update(
                containerName="sidecar"
            ),
            "ContainersNotFound",
            "containerPolicies[0].containerName",
        ),
        (
            lambda b: b["spec"]["resourcePolicy"]["containerPolicies"][0].update(containerName=""),
            "ContainerNameEmpty",
            "containerPolicies[0].containerName",
        ),
        (
            lambda b: b["spec"]["resourcePolicy"]["containerPolicies"].append(
                copy.deepcopy(b["spec"]["resourcePolicy"]["containerPolicies"][0])
            ),
            "ContainerDuplicate",
            "container name * is duplicate",
        ),
        (
            lambda b: b["spec"]["resourcePolicy"]["containerPolicies"][0].update(
                controlledResourcesPolicies=[]
            ),
            "ControlledResourcesPoliciesEmpty",
            "controlledResourcesPolicies",
        ),
        (
            lambda b: b["spec"]["resourcePolicy"]["containerPolicies"][0][
                "controlledResourcesPolicies"
            ][0].update(resourceName="gpu"),
            "ResourceNameUnsupported",
            "controlledResourcesPolicies[0].resourceName: 'gpu'",
        ),
        (
            lambda b: b["spec"]["resourcePolicy"]["containerPolicies"][0][
                "controlledResourcesPolicies"
            ][0].update(controlledValues="RequestsAndLimits"),
            "ControlledValuesUnsupported",
            "controlledValues: 'RequestsAndLimits'",
        ),
        (
            lambda b: b["spec"]["resourcePolicy"]["containerPolicies"][0][
                "controlledResourcesPolicies"
            ][0].update(bufferPercent=150),
            "ResourceBuffersUnsupported",
            "bufferPercent: 150",
        ),
    ],
)
def test_a_malformed_rr_gets_validated_false_with_katalysts_reason_naming_the_field(
    change: Any, reason: str, field: str
) -> None:
    c = cluster()
    c.create(names.DEPLOYMENT, deployment(), "default")
    body = rr()
    change(body)
    c.create(RR, body, "default")
    source = FakeSource({"stress": series(30)})
    ResourceRecommendController(c, source=source).run(NOW)
    conds = conditions(c)
    assert list(conds) == ["Validated"]
    assert (conds["Validated"]["status"], conds["Validated"]["reason"]) == ("False", reason)
    assert field in conds["Validated"]["message"]
    assert source.calls == []  # nothing was read for it


def test_a_bad_half_life_fails_initialization_naming_the_extension() -> None:
    c = cluster()
    c.create(names.DEPLOYMENT, deployment(), "default")
    body = rr()
    body["spec"]["resourcePolicy"]["algorithmPolicy"]["extensions"] = {"decayHalfLife": "soon"}
    c.create(RR, body, "default")
    ResourceRecommendController(c, source=FakeSource({})).run(NOW)
    conds = conditions(c)
    assert conds["Validated"]["status"] == "True"
    assert conds["Initialized"]["reason"] == "ValidateProcessConfigFailed"
    assert "extensions.decayHalfLife" in conds["Initialized"]["message"]


def _client(answer: Any) -> PrometheusClient:
    def fetch(url: str, timeout: float) -> bytes:
        if isinstance(answer, Exception):
            raise answer
        return bytes(answer)

    return PrometheusClient("http://prom:9090", 1.0, fetch)


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (PrometheusError("cannot reach Prometheus at http://prom:9090: timed out"), "timed out"),
        (b"<html>proxy error</html>", "not JSON"),
        (
            json.dumps(
                {"status": "success", "data": {"resultType": "vector", "result": []}}
            ).encode(),
            "matrix",
        ),
    ],
)
def test_prometheus_down_slow_or_garbage_is_said_and_the_last_recommendation_stays(
    answer: Any, said: str
) -> None:
    from pykatalyst.controllers.resource_recommend import PrometheusSource

    c = cluster()
    c.create(names.DEPLOYMENT, deployment(), "default")
    c.create(RR, rr(), "default")
    cfg = ResourceRecommendConfig(resync_s=600)
    ctl = ResourceRecommendController(c, cfg, source=FakeSource({"stress": series(30)}))
    ctl.run(NOW)
    good = c.get(RR, "rec", "default")["status"]
    ctl.source = PrometheusSource(_client(answer))
    plan, _ = ctl.run(NOW + 600)
    assert not plan.updates[0].ok
    status = c.get(RR, "rec", "default")["status"]
    provided = {x["type"]: x for x in status["conditions"]}["RecommendationProvided"]
    assert (provided["status"], provided["reason"]) == ("False", "DataSourceUnavailable")
    assert said in provided["message"]
    assert status["recommendResources"] == good["recommendResources"]
    assert status["lastRecommendationTime"] == good["lastRecommendationTime"]


def test_other_recommenders_are_left_alone_and_pykatalysts_is_served() -> None:
    c = cluster()
    c.create(names.DEPLOYMENT, deployment(), "default")
    body = rr()
    body["spec"]["resourcePolicy"]["algorithmPolicy"]["recommender"] = "my-external"
    c.create(RR, body, "default")
    body = rr()
    body["metadata"]["name"] = "py"
    body["spec"]["resourcePolicy"]["algorithmPolicy"]["recommender"] = "pykatalyst"
    c.create(RR, body, "default")
    plan, _ = ResourceRecommendController(c, source=FakeSource({"stress": series(30)})).run(NOW)
    assert [u.name for u in plan.updates] == ["py"]
    assert "status" not in c.get(RR, "rec", "default")


def test_the_oom_record_format_is_read_and_bumps_memory() -> None:
    records = [
        {
            "Namespace": "default",
            "Pod": "shared-normal-deployment-5d7f-abcde",
            "Container": "stress",
            "Memory": "1Gi",
            "OOMAt": rfc3339(NOW - HOUR),
        },
        {
            "Namespace": "default",
            "Pod": "x",
            "Container": "stress",
            "Memory": "bogus",
            "OOMAt": "never",
        },
    ]
    cm = {
        "metadata": {"name": names.OOM_RECORD_CONFIG_MAP},
        "data": {names.OOM_RECORD_KEY: json.dumps(records)},
    }
    events = parse_oom_records(cm)
    assert len(events) == 1 and events[0].memory_request == 1024**3
    c = cluster()
    c.create(names.CONFIG_MAP, cm, names.KUBE_SYSTEM_NAMESPACE)
    c.create(names.DEPLOYMENT, deployment(), "default")
    body = rr()
    policy = body["spec"]["resourcePolicy"]["containerPolicies"][0]
    policy["controlledResourcesPolicies"] = [{"resourceName": "memory", "bufferPercent": 0}]
    c.create(RR, body, "default")
    ResourceRecommendController(c, source=FakeSource({"stress": series(30, mem=100e6)})).run(NOW)
    rec = c.get(RR, "rec", "default")["status"]["recommendResources"]["containerRecommendations"][0]
    assert rec["requests"]["target"] == {"memory": "1229Mi"}  # max(1Gi + 100Mi, 1.2 Gi)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 200) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(["targetRef", "resourcePolicy", "containerPolicies", "crp"]),
    json_values,
)
def test_any_garbage_gets_one_answer_and_never_an_exception(where: str, value: Any) -> None:
    body = rr()
    if where == "targetRef":
        body["spec"]["targetRef"] = value
    elif where == "resourcePolicy":
        body["spec"]["resourcePolicy"] = value
    elif where == "containerPolicies":
        body["spec"]["resourcePolicy"]["containerPolicies"] = value
    else:
        body["spec"]["resourcePolicy"]["containerPolicies"][0]["controlledResourcesPolicies"] = (
            value
        )
    got = rs.validate(body, deployment(), "")
    assert isinstance(got, rs.RRConfig | rs.RRError)
    if isinstance(got, rs.RRError):
        assert got.condition == "Validated" and got.reason and got.message
    else:
        assert got.containers and all(c.resources for c in got.containers)


def test_explain_pod_shows_the_rr_target_and_the_terms_behind_it() -> None:
    from pykatalyst.cli.explain_pod import explain_pod

    c = cluster()
    c.create(names.DEPLOYMENT, deployment(), "default")
    c.create(RR, rr(), "default")
    pod = {
        "metadata": {"name": "shared-normal-deployment-5d7f9c-x2x9z", "namespace": "default"},
        "spec": {"containers": [{"name": "stress", "image": "x"}]},
    }
    c.create(names.POD, pod, "default")
    other = {
        "metadata": {"name": "shared-normal-deployment-sidecar", "namespace": "default"},
        "spec": {"containers": [{"name": "stress", "image": "x"}]},
    }
    c.create(names.POD, other, "default")
    ResourceRecommendController(c, source=FakeSource({"stress": series(30)})).run(NOW)
    terms = json.loads(
        c.get(RR, "rec", "default")["metadata"]["annotations"][
            names.RECOMMENDATION_TERMS_ANNOTATION
        ]
    )
    assert terms["containers"]["stress"]["cpu"]["percentile"] == 0.9
    report = explain_pod(c, "default", "shared-normal-deployment-5d7f9c-x2x9z", NOW)
    (entry,) = report["resource_recommends"]
    assert entry["name"] == "rec" and entry["recommender"] == "default"
    assert entry["conditions"]["RecommendationProvided"]["status"] == "True"
    assert set(entry["targets"]["stress"]) == {"cpu"}
    cpu = entry["terms"]["stress"]["cpu"]
    assert cpu["margin"] == 0.1 and cpu["samples"] > 1000 and cpu["half_life_hours"] == 24
    assert (
        explain_pod(c, "default", "shared-normal-deployment-sidecar", NOW)["resource_recommends"]
        == []
    )


def oom_pod(name: str, finished: float, memory: str = "512Mi") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [
                {"name": "stress", "image": "x", "resources": {"requests": {"memory": memory}}}
            ]
        },
        "status": {
            "containerStatuses": [
                {
                    "name": "stress",
                    "lastState": {
                        "terminated": {"reason": "OOMKilled", "finishedAt": rfc3339(finished)}
                    },
                }
            ]
        },
    }


def test_the_oom_recorder_writes_katalysts_configmap_and_the_bump_follows() -> None:
    c = cluster()
    c.create(names.DEPLOYMENT, deployment(), "default")
    body = rr()
    policy = body["spec"]["resourcePolicy"]["containerPolicies"][0]
    policy["controlledResourcesPolicies"] = [{"resourceName": "memory", "bufferPercent": 0}]
    c.create(RR, body, "default")
    killed = oom_pod("shared-normal-deployment-5d7f9c-x2x9z", NOW - 600)
    stored = c.create(names.POD, killed, "default")  # the API server drops status on create
    c.update_status(names.POD, {**stored, "status": killed["status"]})
    ResourceRecommendController(c, source=FakeSource({"stress": series(30, mem=100e6)})).run(NOW)
    cm = c.get(names.CONFIG_MAP, names.OOM_RECORD_CONFIG_MAP, names.KUBE_SYSTEM_NAMESPACE)
    text = cm["data"][names.OOM_RECORD_KEY]
    assert text == (
        '[{"Namespace":"default","Pod":"shared-normal-deployment-5d7f9c-x2x9z",'
        f'"Container":"stress","Memory":"512Mi","OOMAt":"{rfc3339(NOW - 600)}"}}]'
    )
    rec = c.get(RR, "rec", "default")["status"]["recommendResources"]["containerRecommendations"]
    # max(512Mi + 100Mi, 1.2 × 512Mi = 614.4Mi), rounded up to a whole MiB
    assert rec[0]["requests"]["target"] == {"memory": "615Mi"}


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from("abc"), st.integers(1, 4), st.integers(0, 400)),
        max_size=12,
    ),
    st.integers(1, 5),
)
def test_records_merge_keep_one_per_container_and_respect_retention_and_the_cap(
    kills: list[tuple[str, int, int]], cap: int
) -> None:
    from pykatalyst.controllers import oom_record

    records: list[dict[str, Any]] = []
    for pod, gib, hours_ago in kills:
        seen = {
            "Namespace": "ns",
            "Pod": pod,
            "Container": "c",
            "Memory": f"{gib}Gi",
            "OOMAt": rfc3339(NOW - hours_ago * HOUR),
        }
        records = oom_record.merge(records, [seen], NOW, cap)
    keys = [(r["Namespace"], r["Pod"], r["Container"]) for r in records]
    assert len(keys) == len(set(keys)) <= cap
    assert all(NOW - parse(r["OOMAt"]) <= 168 * HOUR for r in records)
    times = [parse(r["OOMAt"]) for r in records]
    assert times == sorted(times)
    assert parse_oom_records({"data": {names.OOM_RECORD_KEY: oom_record.text(records)}}) == [
        e for e in parse_oom_records({"data": {names.OOM_RECORD_KEY: json.dumps(records)}})
    ]


def parse(text: str) -> float:
    from pykatalyst.api.timefmt import parse_rfc3339

    return parse_rfc3339(text)


def test_runs_are_counted_by_result() -> None:
    from prometheus_client import CollectorRegistry

    c = cluster()
    c.create(names.DEPLOYMENT, deployment(), "default")
    c.create(RR, rr(), "default")
    bad = rr()
    bad["metadata"]["name"] = "bad"
    bad["spec"]["targetRef"]["name"] = ""
    c.create(RR, bad, "default")
    registry = CollectorRegistry()
    ResourceRecommendController(c, source=FakeSource({"stress": series(3)}), registry=registry).run(
        NOW
    )

    def count(result: str) -> float:
        value = registry.get_sample_value(
            "katalyst_resource_recommend_runs_total", {"result": result}
        )
        return value or 0.0

    assert (count("invalid"), count("not_ready"), count("recommended")) == (1.0, 1.0, 0.0)


def test_the_quality_figure_is_the_latest_usage_over_the_new_recommendation() -> None:
    from prometheus_client import CollectorRegistry

    from pykatalyst.api.quantity import Quantity

    c = cluster()
    c.create(names.DEPLOYMENT, deployment(), "default")
    c.create(RR, rr(), "default")
    data = {"stress": series(30)}
    registry = CollectorRegistry()
    plan, _ = ResourceRecommendController(c, source=FakeSource(data), registry=registry).run(NOW)
    assert plan.updates[0].ok
    (rec,) = c.get(RR, "rec", "default")["status"]["recommendResources"]["containerRecommendations"]
    target = rec["requests"]["target"]
    assert set(target) == {"cpu"}  # the RR controls cpu only
    ratio = float(data["stress"].cpu[-1]) / (Quantity.parse(target["cpu"]).milli_value() / 1000)
    name = "katalyst_resource_recommend_usage_over_recommendation"
    assert registry.get_sample_value(f"{name}_count", {"resource": "cpu"}) == 1.0
    got = registry.get_sample_value(f"{name}_sum", {"resource": "cpu"})
    assert got == pytest.approx(ratio, rel=0.01)
    assert not registry.get_sample_value(f"{name}_count", {"resource": "memory"})
    assert 0.3 < ratio < 1.5  # p90 with a 10 % margin over a wave of ±30 %


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c"]),
            st.one_of(st.none(), st.floats(0.01, 64)),
            st.one_of(st.none(), st.floats(1e6, 1e11)),
        ),
        max_size=3,
        unique_by=lambda t: t[0],
    ),
    st.lists(st.floats(0, 64), min_size=0, max_size=5),
)
def test_quality_gives_one_ratio_per_recommended_resource_with_a_sample(
    targets: list[tuple[str, float | None, float | None]], cpu: list[float]
) -> None:
    from pykatalyst.controllers.resource_recommend import quality

    t = np.arange(len(cpu), dtype=float) * 60 + NOW
    series_of = {"a": UsageSeries.of(t, cpu, [5e8] * len(cpu))}  # only "a" has usage
    got = quality([rs.ContainerTarget(n, c_, m) for n, c_, m in targets], series_of)
    want = []
    for n, c_, m in targets:
        if n != "a" or not cpu:
            continue
        if c_ is not None:
            want.append(("cpu", cpu[-1] / c_))
        if m is not None:
            want.append(("memory", 5e8 / m))
    assert got == tuple(want)


def _py_rr(c: MemoryCluster, resources: dict[str, Any], both: bool = True) -> None:
    dep = deployment()
    dep["spec"]["template"]["spec"]["containers"][0]["resources"] = resources
    c.create(names.DEPLOYMENT, dep, "default")
    body = rr()
    body["spec"]["resourcePolicy"]["algorithmPolicy"]["recommender"] = "pykatalyst"
    if both:
        policy = body["spec"]["resourcePolicy"]["containerPolicies"][0]
        policy["controlledResourcesPolicies"] = [
            {"resourceName": "cpu", "controlledValues": "RequestsOnly"},
            {"resourceName": "memory", "controlledValues": "RequestsOnly"},
        ]
    c.create(RR, body, "default")


def _target(c: MemoryCluster) -> dict[str, Any]:
    status = c.get(RR, "rec", "default")["status"]
    return dict(status["recommendResources"]["containerRecommendations"][0])


def _free(data: UsageSeries) -> Any:
    from pykatalyst.recommend.ensemble import PykatalystSettings

    settings_ = PykatalystSettings(controlled_values="RequestsOnly")
    return get_recommender("pykatalyst").recommend(data, NOW, settings_)


def test_pykatalyst_holds_a_request_close_to_what_the_template_declares() -> None:
    data = series(30)
    free = _free(data)
    near = f"{round(free.cpu_request * 1.05 * 1000)}m"
    c = cluster()
    _py_rr(c, {"requests": {"cpu": near, "memory": "64Mi"}})
    ResourceRecommendController(c, source=FakeSource({"stress": data})).run(NOW)
    target = _target(c)["requests"]["target"]
    assert target["cpu"] == near  # within 10 %: held at what the template declares
    terms = json.loads(c.get(RR, "rec", "default")["metadata"]["annotations"][TERMS])
    assert any(n.startswith("held") for n in terms["containers"]["stress"]["cpu"]["notes"])
    far = cluster()
    _py_rr(far, {"requests": {"cpu": "100m", "memory": "64Mi"}})
    ResourceRecommendController(far, source=FakeSource({"stress": data})).run(NOW)
    assert _target(far)["requests"]["target"]["cpu"] == rs.cpu_quantity(free.cpu_request)


def test_pykatalyst_raises_a_limit_below_its_request_and_leaves_the_others() -> None:
    data = series(30)
    c = cluster()
    _py_rr(c, {"requests": {"cpu": "100m"}, "limits": {"cpu": "200m", "memory": "8Gi"}})
    ResourceRecommendController(c, source=FakeSource({"stress": data})).run(NOW)
    target = _target(c)
    request = target["requests"]["target"]["cpu"]
    # cpu: a request above the declared 200m limit brings the limit with it; memory's 8Gi
    # limit is above the request and stays as declared (not written)
    assert target["limits"]["target"] == {"cpu": request}


def test_pykatalyst_oom_bump_reads_the_declared_limit_not_only_the_record() -> None:
    records = [
        {
            "Namespace": "default",
            "Pod": "shared-normal-deployment-5d7f-abcde",
            "Container": "stress",
            "Memory": "256Mi",
            "OOMAt": rfc3339(NOW - 60),
        }
    ]
    cm = {
        "metadata": {"name": names.OOM_RECORD_CONFIG_MAP},
        "data": {names.OOM_RECORD_KEY: json.dumps(records)},
    }
    data = series(30, mem=100e6)
    c = cluster()
    c.create(names.CONFIG_MAP, cm, names.KUBE_SYSTEM_NAMESPACE)
    _py_rr(c, {"requests": {"memory": "256Mi"}, "limits": {"memory": "1Gi"}})
    ResourceRecommendController(c, source=FakeSource({"stress": data})).run(NOW)
    memory = _target(c)["requests"]["target"]["memory"]
    # the kill happened at the 1Gi limit: the bump starts from it (1.2 GiB), not from the
    # 256Mi request the record carries (which would give 356Mi)
    assert Quantity.parse(memory).value() > 1.15 * 1024**3
