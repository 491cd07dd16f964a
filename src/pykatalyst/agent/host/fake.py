"""Fake node trees: sysfs, /proc and a kubelet-made cgroup hierarchy under a directory.

`make_kubelet_tree` lays out what `LinuxHost` reads on a node (cgroup v1 or v2, cgroupfs
or systemd driver, containerd / CRI-O / docker container names), so that the agent can be
run and tested without a node. Writes to a fake tree are plain file writes: nothing is
enforced, no kernel checks a value, and stats move only when a test sets them
(`FakeNode.set_cpu_usage`, `set_memory`, `set_cpu_times`, ...).
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pykatalyst.agent.host import cgroupfs
from pykatalyst.agent.host.linux import LinuxHost
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology

__all__ = [
    "FakeNode",
    "FakePod",
    "container_id",
    "make_kubelet_tree",
    "make_procfs",
    "make_sysfs",
]

Runtime = Literal["containerd", "crio", "docker"]
QoSClass = Literal["guaranteed", "burstable", "besteffort"]

_V1_UNLIMITED = "9223372036854771712"
_GIB = 1 << 30


def container_id(pod_uid: str, name: str) -> str:
    """A stable 64-hex runtime id for a fake container."""
    return hashlib.sha256(f"{pod_uid}/{name}".encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class FakePod:
    uid: str
    qos_class: QoSClass = "burstable"
    containers: tuple[str, ...] = ("app",)
    with_sandbox: bool = False  # also a pause-container cgroup, as real runtimes make


def make_sysfs(root: Path, topology: CPUTopology) -> None:
    """sys/devices/system/{cpu,node} for `topology` (memory from its memory_per_numa)."""
    cpu_dir = root / "sys/devices/system/cpu"
    all_cpus = topology.all_cpus
    _put(cpu_dir / "online", f"{all_cpus}\n")
    _put(cpu_dir / "possible", f"{all_cpus}\n")
    _put(cpu_dir / "present", f"{all_cpus}\n")
    for info in topology.cpu_infos:
        t = cpu_dir / f"cpu{info.cpu}" / "topology"
        siblings = topology.siblings(info.cpu)
        package = topology.cpus_in_socket(info.socket)
        _put(t / "physical_package_id", f"{info.socket}\n")
        _put(t / "die_id", f"{info.die}\n")
        # core ids restart in each package on real machines
        _put(t / "core_id", f"{info.core}\n")
        _put(t / "core_cpus_list", f"{siblings}\n")
        _put(t / "thread_siblings_list", f"{siblings}\n")
        _put(t / "core_siblings_list", f"{package}\n")
        _put(t / "package_cpus_list", f"{package}\n")
    node_dir = root / "sys/devices/system/node"
    _put(node_dir / "online", f"{CPUSet.of(topology.numa_nodes)}\n")
    for numa in topology.numa_nodes:
        total = topology.memory_per_numa.get(numa, 16 * _GIB)
        d = node_dir / f"node{numa}"
        _put(d / "cpulist", f"{topology.cpus_in_numa(numa)}\n")
        _put(d / "meminfo", _node_meminfo(numa, total, free=total // 2, inactive_file=total // 8))


def _node_meminfo(numa: int, total: int, free: int, inactive_file: int) -> str:
    rows = [("MemTotal", total), ("MemFree", free), ("MemUsed", total - free)]
    rows += [("Inactive(file)", inactive_file)]
    return "".join(f"Node {numa} {k}:{v // 1024:>16} kB\n" for k, v in rows)


def make_procfs(root: Path, topology: CPUTopology) -> None:
    """/proc files the agent samples, with quiet defaults (tests move them)."""
    proc = root / "proc"
    total = sum(topology.memory_per_numa.values()) or 16 * _GIB * len(topology.numa_nodes)
    meminfo = {
        "MemTotal": total,
        "MemFree": total // 2,
        "MemAvailable": total * 3 // 4,
        "Cached": total // 8,
        "Shmem": total // 64,
    }
    _put(proc / "meminfo", "".join(f"{k}:{v // 1024:>16} kB\n" for k, v in meminfo.items()))
    _put(proc / "vmstat", "pgsteal_kswapd 0\npgsteal_direct 0\npgscan_kswapd 0\n")
    _put(proc / "loadavg", "0.00 0.00 0.00 1/100 1\n")
    _put(proc / "sys/vm/watermark_scale_factor", "10\n")
    for res in ("cpu", "memory", "io"):
        _put(proc / "pressure" / res, _PSI_ZERO)
    zones = []
    for numa in topology.numa_nodes:
        zones.append(
            f"Node {numa}, zone   Normal\n  pages free     1000\n        boost    0\n"
            f"        min      {100 + numa}\n        low      {125 + numa}\n"
            f"        high     {150 + numa}\n        spanned  5000\n"
        )
    _put(proc / "zoneinfo", "".join(zones))
    lines = ["cpu  0 0 0 0 0 0 0 0 0 0"]
    lines += [f"cpu{c} 0 0 0 0 0 0 0 0 0 0" for c in topology.all_cpus]
    _put(proc / "stat", "\n".join(lines) + "\nintr 0\nctxt 0\n")


class FakeNode:
    """A fake node under `root`: where things are, and knobs to move its stats."""

    def __init__(
        self,
        root: Path,
        topology: CPUTopology,
        version: int,
        driver: Literal["cgroupfs", "systemd"],
        runtime: Runtime,
        kubepods: str,
        comount_cpu_cpuacct: bool,
    ) -> None:
        self.root = root
        self.topology = topology
        self.version = version
        self.driver = driver
        self.runtime = runtime
        self.kubepods = kubepods.strip("/")
        self.cgroup_base = root / "sys/fs/cgroup"
        self._comount = comount_cpu_cpuacct
        self._pods: dict[str, FakePod] = {}

    # -- building --------------------------------------------------------------------------

    def controller_dir(self, controller: str) -> Path:
        if self.version == 2:
            return self.cgroup_base
        if self._comount and controller in ("cpu", "cpuacct"):
            return self.cgroup_base / "cpu,cpuacct"
        return self.cgroup_base / controller

    def _controllers(self) -> tuple[str, ...]:
        return ("",) if self.version == 2 else cgroupfs.V1_CONTROLLERS

    def make_cgroup(self, cgroup: str) -> None:
        """Create the cgroup (and missing parents) in every hierarchy, with default files."""
        parts = [p for p in cgroup.strip("/").split("/") if p]
        for i in range(1, len(parts) + 1):
            rel = "/".join(parts[:i])
            for ctl in self._controllers():
                d = self.controller_dir(ctl) / rel
                if not d.is_dir():
                    d.mkdir(parents=True)
                    self._default_files(d, ctl, self.controller_dir(ctl) / "/".join(parts[: i - 1]))

    def _default_files(self, d: Path, ctl: str, parent: Path) -> None:
        cpus = str(self.topology.all_cpus)
        mems = str(CPUSet.of(self.topology.numa_nodes))
        common = {"cgroup.procs": "", "tasks": ""} if self.version == 1 else {}
        files: dict[str, str] = dict(common)
        if self.version == 2:
            files |= {
                "cgroup.procs": "",
                "cgroup.threads": "",
                "cgroup.controllers": "cpuset cpu io memory pids\n",
                "cgroup.subtree_control": "cpuset cpu io memory pids\n",
                "cpu.weight": "100\n",
                "cpu.max": "max 100000\n",
                "cpu.idle": "0\n",
                "cpu.stat": _keyed(
                    usage_usec=0,
                    user_usec=0,
                    system_usec=0,
                    nr_periods=0,
                    nr_throttled=0,
                    throttled_usec=0,
                ),
                "cpuset.cpus": "\n",
                "cpuset.mems": "\n",
                "cpuset.cpus.effective": f"{cpus}\n",
                "cpuset.mems.effective": f"{mems}\n",
                "memory.current": "0\n",
                "memory.max": "max\n",
                "memory.high": "max\n",
                "memory.stat": _keyed(anon=0, file=0, shmem=0, inactive_file=0, active_file=0),
                "cpu.pressure": _PSI_ZERO,
                "memory.pressure": _PSI_ZERO,
            }
        else:
            if (ctl in ("cpu", "cpuacct") and self._comount) or ctl == "cpu":
                files |= {
                    "cpu.shares": "1024\n",
                    "cpu.cfs_quota_us": "-1\n",
                    "cpu.cfs_period_us": "100000\n",
                    "cpu.idle": "0\n",
                    "cpu.stat": _keyed(nr_periods=0, nr_throttled=0, throttled_time=0),
                }
            if (ctl in ("cpu", "cpuacct") and self._comount) or ctl == "cpuacct":
                files |= {"cpuacct.usage": "0\n"}
            if ctl == "cpuset":
                # runc copies the parent's sets into a new cpuset cgroup
                pc = _read_or(parent / "cpuset.cpus", f"{cpus}\n")
                pm = _read_or(parent / "cpuset.mems", f"{mems}\n")
                files |= {"cpuset.cpus": pc, "cpuset.mems": pm}
            if ctl == "memory":
                files |= {
                    "memory.limit_in_bytes": f"{_V1_UNLIMITED}\n",
                    "memory.usage_in_bytes": "0\n",
                    "memory.stat": _keyed(
                        cache=0,
                        rss=0,
                        shmem=0,
                        inactive_file=0,
                        total_cache=0,
                        total_rss=0,
                        total_shmem=0,
                        total_inactive_file=0,
                    ),
                }
        for name, text in files.items():
            p = d / name
            if not p.exists():
                p.write_text(text)

    def qos_cgroup(self, qos_class: str) -> str:
        top = self.kubepods_cgroup
        sub = cgroupfs.qos_dir_name(qos_class, self.driver, self.kubepods)
        return top if not sub else f"{top}/{sub}"

    @property
    def kubepods_cgroup(self) -> str:
        if self.driver == "systemd" and not self.kubepods.endswith(".slice"):
            return self.kubepods + ".slice"
        return self.kubepods

    def pod_cgroup(self, uid: str, qos_class: str | None = None) -> str:
        qos = qos_class or self._pods[uid].qos_class
        if self.driver == "systemd":
            stem = self.kubepods_cgroup.rsplit("/", 1)[-1].removesuffix(".slice")
            if qos != "guaranteed":
                stem += f"-{qos}"
            name = f"{stem}-pod{uid.replace('-', '_')}.slice"
        else:
            name = f"pod{uid}"
        return f"{self.qos_cgroup(qos)}/{name}"

    def container_cgroup(self, uid: str, container: str) -> str:
        cid = container_id(uid, container)
        if self.driver == "systemd":
            prefix = {"containerd": "cri-containerd-", "crio": "crio-", "docker": "docker-"}
            name = f"{prefix[self.runtime]}{cid}.scope"
        else:
            name = f"crio-{cid}" if self.runtime == "crio" else cid
        return f"{self.pod_cgroup(uid)}/{name}"

    def add_pod(self, pod: FakePod) -> str:
        """Create the pod's cgroups as the kubelet and runtime would; returns its cgroup."""
        self._pods[pod.uid] = pod
        for qos in ("burstable", "besteffort"):
            self.make_cgroup(self.qos_cgroup(qos))
        names = list(pod.containers) + (["POD"] if pod.with_sandbox else [])
        for name in names:
            self.make_cgroup(self.container_cgroup(pod.uid, name))
        self.make_cgroup(self.pod_cgroup(pod.uid))
        return self.pod_cgroup(pod.uid)

    def remove_pod(self, uid: str) -> None:
        """The pod is deleted: its cgroup directories disappear."""
        cg = self.pod_cgroup(uid)
        for ctl in self._controllers():
            shutil.rmtree(self.controller_dir(ctl) / cg, ignore_errors=True)
        self._pods.pop(uid, None)

    def host(self) -> LinuxHost:
        """A `LinuxHost` looking at this tree."""
        return LinuxHost(root=self.root, driver=self.driver, kubepods=self.kubepods, page_size=4096)

    # -- files and stats -------------------------------------------------------------------

    def path(self, cgroup: str, name: str) -> Path:
        """The file `name` of `cgroup` (its controller guessed from the name on v1)."""
        ctl = name.split(".", 1)[0]
        if ctl == "cgroup" or ctl == "tasks":
            ctl = "cpu"
        return self.controller_dir(ctl) / cgroup.strip("/") / name

    def read(self, cgroup: str, name: str) -> str:
        return self.path(cgroup, name).read_text().strip()

    def write(self, cgroup: str, name: str, text: str) -> None:
        self.path(cgroup, name).write_text(text)

    def set_cpu_usage(self, cgroup: str, seconds: float) -> None:
        """The cgroup's cumulative cpu time."""
        if self.version == 2:
            stat = cgroupfs.parse_keyed(self.read(cgroup, "cpu.stat"))
            stat["usage_usec"] = round(seconds * 1e6)
            self.write(cgroup, "cpu.stat", _keyed(**stat))
        else:
            self.write(cgroup, "cpuacct.usage", f"{round(seconds * 1e9)}\n")

    def set_throttling(self, cgroup: str, periods: int, throttled: int, throttled_s: float) -> None:
        stat = cgroupfs.parse_keyed(self.read(cgroup, "cpu.stat"))
        stat["nr_periods"], stat["nr_throttled"] = periods, throttled
        if self.version == 2:
            stat["throttled_usec"] = round(throttled_s * 1e6)
        else:
            stat["throttled_time"] = round(throttled_s * 1e9)
        self.write(cgroup, "cpu.stat", _keyed(**stat))

    def set_memory(
        self,
        cgroup: str,
        usage: int,
        rss: int = 0,
        cache: int = 0,
        shmem: int = 0,
        inactive_file: int = 0,
    ) -> None:
        if self.version == 2:
            self.write(cgroup, "memory.current", f"{usage}\n")
            stat = _keyed(
                anon=rss, file=cache, shmem=shmem, inactive_file=inactive_file, active_file=0
            )
        else:
            self.write(cgroup, "memory.usage_in_bytes", f"{usage}\n")
            stat = _keyed(
                cache=cache,
                rss=rss,
                shmem=shmem,
                inactive_file=inactive_file,
                total_cache=cache,
                total_rss=rss,
                total_shmem=shmem,
                total_inactive_file=inactive_file,
            )
        self.write(cgroup, "memory.stat", stat)

    def set_pressure(self, cgroup: str | None, resource: str, some_avg10: float) -> None:
        """PSI of a cgroup (v2) or, with cgroup None, of the machine."""
        text = (
            f"some avg10={some_avg10:.2f} avg60=0.00 avg300=0.00 total=0\n"
            "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
        )
        if cgroup is None:
            (self.root / "proc/pressure" / resource).write_text(text)
        else:
            self.write(cgroup, f"{resource}.pressure", text)

    def add_task(self, cgroup: str, pid: int, state: str = "S", comm: str = "app") -> None:
        """A task in the cgroup (all hierarchies) with a /proc/<pid>/stat in `state`."""
        files = (
            ("cgroup.procs", "cgroup.threads") if self.version == 2 else ("cgroup.procs", "tasks")
        )
        for ctl in self._controllers():
            d = self.controller_dir(ctl) / cgroup.strip("/")
            for name in files:
                p = d / name
                if p.exists():
                    p.write_text(p.read_text() + f"{pid}\n")
        _put(self.root / "proc" / str(pid) / "stat", f"{pid} ({comm}) {state} 1 1 1 0 -1 0\n")

    def set_cpu_times(self, busy: Mapping[int, int], idle: Mapping[int, int]) -> None:
        """Cumulative per-cpu ticks in /proc/stat (user time = busy, idle = idle)."""
        lines = ["cpu  0 0 0 0 0 0 0 0 0 0"]
        for c in self.topology.all_cpus:
            lines.append(f"cpu{c} {busy.get(c, 0)} 0 0 {idle.get(c, 0)} 0 0 0 0 0 0")
        (self.root / "proc/stat").write_text("\n".join(lines) + "\nintr 0\n")

    def set_loadavg(self, load1: float, load5: float, load15: float) -> None:
        (self.root / "proc/loadavg").write_text(f"{load1:.2f} {load5:.2f} {load15:.2f} 1/100 1\n")

    def set_kswapd_steal(self, pages: int) -> None:
        (self.root / "proc/vmstat").write_text(f"pgsteal_kswapd {pages}\npgsteal_direct 0\n")


