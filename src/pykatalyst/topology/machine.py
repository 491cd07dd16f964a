"""The machine model: which cpus share a physical core, a NUMA node and a socket.

Core ids in ``/sys`` are only unique within one package (two sockets both have a
``core_id`` 0), so the model names each physical core by its lowest-numbered cpu. That
id is unique machine-wide, stable across reboots and reads naturally in logs
("core 4" is the core that holds cpu 4).

NUMA ids are the kernel's node numbers; only nodes that hold cpus are listed in
``numa_nodes``, although memory-only nodes still show up in ``memory_per_numa``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pykatalyst.topology.cpuset import CPUSet, CPUSetError

__all__ = ["CPUInfo", "CPUTopology", "TopologyError"]


class TopologyError(ValueError):
    """A machine description (sysfs tree, JSON, synthetic shape) that is not usable."""


@dataclass(frozen=True, slots=True)
class CPUInfo:
    """Where one logical cpu sits. ``core`` is the lowest cpu id of its physical core."""

    cpu: int
    core: int
    socket: int
    numa: int
    die: int = 0


def _group(infos: Iterable[CPUInfo], key: str) -> dict[int, CPUSet]:
    masks: dict[int, int] = {}
    for info in infos:
        k = getattr(info, key)
        masks[k] = masks.get(k, 0) | (1 << info.cpu)
    return {k: CPUSet(masks[k]) for k in sorted(masks)}


@dataclass(frozen=True, slots=True)
class CPUTopology:
    """An immutable machine: per-cpu placement plus memory per NUMA node (bytes)."""

    cpu_infos: tuple[CPUInfo, ...]
    memory_per_numa: Mapping[int, int] = field(default_factory=dict, hash=False)
    _by_cpu: Mapping[int, CPUInfo] = field(init=False, repr=False, compare=False, hash=False)
    _numa: Mapping[int, CPUSet] = field(init=False, repr=False, compare=False, hash=False)
    _socket: Mapping[int, CPUSet] = field(init=False, repr=False, compare=False, hash=False)
    _core: Mapping[int, CPUSet] = field(init=False, repr=False, compare=False, hash=False)
    _all: CPUSet = field(init=False, repr=False, compare=False, hash=False)
    _threads: int = field(init=False, repr=False, compare=False, hash=False)
    _numa_by_cpu: Mapping[int, int] = field(init=False, repr=False, compare=False, hash=False)
    _sibling_ids: Mapping[int, tuple[int, ...]] = field(
        init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        infos = tuple(sorted(self.cpu_infos, key=lambda i: i.cpu))
        if not infos:
            raise TopologyError("a machine needs at least one cpu")
        by_cpu: dict[int, CPUInfo] = {}
        for info in infos:
            if info.cpu in by_cpu:
                raise TopologyError(f"cpu {info.cpu} is described twice")
            if min(info.cpu, info.core, info.socket, info.numa, info.die) < 0:
                raise TopologyError(f"negative id in {info}")
            by_cpu[info.cpu] = info
        cores = _group(infos, "core")
        for core, cpus in cores.items():
            members = [by_cpu[c] for c in cpus]
            if core != cpus.min():
                raise TopologyError(
                    f"core {core} must be named by its lowest cpu {cpus.min()} (cpus {cpus})"
                )
            if len({(m.socket, m.numa) for m in members}) != 1:
                raise TopologyError(f"core {core} (cpus {cpus}) spans sockets or NUMA nodes")
        memory = {int(k): int(v) for k, v in self.memory_per_numa.items()}
        for numa, size in memory.items():
            if size < 0:
                raise TopologyError(f"NUMA {numa} has negative memory {size}")
        object.__setattr__(self, "cpu_infos", infos)
        object.__setattr__(self, "memory_per_numa", MappingProxyType(dict(sorted(memory.items()))))
        object.__setattr__(self, "_by_cpu", MappingProxyType(by_cpu))
        object.__setattr__(self, "_numa", MappingProxyType(_group(infos, "numa")))
        object.__setattr__(self, "_socket", MappingProxyType(_group(infos, "socket")))
        object.__setattr__(self, "_core", MappingProxyType(cores))
        object.__setattr__(self, "_all", CPUSet.of(by_cpu))
        object.__setattr__(self, "_threads", max(len(c) for c in cores.values()))
        numa_by_cpu = {c: i.numa for c, i in by_cpu.items()}
        object.__setattr__(self, "_numa_by_cpu", MappingProxyType(numa_by_cpu))
        threads = {core: tuple(cpus) for core, cpus in cores.items()}
        sibling_ids = {c: threads[i.core] for c, i in by_cpu.items()}
        object.__setattr__(self, "_sibling_ids", MappingProxyType(sibling_ids))

    # -- shape ------------------------------------------------------------------------

    @property
    def num_cpus(self) -> int:
        return len(self.cpu_infos)

    @property
    def num_cores(self) -> int:
        return len(self._core)

    @property
    def num_sockets(self) -> int:
        return len(self._socket)

    @property
    def num_numa_nodes(self) -> int:
        return len(self._numa)

    @property
    def all_cpus(self) -> CPUSet:
        return self._all

    @property
    def numa_nodes(self) -> list[int]:
        return list(self._numa)

    @property
    def numa_by_cpu(self) -> Mapping[int, int]:
        """Each cpu's NUMA node (`numa_of` for every cpu at once, for loops over cpus)."""
        return self._numa_by_cpu

    @property
    def sibling_ids(self) -> Mapping[int, tuple[int, ...]]:
        """Each cpu's core threads, ascending, itself included (`siblings` as tuples)."""
        return self._sibling_ids

    @property
    def sockets(self) -> list[int]:
        return list(self._socket)

    @property
    def cores(self) -> list[int]:
        return list(self._core)

    @property
    def threads_per_core(self) -> int:
        """The most threads any core has (cores may have fewer when some are offline)."""
        return self._threads

    @property
    def numas_per_socket(self) -> int:
        """The most NUMA nodes found in one socket."""
        return max(len(self.numas_in_socket(s)) for s in self._socket)

    @property
    def total_memory(self) -> int:
        return sum(self.memory_per_numa.values())

    # -- lookups ----------------------------------------------------------------------

    def info(self, cpu: int) -> CPUInfo:
        try:
            return self._by_cpu[cpu]
        except KeyError:
            raise TopologyError(f"cpu {cpu} is not on this machine (cpus {self._all})") from None

    def numa_of(self, cpu: int) -> int:
        return self.info(cpu).numa

    def socket_of(self, cpu: int) -> int:
        return self.info(cpu).socket

    def core_of(self, cpu: int) -> int:
        return self.info(cpu).core

    def cpus_in_numa(self, numa: int) -> CPUSet:
        return self._lookup(self._numa, numa, "NUMA node")

    def cpus_in_socket(self, socket: int) -> CPUSet:
        return self._lookup(self._socket, socket, "socket")

    def cpus_in_core(self, core: int) -> CPUSet:
        """All threads of the physical core named ``core`` (its lowest cpu id)."""
        return self._lookup(self._core, core, "core")

    def siblings(self, cpu: int) -> CPUSet:
        """All threads of ``cpu``'s physical core, ``cpu`` included (like thread_siblings)."""
        return self._core[self.info(cpu).core]

    thread_siblings = siblings

    def numas_in_socket(self, socket: int) -> list[int]:
        cpus = self.cpus_in_socket(socket)
        return [n for n, c in self._numa.items() if not c.isdisjoint(cpus)]

    def socket_of_numa(self, numa: int) -> int:
        return self.info(self.cpus_in_numa(numa).min()).socket

    def cores_in(self, cpus: CPUSet) -> list[int]:
        """Cores that have at least one thread in ``cpus``, ascending."""
        return sorted({self._by_cpu[c].core for c in cpus if c in self._by_cpu})

    def numas_of(self, cpus: CPUSet) -> list[int]:
        """NUMA nodes that ``cpus`` touch, ascending."""
        return [n for n, c in self._numa.items() if not c.isdisjoint(cpus)]

    def memory_of_numa(self, numa: int) -> int:
        return self.memory_per_numa.get(numa, 0)

    @staticmethod
    def _lookup(table: Mapping[int, CPUSet], key: int, what: str) -> CPUSet:
        try:
            return table[key]
        except KeyError:
            raise TopologyError(f"no {what} {key} (have {sorted(table)})") from None

    # -- JSON ------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready description; summary fields are for readers and ignored on load."""
        return {
            "numCPUs": self.num_cpus,
            "numCores": self.num_cores,
            "sockets": {str(s): str(self._socket[s]) for s in self._socket},
            "numaNodes": {
                str(n): {
                    "cpus": str(self._numa[n]),
                    "socket": self.socket_of_numa(n),
                    "memoryBytes": self.memory_of_numa(n),
                }
                for n in self._numa
            },
            "cpus": [
                {"cpu": i.cpu, "core": i.core, "socket": i.socket, "numa": i.numa, "die": i.die}
                for i in self.cpu_infos
            ],
            "memoryPerNUMA": {str(k): v for k, v in self.memory_per_numa.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CPUTopology:
        try:
            rows = data["cpus"]
            infos = [
                CPUInfo(
                    cpu=_as_int(r["cpu"]),
                    core=_as_int(r["core"]),
                    socket=_as_int(r["socket"]),
                    numa=_as_int(r["numa"]),
                    die=_as_int(r.get("die", 0)),
                )
                for r in rows
            ]
            memory = {int(k): _as_int(v) for k, v in dict(data.get("memoryPerNUMA", {})).items()}
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise TopologyError(
                f"invalid topology JSON ({exc!r}): expected 'cpus' as a list of "
                "{cpu, core, socket, numa[, die]} integers and optional 'memoryPerNUMA' "
                "mapping NUMA id to bytes"
            ) from exc
        return cls(tuple(infos), memory)

    # -- builders ---------------------------------------------------------------------

    @classmethod
    def synthetic(
        cls,
        sockets: int = 2,
        cores_per_socket: int = 24,
        threads_per_core: int = 2,
        numa_per_socket: int = 1,
        memory_per_numa: int | Mapping[int, int] | None = None,
    ) -> CPUTopology:
        """A regular machine numbered the way Linux usually numbers x86 servers.

        First every physical core's first thread (socket 0's cores, then socket 1's, ...),
        then every core's second thread, and so on; so cpu ``i`` and ``i + #cores`` are
        hyperthread siblings. Each socket's cores are split evenly into its NUMA nodes.
        ``memory_per_numa`` is bytes per NUMA node (one figure for all, or a mapping).
        """
        for name, value in (
            ("sockets", sockets),
            ("cores_per_socket", cores_per_socket),
            ("threads_per_core", threads_per_core),
            ("numa_per_socket", numa_per_socket),
        ):
            if not isinstance(value, int) or value < 1:
                raise TopologyError(f"{name} must be a positive integer, got {value!r}")
        if cores_per_socket % numa_per_socket:
            raise TopologyError(
                f"cores_per_socket ({cores_per_socket}) must divide evenly into "
                f"numa_per_socket ({numa_per_socket}) NUMA nodes"
            )
        cores_per_numa = cores_per_socket // numa_per_socket
        total_cores = sockets * cores_per_socket
        infos = []
        for thread in range(threads_per_core):
            for socket in range(sockets):
                for c in range(cores_per_socket):
                    core = socket * cores_per_socket + c
                    infos.append(
                        CPUInfo(
                            cpu=thread * total_cores + core,
                            core=core,
                            socket=socket,
                            numa=socket * numa_per_socket + c // cores_per_numa,
                        )
                    )
        numas = range(sockets * numa_per_socket)
        if memory_per_numa is None:
            memory: dict[int, int] = {}
        elif isinstance(memory_per_numa, int):
            memory = dict.fromkeys(numas, memory_per_numa)
        else:
            memory = dict(memory_per_numa)
        return cls(tuple(infos), memory)

    @classmethod
    def from_sysfs(cls, root: Path = Path("/")) -> CPUTopology:
        """Read the topology below ``root`` (``/`` on a real node, a fake tree in tests).

        Uses ``sys/devices/system/cpu/online``, each online cpu's ``topology/`` ids, and
        ``sys/devices/system/node/node*/{cpulist,meminfo}``. Without node directories
        (kernels built without NUMA) everything is NUMA 0 and memory comes from
        ``proc/meminfo`` when present.

        ``proc/meminfo``'s MemTotal, when present, is the machine's memory: per-node
        figures that disagree with it by more than ``NODE_MEMORY_TOLERANCE`` are scaled to
        it (see ``_fit_memory``).
        """
        cpu_dir = root / "sys/devices/system/cpu"
        online = _read_cpuset(cpu_dir / "online")
        if online.is_empty():
            raise TopologyError(f"{cpu_dir / 'online'} lists no cpus")
        numa_of_cpu: dict[int, int] = {}
        memory: dict[int, int] = {}
        node_dir = root / "sys/devices/system/node"
        node_paths = (
            sorted(
                (p for p in node_dir.iterdir() if re.fullmatch(r"node[0-9]+", p.name)),
                key=lambda p: int(p.name[4:]),
            )
            if node_dir.is_dir()
            else []
        )
        for path in node_paths:
            numa = int(path.name[4:])
            for cpu in _read_cpuset(path / "cpulist"):
                if cpu in numa_of_cpu:
                    raise TopologyError(
                        f"cpu {cpu} is listed in both node{numa_of_cpu[cpu]} and node{numa}"
                    )
                numa_of_cpu[cpu] = numa
            total = _mem_total(path / "meminfo")
            if total is not None:
                memory[numa] = total
        machine_total = _mem_total(root / "proc/meminfo")
        if not node_paths:
            numa_of_cpu = dict.fromkeys(online, 0)
            if machine_total is not None:
                memory[0] = machine_total
        elif machine_total is not None:
            memory = _fit_memory(memory, machine_total, [int(p.name[4:]) for p in node_paths])
        raw: list[tuple[int, int, int, int]] = []  # cpu, socket, die, core_id
        for cpu in online:
            topo = cpu_dir / f"cpu{cpu}" / "topology"
            if cpu not in numa_of_cpu:
                raise TopologyError(f"online cpu {cpu} is in no {node_dir}/node*/cpulist")
            socket = max(_read_int(topo / "physical_package_id"), 0)
            core_id = _read_int(topo / "core_id")
            die_path = topo / "die_id"
            die = max(_read_int(die_path), 0) if die_path.exists() else 0
            raw.append((cpu, socket, die, core_id))
        first_cpu: dict[tuple[int, int, int], int] = {}
        for cpu, socket, die, core_id in raw:
            first_cpu.setdefault((socket, die, core_id), cpu)
        infos = tuple(
            CPUInfo(
                cpu=cpu,
                core=first_cpu[(socket, die, core_id)],
                socket=socket,
                numa=numa_of_cpu[cpu],
                die=die,
            )
            for cpu, socket, die, core_id in raw
        )
        return cls(infos, memory)


def _as_int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{value!r} is not an integer")
    return value


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise TopologyError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _read_cpuset(path: Path) -> CPUSet:
    text = _read_text(path)
    try:
        return CPUSet.parse(text)
    except CPUSetError as exc:
        raise TopologyError(f"{path}: {exc}") from exc


def _read_int(path: Path) -> int:
    text = _read_text(path).strip()
    try:
        return int(text)
    except ValueError:
        raise TopologyError(f"{path}: expected an integer, found {text!r}") from None


# Per-node MemTotal figures normally add up to /proc/meminfo's exactly; within this share
# they are the kernel's own split and are kept as they are.
NODE_MEMORY_TOLERANCE = 0.03


def _fit_memory(per_node: dict[int, int], machine_total: int, nodes: list[int]) -> dict[int, int]:
    """Per-node memory that adds up to the machine's MemTotal.

    Some machines (containers on a sandboxed kernel, some VMs) report node meminfo that
    covers only part of the memory /proc/meminfo says the machine has. Capacity published
    from the node figures would then understate the machine several times over, so the
    nodes are scaled in proportion to keep their split; the rounding remainder goes to
    the largest node so the sum is exact. Nodes without a meminfo share the total evenly
    when no node has one.
    """
    counted = sum(per_node.values())
    if counted <= 0:
        if not nodes or machine_total <= 0:
            return per_node
        share, rest = divmod(machine_total, len(nodes))
        return {n: share + (rest if i == 0 else 0) for i, n in enumerate(sorted(nodes))}
    if abs(counted - machine_total) <= NODE_MEMORY_TOLERANCE * machine_total:
        return per_node
    scaled = {n: v * machine_total // counted for n, v in per_node.items()}
    largest = max(scaled, key=lambda n: (scaled[n], -n))
    scaled[largest] += machine_total - sum(scaled.values())
    return scaled


_MEM_TOTAL = re.compile(r"^(?:Node\s+\d+\s+)?MemTotal:\s+(\d+)\s*kB\s*$", re.MULTILINE)


def _mem_total(path: Path) -> int | None:
    """MemTotal in bytes, or None when the file is absent."""
    if not path.exists():
        return None
    text = _read_text(path)
    match = _MEM_TOTAL.search(text)
    if match is None:
        raise TopologyError(f"{path}: no 'MemTotal: <n> kB' line")
    return int(match.group(1)) * 1024
