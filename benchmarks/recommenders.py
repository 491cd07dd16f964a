"""Recommenders on real usage: pykatalyst's, Katalyst's percentile rule and VPA's own code.

    python benchmarks/recommenders.py --trace ../shared/data/traces/bitbrains-rnd
    python benchmarks/recommenders.py --usage export.csv.gz [--warmup-days 7] [--step-s 3600]

Every recommender sees the same samples. After the warm-up it is asked for a recommendation
every ``--step-s`` and the usage until the next step is charged against the request in force
(usage above the request is shortfall; memory above the limit, the request times
``--memory-limit-ratio``, is an OOM, after which the container restarts with the bumped
figure). Two scorings:

1. *alone*: each recommendation applied in place at every step;
2. *as deployed*: pykatalyst in place through its hysteresis; VPA through its updater's
   rules (change only outside [lowerBound, upperBound], or after 12 h when the target differs
   by at least 10 %, by restarting); Katalyst's ResourceRecommend refreshed every 24 h.

VPA is its recommender's own Go code (benchmarks/vpa_anchor, built by its build.sh into
~/.cache/pykatalyst); Katalyst's rule is pykatalyst's exact reproduction of it.

The last line compares pykatalyst with VPA in the first scoring (lower is better):
``cpu_slack_vs_vpa: <r> mem_slack_vs_vpa: <r> underprov_vs_vpa: <r> ooms_vs_vpa: <r>``.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import math
import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pykatalyst.recommend import (
    CurrentResources,
    OOMEvent,
    RecommendationNotReady,
    UsageSeries,
    get_recommender,
)
from pykatalyst.recommend.ensemble import PykatalystSettings
from pykatalyst.recommend.katalyst import KatalystSettings
from pykatalyst.recommend.settings import settings_from
from pykatalyst.recommend.usage_csv import read_usage_csv

HOUR = 3600.0
DAY = 86400.0
GIB = 1024.0**3
HERE = Path(__file__).resolve().parent
RECOMMENDERS = ("vpa", "katalyst", "pykatalyst")


# ----------------------------------------------------------------------------- input


@dataclass(frozen=True)
class Workload:
    name: str
    series: UsageSeries
    cpu_provisioned: float
    memory_provisioned: float


def load_bitbrains(folder: Path) -> list[Workload]:
    """Bitbrains Rnd (see the folder's ATTRIBUTION.md): cores = MHz / (capacity MHz / cores)."""
    files = sorted(folder.glob("*.csv.gz")) + sorted(folder.glob("*.csv"))
    if not files:
        raise SystemExit(f"no .csv or .csv.gz trace in {folder}")
    opener = gzip.open if files[0].suffix == ".gz" else open
    with opener(files[0], "rt") as f:
        rows = np.loadtxt(f, delimiter=",", skiprows=1)
    out = []
    for vm in np.unique(rows[:, 0]):
        r = rows[rows[:, 0] == vm]
        r = r[np.argsort(r[:, 1], kind="stable")]
        keep = np.r_[True, np.diff(r[:, 1]) > 0]  # a few duplicate timestamps
        r = r[keep]
        on = r[:, 2] > 0
        per_core = np.where(on, r[:, 3] / np.where(on, r[:, 2], 1), 1.0)
        cores = np.where(on, r[:, 4] / per_core, 0.0)
        memory = r[:, 6] * 1024.0
        out.append(
            Workload(
                f"vm{int(vm):03d}",
                UsageSeries.of(r[:, 1], np.maximum(cores, 0), np.maximum(memory, 0)),
                float(r[:, 2].max()),
                float(r[:, 5].max() * 1024.0),
            )
        )
    return out


def load_usage(path: Path) -> list[Workload]:
    data = read_usage_csv(path, history_s=400 * DAY)
    return [
        Workload(f"{w}/{c}", s, float(s.cpu.max()) * 2, float(s.memory.max()) * 2)
        for (w, c), s in sorted(data.items())
    ]


def write_usage(workloads: Sequence[Workload], path: Path) -> None:
    with gzip.open(path, "wt", newline="") as f:
        w = csv.writer(f)
        w.writerow(["workload", "container", "timestamp", "cpu", "memory"])
        for wl in workloads:
            s = wl.series
            for t, c, m in zip(s.timestamps, s.cpu, s.memory, strict=True):
                w.writerow([wl.name, "main", int(t), f"{c:.6f}", int(m)])


def classify(s: UsageSeries) -> str:
    """A coarse workload class from its cpu: idle, daily, bursty, steady or variable."""
    cpu = s.cpu
    if np.percentile(cpu, 99) < 0.05:
        return "idle"
    hours = np.floor((s.timestamps - s.timestamps[0]) / HOUR).astype(int)
    hourly = np.bincount(hours, cpu) / np.maximum(np.bincount(hours), 1)
    a, b = hourly[24:], hourly[:-24]
    if a.size > 48 and a.std() > 0 and b.std() > 0 and np.corrcoef(a, b)[0, 1] >= 0.6:
        return "daily"
    med = max(float(np.median(cpu)), 1e-3)
    if np.percentile(cpu, 99) / med > 4:
        return "bursty"
    if cpu.std() / max(cpu.mean(), 1e-9) < 0.3:
        return "steady"
    return "variable"


# ----------------------------------------------------------------------------- recommenders


@dataclass(frozen=True)
class Rec:
    cpu: float
    memory: float
    cpu_lower: float | None = None
    cpu_upper: float | None = None
    memory_lower: float | None = None
    memory_upper: float | None = None


class VPAAnchor:
    """VPA's recommender, its own code, over a pipe (benchmarks/vpa_anchor)."""

    def __init__(self, binary: str, margin: float | None = None) -> None:
        command = [binary] if margin is None else [binary, f"-margin={margin}"]
        self.proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        self.fed = 0
        self.series: UsageSeries | None = None

    def start(self, name: str, series: UsageSeries) -> None:
        self._send(f"N {name}\n")
        self.series, self.fed = series, 0

    def _send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text)

    def feed_until(self, t: float, inclusive: bool = False) -> None:
        assert self.series is not None
        s = self.series
        side = "right" if inclusive else "left"
        n = int(np.searchsorted(s.timestamps, t, side=side))
        if n > self.fed:
            lines = [
                f"S {s.timestamps[i]:.0f} {s.cpu[i]:.6f} {s.memory[i]:.0f}\n"
                for i in range(self.fed, n)
            ]
            self._send("".join(lines))
            self.fed = n

    def oom(self, t: float, request: float) -> None:
        self._send(f"O {t:.0f} {request:.0f}\n")

    def query(self, t: float) -> Rec:
        self._send(f"Q {t:.0f}\n")
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.proc.stdin.flush()
        f = self.proc.stdout.readline().split()
        if not f or f[0] != "R":
            raise RuntimeError(f"vpa-anchor answered {f!r}")
        tc, lc, uc, tm, lm, um = (float(x) for x in f[3:9])
        return Rec(tc, tm, lc, uc, lm, um)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


