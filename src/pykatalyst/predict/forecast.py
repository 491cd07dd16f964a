"""Seasonal forecasting of one metric's history, for scaling before the load arrives.

The series (evenly spaced samples, `interval_s` apart) is averaged into buckets of
1/288 of the candidate period (5 minutes for a day) so the statistics stay cheap on a
week of 1-minute samples. Then:

1. **Period**: a day, or a week when there are two weeks of history, is accepted when the
   autocorrelation of the detrended series at that lag is at least `min_acf` and higher
   than at half the lag (so a 12-hour rhythm is not taken for a day). At least two whole
   periods of history are needed.
2. **Model**: statsmodels' STL splits the series into seasonal, trend and remainder; the
   forecast is the last period's seasonal shape on the current level (the mean of the
   seasonally adjusted series over the last hour).
3. **Band**: the empirical distribution, per horizon, of how far the seasonally adjusted
   series moved from its one-hour mean that far ahead, over the whole history: the
   `quantile` of it is the upper band, 1 - quantile the lower.
4. **Recent error**: the same forecast made `backtest` ago is compared with what
   happened since; above `max_recent_error` (mean absolute error over mean level) the
   forecast is not trusted.
5. **Serving**: each output point is the upper band's maximum over the next
   `scale_up_forward_s` (the pod start-up horizon), so replicas asked for at t are ready
   for the load at t + start-up.

When history is short, no period is found or the recent error is high, the forecast falls
back to the reactive value (the `quantile` of the last 15 minutes, held flat) and says which
reason applied. Everything is numpy over arrays; no clock is read.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from pykatalyst.extras import require

DAY_S = 86400.0
WEEK_S = 7 * DAY_S
BUCKETS_PER_PERIOD = 288
LEVEL_WINDOW_S = 3600.0
REACTIVE_WINDOW_S = 900.0

Array = NDArray[np.float64]


class Method(enum.StrEnum):
    SEASONAL = "seasonal"
    REACTIVE = "reactive"


class Fallback(enum.StrEnum):
    NONE = ""
    SHORT_HISTORY = "history-short"
    NO_PERIOD = "no-period"
    HIGH_ERROR = "recent-error-high"


@dataclass(frozen=True, slots=True)
class ForecastConfig:
    quantile: float = 0.99
    scale_up_forward_s: float = 180.0
    min_acf: float = 0.3
    max_recent_error: float = 0.5
    backtest_s: float = 7200.0


@dataclass(frozen=True, slots=True)
class Forecast:
    """Forecast points (one per `interval_s` from the end of the history): the point
    forecast, the band, and `served` (the upper band's max over the start-up horizon)."""

    method: Method
    reason: Fallback
    period_s: float
    point: Array
    lower: Array
    upper: Array
    served: Array
    recent_error: float | None = None

    def explain(self) -> str:
        if self.method is Method.SEASONAL:
            err = "" if self.recent_error is None else f", recent error {self.recent_error:.0%}"
            return f"seasonal (period {self.period_s / 3600:g}h{err})"
        detail = {
            Fallback.SHORT_HISTORY: "history shorter than two periods",
            Fallback.NO_PERIOD: "no daily or weekly period found",
            Fallback.HIGH_ERROR: f"recent error {self.recent_error or 0:.0%} too high",
        }.get(self.reason, str(self.reason))
        return f"reactive ({detail})"


def _clean(values: Array) -> Array:
    """Gaps (NaN) filled by linear interpolation; the ends by the nearest sample."""
    y = np.asarray(values, dtype=np.float64)
    bad = ~np.isfinite(y)
    if bad.any() and (~bad).any():
        idx = np.arange(y.size)
        y = y.copy()
        y[bad] = np.interp(idx[bad], idx[~bad], y[~bad])
    return np.nan_to_num(y)


def _bucket(y: Array, per: int) -> Array:
    """Means of `per` consecutive samples, aligned to the end of the series."""
    n = y.size // per * per
    out: Array = y[y.size - n :].reshape(-1, per).mean(axis=1)
    return out


def _statsmodels(module: str) -> Any:
    """A statsmodels module (the `autoscale` extra); MissingExtra naming it without it."""
    return require(f"statsmodels.{module}", "autoscale", "the built-in predictor")


def _period_strength(z: Array, lag: int) -> float:
    """Autocorrelation at `lag` of the series minus its moving average over `lag`."""
    kernel = np.ones(lag) / lag
    trend = np.convolve(z, kernel, mode="same")
    detrended = z - trend
    if np.std(detrended) < 1e-12:
        return 0.0
    r = _statsmodels("tsa.stattools").acf(detrended, nlags=lag, fft=True)
    at, half = float(r[lag]), float(r[lag // 2])
    return at if at > half else 0.0


def detect_period(y: Array, interval_s: float, min_acf: float) -> tuple[float, float]:
    """(period in seconds, its autocorrelation), or (0, best autocorrelation) when none
    qualifies. A week is preferred to a day when both do."""
    best = (0.0, 0.0)
    for period in (WEEK_S, DAY_S):
        per = max(1, round(period / BUCKETS_PER_PERIOD / interval_s))
        z = _bucket(y, per)
        if z.size < 2 * BUCKETS_PER_PERIOD:
            continue
        strength = _period_strength(z, BUCKETS_PER_PERIOD)
        if strength >= min_acf:
            return period, strength
        best = max(best, (0.0, strength), key=lambda p: p[1])
    return best


def _reactive(y: Array, interval_s: float, steps: int, cfg: ForecastConfig) -> Array:
    recent = y[-max(1, round(REACTIVE_WINDOW_S / interval_s)) :]
    return np.full(steps, float(np.quantile(recent, cfg.quantile)))


def _serve(upper: Array, interval_s: float, forward_s: float, steps: int) -> Array:
    """upper's max over [t, t + forward] for each of the first `steps` points."""
    k = max(0, math.ceil(forward_s / interval_s))
    windows = np.lib.stride_tricks.sliding_window_view(upper, k + 1)
    out: Array = windows.max(axis=1)[:steps]
    return out


def _seasonal_model(z: Array, horizon: int) -> tuple[Array, Array, Array]:
    """STL on the bucketed series: (forecast over `horizon` buckets, the seasonally
    adjusted series, the seasonal component)."""
    p = BUCKETS_PER_PERIOD
    jump = max(1, p // 10)
    stl = _statsmodels("tsa.seasonal").STL
    fit = stl(z, period=p, seasonal_jump=1, trend_jump=jump, low_pass_jump=jump).fit()
    seasonal = np.asarray(fit.seasonal, dtype=np.float64)
    adjusted = z - seasonal
    last = seasonal[-p:]
    future = np.resize(last, horizon)
    return future, adjusted, seasonal


def _band_offsets(
    adjusted: Array, peaks: Array, level_n: int, horizon: int, q: float
) -> tuple[Array, Array]:
    """Per-horizon quantiles of how far the series moved from its mean over the last
    `level_n` buckets, h buckets ahead: the upper band from each bucket's peak sample
    (`peaks`), the lower from its mean (`adjusted`)."""
    csum = np.concatenate(([0.0], np.cumsum(adjusted)))
    means = (csum[level_n:] - csum[:-level_n]) / level_n  # mean ending at t = level_n-1..
    hi = np.empty(horizon)
    lo = np.empty(horizon)
    for h in range(1, horizon + 1):
        ahead = adjusted[level_n - 1 + h :]
        base = means[: ahead.size]
        if ahead.size < 2:
            hi[h - 1 :] = hi[h - 2] if h > 1 else 0.0
            lo[h - 1 :] = lo[h - 2] if h > 1 else 0.0
            break
        hi[h - 1] = float(np.quantile(peaks[level_n - 1 + h :] - base, q))
        lo[h - 1] = float(np.quantile(ahead - base, 1.0 - q))
    return lo, hi


def _upsample(z: Array, per: int, steps: int) -> Array:
    return np.repeat(z, per)[:steps]


def forecast(
    values: Array, interval_s: float, steps: int, cfg: ForecastConfig | None = None
) -> Forecast:
    """Forecast `steps` points after the last sample (see the module doc)."""
    cfg = cfg or ForecastConfig()
    if interval_s <= 0 or steps < 1:
        raise ValueError(f"interval_s and steps must be positive, got {interval_s}, {steps}")
    y = _clean(values)
    total = steps + max(0, math.ceil(cfg.scale_up_forward_s / interval_s))
    if y.size == 0:
        zero = np.zeros(steps)
        return Forecast(Method.REACTIVE, Fallback.SHORT_HISTORY, 0.0, zero, zero, zero, zero)
    period_s, _strength = detect_period(y, interval_s, cfg.min_acf)
    if period_s == 0.0:
        short = y.size * interval_s < 2 * DAY_S
        return _fallback(
            y,
            interval_s,
            steps,
            total,
            cfg,
            Fallback.SHORT_HISTORY if short else Fallback.NO_PERIOD,
        )
    per = max(1, round(period_s / BUCKETS_PER_PERIOD / interval_s))
    z = _bucket(y, per)
    horizon = math.ceil(total / per) + 1
    level_n = max(1, round(LEVEL_WINDOW_S / (per * interval_s)))
    back = max(1, round(cfg.backtest_s / (per * interval_s)))
    seasonal_future, adjusted, seasonal = _seasonal_model(z, horizon)
    level = float(adjusted[-level_n:].mean())
    # each bucket's peak sample, seasonally adjusted: the band covers the peaks within a
    # bucket, not only its mean
    n_used = z.size * per
    peaks = (y[y.size - n_used :] - np.repeat(seasonal, per)).reshape(-1, per).max(axis=1)
    lo_off, hi_off = _band_offsets(adjusted, peaks, level_n, horizon, cfg.quantile)
    error = _recent_error(z, adjusted, seasonal, level_n, back)
    if error > cfg.max_recent_error:
        fb = _fallback(y, interval_s, steps, total, cfg, Fallback.HIGH_ERROR)
        return Forecast(
            fb.method, fb.reason, period_s, fb.point, fb.lower, fb.upper, fb.served, error
        )
    point_b = np.maximum(seasonal_future + level, 0.0)
    point = _upsample(point_b, per, total)
    upper = _upsample(np.maximum(point_b + hi_off, 0.0), per, total)
    lower = _upsample(np.maximum(point_b + lo_off, 0.0), per, total)
    served = _serve(upper, interval_s, cfg.scale_up_forward_s, steps)
    return Forecast(
        Method.SEASONAL,
        Fallback.NONE,
        period_s,
        point[:steps],
        lower[:steps],
        upper[:steps],
        served,
        error,
    )


def _recent_error(z: Array, adjusted: Array, seasonal: Array, level_n: int, back: int) -> float:
    """Mean absolute error, over the mean level, of the forecast made `back` buckets ago."""
    p = BUCKETS_PER_PERIOD
    if z.size < back + level_n + p:
        return 0.0
    start = z.size - back
    level = float(adjusted[start - level_n : start].mean())
    # the seasonal shape as known one period before the backtest window
    pred = seasonal[start - p : start - p + back] + level
    actual = z[start:]
    scale = max(float(np.mean(np.abs(actual))), 1e-9)
    return float(np.mean(np.abs(actual - pred)) / scale)


def _fallback(
    y: Array, interval_s: float, steps: int, total: int, cfg: ForecastConfig, reason: Fallback
) -> Forecast:
    flat = _reactive(y, interval_s, total, cfg)
    return Forecast(
        Method.REACTIVE, reason, 0.0, flat[:steps], flat[:steps], flat[:steps], flat[:steps]
    )
