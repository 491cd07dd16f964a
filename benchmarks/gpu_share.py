"""GPU-share placement on Alibaba's 2023 GPU trace, the FGD paper's method, decided by the
scheduler's own plugins (GPUShare with per-policy args, beside kube's default filters).

The trace (Weng et al., "Beware of Fragmentation", USENIX ATC '23; alibaba/clusterdata
cluster-trace-gpu-v2023) is read from a path and never shipped: see its ATTRIBUTION.md.

    python benchmarks/gpu_share.py --nodes .../openb_node_list_gpu_node.csv \\
        --pods .../openb_pod_list_default.csv --seeds 10 --plot gpu_share.png

Method (the paper's): tasks arrive in a random order (one order per seed) until the GPU
they ask for reaches the cluster's GPU capacity (the list is drawn again, in a new
order, if it runs out first); a task that fits no node fails and is counted. Nothing
departs. Each node is one Node (its cpu and memory) and one CNR with its cards as GPU
zones (1,000 gpu_memory units per card, so the trace's thousandths map exactly; cards
split over two NUMA nodes); a sharing task asks `nvidia.com/gpu: 1` and `gpu_memory:
<gpu_milli>`, a whole-GPU task `nvidia.com/gpu: N`; `gpu_spec` becomes a required node
affinity on the model label. Every node is scored (percentageOfNodesToScore 100).

Figures: the GPU allocation ratio as the arrived demand grows (`--plot`), unallocated
GPUs and failed GPU demand at 100 % arrival, the fragmentation amount left (FGD's
measure under the trace's whole task mix), the scheduling latency per pod. The last line
is `unallocated_vs_best_baseline: <fgd / best baseline> alloc_ratio: <fgd> best_baseline:
<name>`.

`--throughput` instead times the scheduling cycle alone (filter, score, reserve and the
snapshot's accounting) on 1,213 nodes of 8 cards each, per policy.

`--pairing N` instead places GPU tasks with an RDMA VF each (`sriov_nic: 1`, GPUDirect
RDMA) on N of the trace's 8-GPU nodes (drawn once, seed 0), each built as 2 sockets x 4
PCIe switches x 2 cards with one synthetic NIC of 8 VFs under every switch, tasks
arriving as above until their GPU demand reaches those nodes' capacity. It reports, per
rule, the share of multi-GPU tasks placed whose VF sits under a switch holding as many of
their cards as it can (`pcie_switch`), whose VF shares a switch with any of their cards,
and whose cards and VF share a NUMA node, besides the allocation ratio. The rules:
`pykatalyst` (GPUShare's joint rule: pairs in the node, nodes ranked by their closest
pair), `koordinator-joint` (Koordinator's documented joint allocation, re-implemented
with the same in-node rule, switch then NUMA node then node, under its default
LeastAllocated node score, which does not look at pairs) and `no-topology` (cards by
Katalyst's best fit, the VF by Katalyst's order, each blind to the other).
"""

from __future__ import annotations

import argparse
import copy
import csv
import dataclasses
import json
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pykatalyst.api import names
from pykatalyst.api.gpu import WHOLE
from pykatalyst.scheduler.config import load_config_text
from pykatalyst.scheduler.framework import Framework
from pykatalyst.scheduler.gpufrag import TaskClass, TaskMix, node_fragmentation
from pykatalyst.scheduler.podinfo import PodInfo, pod_info
from pykatalyst.scheduler.snapshot import CPU, MEMORY, NodeSnapshot

ROOT = Path(__file__).resolve().parent.parent
TRACE = next(
    (
        p / "shared/data/traces/alibaba-gpu-2023"
        for p in ROOT.parents
        if (p / "shared/data/traces/alibaba-gpu-2023").is_dir()
    ),
    ROOT / "shared/data/traces/alibaba-gpu-2023",
)
UNITS = 1000  # gpu_memory units per card: the trace's thousandths of a GPU
MODEL_LABEL = "nvidia.com/gpu.product"
MIB = 1024 * 1024

