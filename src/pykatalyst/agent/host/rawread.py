"""Reading kernel files fast: a whole cgroup or proc file as bytes, the few keys a sample
needs from a flat keyed file, a cgroup's cpu and memory figures from its resolved files, and
its runnable task count from the taskstats netlink family. `LinuxHost` reads hundreds of
cgroups every tick through these."""

from __future__ import annotations

import os
import socket
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Final

_CHUNK = 65536


def read_bytes(path: str | bytes | Path) -> bytes | None:
    """The whole file, or None when it cannot be read. A bare `os.open`/`os.read` costs a
    third of `open().read()` (no buffered text wrapper, no decoder); cgroup and proc files
    are read tens of thousands of times a minute."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, _CHUNK)
        if len(data) == _CHUNK:  # seq files hand out at most a buffer per read
            parts = [data]
            while chunk := os.read(fd, _CHUNK):
                parts.append(chunk)
            data = b"".join(parts)
        return data
    except OSError:
        return None
    finally:
        os.close(fd)


def int_or_none(data: bytes | None) -> int | None:
    if data is None:
        return None
    try:
        return int(data)
    except ValueError:
        return None


def needles(*keys: str) -> tuple[tuple[bytes, bytes], ...]:
    return tuple((k.encode(), f"\n{k} ".encode()) for k in keys)


# The keys of the flat keyed files that samples use, per cgroup version.
CPU_STAT_V1: Final = needles("nr_periods", "nr_throttled", "throttled_time")
CPU_STAT_V2: Final = needles("usage_usec", "nr_periods", "nr_throttled", "throttled_usec")
USAGE_V2: Final = needles("usage_usec")
MEM_STAT_V1: Final = needles("total_rss", "total_cache", "total_shmem", "total_inactive_file")
MEM_STAT_V1_OWN: Final = needles("rss", "cache", "shmem", "inactive_file")
MEM_STAT_V2: Final = needles("anon", "file", "shmem", "inactive_file")


def pick(data: bytes, needles: tuple[tuple[bytes, bytes], ...]) -> dict[bytes, int]:
    """The given keys of a flat keyed file ("key value" lines), as `cgroupfs.parse_keyed`
    would read them. A real memory.stat has 40-60 lines of which a sample needs four:
    searching for those in C costs a fifth of splitting every line in Python."""
    buf = b"\n" + data
    out: dict[bytes, int] = {}
    for key, needle in needles:
        at = buf.find(needle)
        if at < 0:
            continue
        start = at + len(needle)
        end = buf.find(b"\n", start)
        try:
            out[key] = int(buf[start:] if end < 0 else buf[start:end])
        except ValueError:
            continue
    return out


_NETLINK_GENERIC: Final = 16
_GENL_ID_CTRL: Final = 0x10
_CTRL_CMD_GETFAMILY: Final = 3
_CTRL_ATTR_FAMILY_ID: Final = 1
_CTRL_ATTR_FAMILY_NAME: Final = 2
_CGROUPSTATS_CMD_GET: Final = 4
_CGROUPSTATS_CMD_ATTR_FD: Final = 1
_CGROUPSTATS_TYPE_CGROUP_STATS: Final = 1
_NLMSG_ERROR: Final = 2
_NLM_F_REQUEST: Final = 1
_NLMSGHDR: Final = struct.Struct("=IHHII")
_NLATTR: Final = struct.Struct("=HH")


def _nlattr(kind: int, data: bytes) -> bytes:
    size = _NLATTR.size + len(data)
    return _NLATTR.pack(size, kind) + data + b"\0" * (-size % 4)


class CgroupStatsLink:
    """Task counts of a cgroup v1 directory from the kernel's taskstats netlink family
    (CGROUPSTATS_CMD_GET), as Katalyst's metric collector gets container load: one request
    per cgroup instead of one /proc/<tid>/stat read per thread. The kernel answers for the
    tasks directly in that cgroup; callers add up the subtree."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_GENERIC)
        try:
            self._sock.settimeout(1.0)
            self._sock.bind((0, 0))
            self._seq = 0
            self._family = _GENL_ID_CTRL
            name = _nlattr(_CTRL_ATTR_FAMILY_NAME, b"TASKSTATS\0")
            attrs = self._request(_CTRL_CMD_GETFAMILY, name)
            family = None if attrs is None else attrs.get(_CTRL_ATTR_FAMILY_ID)
            if family is None or len(family) < 2:
                raise OSError("no taskstats netlink family")
            self._family = struct.unpack_from("=H", family)[0]
        except BaseException:
            self._sock.close()
            raise

    def _request(self, cmd: int, payload: bytes) -> dict[int, bytes] | None:
        """Send one generic netlink request; its reply's top-level attributes, or None
        when the kernel answers with an error."""
        self._seq = (self._seq + 1) & 0xFFFFFFFF
        body = struct.pack("=BBH", cmd, 1, 0) + payload
        size = _NLMSGHDR.size + len(body)
        head = _NLMSGHDR.pack(size, self._family, _NLM_F_REQUEST, self._seq, 0)
        self._sock.send(head + body)
        for _ in range(16):  # skip stale replies (an earlier request that timed out)
            reply = self._sock.recv(65536)
            if len(reply) < _NLMSGHDR.size:
                continue
            length, kind, _, seq, _ = _NLMSGHDR.unpack_from(reply)
            if seq != self._seq:
                continue
            if kind == _NLMSG_ERROR:
                return None
            attrs: dict[int, bytes] = {}
            off = _NLMSGHDR.size + 4  # genetlink header
            end = min(length, len(reply))
            while off + _NLATTR.size <= end:
                size, key = _NLATTR.unpack_from(reply, off)
                if size < _NLATTR.size:
                    break
                attrs[key & 0x3FFF] = reply[off + _NLATTR.size : off + size]
                off += (size + 3) & ~3
            return attrs
        raise OSError("no taskstats reply")

    def nr_running(self, cgroup_dir: str) -> int | None:
        """Runnable tasks directly in the cgroup (None: gone, or the kernel would not say)."""
        try:
            fd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            attrs = self._request(
                _CGROUPSTATS_CMD_GET, _nlattr(_CGROUPSTATS_CMD_ATTR_FD, struct.pack("=I", fd))
            )
        except OSError:
            return None
        finally:
            os.close(fd)
        stats = None if attrs is None else attrs.get(_CGROUPSTATS_TYPE_CGROUP_STATS)
        if stats is None or len(stats) < 40:
            return None
        # struct cgroupstats: nr_sleeping, nr_running, nr_stopped, nr_uninterruptible, nr_io_wait
        return int(struct.unpack_from("=5Q", stats)[1])


