"""Katalyst's network eviction: bandwidth pods on a NIC whose zone lost its allocatable
net_bandwidth are evicted once it has stayed so for the tolerance, through the manager's
ladder (ranking, protection, burst, in-flight victims)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from pykatalyst.agent.eviction import EvictionConfig, EvictionManager, EvictionSnapshot, Met
from pykatalyst.agent.eviction.plugins import NicHealthPlugin
from pykatalyst.agent.eviction.types import PodInfo
from pykatalyst.api import names
from pykatalyst.api.crds import AdminQoSConfiguration
from tests.agent.eviction_pods import eviction_pod

SHARED, RECLAIMED = names.QOS_SHARED_CORES, names.QOS_RECLAIMED_CORES
ON: dict[str, Any] = {"network": {"enabled": True, "tolerance_s": 60}}


def bw(name: str, mbps: int, nic: str, level: str = SHARED, **kw: Any) -> PodInfo:
    ann = {names.NIC_SELECTION_RESULT_ANNOTATION: nic} if nic else {}
    return eviction_pod(
        f"uid-{name}", "default", name, level, annotations=ann, net_bandwidth=mbps, **kw
    )


def snap(now: float, pods: list[PodInfo], nics: dict[str, int | None]) -> EvictionSnapshot:
    return EvictionSnapshot(now=now, node="n1", pods=tuple(pods), nic_allocatable=nics)


def manager(**over: Any) -> EvictionManager:
    return EvictionManager("n1", EvictionConfig.model_validate({**ON, **over}))


PODS = [
    bw("db", 300, "eth0"),
    bw("batch", 100, "eth0", RECLAIMED),
    bw("far", 200, "eth1"),
    bw("plain", 0, "eth0"),  # names the NIC but asks no bandwidth
]


def test_a_nic_without_allocatable_is_met_for_the_pods_holding_bandwidth_on_it() -> None:
    plugin = NicHealthPlugin(EvictionConfig.model_validate(ON).network)
    down, up = plugin.observe(snap(0, PODS, {"eth0": 0, "eth1": 1000}))
    assert (down.key, down.met, up.met) == ("nic eth0", Met.HARD, Met.NOT)
    assert down.candidates == {"uid-db", "uid-batch"}
    assert down.overage == 400 and down.grace_period_s == 60
    # a zone that reports no net_bandwidth at all counts as none (Katalyst's rule)
    (gone,) = plugin.observe(snap(0, PODS, {"eth1": None}))
    assert gone.met == Met.HARD and gone.candidates == {"uid-far"}
    assert "reports no net_bandwidth" in gone.window


def test_every_holder_goes_once_the_nic_stayed_down_for_the_tolerance() -> None:
    m = manager()
    assert not m.decide(snap(0, PODS, {"eth0": 0, "eth1": 1000})).victims
    assert not m.decide(snap(30, PODS, {"eth0": 0, "eth1": 1000})).victims
    plan = m.decide(snap(60, PODS, {"eth0": 0, "eth1": 1000}))
    # reclaimed before shared, as the manager ranks every plugin's victims
    assert [v.pod.name for v in plan.victims] == ["batch", "db"]
    assert all(v.deletion_grace_s == 0 for v in plan.victims)  # Katalyst's default
    message = plan.records[-1].message
    assert "allocatable net_bandwidth of NIC eth0 = 0 Mbps <= hard threshold 0 Mbps" in message


def test_a_nic_that_comes_back_within_the_tolerance_evicts_nothing() -> None:
    m = manager()
    m.decide(snap(0, PODS, {"eth0": 0}))
    m.decide(snap(40, PODS, {"eth0": 500}))
    assert not m.decide(snap(70, PODS, {"eth0": 0})).victims  # the clock starts over
    assert m.decide(snap(130, PODS, {"eth0": 0})).victims


def test_off_by_default_and_protected_pods_stay() -> None:
    off = EvictionManager("n1", EvictionConfig())
    assert not off.decide(snap(1000, PODS, {"eth0": 0})).victims
    critical = bw("dns", 50, "eth0", priority_class_name="system-node-critical")
    m = manager()
    m.decide(snap(0, [critical], {"eth0": 0}))
    plan = m.decide(snap(100, [critical], {"eth0": 0}))
    assert not plan.victims
    assert any("no eligible candidate" in n for n in plan.notes)


def test_the_round_budget_holds_and_the_rest_follow_once_the_first_are_gone() -> None:
    many = [bw(f"p{i}", 10, "eth0") for i in range(5)]
    m = manager(eviction_burst=3)
    m.decide(snap(0, many, {"eth0": 0}))
    first = m.decide(snap(60, many, {"eth0": 0})).victims
    assert len(first) == 3
    left = [p for p in many if p.uid not in {v.pod.uid for v in first}]
    second = m.decide(snap(65, left, {"eth0": 0})).victims
    assert {v.pod.uid for v in second} == {p.uid for p in left}


def test_the_admin_qos_configuration_sets_it_as_katalyst_spells_it() -> None:
    aqc = AdminQoSConfiguration.from_json(
        {
            "apiVersion": "config.katalyst.kubewharf.io/v1alpha1",
            "kind": "AdminQoSConfiguration",
            "metadata": {"name": "default", "namespace": "default"},
            "spec": {
                "config": {
                    "evictionConfig": {
                        "networkEvictionConfig": {
                            "enableNICNetworkEviction": True,
                            "nicUnhealthyToleranceDuration": "2m",
                            "gracePeriod": 30,
                        }
                    }
                }
            },
        }
    )
    cfg = EvictionConfig().with_admin_qos(aqc).network
    assert (cfg.enabled, cfg.tolerance_s, cfg.deletion_grace_s) == (True, 120.0, 30)


_nics = st.dictionaries(
    st.sampled_from(["eth0", "eth1", "eth2"]), st.one_of(st.none(), st.integers(0, 3))
)
_pods = st.lists(
    st.tuples(
        st.integers(0, 500),
        st.sampled_from(["eth0", "eth1", "eth2", "eth9", ""]),
        st.sampled_from([SHARED, RECLAIMED, names.QOS_DEDICATED_CORES]),
    ),
    max_size=10,
)


@given(nics=_nics, given_pods=_pods)
def test_victims_are_exactly_the_holders_of_nics_without_allocatable(
    nics: dict[str, int | None], given_pods: list[tuple[int, str, str]]
) -> None:
    pods = [bw(f"p{i}", m, nic, lv) for i, (m, nic, lv) in enumerate(given_pods)]
    m = manager(eviction_burst=100)
    m.decide(snap(0, pods, nics))
    victims = {v.pod.uid for v in m.decide(snap(60, pods, nics)).victims}
    down = {nic for nic, a in nics.items() if not a}
    holders = {
        p.uid
        for p, (mbps, nic, _) in zip(pods, given_pods, strict=True)
        if mbps > 0 and nic in down
    }
    assert victims == holders


# -- the agent, its NIC report and its eviction stage ----------------------------------------


def test_the_agent_evicts_the_holders_of_a_nic_that_went_down() -> None:
    from pykatalyst.agent.agent import Agent
    from pykatalyst.agent.config import AgentConfig
    from pykatalyst.agent.enforcer import Enforcer
    from pykatalyst.agent.eviction import EvictionPlan, EvictionStage
    from pykatalyst.agent.host.nics import NicDevice, SyntheticNics
    from pykatalyst.apiserver.memory import MemoryCluster
    from pykatalyst.cluster.clock import VirtualClock
    from pykatalyst.topology.machine import CPUTopology
    from tests.agent.inmemory_host import InMemoryHost, node_json, pod_json

    clock = VirtualClock(10_000)
    cluster = MemoryCluster(clock=clock)
    cluster.create(names.NODE, node_json("node-1"))
    host = InMemoryHost(CPUTopology.synthetic(1, 4, 2))
    nics = [NicDevice("eth0", speed_mbps=10000), NicDevice("eth1", speed_mbps=10000)]
    stage = EvictionStage("node-1", cluster, EvictionConfig.model_validate(ON))
    agent = Agent(
        "node-1",
        cluster,
        host,
        clock,
        AgentConfig.model_validate({"devices": {"nic": {"source": "synthetic"}}}),
        Enforcer(host, None, clock),
        nics=SyntheticNics(lambda: nics),
        eviction_stages=[stage],
    )
    uids = {}
    for name, nic in (("db", "eth0"), ("cache", "eth1")):
        pod = pod_json(name, annotations={names.NIC_SELECTION_RESULT_ANNOTATION: nic})
        pod["spec"]["containers"][0]["resources"]["requests"][names.RESOURCE_NET_BANDWIDTH] = "500"  # type: ignore[index]
        uids[name] = str(cluster.create(names.POD, pod, "default")["metadata"]["uid"])
        host.add_pod(uids[name])
    evicted: list[tuple[float, str]] = []

    def tick() -> None:
        plan = agent.reconcile(clock.now())
        for action in plan.eviction_actions:
            if isinstance(action, EvictionPlan):
                evicted.extend((clock.now(), v.pod.name) for v in action.evictions)
        clock.advance(5)

    tick()
    tick()
    assert not evicted
    nics[0] = NicDevice("eth0", speed_mbps=10000, healthy=False)  # the link went down
    down_at = clock.now()
    for _ in range(20):
        tick()
    assert [name for _, name in evicted] == ["db"]  # eth1's holder stays
    assert evicted[0][0] >= down_at + 60  # only after the tolerance
    assert stage.last_plan is not None
