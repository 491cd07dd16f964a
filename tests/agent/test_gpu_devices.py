"""The node's cards: discovery (synthetic, a fake sysfs tree, a fake NVML), who holds them
(the kubelet's pod-resources grants) and the CNR's GPU zones built from both."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pykatalyst.agent import gpu
from pykatalyst.agent.agent import Agent
from pykatalyst.agent.config import AgentConfig
from pykatalyst.agent.config_sections import DevicesConfig
from pykatalyst.agent.enforcer import Enforcer
from pykatalyst.agent.host.devices import (
    DeviceUnavailable,
    GpuDevice,
    NvmlDevices,
    SyntheticDevices,
    SysfsDevices,
    function_numa,
    pci_address,
    pcie_switch_of,
)
from pykatalyst.agent.host.kubelet import (
    DeviceGrant,
    KubeletDevices,
    KubeletUnavailable,
    devices_from,
    messages,
)
from pykatalyst.agent.reporter import Reporter, ReportInput
from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology
from tests.agent.inmemory_host import InMemoryHost, node_json, pod_json

TOPO = CPUTopology.synthetic(2, 4, 2)  # two sockets, one NUMA node each
GPU_ = names.RESOURCE_NVIDIA_GPU
MEM = names.RESOURCE_GPU_MEMORY


# --- sysfs --------------------------------------------------------------------------------


def _function(root: Path, chain: list[str], *, vendor: str, cls: str, numa: int) -> None:
    """A PCI function at the end of `chain` (root complex, bridges..., device)."""
    path = root / "devices" / Path(*chain)
    path.mkdir(parents=True)
    (path / "vendor").write_text(f"{vendor}\n")
    (path / "class").write_text(f"{cls}\n")
    (path / "numa_node").write_text(f"{numa}\n")
    link = root / "bus" / "pci" / "devices" / chain[-1]
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(path)


def _sysfs(tmp_path: Path) -> tuple[Path, Path]:
    sys, proc = tmp_path / "sys", tmp_path / "proc"
    sw = ["pci0000:00", "0000:00:01.0", "0000:01:00.0"]  # root port, switch upstream port
    _function(sys, [*sw, "0000:02:08.0", "0000:03:00.0"], vendor="0x10de", cls="0x030200", numa=0)
    _function(sys, [*sw, "0000:02:10.0", "0000:04:00.0"], vendor="0x10de", cls="0x030200", numa=0)
    # straight on a root port of the other socket, no NUMA node reported
    _function(
        sys,
        ["pci0000:80", "0000:80:02.0", "0000:81:00.0"],
        vendor="0x10de",
        cls="0x030000",
        numa=-1,
    )
    # an NVIDIA audio function and someone else's card: not GPUs
    _function(sys, [*sw, "0000:02:08.0", "0000:03:00.1"], vendor="0x10de", cls="0x040300", numa=0)
    _function(
        sys, ["pci0000:00", "0000:00:05.0", "0000:05:00.0"], vendor="0x1002", cls="0x030000", numa=0
    )
    info = proc / "driver" / "nvidia" / "gpus" / "0000:03:00.0" / "information"
    info.parent.mkdir(parents=True)
    info.write_text("Model: \t\t NVIDIA A100-SXM4-80GB\nIRQ:   42\nDevice Minor: \t 3\n")
    return sys, proc


def test_sysfs_finds_nvidia_gpus_their_numa_node_and_pcie_switch(tmp_path: Path) -> None:
    sys, proc = _sysfs(tmp_path)
    cards = SysfsDevices(str(sys), str(proc)).gpus()
    assert [c.id for c in cards] == ["0000:03:00.0", "0000:04:00.0", "0000:81:00.0"]
    a, b, c = cards
    assert a.pcie_switch == b.pcie_switch == "0000:01:00.0"  # one switch, two cards
    assert c.pcie_switch == "0000:80:02.0"  # no switch: its root port
    assert (a.numa, c.numa) == (0, -1)
    assert (a.model, a.minor, a.device_nodes()) == ("NVIDIA A100-SXM4-80GB", 3, ("/dev/nvidia3",))
    assert b.minor is None and b.device_nodes() == ()


def test_sysfs_without_the_pci_tree_says_so(tmp_path: Path) -> None:
    with pytest.raises(DeviceUnavailable, match="cannot list"):
        SysfsDevices(str(tmp_path / "none")).gpus()


def test_pcie_switch_of_an_integrated_function_is_its_root_complex() -> None:
    assert pcie_switch_of(Path("/sys/devices/pci0000:00/0000:00:02.0")) == "pci0000:00"


# --- NVML ---------------------------------------------------------------------------------


class FakeNvml:
    """The part of `pynvml` the source calls; card `broken` fails its queries."""

    def __init__(self, buses: list[str], broken: int | None = None) -> None:
        self.buses = buses
        self.broken = broken
        self.inits = 0

    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.buses)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-{h:04d}"

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return SimpleNamespace(busId=self.buses[h].encode())

    def _check(self, h: int) -> None:
        if h == self.broken:
            raise RuntimeError("NVML_ERROR_GPU_IS_LOST")

    def nvmlDeviceGetName(self, h: int) -> str:
        self._check(h)
        return "NVIDIA H100"

    def nvmlDeviceGetMinorNumber(self, h: int) -> int:
        self._check(h)
        return h

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        self._check(h)
        return SimpleNamespace(total=80 * 2**30)


def test_nvml_cards_get_their_place_from_sysfs_and_a_lost_card_is_unhealthy(
    tmp_path: Path,
) -> None:
    sys, _ = _sysfs(tmp_path)
    nvml = FakeNvml(["00000000:03:00.0", "00000000:04:00.0", "00000000:81:00.0"], broken=1)
    source = NvmlDevices(str(sys), nvml)
    cards = source.gpus()
    source.gpus()
    assert nvml.inits == 1
    assert [c.id for c in cards] == ["GPU-0000", "GPU-0001", "GPU-0002"]
    assert cards[0] == GpuDevice("GPU-0000", 0, "0000:01:00.0", "NVIDIA H100", True, 0, 80 * 1024)
    assert not cards[1].healthy and cards[1].pcie_switch == "0000:01:00.0"
    assert cards[2].numa == -1


def test_nvml_missing_says_which_extra_brings_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys as _sys

    monkeypatch.setitem(_sys.modules, "pynvml", None)
    with pytest.raises(DeviceUnavailable, match=r"pykatalyst\[gpu\]"):
        NvmlDevices().gpus()


@given(st.integers(0, 0xFFFF), st.integers(0, 0xFF), st.integers(0, 0x1F), st.integers(0, 7))
def test_nvml_bus_ids_read_as_sysfs_addresses(dom: int, bus: int, dev: int, fn: int) -> None:
    nvml = f"{dom:08X}:{bus:02X}:{dev:02X}.{fn}"
    assert pci_address(nvml) == f"{dom:04x}:{bus:02x}:{dev:02x}.{fn}"


# --- synthetic ----------------------------------------------------------------------------


def test_synthetic_cards_follow_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    gpus = "devices:\n  source: synthetic\n  gpus:\n  - {id: g0}\n  - {id: g1, healthy: %s}\n"
    path.write_text(gpus % "true")
    cfg = DevicesConfig.model_validate({"source": "synthetic", "gpus": [{"id": "g0"}]})
    source = gpu.device_source(cfg, path)
    assert [c.healthy for c in source.gpus()] == [True, True]
    path.write_text(gpus % "false")
    assert [c.healthy for c in source.gpus()] == [True, False]
    path.write_text("devices: {gpus: [{id: 'a,b'}]}")  # refused: the last good list stays
    assert [c.id for c in source.gpus()] == ["g0", "g1"]


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ({"source": "cuda"}, "source"),
        ({"gpus": [{"id": "a"}, {"id": "a"}]}, "unique"),
        ({"gpus": [{"id": "x,y"}]}, "id"),
        ({"gpu_memory_per_gpu": 0}, "gpu_memory_per_gpu"),
    ],
)
def test_bad_devices_sections_are_refused_naming_the_field(
    section: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValueError, match=field):
        DevicesConfig.model_validate(section)


# --- holds and zones ----------------------------------------------------------------------


def test_pod_resources_device_grants_are_read_with_their_numa_nodes() -> None:
    msgs = messages()
    listed = msgs["ListPodResourcesResponse"]()
    pod = listed.pod_resources.add(name="train", namespace="ml")
    c = pod.containers.add(name="main")
    d = c.devices.add(resource_name=GPU_, device_ids=["g1::s0"])
    d.topology.nodes.add(ID=1)
    c.devices.add(resource_name="example.com/other", device_ids=["x"])
    alloc = msgs["AllocatableResourcesResponse"]()
    alloc.devices.add(resource_name=MEM, device_ids=["g1::m0", "g1::m1"])
    out = devices_from(
        msgs["ListPodResourcesResponse"].FromString(listed.SerializeToString()),
        alloc,
        gpu.GPU_RESOURCES,
    )
    assert out.containers == (DeviceGrant(GPU_, ("g1::s0",), (1,), "ml", "train", "main"),)
    assert out.allocatable == (DeviceGrant(MEM, ("g1::m0", "g1::m1")),)


def _grant(pod: str, resource: str, ids: list[str]) -> DeviceGrant:
    return DeviceGrant(resource, tuple(ids), (), "ns", pod, "c")


def test_holds_are_units_on_a_card_or_the_whole_card() -> None:
    holds = gpu.holds_from(
        [
            _grant("share", GPU_, ["g0::s3"]),
            _grant("share", MEM, [f"g0::m{k}" for k in range(30)]),
            _grant("whole", GPU_, ["g1"]),  # a vendor plugin's card id
            _grant("slot", GPU_, ["g2::s0"]),  # a slot without memory: the card whole
        ],
        100,
    )
    assert [(h.pod, h.card, h.units, h.whole) for h in holds] == [
        ("share", "g0", 30, False),
        ("slot", "g2", 100, True),
        ("whole", "g1", 100, True),
    ]


def _cards(n: int, unhealthy: frozenset[int] = frozenset()) -> list[GpuDevice]:
    return [
        GpuDevice(f"g{i}", i % 3 - 1, f"sw{i // 2}", "A100", i not in unhealthy) for i in range(n)
    ]


@given(
    st.integers(1, 6),
    st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(1, 60)), max_size=12),
    st.frozensets(st.integers(0, 5)),
)
def test_gpu_zones_add_up_to_the_cards_and_the_holds(
    n: int, pods: list[tuple[int, int, int]], unhealthy: frozenset[int]
) -> None:
    cards = _cards(n, unhealthy)
    grants = []
    for p, card, units in pods:
        if card < n:
            grants.append(_grant(f"p{p}", GPU_, [f"g{card}::s{p}"]))
            grants.append(_grant(f"p{p}", MEM, [f"g{card}::m{p}-{k}" for k in range(units)]))
    holds = gpu.holds_from(grants, 100)
    zones = gpu.gpu_zones(cards, holds, 100, TOPO, lambda key: "uid-" + key)
    flat = [z for zs in zones.values() for z in zs]
    assert sorted(z["name"] for z in flat) == [c.id for c in cards]
    for numa, zs in zones.items():
        assert numa in TOPO.numa_nodes
        for z in zs:
            attrs = {a["name"]: a["value"] for a in z["attributes"]}
            assert attrs[names.GPU_ATTR_NUMA] == str(numa)
            healthy = z["name"] not in {f"g{i}" for i in unhealthy}
            assert z["resources"]["allocatable"][GPU_] == ("1" if healthy else "0")
            assert z["resources"]["capacity"] == {GPU_: "1", MEM: "100"}
            held = sum(h.units for h in holds if h.card == z["name"])
            listed = sum(int(a["requests"][MEM]) for a in z.get("allocations", []))
            assert listed == held
            assert all(a["consumer"].startswith("ns/") for a in z.get("allocations", []))


def test_the_cnr_carries_gpu_zones_under_numa_and_the_attribute_key() -> None:
    clock = VirtualClock(100)
    cluster = MemoryCluster(clock=clock)
    cluster.create(names.NODE, node_json("n1"))
    from pykatalyst.agent.config import ReporterConfig

    rep = Reporter("n1", cluster, ReporterConfig(period_s=5))
    cards = [GpuDevice("g0", 0, "sw0", "A100"), GpuDevice("g1", 1, "sw1", "A100", healthy=False)]
    holds = gpu.holds_from([_grant("a", GPU_, ["g0::s0"]), _grant("a", MEM, ["g0::m0"])], 100)
    zones = gpu.gpu_zones(cards, holds, 100, TOPO, {"ns/a": "u1"}.get)
    props = gpu.resource_properties(cards)
    rep.report(
        ReportInput(TOPO, CPUSet(), None, None, gpu_zones=zones, resource_properties=props), 100
    )
    cnr = cluster.get(names.CUSTOM_NODE_RESOURCE, "n1")
    numa0 = cnr["status"]["topologyZone"][0]["children"][0]
    (g0,) = numa0["children"]
    assert (g0["type"], g0["name"]) == (names.ZONE_GPU, "g0")
    assert g0["allocations"] == [{"consumer": "ns/a/u1", "requests": {GPU_: "1", MEM: "1"}}]
    assert {"name": names.GPU_ATTR_SOCKET, "value": "0"} in g0["attributes"]
    g1 = cnr["status"]["topologyZone"][1]["children"][0]["children"][0]
    assert g1["resources"]["allocatable"][GPU_] == "0"
    assert cnr["spec"]["nodeResourceProperties"] == [
        {
            "propertyName": names.GPU_TOPOLOGY_ATTRIBUTE_KEY,
            "propertyValues": ["pcie_switch", "numa", "socket"],
        }
    ]


class Grants:
    """The kubelet's pod-resources, as far as devices go; None: it cannot be asked."""

    def __init__(self) -> None:
        self.containers: list[DeviceGrant] | None = []

    def device_assignments(self, resources: frozenset[str]) -> KubeletDevices:
        if self.containers is None:
            raise KubeletUnavailable("no pod-resources socket at /nowhere")
        return KubeletDevices(tuple(g for g in self.containers if g.resource in resources))


