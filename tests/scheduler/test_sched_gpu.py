"""GPUShare: GPU pods placed card by card from the CNR's GPU zones, through the real
scheduler over MemoryCluster (the selection annotation lands before the Binding), the
framework on a snapshot, and the extender's verbs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.api import names
from pykatalyst.api.gpu import parse_selection
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cli.explain_pod import explain_pod
from pykatalyst.cli.explain_render import print_pod
from pykatalyst.scheduler.config import load_config
from pykatalyst.scheduler.extender import ExtenderService
from pykatalyst.scheduler.framework import Framework
from pykatalyst.scheduler.podinfo import pod_info
from pykatalyst.scheduler.scheduler import Scheduler
from pykatalyst.scheduler.snapshot import NodeSnapshot
from tests.scheduler.gpu_helpers import gpu_config, gpu_requests, gpu_zones
from tests.scheduler.sched_helpers import add_cnr, add_node, add_pod, cnr, node, pod

POLICIES = ("katalyst", "binpack", "spread", "fgd")


def cluster_with(nodes: dict[str, list[int]], **zone_args: Any) -> MemoryCluster:
    c = MemoryCluster()
    for name, per_numa in nodes.items():
        add_node(c, node(name, cpu="64", memory="256Gi"))
        add_cnr(c, cnr(name, zones=gpu_zones(per_numa, prefix=name, **zone_args)))
    return c


def run(c: MemoryCluster, policy: str, pods: list[dict[str, Any]]) -> Scheduler:
    s = Scheduler(c, gpu_config([policy]))
    for p in pods:
        p["spec"]["schedulerName"] = f"gpu-{policy}"
        add_pod(c, p)
    s.run_until_idle(0.0)
    return s


def selection(c: MemoryCluster, name: str) -> tuple[str, tuple[str, ...]]:
    raw = c.get(names.POD, name, "default")
    ann = raw["metadata"].get("annotations") or {}
    return raw["spec"].get("nodeName", ""), parse_selection(
        ann.get(names.GPU_SELECTION_RESULT_ANNOTATION, "")
    )


def test_two_share_pods_pack_on_one_card_under_katalyst_and_spread_under_spread() -> None:
    for policy, same in (("katalyst", True), ("binpack", True), ("spread", False)):
        c = cluster_with({"n1": [2]})
        run(c, policy, [pod(f"p{i}", gpu_requests(1, 30)) for i in range(2)])
        (n0, c0), (n1, c1) = selection(c, "p0"), selection(c, "p1")
        assert n0 == n1 == "n1"
        assert len(c0) == len(c1) == 1
        assert (c0 == c1) is same, policy


def test_selection_travels_with_the_binding_and_no_pod_patch_is_needed() -> None:
    """The scheduler's RBAC has no `patch` on pods: the cards chosen go in the Binding's
    annotations, which the API server writes onto the pod with spec.nodeName."""
    c = cluster_with({"n1": [1]})
    seen: list[tuple[str, bool]] = []
    real_bind = c.bind

    def bind(namespace: str, name: str, node_name: str, annotations: Any = None) -> None:
        seen.append(("bind", names.GPU_SELECTION_RESULT_ANNOTATION in (annotations or {})))
        real_bind(namespace, name, node_name, annotations)

    def patch(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the scheduler patched a pod")

    c.bind = bind  # type: ignore[method-assign]
    c.patch = patch  # type: ignore[method-assign]
    run(c, "katalyst", [pod("p", gpu_requests(1, 50))])
    assert seen == [("bind", True)]
    raw = c.get(names.POD, "p", "default")
    why = raw["metadata"]["annotations"][names.GPU_SELECTION_REASON_ANNOTATION]
    assert "n1-0" in why and "policy katalyst" in why


def test_multi_card_share_pod_gets_n_cards_with_m_over_n_each() -> None:
    c = cluster_with({"n1": [2, 2]})
    run(c, "katalyst", [pod("p", gpu_requests(2, 120))])
    node_name, cards = selection(c, "p")
    assert node_name == "n1" and len(cards) == 2 and len(set(cards)) == 2
    # Katalyst's NUMA affinity: both cards on one NUMA node when one holds them
    assert {cards[0], cards[1]} in ({"n1-0", "n1-1"}, {"n1-2", "n1-3"})


def test_no_card_is_overcommitted_and_the_pod_that_does_not_fit_stays_pending() -> None:
    c = cluster_with({"n1": [1]})
    s = run(c, "katalyst", [pod(f"p{i}", gpu_requests(1, 40)) for i in range(3)])
    bound = [selection(c, f"p{i}")[0] for i in range(3)]
    assert sorted(bound) == ["", "n1", "n1"]
    pending = next(f"p{i}" for i in range(3) if not bound[i])
    cond = c.get(names.POD, pending, "default")["status"]["conditions"][0]
    assert "too few GPU cards with enough memory free" in cond["message"]
    assert s.snapshot.gpu_used[0, 0] == 80_000


def test_cnr_allocations_and_unhealthy_cards_are_respected() -> None:
    c = MemoryCluster()
    add_node(c, node("n1", cpu="64", memory="256Gi"))
    zones = gpu_zones(
        [3], prefix="n1", unhealthy=["n1-0"], allocations={"n1-1": [("default/x/uid-x", 90)]}
    )
    add_cnr(c, cnr("n1", zones=zones))
    run(c, "spread", [pod("p", gpu_requests(1, 20))])
    assert selection(c, "p") == ("n1", ("n1-2",))


@pytest.mark.parametrize(
    ("requests", "reason"),
    [
        (gpu_requests(1, 150), "the largest healthy card has 100"),
        (gpu_requests("500m", 50), "must be a whole number"),
        ({names.RESOURCE_GPU_MEMORY: "50"}, "asks for memory on no card"),
        (gpu_requests(9, 90), "no node has more than 2"),
    ],
)
def test_requests_no_node_can_honour_stay_pending_with_the_reason(
    requests: dict[str, str], reason: str
) -> None:
    c = cluster_with({"n1": [2]})
    run(c, "katalyst", [pod("p", requests)])
    raw = c.get(names.POD, "p", "default")
    assert not raw["spec"].get("nodeName")
    assert reason in raw["status"]["conditions"][0]["message"]


def test_an_init_container_asking_for_gpu_memory_stays_pending_naming_it() -> None:
    c = cluster_with({"n1": [2]})
    p = pod("p", gpu_requests(1, 50))
    ask = gpu_requests(1, 50)
    init = {"name": "warm", "image": "x", "resources": {"requests": ask, "limits": ask}}
    p["spec"]["initContainers"] = [init]
    run(c, "katalyst", [p, pod("q", gpu_requests(1, 50))])
    raw = c.get(names.POD, "p", "default")
    assert not raw["spec"].get("nodeName")
    message = raw["status"]["conditions"][0]["message"]
    assert "spec.initContainers[0].resources" in message and "init container" in message
    assert selection(c, "q")[0] == "n1"  # the pod beside it is placed as usual


def test_unknown_model_stays_pending_and_a_known_one_lands_on_its_cards() -> None:
    c = MemoryCluster()
    label = "nvidia.com/gpu.product"
    for name, model in (("a", "A100"), ("t", "T4")):
        add_node(c, node(name, cpu="64", memory="256Gi", labels={label: model}))
        add_cnr(c, cnr(name, zones=gpu_zones([1], prefix=name, model=model)))
    run(
        c,
        "katalyst",
        [
            pod("h100", gpu_requests(1, 50), node_selector={label: "H100"}),
            pod("t4", gpu_requests(1, 50), affinity=_model_affinity(label, ["T4", "V100"])),
        ],
    )
    msg = c.get(names.POD, "h100", "default")["status"]["conditions"][0]["message"]
    assert "no GPU card is of model H100" in msg and "A100, T4" in msg
    assert selection(c, "t4") == ("t", ("t-0",))


def _model_affinity(label: str, values: list[str]) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": label, "operator": "In", "values": values}]}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }


def test_numa_bound_pod_gets_cards_of_one_numa_node() -> None:
    busy = {"n1-0": [("default/x/ux", 90)], "n1-2": [("default/y/uy", 90)]}
    qos = {names.QOS_LEVEL_ANNOTATION: "dedicated_cores"}
    enh = {names.MEMORY_ENHANCEMENT_ANNOTATION: json.dumps({"numa_binding": "true"})}
    c = cluster_with({"n1": [2, 2]}, allocations=busy)
    run(c, "katalyst", [pod("bound", gpu_requests(2, 100, cpu="2"), annotations={**qos, **enh})])
    raw = c.get(names.POD, "bound", "default")
    # one free card on each NUMA node: no NUMA node holds both
    assert not raw["spec"].get("nodeName")
    assert "in one NUMA node" in raw["status"]["conditions"][0]["message"]
    c = cluster_with({"n1": [2, 2]}, allocations=busy)
    run(c, "katalyst", [pod("free", gpu_requests(2, 100, cpu="2"))])
    assert selection(c, "free") == ("n1", ("n1-1", "n1-3"))
    # more cards than a NUMA node has: one socket (Katalyst's minimal NUMA count)
    c = cluster_with({"n1": [1, 1, 2]})
    run(c, "katalyst", [pod("wide", gpu_requests(2, 100, cpu="2"), annotations={**qos, **enh})])
    assert set(selection(c, "wide")[1]) in ({"n1-0", "n1-1"}, {"n1-2", "n1-3"})


def test_whole_card_pod_takes_an_idle_card_and_blocks_it() -> None:
    c = cluster_with({"n1": [2]})
    run(c, "katalyst", [pod("share", gpu_requests(1, 10)), pod("whole", gpu_requests(1))])
    (_, share), (_, whole) = selection(c, "share"), selection(c, "whole")
    assert share and whole and share != whole
    run(c, "katalyst", [pod("more", gpu_requests(1, 95))])
    assert selection(c, "more")[0] == ""


def test_cards_stay_counted_after_a_restart_from_the_selection_annotation() -> None:
    c = cluster_with({"n1": [1]})
    run(c, "katalyst", [pod("a", gpu_requests(1, 60))])
    # a new scheduler (the CNR does not list the pod yet) reads the annotation back
    run(c, "katalyst", [pod("b", gpu_requests(1, 60))])
    assert selection(c, "b")[0] == ""


# --- framework level: property tests ----------------------------------------------------


def _snapshot(cards: list[list[int]]) -> NodeSnapshot:
    snap = NodeSnapshot()
    for i, per_numa in enumerate(cards):
        name = f"n{i}"
        snap.upsert_node(node(name, cpu="256", memory="1Ti"))
        snap.upsert_cnr(cnr(name, zones=gpu_zones(per_numa, prefix=name)))
    return snap


@settings(max_examples=40, deadline=None)
@given(
    policy=st.sampled_from(POLICIES),
    layout=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=3), min_size=1, max_size=4),
    asks=st.lists(
        st.tuples(st.integers(1, 3), st.integers(1, 300), st.booleans()), min_size=1, max_size=25
    ),
    release=st.lists(st.integers(0, 24), max_size=8),
)
def test_no_card_is_overcommitted_across_reserve_and_unreserve(
    policy: str,
    layout: list[list[int]],
    asks: list[tuple[int, int, bool]],
    release: list[int],
) -> None:
    snap = _snapshot(layout)
    fw = Framework(gpu_config([policy]).profiles[0], 100, 1)
    placed: dict[str, Any] = {}
    for i, (cards, memory, whole) in enumerate(asks):
        raw = pod(f"p{i}", gpu_requests(cards, None if whole else memory), uid=f"u{i}")
        info = pod_info(raw)
        result = fw.schedule(info, snap)
        if result.node is None or fw.reserve(info, result, snap):
            continue
        snap.assume(info, result.node, result.numa, result.gpu)
        if not snap.gpu_card_ids(result.node):
            # whole cards on a node that reports none: its own device plugin picks them
            assert whole and result.gpu is None
            continue
        assert result.gpu is not None and len(set(result.gpu.ids)) == cards
        placed[info.uid] = (info, result)
        if i in release:  # unreserve half the time: the cards come back
            fw.unreserve(info, result, snap)
            snap.forget_pod(info.uid)
            del placed[info.uid]
        _check_accounting(snap, placed)


def _check_accounting(snap: NodeSnapshot, placed: dict[str, Any]) -> None:
    expect: dict[tuple[str, str], int] = {}
    for info, result in placed.values():
        for cid in result.gpu.ids:
            key = (result.node, cid)
            share = 100_000 if info.gpu.whole else info.gpu.share
            expect[key] = expect.get(key, 0) + share
    for name, slot in snap.index.items():
        ids = snap.gpu_card_ids(name)
        for k, cid in enumerate(ids):
            used = int(snap.gpu_used[k, slot])
            assert used == expect.get((name, cid), 0)
            assert used <= int(snap.gpu_cap[k, slot])


@settings(max_examples=30, deadline=None)
@given(
    layout=st.lists(st.integers(1, 4), min_size=2, max_size=4),
    asks=st.lists(st.tuples(st.integers(1, 2), st.integers(10, 200)), min_size=1, max_size=12),
    policy=st.sampled_from(POLICIES),
)
def test_a_numa_bound_pods_cards_sit_in_one_numa_node(
    layout: list[int], asks: list[tuple[int, int]], policy: str
) -> None:
    snap = _snapshot([layout])
    fw = Framework(gpu_config([policy]).profiles[0], 100, 0)
    ann = {
        names.QOS_LEVEL_ANNOTATION: "dedicated_cores",
        names.MEMORY_ENHANCEMENT_ANNOTATION: json.dumps({"numa_binding": "true"}),
    }
    numa_of = {
        f"n0-{i}": n for i, n in enumerate(c for c, k in enumerate(layout) for _ in range(k))
    }
    for i, (cards, memory) in enumerate(asks):
        info = pod_info(pod(f"p{i}", gpu_requests(cards, memory), annotations=ann, uid=f"u{i}"))
        result = fw.schedule(info, snap)
        if result.node is None or fw.reserve(info, result, snap):
            continue
        snap.assume(info, result.node, result.numa, result.gpu)
        assert result.gpu is not None
        numas = {numa_of[c] for c in result.gpu.ids}
        if cards <= max(layout):
            assert len(numas) == 1


# --- extender -------------------------------------------------------------------------


def test_extender_filters_per_card_and_writes_the_selection_at_bind() -> None:
    c = cluster_with({"n1": [1], "n2": [1]}, units=100)
    s = Scheduler(c, gpu_config(["katalyst"]))
    add_pod(
        c,
        pod(
            "busy",
            gpu_requests(1, 80),
            node_name="n1",
            uid="u-busy",
            annotations={names.GPU_SELECTION_RESULT_ANNOTATION: "n1-0"},
        ),
    )
    uid_p = add_pod(c, pod("p", gpu_requests(1, 50)))["metadata"]["uid"]
    ext = ExtenderService(s, "gpu-katalyst")
    out = ext.filter(
        {"Pod": {"metadata": {"name": "p", "namespace": "default"}}, "NodeNames": ["n1", "n2"]}, 0.0
    )
    assert out["NodeNames"] == ["n2"]
    assert "too few GPU cards" in out["FailedNodes"]["n1"]
    assert ext.bind(
        {"PodName": "p", "PodNamespace": "default", "PodUID": uid_p, "Node": "n2"}, 0.0
    ) == {"Error": ""}
    assert selection(c, "p") == ("n2", ("n2-0",))
    # the card is now held: a second pod is refused on it at bind time
    uid_q = add_pod(c, pod("q", gpu_requests(1, 60)))["metadata"]["uid"]
    refused = ext.bind(
        {"PodName": "q", "PodNamespace": "default", "PodUID": uid_q, "Node": "n2"}, 0.0
    )
    assert "too few GPU cards" in refused["Error"]


def test_explain_pod_says_which_cards_and_why(capsys: pytest.CaptureFixture[str]) -> None:
    c = cluster_with({"n1": [2]}, allocations={"n1-1": [("default/x/ux", 60)]})
    run(c, "katalyst", [pod("p", gpu_requests(1, 30))])
    report = explain_pod(c, "default", "p", 0.0)
    gpu = report["gpu"]
    assert gpu["selection"] == ["n1-1"]  # best fit: the card with 40 free, not the idle one
    assert "policy katalyst" in gpu["why"] and "n1-1 (40 of 100 units free)" in gpu["why"]
    assert gpu["cards"][0]["numa"] == "0" and not gpu["cards"][0]["reports_this_pod"]
    assert gpu["memory_units_asked"] == 30 and gpu["cards_asked"] == 1
    print_pod(report)
    shown = capsys.readouterr().out
    assert "why these cards" in shown and "n1-1" in shown


def test_a_card_turned_unhealthy_takes_no_new_pod() -> None:
    c = cluster_with({"n1": [2]})
    s = run(c, "spread", [pod("first", gpu_requests(1, 10))])
    first = selection(c, "first")[1][0]
    other = "n1-1" if first == "n1-0" else "n1-0"
    raw = c.get(names.CUSTOM_NODE_RESOURCE, "n1")
    raw["status"]["topologyZone"] = gpu_zones([2], prefix="n1", unhealthy=[other])
    c.update_status(names.CUSTOM_NODE_RESOURCE, raw)
    for i in range(3):
        add_pod(c, pod(f"later{i}", gpu_requests(1, 30), scheduler="gpu-spread"))
    s.run_until_idle(1.0)
    placed = [selection(c, f"later{i}") for i in range(3)]
    assert [p[1] for p in placed] == [(first,)] * 3  # 10 + 3 x 30 units on the healthy card


def test_the_example_gpu_profiles_load_and_place() -> None:
    root = Path(__file__).resolve().parents[2]
    cfg = load_config(root / "examples" / "scheduler" / "katalyst-scheduler-gpu.yaml")
    c = cluster_with({"n1": [2]})
    s = Scheduler(c, cfg)
    profiles = ("katalyst-scheduler", "katalyst-gpu-fgd", "katalyst-gpu-spread")
    for name in profiles:
        add_pod(c, pod(name, gpu_requests(1, 20), scheduler=name))
    s.run_until_idle(0.0)
    cards = [selection(c, n) for n in profiles]
    assert all(node_name == "n1" and len(ids) == 1 for node_name, ids in cards)
