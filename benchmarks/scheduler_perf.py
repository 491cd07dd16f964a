"""A scheduler_perf-like run of the scheduler over MemoryCluster.

Nodes (and, for the QoS mix, CNRs with reclaimed capacity and four NUMA zones on two
sockets) are created, `--init-pods` pods are placed on them directly, then `--pods` pending
pods are created and the scheduler binds them. The measured time covers the informers
taking in the pending pods and every scheduling cycle with its binding (and Events).

    python benchmarks/scheduler_perf.py --nodes 5000 --init-pods 1000 --pods 10000 \
        --workload basic

Workloads: `basic` is kube-scheduler's SchedulingBasic (default profile, every pod asks
for 100m cpu and 500Mi memory); `qos-mix` uses examples/scheduler/katalyst-scheduler-numa.yaml
with 60% shared, 30% reclaimed and 10% dedicated NUMA-bound pods (a fifth of those
NUMA-exclusive). The last line printed is `pods/s: <number>`.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.scheduler.config import default_config, load_config
from pykatalyst.scheduler.scheduler import Scheduler

ROOT = Path(__file__).resolve().parent.parent
QOS_CONFIG = ROOT / "examples" / "scheduler" / "katalyst-scheduler-numa.yaml"
NUMA_PER_NODE = 4
NUMA_CPUS = 12
NUMA_MEMORY_GI = 32


def node(i: int, workload: str) -> dict[str, Any]:
    if workload == "basic":
        alloc = {"cpu": "4", "memory": "32Gi", "pods": "110"}
    else:
        alloc = {
            "cpu": str(NUMA_PER_NODE * NUMA_CPUS),
            "memory": f"{NUMA_PER_NODE * NUMA_MEMORY_GI}Gi",
            "pods": "110",
        }
    return {
        "metadata": {
            "name": f"node-{i}",
            "labels": {
                "kubernetes.io/hostname": f"node-{i}",
                "topology.kubernetes.io/zone": f"zone-{i % 3}",
            },
        },
        "status": {"allocatable": alloc, "capacity": alloc},
    }


def cnr_status() -> dict[str, Any]:
    sockets = []
    for s in range(2):
        children = []
        for k in range(NUMA_PER_NODE // 2):
            numa = s * (NUMA_PER_NODE // 2) + k
            children.append(
                {
                    "type": names.ZONE_NUMA,
                    "name": str(numa),
                    "resources": {
                        "allocatable": {"cpu": str(NUMA_CPUS), "memory": f"{NUMA_MEMORY_GI}Gi"},
                        "capacity": {"cpu": str(NUMA_CPUS), "memory": f"{NUMA_MEMORY_GI}Gi"},
                    },
                }
            )
        sockets.append({"type": names.ZONE_SOCKET, "name": str(s), "children": children})
    return {
        "resources": {
            "allocatable": {names.RECLAIMED_MILLICPU: "16k", names.RECLAIMED_MEMORY: "32Gi"},
            "capacity": {names.RECLAIMED_MILLICPU: "16k", names.RECLAIMED_MEMORY: "32Gi"},
        },
        "topologyZone": sockets,
        "topologyPolicy": names.TOPOLOGY_POLICY_NUMERIC_CONTAINER,
    }


def pod(i: int, kind: str, scheduler_name: str, node_name: str = "") -> dict[str, Any]:
    annotations: dict[str, str] = {}
    if kind == "basic":
        res = {"cpu": "100m", "memory": "500Mi"}
    elif kind == "shared":
        annotations[names.QOS_LEVEL_ANNOTATION] = names.QOS_SHARED_CORES
        res = {"cpu": "500m", "memory": "1Gi"}
    elif kind == "reclaimed":
        annotations[names.QOS_LEVEL_ANNOTATION] = names.QOS_RECLAIMED_CORES
        res = {names.RECLAIMED_MILLICPU: "1k", names.RECLAIMED_MEMORY: "2Gi"}
    else:
        annotations[names.QOS_LEVEL_ANNOTATION] = names.QOS_DEDICATED_CORES
        exclusive = kind == "dedicated-exclusive"
        enh = '{"numa_binding": "true"%s}' % (', "numa_exclusive": "true"' if exclusive else "")
        annotations[names.MEMORY_ENHANCEMENT_ANNOTATION] = enh
        res = {"cpu": "8", "memory": "16Gi"} if exclusive else {"cpu": "4", "memory": "8Gi"}
    spec: dict[str, Any] = {
        "schedulerName": scheduler_name,
        "containers": [
            {"name": "main", "image": "pause", "resources": {"requests": res, "limits": res}}
        ],
    }
    if node_name:
        spec["nodeName"] = node_name
    return {
        "metadata": {"name": f"pod-{i}", "namespace": "default", "annotations": annotations},
        "spec": spec,
    }


def kind_of(i: int, workload: str) -> str:
    if workload == "basic":
        return "basic"
    r = i % 50
    if r < 30:
        return "shared"
    if r < 45:
        return "reclaimed"
    return "dedicated-exclusive" if r == 49 else "dedicated"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--init-pods", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=10000)
    ap.add_argument("--workload", choices=("basic", "qos-mix"), default="basic")
    ap.add_argument(
        "--percentage",
        type=int,
        default=None,
        help="percentageOfNodesToScore (default: the configuration's, adaptive as in kube)",
    )
    ap.add_argument("--no-events", action="store_true", help="skip the Scheduled Events")
    ap.add_argument("--profile", action="store_true", help="print the hottest functions")
    args = ap.parse_args()

    clock = VirtualClock()
    cluster = MemoryCluster(clock, watch_history=args.pods + args.init_pods + 10_000)
    t0 = time.perf_counter()
    for i in range(args.nodes):
        cluster.create(names.NODE, node(i, args.workload))
        if args.workload == "qos-mix":
            cnr = cluster.create(
                names.CUSTOM_NODE_RESOURCE,
                {
                    "apiVersion": names.CUSTOM_NODE_RESOURCE.api_version,
                    "kind": names.CUSTOM_NODE_RESOURCE.kind,
                    "metadata": {"name": f"node-{i}"},
                },
            )
            cnr["status"] = cnr_status()
            cluster.update_status(names.CUSTOM_NODE_RESOURCE, cnr)
    if args.workload == "basic":
        config = default_config()
        scheduler_name = "default-scheduler"
    else:
        config = load_config(QOS_CONFIG)
        scheduler_name = names.DEFAULT_SCHEDULER_NAME
    for i in range(args.init_pods):
        kind = "basic" if args.workload == "basic" else ("shared", "reclaimed")[i % 2]
        cluster.create(
            names.POD,
            pod(args.pods + i, kind, scheduler_name, f"node-{i % max(args.nodes, 1)}"),
            "default",
        )
    sched = Scheduler(
        cluster,
        config,
        record_scheduled_events=not args.no_events,
        percentage_of_nodes_to_score=args.percentage,
    )
    sched.sync(clock.now())
    setup = time.perf_counter() - t0
    for i in range(args.pods):
        cluster.create(names.POD, pod(i, kind_of(i, args.workload), scheduler_name), "default")

    # Everything built so far lives for the whole run: keep the collector from walking it
    # again and again (what a long-running scheduler does after its first sync too).
    gc.collect()
    gc.freeze()
    prof = cProfile.Profile() if args.profile else None
    if prof is not None:
        prof.enable()
    start = time.perf_counter()
    cpu_start = time.process_time()
    sched.sync(clock.now())
    ingest = time.perf_counter() - start
    latencies: list[float] = []
    bound = failed = 0
    while True:
        t = time.perf_counter()
        outcome = sched.schedule_one(clock.now())
        if outcome is None:
            break
        latencies.append(time.perf_counter() - t)
        if outcome.node is not None:
            bound += 1
        else:
            failed += 1
    total = time.perf_counter() - start
    cpu_total = time.process_time() - cpu_start
    if prof is not None:
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)

    lat = np.array(latencies) * 1000
    pct = sched.frameworks[scheduler_name].percentage
    print(f"workload:            {args.workload}")
    print(f"nodes:               {args.nodes}")
    print(f"init pods:           {args.init_pods}")
    print(f"measured pods:       {args.pods} ({bound} bound, {failed} attempts failed)")
    print(f"percentageOfNodes:   {pct if pct else 'adaptive'}")
    print(f"setup:               {setup:.2f}s")
    print(f"ingest pending pods: {ingest:.2f}s")
    print(f"schedule + bind:     {total - ingest:.2f}s")
    if len(lat):
        print(
            f"per-pod latency ms:  p50 {np.percentile(lat, 50):.3f}  "
            f"p90 {np.percentile(lat, 90):.3f}  p99 {np.percentile(lat, 99):.3f}  "
            f"max {lat.max():.3f}"
        )
    print(f"scheduling-only pods/s: {bound / max(total - ingest, 1e-9):.0f}")
    per_cpu = bound / max(cpu_total, 1e-9)
    print(f"cpu time:            {cpu_total:.2f}s ({per_cpu:.0f} pods per cpu-second)")
    print(f"pods/s: {bound / max(total, 1e-9):.0f}")
    return 0 if bound == args.pods else 1


if __name__ == "__main__":
    sys.exit(main())
