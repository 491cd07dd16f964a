"""SriovVF: one SR-IOV VF per pod asking sriov_nic, from the CNR's VF zones (as the agent
writes them), through the real scheduler over MemoryCluster: sriov_vf_result lands with
the Binding in Katalyst's order, a NUMA-bound pod's VF is on its socket, the dynamic
policy sizes the VF by a dedicated pod's cpus, bad asks stay Pending naming the field, and
no VF is ever given twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.agent.config_sections import NicsConfig
from pykatalyst.agent.host.nics import NicDevice
from pykatalyst.agent.nic import capacities, nic_zones
from pykatalyst.agent.sriov import synthetic_vfs
from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cli.explain_pod import explain_pod
from pykatalyst.cli.explain_render import print_pod
from pykatalyst.scheduler.config import load_config, load_config_text
from pykatalyst.scheduler.extender import ExtenderService
from pykatalyst.scheduler.scheduler import Scheduler
from pykatalyst.topology.machine import CPUTopology
from tests.scheduler.sched_helpers import add_cnr, add_node, add_pod, cnr, node, pod

SRIOV = names.RESOURCE_SRIOV_NIC
TOPO = CPUTopology.synthetic(2, 4, 2)  # two sockets, one NUMA node each
PROFILE = """apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: vf
  plugins:
    multiPoint:
      enabled:
      - name: SriovVF
