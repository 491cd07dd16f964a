"""Service profiles and ResourceRecommend on a real cluster.

- Katalyst's ResourceRecommend quick start, applied as written (the workload image swapped for
  the local one), gets its recommendation from the real Prometheus that scripts/cluster.sh
  runs (scraping the kubelet's cAdvisor endpoint over TLS; the readiness span shortened from
  24 h to 60 s); with Prometheus unreachable the condition says so and the recommendation
  stays.
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
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pykatalyst.api import names
from pykatalyst.api.quantity import Quantity
from tests.e2e.conftest import REPO, Component, Kubectl, component_kubeconfig, wait_until
from tests.e2e.pykatalyst_e2e import (
    BURN,
    SLEEP,
    example,
    fit_to_node,
    reclaimed_memory,
    start_agent,
)

RR_EXAMPLE = "resource-recommend-quickstart.yaml"
# Prometheus needs a few minutes of samples before the first recommendation.
pytestmark = pytest.mark.timeout(660)


def prometheus_url() -> str:
    url = os.environ.get("PYKATALYST_PROMETHEUS_URL", "")
    if not url:
        pytest.skip("no Prometheus (PYKATALYST_PROMETHEUS_URL; `cluster.sh env` sets it)")
    return url


def prom_query(url: str, query: str) -> list[dict[str, Any]]:
    full = f"{url}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    with urllib.request.urlopen(full, timeout=10) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return list(body["data"]["result"])


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


def test_katalysts_rr_quick_start_gets_a_recommendation_from_the_real_prometheus(
    kubectl: Kubectl, namespace: str, components: Callable[..., Component]
) -> None:
    url = prometheus_url()
    docs = example(RR_EXAMPLE)
    dep = next(d for d in docs if d["kind"] == "Deployment")
    rec = copy.deepcopy(next(d for d in docs if d["kind"] == "ResourceRecommend"))
    rec["metadata"]["namespace"] = namespace
    kubectl.apply(deployment_of(dep, namespace, BURN))
    name = rec["metadata"]["name"]
    # Katalyst's query is a rate over 30 s of the counter Prometheus scrapes every 10 s, at
    # a 1-minute step from 25 h before the controller's first run to that run: the samples
    # it reads end there, and it needs two a minute apart (the readiness span below). A
    # scrape the loaded machine misses can leave a step without a rate, so wait for four
    # points of the query (three minutes): the controller then reads four, and two may fail.
    rate = (
        f'rate(container_cpu_usage_seconds_total{{namespace="{namespace}",container="stress"}}'
        "[30s])"
    )

    def points() -> float:
        got = prom_query(url, f"count_over_time({rate}[5m:1m])")
        return max((float(r["value"][1]) for r in got), default=0.0)

    wait_until("four points of Katalyst's cpu query in Prometheus", lambda: points() >= 4, 360, 5)
    kubectl.apply(rec)
    first = controller(
        components,
        "--controllers=resourcerecommender",
        f"--resourcerecommend-prometheus-address={url}",
        "--resource-recommend-min-span=60s",
        "--resource-recommend-retry=5s",
    )

    def provided() -> bool:
        assert first.alive(), first.log()[-3000:]
        c = conditions(kubectl, namespace, name).get("RecommendationProvided") or {}
        return c.get("status") == "True"

    try:
        wait_until("RecommendationProvided=True", provided, 180, 2)
    except AssertionError as exc:
        seen = {
            t: (c.get("status"), c.get("reason"), c.get("message"))
            for t, c in conditions(kubectl, namespace, name).items()
        }
        raw = prom_query(
            url,
            f'container_cpu_usage_seconds_total{{namespace="{namespace}",container="stress"}}[10m]',
        )
        scraped = [[round(float(t), 1) for t, _ in r.get("values", [])] for r in raw]
        raise AssertionError(
            f"{exc}\nthe RR's conditions: {seen}\nthe query's points now: {points()}"
            f"\nthe counter's samples (the last 10 min): {scraped}"
            f"\nthe controller's log ends:\n{first.log()[-3000:]}"
        ) from None
    obj = kubectl.json("get", "rec", name, "-n", namespace)
    status = obj["status"]
    conds = conditions(kubectl, namespace, name)
    assert [conds[t]["status"] for t in ("Validated", "Initialized")] == ["True", "True"]
    assert status["observedGeneration"] == obj["metadata"]["generation"]
    assert status["lastRecommendationTime"]
    (target,) = status["recommendResources"]["containerRecommendations"]
    assert target["containerName"] == "stress"
    cores = Quantity.parse(target["requests"]["target"]["cpu"]).milli_value() / 1000
    memory = Quantity.parse(target["requests"]["target"]["memory"]).value()
    # the container burns its 200m limit: p90 of its usage × 1.1 (bufferPercent 10)
    assert 0.1 <= cores <= 0.4, target
    assert 0 < memory < 256 * 2**20, target

    # The same usage through the command line, read from the same Prometheus.
    cli = subprocess.run(
        [
            str(Path(sys.executable).parent / "katalyst"),
            "recommend",
            "--from-prometheus",
            url,
            "--namespace",
            namespace,
            "--workload",
            dep["metadata"]["name"],
            "--history",
            "24h",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 0, cli.stderr
    (row,) = json.loads(cli.stdout)["recommendations"]
    assert (row["workload"], row["container"]) == (dep["metadata"]["name"], "stress")

    # Prometheus unreachable: a new generation is not recommended, the condition says why
    # and the last recommendation stays.
    first.stop()
    controller(
        components,
        "--controllers=resourcerecommender",
        "--resourcerecommend-prometheus-address=http://127.0.0.1:1",
        "--resourcerecommend-prometheus-timeout=2s",
    )
    patch = {"spec": {"resourcePolicy": {"algorithmPolicy": {"extensions": {"decayHalfLife": 12}}}}}
    kubectl.run("patch", "rec", name, "-n", namespace, "--type=merge", "-p", json.dumps(patch))

    def unavailable() -> dict[str, Any]:
        c = conditions(kubectl, namespace, name).get("RecommendationProvided") or {}
        return c if c.get("reason") == "DataSourceUnavailable" else {}

    cond = wait_until("RecommendationProvided=False DataSourceUnavailable", unavailable, 120, 2)
    assert "127.0.0.1:1" in cond["message"]
    after = kubectl.json("get", "rec", name, "-n", namespace)
    assert after["status"]["observedGeneration"] == after["metadata"]["generation"] == 2
    assert after["status"]["recommendResources"] == status["recommendResources"]
    assert after["status"]["lastRecommendationTime"] == status["lastRecommendationTime"]


def test_a_malformed_rr_is_told_naming_the_field(
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
    ctl = controller(components, "--controllers=resourcerecommender")
    name = rec["metadata"]["name"]

    def refused() -> dict[str, Any]:
        c = conditions(kubectl, namespace, name).get("Validated") or {}
        return c if c.get("status") == "False" else {}

    cond = wait_until("Validated=False", refused, 60, 2)
    assert cond["reason"] == "ResourceNameUnsupported"
    assert "controlledResourcesPolicies[0].resourceName: 'nvidia.com/gpu'" in cond["message"]
    assert ctl.alive()


def test_a_malformed_spd_is_told_naming_the_field(
    kubectl: Kubectl, namespace: str, components: Callable[..., Component]
) -> None:
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
    ctl = controller(components, "--controllers=spd")

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

    def poor() -> str | None:
        # Between the two patches the agent may see the indicator without its value:
        # Unknown, which turns reclaim off too. The word to wait for is Poor.
        word = _pod_entry(kubectl, node_name, uid).get("reclaim_off")
        return word if word and "Unknown" not in word else None

    entry = wait_until("the agent's word that the pod lends nothing", poor, 60, 2)
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
