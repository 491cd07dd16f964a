"""The node's GPUs, as the agent and its device plugin see them.

`DeviceSource` is the door; three implementations read the machine:

- `SyntheticDevices`: the cards listed in the agent's config (`devices.gpus`), for nodes
  without a GPU (tests, the simulator, a demo cluster) — the kubelet and the pods are real,
  the cards are not;
- `SysfsDevices`: NVIDIA's PCI functions under `/sys/bus/pci/devices` (vendor 0x10de, a
  display or 3D controller class), their NUMA node (`numa_node`, or, when firmware
  reports none as virtual machines' often do, the node holding all of the function's
  `local_cpulist`), the PCIe switch above them and, from
  `/proc/driver/nvidia/gpus/<address>/information`, their minor number and model;
- `NvmlDevices`: NVML through `nvidia-ml-py` (the `pykatalyst[gpu]` extra): the cards'
  UUIDs, models, minors and memory, and their health (a card NVML cannot query is
  unhealthy); NUMA node and PCIe switch come from sysfs by the card's bus id.

Every card has an `id` (the device id the cluster sees: a UUID with NVML, the PCI address
with sysfs, the configured id when synthetic), its NUMA node (-1 when the machine has
none), its PCIe switch and the device nodes a container needs to use it.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pykatalyst.extras import MissingExtra, require
from pykatalyst.topology.cpuset import CPUSet

NVIDIA_VENDOR = "0x10de"
GPU_CLASSES = ("0x0300", "0x0302")  # VGA-compatible controller, 3D controller
CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
NODE_DIR = re.compile(r"^node(\d+)$")


def repeated(ids: Sequence[str]) -> list[str]:
    """The ids that occur more than once, sorted."""
    return sorted(i for i, n in Counter(ids).items() if n > 1)


class DeviceUnavailable(Exception):
    """The cards cannot be read (no NVML, a failed call); the message says why."""


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """One card as the node has it."""

    id: str
    numa: int = -1  # -1: no NUMA node known
    pcie_switch: str = ""
    model: str = ""
    healthy: bool = True
    minor: int | None = None  # /dev/nvidia<minor>
    memory_mib: int | None = None

    def device_nodes(self) -> tuple[str, ...]:
        """The host device nodes a container holding this card needs (its own node; the
        control nodes are added once per container by the device plugin)."""
        return () if self.minor is None else (f"/dev/nvidia{self.minor}",)


class DeviceSource(Protocol):
    """Where the node's cards come from."""

    @property
    def name(self) -> str: ...

    def gpus(self) -> tuple[GpuDevice, ...]:
        """The cards now, sorted by id; DeviceUnavailable when they cannot be read."""
        ...


class NoDevices:
    """A node without GPUs."""

    name = "none"

    def gpus(self) -> tuple[GpuDevice, ...]:
        return ()


class SyntheticDevices:
    """Cards from configuration. `load` is asked on every call, so a source re-reading
    its file shows a card turned unhealthy (or back) at the next poll."""

    name = "synthetic"

    def __init__(self, load: Callable[[], Sequence[GpuDevice]]) -> None:
        self._load = load

    def gpus(self) -> tuple[GpuDevice, ...]:
        cards = tuple(sorted(self._load(), key=lambda g: g.id))
        dup = repeated([g.id for g in cards])
        if dup:
            raise DeviceUnavailable(f"devices.gpus: ids must be unique; repeated: {dup}")
        return cards


# --- sysfs --------------------------------------------------------------------------------


def read_text(path: Path) -> str | None:
    """A sysfs or procfs file's text, stripped; None when it cannot be read."""
    try:
        return path.read_text().strip()
    except OSError:
        return None


def read_int(text: str | None, default: int) -> int:
    """`text` as an integer; `default` when there is none or it is not one."""
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def pcie_switch_of(resolved: Path) -> str:
    """The PCIe switch a function hangs off, from its resolved sysfs path
    (/sys/devices/pci0000:00/<root port>/<switch up>/<switch down>/<device>): the upstream
    port of the nearest switch, or the root port when the device sits on it directly, or
    the root complex ("pci0000:00") when it is an integrated function."""
    parts = resolved.parts
    bridges = [p for p in parts[:-1] if BDF.match(p)]
    if len(bridges) >= 3:
        return bridges[-2]
    if bridges:
        return bridges[0]
    roots = [p for p in parts if p.startswith("pci")]
    return roots[-1] if roots else ""


def _nvidia_information(proc_root: Path, address: str) -> dict[str, str]:
    text = read_text(proc_root / "driver" / "nvidia" / "gpus" / address / "information") or ""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def _node_cpus(sys_root: Path) -> dict[int, CPUSet]:
    base = sys_root / "devices" / "system" / "node"
    out: dict[int, CPUSet] = {}
    try:
        entries = os.listdir(base)
    except OSError:
        return out
    for entry in entries:
        m = NODE_DIR.match(entry)
        text = read_text(base / entry / "cpulist") if m else None
        if m and text:
            try:
                out[int(m.group(1))] = CPUSet.parse(text)
            except ValueError:
                continue
    return out


