"""IHPA on a real cluster: `katalyst metrics` registered by an APIService, proxied by the
real kube-apiserver (request-header authentication), read with `kubectl get --raw`, and
the real HPA controller in kube-controller-manager scaling from `spd_agg_metrics`, and the
metrics server asking the real kube-apiserver (SubjectAccessReview) what a caller may read.

`katalyst controller --controllers ihpa` runs with the controller's ServiceAccount and
reads history from a Prometheus stand-in in this test (a flat 300 requests/s for a week),
so the built-in predictor serves 300 (reactive: no period), and an AverageValue target of
100 asks for 3 replicas. The metrics server runs as a host process on this machine's
address with a self-signed pair; the APIService reaches it through a selector-less Service
and its Endpoints (kube-apiserver runs with --enable-aggregator-routing)."""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import (
    REPO,
    WORKLOAD_IMAGE,
    Component,
    Kubectl,
    _tool,
    component_kubeconfig,
    wait_until,
)
from tests.e2e.fake_nodes import free_port

APISERVICE = "v1beta1.external.metrics.k8s.io"
RESOURCE_APISERVICE = "v1beta1.metrics.k8s.io"
QPS = 300.0


def _host_ip() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))  # no packet is sent: it picks the outgoing address
        ip = str(s.getsockname()[0])
    if ip.startswith("127."):
        pytest.skip("this machine has no address besides loopback for the APIService")
    return ip


