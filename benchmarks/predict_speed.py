"""How long the built-in predictor takes on a week of 1-minute samples (the IHPA's
default history), forecasting 120 minutes: the whole `/openapi/tsa/predict` answer and
the forecast alone, on a daily-periodic series and on noise (the reactive fallback).

    python benchmarks/predict_speed.py [--runs 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from pykatalyst.predict.contract import answer, parse_request  # noqa: E402
from pykatalyst.predict.forecast import forecast  # noqa: E402

N = 7 * 1440


def series(kind: str) -> np.ndarray:
    t = np.arange(N)
    rng = np.random.default_rng(0)
    if kind == "daily":
        return 100 + 50 * np.sin(2 * np.pi * t / 1440) + rng.normal(0, 5, N)
    return rng.normal(100, 10, N)


def timed(fn: object, runs: int) -> tuple[float, float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return statistics.median(times), times[int(0.9 * (len(times) - 1))]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=20)
    args = p.parse_args()
    for kind in ("daily", "noise"):
        y = series(kind)
        start = 1_800_000_000
        req = parse_request(
            {
                "PredictionStartTime": start,
                "PredictionDuration": 7200,
                "TimeSeries": {
                    "m": [
                        {"Timestamp": start - 60 * (N - i), "Value": float(v)}
                        for i, v in enumerate(y)
                    ]
                },
            }
        )
        f_med, f_p90 = timed(lambda y=y: forecast(y, 60.0, 120), args.runs)
        a_med, a_p90 = timed(lambda req=req: answer(req), args.runs)
        how = forecast(y, 60.0, 120).explain()
        print(
            f"{kind}: forecast median {f_med:.1f} ms p90 {f_p90:.1f} ms; "
            f"whole answer median {a_med:.1f} ms p90 {a_p90:.1f} ms; {how}"
        )


if __name__ == "__main__":
    main()
