"""GPUs and an RDMA VF placed together, through the real scheduler over MemoryCluster: a
pod asking `nvidia.com/gpu` (whole cards or gpu_memory shares) and `sriov_nic: 1` gets
cards and VF under one PCIe switch when a node has such a pair, else in one NUMA node,
else as its affinity allows; required affinities that no node meets stay Pending with
kube-scheduler's summary; Koordinator's joint-allocation annotation is read as an alias;
the pair lands in gpu_selection_result and sriov_vf_result; nothing is given twice."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cli.explain_pod import explain_pod
from pykatalyst.cli.explain_render import print_pod
from pykatalyst.scheduler.config import load_config_text
from pykatalyst.scheduler.scheduler import Scheduler
from tests.scheduler.joint_helpers import (
    GPU,
    MEM,
    PROFILE,
    SRIOV,
    Slot,
    card_numa,
    card_switches,
    node_zones,
    symmetric,
    vf_switches,
)
from tests.scheduler.sched_helpers import add_cnr, add_node, add_pod, cnr, node, pod

AFF = names.GPU_RDMA_AFFINITY_ANNOTATION
KOORD = names.KOORDINATOR_JOINT_ALLOCATE_ANNOTATION


def cluster(nodes: dict[str, list[Slot]]) -> MemoryCluster:
    c = MemoryCluster()
    for name, slots in nodes.items():
        add_node(c, node(name, cpu="128", memory="512Gi"))
        add_cnr(c, cnr(name, zones=node_zones(slots)))
    return c


def joint_pod(
    name: str, cards: int = 1, memory: int | None = None, ann: dict[str, str] | None = None
) -> dict[str, Any]:
    req = {"cpu": "1", "memory": "1Gi", GPU: str(cards), SRIOV: "1"}
    if memory is not None:
        req[MEM] = str(memory)
    return pod(name, req, scheduler="joint", annotations=ann)


def run(c: MemoryCluster, pods: list[dict[str, Any]], profile: str = PROFILE) -> None:
    s = Scheduler(c, load_config_text(profile))
    for p in pods:
        add_pod(c, p)
    s.run_until_idle(0.0)


def placed(c: MemoryCluster, name: str) -> tuple[str, list[str], str, dict[str, str]]:
    raw = c.get(names.POD, name, "default")
    ann = raw["metadata"].get("annotations") or {}
    cards = [x for x in ann.get(names.GPU_SELECTION_RESULT_ANNOTATION, "").split(",") if x]
    vf = ann.get(names.SRIOV_VF_RESULT_ANNOTATION, "")
    return raw["spec"].get("nodeName", ""), cards, vf, ann


def pending_message(c: MemoryCluster, name: str) -> str:
    raw = c.get(names.POD, name, "default")
    assert not raw["spec"].get("nodeName")
    return str(raw["status"]["conditions"][0]["message"])


def test_whole_cards_and_a_vf_share_one_switch_and_the_reasons_say_which() -> None:
    slots = symmetric()
    c = cluster({"n1": slots})
    run(c, [joint_pod("p", cards=2)])
    where, cards, vf, ann = placed(c, "p")
    sw = card_switches(slots)
    assert where == "n1" and len(cards) == 2 and vf
    assert {sw[x] for x in cards} == {vf_switches(slots)[vf]}
    assert vf_switches(slots)[vf] in ann[names.GPU_SELECTION_REASON_ANNOTATION]
    assert "under PCIe switch" in ann[names.SRIOV_VF_REASON_ANNOTATION]


def test_share_pods_pair_too_and_a_switch_without_a_nic_is_passed_over() -> None:
    # the first switch has cards but no NIC: the share goes under a switch that has one
    slots = [Slot(0, 2, 0), Slot(0, 2, 4), Slot(1, 2, 4)]
    c = cluster({"n1": slots})
    run(c, [joint_pod("s", cards=1, memory=30)])
    _, cards, vf, _ = placed(c, "s")
    assert card_switches(slots)[cards[0]] == vf_switches(slots)[vf]


def test_the_node_with_a_switch_pair_wins_over_one_with_only_numa_pairs() -> None:
    # n1: NICs only under switches without cards; n2: a card and a NIC under one switch
    far = [Slot(0, 2, 0), Slot(0, 0, 4), Slot(1, 2, 0), Slot(1, 0, 4)]
    near = [Slot(0, 2, 0), Slot(0, 1, 4), Slot(1, 2, 0), Slot(1, 0, 0)]
    c = cluster({"n1": far, "n2": near})
    run(c, [joint_pod("p")])
    where, cards, vf, _ = placed(c, "p")
    assert where == "n2"
    assert card_switches(near)[cards[0]] == vf_switches(near)[vf]


def test_without_a_switch_pair_the_numa_node_is_next_then_the_node() -> None:
    slots = [Slot(0, 2, 0), Slot(0, 0, 4), Slot(1, 2, 0)]
    c = cluster({"n1": slots})
    run(c, [joint_pod("numa", cards=2)])
    run(c, [joint_pod("node", cards=2)])
    _, cards, vf, ann = placed(c, "numa")
    assert {card_numa(slots)[x] for x in cards} == {0}
    assert "in NUMA node 0" in ann[names.SRIOV_VF_REASON_ANNOTATION]
    _, cards, vf, ann = placed(c, "node")
    assert {card_numa(slots)[x] for x in cards} == {1} and vf
    assert "no closer pair free" in ann[names.SRIOV_VF_REASON_ANNOTATION]


def test_required_switch_pairing_no_node_has_stays_pending_with_the_summary() -> None:
    far = [Slot(0, 2, 0), Slot(0, 0, 4)]
    c = cluster({"n1": far, "n2": far})
    run(
        c,
        [
            joint_pod("ours", ann={AFF: "pcie_switch"}),
            joint_pod(
                "koord", ann={KOORD: '{"deviceTypes":["gpu","rdma"],"requiredScope":"SamePCIe"}'}
            ),
            joint_pod("numa", ann={AFF: "numa"}),
        ],
    )
    for name in ("ours", "koord"):
        msg = pending_message(c, name)
        assert msg.startswith("0/2 nodes are available:")
        assert "2 node(s) had no free GPU cards and RDMA VF under one PCIe switch" in msg
    assert placed(c, "numa")[0] in ("n1", "n2")  # the NUMA node is enough for it


def test_required_numa_pairing_refuses_cards_across_numa_nodes() -> None:
    slots = [Slot(0, 0, 4), Slot(1, 2, 0)]
    c = cluster({"n1": slots})
    run(c, [joint_pod("p", ann={AFF: "numa"}), joint_pod("pref")])
    assert "1 node(s) had no free GPU cards and RDMA VF in one NUMA node" in pending_message(c, "p")
    assert placed(c, "pref")[0] == "n1"  # preferred: anywhere on the node


def test_koordinator_alias_without_scope_is_preferred_and_none_pairs_nothing() -> None:
    slots = [Slot(0, 2, 4), Slot(1, 2, 4)]
    c = cluster({"n1": slots})
    koord = json.dumps({"deviceTypes": ["gpu", "rdma"]})
    run(c, [joint_pod("k", cards=2, ann={KOORD: koord}), joint_pod("none", ann={AFF: "none"})])
    _, cards, vf, _ = placed(c, "k")
    assert {card_switches(slots)[x] for x in cards} == {vf_switches(slots)[vf]}
    _, cards, vf, ann = placed(c, "none")
    assert "Katalyst's order" in ann[names.SRIOV_VF_REASON_ANNOTATION]


def test_bad_annotations_stay_pending_naming_the_annotation_and_what_is_accepted() -> None:
    c = cluster({"n1": symmetric(1, 2)})
    bad = {
        "word": {AFF: "always"},
        "types": {KOORD: '{"deviceTypes":["gpu","fpga"]}'},
        "scope": {KOORD: '{"deviceTypes":["gpu","rdma"],"requiredScope":"SameNUMA"}'},
        "json": {KOORD: "{gpu"},
    }
    run(c, [joint_pod(k, ann=v) for k, v in bad.items()])
    assert AFF in pending_message(c, "word") and "pcie_switch, numa" in pending_message(c, "word")
    for k in ("types", "scope", "json"):
        msg = pending_message(c, k)
        assert KOORD in msg and "accepted" in msg
    # nothing was handed out to any of them
    for k in bad:
        assert placed(c, k)[1:3] == ([], "")


@settings(max_examples=20, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from([1, 1, 2, 4]), st.sampled_from([None, 25, 50, 100])),
        min_size=1,
        max_size=14,
    ),
    st.lists(st.integers(0, 3), min_size=8, max_size=8),
)
def test_a_filled_box_never_gives_a_card_or_vf_twice_and_pairs_on_a_switch_when_it_can(
    asks: list[tuple[int, int | None]], vfs: list[int]
) -> None:
    """2 sockets x 4 switches x 2 cards, NICs with 0..3 VFs: pods one at a time; each gets
    a same-switch pair whenever the cards and VFs left allowed one."""
    slots = [Slot(i // 4, 2, vfs[i]) for i in range(8)]
    sw, vsw = card_switches(slots), vf_switches(slots)
    c = cluster({"n1": slots})
    s = Scheduler(c, load_config_text(PROFILE))
    used: dict[str, int] = {}
    held: set[str] = set()
    for i, (cards, memory) in enumerate(asks):
        per_card = 100 if memory is None else memory
        free_sw = {v2 for v, v2 in vsw.items() if v not in held}
        could = any(
            sum(1 for x, s2 in sw.items() if s2 == w and used.get(x, 0) + per_card <= 100)
            >= min(cards, 2)
            for w in free_sw
        )
        add_pod(c, joint_pod(f"p{i}", cards=cards, memory=memory * cards if memory else None))
        s.run_until_idle(0.0)
        where, got, vf, _ = placed(c, f"p{i}")
        if not where:
            continue
        assert vf not in held and len(set(got)) == cards
        held.add(vf)
        for x in got:
            used[x] = used.get(x, 0) + per_card
            assert used[x] <= 100
        if could:
            on = sum(1 for x in got if sw[x] == vsw[vf])
            assert on == min(cards, 2), (got, vf)


def test_the_examples_pair_cards_and_vf_under_one_switch() -> None:
    """examples/agent/synthetic-gpu-rdma.yaml through the agent's zone writers, placed by
    examples/scheduler/katalyst-scheduler-gpu-rdma.yaml."""
    from pathlib import Path

    from pykatalyst.agent import gpu as agent_gpu
    from pykatalyst.agent import nic as agent_nic
    from pykatalyst.agent.config import load_config
    from pykatalyst.agent.config_sections import NicsConfig
    from pykatalyst.topology.machine import CPUTopology

    root = Path(__file__).resolve().parents[2] / "examples"
    devices = load_config(root / "agent" / "synthetic-gpu-rdma.yaml").devices
    topo = CPUTopology.synthetic(2, 4, 2)
    cards = agent_gpu.synthetic_cards(devices.gpus)
    per_numa = agent_gpu.gpu_zones(cards, [], 100, topo, lambda _: None)
    nics = agent_nic.synthetic_nics(devices.nic.interfaces)
    per_socket = agent_nic.nic_zones(agent_nic.capacities(nics, NicsConfig()), (), topo)
    res = {"cpu": "32", "memory": "128Gi"}
    zones = [
        {
            "type": names.ZONE_SOCKET,
            "name": str(s),
            "children": [
                {
                    "type": names.ZONE_NUMA,
                    "name": str(s),
                    "resources": {"allocatable": res, "capacity": res},
                    "children": per_numa.get(s, []),
                },
                *per_socket.get(s, []),
            ],
        }
        for s in (0, 1)
    ]
    c = MemoryCluster()
    add_node(c, node("gpu-1", cpu="64", memory="256Gi"))
    add_cnr(c, cnr("gpu-1", zones=zones))
    switch = {g.id: g.pcie_switch for g in devices.gpus}
    vf_switch = {f"{i.name}_{j}": i.pcie_switch for i in devices.nic.interfaces for j in range(8)}
    pods = [
        pod("two", {GPU: "2", SRIOV: "1", "cpu": "1"}, scheduler="katalyst-scheduler"),
        pod("share", {GPU: "1", MEM: "30", SRIOV: "1", "cpu": "1"}, scheduler="katalyst-scheduler"),
    ]
    run(c, pods, (root / "scheduler" / "katalyst-scheduler-gpu-rdma.yaml").read_text())
    for name in ("two", "share"):
        where, got, vf, _ = placed(c, name)
        assert where == "gpu-1" and {switch[x] for x in got} == {vf_switch[vf]}, name


def test_explain_pod_shows_the_pair_and_the_switch(capsys: pytest.CaptureFixture[str]) -> None:
    slots = symmetric(1, 2)
    c = cluster({"n1": slots})
    run(c, [joint_pod("p", cards=2, ann={AFF: "pcie_switch"})])
    report = explain_pod(c, "default", "p", 0.0)
    pair = report["pairing"]
    _, cards, vf, _ = placed(c, "p")
    assert pair["vf"] == vf and pair["vf_pcie_switch"] == vf_switches(slots)[vf]
    assert pair["cards_under_vf_switch"] == 2 and pair["closest"] == "pcie_switch"
    assert pair["asked"] == f"pcie_switch ({AFF})"
    assert [x["id"] for x in pair["cards"]] == cards
    print_pod(report)
    shown = capsys.readouterr().out
    assert "GPU-VF pairing" in shown and vf_switches(slots)[vf] in shown
