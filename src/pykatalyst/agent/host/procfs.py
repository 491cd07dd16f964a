"""Parsers for the /proc and sysfs files the agent samples.

Pure text -> value functions: the I/O is `LinuxHost`'s. Sizes come out in bytes, times in
kernel ticks or seconds as named. A malformed line is skipped rather than fatal: a missing
metric means "unknown" to the agent, never a crash.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CpuTimes",
    "Pressure",
    "ZoneWatermarks",
    "parse_loadavg",
    "parse_meminfo",
    "parse_node_meminfo",
    "parse_pid_state",
    "parse_pressure",
    "parse_proc_stat_cpus",
    "parse_vmstat",
    "parse_zoneinfo",
]


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo -> {key: bytes} ("kB" values scaled; unit-less counts kept as is)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        if not sep:
            continue
        fields = rest.split()
        if not fields:
            continue
        try:
            value = int(fields[0])
        except ValueError:
            continue
        if len(fields) > 1 and fields[1] == "kB":
            value *= 1024
        out[key.strip()] = value
    return out


def parse_node_meminfo(text: str) -> dict[str, int]:
    """sys/devices/system/node/node<N>/meminfo ("Node 0 MemTotal:  123 kB") -> bytes."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        fields = line.split()
        # Node <n> <Key>: <value> [kB]
        if len(fields) < 4 or fields[0] != "Node" or not fields[2].endswith(":"):
            continue
        try:
            value = int(fields[3])
        except ValueError:
            continue
        if len(fields) > 4 and fields[4] == "kB":
            value *= 1024
        out[fields[2][:-1]] = value
    return out


def parse_vmstat(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 2:
            try:
                out[fields[0]] = int(fields[1])
            except ValueError:
                continue
    return out


def parse_loadavg(text: str) -> tuple[float, float, float]:
    fields = text.split()
    if len(fields) < 3:
        raise ValueError(f"/proc/loadavg: cannot read {text!r}")
    return float(fields[0]), float(fields[1]), float(fields[2])


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """Cumulative ticks of one cpu from /proc/stat."""

    busy: int
    total: int


def parse_proc_stat_cpus(text: str) -> dict[int, CpuTimes]:
    """Per-cpu lines of /proc/stat. Busy = everything but idle and iowait; guest time is
    already inside user/nice, so it is not counted twice."""
    out: dict[int, CpuTimes] = {}
    for line in text.splitlines():
        if not line.startswith("cpu") or line.startswith("cpu "):
            continue
        fields = line.split()
        try:
            cpu = int(fields[0][3:])
            ticks = [int(x) for x in fields[1:]]
        except ValueError:
            continue
        if len(ticks) < 4:
            continue
        # user nice system idle iowait irq softirq steal guest guest_nice
        total = sum(ticks[:8])
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
        out[cpu] = CpuTimes(busy=total - idle, total=total)
    return out


@dataclass(frozen=True, slots=True)
class RunQueueWait:
    """Cumulative run-queue figures of one cpu from /proc/schedstat."""

    wait_ns: int  # time tasks spent waiting to run on this cpu
    timeslices: int  # timeslices run on this cpu


def parse_schedstat(text: str) -> dict[int, RunQueueWait]:
    """The per-cpu lines of /proc/schedstat (version 15 and later: the 8th and 9th numbers
    are the run-queue wait in ns and the timeslices run)."""
    out: dict[int, RunQueueWait] = {}
    for line in text.splitlines():
        fields = line.split()
        if not fields or not fields[0].startswith("cpu") or len(fields) < 10:
            continue
        try:
            out[int(fields[0][3:])] = RunQueueWait(int(fields[8]), int(fields[9]))
        except ValueError:
            continue
    return out


@dataclass(frozen=True, slots=True)
class Pressure:
    """A PSI file: share of time (percent) some / all tasks stalled, over 10 s."""

    some_avg10: float | None = None
    full_avg10: float | None = None
    some_total_us: int | None = None


def parse_pressure(text: str) -> Pressure:
    some: dict[str, str] = {}
    full: dict[str, str] = {}
    for line in text.splitlines():
        fields = line.split()
        if not fields or fields[0] not in ("some", "full"):
            continue
        target = some if fields[0] == "some" else full
        for item in fields[1:]:
            key, _, val = item.partition("=")
            target[key] = val

    def num(d: dict[str, str], key: str) -> float | None:
        try:
            return float(d[key])
        except (KeyError, ValueError):
            return None

    total = num(some, "total")
    return Pressure(
        some_avg10=num(some, "avg10"),
        full_avg10=num(full, "avg10"),
        some_total_us=None if total is None else int(total),
    )


@dataclass(frozen=True, slots=True)
class ZoneWatermarks:
    """Sum over a NUMA node's zones, in pages."""

    min: int = 0
    low: int = 0
    high: int = 0
    free: int = 0


def parse_zoneinfo(text: str) -> dict[int, ZoneWatermarks]:
    """/proc/zoneinfo -> per NUMA node, the zones' watermarks and free pages summed (pages)."""
    acc: dict[int, dict[str, int]] = {}
    node: int | None = None
    for line in text.splitlines():
        if line.startswith("Node "):
            # "Node 0, zone   Normal"
            try:
                node = int(line.split()[1].rstrip(","))
            except (IndexError, ValueError):
                node = None
            if node is not None:
                acc.setdefault(node, {"min": 0, "low": 0, "high": 0, "free": 0})
            continue
        if node is None:
            continue
        fields = line.split()
        if len(fields) == 3 and fields[0] == "pages" and fields[1] == "free":
            key, raw = "free", fields[2]
        elif len(fields) == 2 and fields[0] in ("min", "low", "high"):
            key, raw = fields[0], fields[1]
        else:
            continue
        try:
            acc[node][key] += int(raw)
        except ValueError:
            continue
    return {n: ZoneWatermarks(**v) for n, v in acc.items()}


def parse_pid_state(text: str) -> str | None:
    """The state letter of /proc/<pid>/stat (the command name may hold spaces and ')')."""
    end = text.rfind(")")
    if end < 0:
        return None
    rest = text[end + 1 :].split()
    return rest[0] if rest else None
