"""What-if sweeps: one scenario, every combination of some settings, one simulation each.

A sweep file names axes, each a setting of the scenario and the values to try:

    axes:
      seed: [1, 2, 3]
      policies.katalyst.agent.config.advisor.usage_coefficient: [1.1, 1.25, 1.5]
      policies.static-overcommit.cpu_overcommit_ratio: [1.5, 2.0]
    policies: [katalyst, static-overcommit]   # which of the scenario's policies run (all)
    slo_budget: 0.01                          # the SLO-violating share a pick may reach

An axis is a dotted path into the scenario as its YAML reads, with a policy named by its
name (`policies.katalyst.…`) and list items by their index (`nodes.0.count`). Every
combination is validated before anything runs, so a bad value is refused with its axis
named, and nothing runs.

The plan (`plan_sweep`) and the summary (`summarize_sweep`) are pure; `run_sweep` runs the
plan one run after another or on Ray (`pykatalyst[sweep]`), locally or on a user's Ray
cluster. A run's result depends on its settings alone (its seed is one of them), never on
which worker ran it or when.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import socket
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from pykatalyst.api.problems import field_problems
from pykatalyst.api.yamlio import load_yaml
from pykatalyst.sim.scenario import Scenario, ScenarioError, dump_scenario, parse_scenario

SWEEP_REPORT_VERSION = 1
# The figures a sweep reports per run, with the direction that is better.
HEADLINE: dict[str, str] = {
    "cpu_util_mean": "higher",
    "slo_violation_fraction": "lower",
    "batch_core_hours": "higher",
    "batch_work_lost_fraction": "lower",
    "evictions": "lower",
    "oom_kills": "lower",
}


class SweepError(ValueError):
    """A sweep that cannot run; each line names the axis (or field) and what is accepted."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__("\n".join([f"{source}: invalid sweep", *(f"  {p}" for p in problems)]))


class RayUnreachable(ConnectionError):
    """The Ray cluster a sweep was sent to (`--ray-address`) could not be joined."""


# Ray's token authentication, as its errors name it: a cluster that asks for a token
_TOKEN_WORDS = ("authentication", "auth token", "auth_token")


def unreachable_message(address: str, exc: BaseException) -> str:
    """Why joining the Ray cluster at `address` failed: the first line of Ray's error and
    of each error behind it (the cause is often the telling one), and what to do where the
    cluster asks for a token (Ray only sends one to an address it was told to)."""
    lines: list[str] = []
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen and len(lines) < 4:
        seen.add(id(e))
        text = str(e).strip()
        line = f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__
        if line not in lines:
            lines.append(line)
        e = e.__cause__ or e.__context__
    said = "; ".join(lines)
    out = f"--ray-address {address}: cannot join the Ray cluster there ({said})"
    if any(w in said.lower() for w in _TOKEN_WORDS):
        out += (
            ". The cluster asks for a token: set RAY_AUTH_MODE=token here, with its token in "
            "RAY_AUTH_TOKEN or ~/.ray/auth_token (Ray's token authentication)"
        )
    return out


def address_problem(address: str, timeout_s: float = 5.0) -> str | None:
    """Why nothing answers at a Ray address of the form `[ray://]host:port` (None when
    something listens there, or for another form such as `auto`, which Ray resolves):
    Ray itself retries an address that does not answer for minutes."""
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    host = host.removeprefix("[").removesuffix("]")
    if int(port) > 65535:
        return f"port {port} is outside 0-65535"
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        return f"nothing answers at {host}:{port} ({exc.strerror or exc})"
    return None


class SweepSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    axes: dict[str, list[Any]] = Field(min_length=1, description="setting path -> values")
    policies: list[str] | None = Field(
        default=None, min_length=1, description="the scenario's policies to run (all)"
    )
    slo_budget: float = Field(
        default=0.01, ge=0, le=1, description="the SLO-violating share a pick may reach"
    )

    @field_validator("axes")
    @classmethod
    def _axes(cls, axes: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for name, values in axes.items():
            if not name or any(not part for part in name.split(".")):
                raise ValueError(
                    f"axis {name!r}: a dotted path such as seed or policies.katalyst.…"
                )
            if not values:
                raise ValueError(f"axis {name}: give at least one value")
            seen = [json.dumps(v, sort_keys=True, default=str) for v in values]
            if len(set(seen)) != len(seen):
                raise ValueError(f"axis {name}: a value is repeated")
        return axes


@dataclass(frozen=True, slots=True)
class SweepRun:
    """One combination: its settings (axis -> value) and the scenario they make."""

    index: int
    settings: dict[str, Any]
    scenario: Scenario
    policies: tuple[str, ...]


@dataclass(slots=True)
class RunOutcome:
    index: int
    settings: dict[str, Any]
    figures: dict[str, dict[str, Any]] = field(default_factory=dict)  # policy -> summary
    error: str | None = None
    wall_s: float = 0.0


def load_sweep(path: Path) -> SweepSpec:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SweepError(str(path), [f"cannot read the file: {exc.strerror}"]) from None
    try:
        data = load_yaml(text, str(path))
    except yaml.YAMLError:
        raise SweepError(str(path), ["not valid YAML"]) from None
    return parse_sweep(data, str(path))


def parse_sweep(data: Any, source: str = "<sweep>") -> SweepSpec:
    if not isinstance(data, dict):
        raise SweepError(source, ["a sweep is a mapping with axes (and policies, slo_budget)"])
    try:
        return SweepSpec.model_validate(data)
    except ValidationError as exc:
        raise SweepError(source, [f"{p.path}: {p.message}" for p in field_problems(exc)]) from None


def _set(data: dict[str, Any], axis: str, value: Any) -> None:
    """Put `value` at the dotted `axis` of a scenario's data; KeyError naming what is there."""
    parts = axis.split(".")
    node: Any = data
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        where = ".".join(parts[:depth]) or "the scenario"
        if isinstance(node, list):
            if depth == 1 and parts[0] == "policies":
                named = [i for i, p in enumerate(node) if p.get("name") == part]
                if not named:
                    have = ", ".join(str(p.get("name")) for p in node)
                    raise KeyError(f"the scenario has no policy {part!r} (it has: {have})")
                index = named[0]
            elif part.isdigit() and int(part) < len(node):
                index = int(part)
            else:
                raise KeyError(f"{where} is a list of {len(node)}: use an index 0..{len(node) - 1}")
            if last:
                node[index] = value
            else:
                node = node[index]
        elif isinstance(node, dict):
            if last:
                node[part] = value
            else:
                if node.get(part) is None:
                    node[part] = {}
                node = node[part]
        else:
            raise KeyError(f"{where} is a single value, not a section with {part!r}")


def _check_policies(scenario: Scenario) -> None:
    """What the simulator would refuse only when a policy starts: the agent's and the
    eviction manager's configurations and a scheduler profile file."""
    from pykatalyst.agent.config import parse_config
    from pykatalyst.agent.eviction import EvictionConfig
    from pykatalyst.sim.control import scheduler_config

    for policy in scenario.policies:
        if policy.name == "katalyst":
            parse_config(dict(policy.agent.config), "agent.config")
            try:
                EvictionConfig.model_validate(policy.agent.eviction_config)
            except ValidationError as exc:
                raise ValueError(
                    "; ".join(
                        f"agent.eviction_config.{p.path}: {p.message}" for p in field_problems(exc)
                    )
                ) from None
        scheduler_config(policy)


def _apply(base: dict[str, Any], settings: dict[str, Any], base_dir: Path | None) -> Scenario:
    data = json.loads(json.dumps(base))
    for axis, value in settings.items():
        _set(data, axis, value)
    return parse_scenario(data, "<sweep>", base_dir)


def plan_sweep(
    scenario: Scenario, spec: SweepSpec, source: str = "<sweep>", base_dir: Path | None = None
) -> list[SweepRun]:
    """Every combination of the axes' values, each validated as a scenario of its own.
    Raises SweepError naming each bad axis value; a relative path among the values is
    taken from `base_dir` (the sweep file's folder)."""
    have = [p.name for p in scenario.policies]
    problems: list[str] = []
    wanted = tuple(spec.policies or have)
    for name in wanted:
        if name not in have:
            problems.append(f"policies: {name!r} is not among the scenario's ({', '.join(have)})")
    base = dump_scenario(scenario)
    # each value alone first: a bad one is named once, not in every combination
    for axis, values in spec.axes.items():
        for value in values:
            try:
                _check_policies(_apply(base, {axis: value}, base_dir))
            except KeyError as exc:
                problems.append(f"axes.{axis}: {exc.args[0]}")
                break
            except ScenarioError as exc:
                why = "; ".join(f"{p}: {m}" if p else m for p, m, _ in exc.problems)
                problems.append(f"axes.{axis}: value {value!r} is refused: {why}")
            except ValueError as exc:
                problems.append(f"axes.{axis}: value {value!r} is refused: {exc}")
    if problems:
        raise SweepError(source, problems)
    names = list(spec.axes)
    runs = []
    for index, combo in enumerate(itertools.product(*(spec.axes[a] for a in names))):
        settings = dict(zip(names, combo, strict=True))
        try:
            sc = _apply(base, settings, base_dir)
            _check_policies(sc)
        except (ScenarioError, ValueError) as exc:
            raise SweepError(source, [f"the combination {settings}: {exc}"]) from None
        runs.append(SweepRun(index, settings, sc, wanted))
    return runs


# --- running --------------------------------------------------------------------------------


def run_one(run: SweepRun) -> RunOutcome:
    """Simulate one combination; an error is returned with the outcome, never raised."""
    from pykatalyst.sim.report import policy_summary
    from pykatalyst.sim.simulate import simulate

    started = time.perf_counter()
    out = RunOutcome(run.index, run.settings)
    try:
        policies = [p for p in run.scenario.policies if p.name in run.policies]
        result = simulate(run.scenario.model_copy(update={"policies": policies}))
        out.figures = {r.policy.name: policy_summary(result, r) for r in result.runs}
    except Exception as exc:  # one run's failure is reported; the others finish
        last = traceback.extract_tb(exc.__traceback__)[-1:]
        where = f" ({last[0].filename.rsplit('/', 1)[-1]}:{last[0].lineno})" if last else ""
        out.error = f"{type(exc).__name__}: {exc}{where}"
    out.wall_s = time.perf_counter() - started
    return out


Done = Callable[[RunOutcome], None]


def run_sweep(
    runs: Sequence[SweepRun],
    workers: int | None = None,
    ray_address: str | None = None,
    done: Done | None = None,
    use_ray: bool = True,
) -> tuple[list[RunOutcome], str]:
    """Run every combination; returns the outcomes in plan order and how they ran.

    On Ray when it is installed (a local Ray of `workers` cpus, or the cluster at
    `ray_address`), else one after another in this process."""
    ray = None
    if use_ray or ray_address:
        try:
            import ray as _ray

            ray = _ray
        except ImportError:
            if ray_address:
                raise
    if ray is None:
        outcomes = []
        for run in runs:
            outcome = run_one(run)
            outcomes.append(outcome)
            if done is not None:
                done(outcome)
        return outcomes, "one after another in this process"
    return _run_on_ray(ray, runs, workers, ray_address, done)


def _run_on_ray(
    ray: Any, runs: Sequence[SweepRun], workers: int | None, address: str | None, done: Done | None
) -> tuple[list[RunOutcome], str]:
    started_here = not ray.is_initialized()
    if started_here:
        if address:
            problem = address_problem(address)
            if problem is not None:
                raise RayUnreachable(f"--ray-address {address}: {problem}")
            try:
                ray.init(address=address, logging_level="ERROR", log_to_driver=False)
            except Exception as exc:  # Ray raises several kinds; all mean "not joined"
                raise RayUnreachable(unreachable_message(address, exc)) from exc
        else:
            ray.init(
                num_cpus=workers,
                include_dashboard=False,
                logging_level="ERROR",
                log_to_driver=False,
            )
    try:
        remote = ray.remote(num_cpus=1)(run_one)
        pending = {remote.remote(run): run.index for run in runs}
        by_index: dict[int, RunOutcome] = {}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                index = pending.pop(ref)
                try:
                    outcome = ray.get(ref)
                except Exception as exc:  # the worker itself died
                    run = runs[[r.index for r in runs].index(index)]
                    outcome = RunOutcome(index, run.settings, error=f"{type(exc).__name__}: {exc}")
                by_index[index] = outcome
                if done is not None:
                    done(outcome)
        cpus = int(ray.cluster_resources().get("CPU", 0))
        where = f"the Ray cluster at {address}" if address else "a local Ray"
        return [by_index[r.index] for r in runs], f"on {where} ({cpus} cpus)"
    finally:
        if started_here:
            ray.shutdown()


# --- the summary ----------------------------------------------------------------------------


def _stats(values: list[float]) -> dict[str, float]:
    arr = np.asarray(values, dtype=float)
    return {
        "mean": _r(float(arr.mean())),
        "min": _r(float(arr.min())),
        "max": _r(float(arr.max())),
        "std": _r(float(arr.std(ddof=1))) if len(arr) > 1 else 0.0,
    }


def _r(x: float) -> float:
    return 0.0 if not math.isfinite(x) or x == 0 else float(f"{x:.6g}")


def _label(settings: dict[str, Any]) -> str:
    return ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in settings.items()) or "(base)"


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other beats on both: higher first, lower second."""
    front = []
    for i, (u, s) in enumerate(points):
        dominated = any(
            (u2 >= u and s2 <= s) and (u2 > u or s2 < s)
            for j, (u2, s2) in enumerate(points)
            if j != i
        )
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: points[i][0])


def _setting_rows(spec: SweepSpec, outcomes: list[RunOutcome]) -> list[dict[str, Any]]:
    """One row per setting (a combination without its seed) and policy, with the spread
    of each headline figure over the runs that finished; sorted by label."""
    varying = [a for a in spec.axes if a != "seed"]
    groups: dict[str, dict[str, Any]] = {}
    for o in outcomes:
        if o.error is not None:
            continue
        settings = {a: o.settings[a] for a in varying}
        for policy, fig in o.figures.items():
            key = json.dumps([policy, settings], sort_keys=True, default=str)
            g = groups.setdefault(key, {"policy": policy, "settings": settings, "values": {}})
            for name in HEADLINE:
                g["values"].setdefault(name, []).append(float(fig[name]))
    rows = [
        {
            "policy": g["policy"],
            "settings": g["settings"],
            "label": f"{g['policy']}: {_label(g['settings'])}",
            "runs": len(g["values"][next(iter(HEADLINE))]),
            "figures": {n: _stats(v) for n, v in g["values"].items()},
        }
        for g in groups.values()
    ]
    rows.sort(key=lambda r: r["label"])
    return rows


def _run_rows(outcomes: list[RunOutcome]) -> list[dict[str, Any]]:
    return [
        {
            "index": o.index,
            "settings": o.settings,
            "error": o.error,
            "wall_s": _r(o.wall_s),
            "figures": {p: {n: fig[n] for n in HEADLINE} for p, fig in sorted(o.figures.items())},
        }
        for o in outcomes
    ]


def summarize_sweep(
    spec: SweepSpec, outcomes: list[RunOutcome], how: str, scenario: Scenario
) -> dict[str, Any]:
    """The content of report.json: every run, each setting's spread over seeds, the
    utilisation-versus-SLO front and the pick for the SLO budget."""
    rows = _setting_rows(spec, outcomes)
    front = pareto_front(
        [
            (r["figures"]["cpu_util_mean"]["mean"], r["figures"]["slo_violation_fraction"]["mean"])
            for r in rows
        ]
    )
    for i, row in enumerate(rows):
        row["on_front"] = i in front
    within = [r for r in rows if r["figures"]["slo_violation_fraction"]["max"] <= spec.slo_budget]
    pick = max(within, key=lambda r: r["figures"]["cpu_util_mean"]["mean"]) if within else None
    budget = f"{100 * spec.slo_budget:g} %"
    return {
        "sweep_report_version": SWEEP_REPORT_VERSION,
        "scenario": scenario.name,
        "axes": spec.axes,
        "policies": list(spec.policies or [p.name for p in scenario.policies]),
        "slo_budget": spec.slo_budget,
        "ran": how,
        "runs": _run_rows(outcomes),
        "failed": sum(1 for o in outcomes if o.error is not None),
        "settings": rows,
        "front": [rows[i]["label"] for i in front],
        "pick": pick["label"] if pick else None,
        "pick_reason": (
            "the highest mean cpu utilisation whose worst seed keeps SLO-violating "
            f"service time within {budget}"
            if pick
            else f"no setting keeps SLO-violating service time within {budget} on every seed"
        ),
    }


def sweep_csv(data: dict[str, Any]) -> str:
    """One row per run and policy: the axes' values, the headline figures, the error."""
    axes = list(data["axes"])
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["run", *axes, "policy", *HEADLINE, "wall_s", "error"])
    for run in data["runs"]:
        values = [
            json.dumps(run["settings"][a])
            if isinstance(run["settings"][a], (dict, list))
            else run["settings"][a]
            for a in axes
        ]
        if run["error"] is not None:
            w.writerow(
                [run["index"], *values, "", *([""] * len(HEADLINE)), run["wall_s"], run["error"]]
            )
            continue
        for policy, fig in run["figures"].items():
            w.writerow(
                [run["index"], *values, policy, *(fig[n] for n in HEADLINE), run["wall_s"], ""]
            )
    return buf.getvalue()


