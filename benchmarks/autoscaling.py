"""Horizontal autoscalers replayed on real request-rate traces: the HPA (v1.34 defaults),
Crane's EHPA rule and pykatalyst's IHPA.

A service whose replicas each serve `--capacity` requests/s (default: the trace's p99
minute rate / 20) and become ready `--startup` seconds after they are asked for
replays the trace in 15 s steps (the HPA's sync period). Every autoscaler drives the same
simulated HPA (`pykatalyst.sim.hpa`, the v1.34 rule re-implemented: tolerance 0.1,
unready pods, default behavior) with a cpu Utilization metric (target `--target`, the
mean load of the last 30 s over ready capacity, capped at 100 %: metrics-server's scrape
and window) plus, for the predictive ones, an External AverageValue metric of the
predicted load (target: capacity × target per pod); the HPA takes the larger proposal.

- hpa: the cpu metric only.
- ehpa: Crane's rule: where a daily period is found in at least two days of history
  (pykatalyst's autocorrelation test stands in for Crane's periodogram test), the
  prediction is the point-wise max of the same minute over the past days (its
  max-value estimator, margin 0), and the metric is its max over the next
  `--ehpa-window` seconds (predictionWindowSeconds, 3600 in Crane's examples).
- ihpa: the resource portrait: every `--resync` seconds (Katalyst's 3600) the built-in
  predictor forecasts the next 120 minutes from the last 7 days of 1-minute history (each
  minute's peak 15 s request rate, or with `--ihpa-history mean` its mean) with quantile
  `--quantile` over a start-up horizon of `--startup`; the metric is the latest predicted
  point before now, as `katalyst metrics` serves it. Its AverageValue target is
  `--ihpa-value` × a replica's capacity (0: the customMetric `value` 0 rule, capacity ×
  `--target`); its scale-down window is `--ihpa-scale-down-window` (its `behavior`), and
  `--ihpa-metrics predicted` leaves out the cpu metric. The defaults are the IHPA
  docs/autoscaling.md recommends for a request-driven service; `--quantile 0.8
  --ihpa-value 0 --ihpa-scale-down-window 300 --ihpa-history mean` is the IHPA as Katalyst
  users write it by default.

Scored after the first `--train-days` days: replica-minutes (pods asked for, ready or
starting), under-provisioned minutes (load above ready capacity), SLO-violating minutes
(ready capacity more than 90 % busy: an M/M/1 mean latency above 10 service times) and
scale events. Traces: `--trace FILE` (header `requests`, one row per second, gzip
accepted; the NASA July 1995 trace lives outside the package, see its ATTRIBUTION.md),
and the bundled Alibaba 2018 cluster trace's daily shape (cpu %, 300 s, scaled to
`--alibaba-peak` replicas at peak). The last line compares the IHPA with the HPA over all
traces run: `underprov_vs_hpa: <ratio> replica_minutes_vs_hpa: <ratio>`.

    python benchmarks/autoscaling.py \
        --trace ../shared/data/traces/nasa-http-1995/nasa_http_1995_07_requests_per_second.csv.gz
"""

from __future__ import annotations

import argparse
import csv
import gzip
import math
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from pykatalyst.predict.forecast import DAY_S, ForecastConfig, detect_period, forecast  # noqa: E402
from pykatalyst.sim.hpa import (  # noqa: E402
    DEFAULT_DOWN,
    HPA,
    Rules,
    external_average_value_replicas,
    resource_replicas,
)

DT = 15.0
STEPS_PER_MIN = 4
ALIBABA = ROOT / "src" / "pykatalyst" / "data" / "traces" / "alibaba2018_cluster_usage_300s.csv"
Array = np.ndarray


@dataclass(frozen=True)
class Service:
    capacity: float
    startup_s: float
    target: float
    min_replicas: int = 1
    max_replicas: int = 1000


@dataclass
class Result:
    replica_minutes: float = 0.0
    underprov_minutes: float = 0.0
    slo_minutes: float = 0.0
    scale_events: int = 0
    seconds: float = 0.0


