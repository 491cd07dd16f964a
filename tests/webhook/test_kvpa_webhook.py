"""The KVPA rules at admission and the recommendation written into new pods, through a
MemoryCluster's admission chain running the webhook's handlers."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.protocol import JSON, ApiError
from pykatalyst.webhook.service import WebhookService, install

KVPA = names.KATALYST_VERTICAL_POD_AUTOSCALER
NS = "default"


def world(enable: bool = True) -> tuple[MemoryCluster, WebhookService]:
    mc = MemoryCluster(clock=VirtualClock(100))
    service = WebhookService(mc)
    install(mc, service)
    ann = {names.VPA_ENABLE_ANNOTATION: "true"} if enable else {}
    mc.create(
        names.DEPLOYMENT,
        {
            "metadata": {"name": "web", "namespace": NS, "annotations": ann},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {}},
        },
    )
    return mc, service


def kvpa(name: str = "web", target: str = "web", **policy: Any) -> JSON:
    pol = {"containerName": "c", "controlledResources": ["cpu"], **policy}
    return {
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
            "resourcePolicy": {"containerPolicies": [pol]},
        },
    }


def new_pod(mc: MemoryCluster) -> JSON:
    body = {
        "metadata": {
            "generateName": "web-abc-",
            "namespace": NS,
            "labels": {"app": "web", "pod-template-hash": "abc"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc", "uid": "u"}
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "i",
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "64Mi"},
                        "limits": {"cpu": "1", "memory": "128Mi"},
                    },
                }
            ]
        },
    }
    return mc.create(names.POD, body)


def with_status(mc: MemoryCluster, service: WebhookService, status: JSON) -> None:
    obj = mc.get(KVPA, "web", NS)
    obj["status"] = status
    mc.update_status(KVPA, obj)
    service.sync(0)


TARGET = {
    "containerResources": [
        {
            "containerName": "c",
            "requests": {"target": {"cpu": "300m"}},
            "limits": {"target": {"cpu": "600m"}},
        }
    ]
}


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        ({"containerName": None}, "containerPolicies[0].containerName"),
        ({"controlledResources": ["cpu", "gpu"]}, "controlledResources[1]"),
        ({"minAllowed": {"cpu": "2"}, "maxAllowed": {"cpu": "1"}}, "minAllowed.cpu"),
        ({"controlledValues": "Both"}, "controlledValues"),
    ],
)
def test_bad_kvpas_are_refused_naming_the_field(policy: JSON, field: str) -> None:
    mc, _ = world()
    body = kvpa(**policy)
    if policy.get("containerName", "x") is None:
        del body["spec"]["resourcePolicy"]["containerPolicies"][0]["containerName"]
    with pytest.raises(ApiError) as err:
        mc.create(KVPA, body)
    assert field in err.value.message


def test_one_kvpa_per_workload_in_a_namespace_only() -> None:
    mc, service = world()
    mc.create(KVPA, kvpa("a"))
    service.sync(0)
    with pytest.raises(ApiError) as err:
        mc.create(KVPA, kvpa("b"))
    assert "spec.targetRef" in err.value.message and "KatalystVerticalPodAutoscaler a" in (
        err.value.message
    )
    mc.create(names.NAMESPACE, {"metadata": {"name": "other"}})
    elsewhere = kvpa("b")
    elsewhere["metadata"]["namespace"] = "other"
    mc.create(KVPA, elsewhere)  # Katalyst would refuse this; the same name elsewhere is fine
    # updating the KVPA itself is not a conflict with itself
    mine = mc.get(KVPA, "a", NS)
    mine["spec"]["updatePolicy"] = {"podUpdatingStrategy": "Inplace"}
    mc.update(KVPA, mine)


def test_a_new_pod_gets_the_recommendation_and_the_restart_policy() -> None:
    mc, service = world()
    mc.create(KVPA, kvpa(resourceResizePolicy="Restart"))
    with_status(mc, service, TARGET)
    pod = new_pod(mc)
    c = pod["spec"]["containers"][0]
    assert c["resources"]["requests"] == {"cpu": "300m", "memory": "64Mi"}
    assert c["resources"]["limits"] == {"cpu": "600m", "memory": "128Mi"}
    assert c["resizePolicy"] == [{"resourceName": "cpu", "restartPolicy": "RestartContainer"}]


def test_no_recommendation_without_the_enable_annotation_or_for_historical_pods() -> None:
    mc, service = world(enable=False)
    mc.create(KVPA, kvpa())
    with_status(mc, service, TARGET)
    assert new_pod(mc)["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "100m"
    mc2, service2 = world()
    body = kvpa()
    body["spec"]["updatePolicy"] = {"podMatchingStrategy": "PodMatchingStrategyForHistoricalPod"}
    mc2.create(KVPA, body)
    with_status(mc2, service2, TARGET)
    assert new_pod(mc2)["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "100m"


def test_an_illegal_recommendation_is_not_applied() -> None:
    mc, service = world()
    mc.create(KVPA, kvpa())
    bad = {
        "containerResources": [
            {"containerName": "c", "requests": {"target": {"cpu": "2"}}}  # above the 1 limit
        ]
    }
    with_status(mc, service, bad)
    assert new_pod(mc)["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "100m"


def test_a_pod_admitted_before_the_cache_syncs_gets_the_newest_recommendation() -> None:
    """The controller writes the status and evicts at once: the replacement pod can reach
    admission before the webhook's cache has seen that status."""
    mc, service = world()
    mc.create(KVPA, kvpa())
    with_status(mc, service, TARGET)
    newer = {
        "containerResources": [
            {
                "containerName": "c",
                "requests": {"target": {"cpu": "700m"}},
                "limits": {"target": {"cpu": "900m"}},
            }
        ]
    }
    obj = mc.get(KVPA, "web", NS)
    obj["status"] = newer
    mc.update_status(KVPA, obj)  # no service.sync: the cache still holds TARGET
    got = new_pod(mc)["spec"]["containers"][0]["resources"]
    assert got["requests"]["cpu"] == "700m" and got["limits"]["cpu"] == "900m"
    mc.delete(KVPA, "web", NS)  # deleted, not yet seen by the cache: nothing applied
    assert new_pod(mc)["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "100m"


def test_a_failed_read_at_admission_falls_back_to_the_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mc, service = world()
    mc.create(KVPA, kvpa())
    with_status(mc, service, TARGET)
    assert service.kvpas is not None

    def refuse(*_: Any, **__: Any) -> JSON:
        raise ApiError("etcd is away", "ServiceUnavailable", 503)

    monkeypatch.setattr(service.kvpas, "cluster", type("Down", (), {"get": staticmethod(refuse)}))
    assert new_pod(mc)["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "300m"


@given(
    st.integers(0, 4000),
    st.integers(0, 4000),
    st.integers(0, 4000),
)
def test_the_target_is_the_recommendation_clipped_to_the_bounds(rec: int, lo: int, hi: int) -> None:
    from pykatalyst.api.quantity import Quantity
    from pykatalyst.api.vpa import ContainerPolicy, container_status

    lo, hi = min(lo, hi), max(lo, hi)
    pol = ContainerPolicy(
        "c", {"cpu": Quantity.from_milli(lo)}, {"cpu": Quantity.from_milli(hi)}, ("cpu",)
    )
    out = container_status("c", {"cpu": Quantity.from_milli(rec)}, None, pol)
    target = Quantity.parse(out["requests"]["target"]["cpu"]).milli_value()
    assert lo <= target <= hi
    assert target == rec or target in (lo, hi)
    assert out["requests"]["uncappedTarget"]["cpu"] == str(Quantity.from_milli(rec))
