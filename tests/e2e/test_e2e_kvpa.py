"""KatalystVerticalPodAutoscalers on a real, unpatched v1.34 cluster: `katalyst controller
--controllers=vpa` (its own ServiceAccount, the RBAC in deploy/) resizes a Deployment's
running pod in place through `pods/resize` — restartCount 0, the new figures in the
container's status and in its cgroup — falls back to an eviction under
`BestEffortInplace` when the kubelet says Infeasible (the replacement pod gets the
recommendation from `katalyst webhook` at creation), leaves old pods alone under
ForFreshPod; a Katalyst-shaped KVPA is stored and served back unpruned; a malformed one is
refused or reported naming the field, and the controller keeps running."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pykatalyst.api import names
from tests.e2e.conftest import (
    REPO,
    WORKLOAD_IMAGE,
    Component,
    Kubectl,
    LocalNode,
    component_kubeconfig,
    wait_until,
)
from tests.e2e.pykatalyst_e2e import start_webhook

KVPA = names.KATALYST_VERTICAL_POD_AUTOSCALER
REC = names.VPA_RECOMMENDATION
# The v1alpha1 endpoint by name (kubectl's `kvpa` is the preferred version, v1alpha2).
KVPA_V1ALPHA1 = f"{KVPA.plural}.{KVPA.version}.{KVPA.group}"


def deployment(ns: str, name: str = "web", replicas: int = 1) -> dict[str, Any]:
    res = {
        "requests": {"cpu": "200m", "memory": "64Mi"},
        "limits": {"cpu": "400m", "memory": "128Mi"},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": ns,
            "annotations": {names.VPA_ENABLE_ANNOTATION: "true"},
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "c",
                            "image": WORKLOAD_IMAGE,
                            "imagePullPolicy": "Never",
                            "command": ["sleep", "36000"],
                            "resources": res,
                        }
                    ],
                },
            },
        },
    }


def kvpa(ns: str, strategy: str, matching: str = "All") -> dict[str, Any]:
    return {
        "apiVersion": KVPA.api_version,
        "kind": KVPA.kind,
        "metadata": {"name": "web", "namespace": ns},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "updatePolicy": {"podUpdatingStrategy": strategy, "podMatchingStrategy": matching},
            "resourcePolicy": {
                "algorithmPolicy": {"recommender": "e2e"},
                "containerPolicies": [
                    {"containerName": "c", "controlledResources": ["cpu", "memory"]}
                ],
            },
        },
    }


def vparec(kubectl: Kubectl, ns: str, cpu: tuple[str, str]) -> None:
    uid = kubectl.json("get", "kvpa", "web", "-n", ns)["metadata"]["uid"]
    kubectl.apply(
        {
            "apiVersion": REC.api_version,
            "kind": REC.kind,
            "metadata": {
                "name": "web",
                "namespace": ns,
                "ownerReferences": [
                    {"apiVersion": KVPA.api_version, "kind": KVPA.kind, "name": "web", "uid": uid}
                ],
            },
            "spec": {
                "containerRecommendations": [
                    {
                        "containerName": "c",
                        "requests": {"resources": {"cpu": cpu[0]}},
                        "limits": {"resources": {"cpu": cpu[1]}},
                    }
                ]
            },
        }
    )


@pytest.fixture
def vpa_controller(
    kubectl: Kubectl, namespace: str, components: Callable[..., Component]
) -> Component:
    kubectl.run("apply", "-f", str(REPO / "deploy" / "manifests" / "controller-rbac.yaml"))
    return components(
        "controller",
        "controller",
        "--kubeconfig",
        component_kubeconfig("controller"),
        "--controllers=vpa",
        "--period",
        "2s",
        "--resize-deferred-timeout",
        "20s",
        "--lease-name",
        f"katalyst-controller-{namespace}",
    )


@pytest.fixture
def pod_webhook(
    kubectl: Kubectl, namespace: str, components: Callable[..., Component], tmp_path: Path
) -> Iterator[str]:
    """`katalyst webhook` mutating this namespace's pods at creation, and validating its
    KVPAs, removed at the end."""
    _, url, ca = start_webhook(
        components, tmp_path / "certs", "--kubeconfig", str(kubectl.kubeconfig)
    )
    bundle = base64.b64encode(ca.read_bytes()).decode()
    scope = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}

    def hook(path: str, group: str, version: str, resource: str, ops: list[str]) -> Any:
        return {
            "name": f"{resource}.e2e.katalyst.kubewharf.io",
            "clientConfig": {"url": f"{url}{path}", "caBundle": bundle},
            "rules": [
                {
                    "apiGroups": [group],
                    "apiVersions": [version],
                    "operations": ops,
                    "resources": [resource],
                    "scope": "Namespaced",
                }
            ],
            "namespaceSelector": scope,
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "timeoutSeconds": 5,
            "admissionReviewVersions": ["v1"],
        }

    name = f"katalyst-e2e-{namespace}"
    mutating = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [hook("/mutate/pods", "", "v1", "pods", ["CREATE"])],
    }
    validating = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            hook("/validate/kvpa", KVPA.group, "v1alpha1", KVPA.plural, ["CREATE", "UPDATE"])
        ],
    }
    try:
        kubectl.apply(mutating)
        kubectl.apply(validating)
        yield namespace
    finally:
        for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
            kubectl.run("delete", kind, name, "--ignore-not-found", check=False)


def pods_of(kubectl: Kubectl, ns: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = kubectl.json("get", "pods", "-n", ns, "-l", "app=web")["items"]
    return items


def running(kubectl: Kubectl, ns: str, n: int = 1) -> list[dict[str, Any]]:
    def ready() -> list[dict[str, Any]] | None:
        pods = [
            p
            for p in pods_of(kubectl, ns)
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        ]
        return pods if len(pods) >= n else None

    result: list[dict[str, Any]] = wait_until(f"{n} running pod(s) of web", ready, 120)
    return result


def container_cgroup(node: LocalNode, pod: dict[str, Any], knob: str) -> str:
    cid = pod["status"]["containerStatuses"][0]["containerID"].split("://")[-1]
    path = node.crictl_json("inspect", cid)["info"]["runtimeSpec"]["linux"]["cgroupsPath"]
    controller = knob.split(".")[0]
    return (Path("/sys/fs/cgroup") / controller / path.lstrip("/") / knob).read_text().strip()


def condition(kubectl: Kubectl, ns: str, ctype: str) -> dict[str, Any]:
    obj = kubectl.json("get", "kvpa", "web", "-n", ns)
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return dict(c)
    return {}


def events(kubectl: Kubectl, ns: str, reason: str) -> list[dict[str, Any]]:
    items = kubectl.json("get", "events", "-n", ns)["items"]
    return [e for e in items if e.get("reason") == reason]


def _resize_state(kubectl: Kubectl, ns: str, controller: Component) -> str:
    """What a stalled in-place resize looked like: the pod's resources as asked and as the
    kubelet reports them, its conditions (PodResizePending / PodResizeInProgress), the
    namespace's Events and the end of the controller's log."""
    lines = []
    for pod in pods_of(kubectl, ns):
        status = pod.get("status") or {}
        reported = [c.get("resources") for c in status.get("containerStatuses") or []]
        conds = [
            (c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
            for c in status.get("conditions") or []
        ]
        lines += [
            f"pod {pod['metadata']['name']}: asked {pod['spec']['containers'][0].get('resources')}",
            f"  reported {reported}",
            f"  conditions {conds}",
        ]
    items = kubectl.json("get", "events", "-n", ns)["items"]
    lines.append(f"Events: {[(e.get('reason'), e.get('message')) for e in items]}")
    lines.append(f"the controller's log ends:\n{controller.log()[-2000:]}")
    return "\n".join(lines)


def test_inplace_resizes_a_running_pod_without_a_restart(
    kubectl: Kubectl, namespace: str, local_node: LocalNode, vpa_controller: Component
) -> None:
    ns = namespace
    kubectl.apply(deployment(ns))
    (before,) = running(kubectl, ns)
    assert container_cgroup(local_node, before, "cpu.cfs_quota_us") == "40000"
    kubectl.apply(kvpa(ns, "Inplace"))
    vparec(kubectl, ns, ("300m", "600m"))

    def resized() -> dict[str, Any] | None:
        (pod,) = pods_of(kubectl, ns)
        cs = pod["status"]["containerStatuses"][0]
        got = cs.get("resources", {})
        done = got.get("limits", {}).get("cpu") == "600m" and got["requests"]["cpu"] == "300m"
        return pod if done else None

    try:
        pod = wait_until("the kubelet to report 300m/600m", resized, 90)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_resize_state(kubectl, ns, vpa_controller)}") from None
    assert pod["metadata"]["uid"] == before["metadata"]["uid"]
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
    assert container_cgroup(local_node, pod, "cpu.cfs_quota_us") == "60000"
    assert container_cgroup(local_node, pod, "cpu.shares") == "307"
    ann = json.loads(pod["metadata"]["annotations"][names.POD_RESIZE_RESOURCES_ANNOTATION])
    assert ann["c"] == {"requests": {"cpu": "300m"}, "limits": {"cpu": "600m"}}
    wait_until(
        "RecommendationApplied=True",
        lambda: condition(kubectl, ns, "RecommendationApplied").get("status") == "True",
        30,
    )
    wait_until(
        "the ResizeRequested and Resized Events",
        lambda: events(kubectl, ns, "ResizeRequested") and events(kubectl, ns, "Resized"),
        30,
    )
    dep = kubectl.json("get", "deployment", "web", "-n", ns)
    assert dep["metadata"]["annotations"][names.VPA_NAME_ANNOTATION] == "web"
    assert vpa_controller.alive(), vpa_controller.log()


def test_an_infeasible_resize_falls_back_to_an_eviction_and_a_resized_pod(
    kubectl: Kubectl, namespace: str, vpa_controller: Component, pod_webhook: str
) -> None:
    ns = namespace
    kubectl.apply(deployment(ns))
    (old,) = running(kubectl, ns)
    kubectl.apply(kvpa(ns, "BestEffortInplace"))
    # more cpu than the node has: the kubelet answers PodResizePending/Infeasible
    vparec(kubectl, ns, ("8", "8"))

    def replaced() -> dict[str, Any] | None:
        new = [p for p in pods_of(kubectl, ns) if p["metadata"]["uid"] != old["metadata"]["uid"]]
        return new[0] if new else None

    new = wait_until("the evicted pod's replacement", replaced, 120)
    res = new["spec"]["containers"][0]["resources"]
    assert res["requests"]["cpu"] == "8" and res["limits"]["cpu"] == "8"

    # The controller's Event and status are written after the eviction, and the ReplicaSet's
    # replacement can come first: wait for them rather than read them once.
    def fallback_events() -> list[dict[str, Any]]:
        return [
            e
            for e in events(kubectl, ns, "ResizeFallbackEviction")
            if e["involvedObject"]["kind"] == "Pod"
        ]

    (ev,) = wait_until("the ResizeFallbackEviction Event on the pod", fallback_events, 30)
    assert "Infeasible" in ev["message"] and ev["involvedObject"]["name"] == old["metadata"]["name"]
    wait_until(
        "RecommendationApplied to say the update failed",
        lambda: (
            "failed to update" in condition(kubectl, ns, "RecommendationApplied").get("message", "")
        ),
        30,
    )
    assert vpa_controller.alive(), vpa_controller.log()


def _dry_run_cpu(kubectl: Kubectl, like: dict[str, Any]) -> str:
    """The cpu request the admission chain gives a new pod shaped as `like` (same owner,
    labels and spec), created with --dry-run=server."""
    meta = like["metadata"]
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{meta['name']}-probe",
            "namespace": meta["namespace"],
            "labels": meta.get("labels") or {},
            "ownerReferences": meta.get("ownerReferences") or [],
        },
        "spec": {k: v for k, v in like["spec"].items() if k != "nodeName"},
    }
    out = kubectl.run(
        "create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(probe)
    )
    cpu: str = json.loads(out.stdout)["spec"]["containers"][0]["resources"]["requests"]["cpu"]
    return cpu


def test_for_fresh_pod_leaves_the_old_pods_alone(
    kubectl: Kubectl, namespace: str, vpa_controller: Component, pod_webhook: str
) -> None:
    ns = namespace
    kubectl.apply(deployment(ns))
    (old,) = running(kubectl, ns)
    kubectl.apply(kvpa(ns, "Inplace", "PodMatchingStrategyForFreshPod"))
    vparec(kubectl, ns, ("300m", "600m"))
    wait_until(
        "the KVPA status to carry the recommendation",
        lambda: (
            kubectl.json("get", "kvpa", "web", "-n", ns).get("status", {}).get("containerResources")
        ),
        60,
    )
    # The webhook answers from its informers: wait until it has seen the status (a
    # server-side dry run of a pod of the workload goes through it and stores nothing).
    wait_until(
        "the webhook to give a new pod of the workload the recommendation",
        lambda: _dry_run_cpu(kubectl, old) == "300m",
        60,
        1,
    )
    kubectl.run("scale", "deployment", "web", "-n", ns, "--replicas=2")
    pods = running(kubectl, ns, 2)
    by_uid = {p["metadata"]["uid"]: p for p in pods}
    fresh = [p for uid, p in by_uid.items() if uid != old["metadata"]["uid"]]
    assert fresh[0]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "300m"
    kept = by_uid[old["metadata"]["uid"]]
    assert kept["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "200m"
    assert names.POD_RESIZE_RESOURCES_ANNOTATION not in (kept["metadata"].get("annotations") or {})
    assert kept["status"]["containerStatuses"][0]["restartCount"] == 0


def test_katalysts_kvpa_is_stored_and_served_back_unpruned(
    kubectl: Kubectl, namespace: str
) -> None:
    """The v1alpha1 shape Katalyst writes, spec and status, through the v1alpha2 storage."""
    ns = namespace
    body = kvpa(ns, "Inplace")
    body["metadata"]["annotations"] = {names.VPA_RETENTION_POLICY_ANNOTATION: "retain"}
    body["spec"]["resourcePolicy"]["algorithmPolicy"] = {
        "recommender": "AvgLoadToCpuRequest",
        "granularity": "Default",
    }
    body["spec"]["resourcePolicy"]["containerPolicies"] = [
        {
            "containerName": "c",
            "minAllowed": {"cpu": "100m"},
            "maxAllowed": {"cpu": "2", "memory": "1Gi"},
            "controlledResources": ["cpu", "memory"],
            "controlledValues": "RequestsOnly",
            "resourceResizePolicy": "Restart",
        }
    ]
    kubectl.apply(body)
    got = kubectl.json("get", KVPA_V1ALPHA1, "web", "-n", ns)
    assert got["apiVersion"] == KVPA.api_version
    assert got["metadata"]["annotations"][names.VPA_RETENTION_POLICY_ANNOTATION] == "retain"
    assert (
        got["spec"]["resourcePolicy"]["containerPolicies"]
        == body["spec"]["resourcePolicy"]["containerPolicies"]
    )
    assert got["spec"]["resourcePolicy"]["algorithmPolicy"]["granularity"] == "Default"
    status = {
        "containerResources": [
            {
                "containerName": "c",
                "requests": {
                    "target": {"cpu": "300m"},
                    "uncappedTarget": {"cpu": "300m"},
                    "lowerBound": {"cpu": "100m"},
                    "upperBound": {"cpu": "2"},
                    "current": {"cpu": "200m"},
                },
            }
        ],
        "podResources": [
            {
                "podName": "web-0",
                "containerRecommendations": [
                    {"containerName": "c", "requests": {"target": {"cpu": "1"}}}
                ],
            }
        ],
    }
    kubectl.run(
        "patch",
        KVPA_V1ALPHA1,
        "web",
        "-n",
        ns,
        "--subresource",
        "status",
        "--type",
        "merge",
        "-p",
        json.dumps({"status": status}),
    )
    back = kubectl.json("get", KVPA_V1ALPHA1, "web", "-n", ns)["status"]
    assert back["containerResources"] == status["containerResources"]
    assert back["podResources"] == status["podResources"]


def test_a_malformed_kvpa_is_reported_naming_the_field_and_nothing_stops(
    kubectl: Kubectl, namespace: str, vpa_controller: Component
) -> None:
    ns = namespace
    kubectl.apply(deployment(ns))
    (pod,) = running(kubectl, ns)
    body = kvpa(ns, "Inplace")
    body["spec"]["resourcePolicy"]["containerPolicies"][0].update(
        minAllowed={"cpu": "2"}, maxAllowed={"cpu": "1"}
    )
    kubectl.apply(body)  # no webhook here: the controller must cope
    vparec(kubectl, ns, ("300m", "600m"))
    cond = wait_until(
        "RecommendationUpdated=False naming the field",
        lambda: (
            (c := condition(kubectl, ns, "RecommendationUpdated")).get("reason") == "Illegal" and c
        ),
        60,
    )
    assert "containerPolicies[0].minAllowed.cpu" in cond["message"]
    wait_until("the InvalidKVPA Event", lambda: events(kubectl, ns, "InvalidKVPA"), 30)
    (now,) = pods_of(kubectl, ns)
    assert now["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "200m"
    assert now["metadata"]["uid"] == pod["metadata"]["uid"]
    assert vpa_controller.alive(), vpa_controller.log()


def test_the_webhook_refuses_a_bad_kvpa_naming_the_field(
    kubectl: Kubectl, namespace: str, pod_webhook: str
) -> None:
    ns = namespace
    body = kvpa(ns, "Inplace")
    body["spec"]["resourcePolicy"]["containerPolicies"][0]["controlledResources"] = ["gpu"]

    def refused() -> str | None:
        done = kubectl.run("create", "-f", "-", input=json.dumps(body), check=False)
        if done.returncode == 0:
            kubectl.run("delete", "kvpa", "web", "-n", ns, check=False)
            return None
        return done.stderr

    stderr = wait_until("the webhook to refuse the KVPA", refused, 30, interval=1)
    assert "controlledResources[0]" in stderr and "'gpu'" in stderr
    kubectl.apply(kvpa(ns, "Inplace"))
    other = kvpa(ns, "Inplace")
    other["metadata"]["name"] = "second"

    def overlap_refused() -> str | None:
        # the webhook reads KVPAs from a cache refreshed every second
        done = kubectl.run("create", "-f", "-", input=json.dumps(other), check=False)
        if done.returncode == 0:
            kubectl.run("delete", "kvpa", "second", "-n", ns, check=False)
            return None
        return done.stderr

    stderr = wait_until("the webhook to refuse a second KVPA", overlap_refused, 30, interval=1)
    assert "one KVPA per workload" in stderr and "spec.targetRef" in stderr
