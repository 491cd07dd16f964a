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

import itertools
import json
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pykatalyst.api import names
from pykatalyst.scheduler.framework import CycleResult, Framework
from pykatalyst.scheduler.plugins.base import CycleState
from pykatalyst.scheduler.plugins.topology import NUMA_RESERVATION
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


def nrt_framework(
    strategy: str, policy: str, reserved: str = "All", aligned: tuple[str, ...] = ("cpu", "memory")
) -> Framework:
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
                            "alignedResources": list(aligned),
                            "resourcePluginPolicy": policy,
                            "reservedZones": reserved,
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


FILTER_NODES = (
    "node-2numa-8c16g",
    "node-2numa-4c8g",
    "node-2numa-8c16g-with-allocation",
    "node-4numa-8c16g-cross-socket",
    "node-4numa-8c16g-full-socket",
)


def filter_nodes(policy: str) -> NodeSnapshot:
    """Katalyst's five filter nodes; the allocations belong to dedicated pods."""
    four, two = ("4", "8Gi"), ("2", "4Gi")
    used = ("ns/holder/uid-h", "1", "2Gi")
    layouts = [
        ([[(0, *four), (1, *four)]], None),
        ([[(0, *two), (1, *two)]], None),
        ([[(0, *four), (1, *four)]], {1: [used]}),
        ([[(0, *two), (1, *two)], [(2, *two), (3, *two)]], {1: [used], 2: [used]}),
        ([[(0, *two), (1, *two)], [(2, *two), (3, *two)]], {2: [used], 3: [used]}),
    ]
    snap = NodeSnapshot(capacity=len(FILTER_NODES))
    for name, (sockets, allocations) in zip(FILTER_NODES, layouts, strict=True):
        snap.upsert_node(node(name, cpu="16", memory="64Gi"))
        snap.upsert_cnr(cnr(name, zones=numa_zones(sockets, allocations), policy=policy))
    return snap


def containers(
    *requests: tuple[str, str],
    qos: str | None = None,
    enhancement: dict[str, str] | None = None,
    extra: dict[str, str] | None = None,
    name: str = "p",
    inits: tuple[tuple[str, str], ...] = (),
) -> dict[str, Any]:
    """A pod with one container per request (the first is the main one), and an init
    container per `inits` request."""
    raw = kpod(*requests[0], enhancement, qos, name=name)
    first = raw["spec"]["containers"][0]
    raw["spec"]["containers"] = [
        {**first, "name": f"c{i}", "resources": {"requests": r, "limits": r}}
        for i, r in enumerate({"cpu": cpu, "memory": mem, **(extra or {})} for cpu, mem in requests)
    ]
    if inits:
        raw["spec"]["initContainers"] = [
            {**first, "name": f"i{i}", "resources": {"requests": r, "limits": r}}
            for i, r in enumerate({"cpu": cpu, "memory": mem} for cpu, mem in inits)
        ]
    return raw


# a 2-cpu app container after a 4-cpu init container. Katalyst's container-level
# handlers (native and dynamic) walk spec.containers only, so the init container is never
# placed and the 2 cpus fit a zone of every node; at pod scope the native handler fits
# the pod's effective request (4 cpus, 8 GiB, the init container's), as for a 4-cpu pod
INIT = {"inits": (("4", "8Gi"),)}


