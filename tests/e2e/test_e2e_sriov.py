"""SR-IOV VFs on the real kubelet, with synthetic VFs: `katalyst agent` reports a PF's four
VFs as NIC zones under its NIC zone in the CNR, `katalyst device-plugin` registers
`resource.katalyst.kubewharf.io/sriov_nic` with the node's kubelet, `katalyst scheduler`
(`examples/scheduler/katalyst-scheduler-sriov.yaml`) gives a pod asking `sriov_nic: 1` the
first VF in Katalyst's order and writes `sriov_vf_result` with the Binding, and the plugin
gives the container that VF: its RDMA device nodes under /dev/infiniband (here /dev/null
stands in for them) and its PCI address in the environment. The CNR then lists the pod on
that VF; `katalyst explain pod` says which and why; a pod asking two VFs stays Pending
naming the field."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from pykatalyst.api import names
from tests.e2e.conftest import (
    REPO,
    Component,
    Kubectl,
    LocalNode,
    component_kubeconfig,
    wait_until,
)
from tests.e2e.pykatalyst_e2e import (
    explain_pod_json,
    katalyst_pod,
    running_pods,
    start_agent,
    start_device_plugin,
)

SRIOV = names.RESOURCE_SRIOV_NIC
PRINT = (
    f'echo "vf=${names.ENV_SRIOV_VF_REP_NAME} pci=${names.ENV_SRIOV_VF_PCI_ADDRESS}"; '
    "ls /dev/infiniband; sleep 36000"
)


def _config(local_node: LocalNode) -> dict[str, Any]:
    kubelet = local_node.state_dir / "kubelet"
    pf = {"name": "ens9f0", "speed_mbps": 100000, "numa": 0, "vfs": 4, "vf_queue_counts": [8]}
    return {
        "kubelet": {"pod_resources_socket": str(kubelet / "pod-resources" / "kubelet.sock")},
        "devices": {
            "nic": {
                "source": "synthetic",
                "interfaces": [pf],
                "sriov": {"device_node": "/dev/null"},
            },
            "device_plugin": {"poll_s": 1},
        },
    }


def _pod(name: str, namespace: str, count: str) -> dict[str, Any]:
    return katalyst_pod(name, namespace, {SRIOV: count}, PRINT)


def _vf_zones(kubectl: Kubectl, node: str) -> dict[str, Any]:
    cnr = kubectl.json("get", "kcnr", node)
    return {
        vf["name"]: vf
        for socket in cnr.get("status", {}).get("topologyZone", [])
        for nic in socket.get("children", [])
        if nic.get("type") == names.ZONE_NIC
        for vf in nic.get("children", [])
    }


def test_a_pod_gets_a_vf_from_the_scheduler_and_the_device_plugin(
    kubectl: Kubectl,
    local_node: LocalNode,
    namespace: str,
    components: Callable[..., Component],
    tmp_path: Path,
) -> None:
    node = local_node.name
    agent = start_agent(components, tmp_path, node, config=_config(local_node))
    plugin = start_device_plugin(components, tmp_path, node)

    def ready() -> dict[str, Any]:
        alloc = kubectl.json("get", "node", node)["status"].get("allocatable", {})
        zones = _vf_zones(kubectl, node)
        if alloc.get(SRIOV) == "4" and len(zones) == 4:
            return zones
        raise AssertionError(
            f"allocatable {alloc}, VF zones {sorted(zones)}: {plugin.log()[-800:]}"
        )

    zones = wait_until(
        "the kubelet advertising the VFs and the CNR listing them", ready, 90, interval=2
    )
    assert sorted(zones) == [f"ens9f0_{i}" for i in range(4)]
    scheduler = components(
        "scheduler",
        "scheduler",
        "--config",
        str(REPO / "examples" / "scheduler" / "katalyst-scheduler-sriov.yaml"),
        "--kubeconfig",
        component_kubeconfig("scheduler"),
    )
    kubectl.apply(_pod("rdma", namespace, "1"))
    try:
        pods = wait_until("rdma Running", lambda: running_pods(kubectl, namespace, ["rdma"]), 120)
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}\nplugin:\n{plugin.log()[-2000:]}\nscheduler:\n{scheduler.log()[-1500:]}"
        ) from None
    ann = pods["rdma"]["metadata"]["annotations"]
    assert ann[names.SRIOV_VF_RESULT_ANNOTATION] == "ens9f0_0"  # Katalyst's first
    out = wait_until(
        "rdma's output", lambda: kubectl.run("logs", "rdma", "-n", namespace).stdout, 30
    )
    first, *devs = out.splitlines()
    fields = dict(part.split("=", 1) for part in first.split())
    attrs = {a["name"]: a["value"] for a in zones["ens9f0_0"]["attributes"]}
    assert fields == {"vf": "ens9f0_0", "pci": attrs[names.VF_ATTR_PCI_ADDRESS]}
    ib = attrs[names.VF_ATTR_IB_DEVICES].split(",")
    assert sorted(devs) == sorted([*ib, "rdma_cm"])
    uid = pods["rdma"]["metadata"]["uid"]

    def held() -> list[Any]:
        got = _vf_zones(kubectl, node)["ens9f0_0"].get("allocations", [])
        if got:
            return list(got)
        raise AssertionError(f"ens9f0_0 lists nobody; agent: {agent.log()[-800:]}")

    allocs = wait_until("the CNR listing rdma on its VF", held, 60, interval=2)
    assert allocs == [{"consumer": f"{namespace}/rdma/{uid}", "requests": {SRIOV: "1"}}]
    explained = explain_pod_json(kubectl, namespace, "rdma")["sriov"]
    assert (explained["selection"], explained["vf"]["pf"]) == ("ens9f0_0", "ens9f0")
    assert explained["vf"]["reports_this_pod"] and "Katalyst's order" in explained["why"]

    kubectl.apply(_pod("two", namespace, "2"))

    def pending() -> str:
        conds = kubectl.json("get", "pod", "two", "-n", namespace)["status"].get("conditions", [])
        msg = " ".join(str(c.get("message", "")) for c in conds)
        if SRIOV in msg and "accepted: 1" in msg:
            return msg
        raise AssertionError(f"two: {conds}")

    wait_until("two Pending naming the field", pending, 60, interval=2)
    assert "Traceback" not in scheduler.log() + agent.log() + plugin.log()


def test_gpus_and_a_vf_are_placed_under_one_pcie_switch(
    kubectl: Kubectl,
    local_node: LocalNode,
    namespace: str,
    components: Callable[..., Component],
    tmp_path: Path,
) -> None:
    """examples/agent/synthetic-gpu-rdma.yaml (2 cards and a NIC of 8 VFs under each of 8
    PCIe switches) and examples/scheduler/katalyst-scheduler-gpu-rdma.yaml: pods asking
    cards and a VF get both under one switch, written with the Binding and served by the
    device plugin; `katalyst explain pod` shows the pair; a required pairing no node has
    stays Pending with the summary."""
    node = local_node.name
    example = yaml.safe_load((REPO / "examples" / "agent" / "synthetic-gpu-rdma.yaml").read_text())
    cfg = _config(local_node)
    cfg["devices"] = {**example["devices"], "device_plugin": {"shares_per_gpu": 10, "poll_s": 1}}
    switch = {g["id"]: g["pcie_switch"] for g in cfg["devices"]["gpus"]}
    vf_switch = {
        f"{i['name']}_{j}": i["pcie_switch"]
        for i in cfg["devices"]["nic"]["interfaces"]
        for j in range(i["vfs"])
    }
    agent = start_agent(components, tmp_path, node, config=cfg)
    plugin = start_device_plugin(components, tmp_path, node)

    def ready() -> bool:
        alloc = kubectl.json("get", "node", node)["status"].get("allocatable", {})
        mem = alloc.get(names.RESOURCE_GPU_MEMORY)
        if alloc.get(SRIOV) == "64" and mem == "1600" and len(_vf_zones(kubectl, node)) == 64:
            return True
        raise AssertionError(f"allocatable {alloc}: {plugin.log()[-800:]}")

    wait_until("the kubelet advertising 16 cards and 64 VFs, the CNR listing them", ready, 120)
    scheduler = components(
        "scheduler",
        "scheduler",
        "--config",
        str(REPO / "examples" / "scheduler" / "katalyst-scheduler-gpu-rdma.yaml"),
        "--kubeconfig",
        component_kubeconfig("scheduler"),
    )
    gpu, mem = names.RESOURCE_NVIDIA_GPU, names.RESOURCE_GPU_MEMORY
    show = f'echo "cards=$NVIDIA_VISIBLE_DEVICES vf=${names.ENV_SRIOV_VF_REP_NAME}"; sleep 36000'
    pods = {
        "pair2": {gpu: "2", mem: "60", SRIOV: "1"},
        "pair1": {gpu: "1", mem: "30", SRIOV: "1"},
    }
    for name, limits in pods.items():
        obj = katalyst_pod(name, namespace, limits, show)
        obj["metadata"]["annotations"] = {names.GPU_RDMA_AFFINITY_ANNOTATION: "pcie_switch"}
        kubectl.apply(obj)
        try:
            wait_until(f"{name} Running", lambda n=name: running_pods(kubectl, namespace, [n]), 120)
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}\nscheduler:\n{scheduler.log()[-1500:]}\nplugin:\n{plugin.log()[-1500:]}"
            ) from None
        ann = kubectl.json("get", "pod", name, "-n", namespace)["metadata"]["annotations"]
        cards = ann[names.GPU_SELECTION_RESULT_ANNOTATION].split(",")
        vf = ann[names.SRIOV_VF_RESULT_ANNOTATION]
        assert {switch[c] for c in cards} == {vf_switch[vf]}, (cards, vf)
        out = wait_until(
            f"{name}'s output", lambda n=name: kubectl.run("logs", n, "-n", namespace).stdout, 30
        )
        fields = dict(part.split("=", 1) for part in out.splitlines()[0].split())
        assert fields == {"cards": ",".join(cards), "vf": vf}, fields
    pair = explain_pod_json(kubectl, namespace, "pair2")["pairing"]
    assert pair["closest"] == "pcie_switch" and pair["cards_under_vf_switch"] == 2

    koord = names.KOORDINATOR_JOINT_ALLOCATE_ANNOTATION
    bad = katalyst_pod("bad", namespace, {gpu: "1", mem: "10", SRIOV: "1"})
    bad["metadata"]["annotations"] = {
        koord: '{"deviceTypes":["gpu","rdma"],"requiredScope":"PCIe"}'
    }
    kubectl.apply(bad)

    def pending() -> str:
        conds = kubectl.json("get", "pod", "bad", "-n", namespace)["status"].get("conditions", [])
        msg = " ".join(str(c.get("message", "")) for c in conds)
        if koord in msg and "'SamePCIe'" in msg:
            return msg
        raise AssertionError(f"bad: {conds}")

    wait_until("bad Pending naming the annotation", pending, 60, interval=2)
    ann = kubectl.json("get", "pod", "bad", "-n", namespace)["metadata"].get("annotations", {})
    assert names.SRIOV_VF_RESULT_ANNOTATION not in ann  # nothing handed out
    assert "Traceback" not in scheduler.log() + agent.log() + plugin.log()