class _Prometheus(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        q = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
        start, end, step = float(q["start"][0]), float(q["end"][0]), 60.0
        n = int((end - start) // step) + 1
        values = [[start + i * step, str(QPS)] for i in range(n)]
        body = {
            "status": "success",
            "data": {"resultType": "matrix", "result": [{"metric": {}, "values": values}]},
        }
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def prometheus() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Prometheus)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def metrics_api(
    kubectl: Kubectl,
    kubeconfig: str,
    namespace: str,
    components: Callable[..., Component],
    tmp_path: Path,
) -> Iterator[Component]:
    ip, port = _host_ip(), free_port()
    certs = tmp_path / "metrics-certs"
    comp = components(
        "metrics",
        "metrics",
        "--self-signed",
        str(certs),
        "--cert-host",
        ip,
        "--cert-host",
        f"katalyst-metrics.{namespace}.svc",
        "--listen",
        f"{ip}:{port}",
        "--kubeconfig",
        kubeconfig,
    )

    def ready() -> bool:
        assert comp.alive(), comp.log()
        ca = certs / "ca.crt"
        if not ca.exists():
            return False
        try:
            ctx = ssl.create_default_context(cafile=str(ca))
            with urllib.request.urlopen(f"https://{ip}:{port}/readyz", context=ctx, timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    wait_until("the metrics API's /readyz", ready, 60)
    ca = base64.b64encode((certs / "ca.crt").read_bytes()).decode()
    api = {"group": "external.metrics.k8s.io", "version": "v1beta1", "caBundle": ca}
    _register(kubectl, namespace, "katalyst-metrics", (ip, port), api)

    try:
        wait_until("the APIService Available", lambda: _available(kubectl, APISERVICE), 90)
        yield comp
    finally:
        kubectl.run("delete", "apiservice", APISERVICE, "--wait=false", check=False)


@pytest.fixture
def metrics_server(
    kubectl: Kubectl, kubeconfig: str, namespace: str, tmp_path: Path
) -> Iterator[None]:
    """Upstream metrics-server (built by scripts/k8s-build.sh) as a host process, serving
    metrics.k8s.io through its APIService: the plain HPA's cpu metric."""
    binary = _tool("metrics-server")
    node = kubectl.json("get", "nodes")["items"][0]["metadata"]["name"]
    if socket.gethostbyname(node) != "127.0.0.1":
        pytest.skip(
            f"node {node} does not resolve to 127.0.0.1, where this cluster's kubelet listens"
        )
    ip, port = _host_ip(), free_port()
    log = (tmp_path / "metrics-server.log").open("ab")
    args = [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={ip}",
        f"--secure-port={port}",
        f"--cert-dir={tmp_path / 'metrics-server-certs'}",
        "--kubelet-insecure-tls",
        "--kubelet-preferred-address-types=Hostname",
        "--metric-resolution=10s",
        "--kubelet-request-timeout=5s",
    ]
    proc = subprocess.Popen(
        [binary, *args],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    # as metrics-server's own manifests register it
    api = {"group": "metrics.k8s.io", "version": "v1beta1", "insecureSkipTLSVerify": True}
    try:
        _register(kubectl, namespace, "metrics-server", (ip, port), api)

        def available() -> bool:
            assert proc.poll() is None, (tmp_path / "metrics-server.log").read_text()[-3000:]
            return _available(kubectl, RESOURCE_APISERVICE)

        wait_until("metrics.k8s.io Available", available, 90)
        yield
    finally:
        kubectl.run("delete", "apiservice", RESOURCE_APISERVICE, "--wait=false", check=False)
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _ihpa_controller(components: Callable[..., Component], *extra: str) -> Component:
    kubeconfig = component_kubeconfig("controller")
    args = ["--kubeconfig", kubeconfig, "--controllers=ihpa", "--no-leader-elect"]
    return components("controller", "controller", *args, "--period", "2s", *extra)


def _register(
    kubectl: Kubectl, namespace: str, service: str, at: tuple[str, int], api: dict[str, Any]
) -> None:
    """A selector-less Service and its Endpoints for a server on this machine at `at`,
    and the APIService `api` (its spec without the service) through them."""
    ip, port = at
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": service, "namespace": namespace},
        "spec": {"ports": [{"port": 443, "targetPort": port, "protocol": "TCP"}]},
    }
    endpoints = {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": service, "namespace": namespace},
        "subsets": [{"addresses": [{"ip": ip}], "ports": [{"port": port, "protocol": "TCP"}]}],
    }
    group, version = api["group"], api["version"]
    apiservice = {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": f"{version}.{group}"},
        "spec": {
            **api,
            "service": {"namespace": namespace, "name": service, "port": 443},
            "groupPriorityMinimum": 100,
            "versionPriority": 100,
        },
    }
    for obj in (svc, endpoints, apiservice):
        kubectl.apply(obj)


def _available(kubectl: Kubectl, name: str) -> bool:
    conds = kubectl.json("get", "apiservice", name).get("status", {}).get("conditions") or []
    return any(c["type"] == "Available" and c["status"] == "True" for c in conds)


def _deployment(name: str, namespace: str, burn: bool = False) -> dict[str, Any]:
    res = {"cpu": "10m", "memory": "16Mi"}
    limits = {"cpu": "20m", "memory": "16Mi"} if burn else res
    command = ["sh", "-c", "while :; do :; done"] if burn else ["sleep", "3600"]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "c",
                            "image": WORKLOAD_IMAGE,
                            "command": command,
                            "resources": {"requests": res, "limits": limits},
                        }
                    ],
                },
            },
        },
    }


def _ihpa(name: str, target: str, namespace: str, strategy: str) -> str:
    # Katalyst's IHPA, written as a Katalyst user writes it.
    return f"""
apiVersion: autoscaling.katalyst.kubewharf.io/v1alpha2
kind: IntelligentHorizontalPodAutoscaler
metadata:
  name: {name}
  namespace: {namespace}
spec:
  scaleStrategy: {strategy}
  autoscaler:
    scaleTargetRef:
      apiVersion: apps/v1
      kind: Deployment
      name: {target}
    minReplicas: 1
    maxReplicas: 5
    metrics:
    - customMetric:
        identify: qps
        query: sum(rate(http_requests_total{{namespace="{namespace}"}}[1m]))
        value: "100"
    behavior:
      scaleUp:
        stabilizationWindowSeconds: 0
"""


HPA_USER = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"


