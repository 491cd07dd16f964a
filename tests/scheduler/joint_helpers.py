"""Builders for GPU + RDMA VF pairing tests: a node's CNR with GPU cards and SR-IOV NICs
under shared PCIe switches, the NIC and VF zones written by the agent's own code."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pykatalyst.agent.config_sections import NicsConfig
from pykatalyst.agent.host.nics import NicDevice
from pykatalyst.agent.nic import capacities, nic_zones
from pykatalyst.agent.sriov import synthetic_vfs
from pykatalyst.api import names
from pykatalyst.topology.machine import CPUTopology

GPU = names.RESOURCE_NVIDIA_GPU
MEM = names.RESOURCE_GPU_MEMORY
SRIOV = names.RESOURCE_SRIOV_NIC
PROFILE = """apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: joint
  plugins:
    multiPoint:
      enabled:
      - name: GPUShare
      - name: SriovVF
"""


@dataclass(frozen=True, slots=True)
class Slot:
    """One PCIe switch: its socket (= NUMA node here), GPU cards and NIC VFs."""

    socket: int
    gpus: int
    vfs: int  # 0: no NIC under it


def symmetric(sockets: int = 2, switches: int = 4, gpus: int = 2, vfs: int = 8) -> list[Slot]:
    """`sockets` x `switches` PCIe switches, each with `gpus` cards and one NIC of `vfs`."""
    return [Slot(s, gpus, vfs) for s in range(sockets) for _ in range(switches)]


def switch_name(i: int) -> str:
    return f"0000:{0x10 + i:02x}:00.0"


def node_zones(slots: Sequence[Slot], units: int = 100) -> list[dict[str, Any]]:
    """Socket -> Numa -> GPU zones, and Socket -> NIC -> VF zones (from agent/nic.py)."""
    sockets = sorted({s.socket for s in slots})
    topo = CPUTopology.synthetic(len(sockets), 4, 2)
    nics: list[NicDevice] = []
    cards: dict[int, list[dict[str, Any]]] = {s: [] for s in sockets}
    card = 0
    for i, sl in enumerate(slots):
        sw = switch_name(i)
        for _ in range(sl.gpus):
            res = {GPU: "1", MEM: str(units)}
            cards[sl.socket].append(
                {
                    "type": names.ZONE_GPU,
                    "name": f"GPU-{card}",
                    "resources": {"allocatable": res, "capacity": res},
                    "attributes": [
                        {"name": names.GPU_ATTR_NUMA, "value": str(sl.socket)},
                        {"name": names.GPU_ATTR_SOCKET, "value": str(sl.socket)},
                        {"name": names.GPU_ATTR_PCIE_SWITCH, "value": sw},
                        {"name": names.GPU_ATTR_MODEL, "value": "A100"},
                    ],
                }
            )
            card += 1
        if sl.vfs:
            pf = f"eth{i}"
            vfs = synthetic_vfs(pf, "", sl.vfs, True, (), sl.socket, sw, 0x40 + i)
            nics.append(NicDevice(pf, speed_mbps=100000, numa=sl.socket, pcie_switch=sw, vfs=vfs))
    per_socket = nic_zones(capacities(nics, NicsConfig()), (), topo)
    out = []
    for s in sockets:
        res = {"cpu": "64", "memory": "256Gi"}
        numa = {
            "type": names.ZONE_NUMA,
            "name": str(s),
            "resources": {"allocatable": res, "capacity": res},
            "children": cards[s],
        }
        kids = [numa, *per_socket.get(s, [])]
        out.append({"type": names.ZONE_SOCKET, "name": str(s), "children": kids})
    return out


def card_switches(slots: Sequence[Slot]) -> dict[str, str]:
    """card id -> its switch, as node_zones numbers them."""
    out: dict[str, str] = {}
    card = 0
    for i, sl in enumerate(slots):
        for _ in range(sl.gpus):
            out[f"GPU-{card}"] = switch_name(i)
            card += 1
    return out


def vf_switches(slots: Sequence[Slot]) -> dict[str, str]:
    return {f"eth{i}_{j}": switch_name(i) for i, sl in enumerate(slots) for j in range(sl.vfs)}


def card_numa(slots: Sequence[Slot]) -> dict[str, int]:
    out: dict[str, int] = {}
    card = 0
    for sl in slots:
        for _ in range(sl.gpus):
            out[f"GPU-{card}"] = sl.socket
            card += 1
    return out
