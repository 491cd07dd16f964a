"""pykatalyst's own recommender (``algorithmPolicy.recommender: pykatalyst``).

It starts from the same decaying-histogram engine as VPA and Katalyst and changes what the
evidence says they get wrong, each change a documented field of ``PykatalystSettings``:

1. **Per-workload model selection** (Google Autopilot's idea). Candidates are
   (half-life, percentile, margin) triples. Each is replayed over the workload's own recent
   history — at every replay point it recommends from the samples before the point and is
   charged for what follows: slack (request above usage), shortfall (usage above request,
   weighted heavier), the share of time under-provisioned (at an absolute rate, so covering
   a small workload's bursts is cheap and a large one stays tight), and its changes. The
   cheapest candidate gives the recommendation, and ``terms.model`` names it.
2. **Memory from short-window peaks**: the per-sample peaks are folded into peaks per
   ``memory_peak_window_s`` (1 h), the percentile is taken over those, and the result never
   goes below the highest peak of the last ``memory_floor_window_s`` × (1 +
   ``memory_floor_margin``) (1 h and 0 by default: on the benchmark a day-long floor added
   memory slack without saving OOMs).
3. **OOM bump** that reads the request, the limit and the observed peak at the kill:
   ``max(x + oom_min_bump_bytes, x × oom_bump_ratio)`` for the largest of them, clipped at
   ``max_allowed_memory``, fading with ``oom_bump_half_life_s`` instead of holding for a week.
4. **A daily cpu schedule** (``cpu_schedule``; only useful with in-place resize): when the
   hourly cpu means correlate with themselves a day earlier above
   ``schedule_min_autocorrelation``, the cpu request follows the hour of day.
5. **Hysteresis** (with ``current``): a request changes only when it moves by more than
   ``change_threshold`` and at most once per ``min_change_interval_s``, but grows at once
   when the cpu was throttled or memory came within ``memory_grow_fraction`` of its limit.
6. **Limits** kept in the ratio the container declared (``controlled_values``
   ``RequestsAndLimits``) or left alone (``RequestsOnly``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from pykatalyst.recommend.histogram import BucketLayout, build_histogram
from pykatalyst.recommend.model import (
    CPU,
    MEMORY,
    CurrentResources,
    FloatArray,
    OOMEvent,
    Recommendation,
    RecommendationNotReady,
    ResourceTerms,
    RunnerUp,
    UsageSeries,
)
from pykatalyst.recommend.settings import DAY, HOUR, ModelGrid, PykatalystSettings

__all__ = ["ModelGrid", "PykatalystRecommender", "PykatalystSettings", "oom_needed"]

NAME = "pykatalyst"
# Numerical guards, not settings: the smallest mean usage a change is costed against, the
# tie-break that prefers the smaller model when costs are equal, and the absolute part of
# a replayed change's threshold (so a zero request moving to zero is no change).
_TINY_USAGE = 1e-9
_TIE_BREAK = 1e-6
_TINY_CHANGE = 1e-12


@dataclass(frozen=True, slots=True)
class _Choice:
    value: float
    estimate: float
    half_life_s: float
    percentile: float
    margin: float
    cost: float


_LAYOUTS: dict[tuple[float, float, float], BucketLayout] = {}


def layout_for(grid: ModelGrid, growth: float) -> BucketLayout:
    """The histogram layout of a resource's grid (first bucket, largest value) and growth."""
    key = (grid.first_bucket, grid.max_value, growth)
    if key not in _LAYOUTS:
        _LAYOUTS[key] = BucketLayout(
            max_value=grid.max_value, first_bucket_size=grid.first_bucket, ratio=1.0 + growth
        )
    return _LAYOUTS[key]


def _percentile_table(
    layout: BucketLayout,
    buckets: np.ndarray,
    seg: np.ndarray,
    weights: FloatArray,
    points: int,
    ps: FloatArray,
) -> FloatArray:
    """Percentiles (points × ps) of the histograms of samples before each replay point."""
    nb = layout.num_buckets
    flat = np.bincount(seg * nb + buckets, weights=weights, minlength=(points + 1) * nb)
    cum_time = np.cumsum(flat.reshape(points + 1, nb), axis=0)[:points]
    cum = np.cumsum(cum_time, axis=1)
    total = cum[:, -1:]
    idx = (cum[:, None, :] < ps[None, :, None] * total[:, :, None]).sum(axis=2)
    ends = np.append(layout.starts[1:], layout.starts[-1])
    values = ends[np.minimum(idx, nb - 1)]
    return np.where(total > 0, values, np.nan)


