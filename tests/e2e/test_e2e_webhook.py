"""The admission webhook on a real kube-apiserver: `katalyst webhook` as a host process on
127.0.0.1 with a self-signed pair, registered for this test's namespace only. A pod with a
QoS level no node can run is refused with the webhook's message; one with an enhancement
Katalyst ignores is admitted and kubectl prints the webhook's warning."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pykatalyst.api import names
from tests.e2e.conftest import WORKLOAD_IMAGE, Component, Kubectl, wait_until
from tests.e2e.pykatalyst_e2e import start_webhook


def _pod(name: str, namespace: str, annotations: dict[str, str]) -> dict[str, Any]:
    res = {"cpu": "100m", "memory": "64Mi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": WORKLOAD_IMAGE,
                    "command": ["sleep", "3600"],
                    "resources": {"requests": res, "limits": res},
                }
            ],
            "terminationGracePeriodSeconds": 0,
        },
    }


@pytest.fixture
def webhook(
    kubectl: Kubectl, namespace: str, components: Callable[..., Component], tmp_path: Path
) -> Iterator[str]:
    """The webhook serving, and a ValidatingWebhookConfiguration scoped to `namespace`,
    deleted at the end whatever happens."""
    _, url, ca = start_webhook(components, tmp_path / "certs")
    name = f"katalyst-e2e-{namespace}"
    config = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": "pod-qos.katalyst.kubewharf.io",
                "clientConfig": {
                    "url": f"{url}/validate/pods",
                    "caBundle": base64.b64encode(ca.read_bytes()).decode(),
                },
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                        "scope": "Namespaced",
                    }
                ],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "failurePolicy": "Ignore",
                "sideEffects": "None",
                "timeoutSeconds": 5,
                "admissionReviewVersions": ["v1"],
            }
        ],
    }
    try:
        kubectl.apply(config)
        yield namespace
    finally:
        kubectl.run(
            "delete", "validatingwebhookconfiguration", name, "--ignore-not-found", check=False
        )


def test_bad_qos_is_refused_and_ignored_qos_is_admitted_with_a_warning(
    kubectl: Kubectl, webhook: str
) -> None:
    ns = webhook
    bad = _pod("bad", ns, {names.QOS_LEVEL_ANNOTATION: "gold_cores"})

    # The configuration takes effect within a moment: retry until the webhook answers.
    def refused() -> str | None:
        done = kubectl.run("create", "-f", "-", input=json.dumps(bad), check=False)
        if done.returncode == 0:
            kubectl.run("delete", "pod", "bad", "-n", ns, "--wait=false", check=False)
            return None
        return done.stderr

    stderr = wait_until("the webhook to refuse the pod", refused, 30, interval=1)
    assert 'admission webhook "pod-qos.katalyst.kubewharf.io" denied the request' in stderr
    assert "gold_cores" in stderr and names.QOS_LEVEL_ANNOTATION in stderr

    ignored = _pod(
        "ignored",
        ns,
        {
            names.QOS_LEVEL_ANNOTATION: names.QOS_SHARED_CORES,
            names.MEMORY_ENHANCEMENT_ANNOTATION: json.dumps(
                {"numa_binding": "true", "numa_exclusive": "true"}
            ),
        },
    )
    done = kubectl.run("create", "-f", "-", input=json.dumps(ignored))
    warnings = [line for line in done.stderr.splitlines() if line.startswith("Warning:")]
    assert warnings and "numa_exclusive" in warnings[0], done.stderr
    assert kubectl.json("get", "pod", "ignored", "-n", ns)["metadata"]["name"] == "ignored"


def _post_review(url: str, context: Any) -> tuple[int, dict[str, Any]]:
    import urllib.error
    import urllib.request

    from tests.webhook.helpers import pod, pod_request, review_body

    req = urllib.request.Request(
        f"{url}/validate/pods",
        data=review_body(pod_request(pod())),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, context=context, timeout=5) as r:
            return int(r.status), json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), json.loads(exc.read())


@pytest.mark.usefixtures("kubeconfig")  # the webhook reads its caches from the cluster
def test_with_a_client_ca_only_callers_with_its_certificate_are_answered(
    components: Callable[..., Component], tmp_path: Path
) -> None:
    """`katalyst webhook --client-ca-file` as a process, over real TLS sockets: the pair
    kube-apiserver would present (its AdmissionConfiguration's kubeConfigFile) is answered;
    no certificate gets 401; a certificate from another CA fails the handshake; the probes
    stay open."""
    import ssl
    import urllib.error

    from pykatalyst.webhook.certs import generate, generate_client

    certs = tmp_path / "certs"
    comp, url, ca = start_webhook(
        components,
        certs,
        "--client-cert",
        "kube-apiserver",
        "--client-ca-file",
        str(certs / "ca.crt"),
    )
    apiserver = ssl.create_default_context(cafile=str(ca))
    apiserver.load_cert_chain(str(certs / "client.crt"), str(certs / "client.key"))
    code, answer = _post_review(url, apiserver)
    assert code == 200 and answer["response"]["allowed"] is True, answer

    code, answer = _post_review(url, ssl.create_default_context(cafile=str(ca)))
    assert code == 401 and "client certificate" in answer["message"], answer

    other = tmp_path / "other"
    generate(other, ["127.0.0.1"])
    stranger = ssl.create_default_context(cafile=str(ca))
    stranger.load_cert_chain(*(str(p) for p in generate_client(other, "kube-apiserver")))
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
        _post_review(url, stranger)
    assert comp.alive(), comp.log()  # the refusals end nothing
    code, answer = _post_review(url, apiserver)
    assert code == 200