OK, NO = True, False
# (name, policy, resourcePluginPolicy, pod, fits on FILTER_NODES): Katalyst's filter tables
FILTERS = [
    ("native pod, single numa", SINGLE, "native", containers(("4", "8Gi")),
     [OK, NO, OK, NO, NO]),
    ("native pod, two containers, container-level single numa", SINGLE, "native",
     containers(("2", "4Gi"), ("2", "4Gi")), [OK, OK, OK, OK, OK]),
    ("native pod, two containers, pod-level single numa", names.TOPOLOGY_POLICY_SINGLE_NUMA_POD,
     "native", containers(("2", "4Gi"), ("2", "4Gi")), [OK, NO, OK, NO, NO]),
    ("native pod, numeric", NUMERIC, "native", containers(("4", "8Gi")), [OK] * 5),
    ("native pod without whole cpus", SINGLE, "native", containers(("350m", "8Gi")), [OK] * 5),
    ("native pod with a resource zones do not hold", SINGLE, "native",
     containers(("4", "8Gi"), extra={"a/b": "200Gi"}), [OK, NO, OK, NO, NO]),
    ("native pod with an init container, container-level single numa", SINGLE, "native",
     containers(("2", "4Gi"), **INIT), [OK] * 5),
    ("native pod with an init container, pod-level single numa",
     names.TOPOLOGY_POLICY_SINGLE_NUMA_POD, "native", containers(("2", "4Gi"), **INIT),
     [OK, NO, OK, NO, NO]),
    ("dedicated numa_binding with an init container, single numa", SINGLE, "dynamic",
     containers(("2", "4Gi"), qos=DEDICATED, enhancement=BINDING, **INIT), [OK] * 5),
    ("dedicated numa_binding with an init container, numeric", NUMERIC, "dynamic",
     containers(("2", "4Gi"), qos=DEDICATED, enhancement=BINDING, **INIT), [OK] * 5),
    ("dedicated numa_exclusive with an init container, numeric", NUMERIC, "dynamic",
     containers(("2", "4Gi"), qos=DEDICATED, enhancement=EXCLUSIVE, **INIT),
     [OK, OK, OK, OK, OK]),
    ("dedicated numa_binding, single numa", SINGLE, "dynamic",
     containers(("4", "8Gi"), qos=DEDICATED, enhancement=BINDING), [OK, NO, OK, NO, NO]),
    ("dedicated numa_binding, numeric", NUMERIC, "dynamic",
     containers(("4", "8Gi"), qos=DEDICATED, enhancement=BINDING), [OK, NO, OK, NO, NO]),
    ("dedicated numa_binding, two containers, numeric", NUMERIC, "dynamic",
     containers(("2", "4Gi"), ("2", "4Gi"), qos=DEDICATED, enhancement=BINDING), [OK] * 5),
    ("dedicated numa_exclusive, single numa", SINGLE, "dynamic",
     containers(("2", "4Gi"), qos=DEDICATED, enhancement=EXCLUSIVE), [OK] * 5),
    ("dedicated numa_exclusive, two containers, single numa", SINGLE, "dynamic",
     containers(("2", "4Gi"), ("2", "4Gi"), qos=DEDICATED, enhancement=EXCLUSIVE), [OK] * 5),
    ("dedicated numa_exclusive, numeric", NUMERIC, "dynamic",
     containers(("4", "8Gi"), qos=DEDICATED, enhancement=EXCLUSIVE), [OK, OK, OK, NO, OK]),
    ("dedicated numa_exclusive, two containers, numeric", NUMERIC, "dynamic",
     containers(("2", "4Gi"), ("2", "4Gi"), qos=DEDICATED, enhancement=EXCLUSIVE), [OK] * 5),
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
    snap = filter_nodes(policy)
    mask = plugin.filter(pod_info(raw), CycleState(), snap)
    got = [True] * snap.n if mask is None else [bool(v) for v in mask]
    assert dict(zip(FILTER_NODES, got, strict=True)) == dict(zip(FILTER_NODES, want, strict=True))


def test_only_the_main_container_of_a_dedicated_pod_holds_zone_cpus() -> None:
    # the sidecar runs on the main container's cpus: a 2-cpu main container with a 2-cpu
    # sidecar fits a 2-cpu zone; naming the larger container main makes it not fit
    plugin = nrt_framework("MostAllocated", "dynamic").plugins["NodeResourceTopology"]
    snap = filter_nodes(SINGLE)
    raw = containers(("2", "4Gi"), ("3", "4Gi"), qos=DEDICATED, enhancement=BINDING)
    mask = plugin.filter(pod_info(raw), CycleState(), snap)
    assert mask is not None and bool(mask[1])
    raw["metadata"]["annotations"][names.MAIN_CONTAINER_ANNOTATION] = "c1"
    mask = plugin.filter(pod_info(raw), CycleState(), snap)
    assert mask is not None and not bool(mask[1])


def test_container_scope_score_is_the_mean_of_the_containers() -> None:
    # Katalyst scores each container against the zones and averages: containers of 2 and
    # 4 cpus (4 and 8 GiB) on zones of 4 cpus and 8 GiB score 50 and 100, mean 75
    plugin = nrt_framework("MostAllocated", "native").plugins["NodeResourceTopology"]
    snap = filter_nodes(SINGLE)
    p = pod_info(containers(("2", "4Gi"), ("4", "8Gi")))
    got = plugin.score(p, CycleState(), snap, np.arange(snap.n, dtype=np.intp))
    assert not isinstance(got, int) and int(got[0]) == 75
    # at pod scope the pod's 6 cpus exceed every zone: 0
    snap = filter_nodes(names.TOPOLOGY_POLICY_SINGLE_NUMA_POD)
    got = plugin.score(p, CycleState(), snap, np.arange(snap.n, dtype=np.intp))
    assert not isinstance(got, int) and int(got[0]) == 0


def reserve_node(policy: str = SINGLE, zones: tuple[str, str] = ("4", "8Gi")) -> NodeSnapshot:
    snap = NodeSnapshot(capacity=1)
    snap.upsert_node(node("n", cpu="16", memory="64Gi"))
    snap.upsert_cnr(cnr("n", zones=numa_zones([[(0, *zones), (1, *zones)]]), policy=policy))
    return snap


def reserve_on(f: Framework, raw: dict[str, Any], snap: NodeSnapshot) -> CycleResult:
    p = pod_info(raw)
    result = f.schedule(p, snap)
    assert result.node == "n" and f.reserve(p, result, snap) is None
    snap.assume(p, "n", result.numa)
    return result


def test_reserve_keeps_the_pod_off_every_zone_until_unreserve() -> None:
    # Katalyst's reserve table: an exclusive 2-cpu pod fits a node of two 4-cpu zones;
    # once reserved, the same pod fits nowhere on the node; unreserved, it fits again
    f = nrt_framework("MostAllocated", "dynamic")
    plugin = f.plugins["NodeResourceTopology"]
    snap = reserve_node()
    raw = kpod("2", "4Gi", EXCLUSIVE, DEDICATED, name="p0")
    assert bool(plugin.filter(pod_info(raw), CycleState(), snap)[0])  # type: ignore[index]
    result = reserve_on(f, raw, snap)
    assert result.state.get(NUMA_RESERVATION) is not None
    again = pod_info(kpod("2", "4Gi", EXCLUSIVE, DEDICATED, name="p1"))
    assert not bool(plugin.filter(again, CycleState(), snap)[0])  # type: ignore[index]
    # unreserve as the scheduler does when the binding fails: the plugins' Unreserve,
    # then the pod leaves the cache
    f.unreserve(pod_info(raw), result, snap)
    assert result.state.get(NUMA_RESERVATION) is None
    snap.forget_pod("uid-p0")
    assert bool(plugin.filter(again, CycleState(), snap)[0])  # type: ignore[index]


def test_the_cnr_replaces_the_reservation_of_every_zone() -> None:
    # a 1-cpu NUMA-bound pod reserved on a node of two 2-cpu zones holds a cpu of each
    # until the agent reports it: a 2-cpu pod waits, then takes the zone left free
    f = nrt_framework("MostAllocated", "dynamic")
    plugin = f.plugins["NodeResourceTopology"]
    snap = reserve_node(zones=("2", "4Gi"))
    reserve_on(f, kpod("1", "1Gi", BINDING, DEDICATED, name="small"), snap)
    big = pod_info(kpod("2", "2Gi", BINDING, DEDICATED, name="big"))
    assert not bool(plugin.filter(big, CycleState(), snap)[0])  # type: ignore[index]
    zones = numa_zones(
        [[(0, "2", "4Gi"), (1, "2", "4Gi")]], {0: [("default/small/uid-small", "1", "1Gi")]}
    )
    snap.upsert_cnr(cnr("n", zones=zones, policy=SINGLE))
    assert bool(plugin.filter(big, CycleState(), snap)[0])  # type: ignore[index]


def test_chosen_zone_reservations_spread_a_burst() -> None:
    # reservedZones: Chosen charges only the zones picked: a second exclusive pod gets the
    # other zone at once, a third finds none; unreserving the first frees its zone
    f = nrt_framework("MostAllocated", "dynamic", reserved="Chosen")
    snap = reserve_node()
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
    assert sorted(placed[:2]) == [(0,), (1,)] and placed[2] is None  # type: ignore[type-var]
    snap.forget_pod("uid-p0")
    again = f.schedule(pod_info(kpod("2", "4Gi", EXCLUSIVE, DEDICATED)), snap)
    assert again.node == "n"


ZONE_POD = st.tuples(
    st.integers(1, 4),  # cpus
    st.sampled_from(["binding", "exclusive"]),
    st.integers(1, 2),  # containers
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ZONE_POD, min_size=2, max_size=8), st.sampled_from([SINGLE, NUMERIC]))
def test_a_reserved_pod_keeps_exclusive_pods_off_its_node(
    pods: list[tuple[int, str, int]], policy: str
) -> None:
    # whatever was reserved before, an exclusive pod never passes the filter on a node
    # where a NUMA-bound pod is reserved and not yet in the CNR
    f = nrt_framework("MostAllocated", "dynamic")
    plugin = f.plugins["NodeResourceTopology"]
    snap = reserve_node(policy)
    reserved = 0
    for i, (cpus, kind, n) in enumerate(pods):
        enh = EXCLUSIVE if kind == "exclusive" else BINDING
        req = (str(cpus), f"{cpus}Gi")
        p = pod_info(containers(*[req] * n, qos=DEDICATED, enhancement=enh, name=f"p{i}"))
        mask = plugin.filter(p, CycleState(), snap)
        assert mask is not None
        if kind == "exclusive" and reserved:
            assert not bool(mask[0])
        if bool(mask[0]):
            result = f.schedule(p, snap)
            assert result.node == "n" and f.reserve(p, result, snap) is None
            snap.assume(p, "n", result.numa)
            reserved += 1


