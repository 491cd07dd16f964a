"""pykatalyst's recommender settings: a file of the fields to change, merged over the
defaults; bad values refused naming the field; the settings reach the recommendation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from pykatalyst.cli.main import app
from pykatalyst.recommend import CurrentResources, UsageSeries, get_recommender
from pykatalyst.recommend.settings import (
    PykatalystSettings,
    SettingsError,
    load_settings,
    settings_from,
)

HOUR = 3600.0
NOW = 5_000_000.0


def series(hours: float = 48) -> UsageSeries:
    t = np.arange(NOW - hours * HOUR, NOW, 300.0)
    wave = 1 + 0.2 * np.sin(t / 7000)
    return UsageSeries.of(t, 1.0 * wave, 300e6 * wave)


def test_a_file_changes_only_what_it_names_and_nested_sections_merge(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("cpu:\n  underprovision_weight: 20\nchange_threshold: 0.25\n")
    got = load_settings(path)
    default = PykatalystSettings()
    assert got.cpu.underprovision_weight == 20
    assert got.cpu.percentiles == default.cpu.percentiles  # the rest of the grid kept
    assert got.change_threshold == 0.25
    assert got.memory == default.memory
    assert load_settings(None) == default
    empty = tmp_path / "e.yaml"
    empty.write_text("")
    assert load_settings(empty) == default
    as_json = tmp_path / "s.json"
    as_json.write_text(json.dumps({"cpu": {"underprovision_weight": 20}, "change_threshold": 0.25}))
    assert load_settings(as_json) == got


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"cpu": {"percentiles": [0.9, 1.5]}}, "percentiles[1]"),
        ({"memory": {"half_lives_hours": [0]}}, "half_lives_hours[0]"),
        ({"cpu": {"margins": []}}, "cpu.margins"),
        ({"change_threshold": -0.1}, "change_threshold"),
        ({"bucket_growth": 2}, "bucket_growth"),
        ({"resources": ["cpu", "gpu"]}, "resources"),
        ({"no_such_field": 1}, "no_such_field"),
        ({"cpu": {"no_such": 1}}, "cpu.no_such"),
        ({"min_allowed_cpu": 4, "max_allowed_cpu": 2}, "min_allowed_cpu"),
        ({"min_history_s": 10 * 86400, "history_s": 86400}, "min_history_s"),
        ({"memory": {"first_bucket": 1e12}}, "max_value"),
        ({"schedule_min_samples": 0}, "schedule_min_samples"),
        ({"controlled_values": "LimitsOnly"}, "controlled_values"),
    ],
)
def test_bad_values_are_refused_naming_the_field(data: dict[str, Any], field: str) -> None:
    with pytest.raises(SettingsError, match=r"^recommender settings s\.yaml: ") as info:
        settings_from(data, "recommender settings s.yaml")
    assert field in str(info.value)


def test_a_file_that_is_not_a_mapping_or_not_yaml_or_missing_is_said(tmp_path: Path) -> None:
    listed = tmp_path / "l.yaml"
    listed.write_text("- 1\n- 2\n")
    with pytest.raises(SettingsError, match="expected a mapping"):
        load_settings(listed)
    broken = tmp_path / "b.yaml"
    broken.write_text("cpu: [1, 2\n")
    with pytest.raises(SettingsError, match=str(broken)):
        load_settings(broken)
    with pytest.raises(SettingsError, match="cannot read"):
        load_settings(tmp_path / "missing.yaml")


@settings(max_examples=60, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=4) | st.none())
def test_any_change_threshold_is_accepted_or_refused_by_name(value: Any) -> None:
    try:
        got = settings_from({"change_threshold": value})
    except SettingsError as exc:
        assert "change_threshold" in str(exc)
        return
    assert got.change_threshold >= 0


def test_the_settings_reach_the_recommendation() -> None:
    data = series()
    engine = get_recommender("pykatalyst")
    free = engine.recommend(data, NOW)
    assert free.cpu_request is not None
    current = CurrentResources(cpu_request=free.cpu_request * 1.3)
    # 30 % away: the default 10 % threshold lets the change through; 50 % holds it
    moved = engine.recommend(data, NOW, current=current)
    held = engine.recommend(data, NOW, settings_from({"change_threshold": 0.5}), current=current)
    assert moved.cpu_request == free.cpu_request
    assert held.cpu_request == current.cpu_request
    only = settings_from(
        {"cpu": {"percentiles": [1.0], "margins": [0.5], "half_lives_hours": [24]}}
    )
    peak = engine.recommend(data, NOW, only)
    assert peak.cpu_request is not None and peak.cpu_request > 1.2 * 1.45
    assert peak.terms["cpu"].model == "half-life 24h p100 +50%"


def _usage(tmp_path: Path) -> Path:
    path = tmp_path / "u.csv"
    lines = ["workload,container,timestamp,cpu,memory"]
    data = series()
    for t, c, m in zip(data.timestamps, data.cpu, data.memory, strict=True):
        lines.append(f"web,main,{t:.0f},{c:.4f},{m:.0f}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_katalyst_recommend_takes_a_settings_file_and_refuses_a_bad_one(tmp_path: Path) -> None:
    usage = _usage(tmp_path)
    good = tmp_path / "good.yaml"
    good.write_text("cpu: {percentiles: [1.0], margins: [0.5], half_lives_hours: [24]}\n")
    runner = CliRunner()
    result = runner.invoke(
        app, ["recommend", "--usage", str(usage), "--settings", str(good), "-o", "json"]
    )
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.output)["recommendations"]
    assert row["terms"]["cpu"]["model"] == "half-life 24h p100 +50%"
    bad = tmp_path / "bad.yaml"
    bad.write_text("cpu: {percentiles: [2]}\n")
    result = runner.invoke(app, ["recommend", "--usage", str(usage), "--settings", str(bad)])
    assert result.exit_code == 2
    assert "percentiles[0]" in result.output and str(bad) in result.output
    result = runner.invoke(
        app,
        ["recommend", "--usage", str(usage), "--recommender", "katalyst", "--settings", str(good)],
    )
    assert result.exit_code == 2 and "pykatalyst recommender" in result.output


def test_the_controller_refuses_a_bad_settings_file_naming_the_flag(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("oom_bump_ratio: 0.5\n")
    result = CliRunner().invoke(
        app, ["controller", "--embedded", "--once", "--recommender-settings", str(bad)]
    )
    assert result.exit_code == 2
    assert "--recommender-settings" in result.output and "oom_bump_ratio" in result.output


def test_terms_give_the_winners_cost_and_the_runners_up_cheapest_first() -> None:
    data = series()
    engine = get_recommender("pykatalyst")
    rec = engine.recommend(data, NOW)
    for resource in ("cpu", "memory"):
        terms = rec.terms[resource]
        assert terms.cost is not None
        assert len(terms.runners_up) == PykatalystSettings().terms_runners_up
        costs = [terms.cost, *(r.cost for r in terms.runners_up)]
        assert costs == sorted(costs)
        assert terms.model not in {r.model for r in terms.runners_up}
        wire = terms.to_json()
        assert wire["cost"] == terms.cost
        assert [r["model"] for r in wire["runners_up"]] == [r.model for r in terms.runners_up]
    # a runner-up, made the only candidate, gives the figure the explanation says it would
    first = rec.terms["cpu"].runners_up[0]
    half, pct, margin = first.model.split()[1], first.model.split()[2], first.model.split()[3]
    only = settings_from(
        {
            "cpu": {
                "half_lives_hours": [float(half.rstrip("h"))],
                "percentiles": [float(pct[1:]) / 100],
                "margins": [float(margin.strip("+%")) / 100],
            },
            "terms_runners_up": 0,
        }
    )
    alone = engine.recommend(data, NOW, only)
    assert alone.cpu_request == pytest.approx(max(first.value, only.min_cpu))
    assert alone.terms["cpu"].runners_up == ()
