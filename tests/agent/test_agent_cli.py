"""`katalyst agent` on a fake node tree."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from pykatalyst.agent.host.fake import make_kubelet_tree
from pykatalyst.api import names
from pykatalyst.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
PODS = ROOT / "examples" / "agent" / "pods.yaml"


def _json(text: str) -> dict[str, object]:
    start = text.index("{")
    data = json.loads(text[start:])
    assert isinstance(data, dict)
    return data


def test_dry_run_once_prints_the_plan_for_declared_pods(tmp_path: Path) -> None:
    make_kubelet_tree(tmp_path, version=1)
    result = CliRunner().invoke(
        app,
        [
            "agent",
            "--node",
            "n1",
            "--dry-run",
            "--once",
            "--pods",
            str(PODS),
            "--output",
            "json",
            "--host-root",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    plan = _json(result.stdout)
    pools = {p["name"]: p for p in plan["pools"]}  # type: ignore[attr-defined]
    assert {names.POOL_SHARE, names.POOL_RECLAIM} <= set(pools)
    pods = {p["pod"]: p for p in plan["pods"]}  # type: ignore[attr-defined]
    assert pods["default/web"]["pool"] == names.POOL_SHARE
    assert pods["default/batch"]["pool"] == names.POOL_RECLAIM
    assert pods["default/db"]["pool"] == names.POOL_DEDICATED
    assert pods["default/web"]["cgroup"] is None
    assert any("no cgroups" in n for n in plan["notes"])  # type: ignore[attr-defined]
    assert plan["dry_run"] is True
    assert plan["topology"]["cpus"] == 16  # type: ignore[index]


def test_invalid_config_is_refused_at_start(tmp_path: Path) -> None:
    make_kubelet_tree(tmp_path, version=2)
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("advisor:\n  max_ramp_up_step: -3\n")
    result = CliRunner().invoke(
        app,
        ["agent", "--node", "n1", "--once", "--config", str(cfg), "--host-root", str(tmp_path)],
    )
    assert result.exit_code == 2
    assert "advisor.max_ramp_up_step" in result.output


def test_summary_output_names_the_pools(tmp_path: Path) -> None:
    make_kubelet_tree(tmp_path, version=2, driver="systemd")
    result = CliRunner().invoke(
        app, ["agent", "--node", "n1", "--dry-run", "--once", "--host-root", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    assert "share=" in result.stdout and "reclaim=" in result.stdout
