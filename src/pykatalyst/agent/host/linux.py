"""`LinuxHost`: the `Host` protocol over a real (or fake) machine's sysfs, /proc and cgroups.

Every path is taken relative to `root`, so a test or a user without a node can point the
host at a tree built by `agent.host.fake`. This module is the agent's I/O edge: it keeps the
previous cumulative counters so that it can hand out rates (cpu cores, busy ratios, reclaim
pages per second); every figure is read fresh on each call. Sampling runs every tick over
hundreds of cgroups, so it keeps what does not change between ticks: each cgroup's
resolved paths, its listed subtree and which of its optional files are missing (both
looked at again every `_RECHECK_S`), and a taskstats netlink socket for runnable counts.
"""

from __future__ import annotations

import contextlib
import errno as errno_mod
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Literal

from pykatalyst.agent.host import cgroupfs
from pykatalyst.agent.host.base import (
    ApplyResult,
    CgroupStats,
    ContainerCgroup,
    CpuQuota,
    HostSample,
    IoLatency,
    IoLimits,
    Knob,
    KnobValue,
    KnobWrite,
    MemoryInfo,
    NetApplyResult,
    NetShape,
    NumaMemory,
    PodCgroup,
    WriteFailure,
)
from pykatalyst.agent.host.cgroupfs import CgroupMounts, KnobFile
from pykatalyst.agent.host.netshape import NetShaper
from pykatalyst.agent.host.procfs import (
    CpuTimes,
    RunQueueWait,
    parse_loadavg,
    parse_meminfo,
    parse_node_meminfo,
    parse_pressure,
    parse_proc_stat_cpus,
    parse_schedstat,
    parse_vmstat,
    parse_zoneinfo,
)
from pykatalyst.agent.host.rawread import (
    CPU_STAT_V1,
    CPU_STAT_V2,
    USAGE_V2,
    CgroupFiles,
    CgroupStatsLink,
    cpu_times,
    int_or_none,
    memory_figures,
    pick,
    read_bytes,
    task_state,
)
from pykatalyst.topology.cpuset import CPUSet, CPUSetError
from pykatalyst.topology.machine import CPUTopology

__all__ = ["Driver", "LinuxHost"]

Driver = Literal["cgroupfs", "systemd", "auto"]
_DRIVERS = ("cgroupfs", "systemd", "auto")

# How long a cgroup's missing files (pressure files, on kernels without per-cgroup PSI) and
# its listed subtree are trusted before being looked for again.
_RECHECK_S = 30.0


# Hints for the kernel's terse refusals, keyed by (file, errno).
_HINTS = {
    ("cpuset.cpus", errno_mod.EINVAL): "cpus must be online and within the parent's cpuset.cpus",
    ("cpuset.mems", errno_mod.EINVAL): "mems must exist and lie within the parent's cpuset.mems",
    ("cpuset.cpus", errno_mod.EACCES): "cpus must lie within the parent's cpuset.cpus",
    ("cpuset.mems", errno_mod.EACCES): "mems must lie within the parent's cpuset.mems",
    ("cpuset.cpus", errno_mod.ERANGE): "a cpu id beyond what this machine has",
    ("cpu.shares", errno_mod.EINVAL): "the kernel ignores shares while cpu.idle is 1",
    ("cpu.weight", errno_mod.EINVAL): "the kernel ignores the weight while cpu.idle is 1",
    ("cpu.cfs_quota_us", errno_mod.EINVAL): "quota/period above the parent's (v1 is hierarchical)",
    ("memory.limit_in_bytes", errno_mod.EBUSY): "usage could not be reclaimed below the limit",
}


