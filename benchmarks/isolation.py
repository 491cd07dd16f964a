"""Isolation of a latency-sensitive shared pod from reclaimed pods that soak every cpu.

Real, on this machine (root, cgroup v1): a kubelet-like hierarchy is built under a unique
prefix (`CgroupTestbed`). A probe runs as the container of a shared (burstable) pod: an
open-loop client/server in one process, a request arriving every `--interval-ms`, each
needing a fixed slice of cpu work (`--work-ms`, calibrated on this machine before the runs);
response time = completion - scheduled arrival, so queueing behind a late request counts.
Busy loops, one per cpu, run as reclaimed (best-effort) pods.

Three runs:
  solo         the probe alone;
  unprotected  probe + busy loops with the kubelet's own settings (best-effort cgroups at
               2 cpu shares), no agent;
  protected    the same, with the agent's reclaimed-pod knobs written through LinuxHost and
               the Enforcer: cpu.idle=1 (SCHED_IDLE) on every reclaimed pod cgroup and 2
               shares on its containers. `--mode agent` instead runs the node agent
               (`Agent` over an in-memory cluster holding the pods) and lets it choose and
               write the knobs.

Prints p50/p90/p99/max per run, the node's cpu busy share (from /proc/stat over the run,
other users' load included), the pods' own busy share (cpu time of the testbed's cgroups
over cpus x wall time) and the hypervisor's steal share, each round's figures (the spread),
then `protected_p99_over_solo: <ratio> busy: <0-1>` as the last line, with the pods' own
busy share. Goal: the ratio <= 1.1 while busy >= 0.9.

`--mode agent` runs the agent with its defaults except for the overlap mode, which this
benchmark turns on by default because its scenario is reclaimed pods soaking every idle
cpu, the shared pod's included: `--overlap/--no-overlap` (reclaimed pods on the share
pool's cpus too, under SCHED_IDLE; the agent's own default is off),
`--idle-root/--no-idle-root` (cpu.idle on the reclaimed root). Each pod gets a sandbox
cgroup with a sleeping "pause" process.

Read the figures with the "node busy before the runs" line: work outside the testbed (other
users of the machine) delays the probe in every mode alike, and a kernel built without
preemption of kernel code (Dynamic Preempt: none) lets a busy syscall hold a cpu for
milliseconds whatever the cgroup settings. The runs are interleaved in rounds so that such
load hits every mode, and `--shield` gives kubepods the largest cpu.shares so that it weighs
as little as it can; tails on a busy machine still say more about the machine than about
the pods.

    sudo .venv/bin/python benchmarks/isolation.py [--seconds 15] [--rounds 3] [--mode direct|agent]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the cgroup testbed is a test fixture, not in the wheel

from tests.fixtures.cgroup_testbed import (  # noqa: E402
    SANDBOX,
    CgroupTestbed,
    testbed_unavailable_reason,
)

from pykatalyst.agent.config import AgentConfig  # noqa: E402
from pykatalyst.agent.enforcer import Enforcer  # noqa: E402
from pykatalyst.agent.host.base import Knob, KnobValue  # noqa: E402
from pykatalyst.agent.host.linux import LinuxHost  # noqa: E402
from pykatalyst.cluster.clock import RealClock  # noqa: E402

PROBE = r"""
import json, sys, time
interval, iters, seconds = float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
out = sys.argv[4]
def work(n):
    x = 0
    for i in range(n):
        x += i * i
    return x
n = int(seconds / interval)
lat = []
t0 = time.monotonic() + 0.3
for i in range(n):
    arrival = t0 + i * interval
    now = time.monotonic()
    if now < arrival:
        time.sleep(arrival - now)
    work(iters)
    lat.append(time.monotonic() - arrival)
with open(out, "w") as f:
    json.dump(lat, f)
"""

BUSY = [sys.executable, "-c", "while True: pass"]
SHARED_UID = "probe-shared"


@dataclass
class RunResult:
    name: str
    latencies_ms: list[float]
    busy: float  # the node's busy share (/proc/stat), other users' load included
    pods_busy: float = 0.0  # cpu time of the testbed's pods / (cpus x wall time)
    steal: float = 0.0  # share of cpu time the hypervisor gave to others (/proc/stat steal)

    def pct(self, q: float) -> float:
        xs = sorted(self.latencies_ms)
        return xs[min(len(xs) - 1, int(q * len(xs)))]


def calibrate(work_ms: float) -> int:
    """Loop iterations that take `work_ms` of cpu on this machine (best of several tries,
    so that other load during calibration does not inflate the slice)."""

    def work(n: int) -> int:
        x = 0
        for i in range(n):
            x += i * i
        return x

    n = 20_000
    best = float("inf")
    for _ in range(15):
        start = time.process_time()
        work(n)
        best = min(best, time.process_time() - start)
    return max(1, int(n * (work_ms / 1000.0) / best))


def pods_cpu_s(tb: CgroupTestbed) -> float:
    """Cumulative cpu seconds of everything in the testbed (its prefix cgroup)."""
    return int((tb.base / "cpuacct" / tb.prefix / "cpuacct.usage").read_text()) / 1e9


def steal_ticks() -> tuple[int, int]:
    """(steal, total) jiffies of all cpus from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return fields[7], sum(fields)


