"""The node's NICs: discovery (synthetic, a fake sysfs tree, this machine's sysfs), the
bandwidth each gives out (Katalyst's rates and reserve) and the CNR's NIC zones with the
pods holding bandwidth."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.agent import nic
from pykatalyst.agent.agent import Agent
from pykatalyst.agent.config import AgentConfig, load_config
from pykatalyst.agent.config_sections import DevicesConfig, NicsConfig
from pykatalyst.agent.enforcer import Enforcer
from pykatalyst.agent.host.devices import DeviceUnavailable
from pykatalyst.agent.host.nics import (
    UNKNOWN_SPEED,
    NicDevice,
    SyntheticNics,
    SysfsNics,
    pci_function_of,
    speed_of,
)
from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.topology.machine import CPUTopology
from tests.agent.inmemory_host import InMemoryHost, node_json, pod_json

TOPO = CPUTopology.synthetic(2, 4, 2)  # two sockets, one NUMA node each
BW = names.RESOURCE_NET_BANDWIDTH

# --- sysfs --------------------------------------------------------------------------------


def _iface(
    sys: Path, name: str, device: Path | None, *, speed: str = "", state: str = "up"
) -> None:
    """/sys/class/net/<name> -> the interface's directory under `device` (or virtual)."""
    home = (device if device is not None else sys / "devices" / "virtual") / "net" / name
    home.mkdir(parents=True)
    if speed:
        (home / "speed").write_text(f"{speed}\n")
    (home / "operstate").write_text(f"{state}\n")
    if device is not None:
        (home / "device").symlink_to(device)
    link = sys / "class" / "net" / name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(home)


def _pci(sys: Path, *chain: str, numa: int) -> Path:
    path = sys / "devices" / Path(*chain)
    path.mkdir(parents=True, exist_ok=True)
    (path / "numa_node").write_text(f"{numa}\n")
    return path


def _sysfs(tmp_path: Path) -> Path:
    sys = tmp_path / "sys"
    # a virtio NIC (a cloud VM's): the net device hangs off virtio2, under the PCI function
    virtio = _pci(sys, "pci0000:00", "0000:00:03.0", numa=-1) / "virtio2"
    virtio.mkdir()
    _iface(sys, "eth0", virtio, speed="-1")
    # a 100G NIC behind a PCIe switch of socket 1, and its second port with the link down
    sw = ("pci0000:80", "0000:80:01.0", "0000:81:00.0", "0000:82:08.0")
    _iface(sys, "ens1f0", _pci(sys, *sw, "0000:83:00.0", numa=1), speed="100000")
    _iface(sys, "ens1f1", _pci(sys, *sw, "0000:83:00.1", numa=1), state="down")
    # what is not a NIC: loopback, a veth, a bridge; and a bond, which is one
    for name in ("lo", "veth1234", "cni0", "bond0"):
        _iface(sys, name, None, speed="10000")
    (sys / "class" / "net" / "bonding_masters").write_text("bond0\n")
    return sys


def test_sysfs_finds_physical_nics_with_speed_numa_and_pcie_switch(tmp_path: Path) -> None:
    nics = SysfsNics(str(_sysfs(tmp_path))).nics()
    by = {n.name: n for n in nics}
    assert sorted(by) == ["bond0", "ens1f0", "ens1f1", "eth0"]  # no lo, veth, bridge
    eth0, f0, f1 = by["eth0"], by["ens1f0"], by["ens1f1"]
    assert (eth0.pci_address, eth0.speed_mbps, eth0.numa) == ("0000:00:03.0", UNKNOWN_SPEED, -1)
    assert eth0.pcie_switch == "pci0000:00"  # integrated: its root complex
    assert (f0.speed_mbps, f0.numa, f0.pcie_switch) == (100000, 1, "0000:81:00.0")
    assert f1.pcie_switch == f0.pcie_switch and not f1.healthy  # link down
    assert f1.speed_mbps == UNKNOWN_SPEED
    assert (by["bond0"].pci_address, by["bond0"].speed_mbps) == ("", 10000)
    assert all(n.netns == "" and n.identifier == n.name for n in nics)


