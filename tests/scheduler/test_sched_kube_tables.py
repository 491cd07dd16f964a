"""kube-scheduler's NodeResourcesFit and NodeResourcesBalancedAllocation facts, case by case.

Each table below states what kube-scheduler (v1.34) decides for a pod, some nodes and the
pods already on them: the reasons a node is refused, and each node's score under
LeastAllocated, MostAllocated, RequestedToCapacityRatio and BalancedAllocation. The
quantities are kube's own (its tables write `cpu: "4000"` for 4000 cores); the
arithmetic does not depend on the unit. Cases that exercise what pykatalyst does not
implement (pod-level resources, DRA-backed extended resources, the SidecarContainers
feature gate switched off) are left out; docs/scheduler.md lists them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import yaml

from pykatalyst.scheduler.framework import Framework
from pykatalyst.scheduler.plugins.base import CycleState
from pykatalyst.scheduler.podinfo import pod_info
from pykatalyst.scheduler.snapshot import NodeSnapshot
from tests.scheduler.sched_helpers import profile

Res = dict[str, str]

EXT = "abc.com/xyz"
DEFAULT = (("cpu", 1), ("memory", 1))
WITH_EXT = (("cpu", 1), ("memory", 1), (EXT, 1))


def kpod(
    *containers: Res | None,
    init: tuple[Res, ...] = (),
    sidecars: tuple[Res | None, ...] = (),
    overhead: Res | None = None,
    node: str = "",
) -> dict[str, Any]:
    """A pod the way kube's test builders make one: a container per request list (None:
    a container without resources), requests only; sidecars are restartable init
    containers, listed before the classic ones."""

    def container(i: int, req: Res | None, prefix: str) -> dict[str, Any]:
        c: dict[str, Any] = {"name": f"{prefix}{i}", "image": "pause"}
        if req is not None:
            c["resources"] = {"requests": dict(req)}
        return c

    spec: dict[str, Any] = {"containers": [container(i, r, "c") for i, r in enumerate(containers)]}
    inits = [{**container(i, r, "s"), "restartPolicy": "Always"} for i, r in enumerate(sidecars)]
    inits += [container(i, r, "i") for i, r in enumerate(init)]
    if inits:
        spec["initContainers"] = inits
    if overhead is not None:
        spec["overhead"] = dict(overhead)
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": "p", "namespace": "default"}, "spec": spec}


def knode(name: str, pods: str | None = "32", **alloc: str) -> dict[str, Any]:
    res = {k.replace("__", "/").replace("_", "-"): v for k, v in alloc.items()}
    if pods is not None:
        res["pods"] = pods
    return {"metadata": {"name": name}, "status": {"allocatable": res, "capacity": res}}


def build(nodes: list[dict[str, Any]], existing: list[dict[str, Any]]) -> NodeSnapshot:
    snap = NodeSnapshot(capacity=2)
    for n in nodes:
        snap.upsert_node(n)
    for i, p in enumerate(existing):
        p["metadata"] = {"name": f"e{i}", "namespace": "default", "uid": f"e{i}"}
        snap.observe_pod(pod_info(p))
    return snap


def fit_framework(args: dict[str, Any]) -> Framework:
    cfg = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": "default-scheduler",
                "pluginConfig": [{"name": "NodeResourcesFit", "args": args}],
            }
        ],
    }
    return Framework(profile(yaml.safe_dump(cfg)), 100, 0)


@dataclass
class ScoreCase:
    name: str
    pod: dict[str, Any]
    nodes: list[dict[str, Any]]
    want: list[int]
    existing: list[dict[str, Any]] = field(default_factory=list)
    resources: tuple[tuple[str, int], ...] = DEFAULT
    shape: tuple[tuple[int, int], ...] = ()


def _strategy_args(strategy: str, case: ScoreCase) -> dict[str, Any]:
    strat: dict[str, Any] = {
        "type": strategy,
        "resources": [{"name": n, "weight": w} for n, w in case.resources],
    }
    if case.shape:
        strat["requestedToCapacityRatio"] = {
            "shape": [{"utilization": u, "score": s} for u, s in case.shape]
        }
    return {"scoringStrategy": strat}


def fit_scores(strategy: str, case: ScoreCase) -> list[int]:
    fw = fit_framework(_strategy_args(strategy, case))
    snap = build(case.nodes, case.existing)
    idx = np.arange(snap.n, dtype=np.intp)
    plugin = fw.plugins["NodeResourcesFit"]
    got = plugin.score(pod_info(case.pod), CycleState(), snap, idx)
    return [got] * snap.n if isinstance(got, int) else [int(v) for v in got]


N4_10 = [knode("node1", cpu="4000", memory="10000"), knode("node2", cpu="4000", memory="10000")]
N4_6 = [knode("node1", cpu="4000", memory="10000"), knode("node2", cpu="6000", memory="10000")]
N10_20 = [knode("node1", cpu="10000", memory="20000"), knode("node2", cpu="10000", memory="20000")]
N10_2050 = [
    knode("node1", cpu="10000", memory="20000"),
    knode("node2", cpu="10000", memory="50000"),
]
N6_EXT = [
    knode("node1", cpu="6000", memory="10000"),
    knode("node2", cpu="6000", memory="10000", **{"abc.com__xyz": "4"}),
]
N6_EXT2 = [
    knode("node1", cpu="6000", memory="10000", **{"abc.com__xyz": "4"}),
    knode("node2", cpu="6000", memory="10000", **{"abc.com__xyz": "10"}),
]
TWO = ({"cpu": "1000", "memory": "2000"}, {"cpu": "2000", "memory": "3000"})
CPU3 = {"cpu": "3000", "memory": "0"}
CPU3_MEM5 = {"cpu": "3000", "memory": "5000"}


LEAST = [
    ScoreCase("nothing scheduled, nothing requested", kpod(), N4_10, [100, 100]),
    ScoreCase("resources requested, differently sized nodes", kpod(*TWO), N4_6, [37, 50]),
    ScoreCase(
        "no resources requested, pods scheduled",
        kpod(),
        N4_10,
        [100, 100],
        [kpod(node="node1"), kpod(node="node1"), kpod(node="node2"), kpod(node="node2")],
    ),
    ScoreCase(
        "no resources requested, pods scheduled with resources",
        kpod(),
        N10_20,
        [70, 57],
        [
            kpod(CPU3, node="node1"),
            kpod(CPU3, node="node1"),
            kpod(CPU3, node="node2"),
            kpod(CPU3_MEM5, node="node2"),
        ],
    ),
    ScoreCase(
        "resources requested, pods scheduled with resources",
        kpod(*TWO),
        N10_20,
        [57, 45],
        [kpod(CPU3, node="node1"), kpod(CPU3_MEM5, node="node2")],
    ),
    ScoreCase(
        "resources requested, pods scheduled with resources, differently sized nodes",
        kpod(*TWO),
        N10_2050,
        [57, 60],
        [kpod(CPU3, node="node1"), kpod(CPU3_MEM5, node="node2")],
    ),
    ScoreCase(
        "requested resources exceed node capacity",
        kpod(CPU3),
        N4_10,
        [50, 25],
        [kpod(CPU3, node="node1"), kpod(CPU3_MEM5, node="node2")],
    ),
    ScoreCase(
        "zero node resources, pods scheduled with resources",
        kpod(),
        [knode("node1"), knode("node2")],
        [0, 0],
        [kpod(CPU3, node="node1"), kpod(CPU3_MEM5, node="node2")],
    ),
    ScoreCase(
        "different weights on cpu and memory",
        kpod(*TWO),
        N4_6,
        [41, 50],
        resources=(("memory", 2), ("cpu", 1)),
    ),
    ScoreCase(
        "an extended resource the pod does not request is bypassed",
        kpod(*TWO),
        N6_EXT,
        [50, 50],
        resources=WITH_EXT,
    ),
    ScoreCase(
        "an extended resource the pod requests is honoured",
        kpod({"cpu": "3000", "memory": "5000", EXT: "2"}),
        N6_EXT2,
        [50, 60],
        resources=WITH_EXT,
    ),
    ScoreCase(
        "a resource the node does not have is left out",
        kpod({"cpu": "3000", "memory": "4000"}),
        N6_EXT,
        [55, 55],
        resources=((EXT, 2), ("cpu", 1), ("memory", 1)),
    ),
    # TestFitScore
    ScoreCase(
        "fit score, LeastAllocated",
        kpod({"cpu": "1000", "memory": "2000"}),
        N4_6,
        [32, 63],
        [
            kpod({"cpu": "2000", "memory": "4000"}, node="node1"),
            kpod({"cpu": "1000", "memory": "2000"}, node="node2"),
        ],
    ),
]

MOST = [
    ScoreCase("nothing scheduled, nothing requested", kpod(), N4_10, [0, 0]),
    ScoreCase("resources requested, differently sized nodes", kpod(*TWO), N4_6, [62, 50]),
    ScoreCase(
        "no resources requested, pods scheduled with resources",
        kpod(),
        N10_20,
        [30, 42],
        [
            kpod(CPU3, node="node1"),
            kpod(CPU3, node="node1"),
            kpod(CPU3, node="node2"),
            kpod(CPU3_MEM5, node="node2"),
        ],
    ),
    ScoreCase(
        "resources requested, pods scheduled with resources",
        kpod(*TWO),
        N10_20,
        [42, 55],
        [kpod(CPU3, node="node1"), kpod(CPU3_MEM5, node="node2")],
    ),
    ScoreCase(
        "resources requested equal node capacity",
        kpod({"cpu": "2000", "memory": "4000"}, {"cpu": "3000", "memory": "5000"}),
        [knode("node1", cpu="5000", memory="10000"), knode("node2", cpu="10000", memory="9000")],
        [95, 75],
    ),
    ScoreCase(
        "different weights on cpu and memory",
        kpod(*TWO),
        N4_6,
        [58, 50],
        resources=(("memory", 2), ("cpu", 1)),
    ),
    ScoreCase(
        "no resources requested, pods scheduled, nonzero request for resource",
        kpod(None),
        [knode("node1", cpu="250m", memory="1000Mi"), knode("node2", cpu="250m", memory="1000Mi")],
        [80, 30],
        [kpod(None, node="node1"), kpod(None, node="node1")],
    ),
    ScoreCase(
        "an extended resource the pod does not request is bypassed",
        kpod(*TWO),
        N6_EXT,
        [50, 50],
        resources=WITH_EXT,
    ),
    ScoreCase(
        "an extended resource the pod requests is honoured",
        kpod({"cpu": "3000", "memory": "5000", EXT: "2"}),
        N6_EXT2,
        [50, 40],
        resources=WITH_EXT,
    ),
    ScoreCase(
        "a resource the node does not have is left out",
        kpod({"cpu": "3000", "memory": "4000"}),
        N6_EXT,
        [45, 45],
        resources=((EXT, 2), ("cpu", 1), ("memory", 1)),
    ),
    # TestFitScore
    ScoreCase(
        "fit score, MostAllocated",
        kpod({"cpu": "1000", "memory": "2000"}),
        N4_6,
        [67, 36],
        [
            kpod({"cpu": "2000", "memory": "4000"}, node="node1"),
            kpod({"cpu": "1000", "memory": "2000"}, node="node2"),
        ],
    ),
    ScoreCase(
        "fit score, MostAllocated with a sidecar container",
        kpod({"cpu": "1000", "memory": "2000"}),
        N4_10,
        [67, 45],
        [
            kpod(
                {"cpu": "1000", "memory": "2000"},
                sidecars=({"cpu": "1000", "memory": "2000"},),
                node="node1",
            ),
            kpod({"cpu": "1000", "memory": "2000"}, node="node2"),
        ],
    ),
]

FALLING = ((0, 10), (100, 0))
RISING_1 = ((0, 0), (100, 1))
FOO, BAR = "intel.com/foo", "intel.com/bar"
MIB = 1024 * 1024


def ext_node(name: str, milli_cpu: int, memory: int, **ext: int) -> dict[str, Any]:
    res = {"cpu": f"{milli_cpu}m", "memory": str(memory)}
    res.update({f"intel.com/{k}": str(v) for k, v in ext.items()})
    return knode(name, pods=None, **{k.replace("/", "__"): v for k, v in res.items()})


FOO_NODES = [
    ext_node("node1", 4000, 10000 * MIB, foo=8),
    ext_node("node2", 4000, 10000 * MIB, foo=4),
]
MULTI_NODES = [
    ext_node("node1", 4000, 10000 * MIB, foo=8, bar=4),
    ext_node("node2", 4000, 10000 * MIB, foo=4, bar=8),
]
FOO_ONLY = ((FOO, 1),)
FOO_BAR = ((FOO, 3), (BAR, 5))

RTCR = [
    ScoreCase(
        "nothing requested (least requested nodes have priority)",
        kpod(),
        N4_10,
        [100, 100],
        [kpod(node="node1"), kpod(node="node1")],
        shape=FALLING,
    ),
    ScoreCase(
        "resources requested, differently sized nodes",
        kpod(*TWO),
        N4_6,
        [38, 50],
        [kpod(node="node1"), kpod(node="node1")],
        shape=FALLING,
    ),
    ScoreCase(
        "no resources requested, pods scheduled with resources",
        kpod(),
        N4_6,
        [38, 50],
        [kpod(CPU3_MEM5, node="node1"), kpod(CPU3_MEM5, node="node2")],
        shape=FALLING,
    ),
    # TestFitScore
    ScoreCase(
        "fit score, falling shape",
        kpod(CPU3_MEM5),
        N4_6,
        [10, 32],
        [
            kpod({"cpu": "2000", "memory": "4000"}, node="node1"),
            kpod({"cpu": "1000", "memory": "2000"}, node="node2"),
        ],
        shape=FALLING,
    ),
    ScoreCase(
        "fit score, rising shape",
        kpod(CPU3_MEM5),
        N4_6,
        [95, 68],
        [
            kpod({"cpu": "2000", "memory": "4000"}, node="node1"),
            kpod({"cpu": "1000", "memory": "2000"}, node="node2"),
        ],
        shape=((0, 0), (100, 10)),
    ),
    # TestResourceBinPackingSingleExtended
    ScoreCase(
        "one extended resource, nothing requested",
        kpod(),
        FOO_NODES,
        [0, 0],
        resources=FOO_ONLY,
        shape=RISING_1,
    ),
    ScoreCase(
        "one extended resource, pods scheduled with less resources",
        kpod({FOO: "2"}),
        FOO_NODES,
        [2, 5],
        [kpod()],
        resources=FOO_ONLY,
        shape=RISING_1,
    ),
    ScoreCase(
        "one extended resource, on a node with a pod using it",
        kpod({FOO: "2"}),
        FOO_NODES,
        [2, 10],
        [kpod({FOO: "2"}, node="node2")],
        resources=FOO_ONLY,
        shape=RISING_1,
    ),
    ScoreCase(
        "one extended resource, pods scheduled with more resources",
        kpod({FOO: "4"}),
        FOO_NODES,
        [5, 10],
        [kpod()],
        resources=FOO_ONLY,
        shape=RISING_1,
    ),
    # TestResourceBinPackingMultipleExtended
    ScoreCase(
        "two extended resources, nothing requested",
        kpod(),
        MULTI_NODES,
        [0, 0],
        resources=FOO_BAR,
        shape=RISING_1,
    ),
    ScoreCase(
        "two extended resources, pods scheduled with less resources",
        kpod({FOO: "2", BAR: "2"}),
        MULTI_NODES,
        [4, 3],
        [kpod()],
        resources=FOO_BAR,
        shape=RISING_1,
    ),
    ScoreCase(
        "two extended resources, on a node with a pod using them",
        kpod({FOO: "2", BAR: "2"}),
        MULTI_NODES,
        [4, 7],
        [kpod({FOO: "4", BAR: "2"}, node="node2")],
        resources=FOO_BAR,
        shape=RISING_1,
    ),
    ScoreCase(
        "two extended resources, pods scheduled with more resources",
        kpod({FOO: "4", BAR: "2"}),
        MULTI_NODES,
        [5, 5],
        [kpod()],
        resources=FOO_BAR,
        shape=RISING_1,
    ),
]


@pytest.mark.parametrize("case", LEAST, ids=lambda c: c.name)
def test_least_allocated_matches_kube(case: ScoreCase) -> None:
    assert fit_scores("LeastAllocated", case) == case.want


@pytest.mark.parametrize("case", MOST, ids=lambda c: c.name)
def test_most_allocated_matches_kube(case: ScoreCase) -> None:
    assert fit_scores("MostAllocated", case) == case.want


@pytest.mark.parametrize("case", RTCR, ids=lambda c: c.name)
def test_requested_to_capacity_ratio_matches_kube(case: ScoreCase) -> None:
    assert fit_scores("RequestedToCapacityRatio", case) == case.want


@pytest.mark.parametrize(
    ("resources", "field"),
    [
        ((("memory", -1), ("cpu", 1)), "resources[0].weight"),
        ((("memory", 1), ("cpu", 101)), "resources[1].weight"),
    ],
)
def test_invalid_resource_weights_are_refused_like_kube(
    resources: tuple[tuple[str, int], ...], field: str
) -> None:
    from pykatalyst.scheduler.config import SchedulerConfigError

    case = ScoreCase("weights", kpod(*TWO), N4_10, [], resources=resources)
    with pytest.raises(SchedulerConfigError, match=re.escape(f"scoringStrategy.{field}")):
        fit_framework(_strategy_args("LeastAllocated", case))


@pytest.mark.parametrize(
    ("points", "at"),
    [
        (
            ((10, 1), (90, 9)),
            {-10: 1, 0: 1, 9: 1, 10: 1, 15: 1, 19: 1, 20: 2, 89: 8, 90: 9, 99: 9, 100: 9, 110: 9},
        ),
        (((0, 2), (40, 10), (100, 0)), {-10: 2, 0: 2, 20: 6, 30: 8, 40: 10, 70: 5, 100: 0, 110: 0}),
        (((0, 2), (40, 2), (100, 2)), {-10: 2, 0: 2, 20: 2, 40: 2, 70: 2, 100: 2, 110: 2}),
    ],
)
def test_broken_linear_function_matches_kube(
    points: tuple[tuple[int, int], ...], at: dict[int, int]
) -> None:
    from pykatalyst.scheduler.plugins.resources import Shape

    # kube's own function on raw scores (no ×10 scaling): compare at the raw scale
    fn = Shape(tuple(u for u, _ in points), tuple(s for _, s in points))
    got = fn(np.array(list(at), np.int64)).tolist()
    assert dict(zip(at, got, strict=True)) == at


def test_zero_weight_in_a_file_means_one() -> None:
    # kube's validation refuses weight 0, but its v1/v1beta3 defaulting turns a 0 written in
    # a file into 1 first, so a configuration file never reaches that check
    zero = ScoreCase("w0", kpod(*TWO), N4_6, [37, 50], resources=(("memory", 1), ("cpu", 0)))
    assert fit_scores("LeastAllocated", zero) == zero.want


# --- BalancedAllocation ----------------------------------------------------------------------

CPU_AND_MEMORY = ({"cpu": "1000m", "memory": "2000"}, {"cpu": "2000m", "memory": "3000"})
CPU_ONLY = ({"cpu": "1000m", "memory": "0"}, {"cpu": "2000m", "memory": "0"})
CPU_MEM_GPU = (
    {"cpu": "1000m", "memory": "2000"},
    {"cpu": "2000m", "memory": "3000", "nvidia.com/gpu": "3"},
)
GPU_SET = (("cpu", 1), ("memory", 1), ("nvidia.com/gpu", 1))


def plain_node(name: str, milli_cpu: int, memory: int, gpu: int = 0) -> dict[str, Any]:
    res = {"cpu": f"{milli_cpu}m", "memory": str(memory)}
    if gpu:
        res["nvidia.com__gpu"] = str(gpu)
    return knode(name, pods=None, **res)


BALANCED = [
    ScoreCase(
        "resources requested, differently sized nodes",
        kpod(*CPU_AND_MEMORY),
        [plain_node("node1", 4000, 10000), plain_node("node2", 6000, 10000)],
        [87, 100],
    ),
    ScoreCase(
        "resources requested, pods scheduled with resources",
        kpod(*CPU_AND_MEMORY),
        [plain_node("node1", 10000, 20000), plain_node("node2", 10000, 20000)],
        [82, 95],
        [kpod(*CPU_ONLY, node="node1"), kpod(*CPU_AND_MEMORY, node="node2")],
    ),
    ScoreCase(
        "resources requested, pods scheduled with resources, differently sized nodes",
        kpod(*CPU_AND_MEMORY),
        [plain_node("node1", 10000, 20000), plain_node("node2", 10000, 50000)],
        [82, 80],
        [kpod(*CPU_ONLY, node="node1"), kpod(*CPU_AND_MEMORY, node="node2")],
    ),
    ScoreCase(
        "requested resources at node capacity",
        kpod(*CPU_ONLY),
        [plain_node("node1", 6000, 10000), plain_node("node2", 6000, 10000)],
        [50, 75],
        [kpod(*CPU_ONLY, node="node1"), kpod(*CPU_AND_MEMORY, node="node2")],
    ),
    ScoreCase(
        "a scalar resource on the node counts",
        kpod({"memory": "0", "nvidia.com/gpu": "1"}),
        [plain_node("node1", 3500, 40000, 8), plain_node("node2", 3500, 40000, 8)],
        [70, 65],
        [kpod(*CPU_AND_MEMORY, node="node2"), kpod(*CPU_MEM_GPU, node="node1")],
        resources=GPU_SET,
    ),
    ScoreCase(
        "a node without the scalar resource leaves it out",
        kpod(*CPU_AND_MEMORY),
        [plain_node("node1", 3500, 40000, 8), plain_node("node2", 3500, 40000)],
        [63, 63],
        resources=GPU_SET,
    ),
]


def balanced_framework(resources: tuple[tuple[str, int], ...]) -> Framework:
    cfg = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": "default-scheduler",
                "pluginConfig": [
                    {
                        "name": "NodeResourcesBalancedAllocation",
                        "args": {"resources": [{"name": n, "weight": w} for n, w in resources]},
                    }
                ],
            }
        ],
    }
    return Framework(profile(yaml.safe_dump(cfg)), 100, 0)


@pytest.mark.parametrize("case", BALANCED, ids=lambda c: c.name)
def test_balanced_allocation_matches_kube(case: ScoreCase) -> None:
    fw = balanced_framework(case.resources)
    plugin = fw.plugins["NodeResourcesBalancedAllocation"]
    snap = build(case.nodes, case.existing)
    info = pod_info(case.pod)
    assert plugin.pre_score(info, CycleState(), snap)
    got = plugin.score(info, CycleState(), snap, np.arange(snap.n, dtype=np.intp))
    assert not isinstance(got, int)
    assert got.tolist() == case.want


def test_balanced_allocation_skips_a_pod_that_requests_nothing() -> None:
    plugin = balanced_framework(DEFAULT).plugins["NodeResourcesBalancedAllocation"]
    snap = build([plain_node("node1", 4000, 10000), plain_node("node2", 4000, 10000)], [])
    assert not plugin.pre_score(pod_info(kpod()), CycleState(), snap)


# --- NodeResourcesFit's filter ---------------------------------------------------------------

EXT_A, EXT_B = "example.com/aaa", "example.com/bbb"
K8S_A, K8S_B = "kubernetes.io/something", "subdomain.kubernetes.io/something"
HUGE = "hugepages-2Mi"


def fit_node(pods: str = "32") -> dict[str, Any]:
    """kube's TestEnoughRequests node: 10m cpu, 20 bytes, 5 of example.com/aaa, 20 bytes of
    ephemeral storage, 5 bytes of 2Mi huge pages."""
    res = {
        "cpu": "10m",
        "memory": "20",
        "pods": pods,
        EXT_A: "5",
        "ephemeral-storage": "20",
        HUGE: "5",
    }
    return {"metadata": {"name": "n"}, "status": {"allocatable": res, "capacity": res}}


def r(cpu: int = 0, mem: int = 0, storage: int = 0, **scalar: int) -> Res:
    """A container request in kube's framework.Resource terms (cpu in milli-cores)."""
    out = {"cpu": f"{cpu}m", "memory": str(mem), "pods": "0", "ephemeral-storage": str(storage)}
    names_ = {"ext_a": EXT_A, "ext_b": EXT_B, "k8s_a": K8S_A, "k8s_b": K8S_B, "huge": HUGE}
    out.update({names_[k]: str(v) for k, v in scalar.items()})
    return out


