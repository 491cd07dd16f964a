"""Cgroup file names, formats and unit conversions, cgroup v1 and v2, in one place.

Everything that knows how a canonical knob value (see `base.Knob`) is spelled in a cgroup
file lives here, so that the rest of the agent never sees a v1/v2 difference. The module
does no I/O except `detect_mounts`, which reads a mount table and checks a few paths.

Kubelet cgroup layouts are described here too (`parse_pod_dir`, `parse_container_dir`):
the cgroupfs driver names pods ``pod<uid>`` inside ``kubepods[/burstable|/besteffort]``; the
systemd driver names them ``kubepods[-<qos>]-pod<uid with '_' for '-'>.slice`` and the
container runtime names containers ``<id>``, ``cri-containerd-<id>.scope``,
``crio-<id>.scope`` or ``docker-<id>.scope``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from pykatalyst.agent.host.base import CpuQuota, IoLatency, IoLimit, IoLimits, Knob, KnobValue
from pykatalyst.topology.cpuset import CPUSet

__all__ = [
    "MAX_PERIOD_US",
    "MAX_SHARES",
    "MAX_WEIGHT",
    "MIN_PERIOD_US",
    "MIN_QUOTA_US",
    "MIN_SHARES",
    "MIN_WEIGHT",
    "V1_CONTROLLERS",
    "CgroupMounts",
    "ContainerDir",
    "KnobFile",
    "MountEntry",
    "PodDir",
    "check_knob_value",
    "detect_mounts",
    "knob_controller",
    "knob_files",
    "parse_container_dir",
    "parse_cpu_max",
    "parse_io_latency",
    "parse_io_max",
    "parse_io_weight",
    "parse_keyed",
    "parse_knob",
    "parse_memory_value",
    "parse_mounts",
    "parse_pod_dir",
    "parse_pressure_some_avg10",
    "qos_classes",
    "qos_dir_name",
    "render_io_latency",
    "render_io_max",
    "render_knob",
    "render_quota_v1",
    "shares_to_weight",
    "values_equal",
    "weight_to_shares",
]

# cpu.shares bounds (kernel MIN_SHARES/MAX_SHARES) and cpu.weight bounds (v2).
MIN_SHARES: Final = 2
MAX_SHARES: Final = 262144
MIN_WEIGHT: Final = 1
MAX_WEIGHT: Final = 10000
# CFS bandwidth limits the kernel accepts (1 ms .. 1 s periods, quota at least 1 ms).
MIN_PERIOD_US: Final = 1000
MAX_PERIOD_US: Final = 1_000_000
MIN_QUOTA_US: Final = 1000
# A memory limit at or above this many bytes is the kernel's "no limit"
# (v1 reads back PAGE_COUNTER_MAX * PAGE_SIZE, about 2**63).
_UNLIMITED_BYTES: Final = 1 << 62

# io.weight (v2) and blkio.bfq.weight (v1) bounds; both default to 100.
MIN_IO_WEIGHT: Final = 1
MAX_IO_WEIGHT: Final = 10000
MAX_BFQ_WEIGHT: Final = 1000
# oom_score_adj bounds (OOM_SCORE_ADJ_MIN: never chosen; MAX: always chosen first).
MIN_OOM_SCORE_ADJ: Final = -1000
MAX_OOM_SCORE_ADJ: Final = 1000

# The v1 controllers the agent reads or writes.
V1_CONTROLLERS: Final = ("cpu", "cpuacct", "cpuset", "memory", "blkio")
# v1 controllers whose knobs are written when the machine mounts them (net_cls is often
# not mounted at all; its knob is then unsupported).
OPTIONAL_V1_CONTROLLERS: Final = ("net_cls",)
# The largest net_cls class id (a u32: tc major in the high 16 bits, minor in the low).
MAX_CLASSID: Final = 0xFFFF_FFFF
# v1 throttle files, in IoLimit's field order.
_V1_THROTTLE: Final = (
    ("rbps", "blkio.throttle.read_bps_device"),
    ("wbps", "blkio.throttle.write_bps_device"),
    ("riops", "blkio.throttle.read_iops_device"),
    ("wiops", "blkio.throttle.write_iops_device"),
)
_DEVICE: Final = re.compile(r"^[0-9]+:[0-9]+$")


# -- unit conversions ----------------------------------------------------------------------


def shares_to_weight(shares: int) -> int:
    """cgroup-v1 cpu.shares -> v2 cpu.weight, the conversion runc and the kubelet use.

    Integer arithmetic on purpose: it must give the very number the kubelet writes, so
    that the agent and the kubelet never fight over one unit of weight.
    """
    shares = min(max(shares, MIN_SHARES), MAX_SHARES)
    return 1 + ((shares - MIN_SHARES) * (MAX_WEIGHT - 1)) // (MAX_SHARES - MIN_SHARES)


def weight_to_shares(weight: int) -> int:
    """The smallest cpu.shares whose conversion gives `weight` (inverse of the above)."""
    weight = min(max(weight, MIN_WEIGHT), MAX_WEIGHT)
    span = MAX_SHARES - MIN_SHARES
    # smallest s with 1 + (s-2)*9999 // span >= weight, i.e. (s-2)*9999 >= (weight-1)*span
    return MIN_SHARES + -(-((weight - 1) * span) // (MAX_WEIGHT - 1))


# -- knob <-> files ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KnobFile:
    """One file write: `content` into `name` of the cgroup's `controller` directory."""

    controller: str  # v1 controller ("cpu", "cpuset", "memory"); "" on v2 (unified)
    name: str
    content: str


