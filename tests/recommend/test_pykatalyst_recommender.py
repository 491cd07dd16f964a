"""pykatalyst's recommender: model choice, memory peaks and floor, OOM bump, hysteresis, limits."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.recommend import (
    CurrentResources,
    OOMEvent,
    RecommendationNotReady,
    UsageSeries,
    get_recommender,
)
from pykatalyst.recommend.ensemble import PykatalystSettings, oom_needed

HOUR = 3600.0
DAY = 86400.0
MIB = 1024.0 * 1024.0
T0 = 1_700_000_000.0
rec = get_recommender("pykatalyst")


def five_minutely(days: float, cpu: np.ndarray | float, memory: np.ndarray | float) -> UsageSeries:
    t = T0 + 300.0 * np.arange(int(days * 288))
    return UsageSeries.of(t, np.broadcast_to(cpu, t.shape), np.broadcast_to(memory, t.shape))


def test_short_history_is_not_ready() -> None:
    series = five_minutely(0.1, 1.0, 100 * MIB)
    with pytest.raises(RecommendationNotReady, match="at least 6h"):
        rec.recommend(series, float(series.timestamps[-1]))


def test_steady_usage_gets_a_tight_request_and_explains_its_model() -> None:
    rng = np.random.default_rng(1)
    n = 7 * 288
    series = five_minutely(7, 1.0 + 0.02 * rng.standard_normal(n), 500 * MIB)
    now = float(series.timestamps[-1]) + 1
    out = rec.recommend(series, now)
    assert out.cpu_request is not None and 1.0 < out.cpu_request < 1.25
    assert out.memory_request is not None and 500 * MIB <= out.memory_request < 600 * MIB
    cpu = out.terms["cpu"]
    assert cpu.model.startswith("half-life") and cpu.samples == n
    assert cpu.percentile in (0.9, 0.95, 0.99)


def test_memory_never_below_the_last_days_peak() -> None:
    memory = np.full(7 * 288, 200 * MIB)
    memory[-10] = 900 * MIB  # one peak an hour ago
    series = five_minutely(7, 0.5, memory)
    now = float(series.timestamps[-1]) + 1
    out = rec.recommend(series, now)
    assert out.memory_request is not None and out.memory_request >= 900 * MIB * 1.05
    # Even a model that would ignore the peak (the median, no margin) is lifted by the floor.
    grid = PykatalystSettings().memory.model_copy(update={"percentiles": (0.5,), "margins": (0.0,)})
    low = rec.recommend(series, now, PykatalystSettings(memory=grid))
    assert low.memory_request == pytest.approx(900 * MIB * 1.05)
    assert any("floor" in n for n in low.terms["memory"].notes)


def test_oom_bump_reads_limit_and_peak_fades_and_is_clipped() -> None:
    settings_ = PykatalystSettings()
    event = OOMEvent(0.0, memory_request=500 * MIB, memory_limit=800 * MIB, peak=700 * MIB)
    assert oom_needed(event, settings_) == pytest.approx(800 * MIB * 1.2)
    clipped = PykatalystSettings(max_allowed_memory=850 * MIB)
    assert oom_needed(event, clipped) == 850 * MIB
    series = five_minutely(7, 0.5, 300 * MIB)
    now = float(series.timestamps[-1]) + 1
    plain = rec.recommend(series, now).memory_request
    fresh = rec.recommend(series, now, oom_events=[OOMEvent(now - 60, 500 * MIB, 800 * MIB)])
    old = rec.recommend(series, now, oom_events=[OOMEvent(now - 4 * DAY, 500 * MIB, 800 * MIB)])
    assert plain is not None and fresh.memory_request is not None and old.memory_request
    assert fresh.memory_request > old.memory_request > plain
    assert fresh.terms["memory"].oom_bump == fresh.memory_request
    capped = rec.recommend(
        series, now, clipped, oom_events=[OOMEvent(now - 60, 500 * MIB, 800 * MIB)]
    )
    assert capped.memory_request is not None
    assert 800 * MIB < capped.memory_request <= 850 * MIB


def test_model_choice_follows_the_workload() -> None:
    # Spiky cpu: rare bursts cost shortfall, so a higher percentile or margin is chosen than
    # for a flat workload.
    rng = np.random.default_rng(2)
    n = 7 * 288
    flat = five_minutely(7, 1.0 + 0.01 * rng.standard_normal(n), 100 * MIB)
    spiky_cpu = np.where(rng.random(n) < 0.06, 4.0, 1.0)
    spiky = five_minutely(7, spiky_cpu, 100 * MIB)
    now = float(flat.timestamps[-1]) + 1
    a = rec.recommend(flat, now).terms["cpu"]
    b = rec.recommend(spiky, now).terms["cpu"]
    assert (b.percentile, b.margin) > (a.percentile, a.margin)


def test_hysteresis_holds_small_changes_and_grows_at_once() -> None:
    series = five_minutely(7, 1.0, 400 * MIB)
    now = float(series.timestamps[-1]) + 1
    base = rec.recommend(series, now)
    assert base.cpu_request is not None and base.memory_request is not None
    near = CurrentResources(cpu_request=base.cpu_request * 1.05, memory_request=base.memory_request)
    held = rec.recommend(series, now, current=near)
    assert held.cpu_request == near.cpu_request
    assert any("within 10%" in n for n in held.terms["cpu"].notes)
    recent = CurrentResources(cpu_request=0.5, changed_at=now - 60)
    assert rec.recommend(series, now, current=recent).cpu_request == 0.5
    throttled = CurrentResources(cpu_request=0.5, changed_at=now - 60, throttled=True)
    grown = rec.recommend(series, now, current=throttled)
    assert grown.cpu_request == base.cpu_request
    # Memory within 10 % of its limit grows at once too.
    tight = CurrentResources(memory_request=300 * MIB, memory_limit=410 * MIB, changed_at=now - 60)
    assert rec.recommend(series, now, current=tight).memory_request == base.memory_request


def test_limits_keep_the_declared_ratio_or_stay() -> None:
    series = five_minutely(7, 1.0, 400 * MIB)
    now = float(series.timestamps[-1]) + 1
    current = CurrentResources(cpu_request=4.0, cpu_limit=8.0, memory_request=1e9, memory_limit=2e9)
    out = rec.recommend(series, now, current=current)
    assert out.cpu_request is not None and out.cpu_limit == pytest.approx(2 * out.cpu_request)
    assert out.memory_request is not None
    assert out.memory_limit == pytest.approx(2 * out.memory_request)
    only = rec.recommend(
        series, now, PykatalystSettings(controlled_values="RequestsOnly"), current=current
    )
    assert only.cpu_limit == 8.0 and only.memory_limit == 2e9


@settings(max_examples=25, deadline=None)
@given(
    st.floats(min_value=0.05, max_value=16.0),
    st.floats(min_value=0.0, max_value=0.5),
    st.integers(min_value=0, max_value=2**31),
)
def test_request_covers_most_of_the_usage(level: float, noise: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 4 * 288
    cpu = np.maximum(level * (1 + noise * rng.standard_normal(n)), 0)
    memory = np.maximum(300 * MIB * (1 + 0.1 * rng.standard_normal(n)), 0)
    series = five_minutely(4, cpu, memory)
    out = rec.recommend(series, float(series.timestamps[-1]) + 1)
    assert out.cpu_request is not None and out.memory_request is not None
    # At least the median of recent usage, and never under the last day's memory peak.
    assert out.cpu_request >= np.median(cpu[-288:]) * 0.98
    assert out.memory_request >= memory[-288:].max()
    assert out.cpu_request <= max(cpu.max() * 1.25, 0.01) + 1e-9


def test_daily_schedule_follows_the_hour_when_enabled() -> None:
    hours = (np.arange(7 * 288) * 300.0 / HOUR) % 24
    cpu = np.where((hours >= 9) & (hours < 17), 4.0, 0.5)
    series = five_minutely(7, cpu, 100 * MIB)
    on = PykatalystSettings(cpu_schedule=True)
    night = T0 + 6 * DAY + 2 * HOUR
    day = T0 + 6 * DAY + 12 * HOUR
    at_night = rec.recommend(series.before(night), night, on)
    at_day = rec.recommend(series.before(day), day, on)
    assert at_night.cpu_request is not None and at_day.cpu_request is not None
    assert at_night.cpu_request < 1.0 < 4.0 <= at_day.cpu_request
    assert any("daily schedule" in n for n in at_night.terms["cpu"].notes)
    flat = rec.recommend(series.before(night), night)
    assert flat.cpu_request is not None and flat.cpu_request >= 4.0
