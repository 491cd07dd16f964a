"""NIC bandwidth on the real cluster. With this machine's own NICs: `katalyst agent` reads
them from sysfs (the VM's virtio NIC has no line rate, so the config gives one) and
reports them as the CNR's NIC zones; `katalyst scheduler` places a pod asking
`net_bandwidth` on a NIC, the Binding writes `nic_selection_result`, the real kubelet
starts the pod (the node advertises no `net_bandwidth`: the kubelet leaves such a request
out of its admission check), and the agent reports the pod's allocation on that NIC. A pod
asking more than is left stays Pending with the reason. With the agent's egress QoS on a
NIC of the node (a veth device of the test's, so that the machine's own traffic is left alone): the
agent gives a bandwidth pod placed on it a class of its own, guaranteed its request, in the
node's kernel, and `katalyst explain pod` says so. With NIC health eviction on: a NIC that
goes down (marked unhealthy in the agent's config file) has its bandwidth pod evicted."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pykatalyst.agent.config import NetworkConfig
from pykatalyst.agent.host.netshape import NFT_TABLE, tc_handle
from pykatalyst.agent.host.nics import SysfsNics
from pykatalyst.agent.net_policy import NetPod, bandwidth
from pykatalyst.api import names
from tests.e2e.conftest import (
    REPO,
    Component,
    Kubectl,
    component_kubeconfig,
    wait_until,
)
from tests.e2e.pykatalyst_e2e import explain_pod_json, katalyst_pod, running_pods, start_agent

BW = names.RESOURCE_NET_BANDWIDTH
SPEED = 10000  # the line rate assumed where sysfs has none: 9000 Mbps given out


def _pod(name: str, namespace: str, mbps: int) -> dict[str, Any]:
    return katalyst_pod(name, namespace, {BW: str(mbps)})


def _nic_zones(kubectl: Kubectl, node: str) -> dict[str, Any]:
    cnr = kubectl.json("get", "kcnr", node)
    return {
        z["name"]: z
        for socket in cnr.get("status", {}).get("topologyZone", [])
        for z in socket.get("children", [])
        if z.get("type") == names.ZONE_NIC
    }


def _nic_scheduler(components: Callable[..., Component]) -> Component:
    """`katalyst scheduler` with the NICBandwidth plugin, with its ServiceAccount."""
    return components(
        "scheduler",
        "scheduler",
        "--config",
        str(REPO / "examples" / "scheduler" / "katalyst-scheduler-nic.yaml"),
        "--kubeconfig",
        component_kubeconfig("scheduler"),
    )


def test_a_bandwidth_pod_gets_this_machines_nic_and_runs(
    kubectl: Kubectl,
    node_name: str,
    namespace: str,
    components: Callable[..., Component],
    tmp_path: Path,
) -> None:
    nics = SysfsNics("/sys").nics()
    if not nics:
        pytest.skip("this machine's sysfs shows no physical NIC")
    first = nics[0].identifier  # the one the (zero) reserve would be taken from
    config = {"devices": {"nic": {"source": "sysfs", "unknown_speed_mbps": SPEED}}}
    agent = start_agent(components, tmp_path, node_name, config=config)

    def zones() -> dict[str, Any]:
        found = _nic_zones(kubectl, node_name)
        if first in found:
            return found
        raise AssertionError(f"NIC zones {sorted(found)}; agent: {agent.log()[-800:]}")

    zone = wait_until("the NIC zones in the CNR", zones, 120, interval=2)[first]
    rate = nics[0].speed_mbps if nics[0].speed_mbps > 0 else SPEED
    assert zone["resources"]["allocatable"][BW] == str(int(rate * 0.9))
    scheduler = _nic_scheduler(components)
    kubectl.apply(_pod("web", namespace, 3000))
    try:
        wait_until("web Running", lambda: running_pods(kubectl, namespace, ["web"]), 120)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nscheduler:\n{scheduler.log()[-1500:]}") from None
    ann = kubectl.json("get", "pod", "web", "-n", namespace)["metadata"]["annotations"]
    chosen = ann[names.NIC_SELECTION_RESULT_ANNOTATION]
    assert chosen in {n.identifier for n in nics}
    assert "3000 Mbps on" in ann[names.NIC_SELECTION_REASON_ANNOTATION]

    def reported() -> dict[str, Any]:
        nic = explain_pod_json(kubectl, namespace, "web")["nic"]
        if nic["nic"] and nic["nic"]["reports_this_pod"]:
            return nic
        raise AssertionError(f"explain pod web: {nic}")

    nic = wait_until("the agent reports web on its NIC", reported, 60, interval=2)
    assert (nic["mbps_asked"], nic["selection"]) == (3000, chosen)
    held = _nic_zones(kubectl, node_name)[chosen]["allocations"]
    assert [a["requests"][BW] for a in held] == ["3000"]

    # more than any NIC has left: Pending, with the reason
    if len(nics) == 1:
        kubectl.apply(_pod("big", namespace, int(rate * 0.9) - 1000))

        def pending() -> str:
            conds = kubectl.json("get", "pod", "big", "-n", namespace)["status"].get(
                "conditions", []
            )
            msg = " ".join(str(c.get("message", "")) for c in conds)
            if "no NIC with enough net_bandwidth free" in msg:
                return msg
            raise AssertionError(f"big: {conds}")

        wait_until("big Pending with the reason", pending, 60, interval=2)
    assert "Traceback" not in scheduler.log() + agent.log()


DUMMY = "pkbw0"  # a NIC of the node's own, for this test only


@pytest.fixture
def dummy_nic() -> Iterator[str]:
    if os.geteuid() != 0:
        pytest.skip("needs root to add a network device")
    for tool in ("ip", "tc", "nft"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not found (apt-get install iproute2 nftables)")
    subprocess.run(["ip", "link", "del", DUMMY], capture_output=True, check=False)
    # a veth pair (kernels without the dummy driver have it): nothing is routed through it
    peer = ["peer", "name", f"{DUMMY}p"]
    subprocess.run(["ip", "link", "add", DUMMY, "type", "veth", *peer], check=True)
    try:
        subprocess.run(["ip", "link", "set", DUMMY, "up"], check=True)
        yield DUMMY
    finally:
        # an agent stopped with its shaping on leaves it (docs/agent.md, "Network")
        subprocess.run(["ip", "link", "del", DUMMY], capture_output=True, check=False)
        with contextlib.suppress(OSError):
            subprocess.run(["nft", "delete", "table", "inet", NFT_TABLE], capture_output=True)


def test_the_agent_gives_a_bandwidth_pod_its_egress_class_on_the_node(
    kubectl: Kubectl,
    node_name: str,
    namespace: str,
    components: Callable[..., Component],
    tmp_path: Path,
    dummy_nic: str,
) -> None:
    network = {"enabled": True, "device": dummy_nic, "link_mbit": SPEED}
    nic = {"source": "synthetic", "interfaces": [{"name": dummy_nic, "speed_mbps": SPEED}]}
    agent = start_agent(
        components, tmp_path, node_name, config={"devices": {"nic": nic}, "network": network}
    )
    wait_until("the NIC zone in the CNR", lambda: _nic_zones(kubectl, node_name)[dummy_nic], 120, 2)
    scheduler = _nic_scheduler(components)
    kubectl.apply(_pod("db", namespace, 3000))
    wait_until("db Running", lambda: running_pods(kubectl, namespace, ["db"]), 120)
    ann = kubectl.json("get", "pod", "db", "-n", namespace)["metadata"]["annotations"]
    assert ann[names.NIC_SELECTION_RESULT_ANNOTATION] == dummy_nic
    # the class the agent's decision gives the pod, looked for in the node's kernel
    cfg = NetworkConfig.model_validate(network)
    pod = NetPod(f"{namespace}/db", names.QOS_SHARED_CORES, ("-",), (), 3000, dummy_nic)
    handle = tc_handle(bandwidth(cfg, [pod]).pods[0].classid)

    def shaped() -> str:
        out = subprocess.run(
            ["tc", "class", "show", "dev", dummy_nic], capture_output=True, text=True
        ).stdout
        line = next((x for x in out.splitlines() if f"class htb {handle} " in x), "")
        if "rate 3Gbit ceil 10Gbit" in line:
            return line
        raise AssertionError(f"tc classes of {dummy_nic}:\n{out}\nagent: {agent.log()[-800:]}")

    wait_until(f"class {handle} on {dummy_nic}", shaped, 60, interval=2)

    def enforced() -> dict[str, Any]:
        said = explain_pod_json(kubectl, namespace, "db")["nic"]["enforced"]
        if said:
            return dict(said)
        raise AssertionError("no NetBandwidth Event yet")

    said = wait_until("explain shows the pod's class", enforced, 60, interval=2)
    assert said["reason"] == names.EVENT_REASON_NET_BANDWIDTH_GUARANTEED
    assert f"guaranteed its request, 3000 Mbps, on {dummy_nic}" in said["message"]
    assert "Traceback" not in scheduler.log() + agent.log()


def test_a_nic_that_goes_down_has_its_bandwidth_pod_evicted(
    kubectl: Kubectl,
    node_name: str,
    namespace: str,
    components: Callable[..., Component],
    tmp_path: Path,
) -> None:
    down = "pkdown0"  # declared only: nothing is sent through it
    nic = {"source": "synthetic", "interfaces": [{"name": down, "speed_mbps": SPEED}]}
    off = {"enabled": False}  # only the network plugin acts in this test
    eviction = {
        "dry_run": [],
        "network": {"enabled": True, "tolerance_s": 5},
        "reclaimed_resource": off,
        "system_memory": off,
        "numa_memory": off,
    }
    config = {"devices": {"nic": nic}, "eviction": eviction}
    agent = start_agent(components, tmp_path, node_name, config=config)
    wait_until("the NIC zone in the CNR", lambda: _nic_zones(kubectl, node_name)[down], 120, 2)
    scheduler = _nic_scheduler(components)
    kubectl.apply(_pod("db", namespace, 3000))
    wait_until("db Running", lambda: running_pods(kubectl, namespace, ["db"]), 120)
    # the NIC goes down: the agent's synthetic source reads its config file at each report
    path = tmp_path / "agent.yaml"
    body = yaml.safe_load(path.read_text())
    body["devices"]["nic"]["interfaces"][0]["healthy"] = False
    path.write_text(yaml.safe_dump(body))

    def evicted() -> str:
        events = kubectl.json("get", "events", "-n", namespace)["items"]
        said = [
            e["message"]
            for e in events
            if e.get("reason") == names.EVENT_REASON_EVICT_CREATED
            and e.get("involvedObject", {}).get("name") == "db"
        ]
        if said:
            return str(said[0])
        raise AssertionError(f"no eviction of db yet; agent: {agent.log()[-600:]}")

    message = wait_until("db evicted", evicted, 120, interval=2)
    assert f"allocatable net_bandwidth of NIC {down} = 0 Mbps" in message
    assert _nic_zones(kubectl, node_name)[down]["resources"]["allocatable"][BW] == "0"
    assert "Traceback" not in scheduler.log() + agent.log()
