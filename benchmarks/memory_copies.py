"""What MemoryCluster's copies cost on the simulator's hottest writes: an agent patching
its node's status and annotations many times a period (the reply dropped), while three
informers (the scheduler's shape) read every change from their watches. Prints CPU
microseconds per patch and per event read; compare two trees by running it with each."""

from __future__ import annotations

import argparse
import time

from pykatalyst.api.names import NODE
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.informer import Informer


def _node(i: int) -> dict[str, object]:
    zones = [
        {
            "type": "Numa",
            "name": str(n),
            "resources": {"allocatable": {"cpu": "24", "memory": "96Gi"}},
            "allocations": [
                {"consumer": f"default/pod-{i}-{n}-{k}/uid", "requests": {"cpu": "1"}}
                for k in range(6)
            ],
        }
        for n in range(4)
    ]
    return {
        "metadata": {
            "name": f"node-{i}",
            "labels": {"zone": f"z{i % 3}", "kubernetes.io/hostname": f"node-{i}"},
            "annotations": {"katalyst.kubewharf.io/topology": str(zones)},
        },
        "status": {
            "allocatable": {"cpu": "96", "memory": "384Gi", "pods": "110"},
            "capacity": {"cpu": "96", "memory": "384Gi", "pods": "110"},
            "conditions": [
                {"type": t, "status": "False", "lastHeartbeatTime": "t0", "reason": "Ok"}
                for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
            ],
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    mc = MemoryCluster(seed=1, watch_history=args.nodes * 4)
    for i in range(args.nodes):
        mc.create(NODE, _node(i))
    informers = [Informer(mc, NODE) for _ in range(3)]
    for inf in informers:
        inf.sync()
    patch_s = read_s = 0.0
    events = 0
    for r in range(args.rounds):
        c0 = time.process_time()
        for i in range(args.nodes):
            body = {"metadata": {"annotations": {"pykatalyst.io/round": str(r)}}}
            mc.patch(NODE, f"node-{i}", body)
            beat = {"status": {"conditions": [{"type": "Ready", "lastHeartbeatTime": f"t{r}"}]}}
            mc.patch(NODE, f"node-{i}", beat, patch_type="strategic", subresource="status")
        c1 = time.process_time()
        events += sum(inf.sync() for inf in informers)
        c2 = time.process_time()
        patch_s += c1 - c0
        read_s += c2 - c1
    patches = 2 * args.nodes * args.rounds
    print(
        f"patch {patch_s / patches * 1e6:7.1f} us ({patches} writes, {patch_s:.2f} CPU s); "
        f"watch read {read_s / events * 1e6:6.1f} us an event ({events} events, {read_s:.2f} s)"
    )


if __name__ == "__main__":
    main()
