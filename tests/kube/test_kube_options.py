"""The shared --kubeconfig / --in-cluster / --context / --embedded options, as a command sees
them, and the order in which the cluster is found when none is named."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from pykatalyst.api.names import NODE
from pykatalyst.apiserver.http import kubeconfig_for
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cli.kubeopts import (
    CONTEXT_OPTION,
    EMBEDDED_OPTION,
    IN_CLUSTER_OPTION,
    KUBECONFIG_OPTION,
    ContextArg,
    EmbeddedArg,
    InClusterArg,
    KubeconfigArg,
    cluster_from_options,
    daemon_cluster,
)
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.connect import ConnectError, find_cluster
from pykatalyst.runtime.apiserver import ApiServer

app = typer.Typer()


@app.command("annotated")
def annotated(
    kubeconfig: KubeconfigArg = None, in_cluster: InClusterArg = False, context: ContextArg = None
) -> None:
    print(type(cluster_from_options(kubeconfig, in_cluster, context)).__name__)


@app.command("defaults")
def defaults(
    kubeconfig: Path | None = KUBECONFIG_OPTION,
    in_cluster: bool = IN_CLUSTER_OPTION,
    context: str | None = CONTEXT_OPTION,
) -> None:
    print(type(cluster_from_options(kubeconfig, in_cluster, context)).__name__)


@app.command("daemon")
def daemon(
    kubeconfig: KubeconfigArg = None,
    in_cluster: InClusterArg = False,
    context: ContextArg = None,
    embedded: EmbeddedArg = False,
) -> None:
    cluster, _ = daemon_cluster("daemon", kubeconfig, in_cluster, context, embedded, stderr=False)
    print(type(cluster).__name__)


@app.command("daemon-defaults")
def daemon_defaults(
    kubeconfig: Path | None = KUBECONFIG_OPTION,
    in_cluster: bool = IN_CLUSTER_OPTION,
    context: str | None = CONTEXT_OPTION,
    embedded: bool = EMBEDDED_OPTION,
) -> None:
    cluster, _ = daemon_cluster("daemon", kubeconfig, in_cluster, context, embedded, stderr=False)
    print(type(cluster).__name__)


@pytest.fixture
def no_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No $KUBECONFIG, not in a pod, and a home without ~/.kube/config."""
    for var in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def test_the_embedded_cluster_only_by_name_and_announced_first(no_cluster: Path) -> None:
    for command in ("daemon", "daemon-defaults"):
        result = CliRunner().invoke(app, [command, "--embedded"])
        assert result.exit_code == 0, result.output
        first, second = result.stdout.splitlines()
        assert first.startswith("katalyst daemon: cluster: the embedded in-memory cluster")
        assert second == "MemoryCluster"
        nothing = CliRunner().invoke(app, [command])
        assert nothing.exit_code == 2
        assert "no cluster found" in nothing.output and "--embedded" in nothing.output
    for command in ("annotated", "defaults"):
        result = CliRunner().invoke(app, [command])
        assert result.exit_code == 2 and "no cluster found" in result.output


def test_the_embedded_cluster_runs_on_the_command_s_clock(no_cluster: Path) -> None:
    clock = VirtualClock(5.0)
    cluster, source = daemon_cluster("daemon", None, False, None, True, clock, stderr=False)
    assert source.embedded and isinstance(cluster, MemoryCluster) and cluster.clock is clock
    created = cluster.create(NODE, {"metadata": {"name": "n1"}})
    assert created["metadata"]["creationTimestamp"] == "1970-01-01T00:00:05Z"


def test_embedded_excludes_the_other_ways(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["daemon", "--embedded", "--in-cluster"])
    assert result.exit_code == 2 and "--embedded excludes --in-cluster" in result.output


def _kubeconfig(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("apiVersion: v1\nkind: Config\n")
    return path


def test_the_cluster_is_found_in_kubectl_s_order(tmp_path: Path) -> None:
    home = tmp_path / "home"
    flag, env_file, home_file = (
        _kubeconfig(tmp_path / "flag"),
        _kubeconfig(tmp_path / "env"),
        _kubeconfig(home / ".kube" / "config"),
    )
    pod = {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}
    env = {"KUBECONFIG": f"{tmp_path / 'absent'}:{env_file}", **pod}
    found = find_cluster(flag, env=env, home=home)
    assert (found.kind, found.path, found.origin) == ("kubeconfig", flag, "--kubeconfig")
    found = find_cluster(env=env, home=home)
    assert (found.path, found.origin) == (env_file, "$KUBECONFIG")
    found = find_cluster(env=pod, home=home)
    assert found.kind == "in-cluster"
    found = find_cluster(env={}, home=home, context="prod")
    assert (found.path, found.origin, found.context) == (home_file, "~/.kube/config", "prod")
    assert "context prod" in found.describe()
    with pytest.raises(ConnectError, match="no cluster found"):
        find_cluster(env={}, home=tmp_path / "nobody")
    with pytest.raises(ConnectError, match=r"\$KUBECONFIG=.*no such file"):
        find_cluster(env={"KUBECONFIG": str(tmp_path / "absent")}, home=home)


def test_a_kubeconfig_reaches_its_server(tmp_path: Path) -> None:
    with ApiServer(MemoryCluster(), bookmark_seconds=0) as server:
        path = tmp_path / "kubeconfig"
        path.write_text(yaml.safe_dump(kubeconfig_for(server.url)))
        for command in ("annotated", "defaults"):
            result = CliRunner().invoke(app, [command, "--kubeconfig", str(path)])
            assert result.exit_code == 0 and result.stdout.strip() == "KubeCluster"


def test_bad_combinations_exit_2_with_a_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = CliRunner()
    both = runner.invoke(app, ["defaults", "--kubeconfig", str(tmp_path), "--in-cluster"])
    assert both.exit_code == 2 and "exclude each other" in both.output
    missing = runner.invoke(app, ["annotated", "--kubeconfig", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "no such file" in missing.output
    pod_context = runner.invoke(app, ["annotated", "--in-cluster", "--context", "prod"])
    assert pod_context.exit_code == 2 and "--context needs a kubeconfig" in pod_context.output
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    outside = runner.invoke(app, ["defaults", "--in-cluster"])
    assert outside.exit_code == 2 and "not running in a Kubernetes pod" in outside.output
