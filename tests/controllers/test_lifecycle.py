"""Lifecycle: a CNR and a CNC per Node, owned by it, and orphans deleted."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.controllers.lifecycle import LifecycleController, ObjectFacts, decide

CNR, CNC = names.CUSTOM_NODE_RESOURCE, names.CUSTOM_NODE_CONFIG


def test_a_new_node_gets_a_cnr_and_a_cnc_it_owns_with_its_labels() -> None:
    cluster = MemoryCluster(clock=VirtualClock(1000))
    node = cluster.create(names.NODE, {"metadata": {"name": "n1", "labels": {"pool": "a"}}})
    ctl = LifecycleController(cluster)
    _, result = ctl.run(1000)
    assert not result.failed
    for kind in (CNR, CNC):
        obj = cluster.get(kind, "n1")
        ref = obj["metadata"]["ownerReferences"][0]
        assert (ref["kind"], ref["name"], ref["uid"]) == ("Node", "n1", node["metadata"]["uid"])
        assert obj["metadata"]["labels"] == {"pool": "a"}
    assert ctl.run(1001)[0].actions == ()


def test_the_cnc_follows_the_node_labels_and_an_agent_made_cnr_is_adopted() -> None:
    cluster = MemoryCluster(clock=VirtualClock(1000))
    cluster.create(names.NODE, {"metadata": {"name": "n1", "labels": {"pool": "a"}}})
    cluster.create(CNR, {"metadata": {"name": "n1", "labels": {"agent": "x"}}})
    ctl = LifecycleController(cluster)
    ctl.run(1000)
    assert cluster.get(CNR, "n1")["metadata"]["ownerReferences"][0]["kind"] == "Node"
    assert cluster.get(CNR, "n1")["metadata"]["labels"] == {"agent": "x", "pool": "a"}
    cluster.patch(names.NODE, "n1", {"metadata": {"labels": {"pool": None, "zone": "z"}}})
    ctl.run(1010)
    assert cluster.get(CNC, "n1")["metadata"]["labels"] == {"zone": "z"}


def test_orphans_go_after_the_grace_and_only_when_the_node_is_really_gone() -> None:
    clock = VirtualClock(1000)
    cluster = MemoryCluster(clock=clock)
    cluster.create(names.NODE, {"metadata": {"name": "n1"}})
    ctl = LifecycleController(cluster, orphan_grace_s=60)
    ctl.run(clock.now())
    cluster.delete(names.NODE, "n1")
    cluster.create(CNR, {"metadata": {"name": "ghost"}})
    clock.advance(30)
    ctl.run(clock.now())
    assert cluster.get(CNR, "ghost")  # still within its grace
    clock.advance(60)
    ctl.run(clock.now())
    remaining = {o["metadata"]["name"] for k in (CNR, CNC) for o in cluster.list(k).items}
    assert remaining == set()


@settings(max_examples=100, deadline=None)
@given(
    st.sets(st.sampled_from(["a", "b", "c", "d"])),
    st.sets(st.sampled_from(["a", "b", "c", "d"])),
    st.integers(0, 200),
)
def test_every_node_is_served_and_only_old_orphans_are_deleted(
    nodes: set[str], existing: set[str], age: int
) -> None:
    node_facts = [ObjectFacts(n, uid=f"u-{n}", labels={}) for n in nodes]
    objs = [ObjectFacts(n, created=1000.0 - age) for n in existing]
    plan = decide(node_facts, objs, objs, 1000.0, orphan_grace_s=60)
    for kind in (CNR, CNC):
        acted = {(a.verb, a.name) for a in plan.actions if a.kind == kind}
        assert {n for v, n in acted if v == "create"} == nodes - existing
        assert {n for v, n in acted if v == "patch"} == nodes & existing  # adopted
        deleted = {n for v, n in acted if v == "delete"}
        assert deleted == (existing - nodes if age >= 60 else set())
