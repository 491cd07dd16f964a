"""The agent honours the SPD: a pod whose business level is Poor, or a baseline pod,
lends nothing to reclaimed pods (held at its requests), and says which rule applied."""

from __future__ import annotations

import json
from typing import Any

from pykatalyst.api import names, spd
from pykatalyst.api.timefmt import rfc3339
from tests.agent.inmemory_host import GIB
from tests.agent.test_agent_loop import Node

SPD = names.SERVICE_PROFILE_DESCRIPTOR


def spd_body(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "targetRef": {"kind": "Deployment", "name": "web", "apiVersion": "apps/v1"},
            **spec,
        },
    }


def poor(n: Node, current: float) -> None:
    body = spd_body(
        businessIndicator=[
            {"name": "RPCLatency", "indicators": [{"indicatorLevel": "UpperBound", "value": 100}]}
        ]
    )
    n.cluster.create(SPD, body, "default")
    s = n.cluster.get(SPD, "web", "default")
    s["status"] = {"businessStatus": [{"name": "RPCLatency", "current": current}]}
    n.cluster.update_status(SPD, s)


def web(n: Node) -> str:
    uid = n.pod("web", cpu="8", memory="16Gi", annotations={names.SPD_NAME_ANNOTATION: "web"})
    n.host.set_load(uid, 1)
    n.host.set_memory(uid, 1 * GIB)
    return uid


def test_a_poor_pod_is_held_at_its_requests_and_a_good_one_lends_its_idle_share() -> None:
    good, bad = Node({"config_ttl_s": 0}), Node({"config_ttl_s": 0})
    poor(good, 50)
    poor(bad, 150)
    gu, bu = web(good), web(bad)
    gp, bp = good.run(120), bad.run(120)
    assert gp.pod(gu).reclaim_off == ""  # type: ignore[union-attr]
    assert gp.pod(gu).containers[0].estimate_source == "usage"  # type: ignore[union-attr]
    off = bp.pod(bu).reclaim_off  # type: ignore[union-attr]
    assert "Poor" in off and "RPCLatency 150 > UpperBound 100" in off
    assert bp.pod(bu).containers[0].estimate_source == "reclaim-off"  # type: ignore[union-attr]
    assert bp.reclaimed_cpu.value <= gp.reclaimed_cpu.value - 6  # 8 requested, ~1.25 used
    assert bp.reclaimed_memory.value <= gp.reclaimed_memory.value - 14 * GIB
    # the rule travels to the CNR, where `katalyst explain pod` reads it
    cnr = bad.cluster.get(names.CUSTOM_NODE_RESOURCE, "node-1")
    pools = json.loads(cnr["metadata"]["annotations"][names.CPU_POOLS_ANNOTATION])
    entry = next(p for p in pools["pods"] if p["uid"] == bu)
    assert "Poor" in entry["reclaim_off"]


def test_a_baseline_pod_lends_nothing_and_a_pod_after_the_sentinel_does() -> None:
    n = Node({"config_ttl_s": 0})
    uid = web(n)
    created = n.cluster.get(names.POD, "web", "default")["metadata"]["creationTimestamp"]
    sentinel = spd.sentinel_text(
        spd.PodMeta(spd.pod_meta({"metadata": {"creationTimestamp": created}}).created, "web")
    )
    body = spd_body(baselinePercent=50)
    body["metadata"]["annotations"] = {names.SPD_BASELINE_SENTINEL_ANNOTATION: sentinel}
    n.cluster.create(SPD, body, "default")
    plan = n.run(60)
    assert "baseline" in plan.pod(uid).reclaim_off  # type: ignore[union-attr]
    earlier = spd.sentinel_text(spd.PodMeta(0.0, "first"))
    s = n.cluster.get(SPD, "web", "default")
    s["metadata"]["annotations"] = {names.SPD_BASELINE_SENTINEL_ANNOTATION: earlier}
    n.cluster.update(SPD, s)
    plan = n.run(10)
    assert plan.pod(uid).reclaim_off == ""  # type: ignore[union-attr]
    assert rfc3339(0) in earlier
