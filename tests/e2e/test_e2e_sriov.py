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

from pykatalyst.api import names
from tests.e2e.conftest import (
    REPO,
    Component,
    Kubectl,
    LocalNode,
    component_kubeconfig,
    wait_until,
)
from tests.e2e.pykatalyst_e2e import explain_pod_json, katalyst_pod, running_pods, start_agent

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
    kc = component_kubeconfig("agent")
    cfg = str(tmp_path / "agent.yaml")
    plugin = components(
        "device-plugin", "device-plugin", "--node", node, "--config", cfg, "--kubeconfig", kc
    )

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
