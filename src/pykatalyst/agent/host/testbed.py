"""A kubelet-like pod hierarchy on this machine's real cgroup v1 hierarchies.

For integration tests and benchmarks on a machine without a kubelet: pods and containers
are cgroups under a unique prefix (``<controller>/<prefix>/kubepods/...``, the cgroupfs
driver's layout), with the values the kubelet would give them (cpu shares from requests,
2 shares for best-effort, cpusets copied from the parent as runc does), and processes
started as their containers. `close()` kills the processes and removes every cgroup.

Processes join the cpu, cpuacct and cpuset hierarchies. They stay in the memory cgroup
they were started in unless `move_memory` is set: memory cgroups are created (their knobs
can be written and read back) without moving anyone out of a memory cgroup that some
outer supervisor may be accounting.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

from pykatalyst.agent.host.fake import container_id
from pykatalyst.agent.host.linux import LinuxHost

__all__ = ["SANDBOX", "CgroupTestbed", "testbed_unavailable_reason"]

SANDBOX = "POD"  # the container name the testbed gives a pod's sandbox (pause) cgroup

_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory")
_BASE = Path("/sys/fs/cgroup")


def testbed_unavailable_reason(base: Path = _BASE) -> str | None:
    """Why a testbed cannot be built here (None when it can): checked, not assumed."""
    if os.geteuid() != 0:
        return "needs root to create cgroups"
    for ctl in _CONTROLLERS:
        d = base / ctl
        if not (d / "cgroup.procs").exists():
            return f"no cgroup v1 {ctl} hierarchy at {d}"
        probe = d / f"pykatalyst-probe-{secrets.token_hex(4)}"
        try:
            probe.mkdir()
            probe.rmdir()
        except OSError as e:
            return f"cannot create a cgroup in {d}: {e.strerror}"
    return None


class CgroupTestbed:
    def __init__(
        self,
        prefix: str | None = None,
        base: Path = _BASE,
        move_memory: bool = False,
        node_millicpu: int | None = None,
        kubepods_shares: int | None = None,
    ) -> None:
        reason = testbed_unavailable_reason(base)
        if reason is not None:
            raise RuntimeError(f"cgroup testbed unavailable: {reason}")
        self.base = base
        self.prefix = prefix or f"pykatalyst-test-{secrets.token_hex(4)}"
        self.kubepods = f"{self.prefix}/kubepods"
        self._move_memory = move_memory
        self._procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self._dirs: list[str] = []
        self._pods: dict[str, tuple[str, str]] = {}  # uid -> (qos, cgroup)
        cpus = (base / "cpuset/cpuset.cpus").read_text().strip()
        node_milli = node_millicpu or 1000 * len(os.sched_getaffinity(0))
        # The kubelet gives kubepods the node's allocatable cpu as shares; a caller may
        # raise it to shield the pods from other load on a shared development machine (the
        # prefix too: it is the entity that competes with that load at the top).
        self._mkdir(self.prefix, shares=kubepods_shares)
        self._mkdir(self.kubepods, shares=kubepods_shares or _milli_to_shares(node_milli))
        self._mkdir(f"{self.kubepods}/burstable")
        self._mkdir(f"{self.kubepods}/besteffort", shares=2)
        self.all_cpus = cpus

    # -- building --------------------------------------------------------------------------

    def _mkdir(self, cgroup: str, shares: int | None = None) -> None:
        for ctl in _CONTROLLERS:
            d = self.base / ctl / cgroup
            d.mkdir(exist_ok=True)
            if ctl == "cpuset":
                parent = d.parent
                for name in ("cpuset.cpus", "cpuset.mems"):
                    if not (d / name).read_text().strip():
                        (d / name).write_text((parent / name).read_text().strip())
            if ctl == "cpu" and shares is not None:
                (d / "cpu.shares").write_text(str(shares))
        self._dirs.append(cgroup)

    def host(self) -> LinuxHost:
        return LinuxHost(driver="cgroupfs", kubepods=self.kubepods)

    def add_pod(
        self,
        uid: str,
        qos_class: str,
        containers: Mapping[str, int] | Sequence[str] = ("app",),
        sandbox: bool = False,
    ) -> str:
        """Create a pod with containers {name: cpu request in millicpu}; returns its cgroup.

        `sandbox` adds the pause container's cgroup (named `SANDBOX`), as container
        runtimes make one per pod: a child that holds every cpu until someone narrows it."""
        if qos_class not in ("guaranteed", "burstable", "besteffort"):
            raise ValueError(
                f"qos_class: invalid value {qos_class!r}; "
                "accepted: guaranteed, burstable, besteffort"
            )
        requests = (
            dict(containers) if isinstance(containers, Mapping) else dict.fromkeys(containers, 0)
        )
        parent = self.kubepods if qos_class == "guaranteed" else f"{self.kubepods}/{qos_class}"
        pod = f"{parent}/pod{uid}"
        total = sum(requests.values())
        self._mkdir(pod, shares=2 if qos_class == "besteffort" else _milli_to_shares(total))
        if sandbox:
            self._mkdir(f"{pod}/{container_id(uid, SANDBOX)}", shares=2)
        for name, milli in requests.items():
            self._mkdir(
                f"{pod}/{container_id(uid, name)}",
                shares=2 if qos_class == "besteffort" else _milli_to_shares(milli),
            )
        self._pods[uid] = (qos_class, pod)
        return pod

    def pod_cgroup(self, uid: str) -> str:
        return self._pods[uid][1]

    def container_cgroup(self, uid: str, name: str) -> str:
        return f"{self.pod_cgroup(uid)}/{container_id(uid, name)}"

    def spawn(self, uid: str, container: str, argv: Sequence[str]) -> subprocess.Popen[bytes]:
        """Start `argv` inside the container's cgroups (it joins them before it execs)."""
        cg = self.container_cgroup(uid, container)
        targets = [self.base / ctl / cg / "cgroup.procs" for ctl in ("cpu", "cpuacct", "cpuset")]
        if self._move_memory:
            targets.append(self.base / "memory" / cg / "cgroup.procs")

        def join() -> None:  # runs in the child between fork and exec
            for t in targets:
                with open(t, "w") as f:
                    f.write(str(os.getpid()))

        proc = subprocess.Popen(
            list(argv),
            preexec_fn=join,  # the child must sit in its cgroups before it execs
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._procs.append((uid, proc))
        return proc

    def path(self, cgroup: str, name: str) -> Path:
        ctl = name.split(".", 1)[0]
        return self.base / ctl / cgroup / name

    def read(self, cgroup: str, name: str) -> str:
        return self.path(cgroup, name).read_text().strip()

    def remove_pod(self, uid: str) -> None:
        """The pod is deleted: kill its processes and remove its cgroups."""
        pod = self.pod_cgroup(uid)
        for owner, p in self._procs:
            if owner == uid:
                _kill(p)
        self._procs = [(o, p) for o, p in self._procs if o != uid]
        for cg in sorted((d for d in self._dirs if d == pod or d.startswith(pod + "/")), key=len)[
            ::-1
        ]:
            self._rmdir(cg)
            self._dirs.remove(cg)
        del self._pods[uid]

    # -- teardown --------------------------------------------------------------------------

    def close(self) -> None:
        for _, p in self._procs:
            _kill(p)
        self._procs.clear()
        for cg in sorted(set(self._dirs), key=lambda c: c.count("/"), reverse=True):
            self._rmdir(cg)
        self._dirs.clear()

    def _rmdir(self, cgroup: str) -> None:
        for ctl in _CONTROLLERS:
            d = self.base / ctl / cgroup
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as e:
                    if e.errno != errno.EBUSY:
                        raise
                    time.sleep(0.02)  # a killed task is still leaving the cgroup

    def __enter__(self) -> CgroupTestbed:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _milli_to_shares(milli: int) -> int:
    """The kubelet's MilliCPUToShares."""
    if milli == 0:
        return 2
    return max(2, min(262144, milli * 1024 // 1000))


def _kill(p: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        p.send_signal(signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        p.wait(timeout=5)