def greedy_reference(zones: list[tuple[int, int]], ctrs: list[tuple[int, int]]) -> bool:
    """Katalyst's container-scope placement, one node, written plainly: each container in
    turn on the lowest-numbered zone with its cpu and memory free, which it then takes."""
    free = [list(z) for z in zones]
    for cpu, mem in ctrs:
        for z in free:
            if z[0] >= cpu and z[1] >= mem:
                z[0] -= cpu
                z[1] -= mem
                break
        else:
            return False
    return True


ZONES = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(ZONES, min_size=1, max_size=4),
    st.lists(st.tuples(st.integers(1, 4), st.integers(1, 4)), min_size=2, max_size=4),
)
def test_container_scope_filter_is_the_greedy_placement(
    nodes: list[list[tuple[int, int]]], ctrs: list[tuple[int, int]]
) -> None:
    # free cpus (cores) and memory (GiB) per zone, per node; a native pod of Guaranteed
    # containers: the filter passes exactly the nodes where the greedy placement succeeds
    plugin = nrt_framework("MostAllocated", "native").plugins["NodeResourceTopology"]
    snap = NodeSnapshot(capacity=len(nodes))
    for i, zones in enumerate(nodes):
        name = f"n{i}"
        snap.upsert_node(node(name, cpu="64", memory="64Gi"))
        layout = [[(z, "6", "6Gi") for z in range(len(zones))]]
        used = {
            z: [(f"ns/used{z}/uid-{i}-{z}", str(6 - c), f"{6 - m}Gi")]
            for z, (c, m) in enumerate(zones)
            if (c, m) != (6, 6)
        }
        snap.upsert_cnr(cnr(name, zones=numa_zones(layout, used), policy=SINGLE))
    raw = containers(*[(str(c), f"{m}Gi") for c, m in ctrs])
    mask = plugin.filter(pod_info(raw), CycleState(), snap)
    assert mask is not None
    want = [greedy_reference(zones, ctrs) for zones in nodes]
    assert [bool(v) for v in mask] == want