def vpa_binary() -> str:
    found = subprocess.run(
        ["bash", str(HERE / "vpa_anchor" / "build.sh")], capture_output=True, text=True
    )
    if found.returncode != 0:
        raise SystemExit(f"could not build the VPA anchor:\n{found.stderr[-2000:]}")
    return found.stdout.strip().splitlines()[-1]


# ----------------------------------------------------------------------------- replay


@dataclass
class Score:
    cpu_slack: float = 0.0  # core-hours
    mem_slack: float = 0.0  # GiB-hours
    cpu_short: float = 0.0  # core-hours
    underprov_min: float = 0.0
    ooms: int = 0
    changes: int = 0
    cpu_req_sum: float = 0.0  # core-hours of request, for relative slack
    mem_req_sum: float = 0.0
    days: float = 0.0

    def add(self, other: Score) -> None:
        for k in self.__dataclass_fields__:
            setattr(self, k, getattr(self, k) + getattr(other, k))


@dataclass
class State:
    cpu: float
    memory: float
    changed_at: float | None = None
    last_vpa_apply: float = -math.inf
    oom_events: list[OOMEvent] = field(default_factory=list)


def _dt(t: np.ndarray, end: float) -> np.ndarray:
    nxt = np.r_[t[1:], end]
    return np.clip(nxt - t, 0.0, 900.0)


