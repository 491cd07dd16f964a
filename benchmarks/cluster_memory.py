"""Throughput of MemoryCluster on the scheduler benchmark's shape: create nodes, create
pods, bind every pod, then list pods (all, and per node through the field selector)."""

from __future__ import annotations

import argparse
import time

from pykatalyst.api.names import NODE, POD
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.informer import Informer, index_by_node_name


def _pod(i: int) -> dict[str, object]:
    return {
        "metadata": {
            "name": f"pod-{i}",
            "namespace": "default",
            "labels": {"app": f"app-{i % 50}"},
            "annotations": {"katalyst.kubewharf.io/qos_level": "shared_cores"},
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {
                        "requests": {"cpu": "500m", "memory": "1Gi"},
                        "limits": {"cpu": "1", "memory": "2Gi"},
                    },
                }
            ]
        },
    }


def _node(i: int) -> dict[str, object]:
    return {
        "metadata": {"name": f"node-{i}", "labels": {"zone": f"z{i % 3}"}},
        "status": {"allocatable": {"cpu": "96", "memory": "384Gi", "pods": "110"}},
    }


def _rate(n: int, seconds: float) -> str:
    return f"{n / seconds:>10,.0f} ops/s ({n:,} in {seconds:.2f}s)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods", type=int, default=50000)
    ap.add_argument("--lists", type=int, default=5)
    args = ap.parse_args()

    mc = MemoryCluster(seed=1, watch_history=args.pods * 3)
    informer = Informer(mc, POD, indexers={"node": index_by_node_name})
    informer.sync()

    t = time.perf_counter()
    for i in range(args.nodes):
        mc.create(NODE, _node(i))
    print(f"create node   {_rate(args.nodes, time.perf_counter() - t)}")

    t = time.perf_counter()
    for i in range(args.pods):
        mc.create(POD, _pod(i))
    print(f"create pod    {_rate(args.pods, time.perf_counter() - t)}")

    t = time.perf_counter()
    for i in range(args.pods):
        mc.bind("default", f"pod-{i}", f"node-{i % args.nodes}")
    print(f"bind pod      {_rate(args.pods, time.perf_counter() - t)}")

    t = time.perf_counter()
    applied = informer.sync()
    print(f"informer sync {_rate(applied, time.perf_counter() - t)} (events applied)")

    t = time.perf_counter()
    for _ in range(args.lists):
        items = mc.list(POD).items
    dt = time.perf_counter() - t
    print(f"list all pods {args.lists / dt:>10,.1f} lists/s ({len(items):,} items each)")

    t = time.perf_counter()
    n = min(args.nodes, 1000)
    for i in range(n):
        mc.list(POD, field_selector=f"spec.nodeName=node-{i}")
    print(f"list per node {_rate(n, time.perf_counter() - t)}")

    t = time.perf_counter()
    for i in range(args.pods):
        mc.patch(POD, f"pod-{i}", {"status": {"phase": "Running"}}, "default", subresource="status")
    print(f"status patch  {_rate(args.pods, time.perf_counter() - t)}")
    assert len(informer.by_index("node", "node-0")) == args.pods // args.nodes


if __name__ == "__main__":
    main()
