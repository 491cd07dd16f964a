"""`katalyst sim` and `katalyst demo` as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import yaml
from typer.testing import CliRunner

from pykatalyst.cli.main import app
from tests.sim.conftest import KATALYST, tiny

runner = CliRunner()


def test_sim_refuses_an_invalid_scenario_naming_the_field(tmp_path: Path) -> None:
    data = tiny()
    data["nodes"][0]["count"] = 0
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(data))
    result = runner.invoke(app, ["sim", str(f), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "nodes[0].count" in result.output
    assert not (tmp_path / "out").exists()


def test_sim_refuses_a_scenario_whose_files_cannot_be_read_before_running(
    tmp_path: Path,
) -> None:
    data = tiny(policies=[{"name": "vanilla", "scheduler": {"config": "gone.yaml"}}])
    data["services"][0]["demand"] = {"kind": "csv", "path": "gone.csv", "column": "c", "mean": 1}
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(data))
    result = runner.invoke(app, ["sim", str(f), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "services[0].demand.path: cannot read" in result.output
    assert "policies[0].scheduler.config:" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_sim_writes_the_report_with_the_seed_given(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(tiny(duration="30m", policies=[{"name": "vanilla"}])))
    out = tmp_path / "out"
    result = runner.invoke(app, ["sim", str(f), "--out", str(out), "--seed", "9", "--quiet"])
    assert result.exit_code == 0, result.output
    data = json.loads((out / "report.json").read_text())
    assert data["seed"] == 9
    assert set(data["policies"]) == {"vanilla"}
    assert (out / "report.md").is_file()


def test_demo_is_offered() -> None:
    result = runner.invoke(app, ["demo", "--help"])
    assert result.exit_code == 0
    assert "--out" in result.output


def test_a_katalyst_policy_with_reclaim_off_is_warned_about(tmp_path: Path) -> None:
    """Katalyst's default (reclaim off) runs no batch at all: the user is told before the
    run, and the report says it too."""
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(tiny(duration="30m", policies=[{"name": "katalyst"}])))
    out = tmp_path / "out"
    result = runner.invoke(app, ["sim", str(f), "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    assert "warning: policy katalyst" in result.output
    assert "policies[0].agent.config.advisor.enable_reclaim: true" in result.output
    data = json.loads((out / "report.json").read_text())
    assert len(data["warnings"]) == 1 and "every batch task" in data["warnings"][0]
    assert data["policies"]["katalyst"]["batch_tasks_completed"] == 0
    assert "## Warnings" in (out / "report.md").read_text()


def test_a_katalyst_policy_with_reclaim_on_gets_no_warning(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(tiny(duration="30m", policies=[KATALYST])))
    out = tmp_path / "out"
    result = runner.invoke(app, ["sim", str(f), "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    assert "warning:" not in result.output
    assert json.loads((out / "report.json").read_text())["warnings"] == []


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_the_policies_processes_end_when_the_sim_is_killed(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(tiny(duration="240h")))
    katalyst = str(Path(sys.executable).parent / "katalyst")
    cmd = [katalyst, "sim", str(f), "--out", str(tmp_path / "o")]
    proc = subprocess.Popen([*cmd, "-q", "--workers", "2"], start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        workers: list[int] = []
        while len(workers) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            # the pool's two workers (a resource tracker may run beside them)
            workers = [c for c in _children(proc.pid) if b"spawn_main" in _cmdline(c)]
        assert len(workers) == 2, "the policies did not start in two processes"
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 30
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(w) for w in workers), "a policy's process outlived the sim"
    finally:
        if proc.poll() is None:
            proc.kill()


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