"""


def pf(
    name: str, numa: int, vfs: int, *, rdma: bool = True, queues: tuple[int, ...] = ()
) -> NicDevice:
    k = int("".join(ch for ch in name if ch.isdigit()) or 0)
    return NicDevice(
        name,
        speed_mbps=100000,
        numa=numa,
        pcie_switch=f"sw{numa}{k}",
        vfs=synthetic_vfs(name, "", vfs, rdma, queues, numa, f"sw{numa}{k}", 0x40 + k),
    )


def big_box() -> list[NicDevice]:
    """2 sockets x 4 PCIe switches, one NIC of 8 VFs under each switch."""
    return [pf(f"eth{s * 4 + k}", s, 8) for s in range(2) for k in range(4)]


def tree(nics: list[NicDevice], numa_cpus: tuple[str, str] | None = None) -> list[dict[str, Any]]:
    per_socket = nic_zones(capacities(nics, NicsConfig()), (), TOPO)
    out = []
    for s in sorted(TOPO.sockets):
        kids = list(per_socket.get(s, []))
        if numa_cpus is not None:
            res = {"cpu": numa_cpus[s], "memory": "16Gi"}
            kids.insert(
                0,
                {
                    "type": names.ZONE_NUMA,
                    "name": str(s),
                    "resources": {"allocatable": res, "capacity": res},
                },
            )
        out.append({"type": names.ZONE_SOCKET, "name": str(s), "children": kids})
    return out


def cluster(nodes: dict[str, list[NicDevice]], **kw: Any) -> MemoryCluster:
    c = MemoryCluster()
    for name, nics in nodes.items():
        add_node(c, node(name, cpu="256", memory="1Ti"))
        add_cnr(c, cnr(name, zones=tree(nics, kw.get("numa_cpus")), policy=kw.get("policy")))
    return c


def vf_pod(name: str, count: str = "1", cpu: str = "1", **kw: Any) -> dict[str, Any]:
    return pod(name, {"cpu": cpu, "memory": "1Gi", SRIOV: count}, scheduler="vf", **kw)


def run(c: MemoryCluster, pods: list[dict[str, Any]], profile: str = PROFILE) -> None:
    s = Scheduler(c, load_config_text(profile))
    for p in pods:
        add_pod(c, p)
    s.run_until_idle(0.0)


def placed(c: MemoryCluster, name: str) -> tuple[str, str]:
    raw = c.get(names.POD, name, "default")
    ann = raw["metadata"].get("annotations") or {}
    return raw["spec"].get("nodeName", ""), ann.get(names.SRIOV_VF_RESULT_ANNOTATION, "")


def pending_message(c: MemoryCluster, name: str) -> str:
    raw = c.get(names.POD, name, "default")
    assert not raw["spec"].get("nodeName")
    return str(raw["status"]["conditions"][0]["message"])


def test_vfs_go_out_in_katalysts_order_index_first_then_numa_then_pf() -> None:
    c = cluster({"n1": [pf("eth0", 0, 2), pf("eth1", 1, 2), pf("eth2", 0, 2)]})
    run(c, [vf_pod(f"p{i}") for i in range(6)])
    got = [placed(c, f"p{i}")[1] for i in range(6)]
    assert got == ["eth0_0", "eth2_0", "eth1_0", "eth0_1", "eth2_1", "eth1_1"]
    reason = c.get(names.POD, "p0", "default")["metadata"]["annotations"][
        names.SRIOV_VF_REASON_ANNOTATION
    ]
    assert "VF 0 of eth0" in reason and "Katalyst's order" in reason


def test_a_node_out_of_vfs_leaves_the_pod_pending_with_the_reason() -> None:
    c = cluster({"n1": [pf("eth0", 0, 1)], "n2": [pf("eth0", 0, 1, rdma=False)]})
    run(c, [vf_pod("a"), vf_pod("b")])
    assert placed(c, "a") == ("n1", "eth0_0")
    msg = pending_message(c, "b")
    assert "0/2 nodes are available" in msg
    assert "2 node(s) had no free RDMA-capable SR-IOV VF (sriov_nic)" in msg


def test_no_rdma_vf_anywhere_and_bad_counts_are_refused_naming_the_field() -> None:
    c = cluster({"n1": [pf("eth0", 0, 4, rdma=False)]})
    run(c, [vf_pod("none"), vf_pod("two", count="2")])
    assert "no node's CNR reports an RDMA-capable SR-IOV VF" in pending_message(c, "none")
    two = pending_message(c, "two")
    assert SRIOV in two and "'2'" in two and "accepted: 1" in two


def test_a_numa_bound_pod_gets_a_vf_on_its_numa_nodes_socket() -> None:
    # NUMA 0 is too small for the pod: it is bound to NUMA 1, so its VF is on socket 1
    c = MemoryCluster()
    add_node(c, node("n1", cpu="9", memory="32Gi"))
    zones = tree([pf("eth0", 0, 2), pf("eth1", 1, 2)], numa_cpus=("1", "8"))
    add_cnr(c, cnr("n1", zones=zones, policy=names.TOPOLOGY_POLICY_SINGLE_NUMA_CONTAINER))
    profile = (
        PROFILE
        + "      - name: NodeResourceTopology\n"
        + "  pluginConfig:\n  - name: NodeResourceTopology\n    args:\n"
        + "      reservedZones: Chosen\n"
    )
    bound = vf_pod(
        "bound",
        cpu="2",
        qos=names.QOS_DEDICATED_CORES,
        memory_enhancement={names.ENH_NUMA_BINDING: "true"},
    )
    run(c, [bound], profile)
    assert placed(c, "bound") == ("n1", "eth1_0")


def test_the_dynamic_policy_sizes_the_vf_by_the_dedicated_pods_cpus() -> None:
    nics = [pf("eth0", 0, 5, queues=(8, 8, 32, 32, 8))]
    profile = PROFILE + "  pluginConfig:\n  - name: SriovVF\n    args:\n      policy: dynamic\n"
    c = cluster({"n1": nics})
    ded = {
        "qos": names.QOS_DEDICATED_CORES,
        "memory_enhancement": {names.ENH_NUMA_BINDING: "true"},
    }
    pods = [
        vf_pod("large", cpu="24", **ded),
        vf_pod("small", cpu="8", **ded),
        vf_pod("shared", cpu="24"),  # not dedicated: the static rule
        vf_pod("large2", cpu="32", **ded),
        vf_pod("large3", cpu="32", **ded),  # only an 8-queue VF left: refused
    ]
    for p in pods:  # one at a time, in this order
        run(c, [p], profile)
    assert placed(c, "large")[1] == "eth0_2"
    assert placed(c, "small")[1] == "eth0_0"
    assert placed(c, "shared")[1] == "eth0_1"
    assert placed(c, "large2")[1] == "eth0_3"
    assert placed(c, "large3") == ("", "")
    assert "no free 32-queue SR-IOV VF for 32 dedicated cpus" in pending_message(c, "large3")


def test_vfs_held_in_the_cnr_and_bound_pods_count_after_a_restart() -> None:
    c = cluster({"n1": [pf("eth0", 0, 2)]})
    run(c, [vf_pod("a")])
    assert placed(c, "a") == ("n1", "eth0_0")
    run(c, [vf_pod("b"), vf_pod("c")])  # a new scheduler reads a's VF back
    assert placed(c, "b") == ("n1", "eth0_1")
    assert placed(c, "c") == ("", "")


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 1), st.integers(0, 8), st.booleans()), min_size=1, max_size=6
    ),
    st.integers(1, 40),
)
def test_no_vf_is_ever_given_twice_and_each_pod_gets_at_most_one(
    shape: list[tuple[int, int, bool]], pods: int
) -> None:
    nics = [pf(f"eth{i}", numa, n, rdma=rdma) for i, (numa, n, rdma) in enumerate(shape)]
    c = cluster({"n1": nics})
    run(c, [vf_pod(f"p{i}") for i in range(pods)])
    got = [placed(c, f"p{i}") for i in range(pods)]
    vfs = [v for _, v in got if v]
    rdma_vfs = sum(n for _, n, rdma in shape if rdma)
    assert len(vfs) == len(set(vfs)) == min(pods, rdma_vfs)
    assert all(bool(n) == bool(v) for n, v in got)  # bound iff it got a VF


def gpu_zones(socket: int) -> list[dict[str, Any]]:
    """A NUMA zone with the socket's 8 GPUs, 2 under each of its 4 PCIe switches."""
    res = {"cpu": "32", "memory": "128Gi"}
    gpus = [
        {
            "type": names.ZONE_GPU,
            "name": f"GPU-{socket}-{k}",
            "resources": {"allocatable": {names.RESOURCE_NVIDIA_GPU: "1"}},
            "attributes": [{"name": names.GPU_ATTR_PCIE_SWITCH, "value": f"sw{socket}{k // 2}"}],
        }
        for k in range(8)
    ]
    numa = {"type": names.ZONE_NUMA, "name": str(socket), "children": gpus}
    return [{**numa, "resources": {"allocatable": res, "capacity": res}}]


