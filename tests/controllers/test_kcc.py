"""Dynamic config: KCC targets resolved per node into CustomNodeConfig status."""

from __future__ import annotations

import hashlib
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.selectors import parse_label_selector
from pykatalyst.controllers.kcc import (
    CNCFacts,
    KCCController,
    TargetFacts,
    canary_cutoff,
    config_hash,
    resolve,
)

AQC = names.ADMIN_QOS_CONFIGURATION
NS = "kcc-test"
GVR = {"group": AQC.group, "version": AQC.version, "resource": AQC.plural}


def test_the_hash_is_katalysts_sha256_of_the_config_json() -> None:
    assert config_hash({"spec": {}}) == hashlib.sha256(b"{}").hexdigest()[:12]
    obj = {"spec": {"priority": 3, "config": {"b": "<x>", "a": 1.0}}}
    want = hashlib.sha256(b'{"a":1,"b":"\\u003cx\\u003e"}').hexdigest()[:12]
    assert config_hash(obj) == want


def test_the_selection_fields_do_not_change_the_hash() -> None:
    a = {"spec": {"nodeLabelSelector": "pool=a", "config": {"x": 1}}}
    b = {"spec": {"priority": 4, "config": {"x": 1}}}
    assert config_hash(a) == config_hash(b)


def target(name: str, **kw: Any) -> TargetFacts:
    if "selector_text" in kw:
        kw["selector"] = parse_label_selector(kw["selector_text"])
    return TargetFacts(NS, name, hash=name, **kw)


def test_node_names_beat_selectors_which_beat_the_global_config() -> None:
    cnc = CNCFacts("n1", {"pool": "a"})
    glob = target("global")
    sel = target("sel", selector_text="pool=a")
    per = target("per", node_names=("n1",))
    assert resolve(cnc, [glob, sel, per]).target == per
    assert resolve(cnc, [glob, sel]).target == sel
    assert resolve(CNCFacts("n2", {}), [glob, sel, per]).target == glob


def test_the_highest_priority_wins_and_a_tie_is_a_conflict() -> None:
    cnc = CNCFacts("n1", {"pool": "a", "zone": "z"})
    low = target("low", selector_text="pool=a", priority=0)
    high = target("high", selector_text="pool=a,zone=z", priority=1)
    assert resolve(cnc, [low, high]).target == high
    twin = target("twin", selector_text="zone=z", priority=1)
    res = resolve(cnc, [low, high, twin])
    assert res.target is None and {t.name for t in res.tied} == {"high", "twin"}


def test_canary_counts_and_percentages_round_down_and_clamp() -> None:
    assert canary_cutoff(None, 7) == 7
    assert canary_cutoff("50%", 5) == 2
    assert canary_cutoff(3, 2) == 2
    assert canary_cutoff("0%", 4) == 0


labels_st = st.fixed_dictionaries(
    {}, optional={"pool": st.sampled_from("ab"), "zone": st.sampled_from("xy")}
)
targets_st = st.lists(
    st.builds(
        lambda i, kind, prio, sel, nodes: target(
            f"t{i}",
            priority=prio,
            **(
                {"node_names": tuple(nodes)}
                if kind == 0
                else {"selector_text": sel}
                if kind == 1
                else {}
            ),
        ),
        st.integers(0, 50),
        st.sampled_from([0, 1, 2]),
        st.integers(0, 2),
        st.sampled_from(["pool=a", "pool=b", "zone=x", "pool in (a,b)", "!zone"]),
        st.lists(st.sampled_from(["n0", "n1", "n2"]), min_size=1, max_size=2),
    ),
    max_size=6,
    unique_by=lambda t: t.name,
)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["n0", "n1", "n2", "n3"]), labels_st, targets_st)
def test_a_node_gets_exactly_the_top_config_of_its_first_matching_tier(
    node: str, labels: dict[str, str], targets: list[TargetFacts]
) -> None:
    cnc = CNCFacts(node, labels)
    res = resolve(cnc, targets)

    def matches(t: TargetFacts) -> bool:
        if t.node_names:
            return node in t.node_names
        return t.selector.matches(labels) if t.selector is not None else True

    matching = [t for t in targets if matches(t)]
    if not matching:
        assert res.target is None and not res.tied
        return
    tier = min(t.tier for t in matching)
    top = max(t.priority for t in matching if t.tier == tier)
    best = [t for t in matching if t.tier == tier and t.priority == top]
    if len(best) == 1:
        assert res.target == best[0] and not res.tied
    else:
        assert res.target is None and {t.key for t in res.tied} == {t.key for t in best}


def _cluster() -> MemoryCluster:
    cluster = MemoryCluster(clock=VirtualClock(1000))
    cluster.create(names.NAMESPACE, {"metadata": {"name": NS}})
    return cluster


