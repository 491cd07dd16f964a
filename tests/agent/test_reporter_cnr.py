"""The reporter: CNR (created if missing), Node extended resources, heartbeat, terms."""

from __future__ import annotations

import json
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.agent import reporter
from pykatalyst.agent.config import ReporterConfig
from pykatalyst.agent.reporter import NumaAllocation, PodCpus, Reporter, ReportInput
from pykatalyst.api import names
from pykatalyst.api.quantity import Quantity
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.protocol import ApiError
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology
from tests.agent.inmemory_host import GIB, node_json

TOPO = CPUTopology.synthetic(2, 4, 2, memory_per_numa=16 * GIB)


def setup() -> tuple[VirtualClock, MemoryCluster, Reporter]:
    clock = VirtualClock(100)
    cluster = MemoryCluster(clock=clock)
    cluster.create(names.NODE, node_json("n1"))
    return clock, cluster, Reporter("n1", cluster, ReporterConfig(period_s=5))


def inp(cpu: float | None = 12.0, mem: float | None = 20 * GIB) -> ReportInput:
    return ReportInput(
        TOPO,
        CPUSet(),
        cpu,
        mem,
        {0: (cpu or 0) / 2, 1: (cpu or 0) / 2},
        {0: (mem or 0) / 2, 1: (mem or 0) / 2},
        [NumaAllocation("default/db/uid-1", 1, 2, GIB)],
        {"why": "test"},
    )


def test_creates_the_cnr_and_publishes_reclaimed_figures() -> None:
    _, cluster, rep = setup()
    rep.report(inp(), 100)
    cnr = cluster.get(names.CUSTOM_NODE_RESOURCE, "n1")
    res = cnr["status"]["resources"]
    assert res["allocatable"][names.RECLAIMED_MILLICPU] == "12k"
    assert res["capacity"][names.RECLAIMED_MEMORY] == "20Gi"
    node = cluster.get(names.NODE, "n1")
    assert node["status"]["allocatable"][names.RECLAIMED_MILLICPU] == "12k"
    assert cnr["metadata"]["ownerReferences"][0]["name"] == "n1"
    ann = json.loads(cnr["metadata"]["annotations"][names.RECLAIMED_TERMS_ANNOTATION])
    assert ann == {"why": "test"}


def test_topology_zones_are_sockets_with_numa_children_and_allocations() -> None:
    _, cluster, rep = setup()
    rep.report(inp(), 100)
    zones = cluster.get(names.CUSTOM_NODE_RESOURCE, "n1")["status"]["topologyZone"]
    assert [z["type"] for z in zones] == [names.ZONE_SOCKET, names.ZONE_SOCKET]
    numa1 = zones[1]["children"][0]
    assert numa1["type"] == names.ZONE_NUMA and numa1["name"] == "1"
    assert numa1["resources"]["capacity"]["cpu"] == "8"
    assert numa1["resources"]["allocatable"][names.RECLAIMED_MILLICPU] == "6k"
    # Reclaimed per NUMA is in capacity as well as allocatable, as Katalyst's agent writes it.
    assert numa1["resources"]["capacity"][names.RECLAIMED_MILLICPU] == "6k"
    assert numa1["resources"]["capacity"][names.RECLAIMED_MEMORY] == "10Gi"
    assert numa1["allocations"][0]["consumer"] == "default/db/uid-1"
    assert "allocations" not in zones[0]["children"][0]


def test_writes_only_on_change_but_refreshes_the_heartbeat() -> None:
    _, cluster, rep = setup()
    rep.report(inp(), 100)
    rv = cluster.get(names.CUSTOM_NODE_RESOURCE, "n1")["metadata"]["resourceVersion"]
    assert rep.report(inp(), 102)["cnr"] == "unchanged"
    assert cluster.get(names.CUSTOM_NODE_RESOURCE, "n1")["metadata"]["resourceVersion"] == rv
    assert rep.report(inp(), 105)["cnr"] == "heartbeat"
    cond = cluster.get(names.CUSTOM_NODE_RESOURCE, "n1")["status"]["conditions"][0]
    assert cond["type"] == names.CNR_CONDITION_AGENT_READY
    assert cond["lastHeartbeatTime"] == "1970-01-01T00:01:45Z"
    assert rep.report(inp(cpu=10.0), 106)["cnr"] == "status written"


def test_nothing_is_published_while_the_window_fills() -> None:
    _, cluster, rep = setup()
    rep.report(inp(cpu=None, mem=None), 100)
    cnr = cluster.get(names.CUSTOM_NODE_RESOURCE, "n1")
    assert "resources" not in cnr["status"] or not cnr["status"]["resources"].get("allocatable")
    # but the heartbeat is there
    assert cnr["status"]["conditions"][0]["status"] == "True"
    node = cluster.get(names.NODE, "n1")
    assert names.RECLAIMED_MILLICPU not in node["status"].get("allocatable", {})