def replay(
    wl: Workload,
    who: str,
    deployed: bool,
    args: argparse.Namespace,
    anchor: VPAAnchor | None,
    settings: dict[str, Any],
) -> Score:
    s = wl.series
    t0 = float(s.timestamps[0]) + args.warmup_days * DAY
    end = float(s.timestamps[-1]) + 300.0
    steps = np.arange(t0, end, args.step_s)
    state = State(cpu=wl.cpu_provisioned, memory=wl.memory_provisioned)
    score = Score()
    if anchor is not None:
        anchor.start(f"{wl.name}-{who}-{int(deployed)}", s)
    last_cpu: float | None = None
    for j, T in enumerate(steps):
        T_next = float(steps[j + 1]) if j + 1 < steps.size else end
        rec = _ask(wl, who, T, state, anchor, settings, deployed, last_cpu, inclusive=False)
        if rec is not None:
            _apply(who, deployed, rec, state, T, score)
        lo = int(np.searchsorted(s.timestamps, T, side="left"))
        hi = int(np.searchsorted(s.timestamps, T_next, side="left"))
        while lo < hi:
            limit = state.memory * args.memory_limit_ratio
            over = np.flatnonzero(s.memory[lo:hi] > limit)
            stop = lo + int(over[0]) + 1 if over.size else hi
            _charge(
                s,
                lo,
                stop,
                T_next if stop == hi else float(s.timestamps[stop - 1]) + 300,
                state,
                score,
            )
            last_cpu = float(s.cpu[stop - 1])
            if not over.size:
                break
            tau = float(s.timestamps[stop - 1])
            score.ooms += 1
            state.oom_events.append(OOMEvent(tau, state.memory, limit, float(s.memory[stop - 1])))
            if anchor is not None:
                anchor.feed_until(tau, inclusive=True)
                anchor.oom(tau, state.memory)
            # The container restarts with what its recommender says now (it may OOM again).
            rec = _ask(wl, who, tau + 1, state, anchor, settings, False, last_cpu, True)
            if rec is not None:
                state.cpu, state.memory = rec.cpu, rec.memory
            state.changed_at = tau
            score.changes += 1
            lo = stop
    score.days = (end - t0) / DAY
    return score


def _ask(
    wl: Workload,
    who: str,
    T: float,
    state: State,
    anchor: VPAAnchor | None,
    settings: dict[str, Any],
    deployed: bool,
    last_cpu: float | None,
    inclusive: bool,
) -> Rec | None:
    if who == "vpa":
        assert anchor is not None
        anchor.feed_until(T, inclusive)
        return anchor.query(T)
    history = wl.series.before(T)
    current = None
    if who == "pykatalyst" and deployed:
        current = CurrentResources(
            cpu_request=state.cpu,
            memory_request=state.memory,
            memory_limit=state.memory * settings["memory_limit_ratio"],
            changed_at=state.changed_at,
            throttled=last_cpu is not None and last_cpu > state.cpu,
        )
    try:
        r = get_recommender(who).recommend(
            history, T, settings.get(who), oom_events=state.oom_events, current=current
        )
    except RecommendationNotReady:
        return None
    if r.cpu_request is None or r.memory_request is None:
        return None
    return Rec(r.cpu_request, r.memory_request)


def _apply(who: str, deployed: bool, rec: Rec, state: State, T: float, score: Score) -> None:
    new_cpu, new_mem = rec.cpu, rec.memory
    if deployed and who == "vpa":
        outside = not (
            (rec.cpu_lower or 0) <= state.cpu <= (rec.cpu_upper or math.inf)
            and (rec.memory_lower or 0) <= state.memory <= (rec.memory_upper or math.inf)
        )
        diff = max(
            abs(new_cpu - state.cpu) / max(state.cpu, 1e-9),
            abs(new_mem - state.memory) / max(state.memory, 1.0),
        )
        aged = T - (state.changed_at if state.changed_at is not None else -math.inf) >= 12 * HOUR
        if not (outside or (aged and diff >= 0.1)):
            return
    refreshed = state.changed_at is not None and T - state.changed_at < DAY
    if deployed and who == "katalyst" and refreshed:
        return
    changed = (
        abs(new_cpu - state.cpu) > 0.01 * state.cpu
        or abs(new_mem - state.memory) > 0.01 * state.memory
    )
    if changed:
        score.changes += 1
        state.changed_at = T
    state.cpu, state.memory = new_cpu, new_mem


