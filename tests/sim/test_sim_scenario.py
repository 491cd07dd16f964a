"""A scenario mistake is refused before anything runs, naming the field that is wrong."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from pykatalyst.sim.scenario import ScenarioError, load_scenario, parse_scenario
from tests.sim.conftest import tiny


def _problem_paths(data: Any) -> list[str]:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data, "s.yaml")
    return [p for p, _, _ in info.value.problems]


def test_valid_tiny_scenario_parses_units(tiny_data: dict[str, Any]) -> None:
    sc = parse_scenario(tiny_data)
    assert sc.duration == 7200.0
    assert sc.nodes[0].memory == 64 * 2**30
    assert sc.nodes[0].cpus == 16
    assert sc.steps == 120


def test_bad_demand_mean_names_its_path(tiny_data: dict[str, Any]) -> None:
    tiny_data["services"][0]["demand"]["mean"] = 1.7
    assert _problem_paths(tiny_data) == ["services[0].demand.mean"]


def test_unknown_field_and_bad_duration_are_both_reported(tiny_data: dict[str, Any]) -> None:
    tiny_data["nodes"][0]["cpus_per_socket"] = 8
    tiny_data["duration"] = "two days"
    with pytest.raises(ScenarioError) as info:
        parse_scenario(tiny_data, "s.yaml")
    text = str(info.value)
    assert "nodes[0].cpus_per_socket: unknown field" in text
    assert "duration:" in text and "'two days'" in text


def test_bad_demand_kind_lists_the_accepted_kinds(tiny_data: dict[str, Any]) -> None:
    tiny_data["services"][0]["demand"] = {"kind": "sinus", "mean": 0.1}
    with pytest.raises(ScenarioError) as info:
        parse_scenario(tiny_data, "s.yaml")
    assert "services[0].demand" in str(info.value)
    assert "constant, diurnal, trace, csv" in str(info.value)


def test_memory_quantity_error_names_field_and_value(tiny_data: dict[str, Any]) -> None:
    tiny_data["batch"]["memory_per_core"] = "lots"
    with pytest.raises(ScenarioError) as info:
        parse_scenario(tiny_data, "s.yaml")
    assert "batch.memory_per_core" in str(info.value)
    assert "'lots'" in str(info.value)


def test_slo_below_base_latency_is_refused(tiny_data: dict[str, Any]) -> None:
    tiny_data["services"][0]["slo_p99_ms"] = 5
    assert _problem_paths(tiny_data) == ["services[0]"]


def test_overcommit_ratio_only_for_its_policy() -> None:
    data = tiny(policies=[{"name": "vanilla", "cpu_overcommit_ratio": 2}])
    assert _problem_paths(data) == ["policies[0]"]


def test_repeated_policy_is_refused() -> None:
    data = tiny(policies=[{"name": "vanilla"}, {"name": "vanilla"}])
    assert _problem_paths(data) == ["policies"]


def test_invalid_yaml_reports_the_line(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("name: x\nnodes: [\n")
    with pytest.raises(ScenarioError) as info:
        load_scenario(f)
    assert "not valid YAML at line" in str(info.value)


def test_csv_demand_resolves_relative_to_the_file(tmp_path: Path) -> None:
    (tmp_path / "curve.csv").write_text("load\n1\n2\n3\n")
    data = tiny()
    data["services"][0]["demand"] = {
        "kind": "csv",
        "path": "curve.csv",
        "column": "load",
        "mean": 0.2,
    }
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(data))
    sc = load_scenario(f)
    assert sc.services[0].demand.path == tmp_path / "curve.csv"  # type: ignore[union-attr]


def test_bundled_demo_and_examples_are_valid() -> None:
    from pykatalyst.cli.sim import demo_scenario_path

    assert load_scenario(demo_scenario_path()).name == "demo"
    root = Path(__file__).resolve().parents[2] / "examples" / "scenarios"
    files = sorted(root.glob("*.yaml"))
    assert files
    for f in files:
        load_scenario(f)


def _csv_scenario(tmp_path: Path, path: str, column: str = "load") -> Path:
    data = tiny()
    data["services"][0]["demand"] = {"kind": "csv", "path": path, "column": column, "mean": 0.2}
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(data))
    return f


@pytest.mark.parametrize(
    ("path", "column", "field", "message"),
    [
        ("missing.csv", "load", "services[0].demand.path", "No such file or directory"),
        (".", "load", "services[0].demand.path", "is not a regular file"),
        ("curve.csv", "other", "services[0].demand", "no column 'other' (columns: load)"),
        ("bad.csv", "load", "services[0].demand", "column 'load' holds 'x', not a number"),
    ],
)
def test_a_demand_csv_that_cannot_be_read_is_refused_by_its_field(
    tmp_path: Path, path: str, column: str, field: str, message: str
) -> None:
    (tmp_path / "curve.csv").write_text("load\n1\n2\n")
    (tmp_path / "bad.csv").write_text("load\n1\nx\n")
    with pytest.raises(ScenarioError) as info:
        load_scenario(_csv_scenario(tmp_path, path, column))
    [(where, text, _)] = info.value.problems
    assert where == field
    assert message in text


def test_a_scheduler_configuration_that_cannot_be_loaded_is_refused_by_its_field(
    tmp_path: Path,
) -> None:
    data = tiny(policies=[{"name": "vanilla", "scheduler": {"config": "sched.yaml"}}])
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(data))
    with pytest.raises(ScenarioError) as info:
        load_scenario(f)
    [(where, text, _)] = info.value.problems
    assert where == "policies[0].scheduler.config"
    assert "cannot read" in text and "sched.yaml" in text
    (tmp_path / "sched.yaml").write_text("profiles: 7\n")
    with pytest.raises(ScenarioError) as info:
        load_scenario(f)
    assert [p for p, _, _ in info.value.problems] == ["policies[0].scheduler.config"]
