"""The usage CSV: streamed, gzip or plain, any row order, bad rows named by line and field."""

from __future__ import annotations

import gzip
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.recommend.usage_csv import UsageFileError, read_usage_csv

HEADER = "workload,container,timestamp,cpu,memory\n"


def write(path: Path, text: str, gz: bool = False) -> Path:
    if gz:
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


def test_reads_plain_and_gzip_in_any_order(tmp_path: Path) -> None:
    body = HEADER + "a,c,20,0.5,100\nb,c,10,1,200\na,c,10,0.25,50\n"
    for gz in (False, True):
        data = read_usage_csv(write(tmp_path / f"u{gz}.csv", body, gz))
        assert set(data) == {("a", "c"), ("b", "c")}
        assert data[("a", "c")].timestamps.tolist() == [10.0, 20.0]
        assert data[("a", "c")].cpu.tolist() == [0.25, 0.5]
        assert data[("a", "c")].memory.tolist() == [50.0, 100.0]


def test_columns_in_another_order_and_extra_columns(tmp_path: Path) -> None:
    body = "memory,extra,cpu,timestamp,container,workload\n7,x,0.1,5,c,w\n"
    data = read_usage_csv(write(tmp_path / "u.csv", body))
    assert data[("w", "c")].memory.tolist() == [7.0]


def test_at_skips_later_samples(tmp_path: Path) -> None:
    body = HEADER + "a,c,10,1,1\na,c,20,1,1\na,c,30,1,1\n"
    assert read_usage_csv(write(tmp_path / "u.csv", body), at=20).get(
        ("a", "c")
    ).timestamps.tolist() == [10.0]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("body", "line", "field"),
    [
        ("workload,container,timestamp,cpu\n", 1, "header"),
        (HEADER + "a,c,10,1,1\na,c,11,-0.5,1\n", 3, "cpu"),
        (HEADER + "a,c,10,nan,1\n", 2, "cpu"),
        (HEADER + "a,c,10,1,inf\n", 2, "memory"),
        (HEADER + "a,c,ten,1,1\n", 2, "timestamp"),
        (HEADER + "a,c,10,1\n", 2, "memory"),
        (HEADER + ",c,10,1,1\n", 2, "workload"),
        (HEADER + "a,c,10,1,1\nb,c,5,1,1\na,c,10,2,2\n", 4, "timestamp"),
        ("", 1, "header"),
    ],
)
def test_bad_rows_name_the_line_and_field(tmp_path: Path, body: str, line: int, field: str) -> None:
    with pytest.raises(UsageFileError) as info:
        read_usage_csv(write(tmp_path / "u.csv", body))
    assert info.value.line == line
    assert info.value.field == field
    assert f"u.csv:{line}" in str(info.value) and "accepted:" in str(info.value)


def test_garbage_gzip_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "u.csv.gz"
    path.write_bytes(b"\x1f\x8b" + b"not really gzip" * 10)
    with pytest.raises(UsageFileError, match="field file"):
        read_usage_csv(path)


def test_history_is_bounded_while_streaming(tmp_path: Path) -> None:
    # 20,000 samples a minute apart; only the last hour is kept, so the buffers stay small.
    rows = "".join(f"a,c,{60 * i},1,1\n" for i in range(20_000))
    data = read_usage_csv(write(tmp_path / "u.csv", HEADER + rows), history_s=3600.0)
    series = data[("a", "c")]
    assert series.timestamps[-1] == 60.0 * 19_999
    assert series.timestamps[0] >= 60.0 * 19_999 - 3600.0
    assert len(series) <= 61
    with pytest.raises(UsageFileError, match="at most 100 samples"):
        read_usage_csv(write(tmp_path / "v.csv", HEADER + rows), max_samples=100)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["w1", "w2"]),
            st.integers(min_value=0, max_value=10_000),
            st.floats(min_value=0, max_value=64, allow_nan=False),
            st.integers(min_value=0, max_value=2**40),
        ),
        max_size=40,
        unique_by=lambda r: (r[0], r[1]),
    )
)
def test_round_trip(tmp_path_factory: pytest.TempPathFactory, rows: list[tuple]) -> None:  # type: ignore[type-arg]
    path = tmp_path_factory.mktemp("rt") / "u.csv"
    write(path, HEADER + "".join(f"{w},c,{t},{c!r},{m}\n" for w, t, c, m in rows))
    data = read_usage_csv(path)
    for workload in {r[0] for r in rows}:
        mine = sorted((t, c, m) for w, t, c, m in rows if w == workload)
        series = data[(workload, "c")]
        assert series.timestamps.tolist() == [float(t) for t, _, _ in mine]
        assert np.array_equal(series.cpu, np.array([c for _, c, _ in mine]))
        assert series.memory.tolist() == [float(m) for _, _, m in mine]


@settings(max_examples=15, deadline=None)
@given(
    st.integers(min_value=1, max_value=400),
    st.integers(min_value=1, max_value=12),
    st.integers(min_value=600, max_value=5000),
    st.randoms(use_true_random=False),
)
def test_many_containers_any_order_each_keeps_its_own_history(
    tmp_path_factory: pytest.TempPathFactory,
    containers: int,
    per: int,
    history_s: int,
    rnd: Any,
) -> None:
    # enough rows to fill, trim and grow the shared columns several times
    rows = [(f"w{i}", 300 * j + i, j, i) for i in range(containers) for j in range(per)]
    rnd.shuffle(rows)
    path = tmp_path_factory.mktemp("many") / "u.csv"
    write(path, HEADER + "".join(f"{w},c,{t},{c},{m}\n" for w, t, c, m in rows))
    data = read_usage_csv(path, history_s=float(history_s))
    assert len(data) == containers
    for i in range(containers):
        newest = 300 * (per - 1) + i
        want = [300 * j + i for j in range(per) if 300 * j + i >= newest - history_s]
        series = data[(f"w{i}", "c")]
        assert series.timestamps.tolist() == want
        assert series.memory.tolist() == [float(i)] * len(want)


def test_a_duplicate_among_many_containers_names_its_line(tmp_path: Path) -> None:
    rows = [f"w{i},c,{t},1,1\n" for t in range(3) for i in range(1500)]
    rows.append("w7,c,1,2,2\n")  # line 2 + 4500: the second sample of w7 at t=1
    with pytest.raises(UsageFileError, match=r"u\.csv:4502: field timestamp '1\.0'.*'w7'"):
        read_usage_csv(write(tmp_path / "u.csv", HEADER + "".join(rows)))


def test_a_container_costs_its_samples_and_name_not_a_buffer(tmp_path: Path) -> None:
    # 5,000 containers of 2 samples: a per-container buffer of a few KB would be tens of MB
    rows = "".join(f"w{i},main,{t},0.5,100\n" for t in (0, 300) for i in range(5000))
    path = write(tmp_path / "u.csv", HEADER + rows)
    tracemalloc.start()
    data = read_usage_csv(path)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(data) == 5000 and len(data[("w4999", "main")]) == 2
    assert peak < 5000 * 2048


@pytest.mark.parametrize(
    ("row", "field"),
    [("a,c,30,-1,1", "cpu"), ("a,c,30,1,nan", "memory"), ("a,c,x,1,1", "timestamp")],
)
def test_rows_after_at_are_checked_all_the_same(tmp_path: Path, row: str, field: str) -> None:
    body = HEADER + f"a,c,10,1,1\n{row}\n"
    with pytest.raises(UsageFileError, match=rf"u\.csv:3: field {field} "):
        read_usage_csv(write(tmp_path / "u.csv", body), at=20)