def _pct(x: float) -> str:
    return f"{100 * x:.2f} %"


def sweep_markdown(data: dict[str, Any]) -> str:
    lines = [
        f"# Sweep of {data['scenario']}",
        "",
        f"{len(data['runs'])} runs ({data['failed']} failed), {data['ran']}; axes: "
        + ", ".join(f"`{a}` ({len(v)})" for a, v in data["axes"].items())
        + f"; policies: {', '.join(data['policies'])}.",
        "",
        f"**Pick for an SLO budget of {_pct(data['slo_budget'])}:** "
        + (f"`{data['pick']}`" if data["pick"] else "none")
        + f" ({data['pick_reason']}).",
        "",
        "![utilisation against SLO violations](pareto.png)",
        "",
        "| setting | runs | cpu util (mean, min–max) | SLO-violating (mean, max) | "
        "batch core-h | work lost | evictions | front |",
        "|---|---:|---|---|---:|---:|---:|:---:|",
    ]
    for row in data["settings"]:
        f = row["figures"]
        cpu, slo = f["cpu_util_mean"], f["slo_violation_fraction"]
        lines.append(
            f"| {row['label']} | {row['runs']} | {_pct(cpu['mean'])} "
            f"({_pct(cpu['min'])}–{_pct(cpu['max'])}) | {_pct(slo['mean'])} "
            f"({_pct(slo['max'])}) | {f['batch_core_hours']['mean']:.1f} | "
            f"{_pct(f['batch_work_lost_fraction']['mean'])} | {f['evictions']['mean']:.1f} | "
            f"{'●' if row['on_front'] else ''} |"
        )
    failed = [r for r in data["runs"] if r["error"] is not None]
    if failed:
        lines += ["", "## Failed runs", ""]
        lines += [f"- run {r['index']} ({_label(r['settings'])}): {r['error']}" for r in failed]
    lines += [
        "",
        "Spread is over the seeds of each setting (the `seed` axis); the front holds the "
        "settings no other beats on both mean cpu utilisation and mean SLO-violating share. "
        "Every run's figures are in sweep.csv and report.json.",
        "",
    ]
    return "\n".join(lines)


