"""The controllers on a real cluster: `katalyst controller --controllers=overcommit,kcc,
lifecycle` gives a Node its CNR and CNC, writes a NodeOvercommitConfig's ratios onto the Node
and takes them off when the config goes, and names the AdminQoSConfiguration that applies in
the Node's CNC (on a fake Node, no kubelet, made for the test and deleted after). On the real
node, with `katalyst webhook` registered for `nodes/status`, the kubelet's own status reports
come out overcommitted, and go back to the kubelet's figures when the config goes or the
webhook stops (run it under the node lock)."""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pykatalyst.api import names
from pykatalyst.api.quantity import Quantity
from tests.e2e.conftest import (
    REPO,
    Component,
    Kubectl,
    LocalNode,
    component_kubeconfig,
    wait_until,
)
from tests.e2e.fake_nodes import FAKE_KEY, FakeNodes, fake_nodes
from tests.e2e.pykatalyst_e2e import reclaimed_millicpu, start_agent, start_webhook

__all__ = ["fake_nodes"]

CPU = names.CPU_OVERCOMMIT_RATIO_ANNOTATION
POOL = names.OVERCOMMIT_NODE_POOL_LABEL


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
        "--interval",
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
    # The config's status follows the Node's annotations (same round or the next).
    wait_until(
        "the config's matchedNodeList",
        lambda: (
            (kubectl.json("get", "noc", node).get("status") or {}).get("matchedNodeList") == [node]
        ),
        30,
        1,
    )
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


def _noc(name: str, pool: str, cpu: str) -> dict[str, Any]:
    return {
        "apiVersion": names.NODE_OVERCOMMIT_CONFIG.api_version,
        "kind": "NodeOvercommitConfig",
        "metadata": {"name": name},
        "spec": {"nodeOvercommitSelectorVal": pool, "resourceOvercommitRatio": {"cpu": cpu}},
    }


def _node_webhook_config(name: str, url: str, ca: Path, pool: str) -> dict[str, Any]:
    """The node webhook exactly as deploy/ ships it (rules, failurePolicy, timeout), pointed
    at the test's webhook and limited to the node labelled with the test's pool."""
    shipped = REPO / "deploy" / "manifests" / "webhook-configurations.yaml"
    docs = yaml.safe_load_all(shipped.read_text())
    mutating = next(d for d in docs if d and d["kind"] == "MutatingWebhookConfiguration")
    hook = next(h for h in mutating["webhooks"] if h["name"] == "node.katalyst.kubewharf.io")
    hook["clientConfig"] = {
        "url": f"{url}/mutate/nodes",
        "caBundle": base64.b64encode(ca.read_bytes()).decode(),
    }
    hook["objectSelector"] = {"matchLabels": {POOL: pool}}
    return {
        "apiVersion": mutating["apiVersion"],
        "kind": mutating["kind"],
        "metadata": {"name": name},
        "webhooks": [hook],
    }


def _status(kubectl: Kubectl, node: str) -> dict[str, Any]:
    status: dict[str, Any] = kubectl.json("get", "node", node)["status"]
    return status


def _milli(kubectl: Kubectl, node: str, field: str = "allocatable") -> int:
    return Quantity.parse(_status(kubectl, node)[field]["cpu"]).milli_value()


def _ready(kubectl: Kubectl, node: str) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in _status(kubectl, node)["conditions"]
    )


def _refusal(kubectl: Kubectl, name: str) -> str:
    events = kubectl.json(
        "get", "events", "-n", "default", "--field-selector", f"involvedObject.name={name}"
    )["items"]
    found = [e for e in events if e["reason"] == names.EVENT_REASON_INVALID_OVERCOMMIT_CONFIG]
    return str(found[0]["message"]) if found else ""


