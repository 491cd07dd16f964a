"""kubectl against the embedded API server: the commands a user runs day to day."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from pykatalyst.api.names import CUSTOM_NODE_RESOURCE, DEPLOYMENT, NODE, POD
from pykatalyst.apiserver.http import kubeconfig_for
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import RealClock
from pykatalyst.runtime.apiserver import ApiServer

KUBECTL = shutil.which("kubectl")
ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")

POD_MANIFEST = """\
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
  annotations:
    katalyst.kubewharf.io/qos_level: shared_cores
spec:
  containers:
  - name: main
    image: "%s"
    resources:
      requests: {cpu: "1", memory: 1Gi}
"""


@pytest.fixture
def env(tmp_path: Path) -> Iterator[tuple[MemoryCluster, Path]]:
    store = MemoryCluster(clock=RealClock())
    with ApiServer(store, bookmark_seconds=0) as server:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(kubeconfig_for(server.url)))
        yield store, kubeconfig


def _flags(kubeconfig: Path) -> list[str]:
    # kubectl caches discovery per host:port for minutes: keep each test's cache its own
    return ["--kubeconfig", str(kubeconfig), "--cache-dir", str(kubeconfig.parent / "cache")]


def kubectl(kubeconfig: Path, *args: str, input: str | None = None) -> str:
    assert KUBECTL is not None
    done = subprocess.run(
        [KUBECTL, *_flags(kubeconfig), "--request-timeout=10s", *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


def test_apply_get_describe_delete_a_pod(env: tuple[MemoryCluster, Path]) -> None:
    store, kc = env
    assert "pod/web created" in kubectl(kc, "apply", "-f", "-", input=POD_MANIFEST % "nginx:1")
    # a second apply sends a strategic merge patch of just the difference
    assert "pod/web configured" in kubectl(kc, "apply", "-f", "-", input=POD_MANIFEST % "nginx:2")
    stored = store.get(POD, "web", "default")
    assert stored["spec"]["containers"][0]["image"] == "nginx:2"
    assert stored["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "1"
    assert "pod/web unchanged" in kubectl(kc, "apply", "-f", "-", input=POD_MANIFEST % "nginx:2")

    table = kubectl(kc, "get", "pods")
    header, row = table.splitlines()[:2]
    assert header.split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert row.split()[:3] == ["web", "0/1", "Pending"]
    assert kubectl(kc, "get", "all", "-o", "name").split() == ["pod/web"]
    assert kubectl(kc, "get", "pod", "web", "-o", "jsonpath={.metadata.labels.app}") == "web"

    store.create(NODE, {"metadata": {"name": "n1"}})
    store.bind("default", "web", "n1")
    described = kubectl(kc, "describe", "pod", "web")
    assert "Name:" in described and "web" in described
    assert "Node:" in described and "n1" in described
    assert "QoS Class:" in described

    kubectl(kc, "delete", "pod", "web", "--grace-period=0", "--force")
    assert store.list(POD).items == []


def test_get_pods_and_nodes_together(env: tuple[MemoryCluster, Path]) -> None:
    store, kc = env
    store.create(NODE, {"metadata": {"name": "n1"}})
    store.create(POD, yaml.safe_load(POD_MANIFEST % "nginx"), "default")
    names = kubectl(kc, "get", "pods,nodes", "-A", "-o", "name").split()
    assert names == ["pod/web", "node/n1"]


def test_watch_sees_a_new_pod(env: tuple[MemoryCluster, Path]) -> None:
    store, kc = env
    assert KUBECTL is not None
    first = yaml.safe_load(POD_MANIFEST % "nginx")
    first["metadata"]["name"] = "first"
    store.create(POD, first, "default")
    watcher = subprocess.Popen(
        [KUBECTL, *_flags(kc), "get", "pods", "--watch", "--request-timeout=20s"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: list[str] = []
    try:
        assert watcher.stdout is not None
        for line in watcher.stdout:  # ends when kubectl does (at the latest, its timeout)
            seen.append(line)
            if line.split()[:1] == ["first"]:
                # kubectl has listed: a pod created now reaches it through the watch only
                store.create(POD, yaml.safe_load(POD_MANIFEST % "nginx"), "default")
            if line.split()[:1] == ["web"]:
                break
    finally:
        watcher.kill()
        watcher.communicate()
    assert seen and seen[-1].split()[:3] == ["web", "0/1", "Pending"], seen


def test_crds_install_and_custom_resources_print(env: tuple[MemoryCluster, Path]) -> None:
    store, kc = env
    applied = kubectl(kc, "apply", "-f", str(ROOT / "deploy" / "crds"))
    assert applied.count("created") == len(list((ROOT / "deploy" / "crds").glob("*.yaml"))) == 20
    cnr = {
        "apiVersion": CUSTOM_NODE_RESOURCE.api_version,
        "kind": CUSTOM_NODE_RESOURCE.kind,
        "metadata": {"name": "node-1"},
    }
    kubectl(kc, "apply", "-f", "-", input=yaml.safe_dump(cnr))
    kubectl(
        kc,
        "patch",
        "customnoderesource",
        "node-1",
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status": {"topologyPolicy": "None"}}',
    )
    table = kubectl(kc, "get", "customnoderesources", "-o", "wide")
    header, row = table.splitlines()[:2]
    assert header.split()[:2] == ["NAME", "RECLAIMED-CPU"] and "POLICY" in header.split()
    assert row.split()[0] == "node-1" and "None" in row.split()
    by_short_name = kubectl(kc, "get", "kcnr", "-o", "name").split()
    assert by_short_name == [f"customnoderesource.{CUSTOM_NODE_RESOURCE.group}/node-1"]
    # Katalyst's short names: `cnc` for CustomNodeConfigs, as kubectl users type it.
    assert kubectl(kc, "get", "cnc", "-o", "name").split() == []
    assert store.get(CUSTOM_NODE_RESOURCE, "node-1")["status"]["topologyPolicy"] == "None"


DEPLOYMENT_MANIFEST = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: main, image: nginx}]
"""


def test_kubectl_scale_writes_a_deployments_replicas(env: tuple[MemoryCluster, Path]) -> None:
    store, kc = env
    kubectl(kc, "apply", "-f", "-", input=DEPLOYMENT_MANIFEST)
    assert "deployment.apps/web scaled" in kubectl(kc, "scale", "deployment/web", "--replicas=3")
    assert store.get(DEPLOYMENT, "web", "default")["spec"]["replicas"] == 3
    scale = json.loads(
        kubectl(kc, "get", "--raw", "/apis/apps/v1/namespaces/default/deployments/web/scale")
    )
    assert scale["kind"] == "Scale" and scale["spec"] == {"replicas": 3}
    assert scale["status"]["selector"] == "app=web"
