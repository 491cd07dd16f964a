"""The node's NICs, the bandwidth each gives out and who holds it, as Katalyst's CNR
reports them (pure).

Capacity follows Katalyst's network resource plugin: per NIC, egress = line rate ×
`egress_capacity_rate` (0.94) and ingress = line rate × `ingress_capacity_rate` (0.9),
each truncated to whole Mbps; the configured reserve is taken from the first NIC (host
namespace first, then by name), from both directions. The zone's `net_bandwidth` is the
smaller direction (Katalyst does not tell them apart in requests): capacity before the
reserve, allocatable after it, and 0 allocatable on an unhealthy NIC. A reserve that
leaves a NIC nothing gives it 0 allocatable (Katalyst's agent refuses to start).

Who holds a NIC: the pods on the node with a `net_bandwidth` request and a
`nic_selection_result` naming it, each `<ns>/<name>/<uid>` with its request in Mbps.
NIC zones are children of their Socket zone (a NIC without a NUMA node under socket 0,
as Katalyst assumes NUMA node 0), named by the NIC's resource identifier.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pykatalyst.agent import sriov
from pykatalyst.agent.config_sections import DevicesConfig, NicConfig, NicsConfig
from pykatalyst.agent.gpu import reloading
from pykatalyst.agent.host.nics import (
    UNKNOWN_SPEED,
    NicDevice,
    NicSource,
    NoNics,
    SyntheticNics,
    SysfsNics,
    nic_order,
)
from pykatalyst.api import names
from pykatalyst.topology.machine import CPUTopology


@dataclass(frozen=True, slots=True)
class NicCapacity:
    """What one NIC gives out, in Mbps."""

    nic: NicDevice
    speed_mbps: int  # the line rate counted (the configured fallback where unknown)
    egress: int
    ingress: int
    reserved: int
    allocatable: int  # min(egress, ingress) - reserved, 0 when unhealthy or overreserved

    @property
    def capacity(self) -> int:
        return min(self.egress, self.ingress)


def capacities(nics: Sequence[NicDevice], cfg: NicsConfig) -> list[NicCapacity]:
    """Each NIC's bandwidth, in the order the reserve is applied (the first one holds it)."""
    out = []
    for i, nic in enumerate(sorted(nics, key=nic_order)):
        speed = nic.speed_mbps if nic.speed_mbps != UNKNOWN_SPEED else cfg.unknown_speed_mbps
        egress = int(speed * cfg.egress_capacity_rate)
        ingress = int(speed * cfg.ingress_capacity_rate)
        reserved = cfg.reserved_bandwidth_mbps if i == 0 else 0
        left = max(min(egress, ingress) - reserved, 0) if nic.healthy else 0
        out.append(NicCapacity(nic, speed, egress, ingress, reserved, left))
    return out


@dataclass(frozen=True, slots=True)
class NicHold:
    """Bandwidth one pod holds on one NIC (by its `nic_selection_result`)."""

    consumer: str  # <ns>/<name>/<uid>
    nic: str  # the NIC's resource identifier
    mbps: int


def socket_of(nic: NicDevice, topology: CPUTopology) -> int:
    """The socket whose zone a NIC hangs under: its NUMA node's, else the first one's."""
    for s in sorted(topology.sockets):
        if nic.numa in topology.numas_in_socket(s):
            return s
    numas = sorted(topology.numa_nodes)
    first = numas[0] if numas else 0
    for s in sorted(topology.sockets):
        if first in topology.numas_in_socket(s):
            return s
    return 0


def _attributes(c: NicCapacity, socket: int) -> list[dict[str, str]]:
    nic = c.nic
    rows = [
        (names.NIC_ATTR_RESOURCE_IDENTIFIER, nic.identifier),
        (names.NIC_ATTR_NETNS_NAME, nic.netns),
        (names.NIC_ATTR_NAME, nic.name),
        (names.GPU_ATTR_NUMA, str(nic.numa)),
        (names.GPU_ATTR_SOCKET, str(socket)),
        (names.GPU_ATTR_PCIE_SWITCH, nic.pcie_switch),
        (names.NIC_ATTR_SPEED, str(c.speed_mbps)),
        (names.NIC_ATTR_EGRESS, str(c.egress)),
        (names.NIC_ATTR_INGRESS, str(c.ingress)),
    ]
    keep = {names.NIC_ATTR_NETNS_NAME}  # an empty netns_name says: the host's
    return [{"name": k, "value": v} for k, v in rows if v or k in keep]


