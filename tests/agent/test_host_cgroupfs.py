"""Cgroup file formats and unit conversions."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pykatalyst.agent.host import cgroupfs
from pykatalyst.agent.host.base import CpuQuota, Knob
from pykatalyst.topology.cpuset import CPUSet


def test_shares_to_weight_matches_the_kubelet_at_known_points() -> None:
    # The runc/kubelet formula's fixed points: the ends of both ranges, and the
    # kubelet's default of 1024 shares (one cpu request) becoming weight 39.
    assert cgroupfs.shares_to_weight(2) == 1
    assert cgroupfs.shares_to_weight(262144) == 10000
    assert cgroupfs.shares_to_weight(1024) == 39
    # out-of-range shares are clamped, not wrapped
    assert cgroupfs.shares_to_weight(0) == 1
    assert cgroupfs.shares_to_weight(10**9) == 10000


@given(st.integers(min_value=2, max_value=262143))
def test_shares_to_weight_is_monotone_and_in_range(shares: int) -> None:
    w = cgroupfs.shares_to_weight(shares)
    assert 1 <= w <= 10000
    assert cgroupfs.shares_to_weight(shares + 1) >= w


@given(st.integers(min_value=1, max_value=10000))
def test_weight_read_back_as_shares_converts_to_the_same_weight(weight: int) -> None:
    shares = cgroupfs.weight_to_shares(weight)
    assert 2 <= shares <= 262144
    assert cgroupfs.shares_to_weight(shares) == weight
    # and it is the smallest such: one share less gives a lower weight
    if shares > 2:
        assert cgroupfs.shares_to_weight(shares - 1) < weight


@given(
    st.one_of(st.none(), st.integers(min_value=1000, max_value=10**7)),
    st.integers(min_value=1000, max_value=1_000_000),
)
def test_quota_round_trips_through_both_formats(quota: int | None, period: int) -> None:
    value = CpuQuota(quota, period)
    for version in (1, 2):
        files = {f.name: f.content for f in cgroupfs.render_knob(Knob.CPU_QUOTA, value, version)}
        assert cgroupfs.parse_knob(Knob.CPU_QUOTA, version, files.get) == value


def test_quota_files_spell_unlimited_the_kernel_way() -> None:
    v1 = {f.name: f.content for f in cgroupfs.render_knob(Knob.CPU_QUOTA, CpuQuota(None), 1)}
    assert v1 == {"cpu.cfs_quota_us": "-1", "cpu.cfs_period_us": "100000"}
    (v2,) = cgroupfs.render_knob(Knob.CPU_QUOTA, CpuQuota(None, 50_000), 2)
    assert (v2.name, v2.content) == ("cpu.max", "max 50000")


def test_v1_quota_writes_the_file_that_lowers_the_ratio_first() -> None:
    # 2 cores at 100ms -> 1.5 cores at 50ms: quota first would pass through 75ms/100ms
    # (0.75), period first through 200ms/50ms (4 cores); the lower ratio goes first.
    files = cgroupfs.render_quota_v1(CpuQuota(75_000, 50_000), CpuQuota(200_000, 100_000))
    assert [f.name for f in files] == ["cpu.cfs_quota_us", "cpu.cfs_period_us"]
    files = cgroupfs.render_quota_v1(CpuQuota(400_000, 200_000), CpuQuota(50_000, 100_000))
    assert [f.name for f in files] == ["cpu.cfs_period_us", "cpu.cfs_quota_us"]
    only_quota = cgroupfs.render_quota_v1(CpuQuota(1000), CpuQuota(None))
    assert [f.name for f in only_quota] == ["cpu.cfs_quota_us"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("max", None), ("-1", None), ("9223372036854771712", None), ("1048576", 1048576)],
)
def test_memory_limit_files_read_unlimited_as_none(text: str, expected: int | None) -> None:
    assert cgroupfs.parse_memory_value(text + "\n") == expected


def test_memory_high_does_not_exist_on_v1() -> None:
    assert cgroupfs.knob_files(Knob.MEMORY_HIGH, 1) == ()
    assert cgroupfs.render_knob(Knob.MEMORY_HIGH, 1 << 30, 1) == ()
    with pytest.raises(LookupError, match="v1"):
        cgroupfs.parse_knob(Knob.MEMORY_HIGH, 1, lambda _: "0")


def test_values_equal_knows_what_the_kernel_rounds() -> None:
    # v2 weights are coarser than shares: 1010 and 1024 shares are both weight 39
    assert cgroupfs.values_equal(Knob.CPU_SHARES, 1024, 1010, 2, 4096)
    assert not cgroupfs.values_equal(Knob.CPU_SHARES, 1024, 1010, 1, 4096)
    # memory limits are kept in whole pages
    assert cgroupfs.values_equal(Knob.MEMORY_LIMIT, 4096 * 10 + 5, 4096 * 10, 1, 4096)
    assert not cgroupfs.values_equal(Knob.MEMORY_LIMIT, 4096 * 11, 4096 * 10, 1, 4096)
    assert not cgroupfs.values_equal(Knob.MEMORY_LIMIT, None, 4096, 2, 4096)


@pytest.mark.parametrize(
    ("knob", "value"),
    [
        (Knob.CPUSET_CPUS, CPUSet()),
        (Knob.CPUSET_MEMS, CPUSet()),
        (Knob.CPU_SHARES, 1),
        (Knob.CPU_SHARES, 262145),
        (Knob.CPU_SHARES, True),
        (Knob.CPU_IDLE, 2),
        (Knob.CPU_QUOTA, CpuQuota(999)),
        (Knob.CPU_QUOTA, CpuQuota(5000, 999)),
        (Knob.CPU_QUOTA, 5000),
        (Knob.MEMORY_LIMIT, 0),
        (Knob.MEMORY_HIGH, -5),
    ],
)
def test_bad_knob_values_are_named_with_what_is_accepted(knob: Knob, value: object) -> None:
    problem = cgroupfs.check_knob_value(knob, value)  # type: ignore[arg-type]
    assert problem is not None
    assert knob.value in problem and "accepted" in problem


def test_mounts_decide_v1_on_a_hybrid_machine(tmp_path: Path) -> None:
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/mounts").write_text(
        "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n"
        "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,relatime,cpu,cpuacct 0 0\n"
        "cgroup /sys/fs/cgroup/cpuset cgroup rw,relatime,cpuset 0 0\n"
        "cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n"
    )
    mounts = cgroupfs.detect_mounts(tmp_path)
    assert mounts.version == 1
    assert mounts.controller_dir("cpu") == tmp_path / "sys/fs/cgroup/cpu,cpuacct"
    assert mounts.controller_dir("cpuacct") == mounts.controller_dir("cpu")
    assert mounts.controller_dir("cpuset") == tmp_path / "sys/fs/cgroup/cpuset"


def test_mounts_decide_v2_with_only_a_unified_hierarchy(tmp_path: Path) -> None:
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/mounts").write_text(
        "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime 0 0\n"
    )
    mounts = cgroupfs.detect_mounts(tmp_path)
    assert mounts.version == 2
    assert mounts.controller_dir("memory") == tmp_path / "sys/fs/cgroup"


def test_no_cgroup_hierarchy_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no cgroup hierarchy"):
        cgroupfs.detect_mounts(tmp_path)


@pytest.mark.parametrize(
    ("name", "driver", "uid"),
    [
        ("pod1b4e-22", "cgroupfs", "1b4e-22"),
        ("kubepods-burstable-pod1b4e_22_33.slice", "systemd", "1b4e-22-33"),
        ("kubepods-pod1b4e_22.slice", "systemd", "1b4e-22"),
    ],
)
def test_pod_directory_names(name: str, driver: str, uid: str) -> None:
    found = cgroupfs.parse_pod_dir(name, "burstable", driver)
    assert found is not None and found.uid == uid


@pytest.mark.parametrize(
    "name", ["burstable", "kubepods-burstable.slice", "system.slice", "podx.scope"]
)
def test_non_pod_directories_are_not_pods(name: str) -> None:
    assert cgroupfs.parse_pod_dir(name, "burstable", "systemd") is None


HEX = "a" * 64


@pytest.mark.parametrize(
    "name",
    [HEX, f"cri-containerd-{HEX}.scope", f"crio-{HEX}.scope", f"docker-{HEX}.scope", f"crio-{HEX}"],
)
def test_container_directory_names(name: str) -> None:
    found = cgroupfs.parse_container_dir(name)
    assert found is not None and found.container_id == HEX


@pytest.mark.parametrize("name", [f"crio-conmon-{HEX}.scope", "a" * 63, "init.scope", "app"])
def test_non_container_directories_are_skipped(name: str) -> None:
    assert cgroupfs.parse_container_dir(name) is None


@given(
    st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
        min_size=1,
        max_size=20,
    )
)
def test_mount_points_with_escaped_characters_read_back(name: str) -> None:
    # the kernel writes space, tab, newline and backslash in mount points as \ooo
    escaped = "".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in name)
    (entry,) = cgroupfs.parse_mounts(f"cgroup /sys/fs/cgroup/{escaped} cgroup rw,cpu 0 0\n")
    assert entry.mount_point == f"/sys/fs/cgroup/{name}"
    assert entry.options == ("rw", "cpu")


@given(st.dictionaries(st.from_regex(r"[a-z_]{1,12}", fullmatch=True), st.integers(0, 2**63)))
def test_keyed_files_round_trip(values: dict[str, int]) -> None:
    text = "".join(f"{k} {v}\n" for k, v in values.items())
    assert cgroupfs.parse_keyed(text) == values
