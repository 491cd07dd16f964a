"""The device plugin's SR-IOV side against a played kubelet: each pod asking sriov_nic gets
the VF the scheduler chose (or, without one, the first free RDMA VF in Katalyst's order,
written back as sriov_vf_result), with its /dev/infiniband nodes, `pci-devices` and its
environment; no VF is ever given twice; and over gRPC, registered and served as the cards
are."""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.agent.config_sections import NicsConfig
from pykatalyst.agent.deviceplugin import ledger as lg
from pykatalyst.agent.deviceplugin import proto
from pykatalyst.agent.deviceplugin.server import SRIOV_SOCKETS, PluginRunner
from pykatalyst.agent.deviceplugin.sriov import SriovPlugin
from pykatalyst.agent.host.kubelet import DeviceGrant, KubeletDevices
from pykatalyst.agent.host.nics import SyntheticNics
from pykatalyst.agent.nic import synthetic_nics
from pykatalyst.api import names
from pykatalyst.api.timefmt import rfc3339
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from tests.agent.inmemory_host import node_json

SRIOV = names.RESOURCE_SRIOV_NIC
SEL = names.SRIOV_VF_RESULT_ANNOTATION


class Kubelet:
    """The kubelet's device manager for one resource: hands each healthy id out once,
    asks the plugin's preference, and lists what containers hold."""

    def __init__(self, plugin: SriovPlugin, rng: random.Random) -> None:
        self.plugin = plugin
        self.rng = rng
        self.containers: list[DeviceGrant] = []
        self.answers: dict[str, Any] = {}

    def device_assignments(self, resources: frozenset[str]) -> KubeletDevices:
        return KubeletDevices(tuple(self.containers))

    def admit(self, name: str) -> bool:
        used = {d for g in self.containers for d in g.device_ids}
        free = [a.id for a in self.plugin.advertised(SRIOV) if a.healthy and a.id not in used]
        if not free:
            return False
        self.rng.shuffle(free)
        pref = self.plugin.preferred(SRIOV, free, 1)
        ids = pref if len(pref) == 1 else free[:1]
        try:
            answer = self.plugin.allocate(SRIOV, ids)
        except lg.AllocationRefused:
            return False
        self.answers[name] = answer
        self.containers.append(DeviceGrant(SRIOV, tuple(ids), (), "ns", name, "main"))
        return True


def pod(name: str, t: float, selection: str = "", count: str = "1") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "annotations": {SEL: selection} if selection else {},
        },
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "main", "image": "x", "resources": {"limits": {SRIOV: count}}}],
        },
        "status": {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": rfc3339(t)}
            ],
        },
    }


def setup(
    ifaces: list[dict[str, Any]], seed: int = 0, **sriov: Any
) -> tuple[MemoryCluster, SriovPlugin, Kubelet]:
    clock = VirtualClock(1000)
    cluster = MemoryCluster(clock=clock)
    cluster.create(names.NODE, node_json("n1"))
    cluster.create(names.NAMESPACE, {"metadata": {"name": "ns"}})
    cfg = NicsConfig.model_validate({"source": "synthetic", "interfaces": ifaces, "sriov": sriov})
    source = SyntheticNics(lambda: synthetic_nics(cfg.interfaces))
    plugin = SriovPlugin("n1", cluster, source, None, cfg, clock)
    kubelet = Kubelet(plugin, random.Random(seed))
    plugin.kubelet = kubelet
    plugin.poll()
    return cluster, plugin, kubelet


TWO_PFS = [
    {"name": "eth0", "speed_mbps": 100000, "numa": 0, "vfs": 2},
    {"name": "eth1", "speed_mbps": 100000, "numa": 1, "vfs": 2},
]


def test_vfs_are_advertised_with_their_numa_node_and_non_rdma_ones_unhealthy() -> None:
    _, plugin, _ = setup(
        [*TWO_PFS, {"name": "eth2", "speed_mbps": 1000, "vfs": 1, "vf_rdma": False}]
    )
    ads = {a.id: a for a in plugin.advertised(SRIOV)}
    assert sorted(ads) == ["eth0_0", "eth0_1", "eth1_0", "eth1_1", "eth2_0"]
    assert (ads["eth1_0"].numa, ads["eth1_0"].healthy) == (1, True)
    assert not ads["eth2_0"].healthy


