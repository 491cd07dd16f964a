"""The controllers on a real cluster: `katalyst controller --controllers=overcommit,kcc,
lifecycle` gives a Node its CNR and CNC, writes a NodeOvercommitConfig's ratios onto the Node
and takes them off when the config goes, and names the AdminQoSConfiguration that applies in
the Node's CNC. The Node is a fake one (no kubelet), made for the test and deleted after."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pykatalyst.api import names
from tests.e2e.conftest import REPO, Component, Kubectl, component_kubeconfig, wait_until

CPU = names.CPU_OVERCOMMIT_RATIO_ANNOTATION


def _annotations(kubectl: Kubectl, node: str) -> dict[str, str]:
    return kubectl.json("get", "node", node)["metadata"].get("annotations") or {}


def _cnc_targets(kubectl: Kubectl, node: str) -> list[dict[str, Any]]:
    cnc = kubectl.json("get", "kcnc", node)
    return (cnc.get("status") or {}).get("katalystCustomConfigList") or []


@pytest.fixture
def fake_node(kubectl: Kubectl) -> Iterator[str]:
    """A Node object with no kubelet behind it: unschedulable and tainted, so no pod lands
    there, and labelled for this test alone."""
    name = f"e2e-ctrl-{secrets.token_hex(3)}"
    kubectl.apply(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    "pykatalyst.e2e/controllers": name,
                    names.OVERCOMMIT_NODE_POOL_LABEL: name,
                },
            },
            "spec": {
                "unschedulable": True,
                "taints": [{"key": "pykatalyst.e2e/fake", "effect": "NoSchedule"}],
            },
        }
    )
    yield name
    kubectl.run("delete", "node", name, "--wait=false", check=False)
    kubectl.run("delete", "noc", name, "--ignore-not-found", check=False)
    for kind in ("kcnr", "kcnc"):
        kubectl.run("delete", kind, name, "--ignore-not-found", "--wait=false", check=False)
    kubectl.run(
        "delete",
        "lease",
        f"katalyst-controller-{name}",
        "-n",
        names.SYSTEM_NAMESPACE,
        "--ignore-not-found",
        check=False,
    )


def test_overcommit_kcc_and_lifecycle_on_a_fake_node(
    kubectl: Kubectl,
    fake_node: str,
    namespace: str,
    components: Callable[..., Component],
) -> None:
    node = fake_node
    # The controller's role as this checkout ships it.
    kubectl.run("apply", "-f", str(REPO / "deploy" / "manifests" / "controller-rbac.yaml"))
    ctl = components(
        "controller",
        "controller",
        "--kubeconfig",
        component_kubeconfig("controller"),
        "--controllers=overcommit,kcc,lifecycle",
        "--node-selector",
        f"pykatalyst.e2e/controllers={node}",
        "--period",
        "2s",
        "--lease-name",
        f"katalyst-controller-{node}",
    )
    uid = kubectl.json("get", "node", node)["metadata"]["uid"]

    def owned(kind: str) -> bool:
        refs = kubectl.json("get", kind, node)["metadata"].get("ownerReferences") or []
        return any(r.get("kind") == "Node" and r.get("uid") == uid for r in refs)

    wait_until("the Node's CNR and CNC, owned by it", lambda: owned("kcnr") and owned("kcnc"), 90)

    kubectl.apply(
        {
            "apiVersion": names.NODE_OVERCOMMIT_CONFIG.api_version,
            "kind": "NodeOvercommitConfig",
            "metadata": {"name": node},
            "spec": {"nodeOvercommitSelectorVal": node, "resourceOvercommitRatio": {"cpu": "1.5"}},
        }
    )
    wait_until(
        "the overcommit annotations", lambda: _annotations(kubectl, node).get(CPU) == "1.5", 60
    )
    ann = _annotations(kubectl, node)
    assert ann[names.MEMORY_OVERCOMMIT_RATIO_ANNOTATION] == "1"
    status = kubectl.json("get", "noc", node).get("status") or {}
    assert status.get("matchedNodeList") == [node]
    kubectl.run("delete", "noc", node)
    wait_until("the annotations gone", lambda: CPU not in _annotations(kubectl, node), 60)

    aqc = names.ADMIN_QOS_CONFIGURATION
    kubectl.apply(
        {
            "apiVersion": names.KATALYST_CUSTOM_CONFIG.api_version,
            "kind": "KatalystCustomConfig",
            "metadata": {"name": "admin-qos", "namespace": namespace},
            "spec": {
                "targetType": {"group": aqc.group, "version": aqc.version, "resource": aqc.plural},
                "nodeLabelSelectorAllowedKeyList": [
                    {"priority": 1, "keyList": ["pykatalyst.e2e/controllers"]}
                ],
            },
        }
    )
    kubectl.apply(
        {
            "apiVersion": aqc.api_version,
            "kind": aqc.kind,
            "metadata": {"name": "e2e-node", "namespace": namespace},
            "spec": {
                "nodeLabelSelector": f"pykatalyst.e2e/controllers={node}",
                "priority": 1,
                "config": {"reclaimedResourceConfig": {"enableReclaim": True}},
            },
        }
    )

    def named() -> bool:
        return any(
            t.get("configName") == "e2e-node" and t.get("configNamespace") == namespace
            for t in _cnc_targets(kubectl, node)
        )

    wait_until("the CNC to name the AdminQoSConfiguration", named, 60)

    def target_status() -> dict[str, Any]:
        obj = kubectl.json("get", aqc.plural, "e2e-node", "-n", namespace)
        status: dict[str, Any] = obj.get("status") or {}
        return status

    wait_until("the AdminQoSConfiguration's status", lambda: target_status().get("targetNodes"), 30)
    assert target_status()["updatedTargetNodes"] == 1
    assert "Traceback" not in ctl.log(), ctl.log()[-3000:]
    kubectl.run("delete", "kcc", "admin-qos", "-n", namespace)
    # Deleting the Node deletes its CNR and CNC (the garbage collector, or the orphan sweep).
    kubectl.run("delete", "node", node)
    wait_until(
        "the CNR and CNC gone with the Node",
        lambda: (
            kubectl.run("get", "kcnr", node, check=False).returncode != 0
            and kubectl.run("get", "kcnc", node, check=False).returncode != 0
        ),
        120,
    )
