"""The machine model from sysfs trees, synthetic shapes and JSON."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUInfo, CPUTopology, TopologyError


def write_tree(
    root: Path,
    cpus: dict[int, tuple[int, int]],
    nodes: dict[int, tuple[str, int]] | None,
    online: str | None = None,
    meminfo_kb: int | None = None,
) -> Path:
    """A fake sysfs: cpu -> (package, core_id); node -> (cpulist, MemTotal kB)."""
    cpu_dir = root / "sys/devices/system/cpu"
    cpu_dir.mkdir(parents=True)
    (cpu_dir / "online").write_text((online or str(CPUSet.of(cpus))) + "\n")
    for cpu, (package, core_id) in cpus.items():
        topo = cpu_dir / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text(f"{package}\n")
        (topo / "core_id").write_text(f"{core_id}\n")
        (topo / "die_id").write_text("0\n")
    if nodes is not None:
        node_dir = root / "sys/devices/system/node"
        node_dir.mkdir(parents=True)
        (node_dir / "online").write_text("0-1\n")  # noise that must be ignored
        for node, (cpulist, kb) in nodes.items():
            (node_dir / f"node{node}").mkdir()
            (node_dir / f"node{node}" / "cpulist").write_text(cpulist + "\n")
            (node_dir / f"node{node}" / "meminfo").write_text(
                f"Node {node} MemTotal:       {kb} kB\nNode {node} MemFree:        1 kB\n"
            )
    if meminfo_kb is not None:
        (root / "proc").mkdir()
        (root / "proc/meminfo").write_text(f"MemTotal:       {meminfo_kb} kB\nMemFree: 5 kB\n")
    return root


def two_socket_ht(root: Path) -> Path:
    # 2 sockets x 4 cores x 2 threads; both sockets reuse core_ids 0..3 as real kernels do.
    cpus = {}
    for thread in range(2):
        for socket in range(2):
            for core in range(4):
                cpus[thread * 8 + socket * 4 + core] = (socket, core)
    return write_tree(root, cpus, {0: ("0-3,8-11", 1000), 1: ("4-7,12-15", 2000)})


def test_two_socket_two_numa_hyperthreaded_tree(tmp_path: Path) -> None:
    topo = CPUTopology.from_sysfs(two_socket_ht(tmp_path))
    assert topo.num_cpus == 16
    assert topo.num_cores == 8
    assert topo.sockets == [0, 1]
    assert topo.numa_nodes == [0, 1]
    assert topo.threads_per_core == 2
    assert topo.numas_per_socket == 1
    assert topo.cpus_in_numa(1) == CPUSet.parse("4-7,12-15")
    assert topo.cpus_in_socket(0) == CPUSet.parse("0-3,8-11")
    assert topo.numas_in_socket(1) == [1]
    # core_id 0 exists on both sockets: they must still be different cores
    assert topo.siblings(0) == CPUSet.parse("0,8")
    assert topo.siblings(12) == CPUSet.parse("4,12")
    assert topo.thread_siblings(4) == CPUSet.parse("4,12")
    assert topo.cpus_in_core(4) == CPUSet.parse("4,12")
    assert topo.info(12) == CPUInfo(cpu=12, core=4, socket=1, numa=1)
    assert topo.memory_per_numa == {0: 1000 * 1024, 1: 2000 * 1024}
    assert topo.total_memory == 3000 * 1024


def test_tree_without_node_dirs_is_one_numa(tmp_path: Path) -> None:
    root = write_tree(tmp_path, {0: (0, 0), 1: (0, 1), 2: (0, 0), 3: (0, 1)}, None, meminfo_kb=64)
    topo = CPUTopology.from_sysfs(root)
    assert topo.numa_nodes == [0]
    assert topo.cpus_in_numa(0) == CPUSet.parse("0-3")
    assert topo.siblings(1) == CPUSet.parse("1,3")
    assert topo.memory_per_numa == {0: 64 * 1024}


def test_offline_cpus_are_left_out(tmp_path: Path) -> None:
    root = write_tree(
        tmp_path,
        {0: (0, 0), 1: (0, 1), 2: (0, 0), 3: (0, 1)},
        {0: ("0-3", 10)},
        online="0-2",
    )
    topo = CPUTopology.from_sysfs(root)
    assert topo.all_cpus == CPUSet.parse("0-2")
    assert topo.siblings(1) == CPUSet.parse("1")


def test_bad_trees_give_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match=r"cannot read .*online"):
        CPUTopology.from_sysfs(tmp_path / "nothing")

    bad_id = write_tree(tmp_path / "a", {0: (0, 0)}, None)
    (bad_id / "sys/devices/system/cpu/cpu0/topology/core_id").write_text("zero\n")
    with pytest.raises(TopologyError, match="core_id: expected an integer, found 'zero'"):
        CPUTopology.from_sysfs(bad_id)

    orphan = write_tree(tmp_path / "b", {0: (0, 0), 1: (0, 1)}, {0: ("0", 1)})
    with pytest.raises(TopologyError, match="online cpu 1 is in no"):
        CPUTopology.from_sysfs(orphan)

    twice = write_tree(tmp_path / "c", {0: (0, 0), 1: (0, 1)}, {0: ("0-1", 1), 1: ("1", 1)})
    with pytest.raises(TopologyError, match="cpu 1 is listed in both node0 and node1"):
        CPUTopology.from_sysfs(twice)

    garbled = write_tree(tmp_path / "d", {0: (0, 0)}, {0: ("0-x", 1)})
    with pytest.raises(TopologyError, match="cpulist: invalid cpuset"):
        CPUTopology.from_sysfs(garbled)

    no_mem = write_tree(tmp_path / "e", {0: (0, 0)}, {0: ("0", 1)})
    (no_mem / "sys/devices/system/node/node0/meminfo").write_text("Node 0 MemFree: 3 kB\n")
    with pytest.raises(TopologyError, match="MemTotal"):
        CPUTopology.from_sysfs(no_mem)


def test_this_machine_is_consistent() -> None:
    if not Path("/sys/devices/system/cpu/online").exists():
        pytest.skip("no sysfs on this machine")
    topo = CPUTopology.from_sysfs()
    online = CPUSet.parse(Path("/sys/devices/system/cpu/online").read_text())
    assert topo.all_cpus == online
    # every online cpu is in exactly one NUMA node, one socket and one core
    for groups in (
        [topo.cpus_in_numa(n) for n in topo.numa_nodes],
        [topo.cpus_in_socket(s) for s in topo.sockets],
        [topo.cpus_in_core(c) for c in topo.cores],
    ):
        assert sum(len(g) for g in groups) == len(online)
        assert CPUSet().union(*groups) == online
    for cpu in online:
        assert cpu in topo.siblings(cpu)
    assert CPUTopology.from_json(topo.to_json()) == topo


@settings(max_examples=40)
@given(
    st.integers(1, 4),
    st.integers(1, 8),
    st.integers(1, 4),
    st.sampled_from([1, 2]),
)
def test_synthetic_machines(sockets: int, cores: int, threads: int, numa_per_socket: int) -> None:
    if cores % numa_per_socket:
        with pytest.raises(TopologyError, match="divide evenly"):
            CPUTopology.synthetic(sockets, cores, threads, numa_per_socket)
        return
    topo = CPUTopology.synthetic(sockets, cores, threads, numa_per_socket, memory_per_numa=8)
    total_cores = sockets * cores
    assert topo.num_cpus == total_cores * threads
    assert topo.num_cores == total_cores
    assert topo.num_numa_nodes == sockets * numa_per_socket
    assert topo.numas_per_socket == numa_per_socket
    assert topo.threads_per_core == threads
    assert topo.total_memory == 8 * sockets * numa_per_socket
    for cpu in range(total_cores):
        # Linux-style numbering: cpu i and i + #cores are hyperthread siblings
        assert topo.siblings(cpu) == CPUSet.of(cpu + t * total_cores for t in range(threads))
    for numa in topo.numa_nodes:
        assert len(topo.cpus_in_numa(numa)) == cores // numa_per_socket * threads
    again = CPUTopology.from_json(topo.to_json())
    assert again == topo
    assert hash(again) == hash(topo)


def test_synthetic_default_is_a_two_socket_server() -> None:
    topo = CPUTopology.synthetic()
    assert (topo.num_cpus, topo.num_sockets, topo.num_numa_nodes) == (96, 2, 2)
    assert topo.siblings(0) == CPUSet.parse("0,48")
    assert topo.cpus_in_socket(1) == CPUSet.parse("24-47,72-95")


def test_bad_shapes_and_json_are_rejected() -> None:
    with pytest.raises(TopologyError, match="sockets must be a positive integer"):
        CPUTopology.synthetic(sockets=0)
    with pytest.raises(TopologyError, match="invalid topology JSON"):
        CPUTopology.from_json({"cpus": [{"cpu": 0}]})
    with pytest.raises(TopologyError, match="invalid topology JSON"):
        CPUTopology.from_json({"cpus": [{"cpu": "0", "core": 0, "socket": 0, "numa": 0}]})
    with pytest.raises(TopologyError, match="described twice"):
        CPUTopology((CPUInfo(0, 0, 0, 0), CPUInfo(0, 0, 0, 0)))
    with pytest.raises(TopologyError, match="spans sockets"):
        CPUTopology((CPUInfo(0, 0, 0, 0), CPUInfo(1, 0, 1, 1)))
    with pytest.raises(TopologyError, match="lowest cpu"):
        CPUTopology((CPUInfo(0, 1, 0, 0), CPUInfo(1, 1, 0, 0)))
    topo = CPUTopology.synthetic(1, 2, 1)
    with pytest.raises(TopologyError, match="cpu 9 is not on this machine"):
        topo.info(9)
    with pytest.raises(TopologyError, match="no NUMA node 3"):
        topo.cpus_in_numa(3)


# --- node memory against /proc/meminfo ------------------------------------------------------

FOUR_CPUS = {0: (0, 0), 1: (0, 1), 2: (1, 0), 3: (1, 1)}


def test_node_memory_short_of_meminfo_is_scaled_to_the_machine_total(tmp_path: Path) -> None:
    # Like a sandboxed kernel: the node files say 6 GB in all, /proc/meminfo 24 GB.
    gb_kb = 1024 * 1024
    root = write_tree(
        tmp_path,
        FOUR_CPUS,
        {0: ("0-1", 2 * gb_kb), 1: ("2-3", 4 * gb_kb)},
        meminfo_kb=24 * gb_kb,
    )
    topo = CPUTopology.from_sysfs(root)
    assert topo.total_memory == 24 * gb_kb * 1024
    # The kernel's split between the nodes is kept.
    assert topo.memory_per_numa == {0: 8 * gb_kb * 1024, 1: 16 * gb_kb * 1024}


def test_node_memory_close_to_meminfo_is_kept_as_the_kernel_says(tmp_path: Path) -> None:
    root = write_tree(tmp_path, FOUR_CPUS, {0: ("0-1", 1000), 1: ("2-3", 2000)}, meminfo_kb=3050)
    topo = CPUTopology.from_sysfs(root)
    assert topo.memory_per_numa == {0: 1000 * 1024, 1: 2000 * 1024}


def test_nodes_without_meminfo_share_the_machine_total(tmp_path: Path) -> None:
    root = write_tree(tmp_path, FOUR_CPUS, {0: ("0-1", 1), 1: ("2-3", 1)}, meminfo_kb=4001)
    for node in (0, 1):
        (root / f"sys/devices/system/node/node{node}/meminfo").unlink()
    topo = CPUTopology.from_sysfs(root)
    assert topo.total_memory == 4001 * 1024
    assert abs(topo.memory_of_numa(0) - topo.memory_of_numa(1)) <= 1


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 10**9), min_size=1, max_size=4),
    st.integers(1, 10**10),
)
def test_scaled_node_memory_adds_up_and_keeps_the_split(
    tmp_path_factory: pytest.TempPathFactory, node_kb: list[int], total_kb: int
) -> None:
    cpus = {i: (0, i) for i in range(len(node_kb))}
    nodes = {i: (str(i), kb) for i, kb in enumerate(node_kb)}
    root = write_tree(tmp_path_factory.mktemp("sysfs"), cpus, nodes, meminfo_kb=total_kb)
    topo = CPUTopology.from_sysfs(root)
    counted = sum(node_kb)
    if abs(counted - total_kb) <= 0.03 * total_kb:
        assert topo.memory_per_numa == {i: kb * 1024 for i, kb in enumerate(node_kb)}
        return
    assert topo.total_memory == total_kb * 1024
    for i, kb in enumerate(node_kb):
        share = kb * total_kb * 1024 / counted
        assert abs(topo.memory_of_numa(i) - share) <= len(node_kb) + 1


@given(
    sockets=st.integers(1, 2),
    cores=st.integers(1, 6),
    threads=st.integers(1, 2),
    numa_per_socket=st.integers(1, 2),
    data=st.data(),
)
def test_the_numa_nodes_a_cpuset_touches_read_off_the_masks_as_cpu_by_cpu(
    sockets: int, cores: int, threads: int, numa_per_socket: int, data: st.DataObject
) -> None:
    """`numas_of` (one mask test per NUMA node, what the agent's layout asks each tick)
    names the same nodes, ascending, as looking up every cpu of the set."""
    if cores % numa_per_socket:
        cores *= numa_per_socket
    topo = CPUTopology.synthetic(sockets, cores, threads, numa_per_socket)
    cpus = CPUSet.of(data.draw(st.sets(st.sampled_from(sorted(topo.all_cpus)))))
    assert topo.numas_of(cpus) == sorted({topo.numa_of(c) for c in cpus})
