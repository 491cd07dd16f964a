"""What-if sweeps: the sweep file's validation, the plan, determinism whatever runs it, the
report, and a failed run reported beside the others."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from pykatalyst.cli.main import app
from pykatalyst.sim.scenario import parse_scenario
from pykatalyst.sim.sweep import (
    RunOutcome,
    SweepError,
    SweepRun,
    pareto_front,
    parse_sweep,
    plan_sweep,
    run_one,
    run_sweep,
    summarize_sweep,
    sweep_csv,
)
from tests.sim.conftest import tiny

RATIO = "policies.static-overcommit.cpu_overcommit_ratio"
COEF = "policies.katalyst.agent.config.advisor.usage_coefficient"


def _short(**overrides: Any) -> Any:
    data = tiny(duration="40m", **overrides)
    data["nodes"][0]["count"] = 1
    data["services"][0]["replicas"] = 1
    return parse_scenario(data)


def _plan(axes: dict[str, list[Any]], **extra: Any) -> list[SweepRun]:
    return plan_sweep(_short(), parse_sweep({"axes": axes, **extra}), "sweep.yaml")


def test_every_combination_is_one_run_with_its_settings_applied() -> None:
    runs = _plan({"seed": [1, 2], RATIO: [1.5, 3.0], COEF: [1.1, 1.4]})
    assert len(runs) == 8
    assert [r.index for r in runs] == list(range(8))
    combos = {(r.settings["seed"], r.settings[RATIO], r.settings[COEF]) for r in runs}
    assert len(combos) == 8
    for r in runs:
        assert r.scenario.seed == r.settings["seed"]
        by_name = {p.name: p for p in r.scenario.policies}
        assert by_name["static-overcommit"].cpu_overcommit_ratio == r.settings[RATIO]
        advisor = by_name["katalyst"].agent.config["advisor"]
        assert advisor["usage_coefficient"] == r.settings[COEF]
        assert advisor["enable_reclaim"] is True  # the scenario's own settings stay


@pytest.mark.parametrize(
    ("sweep", "named"),
    [
        ({"axes": {RATIO: [1.5, 0.5]}}, f"axes.{RATIO}: value 0.5 is refused"),
        ({"axes": {"policies.burst.agent.period": [60]}}, "no policy 'burst'"),
        ({"axes": {COEF: [0]}}, f"axes.{COEF}: value 0 is refused"),
        ({"axes": {"policies.katalyst.agent.config.advisor.no_such": [1]}}, "no_such"),
        ({"axes": {"nodes.3.count": [2]}}, "axes.nodes.3.count: nodes is a list of 1"),
        ({"axes": {"seed.x": [2]}}, "axes.seed.x: seed is a single value"),
        ({"axes": {"duration": ["forever"]}}, "axes.duration: value 'forever' is refused"),
        ({"axes": {"seed": [1]}, "policies": ["burst"]}, "policies: 'burst' is not among"),
        ({"axes": {}}, "axes"),
        ({"axes": {"seed": []}}, "axis seed: give at least one value"),
        ({"axes": {"seed": [1, 1]}}, "axis seed: a value is repeated"),
        ({"axes": {"seed": [1]}, "slo_budget": 2}, "slo_budget"),
        ({"axes": {"seed": [1]}, "extra": 1}, "extra: unknown field"),
    ],
)
def test_a_bad_sweep_is_refused_naming_the_axis(sweep: dict[str, Any], named: str) -> None:
    with pytest.raises(SweepError) as err:
        plan_sweep(_short(), parse_sweep(sweep, "sweep.yaml"), "sweep.yaml")
    assert named in str(err.value)
    assert str(err.value).startswith("sweep.yaml: invalid sweep")


def test_runs_are_the_same_one_after_another_and_on_ray_with_two_workers() -> None:
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'pykatalyst[sweep]')")
    runs = _plan({"seed": [1, 2], RATIO: [1.5, 3.0]}, policies=["static-overcommit"])
    alone, how_alone = run_sweep(runs, use_ray=False)
    on_ray, how_ray = run_sweep(runs, workers=2)
    assert how_alone == "one after another in this process"
    assert how_ray.startswith("on a local Ray")
    assert [o.figures for o in alone] == [o.figures for o in on_ray]
    assert [o.index for o in on_ray] == [0, 1, 2, 3]
    # the settings did change the outcome: not one result four times
    assert len({json.dumps(o.figures, sort_keys=True) for o in alone}) > 1


def test_a_run_that_fails_is_reported_and_the_others_finish(tmp_path: Path) -> None:
    runs = _plan({"seed": [1, 2]}, policies=["vanilla"])
    # a scenario whose scheduler configuration vanished after the plan: the run fails
    # when its scheduler starts
    gone = tmp_path / "gone.yaml"
    gone.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
    )
    data = tiny(duration="40m", policies=[{"name": "vanilla", "scheduler": {"config": str(gone)}}])
    broken = parse_scenario(data)
    gone.unlink()
    runs[1] = SweepRun(1, runs[1].settings, broken, runs[1].policies)
    outcomes, _ = run_sweep(runs, use_ray=False)
    assert outcomes[0].error is None and outcomes[0].figures["vanilla"]["cpu_util_mean"] > 0
    assert outcomes[1].error is not None and "gone.yaml" in outcomes[1].error
    spec = parse_sweep({"axes": {"seed": [1, 2]}, "policies": ["vanilla"]})
    report = summarize_sweep(spec, outcomes, "test", _short())
    assert report["failed"] == 1
    assert report["settings"][0]["runs"] == 1  # the failed run is not averaged in


def _outcome(index: int, seed: int, coef: float, util: float, slo: float) -> RunOutcome:
    figures = {
        "cpu_util_mean": util,
        "slo_violation_fraction": slo,
        "batch_core_hours": 1.0,
        "batch_work_lost_fraction": 0.0,
        "evictions": 0,
        "oom_kills": 0,
    }
    return RunOutcome(index, {"seed": seed, COEF: coef}, {"katalyst": figures})


def test_the_summary_spreads_over_seeds_and_picks_within_the_budget() -> None:
    spec = parse_sweep({"axes": {"seed": [1, 2], COEF: [1.1, 1.25, 1.5]}, "slo_budget": 0.01})
    outcomes = [
        _outcome(0, 1, 1.1, 0.60, 0.030),  # busiest, but over the budget
        _outcome(1, 2, 1.1, 0.64, 0.020),
        _outcome(2, 1, 1.25, 0.50, 0.004),
        _outcome(3, 2, 1.25, 0.54, 0.012),  # its worst seed is over the budget
        _outcome(4, 1, 1.5, 0.40, 0.001),
        _outcome(5, 2, 1.5, 0.42, 0.002),
    ]
    data = summarize_sweep(spec, outcomes, "test", _short())
    rows = {r["settings"][COEF]: r for r in data["settings"]}
    assert rows[1.1]["figures"]["cpu_util_mean"] == pytest.approx(
        {"mean": 0.62, "min": 0.6, "max": 0.64, "std": 0.0282843}, rel=1e-4
    )
    assert rows[1.25]["figures"]["slo_violation_fraction"]["max"] == 0.012
    assert data["pick"] == "katalyst: usage_coefficient=1.5"
    assert all(r["on_front"] for r in data["settings"])  # each trades one for the other
    table = list(csv.reader(io.StringIO(sweep_csv(data))))
    assert table[0][:4] == ["run", "seed", COEF, "policy"]
    assert len(table) == 7


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), min_size=1, max_size=30))
def test_the_front_holds_exactly_the_undominated_points(points: list[tuple[float, float]]) -> None:
    front = set(pareto_front(points))
    for i, (u, s) in enumerate(points):
        beaten = any(
            u2 >= u and s2 <= s and (u2 > u or s2 < s) for j, (u2, s2) in enumerate(points)
        )
        assert (i in front) == (not beaten)


def test_the_command_writes_the_report_and_refuses_a_bad_sweep(tmp_path: Path) -> None:
    scenario = tmp_path / "scenario.yaml"
    data = tiny(duration="40m")
    data["nodes"][0]["count"] = 1
    data["services"][0]["replicas"] = 1
    scenario.write_text(yaml.safe_dump(data))
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"axes": {"seed": [1, 2]}, "policies": ["vanilla"]}))
    out = tmp_path / "out"
    runner = CliRunner()
    res = runner.invoke(app, ["sim", str(scenario), "--sweep", str(sweep), "--out", str(out)])
    assert res.exit_code == 0, res.output
    report = json.loads((out / "report.json").read_text())
    assert [r["settings"]["seed"] for r in report["runs"]] == [1, 2]
    assert (out / "pareto.png").stat().st_size > 0
    assert "vanilla: (base)" in (out / "report.md").read_text()
    sweep.write_text(yaml.safe_dump({"axes": {"policies.vanilla.cpu_overcommit_ratio": [2]}}))
    bad = tmp_path / "bad"
    res = runner.invoke(app, ["sim", str(scenario), "--sweep", str(sweep), "--out", str(bad)])
    assert res.exit_code == 2
    assert "axes.policies.vanilla.cpu_overcommit_ratio: value 2 is refused" in res.output
    assert not bad.exists()


def test_one_run_alone_gives_the_simulators_figures() -> None:
    run = _plan({"seed": [5]}, policies=["katalyst"])[0]
    outcome = run_one(run)
    assert outcome.error is None
    assert set(outcome.figures) == {"katalyst"}
    assert outcome.figures["katalyst"]["agent_reconciles"] > 0


def test_without_ray_the_runs_go_one_after_another_with_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(__import__("sys").modules, "ray", None)  # as if not installed
    scenario = tmp_path / "scenario.yaml"
    data = tiny(duration="40m")
    data["nodes"][0]["count"] = 1
    scenario.write_text(yaml.safe_dump(data))
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"axes": {"seed": [1, 2]}, "policies": ["vanilla"]}))
    runner = CliRunner()
    args = ["sim", str(scenario), "--sweep", str(sweep), "--out", str(tmp_path / "out")]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "Ray is not installed" in res.output and "one after another" in res.output
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["ran"] == "one after another in this process"
    res = runner.invoke(app, [*args, "--ray-address", "ray://head:10001"])
    assert res.exit_code == 2
    assert "--ray-address needs Ray" in res.output


def test_workers_run_a_scenario_side_by_side_and_ray_address_needs_a_sweep(
    tmp_path: Path,
) -> None:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(tiny(duration="20m")))
    runner = CliRunner()
    args = ["sim", str(scenario), "-q"]
    res = runner.invoke(app, [*args, "--out", str(tmp_path / "side"), "--workers", "2"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, [*args, "--out", str(tmp_path / "alone"), "--workers", "1"])
    assert res.exit_code == 0, res.output
    side = (tmp_path / "side" / "report.json").read_bytes()
    assert side == (tmp_path / "alone" / "report.json").read_bytes()
    res = runner.invoke(app, [*args, "--out", str(tmp_path / "x"), "--ray-address", "ray://h:1"])
    assert res.exit_code == 2
    assert "--ray-address applies to a --sweep" in res.output
    assert not (tmp_path / "x").exists()


def test_the_policies_go_side_by_side_only_where_the_run_is_long() -> None:
    from pykatalyst.cli.sim import policy_workers

    short = parse_scenario(tiny(duration="2h"))  # 2 nodes x 2 h
    long = parse_scenario(tiny(duration="60h"))  # 2 nodes x 60 h
    cpus = len(__import__("os").sched_getaffinity(0))
    assert policy_workers(short, None) == 1
    assert policy_workers(long, None) == min(cpus, len(long.policies))
    assert policy_workers(short, 3) == 3