def knob_controller(knob: Knob) -> str:
    """The v1 controller that holds the knob's files."""
    if knob in (Knob.CPUSET_CPUS, Knob.CPUSET_MEMS):
        return "cpuset"
    if knob in (Knob.CPU_SHARES, Knob.CPU_QUOTA, Knob.CPU_IDLE, Knob.OOM_SCORE_ADJ):
        return "cpu"  # OOM_SCORE_ADJ: the processes are listed in the cpu hierarchy
    if knob in (Knob.IO_WEIGHT, Knob.IO_MAX, Knob.IO_LATENCY):
        return "blkio"
    if knob is Knob.NET_CLS_CLASSID:
        return "net_cls"
    return "memory"


def knob_files(knob: Knob, version: int) -> tuple[str, ...]:
    """The files that hold the knob, in the order they are read (empty: unsupported)."""
    if knob is Knob.CPUSET_CPUS:
        return ("cpuset.cpus",)
    if knob is Knob.CPUSET_MEMS:
        return ("cpuset.mems",)
    if knob is Knob.CPU_IDLE:
        return ("cpu.idle",)
    if knob is Knob.OOM_SCORE_ADJ:
        return ("cgroup.procs",)  # then /proc/<pid>/oom_score_adj of each (LinuxHost)
    if version == 1:
        return {
            Knob.CPU_SHARES: ("cpu.shares",),
            Knob.CPU_QUOTA: ("cpu.cfs_quota_us", "cpu.cfs_period_us"),
            Knob.MEMORY_LIMIT: ("memory.limit_in_bytes",),
            Knob.MEMORY_HIGH: (),
            Knob.MEMORY_LOW: (),
            Knob.MEMORY_MIN: (),
            Knob.MEMORY_RECLAIM: ("memory.force_empty",),
            Knob.IO_WEIGHT: ("blkio.bfq.weight",),
            Knob.IO_MAX: tuple(name for _, name in _V1_THROTTLE),
            Knob.IO_LATENCY: (),
            Knob.NET_CLS_CLASSID: ("net_cls.classid",),
        }[knob]
    return {
        Knob.CPU_SHARES: ("cpu.weight",),
        Knob.CPU_QUOTA: ("cpu.max",),
        Knob.MEMORY_LIMIT: ("memory.max",),
        Knob.MEMORY_HIGH: ("memory.high",),
        Knob.MEMORY_LOW: ("memory.low",),
        Knob.MEMORY_MIN: ("memory.min",),
        Knob.MEMORY_RECLAIM: ("memory.reclaim",),
        Knob.IO_WEIGHT: ("io.weight",),
        Knob.IO_MAX: ("io.max",),
        Knob.IO_LATENCY: ("io.latency",),
        Knob.NET_CLS_CLASSID: (),  # v2 has no net_cls: sockets are matched by cgroup
    }[knob]


