"""NUMA exclusivity and memory-aware NUMA hints for dedicated pods."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.agent.config import CpuPolicyConfig
from pykatalyst.agent.cpu_policy import (
    DedicatedAssignment,
    DedicatedRequest,
    SnbRequest,
    layout,
)
from pykatalyst.topology.machine import CPUTopology

GIB = 1 << 30
# 2 sockets x 2 NUMA nodes, 6 cores (12 cpus) and 64Gi per NUMA node
QUAD = CPUTopology.synthetic(2, 12, 2, numa_per_socket=2, memory_per_numa=64 * GIB)
CFG = CpuPolicyConfig()


def test_an_exclusive_pod_never_takes_the_node_of_a_running_snb_pod() -> None:
    snb = [SnbRequest("s", "default/s", 2.0, memory=GIB)]
    first = layout(QUAD, CFG, [], {}, 4, snb, {})
    (home,) = first.snb.values()
    ex = DedicatedRequest("d", "default/d", 12, exclusive=True, memory=GIB)
    second = layout(QUAD, CFG, [ex], {}, 4, snb, dict(first.snb))
    assert "d" in second.dedicated
    assert home not in second.dedicated["d"].numas
    assert second.snb == {"s": home}  # the shared pod did not move


def test_a_dedicated_pod_goes_where_its_memory_fits() -> None:
    a = DedicatedRequest("a", "default/a", 2, memory=40 * GIB)
    b = DedicatedRequest("b", "default/b", 2, memory=40 * GIB)
    lay = layout(QUAD, CFG, [a, b], {}, 4)
    assert lay.dedicated["a"].numas != lay.dedicated["b"].numas


def test_a_pod_whose_memory_no_node_holds_is_refused_with_the_reason() -> None:
    big = DedicatedRequest("big", "default/big", 2, memory=100 * GIB)
    lay = layout(QUAD, CFG, [big], {}, 4)
    assert "big" not in lay.dedicated
    assert "memory" in lay.failed["big"]


def test_an_exclusive_pod_needs_nodes_with_no_memory_given_out() -> None:
    # A NUMA-bound dedicated pod on every node but one: the exclusive pod gets that one.
    pods = [DedicatedRequest(f"p{n}", f"default/p{n}", 2, numa_ids=(n,)) for n in (0, 1, 2)]
    ex = DedicatedRequest("x", "default/x", 4, exclusive=True, memory=8 * GIB)
    lay = layout(QUAD, CFG, [*pods, ex], {}, 4)
    assert lay.dedicated["x"].numas == (3,)


# --- allocator invariants over rounds ----------------------------------------------------

pod_requests = st.lists(
    st.tuples(
        st.integers(1, 14),  # cpus
        st.booleans(),  # exclusive
        st.integers(0, 70),  # memory, Gi
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=60, deadline=None)
@given(
    rounds=st.lists(pod_requests, min_size=1, max_size=4),
    snb_cores=st.lists(st.integers(1, 4), max_size=2),
)
def test_allocator_invariants_hold_across_rounds(
    rounds: list[list[tuple[int, bool, int]]], snb_cores: list[int]
) -> None:
    snb = [
        SnbRequest(f"s{i}", f"default/s{i}", float(c), memory=GIB) for i, c in enumerate(snb_cores)
    ]
    previous: dict[str, DedicatedAssignment] = {}
    snb_prev: dict[str, int] = {}
    requests: list[DedicatedRequest] = []
    for r, batch in enumerate(rounds):
        requests = requests + [
            DedicatedRequest(f"r{r}p{i}", f"default/r{r}p{i}", c, exclusive=x, memory=m * GIB)
            for i, (c, x, m) in enumerate(batch)
        ]
        lay = layout(QUAD, CFG, requests, previous, 4, snb, snb_prev)
        placed = list(lay.dedicated.values())
        # cpus are never given twice, nor out of the reserve
        for i, a in enumerate(placed):
            assert a.cpuset.isdisjoint(lay.reserve)
            for b in placed[i + 1 :]:
                assert a.cpuset.isdisjoint(b.cpuset)
        by_uid = {q.uid: q for q in requests}
        for a in placed:
            assert len(a.cpuset) >= by_uid[a.uid].cpus
            assert set(QUAD.numas_of(a.cpuset)) <= set(a.numas)
        # an exclusive pod's nodes hold nobody else: no dedicated pod, no SNB pod
        for a in placed:
            if a.exclusive:
                others = {n for b in placed if b.uid != a.uid for n in b.numas}
                assert not set(a.numas) & others
                assert not set(a.numas) & set(lay.snb.values())
        # memory per node is never promised twice over
        for n in QUAD.numa_nodes:
            on = [a for a in placed if n in a.numas]
            if any(a.exclusive for a in on):
                continue
            promised = sum(by_uid[a.uid].memory // len(a.numas) for a in on)
            new_snb = [q for q in snb if lay.snb.get(q.uid) == n and q.uid not in snb_prev]
            promised += sum(q.memory for q in new_snb)
            assert promised <= QUAD.memory_of_numa(n)
        # nothing running moves: placed pods keep their cpus, SNB pods their node
        for uid, a in previous.items():
            if uid in lay.dedicated:
                assert lay.dedicated[uid].cpuset == a.cpuset
        for uid, n in snb_prev.items():
            assert lay.snb.get(uid, n) == n
        assert set(previous) <= set(lay.dedicated)
        previous = dict(lay.dedicated)
        snb_prev = dict(lay.snb)


# --- on a running node ---------------------------------------------------------------------


def test_on_a_node_an_exclusive_pod_arriving_late_moves_no_running_pod() -> None:
    from pykatalyst.agent.agent import Agent
    from pykatalyst.agent.config import AgentConfig
    from pykatalyst.agent.enforcer import Enforcer
    from pykatalyst.agent.host.base import Knob
    from pykatalyst.api import names
    from pykatalyst.apiserver.memory import MemoryCluster
    from pykatalyst.cluster.clock import VirtualClock
    from pykatalyst.topology.cpuset import CPUSet
    from tests.agent.inmemory_host import InMemoryHost, node_json, pod_json

    clock = VirtualClock(50_000)
    cluster = MemoryCluster(clock=clock)
    cluster.create(names.NODE, node_json("node-1"))
    host = InMemoryHost(QUAD)
    agent = Agent("node-1", cluster, host, clock, AgentConfig(), Enforcer(host, None, clock))

    def pod(name: str, level: str, cpu: str, enh: str, qos_class: str) -> str:
        ann = {names.MEMORY_ENHANCEMENT_ANNOTATION: enh}
        obj = cluster.create(
            names.POD, pod_json(name, level=level, cpu=cpu, annotations=ann), "default"
        )
        uid = str(obj["metadata"]["uid"])
        host.add_pod(uid, qos_class=qos_class)
        return uid

    def run(seconds: int) -> None:
        for _ in range(seconds // 5):
            agent.reconcile(clock.now())
            clock.advance(5)

    def cpus(uid: str) -> CPUSet:
        v = host.knobs[host.pods[uid].containers["app"].cgroup][Knob.CPUSET_CPUS]
        assert isinstance(v, CPUSet)
        return v

    snb = pod("snb", "shared_cores", "2", '{"numa_binding": "true"}', "burstable")
    run(60)
    (home,) = QUAD.numas_of(cpus(snb))
    ex = pod(
        "ex",
        "dedicated_cores",
        "8",
        '{"numa_binding": "true", "numa_exclusive": "true"}',
        "guaranteed",
    )
    run(60)
    assert QUAD.numas_of(cpus(snb)) == [home]
    ex_numas = QUAD.numas_of(cpus(ex))
    assert home not in ex_numas and len(ex_numas) == 1


def test_an_snb_pod_goes_where_its_memory_fits() -> None:
    # NUMA 0 has the most free cpus, but a dedicated pod holds 60 of its 64Gi.
    ded = [
        DedicatedRequest("d0", "default/d0", 1, numa_ids=(0,), memory=60 * GIB),
        DedicatedRequest("d1", "default/d1", 2, numa_ids=(1,), memory=GIB),
        DedicatedRequest("d2", "default/d2", 2, numa_ids=(2,), memory=GIB),
    ]
    small = layout(QUAD, CFG, ded, {}, 4, [SnbRequest("s", "default/s", 1.0, memory=GIB)])
    assert small.snb == {"s": 0}
    big = layout(QUAD, CFG, ded, {}, 4, [SnbRequest("s", "default/s", 1.0, memory=8 * GIB)])
    assert big.snb["s"] in (1, 2)
