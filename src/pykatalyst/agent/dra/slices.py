"""The node's devices as DRA ResourceSlices (`resource.k8s.io/v1`), and the plan that brings
the slices in the cluster to them (pure).

Every GPU, NIC and RDMA-capable SR-IOV VF of the node is one device of the driver
`dra.katalyst.kubewharf.io`, in one pool named after the node. Its attributes are the
driver's own (`type`, `id`, `model`, `numa`, `pcie_switch`, NIC and VF facts) and
Kubernetes' standard `resource.kubernetes.io/pcieRoot`, on which a claim's
`matchAttribute` constraint pairs a GPU with a NIC under the same root. The pool is cut
into slices of at most 128 devices (the API's limit); its generation grows whenever its
devices change, so the scheduler never mixes an old slice with a new one.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pykatalyst.agent.host.devices import GpuDevice
from pykatalyst.agent.host.nics import NicDevice
from pykatalyst.agent.host.sriov import VfDevice
from pykatalyst.api import names

JSON = dict[str, Any]
AttrValue = str | int | bool

MAX_DEVICES_PER_SLICE = 128  # resource.k8s.io/v1 ResourceSliceMaxDevices
MAX_ATTRIBUTE_LENGTH = 64  # DeviceAttributeMaxValueLength
TYPE_GPU = "gpu"
TYPE_NIC = "nic"
TYPE_VF = "vf"
_BDF = re.compile(r"([0-9a-fA-F]{4}):([0-9a-fA-F]{2}):[0-9a-fA-F]{2}\.[0-7]")
_NOT_LABEL = re.compile(r"[^a-z0-9-]+")


@dataclass(frozen=True, slots=True)
class DraDevice:
    """One device of the node's pool: its name there (a DNS label), its kind, the id the
    node knows it by, and what it publishes."""

    name: str
    type: str
    id: str
    attributes: Mapping[str, AttrValue] = field(default_factory=dict)
    capacity: Mapping[str, str] = field(default_factory=dict)


def device_name(kind: str, ident: str) -> str:
    """A DNS-label device name for `ident`: lower-cased, other characters as `-`, and a
    short hash of the id when that changed it or made it too long, so names stay unique."""
    base = _NOT_LABEL.sub("-", f"{kind}-{ident}".lower()).strip("-")
    if base == f"{kind}-{ident}" and len(base) <= 63:
        return base
    digest = hashlib.sha256(ident.encode()).hexdigest()[:8]
    return f"{base[:54].rstrip('-')}-{digest}"


def pcie_root(switch: str, roots: Mapping[str, str]) -> str:
    """The root complex of a device under `switch`: the configured one, else the switch's
    own `pci<domain>:<bus>` (devices under one switch share a root; devices under two
    switches of one root then look apart, which only refuses pairs, never makes a wrong
    one). "" when the switch is unknown."""
    if switch in roots:
        return roots[switch]
    m = _BDF.fullmatch(switch)
    return f"pci{m.group(1).lower()}:{m.group(2).lower()}" if m else ""


def _place(attrs: dict[str, AttrValue], numa: int, switch: str, roots: Mapping[str, str]) -> None:
    if numa >= 0:
        attrs["numa"] = numa
    if switch:
        attrs[names.GPU_ATTR_PCIE_SWITCH] = switch
        root = pcie_root(switch, roots)
        if root:
            attrs[names.DRA_ATTR_PCIE_ROOT] = root


def _short(attrs: dict[str, AttrValue], key: str, value: str) -> None:
    """Set a string attribute the API can hold (values over 64 characters are left out)."""
    if value and len(value) <= MAX_ATTRIBUTE_LENGTH:
        attrs[key] = value


def gpu_device(gpu: GpuDevice, roots: Mapping[str, str]) -> DraDevice:
    attrs: dict[str, AttrValue] = {"type": TYPE_GPU}
    _short(attrs, "id", gpu.id)
    _short(attrs, "model", gpu.model)
    _place(attrs, gpu.numa, gpu.pcie_switch, roots)
    capacity = {} if gpu.memory_mib is None else {"memory": f"{gpu.memory_mib}Mi"}
    return DraDevice(device_name(TYPE_GPU, gpu.id), TYPE_GPU, gpu.id, attrs, capacity)


def nic_device(nic: NicDevice, roots: Mapping[str, str]) -> DraDevice:
    attrs: dict[str, AttrValue] = {"type": TYPE_NIC}
    _short(attrs, "id", nic.identifier)
    _short(attrs, "interface", nic.name)
    _short(attrs, "netns", nic.netns)
    _short(attrs, "pciAddress", nic.pci_address)
    if nic.speed_mbps > 0:
        attrs["speedMbps"] = nic.speed_mbps
    attrs["rdma"] = any(vf.rdma for vf in nic.vfs)
    _place(attrs, nic.numa, nic.pcie_switch, roots)
    return DraDevice(device_name(TYPE_NIC, nic.identifier), TYPE_NIC, nic.identifier, attrs)


def vf_device(vf: VfDevice, roots: Mapping[str, str]) -> DraDevice:
    attrs: dict[str, AttrValue] = {"type": TYPE_VF, "rdma": vf.rdma, "index": vf.index}
    _short(attrs, "id", vf.rep_name)
    _short(attrs, "pf", vf.pf)
    _short(attrs, "pciAddress", vf.pci_address)
    if vf.queue_count >= 0:
        attrs["queues"] = vf.queue_count
    _place(attrs, vf.numa, vf.pcie_switch, roots)
    return DraDevice(device_name(TYPE_VF, vf.rep_name), TYPE_VF, vf.rep_name, attrs)


def inventory(
    gpus: Iterable[GpuDevice],
    nics: Iterable[NicDevice],
    roots: Mapping[str, str],
    *,
    vfs: bool = True,
) -> tuple[DraDevice, ...]:
    """The pool's devices: healthy cards, healthy PCI NICs (a bond is no device) and, with
    `vfs`, the RDMA-capable VFs of healthy NICs; sorted by name. An unhealthy device is
    left out, so the scheduler gives it to no new claim."""
    out = [gpu_device(g, roots) for g in gpus if g.healthy]
    for nic in nics:
        if not nic.healthy or (not nic.pci_address and not nic.pcie_switch):
            continue
        out.append(nic_device(nic, roots))
        if vfs:
            out.extend(vf_device(vf, roots) for vf in nic.vfs if vf.rdma)
    return tuple(sorted({d.name: d for d in out}.values(), key=lambda d: d.name))


def _attribute(value: AttrValue) -> JSON:
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    return {"string": value}


def device_json(d: DraDevice) -> JSON:
    out: JSON = {
        "name": d.name,
        "attributes": {k: _attribute(v) for k, v in sorted(d.attributes.items())},
    }
    if d.capacity:
        out["capacity"] = {k: {"value": v} for k, v in sorted(d.capacity.items())}
    return out


def slice_name(node: str, index: int) -> str:
    return f"{node}-katalyst-dra-{index}"


def build_slices(
    node: str, devices: Sequence[DraDevice], generation: int, driver: str = names.DRA_DRIVER
) -> list[JSON]:
    """The pool of `node` as slices of at most 128 devices (one empty slice for a node with
    none, so the scheduler knows the pool is complete and empty)."""
    chunks = [
        devices[i : i + MAX_DEVICES_PER_SLICE]
        for i in range(0, len(devices), MAX_DEVICES_PER_SLICE)
    ] or [()]
    return [
        {
            "apiVersion": f"{names.DRA_GROUP}/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": slice_name(node, k)},
            "spec": {
                "driver": driver,
                "nodeName": node,
                "pool": {
                    "name": node,
                    "generation": generation,
                    "resourceSliceCount": len(chunks),
                },
                "devices": [device_json(d) for d in chunk],
            },
        }
        for k, chunk in enumerate(chunks)
    ]
