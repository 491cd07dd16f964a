"""The one token bucket: a burst at once, then the rate, never more than the burst saved
up, on the caller's clock."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pykatalyst.cluster.ratelimit import TokenBucket


def test_a_full_bucket_then_the_rate() -> None:
    bucket = TokenBucket(2.0, 3, now=0.0)
    assert [bucket.try_take(0.0) for _ in range(4)] == [True, True, True, False]
    assert bucket.try_take(0.4) is False  # 0.8 of a token
    assert bucket.try_take(0.5) is True
    assert bucket.available(100.0) == 3  # never more than the burst


def test_one_token_per_period() -> None:
    bucket = TokenBucket(0.0, 1, period_s=300.0, now=0.0)
    assert bucket.try_take(0.0) is True
    assert bucket.try_take(299.0) is False
    assert bucket.try_take(300.0) is True


def test_a_reservation_in_debt_says_how_long_to_wait() -> None:
    bucket = TokenBucket(5.0, 1, now=0.0)
    assert bucket.reserve(0.0) == 0.0
    assert bucket.reserve(0.0) == 0.2
    assert bucket.reserve(0.0) == 0.4


def test_a_bucket_without_a_start_fills_from_its_first_look() -> None:
    bucket = TokenBucket(1.0, 2)
    assert bucket.available(50.0) == 2
    bucket.take(5)
    assert bucket.available(50.0) == 0  # spent down to zero, not below
    assert bucket.available(51.0) == 1


@given(
    rate=st.floats(0.01, 100),
    burst=st.integers(1, 50),
    steps=st.lists(st.tuples(st.floats(0, 10), st.booleans()), max_size=40),
)
def test_never_more_taken_than_the_burst_plus_the_rate_allows(
    rate: float, burst: int, steps: list[tuple[float, bool]]
) -> None:
    bucket = TokenBucket(rate, burst, now=0.0)
    now, taken = 0.0, 0
    for dt, want in steps:
        now += dt
        if want and bucket.try_take(now):
            taken += 1
        assert 0 <= bucket.available(now) <= burst
    assert taken <= burst + rate * now + 1e-6


def test_is_due_never_run_then_every_period() -> None:
    from pykatalyst.cluster.clock import is_due

    assert is_due(None, 0.0, 60.0)
    assert not is_due(0.0, 59.9, 60.0)
    assert is_due(0.0, 60.0, 60.0)
    # ten steps of 0.1 s sum to a hair under 1 s: the slack makes that run on time
    step_sum = sum([0.1] * 10)
    assert not is_due(0.0, step_sum, 1.0)
    assert is_due(0.0, step_sum, 1.0, slack_s=1e-6)
