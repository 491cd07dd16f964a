"""`katalyst explain pod` on a pod using ResourceClaims: the devices kube-scheduler
allocated, their attributes from the node's ResourceSlices, and whether the claim's
matchAttribute constraint holds over them."""

from __future__ import annotations

from typing import Any

from pykatalyst.agent.dra.publish import apply, decide
from pykatalyst.agent.dra.slices import TYPE_GPU, device_name, inventory
from pykatalyst.agent.host.devices import GpuDevice
from pykatalyst.agent.host.nics import NicDevice
from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cli.explain_dra import dra_rows
from pykatalyst.cli.explain_pod import explain_pod

ROOT = names.DRA_ATTR_PCIE_ROOT
DRIVER = names.DRA_DRIVER
GPU0 = device_name(TYPE_GPU, "GPU-0")
GPU2 = device_name(TYPE_GPU, "GPU-2")


def _world(gpu: str | None) -> MemoryCluster:
    cluster = MemoryCluster()
    gpus = [
        GpuDevice("GPU-0", numa=0, pcie_switch="0000:01:00.0"),
        GpuDevice("GPU-2", numa=1, pcie_switch="0000:81:00.0"),
    ]
    nics = [NicDevice("eth0", numa=0, pcie_switch="0000:01:00.0")]
    apply(cluster, decide("n1", inventory(gpus, nics, {}), []))
    claim: dict[str, Any] = {
        "metadata": {"name": "pair"},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu"}, {"name": "nic"}],
                "constraints": [{"requests": ["gpu", "nic"], "matchAttribute": ROOT}],
            }
        },
    }
    made = cluster.create(names.RESOURCE_CLAIM, claim, "default")
    if gpu is not None:
        results = [
            {"request": "gpu", "driver": DRIVER, "pool": "n1", "device": gpu},
            {"request": "nic", "driver": DRIVER, "pool": "n1", "device": "nic-eth0"},
        ]
        made["status"] = {"allocation": {"devices": {"results": results}}}
        cluster.update_status(names.RESOURCE_CLAIM, made)
    pod = {
        "metadata": {"name": "p"},
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "c", "image": "x"}],
            "resourceClaims": [{"name": "devs", "resourceClaimName": "pair"}],
        },
    }
    cluster.create(names.POD, pod, "default")
    return cluster


def test_the_pair_and_its_shared_pcie_root_are_explained() -> None:
    report = explain_pod(_world(GPU0), "default", "p", 0.0)
    (claim,) = report["dra"]["claims"]
    assert claim["allocated"] and [d["device"] for d in claim["devices"]] == [GPU0, "nic-eth0"]
    assert claim["devices"][0]["attributes"]["numa"] == 0
    (k,) = claim["constraints"]
    assert k["holds"] and set(k["values"].values()) == {"pci0000:01"}
    rows = dict(dra_rows(report["dra"]))
    assert rows[f"matchAttribute {ROOT}"] == "holds: pci0000:01"


def test_a_pair_across_roots_is_said_not_to_hold() -> None:
    report = explain_pod(_world(GPU2), "default", "p", 0.0)
    (k,) = report["dra"]["claims"][0]["constraints"]
    assert not k["holds"]
    assert sorted(k["values"].values()) == ["pci0000:01", "pci0000:81"]


def test_an_unallocated_claim_and_a_pod_without_claims() -> None:
    cluster = _world(None)
    report = explain_pod(cluster, "default", "p", 0.0)
    assert report["dra"]["claims"][0]["allocated"] is False
    assert dra_rows(report["dra"]) == [["claim devs", "pair: not allocated"]]
    cluster.create(
        names.POD, {"metadata": {"name": "q"}, "spec": {"containers": [{"name": "c"}]}}, "default"
    )
    assert explain_pod(cluster, "default", "q", 0.0)["dra"] is None