def _charge(s: UsageSeries, lo: int, hi: int, end: float, state: State, score: Score) -> None:
    t = s.timestamps[lo:hi]
    dt = _dt(t, end) / HOUR
    cpu, mem = s.cpu[lo:hi], s.memory[lo:hi]
    score.cpu_slack += float(np.sum(np.maximum(state.cpu - cpu, 0) * dt))
    score.mem_slack += float(np.sum(np.maximum(state.memory - mem, 0) * dt)) / GIB
    short = np.maximum(cpu - state.cpu, 0)
    score.cpu_short += float(np.sum(short * dt))
    score.underprov_min += float(np.sum(dt[short > 0])) * 60
    score.cpu_req_sum += state.cpu * float(dt.sum())
    score.mem_req_sum += state.memory * float(dt.sum()) / GIB


# ----------------------------------------------------------------------------- driver


_ANCHOR: VPAAnchor | None = None
_ARGS: argparse.Namespace | None = None


def _init(binary: str, args: argparse.Namespace) -> None:
    global _ANCHOR, _ARGS
    _ANCHOR = VPAAnchor(binary) if binary else None
    _ARGS = args


def run_workload(wl: Workload) -> dict[str, Any]:
    assert _ARGS is not None
    args = _ARGS
    settings: dict[str, Any] = {
        "katalyst": KatalystSettings(),
        "pykatalyst": settings_from(json.loads(args.pykatalyst_settings or "{}")),
        "memory_limit_ratio": args.memory_limit_ratio,
    }
    out: dict[str, Any] = {"name": wl.name, "class": classify(wl.series)}
    for deployed in (False, True):
        for who in args.recommenders:
            started = time.perf_counter()
            score = replay(wl, who, deployed, args, _ANCHOR if who == "vpa" else None, settings)
            out[f"{who}/{int(deployed)}"] = score.__dict__ | {
                "wall_s": time.perf_counter() - started
            }
    return out


def _stats(values: list[float]) -> tuple[float, float, float]:
    a = np.asarray(values, dtype=float)
    return float(a.sum()), float(np.median(a)), float(np.percentile(a, 90))


