"""Parsers of /proc and sysfs files."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pykatalyst.agent.host import procfs


def test_meminfo_values_come_out_in_bytes() -> None:
    text = "MemTotal:       16384 kB\nMemFree:  1024 kB\nHugePages_Total:       4\nbad line\n"
    info = procfs.parse_meminfo(text)
    assert info["MemTotal"] == 16384 * 1024
    assert info["MemFree"] == 1024 * 1024
    assert info["HugePages_Total"] == 4  # counts are not scaled


def test_node_meminfo() -> None:
    text = "Node 1 MemTotal:        4417308 kB\nNode 1 Inactive(file):   100 kB\n"
    info = procfs.parse_node_meminfo(text)
    assert info == {"MemTotal": 4417308 * 1024, "Inactive(file)": 100 * 1024}


def test_proc_stat_busy_excludes_idle_and_iowait() -> None:
    text = (
        "cpu  9 9 9 9 9 9 9 9 0 0\n"
        "cpu0 10 1 5 100 4 1 2 3 7 0\n"
        "cpu1 0 0 0 50 0 0 0 0 0 0\n"
        "intr 1 2 3\n"
    )
    cpus = procfs.parse_proc_stat_cpus(text)
    assert set(cpus) == {0, 1}
    # total counts user..steal once (guest is inside user already)
    assert cpus[0].total == 10 + 1 + 5 + 100 + 4 + 1 + 2 + 3
    assert cpus[0].busy == cpus[0].total - 100 - 4
    assert cpus[1].busy == 0


def test_pressure_file() -> None:
    text = (
        "some avg10=1.50 avg60=0.31 avg300=0.44 total=4697229\n"
        "full avg10=0.25 avg60=0.00 avg300=0.00 total=0\n"
    )
    p = procfs.parse_pressure(text)
    assert p.some_avg10 == 1.5 and p.full_avg10 == 0.25 and p.some_total_us == 4697229
    # the cpu file of older kernels has no "full" line
    assert procfs.parse_pressure(text.splitlines()[0]).full_avg10 is None


def test_zoneinfo_sums_zones_per_node() -> None:
    text = """Node 0, zone      DMA
  per-node stats
      nr_inactive_anon 2607
  pages free     3840
        boost    0
        min      58
        low      72
        high     86
        spanned  4095
Node 0, zone   Normal
  pages free     100
        min      10
        low      20
        high     30
Node 1, zone   Normal
  pages free     7
        min      1
        low      2
        high     3
"""
    marks = procfs.parse_zoneinfo(text)
    assert marks[0].min == 68 and marks[0].low == 92 and marks[0].high == 116
    assert marks[0].free == 3940
    assert (marks[1].min, marks[1].low, marks[1].high, marks[1].free) == (1, 2, 3, 7)


@given(
    st.text(alphabet=st.characters(blacklist_characters="\x00\n"), max_size=16),
    st.sampled_from("RSDZTI"),
)
def test_pid_state_survives_any_command_name(comm: str, state: str) -> None:
    text = f"4242 ({comm}) {state} 1 4242 4242 0 -1 4194304 102 0\n"
    assert procfs.parse_pid_state(text) == state


def test_loadavg() -> None:
    assert procfs.parse_loadavg("0.19 0.13 0.06 1/96 7692\n") == (0.19, 0.13, 0.06)