def node_busy(host: LinuxHost, t: float) -> float | None:
    ratios = host.sample(t, []).cpu_usage_ratio
    return sum(ratios) / len(ratios) if ratios else None


class AgentWorld:
    """The node agent over an in-memory cluster whose pods are this testbed's cgroups.

    The cluster assigns pod uids (as an API server does); the testbed names the pod
    cgroups after them, so the agent finds them the way it does on a kubelet's node."""

    def __init__(
        self,
        tb: CgroupTestbed,
        overlap: bool,
        idle_root: bool,
        config: AgentConfig | None = None,
        host: LinuxHost | None = None,
    ) -> None:
        """`config` replaces the agent configuration this benchmark picks from `overlap`
        and `idle_root`; `host` the testbed's own host (one that shapes another network
        namespace, say)."""
        from pykatalyst.api import names
        from pykatalyst.apiserver.memory import MemoryCluster

        self.tb = tb
        self.names = names
        clock = RealClock()
        self.cluster = MemoryCluster(clock=clock)
        self.node = os.uname().nodename
        ncpu = str(len(os.sched_getaffinity(0)))
        self.cluster.create(
            names.NODE,
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": self.node},
                "status": {"capacity": {"cpu": ncpu}, "allocatable": {"cpu": ncpu}},
            },
        )
        self.clock = clock
        self.host = host or tb.host()
        self.restart(config or AgentConfig.model_validate(self.base_config(overlap, idle_root)))

    @staticmethod
    def base_config(overlap: bool, idle_root: bool) -> dict[str, object]:
        """The agent configuration this benchmark runs with, as a config file's content."""
        config: dict[str, object] = {
            "cpu": {"overlap_reclaim_with_share": overlap},
            "reclaimed_root": "auto" if idle_root else "",
            # the testbed's roots are not a kubelet's: idling them breaks nothing
            "reclaimed_root_cpu_idle": idle_root,
            "checkpoint_path": None,
        }
        # an older agent (isolation_regress.py --base) idles the root with its pods, and
        # refuses a setting it does not know
        return {k: v for k, v in config.items() if k in AgentConfig.model_fields}

    def restart(self, config: AgentConfig) -> None:
        """A new agent (and enforcer) with `config`, as after an agent restart: the pods,
        the cluster and the knobs the last one wrote stay."""
        from pykatalyst.agent.agent import Agent

        self.config = config
        self.enforcer = Enforcer(self.host, clock=self.clock)
        self.agent = Agent(
            self.node, self.cluster, self.host, self.clock, config, enforcer=self.enforcer
        )
        self._shown = 0
        self.pools_shown = False

    def add_pod(
        self,
        name: str,
        container: str,
        qos: str,
        requests: dict[str, str],
        annotations: dict[str, str] | None = None,
    ) -> str:
        """Create the pod object, then its cgroups under the uid it was given."""
        from tests.fixtures.fake_node import container_id

        created = self.cluster.create(
            self.names.POD,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": "default",
                    "annotations": {self.names.QOS_LEVEL_ANNOTATION: qos} | (annotations or {}),
                },
                "spec": {
                    "nodeName": self.node,
                    "containers": [{"name": container, "resources": {"requests": requests}}],
                },
            },
        )
        uid = str(created["metadata"]["uid"])
        status = {
            "phase": "Running",
            "containerStatuses": [
                {"name": container, "containerID": f"containerd://{container_id(uid, container)}"}
            ],
        }
        self.cluster.update_status(self.names.POD, {**created, "status": status})
        k8s_qos = "besteffort" if qos == self.names.QOS_RECLAIMED_CORES else "burstable"
        cpu = requests.get("cpu")
        milli = 0 if k8s_qos != "burstable" else 1000 if cpu is None else int(float(cpu) * 1000)
        self.tb.add_pod(uid, k8s_qos, {container: milli}, sandbox=True)
        self.tb.spawn(uid, SANDBOX, ["sleep", "3600"])  # the pause process
        return uid

    def delete_pod(self, name: str) -> None:
        self.cluster.delete(self.names.POD, name, namespace="default")

    def tick(self) -> None:
        plan = self.agent.reconcile()
        if not self.pools_shown and any(p.qos_level == "reclaimed_cores" for p in plan.pods):
            self.pools_shown = True
            for pool in plan.pools:
                extra = ""
                if pool.name == "reclaim":
                    extra = f" (reclaimed pods run on {pool.terms.get('reclaimed_pods_cpus')})"
                print(f"  agent pool {pool.name}: cpus {pool.cpuset}{extra}")
            for w in plan.warnings:
                print(f"  agent warning: {w}")
        entries = self.enforcer.explain()
        for e in entries[self._shown :]:
            short = e.cgroup.split("/kubepods/", 1)[-1][:48]
            print(f"  agent wrote {short}: {e.knob.value} {e.reason} ({e.outcome})")
        self._shown = len(entries)


