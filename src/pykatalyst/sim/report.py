"""The report: `report.json` for scripts, `report.md` for people, PNG charts for both.

`report.json` holds no wall-clock figure, so the same scenario and seed give the same
bytes. Its keys are documented in docs/simulator.md and are stable.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from pykatalyst.extras import require
from pykatalyst.sim.physics import model_constants
from pykatalyst.sim.recording import PolicyRun
from pykatalyst.sim.scenario import dump_scenario
from pykatalyst.sim.simulate import SimulationResult

REPORT_VERSION = 1

# Every policy entry of report.json has these keys (more may follow).
POLICY_KEYS = (
    "cpu_util_mean",
    "cpu_util_p95",
    "cpu_util_services_mean",
    "cpu_util_batch_mean",
    "mem_util_mean",
    "mem_util_p95",
    "slo_violation_fraction",
    "slo_violating_service_minutes",
    "service_minutes",
    "latency_p99_ms",
    "batch_core_hours",
    "batch_cpu_core_hours",
    "batch_tasks_arrived",
    "batch_tasks_completed",
    "batch_mean_completion_minutes",
    "batch_mean_wait_minutes",
    "batch_work_lost_fraction",
    "batch_queue_end",
    "evictions",
    "oom_kills",
    "service_restarts",
    "pods_pending_max",
    "reclaimed_capacity_mean_cores",
)

CHARTS = (
    ("utilization.png", "Cluster cpu and memory utilization over time"),
    ("sample_node.png", "A sample node: pools, reclaimed capacity and reclaimed usage"),
    ("slo.png", "Service replicas over their p99 SLO, and p99 relative to the SLO"),
    ("evictions.png", "Evictions and OOM kills (cumulative)"),
)

ASSUMPTIONS = (
    "Cpu is shared per cpu domain (a cpuset, or the union of overlapping cpusets) by "
    "weighted max-min fairness on cgroup cpu.shares, capped by each pod's cpuset size and "
    "CFS quota; cpu.idle=1 (SCHED_IDLE) pods get only cycles no normal task wants.",
    "Cgroup weights are taken flat (per pod), not through kubelet's QoS-class hierarchy.",
    "A service replica's p99 = (base latency + M/M/c queueing wait on its cpu domain + "
    "SCHED_IDLE preemption cost) x (1 + hyperthread-sibling and socket interference).",
    "Interference constants are modelling assumptions in the ranges reported by Heracles "
    "(ISCA 2015), Bubble-Up (MICRO 2011) and CPI2 (EuroSys 2013); the batch time slice "
    "is Linux CFS's default.",
    "Memory use is constant per pod (a share of its request); the kernel's OOM killer "
    "takes pods in oom_score order (kubelet's oom_score_adj) when a node overflows; a pod "
    "over its memory limit is killed.",
    "An evicted or OOM-killed batch task loses its progress and is resubmitted; a service "
    "replica that is pending or restarting counts as violating its SLO for that step.",
    "Batch tasks are cpu-bound and want `cores` cpus until their work is done; the batch "
    "framework keeps at most `max_pending` pods pending, the rest in its own queue.",
    "Demand shapes come from the Alibaba 2018 cluster series (CC-BY-4.0).",
)


LATENCY_EQUATIONS = (
    "```",
    "R99 = (L0 + W99 + d_idle * u_idle + d_light * u_light) * (1 + a_ht * h + a_llc * p * b)",
    "W99 = tau / (c (1 - rho)) * ln(Pw / (1 - q))   if Pw > 1 - q, else 0",
    "Pw  = ErlangC(c, rho)",
    "tau = f_b * t_slice + (1 - f_b) * k * L0",
    "```",
    "",
    "L0: base latency; c, rho: cpus and normal-priority utilisation of the replica's cpu "
    "domain; f_b: batch share of that usage; t_slice = batch_slice_ms; k: the service's "
    "cpu_burst_fraction; u_idle: SCHED_IDLE busy share (d_idle = idle_preempt_ms); u_light: "
    "busy share of normal batch at no more than light_weight_ratio of the service's weight, "
    "left out of rho (d_light = light_preempt_ms); h: batch "
    "busy share of its hyperthread siblings (a_ht = alpha_ht); b: batch busy share of its "
    "sockets, p: the batch's cache_pressure (a_llc = alpha_llc); q = quantile. A replica "
    "getting less cpu than it wants is charged starved_factor x SLO.",
)


CONSTANT_SOURCES = {
    "batch_slice_ms": "Linux CFS default: sched_min_granularity 0.75 ms x (1 + log2 8)",
    "idle_preempt_ms": "modelling assumption",
    "light_preempt_ms": "benchmarks/isolation_real.py: nginx beside stress-ng at the kubelet's "
    "2 cpu shares measured no slower than under SCHED_IDLE (benchmarks/calibrate_sim.py)",
    "light_weight_ratio": "modelling assumption: the kubelet's 2 shares against 1024 per core",
    "alpha_ht": "modelling assumption, order of magnitude of Heracles (Lo et al., ISCA 2015) "
    "for a HyperThread antagonist",
    "alpha_llc": "modelling assumption, within the slowdowns reported by Heracles (ISCA 2015), "
    "Bubble-Up (Mars et al., MICRO 2011) and CPI2 (Zhang et al., EuroSys 2013)",
    "quantile": "the reported percentile",
    "starved_factor": "charting convention; a starved step always violates",
}


def _r(x: float) -> float:
    """Round for a stable, readable JSON (6 significant digits)."""
    if not math.isfinite(x):
        return 0.0
    if x == 0:
        return 0.0
    return float(f"{x:.6g}")


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else 0.0


def policy_summary(result: SimulationResult, run: PolicyRun) -> dict[str, Any]:
    s = run.series
    t = run.tally
    step_min = result.scenario.step / 60.0
    replica_steps = float(sum(s.replicas))
    viol = float(sum(s.slo_violations))
    used = t.batch_cpu_used
    lat: dict[str, dict[str, float]] = {}
    for svc, values in run.latency.items():
        arr = np.asarray(values) if values else np.zeros(1)
        lat[svc] = {"mean": _r(float(arr.mean())), "p95": _r(float(np.quantile(arr, 0.95)))}
    out: dict[str, Any] = {
        "cpu_util_mean": _mean(s.cpu_util),
        "cpu_util_p95": float(np.quantile(s.cpu_util, 0.95)) if s.cpu_util else 0.0,
        "cpu_util_services_mean": _mean(s.cpu_util_services),
        "cpu_util_batch_mean": _mean(s.cpu_util_batch),
        "mem_util_mean": _mean(s.mem_util),
        "mem_util_p95": float(np.quantile(s.mem_util, 0.95)) if s.mem_util else 0.0,
        "slo_violation_fraction": viol / replica_steps if replica_steps else 0.0,
        "slo_violating_service_minutes": viol * step_min,
        "service_minutes": replica_steps * step_min,
        "batch_core_hours": t.completed_work / 3600.0,
        "batch_cpu_core_hours": used / 3600.0,
        "batch_tasks_arrived": len(result.workload.batch),
        "batch_tasks_completed": t.completed,
        "batch_mean_completion_minutes": _mean(t.completion_times) / 60.0,
        "batch_mean_wait_minutes": _mean(t.wait_times) / 60.0,
        "batch_work_lost_fraction": t.lost_work / used if used > 0 else 0.0,
        "batch_queue_end": s.batch_queued[-1] if s.batch_queued else 0,
        "evictions": t.evictions,
        "oom_kills": t.oom_kills,
        "service_restarts": t.service_restarts,
        "pods_pending_max": t.pods_pending_max,
        "reclaimed_capacity_mean_cores": _mean(s.reclaimed_capacity),
        "agent_reconciles": t.agent_reconciles,
    }
    rounded: dict[str, Any] = {k: _r(v) if isinstance(v, float) else v for k, v in out.items()}
    rounded["latency_p99_ms"] = lat
    return rounded


def summarize(result: SimulationResult) -> dict[str, Any]:
    """The content of report.json."""
    sc = result.scenario
    policies = {run.policy.name: policy_summary(result, run) for run in result.runs}
    goals: dict[str, Any] = {}
    if "vanilla" in policies and "katalyst" in policies:
        v = policies["vanilla"]["cpu_util_mean"]
        k = policies["katalyst"]
        goals = {
            "cpu_util_gain_vs_vanilla": _r(k["cpu_util_mean"] / v) if v > 0 else 0.0,
            "cpu_util_gain_target": 2.0,
            "slo_violation_fraction": k["slo_violation_fraction"],
            "slo_violation_target": 0.01,
            "batch_work_lost_fraction": k["batch_work_lost_fraction"],
            "batch_work_lost_target": 0.01,
        }
        goals["met"] = bool(
            goals["cpu_util_gain_vs_vanilla"] >= 2.0
            and k["slo_violation_fraction"] <= 0.01
            and k["batch_work_lost_fraction"] <= 0.01
        )
    return {
        "report_version": REPORT_VERSION,
        "scenario": sc.name,
        "seed": sc.seed,
        "duration_s": sc.duration,
        "step_s": sc.step,
        "nodes": sum(g.count for g in sc.nodes),
        "cpus": sum(g.count * g.cpus for g in sc.nodes),
        "policies": policies,
        "goals": goals,
        "warnings": list(result.warnings),
        "model": {
            "constants": model_constants(sc.model.overrides()).as_dict(),
            "assumptions": list(ASSUMPTIONS),
        },
        "scenario_config": dump_scenario(sc),
    }


def write_report(result: SimulationResult, out: Path) -> dict[str, Any]:
    """Write report.json, report.md and the charts into `out`; returns the JSON data."""
    out.mkdir(parents=True, exist_ok=True)
    data = summarize(result)
    (out / "report.json").write_text(
        json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    _charts(result, out)
    _events(result, out)
    (out / "report.md").write_text(_markdown(result, data), encoding="utf-8")
    return data


# --- Markdown ---------------------------------------------------------------------------


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


RESULT_ROWS: list[tuple[str, str]] = [
    ("cpu utilization, mean", "cpu_util_mean"),
    ("cpu utilization, p95", "cpu_util_p95"),
    ("  of which services", "cpu_util_services_mean"),
    ("  of which batch", "cpu_util_batch_mean"),
    ("memory utilization, mean", "mem_util_mean"),
    ("SLO-violating service-minutes", "slo_violation_fraction"),
    ("batch work completed (core-hours)", "batch_core_hours"),
    ("batch cpu used (core-hours)", "batch_cpu_core_hours"),
    ("batch tasks completed", "batch_tasks_completed"),
    ("batch mean completion time (min)", "batch_mean_completion_minutes"),
    ("batch mean wait to start (min)", "batch_mean_wait_minutes"),
    ("batch work lost", "batch_work_lost_fraction"),
    ("batch tasks still queued at the end", "batch_queue_end"),
    ("evictions", "evictions"),
    ("OOM kills", "oom_kills"),
    ("pods pending, max", "pods_pending_max"),
    ("reclaimed capacity, mean (cores)", "reclaimed_capacity_mean_cores"),
]
FRACTIONS = frozenset(
    {
        "cpu_util_mean",
        "cpu_util_p95",
        "cpu_util_services_mean",
        "cpu_util_batch_mean",
        "mem_util_mean",
        "slo_violation_fraction",
        "batch_work_lost_fraction",
    }
)


def _markdown(result: SimulationResult, data: dict[str, Any]) -> str:
    lines = _intro(result, data)
    lines += _warnings(result.warnings)
    lines += _goals(data.get("goals") or {})
    lines += _results(result, data["policies"])
    lines += ["## Charts", ""]
    for fname, title in CHARTS:
        lines += [f"### {title}", "", f"![{title}]({fname})", ""]
    lines += _model(result)
    lines += _policies(result)
    return "\n".join(lines)


def _intro(result: SimulationResult, data: dict[str, Any]) -> list[str]:
    sc = result.scenario
    return [
        f"# Simulation report: {sc.name}",
        "",
        sc.description.strip() or "",
        "",
        f"- {data['nodes']} nodes, {data['cpus']} cpus; "
        f"{sum(s.replicas for s in sc.services)} service replicas "
        f"({', '.join(s.name for s in sc.services) or 'none'}); "
        f"{len(result.workload.batch)} batch tasks arrived.",
        f"- {sc.duration / 3600:g} simulated hours in steps of {sc.step:g} s; seed {sc.seed}.",
        f"- Policies: {', '.join(data['policies'])} (each on its own simulated cluster, same "
        "workload).",
        "",
    ]


def _warnings(warnings: tuple[str, ...]) -> list[str]:
    if not warnings:
        return []
    return ["## Warnings", "", *(f"- {w}" for w in warnings), ""]


def _goals(g: dict[str, Any]) -> list[str]:
    if not g:
        return []
    return [
        "## Goals",
        "",
        "| goal | target | katalyst | met |",
        "|---|---|---|---|",
        f"| mean cpu utilization vs vanilla | >= 2.0x | {g['cpu_util_gain_vs_vanilla']:.2f}x "
        f"| {'yes' if g['cpu_util_gain_vs_vanilla'] >= 2 else 'no'} |",
        f"| SLO-violating service-minutes | <= 1 % | {_pct(g['slo_violation_fraction'])} "
        f"| {'yes' if g['slo_violation_fraction'] <= 0.01 else 'no'} |",
        f"| batch work lost to evictions/OOM | <= 1 % | "
        f"{_pct(g['batch_work_lost_fraction'])} "
        f"| {'yes' if g['batch_work_lost_fraction'] <= 0.01 else 'no'} |",
        "",
    ]


def _results(result: SimulationResult, pols: dict[str, Any]) -> list[str]:
    names_ = list(pols)
    lines = [
        "## Results",
        "",
        "| metric | " + " | ".join(names_) + " |",
        "|---|" + "---|" * len(names_),
    ]
    for label, key in RESULT_ROWS:
        cells = []
        for n in names_:
            v = pols[n][key]
            if key in FRACTIONS:
                cells.append(_pct(float(v)))
            elif isinstance(v, float):
                cells.append(f"{v:,.1f}")
            else:
                cells.append(f"{v:,}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "Service p99 latency (ms), mean over the run / p95 over time:", ""]
    lines += ["| service | SLO | " + " | ".join(names_) + " |", "|---|---|" + "---|" * len(names_)]
    for svc in result.scenario.services:
        cells = [
            f"{pols[n]['latency_p99_ms'][svc.name]['mean']:.1f} / "
            f"{pols[n]['latency_p99_ms'][svc.name]['p95']:.1f}"
            for n in names_
        ]
        lines.append(f"| {svc.name} | {svc.slo_p99_ms:g} | " + " | ".join(cells) + " |")
    return [
        *lines,
        "",
        "Every pod start, completion, eviction and OOM kill is listed in [events.csv](events.csv).",
        "",
    ]


def _model(result: SimulationResult) -> list[str]:
    sc = result.scenario
    lines = ["## Model and assumptions", ""]
    lines += [f"- {a}" for a in ASSUMPTIONS]
    lines += ["", "The latency model, per service replica and step:", "", *LATENCY_EQUATIONS]
    lines += ["", "Constants of the latency model:", ""]
    overrides = sc.model.overrides()
    for k, v in model_constants(overrides).as_dict().items():
        source = "set by the scenario" if k in overrides else CONSTANT_SOURCES.get(k, "")
        lines.append(f"- `{k}` = {v:g}" + (f" ({source})" if source else ""))
    return [
        *lines,
        "",
        "See docs/simulator.md for the equations and where each constant comes from.",
        "",
    ]


def _policies(result: SimulationResult) -> list[str]:
    lines = ["## Policies", ""]
    for p in result.scenario.policies:
        extra = ""
        if p.name == "static-overcommit":
            extra = (
                f": node allocatable x {p.cpu_overcommit_ratio:g} (cpu), "
                f"x {p.memory_overcommit_ratio:g} (memory)"
            )
        elif p.name == "katalyst":
            ev = p.agent.eviction_period or p.agent.period
            extra = f": agent period {p.agent.period:g} s, " + (
                f"eviction every {ev:g} s" if p.agent.eviction else "no eviction"
            )
            extra += f", scheduler {p.scheduler.config or 'katalyst-scheduler (spread)'}"
        lines.append(f"- `{p.name}`{extra}")
    lines.append("")
    return lines


def _events(result: SimulationResult, out: Path) -> None:
    """events.csv: every pod start, completion, eviction and OOM kill, per policy."""
    lines = ["policy,time_s,event,pod,node"]
    for run in result.runs:
        for t, kind, pod, node in run.tally.events:
            lines.append(f"{run.policy.name},{t:g},{kind},{pod},{node}")
    (out / "events.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")


# --- charts -----------------------------------------------------------------------------


CHART_COLORS = {"vanilla": "tab:gray", "static-overcommit": "tab:orange", "katalyst": "tab:blue"}


def _charts(result: SimulationResult, out: Path) -> None:
    matplotlib = require("matplotlib", "sim", "the simulator's charts")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meta = {"Software": None, "Creation Time": None}  # stable bytes for equal runs
    for fname, chart in (
        ("utilization.png", _utilization_chart),
        ("sample_node.png", _sample_chart),
        ("slo.png", _slo_chart),
        ("evictions.png", _evictions_chart),
    ):
        fig = chart(plt, result)
        fig.tight_layout()
        fig.savefig(out / fname, dpi=100, metadata=meta)
        plt.close(fig)


def _hours(run: PolicyRun) -> np.ndarray:
    return np.asarray(run.series.time) / 3600.0


def _utilization_chart(plt: Any, result: SimulationResult) -> Any:
    fig, ax = plt.subplots(figsize=(9, 4.2))
    for run in result.runs:
        c = CHART_COLORS.get(run.policy.name)
        ax.plot(
            _hours(run),
            np.asarray(run.series.cpu_util) * 100,
            color=c,
            label=f"{run.policy.name} cpu",
        )
        ax.plot(
            _hours(run),
            np.asarray(run.series.mem_util) * 100,
            color=c,
            linestyle=":",
            label=f"{run.policy.name} memory",
        )
    ax.set_xlabel("simulated hour")
    ax.set_ylabel("utilization (%)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    ax.set_title("Cluster utilization")
    return fig


def _sample_chart(plt: Any, result: SimulationResult) -> Any:
    sample = next((r for r in result.runs if r.policy.name == "katalyst"), result.runs[-1])
    s = sample.series
    fig, ax = plt.subplots(figsize=(9, 4.2))
    h = _hours(sample)
    ax.step(h, s.sample_share_pool, where="post", label="share pool (cpus)", color="tab:green")
    ax.step(h, s.sample_reclaim_pool, where="post", label="reclaim pool (cpus)", color="tab:purple")
    ax.plot(h, s.sample_reclaimed_capacity, label="reclaimed capacity (cores)", color="tab:blue")
    ax.plot(
        h, s.sample_reclaimed_usage, label="reclaimed usage (cores)", color="tab:red", alpha=0.7
    )
    ax.plot(h, s.sample_service_usage, label="service usage (cores)", color="black", alpha=0.7)
    ax.set_xlabel("simulated hour")
    ax.set_ylabel("cpus / cores")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"{sample.policy.name}: node {sample.sample_node}")
    return fig


def _slo_chart(plt: Any, result: SimulationResult) -> Any:
    slo = {s.name: s.slo_p99_ms for s in result.scenario.services}
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(9, 6.4), sharex=True)
    for run in result.runs:
        rs = run.series
        color = CHART_COLORS.get(run.policy.name)
        if slo:
            ratio = np.mean([np.asarray(run.latency[n]) / slo[n] for n in slo], axis=0)
            ax2.plot(_hours(run), ratio, color=color, label=run.policy.name)
        frac = np.divide(
            np.asarray(rs.slo_violations, dtype=float),
            np.asarray(rs.replicas, dtype=float),
            out=np.zeros(len(rs.replicas)),
            where=np.asarray(rs.replicas) > 0,
        )
        ax.plot(_hours(run), frac * 100, color=color, label=run.policy.name)
    ax.set_ylabel("replicas over p99 SLO (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("SLO violations")
    ax2.axhline(1.0, color="red", linewidth=0.8, linestyle="--")
    ax2.set_xlabel("simulated hour")
    ax2.set_ylabel("p99 / SLO (mean over services)")
    ax2.grid(alpha=0.3)
    return fig


def _evictions_chart(plt: Any, result: SimulationResult) -> Any:
    fig, ax = plt.subplots(figsize=(9, 4.2))
    for run in result.runs:
        rs = run.series
        c = CHART_COLORS.get(run.policy.name)
        ax.plot(_hours(run), np.cumsum(rs.evictions), color=c, label=f"{run.policy.name} evictions")
        ax.plot(
            _hours(run),
            np.cumsum(rs.oom_kills),
            color=c,
            linestyle="--",
            label=f"{run.policy.name} OOM kills",
        )
    ax.set_xlabel("simulated hour")
    ax.set_ylabel("count (cumulative)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Evictions and OOM kills")
    return fig
