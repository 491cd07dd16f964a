"""Each component's RBAC on the live API server: `kubectl auth can-i --as` its
ServiceAccount allows every call its code makes (the hand-kept list that
tests/deploy checks against recorded runs) and refuses what it must not do.

Checks the roles installed in the cluster: apply `deploy/manifests/*-rbac.yaml` first."""

from __future__ import annotations

import pytest

from pykatalyst.api import names
from tests.deploy.test_deploy_manifests import HAND_KEPT, Need
from tests.e2e.conftest import Kubectl

ACCOUNTS = {
    command: f"system:serviceaccount:{names.SYSTEM_NAMESPACE}:katalyst-{command}"
    for command in HAND_KEPT
}
CNR = "customnoderesources.node.katalyst.kubewharf.io"
# What each component must not be able to do (resource, verb, subresource, namespace).
DENIED: dict[str, list[tuple[str, str, str | None, str | None]]] = {
    "agent": [
        ("nodes", "delete", None, None),
        ("nodes", "update", None, None),
        ("nodes", "list", None, None),
        (CNR, "delete", None, None),
        (CNR, "update", None, None),
        (CNR, "list", None, None),
        (CNR, "update", "status", None),
        ("adminqosconfigurations.config.katalyst.kubewharf.io", "update", None, None),
        ("customnodeconfigs.config.katalyst.kubewharf.io", "list", None, None),
        ("pods", "delete", None, "default"),
        ("pods", "create", None, "default"),
        ("events", "update", None, "default"),
        ("events", "delete", None, "default"),
        ("secrets", "get", None, names.SYSTEM_NAMESPACE),
    ],
    # (the lifecycle controller deletes orphaned CNRs; overcommit patches Node annotations)
    "controller": [
        (CNR, "update", None, None),
        ("nodes", "delete", None, None),
        ("nodes", "update", None, None),
        ("pods", "delete", None, "default"),
        ("events", "update", None, "default"),
        ("leases.coordination.k8s.io", "get", None, "default"),
    ],
    "scheduler": [
        ("nodes", "get", None, None),
        (CNR, "patch", None, None),
        ("pods", "delete", None, "default"),
        ("pods", "patch", "status", "default"),
        ("events", "update", None, "default"),
    ],
}


def _resource(need: Need) -> tuple[str, str | None]:
    plural, _, sub = need.resource.partition("/")
    return (f"{plural}.{need.group}" if need.group else plural), (sub or None)


def _can_i(
    kubectl: Kubectl, account: str, verb: str, resource: str, sub: str | None, ns: str | None
) -> bool:
    args = ["auth", "can-i", verb, resource, "--as", account]
    if sub:
        args.append(f"--subresource={sub}")
    args += ["-n", ns] if ns else ["--all-namespaces"]
    proc = kubectl.run(*args, check=False)
    answer = proc.stdout.strip()
    assert answer in ("yes", "no"), f"kubectl {' '.join(args)}: {proc.stderr.strip()}"
    return answer == "yes"


def _installed(kubectl: Kubectl, command: str) -> None:
    proc = kubectl.run("get", "clusterrole", f"katalyst-{command}", check=False)
    if proc.returncode != 0:
        pytest.skip(f"the katalyst-{command} ClusterRole is not installed in this cluster")


@pytest.mark.parametrize("command", sorted(HAND_KEPT))
def test_every_call_the_component_makes_is_allowed(kubectl: Kubectl, command: str) -> None:
    _installed(kubectl, command)
    refused = []
    for need in HAND_KEPT[command]:
        resource, sub = _resource(need)
        ns = need.namespace or ("default" if need.resource.startswith(("pods", "events")) else None)
        if not _can_i(kubectl, ACCOUNTS[command], need.verb, resource, sub, ns):
            refused.append(need)
    assert not refused, f"the API server refuses katalyst {command}: {refused}"


@pytest.mark.parametrize("command", sorted(DENIED))
def test_what_the_component_must_not_do_is_denied(kubectl: Kubectl, command: str) -> None:
    _installed(kubectl, command)
    allowed = [
        (verb, resource, sub, ns)
        for resource, verb, sub, ns in DENIED[command]
        if _can_i(kubectl, ACCOUNTS[command], verb, resource, sub, ns)
    ]
    assert not allowed, f"katalyst {command} may still: {allowed}"