@dataclass
class FitCase:
    name: str
    pod: dict[str, Any]
    used: Res
    want: tuple[str, ...] = ()
    args: dict[str, Any] = field(default_factory=dict)
    pods: str = "32"


def ins(res: str) -> str:
    return f"Insufficient {res}"


FIT = [
    FitCase("no resources requested always fits", kpod(), r(10, 20)),
    FitCase("too many resources fails", kpod(r(1, 1)), r(10, 20), (ins("cpu"), ins("memory"))),
    FitCase(
        "too many resources fails due to init container cpu",
        kpod(r(1, 1), init=(r(3, 1),)),
        r(8, 19),
        (ins("cpu"),),
    ),
    FitCase(
        "too many resources fails due to highest init container cpu",
        kpod(r(1, 1), init=(r(3, 1), r(2, 1))),
        r(8, 19),
        (ins("cpu"),),
    ),
    FitCase(
        "too many resources fails due to init container memory",
        kpod(r(1, 1), init=(r(1, 3),)),
        r(9, 19),
        (ins("memory"),),
    ),
    FitCase(
        "too many resources fails due to highest init container memory",
        kpod(r(1, 1), init=(r(1, 3), r(1, 2))),
        r(9, 19),
        (ins("memory"),),
    ),
    FitCase(
        "init container fits: the max, not the sum, of containers and init containers",
        kpod(r(1, 1), init=(r(1, 1),)),
        r(9, 19),
    ),
    FitCase(
        "multiple init containers fit: the max, not the sum",
        kpod(r(1, 1), init=(r(1, 1), r(1, 1))),
        r(9, 19),
    ),
    FitCase("both resources fit", kpod(r(1, 1)), r(5, 5)),
    FitCase("one resource memory fits", kpod(r(2, 1)), r(9, 5), (ins("cpu"),)),
    FitCase("one resource cpu fits", kpod(r(1, 2)), r(5, 19), (ins("memory"),)),
    FitCase("equal edge case", kpod(r(5, 1)), r(5, 19)),
    FitCase("equal edge case for init container", kpod(r(4, 1), init=(r(5, 1),)), r(5, 19)),
    FitCase("extended resource fits", kpod(r(ext_a=1)), r()),
    FitCase("extended resource fits for init container", kpod(r(), init=(r(ext_a=1),)), r()),
    FitCase(
        "extended resource capacity enforced",
        kpod(r(1, 1, ext_a=10)),
        r(ext_a=0),
        (ins(EXT_A),),
    ),
    FitCase(
        "extended resource capacity enforced for init container",
        kpod(r(), init=(r(1, 1, ext_a=10),)),
        r(ext_a=0),
        (ins(EXT_A),),
    ),
    FitCase(
        "extended resource allocatable enforced",
        kpod(r(1, 1, ext_a=1)),
        r(ext_a=5),
        (ins(EXT_A),),
    ),
    FitCase(
        "extended resource allocatable enforced for init container",
        kpod(r(), init=(r(1, 1, ext_a=1),)),
        r(ext_a=5),
        (ins(EXT_A),),
    ),
    FitCase(
        "extended resource allocatable enforced for multiple containers",
        kpod(r(1, 1, ext_a=3), r(1, 1, ext_a=3)),
        r(ext_a=2),
        (ins(EXT_A),),
    ),
    FitCase(
        "extended resource allocatable admits multiple init containers",
        kpod(r(), init=(r(1, 1, ext_a=3), r(1, 1, ext_a=3))),
        r(ext_a=2),
    ),
    FitCase(
        "extended resource allocatable enforced for multiple init containers",
        kpod(r(), init=(r(1, 1, ext_a=6), r(1, 1, ext_a=3))),
        r(ext_a=2),
        (ins(EXT_A),),
    ),
    FitCase(
        "extended resource allocatable enforced for unknown resource",
        kpod(r(1, 1, ext_b=1)),
        r(),
        (ins(EXT_B),),
    ),
    FitCase(
        "extended resource allocatable enforced for unknown resource for init container",
        kpod(r(), init=(r(1, 1, ext_b=1),)),
        r(),
        (ins(EXT_B),),
    ),
    FitCase(
        "kubernetes.io resource capacity enforced",
        kpod(r(1, 1, k8s_a=10)),
        r(),
        (ins(K8S_A),),
    ),
    FitCase(
        "kubernetes.io resource capacity enforced for init container",
        kpod(r(), init=(r(1, 1, k8s_b=10),)),
        r(),
        (ins(K8S_B),),
    ),
    FitCase(
        "hugepages resource capacity enforced",
        kpod(r(1, 1, huge=10)),
        r(huge=0),
        (ins(HUGE),),
    ),
    FitCase(
        "hugepages resource capacity enforced for init container",
        kpod(r(), init=(r(1, 1, huge=10),)),
        r(huge=0),
        (ins(HUGE),),
    ),
    FitCase(
        "hugepages resource allocatable enforced for multiple containers",
        kpod(r(1, 1, huge=3), r(1, 1, huge=3)),
        r(huge=2),
        (ins(HUGE),),
    ),
    FitCase(
        "skip checking ignored extended resource",
        kpod(r(1, 1, ext_b=1)),
        r(),
        args={"ignoredResources": [EXT_B]},
    ),
    FitCase(
        "resources + pod overhead fits",
        kpod(r(1, 1), overhead={"cpu": "3m", "memory": "13"}),
        r(5, 5),
    ),
    FitCase(
        "requests + overhead does not fit for memory",
        kpod(r(1, 1), overhead={"cpu": "1m", "memory": "15"}),
        r(5, 5),
        (ins("memory"),),
    ),
    FitCase(
        "skip checking ignored extended resource via resource groups",
        kpod(r(1, 1, ext_b=1, k8s_a=1)),
        r(),
        (ins(K8S_A),),
        args={"ignoredResourceGroups": ["example.com"]},
    ),
    FitCase(
        "skip checking extended resource request with quantity zero",
        kpod(r(1, 1, ext_a=0)),
        r(ext_a=6),
    ),
    FitCase(
        "extended resource backed by a device plugin",
        kpod(r(ext_a=1)),
        r(),
    ),
    # TestStorageRequests
    FitCase("empty storage requested, and pod fits", kpod(r(1, 1)), r(2, 10)),
    FitCase(
        "ephemeral storage request exceeds allocatable",
        kpod(r(storage=25)),
        r(2, 2),
        (ins("ephemeral-storage"),),
    ),
    FitCase("ephemeral storage is sufficient", kpod(r(storage=5)), r(2, 2, storage=10)),
    FitCase("storage: pod fits", kpod(r(storage=10)), r(2, 2)),
    # TestNotEnoughRequests: a node with room for one pod
    FitCase(
        "no room for another pod, nothing requested",
        kpod(),
        r(10, 20),
        ("Too many pods",),
        pods="1",
    ),
    FitCase(
        "no room for another pod, resources fit",
        kpod(r(1, 1)),
        r(5, 5),
        ("Too many pods",),
        pods="1",
    ),
    FitCase(
        "no room for another pod, equal edge case",
        kpod(r(5, 1)),
        r(5, 19),
        ("Too many pods",),
        pods="1",
    ),
    FitCase(
        "no room for another pod, equal edge case with init container",
        kpod(r(5, 1), init=(r(5, 1),)),
        r(5, 19),
        ("Too many pods",),
        pods="1",
    ),
]


