"""How long one agent reconcile takes on a busy node, and what the agent costs to run.

A 96-cpu, 2-socket machine with 200 containers (shared, named-pool, reclaimed, dedicated
NUMA-bound and system pods, one container each) whose load moves every tick. Two hosts:

- `inmemory`: an in-memory machine, so the figure is the agent's own work;
- `fake-tree`: `LinuxHost` over a fake kubelet cgroup v1 tree on disk, so sampling and
  knob reads/writes go through real files, as on a node.

Prints the median and p90 of one reconcile, the resident memory of this process, and the
cpu share of one core the agent would use at a 1 s period.

    python benchmarks/agent_reconcile.py [--ticks 200] [--pods 200]
"""

from __future__ import annotations

import argparse
import random
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.agent.inmemory_host import GIB, InMemoryHost, node_json, pod_json  # noqa: E402
from tests.fixtures.fake_node import FakePod, container_id, make_kubelet_tree  # noqa: E402

from pykatalyst.agent.agent import Agent  # noqa: E402
from pykatalyst.agent.config import AgentConfig  # noqa: E402
from pykatalyst.agent.enforcer import Enforcer  # noqa: E402
from pykatalyst.api import names  # noqa: E402
from pykatalyst.apiserver.memory import MemoryCluster  # noqa: E402
from pykatalyst.cluster.clock import VirtualClock  # noqa: E402
from pykatalyst.topology.machine import CPUTopology  # noqa: E402

TOPO = CPUTopology.synthetic(2, 24, 2, memory_per_numa=192 * GIB)
CPU_TIMES: list[float] = []  # process cpu time of each measured reconcile
DEDICATED = {names.MEMORY_ENHANCEMENT_ANNOTATION: '{"numa_binding": "true"}'}
FLINK = {names.CPU_ENHANCEMENT_ANNOTATION: '{"cpuset_pool": "flink"}'}


def pod_mix(n: int) -> list[tuple[str, dict[str, Any], str]]:
    """(name, pod_json kwargs, kubelet qos class) for n pods."""
    out: list[tuple[str, dict[str, Any], str]] = []
    for i in range(n):
        kind = i % 20
        if kind < 10:
            out.append((f"web-{i}", {"cpu": "500m", "memory": "512Mi"}, "burstable"))
        elif kind < 12:
            out.append((f"flink-{i}", {"cpu": "1", "annotations": FLINK}, "burstable"))
        elif kind < 18:
            kw: dict[str, Any] = {
                "level": "reclaimed_cores",
                "cpu": None,
                "memory": None,
                "reclaimed_cpu": "1k",
                "reclaimed_memory": "1Gi",
            }
            out.append((f"batch-{i}", kw, "besteffort"))
        elif kind == 18 and i < 100:
            kw = {"level": "dedicated_cores", "cpu": "2", "annotations": DEDICATED}
            kw["memory"] = "4Gi"
            out.append((f"db-{i}", kw, "guaranteed"))
        else:
            out.append((f"sys-{i}", {"level": "system_cores", "cpu": "100m"}, "burstable"))
    return out


def bench_inmemory(pods: int, ticks: int) -> list[float]:
    clock = VirtualClock(1_000_000)
    cluster = MemoryCluster(clock=clock)
    cluster.create(names.NODE, node_json("node-1"))
    host = InMemoryHost(TOPO)
    agent = Agent("node-1", cluster, host, clock, AgentConfig(), Enforcer(host, None, clock))
    uids = []
    for name, kw, qos in pod_mix(pods):
        obj = cluster.create(names.POD, pod_json(name, **kw), "default")
        uid = obj["metadata"]["uid"]
        host.add_pod(uid, qos_class=qos)
        uids.append(uid)
    rng = random.Random(1)
    clock.advance(60)
    for _ in range(5):  # warm: first discovery, first writes
        agent.reconcile(clock.now())
        clock.advance(1)
    times = []
    for _ in range(ticks):
        for uid in rng.sample(uids, 20):
            host.set_load(uid, rng.uniform(0, 1.5))
        t0 = time.perf_counter()
        c0 = time.process_time()
        agent.reconcile(clock.now())
        times.append(time.perf_counter() - t0)
        CPU_TIMES.append(time.process_time() - c0)
        clock.advance(1)
    return times


