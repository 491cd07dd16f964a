"""Isolation with software nobody here wrote: nginx under paced load beside stress-ng/iperf3.

Real, on this machine (root, cgroup v1), through the node agent: a kubelet-like hierarchy
is built under a unique prefix (`CgroupTestbed`) and the agent (`Agent` over an in-memory
cluster holding the pods, as `benchmarks/isolation.py --mode agent`) finds the pods'
cgroups and writes their knobs.

The node is a network namespace of its own, joined to a client namespace through a
"wire" namespace that forwards between two veth pairs and sends toward the client at the
link's rate (`--link-mbit`, a token bucket in front of the machine's default queueing
discipline, as a node's NIC sends at its line rate from one queue). The node's side of
the first pair is its egress device: what the agent shapes when its network QoS is on.

- The shared_cores pod runs Debian's nginx (`nginx-light`, access log on the node's disk)
  serving a 612-byte page on the node's address, and the load generator, which sits in the
  client namespace: open-loop, requests at a fixed rate (`--rate`), each on one of a pool
  of keep-alive connections, its latency measured from its *scheduled* arrival (wrk2's
  correction: a request that waits for a late one counts its wait). The client runs as the
  shared pod's process because on this machine it has to run somewhere: as the service's
  caller it gets the service's protection. Every request and response crosses the link.
- Reclaimed_cores pods run antagonists, one kind at a time: `cpu` (stress-ng, a worker
  per cpu), `vm` (stress-ng, workers touching `--vm-bytes` each), `io` (stress-ng `--hdd`
  writers with O_DIRECT on an ext4 filesystem of their own disk: a loop device over a file
  written through once, with direct io to it, so that it behaves as a disk, not as page
  cache or as allocations in the node's filesystem) and
  `net` (iperf3 sending from the node to a receiver beside the client, over the same link
  as the service's responses).

Modes, interleaved in rounds so that drifting background load hits each alike:
  solo           nginx and its client alone;
  <kind>-kubelet the antagonist with the kubelet's settings only (best-effort pods at 2
                 cpu shares), no agent, no shaping;
  <kind>-agent   the same with the agent running (reclaimed pods under SCHED_IDLE, memory
                 limited to their reclaimed_memory, cpusets from its pools); for `io` also
                 its disk I/O knobs (blkio weights by level, the reclaimed pod's throttle
                 and the reclaimed root's cap on the antagonist's disk), for `net` its
                 egress QoS on the node's device (an HTB class per level, net_cls class
                 ids, nftables classification);
  net-agent-bw   with `--service-mbit N`: the nginx pod asks N Mbps of `net_bandwidth` on
                 the node's device (its `nic_selection_result` names it) and the agent
                 gives it a class of its own guaranteed N, the reclaimed class capped to
                 what N leaves; `net-agent` then shapes by level only.

Prints p50/p99 per mode, the node's busy share (/proc/stat, other users included), the
pods' own busy share (their cpu time over cpus x wall time), steal, the link's use, the
MiB/s done on the antagonist's disk, nginx's run-queue wait per request (its threads'
schedstat: time ready to run while a cpu ran something else), where the node's cpu went
(system, iowait, softirq, kernel threads), and in net runs the packets that queued at the
wire and what each egress class sent; then one `<kind>_p99_over_solo` line per kind with
per-round ratios, and as the last line `service_p99_over_solo: <ratio> busy: <share>` for
the cpu antagonist under the agent. The load average is printed before and after the
runs. See benchmarks/results/agent.md ("Isolation with real software") for what it shows and what it
cannot.

The benchmark runs in a mount namespace of its own (it re-executes itself under
`unshare --mount`): the antagonist's filesystem and the net_cls hierarchy it classifies by
(mounted there when the machine mounts none) are seen by nobody else. Namespaces, veths,
the loop device, cgroups and processes are removed on exit, Ctrl-C and SIGTERM included.

    sudo .venv/bin/python benchmarks/isolation_real.py --setup   # apt-get install once
    sudo .venv/bin/python benchmarks/isolation_real.py [--seconds 6] [--rounds 2]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
# benchmarks/isolation.py (the agent world over the testbed) and the testbed fixture
sys.path[:0] = [str(HERE), str(HERE.parent)]

from tests.fixtures.cgroup_testbed import (  # noqa: E402
    CgroupTestbed,
    testbed_unavailable_reason,
)

import pykatalyst  # noqa: E402
from isolation import (  # noqa: E402
    ROOT,
    AgentWorld,
    node_busy,
    pods_cpu_s,
    steal_ticks,
)
from pykatalyst.agent.config import AgentConfig  # noqa: E402
from pykatalyst.agent.host.linux import LinuxHost  # noqa: E402

try:  # an agent older than its network shaping (isolation_regress.py --base) runs cpu kinds
    from pykatalyst.agent.host.netshape import NFT_TABLE, NetShaper
except ImportError:  # pragma: no cover - only with an old tree's pykatalyst on the path
    NetShaper = None  # type: ignore[assignment,misc]
    NFT_TABLE = ""

PACKAGES = {"nginx-light": "nginx", "stress-ng": "stress-ng", "iperf3": "iperf3"}
NET_TOOLS = ("ip", "tc", "nsenter")
IO_TOOLS = ("losetup", "mkfs.ext4", "mount", "umount")
KINDS = ("cpu", "vm", "io", "net")
PRIVATE_ENV = "PYKATALYST_ISOLATION_REAL_PRIVATE_MOUNTS"
# Addresses inside this benchmark's own network namespaces only.
NODE_IP, WIRE_NODE_IP, WIRE_CLIENT_IP, CLIENT_IP = (
    "10.231.78.1",
    "10.231.78.2",
    "10.231.78.5",
    "10.231.78.6",
)
NGINX_CONF = """
worker_processes 1;
daemon off;
user root;
pid {dir}/nginx.pid;
error_log {dir}/error.log;
events {{ worker_connections 256; }}
http {{
  access_log {dir}/access.log;
  client_body_temp_path {dir}; proxy_temp_path {dir}; fastcgi_temp_path {dir};
  uwsgi_temp_path {dir}; scgi_temp_path {dir};
  keepalive_requests 1000000;
  server {{ listen {ip}:{port}; root {dir}/www; }}
}}
"""
PAGE = "<html><body>" + "pykatalyst isolation benchmark. " * 18 + "</body></html>\n"

# The load generator, run in the shared pod: open loop, latency from scheduled arrival.
CLIENT = r"""
import asyncio, json, sys, time
host, port, rate, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
conns, out = int(sys.argv[5]), sys.argv[6]
REQ = b"GET /index.html HTTP/1.1\r\nHost: bench\r\n\r\n"
async def one(reader, writer):
    writer.write(REQ)
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    await reader.readexactly(length)
async def worker(q, lat, errors):
    reader, writer = await asyncio.open_connection(host, port)
    while True:
        due = await q.get()
        if due is None:
            return
        try:
            await one(reader, writer)
        except (OSError, asyncio.IncompleteReadError):
            errors.append(1)
            reader, writer = await asyncio.open_connection(host, port)
            continue
        lat.append(time.monotonic() - due)