def _selector(spd: str) -> str:
    return ",".join(
        f"metric.katalyst.kubewharf.io/{k}={v}"
        for k, v in (
            ("spd-name", spd),
            ("spd-resource-name", "qps"),
            ("spd-container-name", "ihpa-predict"),
            ("spd-scope-name", "ResourcePortraitIndicatorPlugin"),
        )
    )


def _as_proxy(server: Component, namespace: str, user: str) -> tuple[int, Any]:
    """GET the metric from the metrics server directly, with kube-apiserver's front-proxy
    client certificate, naming `user` as the aggregation layer does."""
    pki = Path(os.environ.get("PYKATALYST_CLUSTER_DIR", "/var/lib/pykatalyst-cluster")) / "pki"
    cert, key = pki / "front-proxy-client.crt", pki / "front-proxy-client.key"
    if not cert.exists():
        pytest.skip(f"no front-proxy client certificate at {cert} (not this machine's cluster)")
    listen = server.args[server.args.index("--listen") + 1]
    ca = server.log_path.parent / "metrics-certs" / "ca.crt"
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.load_cert_chain(str(cert), str(key))
    url = (
        f"https://{listen}/apis/external.metrics.k8s.io/v1beta1/namespaces/{namespace}/"
        f"spd_agg_metrics?labelSelector={urllib.parse.quote(_selector('web'))}"
    )
    req = urllib.request.Request(url, headers={"X-Remote-User": user})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _raw(kubectl: Kubectl, namespace: str, spd: str) -> Any:
    sel = _selector(spd)
    path = (
        f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{namespace}/spd_agg_metrics"
        f"?labelSelector={urllib.parse.quote(sel)}"
    )
    proc = kubectl.run("get", "--raw", path, check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def test_the_real_hpa_scales_from_predicted_spd_agg_metrics(
    kubectl: Kubectl,
    namespace: str,
    components: Callable[..., Component],
    metrics_api: Component,
    prometheus: str,
) -> None:
    kubectl.run("apply", "-f", str(REPO / "deploy" / "manifests" / "controller-rbac.yaml"))
    for name in ("web", "shadow"):
        kubectl.apply(_deployment(name, namespace))
    kubectl.apply(_ihpa("web", "web", namespace, "Auto"))
    kubectl.apply(_ihpa("shadow", "shadow", namespace, "Preview"))
    ctl = _ihpa_controller(
        components, "--spd-resource-portrait-indicator-plugin-prometheus-address", prometheus
    )

    # the predicted points appear in the SPD, written by the resource portrait
    def points() -> list[Any]:
        assert ctl.alive(), ctl.log()
        spd = kubectl.json("get", "spd", "web", "-n", namespace)
        aggs = spd.get("status", {}).get("aggMetrics") or []
        return [
            i for a in aggs if a["scope"] == "ResourcePortraitIndicatorPlugin" for i in a["items"]
        ]

    items = wait_until("predicted points in the SPD", points, 60)
    usage = items[0]["containers"][0]
    assert usage["name"] == "ihpa-predict" and usage["usage"]["qps"] == "300"

    # the real kube-apiserver proxies kubectl's read to the metrics server (a point
    # exists once the first predicted minute has begun)
    got = wait_until(
        "spd_agg_metrics through the APIService", lambda: _raw(kubectl, namespace, "web"), 90
    )
    assert got["items"][0]["value"] == "300"

    # the real HPA controller scales the Deployment: ceil(300 / 100) = 3
    hpa = kubectl.json("get", "hpa", "ihpa-web", "-n", namespace)
    assert hpa["metadata"]["ownerReferences"][0]["kind"] == "IntelligentHorizontalPodAutoscaler"
    wait_until(
        "the HPA scaling web to 3",
        lambda: kubectl.json("get", "deploy", "web", "-n", namespace)["spec"]["replicas"] == 3,
        120,
    )

    # Preview: the HPA scales the VirtualWorkload; the Deployment is never touched
    shadow_hpa = kubectl.json("get", "hpa", "ihpa-shadow", "-n", namespace)
    assert shadow_hpa["spec"]["scaleTargetRef"]["kind"] == "VirtualWorkload"
    wait_until(
        "the Preview HPA deciding 3",
        lambda: (
            kubectl.json("get", "hpa", "ihpa-shadow", "-n", namespace)
            .get("status", {})
            .get("desiredReplicas")
            == 3
        ),
        120,
    )
    assert kubectl.json("get", "deploy", "shadow", "-n", namespace)["spec"]["replicas"] == 1

    # What a named user may read is the real kube-apiserver's to say: called as the
    # aggregation layer calls it (the front-proxy certificate), the metrics server serves the
    # HPA controller's identity and refuses a user the cluster's RBAC gives nothing.
    status, body = _as_proxy(metrics_api, namespace, HPA_USER)
    assert status == 200, body
    status, body = _as_proxy(metrics_api, namespace, "e2e-nobody")
    assert status == 403, body
    assert "User 'e2e-nobody' cannot list resource 'spd_agg_metrics'" in body["message"]
    status = kubectl.json("get", "ihpa", "web", "-n", namespace).get("status", {})
    assert status.get("desiredReplicas") == 3


def _cpu_hpa(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": 1,
            "maxReplicas": 3,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": 50},
                    },
                }
            ],
        },
    }