def _select(
    t: FloatArray,
    x: FloatArray,
    now: float,
    grid: ModelGrid,
    layout: BucketLayout,
    settings: PykatalystSettings,
) -> tuple[_Choice, tuple[_Choice, ...]]:
    """Replay every candidate over the recent history; the cheapest, and the next
    ``terms_runners_up`` cheapest for the explanation."""
    start = max(float(t[0]) + settings.min_history_s, now - settings.replay_window_s)
    points = np.arange(start, now, settings.replay_step_s)
    points = np.append(points, now)  # the last point is the recommendation itself
    k = points.size
    seg = np.searchsorted(points, t, side="right")  # sample i is before points[seg[i]:]
    buckets = layout.find_buckets(x)
    ps = np.asarray(grid.percentiles)
    margins = np.asarray(grid.margins)
    # Usage in each replay interval (points[j], points[j+1]] is charged against point j.
    interval = np.searchsorted(points, t, side="left") - 1
    scored = (interval >= 0) & (interval < k - 1)
    iv, xv = interval[scored], x[scored]
    mean_use = max(float(np.mean(xv)) if xv.size else float(np.mean(x)), _TINY_USAGE)
    nm, npc = margins.size, ps.size
    # Ties go to the smaller model (lower margin, then lower percentile, shorter half-life).
    tie = _TIE_BREAK * (np.arange(nm)[:, None] + np.arange(npc)[None, :]).ravel()
    raw: list[FloatArray] = []
    finals: list[FloatArray] = []
    for half_life_h in grid.half_lives_hours:
        w = np.exp2((t - now) / (half_life_h * HOUR))
        table = _percentile_table(layout, buckets, seg, w, k, ps)  # (k, P)
        recs = (table[:, None, :] * (1 + margins)[None, :, None]).reshape(k, nm * npc)
        raw.append(_replay_cost(recs[:-1], iv, xv, mean_use, grid, settings.change_threshold))
        finals.append(table[-1])
    ranked = np.concatenate([cost + tie for cost in raw])
    order = np.argsort(ranked, kind="stable")[: 1 + settings.terms_runners_up]
    choices = []
    for j in order:
        h, rest = divmod(int(j), nm * npc)
        mi, pi = divmod(rest, npc)
        est, margin = float(finals[h][pi]), float(margins[mi])
        half_life = grid.half_lives_hours[h] * HOUR
        cost = float(raw[h][rest])
        choices.append(_Choice(est * (1 + margin), est, half_life, float(ps[pi]), margin, cost))
    return choices[0], tuple(choices[1:])


def _replay_cost(
    recs: FloatArray,
    iv: np.ndarray,
    xv: FloatArray,
    mean_use: float,
    grid: ModelGrid,
    change_threshold: float,
) -> FloatArray:
    """Cost per percentile column of applying ``recs[j]`` to the usage of interval j."""
    if iv.size == 0:
        return np.zeros(recs.shape[1])
    r = np.nan_to_num(recs[iv])  # (n, P)
    diff = r - xv[:, None]
    n = float(iv.size)
    slack = np.maximum(diff, 0).sum(axis=0) / n
    short = np.maximum(-diff, 0).sum(axis=0) / n
    under = np.count_nonzero(diff < 0, axis=0) / n
    jumps = np.abs(np.diff(recs, axis=0)) > change_threshold * np.abs(recs[:-1]) + _TINY_CHANGE
    changes = jumps.sum(axis=0) if recs.shape[0] > 1 else np.zeros(recs.shape[1])
    cost: FloatArray = (
        slack
        + grid.shortfall_weight * short
        + grid.underprovision_weight * under
        + grid.change_weight * changes * mean_use
    )
    return cost


def _window_peaks(t: FloatArray, x: FloatArray, window: float) -> tuple[FloatArray, FloatArray]:
    """Peak of each ``window``-long slot that holds samples, at the slot's last sample time."""
    slot = np.floor(t / window)
    starts = np.flatnonzero(np.r_[True, slot[1:] != slot[:-1]])
    ends = np.r_[starts[1:], t.size] - 1
    return t[ends], np.maximum.reduceat(x, starts)