@pytest.fixture
def overcommit_pool(kubectl: Kubectl, node_name: str) -> Iterator[str]:
    """The real node labelled into a pool of this test's own; at the end the label, the
    configs, the webhook configuration and every overcommit annotation are taken off."""
    pool = f"e2e-oc-{secrets.token_hex(3)}"
    kubectl.run("label", "node", node_name, f"{POOL}={pool}", "--overwrite")
    try:
        yield pool
    finally:
        kubectl.run(
            "delete", "mutatingwebhookconfiguration", pool, "--ignore-not-found", check=False
        )
        for suffix in ("", "-below-one", "-not-a-number"):
            kubectl.run("delete", "noc", pool + suffix, "--ignore-not-found", check=False)
        kubectl.run("label", "node", node_name, f"{POOL}-", check=False)
        keys = [*names.OVERCOMMIT_MANAGED_ANNOTATIONS, *_ORIGINALS]
        kubectl.run("annotate", "node", node_name, *(f"{k}-" for k in keys), check=False)
        kubectl.run("annotate", "kcnr", node_name, f"{CPU}-", check=False)
        kubectl.run(
            "delete",
            "lease",
            f"katalyst-controller-{pool}",
            "-n",
            names.SYSTEM_NAMESPACE,
            "--ignore-not-found",
            check=False,
        )


_ORIGINALS = (
    names.ORIGINAL_ALLOCATABLE_CPU_ANNOTATION,
    names.ORIGINAL_CAPACITY_CPU_ANNOTATION,
    names.ORIGINAL_ALLOCATABLE_MEMORY_ANNOTATION,
    names.ORIGINAL_CAPACITY_MEMORY_ANNOTATION,
)


def test_the_real_nodes_kubelet_reports_come_out_overcommitted_and_go_back(
    kubectl: Kubectl,
    node_name: str,
    overcommit_pool: str,
    components: Callable[..., Component],
    tmp_path: Path,
) -> None:
    node, pool = node_name, overcommit_pool
    kubelet_milli = _milli(kubectl, node)
    kubelet_capacity = _milli(kubectl, node, "capacity")
    kubelet_memory = _status(kubectl, node)["allocatable"]["memory"]
    kubectl.run("apply", "-f", str(REPO / "deploy" / "manifests" / "controller-rbac.yaml"))
    webhook, url, ca = start_webhook(components, tmp_path / "certs")
    kubectl.apply(_node_webhook_config(pool, url, ca, pool))
    components(
        "controller",
        "controller",
        "--kubeconfig",
        component_kubeconfig("controller"),
        "--controllers=overcommit",
        "--node-selector",
        f"{POOL}={pool}",
        "--interval",
        "2s",
        "--lease-name",
        f"katalyst-controller-{pool}",
    )
    kubectl.apply(_noc(pool, pool, "1.5"))
    # Katalyst's rounding: millicores times the ratio, truncated.
    want = kubelet_milli * 3 // 2
    wait_until("allocatable cpu x1.5", lambda: _milli(kubectl, node) == want, 90, interval=1)
    assert _milli(kubectl, node, "capacity") == kubelet_capacity * 3 // 2
    assert _status(kubectl, node)["allocatable"]["memory"] == kubelet_memory  # memory: ratio 1
    ann = _annotations(kubectl, node)
    assert Quantity.parse(ann[names.ORIGINAL_ALLOCATABLE_CPU_ANNOTATION]).milli_value() == (
        kubelet_milli
    )

    # Bad ratios are refused with an Event on the config and change nothing, although newer.
    kubectl.apply(_noc(f"{pool}-below-one", pool, "0.5"))
    kubectl.apply(_noc(f"{pool}-not-a-number", pool, "lots"))
    for name, shown in ((f"{pool}-below-one", "'0.5'"), (f"{pool}-not-a-number", "'lots'")):
        message = wait_until(f"the Event of {name}", lambda n=name: _refusal(kubectl, n), 30)
        assert shown in message and "resourceOvercommitRatio" in message, message
    described = kubectl.run("describe", "noc", f"{pool}-below-one").stdout
    assert names.EVENT_REASON_INVALID_OVERCOMMIT_CONFIG in described, described
    assert kubectl.json("get", "noc", pool)["status"]["matchedNodeList"] == [node]
    assert _annotations(kubectl, node)[CPU] == "1.5" and _milli(kubectl, node) == want
    for name in (f"{pool}-below-one", f"{pool}-not-a-number"):
        kubectl.run("delete", "noc", name)

    # The agent's realtime advice, on the node's CNR, caps the configured ratio.
    if kubectl.run("get", "kcnr", node, check=False).returncode == 0:
        kubectl.run("annotate", "kcnr", node, f"{CPU}=1.25", "--overwrite")
        capped = kubelet_milli * 5 // 4
        wait_until("allocatable capped at x1.25", lambda: _milli(kubectl, node) == capped, 60, 1)
        assert _annotations(kubectl, node)[names.REALTIME_CPU_OVERCOMMIT_RATIO_ANNOTATION] == "1.25"
        kubectl.run("annotate", "kcnr", node, f"{CPU}-")
        wait_until("allocatable x1.5 again", lambda: _milli(kubectl, node) == want, 60, 1)

    # Deleting the config restores the kubelet's figures on its next report.
    kubectl.run("delete", "noc", pool)
    wait_until("the kubelet's allocatable", lambda: _milli(kubectl, node) == kubelet_milli, 60, 1)
    assert CPU not in _annotations(kubectl, node)

    # The webhook down: the kubelet's reports still land (failurePolicy Ignore), unmutated.
    kubectl.apply(_noc(pool, pool, "1.5"))
    wait_until("allocatable cpu x1.5 again", lambda: _milli(kubectl, node) == want, 60, 1)
    webhook.kill()
    wait_until(
        "the kubelet's report to land with the webhook down",
        lambda: _milli(kubectl, node) == kubelet_milli,
        60,
        interval=1,
    )
    assert _ready(kubectl, node)
    assert "Traceback" not in webhook.log(), webhook.log()[-3000:]


