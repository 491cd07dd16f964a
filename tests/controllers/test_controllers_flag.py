"""`--controllers`: Katalyst's syntax for switching controllers, and the runner that runs them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cli.main import app
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.controllers import BackstopConfig
from pykatalyst.runtime.controller import (
    CONTROLLERS,
    ControllerRunner,
    ControllersError,
    parse_controllers,
)


def test_star_is_every_controller_and_minus_removes_one() -> None:
    assert parse_controllers("*") == CONTROLLERS
    assert parse_controllers("*,-backstop") == (
        "lifecycle",
        "overcommit",
        "kcc",
        "spd",
        "resourcerecommender",
        "vpa",
        "ihpa",
    )
    assert parse_controllers("kcc,overcommit") == ("overcommit", "kcc")
    assert parse_controllers("-kcc,kcc") == ("kcc",)
    assert parse_controllers("kcc,-kcc") == ()


def test_an_unknown_name_is_refused_naming_it_and_the_accepted_ones() -> None:
    with pytest.raises(ControllersError) as err:
        parse_controllers("*,tide,-tmo")
    text = str(err.value)
    assert "'tide'" in text and "'-tmo'" in text
    for name in CONTROLLERS:
        assert name in text


@given(st.lists(st.sampled_from(["*", *CONTROLLERS, *(f"-{c}" for c in CONTROLLERS)]), min_size=1))
def test_the_last_word_on_each_controller_decides(items: list[str]) -> None:
    on = parse_controllers(",".join(items))
    for name in CONTROLLERS:
        last = max((i for i, it in enumerate(items) if it in (name, f"-{name}", "*")), default=None)
        expected = last is not None and items[last] != f"-{name}"
        assert (name in on) == expected


def test_the_command_refuses_a_bad_controllers_value_and_changes_nothing() -> None:
    result = CliRunner().invoke(app, ["controller", "--once", "--controllers", "*,tide"])
    assert result.exit_code == 2
    assert "--controllers" in result.output and "tide" in result.output


def test_once_runs_only_the_chosen_controllers() -> None:
    result = CliRunner().invoke(
        app, ["controller", "--embedded", "--once", "--controllers", "overcommit,kcc,lifecycle"]
    )
    assert result.exit_code == 0, result.output
    assert "overcommit: 0 nodes" in result.output and "lifecycle: 0 nodes" in result.output
    assert "backstop:" not in result.output


def test_the_runner_counts_reconciles_per_controller() -> None:
    clock = VirtualClock(1000)
    cluster = MemoryCluster(clock=clock)
    cluster.create(names.NODE, {"metadata": {"name": "n1"}})
    runner = ControllerRunner(
        cluster, BackstopConfig(), period_s=10, controllers=("lifecycle", "overcommit")
    )
    for _ in range(3):
        report = runner.step(clock.now())
        assert report.error is None
        clock.advance(10)
    assert set(report.outcomes) == {"lifecycle", "overcommit"}
    assert cluster.get(names.CUSTOM_NODE_CONFIG, "n1")
    sample = runner.registry.get_sample_value
    for name in ("lifecycle", "overcommit"):
        assert (
            sample("katalyst_controller_reconciles_total", {"controller": name, "result": "ok"})
            == 3
        )
        assert (
            sample("katalyst_controller_reconcile_timestamp_seconds", {"controller": name}) == 1020
        )
    assert (
        sample("katalyst_controller_reconciles_total", {"controller": "kcc", "result": "ok"})
        is None
    )


def test_dry_run_decides_without_writing() -> None:
    cluster = MemoryCluster(clock=VirtualClock(1000))
    cluster.create(names.NODE, {"metadata": {"name": "n1"}})
    runner = ControllerRunner(
        cluster, BackstopConfig(dry_run=True), period_s=10, controllers=("lifecycle",)
    )
    report = runner.step(1000)
    plan, _ = report.outcomes["lifecycle"]
    assert len(plan.actions) == 2
    assert cluster.list(names.CUSTOM_NODE_CONFIG).items == []