def _pareto_chart(data: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    rows = data["settings"]
    for policy in data["policies"]:
        mine = [r for r in rows if r["policy"] == policy]
        if not mine:
            continue
        xs = [100 * r["figures"]["slo_violation_fraction"]["mean"] for r in mine]
        ys = [100 * r["figures"]["cpu_util_mean"]["mean"] for r in mine]
        ax.scatter(xs, ys, label=policy, alpha=0.8)
    front = [r for r in rows if r["on_front"]]
    front.sort(key=lambda r: r["figures"]["slo_violation_fraction"]["mean"])
    fx = [100 * r["figures"]["slo_violation_fraction"]["mean"] for r in front]
    fy = [100 * r["figures"]["cpu_util_mean"]["mean"] for r in front]
    ax.plot(fx, fy, color="black", linewidth=1)
    ax.scatter(fx, fy, s=140, facecolors="none", edgecolors="black", label="front")
    ax.axvline(100 * data["slo_budget"], color="red", linestyle="--", label="SLO budget")
    ax.set_xlabel("SLO-violating service time (%)")
    ax.set_ylabel("mean cpu utilisation (%)")
    ax.set_title(f"{data['scenario']}: utilisation against SLO violations")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_sweep_report(data: dict[str, Any], out: Path) -> None:
    """report.json, report.md, sweep.csv and pareto.png into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(
        json.dumps(data, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8"
    )
    (out / "sweep.csv").write_text(sweep_csv(data), encoding="utf-8")
    (out / "report.md").write_text(sweep_markdown(data), encoding="utf-8")
    _pareto_chart(data, out / "pareto.png")