async def main():
    q, lat, errors = asyncio.Queue(), [], []
    workers = [asyncio.create_task(worker(q, lat, errors)) for _ in range(conns)]
    await asyncio.sleep(0.3)
    t0 = time.monotonic() + 0.1
    n = int(seconds * rate)
    for i in range(n):
        due = t0 + i / rate
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        q.put_nowait(due)
    for _ in workers:
        q.put_nowait(None)
    await asyncio.gather(*workers)
    with open(out, "w") as f:
        json.dump({"lat": lat, "errors": len(errors), "late_s": time.monotonic() - t0 - seconds}, f)
asyncio.run(main())
"""


def run(*argv: str, stdin: str | None = None) -> str:
    """One setup command; its failure ends the benchmark with what the command said."""
    done = subprocess.run(
        list(argv), input=stdin, capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {(done.stderr or done.stdout).strip()}")
    return done.stdout


def quiet(*argv: str) -> None:
    """A cleanup command: whatever it says, the next one still runs."""
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run(list(argv), capture_output=True, timeout=60, check=False)


class Link:
    """node --(veth)-- wire --(veth, token bucket at the line rate)-- client.

    The node's veth end (`device`) is its egress device. The wire namespace forwards both
    ways and sends toward the client at `mbit` through the machine's default queueing
    discipline (one queue for every flow, as a NIC's), so without shaping on the node the
    queue that builds when the link is full is the wire's."""

    def __init__(self, mbit: float, stack: contextlib.ExitStack) -> None:
        tag = secrets.token_hex(3)
        self.mbit = mbit
        self.node, self.wire, self.client = (f"pki-{n}-{tag}" for n in ("node", "wire", "client"))
        self.device, wire_node, wire_client, client_dev = (
            f"pki{tag}{n}" for n in ("n", "wn", "wc", "c")
        )
        self.wire_device = wire_client
        for ns in (self.node, self.wire, self.client):
            run("ip", "netns", "add", ns)
            stack.callback(quiet, "ip", "netns", "del", ns)
        pairs = ((self.node, self.device, wire_node), (self.client, client_dev, wire_client))
        for ns, dev, peer in pairs:
            run("ip", "-n", ns, "link", "add", dev, "type", "veth", "peer", "name", peer)
            run("ip", "-n", ns, "link", "set", peer, "netns", self.wire)
        for ns, dev, ip in (
            (self.node, self.device, NODE_IP),
            (self.wire, wire_node, WIRE_NODE_IP),
            (self.wire, wire_client, WIRE_CLIENT_IP),
            (self.client, client_dev, CLIENT_IP),
        ):
            run("ip", "-n", ns, "addr", "add", f"{ip}/30", "dev", dev)
            run("ip", "-n", ns, "link", "set", dev, "up")
            run("ip", "-n", ns, "link", "set", "lo", "up")
        run("ip", "-n", self.node, "route", "add", "default", "via", WIRE_NODE_IP)
        run("ip", "-n", self.client, "route", "add", "default", "via", WIRE_CLIENT_IP)
        run(*self.in_ns(self.wire, ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"]))
        self.queue = Path("/proc/sys/net/core/default_qdisc").read_text().strip()
        burst = max(32_768, int(mbit * 1e6 / 8 / 100))  # 10 ms: the rate at any HZ
        tc = ["ip", "netns", "exec", self.wire, "tc", "qdisc", "add", "dev", wire_client]
        rate = ["rate", f"{mbit}mbit", "burst", str(burst), "limit", str(1000 * 1514)]
        run(*tc, "root", "handle", "1:", "tbf", *rate)
        try:  # the token bucket's queue: the machine's default, as a NIC's would be
            run(*tc, "parent", "1:1", "handle", "10:", self.queue)
        except RuntimeError:
            self.queue = "a byte FIFO of 1000 full-size packets (tbf's own)"

    @staticmethod
    def in_ns(ns: str, argv: Sequence[str]) -> list[str]:
        """`argv` in network namespace `ns`, the same process (nsenter execs it), so that
        the cgroups it joined before stay its own."""
        return ["nsenter", f"--net=/run/netns/{ns}", *argv]

    def wire_bytes(self) -> int:
        """Bytes the wire has sent toward the client."""
        out = run("ip", "-n", self.wire, "-s", "-j", "link", "show", "dev", self.wire_device)
        return int(json.loads(out)[0]["stats64"]["tx"]["bytes"])

    def wire_waits(self) -> int:
        """Times a packet found the wire busy and had to queue there (the token bucket's
        overlimits)."""
        out = run(*self.in_ns(self.wire, ["tc", "-s", "qdisc", "show", "dev", self.wire_device]))
        found = re.search(r"qdisc tbf .*?overlimits (\d+)", out, re.S)
        return int(found.group(1)) if found else 0

    def class_sent(self) -> dict[str, tuple[int, int]]:
        """(bytes, packets) each HTB class of the node's device has sent (the kernel's
        count; a packet is what the stack handed the device, up to a 64 KiB GSO chunk)."""
        out = run(*self.in_ns(self.node, ["tc", "-s", "class", "show", "dev", self.device]))
        found = re.findall(r"class htb (\S+) .*?\n\s*Sent (\d+) bytes (\d+) pkt", out)
        return {handle: (int(n), int(k)) for handle, n, k in found}

    def unshape(self) -> None:
        """Take the agent's shaping off the node's device with the commands an operator
        runs after turning network QoS off (an agent started with it off leaves it alone)."""
        quiet(*self.in_ns(self.node, ["tc", "qdisc", "del", "dev", self.device, "root"]))
        quiet(*self.in_ns(self.node, ["nft", "delete", "table", "inet", NFT_TABLE]))


class Disk:
    """The antagonist's own disk: a loop device over a file on the node's disk, written
    through once and then used with direct io (no page cache in between and no block
    allocation in the node's filesystem: as a disk), ext4 on it, mounted at `mount` in this
    benchmark's mount namespace."""

    def __init__(self, size_mib: int, scheduler: str, stack: contextlib.ExitStack) -> None:
        fd, backing = tempfile.mkstemp(prefix="pykatalyst-isoreal-", suffix=".img", dir="/var/tmp")
        os.close(fd)
        stack.callback(lambda: Path(backing).unlink(missing_ok=True))
        # Written through once: writes into a sparse or preallocated file would allocate
        # blocks and convert extents in the node filesystem's journal, which a disk of
        # its own never touches (and which the service's log shares).
        zeros = ["dd", "if=/dev/zero", f"of={backing}", "bs=4M", f"count={size_mib // 4}"]
        run(*zeros, "conv=fsync", "status=none")
        self.dev = run("losetup", "--find", "--show", "--direct-io=on", backing).strip()
        stack.callback(quiet, "losetup", "--detach", self.dev)
        rdev = os.stat(self.dev).st_rdev
        self.majmin = f"{os.major(rdev)}:{os.minor(rdev)}"
        sched = Path(f"/sys/block/{Path(self.dev).name}/queue/scheduler")
        if f"{scheduler}" in sched.read_text().replace("[", " ").replace("]", " ").split():
            sched.write_text(scheduler)
        self.scheduler = sched.read_text().strip()
        run("mkfs.ext4", "-q", "-F", self.dev)
        self.mount = Path(tempfile.mkdtemp(prefix="pykatalyst-isoreal-io-"))
        stack.callback(self.mount.rmdir)
        run("mount", self.dev, str(self.mount))
        stack.callback(quiet, "umount", str(self.mount))

    def bytes_done(self) -> int:
        """Bytes read and written on the device so far (the kernel's count, in sectors)."""
        f = Path(f"/sys/block/{Path(self.dev).name}/stat").read_text().split()
        return (int(f[2]) + int(f[6])) * 512


def net_cls_mount(stack: contextlib.ExitStack) -> Path:
    """Where the net_cls hierarchy is: the machine's mount, else one of this benchmark's
    (its mount namespace is private, so nobody else sees it)."""
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, point, fs, opts, *_ = line.split()
        if fs == "cgroup" and "net_cls" in opts.split(","):
            return Path(point)
    point = Path(tempfile.mkdtemp(prefix="pykatalyst-netcls-"))
    stack.callback(point.rmdir)
    run("mount", "-t", "cgroup", "-o", "net_cls", "pykatalyst-net_cls", str(point))
    stack.callback(quiet, "umount", str(point))
    return point


def antagonist(
    kind: str, ncpu: int, seconds: float, args: argparse.Namespace, seq: int
) -> list[str]:
    """The command line of one antagonist kind (it stops by itself; killed sooner)."""
    secs = f"{int(seconds) + 60}"
    base = ["stress-ng", "--timeout", f"{secs}s", "--quiet"]
    if kind == "cpu":
        return [*base, "--cpu", str(ncpu)]
    if kind == "vm":
        return [*base, "--vm", str(ncpu), "--vm-bytes", args.vm_bytes, "--vm-keep"]
    if kind == "io":
        io = ["--hdd", str(args.hdd_workers), "--hdd-opts", "direct"]
        return [*base, *io, "--hdd-bytes", "64M", "--temp-path", str(args.io_dir)]
    # one TCP stream from the node to the receiver beside the client, over the link
    port = str(5201 + seq % 200)
    return Link.in_ns(args.node_ns, ["iperf3", "-c", CLIENT_IP, "-p", port, "-t", secs, "-i", "0"])


@dataclass
class CpuSplit:
    """Shares of the node's cpu time over a run (of cpus x wall time)."""

    system: float = 0.0
    iowait: float = 0.0
    softirq: float = 0.0
    kthreads: float = 0.0  # kernel threads (kworkers, ksoftirqd, jbd2, ...), anyone's


def proc_stat() -> list[int]:
    """user nice system idle iowait irq softirq steal jiffies of all cpus."""
    return [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]


def kthread_jiffies() -> dict[str, int]:
    """utime + stime of each kernel thread (children of kthreadd), by pid."""
    out: dict[str, int] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            text = (d / "stat").read_text()
        except OSError:
            continue
        f = text[text.rindex(")") + 2 :].split()
        if f[1] == "2":  # ppid: kthreadd
            out[d.name] = int(f[11]) + int(f[12])
    return out


def cpu_split(
    s0: list[int], s1: list[int], k0: dict[str, int], k1: dict[str, int], ncpu: int, wall: float
) -> CpuSplit:
    total = max(sum(s1) - sum(s0), 1)
    d = [b - a for a, b in zip(s0, s1, strict=True)]
    hz = os.sysconf("SC_CLK_TCK")
    kt = sum(v - k0.get(k, 0) for k, v in k1.items()) / (hz * ncpu * wall)
    return CpuSplit(d[2] / total, d[4] / total, (d[5] + d[6]) / total, kt)


@dataclass
class Result:
    name: str
    latencies_ms: list[float]
    node_busy: float
    pods_busy: float
    steal: float
    errors: int = 0
    link: float = 0.0  # the wire's use toward the client, share of its rate
    disk_mib_s: float = 0.0  # read + written on the antagonist's disk
    wait_us: float = 0.0  # nginx's run-queue wait per request
    split: CpuSplit = field(default_factory=CpuSplit)

    def pct(self, q: float) -> float:
        xs = sorted(self.latencies_ms)
        return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def run_delay_ns(tb: CgroupTestbed, uid: str, comm: str) -> int:
    """Nanoseconds the pod's threads named `comm` have waited on a run queue (their
    schedstat), summed: the time they were ready to run and a cpu ran something else."""
    total = 0
    for tasks in (tb.base / "cpu" / tb.pod_cgroup(uid)).rglob("tasks"):
        for tid in tasks.read_text().split():
            with contextlib.suppress(OSError, IndexError, ValueError):
                if Path(f"/proc/{tid}/comm").read_text().strip() == comm:
                    total += int(Path(f"/proc/{tid}/schedstat").read_text().split()[1])
    return total


SPINNER = r"""
import os, sys
os.sched_setaffinity(0, {int(sys.argv[1])})
os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
while True:
    pass
"""


class Waker:
    """`--keep-awake`: one SCHED_IDLE spinner per cpu, outside the pods, in every mode whose
    own load leaves the cpus idle (solo, io, net). It runs only when nothing else wants the
    cpu, and whatever wakes up preempts it at once; what it changes is that no vCPU is ever
    idle, so the hypervisor never deschedules one between two requests. In the cpu and vm
    modes the antagonists keep every cpu busy themselves and the spinners are stopped
    (running, they took about a tenth of the cpus from those antagonists). Their cpu time is
    taken out of the node's busy share."""

    def __init__(self, ncpu: int, stack: contextlib.ExitStack) -> None:
        cpus = sorted(os.sched_getaffinity(0))[:ncpu]
        self.procs = [
            subprocess.Popen([sys.executable, "-c", SPINNER, str(c)], stdin=subprocess.DEVNULL)
            for c in cpus
        ]
        stack.callback(self.close)

    def cpu_s(self) -> float:
        total = 0
        for proc in self.procs:
            with contextlib.suppress(OSError):
                text = Path(f"/proc/{proc.pid}/stat").read_text()
                f = text[text.rindex(")") + 2 :].split()
                total += int(f[11]) + int(f[12])
        return total / os.sysconf("SC_CLK_TCK")

    def hold(self, stopped: bool) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGSTOP if stopped else signal.SIGCONT)

    def close(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait(timeout=10)


def kill_pod(tb: CgroupTestbed, uid: str) -> None:
    """Kill every process of the pod (stress-ng and nginx fork workers), then remove it."""
    pod_dir = tb.base / "cpu" / tb.pod_cgroup(uid)
    for _ in range(3):
        pids = [
            int(p) for procs in pod_dir.rglob("cgroup.procs") for p in procs.read_text().split()
        ]
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    tb.remove_pod(uid)


CHART_VALUES = ROOT / "deploy" / "charts" / "pykatalyst" / "values.yaml"


def base_agent_config(which: str) -> dict[str, Any]:
    """The agent configuration the runs start from. `chart`: what the Helm chart deploys
    (its values' `agent.config`: reclaim on, cpu.idle on each reclaimed pod), without its
    checkpoint file; `bench`: this benchmark's own (reclaim sharing the share pool's cpus,
    cpu.idle on the reclaimed pods' root); or a YAML file of an agent configuration."""
    if which == "bench":
        return AgentWorld.base_config(overlap=True, idle_root=True)
    path = CHART_VALUES if which == "chart" else Path(which)
    data = yaml.safe_load(path.read_text()) or {}
    cfg = dict(((data.get("agent") or {}).get("config") or {}) if which == "chart" else data)
    cfg["checkpoint_path"] = None  # the testbed's knobs are its own
    return cfg


def agent_config(kind: str, args: argparse.Namespace, link: Link, disk: Disk | None) -> AgentConfig:
    """The agent's configuration for an antagonist kind: `--agent-config`'s, plus the
    io section (on the antagonist's disk) for `io`, network QoS on the node's device for
    `net`."""
    cfg: dict[str, Any] = base_agent_config(args.agent_config)
    if kind == "io" and disk is not None:
        dev = disk.majmin
        pod = {"device": dev, "read_bps": args.io_pod_bps, "write_bps": args.io_pod_bps}
        pod |= {"read_iops": args.io_pod_iops, "write_iops": args.io_pod_iops}
        root = {"device": dev, "read_bps": args.io_root_bps, "write_bps": args.io_root_bps}
        cfg["io"] = {
            "levels": {
                "reclaimed_cores": {"weight": 10, "limits": [pod]},
                "shared_cores": {"weight": 500},
            },
            "reclaimed_root": {"limits": [root]},
        }
    if kind in ("net", "net-bw"):
        # `net`: one class per level only; `net-bw`: the service's own class as well, when
        # it asks bandwidth (--service-mbit)
        cfg["network"] = {"enabled": True, "device": link.device, "link_mbit": link.mbit}
        cfg["network"]["bandwidth_classes"] = kind == "net-bw"
    return AgentConfig.model_validate(cfg)


class Bench:
    def __init__(
        self,
        tb: CgroupTestbed,
        world: AgentWorld,
        args: argparse.Namespace,
        link: Link,
        disk: Disk | None,
        waker: Waker | None = None,
    ) -> None:
        self.tb, self.world, self.args, self.link, self.disk = tb, world, args, link, disk
        self.waker = waker
        self.ncpu = len(os.sched_getaffinity(0))
        self.tmp = Path(tempfile.mkdtemp(prefix="pykatalyst-isoreal-"))
        (self.tmp / "www").mkdir()
        (self.tmp / "www/index.html").write_text(PAGE)
        conf = self.tmp / "nginx.conf"
        conf.write_text(NGINX_CONF.format(dir=self.tmp, ip=NODE_IP, port=args.port))
        requests = {"cpu": "1", "memory": "256Mi"}
        selected: dict[str, str] = {}
        if args.service_mbit > 0:  # what the scheduler would have written on the pod
            requests[world.names.RESOURCE_NET_BANDWIDTH] = str(args.service_mbit)
            selected[world.names.NIC_SELECTION_RESULT_ANNOTATION] = link.device
        self.shared = world.add_pod(
            "nginx", "nginx", world.names.QOS_SHARED_CORES, requests, selected
        )
        tb.spawn(self.shared, "nginx", Link.in_ns(link.node, ["nginx", "-c", str(conf)]))
        time.sleep(0.5)
        self._seq = 0
        self._kind_config: str | None = "base"
        self._sinks: list[subprocess.Popen[bytes]] = []

    def _agent_for(self, kind: str, how: str) -> None:
        """Restart the agent when this kind needs another configuration than it runs."""
        want = kind if kind in ("io", "net") and how == "agent" else "base"
        if kind == "net" and how == "agent-bw":
            want = "net-bw"
        if want != self._kind_config:
            self.world.restart(agent_config(want, self.args, self.link, self.disk))
            self._kind_config = want

    def run(self, mode: str) -> Result:
        kind, _, how = mode.partition("-")
        seconds = self.args.seconds
        pods: list[tuple[str, str]] = []
        stress: subprocess.Popen[bytes] | None = None
        sink: subprocess.Popen[bytes] | None = None
        agent_on = how.startswith("agent")
        if self.waker is not None:
            self.waker.hold(stopped=kind in ("cpu", "vm"))
        if kind in KINDS:
            self._seq += 1
            name = f"{kind}-{self._seq}"
            if agent_on:
                self._agent_for(kind, how)
                req = {self.world.names.RECLAIMED_MILLICPU: str(1000 * self.ncpu)}
                if kind == "vm":
                    req[self.world.names.RECLAIMED_MEMORY] = self.args.reclaimed_memory
                uid = self.world.add_pod(name, "stress", self.world.names.QOS_RECLAIMED_CORES, req)
            else:
                uid = name
                self.tb.add_pod(uid, "besteffort", ["stress"])
            if kind == "net":  # the receiver, on the client's side of the link
                port = str(5201 + self._seq % 200)
                argv = ["iperf3", "-s", "-1", "-B", CLIENT_IP, "-p", port]
                sink = subprocess.Popen(
                    Link.in_ns(self.link.client, argv),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                self._sinks.append(sink)
                time.sleep(0.3)
            cmd = antagonist(kind, self.ncpu, seconds, self.args, self._seq)
            stress = self.tb.spawn(uid, "stress", cmd)
            pods.append((name, uid))
        if agent_on:
            self.world.tick()
        time.sleep(1.0)  # the antagonist at full strength before the first request
        out = self.tmp / "client.json"
        meter = LinuxHost()
        meter.sample(time.monotonic(), [])
        t0, cpu0, (st0, tot0) = time.monotonic(), pods_cpu_s(self.tb), steal_ticks()
        s0, k0, w0 = proc_stat(), kthread_jiffies(), self.link.wire_bytes()
        q0 = self.link.wire_waits()
        d0 = self.disk.bytes_done() if self.disk is not None else 0
        z0 = self.waker.cpu_s() if self.waker is not None else 0.0
        argv = [sys.executable, "-c", CLIENT, NODE_IP, str(self.args.port), str(self.args.rate)]
        argv = Link.in_ns(self.link.client, [*argv, str(seconds), "16", str(out)])
        client = self.tb.spawn(self.shared, "nginx", argv)
        r0 = run_delay_ns(self.tb, self.shared, "nginx")
        deadline = time.monotonic() + seconds + 60
        while client.poll() is None and time.monotonic() < deadline:
            time.sleep(1.0 if agent_on else 0.25)
            if agent_on:
                self.world.tick()
        if client.poll() is None:
            print(f"  warning: {mode}: the client did not finish in time")
            client.kill()
        r1 = run_delay_ns(self.tb, self.shared, "nginx")
        wall = time.monotonic() - t0
        busy = node_busy(meter, time.monotonic()) or 0.0
        if self.waker is not None:  # the spinners' time is not load
            busy = max(0.0, busy - (self.waker.cpu_s() - z0) / (self.ncpu * wall))
        pods_busy = (pods_cpu_s(self.tb) - cpu0) / (self.ncpu * wall)
        split = cpu_split(s0, proc_stat(), k0, kthread_jiffies(), self.ncpu, wall)
        link = (self.link.wire_bytes() - w0) * 8 / (wall * self.link.mbit * 1e6)
        if kind == "net":
            waits = (self.link.wire_waits() - q0) / wall
            print(f"  {mode}: packets that queued at the wire: {waits:.0f}/s")
        disk = (self.disk.bytes_done() - d0) / wall / (1 << 20) if self.disk is not None else 0.0
        st1, tot1 = steal_ticks()
        data = json.loads(out.read_text()) if out.exists() else {"lat": [], "errors": -1}
        out.unlink(missing_ok=True)
        if stress is not None and stress.poll() is not None:
            # a run whose antagonist gave up measures nothing: say so rather than count it
            print(f"  warning: {mode}: the antagonist exited early (status {stress.returncode})")
        for name, uid in pods:
            if agent_on:
                self.world.delete_pod(name)
            kill_pod(self.tb, uid)
        if sink is not None:
            sink.kill()
            sink.wait(timeout=10)
        if agent_on:
            self.world.tick()
            if self._kind_config in ("net", "net-bw"):
                sent = self.link.class_sent()
                shown = ", ".join(
                    f"{h} {b / 1e6:.1f} MB in {k} packets" + (f" of {b / k:.0f} B" if k else "")
                    for h, (b, k) in sorted(sent.items())
                )
                print(f"  {mode}: sent by class on {self.link.device}: {shown}")
                self.link.unshape()
                self._kind_config = None  # the next agent starts afresh and shapes again
        lat = [x * 1000 for x in data["lat"]]
        wait = (r1 - r0) / 1000 / max(len(lat), 1)
        steal = (st1 - st0) / max(tot1 - tot0, 1)
        return Result(mode, lat, busy, pods_busy, steal, data["errors"], link, disk, wait, split)

    def close(self) -> None:
        for sink in self._sinks:
            with contextlib.suppress(ProcessLookupError):
                sink.kill()
            sink.wait(timeout=10)
        kill_pod(self.tb, self.shared)
        shutil.rmtree(self.tmp, ignore_errors=True)


def setup() -> int:
    """Install what the benchmark runs (Debian packages), once."""
    missing = [p for p, exe in PACKAGES.items() if not shutil.which(exe)]
    if not missing:
        print(f"{', '.join(PACKAGES.values())} are installed")
        return 0
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=False, env=env)
    done = subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=False, env=env)
    return done.returncode


def summarize(merged: dict[str, list[Result]]) -> list[Result]:
    def mean(xs: list[float]) -> float:
        return statistics.fmean(xs) if xs else 0.0

    out = []
    for name, runs in merged.items():
        split = CpuSplit(
            mean([r.split.system for r in runs]),
            mean([r.split.iowait for r in runs]),
            mean([r.split.softirq for r in runs]),
            mean([r.split.kthreads for r in runs]),
        )
        out.append(
            Result(
                name,
                [x for r in runs for x in r.latencies_ms],
                mean([r.node_busy for r in runs]),
                mean([r.pods_busy for r in runs]),
                mean([r.steal for r in runs]),
                sum(r.errors for r in runs),
                mean([r.link for r in runs]),
                mean([r.disk_mib_s for r in runs]),
                mean([r.wait_us for r in runs]),
                split,
            )
        )
    return out


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split(" ", 3)[:3])


def report(merged: dict[str, list[Result]], background: float, load: str) -> None:
    results = {r.name: r for r in summarize(merged)}
    print(f"background before the runs: node busy {background:.2f}, loadavg {load}")
    print(f"loadavg after the runs: {loadavg()}")
    head = f"{'mode':<17} {'requests':>8} {'p50_ms':>8} {'p99_ms':>8} {'max_ms':>8}"
    tail = f"{'node_busy':>9} {'pods_busy':>9} {'steal':>6} {'link':>5} {'disk':>6} {'wait_us':>7}"
    print(f"{head} {tail} {'errors':>6}")
    for r in results.values():
        print(
            f"{r.name:<17} {len(r.latencies_ms):>8} {r.pct(0.5):>8.3f} {r.pct(0.99):>8.3f} "
            f"{max(r.latencies_ms, default=0):>8.3f} {r.node_busy:>9.3f} {r.pods_busy:>9.3f} "
            f"{r.steal:>6.3f} {r.link:>5.2f} {r.disk_mib_s:>6.1f} {r.wait_us:>7.1f} {r.errors:>6}"
        )
    print("where the node's cpu went (share of cpus x wall, anyone's): system iowait softirq")
    print("  (irq included) and kernel threads")
    for r in results.values():
        s = r.split
        print(
            f"{r.name:<17} {s.system:>6.3f} {s.iowait:>6.3f} {s.softirq:>7.3f} {s.kthreads:>8.3f}"
        )
    for name, runs in merged.items():
        rounds = "  ".join(f"{r.pct(0.99):.2f}/{r.pods_busy:.2f}/{r.node_busy:.2f}" for r in runs)
        print(f"{name:<17} per round p99_ms/pods_busy/node_busy: {rounds}")
    solo = results["solo"].pct(0.99)
    for kind in KINDS:
        if f"{kind}-agent" not in results:
            continue
        kub, agent = results[f"{kind}-kubelet"], results[f"{kind}-agent"]
        cpu_only = results.get(f"{kind}-agent-cpuonly")
        bw = results.get(f"{kind}-agent-bw")
        print(
            f"{kind}_p99_over_solo: kubelet {kub.pct(0.99) / solo:.2f}  "
            + ("" if cpu_only is None else f"agent-cpuonly {cpu_only.pct(0.99) / solo:.2f}  ")
            + f"agent {agent.pct(0.99) / solo:.2f}  busy {agent.pods_busy:.2f}"
            + ("" if bw is None else f"  agent-bw {bw.pct(0.99) / solo:.2f}")
            + (f"  link {kub.link:.2f} / {agent.link:.2f}" if kind == "net" else "")
        )
        per_round = zip(
            merged["solo"], merged[f"{kind}-kubelet"], merged[f"{kind}-agent"], strict=True
        )
        ratios = [(k.pct(0.99) / s.pct(0.99), a.pct(0.99) / s.pct(0.99)) for s, k, a in per_round]
        print(
            f"  {kind} per round, p99 over that round's solo (kubelet/agent): "
            + "  ".join(f"{k:.2f}/{a:.2f}" for k, a in ratios)
            + f"  median agent {statistics.median(a for _, a in ratios):.2f}"
        )
    cpu = results.get("cpu-agent")
    if cpu is not None:
        print(f"service_p99_over_solo: {cpu.pct(0.99) / solo:.2f} busy: {cpu.pods_busy:.2f}")


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--setup", action="store_true", help="apt-get install " + " ".join(PACKAGES))
    ap.add_argument("--seconds", type=float, default=6.0, help="load per run")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds")
    ap.add_argument("--rate", type=float, default=400.0, help="requests per second")
    ap.add_argument("--kinds", default=",".join(KINDS), help="antagonists, comma-separated")
    ap.add_argument("--port", type=int, default=18080, help="nginx port on the node's address")
    ap.add_argument("--vm-bytes", default="128M", help="memory each vm worker touches")
    ap.add_argument(
        "--reclaimed-memory", default="192Mi", help="the vm pod's reclaimed_memory request"
    )
    ap.add_argument(
        "--agent-config",
        default="chart",
        metavar="chart|bench|FILE",
        help="the agent's configuration: the Helm chart's (default), this benchmark's own "
        "(reclaim overlapping the share pool, cpu.idle on the reclaimed root), or a file",
    )
    ap.add_argument("--link-mbit", type=float, default=100.0, help="the link's line rate")
    ap.add_argument("--hdd-workers", type=int, default=2, help="io antagonist's writers")
    ap.add_argument(
        "--io-pod-bps", default="64Mi", help="io agent: a reclaimed pod's read and write limit"
    )
    ap.add_argument("--io-pod-iops", type=int, default=2000, help="... and its iops limit")
    ap.add_argument(
        "--io-root-bps", default="32Mi", help="io agent: the reclaimed root's cap, all pods"
    )
    ap.add_argument(
        "--cpu-only",
        action="store_true",
        help="also run io and net under the agent without its io / network knobs "
        "(<kind>-agent-cpuonly): what its cpu knobs alone do against them",
    )
    ap.add_argument(
        "--service-mbit",
        type=int,
        default=0,
        help="give the nginx pod a net_bandwidth request of this many Mbps on the node's "
        "device and add net-agent-bw: the agent with its class per bandwidth pod (net-agent "
        "then shapes by level only)",
    )
    ap.add_argument(
        "--keep-awake",
        action="store_true",
        help="a SCHED_IDLE spinner on every cpu in the modes that leave cpus idle (solo, "
        "io, net; the cpu and vm antagonists keep them busy themselves): no vCPU idles, so "
        "a hypervisor's descheduling of idle vCPUs leaves the baseline",
    )
    ap.add_argument(
        "--json",
        type=Path,
        metavar="FILE",
        help="also write each mode's figures to FILE (benchmarks/calibrate_sim.py reads it)",
    )
    args = ap.parse_args()
    if args.rounds < 1 or args.seconds <= 0 or args.rate <= 0 or args.link_mbit <= 0:
        ap.error("--rounds, --seconds, --rate and --link-mbit must be positive")
    args.kind_list = [k for k in args.kinds.split(",") if k]
    if unknown := [k for k in args.kind_list if k not in KINDS]:
        ap.error(f"--kinds: unknown {unknown}; accepted: {', '.join(KINDS)}")
    return args


def missing_tools(kinds: list[str]) -> list[str]:
    need = ["nginx", "unshare", *NET_TOOLS]
    need += ["stress-ng"] if {"cpu", "vm", "io"} & set(kinds) else []
    need += [*IO_TOOLS] if "io" in kinds else []
    need += ["iperf3", "nft"] if "net" in kinds else []
    return [t for t in need if shutil.which(t) is None]


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through the cleanup, as Ctrl-C does


def main() -> int:
    args = parse_args()
    if args.setup:
        return setup()
    if NetShaper is None and "net" in args.kind_list:
        print(f"--kinds net: the agent at {pykatalyst.__path__[0]} has no network shaping",
              file=sys.stderr)  # fmt: skip
        return 2
    if missing := missing_tools(args.kind_list):
        print(f"not found: {', '.join(missing)}: run with --setup first", file=sys.stderr)
        return 2
    reason = testbed_unavailable_reason()
    if reason is not None:
        print(f"needs a writable cgroup v1 hierarchy: {reason}", file=sys.stderr)
        return 2
    if os.environ.get(PRIVATE_ENV) != "1":
        env = {**os.environ, PRIVATE_ENV: "1"}
        argv = ["unshare", "--mount", "--propagation", "private", sys.executable, *sys.argv]
        os.execvpe("unshare", argv, env)
    signal.signal(signal.SIGTERM, _terminate)
    probe = LinuxHost()
    probe.sample(time.monotonic(), [])
    time.sleep(1.0)
    background = node_busy(probe, time.monotonic()) or 0.0
    load = loadavg()
    modes = ["solo"]
    for k in args.kind_list:
        cpu_only = ["agent-cpuonly"] if args.cpu_only and k in ("io", "net") else []
        bw = ["agent-bw"] if args.service_mbit > 0 and k == "net" else []
        modes += [f"{k}-{h}" for h in ("kubelet", *cpu_only, "agent", *bw)]
    merged: dict[str, list[Result]] = {m: [] for m in modes}
    with contextlib.ExitStack() as stack:
        link = Link(args.link_mbit, stack)
        args.node_ns = link.node
        disk = Disk(512, "bfq", stack) if "io" in args.kind_list else None
        if disk is not None:
            args.io_dir = disk.mount
        netcls = net_cls_mount(stack) if "net" in args.kind_list else None
        print(
            f"cpus: {os.cpu_count()}  rate {args.rate:.0f} req/s  {args.seconds:.0f} s per run  "
            f"{args.rounds} rounds  kinds: {', '.join(args.kind_list)}  (from {ROOT.name})"
            + f"  agent config: {args.agent_config}  agent code: {pykatalyst.__path__[0]}"
            + ("  vCPUs kept awake (SCHED_IDLE spinners)" if args.keep_awake else "")
            + "\n"
            f"link {args.link_mbit:.0f} Mbit/s through {link.queue}"
            + (f"; antagonist disk {disk.dev} ({disk.majmin}, {disk.scheduler})" if disk else "")
        )
        tb = stack.enter_context(
            CgroupTestbed(kubepods_shares=262144, move_memory=True, blkio=True, net_cls=netcls)
        )
        shaper = {} if NetShaper is None else {"net_shaper": NetShaper(netns=link.node)}
        host = LinuxHost(driver="cgroupfs", kubepods=tb.kubepods, **shaper)
        base = agent_config("base", args, link, disk)
        world = AgentWorld(tb, overlap=True, idle_root=True, config=base, host=host)
        waker = Waker(len(os.sched_getaffinity(0)), stack) if args.keep_awake else None
        bench = Bench(tb, world, args, link, disk, waker)
        stack.callback(bench.close)
        for _ in range(args.rounds):
            for mode in modes:
                merged[mode].append(bench.run(mode))
    report(merged, background, load)
    if args.json is not None:
        write_json(args.json, merged, background)
    return 0


def write_json(path: Path, merged: dict[str, list[Result]], background: float) -> None:
    """Each mode's figures, for comparing with the simulator's latency model."""
    modes = {
        r.name: {
            "p50_ms": r.pct(0.5),
            "p99_ms": r.pct(0.99),
            "pods_busy": r.pods_busy,
            "node_busy": r.node_busy,
            "steal": r.steal,
            "link": r.link,
            "disk_mib_s": r.disk_mib_s,
            "wait_us": r.wait_us,
            "requests": len(r.latencies_ms),
        }
        for r in summarize(merged)
    }
    cpus = len(os.sched_getaffinity(0))
    path.write_text(json.dumps({"cpus": cpus, "background": background, "modes": modes}))


if __name__ == "__main__":
    sys.exit(main())
