"""pykatalyst's CRDs on a real API server: installed, and Katalyst's own objects stored and
served back unchanged (a structural schema prunes what it does not declare)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import REPO, Kubectl, wait_until

CRDS = REPO / "deploy" / "crds"
ESTABLISHED = "jsonpath={.status.conditions[?(@.type=='Established')].status}"


def _strip(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    meta = out.get("metadata", {})
    for key in (
        "creationTimestamp",
        "generation",
        "managedFields",
        "resourceVersion",
        "uid",
        "annotations",
    ):
        meta.pop(key, None)
    return out


def _roundtrip(kubectl: Kubectl, obj: dict[str, Any], resource: str, status: bool) -> None:
    """Create `obj` (its status through the status subresource, as a controller writes it)
    and read it back: every field Katalyst writes must survive."""
    body = copy.deepcopy(obj)
    want_status = body.pop("status", None)
    kubectl.apply(body, "--server-side", "--field-manager=e2e")
    name = obj["metadata"]["name"]
    ns_args = ["-n", obj["metadata"]["namespace"]] if "namespace" in obj["metadata"] else []
    if status and want_status is not None:
        patch = {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": {"name": name}}
        if ns_args:
            patch["metadata"]["namespace"] = obj["metadata"]["namespace"]
        patch["status"] = want_status
        kubectl.apply(patch, "--server-side", "--field-manager=e2e", "--subresource=status")
    got = kubectl.json("get", resource, name, *ns_args)
    assert _strip(got)["spec"] == obj["spec"], f"{resource} spec was pruned or changed"
    if want_status is not None:
        assert got.get("status") == want_status, f"{resource} status was pruned or changed"
    kubectl.run("delete", resource, name, *ns_args)


CNR: dict[str, Any] = {
    "apiVersion": "node.katalyst.kubewharf.io/v1alpha1",
    "kind": "CustomNodeResource",
    "metadata": {"name": "e2e-cnr"},
    "spec": {
        "nodeResourceProperties": [
            {"propertyName": "numa_share", "propertyValues": ["0", "1"]},
            {"propertyName": "cpu", "propertyQuantity": "48"},
        ],
        "taints": [
            {
                "key": "node.katalyst.kubewharf.io/reclaimed",
                "effect": "NoScheduleForReclaimedTasks",
                "qosLevel": "reclaimed_cores",  # required by Katalyst's schema
            }
        ],
    },
    "status": {
        "topologyPolicy": "SingleNUMANodeContainerLevel",
        "resources": {
            "allocatable": {
                "resource.katalyst.kubewharf.io/reclaimed_millicpu": "44k",
                "resource.katalyst.kubewharf.io/reclaimed_memory": "120Gi",
            },
            "capacity": {
                "resource.katalyst.kubewharf.io/reclaimed_millicpu": "44k",
                "resource.katalyst.kubewharf.io/reclaimed_memory": "120Gi",
            },
            "resourcePools": [
                {
                    "poolName": "share",
                    "attributes": [{"name": "tier", "value": "online"}],
                    "minAllocatable": {"cpu": "4"},
                    "maxAllocatable": {"cpu": "40"},
                }
            ],
            "resourcePackages": [
                {
                    "packageName": "gpu-pkg",
                    "attributes": [{"name": "model", "value": "x"}],
                    "allocatable": {"cpu": "8"},
                }
            ],
        },
        "topologyZone": [
            {
                "type": "Socket",
                "name": "0",
                "children": [
                    {
                        "type": "Numa",
                        "name": "0",
                        "resources": {
                            "allocatable": {"cpu": "24", "memory": "64Gi"},
                            "capacity": {"cpu": "24", "memory": "64Gi"},
                            "resourcePools": [
                                {"poolName": "share", "minAllocatable": {"cpu": "2"}}
                            ],
                        },
                        "allocations": [
                            {"consumer": "default/pod-a/uid-a", "requests": {"cpu": "4"}}
                        ],
                        "attributes": [{"name": "numa_distance", "value": "10,21"}],
                        "siblings": [
                            {
                                "type": "Numa",
                                "name": "1",
                                "attributes": [{"name": "distance", "value": "21"}],
                            }
                        ],
                    }
                ],
            }
        ],
        "conditions": [
            {
                "type": "AgentReady",
                "status": "True",
                "reason": "Heartbeat",
                "message": "agent is up",
                "lastHeartbeatTime": "2026-01-01T00:00:00Z",
            }
        ],
    },
}

KCC: dict[str, Any] = {
    "apiVersion": "config.katalyst.kubewharf.io/v1alpha1",
    "kind": "KatalystCustomConfig",
    "metadata": {"name": "admin-qos-configuration", "namespace": "default"},
    "spec": {
        "targetType": {
            "group": "config.katalyst.kubewharf.io",
            "resource": "adminqosconfigurations",
            "version": "v1alpha1",
        },
        "nodeLabelSelectorAllowedKeyList": [{"priority": 0, "keyList": ["pool"]}],
        "disableRevisionHistory": True,  # Katalyst's schema default, filled in if left out
    },
}

AQC: dict[str, Any] = {
    "apiVersion": "config.katalyst.kubewharf.io/v1alpha1",
    "kind": "AdminQoSConfiguration",
    "metadata": {"name": "default", "namespace": "default"},
    "spec": {
        "revisionHistoryLimit": 3,  # Katalyst's schema default, filled in if left out
        "config": {
            "reclaimedResourceConfig": {
                "enableReclaim": True,
                "reservedResourceForReport": {"cpu": "0", "memory": "0"},
                "minReclaimedResourceForReport": {"cpu": "4", "memory": "5Gi"},
            },
            "evictionConfig": {
                "reclaimedResourcesEvictionConfig": {
                    "evictionThreshold": {
                        "resource.katalyst.kubewharf.io/reclaimed_millicpu": 5,
                        "resource.katalyst.kubewharf.io/reclaimed_memory": 5,
                    }
                },
                "memoryPressureEvictionConfig": {
                    "enableNumaLevelEviction": True,
                    "enableSystemLevelEviction": True,
                    "numaFreeBelowWatermarkTimesThreshold": 4,
                    "systemKswapdRateThreshold": 2000,
                    "systemKswapdRateExceedDurationThreshold": 120,
                    "enableRSSOveruseEviction": True,
                    "gracePeriod": 60,
                },
            },
        },
    },
}

CNC: dict[str, Any] = {
    "apiVersion": "config.katalyst.kubewharf.io/v1alpha1",
    "kind": "CustomNodeConfig",
    "metadata": {"name": "e2e-cnc"},
    "spec": {},
    "status": {
        "katalystCustomConfigList": [
            {
                "configType": {
                    "group": "config.katalyst.kubewharf.io",
                    "resource": "adminqosconfigurations",
                    "version": "v1alpha1",
                },
                "configName": "default",
                "configNamespace": "default",
                "hash": "abc123",
            }
        ]
    },
}


def _wait_established(kubectl: Kubectl) -> None:
    """Every CRD of deploy/crds (file `<group>_<plural>.yaml`) is Established."""
    for p in sorted(Path(CRDS).glob("*.yaml")):
        name = p.name.split("_", 1)[1].removesuffix(".yaml") + "." + p.name.split("_", 1)[0]
        wait_until(
            f"CRD {name} Established",
            lambda name=name: "True" in kubectl.run("get", "crd", name, "-o", ESTABLISHED).stdout,
            timeout=60,
        )


def test_the_crds_install_and_establish(kubectl: Kubectl) -> None:
    kubectl.run("apply", "-f", str(CRDS))
    _wait_established(kubectl)


def test_a_cnr_written_as_katalyst_writes_it_is_stored_unpruned(kubectl: Kubectl) -> None:
    _roundtrip(kubectl, CNR, "customnoderesources", status=True)


def test_kcc_aqc_and_cnc_are_stored_unpruned(kubectl: Kubectl) -> None:
    _roundtrip(kubectl, KCC, "katalystcustomconfigs", status=False)
    _roundtrip(kubectl, AQC, "adminqosconfigurations", status=False)
    _roundtrip(kubectl, CNC, "customnodeconfigs", status=True)


def test_kubectl_get_kcnr_lists_the_node_resources(kubectl: Kubectl) -> None:
    body = copy.deepcopy(CNR)
    body.pop("status")
    body["metadata"]["name"] = "e2e-kcnr"
    kubectl.apply(body)
    try:
        out = kubectl.run("get", "kcnr").stdout
        assert "e2e-kcnr" in out
    finally:
        kubectl.run("delete", "kcnr", "e2e-kcnr")


def test_ours_install_over_katalysts_and_katalysts_over_ours(kubectl: Kubectl) -> None:
    """A cluster migrating either way: each set of CRDs is accepted over the other (the API
    server refuses a change of scope, names or storage that would strand stored objects)."""
    theirs = REPO.parent / "shared" / "katalyst-api-crds"
    if not theirs.is_dir():
        pytest.skip(f"Katalyst's CRDs are not beside the checkout ({theirs} is missing)")
    apply = ("apply", "--server-side", "--force-conflicts", "--field-manager=e2e-migrate", "-f")
    try:
        kubectl.run(*apply, str(theirs))
        kubectl.run(*apply, str(CRDS))
        kubectl.run(*apply, str(theirs))
    finally:
        kubectl.run(*apply, str(CRDS))
    _wait_established(kubectl)