_PSI_ZERO = (
    "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
)


def make_kubelet_tree(
    root: Path,
    pods: Iterable[FakePod] = (),
    version: int = 2,
    driver: Literal["cgroupfs", "systemd"] = "cgroupfs",
    runtime: Runtime = "containerd",
    kubepods: str = "kubepods",
    topology: CPUTopology | None = None,
    comount_cpu_cpuacct: bool = False,
) -> FakeNode:
    """A whole fake node under `root`: sysfs for `topology` (default 2 sockets x 4 cores x
    2 threads, one NUMA node per socket, 16 GiB each), /proc, a mount table, the cgroup
    hierarchy (v1 per-controller dirs or v2 unified) and kubelet's pod cgroups."""
    if version not in (1, 2):
        raise ValueError(f"version: invalid value {version!r}; accepted: 1, 2")
    if driver not in ("cgroupfs", "systemd"):
        raise ValueError(f"driver: invalid value {driver!r}; accepted: cgroupfs, systemd")
    if runtime not in ("containerd", "crio", "docker"):
        raise ValueError(f"runtime: invalid value {runtime!r}; accepted: containerd, crio, docker")
    topo = topology or CPUTopology.synthetic(2, 4, 2, 1, memory_per_numa=16 * _GIB)
    make_sysfs(root, topo)
    make_procfs(root, topo)
    node = FakeNode(root, topo, version, driver, runtime, kubepods, comount_cpu_cpuacct)
    mounts = [_mount("/", "ext4", "rw,relatime")]
    mounts.append(_mount("/sys/fs/cgroup", "tmpfs", "ro,nosuid,nodev,noexec,mode=755"))
    if version == 2:
        mounts.append(_mount("/sys/fs/cgroup", "cgroup2", "rw,nosuid,nodev,noexec,relatime"))
    else:
        seen: set[Path] = set()
        for ctl in cgroupfs.V1_CONTROLLERS:
            d = node.controller_dir(ctl)
            if d in seen:
                continue
            seen.add(d)
            mounts.append(_mount(f"/sys/fs/cgroup/{d.name}", "cgroup", f"rw,relatime,{d.name}"))
    _put(root / "proc/self/mounts", "".join(mounts))
    for ctl in node._controllers():
        d = node.controller_dir(ctl)
        d.mkdir(parents=True, exist_ok=True)
        node._default_files(d, ctl, d.parent / "__none__")
    node.make_cgroup(node.kubepods_cgroup)
    for q in ("burstable", "besteffort"):
        node.make_cgroup(node.qos_cgroup(q))
    for pod in pods:
        node.add_pod(pod)
    return node


def _mount(point: str, fs: str, opts: str) -> str:
    return f"{fs} {point} {fs} {opts} 0 0\n"


def _keyed(**values: int) -> str:
    return "".join(f"{k} {v}\n" for k, v in values.items())


def _read_or(path: Path, default: str) -> str:
    try:
        return path.read_text()
    except OSError:
        return default


def _put(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