def test_an_existing_cnr_is_updated_not_recreated() -> None:
    _, cluster, rep = setup()
    created = cluster.create(
        names.CUSTOM_NODE_RESOURCE,
        {"metadata": {"name": "n1", "labels": {"keep": "me"}}, "spec": {}},
    )
    rep.report(inp(), 100)
    cnr = cluster.get(names.CUSTOM_NODE_RESOURCE, "n1")
    assert cnr["metadata"]["uid"] == created["metadata"]["uid"]
    assert cnr["metadata"]["labels"] == {"keep": "me"}


def test_a_deleted_cnr_is_recreated_after_an_api_error() -> None:
    _, cluster, rep = setup()
    rep.report(inp(), 100)
    cluster.delete(names.CUSTOM_NODE_RESOURCE, "n1")
    out = rep.report(inp(cpu=8.0), 110)
    assert "error" in out
    rep.report(inp(cpu=8.0), 111)
    cnr = cluster.get(names.CUSTOM_NODE_RESOURCE, "n1")
    assert cnr["status"]["resources"]["allocatable"][names.RECLAIMED_MILLICPU] == "8k"


def test_node_figures_are_sent_again_after_someone_erased_them() -> None:
    _, cluster, rep = setup()
    rep.report(inp(), 100)
    cluster.patch(
        names.NODE,
        "n1",
        {"status": {"capacity": {names.RECLAIMED_MILLICPU: None}}},
        subresource="status",
    )
    assert rep.report(inp(), 110)["node"] == "unchanged"
    assert rep.report(inp(), 400)["node"] == "written"
    node = cluster.get(names.NODE, "n1")
    assert node["status"]["capacity"][names.RECLAIMED_MILLICPU] == "12k"


def with_pools(share: str = "2-7") -> ReportInput:
    pools = {names.POOL_SHARE: CPUSet.parse(share), names.POOL_RECLAIM: CPUSet.parse("8-15")}
    pods = [
        PodCpus("default/web", "uid-2", names.POOL_SHARE, CPUSet.parse(share)),
        PodCpus("default/new", "uid-3", names.POOL_SHARE, CPUSet.parse("2-15"), ramping_up=True),
    ]
    return replace(inp(), pools=pools, pod_cpus=pods)


def pools_of(cluster: MemoryCluster) -> dict[str, object]:
    cnr = cluster.get(names.CUSTOM_NODE_RESOURCE, "n1")
    value: dict[str, object] = json.loads(
        cnr["metadata"]["annotations"][names.CPU_POOLS_ANNOTATION]
    )
    return value


def test_pools_and_pod_cpusets_are_published_on_change_only() -> None:
    _, cluster, rep = setup()
    assert rep.report(with_pools(), 100)["pools"] == "written"
    assert pools_of(cluster) == {
        "pools": {names.POOL_RECLAIM: "8-15", names.POOL_SHARE: "2-7"},
        "pods": [
            {
                "pod": "default/new",
                "uid": "uid-3",
                "pool": names.POOL_SHARE,
                "cpuset": "2-15",
                "ramping_up": True,
            },
            {"pod": "default/web", "uid": "uid-2", "pool": names.POOL_SHARE, "cpuset": "2-7"},
        ],
    }
    rv = cluster.get(names.CUSTOM_NODE_RESOURCE, "n1")["metadata"]["resourceVersion"]
    assert rep.report(with_pools(), 102)["pools"] == "unchanged"
    assert cluster.get(names.CUSTOM_NODE_RESOURCE, "n1")["metadata"]["resourceVersion"] == rv
    assert rep.report(with_pools("2-9"), 103)["pools"] == "written"
    assert pools_of(cluster)["pools"] == {names.POOL_RECLAIM: "8-15", names.POOL_SHARE: "2-9"}


_pod_cpus = st.builds(
    PodCpus,
    pod=st.sampled_from(["default/a", "default/b", "batch/c"]),
    uid=st.sampled_from(["uid-1", "uid-2"]),
    pool=st.sampled_from([names.POOL_SHARE, names.POOL_RECLAIM]),
    cpuset=st.sampled_from(["2-7", "2-9", "8-15"]).map(CPUSet.parse),
    ramping_up=st.booleans(),
)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(_pod_cpus, max_size=4), min_size=1, max_size=6))
def test_each_report_publishes_the_pools_annotation_of_its_own_pods(
    reports: list[list[PodCpus]],
) -> None:
    """However the node's pods and their cpus change from report to report, the text
    published is the annotation of that report's pods: one that changed is never taken
    for the one last written."""
    _, cluster, rep = setup()
    pools = {names.POOL_SHARE: CPUSet.parse("2-7"), names.POOL_RECLAIM: CPUSet.parse("8-15")}
    for i, pods in enumerate(reports):
        assert "error" not in rep.report(replace(inp(), pools=pools, pod_cpus=pods), 100 + i)
        cnr = cluster.get(names.CUSTOM_NODE_RESOURCE, "n1")
        published = cnr["metadata"]["annotations"][names.CPU_POOLS_ANNOTATION]
        assert published == reporter.pools_annotation(pools, pods)


