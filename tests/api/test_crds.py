from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from pykatalyst.api import names
from pykatalyst.api.crds import (
    AdminQoSConfiguration,
    CustomNodeConfig,
    CustomNodeResourceModel,
    KatalystCustomConfig,
    KatalystVerticalPodAutoscaler,
    NodeOvercommitConfig,
    ServiceProfileDescriptor,
    new_cnr,
)
from pykatalyst.api.quantity import Quantity

CNR = {
    "apiVersion": names.CUSTOM_NODE_RESOURCE.api_version,
    "kind": "CustomNodeResource",
    "metadata": {"name": "node-1", "resourceVersion": "7", "labels": {"pool": "a"}},
    "spec": {
        "nodeResourceProperties": [
            {"propertyName": "numa", "propertyQuantity": "2"},
            {"propertyName": "cpu_codename", "propertyValues": ["icelake"]},
        ],
        "taints": [
            {"key": "node.katalyst.kubewharf.io/MemoryPressure", "effect": "NoSchedule",
             "qosLevel": "reclaimed_cores"}
        ],
        "futureSpecField": "x",
    },
    "status": {
        "resources": {
            "allocatable": {names.RECLAIMED_MILLICPU: "44k", names.RECLAIMED_MEMORY: "80Gi"},
            "capacity": {names.RECLAIMED_MILLICPU: "48k", names.RECLAIMED_MEMORY: "96Gi"},
        },
        "topologyPolicy": "SingleNUMANodeContainerLevel",
        "topologyZone": [
            {
                "type": "Socket",
                "name": "0",
                "children": [
                    {
                        "type": "Numa",
                        "name": "0",
                        "resources": {"allocatable": {"cpu": "24", "memory": "180Gi"}},
                        "allocations": [{"consumer": "default/p/uid", "requests": {"cpu": "4"}}],
                        "attributes": [{"name": "numa_distance", "value": "10,21"}],
                        "vendorExtension": {"a": 1},
                    }
                ],
            }
        ],
        "conditions": [
            {"type": "AgentReady", "status": "True", "lastHeartbeatTime": "2024-01-01T00:00:00Z"}
        ],
        "nodeMetricStatus": {"updateTime": "2024-01-01T00:00:00Z"},
    },
}  # fmt: skip

CNC = {
    "apiVersion": names.CUSTOM_NODE_CONFIG.api_version,
    "kind": "CustomNodeConfig",
    "metadata": {"name": "node-1"},
    "status": {
        "katalystCustomConfigList": [
            {
                "configType": {"group": names.CONFIG_GROUP, "version": "v1alpha1",
                               "resource": "adminqosconfigurations"},
                "configName": "default",
                "configNamespace": "default",
                "hash": "abc",
            }
        ]
    },
}  # fmt: skip

KCC = {
    "apiVersion": names.KATALYST_CUSTOM_CONFIG.api_version,
    "kind": "KatalystCustomConfig",
    "metadata": {"name": "admin-qos-configuration", "namespace": "default"},
    "spec": {
        "targetType": {"group": names.CONFIG_GROUP, "version": "v1alpha1",
                       "resource": "adminqosconfigurations"},
        "disableRevisionHistory": True,
        "nodeLabelSelectorAllowedKeyList": [{"priority": 0, "keyList": ["pool"]}],
    },
    "status": {"conditions": [{"type": "Valid", "status": "True"}]},
}  # fmt: skip

AQC = {
    "apiVersion": names.ADMIN_QOS_CONFIGURATION.api_version,
    "kind": "AdminQoSConfiguration",
    "metadata": {"name": "default", "namespace": "default"},
    "spec": {
        "nodeLabelSelector": "pool=a",
        "priority": 1,
        "config": {
            "reclaimedResourceConfig": {"enableReclaim": True},
            "evictionConfig": {
                "dryRun": ["*"],
                "reclaimedResourcesEvictionConfig": {
                    "evictionThreshold": {names.RECLAIMED_MILLICPU: 3.0}
                },
                "somethingNew": {"x": 1},
            },
        },
    },
}

NOC = {
    "apiVersion": names.NODE_OVERCOMMIT_CONFIG.api_version,
    "kind": "NodeOvercommitConfig",
    "metadata": {"name": "pool-a"},
    "spec": {"nodeOvercommitSelectorVal": "pool-a",
             "resourceOvercommitRatio": {"cpu": "1.5", "memory": "1.2"}},
    "status": {"matchedNodeList": ["node-1"]},
}  # fmt: skip

SPD = {
    "apiVersion": names.SERVICE_PROFILE_DESCRIPTOR.api_version,
    "kind": "ServiceProfileDescriptor",
    "metadata": {"name": "web", "namespace": "prod"},
    "spec": {
        "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "baselinePercent": 20,
        "businessIndicator": [
            {"name": "RPCLatency", "indicators": [{"indicatorLevel": "UpperBound", "value": 100}]}
        ],
    },
}

