"""The shared --kubeconfig / --in-cluster / --context options, as a command sees them."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from pykatalyst.cli.kubeopts import (
    CONTEXT_OPTION,
    IN_CLUSTER_OPTION,
    KUBECONFIG_OPTION,
    ContextArg,
    InClusterArg,
    KubeconfigArg,
    cluster_from_options,
)
from pykatalyst.cluster.http import kubeconfig_for
from pykatalyst.cluster.memory import MemoryCluster
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


def test_no_option_is_the_embedded_cluster() -> None:
    for command in ("annotated", "defaults"):
        result = CliRunner().invoke(app, [command])
        assert result.exit_code == 0 and result.stdout.strip() == "MemoryCluster"


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
    lone_context = runner.invoke(app, ["annotated", "--context", "prod"])
    assert lone_context.exit_code == 2 and "--context needs --kubeconfig" in lone_context.output
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    outside = runner.invoke(app, ["defaults", "--in-cluster"])
    assert outside.exit_code == 2 and "not running in a Kubernetes pod" in outside.output