def _accepted(knob: Knob) -> str:
    return {
        Knob.CPUSET_CPUS: "a non-empty CPUSet",
        Knob.CPUSET_MEMS: "a non-empty CPUSet of NUMA node ids",
        Knob.CPU_SHARES: f"an int in [{MIN_SHARES}, {MAX_SHARES}] (cgroup-v1 shares)",
        Knob.CPU_QUOTA: (
            f"a CpuQuota with quota_us None (unlimited) or >= {MIN_QUOTA_US} and period_us "
            f"in [{MIN_PERIOD_US}, {MAX_PERIOD_US}]"
        ),
        Knob.CPU_IDLE: "0 or 1",
        Knob.MEMORY_LIMIT: "None (unlimited) or a positive int of bytes",
        Knob.MEMORY_HIGH: "None (unlimited) or a positive int of bytes",
        Knob.MEMORY_LOW: "an int of bytes >= 0",
        Knob.MEMORY_MIN: "an int of bytes >= 0",
        Knob.MEMORY_RECLAIM: "a positive int of bytes",
        Knob.OOM_SCORE_ADJ: f"an int in [{MIN_OOM_SCORE_ADJ}, {MAX_OOM_SCORE_ADJ}]",
        Knob.IO_WEIGHT: f"an int in [{MIN_IO_WEIGHT}, {MAX_IO_WEIGHT}] (io.weight units)",
        Knob.IO_MAX: "IoLimits whose devices are 'MAJ:MIN' with limits None or ints > 0",
        Knob.IO_LATENCY: "IoLatency whose devices are 'MAJ:MIN' with targets in µs > 0",
        Knob.NET_CLS_CLASSID: f"an int in [0, {MAX_CLASSID:#x}] (0: no class)",
    }[knob]


def check_knob_value(knob: Knob, value: KnobValue) -> str | None:
    """Why `value` cannot be written to `knob` (None when it can), accepted values included."""
    ok: bool
    if knob in (Knob.CPUSET_CPUS, Knob.CPUSET_MEMS):
        ok = isinstance(value, CPUSet) and not value.is_empty()
    elif knob is Knob.CPU_QUOTA:
        ok = (
            isinstance(value, CpuQuota)
            and _is_int(value.period_us)
            and MIN_PERIOD_US <= value.period_us <= MAX_PERIOD_US
            and (
                value.quota_us is None
                or (_is_int(value.quota_us) and value.quota_us >= MIN_QUOTA_US)
            )
        )
    elif knob is Knob.CPU_SHARES:
        ok = _is_int(value) and MIN_SHARES <= value <= MAX_SHARES  # type: ignore[operator]
    elif knob is Knob.CPU_IDLE:
        ok = _is_int(value) and value in (0, 1)
    elif knob in (Knob.MEMORY_LOW, Knob.MEMORY_MIN):
        ok = _is_int(value) and value >= 0  # type: ignore[operator]
    elif knob is Knob.MEMORY_RECLAIM:
        ok = _is_int(value) and value > 0  # type: ignore[operator]
    elif knob is Knob.OOM_SCORE_ADJ:
        ok = _is_int(value) and MIN_OOM_SCORE_ADJ <= value <= MAX_OOM_SCORE_ADJ  # type: ignore[operator]
    elif knob is Knob.IO_WEIGHT:
        ok = _is_int(value) and MIN_IO_WEIGHT <= value <= MAX_IO_WEIGHT  # type: ignore[operator]
    elif knob is Knob.IO_MAX:
        ok = isinstance(value, IoLimits) and all(_io_limit_ok(lim) for lim in value.devices)
    elif knob is Knob.IO_LATENCY:
        ok = isinstance(value, IoLatency) and all(
            isinstance(d, str) and _DEVICE.match(d) and _is_int(t) and t > 0
            for d, t in value.targets
        )
    elif knob is Knob.NET_CLS_CLASSID:
        ok = _is_int(value) and 0 <= value <= MAX_CLASSID  # type: ignore[operator]
    else:
        ok = value is None or (_is_int(value) and value > 0)  # type: ignore[operator]
    if ok:
        return None
    return f"invalid value {value!r} for {knob.value}; accepted: {_accepted(knob)}"


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _io_limit_ok(lim: IoLimit) -> bool:
    return (
        isinstance(lim, IoLimit)
        and isinstance(lim.device, str)
        and bool(_DEVICE.match(lim.device))
        and all(
            v is None or (_is_int(v) and v > 0) for v in (lim.rbps, lim.wbps, lim.riops, lim.wiops)
        )
    )


