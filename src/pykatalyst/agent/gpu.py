"""The node's cards and who holds them, as Katalyst's CNR reports them (pure).

What a container holds comes from the kubelet's pod-resources `List`: the device ids it
was given under `nvidia.com/gpu` and `resource.katalyst.kubewharf.io/gpu_memory`. The
device plugin of this package advertises each card under ids `<card>::s<k>` (one of its
`shares_per_gpu` slots of `nvidia.com/gpu`) and `<card>::m<k>` (one unit of its memory);
another vendor's plugin advertises the card id itself. So a container with slots of a card
and no memory units there holds the card whole (all its memory), and one with memory units
holds those units.

`gpu_zones` turns the cards and the holds into the CNR's GPU zones: children of their Numa
zone (a card without a NUMA node under NUMA 0, as Katalyst does), named by device id, with
`nvidia.com/gpu` 1 (0 when unhealthy) and the card's memory units, the attributes
`numa`, `socket`, `pcie_switch` and `gpu_model`, and one allocation per pod.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from pykatalyst.agent.config_sections import DevicesConfig, GpuConfig
from pykatalyst.agent.host.devices import (
    DeviceSource,
    GpuDevice,
    NoDevices,
    NvmlDevices,
    SyntheticDevices,
    SysfsDevices,
)
from pykatalyst.agent.host.kubelet import DeviceGrant, KubeletDevices
from pykatalyst.api import names
from pykatalyst.topology.machine import CPUTopology

T = TypeVar("T")
SEP = "::"
SLOT = "s"
UNIT = "m"
GPU_RESOURCES = frozenset({names.RESOURCE_NVIDIA_GPU, names.RESOURCE_GPU_MEMORY})


def slot_id(card: str, k: int) -> str:
    return f"{card}{SEP}{SLOT}{k}"


def unit_id(card: str, k: int) -> str:
    return f"{card}{SEP}{UNIT}{k}"


def card_of(device_id: str) -> str:
    """The card a device id stands for: `<card>::s<k>` and `<card>::m<k>` are parts of
    `<card>`; any other id is a card."""
    card, sep, _ = device_id.rpartition(SEP)
    return card if sep else device_id


@dataclass(frozen=True, slots=True)
class GpuHold:
    """What one container holds of one card: memory units, or the whole card."""

    namespace: str
    pod: str
    container: str
    card: str
    units: int  # the card's memory units it holds (all of them when whole)
    whole: bool = False

    @property
    def pod_key(self) -> str:
        return f"{self.namespace}/{self.pod}"


def holds_from(granted: Iterable[DeviceGrant], per_gpu: int) -> list[GpuHold]:
    """The holds of the kubelet's grants: per container and card, the memory units it was
    given there, or the whole card when it has the card (or a slot of it) and no units."""
    cards: dict[tuple[str, str, str], set[str]] = {}
    units: dict[tuple[str, str, str], dict[str, int]] = {}
    for g in granted:
        key = (g.namespace, g.pod, g.container)
        if g.resource == names.RESOURCE_NVIDIA_GPU:
            cards.setdefault(key, set()).update(card_of(d) for d in g.device_ids)
        elif g.resource == names.RESOURCE_GPU_MEMORY:
            per = units.setdefault(key, {})
            for d in g.device_ids:
                per[card_of(d)] = per.get(card_of(d), 0) + 1
    out: list[GpuHold] = []
    for key in sorted(set(cards) | set(units)):
        mem = units.get(key, {})
        for card in sorted(cards.get(key, set()) | set(mem)):
            if card in mem:
                out.append(GpuHold(*key, card, min(mem[card], per_gpu)))
            else:
                out.append(GpuHold(*key, card, per_gpu, whole=True))
    return out


@dataclass(frozen=True, slots=True)
class CardUse:
    """What is taken of one card."""

    units: int = 0
    whole: bool = False
    holders: int = 0


def card_use(holds: Iterable[GpuHold]) -> dict[str, CardUse]:
    out: dict[str, CardUse] = {}
    for h in holds:
        u = out.get(h.card, CardUse())
        out[h.card] = CardUse(u.units + h.units, u.whole or h.whole, u.holders + 1)
    return out


# --- CNR zones ----------------------------------------------------------------------------


def _zone_numa(card: GpuDevice, numas: Sequence[int]) -> int:
    if card.numa in numas:
        return card.numa
    return numas[0] if numas else 0


def _attributes(card: GpuDevice, numa: int, socket: int | None) -> list[dict[str, str]]:
    attrs = [{"name": names.GPU_ATTR_NUMA, "value": str(numa)}]
    if socket is not None:
        attrs.append({"name": names.GPU_ATTR_SOCKET, "value": str(socket)})
    if card.pcie_switch:
        attrs.append({"name": names.GPU_ATTR_PCIE_SWITCH, "value": card.pcie_switch})
    if card.model:
        attrs.append({"name": names.GPU_ATTR_MODEL, "value": card.model})
    return attrs


def _allocations(
    holds: Sequence[GpuHold], uid_of: Callable[[str], str | None]
) -> list[dict[str, Any]]:
    per_pod: dict[str, int] = {}
    for h in holds:
        per_pod[h.pod_key] = per_pod.get(h.pod_key, 0) + h.units
    out = []
    for pod, units in sorted(per_pod.items()):
        uid = uid_of(pod)
        if uid is None:  # a pod the agent does not see (yet): listed at the next tick
            continue
        requests = {names.RESOURCE_NVIDIA_GPU: "1", names.RESOURCE_GPU_MEMORY: str(units)}
        out.append({"consumer": f"{pod}/{uid}", "requests": requests})
    return out


def gpu_zones(
    cards: Sequence[GpuDevice],
    holds: Sequence[GpuHold],
    per_gpu: int,
    topology: CPUTopology,
    uid_of: Callable[[str], str | None],
) -> dict[int, list[dict[str, Any]]]:
    """The GPU zones of each Numa zone, sorted by device id."""
    numas = sorted(topology.numa_nodes)
    socket_of = {n: s for s in topology.sockets for n in topology.numas_in_socket(s)}
    by_card: dict[str, list[GpuHold]] = {}
    for h in holds:
        by_card.setdefault(h.card, []).append(h)
    out: dict[int, list[dict[str, Any]]] = {}
    for card in sorted(cards, key=lambda c: c.id):
        numa = _zone_numa(card, numas)
        capacity = {names.RESOURCE_NVIDIA_GPU: "1", names.RESOURCE_GPU_MEMORY: str(per_gpu)}
        allocatable = dict(capacity)
        if not card.healthy:
            allocatable[names.RESOURCE_NVIDIA_GPU] = "0"
        zone: dict[str, Any] = {
            "type": names.ZONE_GPU,
            "name": card.id,
            "resources": {"allocatable": allocatable, "capacity": capacity},
            "attributes": _attributes(card, numa, socket_of.get(numa)),
        }
        allocs = _allocations(by_card.get(card.id, []), uid_of)
        if allocs:
            zone["allocations"] = allocs
        out.setdefault(numa, []).append(zone)
    return out


def resource_properties(cards: Sequence[GpuDevice]) -> list[dict[str, Any]]:
    """spec.nodeResourceProperties for a node with cards: the GPU zones' topology
    attributes, in order of priority; nothing without cards."""
    if not cards:
        return []
    return [
        {
            "propertyName": names.GPU_TOPOLOGY_ATTRIBUTE_KEY,
            "propertyValues": list(names.GPU_TOPOLOGY_ATTRIBUTES),
        }
    ]


# --- sources ------------------------------------------------------------------------------


def synthetic_cards(gpus: Iterable[GpuConfig]) -> list[GpuDevice]:
    return [
        GpuDevice(g.id, g.numa, g.pcie_switch, g.model, g.healthy, g.minor, g.memory_mib)
        for g in gpus
    ]


def reloading(
    path: str | Path, fallback: DevicesConfig, pick: Callable[[DevicesConfig], list[T]]
) -> Callable[[], list[T]]:
    """What `pick` takes of the agent's config file's `devices` section, read again at
    every call, so a device marked unhealthy there is reported so at the next poll; the
    last good list (first, `fallback`'s) while the file cannot be read or is refused."""
    last = pick(fallback)

    def load() -> list[T]:
        nonlocal last
        try:
            raw = yaml.safe_load(Path(path).read_text()) or {}
            section = DevicesConfig.model_validate(raw.get("devices") or {})
        except (OSError, ValueError, AttributeError):
            return last
        last = pick(section)
        return last

    return load


def reload_from(path: str | Path, fallback: DevicesConfig) -> Callable[[], list[GpuDevice]]:
    """Cards read again from the agent's config file (its `devices.gpus`) at every call."""
    return reloading(path, fallback, lambda d: synthetic_cards(d.gpus))


def device_source(cfg: DevicesConfig, config_path: str | Path | None = None) -> DeviceSource:
    """The source `devices.source` names; a synthetic one follows the config file."""
    if cfg.source == "synthetic":
        cards = synthetic_cards(cfg.gpus)
        return SyntheticDevices(
            reload_from(config_path, cfg) if config_path is not None else lambda: cards
        )
    if cfg.source == "sysfs":
        return SysfsDevices(cfg.sys_root, cfg.proc_root)
    if cfg.source == "nvml":
        return NvmlDevices(cfg.sys_root)
    return NoDevices()


def pod_uids(pods: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """namespace/name -> uid of pod objects."""
    out = {}
    for p in pods:
        meta = p.get("metadata") or {}
        if meta.get("uid"):
            out[f"{meta.get('namespace', '')}/{meta.get('name', '')}"] = str(meta["uid"])
    return out


def node_gpu_report(
    source: DeviceSource,
    kubelet: KubeletDevices | None,
    per_gpu: int,
    topology: CPUTopology,
    uid_of: Callable[[str], str | None],
) -> tuple[dict[int, list[dict[str, Any]]], list[dict[str, Any]]]:
    """The GPU zones per NUMA node and the spec properties; the grants are left out when
    the kubelet could not be asked (the zones then show capacity only)."""
    cards = source.gpus()
    holds = holds_from(kubelet.containers, per_gpu) if kubelet is not None else []
    return gpu_zones(cards, holds, per_gpu, topology, uid_of), resource_properties(cards)
