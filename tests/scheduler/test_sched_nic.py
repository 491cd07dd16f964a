"""NICBandwidth: net_bandwidth pods placed NIC by NIC from the CNR's NIC zones (as the
agent writes them), through the real scheduler over MemoryCluster: nic_selection_result
lands with the Binding, network_enhancement's namespace rules hold, a pod no NIC can take
stays Pending with the reason, and no NIC is ever over-committed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.agent.config_sections import NicsConfig
from pykatalyst.agent.host.nics import NicDevice
from pykatalyst.agent.nic import capacities, nic_zones
from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cli.explain_pod import explain_pod
from pykatalyst.cli.explain_render import print_pod
from pykatalyst.scheduler.config import load_config, load_config_text
from pykatalyst.scheduler.extender import ExtenderService
from pykatalyst.scheduler.scheduler import Scheduler
from pykatalyst.topology.machine import CPUTopology
from tests.scheduler.sched_helpers import add_cnr, add_node, add_pod, cnr, events_for, node, pod

BW = names.RESOURCE_NET_BANDWIDTH
TOPO = CPUTopology.synthetic(2, 4, 2)  # two sockets, one NUMA node each
PROFILE = """apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: nic
  plugins:
    multiPoint:
      enabled:
      - name: NICBandwidth
"""


def zones(nics: list[NicDevice], holds: Any = ()) -> list[dict[str, Any]]:
    """Socket zones with the NIC zones the agent reports for `nics` (25G: 22500 Mbps)."""
    per_socket = nic_zones(capacities(nics, NicsConfig()), holds, TOPO)
    return [
        {"type": names.ZONE_SOCKET, "name": str(s), "children": per_socket.get(s, [])}
        for s in sorted(TOPO.sockets)
    ]


def cluster(nodes: dict[str, list[NicDevice]]) -> MemoryCluster:
    c = MemoryCluster()
    for name, nics in nodes.items():
        add_node(c, node(name, cpu="64", memory="256Gi"))
        add_cnr(c, cnr(name, zones=zones(nics)))
    return c


def bw_pod(name: str, mbps: int, namespace_type: str | None = None, **ann: str) -> dict[str, Any]:
    annotations = dict(ann)
    if namespace_type is not None:
        annotations[names.NETWORK_ENHANCEMENT_ANNOTATION] = json.dumps(
            {names.ENH_NAMESPACE_TYPE: namespace_type}
        )
    p = pod(
        name,
        {"cpu": "1", "memory": "1Gi", BW: str(mbps)},
        annotations=annotations,
        scheduler="nic",
    )
    return p


def run(c: MemoryCluster, pods: list[dict[str, Any]]) -> Scheduler:
    s = Scheduler(c, load_config_text(PROFILE))
    for p in pods:
        add_pod(c, p)
    s.run_until_idle(0.0)
    return s


def placed(c: MemoryCluster, name: str) -> tuple[str, str]:
    raw = c.get(names.POD, name, "default")
    ann = raw["metadata"].get("annotations") or {}
    return raw["spec"].get("nodeName", ""), ann.get(names.NIC_SELECTION_RESULT_ANNOTATION, "")


def pending_message(c: MemoryCluster, name: str) -> str:
    raw = c.get(names.POD, name, "default")
    assert not raw["spec"].get("nodeName")
    return str(raw["status"]["conditions"][0]["message"])


HOST = NicDevice("eth0", speed_mbps=25000, numa=0)
OTHER = NicDevice("eth0", netns="ns2", speed_mbps=25000, numa=1)


def test_a_bandwidth_pod_gets_a_nic_written_with_its_binding_and_explained() -> None:
    c = cluster({"n1": [HOST]})
    run(c, [bw_pod("web", 3000)])
    assert placed(c, "web") == ("n1", "eth0")
    ann = c.get(names.POD, "web", "default")["metadata"]["annotations"]
    reason = ann[names.NIC_SELECTION_REASON_ANNOTATION]
    assert "3000 Mbps on eth0" in reason and "22500 of 22500" in reason


def test_a_nic_is_never_over_committed_and_the_last_pod_stays_pending() -> None:
    c = cluster({"n1": [HOST]})
    run(c, [bw_pod(f"p{i}", 7000) for i in range(4)])  # 3 x 7000 <= 22500 < 4 x 7000
    assert [placed(c, f"p{i}")[1] for i in range(3)] == ["eth0"] * 3
    assert "no NIC with enough net_bandwidth free" in pending_message(c, "p3")


def test_bandwidth_held_in_the_cnr_counts() -> None:
    c = MemoryCluster()
    add_node(c, node("n1", cpu="64", memory="256Gi"))
    from pykatalyst.agent.nic import NicHold

    held = [NicHold("default/other/u9", "eth0", 20000)]
    add_cnr(c, cnr("n1", zones=zones([HOST], held)))
    run(c, [bw_pod("web", 3000)])
    assert "no NIC with enough net_bandwidth free" in pending_message(c, "web")


def test_more_than_any_nic_gives_out_is_refused_before_the_nodes_are_tried() -> None:
    c = cluster({"n1": [HOST]})
    run(c, [bw_pod("big", 30000)])
    msg = pending_message(c, "big")
    assert f"asks 30000 Mbps of {BW}" in msg and "the largest NIC gives out 22500" in msg


def test_namespace_type_requires_or_prefers_the_host_namespace() -> None:
    c = cluster({"n1": [HOST, OTHER]})
    run(
        c,
        [
            bw_pod("host", 1000, names.NETNS_HOST),
            bw_pod("anti", 1000, names.NETNS_ANTI_HOST),
            bw_pod("pref", 1000, names.NETNS_ANTI_HOST_PREFERRED),
        ],
    )
    assert placed(c, "host") == ("n1", "eth0")
    assert placed(c, "anti") == ("n1", "ns2-eth0")  # Katalyst's <netns>-<ifname>
    assert placed(c, "pref") == ("n1", "ns2-eth0")


def test_a_preferred_namespace_yields_when_full_and_a_required_one_does_not() -> None:
    c = cluster({"n1": [HOST, OTHER]})
    run(c, [bw_pod("fill", 22000, names.NETNS_HOST)])
    run(c, [bw_pod("pref", 2000, names.NETNS_HOST_PREFERRED), bw_pod("req", 2000, "host_ns")])
    assert placed(c, "pref") == ("n1", "ns2-eth0")
    msg = pending_message(c, "req")
    assert "no NIC with enough net_bandwidth free" in msg


def test_a_required_namespace_no_node_has_is_the_reason() -> None:
    c = cluster({"n1": [OTHER], "n2": []})
    run(c, [bw_pod("host", 1000, names.NETNS_HOST)])
    msg = pending_message(c, "host")
    assert "no NIC in the network namespace the pod requires" in msg
    assert "report no NICs in their CNR" in msg


def test_the_preferred_namespace_steers_the_node() -> None:
    c = cluster({"a": [OTHER], "b": [HOST]})
    run(c, [bw_pod("p", 1000, names.NETNS_HOST_PREFERRED)])
    assert placed(c, "p") == ("b", "eth0")


def test_an_invalid_network_enhancement_keeps_the_pod_pending_naming_the_field() -> None:
    c = cluster({"n1": [HOST]})
    run(c, [bw_pod("bad", 1000, "container_ns")])
    msg = pending_message(c, "bad")
    assert names.ENH_NAMESPACE_TYPE in msg and "host_ns" in msg


def test_a_restarted_scheduler_reads_the_bound_pods_nics_back() -> None:
    c = cluster({"n1": [HOST]})
    run(c, [bw_pod("a", 20000)])
    run(c, [bw_pod("b", 5000)])  # a fresh scheduler; the CNR lists no allocation yet
    assert "no NIC with enough net_bandwidth free" in pending_message(c, "b")


def test_the_example_profile_places_bandwidth_pods() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "scheduler"
    cfg = load_config(example / "katalyst-scheduler-nic.yaml")
    c = cluster({"n1": [HOST]})
    s = Scheduler(c, cfg)
    p = bw_pod("web", 3000)
    p["spec"]["schedulerName"] = "katalyst-scheduler"
    add_pod(c, p)
    s.run_until_idle(0.0)
    assert placed(c, "web") == ("n1", "eth0")


def test_explain_pod_says_which_nic_and_why(capsys: pytest.CaptureFixture[str]) -> None:
    c = cluster({"n1": [HOST, OTHER]})
    run(c, [bw_pod("web", 3000, names.NETNS_ANTI_HOST)])
    report = explain_pod(c, "default", "web", 0.0)
    nic = report["nic"]
    assert (nic["mbps_asked"], nic["selection"]) == (3000, "ns2-eth0")
    assert "namespace_type anti_host_ns" in nic["why"]
    assert nic["nic"]["socket"] == "1" and not nic["nic"]["reports_this_pod"]
    print_pod(report)
    shown = capsys.readouterr().out
    assert "why this NIC" in shown and "ns2-eth0" in shown
    assert explain_pod(c, "default", "web", 0.0)["gpu"] is None


def test_the_extender_filters_per_nic_and_writes_the_selection_at_bind() -> None:
    c = cluster({"n1": [HOST], "n2": [HOST]})
    s = Scheduler(c, load_config_text(PROFILE))
    busy = bw_pod("busy", 20000)
    busy["spec"]["nodeName"] = "n1"
    busy["metadata"]["annotations"][names.NIC_SELECTION_RESULT_ANNOTATION] = "eth0"
    add_pod(c, busy)
    uid_p = add_pod(c, bw_pod("p", 5000))["metadata"]["uid"]
    ext = ExtenderService(s, "nic")
    args = {"Pod": {"metadata": {"name": "p", "namespace": "default"}}, "NodeNames": ["n1", "n2"]}
    out = ext.filter(args, 0.0)
    assert out["NodeNames"] == ["n2"]
    assert "no NIC with enough net_bandwidth free" in out["FailedNodes"]["n1"]
    bind = {"PodName": "p", "PodNamespace": "default", "PodUID": uid_p, "Node": "n2"}
    assert ext.bind(bind, 0.0) == {"Error": ""}
    assert placed(c, "p") == ("n2", "eth0")
    uid_q = add_pod(c, bw_pod("q", 20000))["metadata"]["uid"]
    refused = ext.bind({**bind, "PodName": "q", "PodUID": uid_q}, 0.0)
    assert "no NIC with enough net_bandwidth free" in refused["Error"]


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.lists(st.integers(1000, 40000), min_size=0, max_size=3), min_size=1, max_size=3),
    st.lists(
        st.tuples(st.integers(1, 12000), st.sampled_from([None, *names.NETWORK_NAMESPACE_TYPES])),
        min_size=1,
        max_size=14,
    ),
)
def test_no_nic_is_ever_over_committed(
    speeds: list[list[int]], asks: list[tuple[int, Any]]
) -> None:
    """Random nodes of 0-3 NICs (even ones in the host namespace, odd ones in `ns`) and
    random pods: every bound pod names a NIC of its node, in the namespace it requires, no
    NIC holds more than it gives out, and a pod left Pending fits no NIC that is left."""
    layout = {
        f"n{k}": [
            NicDevice(f"eth{i}", netns="" if i % 2 == 0 else "ns", speed_mbps=s, numa=i % 2)
            for i, s in enumerate(node_speeds)
        ]
        for k, node_speeds in enumerate(speeds)
    }
    c = cluster(layout)
    run(c, [bw_pod(f"p{i}", mbps, ns) for i, (mbps, ns) in enumerate(asks)])
    free = {
        (n, cap.nic.identifier): cap.allocatable
        for n, nics in layout.items()
        for cap in capacities(nics, NicsConfig())
    }
    for i, (mbps, ns) in enumerate(asks):
        node_name, nic = placed(c, f"p{i}")
        if node_name:
            assert (node_name, nic) in free
            free[(node_name, nic)] -= mbps
            assert ns != names.NETNS_HOST or "-" not in nic
            assert ns != names.NETNS_ANTI_HOST or "-" in nic
    assert min(free.values(), default=0) >= 0
    for i, (mbps, ns) in enumerate(asks):
        if not placed(c, f"p{i}")[0]:
            allowed = [
                left
                for (_, nic), left in free.items()
                if (ns != names.NETNS_HOST or "-" not in nic)
                and (ns != names.NETNS_ANTI_HOST or "-" in nic)
            ]
            assert all(left < mbps for left in allowed)


# the zones the scheduler chooses are the pod's NUMA binding (under Katalyst's default,
# `All`, every zone is reserved and the agent picks: every socket is the pod's)
TOPO_PROFILE = (
    PROFILE
    + "      - name: NodeResourceTopology\n"
    + "  pluginConfig:\n  - name: NodeResourceTopology\n    args:\n"
    + "      reservedZones: Chosen\n"
)


def numa_cluster(nic_speeds: tuple[int, int]) -> MemoryCluster:
    """One node, two sockets of one NUMA node each; NUMA 0 too small for a 2-cpu pod; a
    NIC per socket (eth0 on socket 0, eth1 on socket 1) of the given line rates."""
    nics = [
        NicDevice("eth0", speed_mbps=nic_speeds[0], numa=0),
        NicDevice("eth1", speed_mbps=nic_speeds[1], numa=1),
    ]
    per_socket = nic_zones(capacities(nics, NicsConfig()), (), TOPO)
    tree = []
    for s, cpu in ((0, "1"), (1, "8")):
        numa = {
            "type": names.ZONE_NUMA,
            "name": str(s),
            "resources": {
                "allocatable": {"cpu": cpu, "memory": "16Gi"},
                "capacity": {"cpu": cpu, "memory": "16Gi"},
            },
        }
        tree.append({"type": names.ZONE_SOCKET, "name": str(s), "children": [numa, *per_socket[s]]})
    c = MemoryCluster()
    add_node(c, node("n1", cpu="9", memory="32Gi"))
    add_cnr(c, cnr("n1", zones=tree, policy=names.TOPOLOGY_POLICY_SINGLE_NUMA_CONTAINER))
    return c


def numa_bw_pod(name: str, restricted: bool) -> dict[str, Any]:
    net = {names.ENH_TOPOLOGY_AFFINITY_RESTRICTED: "true"} if restricted else {}
    p = pod(
        name,
        {"cpu": "2", "memory": "1Gi", BW: "1000"},
        qos=names.QOS_DEDICATED_CORES,
        memory_enhancement={names.ENH_NUMA_BINDING: "true"},
        annotations={names.NETWORK_ENHANCEMENT_ANNOTATION: json.dumps(net)},
        scheduler="nic",
    )
    return p


def run_topo(c: MemoryCluster, pods: list[dict[str, Any]]) -> None:
    s = Scheduler(c, load_config_text(TOPO_PROFILE))
    for p in pods:
        add_pod(c, p)
    s.run_until_idle(0.0)


def test_a_numa_bound_pod_gets_the_nic_on_its_numa_nodes_socket() -> None:
    c = numa_cluster((25000, 25000))
    run_topo(c, [numa_bw_pod("bound", restricted=False)])
    assert placed(c, "bound") == ("n1", "eth1")  # NUMA 1 is the one that fits: socket 1
    reason = c.get(names.POD, "bound", "default")["metadata"]["annotations"][
        names.NIC_SELECTION_REASON_ANNOTATION
    ]
    assert "on socket 1 (the pod's NUMA binding)" in reason


def test_topology_affinity_restricted_refuses_a_nic_on_another_socket() -> None:
    c = numa_cluster((25000, 1000))  # socket 1's NIC gives out 900 Mbps: too little
    run_topo(c, [numa_bw_pod("loose", restricted=False)])
    assert placed(c, "loose") == ("n1", "eth0")  # not restricted: another socket's NIC
    c = numa_cluster((25000, 1000))
    run_topo(c, [numa_bw_pod("strict", restricted=True)])
    assert placed(c, "strict") == ("", "")  # refused at Reserve: a FailedScheduling Event
    (event,) = events_for(c, "strict")
    assert event["reason"] == "FailedScheduling"
    assert "topology_affinity_restricted" in event["message"]