def test_a_virtual_machines_nic_without_numa_node_is_placed_by_its_local_cpus(
    tmp_path: Path,
) -> None:
    sys = _sysfs(tmp_path)
    for node, cpus in ((0, "0-15"), (1, "16-31")):
        d = sys / "devices" / "system" / "node" / f"node{node}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(f"{cpus}\n")
    (sys / "devices" / "pci0000:00" / "0000:00:03.0" / "local_cpulist").write_text("0-15\n")
    by = {n.name: n for n in SysfsNics(str(sys)).nics()}
    assert by["eth0"].numa == 0
    assert by["ens1f0"].numa == 1  # its numa_node is read first


def test_sysfs_without_class_net_says_so(tmp_path: Path) -> None:
    with pytest.raises(DeviceUnavailable, match="cannot list"):
        SysfsNics(str(tmp_path / "none")).nics()


@pytest.mark.skipif(
    not any(
        (Path("/sys/class/net") / n / "device").exists()
        for n in (os.listdir("/sys/class/net") if Path("/sys/class/net").is_dir() else [])
    ),
    reason="this machine's sysfs shows no PCI network interface",
)
def test_this_machines_pci_nics_are_found() -> None:
    nics = SysfsNics("/sys").nics()
    names_ = {n.name for n in nics}
    assert "lo" not in names_
    pci = {
        n
        for n in os.listdir("/sys/class/net")
        if (Path("/sys/class/net") / n / "device").exists()
        and pci_function_of((Path("/sys/class/net") / n / "device").resolve()) is not None
    }
    assert pci and pci <= names_
    assert all(n.pci_address for n in nics if n.name in pci)


@given(st.text(max_size=12))
def test_speed_reads_any_text_as_a_positive_rate_or_unknown(text: str) -> None:
    value = speed_of(text)
    assert value == UNKNOWN_SPEED or value > 0
    if value > 0:
        assert value == int(text.strip())


_IFACES = st.lists(
    st.tuples(
        st.sampled_from(["pci", "virtio", "virtual", "bond"]),
        st.sampled_from(["25000", "-1", "", "100000", "x"]),
        st.integers(-1, 3),
        st.sampled_from(["up", "down"]),
    ),
    max_size=6,
)


