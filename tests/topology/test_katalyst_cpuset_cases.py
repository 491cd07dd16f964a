"""katalyst-core's cpuset facts (pkg/util/machine/cpuset_test.go) against our CPUSet."""

from __future__ import annotations

import pytest

from pykatalyst.topology.cpuset import CPUSet

STRING_CASES = [
    ([1], "1"),
    ([1, 2, 3], "1-3"),
    ([1, 3, 5], "1,3,5"),
    ([1, 2, 3, 5, 6], "1-3,5-6"),
    ([], ""),
]
PARSE_CASES = [
    ("1", [1]),
    ("1-3", [1, 2, 3]),
    ("1-3,5,7-9", [1, 2, 3, 5, 7, 8, 9]),
    ("", []),
]
INVALID = ["abc", "1,2,3,", "1..3"]


@pytest.mark.parametrize(("cpus", "text"), STRING_CASES)
def test_cpuset_string(cpus: list[int], text: str) -> None:
    assert str(CPUSet.of(cpus)) == text


@pytest.mark.parametrize(("text", "cpus"), PARSE_CASES)
def test_cpuset_parse(text: str, cpus: list[int]) -> None:
    assert CPUSet.parse(text) == CPUSet.of(cpus)


@pytest.mark.parametrize("text", INVALID)
def test_cpuset_parse_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        CPUSet.parse(text)