def render_knob(knob: Knob, value: KnobValue, version: int) -> tuple[KnobFile, ...]:
    """The file writes that set `knob` to `value` (already checked), in a safe order.

    For a v1 quota the caller passes the current value through `render_quota_v1` instead,
    because the order of the two files depends on it; this gives quota-then-period.
    """
    ctl = knob_controller(knob) if version == 1 else ""
    if knob in (Knob.CPUSET_CPUS, Knob.CPUSET_MEMS):
        assert isinstance(value, CPUSet)
        return (KnobFile(ctl, knob_files(knob, version)[0], str(value)),)
    if knob is Knob.CPU_IDLE:
        return (KnobFile(ctl, "cpu.idle", str(value)),)
    if knob is Knob.NET_CLS_CLASSID:
        return (KnobFile(ctl, "net_cls.classid", str(value)),) if version == 1 else ()
    if knob is Knob.CPU_SHARES:
        assert isinstance(value, int)
        if version == 1:
            return (KnobFile(ctl, "cpu.shares", str(value)),)
        return (KnobFile(ctl, "cpu.weight", str(shares_to_weight(value))),)
    if knob is Knob.CPU_QUOTA:
        assert isinstance(value, CpuQuota)
        if version == 1:
            return render_quota_v1(value, None)
        quota = "max" if value.quota_us is None else str(value.quota_us)
        return (KnobFile(ctl, "cpu.max", f"{quota} {value.period_us}"),)
    if knob is Knob.IO_MAX:
        assert isinstance(value, IoLimits)
        return render_io_max(value, None, version)
    if knob is Knob.IO_LATENCY:
        assert isinstance(value, IoLatency)
        return render_io_latency(value, None, version)
    if knob is Knob.IO_WEIGHT:
        assert isinstance(value, int)
        if version == 1:
            return (KnobFile(ctl, "blkio.bfq.weight", str(min(value, MAX_BFQ_WEIGHT))),)
        return (KnobFile(ctl, "io.weight", f"default {value}"),)
    if knob is Knob.MEMORY_RECLAIM:
        assert isinstance(value, int)
        if version == 1:
            return (KnobFile(ctl, "memory.force_empty", "0"),)
        return (KnobFile(ctl, "memory.reclaim", str(value)),)
    if knob is Knob.OOM_SCORE_ADJ:
        raise ValueError("oom_score_adj is written per process (LinuxHost), not to a file")
    assert value is None or isinstance(value, int)
    if knob in (Knob.MEMORY_LOW, Knob.MEMORY_MIN):
        return () if version == 1 else (KnobFile(ctl, knob.value, str(value)),)
    if knob is Knob.MEMORY_LIMIT:
        if version == 1:
            return (KnobFile(ctl, "memory.limit_in_bytes", "-1" if value is None else str(value)),)
        return (KnobFile(ctl, "memory.max", "max" if value is None else str(value)),)
    if version == 1:
        return ()  # memory.high does not exist on cgroup v1
    return (KnobFile(ctl, "memory.high", "max" if value is None else str(value)),)


def render_quota_v1(new: CpuQuota, old: CpuQuota | None) -> tuple[KnobFile, ...]:
    """v1 quota and period are two files; the kernel checks each write on its own against
    the parent's and children's ratio, so write first the file whose change leaves the
    lower quota/period ratio in between (the old value may be unknown: quota first)."""
    quota = KnobFile("cpu", "cpu.cfs_quota_us", "-1" if new.quota_us is None else str(new.quota_us))
    period = KnobFile("cpu", "cpu.cfs_period_us", str(new.period_us))
    if old is None:
        return (quota, period)
    if old.period_us == new.period_us:
        return (quota,)
    if old.quota_us == new.quota_us:
        return (period,)

    def ratio(q: int | None, p: int) -> float:
        return float("inf") if q is None else q / p

    if ratio(new.quota_us, old.period_us) <= ratio(old.quota_us, new.period_us):
        return (quota, period)
    return (period, quota)


