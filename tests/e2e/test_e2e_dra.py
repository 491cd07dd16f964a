"""GPU+NIC pairing for clusters that keep the stock kube-scheduler, through Dynamic Resource
Allocation (resource.k8s.io/v1, GA in Kubernetes 1.34), with synthetic devices: `katalyst
agent` (devices.dra.enabled) publishes the node's four cards and two NICs as a
ResourceSlice with the standard `resource.kubernetes.io/pcieRoot` attribute, `katalyst
dra-plugin` registers with the node's kubelet through its plugin registration directory,
and the real kube-scheduler allocates a claim asking a GPU and the NIC eth1 under one PCIe
root to a card under eth1's root. The kubelet has the plugin prepare the claim, the pod
runs, and the CNR and `katalyst explain pod` show the pair. A claim no node can satisfy
(three cards under one root that has two) leaves its pod Pending with the scheduler's
reason and the claim unallocated. The plugin restarted, deleting the pod has the kubelet
unprepare the claim through the new one, which knows it from its checkpoint. A pod naming a
ResourceClaimTemplate gets its claim from the controller manager: a GPU and an RDMA VF (the
node's only one, under eth1) under one PCIe root, allocated and prepared for the pod."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pykatalyst.agent.dra.slices import TYPE_GPU, TYPE_VF, device_name
from pykatalyst.api import names
from tests.e2e.conftest import (
    REPO,
    WORKLOAD_IMAGE,
    Component,
    Kubectl,
    LocalNode,
    component_kubeconfig,
    wait_until,
)
from tests.e2e.pykatalyst_e2e import SLEEP, explain_pod_json, running_pods, start_agent

DRIVER = names.DRA_DRIVER
ROOT = names.DRA_ATTR_PCIE_ROOT
CLASSES = REPO / "deploy" / "dra" / "deviceclasses.yaml"
GPUS = [
    {"id": f"GPU-synthetic-{i}", "numa": i // 2, "pcie_switch": sw, "model": "Synthetic-80GB"}
    for i, sw in enumerate(["0000:01:00.0", "0000:01:00.0", "0000:81:00.0", "0000:81:00.0"])
]
NICS = [
    {"name": "eth0", "speed_mbps": 25000, "numa": 0, "pcie_switch": "0000:01:00.0"},
    {"name": "eth1", "speed_mbps": 25000, "numa": 1, "pcie_switch": "0000:81:00.0", "vfs": 1},
]
UNDER_ETH1 = {device_name(TYPE_GPU, g["id"]): g["id"] for g in GPUS[2:]}
VF_ETH1 = device_name(TYPE_VF, "eth1_0")


def _config(node: LocalNode) -> dict[str, Any]:
    kubelet = node.state_dir / "kubelet"
    return {
        "kubelet": {"pod_resources_socket": str(kubelet / "pod-resources" / "kubelet.sock")},
        "devices": {
            "source": "synthetic",
            "gpus": GPUS,
            "nic": {"source": "synthetic", "interfaces": NICS},
            "dra": {
                "enabled": True,
                "poll_s": 2,
                "plugin_dir": str(kubelet / "plugins"),
                "registry_dir": str(kubelet / "plugins_registry"),
            },
        },
    }


def _claim(name: str, namespace: str, gpus: int) -> dict[str, Any]:
    eth1 = f'device.attributes["{DRIVER}"].interface == "eth1"'
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {"deviceClassName": names.DRA_CLASS_GPU, "count": gpus},
                    },
                    {
                        "name": "nic",
                        "exactly": {
                            "deviceClassName": names.DRA_CLASS_NIC,
                            "selectors": [{"cel": {"expression": eth1}}],
                        },
                    },
                ],
                "constraints": [{"requests": ["gpu", "nic"], "matchAttribute": ROOT}],
            }
        },
    }


def _pod(name: str, namespace: str, claim: str, template: bool = False) -> dict[str, Any]:
    source = "resourceClaimTemplateName" if template else "resourceClaimName"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "resourceClaims": [{"name": "devices", source: claim}],
            "containers": [
                {
                    "name": "main",
                    "image": WORKLOAD_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", SLEEP],
                    "resources": {
                        "limits": {"memory": "32Mi"},
                        "claims": [{"name": "devices"}],
                    },
                }
            ],
        },
    }


@pytest.fixture
def device_classes(kubectl: Kubectl) -> Iterator[None]:
    kubectl.run("apply", "-f", str(CLASSES))
    yield
    kubectl.run("delete", "-f", str(CLASSES), "--ignore-not-found", check=False)


def _slice_devices(kubectl: Kubectl, node: str) -> dict[str, Any]:
    listed = kubectl.json(
        "get", "resourceslices", f"--field-selector=spec.nodeName={node},spec.driver={DRIVER}"
    )
    return {d["name"]: d for s in listed["items"] for d in s["spec"].get("devices", [])}


def _zones(kubectl: Kubectl, node: str, kind: str) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def walk(zones: list[Any]) -> None:
        for z in zones:
            if z.get("type") == kind:
                out[z["name"]] = z
            walk(z.get("children", []))

    walk(kubectl.json("get", "kcnr", node).get("status", {}).get("topologyZone", []))
    return out


def _start(
    kubectl: Kubectl, local_node: LocalNode, components: Callable[..., Component], tmp_path: Path
) -> tuple[Component, Component, dict[str, Any]]:
    """The agent publishing the node's devices and the plugin registered with the kubelet."""
    node = local_node.name
    agent = start_agent(components, tmp_path, node, config=_config(local_node))
    plugin = components(
        "dra-plugin",
        "dra-plugin",
        "--node",
        node,
        "--config",
        str(tmp_path / "agent.yaml"),
        "--kubeconfig",
        component_kubeconfig("agent"),
    )

    def published() -> dict[str, Any]:
        got = _slice_devices(kubectl, node)
        if len(got) == 7:
            return got
        raise AssertionError(f"devices {sorted(got)}; agent: {agent.log()[-1500:]}")

    devices = wait_until("the node's ResourceSlice", published, 90, interval=2)
    wait_until(
        "the kubelet registering the plugin",
        lambda: "registered with the kubelet" in plugin.log() or None,
        60,
    )
    return agent, plugin, devices