def test_the_agent_reports_its_cards_and_the_pods_holding_them() -> None:
    clock = VirtualClock(10_000)
    cluster = MemoryCluster(clock=clock)
    cluster.create(names.NODE, node_json("node-1"))
    host = InMemoryHost(TOPO)
    cards = [GpuDevice("g0", 0, "sw0"), GpuDevice("g1", 1, "sw1")]
    grants = Grants()
    agent = Agent(
        "node-1",
        cluster,
        host,
        clock,
        AgentConfig.model_validate({"devices": {"source": "synthetic"}}),
        Enforcer(host, None, clock),
        devices=SyntheticDevices(lambda: cards),
        device_view=grants,
    )
    obj = cluster.create(names.POD, pod_json("train"), "default")
    host.add_pod(str(obj["metadata"]["uid"]))
    assert grants.containers is not None
    grants.containers += [
        _grant("train", GPU_, ["g1::s0"]),
        _grant("train", MEM, [f"g1::m{k}" for k in range(40)]),
    ]
    grants.containers = [
        replace(g, namespace="default", container="app") for g in grants.containers
    ]

    def g1() -> dict[str, Any]:
        cnr = cluster.get(names.CUSTOM_NODE_RESOURCE, "node-1")
        return dict(cnr["status"]["topologyZone"][1]["children"][0]["children"][0])

    plan = agent.reconcile(clock.now())
    assert plan.report["gpus"] == "cards and holds read"
    consumer = f"default/train/{obj['metadata']['uid']}"
    assert g1()["allocations"] == [{"consumer": consumer, "requests": {GPU_: "1", MEM: "40"}}]
    # the kubelet unreachable: capacity only, and the plan says why
    grants.containers = None
    clock.advance(5)
    plan = agent.reconcile(clock.now())
    assert plan.report["gpus"].startswith("holds unknown: no pod-resources socket")
    assert "allocations" not in g1()


