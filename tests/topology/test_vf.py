"""Which VF a pod gets (topology/vf.py): Katalyst's static order, the socket of a NUMA-bound
pod, the dynamic policy's sizes, and properties over random VF sets: the VF chosen is
always free, RDMA-capable and allocatable, and the first such in Katalyst's order."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.api import names
from pykatalyst.topology.vf import VfPolicy, VfSlot, choose_vf, katalyst_order, sriov_count

STATIC = VfPolicy()
DYNAMIC = VfPolicy(name=names.SRIOV_POLICY_DYNAMIC)


def vf(pf: str, i: int, numa: int = 0, **kw: object) -> VfSlot:
    return VfSlot(f"{pf}_{i}", pf, i, numa, numa, **kw)  # type: ignore[arg-type]


def test_static_order_is_index_then_numa_then_pf() -> None:
    vfs = [vf("eth1", 0, 1), vf("eth0", 1, 0), vf("eth2", 0, 0), vf("eth0", 0, 0)]
    order = []
    taken: set[str] = set()
    for _ in vfs:
        got = choose_vf(vfs, taken, STATIC).vf
        assert got is not None
        order.append(got.id)
        taken.add(got.id)
    assert order == ["eth0_0", "eth2_0", "eth1_0", "eth0_1"]
    assert choose_vf(vfs, taken, STATIC).vf is None


def test_non_rdma_and_unallocatable_vfs_are_never_given() -> None:
    vfs = [vf("eth0", 0, rdma=False), vf("eth0", 1, allocatable=False), vf("eth0", 2)]
    assert choose_vf(vfs, set(), STATIC).vf == vfs[2]
    assert "no free RDMA-capable VF" in choose_vf(vfs[:2], set(), STATIC).reason


def test_a_numa_bound_pod_takes_a_vf_on_its_socket_or_none() -> None:
    vfs = [vf("eth0", 0, 0), vf("eth1", 0, 1)]
    assert choose_vf(vfs, set(), STATIC, sockets={1}).vf == vfs[1]
    none = choose_vf(vfs, {"eth1_0"}, STATIC, sockets={1})
    assert none.vf is None and "on socket 1" in none.reason


def test_the_dynamic_sizes_follow_katalysts_thresholds() -> None:
    assert DYNAMIC.size_for(24, True) == (32, True)
    assert DYNAMIC.size_for(23, True) == (8, False)
    assert DYNAMIC.size_for(8, True) == (8, False)
    assert DYNAMIC.size_for(7, True) is None
    assert DYNAMIC.size_for(64, False) is None  # not dedicated_cores
    assert STATIC.size_for(64, True) is None
    vfs = [vf("eth0", 0, queue_count=8), vf("eth0", 1, queue_count=32)]
    assert choose_vf(vfs, set(), DYNAMIC, cpus=24, dedicated=True).vf == vfs[1]
    assert choose_vf(vfs, {"eth0_1"}, DYNAMIC, cpus=24, dedicated=True).vf is None
    # the small size falls back to any free VF
    assert choose_vf(vfs, {"eth0_0"}, DYNAMIC, cpus=8, dedicated=True).vf == vfs[1]


@pytest.mark.parametrize(
    ("containers", "expect"),
    [
        ([{"name": "a", "resources": {"limits": {names.RESOURCE_SRIOV_NIC: "1"}}}], 1),
        ([{"name": "a", "resources": {"requests": {names.RESOURCE_SRIOV_NIC: "0"}}}], 0),
        ([{"name": "a"}], 0),
    ],
)
def test_sriov_count_reads_limits_and_requests(
    containers: list[dict[str, object]], expect: int
) -> None:
    assert sriov_count(containers) == expect


vf_sets = st.lists(
    st.builds(
        VfSlot,
        id=st.text("abc", min_size=1, max_size=3),
        pf=st.sampled_from(["eth0", "eth1", "ib0"]),
        index=st.integers(0, 15),
        numa=st.integers(0, 3),
        socket=st.integers(0, 1),
        rdma=st.booleans(),
        queue_count=st.sampled_from([-1, 8, 32]),
        allocatable=st.booleans(),
    ),
    max_size=24,
    unique_by=lambda v: v.id,
)


@settings(max_examples=200, deadline=None)
@given(
    vf_sets,
    st.sets(st.text("abc", min_size=1, max_size=3)),
    st.sampled_from([STATIC, DYNAMIC]),
    st.integers(0, 64),
    st.booleans(),
    st.none() | st.sets(st.integers(0, 1), min_size=1),
)
def test_the_vf_chosen_is_free_eligible_and_first_in_katalysts_order(
    vfs: list[VfSlot],
    taken: set[str],
    policy: VfPolicy,
    cpus: int,
    dedicated: bool,
    sockets: set[int] | None,
) -> None:
    got = choose_vf(vfs, taken, policy, sockets=sockets, cpus=cpus, dedicated=dedicated).vf
    ok = [
        v
        for v in vfs
        if v.rdma and v.allocatable and v.id not in taken
        if sockets is None or v.socket in sockets
    ]
    if got is None:
        size = policy.size_for(cpus, dedicated)
        assert not ok or (
            size is not None and size[1] and all(v.queue_count != size[0] for v in ok)
        )
        return
    assert got in ok
    size = policy.size_for(cpus, dedicated)
    if size is not None and any(v.queue_count == size[0] for v in ok):
        ok = [v for v in ok if v.queue_count == size[0]]
        assert got.queue_count == size[0]
    assert katalyst_order(got) == min(katalyst_order(v) for v in ok)


def test_the_dynamic_sizes_apply_only_to_pods_with_the_required_annotations() -> None:
    policy = VfPolicy(name=names.SRIOV_POLICY_DYNAMIC, required_annotations=(("rdma", "big"),))
    assert policy.size_for(32, True, {"rdma": "big"}) == (32, True)
    assert policy.size_for(32, True, {"rdma": "small"}) is None
    assert policy.size_for(32, True, None) is None
    vfs = [vf("eth0", 0, queue_count=8), vf("eth0", 1, queue_count=32)]
    sized = choose_vf(vfs, set(), policy, cpus=32, dedicated=True, annotations={"rdma": "big"})
    plain = choose_vf(vfs, set(), policy, cpus=32, dedicated=True, annotations={})
    assert (sized.vf, plain.vf) == (vfs[1], vfs[0])