def test_a_pod_gets_the_vf_the_scheduler_chose_with_its_device_nodes_and_pci_devices() -> None:
    cluster, plugin, kubelet = setup(TWO_PFS, device_node="/dev/null")
    cluster.create(names.POD, pod("a", 1, selection="eth1_1"), "ns")
    assert kubelet.admit("a")
    answer = kubelet.answers["a"]
    assert kubelet.containers[0].device_ids == ("eth1_1",)
    vf = plugin.vfs()["eth1_1"][1]
    assert answer.envs[names.ENV_SRIOV_VF_PCI_ADDRESS] == vf.pci_address
    paths = [inside for inside, _ in answer.devices]
    assert paths == [f"/dev/infiniband/{d}" for d in vf.ib_devices] + ["/dev/infiniband/rdma_cm"]
    assert {host for _, host in answer.devices} == {"/dev/null"}
    pci = json.loads(answer.annotations[names.SRIOV_PCI_DEVICES_ANNOTATION])
    assert pci == [{"address": vf.pci_address, "repName": "eth1_1", "vfName": ""}]
    assert names.SRIOV_NETNS_ANNOTATION not in answer.annotations  # the host's namespace


def test_a_pod_without_a_selection_gets_katalysts_first_vf_and_the_annotation() -> None:
    cluster, _, kubelet = setup(TWO_PFS)
    cluster.create(names.POD, pod("a", 1), "ns")
    cluster.create(names.POD, pod("b", 2), "ns")
    assert kubelet.admit("a") and kubelet.admit("b")
    got = [cluster.get(names.POD, n, "ns")["metadata"]["annotations"][SEL] for n in "ab"]
    assert got == ["eth0_0", "eth1_0"]  # VF index 0 of each PF before any VF 1


def test_a_taken_selection_and_a_bad_count_are_refused_and_hold_nothing() -> None:
    cluster, plugin, kubelet = setup(TWO_PFS)
    cluster.create(names.POD, pod("a", 1, selection="eth0_0"), "ns")
    assert kubelet.admit("a")
    cluster.create(names.POD, pod("b", 2, selection="eth0_0"), "ns")
    assert not kubelet.admit("b")
    assert "b" not in kubelet.answers and len(kubelet.containers) == 1
    cluster.delete(names.POD, "b", "ns")
    cluster.create(names.POD, pod("c", 3, count="2"), "ns")
    with pytest.raises(lg.AllocationRefused, match="accepted: 1"):
        plugin.allocate(SRIOV, ["eth1_0"])


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 8), min_size=1, max_size=4), st.integers(1, 30), st.integers(0, 99))
def test_no_vf_is_ever_given_twice(vfs: list[int], pods: int, seed: int) -> None:
    ifaces = [
        {"name": f"eth{i}", "speed_mbps": 1000, "numa": i % 2, "vfs": n} for i, n in enumerate(vfs)
    ]
    cluster, _, kubelet = setup(ifaces, seed)
    for i in range(pods):
        cluster.create(names.POD, pod(f"p{i}", i), "ns")
        kubelet.admit(f"p{i}")
    held = [d for g in kubelet.containers for d in g.device_ids]
    assert len(held) == len(set(held)) == min(pods, sum(vfs))


grpc = pytest.importorskip("grpc", reason="grpcio is not installed (pykatalyst[node])")


def test_registers_sriov_nic_and_allocates_over_grpc(
    kubelet_registry: tuple[Path, list[Any]],
) -> None:
    path, seen = kubelet_registry
    cluster, plugin, _ = setup(TWO_PFS)
    runner = PluginRunner(plugin, str(path), 0.1, SRIOV_SOCKETS)
    assert runner.step() == "registered"
    assert [(r.resource_name, r.endpoint) for r in seen] == [(SRIOV, SRIOV_SOCKETS[SRIOV])]
    m = proto.messages()
    with grpc.insecure_channel(f"unix://{path / SRIOV_SOCKETS[SRIOV]}") as ch:
        stream = ch.unary_stream(
            f"/{proto.DEVICE_PLUGIN}/ListAndWatch",
            request_serializer=m["Empty"].SerializeToString,
            response_deserializer=m["ListAndWatchResponse"].FromString,
        )(m["Empty"]())
        first = next(stream)
        assert sorted(d.ID for d in first.devices) == ["eth0_0", "eth0_1", "eth1_0", "eth1_1"]
        cluster.create(names.POD, pod("a", 1, selection="eth1_0"), "ns")
        req = m["AllocateRequest"]()
        req.container_requests.add(devices_ids=["eth1_0"])
        resp = ch.unary_unary(
            f"/{proto.DEVICE_PLUGIN}/Allocate",
            request_serializer=m["AllocateRequest"].SerializeToString,
            response_deserializer=m["AllocateResponse"].FromString,
        )(req)
        out = resp.container_responses[0]
        assert (
            json.loads(out.annotations[names.SRIOV_PCI_DEVICES_ANNOTATION])[0]["repName"]
            == "eth1_0"
        )
        assert out.devices[-1].container_path == "/dev/infiniband/rdma_cm"
        stream.cancel()
    stop = threading.Event()
    stop.set()
    runner.run(stop)
    assert not (path / SRIOV_SOCKETS[SRIOV]).exists()