# --- NUMA node from the function's local cpus ----------------------------------------------


def _nodes(sys: Path, cpulists: dict[int, str]) -> None:
    for node, text in cpulists.items():
        d = sys / "devices" / "system" / "node" / f"node{node}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(f"{text}\n")


def test_a_card_whose_firmware_reports_no_numa_node_is_placed_by_its_local_cpus(
    tmp_path: Path,
) -> None:
    # what a GPU virtual machine shows: numa_node -1, local_cpulist the cpus of one node
    sys, proc = _sysfs(tmp_path)
    _nodes(sys, {0: "0-3", 1: "4-7"})
    far = sys / "bus" / "pci" / "devices" / "0000:81:00.0"
    (far / "local_cpulist").write_text("4-7\n")
    cards = {c.id: c for c in SysfsDevices(str(sys), str(proc)).gpus()}
    assert cards["0000:81:00.0"].numa == 1
    assert cards["0000:03:00.0"].numa == 0  # numa_node itself still wins
    (far / "local_cpulist").write_text("0-7\n")  # cpus of both nodes: no one node
    assert {c.id: c.numa for c in SysfsDevices(str(sys), str(proc)).gpus()}["0000:81:00.0"] == -1
    (far / "local_cpulist").write_text("junk\n")
    assert {c.id: c.numa for c in SysfsDevices(str(sys), str(proc)).gpus()}["0000:81:00.0"] == -1


@given(
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    local=st.sets(st.integers(0, 15), min_size=1, max_size=16),
)
def test_function_numa_names_the_one_node_holding_every_local_cpu(
    sizes: list[int], local: set[int]
) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        sys = Path(tmp)
        nodes: dict[int, set[int]] = {}
        start = 0
        for n, size in enumerate(sizes):
            nodes[n] = set(range(start, start + size))
            start += size
        _nodes(sys, {n: str(CPUSet.of(cpus)) for n, cpus in nodes.items()})
        fn = sys / "devices" / "pci0000:00" / "0000:00:06.0"
        fn.mkdir(parents=True)
        (fn / "numa_node").write_text("-1\n")
        (fn / "local_cpulist").write_text(f"{CPUSet.of(local)}\n")
        got = function_numa(sys, fn)
        holders = [n for n, cpus in nodes.items() if local <= cpus]
        assert got == (holders[0] if holders else -1)
        if got >= 0:
            assert local <= nodes[got]
