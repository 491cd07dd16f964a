"""CPUSet reads and writes the kernel's list format and behaves like a set."""

from __future__ import annotations

import itertools
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pykatalyst.topology.cpuset import CPUSet, CPUSetError


@pytest.mark.parametrize(
    ("text", "cpus", "canonical"),
    [
        ("", [], ""),
        ("\n", [], ""),
        ("0", [0], "0"),
        ("0-3,8-11\n", [0, 1, 2, 3, 8, 9, 10, 11], "0-3,8-11"),
        ("  2,1,0 ", [0, 1, 2], "0-2"),
        ("4-5", [4, 5], "4-5"),
        ("7,3-4,3", [3, 4, 7], "3-4,7"),
        ("0-0", [0], "0"),
        ("1,3,5", [1, 3, 5], "1,3,5"),
        ("100-102,2", [2, 100, 101, 102], "2,100-102"),
    ],
)
def test_parse_and_canonical_format(text: str, cpus: list[int], canonical: str) -> None:
    s = CPUSet.parse(text)
    assert list(s) == cpus
    assert str(s) == canonical
    assert len(s) == len(cpus)
    assert repr(s) == f"CPUSet({canonical!r})"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("3-1", "ends before it starts"),
        ("a", "'a' is not a cpu id"),
        ("1,,2", "empty item"),
        ("1,", "empty item"),
        ("-1", "negative"),
        ("1-", "'' is not a cpu id"),
        ("1 - 2", "not a cpu id"),
        ("0x1", "not a cpu id"),
        ("1-2-3", "not a cpu id"),
        ("²", "not a cpu id"),
        ("99999999", "above"),
    ],
)
def test_bad_lists_are_rejected_clearly(text: str, reason: str) -> None:
    with pytest.raises(CPUSetError, match=reason) as info:
        CPUSet.parse(text)
    assert repr(text) in str(info.value)
    assert "0-3,8-11" in str(info.value)


def test_of_rejects_non_cpu_values() -> None:
    for bad in ([-1], [1.0], [True], ["1"]):
        with pytest.raises(CPUSetError):
            CPUSet.of(bad)  # type: ignore[arg-type]


def test_first_min_max_and_helpers() -> None:
    s = CPUSet.parse("3-5,9")
    assert s.first(0).is_empty()
    assert s.first(2) == CPUSet.parse("3-4")
    assert s.first(4) == s
    with pytest.raises(CPUSetError, match="cannot take 5"):
        s.first(5)
    assert (s.min(), s.max()) == (3, 9)
    assert CPUSet.range(2, 5) == CPUSet.parse("2-4")
    assert CPUSet.range(5, 5).is_empty()
    assert CPUSet.of(s) is s
    assert 4 in s and 6 not in s and -1 not in s
    assert pickle.loads(pickle.dumps(s)) == s
    with pytest.raises(AttributeError):
        s._mask = 0  # type: ignore[misc]
    with pytest.raises(CPUSetError):
        CPUSet().min()


cpu_lists = st.lists(st.integers(min_value=0, max_value=300), max_size=60)


@given(cpu_lists)
def test_format_parse_round_trip(cpus: list[int]) -> None:
    s = CPUSet.of(cpus)
    assert CPUSet.parse(str(s)) == s
    assert list(s) == sorted(set(cpus))
    assert len(s) == len(set(cpus))


@given(st.lists(st.tuples(st.integers(0, 200), st.integers(0, 20)), min_size=1, max_size=10))
def test_parse_of_arbitrary_ranges(pairs: list[tuple[int, int]]) -> None:
    text = ",".join(f"{a}-{a + w}" if w else str(a) for a, w in pairs)
    expected = {c for a, w in pairs for c in range(a, a + w + 1)}
    assert set(CPUSet.parse(text)) == expected
    # canonical output is a list of disjoint, non-adjacent, ascending runs
    runs = CPUSet.parse(text).ranges()
    for (_, end), (start, _) in itertools.pairwise(runs):
        assert start > end + 1


@given(cpu_lists, cpu_lists, cpu_lists)
def test_algebra_matches_python_sets(a: list[int], b: list[int], c: list[int]) -> None:
    sa, sb, sc = CPUSet.of(a), CPUSet.of(b), CPUSet.of(c)
    pa, pb = set(a), set(b)
    assert set(sa | sb) == pa | pb
    assert set(sa & sb) == pa & pb
    assert set(sa - sb) == pa - pb
    assert set(sa ^ sb) == pa ^ pb
    assert sa.issubset(sb) == pa.issubset(pb) == (sa <= sb)
    assert sa.issuperset(sb) == pa.issuperset(pb) == (sa >= sb)
    assert sa.isdisjoint(sb) == pa.isdisjoint(pb)
    assert (sa < sb) == (pa < pb)
    assert (sa == sb) == (pa == pb)
    if sa == sb:
        assert hash(sa) == hash(sb)
    assert sa.union(sb, sc) == sa | sb | sc
    assert sa.intersection(sb, sc) == sa & sb & sc
    assert sa.difference(sb, sc) == sa - sb - sc
    assert sa & (sb | sc) == (sa & sb) | (sa & sc)
    assert sa - (sb | sc) == (sa - sb) & (sa - sc)


@given(cpu_lists, st.integers(0, 60))
def test_first_takes_the_lowest(cpus: list[int], n: int) -> None:
    s = CPUSet.of(cpus)
    if n > len(s):
        with pytest.raises(CPUSetError):
            s.first(n)
    else:
        assert list(s.first(n)) == sorted(set(cpus))[:n]