def bench_fake_tree(pods: int, ticks: int, moving: int = 20) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        clock = VirtualClock(1_000_000)
        cluster = MemoryCluster(clock=clock)
        cluster.create(names.NODE, node_json("node-1"))
        fakes: list[FakePod] = []
        objs = []
        for name, kw, qos in pod_mix(pods):
            obj = cluster.create(names.POD, pod_json(name, **kw), "default")
            uid = obj["metadata"]["uid"]
            fakes.append(FakePod(uid, qos))  # type: ignore[arg-type]
            objs.append(obj)
        node = make_kubelet_tree(root, fakes, version=1, topology=TOPO)
        # container ids in pod status, as the kubelet reports them
        for obj in objs:
            uid = obj["metadata"]["uid"]
            cid = container_id(uid, "app")
            status = {"containerStatuses": [{"name": "app", "containerID": f"containerd://{cid}"}]}
            cluster.patch(
                names.POD,
                obj["metadata"]["name"],
                {"status": status},
                "default",
                subresource="status",
            )
        host = node.host()
        # as `katalyst agent` builds it: the enforcer trusts its own writes between resyncs
        cfg = AgentConfig()
        enforcer = Enforcer(host, None, clock, verify_period_s=cfg.resync_s)
        agent = Agent("node-1", cluster, host, clock, cfg, enforcer)
        clock.advance(60)
        usage = {f.uid: 0.0 for f in fakes}
        rng = random.Random(2)
        for _ in range(5):
            agent.reconcile(clock.now())
            clock.advance(1)
        times = []
        for _ in range(ticks):
            for f in rng.sample(fakes, min(moving, len(fakes))):
                usage[f.uid] += rng.uniform(0, 1.5)
                node.set_cpu_usage(node.container_cgroup(f.uid, "app"), usage[f.uid])
            t0 = time.perf_counter()
            c0 = time.process_time()
            agent.reconcile(clock.now())
            times.append(time.perf_counter() - t0)
            CPU_TIMES.append(time.process_time() - c0)
            clock.advance(1)
        return times


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def report(label: str, times: list[float], period_s: float = 1.0) -> float:
    """Wall-clock median and p90; cpu share from process cpu time (less sensitive than wall
    time to other processes on a busy machine)."""
    ms = sorted(t * 1000 for t in times)
    median = statistics.median(ms)
    p90 = ms[int(len(ms) * 0.9) - 1]
    cpu = CPU_TIMES[-len(times) :]
    cpu_median = statistics.median(cpu) * 1000
    cpu_pct = statistics.mean(cpu) / period_s * 100
    print(
        f"{label:10s} reconcile median {median:7.2f} ms  p90 {p90:7.2f} ms  "
        f"(cpu time median {cpu_median:6.2f} ms)  cpu at 1 s period {cpu_pct:5.2f} % of one core"
    )
    return median


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=200)
    ap.add_argument("--pods", type=int, default=200)
    ap.add_argument(
        "--moving",
        type=int,
        default=20,
        help="fake-tree containers whose cpu usage moves each tick (the rest sit idle)",
    )
    args = ap.parse_args()
    print(
        f"node: {TOPO.num_cpus} cpus, {args.pods} containers, {args.ticks} ticks, "
        f"{args.moving} fake-tree containers busy per tick"
    )
    m1 = report("inmemory", bench_inmemory(args.pods, args.ticks))
    m2 = report("fake-tree", bench_fake_tree(args.pods, args.ticks, args.moving))
    rss = rss_mib()
    print(f"resident memory {rss:.1f} MiB (target <= 100 MiB)")
    print(
        f"median_ms_inmemory: {m1:.2f} median_ms_fake_tree: {m2:.2f} "
        f"(target <= 20 ms) rss_mib: {rss:.1f}"
    )


if __name__ == "__main__":
    main()