def _running(kubectl: Kubectl, namespace: str, pod: str, plugin: Component) -> dict[str, Any]:
    try:
        pods = wait_until(f"{pod} Running", lambda: running_pods(kubectl, namespace, [pod]), 120)
    except AssertionError as exc:
        described = kubectl.run("describe", "pod", pod, "-n", namespace, check=False)
        raise AssertionError(
            f"{exc}\n{described.stdout[-2000:]}\nplugin:\n{plugin.log()[-2000:]}"
        ) from None
    got: dict[str, Any] = pods[pod]
    return got


def test_kube_scheduler_pairs_a_gpu_with_the_nic_under_its_pcie_root(
    kubectl: Kubectl,
    local_node: LocalNode,
    namespace: str,
    components: Callable[..., Component],
    tmp_path: Path,
    device_classes: None,
) -> None:
    node = local_node.name
    served = kubectl.run("api-versions").stdout.split()
    assert "resource.k8s.io/v1" in served  # GA in 1.34: served with no runtime-config
    agent, plugin, devices = _start(kubectl, local_node, components, tmp_path)
    roots = {n: d["attributes"][ROOT]["string"] for n, d in devices.items()}
    assert roots["nic-eth1"] == "pci0000:81" and roots["nic-eth0"] == "pci0000:01"
    assert {n for n, r in roots.items() if r == "pci0000:81"} == {*UNDER_ETH1, "nic-eth1", VF_ETH1}

    kubectl.apply(_claim("pair", namespace, 1))
    kubectl.apply(_pod("paired", namespace, "pair"))
    paired = _running(kubectl, namespace, "paired", plugin)
    uid = paired["metadata"]["uid"]
    claim = kubectl.json("get", "resourceclaim", "pair", "-n", namespace)
    results = {r["request"]: r for r in claim["status"]["allocation"]["devices"]["results"]}
    assert results["nic"]["device"] == "nic-eth1"
    assert results["gpu"]["device"] in UNDER_ETH1  # not GPU-0, the first card
    assert {r["driver"] for r in results.values()} == {DRIVER}
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == [uid]
    assert "prepared" in plugin.log()
    card = UNDER_ETH1[results["gpu"]["device"]]
    consumer = f"{namespace}/paired/{uid}"

    def in_cnr() -> tuple[Any, Any]:
        gpu = _zones(kubectl, node, names.ZONE_GPU).get(card, {}).get("allocations", [])
        nic = _zones(kubectl, node, names.ZONE_NIC).get("eth1", {}).get("allocations", [])
        if gpu and nic:
            return gpu, nic
        raise AssertionError(f"{card}: {gpu}, eth1: {nic}; agent: {agent.log()[-1500:]}")

    gpu_allocs, nic_allocs = wait_until("the CNR listing the pair", in_cnr, 60, interval=2)
    assert [a["consumer"] for a in gpu_allocs] == [consumer]
    assert nic_allocs == [{"consumer": consumer}]
    (explained,) = explain_pod_json(kubectl, namespace, "paired")["dra"]["claims"]
    assert {d["request"]: d["device"] for d in explained["devices"]} == {
        "gpu": results["gpu"]["device"],
        "nic": "nic-eth1",
    }
    (constraint,) = explained["constraints"]
    assert constraint["holds"] and set(constraint["values"].values()) == {"pci0000:81"}

    kubectl.apply(_claim("three", namespace, 3))
    kubectl.apply(_pod("unpaired", namespace, "three"))

    def pending() -> str:
        got = kubectl.json("get", "pod", "unpaired", "-n", namespace)
        conds = got["status"].get("conditions", [])
        msg = " ".join(str(c.get("message", "")) for c in conds)
        if "cannot allocate all claims" in msg:
            return msg
        raise AssertionError(f"unpaired: {conds}")

    wait_until("unpaired Pending with kube-scheduler's reason", pending, 60, interval=2)
    three = kubectl.json("get", "resourceclaim", "three", "-n", namespace)
    assert "allocation" not in three.get("status", {})  # nothing half-allocated
    assert not three.get("status", {}).get("reservedFor")

    checkpoint = local_node.state_dir / "kubelet" / "plugins" / DRIVER / "checkpoint.json"
    assert claim["metadata"]["uid"] in json.loads(checkpoint.read_text())["claims"]
    # the plugin restarts: the kubelet finds it again and unprepares through the new one
    plugin.stop()
    again = components("dra-plugin", *plugin.args)
    wait_until(
        "the kubelet registering the restarted plugin",
        lambda: "registered with the kubelet" in again.log() or None,
        60,
    )
    kubectl.run("delete", "pod", "paired", "-n", namespace, "--wait=true")

    def unprepared() -> bool:
        return claim["metadata"]["uid"] not in json.loads(checkpoint.read_text())["claims"]

    wait_until("the kubelet unpreparing the claim", lambda: unprepared() or None, 60)
    # the plugin logs it just after dropping the claim from its checkpoint
    wait_until("the plugin to say so", lambda: "unprepared" in again.log() or None, 10)
    assert "Traceback" not in agent.log() + plugin.log() + again.log()