def function_numa(sys_root: Path, function: Path) -> int:
    """The NUMA node of the PCI function at `function`: its `numa_node`; when that says
    none (-1, as many virtual machines' firmware does), the one node that holds every cpu
    of its `local_cpulist`; -1 when neither tells."""
    numa = read_int(read_text(function / "numa_node"), -1)
    if numa >= 0:
        return numa
    text = read_text(function / "local_cpulist")
    if not text:
        return -1
    try:
        local = CPUSet.parse(text)
    except ValueError:
        return -1
    holders = [n for n, cpus in _node_cpus(sys_root).items() if local and local <= cpus]
    return holders[0] if len(holders) == 1 else -1


@dataclass(frozen=True, slots=True)
class PciPlace:
    """Where a PCI function sits: its NUMA node and its PCIe switch."""

    numa: int
    pcie_switch: str


def pci_place(sys_root: Path, address: str) -> PciPlace | None:
    """The NUMA node and PCIe switch of the function at `address` ("0000:3b:00.0"); None
    when sysfs does not have it."""
    link = sys_root / "bus" / "pci" / "devices" / address
    if not link.exists():
        return None
    return PciPlace(function_numa(sys_root, link), pcie_switch_of(link.resolve()))


class SysfsDevices:
    """NVIDIA's PCI functions under `<sys_root>/bus/pci/devices`."""

    name = "sysfs"

    def __init__(self, sys_root: str = "/sys", proc_root: str = "/proc") -> None:
        self.sys_root = Path(sys_root)
        self.proc_root = Path(proc_root)

    def gpus(self) -> tuple[GpuDevice, ...]:
        base = self.sys_root / "bus" / "pci" / "devices"
        try:
            addresses = sorted(os.listdir(base))
        except OSError as exc:
            raise DeviceUnavailable(f"cannot list {base}: {exc.strerror}") from None
        out = []
        for address in addresses:
            dev = base / address
            if read_text(dev / "vendor") != NVIDIA_VENDOR:
                continue
            cls = read_text(dev / "class") or ""
            if not cls.startswith(GPU_CLASSES):
                continue
            place = pci_place(self.sys_root, address)
            info = _nvidia_information(self.proc_root, address)
            minor = info.get("Device Minor")
            out.append(
                GpuDevice(
                    id=address,
                    numa=place.numa if place else -1,
                    pcie_switch=place.pcie_switch if place else "",
                    model=info.get("Model", ""),
                    minor=int(minor) if minor and minor.isdigit() else None,
                )
            )
        return tuple(out)


# --- NVML ---------------------------------------------------------------------------------


def pci_address(bus_id: str | bytes) -> str:
    """NVML's bus id ("00000000:3B:00.0") as sysfs spells it ("0000:3b:00.0")."""
    text = bus_id.decode() if isinstance(bus_id, bytes) else bus_id
    domain, _, rest = text.strip().lower().partition(":")
    return f"{domain[-4:]}:{rest}"


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlDevices:
    """The cards NVML sees. `nvml` is the `pynvml` module of `nvidia-ml-py` (tests pass a
    fake); the session is opened on the first call and kept."""

    name = "nvml"

    def __init__(self, sys_root: str = "/sys", nvml: Any = None) -> None:
        self.sys_root = Path(sys_root)
        self._nvml = nvml
        self._open = False

    def _lib(self) -> Any:
        if self._nvml is None:
            try:
                self._nvml = require("pynvml", "gpu", "reading the GPUs through NVML")
            except MissingExtra as exc:
                raise DeviceUnavailable(str(exc)) from None
        if not self._open:
            try:
                self._nvml.nvmlInit()
            except Exception as exc:  # NVMLError: no driver, no library
                raise DeviceUnavailable(f"NVML init failed: {exc}") from None
            self._open = True
        return self._nvml

    def gpus(self) -> tuple[GpuDevice, ...]:
        lib = self._lib()
        try:
            count = int(lib.nvmlDeviceGetCount())
        except Exception as exc:
            raise DeviceUnavailable(f"NVML device count failed: {exc}") from None
        out = [self._card(lib, i) for i in range(count)]
        return tuple(sorted(out, key=lambda g: g.id))

    def _card(self, lib: Any, index: int) -> GpuDevice:
        handle = lib.nvmlDeviceGetHandleByIndex(index)
        uuid = _text(lib.nvmlDeviceGetUUID(handle))
        address = pci_address(lib.nvmlDeviceGetPciInfo(handle).busId)
        place = pci_place(self.sys_root, address)
        base = GpuDevice(
            id=uuid,
            numa=place.numa if place else -1,
            pcie_switch=place.pcie_switch if place else "",
        )
        try:
            return GpuDevice(
                id=uuid,
                numa=base.numa,
                pcie_switch=base.pcie_switch,
                model=_text(lib.nvmlDeviceGetName(handle)),
                minor=int(lib.nvmlDeviceGetMinorNumber(handle)),
                memory_mib=int(lib.nvmlDeviceGetMemoryInfo(handle).total) // 2**20,
            )
        except Exception:  # a card NVML cannot query is not handed out
            return GpuDevice(id=uuid, numa=base.numa, pcie_switch=base.pcie_switch, healthy=False)