def _kcc(cluster: MemoryCluster) -> None:
    cluster.create(
        names.KATALYST_CUSTOM_CONFIG,
        {
            "metadata": {"name": "admin-qos", "namespace": NS},
            "spec": {
                "targetType": GVR,
                "nodeLabelSelectorAllowedKeyList": [{"priority": 1, "keyList": ["pool"]}],
            },
        },
        NS,
    )


def _aqc(cluster: MemoryCluster, name: str, spec: dict[str, Any]) -> None:
    cluster.create(AQC, {"metadata": {"name": name, "namespace": NS}, "spec": spec}, NS)


def _cnc(cluster: MemoryCluster, name: str, labels: dict[str, str]) -> None:
    cluster.create(names.CUSTOM_NODE_CONFIG, {"metadata": {"name": name, "labels": labels}})


def _picked(cluster: MemoryCluster, cnc: str) -> tuple[str, str] | None:
    entries = (
        cluster.get(names.CUSTOM_NODE_CONFIG, cnc).get("status", {}).get("katalystCustomConfigList")
        or []
    )
    return (entries[0]["configName"], entries[0]["hash"]) if entries else None


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 6), st.integers(0, 6))
def test_a_larger_canary_updates_a_superset_of_the_nodes(small: int, extra: int) -> None:
    updated: list[set[str]] = []
    for canary in (small, small + extra):
        cluster = _cluster()
        _kcc(cluster)
        for i in range(6):
            _cnc(cluster, f"n{i}", {})
        spec = {"config": {}, "updateStrategy": {"rollingUpdate": {"canary": canary}}}
        _aqc(cluster, "global", spec)
        KCCController(cluster).run(1000)
        updated.append({f"n{i}" for i in range(6) if _picked(cluster, f"n{i}")})
    assert updated[0] <= updated[1]
    assert len(updated[0]) == min(small, 6)


def test_the_controller_writes_cnc_status_and_follows_a_changed_config() -> None:
    cluster = _cluster()
    _kcc(cluster)
    _cnc(cluster, "n1", {"pool": "a"})
    _cnc(cluster, "n2", {"pool": "b"})
    _aqc(cluster, "global", {"config": {}})
    _aqc(cluster, "pool-a", {"nodeLabelSelector": "pool=a", "priority": 1, "config": {}})
    ctl = KCCController(cluster)
    _, result = ctl.run(1000)
    assert not result.failed
    assert _picked(cluster, "n1") is not None and _picked(cluster, "n1")[0] == "pool-a"  # type: ignore[index]
    assert _picked(cluster, "n2")[0] == "global"  # type: ignore[index]
    entry = cluster.get(names.CUSTOM_NODE_CONFIG, "n1")["status"]["katalystCustomConfigList"][0]
    assert entry["configType"] == GVR and entry["configNamespace"] == NS
    status = cluster.get(AQC, "pool-a", NS)["status"]
    assert status["targetNodes"] == 1 and status["updatedTargetNodes"] == 1
    assert status["conditions"][0]["type"] == "Valid"
    assert status["conditions"][0]["status"] == "True"
    old_hash = _picked(cluster, "n1")[1]  # type: ignore[index]
    cluster.patch(
        AQC,
        "pool-a",
        {"spec": {"config": {"reclaimedResourceConfig": {"enableReclaim": True}}}},
        NS,
    )
    ctl.run(1030)
    assert _picked(cluster, "n1")[1] != old_hash  # type: ignore[index]
    assert ctl.run(1060)[0].cnc_updates == {}


def test_a_selector_with_a_key_the_kcc_does_not_allow_is_refused() -> None:
    cluster = _cluster()
    _kcc(cluster)
    _cnc(cluster, "n1", {"zone": "z"})
    _aqc(cluster, "zoned", {"nodeLabelSelector": "zone=z", "priority": 1, "config": {}})
    KCCController(cluster).run(1000)
    cond = cluster.get(AQC, "zoned", NS)["status"]["conditions"][0]
    assert cond["status"] == "False" and "zone" in cond["message"]
    kcc = cluster.get(names.KATALYST_CUSTOM_CONFIG, "admin-qos", NS)["status"]
    assert kcc["invalidTargetConfigList"] == [f"{NS}/zoned"]
    assert _picked(cluster, "n1") is None