KVPA = {
    "apiVersion": names.KATALYST_VERTICAL_POD_AUTOSCALER.api_version,
    "kind": "KatalystVerticalPodAutoscaler",
    "metadata": {"name": "web", "namespace": "prod"},
    "spec": {
        "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "updatePolicy": {"podUpdatingStrategy": "Inplace"},
        "resourcePolicy": {
            "containerPolicies": [
                {"containerName": "app", "minAllowed": {"cpu": "100m"},
                 "maxAllowed": {"cpu": "4"}, "controlledResources": ["cpu"]}
            ]
        },
    },
}  # fmt: skip

SAMPLES: list[tuple[type[BaseModel], dict[str, Any]]] = [
    (CustomNodeResourceModel, CNR),
    (CustomNodeConfig, CNC),
    (KatalystCustomConfig, KCC),
    (AdminQoSConfiguration, AQC),
    (NodeOvercommitConfig, NOC),
    (ServiceProfileDescriptor, SPD),
    (KatalystVerticalPodAutoscaler, KVPA),
]


@pytest.mark.parametrize(("model", "sample"), SAMPLES, ids=lambda x: getattr(x, "__name__", ""))
def test_round_trip_keeps_unknown_fields(model: Any, sample: dict[str, Any]) -> None:
    raw = copy.deepcopy(sample)
    raw["metadata"]["annotations"] = {"future.example.com/x": "1"}
    raw["brandNewTopLevel"] = {"nested": [1, "two"]}
    obj = model.from_json(copy.deepcopy(raw))
    assert obj.to_json() == raw


def test_cnr_typed_access() -> None:
    cnr = CustomNodeResourceModel.from_json(copy.deepcopy(CNR))
    assert cnr.status.resources.allocatable is not None
    # reclaimed_millicpu counts milli-cores: "44k" is 44 cores
    assert cnr.status.resources.allocatable[names.RECLAIMED_MILLICPU].value() == 44000
    assert cnr.spec.taints[0].qos_level == names.QOS_RECLAIMED_CORES
    numa = cnr.numa_zones()
    assert [z.name for z in numa] == ["0"]
    assert numa[0].allocations[0].requests == {"cpu": Quantity.parse("4")}


def test_new_cnr_is_an_empty_cnr_for_the_node() -> None:
    cnr = new_cnr("node-7", uid="u-7")
    raw = cnr.to_json()
    assert raw["apiVersion"] == names.CUSTOM_NODE_RESOURCE.api_version
    assert raw["kind"] == names.CUSTOM_NODE_RESOURCE.kind
    assert raw["metadata"]["name"] == "node-7"
    assert raw["metadata"]["ownerReferences"][0]["uid"] == "u-7"
    assert cnr.numa_zones() == []


def test_admin_qos_defaults_match_katalyst() -> None:
    aqc = AdminQoSConfiguration.from_json(copy.deepcopy(AQC))
    config = aqc.spec.config
    assert config.reclaimed_resource_config.enable_reclaim is True
    rrc = config.reclaimed_resource_config
    assert rrc.reserved_resource_for_allocate == {
        "cpu": Quantity.parse("4"),
        "memory": Quantity.parse("5Gi"),
    }
    reclaimed = config.eviction_config.reclaimed_resources_eviction_config
    assert reclaimed.eviction_threshold == {names.RECLAIMED_MILLICPU: 3.0}
    assert reclaimed.grace_period == 60
    memory = config.eviction_config.memory_pressure_eviction_config
    assert memory.system_kswapd_rate_threshold == 2000
    assert memory.numa_free_below_watermark_times_threshold == 12
    assert config.eviction_config.cpu_pressure_eviction_config.max_suppression_tolerance_rate == 5
    assert config.advisor_config.memory_advisor_config.memory_guard_config.enable is True
    # defaults are not written back
    assert "advisorConfig" not in aqc.to_json()["spec"]["config"]


def test_snake_case_construction() -> None:
    noc = NodeOvercommitConfig.model_validate(
        {"metadata": {"name": "a"}, "spec": {"node_overcommit_selector_val": "a"}}
    )
    assert noc.to_json()["spec"] == {"nodeOvercommitSelectorVal": "a"}


@pytest.mark.parametrize("ratio", ["0.5", "abc", "-1"])
def test_overcommit_ratio_must_be_at_least_one(ratio: str) -> None:
    with pytest.raises(ValidationError, match="resourceOvercommitRatio"):
        NodeOvercommitConfig.from_json({"spec": {"resourceOvercommitRatio": {"cpu": ratio}}})


def test_bad_quantity_is_rejected() -> None:
    bad = copy.deepcopy(CNR)
    bad["status"]["resources"]["allocatable"][names.RECLAIMED_MILLICPU] = "lots"
    with pytest.raises(ValidationError, match="lots"):
        CustomNodeResourceModel.from_json(bad)


def test_spd_baseline_percent_range() -> None:
    bad = copy.deepcopy(SPD)
    bad["spec"]["baselinePercent"] = 120
    with pytest.raises(ValidationError):
        ServiceProfileDescriptor.from_json(bad)
