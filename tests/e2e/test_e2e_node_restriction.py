"""The agent's node restriction on the live API server: a token bound to a pod on node A
may write node A's Node and CustomNodeResource, and is refused node B's.

The shipped ValidatingAdmissionPolicy (deploy/manifests/agent-node-restriction.yaml) is
installed under a name of this test's own, for a ServiceAccount of this test's namespace
only, so it restricts nobody else on a shared cluster. Nodes A and B are Node objects
without a kubelet; the pod on A never runs. No node lock: nothing touches a real node."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pykatalyst.api import names
from pykatalyst.api.names import CUSTOM_NODE_RESOURCE, NODE
from pykatalyst.cluster.kube import KubeCluster
from pykatalyst.cluster.protocol import JSON, Forbidden
from tests.e2e.conftest import REPO, Kubectl

POLICY = REPO / "deploy" / "manifests" / "agent-node-restriction.yaml"
AGENT_RBAC = REPO / "deploy" / "manifests" / "agent-rbac.yaml"
CNR = "customnoderesources.node.katalyst.kubewharf.io"
SHIPPED_USER = f"system:serviceaccount:{names.SYSTEM_NAMESPACE}:katalyst-agent"


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _policy_for(namespace: str, suffix: str) -> list[dict[str, Any]]:
    """The shipped policy and binding, renamed and pointed at `namespace`'s agent account."""
    docs = _docs(POLICY)
    text = json.dumps(docs)
    assert SHIPPED_USER in text, "the policy no longer names the agent's ServiceAccount"
    text = text.replace(SHIPPED_USER, f"system:serviceaccount:{namespace}:katalyst-agent")
    out: list[dict[str, Any]] = json.loads(text)
    for doc in out:
        doc["metadata"]["name"] += suffix
        if doc["kind"] == "ValidatingAdmissionPolicyBinding":
            doc["spec"]["policyName"] += suffix
    return out


def _agent_role(namespace: str, suffix: str) -> list[dict[str, Any]]:
    role = next(d for d in _docs(AGENT_RBAC) if d["kind"] == "ClusterRole")
    role = {**role, "metadata": {"name": f"katalyst-agent{suffix}"}}
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"katalyst-agent{suffix}"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": role["metadata"]["name"],
        },
        "subjects": [{"kind": "ServiceAccount", "name": "katalyst-agent", "namespace": namespace}],
    }
    return [role, binding]


def _fake_node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"pykatalyst.test/fake": "true"}},
        "spec": {"taints": [{"key": "pykatalyst.test/fake", "effect": "NoSchedule"}]},
    }


def _cnr(name: str) -> dict[str, Any]:
    return {
        "apiVersion": names.CUSTOM_NODE_RESOURCE.api_version,
        "kind": names.CUSTOM_NODE_RESOURCE.kind,
        "metadata": {"name": name},
        "spec": {},
    }


class _Setup:
    def __init__(self, kubectl: Kubectl, namespace: str, tmp: Path) -> None:
        suffix = f"-e2e-{secrets.token_hex(3)}"
        self.kubectl, self.namespace, self.suffix = kubectl, namespace, suffix
        self.node_a, self.node_b = f"node-a{suffix}", f"node-b{suffix}"
        self.cluster_objects = [*_agent_role(namespace, suffix), *_policy_for(namespace, suffix)]
        self.kubeconfig = tmp / "agent.kubeconfig"

    def up(self) -> None:
        k = self.kubectl
        k.apply({"apiVersion": "v1", "kind": "List", "items": self.cluster_objects})
        k.apply(
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "katalyst-agent"}},
            "-n",
            self.namespace,
        )
        for node in (self.node_a, self.node_b):
            k.apply(_fake_node(node))
        k.apply(_cnr(self.node_b))
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "agent"},
            "spec": {
                "nodeName": self.node_a,
                "serviceAccountName": "katalyst-agent",
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "agent", "image": "pykatalyst.test/never-runs:1"}],
            },
        }
        k.apply(pod, "-n", self.namespace)
        token = k.run(
            "create", "token", "katalyst-agent", "-n", self.namespace,
            "--bound-object-kind", "Pod", "--bound-object-name", "agent", "--duration", "10m",
        ).stdout.strip()  # fmt: skip
        view = json.loads(k.run("config", "view", "--raw", "--minify", "-o", "json").stdout)
        cluster = view["clusters"][0]["cluster"]
        self.kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "c", "cluster": cluster}],
                    "users": [{"name": "agent", "user": {"token": token}}],
                    "contexts": [{"name": "c", "context": {"cluster": "c", "user": "agent"}}],
                    "current-context": "c",
                }
            )
        )

    def down(self) -> None:
        k = self.kubectl
        for kind, name in [
            ("node", self.node_a),
            ("node", self.node_b),
            (CNR, self.node_a),
            (CNR, self.node_b),
            *((d["kind"], d["metadata"]["name"]) for d in self.cluster_objects),
        ]:
            k.run("delete", kind, name, "--ignore-not-found", "--wait=false", check=False)

    def agent(self) -> KubeCluster:
        """The agent's own client, with the token."""
        return KubeCluster.from_kubeconfig(str(self.kubeconfig), None, qps=0)


