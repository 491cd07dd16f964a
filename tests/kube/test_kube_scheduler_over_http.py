"""`katalyst scheduler --kubeconfig` against the embedded server over HTTP: it sees the
pending pod through list+watch and binds it through pods/binding, as on a real cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from pykatalyst.api.names import EVENT, NODE, POD
from pykatalyst.apiserver.http import kubeconfig_for
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cli.main import app
from pykatalyst.cluster.clock import RealClock
from pykatalyst.runtime.apiserver import ApiServer

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "scheduler" / "katalyst-scheduler-numa.yaml"
POD_FILE = ROOT / "examples" / "pods" / "shared-normal.yaml"


@pytest.mark.skipif(
    not (CONFIG.is_file() and POD_FILE.is_file()), reason="the example files are not present"
)
def test_scheduler_binds_a_pod_over_http(tmp_path: Path) -> None:
    store = MemoryCluster(clock=RealClock())
    capacity = {"cpu": "16", "memory": "64Gi", "pods": "110"}
    store.create(
        NODE,
        {
            "metadata": {"name": "n1"},
            "status": {
                "capacity": capacity,
                "allocatable": capacity,
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )
    pod = yaml.safe_load(POD_FILE.read_text())
    store.create(POD, pod)
    with ApiServer(store, bookmark_seconds=0) as server:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(kubeconfig_for(server.url)))
        args = ["scheduler", "--config", str(CONFIG), "--kubeconfig", str(kubeconfig)]
        result = CliRunner().invoke(app, [*args, "--stop-after", "2.5s"])
    assert result.exit_code == 0, result.output
    name, namespace = pod["metadata"]["name"], pod["metadata"].get("namespace", "default")
    assert store.get(POD, name, namespace)["spec"]["nodeName"] == "n1"
    reasons = [e.get("reason") for e in store.list(EVENT, namespace).items]
    assert "Scheduled" in reasons
