"""Katalyst's NodeResourceTopology facts: how it scores a node's NUMA zones for a pod, and
which pods and nodes it judges at all.

The four nodes and the expected scores are Katalyst's own (its score tables): a zone is
scored on the pod's request against the zone's *free* amount, per zone, and the node gets
the lowest non-zero zone score; exclusive pods see a partly used zone as having nothing
free; under NumericContainerLevel an exclusive pod is scored on the fewest zones that can
hold it. Pods Katalyst does not judge score 100 everywhere; a judged pod on a node whose
policy has no handler scores 0.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import yaml

from pykatalyst.api import names
from pykatalyst.scheduler.framework import Framework
from pykatalyst.scheduler.plugins.base import CycleState
from pykatalyst.scheduler.podinfo import pod_info
from pykatalyst.scheduler.snapshot import NodeSnapshot
from tests.scheduler.sched_helpers import cnr, framework, node, numa_zones, pod

SINGLE = names.TOPOLOGY_POLICY_SINGLE_NUMA_CONTAINER
NUMERIC = names.TOPOLOGY_POLICY_NUMERIC_CONTAINER
NODES = (
    "node-2numa-8c16g",
    "node-2numa-4c8g",
    "node-2numa-8c16g-with-allocation",
    "node-4numa-8c16g",
)


def score_nodes(policy: str) -> NodeSnapshot:
    cnrs = [
        cnr(NODES[0], zones=numa_zones([[(0, "4", "8Gi"), (1, "4", "8Gi")]]), policy=policy),
        cnr(NODES[1], zones=numa_zones([[(0, "2", "4Gi"), (1, "2", "4Gi")]]), policy=policy),
        cnr(
            NODES[2],
            zones=numa_zones(
                [[(0, "4", "8Gi"), (1, "4", "8Gi")]],
                {
                    0: [("testNamespace/testPod1/uid1", "1", "2Gi")],
                    1: [("testNamespace/testPod2/uid2", "3", "6Gi")],
                },
            ),
            policy=policy,
        ),
        cnr(
            NODES[3],
            zones=numa_zones(
                [[(0, "2", "4Gi"), (1, "2", "4Gi")], [(2, "2", "4Gi"), (3, "2", "4Gi")]]
            ),
            policy=policy,
        ),
    ]
    snap = NodeSnapshot(capacity=2)
    for name in NODES:
        snap.upsert_node(node(name, cpu="16", memory="64Gi"))
    for c in cnrs:
        snap.upsert_cnr(c)
    return snap


def nrt_framework(strategy: str, policy: str) -> Framework:
    cfg = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": "default-scheduler",
                "plugins": {
                    "filter": {"enabled": [{"name": "NodeResourceTopology"}]},
                    "score": {"enabled": [{"name": "NodeResourceTopology"}]},
                    "reserve": {"enabled": [{"name": "NodeResourceTopology"}]},
                },
                "pluginConfig": [
                    {
                        "name": "NodeResourceTopology",
                        "args": {
                            "scoringStrategy": {"type": strategy},
                            "alignedResources": ["cpu", "memory"],
                            "resourcePluginPolicy": policy,
                        },
                    }
                ],
            }
        ],
    }
    return framework(yaml.safe_dump(cfg))


def kpod(
    cpu: str,
    memory: str,
    enhancement: dict[str, str] | None = None,
    qos: str | None = None,
    name: str = "p",
) -> dict[str, Any]:
    ann = {}
    if enhancement is not None:
        ann[names.MEMORY_ENHANCEMENT_ANNOTATION] = json.dumps(enhancement)
    return pod(name, {"cpu": cpu, "memory": memory}, qos=qos, annotations=ann, uid=f"uid-{name}")


BINDING = {"numa_binding": "true"}
EXCLUSIVE = {"numa_binding": "true", "numa_exclusive": "true"}
DEDICATED = "dedicated_cores"

# (name, policy, strategy, resourcePluginPolicy, pod, scores of NODES)
SCORES = [
    ("native pod, single numa, MostAllocated", SINGLE, "MostAllocated", "native",
     kpod("4", "8Gi"), [100, 0, 0, 0]),
    ("native pod, single numa, LeastAllocated", SINGLE, "LeastAllocated", "native",
     kpod("2", "4Gi"), [50, 0, 33, 0]),
    ("native pod, single numa, BalancedAllocation", SINGLE, "BalancedAllocation", "native",
     kpod("2", "4Gi"), [100, 100, 100, 100]),
    ("native pod, no single-numa nodes", NUMERIC, "MostAllocated", "native",
     kpod("4", "8Gi"), [0, 0, 0, 0]),
    ("native pod, not Guaranteed whole cpus", SINGLE, "MostAllocated", "native",
     kpod("350m", "8Gi"), [100, 100, 100, 100]),
    ("dedicated numa_binding, single numa, MostAllocated", SINGLE, "MostAllocated", "dynamic",
     kpod("2", "4Gi", BINDING, DEDICATED), [50, 100, 66, 100]),
    ("dedicated numa_binding, single numa, LeastAllocated", SINGLE, "LeastAllocated", "dynamic",
     kpod("2", "4Gi", BINDING, DEDICATED), [50, 0, 33, 0]),
    ("dedicated without numa_binding", SINGLE, "LeastAllocated", "dynamic",
     kpod("2", "4Gi", None, DEDICATED), [100, 100, 100, 100]),
    ("dedicated numa_exclusive, single numa, MostAllocated", SINGLE, "MostAllocated", "dynamic",
     kpod("2", "4Gi", EXCLUSIVE, DEDICATED), [50, 100, 0, 100]),
    ("dedicated numa_exclusive, single numa, LeastAllocated", SINGLE, "LeastAllocated", "dynamic",
     kpod("2", "4Gi", EXCLUSIVE, DEDICATED), [50, 0, 0, 0]),
    ("dedicated numa_exclusive, numeric, MostAllocated", NUMERIC, "MostAllocated", "dynamic",
     kpod("3", "6Gi", EXCLUSIVE, DEDICATED), [75, 75, 0, 75]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("policy", "strategy", "plugin_policy", "raw", "want"),
    [case[1:] for case in SCORES],
    ids=[case[0] for case in SCORES],
)
def test_zone_scores_match_katalyst(
    policy: str, strategy: str, plugin_policy: str, raw: dict[str, Any], want: list[int]
) -> None:
    fw = nrt_framework(strategy, plugin_policy)
    snap = score_nodes(policy)
    plugin = fw.plugins["NodeResourceTopology"]
    got = plugin.score(pod_info(raw), CycleState(), snap, np.arange(snap.n, dtype=np.intp))
    got_list = [got] * snap.n if isinstance(got, int) else [int(v) for v in got]
    assert dict(zip(NODES, got_list, strict=True)) == dict(zip(NODES, want, strict=True))


def test_native_pods_are_not_held_to_one_zone_on_numeric_nodes() -> None:
    # Katalyst's native policy judges only SingleNUMANode* nodes: a Guaranteed 6-cpu pod
    # passes a NumericContainerLevel node whose zones hold 4 cpus each
    fw = nrt_framework("LeastAllocated", "native")
    plugin = fw.plugins["NodeResourceTopology"]
    for policy, fits in ((NUMERIC, True), (SINGLE, False)):
        snap = score_nodes(policy)
        mask = plugin.filter(pod_info(kpod("6", "8Gi")), CycleState(), snap)
        assert mask is not None and bool(mask[0]) is fits


def test_dynamic_pods_are_not_judged_on_pod_level_nodes() -> None:
    # Katalyst has no dynamic-policy handler for SingleNUMANodePodLevel: the node passes
    # and scores 0
    fw = nrt_framework("LeastAllocated", "dynamic")
    plugin = fw.plugins["NodeResourceTopology"]
    snap = score_nodes(names.TOPOLOGY_POLICY_SINGLE_NUMA_POD)
    p = pod_info(kpod("6", "8Gi", BINDING, DEDICATED))
    mask = plugin.filter(p, CycleState(), snap)
    assert mask is None or bool(mask.all())
    got = plugin.score(p, CycleState(), snap, np.arange(snap.n, dtype=np.intp))
    assert np.all(np.asarray(got) == 0)


def two_nodes(policy: str) -> NodeSnapshot:
    snap = NodeSnapshot(capacity=2)
    for name, cpu, mem in (("node-2numa-8c16g", "4", "8Gi"), ("node-2numa-4c8g", "2", "4Gi")):
        snap.upsert_node(node(name, cpu="16", memory="64Gi"))
        snap.upsert_cnr(
            cnr(name, zones=numa_zones([[(0, cpu, mem), (1, cpu, mem)]]), policy=policy)
        )
    return snap


def two_containers(
    qos: str | None = None, enhancement: dict[str, str] | None = None
) -> dict[str, Any]:
    raw = kpod("2", "4Gi", enhancement, qos)
    raw["spec"]["containers"].append({**raw["spec"]["containers"][0], "name": "second"})
    return raw


# (name, policy, resourcePluginPolicy, pod, fits on [8c16g, 4c8g]) from Katalyst's filter table
FILTERS = [
    ("native pod, single numa", SINGLE, "native", kpod("4", "8Gi"), [True, False]),
    ("native pod with two containers, pod-level single numa",
     names.TOPOLOGY_POLICY_SINGLE_NUMA_POD, "native", two_containers(), [True, False]),
    ("native pod, numeric", NUMERIC, "native", kpod("4", "8Gi"), [True, True]),
    ("native pod without whole cpus", SINGLE, "native", kpod("350m", "8Gi"), [True, True]),
    ("dedicated numa_binding, single numa", SINGLE, "dynamic",
     kpod("4", "8Gi", BINDING, DEDICATED), [True, False]),
    ("dedicated numa_binding, numeric", NUMERIC, "dynamic",
     kpod("4", "8Gi", BINDING, DEDICATED), [True, False]),
    ("dedicated numa_exclusive, numeric: two whole zones", NUMERIC, "dynamic",
     kpod("4", "8Gi", EXCLUSIVE, DEDICATED), [True, True]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("policy", "plugin_policy", "raw", "want"),
    [case[1:] for case in FILTERS],
    ids=[case[0] for case in FILTERS],
)
def test_filter_matches_katalyst(
    policy: str, plugin_policy: str, raw: dict[str, Any], want: list[bool]
) -> None:
    plugin = nrt_framework("MostAllocated", plugin_policy).plugins["NodeResourceTopology"]
    snap = two_nodes(policy)
    mask = plugin.filter(pod_info(raw), CycleState(), snap)
    got = [True, True] if mask is None else [bool(v) for v in mask]
    assert got == want


def test_a_multi_container_pod_is_judged_by_its_total_on_container_level_nodes() -> None:
    # Katalyst places each container of a native pod on its own zone under
    # SingleNUMANodeContainerLevel (two 2-cpu containers pass a node of 2-cpu zones);
    # pykatalyst judges the pod's total, as its agent pins a pod to one zone
    plugin = nrt_framework("MostAllocated", "native").plugins["NodeResourceTopology"]
    mask = plugin.filter(pod_info(two_containers()), CycleState(), two_nodes(SINGLE))
    assert mask is not None and [bool(v) for v in mask] == [True, False]


def test_reserve_charges_the_chosen_zone_only() -> None:
    # Katalyst's reserve table: after an exclusive 2-cpu pod is reserved on a node of two
    # 4-cpu zones, the same pod no longer fits, because Katalyst charges the reserved pod
    # to every zone. pykatalyst charges the zone it chose (see docs/scheduler.md): a
    # second exclusive pod still gets the other zone, a third finds none
    f = nrt_framework("MostAllocated", "dynamic")
    snap = NodeSnapshot(capacity=2)
    snap.upsert_node(node("n", cpu="16", memory="64Gi"))
    snap.upsert_cnr(cnr("n", zones=numa_zones([[(0, "4", "8Gi"), (1, "4", "8Gi")]]), policy=SINGLE))
    placed = []
    for i in range(3):
        p = pod_info(kpod("2", "4Gi", EXCLUSIVE, DEDICATED, name=f"p{i}"))
        result = f.schedule(p, snap)
        if result.node is None:
            placed.append(None)
            continue
        assert f.reserve(p, result, snap) is None
        snap.assume(p, result.node, result.numa)
        placed.append(result.numa.numa_ids if result.numa else ())
    assert sorted(placed[:2]) == [(0,), (1,)] and placed[2] is None
    snap.forget_pod("uid-p0")  # unreserved: its zone is free again
    again = f.schedule(pod_info(kpod("2", "4Gi", EXCLUSIVE, DEDICATED)), snap)
    assert again.node == "n"