def read_requests(path: Path) -> Array:
    """Requests per second from a `requests` CSV (gzip accepted)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:  # type: ignore[operator]
        reader = csv.reader(f)
        header = next(reader)
        if header[:1] != ["requests"]:
            raise SystemExit(f"{path}: expected a header `requests`, got {header}")
        values = np.array([float(r[0]) for r in reader if r], dtype=np.float64)
    return values


def per_step(per_second: Array) -> Array:
    n = per_second.size // int(DT) * int(DT)
    return per_second[:n].reshape(-1, int(DT)).mean(axis=1)


def alibaba_steps(peak_replicas: float, capacity: float) -> Array:
    with ALIBABA.open() as f:
        cpu = np.array([float(r["cpu_util_percent"]) for r in csv.DictReader(f)])
    t = np.arange(cpu.size) * 300.0
    fine = np.arange(0, t[-1], DT)
    shape = np.interp(fine, t, cpu)
    return shape / shape.max() * peak_replicas * capacity


def per_minute(steps: Array, how: str = "mean") -> Array:
    """Each minute's mean of the 15 s steps, or its peak (`how="peak"`: the largest
    15 s rate of the minute, what `max_over_time(rate(...)[1m:15s])` answers)."""
    n = steps.size // STEPS_PER_MIN * STEPS_PER_MIN
    minutes = steps[:n].reshape(-1, STEPS_PER_MIN)
    out: Array = minutes.max(axis=1) if how == "peak" else minutes.mean(axis=1)
    return out


# --- predictions: the value of the External metric at each step ----------------------------


def ehpa_metric(minutes: Array, window_s: float) -> Array:
    """Crane's max-value estimate over past days, its max over the prediction window,
    per 15 s step (NaN where there is no prediction)."""
    day = int(DAY_S / 60)
    n = minutes.size
    shifted = np.full((7, n), np.nan)
    for d in range(1, 8):
        if n > d * day:
            shifted[d - 1, d * day :] = minutes[: n - d * day]
    with np.errstate(all="ignore"):
        est = np.where(np.isnan(shifted).all(axis=0), np.nan, np.nanmax(shifted, axis=0))
    est[: 2 * day] = np.nan  # at least two days of history
    # only where a daily period is detected in the history so far (checked daily)
    for d0 in range(2 * day, n, day):
        period, _ = detect_period(minutes[max(0, d0 - 14 * day) : d0], 60.0, 0.3)
        if period == 0.0:
            est[d0 : d0 + day] = np.nan
    w = max(1, int(window_s // 60))
    padded = np.concatenate([est, np.full(w, np.nan)])
    windows = np.lib.stride_tricks.sliding_window_view(padded, w)[:n]
    with np.errstate(all="ignore"):
        ahead = np.where(np.isnan(windows).all(axis=1), np.nan, np.nanmax(windows, axis=1))
    return np.repeat(ahead, STEPS_PER_MIN)


def ihpa_metric(
    minutes: Array, resync_s: float, cfg: ForecastConfig, start_min: int
) -> tuple[Array, dict[str, int]]:
    """The resource portrait's points, refreshed every resync, per 15 s step; the count
    of each method the predictor used."""
    n = minutes.size
    served = np.full(n, np.nan)
    every = max(1, int(resync_s // 60))
    used: dict[str, int] = {}
    for m in range(max(start_min - every, 60), n, every):
        history = minutes[max(0, m - 7 * 1440) : m]
        f = forecast(history, 60.0, 120, cfg)
        used[f.explain().split(" ")[0]] = used.get(f.explain().split(" ")[0], 0) + 1
        # points from minute m on; the one for minute m is at or before now when it is
        # written, so it is dropped (only future points are kept)
        end = min(n, m + 120)
        served[m + 1 : end] = f.served[1 : end - m]
    return np.repeat(served, STEPS_PER_MIN), used


# --- the replay -----------------------------------------------------------------------------


def replay(
    demand: Array,
    svc: Service,
    predicted: Array | None,
    score_from: int,
    down: Rules = DEFAULT_DOWN,
    with_cpu: bool = True,
    predicted_per_pod: float = 0.0,
) -> Result:
    """Step through the trace: the HPA decides every 15 s; pods are ready `startup_s`
    after they are asked for; scale-down removes pods at once (the youngest first).
    `predicted_per_pod` is the predicted metric's AverageValue (0: capacity × target)."""
    hpa = HPA(svc.min_replicas, svc.max_replicas, down=down)
    ready_at: list[float] = [0.0] * max(
        svc.min_replicas, math.ceil(demand[0] / (svc.capacity * svc.target))
    )
    res = Result()
    window = 2  # 30 s of load behind the cpu metric
    started = time.perf_counter()
    per_pod_target = predicted_per_pod or svc.capacity * svc.target
    for k in range(demand.size):
        now = k * DT
        current = len(ready_at)
        ready = sum(1 for r in ready_at if r <= now)
        load = float(demand[max(0, k - window) : k].mean()) if k else float(demand[0])
        util = min(1.0, load / (max(ready, 1) * svc.capacity)) * 100.0
        has_prediction = predicted is not None and not math.isnan(predicted[k])
        proposals = []
        if with_cpu or not has_prediction:
            target = svc.target * 100.0
            proposals.append(resource_replicas(current, ready, current - ready, util, target))
        if predicted is not None and has_prediction:
            proposals.append(
                external_average_value_replicas(current, float(predicted[k]), per_pod_target)
            )
        want = hpa.decide(max(proposals), current, now)
        if want > current:
            ready_at += [now + svc.startup_s] * (want - current)
        elif want < current:
            ready_at = sorted(ready_at)[:want]
        if k >= score_from:
            ready_now = sum(1 for r in ready_at if r <= now + DT)
            cap = ready_now * svc.capacity
            res.replica_minutes += len(ready_at) * DT / 60.0
            if demand[k] > cap:
                res.underprov_minutes += DT / 60.0
            if demand[k] > 0.9 * cap:
                res.slo_minutes += DT / 60.0
            if want != current:
                res.scale_events += 1
    res.seconds = time.perf_counter() - started
    return res


