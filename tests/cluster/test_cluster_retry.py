"""A write that lost a race is rebuilt from a fresh read and tried again, a bounded number
of times; past that the Conflict reaches the caller."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pykatalyst.cluster.protocol import Conflict, NotFound
from pykatalyst.cluster.retry import retry_on_conflict


@given(losses=st.integers(0, 6), attempts=st.integers(1, 5))
def test_the_write_is_tried_until_it_wins_or_the_attempts_run_out(
    losses: int, attempts: int
) -> None:
    tried: list[int] = []

    def write(attempt: int) -> str:
        tried.append(attempt)
        if len(tried) <= losses:
            raise Conflict("the object has been modified")
        return "written"

    if losses < attempts:
        assert retry_on_conflict(write, attempts) == "written"
        assert tried == list(range(losses + 1))
    else:
        with pytest.raises(Conflict):
            retry_on_conflict(write, attempts)
        assert tried == list(range(attempts))


def test_other_errors_are_not_retried() -> None:
    tried: list[int] = []

    def write(attempt: int) -> None:
        tried.append(attempt)
        raise NotFound("gone")

    with pytest.raises(NotFound):
        retry_on_conflict(write)
    assert tried == [0]


def test_at_least_one_attempt() -> None:
    with pytest.raises(ValueError, match="attempts must be >= 1"):
        retry_on_conflict(lambda attempt: None, 0)
