"""The node's SR-IOV virtual functions in Katalyst's CNR, and who holds them (pure).

Each VF is a NIC-typed zone, a child of its PF's NIC zone (the `vf` children the CNR's
API describes), named by its representor (Katalyst's `sriov_vf_result` and the name of
its SR-IOV topology-aware quantities). Its `sriov_nic` capacity is 1; allocatable is 1
when a pod may be given it — RDMA-capable, on a healthy PF — and 0 otherwise (Katalyst's
plugin gives out only RDMA VFs). Its attributes say its PF, index, PCI address, netdev,
NUMA node, socket, queue count, RDMA devices. A pod holds a VF when it asks `sriov_nic`
and its `sriov_vf_result` names the VF: `<ns>/<name>/<uid>` with `sriov_nic: 1`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pykatalyst.agent.host.nics import NicDevice
from pykatalyst.agent.host.sriov import VfDevice
from pykatalyst.api import names
from pykatalyst.topology.vf import VfSlot

SRIOV = names.RESOURCE_SRIOV_NIC


def synthetic_vfs(
    pf: str,
    netns: str,
    count: int,
    rdma: bool,
    queues: Sequence[int],
    numa: int,
    pcie: str,
    bus: int,
) -> tuple[VfDevice, ...]:
    """`count` VFs of a configured PF: representors `<pf>_<i>`, PCI addresses on bus
    `bus`, RDMA devices `uverbs<bus><i>`/`umad<bus><i>` when `rdma`."""
    out = []
    for i in range(count):
        q = queues[min(i, len(queues) - 1)] if queues else -1
        tag = f"{bus}{i:02d}"
        out.append(
            VfDevice(
                pf=pf,
                index=i,
                pci_address=f"0000:{bus:02x}:{i // 8:02x}.{i % 8}",
                rep_name=f"{pf}_{i}",
                netns=netns,
                numa=numa,
                pcie_switch=pcie,
                queue_count=q,
                ib_devices=(f"uverbs{tag}", f"umad{tag}") if rdma else (),
            )
        )
    return tuple(out)


def vf_slot(vf: VfDevice, socket: int, pf_healthy: bool) -> VfSlot:
    return VfSlot(
        vf.rep_name,
        vf.pf,
        vf.index,
        vf.numa,
        socket,
        vf.rdma,
        vf.queue_count,
        pf_healthy,
        vf.pcie_switch,
    )


def _attributes(vf: VfDevice, socket: int) -> list[dict[str, str]]:
    rows = [
        (names.VF_ATTR_PF, vf.pf),
        (names.VF_ATTR_INDEX, str(vf.index)),
        (names.VF_ATTR_PCI_ADDRESS, vf.pci_address),
        (names.VF_ATTR_NAME, vf.name),
        (names.NIC_ATTR_NETNS_NAME, vf.netns),
        (names.GPU_ATTR_NUMA, str(vf.numa)),
        (names.GPU_ATTR_SOCKET, str(socket)),
        (names.GPU_ATTR_PCIE_SWITCH, vf.pcie_switch),
        (names.VF_ATTR_QUEUE_COUNT, str(vf.queue_count) if vf.queue_count >= 0 else ""),
        (names.VF_ATTR_RDMA, "true" if vf.rdma else "false"),
        (names.VF_ATTR_IB_DEVICES, ",".join(vf.ib_devices)),
    ]
    keep = {names.NIC_ATTR_NETNS_NAME}
    return [{"name": k, "value": v} for k, v in rows if v or k in keep]


def vf_zones(nic: NicDevice, socket: int, holders: dict[str, list[str]]) -> list[dict[str, Any]]:
    """The VF zones of one PF (by index); `holders`: VF id -> consumers holding it."""
    out = []
    for vf in nic.vfs:
        ok = vf.rdma and nic.healthy
        zone: dict[str, Any] = {
            "type": names.ZONE_NIC,
            "name": vf.rep_name,
            "resources": {
                "allocatable": {SRIOV: "1" if ok else "0"},
                "capacity": {SRIOV: "1"},
            },
            "attributes": _attributes(vf, socket),
        }
        who = sorted(holders.get(vf.rep_name, ()))
        if who:
            zone["allocations"] = [{"consumer": c, "requests": {SRIOV: "1"}} for c in who]
        out.append(zone)
    return out


def vf_holders(pods: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """VF id -> consumers, from (consumer, sriov_vf_result) of the pods asking a VF."""
    out: dict[str, list[str]] = {}
    for consumer, vf in pods:
        if vf:
            out.setdefault(vf, []).append(consumer)
    return out