# name -> (GPUShare args, whether kube's default scorers stay on beside it)
POLICIES: dict[str, tuple[dict[str, Any], bool]] = {
    "random-fit": ({"policy": "random"}, False),
    "best-fit": ({"policy": "bestfit"}, False),
    "dot-product": ({"policy": "dotproduct"}, False),
    "gpu-packing": ({"policy": "packing"}, False),
    "gpu-clustering": ({"policy": "clustering"}, False),
    # Koordinator DeviceShare's default: LeastAllocated on the GPU memory ratio, node and card
    "koordinator": ({"policy": "spread"}, True),
    # HAMi's default: node binpack, card spread
    "hami": ({"policy": "binpack", "cardPolicy": "spread"}, True),
    # Katalyst: its in-node best fit (NUMA-affine first) under the default node scoring
    "katalyst": ({"policy": "katalyst"}, True),
    "fgd": ({"policy": "fgd"}, False),
    # FGD as the paper states it: cpu the only host resource, equal growth drawn at random
    "fgd-plain": ({"policy": "fgd", "fgdTieBreak": "random", "fgdHostResources": "cpu"}, False),
    # one change at a time: memory counted, or best-fit among equal growth
    "fgd-memory": ({"policy": "fgd", "fgdTieBreak": "random"}, False),
    "fgd-bestfit-ties": ({"policy": "fgd", "fgdHostResources": "cpu"}, False),
}
BASELINES = [p for p in POLICIES if not p.startswith("fgd")]


def profile_yaml(name: str, args: dict[str, Any], keep_default_scores: bool, seed: int) -> str:
    """`weight` in `args` is GPUShare's score weight (1 by default)."""
    weight = int(args.get("weight", 1))
    scores = "" if keep_default_scores else "    score:\n      disabled:\n      - name: '*'\n"
    scores += "      enabled:\n      - name: GPUShare\n" if scores else ""
    body = {k: v for k, v in args.items() if k != "weight"} | {"seed": seed}
    return (
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        "profiles:\n"
        f"- schedulerName: {name}\n"
        "  percentageOfNodesToScore: 100\n"
        "  plugins:\n"
        "    multiPoint:\n"
        "      enabled:\n"
        f"      - name: GPUShare\n        weight: {weight}\n"
        f"{scores}"
        "  pluginConfig:\n"
        "  - name: GPUShare\n"
        f"    args: {json.dumps(body)}\n"
    )


def framework(name: str, seed: int, extra: dict[str, Any] | None = None) -> Framework:
    args, keep = POLICIES[name]
    cfg = load_config_text(profile_yaml(name, {**args, **(extra or {})}, keep, seed))
    return Framework(cfg.profiles[0], 100, seed)


# --- the cluster ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeRow:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(frozen=True, slots=True)
class Task:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple[str, ...]

    @property
    def demand(self) -> float:
        """GPUs asked for: a sharing task its fraction, a whole-GPU task its cards."""
        if self.num_gpu == 0:
            return 0.0
        return self.gpu_milli / 1000 if self.gpu_milli < 1000 else float(self.num_gpu)


def read_nodes(path: Path) -> list[NodeRow]:
    with path.open() as f:
        return [
            NodeRow(r["sn"], int(r["cpu_milli"]), int(r["memory_mib"]), int(r["gpu"]), r["model"])
            for r in csv.DictReader(f)
            if int(r["gpu"]) > 0
        ]


def read_tasks(path: Path) -> list[Task]:
    with path.open() as f:
        return [
            Task(
                r["name"],
                int(r["cpu_milli"]),
                int(r["memory_mib"]),
                int(r["num_gpu"]),
                int(r["gpu_milli"]),
                tuple(s for s in (r.get("gpu_spec") or "").split("|") if s),
            )
            for r in csv.DictReader(f)
        ]