def test_the_api_server_accepts_the_device_classes(kubectl: Kubectl) -> None:
    docs = [d for d in yaml.safe_load_all(CLASSES.read_text()) if d]
    assert sorted(d["metadata"]["name"] for d in docs) == sorted(
        [names.DRA_CLASS_GPU, names.DRA_CLASS_NIC, names.DRA_CLASS_RDMA_VF]
    )
    kubectl.run("apply", "--dry-run=server", "-f", str(CLASSES))


def test_a_claim_template_gets_a_gpu_and_an_rdma_vf_under_one_root(
    kubectl: Kubectl,
    local_node: LocalNode,
    namespace: str,
    components: Callable[..., Component],
    tmp_path: Path,
    device_classes: None,
) -> None:
    agent, plugin, _ = _start(kubectl, local_node, components, tmp_path)
    requests = [
        {"name": "gpu", "exactly": {"deviceClassName": names.DRA_CLASS_GPU}},
        {"name": "vf", "exactly": {"deviceClassName": names.DRA_CLASS_RDMA_VF}},
    ]
    constraints = [{"requests": ["gpu", "vf"], "matchAttribute": ROOT}]
    kubectl.apply(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "gpu-vf", "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": requests, "constraints": constraints}}},
        }
    )
    kubectl.apply(_pod("templated", namespace, "gpu-vf", template=True))
    pod = _running(kubectl, namespace, "templated", plugin)
    # the controller manager made the claim and named it in the pod's status
    (status,) = pod["status"]["resourceClaimStatuses"]
    assert status["name"] == "devices"
    claim = kubectl.json("get", "resourceclaim", status["resourceClaimName"], "-n", namespace)
    owner = claim["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"]) == ("Pod", pod["metadata"]["uid"])
    results = {
        r["request"]: r["device"] for r in claim["status"]["allocation"]["devices"]["results"]
    }
    # the only VF hangs off eth1's root, so the card must be one of the two under it
    assert results == {"gpu": results["gpu"], "vf": VF_ETH1}
    assert results["gpu"] in UNDER_ETH1
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod["metadata"]["uid"]]
    assert "prepared" in plugin.log()
    assert "Traceback" not in agent.log() + plugin.log()
