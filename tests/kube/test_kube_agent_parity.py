"""`katalyst agent --once --dry-run` plans the same whether its cluster is the embedded one
in-process or the embedded one served over HTTP and reached through `--kubeconfig`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from pykatalyst.api.names import POD
from pykatalyst.apiserver.http import kubeconfig_for
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cli.main import app
from pykatalyst.cluster.clock import RealClock
from pykatalyst.runtime.apiserver import ApiServer

ROOT = Path(__file__).resolve().parents[2]
PODS = ROOT / "examples" / "pods" / "shared-normal.yaml"


def _plan(args: list[str]) -> dict[str, Any]:
    result = CliRunner().invoke(app, args)
    if result.exit_code != 0:
        pytest.skip(f"the agent cannot run on this machine: {result.output.strip()[:200]}")
    plan: dict[str, Any] = _stable(json.loads(result.stdout))
    return plan


def _stable(value: Any) -> Any:
    # the wall clock and the machine's free memory (the memory pressure terms) move between
    # the two runs, and each store draws its own random uids
    if isinstance(value, dict):
        skip = ("time", "uid", "pressure")
        return {k: _stable(v) for k, v in value.items() if k not in skip}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def test_agent_plans_alike_in_process_and_over_http(tmp_path: Path) -> None:
    args = ["agent", "--node", "node-1", "--once", "--dry-run", "-o", "json"]
    args += ["--pods", str(PODS)]
    in_process = _plan([*args, "--embedded"])
    store = MemoryCluster(clock=RealClock())
    with ApiServer(store, bookmark_seconds=0) as server:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(kubeconfig_for(server.url)))
        over_http = _plan([*args, "--kubeconfig", str(kubeconfig)])
    assert over_http == in_process
    # the pods really went through the server
    assert [p["spec"]["nodeName"] for p in store.list(POD).items] == ["node-1"]
