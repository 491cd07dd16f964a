"""The HTTPS server: AdmissionReview in and out, bad input, TLS reload, client certs."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from pykatalyst.api import names
from pykatalyst.cluster.clock import RealClock
from pykatalyst.runtime.webhook import webhook_host
from pykatalyst.webhook.certs import generate, generate_client
from pykatalyst.webhook.server import TLSFiles, make_app
from pykatalyst.webhook.service import MUTATE_NODES, VALIDATE_PODS, WebhookService
from tests.webhook.helpers import node, node_request, pod, pod_request, review_body

needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


def _post(path: str, body: bytes, max_body: int = 1 << 20) -> tuple[int, Any]:
    async def run() -> tuple[int, Any]:
        app = make_app(WebhookService(None), CollectorRegistry(), max_body=max_body)
        async with TestClient(TestServer(app)) as client:
            resp = await client.post(path, data=body)
            return resp.status, await resp.json()

    return asyncio.run(run())


def test_a_refusal_comes_back_as_an_admission_review_with_the_request_uid() -> None:
    bad = pod(annotations={names.QOS_LEVEL_ANNOTATION: "gold_cores"})
    status, review = _post(VALIDATE_PODS, review_body(pod_request(bad)))
    assert status == 200
    assert review["apiVersion"] == "admission.k8s.io/v1" and review["kind"] == "AdmissionReview"
    assert review["response"]["uid"] == "uid-1"
    assert review["response"]["allowed"] is False
    assert "gold_cores" in review["response"]["status"]["message"]


def test_a_node_patch_is_base64_json_patch() -> None:
    obj = node({names.CPU_OVERCOMMIT_RATIO_ANNOTATION: "2"})
    _, review = _post(MUTATE_NODES, review_body(node_request(obj)))
    assert review["response"]["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(review["response"]["patch"]))
    assert {"op": "add", "path": "/status/allocatable/cpu", "value": "16"} in ops


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"{not json", "body"),
        (b"[]", "body"),
        (b'{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview"}', "apiVersion"),
        (b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}', "request"),
        (
            b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":'
            b'{"uid":"u","operation":"CREATE","kind":{"kind":"Pod"},"resource":{"resource":"pods"},'
            b'"object":"a string"}}',
            "request.object",
        ),
        (
            b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":'
            b'{"uid":"u","operation":"EXPLODE","kind":{"kind":"Pod"},"resource":{"resource":"pods"}}}',
            "request.operation",
        ),
    ],
)
def test_a_malformed_review_gets_400_with_a_status_naming_the_field(
    body: bytes, field: str
) -> None:
    status, answer = _post(VALIDATE_PODS, body)
    assert status == 400
    assert answer["kind"] == "Status" and answer["code"] == 400
    assert f"field {field}" in answer["message"]


def test_a_huge_body_gets_413() -> None:
    status, answer = _post(VALIDATE_PODS, b" " * 5000, max_body=1000)
    assert status == 413 and answer["kind"] == "Status"


def _trust(ca: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca))


def _serve_and(tls: TLSFiles, fn: Any) -> Any:
    """Run the webhook host on a free port, call `await fn(url, host)`, stop it."""

    async def run() -> Any:
        host = webhook_host(WebhookService(None), tls, RealClock(), listen=("127.0.0.1", 0))
        task = asyncio.create_task(host.run())
        while "webhook" not in host.bound:
            await asyncio.sleep(0.01)
        addr, port = host.bound["webhook"]
        try:
            return await fn(f"https://{addr}:{port}", host)
        finally:
            host.request_stop()
            await task

    return asyncio.run(run())


@needs_openssl
def test_the_server_speaks_https_and_picks_up_a_renewed_certificate(tmp_path: Path) -> None:
    first = generate(tmp_path / "a", ["127.0.0.1"])
    tls = TLSFiles(first.cert, first.key)

    async def check(url: str, host: Any) -> None:
        body = review_body(pod_request(pod()))
        async with aiohttp.ClientSession() as s:
            async with s.post(url + VALIDATE_PODS, data=body, ssl=_trust(first.ca_cert)) as r:
                assert (await r.json())["response"]["allowed"] is True
            # a new pair from a new CA replaces the files: the old CA no longer verifies it
            second = generate(tmp_path / "b", ["127.0.0.1"])
            for src, dst in ((second.cert, first.cert), (second.key, first.key)):
                dst.write_bytes(src.read_bytes())
            os.utime(first.cert, ns=(1, 1))
            assert tls.reload_if_changed()
            async with s.post(url + VALIDATE_PODS, data=body, ssl=_trust(second.ca_cert)) as r:
                assert r.status == 200
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await s.post(url + VALIDATE_PODS, data=body, ssl=_trust(first.ca_cert))

    _serve_and(tls, check)


@needs_openssl
def test_with_a_client_ca_admission_needs_a_client_cert_but_probes_do_not(
    tmp_path: Path,
) -> None:
    files = generate(tmp_path, ["127.0.0.1"])
    tls = TLSFiles(files.cert, files.key, client_ca=files.ca_cert)

    async def check(url: str, host: Any) -> None:
        body = review_body(pod_request(pod()))
        async with aiohttp.ClientSession() as s:
            async with s.post(url + VALIDATE_PODS, data=body, ssl=_trust(files.ca_cert)) as r:
                assert r.status == 401
            async with s.get(url + "/healthz", ssl=_trust(files.ca_cert)) as r:
                assert r.status == 200
            # The CA's client pair is let in; a pair from another CA fails the handshake.
            good = _trust(files.ca_cert)
            good.load_cert_chain(*generate_client(tmp_path, "kube-apiserver"))
            async with s.post(url + VALIDATE_PODS, data=body, ssl=good) as r:
                assert r.status == 200 and (await r.json())["response"]["allowed"] is True
            other = tmp_path / "other"
            generate(other, ["127.0.0.1"])
            stranger = _trust(files.ca_cert)
            stranger.load_cert_chain(*generate_client(other, "kube-apiserver"))
            with pytest.raises(aiohttp.ClientError):
                await s.post(url + VALIDATE_PODS, data=body, ssl=stranger)

    _serve_and(tls, check)
