"""NodeResourceTopology: NUMA-bound dedicated pods land where the CNR's zones hold them,
exclusive pods take whole free zones, sets never cross sockets, reservations never overlap."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.scheduler.config import load_config_text
from pykatalyst.scheduler.framework import Framework
from pykatalyst.scheduler.plugins.base import CycleState
from pykatalyst.scheduler.podinfo import PodInfo
from pykatalyst.scheduler.scheduler import Scheduler
from pykatalyst.scheduler.snapshot import NodeSnapshot
from tests.scheduler.sched_helpers import (
    add_cnr,
    add_node,
    add_pod,
    cnr,
    framework,
    info,
    node,
    numa_zones,
    pod,
    snapshot,
)

NUMA_PROFILE = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
  - schedulerName: katalyst-scheduler
    plugins:
      filter: {enabled: [{name: NodeResourceTopology}]}
      score: {enabled: [{name: NodeResourceTopology, weight: 2}]}
      reserve: {enabled: [{name: NodeResourceTopology}]}
    # these tests follow the zones a pod is placed on; Katalyst's default charges all
    pluginConfig:
      - name: NodeResourceTopology
        args: {reservedZones: Chosen}
"""
NUMERIC = names.TOPOLOGY_POLICY_NUMERIC_CONTAINER
SINGLE = names.TOPOLOGY_POLICY_SINGLE_NUMA_CONTAINER


def dedicated(name: str, cpu: str, exclusive: bool = False, **ann: str) -> PodInfo:
    enh = {"numa_binding": "true"}
    if exclusive:
        enh["numa_exclusive"] = "true"
    return info(
        pod(
            name,
            {"cpu": cpu, "memory": "1Gi"},
            qos="dedicated_cores",
            memory_enhancement=enh,
            annotations=ann,
            scheduler="katalyst-scheduler",
            uid=f"uid-{name}",
        )
    )


def four_numa(
    name: str,
    policy: str = NUMERIC,
    allocations: dict[int, list[tuple[str, str, str]]] | None = None,
) -> dict[str, object]:
    zones = numa_zones(
        [[(0, "4", "8Gi"), (1, "4", "8Gi")], [(2, "4", "8Gi"), (3, "4", "8Gi")]], allocations
    )
    return cnr(name, zones=zones, policy=policy)


def fw() -> Framework:
    return framework(NUMA_PROFILE)


def feasible(f: Framework, p: PodInfo, snap: NodeSnapshot) -> list[str]:
    alive, _ = f.run_filters(p, CycleState(), snap)
    return [snap.names[i] for i in np.flatnonzero(alive)]


def reserve(f: Framework, p: PodInfo, snap: NodeSnapshot) -> tuple[int, ...]:
    result = f.schedule(p, snap)
    assert result.node is not None
    f.reserve(p, result, snap)
    assert result.numa is not None
    snap.assume(p, result.node, result.numa)
    return result.numa.numa_ids


def test_single_numa_fit() -> None:
    zones = numa_zones([[(0, "4", "8Gi")], [(1, "4", "8Gi")]])
    snap = snapshot([node("n0", cpu="8")], cnrs=[cnr("n0", zones=zones, policy=SINGLE)])
    f = fw()
    assert feasible(f, dedicated("big", "6"), snap) == []
    state = CycleState()
    _, diag = f.run_filters(dedicated("big", "6"), state, snap)
    assert diag.message(dedicated("big", "6"), state, snap) == (
        "0/1 nodes are available: 1 node(s) had no NUMA zone(s) that fit the pod."
    )
    assert feasible(f, dedicated("small", "3"), snap) == ["n0"]


