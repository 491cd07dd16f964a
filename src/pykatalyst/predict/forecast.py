"""Seasonal forecasting of one metric's history, for scaling before the load arrives.

The series (evenly spaced samples, `interval_s` apart) is averaged into buckets of
1/288 of the candidate period (5 minutes for a day) so the statistics stay cheap on a
week of 1-minute samples. Then:

1. **Period**: a day, or a week when there are two weeks of history, is accepted when the
   autocorrelation of the detrended series at that lag is at least `min_acf` and higher
   than at half the lag (so a 12-hour rhythm is not taken for a day). At least two whole
   periods of history are needed.
2. **Model**: the period's shape is each bucket's mean over the whole periods of the
   history, smoothed over half an hour either side; the forecast is that shape scaled to
   the current level (the last hour's mean over the shape's mean there), so a day that
   runs at half the usual load is forecast at half the shape, peaks and troughs alike.
   (An additive split, STL's seasonal on the current level, carries a weekday's
   amplitude into a quiet weekend day and forecasts troughs near zero.)
3. **Band**: the ratios of the last hour's samples (not the buckets' means) to the
   shape on the current level; their `quantile` times the point forecast is the upper
   band, their 1 - quantile the lower. The band is the forecast's own recent error, so it
   widens within the hour a service turns bursty and narrows when it calms, and scales
   with the load the shape expects.
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
BAND_WINDOW_S = 3600.0
SMOOTH_BUCKETS = 3

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


def _profile(z: Array) -> Array:
    """The period's shape: each bucket's mean over the whole periods of the history
    (a busier or quieter period counts in proportion), smoothed over half an hour either
    side so the noise of single buckets does not become the shape; laid over the series
    so it lines up bucket for bucket."""
    p = BUCKETS_PER_PERIOD
    k = z.size // p
    whole = z[z.size - k * p :].reshape(k, p)
    mean = whole.mean(axis=0)
    wrapped = np.concatenate([mean[-SMOOTH_BUCKETS:], mean, mean[:SMOOTH_BUCKETS]])
    shape = _smooth(wrapped, SMOOTH_BUCKETS)[SMOOTH_BUCKETS:-SMOOTH_BUCKETS]
    floor = max(0.1 * float(mean.mean()), 1e-9)
    out: Array = np.resize(np.maximum(shape, floor), z.size + (p - z.size % p) % p)
    return out[out.size - z.size :]


def _smooth(x: Array, half: int) -> Array:
    """Centred moving average over 2 × half + 1 points, the ends over what there is."""
    if half < 1 or x.size <= 2 * half:
        return x
    kernel = np.ones(2 * half + 1)
    sums = np.convolve(x, kernel, mode="same")
    counts = np.convolve(np.ones(x.size), kernel, mode="same")
    out: Array = sums / counts
    return out


def _recent_ratios(y: Array, expected: Array, n: int) -> Array:
    """Each of the last `n` samples over what the forecast expects there now (`expected`
    is aligned to the end of `y`), the expectation floored at a tenth of the samples' mean
    so that one near zero does not blow a ratio up."""
    actual = y[-n:]
    floor = max(0.1 * float(np.mean(np.abs(actual))), 1e-9)
    out: Array = actual / np.maximum(expected[-n:], floor)
    return out


def _band_factors(ratios: Array, q: float) -> tuple[float, float]:
    """(lower, upper) multipliers of the point forecast: the 1 - q and q quantiles of the
    recent ratios, never inside the point itself."""
    hi = float(np.quantile(ratios, q))
    lo = float(np.quantile(ratios, 1.0 - q))
    return min(lo, 1.0), max(hi, 1.0)


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
    return _seasonal(y, interval_s, steps, total, period_s, cfg)


def _seasonal(
    y: Array, interval_s: float, steps: int, total: int, period_s: float, cfg: ForecastConfig
) -> Forecast:
    """The seasonal forecast (module doc, 2-5) of a series with a period."""
    per = max(1, round(period_s / BUCKETS_PER_PERIOD / interval_s))
    z = _bucket(y, per)
    horizon = math.ceil(total / per) + 1
    level_n = max(1, round(LEVEL_WINDOW_S / (per * interval_s)))
    back = max(1, round(cfg.backtest_s / (per * interval_s)))
    shape = _profile(z)
    error = _recent_error(z, shape, level_n, back)
    if error > cfg.max_recent_error:
        fb = _fallback(y, interval_s, steps, total, cfg, Fallback.HIGH_ERROR)
        return Forecast(
            fb.method, fb.reason, period_s, fb.point, fb.lower, fb.upper, fb.served, error
        )
    # the shape on the current level: a quieter or busier day than usual scales it
    factor = _level_factor(z[-level_n:], shape[-level_n:])
    future = np.resize(shape[-BUCKETS_PER_PERIOD:], horizon) * factor
    # the band: how far the samples themselves (not the buckets' means) ran above and
    # below the shape on the current level in the last hour, as a ratio
    band_n = min(z.size * per, max(1, round(BAND_WINDOW_S / interval_s)))
    ratios = _recent_ratios(y, np.repeat(shape * factor, per), band_n)
    lo_f, hi_f = _band_factors(ratios, cfg.quantile)
    point = _upsample(future, per, total)
    upper = point * hi_f
    served = _serve(upper, interval_s, cfg.scale_up_forward_s, steps)
    return Forecast(
        Method.SEASONAL,
        Fallback.NONE,
        period_s,
        point[:steps],
        (point * lo_f)[:steps],
        upper[:steps],
        served,
        error,
    )


def _level_factor(actual: Array, shape: Array) -> float:
    """How much busier (> 1) or quieter the series ran than the shape expects."""
    return float(np.mean(actual)) / max(float(np.mean(shape)), 1e-9)


def _recent_error(z: Array, shape: Array, level_n: int, back: int) -> float:
    """Mean absolute error, over the mean level, of the forecast made `back` buckets ago."""
    p = BUCKETS_PER_PERIOD
    if z.size < back + level_n + p:
        return 0.0
    start = z.size - back
    factor = _level_factor(z[start - level_n : start], shape[start - level_n : start])
    # the shape over the backtest window (it repeats every period), on the level then
    pred = shape[start - p : start - p + back] * factor
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
