"""The node snapshot stays equal to a recomputation from scratch through any sequence of
node, CNR and pod changes (slots are reused and swapped on removal)."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.api import names
from pykatalyst.scheduler.snapshot import CPU, PODS, RECLAIMED_CPU, NodeSnapshot
from tests.scheduler.sched_helpers import cnr, info, node, numa_zones, pod

NODES = [f"n{i}" for i in range(5)]

ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("node"), st.sampled_from(NODES), st.integers(1, 16), st.sampled_from(["a", "b"])
        ),
        st.tuples(st.just("drop-node"), st.sampled_from(NODES)),
        st.tuples(st.just("cnr"), st.sampled_from(NODES), st.integers(0, 8)),
        st.tuples(
            st.just("pod"),
            st.integers(0, 9),
            st.sampled_from(NODES),
            st.integers(1, 4),
            st.booleans(),
        ),
        st.tuples(st.just("drop-pod"), st.integers(0, 9)),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(ops)
def test_snapshot_matches_a_fresh_recount(operations: list[tuple[object, ...]]) -> None:
    snap = NodeSnapshot(capacity=1)
    nodes: dict[str, tuple[int, str]] = {}
    cnrs: dict[str, int] = {}
    pods: dict[int, tuple[str, int, bool]] = {}
    for op in operations:
        if op[0] == "node":
            _, name, cpu, zone = op
            snap.upsert_node(node(str(name), cpu=str(cpu), labels={"zone": str(zone)}))
            nodes[str(name)] = (int(str(cpu)), str(zone))
        elif op[0] == "drop-node":
            snap.remove_node(str(op[1]))
            nodes.pop(str(op[1]), None)
        elif op[0] == "cnr":
            snap.upsert_cnr(cnr(str(op[1]), f"{op[2]}k", "1Gi"))
            cnrs[str(op[1])] = int(str(op[2]))
        elif op[0] == "pod":
            _, i, where, cpu, reclaimed = op
            requests = {names.RECLAIMED_MILLICPU: f"{cpu}k"} if reclaimed else {"cpu": str(cpu)}
            raw = pod(
                f"p{i}",
                requests,
                qos="reclaimed_cores" if reclaimed else None,
                node_name=str(where),
                uid=f"u{i}",
            )
            snap.observe_pod(info(raw))
            pods[int(str(i))] = (str(where), int(str(cpu)), bool(reclaimed))
        else:
            snap.forget_pod(f"u{op[1]}")
            pods.pop(int(str(op[1])), None)

    assert sorted(snap.names) == sorted(nodes)
    assert snap.n == len(nodes)
    for name, (cpu, zone) in nodes.items():
        slot = snap.index[name]
        on_node = [p for p in pods.values() if p[0] == name]
        native = sum(c for _, c, r in on_node if not r) * 1000
        reclaimed = sum(c for _, c, r in on_node if r) * 1000
        assert snap.alloc[CPU, slot] == cpu * 1000
        assert snap.req[CPU, slot] == native
        assert snap.req[RECLAIMED_CPU, slot] == reclaimed
        assert snap.req[PODS, slot] == len(on_node)
        assert snap.free[CPU, slot] == cpu * 1000 - native
        assert snap.rc_alloc[0, slot] == cnrs.get(name, 0) * 1000
        assert bool(snap.has_cnr[slot]) == (name in cnrs)
        code = snap.label_codes["zone"][slot]
        assert snap.label_value_list["zone"][code] == zone


# -- a CNR rewritten for its heartbeat is not read again ------------------------------------

_CNR_OPS = st.lists(
    st.one_of(
        # the agent's write: reclaimed cpu, the NUMA zone holding pod u0, a heartbeat
        st.tuples(st.just("cnr"), st.integers(0, 2), st.integers(0, 1), st.integers(0, 3)),
        # pod u0 observed on n0, NUMA-bound (dedicated) or shared
        st.tuples(st.just("pod"), st.booleans()),
        st.tuples(st.just("drop-pod")),
        st.tuples(st.just("node"), st.integers(4, 16)),
    ),
    max_size=25,
)


def _agent_cnr(cpu: int, numa: int, beat: int) -> dict[str, object]:
    raw = cnr(
        "n0",
        f"{cpu}k",
        "1Gi",
        zones=numa_zones(
            [[(0, "4", "8Gi"), (1, "4", "8Gi")]], {numa: [("default/p0/u0", "2", "1Gi")]}
        ),
    )
    status = raw["status"]
    assert isinstance(status, dict)
    status["conditions"] = [{"type": "AgentReady", "lastHeartbeatTime": f"t{beat}"}]
    raw["metadata"] = {"name": "n0", "annotations": {"beat": str(beat)}}
    return raw


def _numa_view(snap: NodeSnapshot) -> list[object]:
    arrays = (snap.numa_cpu_used, snap.numa_mem_used, snap.numa_cpu_used_all, snap.rc_alloc)
    return [a.tolist() for a in arrays] + [snap.has_cnr.tolist(), snap.static_gen]


@settings(max_examples=60, deadline=None)
@given(_CNR_OPS)
def test_a_cnr_update_that_changes_nothing_read_is_answered_as_a_full_read(
    operations: list[tuple[object, ...]],
) -> None:
    """Against a snapshot that reads every CNR update in full: the same answers (changed
    or not) and the same figures, while heartbeats and annotations come and go and the
    pods the zones list change between updates."""
    fast, full = NodeSnapshot(capacity=1), NodeSnapshot(capacity=1)
    for op in operations:
        for snap in (fast, full):
            if op[0] == "node":
                snap.upsert_node(node("n0", cpu=str(op[1])))
            elif op[0] == "pod":
                qos = "dedicated_cores" if op[1] else "shared_cores"
                raw = pod("p0", {"cpu": "2"}, qos=qos, node_name="n0", uid="u0")
                if op[1]:
                    ann = raw["metadata"]["annotations"]
                    ann[names.MEMORY_ENHANCEMENT_ANNOTATION] = '{"numa_binding": "true"}'
                snap.observe_pod(info(raw))
            elif op[0] == "drop-pod":
                snap.forget_pod("u0")
        if op[0] == "cnr":
            raw = _agent_cnr(*(int(str(x)) for x in op[1:]))
            full._cnr_seen.clear()
            assert fast.upsert_cnr(copy.deepcopy(raw)) == full.upsert_cnr(raw)
        assert _numa_view(fast) == _numa_view(full)
