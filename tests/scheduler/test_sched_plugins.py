"""Each plugin's filter and score on small snapshots, against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from pykatalyst.api import names
from pykatalyst.scheduler.framework import Framework
from pykatalyst.scheduler.plugins.base import CycleState
from pykatalyst.scheduler.podinfo import PodInfo
from pykatalyst.scheduler.snapshot import NodeSnapshot
from tests.scheduler.sched_helpers import cnr, framework, info, node, pod, snapshot

HEAD = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"

QOS_PROFILE = (
    HEAD
    + """\
profiles:
  - plugins:
      filter:
        enabled: [{name: QoSAwareNodeResourcesFit}]
        disabled: [{name: NodeResourcesFit}]
      score:
        enabled: [{name: QoSAwareNodeResourcesFit, weight: 1}]
        disabled: [{name: "*"}]
"""
)


def feasible(fw: Framework, p: PodInfo, snap: NodeSnapshot) -> list[str]:
    alive, _ = fw.run_filters(p, CycleState(), snap)
    return [snap.names[i] for i in np.flatnonzero(alive)]


def message(fw: Framework, p: PodInfo, snap: NodeSnapshot) -> str:
    state = CycleState()
    _, diag = fw.run_filters(p, state, snap)
    return diag.message(p, state, snap)


def scores(fw: Framework, p: PodInfo, snap: NodeSnapshot, plugin: str) -> list[int]:
    state = CycleState()
    fw.run_filters(p, state, snap)
    idx = np.arange(snap.n)
    _, parts = fw.score(p, state, snap, idx)
    value = parts[plugin]
    return [int(v) for v in np.broadcast_to(value, (snap.n,))]


# --- NodeResourcesFit ---------------------------------------------------------------------


def test_fit_reasons_are_counted_per_node_and_sorted() -> None:
    snap = snapshot(
        [node("n0", cpu="1"), node("n1", pods="1"), node("n2", memory="1Gi"), node("n3")],
        bound=[pod("b", {"cpu": "100m"}, node_name="n1")],
    )
    p = info(pod("p", {"cpu": "2", "memory": "2Gi"}))
    fw = framework()
    assert feasible(fw, p, snap) == ["n3"]
    snap.upsert_node(node("n3", cpu="1"))
    # kube sorts the "<count> <reason>" strings themselves
    assert message(fw, p, snap) == (
        "0/4 nodes are available: 1 Insufficient memory, 1 Too many pods, 2 Insufficient cpu."
    )


def test_fit_counts_requests_of_bound_pods() -> None:
    snap = snapshot([node("n0", cpu="4")], bound=[pod("b", {"cpu": "3"}, node_name="n0")])
    fw = framework()
    assert feasible(fw, info(pod("p", {"cpu": "1"})), snap) == ["n0"]
    assert feasible(fw, info(pod("p", {"cpu": "1001m"})), snap) == []


@pytest.mark.parametrize(
    ("args", "fits"),
    [
        ("", False),
        ("ignoredResources: [example.com/gpu]", True),
        ("ignoredResourceGroups: [example.com]", True),
    ],
)
def test_fit_ignores_extended_resources_when_asked(args: str, fits: bool) -> None:
    text = HEAD + f"profiles: [{{pluginConfig: [{{name: NodeResourcesFit, args: {{{args}}}}}]}}]"
    fw = framework(text)
    snap = snapshot([node("n0")])
    p = info(pod("p", {"cpu": "1", "example.com/gpu": "1"}))
    assert (feasible(fw, p, snap) == ["n0"]) is fits
    if not fits:
        assert message(fw, p, snap) == "0/1 nodes are available: 1 Insufficient example.com/gpu."


def test_least_allocated_uses_non_zero_requests() -> None:
    # n0: 1000m bound; the pod asks nothing, so it counts as 100m cpu / 200Mi memory
    snap = snapshot(
        [node("n0", cpu="4", memory="8Gi"), node("n1", cpu="4", memory="8Gi")],
        bound=[pod("b", {"cpu": "1", "memory": "2Gi"}, node_name="n0")],
    )
    fw = framework()
    p = info(pod("p"))
    # n0 cpu: (4000-1100)*100/4000 = 72; memory: (8Gi-2Gi-200Mi)/8Gi = 72.5 -> 72
    # n1 cpu: (4000-100)*100/4000 = 97; memory: (8192-200)/8192 = 97.5 -> 97
    assert scores(fw, p, snap, "NodeResourcesFit") == [72, 97]


# --- QoS-aware fit ------------------------------------------------------------------------


def test_reclaimed_pod_fits_against_the_cnr_not_the_node() -> None:
    snap = snapshot(
        [node("n0"), node("n1"), node("n2")],
        cnrs=[cnr("n0", "2k", "4Gi"), cnr("n1", "8k", "16Gi")],
        bound=[pod("r", {names.RECLAIMED_MILLICPU: "1500"}, qos="reclaimed_cores", node_name="n0")],
    )
    fw = framework(QOS_PROFILE)
    p = info(
        pod(
            "p",
            {names.RECLAIMED_MILLICPU: "1k", names.RECLAIMED_MEMORY: "2Gi"},
            qos="reclaimed_cores",
        )
    )
    assert feasible(fw, p, snap) == ["n1"]
    assert message(fw, p, snap) == (
        "0/3 nodes are available: 1 Insufficient reclaimed_memory, "
        "2 Insufficient reclaimed_millicpu."
    )
    # n2 has no CNR: both resources are missing there
    state = CycleState()
    _, diag = fw.run_filters(p, state, snap)
    per_node = diag.node_reasons(p, state, snap)
    assert per_node[snap.index["n2"]] == (
        "Insufficient reclaimed_millicpu",
        "Insufficient reclaimed_memory",
    )
    assert per_node[snap.index["n0"]] == ("Insufficient reclaimed_millicpu",)


def test_legacy_cnr_resource_names_are_read() -> None:
    snap = snapshot([node("n0")], cnrs=[cnr("n0", "4k", "8Gi", legacy_names=True)])
    fw = framework(QOS_PROFILE)
    p = info(pod("p", {names.RECLAIMED_MILLICPU: "1k"}, qos="reclaimed_cores"))
    assert feasible(fw, p, snap) == ["n0"]


def test_native_fit_never_rejects_reclaimed_pods_for_the_missing_node_resource() -> None:
    both = (
        HEAD
        + """\