def fit_verdict(case: FitCase, node: dict[str, Any] | None = None) -> tuple[bool, tuple[str, ...]]:
    args = {"scoringStrategy": {"type": "LeastAllocated"}, **case.args}
    plugin = fit_framework(args).plugins["NodeResourcesFit"]
    snap = build([node or fit_node(case.pods)], [kpod(case.used, node="n")])
    info = pod_info(case.pod)
    assert not info.problem, info.problem
    mask = plugin.filter(info, CycleState(), snap)
    assert mask is not None
    reasons = plugin.filter_reasons(info, CycleState(), snap, np.array([0], np.intp))[0]
    return bool(mask[0]), reasons if not mask[0] else ()


@pytest.mark.parametrize("case", FIT, ids=lambda c: c.name)
def test_fit_filter_matches_kube(case: FitCase) -> None:
    fits, reasons = fit_verdict(case)
    assert (fits, reasons) == (not case.want, case.want)


# TestRestartableInitContainers: a node with 2m cpu and room for one pod
SIDECAR_NODE = {
    "metadata": {"name": "n"},
    "status": {"allocatable": {"cpu": "2m", "memory": "0", "pods": "1"}},
}


@pytest.mark.parametrize(
    ("case", "fits"),
    [
        (FitCase("without sidecars", kpod(None), {}), True),
        (FitCase("a sidecar without requests", kpod(None, sidecars=({},)), {}), True),
        (
            FitCase(
                "app and sidecar within allocatable",
                kpod({"cpu": "1m"}, sidecars=({"cpu": "1m"},)),
                {},
            ),
            True,
        ),
        (
            FitCase(
                "app and sidecar beyond allocatable",
                kpod({"cpu": "1m"}, sidecars=({"cpu": "2m"},)),
                {},
            ),
            False,
        ),
    ],
    ids=lambda v: v.name if isinstance(v, FitCase) else "",
)
def test_sidecars_add_to_the_app_containers(case: FitCase, fits: bool) -> None:
    plugin = fit_framework({}).plugins["NodeResourcesFit"]
    snap = build([SIDECAR_NODE], [])
    info = pod_info(case.pod)
    mask = plugin.filter(info, CycleState(), snap)
    assert mask is not None and bool(mask[0]) is fits
    if not fits:
        assert plugin.filter_reasons(info, CycleState(), snap, np.array([0], np.intp))[0] == (
            ins("cpu"),
        )


# --- the non-zero requests that scores use ---------------------------------------------------


def test_score_requests_add_sidecars_and_overhead() -> None:
    # app 1 cpu + sidecar 1 cpu, a classic init container of 1.5 cpu started after the
    # sidecar (so 2.5 cpu while it runs), plus 0.25 cpu of overhead: 2.75 cpu
    raw = kpod(
        {"cpu": "1", "memory": "1Gi"},
        sidecars=({"cpu": "1", "memory": "1Gi"},),
        init=({"cpu": "1500m", "memory": "1Gi"},),
        overhead={"cpu": "250m", "memory": "256Mi"},
    )
    info = pod_info(raw)
    assert (info.nonzero_cpu, info.nonzero_mem) == (2750, 2 * 1024**3 + 256 * 1024**2)
    assert info.nonzero_cpu == info.request("cpu")
    assert info.nonzero_mem == info.request("memory")


def test_score_requests_default_each_container_that_asks_nothing() -> None:
    # kube's defaults (100m, 200Mi) stand in per container, sidecars included
    info = pod_info(kpod(None, sidecars=(None,)))
    assert (info.nonzero_cpu, info.nonzero_mem) == (200, 400 * 1024 * 1024)