def report(results: list[dict[str, Any]], recommenders: Sequence[str]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    metrics = ("cpu_slack", "mem_slack", "cpu_short", "underprov_min", "ooms", "changes")
    for deployed in (0, 1):
        title = "as deployed" if deployed else "recommenders alone (applied in place every step)"
        print(f"\n== {title}")
        print(f"{'recommender':<12} {'metric':<22} {'total':>12} {'median':>10} {'p90':>10}")
        for who in recommenders:
            rows = [r[f"{who}/{deployed}"] for r in results]
            days = sum(r["days"] for r in rows)
            entry: dict[str, Any] = {}
            for m in metrics:
                total, med, p90 = _stats([r[m] for r in rows])
                if m == "ooms":
                    per = [1000 * r["ooms"] / max(r["days"], 1e-9) for r in rows]
                    total, med, p90 = 1000 * total / max(days, 1e-9), *_stats(per)[1:]
                entry[m] = {"total": total, "median": med, "p90": p90}
                print(f"{who:<12} {_label(m):<22} {total:>12.2f} {med:>10.3f} {p90:>10.3f}")
            for res, req in (("cpu", "cpu_req_sum"), ("mem", "mem_req_sum")):
                slack = f"{res}_slack"
                rel = [r[slack] / r[req] for r in rows if r[req] > 0]
                total = sum(r[slack] for r in rows) / max(sum(r[req] for r in rows), 1e-9)
                _, med, p90 = _stats(rel)
                entry[f"{res}_relative_slack"] = {"total": total, "median": med, "p90": p90}
                label = f"{res} relative slack"
                print(f"{who:<12} {label:<22} {total:>12.3f} {med:>10.3f} {p90:>10.3f}")
            summary[f"{who}/{deployed}"] = entry
    return summary


def _label(m: str) -> str:
    return {
        "cpu_slack": "cpu slack core-h",
        "mem_slack": "mem slack GiB-h",
        "cpu_short": "cpu shortfall core-h",
        "underprov_min": "under-prov. minutes",
        "ooms": "OOMs /1000 c-days",
        "changes": "request changes",
    }[m]


def by_class(results: list[dict[str, Any]], recommenders: Sequence[str]) -> None:
    print("\n== per workload class (recommenders alone; pykatalyst / vpa, lower is better)")
    print(
        f"{'class':<10} {'n':>4} {'cpu slack':>10} {'mem slack':>10} {'underprov':>10}"
        f" {'ooms p/v':>9}"
    )
    classes = sorted({r["class"] for r in results})
    for c in [*classes, "all"]:
        rows = [r for r in results if c in ("all", r["class"])]
        if "pykatalyst" not in recommenders or "vpa" not in recommenders:
            break
        p = [r["pykatalyst/0"] for r in rows]
        v = [r["vpa/0"] for r in rows]

        def ratio(m: str, p: list[dict[str, float]] = p, v: list[dict[str, float]] = v) -> str:
            a, b = sum(x[m] for x in p), sum(x[m] for x in v)
            return f"{a / b:10.3f}" if b > 0 else f"{'-' if a == 0 else 'inf':>10}"

        ooms = f"{sum(x['ooms'] for x in p)}/{sum(x['ooms'] for x in v)}"
        print(
            f"{c:<10} {len(rows):>4} {ratio('cpu_slack')} {ratio('mem_slack')}"
            f" {ratio('underprov_min')} {ooms:>9}"
        )


PARETO = {
    "vpa": ("margin", [0.0, 0.05, 0.15, 0.3, 0.5]),
    "katalyst": ("bufferPercent", [0, 10, 30, 50]),
    "pykatalyst": ("cpu underprovision_weight", [5.0, 10.0, 20.0, 40.0, 80.0]),
}


def _pareto_point(
    job: tuple[str, float, str, argparse.Namespace, list[Workload]],
) -> dict[str, Any]:
    who, knob, binary, args, workloads = job
    anchor = VPAAnchor(binary, knob) if who == "vpa" else None
    cpu_grid = PykatalystSettings().cpu.model_copy(update={"underprovision_weight": knob})
    settings: dict[str, Any] = {
        "katalyst": KatalystSettings(cpu_buffer_percent=int(knob), memory_buffer_percent=int(knob)),
        "pykatalyst": PykatalystSettings(cpu=cpu_grid),
        "memory_limit_ratio": args.memory_limit_ratio,
    }
    total = Score()
    for wl in workloads:
        total.add(replay(wl, who, False, args, anchor, settings))
    if anchor is not None:
        anchor.close()
    return {"recommender": who, "knob": knob} | total.__dict__


def pareto(
    workloads: list[Workload], binary: str, args: argparse.Namespace, path: Path
) -> list[dict[str, Any]]:
    """Cpu slack against under-provisioned minutes as each recommender's margin moves."""
    sweep = argparse.Namespace(**{**vars(args), "step_s": args.pareto_step_s})
    jobs = [
        (who, float(k), binary, sweep, workloads)
        for who in args.recommenders
        for k in PARETO[who][1]
    ]
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(args.jobs) as pool:
        points = pool.map(_pareto_point, jobs, chunksize=1)
    print(f"\n== Pareto (recommenders alone, step {sweep.step_s:g} s)")
    print(
        f"{'recommender':<12} {'knob':>26} {'cpu slack':>11} {'underprov min':>14}"
        f" {'mem slack':>11} {'OOMs':>6}"
    )
    for pt in points:
        knob = f"{PARETO[pt['recommender']][0]} {pt['knob']:g}"
        print(
            f"{pt['recommender']:<12} {knob:>26} {pt['cpu_slack']:>11.0f}"
            f" {pt['underprov_min']:>14.0f} {pt['mem_slack']:>11.0f} {pt['ooms']:>6}"
        )
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install pykatalyst[sim]): no plot")
        return points
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for who in args.recommenders:
        mine = [p for p in points if p["recommender"] == who]
        ax.plot(
            [p["underprov_min"] / 60 for p in mine],
            [p["cpu_slack"] for p in mine],
            marker="o",
            label=f"{who} ({PARETO[who][0]})",
        )
        for p in mine:
            ax.annotate(f"{p['knob']:g}", (p["underprov_min"] / 60, p["cpu_slack"]), fontsize=7)
    ax.set_xlabel("cpu under-provisioned hours (all workloads)")
    ax.set_ylabel("cpu slack core-hours")
    ax.set_title("Recommenders on Bitbrains Rnd: slack vs under-provisioning")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"Pareto plot: {path}")
    return points