def run_once(
    name: str,
    tb: CgroupTestbed,
    args: argparse.Namespace,
    iters: int,
    shared_uid: str,
    reclaimed: int,
    protect: str | None,
    world: AgentWorld | None,
) -> RunResult:
    host = tb.host()
    busy_pods: list[tuple[str, str]] = []  # (pod name, uid)
    for i in range(reclaimed):
        pod_name = f"reclaimed-{name}-{i}"
        if protect == "agent":
            assert world is not None
            uid = world.add_pod(
                pod_name,
                "spin",
                world.names.QOS_RECLAIMED_CORES,
                {world.names.RECLAIMED_MILLICPU: "1000"},
            )
        else:
            uid = pod_name
            tb.add_pod(uid, "besteffort", ["spin"])
        tb.spawn(uid, "spin", BUSY)
        busy_pods.append((pod_name, uid))
    if protect == "direct":
        desired: dict[str, dict[Knob, KnobValue]] = {}
        if args.idle_root:
            desired[f"{tb.kubepods}/besteffort"] = {Knob.CPU_IDLE: 1}
        for _, uid in busy_pods:
            desired[tb.pod_cgroup(uid)] = {Knob.CPU_IDLE: 1}
            desired[tb.container_cgroup(uid, "spin")] = {Knob.CPU_SHARES: 2}
        report = Enforcer(host, clock=RealClock()).apply(desired)
        if not report.ok:
            raise SystemExit(f"enforcer failed: {report.failed}")
    ticking = world if protect == "agent" else None
    if ticking is not None:
        ticking.tick()
    time.sleep(0.5)  # let the busy loops settle on their cpus
    out = Path(tempfile.mkstemp(prefix="probe-", suffix=".json")[1])
    meter = LinuxHost()  # its own counters: the agent samples its host meanwhile
    meter.sample(time.monotonic(), [])
    t0, cpu0, (steal0, total0) = time.monotonic(), pods_cpu_s(tb), steal_ticks()
    argv = [sys.executable, "-c", PROBE, str(args.interval_ms / 1000), str(iters)]
    probe = tb.spawn(shared_uid, "probe", [*argv, str(args.seconds), str(out)])
    while probe.poll() is None:
        time.sleep(1.0 if ticking is not None else 0.5)
        if ticking is not None:
            ticking.tick()
    busy = node_busy(meter, time.monotonic()) or 0.0
    ncpu = len(os.sched_getaffinity(0))
    pods_busy = (pods_cpu_s(tb) - cpu0) / (ncpu * (time.monotonic() - t0))
    steal1, total1 = steal_ticks()
    steal = (steal1 - steal0) / max(total1 - total0, 1)
    latencies = [x * 1000 for x in json.loads(out.read_text())]
    out.unlink()
    for pod_name, uid in busy_pods:
        if ticking is not None:
            ticking.delete_pod(pod_name)
        tb.remove_pod(uid)
    return RunResult(name, latencies, busy, pods_busy, steal)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=15.0, help="length of each mode's runs")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds per mode")
    ap.add_argument("--interval-ms", type=float, default=5.0, help="time between requests")
    ap.add_argument("--work-ms", type=float, default=1.0, help="cpu work per request")
    ap.add_argument("--mode", choices=("direct", "agent"), default="direct")
    ap.add_argument("--busy-per-cpu", type=int, default=1, help="busy loops per cpu")
    ap.add_argument(
        "--shield",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="give kubepods the maximum cpu.shares, so that load outside the pods (other "
        "users of this machine) weighs less on every run alike",
    )
    ap.add_argument(
        "--idle-root",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also cpu.idle=1 on the reclaimed root (kubepods/besteffort); in agent mode "
        "this is the agent's reclaimed_root setting ('auto', or '' when off)",
    )
    ap.add_argument(
        "--overlap",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="agent mode: reclaimed pods may run on the share pool's cpus "
        "(cpu.overlap_reclaim_with_share; on here, off in the agent's defaults)",
    )
    args = ap.parse_args()

    reason = testbed_unavailable_reason()
    if reason is not None:
        print(
            f"isolation benchmark needs a writable cgroup v1 hierarchy: {reason}", file=sys.stderr
        )
        return 2
    ncpu = len(os.sched_getaffinity(0))
    iters = calibrate(args.work_ms)
    print(
        f"cpus: {ncpu}  request every {args.interval_ms} ms, {args.work_ms} ms of cpu each "
        f"({iters} loop iterations)  {args.rounds} x {args.seconds / args.rounds:.0f} s per mode  "
        f"protection: {args.mode}"
        f"{' + reclaimed root idle' if args.idle_root else ' (reclaimed root not idle)'}"
        f"{'' if args.mode == 'direct' else f'  overlap: {args.overlap}'}  "
        f"kubepods shares: {'262144 (shield)' if args.shield else 'kubelet default'}"
    )
    probe_host = LinuxHost()
    probe_host.sample(time.monotonic(), [])
    time.sleep(1.0)
    background = node_busy(probe_host, time.monotonic()) or 0.0
    print(f"node busy before the runs (other load on this machine): {background:.2f}")
    plan = [
        ("solo", 0, None),
        ("unprotected", ncpu * args.busy_per_cpu, None),
        ("protected", ncpu * args.busy_per_cpu, args.mode),
    ]
    per_round = argparse.Namespace(**{**vars(args), "seconds": args.seconds / args.rounds})
    merged: dict[str, list[RunResult]] = {name: [] for name, _, _ in plan}
    with CgroupTestbed(kubepods_shares=262144 if args.shield else None) as tb:
        overlap = bool(args.overlap)
        world = AgentWorld(tb, overlap, args.idle_root) if args.mode == "agent" else None
        if world is not None:
            shared_uid = world.add_pod(
                "probe-shared", "probe", world.names.QOS_SHARED_CORES, {"cpu": "1"}
            )
        else:
            shared_uid = SHARED_UID
            tb.add_pod(shared_uid, "burstable", {"probe": 1000})
        # Interleaved rounds, so that drifting background load hits every mode alike.
        for rnd in range(args.rounds):
            for name, n_busy, protect in plan:
                merged[name].append(
                    run_once(
                        f"{name}{rnd}", tb, per_round, iters, shared_uid, n_busy, protect, world
                    )
                )
    results = [
        RunResult(
            name,
            [x for r in runs for x in r.latencies_ms],
            statistics.fmean(r.busy for r in runs),
            statistics.fmean(r.pods_busy for r in runs),
            statistics.fmean(r.steal for r in runs),
        )
        for name, runs in merged.items()
    ]
    head = f"{'run':<12} {'requests':>8} {'p50_ms':>8} {'p90_ms':>8} {'p99_ms':>8} {'max_ms':>8}"
    print(f"{head} {'node_busy':>9} {'pods_busy':>9} {'steal':>6}")
    for r in results:
        print(
            f"{r.name:<12} {len(r.latencies_ms):>8} {r.pct(0.5):>8.3f} {r.pct(0.9):>8.3f} "
            f"{r.pct(0.99):>8.3f} {max(r.latencies_ms):>8.3f} {r.busy:>9.3f} "
            f"{r.pods_busy:>9.3f} {r.steal:>6.3f}"
        )
    for name, runs in merged.items():
        per_round = "  ".join(f"{r.pct(0.99):.2f}/{r.pods_busy:.2f}/{r.busy:.2f}" for r in runs)
        print(f"{name:<12} per round p99_ms/pods_busy/node_busy: {per_round}")
    solo, unprotected, protected = results
    for r in results:
        print(
            f"{r.name}: p50 {r.pct(0.5):.3f} ms  p99 {r.pct(0.99):.3f} ms  "
            f"busy {r.pods_busy:.2f} (node {r.busy:.2f})"
        )
    print(f"unprotected_p99_over_solo: {unprotected.pct(0.99) / solo.pct(0.99):.2f}")
    # busy: what the testbed's pods kept busy, so that other users' load cannot pass for it
    print(
        f"protected_p99_over_solo: {protected.pct(0.99) / solo.pct(0.99):.2f} "
        f"busy: {protected.pods_busy:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
