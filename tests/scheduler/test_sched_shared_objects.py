"""The scheduler reading a MemoryCluster's watches uncopied (`share_watched_objects`, as
the simulator runs it) places pods as the copying scheduler does, and never changes an
object it was handed (they are the store's own)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.apiserver.watch import MemoryWatch
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.patch import copy_json
from pykatalyst.cluster.protocol import WatchEvent
from pykatalyst.scheduler.config import resolve
from pykatalyst.scheduler.scheduler import Scheduler
from pykatalyst.sim.control import katalyst_scheduler_config

from .sched_helpers import add_cnr, add_node, add_pod, cnr, node, numa_zones, pod

NS = "default"


class Handed:
    """Every object a watch handed out uncopied, with a copy taken as it was handed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: list[tuple[Any, Any]] = []
        real = MemoryWatch.next_events

        def spy(w: MemoryWatch, timeout: float = 0.0, copy: bool = True) -> list[WatchEvent]:
            out = real(w, timeout, copy)
            if not copy:
                self.seen.extend((ev.object, copy_json(ev.object)) for ev in out)
            return out

        monkeypatch.setattr(MemoryWatch, "next_events", spy)

    def changed(self) -> list[str]:
        return [f"{obj['kind']} {obj['metadata']['name']}" for obj, was in self.seen if obj != was]


def _cluster() -> MemoryCluster:
    return MemoryCluster(clock=VirtualClock(0.0), seed=3)


def _play(cluster: MemoryCluster, sched: Scheduler, script: list[tuple[Any, ...]]) -> list[Any]:
    """Run `script` (node and CNR writes, pod creations and deletions), scheduling after
    each step; returns every outcome and where each pod ended."""
    out: list[Any] = []
    sched.run_until_idle(-1.0)  # listed empty: everything after comes through the watches
    for i, (op, *args) in enumerate(script):
        if op == "node":
            name, cpu = args
            add_node(cluster, node(name, cpu=str(cpu), memory="64Gi"))
            zones = numa_zones([[(0, str(cpu // 2), "32Gi"), (1, str(cpu - cpu // 2), "32Gi")]])
            add_cnr(cluster, cnr(name, reclaimed_cpu=f"{cpu}k", zones=zones))
        elif op == "reclaimed":
            name, milli = args
            patch = {"status": {"resources": {"allocatable": {names.RECLAIMED_MILLICPU: milli}}}}
            cluster.patch(names.CUSTOM_NODE_RESOURCE, name, patch, subresource="status")
        elif op == "pod":
            name, cpu, qos = args
            requests = {"cpu": f"{cpu}m", "memory": "1Gi"}
            if qos == names.QOS_RECLAIMED_CORES:
                requests = {names.RECLAIMED_MILLICPU: str(cpu), names.RECLAIMED_MEMORY: "1Gi"}
            add_pod(cluster, pod(name, requests, qos=qos))
        elif op == "delete":
            (name,) = args
            if cluster.list(names.POD, NS, field_selector=f"metadata.name={name}").items:
                cluster.delete(names.POD, name, NS)
        for o in sched.run_until_idle(float(i)):
            out.append((o.pod, o.node, o.reason, o.message, dict(o.scores)))
    placed = {
        p["metadata"]["name"]: (p.get("spec") or {}).get("nodeName")
        for p in cluster.list(names.POD, NS).items
    }
    return [out, placed]


_NODES = st.lists(
    st.tuples(st.just("node"), st.sampled_from(["n1", "n2", "n3"]), st.integers(2, 16)),
    min_size=1,
    max_size=3,
    unique_by=lambda t: t[1],
)
_STEP = st.one_of(
    st.tuples(
        st.just("pod"),
        st.sampled_from([f"p{i}" for i in range(8)]),
        st.integers(100, 12_000),
        st.sampled_from([names.QOS_SHARED_CORES, names.QOS_RECLAIMED_CORES]),
    ),
    st.tuples(st.just("delete"), st.sampled_from([f"p{i}" for i in range(8)])),
    st.tuples(st.just("reclaimed"), st.sampled_from(["n1"]), st.sampled_from(["0", "4k", "12k"])),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=_NODES, steps=st.lists(_STEP, max_size=14))
def test_uncopied_watches_place_as_copied_ones_and_change_nothing(
    nodes: list[tuple[Any, ...]], steps: list[tuple[Any, ...]]
) -> None:
    # pods named twice are created once (the second create is dropped from the script);
    # a reclaimed figure is patched only on a node that exists
    made: set[str] = set()
    script: list[tuple[Any, ...]] = list(nodes)
    for s in steps:
        if s[0] == "pod" and s[1] in made:
            continue
        if s[0] == "reclaimed" and not any(n[1] == s[1] for n in nodes):
            continue
        if s[0] == "pod":
            made.add(s[1])
        script.append(s)
    config = resolve(katalyst_scheduler_config(), "test")
    with pytest.MonkeyPatch.context() as mp:
        handed = Handed(mp)
        results = []
        for share in (False, True):
            cluster = _cluster()
            sched = Scheduler(cluster, config, seed=1, share_watched_objects=share)
            results.append(_play(cluster, sched, script))
    assert results[0] == results[1]
    assert handed.seen, "the sharing scheduler read its watches uncopied"
    assert handed.changed() == []


def test_a_copying_scheduler_takes_nothing_uncopied(monkeypatch: pytest.MonkeyPatch) -> None:
    handed = Handed(monkeypatch)
    cluster = _cluster()
    sched = Scheduler(cluster)
    add_node(cluster, node("n1"))
    add_pod(cluster, pod("p", {"cpu": "1"}))
    assert [o.node for o in sched.run_until_idle(0.0)] == ["n1"]
    assert handed.seen == []