KCC_POOL = "pykatalyst.e2e/kcc-pool"


def _aqc(namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    aqc = names.ADMIN_QOS_CONFIGURATION
    return {
        "apiVersion": aqc.api_version,
        "kind": aqc.kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def _picks(kubectl: Kubectl, nodes: list[str]) -> dict[str, str]:
    """Each node's AdminQoSConfiguration in its CNC ('' when none)."""
    out = {}
    for node in nodes:
        entries = _cnc_targets(kubectl, node)
        out[node] = next((e["configName"] for e in entries), "")
    return out


def _conditions(kubectl: Kubectl, kind: str, name: str, namespace: str) -> dict[str, Any]:
    status = kubectl.json("get", kind, name, "-n", namespace).get("status") or {}
    return {c["type"]: c for c in status.get("conditions") or []}


def test_dynamic_config_tiers_canary_and_conflict_on_the_api_server(
    kubectl: Kubectl,
    fake_nodes: FakeNodes,
    namespace: str,
    components: Callable[..., Component],
) -> None:
    """On fake Nodes: a single-node config beats a pool config beats the global one; a canary
    reaches only its share first; two pool configs at one priority mark a conflict."""
    pools = {"n0": "a", "n1": "a", "n2": "a", "n3": "a", "n4": "c"}
    nodes = {short: fake_nodes.add(short, labels={KCC_POOL: pool}) for short, pool in pools.items()}
    n = list(nodes.values())
    kubectl.run("apply", "-f", str(REPO / "deploy" / "manifests" / "controller-rbac.yaml"))
    lease = f"katalyst-controller-{fake_nodes.run}"
    ctl = components(
        "controller",
        "controller",
        "--kubeconfig",
        component_kubeconfig("controller"),
        "--controllers=lifecycle,kcc",
        "--node-selector",
        f"{FAKE_KEY}={fake_nodes.run}",
        "--interval",
        "2s",
        "--lease-name",
        lease,
    )
    try:
        aqc = names.ADMIN_QOS_CONFIGURATION
        kubectl.apply(
            {
                "apiVersion": names.KATALYST_CUSTOM_CONFIG.api_version,
                "kind": "KatalystCustomConfig",
                "metadata": {"name": "admin-qos", "namespace": namespace},
                "spec": {
                    "targetType": {
                        "group": aqc.group,
                        "version": aqc.version,
                        "resource": aqc.plural,
                    },
                    "nodeLabelSelectorAllowedKeyList": [{"priority": 1, "keyList": [KCC_POOL]}],
                },
            }
        )
        reclaim = {"reclaimedResourceConfig": {"enableReclaim": True}}
        kubectl.apply(_aqc(namespace, "global", {"config": reclaim}))
        kubectl.apply(
            _aqc(
                namespace,
                "only-n3",
                {
                    "ephemeralSelector": {"nodeNames": [n[3]], "lastDuration": "1h"},
                    "config": {"reclaimedResourceConfig": {"enableReclaim": False}},
                },
            )
        )
        # The pool config first reaches one of its three nodes (n3 is taken by its own).
        pool_spec: dict[str, Any] = {
            "nodeLabelSelector": f"{KCC_POOL}=a",
            "priority": 1,
            "config": {"reclaimedResourceConfig": {"enableReclaim": False}},
            "updateStrategy": {"rollingUpdate": {"canary": 1}},
        }
        kubectl.apply(_aqc(namespace, "pool-a", pool_spec))
        want = {n[0]: "pool-a", n[1]: "", n[2]: "", n[3]: "only-n3", n[4]: "global"}
        wait_until("the canary pick per node", lambda: _picks(kubectl, n) == want, 90, 1)

        # The config's own status follows the nodes' (written in the same round or the next).
        def rollout() -> tuple[Any, ...]:
            st = kubectl.json("get", aqc.plural, "pool-a", "-n", namespace).get("status") or {}
            return (st.get("targetNodes"), st.get("canaryNodes"), st.get("updatedTargetNodes"))

        wait_until("the pool config's rollout status 3/1/1", lambda: rollout() == (3, 1, 1), 30, 1)
        # The whole pool.
        pool_spec["updateStrategy"] = {"rollingUpdate": {"canary": "100%"}}
        kubectl.apply(_aqc(namespace, "pool-a", pool_spec))
        want = {**want, n[1]: "pool-a", n[2]: "pool-a"}
        wait_until("the rollout to the whole pool", lambda: _picks(kubectl, n) == want, 60, 1)

        # A second pool config at the same priority: a conflict, and the nodes keep theirs.
        twin = dict(pool_spec, nodeLabelSelector=f"{KCC_POOL} in (a)")
        kubectl.apply(_aqc(namespace, "pool-a-twin", twin))

        def kcc_conflict() -> str:
            conds = _conditions(kubectl, "kcc", "admin-qos", namespace)
            found = conds.get(names.KCC_CONDITION_CONFLICT, {})
            return str(found.get("message", "")) if found.get("status") == "True" else ""

        message = wait_until("the KCC's Conflict condition", kcc_conflict, 60, 1)
        assert f"{namespace}/pool-a" in message and f"{namespace}/pool-a-twin" in message
        for name in ("pool-a", "pool-a-twin"):
            # Written before the KCC's Conflict, so already there.
            conds = _conditions(kubectl, aqc.plural, name, namespace)
            conflict = conds.get(names.KCC_CONDITION_CONFLICT, {})
            assert conflict.get("reason") == names.KCC_REASON_SAME_PRIORITY, (name, conds)
        assert _picks(kubectl, n) == want
        kubectl.run("delete", aqc.plural, "pool-a-twin", "-n", namespace)
        wait_until("the conflict cleared", lambda: not kcc_conflict(), 60, 1)
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


def _explain_config(kubeconfig: str, node: str) -> dict[str, Any]:
    config: dict[str, Any] = _explain(kubeconfig, node)["config"]
    return config


def _explain(kubeconfig: str, node: str) -> dict[str, Any]:
    katalyst = str(Path(sys.executable).parent / "katalyst")
    done = subprocess.run(
        [katalyst, "explain", "node", node, "--kubeconfig", kubeconfig, "-o", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def _reclaimed(kubectl: Kubectl, node: str) -> tuple[int, int]:
    """The CNR's reclaimed (millicpu, memory bytes); ValueError until it has them."""
    cnr = kubectl.json("get", "kcnr", node)
    alloc = cnr.get("status", {}).get("resources", {}).get("allocatable", {})
    if names.RECLAIMED_MEMORY not in alloc:
        raise ValueError("the CNR has no reclaimed_memory yet")
    memory = Quantity.parse(str(alloc[names.RECLAIMED_MEMORY])).value()
    return reclaimed_millicpu(kubectl, node), memory


def test_the_running_agent_takes_a_changed_config_from_its_cnc(
    kubectl: Kubectl,
    kubeconfig: str,
    local_node: LocalNode,
    namespace: str,
    components: Callable[..., Component],
    tmp_path: Path,
) -> None:
    """On the real node (under the node lock): the controller names a single-node
    AdminQoSConfiguration in the node's CNC; the running agent puts it in force, and when
    reclaim is switched off in it the CNR's reclaimed capacity goes to 0, without a restart;
    `katalyst explain node` names the object and since when it is in force."""
    node = local_node.name
    kubectl.run("apply", "-f", str(REPO / "deploy" / "manifests" / "controller-rbac.yaml"))
    agent = start_agent(components, tmp_path, node, config={"config_ttl_s": 2})
    lease = f"katalyst-controller-{namespace}"
    controller = components(
        "controller",
        "controller",
        "--kubeconfig",
        component_kubeconfig("controller"),
        "--controllers=lifecycle,kcc",
        "--node-selector",
        f"kubernetes.io/hostname={node}",
        "--interval",
        "2s",
        "--lease-name",
        lease,
    )
    aqc = names.ADMIN_QOS_CONFIGURATION
    kubectl.apply(
        {
            "apiVersion": names.KATALYST_CUSTOM_CONFIG.api_version,
            "kind": "KatalystCustomConfig",
            "metadata": {"name": "admin-qos", "namespace": namespace},
            "spec": {
                "targetType": {"group": aqc.group, "version": aqc.version, "resource": aqc.plural}
            },
        }
    )

    def this_node(enable: bool) -> dict[str, Any]:
        return _aqc(
            namespace,
            "this-node",
            {
                "ephemeralSelector": {"nodeNames": [node], "lastDuration": "30m"},
                "config": {"reclaimedResourceConfig": {"enableReclaim": enable}},
            },
        )

    try:
        kubectl.apply(this_node(True))
        wait_until("the CNC to name it", lambda: _picks(kubectl, [node])[node] == "this-node", 60)

        def since() -> str | None:
            found = _explain_config(kubeconfig, node)["admin_qos"] or {}
            if found.get("name") != f"{namespace}/this-node":
                return None
            return found.get("in_force_since")

        first = wait_until("explain to show it in force", since, 60, interval=2)
        wait_until("reclaimed figures on the CNR", lambda: _reclaimed(kubectl, node), 60)
        pid = agent.proc.pid if agent.proc else None

        kubectl.apply(this_node(False))
        second = wait_until("the new version in force", lambda: (since() or "") > first, 60, 2)
        # On this small shared node the figures may already be 0 (a busy cpu zeroes them
        # all); with reclaim off they must be, whatever the load.
        wait_until("0 reclaimed with reclaim off", lambda: _reclaimed(kubectl, node) == (0, 0), 60)
        assert second and agent.alive() and agent.proc and agent.proc.pid == pid
        for comp in (agent, controller):
            assert "Traceback" not in comp.log(), comp.log()[-3000:]
    finally:
        kubectl.run("delete", aqc.plural, "this-node", "-n", namespace, check=False)
        wait_until("the CNC entry gone", lambda: not _picks(kubectl, [node])[node], 60)
        kubectl.run("delete", "kcc", "admin-qos", "-n", namespace, check=False)
        controller.stop()  # else it takes its lease again
        kubectl.run(
            "delete",
            "lease",
            lease,
            "-n",
            names.SYSTEM_NAMESPACE,
            "--ignore-not-found",
            check=False,
        )