def busy_sockets(shape: list[int], busy: set[int]) -> NodeSnapshot:
    """One NumericContainerLevel node: sockets of `shape[s]` zones of 2 cpus and 4 GiB,
    numbered in order; the zones in `busy` hold a dedicated pod's cpu."""
    ids = iter(range(sum(shape)))
    layout = [[(next(ids), "2", "4Gi") for _ in range(k)] for k in shape]
    used = {z: [(f"ns/holder{z}/uid-h{z}", "1", "1Gi")] for z in busy}
    snap = NodeSnapshot(capacity=1)
    snap.upsert_node(node("n", cpu="64", memory="64Gi"))
    snap.upsert_cnr(cnr("n", zones=numa_zones(layout, used), policy=NUMERIC))
    return snap


def test_an_exclusive_pod_takes_only_its_fewest_zones() -> None:
    # Katalyst's numeric handler hints only sets of the fewest zones the request needs
    # (`minNumaNodeCount`; larger sets are not preferred and the aligned resources must
    # agree on a preferred one), and a set no larger than a socket stays on one socket.
    # Three sockets of two 2-cpu zones, zones 1, 3 and 5 busy: a 4-cpu exclusive pod needs
    # two zones, every free pair spans sockets, and zones 0, 2 and 4 are too many: refused
    plugin = nrt_framework("MostAllocated", "dynamic").plugins["NodeResourceTopology"]
    raw = containers(("4", "1Gi"), qos=DEDICATED, enhancement=EXCLUSIVE)
    mask = plugin.filter(pod_info(raw), CycleState(), busy_sockets([2, 2, 2], {1, 3, 5}))
    assert mask is not None and not bool(mask[0])
    # with socket 1 wholly free the pod takes its two zones
    f = nrt_framework("MostAllocated", "dynamic", reserved="Chosen")
    snap = busy_sockets([2, 2, 2], {1, 5})
    p = pod_info(raw)
    result = f.schedule(p, snap)
    assert result.node == "n" and f.reserve(p, result, snap) is None
    assert result.numa is not None and result.numa.numa_ids == (2, 3)


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 3).flatmap(
        lambda per: st.tuples(
            st.lists(st.just(per), min_size=1, max_size=3),
            st.sets(st.integers(0, 8)),
            st.integers(1, 2 * per + 1),
        )
    )
)
@example(([2, 2, 2], {1, 3, 5}, 4))
@example(([3, 3], {0, 4}, 4))
def test_exclusive_numeric_filter_is_katalysts_fewest_zone_rule(
    case: tuple[list[int], set[int], int],
) -> None:
    # written plainly from Katalyst's resourceHints: a set of exactly ceil(cpus / 2) zones
    # (2-cpu zones; the 1 GiB asked needs one zone), every zone in it free, on one socket
    # when it is no larger than a socket
    shape, busy, cpus = case
    total = sum(shape)
    busy = {z for z in busy if z < total}
    plugin = nrt_framework("MostAllocated", "dynamic").plugins["NodeResourceTopology"]
    raw = containers((str(cpus), "1Gi"), qos=DEDICATED, enhancement=EXCLUSIVE)
    mask = plugin.filter(pod_info(raw), CycleState(), busy_sockets(shape, busy))
    socket_of = [s for s, k in enumerate(shape) for _ in range(k)]
    k = min(-(-cpus // 2), total)
    want = 2 * total >= cpus and any(
        not busy & set(combo) and (k > shape[0] or len({socket_of[z] for z in combo}) == 1)
        for combo in itertools.combinations(range(total), k)
    )
    assert mask is not None and bool(mask[0]) is want


# Where pykatalyst decides otherwise on purpose (docs/katalyst-differences.md)


def test_a_dedicated_pod_is_fitted_in_whole_cores() -> None:
    # the agent gives a dedicated pod whole cpus: 1200m needs 2 cpus, and zones with
    # 1.5 cpus free cannot hold it (Katalyst's filter compares the 1.2 cpus and passes)
    plugin = nrt_framework("MostAllocated", "dynamic").plugins["NodeResourceTopology"]
    snap = NodeSnapshot(capacity=1)
    snap.upsert_node(node("n", cpu="16", memory="64Gi"))
    used = {z: [(f"ns/h{z}/uid-h{z}", "500m", "1Gi")] for z in (0, 1)}
    zones = numa_zones([[(0, "2", "4Gi"), (1, "2", "4Gi")]], used)
    snap.upsert_cnr(cnr("n", zones=zones, policy=SINGLE))
    for cpu, fits in (("1200m", False), ("1", True)):
        raw = containers((cpu, "1Gi"), qos=DEDICATED, enhancement=BINDING)
        mask = plugin.filter(pod_info(raw), CycleState(), snap)
        assert mask is not None and bool(mask[0]) is fits


def test_native_resources_the_zones_do_not_carry_are_not_checked() -> None:
    # ephemeral-storage and hugepages are not in the CNR's zones: Katalyst's single-NUMA
    # handler refuses any container asking for them; here only cpu and memory are fitted
    plugin = nrt_framework("MostAllocated", "native").plugins["NodeResourceTopology"]
    extra = {"ephemeral-storage": "1Gi", "hugepages-2Mi": "64Mi"}
    mask = plugin.filter(
        pod_info(containers(("4", "8Gi"), extra=extra)), CycleState(), filter_nodes(SINGLE)
    )
    assert mask is not None and [bool(v) for v in mask] == [OK, NO, OK, NO, NO]


def test_allocations_of_pods_the_scheduler_does_not_know_count_as_used() -> None:
    # zone 0 is held by a shared pod the scheduler knows (elastic: free for a dedicated
    # pod), zone 1 by a consumer it has not seen (Katalyst counts only the dedicated pods
    # of its cache, so both zones would look free there)
    snap = NodeSnapshot(capacity=1)
    snap.upsert_node(node("n", cpu="16", memory="64Gi"))
    shared = pod("web", {"cpu": "2", "memory": "1Gi"}, uid="uid-web", node_name="n")
    snap.observe_pod(pod_info(shared))
    used = {0: [("default/web/uid-web", "2", "1Gi")], 1: [("default/ghost/uid-ghost", "2", "1Gi")]}
    zones = numa_zones([[(0, "2", "4Gi"), (1, "2", "4Gi")]], used)
    snap.upsert_cnr(cnr("n", zones=zones, policy=SINGLE))
    f = nrt_framework("MostAllocated", "dynamic", reserved="Chosen")
    p = pod_info(containers(("2", "1Gi"), qos=DEDICATED, enhancement=BINDING))
    result = f.schedule(p, snap)
    assert result.node == "n" and f.reserve(p, result, snap) is None
    assert result.numa is not None and result.numa.numa_ids == (0,)


def test_native_policy_counts_every_cnr_allocation_and_drops_the_reservation() -> None:
    # Katalyst's native handlers read the CNR unfiltered (its cache is asked with no pod
    # filter under `native`): a Guaranteed pod the agent reports on zone 0 holds zone 0
    # only, once listed, so a 4-cpu pod still fits zone 1; under `dynamic` the same
    # allocation is a shared pod's and holds nothing
    f = nrt_framework("MostAllocated", "native")
    plugin = f.plugins["NodeResourceTopology"]
    snap = reserve_node()
    reserve_on(f, kpod("2", "4Gi", name="p1"), snap)
    big = pod_info(kpod("4", "8Gi", name="p2"))
    # reserved on every zone until the CNR lists it: 2 of 4 cpus free on each
    assert not bool(plugin.filter(big, CycleState(), snap)[0])  # type: ignore[index]
    zones = numa_zones(
        [[(0, "4", "8Gi"), (1, "4", "8Gi")]], {0: [("default/p1/uid-p1", "2", "4Gi")]}
    )
    snap.upsert_cnr(cnr("n", zones=zones, policy=SINGLE))
    assert bool(plugin.filter(big, CycleState(), snap)[0])  # type: ignore[index]
    slot = snap.index["n"]
    assert [int(v) for v in snap.numa_cpu_used_all[:2, slot]] == [2000, 0]
    assert [int(v) for v in snap.numa_cpu_used[:2, slot]] == [0, 0]
    # a second 4-cpu pod after the first: zone 1 is reserved now, zone 0 half used
    reserve_on(f, kpod("4", "8Gi", name="p3"), snap)
    assert not bool(plugin.filter(big, CycleState(), snap)[0])  # type: ignore[index]


def test_native_policy_fits_every_resource_whatever_is_aligned() -> None:
    # Katalyst's native handlers check each resource a container asks for against the
    # zone; alignedResources only makes a resource exclusive there. With only cpu aligned,
    # 2 cpus and 12 GiB still need a zone with 12 GiB free: none of 8 GiB zones has it
    raw = containers(("2", "12Gi"))
    for policy in (SINGLE, names.TOPOLOGY_POLICY_SINGLE_NUMA_POD):
        plugin = nrt_framework("MostAllocated", "native", aligned=("cpu",)).plugins[
            "NodeResourceTopology"
        ]
        mask = plugin.filter(pod_info(raw), CycleState(), filter_nodes(policy))
        assert mask is not None and not mask.any()
