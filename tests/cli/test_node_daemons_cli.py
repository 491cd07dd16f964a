"""`katalyst device-plugin` and `katalyst metrics` from the command line: the cluster each
says it talks to, `device-plugin --once`, and what they say when there is no cluster."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from pykatalyst.api import names
from pykatalyst.cli.main import app

needs_grpc = pytest.mark.skipif(
    importlib.util.find_spec("grpc") is None, reason="grpcio is not installed (pykatalyst[node])"
)
needs_kube = pytest.mark.skipif(
    importlib.util.find_spec("kubernetes") is None,
    reason="the kubernetes client is not installed (pykatalyst[kube])",
)

SHARES = 3


def _kubeconfig(tmp_path: Path) -> Path:
    """A kubeconfig of a cluster nobody answers at: the commands must say which cluster
    they talk to before they talk to it."""
    path = tmp_path / "kubeconfig"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
        "users": [{"name": "u", "user": {"token": "t"}}],
    }
    path.write_text(yaml.safe_dump(config))
    return path


def _agent_config(tmp_path: Path) -> Path:
    cards = [
        {"id": "GPU-a", "numa": 0, "model": "Synthetic-16GB", "memory_mib": 16384},
        {"id": "GPU-b", "numa": 1, "model": "Synthetic-16GB", "healthy": False},
    ]
    plugin = {"socket_dir": str(tmp_path / "device-plugins"), "shares_per_gpu": SHARES}
    path = tmp_path / "agent.yaml"
    path.write_text(
        yaml.safe_dump({"devices": {"source": "synthetic", "gpus": cards, "device_plugin": plugin}})
    )
    (tmp_path / "device-plugins").mkdir()
    return path


def _plugin_once(tmp_path: Path) -> tuple[int, str, str]:
    args = ["device-plugin", "--node", "n1", "--config", str(_agent_config(tmp_path)), "--once"]
    result = CliRunner().invoke(app, [*args, "--kubeconfig", str(_kubeconfig(tmp_path))])
    return result.exit_code, result.stdout, result.stderr


@needs_grpc
@needs_kube
def test_device_plugin_once_shows_what_it_would_advertise_and_registers_nothing(
    tmp_path: Path,
) -> None:
    code, out, err = _plugin_once(tmp_path)
    assert code == 0, out + err
    assert err.splitlines()[0] == (
        f"katalyst device-plugin: cluster: the cluster of {tmp_path / 'kubeconfig'} (--kubeconfig)"
    )
    rows = {line.split()[1]: line for line in out.splitlines() if "GPU-" in line}
    assert set(rows) == {"GPU-a", "GPU-b"}
    assert "yes" in rows["GPU-a"] and "16384 MiB" in rows["GPU-a"]
    assert "no" in rows["GPU-b"].split()
    # each card is advertised SHARES times; the sick card's ids are advertised unhealthy
    assert f"{names.RESOURCE_NVIDIA_GPU}: {2 * SHARES} ids ({SHARES} healthy)" in out
    assert f"{names.RESOURCE_GPU_MEMORY}: 200 ids (100 healthy)" in out
    sockets = tmp_path / "device-plugins"
    assert f"no {sockets / 'kubelet.sock'}: serving would wait for the kubelet" in out
    assert "--once registered and served nothing" in out
    assert list(sockets.iterdir()) == []  # no socket of its own, no registration


@needs_grpc
@needs_kube
def test_device_plugin_once_says_whether_the_kubelet_is_there(tmp_path: Path) -> None:
    config = _agent_config(tmp_path)
    kubelet = tmp_path / "device-plugins" / "kubelet.sock"
    kubelet.touch()
    args = ["device-plugin", "--config", str(config), "--once"]
    result = CliRunner().invoke(app, [*args, "--kubeconfig", str(_kubeconfig(tmp_path))])
    assert result.exit_code == 0, result.output
    assert f"the kubelet's {kubelet} is there: serving would register with it" in result.stdout
    assert [p.name for p in kubelet.parent.iterdir()] == ["kubelet.sock"]


@needs_kube
def test_metrics_says_which_cluster_it_serves_and_when_that_cluster_does_not_answer(
    tmp_path: Path,
) -> None:
    # it reads the request-header CA from the cluster first: nobody answers there
    result = CliRunner().invoke(
        app, ["metrics", "--kubeconfig", str(_kubeconfig(tmp_path)), "--listen", "127.0.0.1:0"]
    )
    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == (
        f"katalyst metrics: cluster: the cluster of {tmp_path / 'kubeconfig'} (--kubeconfig)"
    )
    assert "error: cannot read kube-system/extension-apiserver-authentication" in result.stderr
    assert "--requestheader-client-ca-file" in result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["metrics", "--insecure-no-auth"], id="metrics"),
        pytest.param(
            ["device-plugin", "--config", "CONFIG", "--once"], marks=needs_grpc, id="device-plugin"
        ),
    ],
)
def test_without_a_cluster_they_say_how_to_name_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    for var in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    args = [str(_agent_config(tmp_path)) if a == "CONFIG" else a for a in args]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert "no cluster found" in result.output and "--kubeconfig PATH" in result.output
    # neither takes --embedded: the message does not offer it
    assert "--embedded" not in result.output


@needs_grpc
@needs_kube
def test_device_plugin_once_lists_synthetic_vfs_and_this_machines_none(tmp_path: Path) -> None:
    (tmp_path / "device-plugins").mkdir()
    plugin = {"socket_dir": str(tmp_path / "device-plugins")}
    nic = {
        "source": "synthetic",
        "interfaces": [{"name": "eth0", "speed_mbps": 100000, "vfs": 3, "vf_queue_counts": [8]}],
    }
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump({"devices": {"nic": nic, "device_plugin": plugin}}))
    kube = ["--kubeconfig", str(_kubeconfig(tmp_path))]
    result = CliRunner().invoke(app, ["device-plugin", "--config", str(path), "--once", *kube])
    assert result.exit_code == 0, result.output
    assert [line.split()[1] for line in result.stdout.splitlines() if "eth0_" in line] == [
        "eth0_0",
        "eth0_1",
        "eth0_2",
    ]
    assert f"{names.RESOURCE_SRIOV_NIC}: 3 ids (3 healthy)" in result.stdout
    # this machine's sysfs: its NICs are read, and VFs only where it has them (none here)
    path.write_text(
        yaml.safe_dump({"devices": {"nic": {"source": "sysfs"}, "device_plugin": plugin}})
    )
    result = CliRunner().invoke(app, ["device-plugin", "--config", str(path), "--once", *kube])
    assert result.exit_code == 0, result.output
    assert f"{names.RESOURCE_SRIOV_NIC}: " in result.stdout