profiles:
  - plugins:
      filter:
        enabled: [{name: QoSAwareNodeResourcesFit}]
"""
    )
    legacy_group_only = (
        HEAD
        + """\
profiles:
  - pluginConfig:
      - name: NodeResourcesFit
        args: {ignoredResourceGroups: [katalyst.kubewharf.io]}
"""
    )
    snap = snapshot([node("n0")], cnrs=[cnr("n0")])
    p = info(pod("p", {names.RECLAIMED_MILLICPU: "1k"}, qos="reclaimed_cores"))
    assert feasible(framework(both), p, snap) == ["n0"]
    assert feasible(framework(legacy_group_only), p, snap) == ["n0"]
    # without either, kube's native fit would (correctly) find nothing on the Node
    assert feasible(framework(), p, snap) == []


def test_shared_pods_are_checked_on_native_resources_by_the_qos_fit() -> None:
    snap = snapshot([node("n0", cpu="1"), node("n1", cpu="4")], cnrs=[cnr("n0"), cnr("n1")])
    p = info(pod("p", {"cpu": "2"}, qos="shared_cores"))
    assert feasible(framework(QOS_PROFILE), p, snap) == ["n1"]


def test_qos_fit_scores_reclaimed_pods_on_reclaimed_capacity() -> None:
    snap = snapshot(
        [node("n0"), node("n1")],
        cnrs=[cnr("n0", "8k", "16Gi"), cnr("n1", "8k", "16Gi")],
        bound=[
            pod(
                "r",
                {names.RECLAIMED_MILLICPU: "4k", names.RECLAIMED_MEMORY: "4Gi"},
                qos="reclaimed_cores",
                node_name="n0",
            )
        ],
    )
    p = info(
        pod(
            "p",
            {names.RECLAIMED_MILLICPU: "1k", names.RECLAIMED_MEMORY: "2Gi"},
            qos="reclaimed_cores",
        )
    )
    # n0: cpu (8000-5000)*100/8000 = 37, memory (16-6)/16 = 62 -> 49
    # n1: cpu 87, memory 87 -> 87
    assert scores(framework(QOS_PROFILE), p, snap, "QoSAwareNodeResourcesFit") == [49, 87]
    most = (
        QOS_PROFILE
        + """\
    pluginConfig:
      - name: QoSAwareNodeResourcesFit
        args: {scoringStrategy: {type: MostAllocated}}