def _cpu_ihpa(name: str, namespace: str) -> str:
    # Katalyst's IHPA with a native metric only, passed through to its HPA as written.
    return f"""
apiVersion: autoscaling.katalyst.kubewharf.io/v1alpha2
kind: IntelligentHorizontalPodAutoscaler
metadata:
  name: {name}
  namespace: {namespace}
spec:
  scaleStrategy: Auto
  autoscaler:
    scaleTargetRef:
      apiVersion: apps/v1
      kind: Deployment
      name: {name}
    minReplicas: 1
    maxReplicas: 3
    metrics:
    - metric:
        type: Resource
        resource:
          name: cpu
          target:
            type: Utilization
            averageUtilization: 50
"""


def test_a_plain_hpa_and_an_ihpa_scale_side_by_side_from_metrics_server(
    kubectl: Kubectl,
    namespace: str,
    components: Callable[..., Component],
    metrics_server: None,
) -> None:
    """The plain HPA users run today, its cpu metric from upstream metrics-server, beside an
    IHPA whose native cpu metric pykatalyst passes through: the real HPA controller scales
    both Deployments, whose pods use twice their cpu request (ceil(1 x 200 / 50) = 4,
    capped at 3)."""
    kubectl.run("apply", "-f", str(REPO / "deploy" / "manifests" / "controller-rbac.yaml"))
    for name in ("plain", "viaihpa"):
        kubectl.apply(_deployment(name, namespace, burn=True))
    kubectl.apply(_cpu_hpa("plain", namespace))
    kubectl.apply(_cpu_ihpa("viaihpa", namespace))
    ctl = _ihpa_controller(components)

    def pod_cpu() -> list[Any]:
        path = f"/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods"
        proc = kubectl.run("get", "--raw", path, check=False)
        items = json.loads(proc.stdout).get("items", []) if proc.returncode == 0 else []
        return [c["usage"]["cpu"] for i in items for c in i["containers"]]

    usage = wait_until("pod cpu from metrics-server", pod_cpu, 120, interval=2)
    assert usage, usage

    def replicas() -> dict[str, int]:
        assert ctl.alive(), ctl.log()
        got = {
            n: kubectl.json("get", "deploy", n, "-n", namespace)["spec"]["replicas"]
            for n in ("plain", "viaihpa")
        }
        if got == {"plain": 3, "viaihpa": 3}:
            return got
        raise AssertionError(f"replicas {got}")

    wait_until("both Deployments scaled to 3", replicas, 180, interval=3)
    hpa = kubectl.json("get", "hpa", "ihpa-viaihpa", "-n", namespace)
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    current = hpa.get("status", {}).get("currentMetrics") or []
    assert current and current[0]["resource"]["current"]["averageUtilization"] > 50, current
