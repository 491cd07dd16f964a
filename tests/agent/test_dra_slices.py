"""The node's devices as DRA ResourceSlices: the pure builder, the plan that keeps the
cluster's slices equal to them, and the executor on a MemoryCluster that validates
resource.k8s.io/v1 as kube-apiserver 1.34 does."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.agent.config import AgentConfig
from pykatalyst.agent.dra.classes import device_classes
from pykatalyst.agent.dra.publish import SlicePublisher, apply, decide
from pykatalyst.agent.dra.slices import (
    MAX_DEVICES_PER_SLICE,
    build_slices,
    device_name,
    inventory,
    pcie_root,
)
from pykatalyst.agent.host.devices import GpuDevice
from pykatalyst.agent.host.nics import NicDevice
from pykatalyst.agent.host.sriov import VfDevice
from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.protocol import Conflict, Invalid

SLICE = names.RESOURCE_SLICE
ROOT = names.DRA_ATTR_PCIE_ROOT
SWITCHES = ["0000:01:00.0", "0000:81:00.0", "0001:3a:00.0", ""]

gpus_st = st.lists(
    st.builds(
        GpuDevice,
        id=st.text("ABCDEFabcdef0123456789-_:.", min_size=1, max_size=80),
        numa=st.integers(-1, 3),
        pcie_switch=st.sampled_from(SWITCHES),
        model=st.sampled_from(["", "H100-80GB", "x" * 70]),
        healthy=st.booleans(),
        memory_mib=st.one_of(st.none(), st.integers(1, 200_000)),
    ),
    max_size=150,
    unique_by=lambda g: g.id,
)
nics_st = st.lists(
    st.builds(
        NicDevice,
        name=st.from_regex(r"eth[0-9]{1,3}", fullmatch=True),
        numa=st.integers(-1, 1),
        pcie_switch=st.sampled_from(SWITCHES),
        healthy=st.booleans(),
    ),
    max_size=6,
    unique_by=lambda n: n.name,
)


def _attrs(dev: dict[str, Any]) -> dict[str, Any]:
    return {k: next(iter(v.values())) for k, v in dev["attributes"].items()}


@settings(max_examples=60, deadline=None)
@given(gpus_st, nics_st, st.integers(1, 5))
def test_the_slices_hold_every_healthy_device_once_and_the_api_server_accepts_them(
    gpus: list[GpuDevice], nics: list[NicDevice], generation: int
) -> None:
    devices = inventory(gpus, nics, {})
    slices = build_slices("node-1", devices, generation)
    cluster = MemoryCluster()
    for s in slices:
        cluster.create(SLICE, s)  # validated as kube-apiserver validates it
    published = [d for s in slices for d in s["spec"]["devices"]]
    ids = sorted(_attrs(d)["id"] for d in published if "id" in _attrs(d))
    want = sorted(
        [g.id for g in gpus if g.healthy and len(g.id) <= 64]
        + [n.name for n in nics if n.healthy and n.pcie_switch]
    )
    assert ids == want
    assert len(published) == sum(g.healthy for g in gpus) + sum(
        n.healthy and bool(n.pcie_switch) for n in nics
    )
    assert all(len(s["spec"]["devices"]) <= MAX_DEVICES_PER_SLICE for s in slices)
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {len(slices)}
    assert {s["spec"]["pool"]["generation"] for s in slices} == {generation}


@given(st.lists(st.text(min_size=1, max_size=100), min_size=2, max_size=20, unique=True))
def test_distinct_ids_get_distinct_device_names(ids: list[str]) -> None:
    got = [device_name("gpu", i) for i in ids]
    assert len(set(got)) == len(got)
    assert all(len(n) <= 63 for n in got)


def test_a_gpu_and_a_nic_under_one_switch_share_the_standard_pcie_root() -> None:
    gpu = GpuDevice("GPU-0", numa=0, pcie_switch="0000:81:00.0", model="H100")
    other = GpuDevice("GPU-1", numa=1, pcie_switch="0000:01:00.0", model="H100")
    nic = NicDevice("eth1", numa=0, pcie_switch="0000:81:00.0", speed_mbps=100000)
    devices = {d.id: d for d in inventory([gpu, other], [nic], {})}
    assert devices["GPU-0"].attributes[ROOT] == devices["eth1"].attributes[ROOT] == "pci0000:81"
    assert devices["GPU-1"].attributes[ROOT] == "pci0000:01"
    assert devices["GPU-0"].attributes["numa"] == 0
    assert devices["GPU-0"].attributes["model"] == "H100"
    assert devices["GPU-0"].attributes[names.GPU_ATTR_PCIE_SWITCH] == "0000:81:00.0"
    # a configured root wins: both switches under one root complex
    roots = {"0000:81:00.0": "pci0000:80", "0000:01:00.0": "pci0000:80"}
    assert pcie_root("0000:81:00.0", roots) == pcie_root("0000:01:00.0", roots)


def test_rdma_vfs_are_devices_and_vfs_without_rdma_are_not() -> None:
    vfs = (
        VfDevice(
            "ens1", 0, "0000:17:00.2", "ens1_0", pcie_switch="0000:17:00.0", ib_devices=("a",)
        ),
        VfDevice("ens1", 1, "0000:17:00.3", "ens1_1", pcie_switch="0000:17:00.0"),
    )
    nic = NicDevice("ens1", pcie_switch="0000:17:00.0", pci_address="0000:17:00.0", vfs=vfs)
    got = {d.id: d for d in inventory([], [nic], {})}
    assert sorted(got) == ["ens1", "ens1_0"]
    assert got["ens1_0"].attributes["rdma"] is True and got["ens1"].attributes["rdma"] is True
    assert sorted(d.id for d in inventory([], [nic], {}, vfs=False)) == ["ens1"]


GPUS = [GpuDevice(f"GPU-{i}", numa=i // 2, pcie_switch=SWITCHES[i // 2]) for i in range(4)]


def _slices(cluster: MemoryCluster, node: str = "n1") -> list[dict[str, Any]]:
    selector = f"spec.nodeName={node},spec.driver={names.DRA_DRIVER}"
    return list(cluster.list(SLICE, field_selector=selector).items)


def test_the_plan_is_empty_once_applied_and_a_change_bumps_the_generation() -> None:
    cluster = MemoryCluster()
    devices = inventory(GPUS, [], {})
    first = decide("n1", devices, [])
    assert apply(cluster, first).failed == ()
    assert decide("n1", devices, _slices(cluster)).empty
    sick = [GPUS[0], GPUS[1], GPUS[2], GpuDevice("GPU-3", healthy=False)]
    second = decide("n1", inventory(sick, [], {}), _slices(cluster))
    assert second.generation == first.generation + 1 and len(second.updates) == 1
    apply(cluster, second)
    (s,) = _slices(cluster)
    assert s["spec"]["pool"]["generation"] == 2
    assert sorted(_attrs(d)["id"] for d in s["spec"]["devices"]) == ["GPU-0", "GPU-1", "GPU-2"]


def test_slices_of_other_nodes_and_drivers_are_left_alone_and_extra_ones_deleted() -> None:
    cluster = MemoryCluster()
    apply(cluster, decide("n2", inventory(GPUS, [], {}), []))
    theirs = build_slices("n1", inventory(GPUS, [], {}), 1, driver="gpu.nvidia.com")
    theirs[0]["metadata"]["name"] = "nvidia-n1"
    cluster.create(SLICE, theirs[0])
    many = [GpuDevice(f"GPU-{i}") for i in range(MAX_DEVICES_PER_SLICE + 1)]
    apply(cluster, decide("n1", inventory(many, [], {}), _slices(cluster)))
    assert len(_slices(cluster)) == 2
    plan = decide("n1", inventory(GPUS, [], {}), _slices(cluster))
    assert plan.deletes == ("n1-katalyst-dra-1",)
    apply(cluster, plan)
    assert len(_slices(cluster)) == 1
    assert len(_slices(cluster, "n2")) == 1
    assert cluster.get(SLICE, "nvidia-n1")["spec"]["driver"] == "gpu.nvidia.com"


def test_a_slice_that_cannot_be_updated_in_place_is_replaced() -> None:
    cluster = MemoryCluster()
    bad = build_slices("n1", (), 7)[0]
    bad["spec"]["pool"]["name"] = "left-by-an-older-version"
    cluster.create(SLICE, bad)
    plan = decide("n1", inventory(GPUS, [], {}), _slices(cluster))
    assert plan.deletes == ("n1-katalyst-dra-0",) and plan.generation == 8
    assert apply(cluster, plan).failed == ()
    (s,) = _slices(cluster)
    assert s["spec"]["pool"] == {"name": "n1", "generation": 8, "resourceSliceCount": 1}


class _Conflicting(MemoryCluster):
    conflicts = 1

    def update(self, kind: Any, obj: dict[str, Any]) -> dict[str, Any]:
        if self.conflicts:
            self.conflicts -= 1
            raise Conflict("the object has been modified")
        return super().update(kind, obj)


def test_the_publisher_survives_a_conflict_and_converges_next_round() -> None:
    cluster = _Conflicting()
    cfg = AgentConfig().devices.dra

    class Cards:
        name = "synthetic"

        def __init__(self) -> None:
            self.cards = tuple(GPUS)

        def gpus(self) -> tuple[GpuDevice, ...]:
            return self.cards

    cards = Cards()
    pub = SlicePublisher("n1", cluster, cfg, cards, None)
    assert pub.tick().applied.failed == ()
    cards.cards = tuple(GPUS[:2])
    assert "modified" in pub.tick().applied.failed[0]
    assert not pub.tick().applied.failed
    assert len(_slices(cluster)[0]["spec"]["devices"]) == 2
    assert pub.tick().plan.empty


def test_dra_is_off_by_default() -> None:
    assert AgentConfig().devices.dra.enabled is False


def test_a_bad_pcie_root_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"pcie_roots[\s\S]*pci<domain>:<bus>"):
        AgentConfig.model_validate({"devices": {"dra": {"pcie_roots": {"0000:01:00.0": "x"}}}})


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda s: s["spec"]["devices"][0]["attributes"]["numa"].update(string="0"), "numa"),
        (lambda s: s["spec"]["devices"][0].update(name="GPU_0"), "devices[0].name"),
        (lambda s: s["spec"].update(allNodes=True), "exactly one of `nodeName`"),
        (lambda s: s["spec"]["devices"].append(dict(s["spec"]["devices"][0])), "Duplicate"),
        (lambda s: s["spec"]["devices"][0]["attributes"].update({"a-b": {"int": 1}}), "a-b"),
    ],
)
def test_memory_cluster_refuses_a_slice_the_api_server_refuses(change: Any, field: str) -> None:
    obj = build_slices("n1", inventory(GPUS, [], {}), 1)[0]
    change(obj)
    with pytest.raises(Invalid, match=re.escape(field)):
        MemoryCluster().create(SLICE, obj)


def test_a_slice_keeps_its_driver_node_and_pool() -> None:
    cluster = MemoryCluster()
    created = cluster.create(SLICE, build_slices("n1", (), 1)[0])
    created["spec"]["nodeName"] = "n2"
    with pytest.raises(Invalid, match="nodeName: field is immutable"):
        cluster.update(SLICE, created)


def test_the_device_classes_select_each_type_of_the_driver() -> None:
    cluster = MemoryCluster()
    for c in device_classes():
        cluster.create(names.DEVICE_CLASS, c)
    got = {c["metadata"]["name"]: c for c in cluster.list(names.DEVICE_CLASS).items}
    assert sorted(got) == sorted(
        [names.DRA_CLASS_GPU, names.DRA_CLASS_NIC, names.DRA_CLASS_RDMA_VF]
    )
    cel = got[names.DRA_CLASS_GPU]["spec"]["selectors"][0]["cel"]["expression"]
    assert f'device.driver == "{names.DRA_DRIVER}"' in cel and '.type == "gpu"' in cel


@settings(max_examples=30, deadline=None)
@given(st.lists(st.lists(st.integers(0, 300), max_size=300, unique=True), min_size=1, max_size=4))
def test_any_sequence_of_device_sets_converges_with_a_growing_generation(
    rounds: list[list[int]],
) -> None:
    cluster = MemoryCluster()
    last = 0
    for ids in rounds:
        devices = inventory([GpuDevice(f"GPU-{i}") for i in ids], [], {})
        plan = decide("n1", devices, _slices(cluster))
        assert apply(cluster, plan).failed == ()
        slices = _slices(cluster)
        got = sorted(_attrs(d)["id"] for s in slices for d in s["spec"]["devices"])
        assert got == sorted(f"GPU-{i}" for i in ids)
        generations = {s["spec"]["pool"]["generation"] for s in slices}
        assert len(generations) == 1 and generations.pop() >= last
        last = plan.generation or last
        assert decide("n1", devices, slices).empty


def test_the_charts_device_classes_are_the_ones_the_code_describes() -> None:
    import yaml

    path = Path(__file__).parents[2] / "deploy" / "dra" / "deviceclasses.yaml"
    rendered = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert {d["metadata"]["name"]: d["spec"] for d in rendered} == {
        c["metadata"]["name"]: c["spec"] for c in device_classes()
    }