def nic_zones(
    caps: Sequence[NicCapacity],
    holds: Iterable[NicHold],
    topology: CPUTopology,
    vf_holds: Mapping[str, list[str]] | None = None,
) -> dict[int, list[dict[str, Any]]]:
    """The NIC zones of each Socket zone, sorted by identifier; a PF's SR-IOV VFs are its
    zone's children (agent/sriov.py), `vf_holds` the consumers holding each."""
    by_nic: dict[str, dict[str, int]] = {}
    for h in holds:
        per = by_nic.setdefault(h.nic, {})
        per[h.consumer] = per.get(h.consumer, 0) + h.mbps
    out: dict[int, list[dict[str, Any]]] = {}
    for c in sorted(caps, key=lambda c: c.nic.identifier):
        socket = socket_of(c.nic, topology)
        bw = names.RESOURCE_NET_BANDWIDTH
        zone: dict[str, Any] = {
            "type": names.ZONE_NIC,
            "name": c.nic.identifier,
            "resources": {
                "allocatable": {bw: str(c.allocatable)},
                "capacity": {bw: str(c.capacity)},
            },
            "attributes": _attributes(c, socket),
        }
        held = by_nic.get(c.nic.identifier, {})
        if held:
            zone["allocations"] = [
                {"consumer": who, "requests": {bw: str(mbps)}} for who, mbps in sorted(held.items())
            ]
        if c.nic.vfs:
            zone["children"] = sriov.vf_zones(c.nic, socket, dict(vf_holds or {}))
        out.setdefault(socket, []).append(zone)
    return out


@dataclass(frozen=True, slots=True)
class BandwidthPod:
    """A pod on the node as the NIC report reads it."""

    namespace: str
    name: str
    uid: str
    mbps: int  # its net_bandwidth request
    selection: str  # its nic_selection_result ("" without one)
    vf: str = ""  # its sriov_vf_result when it asks sriov_nic ("" otherwise)


def holds_of(pods: Iterable[BandwidthPod], known: Iterable[str]) -> list[NicHold]:
    """The holds of pods that ask bandwidth and name one of the `known` NICs."""
    ids = set(known)
    return [
        NicHold(f"{p.namespace}/{p.name}/{p.uid}", p.selection, p.mbps)
        for p in pods
        if p.mbps > 0 and p.selection in ids
    ]


def node_nic_report(
    source: NicSource, cfg: NicsConfig, pods: Iterable[BandwidthPod], topology: CPUTopology
) -> dict[int, list[dict[str, Any]]]:
    """The NIC zones per socket (DeviceUnavailable when the NICs cannot be read)."""
    pods = list(pods)
    caps = capacities(source.nics(), cfg)
    holds = holds_of(pods, (c.nic.identifier for c in caps))
    vfs = sriov.vf_holders((f"{p.namespace}/{p.name}/{p.uid}", p.vf) for p in pods)
    return nic_zones(caps, holds, topology, vfs)


# --- sources ------------------------------------------------------------------------------


def synthetic_nics(interfaces: Iterable[NicConfig]) -> list[NicDevice]:
    return [
        NicDevice(
            name=n.name,
            netns=n.netns,
            speed_mbps=n.speed_mbps,
            numa=n.numa,
            pcie_switch=n.pcie_switch,
            healthy=n.healthy,
            vfs=sriov.synthetic_vfs(
                n.name,
                n.netns,
                n.vfs,
                n.vf_rdma,
                n.vf_queue_counts,
                n.numa,
                n.pcie_switch,
                0x40 + i,
            ),
        )
        for i, n in enumerate(interfaces)
    ]


def nic_source(cfg: DevicesConfig, config_path: str | Path | None = None) -> NicSource:
    """The source `devices.nic.source` names; a synthetic one follows the config file."""
    if cfg.nic.source == "synthetic":
        nics = synthetic_nics(cfg.nic.interfaces)
        load = (
            reloading(config_path, cfg, lambda d: synthetic_nics(d.nic.interfaces))
            if config_path is not None
            else lambda: nics
        )
        return SyntheticNics(load)
    if cfg.nic.source == "sysfs":
        return SysfsNics(cfg.sys_root)
    return NoNics()


def allocatable_by_nic(zones: Mapping[int, Sequence[Mapping[str, Any]]]) -> dict[str, int | None]:
    """Each reported NIC zone's allocatable net_bandwidth (Mbps; None where it reports
    none), by the NIC's identifier."""
    out: dict[str, int | None] = {}
    for per_socket in zones.values():
        for zone in per_socket:
            value = (
                zone.get("resources", {}).get("allocatable", {}).get(names.RESOURCE_NET_BANDWIDTH)
            )
            out[str(zone.get("name", ""))] = None if value is None else int(value)
    return out
