"""Devices held through DRA claims in the CNR: the kubelet's pod-resources lists them by
driver and device name; a claimed card is reported as the pod's whole card, a claimed NIC
lists the pod as its consumer."""

from __future__ import annotations

import pytest

from pykatalyst.agent import gpu
from pykatalyst.agent.dra import holds
from pykatalyst.agent.dra.slices import TYPE_GPU, TYPE_NIC, device_name
from pykatalyst.agent.host.devices import GpuDevice
from pykatalyst.agent.host.kubelet import DeviceGrant, KubeletDevices, devices_from, messages
from pykatalyst.agent.host.nics import NicDevice
from pykatalyst.api import names

pytest.importorskip("google.protobuf", reason="protobuf is not installed (pykatalyst[node])")

DRIVER = names.DRA_DRIVER
CARDS = [GpuDevice("GPU-synthetic-0"), GpuDevice("GPU-synthetic-1")]
NICS = [NicDevice("eth0", pcie_switch="0000:01:00.0")]


def _listed() -> object:
    msgs = messages()
    listed = msgs["ListPodResourcesResponse"]()
    c = listed.pod_resources.add(name="pair", namespace="ml").containers.add(name="main")
    dr = c.dynamic_resources.add(claim_name="pair", claim_namespace="ml")
    dr.claim_resources.add(
        driver_name=DRIVER, pool_name="n1", device_name=device_name(TYPE_GPU, "GPU-synthetic-1")
    )
    dr.claim_resources.add(driver_name=DRIVER, pool_name="n1", device_name="nic-eth0")
    dr.claim_resources.add(driver_name="gpu.nvidia.com", pool_name="n1", device_name="gpu-0")
    return msgs["ListPodResourcesResponse"].FromString(listed.SerializeToString())


def test_claimed_devices_are_read_only_for_the_drivers_asked() -> None:
    alloc = messages()["AllocatableResourcesResponse"]()
    assert devices_from(_listed(), alloc, gpu.GPU_RESOURCES).containers == ()
    got = devices_from(_listed(), alloc, holds.DRA).containers
    assert [g.device_ids for g in got] == [
        (device_name(TYPE_GPU, "GPU-synthetic-1"),),
        ("nic-eth0",),
    ]
    assert {(g.resource, g.namespace, g.pod, g.container) for g in got} == {
        (DRIVER, "ml", "pair", "main")
    }


def test_a_claimed_card_is_the_pods_whole_card_in_the_gpu_zones() -> None:
    held = devices_from(_listed(), messages()["AllocatableResourcesResponse"](), holds.DRA)
    grants = holds.card_grants(held, CARDS).containers
    assert grants == (
        DeviceGrant(names.RESOURCE_NVIDIA_GPU, ("GPU-synthetic-1",), (), "ml", "pair", "main"),
    )
    (hold,) = gpu.holds_from(grants, 100)
    assert (hold.card, hold.whole, hold.units) == ("GPU-synthetic-1", True, 100)


def test_a_claimed_nic_lists_the_pod_as_its_consumer() -> None:
    held = KubeletDevices(
        (DeviceGrant(DRIVER, (device_name(TYPE_NIC, "eth0"),), (), "ml", "pair", "main"),)
    )
    consumers = holds.nic_consumers(held, NICS, {"ml/pair": "u1"}.get)
    assert consumers == {"eth0": ["ml/pair/u1"]}
    zones = {0: [{"type": names.ZONE_NIC, "name": "eth0"}, {"type": names.ZONE_NIC, "name": "x"}]}
    out = holds.with_nic_consumers(zones, consumers)
    assert out[0][0]["allocations"] == [{"consumer": "ml/pair/u1"}]
    assert "allocations" not in out[0][1] and "allocations" not in zones[0][0]