def _daily_schedule(
    t: FloatArray, x: FloatArray, now: float, choice: _Choice, settings: PykatalystSettings
) -> tuple[float, str] | None:
    """The cpu figure for the coming hour from the same hours on earlier days, or None."""
    if t.size == 0 or float(t[-1] - t[0]) < settings.schedule_min_days * DAY:
        return None
    hours = np.floor((t - t[0]) / HOUR).astype(np.int64)
    sums = np.bincount(hours, weights=x)
    counts = np.bincount(hours)
    hourly = np.divide(sums, counts, out=np.full(sums.size, np.nan), where=counts > 0)
    a, b = hourly[24:], hourly[:-24]
    ok = ~(np.isnan(a) | np.isnan(b))
    if ok.sum() < settings.schedule_min_pairs or np.std(a[ok]) == 0 or np.std(b[ok]) == 0:
        return None
    corr = float(np.corrcoef(a[ok], b[ok])[0, 1])
    if not corr >= settings.schedule_min_autocorrelation:
        return None
    # Samples of earlier days around the coming hour's time of day, decayed as chosen.
    phase = ((t - now) % DAY) / HOUR
    near = (phase >= 24.0 - settings.schedule_hours_before) | (
        phase <= settings.schedule_hours_after
    )
    if near.sum() < settings.schedule_min_samples:
        return None
    layout = layout_for(settings.cpu, settings.bucket_growth)
    w = np.exp2((t[near] - now) / choice.half_life_s)
    value = build_histogram(layout, x[near], w).percentile(choice.percentile)
    return value * (1 + choice.margin), f"daily schedule (day-lag autocorrelation {corr:.2f})"


def _clip(value: float, low: float | None, high: float | None) -> float:
    if low is not None:
        value = max(value, low)
    if high is not None:
        value = min(value, high)
    return value


def _model(choice: _Choice) -> str:
    return (
        f"half-life {choice.half_life_s / HOUR:g}h p{100 * choice.percentile:g} "
        f"+{100 * choice.margin:g}%"
    )


def _terms(
    choice: _Choice,
    others: tuple[_Choice, ...],
    t: FloatArray,
    samples: int,
    notes: list[str],
) -> ResourceTerms:
    return ResourceTerms(
        percentile=choice.percentile,
        half_life_s=choice.half_life_s,
        margin=choice.margin,
        samples=samples,
        span_s=float(t[-1] - t[0]) if t.size else 0.0,
        estimate=choice.estimate,
        model=_model(choice),
        notes=tuple(notes),
        cost=choice.cost,
        runners_up=tuple(RunnerUp(_model(o), o.value, o.cost) for o in others),
    )


def _recommend_cpu(
    series: UsageSeries, now: float, settings: PykatalystSettings
) -> tuple[float, ResourceTerms]:
    t, x = series.timestamps, series.cpu
    layout = layout_for(settings.cpu, settings.bucket_growth)
    choice, others = _select(t, x, now, settings.cpu, layout, settings)
    value, notes = choice.value, []
    if settings.cpu_schedule:
        scheduled = _daily_schedule(t, x, now, choice, settings)
        if scheduled is not None:
            value, note = scheduled
            notes.append(f"{note}: {value:.3f} cores for the coming hour")
    value = max(value, settings.min_cpu)
    clipped = _clip(value, settings.min_allowed_cpu, settings.max_allowed_cpu)
    if clipped != value:
        notes.append(f"clipped to the allowed range: {clipped:.3f} cores")
    return clipped, _terms(choice, others, t, t.size, notes)


def oom_needed(event: OOMEvent, settings: PykatalystSettings) -> float:
    """The memory an OOM-killed container needs: from the largest of its request, its limit
    and the peak seen, ``max(x + min bump, x × ratio)``, clipped at ``max_allowed_memory``."""
    seen = max(event.memory_request, event.memory_limit or 0.0, event.peak or 0.0)
    needed = max(seen + settings.oom_min_bump_bytes, seen * settings.oom_bump_ratio)
    if settings.max_allowed_memory is not None:
        needed = min(needed, settings.max_allowed_memory)
    return needed


def _oom_floor(
    events: Sequence[OOMEvent], now: float, estimate: float, settings: PykatalystSettings
) -> float | None:
    """The strongest fading OOM bump over ``estimate``, or None when no recent OOM lifts it."""
    best: float | None = None
    for event in events:
        age = now - event.timestamp
        if age < 0 or age > settings.oom_window_s:
            continue
        excess = oom_needed(event, settings) - estimate
        if excess <= 0:
            continue
        lifted = estimate + excess * math.exp2(-age / settings.oom_bump_half_life_s)
        best = lifted if best is None else max(best, lifted)
    return best


def _recommend_memory(
    series: UsageSeries, now: float, settings: PykatalystSettings, oom_events: Sequence[OOMEvent]
) -> tuple[float, ResourceTerms]:
    t, x = _window_peaks(series.timestamps, series.memory, settings.memory_peak_window_s)
    layout = layout_for(settings.memory, settings.bucket_growth)
    choice, others = _select(t, x, now, settings.memory, layout, settings)
    value, notes = choice.value, []
    recent = series.memory[series.timestamps >= now - settings.memory_floor_window_s]
    if recent.size:
        floor = float(recent.max()) * (1 + settings.memory_floor_margin)
        if floor > value:
            value = floor
            notes.append(
                f"floor: the peak of the last {settings.memory_floor_window_s / HOUR:g}h"
                f" +{100 * settings.memory_floor_margin:g}%"
            )
    bump = _oom_floor(oom_events, now, value, settings)
    if bump is not None:
        value = bump
        notes.append("raised after a recent OOM")
    value = max(value, settings.min_memory)
    clipped = _clip(value, settings.min_allowed_memory, settings.max_allowed_memory)
    if clipped != value:
        notes.append(f"clipped to the allowed range: {clipped:.0f} bytes")
    terms = _terms(choice, others, t, series.timestamps.size, notes)
    if bump is not None:
        terms = replace(terms, oom_bump=clipped)
    return clipped, terms


