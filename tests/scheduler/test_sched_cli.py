"""`katalyst scheduler` on the command line: --print-config, refusal of bad files, a short run."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from pykatalyst.cli.main import app

runner = CliRunner()

GOOD = """\
apiVersion: kubescheduler.config.k8s.io/v1beta3
kind: KubeSchedulerConfiguration
profiles:
  - schedulerName: katalyst-scheduler
    plugins:
      score:
        enabled: [{name: QoSAwareNodeResourcesFit, weight: 15}]
"""


def test_print_config_prints_resolved_profiles(tmp_path: Path) -> None:
    f = tmp_path / "sched.yaml"
    f.write_text(GOOD)
    result = runner.invoke(app, ["scheduler", "--config", str(f), "--print-config"])
    assert result.exit_code == 0, result.output
    printed = yaml.safe_load(result.stdout)
    (prof,) = printed["profiles"]
    assert prof["schedulerName"] == "katalyst-scheduler"
    assert {"name": "QoSAwareNodeResourcesFit", "weight": 15} in prof["plugins"]["score"]
    assert any(c["name"] == "QoSAwareNodeResourcesFit" for c in prof["pluginConfig"])


def test_invalid_file_exits_non_zero_naming_the_plugin(tmp_path: Path) -> None:
    f = tmp_path / "sched.yaml"
    f.write_text(GOOD.replace("QoSAwareNodeResourcesFit", "QoSAwareNodeResourcesFitt"))
    result = runner.invoke(app, ["scheduler", "--config", str(f), "--print-config"])
    assert result.exit_code == 1
    assert "unknown plugin 'QoSAwareNodeResourcesFitt'" in result.stderr


def test_missing_file_is_reported(tmp_path: Path) -> None:
    result = runner.invoke(app, ["scheduler", "--config", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 1
    assert "cannot read" in result.stderr


def test_a_short_run_against_the_embedded_cluster() -> None:
    result = runner.invoke(app, ["scheduler", "--max-seconds", "0.2", "--interval", "0.05"])
    assert result.exit_code == 0, result.output
    assert "embedded in-memory cluster" in result.stderr
    assert "scheduling pods of default-scheduler" in result.stdout


def test_bundled_example_config_loads() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "scheduler"
    for f in sorted(example.glob("*.yaml")):
        result = runner.invoke(app, ["scheduler", "--config", str(f), "--print-config"])
        assert result.exit_code == 0, (f, result.output)


def test_extender_mode_serves_until_stopped() -> None:
    result = runner.invoke(
        app,
        ["scheduler", "--extender", "--listen", "127.0.0.1:0", "--max-seconds", "0.2"],
    )
    assert result.exit_code == 0, result.output
    assert "extender listening on http://127.0.0.1:0" in result.stdout


def test_bad_listen_address() -> None:
    result = runner.invoke(app, ["scheduler", "--extender", "--listen", "nowhere"])
    assert result.exit_code == 2
    assert "expected HOST:PORT" in result.stderr