def test_exclusive_pod_takes_a_whole_free_zone() -> None:
    busy = {0: [("default/other/uid-x", "1", "1Gi")]}
    snap = snapshot([node("n0", cpu="16", memory="32Gi")], cnrs=[four_numa("n0", SINGLE, busy)])
    f = fw()
    ids = reserve(f, dedicated("ex", "2", exclusive=True), snap)
    assert ids != (0,) and len(ids) == 1
    slot = snap.index["n0"]
    z = list(snap.numa_id[:4, slot]).index(ids[0])
    # the whole zone is held, not just the 2 cpus asked for
    assert snap.numa_cpu_used[z, slot] == 4000


def test_numeric_sets_stay_on_one_socket() -> None:
    # zones 1 (socket 0) and 2 (socket 1) are busy: the free zones 0 and 3 are on two sockets
    busy = {1: [("default/a/uid-a", "1", "1Gi")], 2: [("default/b/uid-b", "1", "1Gi")]}
    snap = snapshot([node("n0", cpu="16", memory="32Gi")], cnrs=[four_numa("n0", NUMERIC, busy)])
    f = fw()
    assert feasible(f, dedicated("ex", "8", exclusive=True), snap) == []
    snap2 = snapshot([node("n0", cpu="16", memory="32Gi")], cnrs=[four_numa("n0", NUMERIC)])
    assert set(reserve(f, dedicated("ex", "8", exclusive=True), snap2)) in ({0, 1}, {2, 3})
    # more zones than one socket has may span sockets
    assert (
        len(
            reserve(
                f,
                dedicated("ex3", "10", exclusive=True),
                snapshot([node("n0", cpu="16", memory="32Gi")], cnrs=[four_numa("n0")]),
            )
        )
        == 3
    )


def test_numa_ids_and_numa_number_annotations() -> None:
    snap = snapshot([node("n0", cpu="16", memory="32Gi")], cnrs=[four_numa("n0")])
    f = fw()
    p = dedicated("ids", "2", exclusive=True, **{names.NUMA_IDS_ANNOTATION: "2-3"})
    assert reserve(f, p, snap) == (2, 3)
    p2 = dedicated("num", "2", **{names.NUMA_NUMBER_ANNOTATION: "2"})
    assert set(reserve(f, p2, snap)) == {0, 1}  # the only socket still free


def test_non_exclusive_binding_needs_one_zone_under_numeric_policy() -> None:
    snap = snapshot([node("n0", cpu="16", memory="32Gi")], cnrs=[four_numa("n0")])
    assert feasible(fw(), dedicated("wide", "6"), snap) == []
    assert feasible(fw(), dedicated("fits", "4"), snap) == ["n0"]


def test_other_pods_and_unmanaged_nodes_pass() -> None:
    full = {i: [(f"default/p{i}/u{i}", "4", "8Gi")] for i in range(4)}
    snap = snapshot(
        [node("managed", cpu="16", memory="32Gi"), node("plain", cpu="16", memory="32Gi")],
        cnrs=[four_numa("managed", NUMERIC, full)],
    )
    f = fw()
    shared = info(pod("s", {"cpu": "2"}, qos="shared_cores", scheduler="katalyst-scheduler"))
    assert feasible(f, shared, snap) == ["managed", "plain"]
    assert feasible(f, dedicated("d", "2"), snap) == ["plain"]


def test_cnr_allocations_of_shared_pods_do_not_hold_zones() -> None:
    snap = snapshot(
        [node("n0", cpu="16", memory="32Gi")],
        bound=[pod("s", {"cpu": "4"}, qos="shared_cores", node_name="n0", uid="uid-shared")],
    )
    snap.upsert_cnr(four_numa("n0", NUMERIC, {0: [("default/s/uid-shared", "4", "8Gi")]}))
    assert snap.free_numa_ids(snap.index["n0"]) == [0, 1, 2, 3]