def _refusal(write: Callable[[], object]) -> str:
    """The message of the policy's refusal of `write`, waiting the few seconds the API
    server takes to load a new policy; fails if the write is still allowed after 30 s."""
    deadline = time.monotonic() + 30
    while True:
        try:
            write()
        except Forbidden as e:
            return e.message
        assert time.monotonic() < deadline, "still allowed after 30 s"
        time.sleep(0.5)


@pytest.fixture
def setup(kubectl: Kubectl, namespace: str, tmp_path: Path) -> Iterator[_Setup]:
    if not POLICY.is_file():
        pytest.skip(f"the node-restriction policy {POLICY} is not in this checkout")
    s = _Setup(kubectl, namespace, tmp_path)
    try:
        s.up()
        yield s
    finally:
        s.down()


def _capacity(value: str) -> JSON:
    return {"status": {"capacity": {"pykatalyst.test/probe": value}}}


def test_the_agent_writes_its_own_node_and_cnr_and_no_other(setup: _Setup) -> None:
    a, b = setup.node_a, setup.node_b
    # the API server names the pod's node in the pod-bound token
    out = setup.kubectl.run(
        "--kubeconfig", str(setup.kubeconfig), "auth", "whoami", "-o", "json"
    ).stdout
    extra = json.loads(out)["status"]["userInfo"].get("extra", {})
    assert extra.get("authentication.kubernetes.io/node-name") == [a], out
    agent = setup.agent()
    try:
        err = _refusal(lambda: agent.patch(NODE, b, _capacity("1"), subresource="status"))
        assert f"may write only its own Node and CustomNodeResource, not nodes {b}" in err
        agent.patch(NODE, a, _capacity("1"), subresource="status")
        label = {"metadata": {"labels": {"pykatalyst.test/probe": "1"}}}
        agent.patch(NODE, a, label)
        with pytest.raises(Forbidden, match=f"not nodes {b}"):
            agent.patch(NODE, b, label)
        # its own CNR: created, then its status patched; no other node's
        agent.create(CUSTOM_NODE_RESOURCE, _cnr(a))
        with pytest.raises(Forbidden, match=f"not customnoderesources {b}-x"):
            agent.create(CUSTOM_NODE_RESOURCE, _cnr(f"{b}-x"))
        status = {"status": {"resourceAllocatable": {"cpu": "1"}}}
        agent.patch(CUSTOM_NODE_RESOURCE, a, status, subresource="status")
        with pytest.raises(Forbidden, match=f"not customnoderesources {b}"):
            agent.patch(CUSTOM_NODE_RESOURCE, b, status, subresource="status")
    finally:
        agent.close()


def test_a_token_bound_to_no_pod_is_refused(setup: _Setup) -> None:
    token = setup.kubectl.run(
        "create", "token", "katalyst-agent", "-n", setup.namespace, "--duration", "10m"
    ).stdout.strip()
    config = json.loads(setup.kubeconfig.read_text())
    config["users"][0]["user"]["token"] = token
    setup.kubeconfig.write_text(json.dumps(config))
    agent = setup.agent()
    try:
        err = _refusal(
            lambda: agent.patch(NODE, setup.node_a, _capacity("2"), subresource="status")
        )
        assert "the agent's token names no node" in err
    finally:
        agent.close()
