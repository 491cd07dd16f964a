"""SR-IOV virtual functions: discovery from a fake sysfs tree and from this machine's, the
synthetic ones of the config, and the CNR's VF zones under their PF's NIC zone with the
pods holding them."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.agent import nic
from pykatalyst.agent.config_sections import NicsConfig
from pykatalyst.agent.host.nics import SysfsNics
from pykatalyst.api import names
from pykatalyst.topology.machine import CPUTopology

TOPO = CPUTopology.synthetic(2, 4, 2)  # two sockets, one NUMA node each
SRIOV = names.RESOURCE_SRIOV_NIC


def _dir(path: Path, **files: str) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (path / name).write_text(f"{text}\n")
    return path


def _netdev(sys: Path, function: Path, name: str, **files: str) -> Path:
    home = _dir(function / "net" / name, operstate="up", **files)
    (home / "device").symlink_to(function)
    link = sys / "class" / "net" / name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(home)
    return home


def _pf(
    sys: Path,
    pf: str,
    bus: int,
    numa: int,
    rdma: list[bool],
    *,
    switchdev: bool = True,
    queues: int = 8,
) -> Path:
    """A PF `pf` on PCI bus `bus` with one VF per entry of `rdma` (True: it has RDMA
    devices); in switchdev mode each VF has a representor `<pf>r<i>`."""
    fn = sys / "devices" / "pci0000:00" / f"0000:{bus:02x}:00.0"
    _dir(fn, numa_node=str(numa), sriov_numvfs=str(len(rdma)))
    _netdev(sys, fn, pf, speed="100000", phys_switch_id="abcd", phys_port_name="p0")
    for i, has_rdma in enumerate(rdma):
        vf = _dir(sys / "devices" / "pci0000:00" / f"0000:{bus:02x}:01.{i}", numa_node="-1")
        (vf / "physfn").symlink_to(fn)
        (fn / f"virtfn{i}").symlink_to(vf)
        dev = _netdev(sys, vf, f"{pf}v{i}")
        for q in range(queues):
            _dir(dev / "queues" / f"rx-{q}")
        if has_rdma:
            _dir(vf / "infiniband_verbs" / f"uverbs{bus}{i}")
            _dir(vf / "infiniband_mad" / f"umad{bus}{i}")
        if switchdev:
            _netdev(sys, fn, f"{pf}r{i}", phys_switch_id="abcd", phys_port_name=f"pf0vf{i}")
    return fn


def test_a_pfs_vfs_are_found_with_representor_pci_rdma_queues_and_numa(tmp_path: Path) -> None:
    sys = tmp_path / "sys"
    _pf(sys, "ens1f0", 0x3B, 1, [True, True, False])
    _pf(sys, "ens2f0", 0x5E, 0, [True], switchdev=False, queues=32)
    nics = {n.name: n for n in SysfsNics(str(sys)).nics()}
    # the VFs' own netdevs and the representors are not NICs of their own
    assert sorted(nics) == ["ens1f0", "ens2f0"]
    vfs = nics["ens1f0"].vfs
    assert [v.index for v in vfs] == [0, 1, 2]
    assert [v.rep_name for v in vfs] == ["ens1f0r0", "ens1f0r1", "ens1f0r2"]
    assert [v.pci_address for v in vfs] == ["0000:3b:01.0", "0000:3b:01.1", "0000:3b:01.2"]
    assert vfs[0].ib_devices == ("uverbs590", "umad590") and vfs[0].rdma
    assert not vfs[2].rdma
    assert {v.numa for v in vfs} == {1}  # the PF's: the VFs' functions say -1
    assert {(v.name, v.queue_count) for v in vfs[:1]} == {("ens1f0v0", 8)}
    legacy = nics["ens2f0"].vfs  # no representors: <pf>_<index>, as Katalyst names them
    assert [(v.rep_name, v.queue_count) for v in legacy] == [("ens2f0_0", 32)]


def test_a_pf_with_no_vf_enabled_and_a_plain_nic_have_none(tmp_path: Path) -> None:
    sys = tmp_path / "sys"
    _pf(sys, "ens1f0", 0x3B, 0, [])
    nics = SysfsNics(str(sys)).nics()
    assert [(n.name, n.vfs) for n in nics] == [("ens1f0", ())]


def test_this_machines_nics_are_read_and_vfs_found_only_where_sysfs_has_them() -> None:
    if not Path("/sys/class/net").is_dir():
        pytest.skip("this machine has no /sys/class/net")
    for n in SysfsNics("/sys").nics():
        dev = Path("/sys/class/net") / n.name / "device"
        has = (dev / "sriov_numvfs").exists() and int((dev / "sriov_numvfs").read_text()) > 0
        assert bool(n.vfs) == has, n.name


@settings(max_examples=15, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 1), st.lists(st.booleans(), max_size=8), st.booleans()),
        min_size=1,
        max_size=4,
    )
)
def test_any_tree_of_pfs_and_vfs_is_read_back_as_written(
    pfs: list[tuple[int, list[bool], bool]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        sys = Path(tmp) / "sys"
        for k, (numa, rdma, switchdev) in enumerate(pfs):
            _pf(sys, f"ens{k}f0", 0x10 + k, numa, rdma, switchdev=switchdev)
        got = {n.name: n for n in SysfsNics(str(sys)).nics()}
        assert sorted(got) == [f"ens{k}f0" for k in range(len(pfs))]
        for k, (numa, rdma, switchdev) in enumerate(pfs):
            vfs = got[f"ens{k}f0"].vfs
            assert [v.rdma for v in vfs] == rdma
            assert all(v.numa == numa and v.pf == f"ens{k}f0" for v in vfs)
            rep = "r" if switchdev else "_"
            assert [v.rep_name for v in vfs] == [f"ens{k}f0{rep}{i}" for i in range(len(rdma))]


# --- synthetic VFs and the CNR ----------------------------------------------------------


def _cfg(**over: Any) -> NicsConfig:
    ifaces = [
        {"name": "eth0", "speed_mbps": 100000, "numa": 0, "vfs": 4, "vf_queue_counts": [8, 32]},
        {"name": "eth1", "speed_mbps": 100000, "numa": 1, "vfs": 2, "vf_rdma": False},
    ]
    return NicsConfig.model_validate({"source": "synthetic", "interfaces": ifaces, **over})


def test_synthetic_vfs_take_the_configured_count_rdma_and_queue_counts() -> None:
    nics = {n.name: n for n in nic.synthetic_nics(_cfg().interfaces)}
    vfs = nics["eth0"].vfs
    assert [v.rep_name for v in vfs] == ["eth0_0", "eth0_1", "eth0_2", "eth0_3"]
    assert [v.queue_count for v in vfs] == [8, 32, 32, 32]
    assert all(v.rdma and v.numa == 0 for v in vfs)
    assert not any(v.rdma for v in nics["eth1"].vfs)
    addresses = [v.pci_address for n in nics.values() for v in n.vfs]
    assert len(set(addresses)) == len(addresses)


def _zones(report: dict[int, list[dict[str, Any]]], socket: int, nic_id: str) -> list[Any]:
    zone = next(z for z in report[socket] if z["name"] == nic_id)
    return list(zone.get("children", []))


def test_vf_zones_hang_under_their_nic_and_list_the_pods_holding_them() -> None:
    cfg = _cfg()
    source = nic.SyntheticNics(lambda: nic.synthetic_nics(cfg.interfaces))
    pods = [
        nic.BandwidthPod("default", "a", "u1", 0, "", "eth0_1"),
        nic.BandwidthPod("default", "b", "u2", 0, "", ""),
    ]
    report = nic.node_nic_report(source, cfg, pods, TOPO)
    vfs = _zones(report, 0, "eth0")
    assert [z["name"] for z in vfs] == ["eth0_0", "eth0_1", "eth0_2", "eth0_3"]
    assert all(z["type"] == names.ZONE_NIC for z in vfs)
    assert vfs[1]["allocations"] == [{"consumer": "default/a/u1", "requests": {SRIOV: "1"}}]
    assert "allocations" not in vfs[0]
    attrs = {a["name"]: a["value"] for a in vfs[1]["attributes"]}
    assert attrs[names.VF_ATTR_PF] == "eth0" and attrs[names.VF_ATTR_INDEX] == "1"
    assert attrs[names.VF_ATTR_QUEUE_COUNT] == "32" and attrs[names.VF_ATTR_RDMA] == "true"
    assert attrs[names.GPU_ATTR_SOCKET] == "0"
    # VFs without RDMA are reported and given to no pod
    plain = _zones(report, 1, "eth1")
    assert [z["resources"]["allocatable"][SRIOV] for z in plain] == ["0", "0"]
    assert [z["resources"]["capacity"][SRIOV] for z in plain] == ["1", "1"]


def test_an_unhealthy_pf_gives_out_none_of_its_vfs() -> None:
    raw = _cfg().model_dump()
    raw["interfaces"][0]["healthy"] = False
    cfg = NicsConfig.model_validate(raw)
    source = nic.SyntheticNics(lambda: nic.synthetic_nics(cfg.interfaces))
    vfs = _zones(nic.node_nic_report(source, cfg, [], TOPO), 0, "eth0")
    assert {z["resources"]["allocatable"][SRIOV] for z in vfs} == {"0"}


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"sriov": {"policy": "fancy"}}, "policy"),
        ({"sriov": {"small_vf_cpu_threshold": 30}}, "small_vf_cpu_threshold"),
        ({"interfaces": [{"name": "eth0", "speed_mbps": 1, "vfs": -1}]}, "vfs"),
    ],
)
def test_bad_sriov_settings_are_refused_naming_the_field(over: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        NicsConfig.model_validate({"source": "synthetic", **over})


def test_the_example_declares_16_rdma_vfs_on_two_sockets_and_4_without_rdma() -> None:
    from pykatalyst.agent.config import load_config

    example = Path(__file__).resolve().parents[2] / "examples" / "agent" / "synthetic-sriov.yaml"
    cfg = load_config(example).devices.nic
    nics = {n.name: n for n in nic.synthetic_nics(cfg.interfaces)}
    rdma = [v for n in nics.values() for v in n.vfs if v.rdma]
    assert len(rdma) == 16 and {v.numa for v in rdma} == {0, 1}
    assert [v.queue_count for v in nics["ens1f0"].vfs] == [8] * 4 + [32] * 4
    assert not any(v.rdma for v in nics["eth0"].vfs)
    assert cfg.sriov.device_node == "/dev/null"


def test_the_evictions_nic_reader_skips_vf_zones() -> None:
    from pykatalyst.agent.eviction.stage import read_cnr_nics
    from pykatalyst.apiserver.memory import MemoryCluster
    from tests.scheduler.sched_helpers import add_cnr, cnr

    cfg = _cfg()
    source = nic.SyntheticNics(lambda: nic.synthetic_nics(cfg.interfaces))
    report = nic.node_nic_report(source, cfg, [], TOPO)
    zones = [
        {"type": names.ZONE_SOCKET, "name": str(s), "children": report.get(s, [])} for s in (0, 1)
    ]
    c = MemoryCluster()
    add_cnr(c, cnr("n1", zones=zones))
    assert sorted(read_cnr_nics(c, "n1") or {}) == ["eth0", "eth1"]
