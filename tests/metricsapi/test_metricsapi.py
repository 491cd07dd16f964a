"""The external metrics API: spd_agg_metrics as Katalyst serves it, discovery, bad
selectors, and the aggregation layer's request-header authentication."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from pykatalyst.api import names
from pykatalyst.api.timefmt import rfc3339
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import RealClock
from pykatalyst.metricsapi.authconfig import AuthConfigError, from_cluster
from pykatalyst.metricsapi.authz import AccessReviewer
from pykatalyst.metricsapi.server import RequestHeaderAuth, latest_value, selector_labels
from pykatalyst.runtime.metricsapi import metrics_api_host
from pykatalyst.webhook.certs import generate, generate_client
from pykatalyst.webhook.server import TLSFiles

needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
NOW = 1_800_000_000.0
LABELS = {
    names.METRIC_SELECTOR_SPD_NAME: "web",
    names.METRIC_SELECTOR_SPD_RESOURCE_NAME: "cpu_utilization",
    names.METRIC_SELECTOR_SPD_CONTAINER_NAME: "ihpa-predict",
    names.METRIC_SELECTOR_SPD_SCOPE_NAME: "ResourcePortraitIndicatorPlugin",
}
SELECTOR = ",".join(f"{k}={v}" for k, v in LABELS.items())
PEM = "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n"
PATH = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/spd_agg_metrics"


def spd(
    points: list[tuple[float, str]], scope: str = "ResourcePortraitIndicatorPlugin"
) -> dict[str, Any]:
    items = [
        {
            "timestamp": rfc3339(t),
            "window": "1m0s",
            "containers": [{"name": "ihpa-predict", "usage": {"cpu_utilization": v}}],
        }
        for t, v in points
    ]
    return {
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
        "status": {"aggMetrics": [{"aggregator": "avg", "scope": scope, "items": items}]},
    }


def test_the_latest_point_before_now_is_served() -> None:
    obj = spd([(NOW - 120, "1"), (NOW - 60, "2500m"), (NOW, "7"), (NOW + 60, "9")])
    assert latest_value(obj, LABELS, NOW) == (NOW - 60, "2500m")
    assert (
        latest_value(obj, {**LABELS, names.METRIC_SELECTOR_SPD_RESOURCE_NAME: "qps"}, NOW) is None
    )
    assert latest_value(spd([(NOW - 60, "1")], scope="Other"), LABELS, NOW) is None


def test_a_selector_without_the_four_labels_names_what_is_missing() -> None:
    from pykatalyst.cluster.protocol import BadRequest

    with pytest.raises(BadRequest, match="spd-scope-name"):
        selector_labels(",".join(f"{k}={v}" for k, v in list(LABELS.items())[:3]))
    assert selector_labels(SELECTOR) == LABELS


def test_the_request_header_settings_come_from_the_cluster() -> None:
    c = MemoryCluster()
    with pytest.raises(AuthConfigError, match="--requestheader-client-ca-file"):
        from_cluster(c)
    c.create(
        names.CONFIG_MAP,
        {
            "metadata": {"name": "extension-apiserver-authentication"},
            "data": {
                "requestheader-client-ca-file": PEM,
                "requestheader-allowed-names": '["front-proxy-client"]',
                "requestheader-username-headers": '["X-Remote-User"]',
                "requestheader-group-headers": '["X-Remote-Group"]',
            },
        },
        "kube-system",
    )
    got = from_cluster(c)
    assert got.allowed_names == ("front-proxy-client",)


def _serve_and(
    cluster: MemoryCluster,
    tls: TLSFiles,
    auth: RequestHeaderAuth | None,
    fn: Any,
    authz: AccessReviewer | None = None,
) -> Any:
    async def run() -> Any:
        host = metrics_api_host(
            cluster, tls, RealClock(), auth, listen=("127.0.0.1", 0), authz=authz
        )
        task = asyncio.create_task(host.run())
        while "metrics-api" not in host.bound:
            await asyncio.sleep(0.01)
        addr, port = host.bound["metrics-api"]
        try:
            return await fn(f"https://{addr}:{port}")
        finally:
            host.request_stop()
            await task

    return asyncio.run(run())


@needs_openssl
def test_over_tls_the_proxy_certificate_and_user_header_are_required(tmp_path: Path) -> None:
    files = generate(tmp_path, ["127.0.0.1"])
    proxy_ca = tmp_path / "proxy"
    proxy = generate(proxy_ca, ["127.0.0.1"])
    c = MemoryCluster()
    now = time.time()
    obj = spd([(now - 60, "2500m"), (now + 600, "9")])
    c.create(names.SERVICE_PROFILE_DESCRIPTOR, obj, "default")
    patch = {"status": obj["status"]}
    c.patch(names.SERVICE_PROFILE_DESCRIPTOR, "web", patch, "default", subresource="status")
    tls = TLSFiles(files.cert, files.key, client_ca=proxy.ca_cert)
    auth = RequestHeaderAuth(allowed_names=("front-proxy-client",))

    async def check(url: str) -> None:
        trust = ssl.create_default_context(cafile=str(files.ca_cert))
        good = ssl.create_default_context(cafile=str(files.ca_cert))
        good.load_cert_chain(*generate_client(proxy_ca, "front-proxy-client"))
        wrong_name = ssl.create_default_context(cafile=str(files.ca_cert))
        wrong_name.load_cert_chain(*generate_client(proxy_ca, "someone-else"))
        user = {"X-Remote-User": "system:serviceaccount:kube-system:horizontal-pod-autoscaler"}
        q = {"labelSelector": SELECTOR}
        async with aiohttp.ClientSession() as s:
            async with s.get(url + PATH, params=q, ssl=trust) as r:
                assert r.status == 401
            async with s.get(url + PATH, params=q, ssl=wrong_name, headers=user) as r:
                assert r.status == 401 and "allowed names" in (await r.json())["message"]
            async with s.get(url + PATH, params=q, ssl=good) as r:
                assert r.status == 401  # no user header
            async with s.get(url + PATH, params=q, ssl=good, headers=user) as r:
                body = await r.json()
                assert r.status == 200, body["message"]
                (item,) = body["items"]
                assert body["kind"] == "ExternalMetricValueList"
                assert (item["metricName"], item["value"]) == ("spd_agg_metrics", "2500m")
                assert item["timestamp"] == rfc3339(now - 60)
                assert item["metricLabels"] == LABELS
            async with s.get(
                url + "/apis/external.metrics.k8s.io/v1beta1", ssl=good, headers=user
            ) as r:
                res = (await r.json())["resources"]
                assert [x["name"] for x in res] == ["spd_agg_metrics"]
            async with s.get(
                url + PATH.replace("default", "other"), params=q, ssl=good, headers=user
            ) as r:
                assert r.status == 404
            async with s.get(
                url + PATH, params={"labelSelector": "a=b"}, ssl=good, headers=user
            ) as r:
                assert r.status == 400 and "missing" in (await r.json())["message"]
            async with s.get(url + "/healthz", ssl=trust) as r:
                assert r.status == 200

    _serve_and(c, tls, auth, check)
