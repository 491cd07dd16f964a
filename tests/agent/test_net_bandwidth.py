"""NIC bandwidth enforced: each pod with a net_bandwidth request on the shaped device gets
an egress class guaranteed its request; reclaimed traffic is capped to what is left."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pykatalyst.agent.config import NetworkConfig
from pykatalyst.agent.host.base import Knob, NetMatch
from pykatalyst.agent.host.netshape import NetShaper, tc_handle
from pykatalyst.agent.net_policy import MBIT, MIN_RATE_BPS, NetPod, bandwidth, decide
from pykatalyst.api import names
from tests.agent.test_host_netshape import Recorder, tools
from tests.agent.test_net_policy import Node

ON = {"enabled": True, "device": "eth0", "link_mbit": 1000}
SHARED, RECLAIMED = names.QOS_SHARED_CORES, names.QOS_RECLAIMED_CORES


def net(**kw: Any) -> NetworkConfig:
    return NetworkConfig.model_validate({**ON, **kw})


def bw_pod(key: str, mbps: int, nic: str = "eth0", level: str = SHARED) -> NetPod:
    return NetPod(key, level, (f"kubepods/pod-{key.replace('/', '-')}",), (), mbps, nic)


def by_level(plan: Any) -> dict[str, Any]:
    return {c.level: c for c in plan.shape.classes}


def test_a_bandwidth_pod_is_guaranteed_its_request_and_may_borrow_the_line_rate() -> None:
    plan = decide(net(), [bw_pod("default/db", 300)], 2)
    c = by_level(plan)["default/db"]
    assert (c.rate_bps, c.ceil_bps) == (300 * MBIT, 1000 * MBIT)
    assert NetMatch(c.classid, "kubepods/pod-default-db") in plan.shape.matches
    # the levels share what is left; reclaimed traffic borrows no further than that
    left = 940 * MBIT - 300 * MBIT
    assert by_level(plan)[SHARED].rate_bps == int(left * 0.5)
    assert by_level(plan)[RECLAIMED].ceil_bps == left
    why = plan.terms["bandwidth"]["pods"]["default/db"]["reason"]
    assert why == "guaranteed its request, 300 Mbps, on eth0"


def test_on_cgroup_v1_the_pods_cgroups_carry_its_own_class_id() -> None:
    plan = decide(net(), [bw_pod("default/db", 100)], 1)
    classid = by_level(plan)["default/db"].classid
    assert plan.knobs["kubepods/pod-default-db"] == {Knob.NET_CLS_CLASSID: classid}
    assert NetMatch(classid) in plan.shape.matches


def test_a_pod_on_another_nic_stays_in_its_levels_class_and_is_told_why() -> None:
    plan = decide(net(), [bw_pod("default/db", 300, nic="eth1")], 1)
    assert "default/db" not in by_level(plan)
    assert plan.knobs["kubepods/pod-default-db"] == {Knob.NET_CLS_CLASSID: 0x10030}
    why = plan.terms["bandwidth"]["not_shaped"]["default/db"]
    assert why == "holds NIC eth1; this agent shapes eth0: it stays in its level's class"
    assert by_level(plan)[RECLAIMED].ceil_bps == 940 * MBIT  # nothing held here


def test_requests_beyond_the_capacity_are_scaled_down_and_said_so() -> None:
    plan = decide(net(), [bw_pod("a/x", 600), bw_pod("a/y", 600)], 2)
    x, y = by_level(plan)["a/x"], by_level(plan)["a/y"]
    assert x.rate_bps == y.rate_bps < 600 * MBIT
    assert x.rate_bps + y.rate_bps <= 940 * MBIT - 4 * MIN_RATE_BPS
    assert "more than" in plan.terms["bandwidth"]["pods"]["a/x"]["reason"]
    # reclaimed traffic keeps its floor: 1 % of the capacity
    assert by_level(plan)[RECLAIMED].ceil_bps == int(940 * MBIT * 0.01)


def test_bandwidth_classes_can_be_turned_off() -> None:
    plan = decide(net(bandwidth_classes=False), [bw_pod("default/db", 300)], 2)
    assert "default/db" not in by_level(plan)
    assert "bandwidth_classes is off" in plan.terms["bandwidth"]["not_shaped"]["default/db"]


def test_a_pod_keeps_its_class_id_while_others_come_and_go() -> None:
    one = bandwidth(net(), [bw_pod("a/x", 10)]).pods[0].classid
    more = bandwidth(net(), [bw_pod(f"a/p{i}", 10) for i in range(50)] + [bw_pod("a/x", 10)])
    assert {c.key: c.classid for c in more.pods}["a/x"] == one


_pods = st.lists(
    st.tuples(
        st.integers(1, 5_000),
        st.sampled_from(["eth0", "eth0", "eth1", ""]),
        st.sampled_from([SHARED, RECLAIMED, names.QOS_DEDICATED_CORES]),
    ),
    max_size=12,
)


@given(
    pods=_pods,
    link=st.integers(1, 20_000),
    floor=st.floats(0, 1, allow_nan=False),
    version=st.sampled_from([1, 2]),
)
def test_guarantees_fit_the_capacity_and_reclaimed_gets_what_is_left(
    pods: list[tuple[int, str, str]], link: int, floor: float, version: int
) -> None:
    cfg = net(link_mbit=link, reclaimed_floor_ratio=floor)
    given_pods = [bw_pod(f"ns/p{i}", m, nic, lv) for i, (m, nic, lv) in enumerate(pods)]
    plan = decide(cfg, given_pods, version)
    cap = plan.shape.capacity_bps
    classes = plan.shape.classes
    own = {c.level: c for c in classes if "/" in c.level}
    on_device = [p for p in given_pods if p.nic == "eth0"]
    assert set(own) == {p.key for p in on_device}
    # what the device guarantees fits its capacity (HTB's token rate for a zero share aside)
    assert (
        sum(c.rate_bps for c in own.values())
        <= max(cap - 4 * MIN_RATE_BPS, 0) + len(own) * MIN_RATE_BPS
    )
    assert sum(c.rate_bps for c in classes) <= cap + len(classes) * MIN_RATE_BPS
    requested = sum(p.bandwidth_mbps for p in on_device) * MBIT
    if requested <= cap - 4 * MIN_RATE_BPS:  # the device can honour every request
        for p in on_device:
            assert own[p.key].rate_bps == p.bandwidth_mbps * MBIT
    for c in own.values():
        assert c.rate_bps <= c.ceil_bps
    reclaimed = by_level(plan)[RECLAIMED]
    held = sum(c.rate_bps for c in own.values())
    wanted = max(cap - held, int(cap * floor), MIN_RATE_BPS)
    assert reclaimed.ceil_bps == min(wanted, cap)
    assert len({c.classid for c in classes}) == len(classes)
    assert {m.classid for m in plan.shape.matches} <= {c.classid for c in classes}


def test_the_shaper_deletes_the_class_of_a_pod_that_left() -> None:
    run = Recorder()
    shaper = NetShaper(run, which=tools)
    two = decide(net(), [bw_pod("a/x", 10), bw_pod("a/y", 20)], 2).shape
    one = decide(net(), [bw_pod("a/x", 10)], 2).shape
    assert two is not None and one is not None
    assert shaper.apply(two).ok
    gone = next(c for c in two.classes if c.level == "a/y")
    run.calls.clear()
    result = shaper.apply(one)
    assert result.ok
    assert f"tc class del dev eth0 classid {tc_handle(gone.classid)}" in result.commands
    assert result.commands[-1].startswith("tc class del")  # after the rules moved


# -- the agent -----------------------------------------------------------------------------


def bw_pod_json(n: Node, name: str, mbps: int, nic: str) -> str:
    from tests.agent.inmemory_host import pod_json

    obj: dict[str, Any] = pod_json(
        name, cpu="1", annotations={names.NIC_SELECTION_RESULT_ANNOTATION: nic}
    )
    for c in obj["spec"]["containers"]:
        for part in ("requests", "limits"):
            c["resources"][part] = {**c["resources"][part], names.RESOURCE_NET_BANDWIDTH: str(mbps)}
    return n.pod_from(obj, "burstable")


def test_agent_gives_a_bandwidth_pod_its_class_and_says_so_in_an_event() -> None:
    n = Node(ON, version=2)
    n.pod("web", cpu="1")
    bw_pod_json(n, "db", 200, "eth0")
    bw_pod_json(n, "far", 50, "eth1")
    plan = n.agent.reconcile(n.clock.now())
    n.clock.advance(5)
    shape = n.host.net_shapes[-1]
    assert shape is not None
    db = next(c for c in shape.classes if c.level == "default/db")
    assert db.rate_bps == 200 * MBIT
    events = {(e.reason, e.object_key): e for e in plan.events}
    ev = events[(names.EVENT_REASON_NET_BANDWIDTH_GUARANTEED, "default/db")]
    assert ev.type == "Normal" and f"rate {200 * MBIT} bit/s" in ev.message
    far = events[(names.EVENT_REASON_NET_BANDWIDTH_NOT_SHAPED, "default/far")]
    assert "holds NIC eth1" in far.message
    n.tick()
    assert len(n.host.net_shapes) == 1


def test_katalyst_explain_shows_the_pods_egress_class_beside_its_nic(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from pykatalyst.cli.explain_pod import explain_pod
    from pykatalyst.cli.explain_render import print_pod

    n = Node(ON, version=2)
    bw_pod_json(n, "db", 200, "eth0")
    n.tick()
    report = explain_pod(n.cluster, "default", "db", n.clock.now())
    enforced = report["nic"]["enforced"]
    assert enforced["reason"] == names.EVENT_REASON_NET_BANDWIDTH_GUARANTEED
    assert "guaranteed its request, 200 Mbps, on eth0" in enforced["message"]
    print_pod(report)
    assert "egress class" in capsys.readouterr().out


def test_a_restarted_agent_deletes_the_class_of_a_pod_that_left_while_it_was_down() -> None:
    now = decide(net(), [bw_pod("a/x", 10)], 2).shape
    before = decide(net(), [bw_pod("a/x", 10), bw_pod("a/y", 20)], 2).shape
    assert now is not None and before is not None
    gone = tc_handle(next(c for c in before.classes if c.level == "a/y").classid)
    listing = (
        "\n".join(
            f"class htb {tc_handle(c.classid)} parent 1:1 leaf 8001: prio 1 rate 8Kbit"
            for c in before.classes
        )
        + "\nclass htb 1:1 root rate 940Mbit ceil 940Mbit\nclass htb 2:5 parent 2:1 rate 1Mbit"
    )

    class Lists(Recorder):
        def __call__(self, argv: Sequence[str], stdin: str | None) -> tuple[int, str]:
            super().__call__(argv, stdin)
            return (0, listing) if list(argv[:3]) == ["tc", "class", "show"] else (0, "")

    result = NetShaper(Lists(), which=tools).apply(now)
    assert result.ok
    deleted = [c for c in result.commands if c.startswith("tc class del")]
    assert deleted == [f"tc class del dev eth0 classid {gone}"]  # nothing of another root
