"""`katalyst device-plugin --once` and `katalyst metrics` on the real cluster: each names the
cluster it talks to on its first line; the plugin's `--once` sees the node's kubelet, shows
the cards it would advertise and registers nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from pykatalyst.api import names
from tests.e2e.conftest import Kubectl, LocalNode, component_kubeconfig

KATALYST = str(Path(sys.executable).parent / "katalyst")
PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")  # the kubelet's, whatever its root-dir


def _allocatable(kubectl: Kubectl, node: str) -> dict[str, str]:
    """The node's allocatable but the reclaimed figures, which the node lane's agents
    publish (the last test's may still be stopping when this one starts)."""
    allocatable = kubectl.json("get", "node", node)["status"]["allocatable"]
    moving = (names.RECLAIMED_MILLICPU, names.RECLAIMED_MEMORY)
    return {k: v for k, v in allocatable.items() if k not in moving}


def test_device_plugin_once_sees_the_kubelet_and_registers_nothing(
    kubectl: Kubectl, local_node: LocalNode, tmp_path: Path
) -> None:
    kc = component_kubeconfig("agent")
    cards = [{"id": f"GPU-once-{i}", "numa": 0, "memory_mib": 16384} for i in range(2)]
    cfg = tmp_path / "agent.yaml"
    plugin = {"shares_per_gpu": 4}
    cfg.write_text(
        yaml.safe_dump({"devices": {"source": "synthetic", "gpus": cards, "device_plugin": plugin}})
    )
    before = _allocatable(kubectl, local_node.name)
    args = ["device-plugin", "--node", local_node.name, "--config", str(cfg), "--once"]
    done = subprocess.run(
        [KATALYST, *args, "--kubeconfig", kc], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr.splitlines()[0] == (
        f"katalyst device-plugin: cluster: the cluster of {kc} (--kubeconfig)"
    )
    assert f"{names.RESOURCE_NVIDIA_GPU}: 8 ids (8 healthy)" in done.stdout
    kubelet = PLUGIN_DIR / "kubelet.sock"
    assert f"the kubelet's {kubelet} is there: serving would register with it" in done.stdout
    assert not list(PLUGIN_DIR.glob("katalyst-*.sock"))
    assert _allocatable(kubectl, local_node.name) == before


def test_metrics_names_the_cluster_it_serves(kubeconfig: str, tmp_path: Path) -> None:
    args = ["metrics", "--kubeconfig", kubeconfig, "--self-signed", str(tmp_path / "certs")]
    done = subprocess.run(
        [KATALYST, *args, "--listen", "127.0.0.1:0", "--stop-after", "2s"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr.splitlines()[0] == (
        f"katalyst metrics: cluster: the cluster of {kubeconfig} (--kubeconfig)"
    )
    # it read the cluster's request-header CA: it serves with authentication
    assert "request-header client certificates" in done.stdout