def render_io_max(new: IoLimits, old: IoLimits | None, version: int) -> tuple[KnobFile, ...]:
    """The writes that take io.max from `old` (None: unknown, nothing to clear) to `new`:
    one line per device, and devices that lose their limit are set back to unlimited
    ("max" on v2, 0 in v1's throttle files)."""
    ctl = "blkio" if version == 1 else ""
    wanted = {lim.device: lim for lim in new.devices}
    gone = [IoLimit(lim.device) for lim in (old.devices if old else ()) if lim.device not in wanted]
    out: list[KnobFile] = []
    for lim in [*new.devices, *gone]:
        if old is not None and lim in old.devices:
            continue
        if version == 1:
            for field_name, name in _V1_THROTTLE:
                v = getattr(lim, field_name)
                out.append(KnobFile(ctl, name, f"{lim.device} {0 if v is None else v}"))
        else:
            vals = " ".join(
                f"{k}={'max' if getattr(lim, k) is None else getattr(lim, k)}"
                for k in ("rbps", "wbps", "riops", "wiops")
            )
            out.append(KnobFile(ctl, "io.max", f"{lim.device} {vals}"))
    return tuple(out)


def render_io_latency(new: IoLatency, old: IoLatency | None, version: int) -> tuple[KnobFile, ...]:
    """io.latency lines for the devices whose target changes ("target=max" clears one)."""
    if version == 1:
        return ()
    have = dict(old.targets) if old else {}
    want = dict(new.targets)
    out = [
        KnobFile("", "io.latency", f"{d} target={t}") for d, t in new.targets if have.get(d) != t
    ]
    out += [KnobFile("", "io.latency", f"{d} target=max") for d in sorted(have) if d not in want]
    return tuple(out)


def parse_io_max(text: str) -> IoLimits:
    """v2 ``io.max``: "MAJ:MIN rbps=<n|max> wbps=.. riops=.. wiops=.." per line."""
    limits = []
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if not _DEVICE.match(parts[0]):
            raise ValueError(f"io.max: cannot read {line!r}; expected 'MAJ:MIN key=value ...'")
        vals: dict[str, int | None] = {}
        for item in parts[1:]:
            key, _, val = item.partition("=")
            if key in ("rbps", "wbps", "riops", "wiops"):
                vals[key] = None if val == "max" else int(val)
        limits.append(IoLimit(parts[0], **vals))
    return IoLimits.of(limits)


def _parse_v1_throttle(texts: Sequence[str]) -> IoLimits:
    by_dev: dict[str, dict[str, int | None]] = {}
    for (field_name, _), text in zip(_V1_THROTTLE, texts, strict=True):
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and _DEVICE.match(parts[0]):
                value = int(parts[1])
                by_dev.setdefault(parts[0], {})[field_name] = value if value > 0 else None
    return IoLimits.of([IoLimit(d, **v) for d, v in by_dev.items()])


def parse_io_latency(text: str) -> IoLatency:
    """v2 ``io.latency``: "MAJ:MIN target=<µs>" per line (``max`` or 0: no target)."""
    targets: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts or not _DEVICE.match(parts[0]):
            continue
        for item in parts[1:]:
            key, _, val = item.partition("=")
            if key == "target" and val.isdigit():
                targets[parts[0]] = int(val)
    return IoLatency.of(targets)


def parse_io_weight(text: str) -> int:
    """``io.weight`` (v2) or ``blkio.bfq.weight`` (v1): "default N" or "N" first."""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "default":
            return int(parts[1])
        if len(parts) == 1:
            return int(parts[0])
    raise ValueError(f"io weight: cannot read {text!r}; expected 'default <weight>'")


def parse_knob(knob: Knob, version: int, read: Callable[[str], str | None]) -> KnobValue:
    """The canonical value of `knob` from its files (`read(name)` gives a file's text or None
    when it is missing). Raises LookupError when a file is missing, ValueError when a file
    holds something this module cannot read."""
    names = knob_files(knob, version)
    if not names:
        raise LookupError(f"{knob.value} does not exist on cgroup v{version}")
    if knob in (Knob.MEMORY_RECLAIM, Knob.OOM_SCORE_ADJ):
        raise LookupError(f"{knob.value} is not read from a cgroup file")
    texts = []
    for name in names:
        text = read(name)
        if text is None:
            raise LookupError(f"{name} is missing")
        texts.append(text.strip())
    first = texts[0]
    if knob in (Knob.CPUSET_CPUS, Knob.CPUSET_MEMS):
        return CPUSet.parse(first)
    if knob in (Knob.CPU_IDLE, Knob.NET_CLS_CLASSID):
        return int(first)
    if knob is Knob.CPU_SHARES:
        return int(first) if version == 1 else weight_to_shares(int(first))
    if knob is Knob.CPU_QUOTA:
        if version == 1:
            quota = int(first)
            return CpuQuota(None if quota < 0 else quota, int(texts[1]))
        return parse_cpu_max(first)
    if knob is Knob.IO_WEIGHT:
        return parse_io_weight(first)
    if knob is Knob.IO_MAX:
        return _parse_v1_throttle(texts) if version == 1 else parse_io_max(first)
    if knob is Knob.IO_LATENCY:
        return parse_io_latency(first)
    if knob in (Knob.MEMORY_LOW, Knob.MEMORY_MIN):
        return parse_memory_value(first) or 0
    return parse_memory_value(first)