"""
    )
    # n0: cpu 62, memory 37 -> 49; n1: cpu 12, memory 12 -> 12
    assert scores(framework(most), p, snap, "QoSAwareNodeResourcesFit") == [49, 12]


def test_qos_balanced_allocation_uses_reclaimed_fractions() -> None:
    text = (
        HEAD
        + """\
profiles:
  - plugins:
      score:
        enabled: [{name: QoSAwareNodeResourcesBalancedAllocation}]
"""
    )
    snap = snapshot([node("n0")], cnrs=[cnr("n0", "8k", "16Gi")])
    p = info(
        pod(
            "p",
            {names.RECLAIMED_MILLICPU: "2k", names.RECLAIMED_MEMORY: "12Gi"},
            qos="reclaimed_cores",
        )
    )
    # fractions 0.25 and 0.75: std 0.25 -> 75
    assert scores(framework(text), p, snap, "QoSAwareNodeResourcesBalancedAllocation") == [75]


# --- taints and unschedulable -------------------------------------------------------------


def test_untolerated_taints_reject_and_name_the_taint() -> None:
    taint = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    snap = snapshot([node("n0", taints=[taint]), node("n1")])
    fw = framework()
    assert feasible(fw, info(pod("p")), snap) == ["n1"]
    snap.upsert_node(node("n1", unschedulable=True))
    assert message(fw, info(pod("p")), snap) == (
        "0/2 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, "
        "1 node(s) were unschedulable."
    )


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"key": "dedicated", "operator": "Equal", "value": "gpu"}, True),
        ({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}, True),
        ({"key": "dedicated", "value": "cpu"}, False),
        ({"key": "dedicated", "operator": "Exists"}, True),
        ({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"operator": "Exists"}, True),
        ({"key": "other", "operator": "Exists"}, False),
    ],
)
def test_toleration_matching(toleration: dict[str, str], tolerated: bool) -> None:
    taint = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    snap = snapshot([node("n0", taints=[taint])])
    p = info(pod("p", tolerations=[toleration]))
    assert (feasible(framework(), p, snap) == ["n0"]) is tolerated


def test_pressure_taint_keeps_pods_away_until_removed() -> None:
    taint = {"key": names.TAINT_PREFIX + names.CONDITION_MEMORY_PRESSURE, "effect": "NoSchedule"}
    snap = snapshot([node("n0", taints=[taint])])
    fw = framework()
    assert feasible(fw, info(pod("p")), snap) == []
    snap.upsert_node(node("n0"))
    assert feasible(fw, info(pod("p")), snap) == ["n0"]


def test_unschedulable_node_tolerated_by_the_unschedulable_taint() -> None:
    snap = snapshot([node("n0", unschedulable=True)])
    tol = [{"key": names.UNSCHEDULABLE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    assert feasible(framework(), info(pod("p", tolerations=tol)), snap) == ["n0"]


def test_prefer_no_schedule_taints_lower_the_score() -> None:
    def soft(k: str) -> dict[str, str]:
        return {"key": k, "value": "", "effect": "PreferNoSchedule"}

    snap = snapshot(
        [node("n0", taints=[soft("a"), soft("b")]), node("n1", taints=[soft("a")]), node("n2")]
    )
    fw = framework()
    assert scores(fw, info(pod("p")), snap, "TaintToleration") == [0, 50, 100]
    tol = [{"key": "b", "operator": "Exists", "effect": "PreferNoSchedule"}]
    assert scores(fw, info(pod("p", tolerations=tol)), snap, "TaintToleration") == [0, 0, 100]


# --- node affinity ------------------------------------------------------------------------


def zones() -> NodeSnapshot:
    return snapshot(
        [
            node("a3", labels={"zone": "a", "gen": "3"}),
            node("b5", labels={"zone": "b", "gen": "5"}),
            node("c9", labels={"zone": "c", "gen": "9"}),
            node("x", labels={"gen": "x"}),
        ]
    )


def required(
    *exprs: dict[str, object], fields: list[dict[str, object]] | None = None
) -> dict[str, object]:
    term: dict[str, object] = {"matchExpressions": list(exprs)}
    if fields:
        term["matchFields"] = fields
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }


@pytest.mark.parametrize(
    ("affinity", "expected"),
    [
        (required({"key": "zone", "operator": "In", "values": ["a", "b"]}), ["a3", "b5"]),
        (required({"key": "zone", "operator": "NotIn", "values": ["a"]}), ["b5", "c9", "x"]),
        (required({"key": "zone", "operator": "Exists"}), ["a3", "b5", "c9"]),
        (required({"key": "zone", "operator": "DoesNotExist"}), ["x"]),
        (required({"key": "gen", "operator": "Gt", "values": ["4"]}), ["b5", "c9"]),
        (required({"key": "gen", "operator": "Lt", "values": ["9"]}), ["a3", "b5"]),
        (
            required(
                {"key": "zone", "operator": "In", "values": ["a", "b", "c"]},
                {"key": "gen", "operator": "Gt", "values": ["4"]},
            ),
            ["b5", "c9"],
        ),
        (required(fields=[{"key": "metadata.name", "operator": "In", "values": ["c9"]}]), ["c9"]),
    ],
)
def test_required_node_affinity(affinity: dict[str, object], expected: list[str]) -> None:
    assert feasible(framework(), info(pod("p", affinity=affinity)), zones()) == expected


def test_node_selector_and_affinity_message() -> None:
    fw = framework()
    snap = zones()
    p = info(pod("p", node_selector={"zone": "b"}))
    assert feasible(fw, p, snap) == ["b5"]
    p = info(pod("p", node_selector={"zone": "nowhere"}))
    assert message(fw, p, snap) == (
        "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector."
    )


def test_preferred_node_affinity_scores_normalised_weights() -> None:
    affinity = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 10,
                    "preference": {
                        "matchExpressions": [
                            {"key": "zone", "operator": "In", "values": ["a", "b"]}
                        ]
                    },
                },
                {
                    "weight": 30,
                    "preference": {
                        "matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["4"]}]
                    },
                },
            ]
        }
    }
    # raw: a3 10, b5 40, c9 30, x 0 -> scaled by the maximum 40
    assert scores(framework(), info(pod("p", affinity=affinity)), zones(), "NodeAffinity") == [
        25,
        100,
        75,
        0,
    ]


# --- pod topology spread ------------------------------------------------------------------


def test_do_not_schedule_spread_constraint() -> None:
    web = {"app": "web"}
    snap = snapshot(
        [
            node("a1", labels={"zone": "a"}),
            node("a2", labels={"zone": "a"}),
            node("b1", labels={"zone": "b"}),
            node("c1", labels={"zone": "c"}),
            node("none"),
        ],
        bound=[
            pod("w1", labels=web, node_name="a1"),
            pod("w2", labels=web, node_name="a2"),
            pod("w3", labels=web, node_name="c1"),
            pod("other", labels={"app": "db"}, node_name="b1"),
        ],
    )
    constraint = [
        {
            "maxSkew": 1,
            "topologyKey": "zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": web},
        }
    ]
    p = info(pod("p", {"cpu": "100m"}, labels=web, spread=constraint))
    fw = framework()
    # counts a=2, b=0, c=1; placing in a gives skew 3, in c skew 2, in b skew 1
    assert feasible(fw, p, snap) == ["b1"]
    snap.upsert_node(node("b1", cpu="0", labels={"zone": "b"}))
    assert message(fw, p, snap) == (
        "0/5 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match pod topology "
        "spread constraints (missing required label), 3 node(s) didn't match pod topology "
        "spread constraints."
    )


def test_a_malformed_spread_selector_rejects_with_a_reason() -> None:
    snap = snapshot([node("n0", labels={"zone": "a"})])
    bad = [
        {
            "maxSkew": 1,
            "topologyKey": "zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Near"}]},
        }
    ]
    p = info(pod("p", spread=bad))
    fw = framework()
    assert feasible(fw, p, snap) == []
    assert "invalid topologySpreadConstraints" in message(fw, p, snap)
    assert "'Near'" in message(fw, p, snap)


# --- inter-pod affinity -------------------------------------------------------------------


def pod_term(kind: str, labels: dict[str, str], key: str = "zone") -> dict[str, object]:
    term = {"labelSelector": {"matchLabels": labels}, "topologyKey": key}
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def affinity_cluster(bound: list[dict[str, object]]) -> NodeSnapshot:
    return snapshot(
        [
            node("a1", labels={"zone": "a"}),
            node("a2", labels={"zone": "a"}),
            node("b1", labels={"zone": "b"}),
            node("bare"),
        ],
        bound=bound,
    )


def test_pod_affinity_follows_matching_pods_into_their_domain() -> None:
    snap = affinity_cluster([pod("db", labels={"app": "db"}, node_name="a2")])
    p = info(pod("web", affinity=pod_term("podAffinity", {"app": "db"})))
    assert feasible(framework(), p, snap) == ["a1", "a2"]
    # nothing matches anywhere, but the pod matches its own term: the first of its group
    p2 = info(
        pod("c1", labels={"app": "cache"}, affinity=pod_term("podAffinity", {"app": "cache"}))
    )
    assert feasible(framework(), p2, snap) == ["a1", "a2", "b1"]
    p3 = info(pod("lonely", affinity=pod_term("podAffinity", {"app": "none"})))
    assert message(framework(), p3, snap) == (
        "0/4 nodes are available: 4 node(s) didn't match pod affinity rules."
    )


def test_pod_anti_affinity_avoids_domains_with_matching_pods() -> None:
    snap = affinity_cluster([pod("w1", labels={"app": "web"}, node_name="a1")])
    p = info(pod("w2", labels={"app": "web"}, affinity=pod_term("podAntiAffinity", {"app": "web"})))
    # zone a holds a web pod; a node without the zone label is in no domain
    assert feasible(framework(), p, snap) == ["b1", "bare"]


def test_existing_pods_anti_affinity_keeps_others_out() -> None:
    guard = pod(
        "guard",
        labels={"app": "guard"},
        node_name="b1",
        affinity=pod_term("podAntiAffinity", {"app": "noisy"}, "kubernetes.io/hostname"),
    )
    snap = affinity_cluster([guard])
    noisy = info(pod("n", labels={"app": "noisy"}))
    fw = framework()
    assert feasible(fw, noisy, snap) == ["a1", "a2", "bare"]
    state = CycleState()
    _, diag = fw.run_filters(noisy, state, snap)
    assert diag.node_reasons(noisy, state, snap)[snap.index["b1"]] == (
        "node(s) didn't satisfy existing pods anti-affinity rules",
    )
    assert feasible(fw, info(pod("quiet")), snap) == ["a1", "a2", "b1", "bare"]


def test_a_node_listing_no_pods_allocatable_takes_no_pod() -> None:
    # kube-scheduler reads a missing `pods` allocatable as 0 allowed pods, and its fit
    # refuses every pod there with "Too many pods"; the QoS-aware fit does the same for
    # shared and reclaimed pods (Katalyst's would pass them, for the kubelet to refuse)
    bare = node("n0")
    del bare["status"]["allocatable"]["pods"]
    snap = snapshot([bare, node("n1")], cnrs=[cnr("n0"), cnr("n1")])
    reclaimed = info(pod("r", {names.RECLAIMED_MILLICPU: "1k"}, qos="reclaimed_cores"))
    for fw, p in (
        (framework(), info(pod("p", {"cpu": "1"}))),
        (framework(QOS_PROFILE), info(pod("s", {"cpu": "1"}))),
        (framework(QOS_PROFILE), reclaimed),
    ):
        assert feasible(fw, p, snap) == ["n1"]
        assert message(fw, p, snap).endswith("1 Too many pods.")