def task_state(stat: bytes) -> bytes | None:
    """The state letter of /proc/<pid>/stat (the command name may hold spaces and ')')."""
    end = stat.rfind(b")")
    if end < 0:
        return None
    rest = stat[end + 1 :].split(None, 1)
    return rest[0] if rest else None


@dataclass(slots=True)
class CgroupFiles:
    """The resolved file paths of one sampled cgroup and what is known to be missing."""

    cpu_dir: str
    cpu_stat: str
    cpu_usage: str | None  # cpuacct.usage (v1); v2 has usage_usec in cpu.stat
    mem_stat: str | None
    mem_usage: str | None
    cpu_psi: str
    mem_psi: str | None
    tasks: str  # the per-cgroup thread list: "tasks" (v1), "cgroup.threads" (v2)
    checked_at: float
    cpu_psi_missing: bool = False
    mem_psi_missing: bool = False
    task_dirs: list[str] | None = None  # the cgroup and its descendants, when listed
    counted: bool = False  # its task list was read at least once


def cpu_times(
    f: CgroupFiles, cpu_stat: dict[bytes, int], v2: bool
) -> tuple[float | None, float | None]:
    """The cgroup's cumulative cpu time and time throttled, in seconds (None: unknown)."""
    usage_s: float | None = None
    if v2:
        usec = cpu_stat.get(b"usage_usec")
        if usec is not None:
            usage_s = usec / 1e6
        throttled = cpu_stat.get(b"throttled_usec")
        return usage_s, None if throttled is None else throttled / 1e6
    nsec = None if f.cpu_usage is None else int_or_none(read_bytes(f.cpu_usage))
    if nsec is not None and nsec >= 0:
        usage_s = nsec / 1e9
    throttled = cpu_stat.get(b"throttled_time")
    return usage_s, None if throttled is None else throttled / 1e9


def memory_figures(
    f: CgroupFiles, v2: bool
) -> tuple[int | None, int | None, int | None, int | None, int | None]:
    """The cgroup's memory (usage, rss, cache, shmem, working set), None where unknown."""
    mem: dict[bytes, int] = {}
    usage: int | None = None
    if f.mem_stat is not None and f.mem_usage is not None:
        raw = read_bytes(f.mem_stat) or b""
        mem = pick(raw, MEM_STAT_V2 if v2 else MEM_STAT_V1)
        if not v2 and len(mem) < len(MEM_STAT_V1):
            mem |= pick(raw, MEM_STAT_V1_OWN)
        usage = int_or_none(read_bytes(f.mem_usage))
        if usage is not None and usage < 0:
            usage = None
    if v2:
        rss, cache = mem.get(b"anon"), mem.get(b"file")
        shmem, inactive = mem.get(b"shmem"), mem.get(b"inactive_file")
    else:
        # total_* cover the whole subtree; the bare keys only the cgroup's own tasks.
        rss = mem.get(b"total_rss", mem.get(b"rss"))
        cache = mem.get(b"total_cache", mem.get(b"cache"))
        shmem = mem.get(b"total_shmem", mem.get(b"shmem"))
        inactive = mem.get(b"total_inactive_file", mem.get(b"inactive_file"))
    working_set = None if usage is None else max(0, usage - (inactive or 0))
    return usage, rss, cache, shmem, working_set