def parse_cpu_max(text: str) -> CpuQuota:
    """v2 ``cpu.max``: "<quota|max> <period>" (the period may be omitted on write only)."""
    parts = text.split()
    if not parts or len(parts) > 2:
        raise ValueError(f"cpu.max: cannot read {text!r}; expected '<quota|max> <period>'")
    quota = None if parts[0] == "max" else int(parts[0])
    period = int(parts[1]) if len(parts) == 2 else 100_000
    return CpuQuota(quota, period)


def parse_memory_value(text: str) -> int | None:
    """A memory limit file: "max" (v2), "-1" or a huge number (v1) mean no limit."""
    text = text.strip()
    if text == "max":
        return None
    value = int(text)
    if value < 0 or value >= _UNLIMITED_BYTES:
        return None
    return value


def values_equal(knob: Knob, a: KnobValue, b: KnobValue, version: int, page_size: int) -> bool:
    """Whether writing `a` over `b` would change nothing the kernel keeps: v2 weights are
    coarser than shares and memory limits are kept in whole pages."""
    if a == b:
        return True
    if knob is Knob.CPU_SHARES and version == 2 and isinstance(a, int) and isinstance(b, int):
        return shares_to_weight(a) == shares_to_weight(b)
    memory = (Knob.MEMORY_LIMIT, Knob.MEMORY_HIGH, Knob.MEMORY_LOW, Knob.MEMORY_MIN)
    if knob in memory and isinstance(a, int) and isinstance(b, int):
        return a // page_size == b // page_size
    if knob is Knob.IO_WEIGHT and version == 1 and isinstance(a, int) and isinstance(b, int):
        return min(a, MAX_BFQ_WEIGHT) == min(b, MAX_BFQ_WEIGHT)
    return False


# -- stat files ----------------------------------------------------------------------------


