"""Katalyst's ResourceRecommend percentile rule: readiness, target, rounding and OOM bump."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from pykatalyst.recommend import (
    CPU_LAYOUT,
    MEMORY_LAYOUT,
    KatalystSettings,
    OOMEvent,
    RecommendationNotReady,
    UsageSeries,
    build_histogram,
    get_recommender,
    match_oom_records,
)
from pykatalyst.recommend.katalyst import oom_bump, round_memory

HOUR = 3600.0
DAY = 24 * HOUR
MIB = 1024.0 * 1024.0
T0 = 1_700_000_000.0


def minutely(days: float, cpu: float | np.ndarray, memory: float | np.ndarray) -> UsageSeries:
    t = T0 + 60.0 * np.arange(int(days * 1440))
    return UsageSeries.of(t, np.broadcast_to(cpu, t.shape), np.broadcast_to(memory, t.shape))


def test_names_and_aliases() -> None:
    assert get_recommender("katalyst").name == "katalyst"
    assert get_recommender("default").name == "katalyst"
    assert get_recommender("").name == "katalyst"
    with pytest.raises(ValueError, match=r"accepted: .*katalyst"):
        get_recommender("nope")


def test_constant_usage_gives_bucket_end_times_buffer() -> None:
    series = minutely(3, 0.5, 300 * MIB)
    rec = get_recommender("katalyst").recommend(series, now=float(series.timestamps[-1]))
    cpu_end = CPU_LAYOUT.bucket_start(int(CPU_LAYOUT.find_buckets(np.array([0.5]))[0]) + 1)
    assert rec.cpu_request == int(cpu_end * 1.3 * 1000) / 1000
    mem_end = MEMORY_LAYOUT.bucket_start(
        int(MEMORY_LAYOUT.find_buckets(np.array([300 * MIB]))[0]) + 1
    )
    assert rec.memory_request == round_memory(mem_end * 1.3)
    assert rec.memory_request is not None and rec.memory_request % MIB == 0
    assert rec.cpu_limit is None and rec.memory_limit is None  # only requests
    assert rec.terms["cpu"].percentile == 0.9 and rec.terms["cpu"].margin == 0.3
    assert rec.terms["memory"].half_life_s == DAY


def test_buffer_percent_and_half_life_are_honoured() -> None:
    series = minutely(3, 0.5, 300 * MIB)
    now = float(series.timestamps[-1])
    rec = get_recommender("katalyst").recommend(
        series, now, KatalystSettings(cpu_buffer_percent=0, half_life_hours=6)
    )
    cpu_end = CPU_LAYOUT.bucket_start(int(CPU_LAYOUT.find_buckets(np.array([0.5]))[0]) + 1)
    assert rec.cpu_request == int(cpu_end * 1000) / 1000
    assert rec.terms["cpu"].half_life_s == 6 * HOUR


@pytest.mark.parametrize(
    ("days", "now_after_last", "message"),
    [
        (0.5, 0.0, "The data sample is insufficient to obtain the predicted value"),
        (3, 25 * HOUR, "no samples in the last 24 hours"),
    ],
)
def test_not_ready_with_katalysts_messages(
    days: float, now_after_last: float, message: str
) -> None:
    series = minutely(days, 0.5, 300 * MIB)
    now = float(series.timestamps[-1]) + now_after_last
    with pytest.raises(RecommendationNotReady) as info:
        get_recommender("katalyst").recommend(series, now)
    assert info.value.message == message
    assert info.value.reason == "RecommendationNotReady"


def test_no_samples_is_data_preparing() -> None:
    empty = UsageSeries.of([], [], [])
    with pytest.raises(RecommendationNotReady, match="data preparing"):
        get_recommender("katalyst").recommend(empty, T0)


def test_cpu_samples_are_load_weighted() -> None:
    # 80 % of the time at 0.1 core, 20 % at 2 cores: by time p90 is 2 cores either way, but
    # with 70 % / 30 % split and load weights the heavy samples dominate even more.
    n = 4 * 1440
    cpu = np.where(np.arange(n) % 10 < 9, 0.1, 2.0)  # 90 % light by time
    series = minutely(4, cpu, 300 * MIB)
    rec = get_recommender("katalyst").recommend(
        series, float(series.timestamps[-1]), KatalystSettings(cpu_buffer_percent=0)
    )
    # Time-weighted p90 would be the light bucket; load-weighted (0.1 vs 2.0) puts 69 % of
    # the weight on the 2-core samples, so p90 is the heavy bucket.
    assert rec.terms["cpu"].estimate > 1.9


def test_memory_uses_one_peak_per_hourly_run() -> None:
    # A one-minute spike every hour: each hourly run adds that hour's peak, so p90 is the spike.
    n = 3 * 1440
    memory = np.where(np.arange(n) % 60 == 30, 900 * MIB, 200 * MIB)
    series = minutely(3, 0.2, memory)
    rec = get_recommender("katalyst").recommend(series, float(series.timestamps[-1]))
    assert rec.terms["memory"].estimate >= 900 * MIB
    # One sample per run (the 25 h back-fill counts as one), not one per minute.
    assert rec.terms["memory"].samples < 60


def test_only_samples_seen_by_a_run_count() -> None:
    # The last cpu run is at most 10 min before now: a later burst is not seen yet.
    series = minutely(3, 0.5, 300 * MIB)
    start = T0 + 25 * HOUR
    now = start + 30 * HOUR + 5 * 60
    burst = UsageSeries.of(
        np.r_[series.timestamps, [now - 60]], np.r_[series.cpu, [50.0]], np.r_[series.memory, [1e9]]
    )
    settings = KatalystSettings(task_start_s=start)
    rec_a = get_recommender("katalyst").recommend(series.before(now - 61), now, settings)
    rec_b = get_recommender("katalyst").recommend(burst, now, settings)
    assert rec_a.cpu_request == rec_b.cpu_request


def test_oom_bump_overrides_when_larger_and_recent() -> None:
    series = minutely(3, 0.2, 100 * MIB)
    now = float(series.timestamps[-1])
    katalyst = get_recommender("katalyst")
    plain = katalyst.recommend(series, now)
    event = OOMEvent(timestamp=now - 3600, memory_request=1024 * MIB)
    bumped = katalyst.recommend(series, now, oom_events=[event])
    assert bumped.memory_request == round_memory(max(1024 * MIB + 100 * MIB, 1.2 * 1024 * MIB))
    assert bumped.terms["memory"].oom_bump == bumped.memory_request
    assert plain.memory_request is not None and plain.memory_request < bumped.memory_request
    old = OOMEvent(timestamp=now - 8 * DAY, memory_request=1024 * MIB)
    assert katalyst.recommend(series, now, oom_events=[old]).memory_request == plain.memory_request
    # Katalyst takes the first matching record, then checks its age: an old first record
    # hides a recent second one.
    assert (
        katalyst.recommend(series, now, oom_events=[old, event]).memory_request
        == plain.memory_request
    )


def test_oom_record_matching_is_katalysts() -> None:
    records = [
        OOMEvent(1.0, 1e9, pod="web-7d4b9c-abcde", namespace="ns", container="app"),
        OOMEvent(2.0, 1e9, pod="webhook-1", namespace="ns", container="app"),
        OOMEvent(3.0, 1e9, pod="web-1", namespace="other", container="app"),
        OOMEvent(4.0, 1e9, pod="web-2", namespace="ns", container="sidecar"),
    ]
    # The prefix rule is Katalyst's: "webhook-1" matches workload "web" too.
    assert [r.timestamp for r in match_oom_records(records, "ns", "web", "app")] == [1.0, 2.0]


@given(st.floats(min_value=0, max_value=1e13))
def test_oom_bump_is_at_least_both_rules_rounded_up(request: float) -> None:
    bumped = oom_bump(OOMEvent(0.0, request))
    needed = max(int(request) + 100 * MIB, int(request * 1.2))
    assert bumped >= needed
    assert bumped % MIB == 0
    assert bumped - needed < MIB


@given(st.floats(min_value=0, max_value=1e13))
def test_memory_rounding(value: float) -> None:
    rounded = round_memory(value)
    whole = int(value)
    assert rounded >= whole
    unit = 1 if whole < 1024 else 1024 if whole < 1024 * 1024 else MIB
    assert rounded % unit == 0
    assert rounded - whole < unit


@settings(max_examples=30, deadline=None)
@given(
    arrays(np.float64, 1440 * 2, elements=st.floats(min_value=0.0, max_value=8.0)),
    st.sampled_from([0, 10, 30, 100]),
)
def test_cpu_target_matches_a_direct_histogram(cpu: np.ndarray, buffer: int) -> None:
    series = minutely(2, cpu, 200 * MIB)
    now = T0 + 48 * HOUR  # a cpu run falls here and sees every sample
    settings_ = KatalystSettings(resources=("cpu",), cpu_buffer_percent=buffer)
    rec = get_recommender("katalyst").recommend(series, now, settings_)
    hist = build_histogram(CPU_LAYOUT, cpu, np.maximum(cpu, 0.1), series.timestamps, DAY)
    assert rec.cpu_request == int(hist.percentile(0.9) * (1 + buffer / 100) * 1000) / 1000
    assert rec.memory_request is None
    assert rec.terms["cpu"].samples == cpu.size


def test_bad_series_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"cpu\[1\]"):
        UsageSeries.of([1, 2], [0.1, float("nan")], [1, 2])
    with pytest.raises(ValueError, match=r"memory\[0\]"):
        UsageSeries.of([1], [0.1], [-5])
    with pytest.raises(ValueError, match="differ in length"):
        UsageSeries.of([1, 2], [0.1], [1, 2])