def gpu_zone(node: str, card: int, numa: int, model: str) -> dict[str, Any]:
    res = {names.RESOURCE_NVIDIA_GPU: "1", names.RESOURCE_GPU_MEMORY: str(UNITS)}
    return {
        "type": names.ZONE_GPU,
        "name": f"{node}-gpu{card}",
        "resources": {"allocatable": res, "capacity": res},
        "attributes": [
            {"name": names.GPU_ATTR_NUMA, "value": str(numa)},
            {"name": names.GPU_ATTR_SOCKET, "value": str(numa)},
            {"name": names.GPU_ATTR_MODEL, "value": model},
        ],
    }


def node_objects(row: NodeRow) -> tuple[dict[str, Any], dict[str, Any]]:
    alloc = {"cpu": f"{row.cpu_milli}m", "memory": f"{row.memory_mib}Mi", "pods": "1000"}
    node = {
        "metadata": {"name": row.name, "labels": {MODEL_LABEL: row.model}},
        "status": {"allocatable": alloc, "capacity": alloc},
    }
    numas = 2 if row.gpus >= 2 else 1
    per = -(-row.gpus // numas)
    sockets = []
    for numa in range(numas):
        cards = [
            gpu_zone(row.name, c, numa, row.model)
            for c in range(numa * per, min(row.gpus, (numa + 1) * per))
        ]
        zone = {"type": names.ZONE_NUMA, "name": str(numa), "children": cards}
        sockets.append({"type": names.ZONE_SOCKET, "name": str(numa), "children": [zone]})
    cnr = {"metadata": {"name": row.name}, "status": {"topologyZone": sockets}}
    return node, cnr


def build_snapshot(rows: Sequence[NodeRow]) -> NodeSnapshot:
    snap = NodeSnapshot(capacity=len(rows) + 1)
    for row in rows:
        node, cnr = node_objects(row)
        snap.upsert_node(node)
        snap.upsert_cnr(cnr)
    return snap


_BASE: dict[int, NodeSnapshot] = {}


def _base_snapshot(rows: Sequence[NodeRow]) -> NodeSnapshot:
    """The cluster before any task: built once, copied for every run."""
    key = id(rows)
    if key not in _BASE:
        _BASE[key] = build_snapshot(rows)
    return _BASE[key]


def task_pod(task: Task, uid: str, pairing: dict[str, str] | None = None) -> PodInfo:
    """`pairing`: the task also asks an RDMA VF, with these annotations."""
    requests: dict[str, str] = {"cpu": f"{task.cpu_milli}m", "memory": f"{task.memory_mib}Mi"}
    if task.num_gpu:
        requests[names.RESOURCE_NVIDIA_GPU] = str(task.num_gpu)
        if task.gpu_milli < 1000:
            requests[names.RESOURCE_GPU_MEMORY] = str(task.gpu_milli)
    if pairing is not None:
        requests[names.RESOURCE_SRIOV_NIC] = "1"
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "resources": {"requests": requests, "limits": requests}}]
    }
    if task.gpu_spec:
        term = {
            "matchExpressions": [
                {"key": MODEL_LABEL, "operator": "In", "values": list(task.gpu_spec)}
            ]
        }
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
            }
        }
    meta = {"name": uid, "namespace": "trace", "uid": uid, "annotations": dict(pairing or {})}
    return pod_info({"metadata": meta, "spec": spec})


def trace_mix(tasks: Sequence[Task]) -> TaskMix:
    """The whole trace's task mix, for measuring the fragmentation left."""
    counts: Counter[TaskClass] = Counter()
    for t in tasks:
        share = 0 if not t.num_gpu else (t.gpu_milli * UNITS if t.gpu_milli < 1000 else WHOLE)
        counts[((t.cpu_milli, t.memory_mib * MIB), t.num_gpu, share)] += 1
    return TaskMix.of(((c, float(w)) for c, w in counts.items()), 1.0)


# --- one run ------------------------------------------------------------------------------