def test_a_reservation_counts_once_when_the_cnr_reports_it() -> None:
    snap = snapshot([node("n0", cpu="16", memory="32Gi")], cnrs=[four_numa("n0")])
    f = fw()
    p = dedicated("d", "3")
    (nid,) = reserve(f, p, snap)
    slot = snap.index["n0"]
    assert int(snap.numa_cpu_used[nid, slot]) == 3000
    snap.upsert_cnr(four_numa("n0", NUMERIC, {nid: [(f"default/d/{p.uid}", "3", "1Gi")]}))
    assert int(snap.numa_cpu_used[nid, slot]) == 3000


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(1, 9), st.booleans()), min_size=5, max_size=30))
def test_placements_never_overlap_and_respect_sockets(pods: list[tuple[int, bool]]) -> None:
    clock = VirtualClock()
    cluster = MemoryCluster(clock)
    for n in ("n0", "n1"):
        add_node(cluster, node(n, cpu="16", memory="64Gi"))
        add_cnr(cluster, four_numa(n))
    sched = Scheduler(cluster, load_config_text(NUMA_PROFILE), record_scheduled_events=False)
    for i, (cpu, exclusive) in enumerate(pods):
        enh = {"numa_binding": "true"}
        if exclusive:
            enh["numa_exclusive"] = "true"
        add_pod(
            cluster,
            pod(
                f"p{i}",
                {"cpu": str(cpu), "memory": "1Gi"},
                qos="dedicated_cores",
                memory_enhancement=enh,
                scheduler="katalyst-scheduler",
            ),
        )
    outcomes = sched.run_until_idle(clock.now())
    cpu_used: dict[tuple[str, int], int] = defaultdict(int)
    exclusive_owner: dict[tuple[str, int], str] = {}
    users: dict[tuple[str, int], set[str]] = defaultdict(set)
    socket_of = {0: 0, 1: 0, 2: 1, 3: 1}
    for o in outcomes:
        if o.node is None:
            continue
        assert o.numa is not None
        ids = o.numa.numa_ids
        if len(ids) <= 2:
            assert len({socket_of[i] for i in ids}) == 1, ids
        for nid, c in zip(ids, o.numa.cpu, strict=True):
            key = (o.node, nid)
            cpu_used[key] += c
            users[key].add(o.pod)
            if o.numa.exclusive:
                assert key not in exclusive_owner
                exclusive_owner[key] = o.pod
    for key, owner in exclusive_owner.items():
        assert users[key] == {owner}
    assert all(v <= 4000 for v in cpu_used.values())
    # a pod left pending really had no room: every zone it could use was taken
    for o in outcomes:
        if o.node is None:
            assert "NUMA" in o.message or "Insufficient" in o.message


def test_native_policy_judges_guaranteed_pods_with_whole_cpus() -> None:
    text = NUMA_PROFILE.replace(
        "reservedZones: Chosen", "reservedZones: Chosen, resourcePluginPolicy: native"
    )
    zones = numa_zones([[(0, "4", "8Gi")], [(1, "4", "8Gi")]])
    snap = snapshot([node("n0", cpu="16")], cnrs=[cnr("n0", zones=zones, policy=SINGLE)])
    f = framework(text)

    def guaranteed(cpu: str) -> PodInfo:
        return info(pod("g", {"cpu": cpu, "memory": "1Gi"}, scheduler="katalyst-scheduler"))

    assert feasible(f, guaranteed("3"), snap) == ["n0"]
    assert feasible(f, guaranteed("6"), snap) == []
    # a fractional cpu request is not pinned by the kubelet: no NUMA constraint
    assert feasible(f, guaranteed("5500m"), snap) == ["n0"]
    # dedicated_cores annotations do not matter under the native policy
    assert feasible(f, dedicated("d", "6"), snap) == []


def test_native_policy_takes_the_lowest_zone_that_fits() -> None:
    text = NUMA_PROFILE.replace(
        "reservedZones: Chosen", "reservedZones: Chosen, resourcePluginPolicy: native"
    )
    busy = {0: [("default/x/uid-x", "3", "1Gi")]}
    snap = snapshot([node("n0", cpu="16", memory="32Gi")], cnrs=[four_numa("n0", SINGLE, busy)])
    p = info(pod("g", {"cpu": "2", "memory": "1Gi"}, scheduler="katalyst-scheduler", uid="g"))
    assert reserve(framework(text), p, snap) == (1,)
    # the dynamic policy with LeastAllocated picks the emptiest zone instead
    d = dedicated("d", "2")
    assert reserve(fw(), d, snap) in ((2,), (3,))