class LinuxHost:
    """The machine under `root` (``/`` on a node).

    `cgroup_root` overrides where the cgroup hierarchies are (the unified mount for v2, the
    directory of per-controller mounts for v1); by default /proc/self/mounts tells.
    `driver` is the kubelet's cgroup driver ("auto" looks for ``kubepods`` then
    ``kubepods.slice``); `kubepods` is the path of kubelet's top pod cgroup relative to the
    hierarchy root (without ``.slice`` for the systemd driver, which adds it).
    """

    def __init__(
        self,
        root: Path = Path("/"),
        cgroup_root: Path | None = None,
        driver: Driver = "auto",
        kubepods: str = "kubepods",
        page_size: int | None = None,
        net_shaper: NetShaper | None = None,
    ) -> None:
        if driver not in _DRIVERS:
            raise ValueError(f"driver: invalid value {driver!r}; accepted: {', '.join(_DRIVERS)}")
        if not kubepods.strip("/"):
            raise ValueError("kubepods: must name a cgroup path such as 'kubepods'")
        self._root = Path(root)
        self._mounts: CgroupMounts = cgroupfs.detect_mounts(self._root, cgroup_root)
        self._driver_arg: Driver = driver
        self._kubepods = kubepods.strip("/")
        self._page_size = page_size or os.sysconf("SC_PAGE_SIZE")
        self._topology: CPUTopology | None = None
        self._prev_cgroup_cpu: dict[str, tuple[float, float]] = {}
        self._files: dict[str, CgroupFiles] = {}
        # Runnable-task counts straight from the kernel, on a real v1 machine (None: not
        # tried yet; False: unavailable, /proc is read instead).
        self._link: CgroupStatsLink | Literal[False] | None = None
        self._prev_cpus: tuple[float, dict[int, CpuTimes]] | None = None
        self._prev_rq: dict[int, RunQueueWait] | None = None
        self._prev_kswapd: tuple[float, int] | None = None
        # String paths on the sampling hot path: pathlib costs more than the reads.
        self._bases: dict[str, str] = {}
        for ctl in cgroupfs.V1_CONTROLLERS + cgroupfs.OPTIONAL_V1_CONTROLLERS:
            base = self._mounts.controller_dir(ctl)
            if base is not None:
                self._bases[ctl] = str(base)
        self._proc = str(self._root / "proc")
        self._proc_b = os.fsencode(self._proc)
        self._net = net_shaper or NetShaper(cgroup2_mount=self._mounts.unified)

    # -- what kind of machine --------------------------------------------------------------

    @property
    def cgroup_version(self) -> int:
        return self._mounts.version

    @property
    def mounts(self) -> CgroupMounts:
        return self._mounts

    @property
    def page_size(self) -> int:
        return self._page_size

    @property
    def driver(self) -> Literal["cgroupfs", "systemd"]:
        """The cgroup driver in use (resolved from what exists when "auto")."""
        if self._driver_arg != "auto":
            return self._driver_arg
        base = self._primary_dir()
        if base is not None and not (base / self._kubepods).is_dir():
            systemd = self._systemd_kubepods()
            if (base / systemd).is_dir():
                return "systemd"
        return "cgroupfs"

    @property
    def kubepods_cgroup(self) -> str:
        """Kubelet's top pod cgroup, relative to the hierarchy root."""
        return self._systemd_kubepods() if self.driver == "systemd" else self._kubepods

    def qos_cgroup(self, qos_class: str) -> str:
        """The kubelet's cgroup of a QoS class ("guaranteed" is kubepods itself), relative
        to the hierarchy root: ``kubepods/besteffort`` with the cgroupfs driver,
        ``kubepods.slice/kubepods-besteffort.slice`` with systemd."""
        if qos_class not in cgroupfs.qos_classes():
            raise ValueError(
                f"qos_class: invalid value {qos_class!r}; "
                f"accepted: {', '.join(cgroupfs.qos_classes())}"
            )
        top = self.kubepods_cgroup
        sub = cgroupfs.qos_dir_name(qos_class, self.driver, self._kubepods)
        return f"{top}/{sub}" if sub else top

    def _systemd_kubepods(self) -> str:
        return self._kubepods if self._kubepods.endswith(".slice") else self._kubepods + ".slice"

    def topology(self) -> CPUTopology:
        if self._topology is None:
            self._topology = CPUTopology.from_sysfs(self._root)
        return self._topology

    def cgroup_dir(self, cgroup: str, controller: str = "cpu") -> Path | None:
        """Where the cgroup lives in the given v1 controller's hierarchy (any on v2)."""
        base = self._mounts.controller_dir(controller)
        return None if base is None else base / cgroup.strip("/")

    def _sdir(self, cgroup: str, controller: str) -> str | None:
        base = self._bases.get(controller)
        return None if base is None else f"{base}/{cgroup}"

    def _primary_dir(self) -> Path | None:
        return self._mounts.controller_dir("cpu")

    # -- discovery -------------------------------------------------------------------------

    def discover(self) -> list[PodCgroup]:
        base = self._primary_dir()
        if base is None:
            return []
        driver = self.driver
        kubepods = self.kubepods_cgroup
        top = base / kubepods
        pods: list[PodCgroup] = []
        qos_dirs = {
            cgroupfs.qos_dir_name(q, driver, self._kubepods): q for q in cgroupfs.qos_classes()
        }
        for entry in _subdirs(top):
            qos = qos_dirs.get(entry.name)
            if qos is not None:
                for pod_entry in _subdirs(entry):
                    self._add_pod(pods, pod_entry, f"{kubepods}/{entry.name}", qos, driver)
            else:
                self._add_pod(pods, entry, kubepods, "guaranteed", driver)
        return pods

    def _add_pod(
        self, pods: list[PodCgroup], entry: Path, parent: str, qos: str, driver: str
    ) -> None:
        found = cgroupfs.parse_pod_dir(entry.name, qos, driver)
        if found is None:
            return
        cgroup = f"{parent}/{entry.name}"
        containers = []
        for child in _subdirs(entry):
            c = cgroupfs.parse_container_dir(child.name)
            if c is not None:
                containers.append(
                    ContainerCgroup(
                        name=c.container_id,
                        container_id=c.container_id,
                        cgroup=f"{cgroup}/{child.name}",
                    )
                )
        pods.append(PodCgroup(found.uid, found.qos_class, cgroup, tuple(containers)))

    # -- sampling --------------------------------------------------------------------------

    def sample(self, now: float, cgroups: Sequence[str]) -> HostSample:
        stats: dict[str, CgroupStats] = {}
        wanted = set()
        for cg in cgroups:
            cg = cg.strip("/")
            wanted.add(cg)
            one = self._cgroup_stats(now, cg)
            if one is not None:
                stats[cg] = one
        # Forget counters and paths of cgroups nobody asks about any more (deleted pods).
        if len(self._files) > len(wanted) or len(stats) < len(wanted):
            for gone in [cg for cg in self._files if cg not in wanted or cg not in stats]:
                del self._files[gone]
        for gone in [cg for cg in self._prev_cgroup_cpu if cg not in stats]:
            del self._prev_cgroup_cpu[gone]

        cpu_psi_text = self._read(f"{self._proc}/pressure/cpu")
        return HostSample(
            time=now,
            cgroups=stats,
            cpu_usage_ratio=self._cpu_ratios(now),
            cpu_sched_wait_us=self._sched_wait(),
            load=self._load(),
            memory=self._memory_info(now),
            numa_memory=self._numa_memory(),
            cpu_psi_some_avg10=None if cpu_psi_text is None else _psi_avg10(cpu_psi_text),
        )

    def _cgroup_files(self, now: float, cg: str) -> CgroupFiles | None:
        f = self._files.get(cg)
        if f is None:
            cpu_dir = self._sdir(cg, "cpu")
            if cpu_dir is None:
                return None
            v2 = self.cgroup_version == 2
            acct = None if v2 else self._sdir(cg, "cpuacct")
            mem_dir = self._sdir(cg, "memory")
            f = CgroupFiles(
                cpu_dir=cpu_dir,
                cpu_stat=f"{cpu_dir}/cpu.stat",
                cpu_usage=None if acct is None else f"{acct}/cpuacct.usage",
                mem_stat=None if mem_dir is None else f"{mem_dir}/memory.stat",
                mem_usage=None
                if mem_dir is None
                else f"{mem_dir}/{'memory.current' if v2 else 'memory.usage_in_bytes'}",
                cpu_psi=f"{cpu_dir}/cpu.pressure",
                mem_psi=None if mem_dir is None else f"{mem_dir}/memory.pressure",
                tasks="cgroup.threads" if v2 else "tasks",
                checked_at=now,
            )
            self._files[cg] = f
        elif not 0 <= now - f.checked_at < _RECHECK_S:
            # Look again for what was missing (a pressure file, a new child cgroup).
            f.checked_at = now
            f.cpu_psi_missing = f.mem_psi_missing = False
            f.task_dirs = None
        return f

    def _cgroup_stats(self, now: float, cg: str) -> CgroupStats | None:
        f = self._cgroup_files(now, cg)
        if f is None:
            return None
        v2 = self.cgroup_version == 2
        cpu_stat_raw = read_bytes(f.cpu_stat)
        if cpu_stat_raw is None and not os.path.isdir(f.cpu_dir):
            return None
        cpu_stat = pick(cpu_stat_raw or b"", CPU_STAT_V2 if v2 else CPU_STAT_V1)
        usage_s, throttled_s = cpu_times(f, cpu_stat, v2)
        rate: float | None = None
        if usage_s is not None:
            prev = self._prev_cgroup_cpu.get(cg)
            if prev is not None and now > prev[0]:
                rate = max(0.0, (usage_s - prev[1]) / (now - prev[0]))
            self._prev_cgroup_cpu[cg] = (now, usage_s)
        usage, rss, cache, shmem, working_set = memory_figures(f, v2)
        cpu_psi = None
        if not f.cpu_psi_missing:
            cpu_psi = self._read(f.cpu_psi)
            f.cpu_psi_missing = cpu_psi is None
        mem_psi = None
        if f.mem_psi is not None and not f.mem_psi_missing:
            mem_psi = self._read(f.mem_psi)
            f.mem_psi_missing = mem_psi is None
        return CgroupStats(
            cpu_usage_cores=rate,
            cpu_usage_total_s=usage_s,
            nr_running=self._nr_running(f, rate),
            nr_periods=cpu_stat.get(b"nr_periods"),
            nr_throttled=cpu_stat.get(b"nr_throttled"),
            throttled_s=throttled_s,
            memory_usage=usage,
            memory_rss=rss,
            memory_cache=cache,
            memory_shmem=shmem,
            memory_working_set=working_set,
            memory_psi_some_avg10=None if mem_psi is None else _psi_avg10(mem_psi),
            cpu_psi_some_avg10=None if cpu_psi is None else _psi_avg10(cpu_psi),
        )

    def _nr_running(self, f: CgroupFiles, rate: float | None) -> int | None:
        """Runnable threads in the cgroup and below (the cgroup's cpu usage counts them all).

        Katalyst's container load is the smoothed count of runnable threads. A cgroup that
        used no cpu time at all since the last sample had nothing runnable worth counting
        (CFS hands every runnable task a slice within a period, throttled groups included),
        so it counts 0 without reading a task list; any other cgroup has each of its
        threads' state read from /proc. The subtree is listed again only every
        `_RECHECK_S` (or when a listed child has gone).
        """
        if f.task_dirs is None:
            f.task_dirs = list(_walk(f.cpu_dir))
        if rate == 0.0 and f.counted:
            return 0
        link = self._stats_link()
        if link is not None:
            total = 0
            for d in f.task_dirs:
                n = link.nr_running(d)
                if n is None:
                    break
                total += n
            else:
                f.counted = True
                return total
        seen = False
        running = 0
        proc = self._proc_b
        for d in f.task_dirs:
            raw = read_bytes(f"{d}/{f.tasks}")
            if raw is None:
                f.task_dirs = None  # a child went away: list the subtree again next time
                continue
            seen = True
            for tid in raw.split():
                stat = read_bytes(b"%s/%s/stat" % (proc, tid))
                if stat is not None and task_state(stat) == b"R":
                    running += 1
        f.counted = seen
        return running if seen else None

    def _stats_link(self) -> CgroupStatsLink | None:
        if self._link is None:
            self._link = False
            if self.cgroup_version == 1 and self._root == Path("/"):
                with contextlib.suppress(OSError):
                    self._link = CgroupStatsLink()
        return self._link or None

    def _cpu_ratios(self, now: float) -> list[float]:
        text = self._read(self._root / "proc/stat")
        if text is None:
            return []
        cur = parse_proc_stat_cpus(text)
        prev = self._prev_cpus
        self._prev_cpus = (now, cur)
        if prev is None or not cur:
            return []
        out = [0.0] * (max(cur) + 1)
        for cpu, t in cur.items():
            old = prev[1].get(cpu)
            if old is None:
                continue
            total = t.total - old.total
            if total > 0:
                out[cpu] = min(1.0, max(0.0, (t.busy - old.busy) / total))
        return out

    def _sched_wait(self) -> list[float]:
        """Per-cpu run-queue wait per timeslice since the last sample, in µs (empty
        without /proc/schedstat: kernels built without CONFIG_SCHEDSTATS)."""
        text = self._read(self._root / "proc/schedstat")
        if text is None:
            return []
        cur = parse_schedstat(text)
        prev, self._prev_rq = self._prev_rq, cur
        if prev is None or not cur:
            return []
        out = [0.0] * (max(cur) + 1)
        for cpu, rq in cur.items():
            old = prev.get(cpu)
            slices = rq.timeslices - old.timeslices if old is not None else 0
            if old is not None and slices > 0:
                out[cpu] = max(rq.wait_ns - old.wait_ns, 0) / slices / 1000.0
        return out

    def _load(self) -> tuple[float, float, float]:
        text = self._read(self._root / "proc/loadavg")
        if text is None:
            return (0.0, 0.0, 0.0)
        try:
            return parse_loadavg(text)
        except ValueError:
            return (0.0, 0.0, 0.0)

    def _memory_info(self, now: float) -> MemoryInfo | None:
        text = self._read(self._root / "proc/meminfo")
        if text is None:
            return None
        info = parse_meminfo(text)
        vm = parse_vmstat(self._read(self._root / "proc/vmstat") or "")
        steal_keys = [k for k in vm if k.startswith("pgsteal_kswapd")]
        kswapd_rate: float | None = None
        if steal_keys:
            steal = sum(vm[k] for k in steal_keys)
            if self._prev_kswapd is not None and now > self._prev_kswapd[0]:
                kswapd_rate = max(
                    0.0, (steal - self._prev_kswapd[1]) / (now - self._prev_kswapd[0])
                )
            self._prev_kswapd = (now, steal)
        wsf_text = self._read(self._root / "proc/sys/vm/watermark_scale_factor")
        wsf = int(wsf_text) if wsf_text is not None and wsf_text.strip().isdigit() else 10
        psi = self._read(self._root / "proc/pressure/memory")
        pressure = None if psi is None else parse_pressure(psi)
        total = info.get("MemTotal", 0)
        free = info.get("MemFree", 0)
        return MemoryInfo(
            total=total,
            free=free,
            available=info.get("MemAvailable", free),
            cached=info.get("Cached", 0),
            shmem=info.get("Shmem", 0),
            watermark_scale_factor=wsf,
            kswapd_steal_pages_per_s=kswapd_rate,
            psi_some_avg10=None if pressure is None else pressure.some_avg10,
            psi_full_avg10=None if pressure is None else pressure.full_avg10,
        )

    def _numa_memory(self) -> dict[int, NumaMemory]:
        node_dir = self._root / "sys/devices/system/node"
        marks = parse_zoneinfo(self._read(self._root / "proc/zoneinfo") or "")
        out: dict[int, NumaMemory] = {}
        for d in _subdirs(node_dir):
            if not d.name.startswith("node") or not d.name[4:].isdigit():
                continue
            node = int(d.name[4:])
            text = self._read(d / "meminfo")
            if text is None:
                continue
            info = parse_node_meminfo(text)
            wm = marks.get(node)
            page = self._page_size
            out[node] = NumaMemory(
                total=info.get("MemTotal", 0),
                free=info.get("MemFree", 0),
                file_inactive=info.get("Inactive(file)", 0),
                watermark_min=0 if wm is None else wm.min * page,
                watermark_low=0 if wm is None else wm.low * page,
                watermark_high=0 if wm is None else wm.high * page,
            )
        return out

    def same_value(self, knob: Knob, desired: KnobValue, actual: KnobValue) -> bool:
        return cgroupfs.values_equal(knob, desired, actual, self.cgroup_version, self._page_size)

    def knob_problem(self, knob: Knob, value: KnobValue) -> str | None:
        return cgroupfs.check_knob_value(knob, value)

    def memory_usage(self, cgroup: str) -> int | None:
        """Current memory charge of the cgroup in bytes (None when unknown)."""
        d = self.cgroup_dir(cgroup, "memory")
        if d is None:
            return None
        name = "memory.current" if self.cgroup_version == 2 else "memory.usage_in_bytes"
        text = self._read(d / name)
        return int(text) if text is not None and text.strip().isdigit() else None

    def cpu_usage_s(self, cgroup: str) -> float | None:
        """Cumulative cpu seconds of the cgroup (v1 cpuacct.usage, v2 cpu.stat usage_usec);
        None when unknown."""
        cg = cgroup.strip("/")
        if self.cgroup_version == 2:
            d = self._sdir(cg, "cpu")
            usec = None if d is None else pick(read_bytes(f"{d}/cpu.stat") or b"", USAGE_V2)
            value = None if not usec else usec.get(b"usage_usec")
            return None if value is None else value / 1e6
        d = self._sdir(cg, "cpuacct")
        nsec = None if d is None else int_or_none(read_bytes(f"{d}/cpuacct.usage"))
        return None if nsec is None or nsec < 0 else nsec / 1e9

    # -- knobs -----------------------------------------------------------------------------

    def read_knobs(self, cgroup: str) -> dict[Knob, KnobValue]:
        """The knobs the cgroup has now; a knob whose files are missing (or the whole cgroup,
        when it is gone) is absent."""
        cg = cgroup.strip("/")
        out: dict[Knob, KnobValue] = {}
        version = self.cgroup_version
        for knob in Knob:
            d = self._sdir(cg, cgroupfs.knob_controller(knob))
            if d is None:
                continue
            if knob is Knob.OOM_SCORE_ADJ:
                adj = self._oom_score_adj(d)
                if adj is not None:
                    out[knob] = adj
                continue
            try:
                out[knob] = cgroupfs.parse_knob(knob, version, _reader(d))
            except (LookupError, ValueError):
                continue
        return out

    def _pids(self, d: str) -> list[int] | None:
        text = self._read(f"{d}/cgroup.procs")
        if text is None:
            return None
        return [int(p) for p in text.split() if p.isdigit()]

    def _oom_score_adj(self, d: str) -> int | None:
        """The oom_score_adj every process of the cgroup has (None when they differ, when
        the cgroup has no process or is gone: the agent then writes its value)."""
        pids = self._pids(d)
        seen: set[int] = set()
        for pid in pids or ():
            text = self._read(f"{self._proc}/{pid}/oom_score_adj")
            if text is not None and text.strip().lstrip("-").isdigit():
                seen.add(int(text))
        return next(iter(seen)) if len(seen) == 1 else None

    def _write_oom_score_adj(self, w: KnobWrite, d: Path) -> WriteFailure | None:
        pids = self._pids(str(d))
        if pids is None:
            return WriteFailure(w, f"{w.cgroup}: cgroup is gone", vanished=True)
        for pid in pids:
            path = f"{self._proc}/{pid}/oom_score_adj"
            try:
                fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
                try:
                    os.write(fd, str(w.value).encode())
                finally:
                    os.close(fd)
            except OSError as e:
                if e.errno == errno_mod.ESRCH or e.errno == errno_mod.ENOENT:
                    continue  # the process exited meanwhile
                name = errno_mod.errorcode.get(e.errno or 0, str(e.errno))
                return WriteFailure(
                    w, f"{path}: writing {w.value} failed: {name} ({e.strerror})", errno=e.errno
                )
        return None

    def apply_net(self, shape: NetShape | None) -> NetApplyResult:
        """Egress shaping with tc and nft (`netshape`)."""
        return self._net.apply(shape)

    def apply(self, writes: Sequence[KnobWrite]) -> ApplyResult:
        applied: list[KnobWrite] = []
        failed: list[WriteFailure] = []
        for w in writes:
            failure = self._apply_one(w)
            if failure is None:
                applied.append(w)
            else:
                failed.append(failure)
        return ApplyResult(tuple(applied), tuple(failed))

    def _apply_one(self, w: KnobWrite) -> WriteFailure | None:
        problem = cgroupfs.check_knob_value(w.knob, w.value)
        if problem is not None:
            return WriteFailure(w, f"{w.cgroup}: {problem}")
        version = self.cgroup_version
        if not cgroupfs.knob_files(w.knob, version):
            return WriteFailure(
                w, f"{w.knob.value} does not exist on cgroup v{version}", unsupported=True
            )
        controller = cgroupfs.knob_controller(w.knob)
        d = self.cgroup_dir(w.cgroup, controller)
        if d is None:
            return WriteFailure(
                w, f"the {controller} cgroup controller is not mounted", unsupported=True
            )
        if w.knob is Knob.OOM_SCORE_ADJ:
            return self._write_oom_score_adj(w, d)
        if w.knob in (Knob.IO_MAX, Knob.IO_LATENCY):
            try:
                was = cgroupfs.parse_knob(w.knob, version, lambda n: self._read(d / n))
            except (LookupError, ValueError):
                was = None
            if isinstance(w.value, IoLimits):
                files = cgroupfs.render_io_max(
                    w.value, was if isinstance(was, IoLimits) else None, version
                )
            else:
                assert isinstance(w.value, IoLatency)
                files = cgroupfs.render_io_latency(
                    w.value, was if isinstance(was, IoLatency) else None, version
                )
        elif version == 1 and w.knob is Knob.CPU_QUOTA:
            assert isinstance(w.value, CpuQuota)
            try:
                old = cgroupfs.parse_knob(w.knob, 1, lambda n: self._read(d / n))
            except (LookupError, ValueError):
                old = None
            files = cgroupfs.render_quota_v1(w.value, old if isinstance(old, CpuQuota) else None)
        else:
            files = cgroupfs.render_knob(w.knob, w.value, version)
        for f in files:
            failure = self._write_file(w, d, f)
            if failure is not None and not _partly_reclaimed(w, failure):
                return failure
        return None

    def _write_file(self, w: KnobWrite, d: Path, f: KnobFile) -> WriteFailure | None:
        path = d / f.name
        try:
            fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
            try:
                os.write(fd, f.content.encode())
            finally:
                os.close(fd)
        except OSError as e:
            code = e.errno
            if code in (errno_mod.ENOENT, errno_mod.ENODEV) and not d.is_dir():
                primary = self.cgroup_dir(w.cgroup, "cpu")
                if primary is not None and primary != d and primary.is_dir():
                    return WriteFailure(
                        w, f"{d}: cgroup missing from the {f.controller} hierarchy", errno=code
                    )
                return WriteFailure(w, f"{w.cgroup}: cgroup is gone", vanished=True, errno=code)
            if code == errno_mod.ENODEV:
                return WriteFailure(w, f"{w.cgroup}: cgroup is gone", vanished=True, errno=code)
            if code == errno_mod.ENOENT:
                return WriteFailure(
                    w,
                    f"{path}: no such file (this kernel or cgroup version lacks {f.name})",
                    unsupported=True,
                    errno=code,
                )
            name = errno_mod.errorcode.get(code or 0, str(code))
            hint = _HINTS.get((f.name, code or 0))
            if code == errno_mod.EBUSY and f.name in ("cpuset.cpus", "cpuset.mems"):
                hint = self._blocking_children(d, f)
            detail = f"{path}: writing {f.content!r} failed: {name} ({e.strerror})"
            if hint:
                detail += f"; {hint}"
            return WriteFailure(w, detail, errno=code)
        return None

    def _blocking_children(self, d: Path, f: KnobFile) -> str:
        """Name the child cgroups that still hold what a cpuset narrowing takes away."""
        try:
            new = CPUSet.parse(f.content)
        except CPUSetError:
            return "a child cgroup still uses what is being removed"
        blocking = []
        for child in _subdirs(d):
            text = self._read(child / f.name)
            try:
                if text is not None and not CPUSet.parse(text).issubset(new):
                    blocking.append(f"{child.name} has {text.strip()}")
            except CPUSetError:
                continue
        if not blocking:
            return "a child cgroup still uses what is being removed"
        return "narrow these children first: " + ", ".join(blocking)

    @staticmethod
    def _read(path: str | Path) -> str | None:
        data = read_bytes(path)
        return None if data is None else data.decode("utf-8", "replace")


def _partly_reclaimed(w: KnobWrite, failure: WriteFailure) -> bool:
    """memory.reclaim answers EAGAIN when it freed less than asked: what it could is done."""
    return w.knob is Knob.MEMORY_RECLAIM and failure.errno == errno_mod.EAGAIN


def _reader(d: str) -> Callable[[str], str | None]:
    return lambda name: LinuxHost._read(f"{d}/{name}")


def _psi_avg10(text: str) -> float | None:
    return parse_pressure(text).some_avg10


def _subdirs(d: Path) -> list[Path]:
    # scandir knows directories from the listing itself: no stat per cgroup file.
    try:
        with os.scandir(d) as it:
            names = sorted(e.name for e in it if e.is_dir(follow_symlinks=False))
    except OSError:
        return []
    return [d / n for n in names]


def _walk(d: str) -> Iterator[str]:
    stack = [d]
    while stack:
        cur = stack.pop()
        yield cur
        try:
            with os.scandir(cur) as it:
                stack.extend(e.path for e in it if e.is_dir(follow_symlinks=False))
        except OSError:
            continue