@dataclass(slots=True)
class RunResult:
    policy: str
    seed: int
    capacity: float
    curve: list[float] = field(default_factory=list)  # allocation ratio at 0..100 % arrival
    allocated: float = 0.0
    failed_demand: float = 0.0
    failed_tasks: int = 0
    tasks: int = 0
    fragmentation: float = 0.0
    latencies: list[float] = field(default_factory=list)

    @property
    def unallocated(self) -> float:
        return self.capacity - self.allocated

    @property
    def alloc_ratio(self) -> float:
        return self.allocated / self.capacity


def arrivals(tasks: Sequence[Task], capacity: float, rng: np.random.Generator) -> list[Task]:
    out: list[Task] = []
    arrived = 0.0
    while arrived < capacity:
        for i in rng.permutation(len(tasks)).tolist():
            out.append(tasks[i])
            arrived += tasks[i].demand
            if arrived >= capacity:
                break
    return out


def run_one(
    policy: str,
    seed: int,
    rows: Sequence[NodeRow],
    tasks: Sequence[Task],
    mix: TaskMix,
    extra: dict[str, Any] | None = None,
) -> RunResult:
    snap = copy.deepcopy(_base_snapshot(rows))
    capacity = float(sum(r.gpus for r in rows))
    fw = framework(policy, seed, extra)
    order = arrivals(tasks, capacity, np.random.default_rng(seed))
    res = RunResult(policy, seed, capacity)
    arrived, next_mark = 0.0, 0
    for i, task in enumerate(order):
        info = task_pod(task, f"{task.name}-{i}")
        t0 = time.perf_counter()
        result = fw.schedule(info, snap)
        ok = result.node is not None and fw.reserve(info, result, snap) is None
        if ok:
            assert result.node is not None
            snap.assume(info, result.node, result.numa, result.gpu)
        res.latencies.append(time.perf_counter() - t0)
        arrived += task.demand
        if ok:
            res.allocated += task.demand
        else:
            res.failed_demand += task.demand
            res.failed_tasks += 1
        while next_mark <= 100 and arrived >= capacity * next_mark / 100:
            res.curve.append(res.allocated / capacity)
            next_mark += 1
    while len(res.curve) < 101:
        res.curve.append(res.allocated / capacity)
    res.tasks = len(order)
    n = snap.n
    host = snap.free[[CPU, MEMORY], :n]
    frag = node_fragmentation(snap.gpu_free[:, :n], snap.gpu_cap[:, :n], host, mix)
    res.fragmentation = float(frag.sum()) / (UNITS * 1000)
    return res


# --- reporting ----------------------------------------------------------------------------


def summary(results: Sequence[RunResult]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for policy in dict.fromkeys(r.policy for r in results):
        rs = [r for r in results if r.policy == policy]
        lat = sorted(x for r in rs for x in r.latencies)
        out[policy] = {
            "alloc_ratio": statistics.fmean(r.alloc_ratio for r in rs),
            "unallocated_gpus": statistics.fmean(r.unallocated for r in rs),
            "unallocated_sd": statistics.pstdev([r.unallocated for r in rs]),
            "failed_gpu_demand": statistics.fmean(r.failed_demand for r in rs),
            "failed_tasks": statistics.fmean(r.failed_tasks for r in rs),
            "fragmentation_gpus": statistics.fmean(r.fragmentation for r in rs),
            "latency_p50_ms": 1000 * lat[len(lat) // 2],
            "latency_p99_ms": 1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))],
        }
    return out


def print_table(table: dict[str, dict[str, float]]) -> None:
    head = f"{'policy':<16}{'alloc %':>9}{'unalloc GPUs':>14}{'sd':>6}{'failed GPU':>12}"
    head += f"{'frag GPUs':>11}{'p50 ms':>8}{'p99 ms':>8}"
    print(head)
    for name, s in table.items():
        print(
            f"{name:<16}{100 * s['alloc_ratio']:>9.2f}{s['unallocated_gpus']:>14.1f}"
            f"{s['unallocated_sd']:>6.1f}{s['failed_gpu_demand']:>12.1f}"
            f"{s['fragmentation_gpus']:>11.1f}{s['latency_p50_ms']:>8.2f}{s['latency_p99_ms']:>8.2f}"
        )