def parse_keyed(text: str) -> dict[str, int]:
    """Flat keyed files (``cpu.stat``, ``memory.stat``): one "key value" per line."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = int(parts[1])
            except ValueError:
                continue
    return out


def parse_pressure_some_avg10(text: str) -> float | None:
    """The ``some avg10`` figure of a PSI file (cgroup ``*.pressure`` or /proc/pressure/*)."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "some":
            for item in fields[1:]:
                key, _, val = item.partition("=")
                if key == "avg10":
                    return float(val)
    return None


# -- mounts --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MountEntry:
    mount_point: str
    fs_type: str
    options: tuple[str, ...]


def _unescape_mount(path: str) -> str:
    """/proc/*/mounts escapes space, tab, newline and backslash as octal."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def parse_mounts(text: str) -> list[MountEntry]:
    out = []
    # Only '\n' ends a line and only ' ' separates fields: the kernel escapes those two in
    # paths, but other bytes (Unicode separators included) may appear raw.
    for line in text.split("\n"):
        parts = [p for p in line.split(" ") if p]
        if len(parts) < 4:
            continue
        out.append(MountEntry(_unescape_mount(parts[1]), parts[2], tuple(parts[3].split(","))))
    return out


@dataclass(frozen=True, slots=True)
class CgroupMounts:
    """Where the cgroup hierarchies are: one unified dir (v2) or one dir per controller (v1)."""

    version: int
    unified: Path | None = None
    controllers: dict[str, Path] = field(default_factory=dict)

    def controller_dir(self, controller: str) -> Path | None:
        if self.version == 2:
            return self.unified
        return self.controllers.get(controller)


def _under(root: Path, absolute: str) -> Path:
    return root / absolute.lstrip("/")


def detect_mounts(root: Path, cgroup_root: Path | None = None) -> CgroupMounts:
    """Find the cgroup hierarchies of the machine whose filesystem root is `root`.

    With `cgroup_root` given, it is the unified hierarchy when it holds
    ``cgroup.controllers`` and otherwise the directory holding one dir per v1 controller.
    Otherwise /proc/self/mounts decides: any v1 hierarchy that carries the cpu controller
    means v1 (hybrid machines keep a cgroup2 mount with no controllers beside it); else a
    cgroup2 mount means v2. Without a mount table, ``sys/fs/cgroup`` is probed.
    """
    if cgroup_root is not None:
        return _probe_dir(cgroup_root)
    mounts_file = root / "proc/self/mounts"
    try:
        entries = parse_mounts(mounts_file.read_text())
    except OSError:
        entries = []
    v1: dict[str, Path] = {}
    unified: Path | None = None
    for entry in entries:
        if entry.fs_type == "cgroup":
            for ctl in V1_CONTROLLERS + OPTIONAL_V1_CONTROLLERS:
                if ctl in entry.options and ctl not in v1:
                    v1[ctl] = _under(root, entry.mount_point)
        elif entry.fs_type == "cgroup2" and unified is None:
            unified = _under(root, entry.mount_point)
    if "cpu" in v1:
        return CgroupMounts(1, unified=None, controllers=v1)
    if unified is not None:
        return CgroupMounts(2, unified=unified)
    return _probe_dir(root / "sys/fs/cgroup")


def _probe_dir(base: Path) -> CgroupMounts:
    if (base / "cgroup.controllers").exists():
        return CgroupMounts(2, unified=base)
    controllers: dict[str, Path] = {}
    if base.is_dir():
        for child in sorted(base.iterdir()):
            for ctl in child.name.split(","):
                known = ctl in V1_CONTROLLERS or ctl in OPTIONAL_V1_CONTROLLERS
                if known and ctl not in controllers and child.is_dir():
                    controllers[ctl] = child
    if "cpu" not in controllers:
        raise FileNotFoundError(
            f"no cgroup hierarchy at {base}: expected cgroup.controllers (v2) or "
            f"per-controller directories such as {base / 'cpu'} (v1)"
        )
    return CgroupMounts(1, controllers=controllers)


# -- kubelet layouts -----------------------------------------------------------------------

_HEX64: Final = re.compile(r"^[0-9a-f]{64}$")
_RUNTIME_PREFIXES: Final = ("cri-containerd-", "crio-", "docker-", "containerd-")
_QOS_CLASSES: Final = ("burstable", "besteffort")


@dataclass(frozen=True, slots=True)
class PodDir:
    uid: str
    qos_class: str


@dataclass(frozen=True, slots=True)
class ContainerDir:
    container_id: str


def qos_dir_name(qos_class: str, driver: str, kubepods: str) -> str:
    """The QoS-class directory name under the kubepods cgroup ('' for guaranteed)."""
    if qos_class == "guaranteed":
        return ""
    if driver == "systemd":
        return f"{_slice_stem(kubepods)}-{qos_class}.slice"
    return qos_class


def _slice_stem(kubepods: str) -> str:
    name = kubepods.rsplit("/", 1)[-1]
    return name.removesuffix(".slice")


def parse_pod_dir(name: str, parent_qos: str, driver: str) -> PodDir | None:
    """A pod cgroup directory name -> its uid (None when the name is not a pod's).

    `parent_qos` is the QoS class of the directory holding it ("guaranteed" directly under
    kubepods).
    """
    if driver == "systemd":
        if not name.endswith(".slice"):
            return None
        stem = name.removesuffix(".slice")
        marker = "-pod"
        at = stem.rfind(marker)
        if at < 0:
            return None
        uid = stem[at + len(marker) :].replace("_", "-")
    else:
        if not name.startswith("pod"):
            return None
        uid = name[3:]
    if not uid or "/" in uid:
        return None
    return PodDir(uid, parent_qos)


def parse_container_dir(name: str) -> ContainerDir | None:
    """A container cgroup directory name -> its runtime id (None for anything else, such as
    CRI-O's ``crio-conmon-<id>.scope`` monitor cgroups)."""
    stem = name.removesuffix(".scope")
    for prefix in _RUNTIME_PREFIXES:
        if stem.startswith(prefix):
            stem = stem[len(prefix) :]
            break
    if _HEX64.match(stem):
        return ContainerDir(stem)
    return None


def qos_classes() -> Sequence[str]:
    return _QOS_CLASSES
