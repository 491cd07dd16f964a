"""`katalyst agent` on a fake node tree."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from pykatalyst.api import names
from pykatalyst.cli.main import app
from pykatalyst.cluster.protocol import ApiError
from pykatalyst.runtime.agent import AGENT_PORT
from tests.fixtures.fake_node import make_kubelet_tree

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
            "--embedded",
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
    # The start notes say whether this agent reclaims (no config: Katalyst's default, off).
    assert plan["notes"][0].startswith("reclaim off")  # type: ignore[index]
    assert plan["dry_run"] is True
    assert plan["topology"]["cpus"] == 16  # type: ignore[index]


def test_invalid_config_is_refused_at_start(tmp_path: Path) -> None:
    make_kubelet_tree(tmp_path, version=2)
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("advisor:\n  max_ramp_up_step: -3\n")
    result = CliRunner().invoke(
        app,
        [
            "agent",
            "--embedded",
            "--node",
            "n1",
            "--once",
            "--config",
            str(cfg),
            "--host-root",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 2
    assert "advisor.max_ramp_up_step" in result.output


def test_summary_output_names_the_pools(tmp_path: Path) -> None:
    make_kubelet_tree(tmp_path, version=2, driver="systemd")
    result = CliRunner().invoke(
        app,
        [
            "agent",
            "--embedded",
            "--node",
            "n1",
            "--dry-run",
            "--once",
            "--host-root",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    # no shared pod on the node: Katalyst's reserve and reclaim pools only
    assert "reclaim=" in result.stdout and "share=" not in result.stdout


def _run_once(tmp_path: Path, *extra: str) -> tuple[int, str]:
    make_kubelet_tree(tmp_path, version=1)
    args = ["agent", "--node", "n1", "--dry-run", "--once", "-o", "json"]
    result = CliRunner().invoke(app, [*args, "--host-root", str(tmp_path), *extra])
    return result.exit_code, result.output


def test_eviction_section_of_the_config_file_reaches_the_eviction_stage(tmp_path: Path) -> None:
    code, out = _run_once(tmp_path / "on", "--embedded")
    assert code == 0, out
    kinds = [a["kind"] for a in _json(out)["eviction_actions"]]  # type: ignore[attr-defined]
    assert "eviction-plan" in kinds
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("eviction:\n  enabled: false\n")
    code, out = _run_once(tmp_path / "off", "--embedded", "--config", str(cfg))
    assert code == 0, out
    assert _json(out)["eviction_actions"] == []


def test_invalid_eviction_config_is_refused_at_start_naming_the_field(tmp_path: Path) -> None:
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("eviction:\n  reclaimed_resource:\n    eviction_threshold: {cpu: 2}\n")
    code, out = _run_once(tmp_path / "root", "--embedded", "--config", str(cfg))
    assert code == 2
    assert "eviction.reclaimed_resource.eviction_threshold" in out
    assert "'cpu'" in out


def test_in_cluster_outside_a_pod_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code, out = _run_once(tmp_path, "--in-cluster")
    assert code == 2
    assert "--in-cluster" in out and "KUBERNETES_SERVICE_HOST" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--in-cluster", "--context", "prod"], "--context needs a kubeconfig"),
        (["--embedded", "--kubeconfig", "k"], "--embedded excludes --kubeconfig"),
        (["--kubeconfig", "KUBECONFIG", "--in-cluster"], "exclude each other"),
        (["--kubeconfig", "missing.yaml"], "no such file"),
    ],
)
def test_cluster_options_are_checked_before_the_agent_runs(
    tmp_path: Path, args: list[str], message: str
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    args = [str(kubeconfig) if a == "KUBECONFIG" else a for a in args]
    args = [str(tmp_path / a) if a == "missing.yaml" else a for a in args]
    code, out = _run_once(tmp_path / "root", *args)
    assert code == 2
    assert message in out


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--embedded"], "--embedded without --dry-run"),
        (["--embedded", "--pods", str(PODS)], "--embedded without --dry-run"),
    ],
)
def test_an_agent_that_would_enforce_on_this_host_from_an_embedded_view_refuses(
    args: list[str], reason: str
) -> None:
    # no --host-root and no --dry-run: it would write this machine's own cgroups
    result = CliRunner().invoke(app, ["agent", "--node", "n1", "--once", *args])
    assert result.exit_code == 2
    first, *rest = result.output.splitlines()
    assert first.startswith("katalyst agent: cluster: the embedded in-memory cluster")
    assert any(reason in line and "knows none of the pods" in line for line in rest)


def test_without_a_cluster_the_agent_says_how_to_name_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    code, out = _run_once(tmp_path / "root")
    assert code == 2
    assert "no cluster found" in out and "--embedded" in out


def test_a_node_the_kubelet_did_not_register_is_refused_not_created() -> None:
    from pykatalyst.apiserver.memory import MemoryCluster
    from pykatalyst.cli.agent import ensure_node
    from pykatalyst.cluster.clock import VirtualClock
    from pykatalyst.topology.machine import CPUTopology

    cluster = MemoryCluster(clock=VirtualClock())
    topo = CPUTopology.synthetic(sockets=1, cores_per_socket=2, threads_per_core=1)
    with pytest.raises(ValueError, match="'n9' is not in the cluster"):
        ensure_node(cluster, "n9", topo, create=False)
    assert cluster.list(names.NODE).items == []
    ensure_node(cluster, "n9", topo, create=True)
    assert [n["metadata"]["name"] for n in cluster.list(names.NODE).items] == ["n9"]


class _AwayThenBack:
    """A cluster whose API server answers `failures` errors, then is a MemoryCluster."""

    def __init__(self, inner: Any, failures: list[ApiError]) -> None:
        self.inner, self.failures = inner, list(failures)

    def get(self, *args: Any, **kw: Any) -> Any:
        if self.failures:
            raise self.failures.pop(0)
        return self.inner.get(*args, **kw)

    def create(self, *args: Any, **kw: Any) -> Any:
        return self.inner.create(*args, **kw)


def test_an_agent_started_before_its_api_server_waits_for_it_backing_off() -> None:
    from pykatalyst.apiserver.memory import MemoryCluster
    from pykatalyst.cli.agent import ensure_node
    from pykatalyst.cluster.clock import VirtualClock
    from pykatalyst.topology.machine import CPUTopology

    topo = CPUTopology.synthetic(sockets=1, cores_per_socket=2, threads_per_core=1)
    inner = MemoryCluster(clock=VirtualClock())
    inner.create(names.NODE, {"metadata": {"name": "n1"}})
    away = [ApiError("no answer", "ServiceUnavailable", 503)] * 7
    away.insert(2, ApiError("slow", "Timeout", 504))
    slept: list[float] = []
    said: list[str] = []
    ensure_node(_AwayThenBack(inner, away), "n1", topo, False, slept.append, said.append)
    assert slept == [1, 2, 4, 8, 16, 30, 30, 30]
    assert len(said) == 8 and "asking again in 1s" in said[0]
    # without a sleep (--once) the first failure is final
    with pytest.raises(ApiError):
        ensure_node(_AwayThenBack(inner, away[:1]), "n1", topo, False)


def test_an_api_server_that_refuses_the_agent_is_not_waited_for() -> None:
    from pykatalyst.apiserver.memory import MemoryCluster
    from pykatalyst.cli.agent import ensure_node
    from pykatalyst.cluster.clock import VirtualClock
    from pykatalyst.cluster.protocol import Forbidden
    from pykatalyst.topology.machine import CPUTopology

    topo = CPUTopology.synthetic(sockets=1, cores_per_socket=2, threads_per_core=1)
    cluster = _AwayThenBack(MemoryCluster(clock=VirtualClock()), [Forbidden("nodes is forbidden")])
    slept: list[float] = []
    with pytest.raises(Forbidden):
        ensure_node(cluster, "n1", topo, False, slept.append)
    assert slept == []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> tuple[int, str] | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return None


def test_running_agent_serves_health_and_metrics_and_stops_on_sigterm(tmp_path: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    make_kubelet_tree(tmp_path, version=2)
    port = _free_port()
    cmd = [sys.executable, "-c", "from pykatalyst.cli.main import app; app()", "agent"]
    args = ["--embedded", "--node", "n1", "--dry-run", "--pods", str(PODS)]
    args += ["--host-root", str(tmp_path)]
    proc = subprocess.Popen(
        [*cmd, *args, "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        ready = None
        while time.monotonic() < deadline and proc.poll() is None:
            ready = _get(base + "/readyz")
            if ready is not None and ready[0] == 200:
                break
            time.sleep(0.2)
        assert ready == (200, "ok"), ready
        assert _get(base + "/healthz") == (200, "ok")
        metrics = _get(base + "/metrics")
        assert metrics is not None and metrics[0] == 200
        families = {f.name: f for f in text_string_to_metric_families(metrics[1])}
        ticks = families["katalyst_agent_ticks"].samples
        assert any(s.name == "katalyst_agent_ticks_total" and s.value >= 1 for s in ticks)
        proc.send_signal(signal.SIGTERM)
        began = time.monotonic()
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, out
        assert time.monotonic() - began < 10, "SIGTERM took too long"
        assert "share=" in out  # it reconciled and printed its plan before
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_the_agent_port_is_katalysts() -> None:
    assert AGENT_PORT == 9316
    result = CliRunner().invoke(app, ["agent", "--help"])
    assert "9316" in result.output
