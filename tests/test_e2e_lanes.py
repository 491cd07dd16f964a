"""The e2e suite's lanes name real files and tests: a renamed file or test would otherwise
move silently into the node lane (or, for an "alone" file, run beside other tests)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.e2e.conftest import ALONE_TESTS, API_TESTS, WAIT_TESTS

E2E = Path(__file__).parent / "e2e"


def _tests_of(file: Path) -> set[str]:
    tree = ast.parse(file.read_text())
    return {
        n.name
        for n in tree.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith("test_")
    }


def test_every_lane_entry_names_an_existing_file_and_test() -> None:
    for entry in sorted(ALONE_TESTS | API_TESTS | WAIT_TESTS):
        file, _, test = entry.partition("::")
        path = E2E / file
        assert path.is_file(), f"{entry}: no such e2e file"
        if test:
            assert test in _tests_of(path), f"{entry}: no such test in {file}"


def test_no_test_is_in_two_lanes() -> None:
    def covers(a: str, b: str) -> bool:
        return a == b or b.startswith(a + "::") or a.startswith(b + "::")

    tables = (ALONE_TESTS, API_TESTS, WAIT_TESTS)
    clash = [
        (a, b)
        for i, one in enumerate(tables)
        for other in tables[i + 1 :]
        for a in one
        for b in other
        if covers(a, b)
    ]
    assert not clash