@settings(max_examples=40, deadline=None)
@given(_IFACES)
def test_sysfs_reports_exactly_the_physical_interfaces_as_written(
    ifaces: list[tuple[str, str, int, str]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        sys = Path(tmp) / "sys"
        (sys / "class" / "net").mkdir(parents=True)
        want = {}
        bonds = []
        for i, (kind, speed, numa, state) in enumerate(ifaces):
            name = f"if{i}"
            device = None
            if kind in ("pci", "virtio"):
                device = _pci(sys, "pci0000:00", "0000:00:01.0", f"0000:01:{i:02x}.0", numa=numa)
                if kind == "virtio":
                    device = device / f"virtio{i}"
                    device.mkdir()
            _iface(sys, name, device, speed=speed, state=state)
            if kind == "bond":
                bonds.append(name)
            if kind != "virtual":
                rate = int(speed) if speed.lstrip("-").isdigit() and int(speed) > 0 else -1
                want[name] = (rate, numa if device is not None else -1, state == "up")
        (sys / "class" / "net" / "bonding_masters").write_text(" ".join(bonds) + "\n")
        got = {n.name: (n.speed_mbps, n.numa, n.healthy) for n in SysfsNics(str(sys)).nics()}
    assert got == want


_BDFS = st.builds(
    "{:04x}:{:02x}:{:02x}.{}".format,
    st.integers(0, 0xFFFF),
    st.integers(0, 0xFF),
    st.integers(0, 0x1F),
    st.integers(0, 7),
)
_NAMES = st.sampled_from(["virtio0", "net", "usb1", "1-1:1.0", "ssb0"])


@given(st.lists(_BDFS, max_size=4), st.lists(_NAMES, max_size=3))
def test_the_pci_function_of_a_device_path_is_its_last_pci_address(
    bridges: list[str], tail: list[str]
) -> None:
    path = Path("/sys/devices/pci0000:00", *bridges, *tail)
    found = pci_function_of(path)
    assert (found.name if found else None) == (bridges[-1] if bridges else None)


# --- capacity -----------------------------------------------------------------------------


def test_capacity_is_line_rate_times_katalysts_rates_less_the_reserve_on_the_first() -> None:
    cfg = NicsConfig(reserved_bandwidth_mbps=1000)
    nics = [NicDevice("eth1", speed_mbps=25000), NicDevice("eth0", speed_mbps=25000)]
    a, b = nic.capacities(nics, cfg)
    assert (a.nic.name, a.egress, a.ingress, a.reserved) == ("eth0", 23500, 22500, 1000)
    assert (a.capacity, a.allocatable) == (22500, 21500)
    assert (b.nic.name, b.reserved, b.allocatable) == ("eth1", 0, 22500)


def test_unknown_speed_uses_the_fallback_and_an_unhealthy_nic_gives_nothing() -> None:
    nics = [NicDevice("eth0"), NicDevice("eth1", speed_mbps=10000, healthy=False)]
    a, b = nic.capacities(nics, NicsConfig())
    assert (a.speed_mbps, a.capacity, a.allocatable) == (0, 0, 0)
    assert (b.capacity, b.allocatable) == (9000, 0)
    (a,) = nic.capacities(nics[:1], NicsConfig(unknown_speed_mbps=10000))
    assert (a.speed_mbps, a.allocatable) == (10000, 9000)


@given(
    st.lists(st.integers(-1, 400_000), min_size=1, max_size=6),
    st.floats(0.01, 1),
    st.floats(0.01, 1),
    st.integers(0, 500_000),
)
def test_bandwidth_given_out_never_exceeds_the_rated_line_rate(
    speeds: list[int], egress: float, ingress: float, reserve: int
) -> None:
    cfg = NicsConfig(
        egress_capacity_rate=egress, ingress_capacity_rate=ingress, reserved_bandwidth_mbps=reserve
    )
    nics = [NicDevice(f"eth{i}", speed_mbps=s) for i, s in enumerate(speeds)]
    caps = nic.capacities(nics, cfg)
    assert sum(c.reserved for c in caps) == reserve
    for c in caps:
        assert 0 <= c.allocatable <= c.capacity <= max(c.speed_mbps, 0)
        assert c.allocatable == max(min(c.egress, c.ingress) - c.reserved, 0)


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ({"source": "dpdk"}, "source"),
        ({"egress_capacity_rate": 1.5}, "egress_capacity_rate"),
        ({"reserved_bandwidth_mbps": -1}, "reserved_bandwidth_mbps"),
        ({"interfaces": [{"name": "eth0", "speed_mbps": 0}]}, "speed_mbps"),
        ({"interfaces": [{"name": "a/b", "speed_mbps": 1}]}, "name"),
        (
            {"interfaces": [{"name": "e", "speed_mbps": 1}, {"name": "e", "speed_mbps": 2}]},
            "unique",
        ),
    ],
)
def test_bad_nic_sections_are_refused_naming_the_field(section: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        DevicesConfig.model_validate({"nic": section})


def test_synthetic_nics_follow_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    text = (
        "devices:\n  nic:\n    source: synthetic\n    interfaces:\n"
        "    - {name: eth0, speed_mbps: 25000, healthy: %s}\n"
        "    - {name: eth0, netns: ns2, speed_mbps: 25000}\n"
    )
    path.write_text(text % "true")
    cfg = DevicesConfig.model_validate({"nic": {"source": "synthetic"}})
    source = nic.nic_source(cfg, path)
    found = [(n.identifier, n.healthy) for n in source.nics()]
    assert found == [("eth0", True), ("ns2-eth0", True)]
    path.write_text(text % "false")
    assert [n.healthy for n in source.nics()] == [False, True]
    path.write_text("devices: {nic: {interfaces: [{name: x}]}}")  # refused: last good list
    assert len(source.nics()) == 2


def test_the_example_declares_three_nics_and_the_reserve_lands_on_eth0() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "agent" / "synthetic-nics.yaml"
    cfg = load_config(example).devices
    caps = nic.capacities(nic.nic_source(cfg, example).nics(), cfg.nic)
    assert [(c.nic.identifier, c.allocatable) for c in caps] == [
        ("eth0", 21500),
        ("eth1", 22500),
        ("ns2-eth0", 22500),
    ]


# --- zones --------------------------------------------------------------------------------


def test_nic_zones_hang_under_their_socket_with_katalysts_names_and_the_holds() -> None:
    nics = [
        NicDevice("eth0", speed_mbps=25000, numa=0, pcie_switch="sw0"),
        NicDevice("eth0", netns="ns2", speed_mbps=25000, numa=1),
        NicDevice("eth9", speed_mbps=10000),  # no NUMA node: socket 0
    ]
    pods = [
        nic.BandwidthPod("default", "a", "u1", 3000, "ns2-eth0"),
        nic.BandwidthPod("default", "b", "u2", 0, "ns2-eth0"),  # asks none
        nic.BandwidthPod("default", "c", "u3", 500, "eth7"),  # a NIC the node lacks
    ]
    zones = nic.node_nic_report(
        SyntheticNics(lambda: nics), NicsConfig(reserved_bandwidth_mbps=500), pods, TOPO
    )
    assert [z["name"] for z in zones[0]] == ["eth0", "eth9"]
    (ns2,) = zones[1]
    assert (ns2["type"], ns2["name"]) == (names.ZONE_NIC, "ns2-eth0")
    assert ns2["resources"] == {"allocatable": {BW: "22500"}, "capacity": {BW: "22500"}}
    assert ns2["allocations"] == [{"consumer": "default/a/u1", "requests": {BW: "3000"}}]
    attrs = {a["name"]: a["value"] for a in ns2["attributes"]}
    assert attrs[names.NIC_ATTR_NETNS_NAME] == "ns2"
    assert attrs[names.NIC_ATTR_RESOURCE_IDENTIFIER] == "ns2-eth0"
    assert (attrs["socket"], attrs[names.NIC_ATTR_EGRESS]) == ("1", "23500")
    eth0 = zones[0][0]
    assert eth0["resources"]["allocatable"] == {BW: "22000"}  # the reserve: first NIC
    assert {"name": names.NIC_ATTR_NETNS_NAME, "value": ""} in eth0["attributes"]


def test_the_agent_reports_nic_zones_and_the_pods_holding_bandwidth() -> None:
    clock = VirtualClock(10_000)
    cluster = MemoryCluster(clock=clock)
    cluster.create(names.NODE, node_json("node-1"))
    host = InMemoryHost(TOPO)
    nics = [NicDevice("eth0", speed_mbps=10000, numa=1)]
    agent = Agent(
        "node-1",
        cluster,
        host,
        clock,
        AgentConfig.model_validate({"devices": {"nic": {"source": "synthetic"}}}),
        Enforcer(host, None, clock),
        nics=SyntheticNics(lambda: nics),
    )
    pod = pod_json("web", annotations={names.NIC_SELECTION_RESULT_ANNOTATION: "eth0"})
    pod["spec"]["containers"][0]["resources"]["requests"][BW] = "2k"  # type: ignore[index]
    obj = cluster.create(names.POD, pod, "default")
    host.add_pod(str(obj["metadata"]["uid"]))
    plan = agent.reconcile(clock.now())
    assert plan.report["nics"] == "NICs and holds read"
    cnr = cluster.get(names.CUSTOM_NODE_RESOURCE, "node-1")
    socket1 = cnr["status"]["topologyZone"][1]
    (zone,) = [z for z in socket1["children"] if z["type"] == names.ZONE_NIC]
    assert zone["resources"]["allocatable"] == {BW: "9000"}
    consumer = f"default/web/{obj['metadata']['uid']}"
    assert zone["allocations"] == [{"consumer": consumer, "requests": {BW: "2000"}}]
    # the NICs unreadable: the last report stays, and the plan says why
    nics.append(nics[0])
    clock.advance(5)
    plan = agent.reconcile(clock.now())
    assert plan.report["nics"].startswith("NICs unreadable, last report kept")