def test_pools_are_published_again_after_an_api_error() -> None:
    _, cluster, rep = setup()
    rep.report(with_pools(), 100)
    cluster.delete(names.CUSTOM_NODE_RESOURCE, "n1")
    assert "error" in rep.report(with_pools(), 110)
    assert rep.report(with_pools(), 111)["pools"] == "written"
    assert pools_of(cluster)["pools"] == {names.POOL_RECLAIM: "8-15", names.POOL_SHARE: "2-7"}


def test_pools_and_terms_that_change_together_go_in_one_write() -> None:
    """A tick that changes both annotations writes the CNR's metadata once; a write the
    API refuses leaves neither remembered, so both go again on the next tick."""
    _, cluster, rep = setup()
    writes: list[list[str]] = []
    real_patch = cluster.patch
    refuse = [False]

    def patch(kind, name, body, *args, **kwargs):  # type: ignore[no-untyped-def]
        ann = (body.get("metadata") or {}).get("annotations")
        if kind == names.CUSTOM_NODE_RESOURCE and ann:
            writes.append(sorted(ann))
            if refuse[0]:
                raise ApiError("refused")
        return real_patch(kind, name, body, *args, **kwargs)

    cluster.patch = patch  # type: ignore[method-assign]
    both = sorted([names.CPU_POOLS_ANNOTATION, names.RECLAIMED_TERMS_ANNOTATION])
    out = rep.report(with_pools(), 100)
    assert (out["pools"], out["terms"]) == ("written", "written")
    assert writes == [both]
    refuse[0] = True
    out = rep.report(replace(with_pools("2-9"), cpu_cores=10.0), 101)
    assert "error" in out and "pools" not in out and "terms" not in out
    refuse[0] = False
    out = rep.report(replace(with_pools("2-9"), cpu_cores=10.0), 102)
    assert (out["pools"], out["terms"]) == ("written", "written")
    assert writes[1:] == [both, both]
    assert pools_of(cluster)["pools"][names.POOL_SHARE] == "2-9"  # type: ignore[index]
    assert rep.report(replace(with_pools("2-9"), cpu_cores=10.0), 103)["pools"] == "unchanged"
    assert len(writes) == 3


def test_capacity_that_grows_reaches_the_node_before_the_cnr_and_shrinks_the_other_way() -> None:
    """The kubelet admits reclaimed pods by the Node, a scheduler places them by the CNR: a
    scheduler must never see capacity the Node does not show yet."""
    _, cluster, rep = setup()
    writes: list[tuple[str, str]] = []
    real_patch = cluster.patch

    def patch(kind, name, body, *args, **kwargs):  # type: ignore[no-untyped-def]
        status = body.get("status") or {}
        alloc = status.get("allocatable") or (status.get("resources") or {}).get("allocatable")
        if kind in (names.NODE, names.CUSTOM_NODE_RESOURCE) and alloc:
            who = "node" if kind == names.NODE else "cnr"
            writes.append((who, str(alloc.get(names.RECLAIMED_MILLICPU))))
        return real_patch(kind, name, body, *args, **kwargs)

    cluster.patch = patch  # type: ignore[method-assign]
    rep.report(inp(cpu=4.0), 100)  # first figures: the Node first
    rep.report(inp(cpu=12.0), 101)  # grows
    rep.report(inp(cpu=2.0), 102)  # shrinks
    firsts = [w for w in writes if w[1] in ("4k", "12k", "2k")]
    assert firsts == [
        ("node", "4k"),
        ("cnr", "4k"),
        ("node", "12k"),
        ("cnr", "12k"),
        ("cnr", "2k"),
        ("node", "2k"),
    ], writes


@given(
    values=st.lists(
        st.one_of(st.integers(0, 2**50), st.floats(0, 2**40, allow_nan=False)), max_size=30
    )
)
def test_remembered_figure_text_is_the_quantity_text(values: list[float]) -> None:
    """The status's figures (bytes, cores, milli-cores) are remembered by value and type:
    each text is the one the Quantity would print, whatever was asked before (1 and 1.0
    are different keys)."""
    for v in values:
        n = max(int(v), 0)
        assert reporter._mem_q(v) == str(Quantity.from_bytes(n))
        assert reporter._cpu_q(v / 1000) == str(Quantity.from_int(reporter.milli_cpu(v / 1000)))
        assert reporter._milli_text(n) == str(Quantity.from_milli(n))
        assert reporter._int_text(n) == str(Quantity.from_int(n))