def run_trace(
    name: str, demand: Array, args: argparse.Namespace, capacity: float
) -> dict[str, Result]:
    svc = Service(capacity, args.startup, args.target)
    minutes = per_minute(demand)
    score_from = int(args.train_days * DAY_S / DT)
    cfg = ForecastConfig(quantile=args.quantile, scale_up_forward_s=args.startup)
    t0 = time.perf_counter()
    history = per_minute(demand, args.ihpa_history)
    ihpa, used = ihpa_metric(history, args.resync, cfg, score_from // STEPS_PER_MIN)
    t_ihpa = time.perf_counter() - t0
    ehpa = ehpa_metric(minutes, args.ehpa_window)
    # the IHPA's `behavior` (passed through to its HPA): its scale-down stabilization
    ihpa_down = Rules(args.ihpa_scale_down_window, DEFAULT_DOWN.policies)
    n = min(demand.size, ihpa.size, ehpa.size)
    demand, ihpa, ehpa = demand[:n], ihpa[:n], ehpa[:n]
    out = {
        "hpa": replay(demand, svc, None, score_from),
        "ehpa": replay(demand, svc, ehpa, score_from),
        "ihpa": replay(
            demand,
            svc,
            ihpa,
            score_from,
            ihpa_down,
            args.ihpa_metrics == "both",
            args.ihpa_value * capacity,
        ),
    }
    days = (n - score_from) * DT / DAY_S
    print(
        f"\n{name}: {days:.1f} scored days after {args.train_days:g} training days; "
        f"capacity {capacity:.2f} req/s per replica, start-up {args.startup:g}s, "
        f"target {args.target:.0%}"
    )
    print(f"  predictor: {used} forecasts, {t_ihpa:.1f}s in all")
    head = ("autoscaler", "replica-min", "underprov-min", "slo-min", "scale-events")
    print("  {:<10} {:>12} {:>14} {:>9} {:>13}".format(*head))
    for k, r in out.items():
        row = (k, r.replica_minutes, r.underprov_minutes, r.slo_minutes, r.scale_events)
        print("  {:<10} {:>12.0f} {:>14.1f} {:>9.1f} {:>13d}".format(*row))
    hpa = out["hpa"]
    for k in ("ehpa", "ihpa"):
        r = out[k]
        under = _ratio(r.underprov_minutes, hpa.underprov_minutes)
        cost = _ratio(r.replica_minutes, hpa.replica_minutes)
        print(f"  {k} vs hpa: underprov {under}, replica-minutes {cost}")
    return out


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.3f}" if b else ("1.000" if a == 0 else "inf")