def test_two_configs_of_one_priority_on_a_node_are_marked_and_leave_it_alone() -> None:
    cluster = _cluster()
    _kcc(cluster)
    _cnc(cluster, "n1", {"pool": "a"})
    _aqc(cluster, "one", {"nodeLabelSelector": "pool=a", "priority": 1, "config": {}})
    _aqc(cluster, "two", {"nodeLabelSelector": "pool in (a)", "priority": 1, "config": {}})
    ctl = KCCController(cluster)
    plan = ctl.run(1000)[0]
    assert _picked(cluster, "n1") is None
    # The tied configs' conditions are written before the KCC's summary of them.
    kinds = [s.kind for s in plan.statuses]
    assert kinds[-1] == names.KATALYST_CUSTOM_CONFIG and kinds.count(AQC) == 2
    for name, other in (("one", "two"), ("two", "one")):
        conds = {c["type"]: c for c in cluster.get(AQC, name, NS)["status"]["conditions"]}
        assert conds["Conflict"]["status"] == "True" and other in conds["Conflict"]["message"]
    # The KCC says so too, naming both, until the tie is gone.
    kcc = cluster.get(names.KATALYST_CUSTOM_CONFIG, "admin-qos", NS)["status"]["conditions"]
    conflict = next(c for c in kcc if c["type"] == "Conflict")
    assert conflict["reason"] == names.KCC_REASON_SAME_PRIORITY
    assert f"{NS}/one" in conflict["message"] and f"{NS}/two" in conflict["message"]
    cluster.delete(AQC, "two", NS)
    ctl.run(1030)
    kcc = cluster.get(names.KATALYST_CUSTOM_CONFIG, "admin-qos", NS)["status"]["conditions"]
    assert [c["type"] for c in kcc] == ["Valid"]
    assert _picked(cluster, "n1")[0] == "one"  # type: ignore[index]


def test_a_kcc_for_a_type_outside_the_config_group_is_invalid() -> None:
    cluster = _cluster()
    cluster.create(
        names.KATALYST_CUSTOM_CONFIG,
        {
            "metadata": {"name": "bad", "namespace": NS},
            "spec": {"targetType": {"group": "apps", "version": "v1", "resource": "deployments"}},
        },
        NS,
    )
    KCCController(cluster).run(1000)
    cond = cluster.get(names.KATALYST_CUSTOM_CONFIG, "bad", NS)["status"]["conditions"][0]
    assert cond["status"] == "False" and names.CONFIG_GROUP in cond["message"]


def test_a_per_node_config_applies_until_its_last_duration_runs_out() -> None:
    cluster = _cluster()
    _kcc(cluster)
    _cnc(cluster, "n1", {})
    _aqc(cluster, "global", {"config": {}})
    _aqc(
        cluster,
        "pinned",
        {"ephemeralSelector": {"nodeNames": ["n1"], "lastDuration": "1m"}, "config": {}},
    )
    ctl = KCCController(cluster)
    ctl.run(1000)
    assert _picked(cluster, "n1")[0] == "pinned"  # type: ignore[index]
    ctl.run(1000 + 61)
    assert _picked(cluster, "n1")[0] == "global"  # type: ignore[index]
    _aqc(cluster, "bad", {"ephemeralSelector": {"nodeNames": ["n1"]}, "config": {}})
    ctl.run(1100)
    cond = cluster.get(AQC, "bad", NS)["status"]["conditions"][0]
    assert cond["status"] == "False" and "lastDuration" in cond["message"]


@settings(max_examples=20, deadline=None)
@given(st.lists(st.sampled_from("ab"), min_size=1, max_size=6), st.integers(0, 6))
def test_controllers_split_by_node_selector_agree_with_one_controller(
    shards: list[str], canary: int
) -> None:
    def fleet() -> MemoryCluster:
        cluster = _cluster()
        _kcc(cluster)
        for i, shard in enumerate(shards):
            _cnc(cluster, f"n{i}", {"shard": shard})
        spec = {"config": {}, "updateStrategy": {"rollingUpdate": {"canary": canary}}}
        _aqc(cluster, "global", spec)
        return cluster

    one = fleet()
    KCCController(one).run(1000)
    KCCController(one).run(1001)
    split = fleet()
    pools = [KCCController(split, node_selector=f"shard={s}") for s in "ab"]
    for t in range(1000, 1004):
        pools[t % 2].run(t)
    nodes = [f"n{i}" for i in range(len(shards))]
    assert [_picked(split, n) for n in nodes] == [_picked(one, n) for n in nodes]
    status = split.get(AQC, "global", NS)["status"]
    want = one.get(AQC, "global", NS)["status"]
    for key in ("targetNodes", "canaryNodes", "updatedTargetNodes", "updatedNodes"):
        assert status[key] == want[key], key
    version = split.get(AQC, "global", NS)["metadata"]["resourceVersion"]
    for t in range(1004, 1008):
        plan, _ = pools[t % 2].run(t)
        assert plan.cnc_updates == {} and plan.statuses == ()
    assert split.get(AQC, "global", NS)["metadata"]["resourceVersion"] == version
