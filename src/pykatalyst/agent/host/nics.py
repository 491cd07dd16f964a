"""The node's network interfaces (NICs), as the agent reports them and the scheduler
gives out their bandwidth.

`NicSource` is the door; two implementations read the machine:

- `SyntheticNics`: the interfaces listed in the agent's config (`devices.nic.interfaces`),
  for tests, the simulator and demo clusters, and for interfaces in other network
  namespaces, which sysfs of the host namespace does not show;
- `SysfsNics`: the physical interfaces of the host network namespace under
  `/sys/class/net`, as Katalyst's agent reads them: an interface backed by a PCI function
  (a virtio NIC included) or a bonding master; loopback, veth pairs, bridges, tunnels and
  other virtual devices are left out. Its line rate is `speed` (Mbps; -1 when the driver
  does not say, as virtio's does not), its health `operstate` ("up"), its NUMA node
  `device/numa_node` (or the PCI function's, or the node holding its `local_cpulist`
  when firmware reports none), its PCIe switch the bridge above the PCI
  function (the same rule as for GPUs).

Every interface has a `name`, the network namespace it lives in (`netns`, "" for the
host's), and from those the identifier the cluster knows it by: `<netns>-<name>`, or the
name alone in the host namespace (Katalyst's `nic_selection_result` and NIC zone names).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pykatalyst.agent.host.devices import (
    BDF,
    DeviceUnavailable,
    function_numa,
    pcie_switch_of,
    read_int,
    read_text,
    repeated,
)
from pykatalyst.agent.host.sriov import VfDevice, is_representor, is_vf_netdev, read_vfs

UNKNOWN_SPEED = -1
HOST_NETNS = ""
BONDING_MASTERS = "bonding_masters"


def nic_identifier(netns: str, name: str) -> str:
    """How the cluster names an interface: `<netns>-<name>`, or `<name>` in the host's
    network namespace (Katalyst's resource identifier)."""
    return f"{netns}-{name}" if netns else name


@dataclass(frozen=True, slots=True)
class NicDevice:
    """One network interface as the node has it."""

    name: str
    netns: str = HOST_NETNS
    speed_mbps: int = UNKNOWN_SPEED  # line rate; -1: the driver does not say
    numa: int = -1  # -1: no NUMA node known
    pcie_switch: str = ""
    pci_address: str = ""  # "": not a PCI function (a bond)
    healthy: bool = True
    vfs: tuple[VfDevice, ...] = ()  # its SR-IOV virtual functions (host/sriov.py)

    @property
    def identifier(self) -> str:
        return nic_identifier(self.netns, self.name)

    @property
    def in_host_netns(self) -> bool:
        return self.netns == HOST_NETNS


class NicSource(Protocol):
    """Where the node's interfaces come from."""

    @property
    def name(self) -> str: ...

    def nics(self) -> tuple[NicDevice, ...]:
        """The interfaces now, sorted host namespace first, then by namespace and name;
        DeviceUnavailable when they cannot be read."""
        ...


def nic_order(nic: NicDevice) -> tuple[bool, str, str]:
    return (not nic.in_host_netns, nic.netns, nic.name)


class NoNics:
    """A node whose interfaces are not reported."""

    name = "none"

    def nics(self) -> tuple[NicDevice, ...]:
        return ()


class SyntheticNics:
    """Interfaces from configuration; `load` is asked on every call."""

    name = "synthetic"

    def __init__(self, load: Callable[[], Sequence[NicDevice]]) -> None:
        self._load = load

    def nics(self) -> tuple[NicDevice, ...]:
        out = tuple(sorted(self._load(), key=nic_order))
        dup = repeated([n.identifier for n in out])
        if dup:
            raise DeviceUnavailable(f"devices.nic.interfaces: repeated interfaces: {dup}")
        return out


# --- sysfs --------------------------------------------------------------------------------


def pci_function_of(resolved_device: Path) -> Path | None:
    """The PCI function behind an interface's resolved `device` link: the link itself
    for a PCI NIC, its parent for a virtio NIC (`.../0000:00:03.0/virtio2`); None when no
    PCI function is on the path."""
    path = resolved_device
    while path.name and not BDF.match(path.name):
        if path.parent == path:
            return None
        path = path.parent
    return path if BDF.match(path.name) else None


def speed_of(text: str | None) -> int:
    """sysfs `speed` in Mbps; UNKNOWN_SPEED when unreadable or negative (virtio says -1,
    a link that is down makes the read fail)."""
    value = read_int(text, UNKNOWN_SPEED)
    return value if value > 0 else UNKNOWN_SPEED


def read_nic(net_dir: Path, name: str, bonds: frozenset[str] = frozenset()) -> NicDevice | None:
    """The interface `name` of `<sys>/class/net`; None when it is not a physical one (an
    SR-IOV VF's own netdev and a VF representor are not: they are the PF's `vfs`)."""
    entry = net_dir / name
    device = entry / "device"
    if is_vf_netdev(entry) or is_representor(entry):
        return None
    function = pci_function_of(device.resolve()) if device.exists() else None
    if function is None and name not in bonds:
        return None
    numa = read_int(read_text(device / "numa_node"), -1)
    if numa < 0 and function is not None:
        numa = function_numa(net_dir.parent.parent, function)
    switch = pcie_switch_of(function) if function is not None else ""
    return NicDevice(
        name=name,
        speed_mbps=speed_of(read_text(entry / "speed")),
        numa=max(numa, -1),
        pcie_switch=switch,
        pci_address=function.name if function is not None else "",
        healthy=read_text(entry / "operstate") == "up",
        vfs=read_vfs(net_dir, name, function, max(numa, -1), switch),
    )


class SysfsNics:
    """The physical interfaces of the host network namespace under `<sys_root>/class/net`."""

    name = "sysfs"

    def __init__(self, sys_root: str = "/sys") -> None:
        self.sys_root = Path(sys_root)

    def nics(self) -> tuple[NicDevice, ...]:
        net_dir = self.sys_root / "class" / "net"
        try:
            entries = sorted(os.listdir(net_dir))
        except OSError as exc:
            raise DeviceUnavailable(f"cannot list {net_dir}: {exc.strerror}") from None
        bonds = frozenset((read_text(net_dir / BONDING_MASTERS) or "").split())
        out = []
        for name in entries:
            if name == BONDING_MASTERS:
                continue
            nic = read_nic(net_dir, name, bonds)
            if nic is not None:
                out.append(nic)
        return tuple(sorted(out, key=nic_order))
