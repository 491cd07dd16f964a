"""Service profiles and ResourceRecommend on a real cluster.

- A Deployment annotated spd.katalyst.kubewharf.io/enable gets its SPD and its pod the SPD's
  name; when the SPD's business level turns Poor, the agent on the real node stops lending
  the pod's idle memory to reclaimed pods, and `katalyst explain pod` says why.
- A malformed ResourceRecommend or SPD gets a condition or Event naming the field.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pykatalyst.api import names
from tests.e2e.conftest import REPO, Component, Kubectl, component_kubeconfig, wait_until
from tests.e2e.pykatalyst_e2e import (
    SLEEP,
    example,
    fit_to_node,
    reclaimed_memory,
    start_agent,
)

RR_EXAMPLE = "resource-recommend-quickstart.yaml"
pytestmark = pytest.mark.timeout(600)


def controller(components: Callable[..., Component], *args: str) -> Component:
    return components(
        "controller",
        "controller",
        "--kubeconfig",
        component_kubeconfig("controller"),
        "--no-leader-elect",
        "--period",
        "2s",
        *args,
    )


def deployment_of(doc: dict[str, Any], namespace: str, command: str) -> dict[str, Any]:
    """The example Deployment with its pod template fitted to the node."""
    out = copy.deepcopy(doc)
    out["metadata"]["namespace"] = namespace
    template = out["spec"]["template"]
    pod = fit_to_node(
        {"metadata": template["metadata"], "spec": template["spec"]}, namespace, command
    )
    pod["metadata"].pop("namespace", None)
    pod["spec"].pop("schedulerName", None)  # the default scheduler places it here
    out["spec"]["template"] = pod
    return out


def conditions(kubectl: Kubectl, namespace: str, name: str) -> dict[str, dict[str, Any]]:
    obj = kubectl.json("get", "rec", name, "-n", namespace)
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def test_a_malformed_rr_and_spd_are_told_naming_the_field(
    kubectl: Kubectl, namespace: str, components: Callable[..., Component]
) -> None:
    docs = example(RR_EXAMPLE)
    dep = next(d for d in docs if d["kind"] == "Deployment")
    kubectl.apply(deployment_of(dep, namespace, SLEEP))
    rec = copy.deepcopy(next(d for d in docs if d["kind"] == "ResourceRecommend"))
    rec["metadata"]["namespace"] = namespace
    rec["spec"]["resourcePolicy"]["containerPolicies"][0]["controlledResourcesPolicies"][0][
        "resourceName"
    ] = "nvidia.com/gpu"
    kubectl.apply(rec)
    spd = {
        "apiVersion": names.SERVICE_PROFILE_DESCRIPTOR.api_version,
        "kind": names.SERVICE_PROFILE_DESCRIPTOR.kind,
        "metadata": {"name": "typo", "namespace": namespace},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "nope"},
            "businessIndicator": [
                {"name": "RPCLatency", "indicators": [{"indicatorLevel": "Upper", "value": 100}]}
            ],
        },
    }
    kubectl.apply(spd)
    ctl = controller(components, "--controllers=resourcerecommender,spd")
    name = rec["metadata"]["name"]

    def refused() -> dict[str, Any]:
        c = conditions(kubectl, namespace, name).get("Validated") or {}
        return c if c.get("status") == "False" else {}

    cond = wait_until("Validated=False", refused, 60, 2)
    assert cond["reason"] == "ResourceNameUnsupported"
    assert "controlledResourcesPolicies[0].resourceName: 'nvidia.com/gpu'" in cond["message"]

    def event() -> list[dict[str, Any]]:
        items = kubectl.json("get", "events", "-n", namespace)["items"]
        return [e for e in items if e["involvedObject"].get("name") == "typo"]

    (ev,) = wait_until("an Event on the bad SPD", event, 60, 2)
    assert "spec.businessIndicator[0].indicators[0].indicatorLevel" in ev["message"]
    assert ctl.alive()


def _pod_entry(kubectl: Kubectl, node: str, uid: str) -> dict[str, Any]:
    cnr = kubectl.json("get", "kcnr", node)
    pools = json.loads(cnr["metadata"]["annotations"][names.CPU_POOLS_ANNOTATION])
    return next((p for p in pools["pods"] if p["uid"] == uid), {})


def test_a_poor_business_level_turns_reclaim_off_for_that_pod_on_the_real_node(
    kubectl: Kubectl,
    namespace: str,
    node_name: str,
    components: Callable[..., Component],
    tmp_path: Path,
) -> None:
    docs = example(RR_EXAMPLE)
    dep = deployment_of(next(d for d in docs if d["kind"] == "Deployment"), namespace, SLEEP)
    dep["metadata"]["name"] = "web"
    dep["metadata"]["annotations"] = {names.SPD_ENABLE_ANNOTATION: "true"}
    dep["spec"]["selector"] = {"matchLabels": {"app": "web"}}
    dep["spec"]["template"]["metadata"]["labels"] = {"app": "web"}
    for c in dep["spec"]["template"]["spec"]["containers"]:
        c["resources"] = {
            "requests": {"cpu": "200m", "memory": "1Gi"},
            "limits": {"cpu": "200m", "memory": "1Gi"},
        }
    kubectl.apply(dep)
    start_agent(components, tmp_path, node_name, config={"config_ttl_s": 2})
    controller(components, "--controllers=spd", "--spd-qos-baseline-percent=shared_cores=0")
    spd = wait_until(
        "the Deployment's SPD",
        lambda: kubectl.json("get", "spd", "web", "-n", namespace),
        60,
        2,
    )
    assert spd["spec"]["baselinePercent"] == 0
    assert spd["metadata"]["ownerReferences"][0]["kind"] == "Deployment"

    def stamped_pod() -> dict[str, Any]:
        for p in kubectl.json("get", "pods", "-n", namespace, "-l", "app=web")["items"]:
            ann = p["metadata"].get("annotations") or {}
            if (
                ann.get(names.SPD_NAME_ANNOTATION) == "web"
                and p["status"].get("phase") == "Running"
            ):
                return dict(p)
        return {}

    pod = wait_until("the pod stamped with its SPD and running", stamped_pod, 120, 2)
    uid = pod["metadata"]["uid"]
    wait_until("the agent places the pod", lambda: _pod_entry(kubectl, node_name, uid), 60, 2)
    wait_until(
        "the published reclaimed memory", lambda: reclaimed_memory(kubectl, node_name), 90, 2
    )
    time.sleep(10)  # a few reports with the pod lending
    before = reclaimed_memory(kubectl, node_name)
    assert "reclaim_off" not in _pod_entry(kubectl, node_name, uid)

    body = {
        "spec": {
            "businessIndicator": [
                {
                    "name": "RPCLatency",
                    "indicators": [{"indicatorLevel": "UpperBound", "value": 100}],
                }
            ]
        }
    }
    kubectl.run("patch", "spd", "web", "-n", namespace, "--type=merge", "-p", json.dumps(body))
    status = {"status": {"businessStatus": [{"name": "RPCLatency", "current": 150}]}}
    kubectl.run(
        "patch",
        "spd",
        "web",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(status),
    )
    entry = wait_until(
        "the agent's word that the pod lends nothing",
        lambda: _pod_entry(kubectl, node_name, uid).get("reclaim_off"),
        60,
        2,
    )
    assert "Poor" in entry and "RPCLatency 150 > UpperBound 100" in entry
    wait_until(
        "the published reclaimed memory to lose most of the pod's idle 1Gi",
        lambda: reclaimed_memory(kubectl, node_name) <= before - 768 * 2**20,
        60,
        2,
    )
    explain = subprocess.run(
        [
            str(Path(sys.executable).parent / "katalyst"),
            "explain",
            "pod",
            f"{namespace}/{pod['metadata']['name']}",
            "--kubeconfig",
            os.environ["KUBECONFIG"],
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert explain.returncode == 0, explain.stderr
    report = json.loads(explain.stdout)
    assert "Poor" in report["placement"]["reclaim"]
