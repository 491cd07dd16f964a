"""Node overcommit: which NodeOvercommitConfig selects a node, and the annotations it gets."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.controllers.overcommit import (
    NodeFacts,
    OvercommitConfigFacts,
    OvercommitController,
    decide,
    desired_annotations,
    read_config,
    select_config,
)

POOL = names.OVERCOMMIT_NODE_POOL_LABEL
CPU = names.CPU_OVERCOMMIT_RATIO_ANNOTATION
MEM = names.MEMORY_OVERCOMMIT_RATIO_ANNOTATION


def noc(name: str, val: str, created: float = 0.0, **ratios: str) -> OvercommitConfigFacts:
    return OvercommitConfigFacts(name, val, ratios, created)


def test_a_pool_config_writes_its_ratios_and_one_for_the_unset_resource() -> None:
    node = NodeFacts("n1", {POOL: "pool-a"}, {})
    want = desired_annotations(node, noc("a", "pool-a", cpu="1.5"))
    assert want == {CPU: "1.5", MEM: "1"}


def test_overcommitted_capacity_keeps_guaranteed_cpus_out_of_the_ratio() -> None:
    node = NodeFacts(
        "n1",
        {POOL: "p"},
        {
            names.ORIGINAL_ALLOCATABLE_CPU_ANNOTATION: "8",
            names.ORIGINAL_CAPACITY_CPU_ANNOTATION: "10",
            names.ORIGINAL_ALLOCATABLE_MEMORY_ANNOTATION: "16Gi",
            names.ORIGINAL_CAPACITY_MEMORY_ANNOTATION: "16Gi",
        },
        {
            names.CNR_OVERCOMMIT_CPU_MANAGER_ANNOTATION: "static",
            names.CNR_GUARANTEED_CPUS_ANNOTATION: "2",
        },
    )
    want = desired_annotations(node, noc("a", "p", cpu="1.5", memory="2"))
    assert want[names.OVERCOMMIT_ALLOCATABLE_CPU_ANNOTATION] == "11"  # (8-2)*1.5+2
    assert want[names.OVERCOMMIT_CAPACITY_CPU_ANNOTATION] == "14"  # (10-2)*1.5+2
    assert want[names.OVERCOMMIT_ALLOCATABLE_MEMORY_ANNOTATION] == "32Gi"


def test_the_realtime_ratio_from_the_cnr_caps_the_configured_one() -> None:
    node = NodeFacts(
        "n1",
        {POOL: "p"},
        {
            names.ORIGINAL_ALLOCATABLE_CPU_ANNOTATION: "8",
            names.ORIGINAL_CAPACITY_CPU_ANNOTATION: "8",
        },
        {CPU: "1.25"},
    )
    want = desired_annotations(node, noc("a", "p", cpu="2"))
    assert want[names.REALTIME_CPU_OVERCOMMIT_RATIO_ANNOTATION] == "1.25"
    assert want[names.OVERCOMMIT_ALLOCATABLE_CPU_ANNOTATION] == "10"


def test_the_newest_config_wins_and_the_default_serves_unlabelled_nodes() -> None:
    configs = [noc("old", "p", 1.0), noc("new", "p", 2.0), noc("default", "", 0.0)]
    assert select_config(NodeFacts("n", {POOL: "p"}, {}), configs).name == "new"  # type: ignore[union-attr]
    assert select_config(NodeFacts("n", {}, {}), configs).name == "default"  # type: ignore[union-attr]
    assert select_config(NodeFacts("n", {POOL: "other"}, {}), configs) is None


def test_a_refused_config_is_noted_and_selects_nothing() -> None:
    bad = read_config(
        {
            "metadata": {"name": "bad"},
            "spec": {"nodeOvercommitSelectorVal": "p", "resourceOvercommitRatio": {"cpu": "0.5"}},
        }
    )
    assert "resourceOvercommitRatio" in bad.error
    plan = decide([NodeFacts("n", {POOL: "p"}, {})], [bad], 0.0)
    assert plan.selection == {"n": ""}
    assert any("bad" in n for n in plan.notes)


def test_no_config_removes_only_the_managed_annotations() -> None:
    node = NodeFacts("n", {}, {CPU: "1.5", MEM: "1", "team": "x"})
    plan = decide([node], [], 0.0)
    assert plan.patches[0].changes == {CPU: None, MEM: None}


nodes_st = st.lists(
    st.builds(
        lambda i, pool: NodeFacts(f"n{i}", {} if pool is None else {POOL: pool}, {}),
        st.integers(0, 30),
        st.none() | st.sampled_from(["a", "b", ""]),
    ),
    max_size=8,
    unique_by=lambda n: n.name,
)
configs_st = st.lists(
    st.builds(
        lambda i, val, t, r: noc(f"c{i}", val, float(t), cpu=r),
        st.integers(0, 10),
        st.sampled_from(["a", "b", "c", ""]),
        st.integers(0, 3),
        st.sampled_from(["1", "1.5", "2"]),
    ),
    max_size=6,
    unique_by=lambda c: c.name,
)


@settings(max_examples=100, deadline=None)
@given(nodes_st, configs_st)
def test_each_node_gets_the_newest_config_of_its_pool_and_a_second_pass_changes_nothing(
    nodes: list[NodeFacts], configs: list[OvercommitConfigFacts]
) -> None:
    plan = decide(nodes, configs, 0.0)
    for node in nodes:
        chosen = plan.selection[node.name]
        val = node.labels.get(POOL, "")
        same_pool = [c for c in configs if c.selector_val == val and node.labels.get(POOL) != ""]
        if not same_pool:
            assert chosen == ""
        else:
            best = max(same_pool, key=lambda c: (c.created, c.name))
            assert chosen == best.name
    # Applying the patches reaches a fixed point.
    patched = []
    for node in nodes:
        ann = dict(node.annotations)
        for p in plan.patches:
            if p.node == node.name:
                for k, v in p.changes.items():
                    if v is None:
                        ann.pop(k, None)
                    else:
                        ann[k] = v
        patched.append(NodeFacts(node.name, node.labels, ann))
    assert decide(patched, configs, 0.0).patches == ()


@settings(max_examples=100, deadline=None)
@given(nodes_st, configs_st, st.data())
def test_controllers_split_by_node_selector_write_the_lists_one_controller_would(
    nodes: list[NodeFacts], configs: list[OvercommitConfigFacts], data: st.DataObject
) -> None:
    mine = frozenset(data.draw(st.sets(st.sampled_from([n.name for n in nodes]))) if nodes else ())
    theirs = frozenset(n.name for n in nodes) - mine
    whole = decide(nodes, configs, 0.0)
    for owned in (mine, theirs):
        part = decide(nodes, configs, 0.0, owned=owned)
        # Both see every node a config selects, so neither rewrites the other's list ...
        assert part.statuses == whole.statuses
        # ... and each annotates only its own nodes, as the one controller would.
        assert part.patches == tuple(p for p in whole.patches if p.node in owned)


def test_two_pools_controllers_leave_each_others_nodes_in_the_list() -> None:
    cluster = MemoryCluster(clock=VirtualClock(1000))
    for name, shard in (("n1", "a"), ("n2", "b")):
        labels = {POOL: "pool", "shard": shard}
        cluster.create(names.NODE, {"metadata": {"name": name, "labels": labels}})
    cluster.create(names.NODE_OVERCOMMIT_CONFIG, _noc("pool", "pool", "1.5"))
    a = OvercommitController(cluster, node_selector="shard=a")
    b = OvercommitController(cluster, node_selector="shard=b")
    a.run(1000)
    assert CPU in cluster.get(names.NODE, "n1")["metadata"]["annotations"]
    assert CPU not in (cluster.get(names.NODE, "n2")["metadata"].get("annotations") or {})
    b.run(1001)
    assert CPU in cluster.get(names.NODE, "n2")["metadata"]["annotations"]
    version = cluster.get(names.NODE_OVERCOMMIT_CONFIG, "pool")["metadata"]["resourceVersion"]
    for t in range(1002, 1006):
        plan, _ = (a if t % 2 else b).run(t)
        assert plan.statuses == {} and plan.patches == ()
    after = cluster.get(names.NODE_OVERCOMMIT_CONFIG, "pool")
    assert after["status"]["matchedNodeList"] == ["n1", "n2"]
    assert after["metadata"]["resourceVersion"] == version  # nobody rewrote it


def test_the_controller_annotates_the_node_and_deleting_the_config_restores_it() -> None:
    cluster = MemoryCluster(clock=VirtualClock(1000))
    cluster.create(names.NODE, {"metadata": {"name": "n1", "labels": {POOL: "pool-a"}}})
    cluster.create(names.NODE, {"metadata": {"name": "n2"}})
    cluster.create(
        names.NODE_OVERCOMMIT_CONFIG,
        {
            "metadata": {"name": "pool-a"},
            "spec": {
                "nodeOvercommitSelectorVal": "pool-a",
                "resourceOvercommitRatio": {"cpu": "1.5"},
            },
        },
    )
    ctl = OvercommitController(cluster)
    _, result = ctl.run(1000)
    assert not result.failed
    ann = cluster.get(names.NODE, "n1")["metadata"]["annotations"]
    assert ann[CPU] == "1.5" and ann[MEM] == "1"
    assert CPU not in (cluster.get(names.NODE, "n2")["metadata"].get("annotations") or {})
    noc_obj = cluster.get(names.NODE_OVERCOMMIT_CONFIG, "pool-a")
    assert noc_obj["status"]["matchedNodeList"] == ["n1"]
    assert ctl.run(1001)[0].patches == ()  # nothing left to do
    cluster.delete(names.NODE_OVERCOMMIT_CONFIG, "pool-a")
    ctl.run(1002)
    assert CPU not in (cluster.get(names.NODE, "n1")["metadata"].get("annotations") or {})


def _noc(name: str, val: str, ratio: str) -> dict[str, object]:
    return {
        "metadata": {"name": name},
        "spec": {"nodeOvercommitSelectorVal": val, "resourceOvercommitRatio": {"cpu": ratio}},
    }


def _events(cluster: MemoryCluster, name: str) -> list[dict[str, object]]:
    return [
        e
        for e in cluster.list(names.EVENT, names.DEFAULT_NAMESPACE).items
        if e["involvedObject"]["name"] == name
    ]


@given(st.sampled_from(["0.5", "0", "-2", "abc", "", "nan", "1,5"]))
@settings(max_examples=20, deadline=None)
def test_a_ratio_below_one_or_not_a_number_is_refused_naming_the_field(ratio: str) -> None:
    bad = read_config(_noc("bad", "p", ratio))
    assert bad.error.startswith("spec.resourceOvercommitRatio")
    assert repr(ratio) in bad.error and "a number >= 1" in bad.error
    assert bad.selector_val == "p"


def test_a_refused_config_gets_one_warning_event_and_changes_no_node() -> None:
    clock = VirtualClock(1000)
    cluster = MemoryCluster(clock=clock)
    cluster.create(names.NODE, {"metadata": {"name": "n1", "labels": {POOL: "p"}}})
    cluster.create(names.NODE, {"metadata": {"name": "n2", "labels": {POOL: "q"}}})
    cluster.create(names.NODE_OVERCOMMIT_CONFIG, _noc("good", "p", "1.5"))
    ctl = OvercommitController(cluster)
    ctl.run(1000)
    n1_before = cluster.get(names.NODE, "n1")["metadata"]["annotations"]
    assert n1_before[CPU] == "1.5"
    # A newer config for the same pool with a bad ratio: refused, the good one stays in force.
    clock.advance(5)
    cluster.create(names.NODE_OVERCOMMIT_CONFIG, _noc("newer-bad", "p", "0.5"))
    # The only config of pool q is bad: its node is left alone.
    cluster.create(names.NODE_OVERCOMMIT_CONFIG, _noc("only-bad", "q", "abc"))
    plan, result = ctl.run(1005)
    assert not result.failed
    assert plan.selection == {"n1": "good", "n2": ""}
    assert cluster.get(names.NODE, "n1")["metadata"]["annotations"] == n1_before
    assert CPU not in (cluster.get(names.NODE, "n2")["metadata"].get("annotations") or {})
    for name, shown in (("newer-bad", "'0.5'"), ("only-bad", "'abc'")):
        (event,) = _events(cluster, name)
        assert event["type"] == "Warning"
        assert event["reason"] == names.EVENT_REASON_INVALID_OVERCOMMIT_CONFIG
        assert shown in str(event["message"]) and "resourceOvercommitRatio" in str(event["message"])
    # Told once per generation, not every period.
    ctl.run(1010)
    assert len(_events(cluster, "newer-bad")) == 1
    # Fixing the config (a new generation) puts it in force; no further Event.
    fixed = cluster.get(names.NODE_OVERCOMMIT_CONFIG, "only-bad")
    fixed["spec"]["resourceOvercommitRatio"] = {"cpu": "2"}
    cluster.update(names.NODE_OVERCOMMIT_CONFIG, fixed)
    ctl.run(1015)
    assert cluster.get(names.NODE, "n2")["metadata"]["annotations"][CPU] == "2"
    assert len(_events(cluster, "only-bad")) == 1