def test_the_big_box_gives_out_its_64_vfs_to_64_pods_and_no_more() -> None:
    # 2 sockets x 4 PCIe switches x (2 GPUs + 1 NIC of 8 VFs)
    c = MemoryCluster()
    add_node(c, node("n1", cpu="256", memory="1Ti"))
    zones = tree(big_box())
    for z in zones:
        z["children"] = gpu_zones(int(z["name"])) + z["children"]
    add_cnr(c, cnr("n1", zones=zones))
    run(c, [vf_pod(f"p{i}") for i in range(65)])
    got = [placed(c, f"p{i}")[1] for i in range(65)]
    vfs = [v for v in got if v]
    assert sorted(vfs) == sorted(f"eth{k}_{i}" for k in range(8) for i in range(8))
    assert got.count("") == 1


def test_the_example_profile_places_vf_pods() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "scheduler"
    c = cluster({"n1": [pf("eth0", 0, 2)]})
    s = Scheduler(c, load_config(example / "katalyst-scheduler-sriov.yaml"))
    p = vf_pod("rdma")
    p["spec"]["schedulerName"] = "katalyst-scheduler"
    add_pod(c, p)
    s.run_until_idle(0.0)
    assert placed(c, "rdma") == ("n1", "eth0_0")


def test_explain_pod_says_which_vf_and_why(capsys: pytest.CaptureFixture[str]) -> None:
    c = cluster({"n1": [pf("eth0", 0, 2), pf("eth1", 1, 2)]})
    run(c, [vf_pod("rdma")])
    report = explain_pod(c, "default", "rdma", 0.0)
    vf = report["sriov"]
    assert (vf["asked"], vf["selection"]) == (1, "eth0_0")
    assert "Katalyst's order" in vf["why"]
    assert vf["vf"]["pf"] == "eth0" and not vf["vf"]["reports_this_pod"]
    assert report["nic"] is None
    print_pod(report)
    shown = capsys.readouterr().out
    assert "why this VF" in shown and "PF eth0" in shown


def test_the_extender_filters_on_free_vfs_and_writes_the_vf_at_bind() -> None:
    c = cluster({"n1": [pf("eth0", 0, 1)], "n2": [pf("eth0", 0, 2)]})
    s = Scheduler(c, load_config_text(PROFILE))
    busy = vf_pod("busy", node_name="n1", annotations={names.SRIOV_VF_RESULT_ANNOTATION: "eth0_0"})
    add_pod(c, busy)
    uid_p = add_pod(c, vf_pod("p"))["metadata"]["uid"]
    ext = ExtenderService(s, "vf")
    args = {"Pod": {"metadata": {"name": "p", "namespace": "default"}}, "NodeNames": ["n1", "n2"]}
    out = ext.filter(args, 0.0)
    assert out["NodeNames"] == ["n2"]
    assert "no free RDMA-capable SR-IOV VF" in out["FailedNodes"]["n1"]
    bind = {"PodName": "p", "PodNamespace": "default", "PodUID": uid_p, "Node": "n2"}
    assert ext.bind(bind, 0.0) == {"Error": ""}
    assert placed(c, "p") == ("n2", "eth0_0")
    uid_q = add_pod(c, vf_pod("q"))["metadata"]["uid"]
    assert ext.bind({**bind, "PodName": "q", "PodUID": uid_q}, 0.0) == {"Error": ""}
    assert placed(c, "q") == ("n2", "eth0_1")  # the extender's own reservation counted
    uid_r = add_pod(c, vf_pod("r"))["metadata"]["uid"]
    refused = ext.bind({**bind, "PodName": "r", "PodUID": uid_r}, 0.0)
    assert "no free RDMA-capable VF" in refused["Error"]


def test_the_dynamic_policy_reads_its_required_annotations_from_the_args() -> None:
    profile = (
        PROFILE
        + "  pluginConfig:\n  - name: SriovVF\n    args:\n      policy: dynamic\n"
        + "      podRequiredAnnotations: {rdma: big}\n"
    )
    ded = {"qos": names.QOS_DEDICATED_CORES, "memory_enhancement": {names.ENH_NUMA_BINDING: "true"}}
    c = cluster({"n1": [pf("eth0", 0, 2, queues=(8, 32))]})
    run(c, [vf_pod("plain", cpu="32", **ded)], profile)
    run(c, [vf_pod("big", cpu="32", annotations={"rdma": "big"}, **ded)], profile)
    assert (placed(c, "plain")[1], placed(c, "big")[1]) == ("eth0_0", "eth0_1")
