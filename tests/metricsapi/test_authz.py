"""Delegated authorization of the external metrics API: the attributes kube-apiserver would
authorize, the SubjectAccessReview asked, the cache, and what a caller sees over TLS."""

from __future__ import annotations

import shutil
import ssl
import time
from pathlib import Path

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.protocol import JSON, ApiError
from pykatalyst.metricsapi.authz import (
    AccessReviewer,
    Attributes,
    Caller,
    attributes,
    decision,
    review_body,
)
from pykatalyst.metricsapi.server import RequestHeaderAuth
from pykatalyst.webhook.certs import generate, generate_client
from pykatalyst.webhook.server import TLSFiles
from tests.metricsapi.test_metricsapi import PATH, SELECTOR, _serve_and, spd

needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
HPA = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
GV = "/apis/external.metrics.k8s.io/v1beta1"
dns = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)


@given(dns, dns)
def test_a_metric_in_a_namespace_is_a_list_of_that_resource_there(ns: str, metric: str) -> None:
    attrs = attributes("GET", f"{GV}/namespaces/{ns}/{metric}")
    assert attrs == Attributes("list", resource=metric, namespace=ns)
    spec = review_body(Caller(HPA), attrs)["spec"]
    assert spec["resourceAttributes"] == {
        "verb": "list",
        "group": "external.metrics.k8s.io",
        "version": "v1beta1",
        "resource": metric,
        "namespace": ns,
    }


@pytest.mark.parametrize("path", ["/apis", "/apis/external.metrics.k8s.io", GV, f"{GV}/x"])
def test_discovery_is_a_non_resource_get(path: str) -> None:
    attrs = attributes("GET", path)
    assert review_body(Caller("u"), attrs)["spec"]["nonResourceAttributes"] == {
        "verb": "get",
        "path": path,
    }


def test_the_review_carries_groups_and_extra_and_reads_the_answer() -> None:
    caller = Caller("alice", ("devs", "system:authenticated"), (("scopes", ("a", "b")),))
    body = review_body(caller, attributes("GET", PATH))
    assert body["kind"] == "SubjectAccessReview"
    assert body["spec"]["groups"] == ["devs", "system:authenticated"]
    assert body["spec"]["extra"] == {"scopes": ["a", "b"]}
    assert decision({"status": {"allowed": True}}).allowed
    assert not decision({"status": {"allowed": True, "denied": True}}).allowed
    assert not decision({}).allowed  # no status: nobody said yes
    assert decision({"status": {"allowed": False, "reason": "no rule"}}).reason == "no rule"


def test_answers_are_cached_for_the_ttl_then_asked_again() -> None:
    now = [100.0]
    asked: list[JSON] = []

    def submit(body: JSON) -> JSON:
        asked.append(body)
        return {**body, "status": {"allowed": body["spec"]["user"] == HPA}}

    reviewer = AccessReviewer(submit, lambda: now[0], ttl_s=10.0)
    attrs = attributes("GET", PATH)
    assert reviewer.review(Caller(HPA), attrs).allowed
    assert not reviewer.review(Caller("mallory"), attrs).allowed
    now[0] += 9.9
    assert reviewer.review(Caller(HPA), attrs).allowed
    assert len(asked) == 2
    now[0] += 0.2
    assert reviewer.review(Caller(HPA), attrs).allowed
    assert len(asked) == 3
    # another namespace is another question
    reviewer.review(Caller(HPA), attributes("GET", PATH.replace("default", "prod")))
    assert len(asked) == 4


def test_the_refusal_reads_as_kube_apiservers() -> None:
    text = attributes("GET", PATH).refusal("mallory")
    assert text == (
        "spd_agg_metrics.external.metrics.k8s.io is forbidden: User 'mallory' cannot list "
        "resource 'spd_agg_metrics' in API group 'external.metrics.k8s.io' in the namespace "
        "'default'"
    )


@needs_openssl
def test_over_tls_a_user_without_the_right_is_refused_and_a_failed_review_is_a_500(
    tmp_path: Path,
) -> None:
    files = generate(tmp_path, ["127.0.0.1"])
    proxy_ca = tmp_path / "proxy"
    generate(proxy_ca, ["127.0.0.1"])
    c = MemoryCluster()
    now = time.time()
    obj = spd([(now - 60, "2500m")])
    c.create(names.SERVICE_PROFILE_DESCRIPTOR, obj, "default")
    c.patch(
        names.SERVICE_PROFILE_DESCRIPTOR,
        "web",
        {"status": obj["status"]},
        "default",
        subresource="status",
    )
    tls = TLSFiles(files.cert, files.key, client_ca=proxy_ca / "ca.crt")
    broken = {"on": False}

    def submit(body: JSON) -> JSON:
        if broken["on"]:
            raise ApiError("the API server is away")
        spec = body["spec"]
        ok = spec["user"] == HPA or "system:masters" in spec["groups"]
        return {**body, "status": {"allowed": ok, "reason": "" if ok else "no RBAC rule"}}

    reviewer = AccessReviewer(submit, time.time, ttl_s=0.0)

    async def check(url: str) -> None:
        good = ssl.create_default_context(cafile=str(files.ca_cert))
        good.load_cert_chain(*generate_client(proxy_ca, "front-proxy-client"))
        q = {"labelSelector": SELECTOR}
        async with aiohttp.ClientSession() as s:
            async with s.get(url + PATH, params=q, ssl=good, headers={"X-Remote-User": HPA}) as r:
                assert r.status == 200
            who = {"X-Remote-User": "mallory", "X-Remote-Group": "devs"}
            async with s.get(url + PATH, params=q, ssl=good, headers=who) as r:
                body = await r.json()
                assert r.status == 403 and body["reason"] == "Forbidden"
                assert "User 'mallory' cannot list resource 'spd_agg_metrics'" in body["message"]
                assert body["message"].endswith(": no RBAC rule")
            admin = {"X-Remote-User": "admin", "X-Remote-Group": "system:masters"}
            async with s.get(url + GV, ssl=good, headers=admin) as r:
                assert r.status == 200
            async with s.get(url + "/healthz", ssl=good) as r:
                assert r.status == 200  # probes ask nobody
            broken["on"] = True
            async with s.get(url + PATH, params=q, ssl=good, headers={"X-Remote-User": HPA}) as r:
                body = await r.json()
                assert r.status == 500 and "authorization failed" in body["message"]

    auth = RequestHeaderAuth(allowed_names=("front-proxy-client",))
    _serve_and(c, tls, auth, check, authz=reviewer)
    assert reviewer.reviews == 3  # the failed one is not an answer
