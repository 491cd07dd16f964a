"""Config objects the API server stores but a component cannot use, on a real cluster: the
component skips them, writes a Warning Event on the object (read back as `kubectl get
events` does) and counts them in `katalyst_<component>_objects_skipped_total` on its
/metrics. The webhook meets a ServiceProfileDescriptor whose targetRef names no workload;
the KCC controller an AdminQoSConfiguration whose node selector uses a key its KCC does
not allow. Neither runs an agent nor touches the node: no node lock."""

from __future__ import annotations

import os
import secrets
import ssl
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from pykatalyst.api import names
from tests.e2e.conftest import REPO, Component, Kubectl, component_kubeconfig, wait_until
from tests.e2e.fake_nodes import free_port
from tests.e2e.pykatalyst_e2e import start_webhook


def _warning(kubectl: Kubectl, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
    for e in kubectl.json("get", "events", "-n", namespace)["items"]:
        obj = e["involvedObject"]
        if obj.get("kind") == kind and obj.get("name") == name and e.get("type") == "Warning":
            return dict(e)
    return None


def _skipped(text: str, metric: str, kind: str, reason: str) -> float:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == metric and s.labels == {"kind": kind, "reason": reason}:
                return float(s.value)
    return 0.0


def test_the_webhook_tells_and_counts_an_spd_naming_no_workload(
    kubectl: Kubectl,
    namespace: str,
    components: Callable[..., Component],
    tmp_path: Path,
) -> None:
    admin = os.environ.get("KUBECONFIG", "")
    comp, url, ca = start_webhook(components, tmp_path / "certs", "--kubeconfig", admin)
    spd = names.SERVICE_PROFILE_DESCRIPTOR
    # the CRD's schema wants a kind and a name: an empty name passes it
    kubectl.apply(
        {
            "apiVersion": spd.api_version,
            "kind": spd.kind,
            "metadata": {"name": "no-workload", "namespace": namespace},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": ""}},
        }
    )
    event = wait_until(
        "the webhook's Warning Event on the SPD",
        lambda: _warning(kubectl, namespace, spd.kind, "no-workload"),
        60,
    )
    assert event["reason"] == names.EVENT_REASON_INVALID_CONFIG
    assert event["source"]["component"] == names.WEBHOOK_COMPONENT
    assert "spec.targetRef" in event["message"], event["message"]
    trust = ssl.create_default_context(cafile=str(ca))

    def counted() -> float:
        with urllib.request.urlopen(f"{url}/metrics", context=trust, timeout=5) as r:
            text = r.read().decode()
        return _skipped(text, "katalyst_webhook_objects_skipped_total", spd.kind, "invalid")

    wait_until("the skip on the webhook's /metrics", lambda: counted() >= 1, 30)
    assert comp.alive() and "Traceback" not in comp.log(), comp.log()[-3000:]


def test_the_kcc_controller_tells_and_counts_a_refused_admin_qos_config(
    kubectl: Kubectl,
    namespace: str,
    components: Callable[..., Component],
) -> None:
    aqc = names.ADMIN_QOS_CONFIGURATION
    tag = secrets.token_hex(3)
    kubectl.run("apply", "-f", str(REPO / "deploy" / "manifests" / "controller-rbac.yaml"))
    port = free_port()
    lease = f"katalyst-controller-skip-{tag}"
    ctl = components(
        "controller",
        "controller",
        "--kubeconfig",
        component_kubeconfig("controller"),
        "--controllers=kcc",
        # no Node carries this label: the test's CNC writes touch nobody's nodes
        "--node-selector",
        f"pykatalyst.e2e/skipped={tag}",
        "--interval",
        "2s",
        "--lease-name",
        lease,
        "--listen",
        f"127.0.0.1:{port}",
    )
    try:
        kubectl.apply(
            {
                "apiVersion": names.KATALYST_CUSTOM_CONFIG.api_version,
                "kind": names.KATALYST_CUSTOM_CONFIG.kind,
                "metadata": {"name": "admin-qos", "namespace": namespace},
                "spec": {
                    "targetType": {
                        "group": aqc.group,
                        "version": aqc.version,
                        "resource": aqc.plural,
                    },
                    "nodeLabelSelectorAllowedKeyList": [
                        {"priority": 1, "keyList": ["pykatalyst.e2e/skipped"]}
                    ],
                },
            }
        )
        kubectl.apply(
            {
                "apiVersion": aqc.api_version,
                "kind": aqc.kind,
                "metadata": {"name": "wrong-key", "namespace": namespace},
                "spec": {"nodeLabelSelector": "not-allowed=x", "priority": 1, "config": {}},
            }
        )
        event = wait_until(
            "the controller's Warning Event on the AdminQoSConfiguration",
            lambda: _warning(kubectl, namespace, aqc.kind, "wrong-key"),
            60,
        )
        assert event["reason"] == names.EVENT_REASON_INVALID_CONFIG
        assert event["source"]["component"] == names.CONTROLLER_COMPONENT
        assert "not-allowed" in event["message"], event["message"]

        def counted() -> float:
            assert ctl.alive(), ctl.log()[-3000:]
            url = f"http://127.0.0.1:{port}/metrics"
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    text = r.read().decode()
            except OSError:
                # not serving yet: the Event may have come first from another KCC controller
                # (a node lane's, beside this one), while this one was still starting
                return -1.0
            return _skipped(text, "katalyst_controller_objects_skipped_total", aqc.kind, "invalid")

        wait_until("the skip on the controller's /metrics", lambda: counted() >= 2, 30)
        assert "Traceback" not in ctl.log(), ctl.log()[-3000:]
    finally:
        kubectl.run("delete", "kcc", "admin-qos", "-n", namespace, check=False)
        kubectl.run(
            "delete",
            "lease",
            lease,
            "-n",
            names.SYSTEM_NAMESPACE,
            "--ignore-not-found",
            check=False,
        )