def test_a_burst_of_exclusive_pods_waits_for_the_agent_under_katalysts_reservation() -> None:
    # Katalyst's reservedZones: All (the default): two exclusive pods pending together on a
    # node of two free zones; the first is reserved on every zone, so the second waits
    # until the agent reports the first in the CNR, then takes the other zone
    clock = VirtualClock()
    cluster = MemoryCluster(clock)
    add_node(cluster, node("n0", cpu="16", memory="32Gi"))
    two = [[(0, "4", "8Gi"), (1, "4", "8Gi")]]
    add_cnr(cluster, cnr("n0", zones=numa_zones(two), policy=SINGLE))
    profile = NUMA_PROFILE.replace("args: {reservedZones: Chosen}", "args: {}")
    sched = Scheduler(cluster, load_config_text(profile), record_scheduled_events=False)
    uids = {}
    for name in ("a", "b"):
        uids[name] = add_pod(
            cluster,
            pod(
                name,
                {"cpu": "2", "memory": "1Gi"},
                qos="dedicated_cores",
                memory_enhancement={"numa_binding": "true", "numa_exclusive": "true"},
                scheduler="katalyst-scheduler",
            ),
        )["metadata"]["uid"]
    first = {o.pod: o for o in sched.run_until_idle(clock.now())}
    bound = [p for p, o in first.items() if o.node == "n0"]
    waiting = [p for p, o in first.items() if o.node is None]
    assert len(bound) == 1 and len(waiting) == 1
    assert "NUMA" in first[waiting[0]].message
    # the agent pins the first pod to zone 0, whole, and reports it
    name = bound[0].rpartition("/")[2]
    held = {0: [(f"default/{name}/{uids[name]}", "4", "8Gi")]}
    raw = cluster.get(names.CUSTOM_NODE_RESOURCE, "n0")
    raw["status"] = cnr("n0", zones=numa_zones(two, held), policy=SINGLE)["status"]
    cluster.update_status(names.CUSTOM_NODE_RESOURCE, raw)
    clock.advance(60)
    later = {o.pod: o for o in sched.run_until_idle(clock.now())}
    assert later[waiting[0]].node == "n0"
    # reserved, as Katalyst does, on every zone until the agent reports where it went
    assert later[waiting[0]].numa is not None and later[waiting[0]].numa.numa_ids == (0, 1)


def test_a_cnr_rewritten_with_new_zones_is_read_again() -> None:
    """Zones read once are kept while a CNR is rewritten with the same zones (the agent's
    heartbeat), and read again as soon as an allocation in them changes, even when the
    scheduler's copy of the old object was changed in place."""
    snap = snapshot([node("n0", cpu="16", memory="32Gi")])
    slot = snap.index["n0"]
    first = four_numa("n0", NUMERIC, {1: [("default/d/uid-d", "3", "1Gi")]})
    snap.upsert_cnr(first)
    assert int(snap.numa_cpu_used[1, slot]) == 3000
    beat = four_numa("n0", NUMERIC, {1: [("default/d/uid-d", "3", "1Gi")]})
    beat["status"]["conditions"] = [{"type": "AgentReady", "status": "True"}]  # type: ignore[index]
    assert not snap.upsert_cnr(beat)
    assert int(snap.numa_cpu_used[1, slot]) == 3000
    moved = four_numa("n0", NUMERIC, {2: [("default/d/uid-d", "2", "1Gi")]})
    first["status"] = moved["status"]  # the old object now says the same as the new one
    assert snap.upsert_cnr(moved)
    assert int(snap.numa_cpu_used[1, slot]) == 0
    assert int(snap.numa_cpu_used[2, slot]) == 2000
