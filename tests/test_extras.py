"""Optional dependencies: a missing extra is named, with the command to install it."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pykatalyst.cli.main import app
from pykatalyst.cluster.connect import ConnectError, connect
from pykatalyst.extras import MissingExtra, require

ROOT = Path(__file__).resolve().parents[1]


def test_the_base_install_leaves_the_kube_client_and_matplotlib_to_extras() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = " ".join(project["dependencies"])
    assert "kubernetes" not in base and "matplotlib" not in base
    extras = project["optional-dependencies"]
    assert any(d.startswith("kubernetes") for d in extras["kube"])
    assert any(d.startswith("matplotlib") for d in extras["sim"])
    assert any(d.startswith("grpcio") for d in extras["node"])
    assert any(d.startswith("protobuf") for d in extras["node"])
    assert any(d.startswith("croniter") for d in extras["autoscale"])
    assert any(d.startswith("statsmodels") for d in extras["autoscale"])
    assert any(d.startswith("ray") for d in extras["sweep"])
    assert "pykatalyst[kube,sim,node,autoscale,sweep]" in extras["dev"]
    assert "statsmodels" not in base and "croniter" not in base and "ray" not in base
    assert "grpcio" not in base and "protobuf" not in base


def test_a_missing_module_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(MissingExtra, match=r"pip install 'pykatalyst\[sim\]'"):
        require("matplotlib", "sim", "the simulator's charts")


def test_a_real_cluster_without_the_kube_extra_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    monkeypatch.setitem(sys.modules, "kubernetes", None)
    with pytest.raises(ConnectError, match=r"pykatalyst\[kube\]"):
        connect(kubeconfig)
    # the embedded cluster needs no extra
    assert CliRunner().invoke(app, ["controller", "--once", "--embedded"]).exit_code == 0
    result = CliRunner().invoke(app, ["controller", "--once", "--kubeconfig", str(kubeconfig)])
    assert result.exit_code == 2
    assert "pykatalyst[kube]" in result.output


def test_the_simulator_refuses_to_start_without_its_charts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    result = CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "report")])
    assert result.exit_code == 2
    assert "pykatalyst[sim]" in result.output
    assert not (tmp_path / "report").exists()


def test_test_fixtures_are_not_modules_of_the_package() -> None:
    import pkgutil

    import pykatalyst

    modules = [m.name for m in pkgutil.walk_packages(pykatalyst.__path__, "pykatalyst.")]
    assert "pykatalyst.agent.host.linux" in modules
    assert not [m for m in modules if m.rsplit(".", 1)[-1] in ("fake", "testbed")]
    for path in (ROOT / "src").rglob("*.py"):
        assert "from tests" not in path.read_text(), path


def test_the_daemons_do_not_load_the_in_memory_api_server() -> None:
    # A node agent, scheduler, controller or webhook image carries only what it runs: the
    # in-memory API server (its store, strategies, watches and HTTP face) is for tests,
    # the simulator and `katalyst apiserver`.
    import subprocess

    code = (
        "import sys\n"
        "import pykatalyst.runtime.agent, pykatalyst.runtime.scheduler\n"
        "import pykatalyst.runtime.controller, pykatalyst.runtime.webhook\n"
        "server = {'memory', 'store', 'strategy', 'pods', 'watch', 'http', 'discovery',\n"
        "          'tables', 'watchstream', 'responses'}\n"
        "print(sorted(m for m in sys.modules if m.startswith('pykatalyst.sim')\n"
        "             or m in {'pykatalyst.cluster.' + s for s in server}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_without_the_autoscale_extra_crons_and_the_predictor_say_which_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import numpy as np

    from pykatalyst.controllers.cronbounds import Bound, CronMode, TimeBound, cron_replicas
    from pykatalyst.predict.forecast import forecast

    monkeypatch.setitem(sys.modules, "croniter", None)
    monkeypatch.setitem(sys.modules, "statsmodels.tsa.seasonal", None)
    monkeypatch.setitem(sys.modules, "statsmodels.tsa.stattools", None)
    tb = [TimeBound(None, None, (Bound("* * * * *", min_replicas=5),))]
    lo, _, errors = cron_replicas(1, 9, tb, 0.0, CronMode.WINDOW)
    assert lo == 1 and "pykatalyst[autoscale]" in errors[0]
    with pytest.raises(MissingExtra, match=r"pykatalyst\[autoscale\]"):
        forecast(np.sin(np.arange(3 * 1440) * 2 * np.pi / 1440), 60.0, 10)
