"""`katalyst sim` and `katalyst demo`: run a scenario on the simulator and write a report."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from pykatalyst.cli.conventions import old_option
from pykatalyst.cli.output import console, print_message
from pykatalyst.extras import MissingExtra, require
from pykatalyst.sim.checks import scenario_warnings
from pykatalyst.sim.report import write_report
from pykatalyst.sim.scenario import Scenario, ScenarioError, load_scenario
from pykatalyst.sim.simulate import SimulationResult, simulate

DEMO_SCENARIO = "demo.yaml"

# below this many node-hours a run takes seconds, and starting processes would cost more
# than running its policies side by side saves
SIDE_BY_SIDE_NODE_HOURS = 100.0


def policy_workers(scenario: Scenario, workers: int | None) -> int:
    """How many processes run the scenario's policies: `workers` when given, else one per
    cpu this process may use (at most one per policy) for runs of 100 node-hours or more."""
    if workers is not None:
        return workers
    node_hours = sum(g.count for g in scenario.nodes) * scenario.duration / 3600
    if node_hours < SIDE_BY_SIDE_NODE_HOURS:
        return 1
    return max(1, min(len(os.sched_getaffinity(0)), len(scenario.policies)))


def demo_scenario_path() -> Path:
    """The bundled demo scenario inside the installed package."""
    return Path(str(resources.files("pykatalyst").joinpath("data", "scenarios", DEMO_SCENARIO)))


def _run(
    scenario: Scenario, out: Path, seed: int | None, quiet: bool, workers: int | None = None
) -> SimulationResult:
    try:  # before hours of simulation, not after
        require("matplotlib", "sim", "the simulator's charts")
    except MissingExtra as exc:
        print_message(f"error: {exc}", stderr=True)
        raise typer.Exit(2) from None
    for warning in scenario_warnings(scenario):
        print_message(f"warning: {warning}", stderr=True)
    con = console(stderr=True)
    steps = scenario.steps
    with Progress(
        TextColumn("[bold]{task.description:<18}"),
        BarColumn(bar_width=40),
        MofNCompleteColumn(),
        TextColumn("steps · {task.fields[clock]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=con,
        disable=quiet,
        transient=False,
    ) as bar:
        tasks: dict[str, TaskID] = {
            p.name: bar.add_task(p.name, total=steps, clock="0 h", start=False)
            for p in scenario.policies
        }
        every = max(1, steps // 200)

        def progress(policy: str, done: int, total: int) -> None:
            if done == 1:
                bar.start_task(tasks[policy])
            if done % every == 0 or done == total:
                hours = done * scenario.step / 3600
                bar.update(tasks[policy], completed=done, clock=f"{hours:.1f} h simulated")

        result = simulate(scenario, progress, seed=seed, workers=policy_workers(scenario, workers))
    data = write_report(result, out)
    _summary(data, out, quiet)
    return result


def _summary(data: dict[str, object], out: Path, quiet: bool) -> None:
    if quiet:
        return
    policies = data["policies"]
    assert isinstance(policies, dict)
    for name, p in policies.items():
        print_message(
            f"{name:<18} cpu {100 * p['cpu_util_mean']:5.1f} %"
            f"  mem {100 * p['mem_util_mean']:5.1f} %"
            f"  SLO-violating {100 * p['slo_violation_fraction']:5.2f} %"
            f"  batch {p['batch_core_hours']:8.1f} core-h"
            f"  lost {100 * p['batch_work_lost_fraction']:5.2f} %"
            f"  evictions {p['evictions']}  OOM {p['oom_kills']}"
        )
    goals = data.get("goals")
    if isinstance(goals, dict) and goals:
        print_message(
            f"katalyst vs vanilla: {goals['cpu_util_gain_vs_vanilla']:.2f}x mean cpu utilization"
        )
    print_message(f"report: {out / 'report.md'} (and report.json, *.png)")


def sim(
    scenario: Path = typer.Argument(..., help="Scenario file (YAML); see docs/simulator.md."),  # noqa: B008
    out: Path | None = typer.Option(None, "--out", "-d", help="Folder for the report."),  # noqa: B008
    old_out: Annotated[Path | None, old_option("sim", "-o")] = None,
    seed: int | None = typer.Option(None, "--seed", help="Override the scenario's seed."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar or summary."),
    sweep: Path | None = typer.Option(  # noqa: B008
        None,
        "--sweep",
        help="Sweep file (YAML): run every combination of its axes' values, each one "
        "simulation, and write a report comparing them; see docs/simulator.md.",
    ),
    workers: int | None = typer.Option(
        None,
        "--workers",
        min=1,
        help="Processes running the policies side by side (default: one per cpu, for runs "
        "of 100 node-hours or more); with --sweep, the cpus of the local Ray (default: this "
        "machine's).",
    ),
    ray_address: str | None = typer.Option(
        None,
        "--ray-address",
        metavar="URL",
        help="Sweep: run on this Ray cluster (e.g. ray://head:10001).",
    ),
) -> None:
    """Simulate a scenario under each of its policies and write a report comparing them."""
    folder = old_out or out
    if folder is None:
        print_message("error: --out DIR: the folder for the report is required", stderr=True)
        raise typer.Exit(code=2)
    try:
        sc = load_scenario(scenario)
    except ScenarioError as exc:
        print_message(str(exc), stderr=True)
        raise typer.Exit(code=2) from None
    if seed is not None and not 0 <= seed < 2**32:
        print_message(f"--seed: {seed} is outside 0..4294967295", stderr=True)
        raise typer.Exit(code=2)
    if sweep is not None:
        if seed is not None:
            sc = sc.model_copy(update={"seed": seed})
        _sweep(sc, sweep, folder, workers, ray_address, quiet)
        return
    if ray_address is not None:
        print_message("error: --ray-address applies to a --sweep", stderr=True)
        raise typer.Exit(code=2)
    _run(sc, folder, seed, quiet, workers)


def _check_ray(runs: int, address: str | None) -> None:
    """Refuse --ray-address without Ray; without it, say the runs go one after another."""
    try:
        import ray  # noqa: F401
    except ImportError:
        if address is not None:
            print_message(
                "error: --ray-address needs Ray, which is not installed: "
                "pip install 'pykatalyst[sweep]'",
                stderr=True,
            )
            raise typer.Exit(code=2) from None
        print_message(
            f"note: Ray is not installed (pip install 'pykatalyst[sweep]'), so the {runs} "
            "runs go one after another in this process",
            stderr=True,
        )


def _sweep(
    sc: Scenario, path: Path, out: Path, workers: int | None, address: str | None, quiet: bool
) -> None:
    from pykatalyst.sim.sweep import (
        RayUnreachable,
        SweepError,
        load_sweep,
        plan_sweep,
        run_sweep,
        summarize_sweep,
        write_sweep_report,
    )

    try:
        require("matplotlib", "sim", "the sweep's chart")
        spec = load_sweep(path)
        runs = plan_sweep(sc, spec, str(path), path.parent)
    except (SweepError, MissingExtra) as exc:
        print_message(f"error: {exc}" if isinstance(exc, MissingExtra) else str(exc), stderr=True)
        raise typer.Exit(code=2) from None
    _check_ray(len(runs), address)
    con = console(stderr=True)
    with Progress(
        TextColumn("[bold]{task.description:<18}"),
        BarColumn(bar_width=40),
        MofNCompleteColumn(),
        TextColumn("runs · {task.fields[failed]} failed"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=con,
        disable=quiet,
    ) as bar:
        task = bar.add_task(sc.name, total=len(runs), failed=0)
        failed = 0

        def done(outcome: object) -> None:
            nonlocal failed
            failed += getattr(outcome, "error", None) is not None
            bar.update(task, advance=1, failed=failed)

        try:
            outcomes, how = run_sweep(runs, workers, address, done)
        except RayUnreachable as exc:
            bar.remove_task(task)  # no bar left on the screen for runs that never started
            bar.stop()
            print_message(f"error: {exc}", stderr=True)
            raise typer.Exit(code=2) from None
    data = summarize_sweep(spec, outcomes, how, sc)
    write_sweep_report(data, out)
    if not quiet:
        print_message(f"{len(runs)} runs {how}; {data['failed']} failed")
        print_message(f"pick for an SLO budget of {100 * spec.slo_budget:g} %: {data['pick']}")
        print_message(f"report: {out / 'report.md'} (and report.json, sweep.csv, pareto.png)")
    if data["failed"]:
        raise typer.Exit(code=1)


def demo(
    out: Path = typer.Option(  # noqa: B008
        Path("report"), "--out", "-d", help="Folder for the report."
    ),
    old_out: Annotated[Path | None, old_option("demo", "-o")] = None,
    seed: int | None = typer.Option(None, "--seed", help="Override the demo's seed."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar or summary."),
    workers: int | None = typer.Option(
        None,
        "--workers",
        min=1,
        help="Processes running the policies side by side (default: one per cpu).",
    ),
) -> None:
    """Simulate a small colocated cluster over one day under vanilla Kubernetes, static
    overcommit and Katalyst's QoS system, and write the report."""
    path = demo_scenario_path()
    try:
        sc = load_scenario(path)
    except ScenarioError as exc:  # a broken install
        print_message(str(exc), stderr=True)
        raise typer.Exit(code=2) from None
    if not quiet:
        print_message(
            f"Simulating '{sc.name}': {sum(g.count for g in sc.nodes)} nodes, "
            f"{sc.duration / 3600:g} h, policies {', '.join(p.name for p in sc.policies)}"
        )
    _run(sc, old_out or out, seed, quiet, workers)


def register(app: typer.Typer) -> None:
    app.command("sim")(sim)
    app.command("demo")(demo)