def _hold(
    new: float,
    current: float | None,
    grow_now: str | None,
    changed_at: float | None,
    now: float,
    settings: PykatalystSettings,
) -> tuple[float, str | None]:
    """Hysteresis: the figure to apply, and why it differs from ``new`` (or None)."""
    if current is None or current <= 0:
        return new, None
    if new > current and grow_now:
        return new, f"grew at once: {grow_now}"
    if changed_at is not None and now - changed_at < settings.min_change_interval_s:
        return current, f"held: changed {now - changed_at:.0f}s ago"
    if abs(new - current) <= settings.change_threshold * current:
        return current, (
            f"held: {new:.6g} is within {100 * settings.change_threshold:g}% of {current:.6g}"
        )
    return new, None


def _limit(
    request: float, cur_request: float | None, cur_limit: float | None, mode: str
) -> tuple[float | None, str | None]:
    if cur_limit is None:
        return None, None
    if mode == "RequestsOnly":
        if request > cur_limit:
            return request, "limit raised to the request (a request above its limit is refused)"
        return cur_limit, None
    if cur_request is None or cur_request <= 0:
        return max(cur_limit, request), None
    return request * cur_limit / cur_request, None


def _finish(
    resource: str,
    value: float,
    terms: ResourceTerms,
    current: CurrentResources | None,
    grow_now: str | None,
    now: float,
    settings: PykatalystSettings,
) -> tuple[float, float | None, ResourceTerms]:
    """Hysteresis and the limit for one resource."""
    if current is None:
        return value, None, terms
    cur_req = current.cpu_request if resource == CPU else current.memory_request
    cur_lim = current.cpu_limit if resource == CPU else current.memory_limit
    held, why = _hold(value, cur_req, grow_now, current.changed_at, now, settings)
    limit, note = _limit(held, cur_req, cur_lim, settings.controlled_values)
    notes = terms.notes + tuple(n for n in (why, note) if n)
    return held, limit, replace(terms, notes=notes)


class PykatalystRecommender:
    """pykatalyst's recommender: model selection per workload, memory from short-window
    peaks, a fading OOM bump, an optional daily cpu schedule, hysteresis and limits."""

    name = NAME
    settings_type = PykatalystSettings

    def recommend(
        self,
        series: UsageSeries,
        now: float,
        settings: PykatalystSettings | None = None,
        oom_events: Sequence[OOMEvent] = (),
        current: CurrentResources | None = None,
    ) -> Recommendation:
        """Requests (and limits, given ``current``); raises RecommendationNotReady."""
        settings = settings or PykatalystSettings()
        series = series.until(now).between(now - settings.history_s, math.inf)
        if len(series) == 0:
            raise RecommendationNotReady("no samples in the history window")
        if series.span_s < settings.min_history_s:
            raise RecommendationNotReady(
                f"samples span {series.span_s / HOUR:.1f}h; "
                f"at least {settings.min_history_s / HOUR:g}h are needed"
            )
        cpu = memory = cpu_limit = memory_limit = None
        terms: dict[str, ResourceTerms] = {}
        if CPU in settings.resources:
            value, t = _recommend_cpu(series, now, settings)
            grow = "cpu throttled" if current is not None and current.throttled else None
            cpu, cpu_limit, terms[CPU] = _finish(CPU, value, t, current, grow, now, settings)
        if MEMORY in settings.resources:
            value, t = _recommend_memory(series, now, settings, oom_events)
            grow = _memory_pressure(series, current, settings)
            memory, memory_limit, terms[MEMORY] = _finish(
                MEMORY, value, t, current, grow, now, settings
            )
        return Recommendation(NAME, cpu, memory, cpu_limit, memory_limit, terms)


def _memory_pressure(
    series: UsageSeries, current: CurrentResources | None, settings: PykatalystSettings
) -> str | None:
    if current is None or len(series) == 0:
        return None
    bound = current.memory_limit or current.memory_request
    if not bound:
        return None
    last = float(series.memory[-1])
    if last >= (1 - settings.memory_grow_fraction) * bound:
        return f"memory {last:.0f} within {100 * settings.memory_grow_fraction:g}% of {bound:.0f}"
    return None
