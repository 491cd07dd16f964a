"""Egress QoS by level: the config, the pure decision, and the agent applying it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pykatalyst.agent.agent import Agent
from pykatalyst.agent.config import ConfigError, NetworkConfig, parse_config
from pykatalyst.agent.enforcer import Enforcer
from pykatalyst.agent.host.base import Knob, NetMatch
from pykatalyst.agent.net_policy import MIN_RATE_BPS, NetPod, capacity_bps, decide
from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.topology.machine import CPUTopology
from tests.agent.inmemory_host import InMemoryHost, node_json, pod_json, reclaiming

ON = {"enabled": True, "device": "eth0", "link_mbit": 1000}
SHARED = NetPod("default/web", names.QOS_SHARED_CORES, ("kubepods/burstable/podw", "c/w"))
BATCH = NetPod("default/batch", names.QOS_RECLAIMED_CORES, ("kubepods/besteffort/podb", "c/b"))


def net(**kw: Any) -> NetworkConfig:
    return NetworkConfig.model_validate({**ON, **kw})


def test_off_by_default_shapes_nothing() -> None:
    plan = decide(NetworkConfig(), [SHARED, BATCH], 1)
    assert plan.shape is None and not plan.knobs


def test_capacity_is_the_line_rate_times_katalysts_egress_ratio() -> None:
    assert capacity_bps(net()) == 940_000_000
    plan = decide(net(), [], 2)
    assert plan.shape is not None and plan.shape.capacity_bps == 940_000_000


def test_v1_puts_each_levels_class_id_on_the_pod_and_its_containers() -> None:
    plan = decide(net(), [SHARED, BATCH], 1)
    assert plan.knobs == {
        "kubepods/burstable/podw": {Knob.NET_CLS_CLASSID: 0x10030},
        "c/w": {Knob.NET_CLS_CLASSID: 0x10030},
        "kubepods/besteffort/podb": {Knob.NET_CLS_CLASSID: 0x10040},
        "c/b": {Knob.NET_CLS_CLASSID: 0x10040},
    }
    assert plan.shape is not None
    assert {m.classid for m in plan.shape.matches} == {0x10010, 0x10020, 0x10030, 0x10040}
    assert all(m.cgroup is None for m in plan.shape.matches)


def test_v2_matches_each_pods_cgroup_and_writes_no_knob() -> None:
    plan = decide(net(), [SHARED, BATCH], 2)
    assert not plan.knobs
    assert plan.shape is not None
    assert set(plan.shape.matches) == {
        NetMatch(0x10030, "kubepods/burstable/podw"),
        NetMatch(0x10040, "kubepods/besteffort/podb"),
    }


def test_reclaimed_borrows_last_and_shared_is_guaranteed_more() -> None:
    plan = decide(net(), [], 2)
    assert plan.shape is not None
    by_level = {c.level: c for c in plan.shape.classes}
    reclaimed, shared = by_level[names.QOS_RECLAIMED_CORES], by_level[names.QOS_SHARED_CORES]
    assert reclaimed.prio > max(c.prio for c in plan.shape.classes if c is not reclaimed)
    assert shared.rate_bps > reclaimed.rate_bps
    assert plan.shape.default_classid == shared.classid


def test_a_config_may_set_one_field_of_one_level() -> None:
    cfg = net(levels={names.QOS_RECLAIMED_CORES: {"ceil_ratio": 0.2}})
    assert cfg.levels[names.QOS_RECLAIMED_CORES].ceil_ratio == 0.2
    assert cfg.levels[names.QOS_RECLAIMED_CORES].class_id == 0x10040
    assert set(cfg.levels) == set(NetworkConfig().levels)


@pytest.mark.parametrize(
    ("network", "field"),
    [
        ({"enabled": True}, "network.enabled needs device"),
        ({**ON, "levels": {"gold": {}}}, "unknown QoS level 'gold'"),
        ({**ON, "default_level": "gold"}, "default_level"),
        ({**ON, "levels": {"system_cores": {"class_id": 0x10030}}}, "class_id"),
        ({**ON, "levels": {"system_cores": {"class_id": 0x20010}}}, "class_id"),
        ({**ON, "levels": {"system_cores": {"class_id": 0x10001}}}, "class_id"),
        ({**ON, "levels": {"system_cores": {"rate_ratio": 0.5}}}, "rate_ratio add up"),
        ({**ON, "levels": {"shared_cores": {"ceil_ratio": 0.1}}}, "ceil_ratio 0.1 is below"),
        ({**ON, "egress_ratio": 0}, "egress_ratio"),
    ],
)
def test_bad_network_config_is_refused_naming_the_field(
    network: dict[str, Any], field: str
) -> None:
    with pytest.raises(ConfigError, match="network") as err:
        parse_config({"network": network})
    assert field in str(err.value)


_ratio = st.floats(0, 1, allow_nan=False)


@given(
    link=st.floats(1, 100_000, allow_nan=False),
    egress=st.floats(0.01, 1, allow_nan=False),
    rates=st.lists(_ratio, min_size=4, max_size=4),
    extra=st.lists(_ratio, min_size=4, max_size=4),
    prios=st.lists(st.integers(0, 7), min_size=4, max_size=4),
)
def test_classes_never_promise_more_than_the_capacity(
    link: float, egress: float, rates: list[float], extra: list[float], prios: list[int]
) -> None:
    total = sum(rates) or 1.0
    scale = min(1.0, 1.0 / total)
    levels = {
        level: {
            "rate_ratio": r * scale,
            "ceil_ratio": max(r * scale + (1 - r * scale) * e, 1e-6),
            "prio": p,
        }
        for level, r, e, p in zip(NetworkConfig().levels, rates, extra, prios, strict=True)
    }
    cfg = net(link_mbit=link, egress_ratio=egress, levels=levels)
    plan = decide(cfg, [SHARED, BATCH], 2)
    assert plan.shape is not None
    cap = plan.shape.capacity_bps
    classes = plan.shape.classes
    # what is guaranteed fits the link (HTB's token rate for a zero share aside)
    assert sum(c.rate_bps for c in classes) <= cap + len(classes) * MIN_RATE_BPS
    for c in classes:
        assert MIN_RATE_BPS <= c.rate_bps <= c.ceil_bps <= max(cap, MIN_RATE_BPS)
    assert [c.prio for c in classes] == sorted(c.prio for c in classes)
    assert {m.classid for m in plan.shape.matches} <= {c.classid for c in classes}


# -- the agent -----------------------------------------------------------------------------

TOPO = CPUTopology.synthetic(1, 4, 2)


class Node:
    def __init__(self, network: dict[str, Any], version: int = 1) -> None:
        self.clock = VirtualClock(1_000)
        self.cluster = MemoryCluster(clock=self.clock)
        self.cluster.create(names.NODE, node_json("node-1"))
        self.host = InMemoryHost(TOPO)
        self.host.cgroup_version = version
        self.agent = Agent(
            "node-1",
            self.cluster,
            self.host,
            self.clock,
            reclaiming({"network": network}),
            Enforcer(self.host, None, self.clock),
        )

    def pod(self, name: str, **kw: Any) -> str:
        return self.pod_from(pod_json(name, **kw), "besteffort" if "level" in kw else "burstable")

    def pod_from(self, obj: dict[str, Any], qos_class: str) -> str:
        uid = str(self.cluster.create(names.POD, obj, "default")["metadata"]["uid"])
        self.host.add_pod(uid, qos_class=qos_class)
        return uid

    def tick(self) -> list[str]:
        plan = self.agent.reconcile(self.clock.now())
        self.clock.advance(5)
        return list(plan.warnings)


def test_agent_classifies_reclaimed_pods_and_shapes_the_device_once() -> None:
    n = Node(ON)
    web = n.pod("web", cpu="1")
    batch = n.pod("batch", level="reclaimed_cores", cpu=None, memory=None, reclaimed_cpu="1k")
    n.tick()
    n.tick()
    pod_cg = n.host.pods[batch].cgroup
    assert n.host.knobs[pod_cg][Knob.NET_CLS_CLASSID] == 0x10040
    app = n.host.pods[batch].containers["app"].cgroup
    assert n.host.knobs[app][Knob.NET_CLS_CLASSID] == 0x10040
    assert n.host.knobs[n.host.pods[web].cgroup][Knob.NET_CLS_CLASSID] == 0x10030
    assert len(n.host.net_shapes) == 1  # unchanged shape: not applied again
    shape = n.host.net_shapes[0]
    assert shape is not None and shape.device == "eth0"


def test_agent_on_v2_reshapes_when_a_pod_comes_and_says_why_shaping_failed() -> None:
    n = Node(ON, version=2)
    n.pod("web", cpu="1")
    n.tick()
    first = n.host.net_shapes[-1]
    assert first is not None and len(first.matches) == 1
    n.host.net_error = "nft -f -: exit 1: cgroupv2 path fails"
    n.pod("batch", level="reclaimed_cores", cpu=None, memory=None, reclaimed_cpu="1k")
    warnings = n.tick()
    assert any("network shaping: nft -f -" in w for w in warnings)
    assert not any("network shaping" in w for w in n.tick())  # said once
    n.host.net_error = ""
    n.tick()
    last = n.host.net_shapes[-1]
    assert last is not None and len(last.matches) == 2


def test_agent_removes_its_shaping_when_network_qos_is_turned_off() -> None:
    n = Node(ON)
    n.pod("web", cpu="1")
    n.tick()
    off = reclaiming({"network": {"enabled": False}})
    n.agent.settings.base = n.agent.settings.config = off  # the configuration in force
    n.tick()
    assert n.host.net_shapes[-1] is None
    count = len(n.host.net_shapes)
    n.tick()
    assert len(n.host.net_shapes) == count


# -- pods in network namespaces of their own -------------------------------------------------

WEB_NS = NetPod("default/web2", names.QOS_SHARED_CORES, ("kubepods/burstable/podx",), ("10.4.0.7",))
BATCH_NS = NetPod(
    "default/batch2",
    names.QOS_RECLAIMED_CORES,
    ("kubepods/besteffort/pody",),
    ("10.4.0.9", "fd00::9"),
)


@pytest.mark.parametrize("version", [1, 2])
def test_pods_in_their_own_namespace_are_matched_by_their_addresses(version: int) -> None:
    plan = decide(net(), [WEB_NS, BATCH_NS], version)
    assert plan.shape is not None
    by_source = {m.source: m.classid for m in plan.shape.matches if m.source is not None}
    assert by_source == {"10.4.0.7": 0x10030, "10.4.0.9": 0x10040, "fd00::9": 0x10040}
    assert plan.terms["addresses_by_level"][names.QOS_RECLAIMED_CORES] == 2
    # what such a pod sends on the host's network is still classified by its cgroup
    if version == 1:
        assert plan.knobs["kubepods/besteffort/pody"] == {Knob.NET_CLS_CLASSID: 0x10040}
    else:
        assert NetMatch(0x10040, "kubepods/besteffort/pody") in plan.shape.matches


def test_a_pod_known_only_by_its_address_is_classified() -> None:
    plan = decide(net(), [NetPod("default/x", names.QOS_RECLAIMED_CORES, (), ("10.4.0.3",))], 2)
    assert plan.shape is not None
    assert plan.shape.matches == (NetMatch(0x10040, source="10.4.0.3"),)


def test_an_address_two_pods_claim_goes_to_the_more_protected_class() -> None:
    # the old pod still listed while the new one has its address already
    going = NetPod("default/old", names.QOS_RECLAIMED_CORES, (), ("10.4.0.5",))
    coming = NetPod("default/new", names.QOS_SHARED_CORES, (), ("10.4.0.5",))
    for pods in ([going, coming], [coming, going]):
        plan = decide(net(), pods, 2)
        assert plan.shape is not None
        assert [m for m in plan.shape.matches if m.source] == [NetMatch(0x10030, source="10.4.0.5")]


def status_pod(n: Node, name: str, status: dict[str, Any], **kw: Any) -> str:
    host_network = kw.pop("host_network", False)
    obj: dict[str, Any] = pod_json(name, **kw)
    obj["spec"]["hostNetwork"] = host_network
    uid = n.pod_from(obj, "besteffort" if "level" in kw else "burstable")
    cur = n.cluster.get(names.POD, name, "default")
    n.cluster.update_status(names.POD, {**cur, "status": {**cur.get("status", {}), **status}})
    return uid


def test_agent_matches_pods_in_their_own_namespace_by_address_and_skips_bad_ones() -> None:
    n = Node(ON, version=2)
    reclaimed = {"level": "reclaimed_cores", "cpu": None, "memory": None, "reclaimed_cpu": "1k"}
    status_pod(n, "batch", {"podIP": "10.4.0.9", "podIPs": [{"ip": "10.4.0.9"}]}, **reclaimed)
    # the node's own address: a host-network pod is classified by its cgroup only
    status_pod(n, "hostnet", {"podIP": "192.168.1.2"}, host_network=True, cpu="1")
    # what is not an address is left out, the rest still applies (an API server refuses
    # such a status; the agent does not count on it)
    bad = ["10.4.0.10; drop", "10.4.0.300", '"', ""]
    status_pod(n, "web", {"podIPs": [{"ip": b} for b in bad] + [{"ip": "fd00::0:7"}]}, cpu="1")
    assert n.tick() == []
    shape = n.host.net_shapes[-1]
    assert shape is not None
    by_source = {m.source: m.classid for m in shape.matches if m.source is not None}
    assert by_source == {"10.4.0.9": 0x10040, "fd00::7": 0x10030}


ADDRESS_TEXT = st.one_of(
    st.ip_addresses().map(str),
    st.text(alphabet=st.sampled_from('0123456789abcdef.:;"\\ \n/x'), max_size=40),
)


@given(st.lists(ADDRESS_TEXT, max_size=6), st.booleans())
def test_only_canonical_addresses_reach_the_rules_whatever_the_status_says(
    ips: list[str], host_network: bool
) -> None:
    import contextlib
    import ipaddress

    from pykatalyst.agent.host.netshape import nft_script
    from pykatalyst.agent.pods import parse_pod

    obj: dict[str, Any] = pod_json("p", level="reclaimed_cores", cpu=None, memory=None)
    obj["metadata"]["uid"], obj["metadata"]["resourceVersion"] = "u", "1"
    obj["spec"]["hostNetwork"] = host_network
    obj["status"] = {"podIPs": [{"ip": ip} for ip in ips]}
    addrs = parse_pod(obj).addresses
    if host_network:
        assert addrs == ()
    valid = []
    for ip in ips:
        with contextlib.suppress(ValueError):
            valid.append(str(ipaddress.ip_address(ip)))
    if not host_network:
        assert addrs == tuple(dict.fromkeys(valid))
    plan = decide(net(), [NetPod("default/p", names.QOS_RECLAIMED_CORES, (), addrs)], 2)
    assert plan.shape is not None
    script = nft_script(plan.shape)  # never refuses what the pod parser let through
    for a in addrs:
        assert f"saddr {a} meta priority set 1:40" in script