def plot(results: Sequence[RunResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for policy in dict.fromkeys(r.policy for r in results):
        curves = np.array([r.curve for r in results if r.policy == policy])
        ax.plot(np.arange(101), 100 * curves.mean(axis=0), label=policy, lw=1.4)
    ax.set_xlim(60, 100)
    ax.set_ylim(60, 100)
    ax.set_xlabel("arrived GPU demand (% of capacity)")
    ax.set_ylabel("GPUs allocated (% of capacity)")
    ax.set_title("Alibaba GPU trace 2023 (openb): allocation as demand arrives")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def verdict(results: Sequence[RunResult], table: dict[str, dict[str, float]], ours: str) -> str:
    base = [p for p in table if p != ours and p in BASELINES]
    best = min(base, key=lambda p: table[p]["unallocated_gpus"])
    seeds = sorted({r.seed for r in results})
    wins = 0
    for seed in seeds:
        mine = next(r for r in results if r.policy == ours and r.seed == seed)
        others = [r for r in results if r.policy in base and r.seed == seed]
        wins += all(mine.unallocated < o.unallocated for o in others)
    print(f"{ours} has fewer unallocated GPUs than every baseline in {wins}/{len(seeds)} seeds")
    ratio = table[ours]["unallocated_gpus"] / max(table[best]["unallocated_gpus"], 1e-9)
    return (
        f"unallocated_vs_best_baseline: {ratio:.3f} "
        f"alloc_ratio: {table[ours]['alloc_ratio']:.4f} best_baseline: {best}"
    )


# --- throughput ---------------------------------------------------------------------------


def throughput(tasks: Sequence[Task], policies: Sequence[str], pods: int) -> None:
    rows = [NodeRow(f"node-{i:04d}", 96000, 786432, 8, "G2") for i in range(1213)]
    gpu_tasks = [t for t in tasks if t.num_gpu]
    for policy in policies:
        snap = build_snapshot(rows)
        fw = Framework(framework(policy, 0).profile, None, 0)  # kube's adaptive node count
        rng = np.random.default_rng(0)
        infos = [
            task_pod(gpu_tasks[int(rng.integers(len(gpu_tasks)))], f"t{i}") for i in range(pods)
        ]
        t0, c0 = time.perf_counter(), time.process_time()
        placed = 0
        for info in infos:
            result = fw.schedule(info, snap)
            if result.node is not None and fw.reserve(info, result, snap) is None:
                snap.assume(info, result.node, result.numa, result.gpu)
                placed += 1
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        # per cpu-second as well: on a shared machine the wall clock counts others' work
        print(
            f"{policy:<16} {pods / elapsed:8.0f} pods/s, {pods / cpu:8.0f} pods per cpu-second "
            f"({placed}/{pods} placed)"
        )


# --- GPU + RDMA VF pairing ------------------------------------------------------------------

SWITCHES = 8  # per 8-card node: 2 sockets x 4 PCIe switches, 2 cards each
VFS_PER_NIC = 8
# rule -> (GPUShare args, the pod's pairing annotation, kube's default scorers kept)
PAIRING: dict[str, tuple[dict[str, Any], dict[str, str], bool]] = {
    "pykatalyst": ({"policy": "katalyst"}, {}, True),
    "koordinator-joint": (
        {"policy": "spread", "rdmaPairScoring": False},
        {names.KOORDINATOR_JOINT_ALLOCATE_ANNOTATION: '{"deviceTypes":["gpu","rdma"]}'},
        True,
    ),
    "no-topology": (
        {"policy": "katalyst"},
        {names.GPU_RDMA_AFFINITY_ANNOTATION: names.GPU_RDMA_AFFINITY_NONE},
        True,
    ),
}


def pairing_node(row: NodeRow, vfs: int, nics: int = 4) -> tuple[dict[str, Any], dict[str, Any]]:
    """An 8-card node: cards 2i, 2i+1 and NIC eth<i> (`vfs` VFs) under switch i, switches
    0-3 on socket (and NUMA node) 0, 4-7 on socket 1; `nics` < 4: a NIC under only the
    first `nics` switches of each socket."""
    node, _ = node_objects(row)
    sockets = []
    for sock in range(2):
        cards, nic_zones = [], []
        for i in range(sock * 4, sock * 4 + 4):
            sw = f"sw{i}"
            for c in (2 * i, 2 * i + 1):
                zone = gpu_zone(row.name, c, sock, row.model)
                zone["attributes"].append({"name": names.GPU_ATTR_PCIE_SWITCH, "value": sw})
                cards.append(zone)
            if i % 4 < nics:
                nic_zones.append(_nic_zone(i, sock, sw, vfs))
        numa = {"type": names.ZONE_NUMA, "name": str(sock), "children": cards}
        sockets.append(
            {"type": names.ZONE_SOCKET, "name": str(sock), "children": [numa, *nic_zones]}
        )
    return node, {"metadata": {"name": row.name}, "status": {"topologyZone": sockets}}


def _nic_zone(i: int, sock: int, sw: str, vfs: int) -> dict[str, Any]:
    def attrs(**kv: str) -> list[dict[str, str]]:
        return [{"name": k, "value": v} for k, v in kv.items()]

    one = {names.RESOURCE_SRIOV_NIC: "1"}
    vfs = [
        {
            "type": names.ZONE_NIC,
            "name": f"eth{i}_{j}",
            "resources": {"allocatable": one, "capacity": one},
            "attributes": attrs(
                pf_name=f"eth{i}",
                vf_index=str(j),
                numa=str(sock),
                socket=str(sock),
                pcie_switch=sw,
                rdma="true",
            ),
        }
        for j in range(vfs)
    ]
    bw = {names.RESOURCE_NET_BANDWIDTH: "94000"}
    return {
        "type": names.ZONE_NIC,
        "name": f"eth{i}",
        "resources": {"allocatable": bw, "capacity": bw},
        "attributes": attrs(numa=str(sock), socket=str(sock), pcie_switch=sw),
        "children": vfs,
    }


def pairing_framework(rule: str, seed: int) -> Framework:
    args, _, keep = PAIRING[rule]
    text = profile_yaml(rule, args, keep, seed).replace(
        "      - name: GPUShare\n        weight: 1\n",
        "      - name: GPUShare\n        weight: 1\n      - name: SriovVF\n",
        1,
    )
    return Framework(load_config_text(text).profiles[0], 100, seed)


@dataclass(slots=True)
class PairingResult:
    rule: str
    seed: int
    alloc_ratio: float = 0.0
    multi: int = 0  # multi-GPU tasks placed
    multi_switch: int = 0  # ... with the VF under a switch holding as many cards as it can
    multi_any_switch: int = 0  # ... with the VF under the switch of any of their cards
    multi_numa: int = 0  # ... with all cards and the VF on one NUMA node
    single: int = 0
    single_switch: int = 0
    failed_tasks: int = 0


def _count_pair(res: PairingResult, cards: Sequence[str], vf: str) -> None:
    vf_sw = int(vf.split("_")[0][3:])
    sw = [int(c.rsplit("gpu", 1)[1]) // 2 for c in cards]
    on = sum(1 for x in sw if x == vf_sw)
    numa_ok = all(x // 4 == vf_sw // 4 for x in sw)
    if len(cards) == 1:
        res.single += 1
        res.single_switch += on
        return
    res.multi += 1
    res.multi_switch += on == min(len(cards), 2)
    res.multi_any_switch += on > 0
    res.multi_numa += numa_ok


def pairing_run(
    rule: str,
    seed: int,
    rows: Sequence[NodeRow],
    tasks: Sequence[Task],
    vfs: int = VFS_PER_NIC,
    nics: int = 4,
) -> PairingResult:
    snap = NodeSnapshot(capacity=len(rows) + 1)
    for row in rows:
        node, cnr = pairing_node(row, vfs, nics)
        snap.upsert_node(node)
        snap.upsert_cnr(cnr)
    fw = pairing_framework(rule, seed)
    capacity = float(sum(r.gpus for r in rows))
    res = PairingResult(rule, seed)
    allocated = 0.0
    for i, task in enumerate(arrivals(tasks, capacity, np.random.default_rng(seed))):
        info = task_pod(task, f"{task.name}-{i}", PAIRING[rule][1] if task.num_gpu else None)
        result = fw.schedule(info, snap)
        if result.node is None or fw.reserve(info, result, snap) is not None:
            res.failed_tasks += 1
            continue
        snap.assume(info, result.node, result.numa, result.gpu, vf=result.vf)
        allocated += task.demand
        if result.gpu is not None and result.vf:
            _count_pair(res, result.gpu.ids, result.vf)
    res.alloc_ratio = allocated / capacity
    return res


def pairing_main(rows: Sequence[NodeRow], tasks: Sequence[Task], a: Any) -> None:
    eight = [r for r in rows if r.gpus == 8]
    pick = np.random.default_rng(0).permutation(len(eight))[: a.pairing]
    chosen = [eight[i] for i in sorted(pick.tolist())]
    models = {r.model for r in chosen}
    usable = [t for t in tasks if not t.gpu_spec or set(t.gpu_spec) & models]
    print(
        f"{len(chosen)} 8-GPU nodes (models {', '.join(sorted(models))}), "
        f"{a.pairing_nics} NIC(s) per socket of {a.pairing_vfs} VFs, {len(usable)} tasks"
    )
    jobs = [
        (rule, seed) for seed in range(a.first_seed, a.first_seed + a.seeds) for rule in PAIRING
    ]
    out: list[PairingResult] = []
    with ProcessPoolExecutor(max(a.jobs, 1)) as pool:
        futures = [
            pool.submit(pairing_run, rule, seed, chosen, usable, a.pairing_vfs, a.pairing_nics)
            for rule, seed in jobs
        ]
        for fut in futures:
            r = fut.result()
            out.append(r)
            print(
                f"seed {r.seed} {r.rule:<18} alloc {100 * r.alloc_ratio:6.2f} % multi-GPU "
                f"{r.multi:4d}: switch {r.multi_switch:4d} any-switch {r.multi_any_switch:4d} "
                f"numa {r.multi_numa:4d}; 1-GPU {r.single}: switch {r.single_switch}",
                flush=True,
            )
    print(
        "| rule | multi-GPU tasks placed | VF under their switch | VF under a switch of any "
        "card | cards + VF in one NUMA node | 1-GPU tasks with VF under their switch | GPU "
        "allocation |"
    )
    print("|---|---|---|---|---|---|---|")
    for rule in PAIRING:
        rs = [r for r in out if r.rule == rule]
        multi = sum(r.multi for r in rs) or 1
        single = sum(r.single for r in rs) or 1

        def pct(num: int, den: int) -> str:
            return f"{100 * num / den:.1f} %"

        print(
            f"| {rule} | {sum(r.multi for r in rs) / len(rs):.1f} | "
            f"{pct(sum(r.multi_switch for r in rs), multi)} | "
            f"{pct(sum(r.multi_any_switch for r in rs), multi)} | "
            f"{pct(sum(r.multi_numa for r in rs), multi)} | "
            f"{pct(sum(r.single_switch for r in rs), single)} | "
            f"{100 * statistics.mean(r.alloc_ratio for r in rs):.2f} % |"
        )


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--nodes", type=Path, default=TRACE / "openb_node_list_gpu_node.csv")
    ap.add_argument("--pods", type=Path, default=TRACE / "openb_pod_list_default.csv")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--fgd-args", default="{}", help="extra GPUShare args for fgd (JSON)")
    ap.add_argument("--plot", type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--dump", type=Path, help="append each run's result here (JSON lines)")
    ap.add_argument("--merge", type=Path, nargs="+", help="report on dumped runs instead")
    ap.add_argument("--jobs", type=int, default=1, help="runs at once (processes)")
    ap.add_argument("--throughput", type=int, default=0, help="time N pods per policy instead")
    ap.add_argument("--pairing", type=int, default=0, help="GPU+VF pairing on N 8-GPU nodes")
    ap.add_argument("--pairing-vfs", type=int, default=VFS_PER_NIC, help="VFs per NIC")
    ap.add_argument(
        "--pairing-nics", type=int, default=4, help="NICs per socket (under its first switches)"
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    for p in (a.nodes, a.pods):
        if not p.is_file():
            print(
                f"error: {p} not found (give --nodes/--pods; see ATTRIBUTION.md)", file=sys.stderr
            )
            return 2
    tasks = read_tasks(a.pods)
    policies = [p for p in a.policies.split(",") if p]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        print(
            f"error: unknown policy {unknown[0]!r}; known: {', '.join(POLICIES)}", file=sys.stderr
        )
        return 2
    if a.throughput:
        throughput(tasks, policies, a.throughput)
        return 0
    rows = read_nodes(a.nodes)
    if a.pairing:
        pairing_main(rows, tasks, a)
        return 0
    if a.merge:
        merged = [RunResult(**json.loads(line)) for f in a.merge for line in f.open() if line]
        report(merged, rows, tasks, a)
        return 0
    mix = trace_mix(tasks)
    extra = {"fgd": json.loads(a.fgd_args)}
    jobs = [(p, seed) for seed in range(a.first_seed, a.first_seed + a.seeds) for p in policies]
    t0 = time.perf_counter()
    results: list[RunResult] = []
    with ProcessPoolExecutor(max(a.jobs, 1)) as pool:
        futures = [
            pool.submit(run_one, p, seed, rows, tasks, mix, extra.get(p)) for p, seed in jobs
        ]
        for fut in futures:
            r = fut.result()
            results.append(r)
            if a.dump:
                with a.dump.open("a") as out:
                    out.write(json.dumps(dataclasses.asdict(r)) + "\n")
            print(
                f"seed {r.seed} {r.policy:<16} alloc {100 * r.alloc_ratio:6.2f} % "
                f"unallocated {r.unallocated:7.1f} failed {r.failed_demand:7.1f}",
                flush=True,
            )
    print(f"{len(results)} runs in {time.perf_counter() - t0:.0f} s with {a.jobs} process(es)")
    report(results, rows, tasks, a)
    return 0


def report(
    results: list[RunResult], rows: Sequence[NodeRow], tasks: Sequence[Task], a: Any
) -> None:
    seeds = sorted({r.seed for r in results})
    print(f"{len(rows)} nodes, {sum(r.gpus for r in rows)} GPUs, {len(tasks)} tasks in the list")
    print(f"{len(seeds)} seeds: {', '.join(map(str, seeds))}")
    table = summary(results)
    print_table(table)
    if a.json:
        a.json.write_text(
            json.dumps(
                {
                    "summary": table,
                    "curves": {
                        p: np.mean([r.curve for r in results if r.policy == p], axis=0).tolist()
                        for p in table
                    },
                },
                indent=1,
            )
        )
    if a.plot:
        plot(results, a.plot)
    if "fgd" in table and any(p in table for p in BASELINES):
        print(verdict(results, table, "fgd"))


if __name__ == "__main__":
    raise SystemExit(main())
