"""A KVPA whose recommender is `pykatalyst` on a real cluster: `katalyst controller
--controllers=vpa` reads the Deployment's usage from the real Prometheus that
scripts/cluster.sh runs, writes the VPARec with pykatalyst's recommender (cpu request and
limit in the template's ratio, the terms annotation), and the running pod is resized in
place to it (restartCount 0). The recommender's readiness span is shortened to a minute
with a settings file (`--recommender-settings`), as a user would."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from pykatalyst.api import names
from pykatalyst.api.quantity import Quantity
from tests.e2e.conftest import REPO, Component, Kubectl, component_kubeconfig, wait_until
from tests.e2e.test_e2e_kvpa import deployment, kvpa
from tests.e2e.test_e2e_spd_rr import prom_query, prometheus_url

pytestmark = pytest.mark.timeout(600)
REC = names.VPA_RECOMMENDATION


def test_a_pykatalyst_kvpa_resizes_its_pod_from_prometheus_usage(
    kubectl: Kubectl, namespace: str, components: Callable[..., Component], tmp_path: Path
) -> None:
    url = prometheus_url()
    kubectl.run("apply", "-f", str(REPO / "deploy" / "manifests" / "controller-rbac.yaml"))
    kubectl.apply(deployment(namespace))
    rate = f'rate(container_cpu_usage_seconds_total{{namespace="{namespace}",container="c"}}[30s])'

    def points() -> float:
        got = prom_query(url, f"count_over_time({rate}[5m:1m])")
        return max((float(r["value"][1]) for r in got), default=0.0)

    wait_until("three points of the cpu query in Prometheus", lambda: points() >= 3, 300, 5)
    body = kvpa(namespace, "Inplace")
    body["spec"]["resourcePolicy"]["algorithmPolicy"] = {"recommender": "pykatalyst"}
    # memory limits cannot shrink in place on v1.34: this one controls cpu
    body["spec"]["resourcePolicy"]["containerPolicies"][0]["controlledResources"] = ["cpu"]
    kubectl.apply(body)
    settings = tmp_path / "settings.yaml"
    settings.write_text("min_history_s: 60\n")
    ctl = components(
        "controller",
        "controller",
        "--kubeconfig",
        component_kubeconfig("controller"),
        "--controllers=vpa",
        "--period",
        "2s",
        "--lease-name",
        f"katalyst-controller-{namespace}",
        f"--resourcerecommend-prometheus-address={url}",
        f"--recommender-settings={settings}",
    )

    def rec() -> dict[str, object] | None:
        assert ctl.alive(), ctl.log()[-3000:]
        items = kubectl.json("get", f"{REC.plural}.{REC.group}", "-n", namespace)["items"]
        return items[0] if items else None

    wait_until("the VPARec from pykatalyst's recommender", lambda: rec() is not None, 120, 2)
    written = rec()
    assert written is not None
    (entry,) = written["spec"]["containerRecommendations"]  # type: ignore[index]
    cpu = Quantity.parse(entry["requests"]["resources"]["cpu"]).milli_value()
    limit = Quantity.parse(entry["limits"]["resources"]["cpu"]).milli_value()
    assert 10 <= cpu < 200, entry  # a sleeping container: far below the declared 200m
    assert abs(limit - 2 * cpu) <= 2, entry  # the template's 200m / 400m ratio
    annotations = written["metadata"]["annotations"]  # type: ignore[index]
    terms = json.loads(annotations[names.RECOMMENDATION_TERMS_ANNOTATION])
    assert terms["containers"]["c"]["cpu"]["model"].startswith("half-life")

    def resized() -> bool:
        pods = kubectl.json("get", "pods", "-n", namespace, "-l", "app=web")["items"]
        if len(pods) != 1:
            return False
        c = pods[0]["spec"]["containers"][0]["resources"]
        return bool(Quantity.parse(c["requests"]["cpu"]).milli_value() == cpu)

    wait_until("the pod resized in place to the recommendation", resized, 120, 2)
    (pod,) = kubectl.json("get", "pods", "-n", namespace, "-l", "app=web")["items"]
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