def timing(workloads: Sequence[Workload], n: int = 30) -> float:
    """Median ms for one pykatalyst recommendation from 14 days of 5-minute samples."""
    rec = get_recommender("pykatalyst")
    times = []
    for wl in list(workloads)[:n]:
        now = float(wl.series.timestamps[-1]) + 1
        rec.recommend(wl.series, now)
        started = time.perf_counter()
        rec.recommend(wl.series, now)
        times.append(1000 * (time.perf_counter() - started))
    return float(np.median(times)) if times else math.nan


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--trace", type=Path, help="Bitbrains Rnd folder (its ATTRIBUTION.md applies)")
    p.add_argument("--usage", type=Path, help="a usage CSV (workload,container,timestamp,...)")
    p.add_argument("--write-usage", type=Path, help="also write the input as a usage CSV")
    p.add_argument("--warmup-days", type=float, default=7.0)
    p.add_argument("--step-s", type=float, default=3600.0, help="recommendation every ... s")
    p.add_argument("--memory-limit-ratio", type=float, default=1.0)
    p.add_argument("--workloads", type=int, default=0, help="only the first N (0: all)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--recommenders", default=",".join(RECOMMENDERS))
    p.add_argument("--pykatalyst-settings", default="", help="JSON overrides")
    p.add_argument("--json", type=Path, help="write every figure here")
    p.add_argument("--pareto", type=Path, help="also sweep margins and plot the front here")
    p.add_argument("--pareto-step-s", type=float, default=21600.0)
    args = p.parse_args(argv)
    args.recommenders = tuple(x for x in args.recommenders.split(",") if x)
    workloads: list[Workload] = []
    if args.trace:
        workloads += load_bitbrains(args.trace)
    if args.usage:
        workloads += load_usage(args.usage)
    if not workloads:
        p.error("give --trace DIR and/or --usage FILE")
    if args.workloads:
        workloads = workloads[: args.workloads]
    if args.write_usage:
        write_usage(workloads, args.write_usage)
    binary = vpa_binary() if "vpa" in args.recommenders else ""
    started = time.perf_counter()
    print(
        f"{len(workloads)} workloads, warm-up {args.warmup_days:g} d, step {args.step_s:g} s,"
        f" memory limit = {args.memory_limit_ratio:g} x request, {args.jobs} jobs"
    )
    if args.jobs > 1:
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(args.jobs, _init, (binary, args)) as pool:
            results = pool.map(run_workload, workloads, chunksize=1)
    else:
        _init(binary, args)
        results = [run_workload(wl) for wl in workloads]
    wall = time.perf_counter() - started
    summary = report(results, args.recommenders)
    by_class(results, args.recommenders)
    ms = timing(workloads)
    print(
        f"\none pykatalyst recommendation (14 d of 5-min samples): median {ms:.2f} ms;"
        f" whole replay {wall:.0f} s on {os.cpu_count()} cpus"
    )
    points = pareto(workloads, binary, args, args.pareto) if args.pareto else []
    if args.json:
        args.json.write_text(
            json.dumps({"summary": summary, "workloads": results, "pareto": points}, indent=1)
        )
    if {"vpa", "pykatalyst"} <= set(args.recommenders):
        p0, v0 = summary["pykatalyst/0"], summary["vpa/0"]

        def r(m: str) -> str:
            a, b = p0[m]["total"], v0[m]["total"]
            return f"{a / b:.3f}" if b > 0 else ("1.000" if a == 0 else "inf")

        print(
            f"cpu_slack_vs_vpa: {r('cpu_slack')} mem_slack_vs_vpa: {r('mem_slack')}"
            f" underprov_vs_vpa: {r('underprov_min')} ooms_vs_vpa: {r('ooms')}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