def main(argv: list[str] | None = None) -> None:
    np.seterr(all="ignore")
    warnings.filterwarnings("ignore", message="All-NaN slice")
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--trace",
        type=Path,
        action="append",
        default=[],
        help="requests-per-second CSV (repeatable)",
    )
    p.add_argument(
        "--no-alibaba", action="store_true", help="leave out the bundled Alibaba daily shape"
    )
    p.add_argument(
        "--capacity",
        type=float,
        default=0.0,
        help="requests/s per replica (0: p99 minute rate / 20)",
    )
    p.add_argument(
        "--startup",
        type=float,
        default=120.0,
        help="seconds from asking for a pod to its readiness",
    )
    p.add_argument("--target", type=float, default=0.6, help="target utilization of the cpu metric")
    p.add_argument(
        "--quantile",
        type=float,
        default=0.99,
        help="the IHPA predictor's quantile (Katalyst's default 0.99)",
    )
    p.add_argument(
        "--ihpa-history",
        choices=("peak", "mean"),
        default="peak",
        help="the IHPA custom metric's query: each minute's peak 15 s request rate, or its mean",
    )
    p.add_argument(
        "--resync", type=float, default=3600.0, help="seconds between portrait refreshes"
    )
    p.add_argument(
        "--ihpa-metrics",
        choices=("both", "predicted"),
        default="both",
        help="the IHPA's metrics: the cpu metric and the predicted one, or the predicted only",
    )
    p.add_argument(
        "--ihpa-scale-down-window",
        type=float,
        default=0.0,
        help="the IHPA's behavior.scaleDown.stabilizationWindowSeconds (the HPA's default "
        "is 300; the forecast already holds replicas for the coming peaks)",
    )
    p.add_argument(
        "--ihpa-value",
        type=float,
        default=1.0,
        help="the IHPA predicted metric's customMetric value as a fraction of a replica's "
        "capacity (1: the rate one replica serves; 0: value 0, i.e. template requests x "
        "the cpu target)",
    )
    p.add_argument(
        "--ehpa-window", type=float, default=3600.0, help="Crane's predictionWindowSeconds"
    )
    p.add_argument("--train-days", type=float, default=7.0, help="days replayed before scoring")
    p.add_argument("--alibaba-train-days", type=float, default=3.0)
    p.add_argument(
        "--alibaba-peak", type=float, default=20.0, help="replicas the Alibaba peak needs"
    )
    p.add_argument(
        "--days", type=float, default=0.0, help="replay only this many days of each trace (0: all)"
    )
    args = p.parse_args(argv)
    totals = {"hpa": Result(), "ihpa": Result()}
    runs: list[tuple[str, Array, float, float]] = []
    for path in args.trace:
        steps = per_step(read_requests(path))
        cap = args.capacity or float(np.quantile(per_minute(steps), 0.99)) / 20.0
        runs.append((path.name, steps, cap, args.train_days))
    if not args.no_alibaba:
        cap = args.capacity or 10.0
        runs.append(
            (
                "alibaba2018 daily shape",
                alibaba_steps(args.alibaba_peak * args.target, cap),
                cap,
                args.alibaba_train_days,
            )
        )
    for name, steps, cap, train in runs:
        if args.days:
            steps = steps[: int(args.days * DAY_S / DT)]
        ns = argparse.Namespace(**{**vars(args), "train_days": train})
        out = run_trace(name, steps, ns, cap)
        for k in totals:
            totals[k].underprov_minutes += out[k].underprov_minutes
            totals[k].replica_minutes += out[k].replica_minutes
    h, i = totals["hpa"], totals["ihpa"]
    print(
        f"underprov_vs_hpa: {_ratio(i.underprov_minutes, h.underprov_minutes)} "
        f"replica_minutes_vs_hpa: {_ratio(i.replica_minutes, h.replica_minutes)}"
    )


if __name__ == "__main__":
    main()
