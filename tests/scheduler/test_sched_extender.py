"""The extender endpoints with the JSON a stock kube-scheduler sends (Go field names)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.runtime.host import ComponentHost
from pykatalyst.scheduler.config import load_config_text
from pykatalyst.scheduler.extender import NOT_IN_CACHE, ExtenderService, make_app
from pykatalyst.scheduler.scheduler import Scheduler
from tests.scheduler.sched_helpers import add_cnr, add_node, add_pod, cnr, node, pod

FIT_ONLY = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
  - plugins:
      score:
        disabled: [{name: "*"}]
        enabled: [{name: NodeResourcesFit, weight: 2}]
"""
TAINT = {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}


def setup() -> tuple[MemoryCluster, ExtenderService]:
    c = MemoryCluster(VirtualClock())
    add_node(c, node("n0", cpu="1"))
    add_node(c, node("n1", cpu="8"))
    add_node(c, node("n2", taints=[TAINT]))
    sched = Scheduler(c, load_config_text(FIT_ONLY))
    return c, ExtenderService(sched)


def kube_pod(c: MemoryCluster, name: str = "web", cpu: str = "2") -> dict[str, Any]:
    # what kube-scheduler forwards: the stored v1.Pod, camelCase inside
    return add_pod(c, pod(name, {"cpu": cpu, "memory": "1Gi"}))


def test_filter_with_node_names() -> None:
    c, svc = setup()
    args = {"Pod": kube_pod(c), "Nodes": None, "NodeNames": ["n0", "n1", "n2", "ghost"]}
    result = svc.filter(args, 0.0)
    assert set(result) == {
        "Nodes",
        "NodeNames",
        "FailedNodes",
        "FailedAndUnresolvableNodes",
        "Error",
    }
    assert result["NodeNames"] == ["n1"]
    assert result["Nodes"] is None
    assert result["FailedNodes"] == {"n0": "Insufficient cpu", "ghost": NOT_IN_CACHE}
    assert result["FailedAndUnresolvableNodes"] == {
        "n2": "node(s) had untolerated taint {dedicated: infra}"
    }
    assert result["Error"] == ""


def test_filter_with_a_node_list_returns_the_passing_nodes() -> None:
    c, svc = setup()
    ghost = node("n3", cpu="16")  # a node object the cluster does not have
    listed = [c.get(names.NODE, "n0"), c.get(names.NODE, "n1"), ghost]
    args = {"Pod": kube_pod(c), "Nodes": {"metadata": {}, "items": listed}, "NodeNames": None}
    result = svc.filter(args, 0.0)
    assert result["NodeNames"] is None
    assert [n["metadata"]["name"] for n in result["Nodes"]["items"]] == ["n1"]
    assert result["FailedNodes"] == {"n0": "Insufficient cpu", "n3": NOT_IN_CACHE}


def test_a_forged_node_object_does_not_poison_the_cache() -> None:
    c, svc = setup()
    big = c.get(names.NODE, "n0")
    big["status"]["allocatable"]["cpu"] = "1000"
    big["status"]["capacity"]["cpu"] = "1000"
    args = {"Pod": kube_pod(c), "Nodes": {"items": [big]}}
    assert svc.filter(args, 0.0)["FailedNodes"] == {"n0": "Insufficient cpu"}
    # later calls that send names only still see the node the cluster has
    later = svc.filter({"Pod": kube_pod(c, "later"), "NodeNames": ["n0"]}, 0.0)
    assert later["NodeNames"] == []
    assert svc.scheduler.snapshot.allocatable("n0", "cpu") == 1000


def test_filter_refuses_a_pod_the_cluster_does_not_have() -> None:
    c, svc = setup()
    made_up = pod("nowhere", {"cpu": "1"})
    result = svc.filter({"Pod": made_up, "NodeNames": ["n1"]}, 0.0)
    assert result["Error"] == "pod default/nowhere not found in the cluster"
    assert result["NodeNames"] is None
    real = kube_pod(c)
    forged = {**real, "metadata": {**real["metadata"], "uid": "other"}}
    assert "not other" in svc.filter({"Pod": forged, "NodeNames": ["n1"]}, 0.0)["Error"]


def test_bind_refuses_nodes_the_cluster_does_not_have() -> None:
    c, svc = setup()
    kube_pod(c)
    args = {"PodName": "web", "PodNamespace": "default", "Node": "ghost"}
    assert svc.bind(args, 0.0) == {"Error": "node ghost not found in the cluster"}
    assert "nodeName" not in c.get(names.POD, "web", "default")["spec"]


def test_filter_reports_invalid_qos_as_unresolvable() -> None:
    c, svc = setup()
    bad = add_pod(c, pod("bad", {"cpu": "1"}, qos="gold_cores"))
    result = svc.filter({"Pod": bad, "NodeNames": ["n1"]}, 0.0)
    assert result["NodeNames"] == []
    assert "gold_cores" in result["FailedAndUnresolvableNodes"]["n1"]


def test_prioritize_scores_are_on_the_extender_scale() -> None:
    c, svc = setup()
    add_node(c, node("n3", cpu="4", memory="8Gi"))
    add_pod(c, pod("busy", {"cpu": "1", "memory": "2Gi"}, node_name="n3"))
    add_node(c, node("n4", cpu="4", memory="8Gi"))
    empty = add_pod(c, pod("p"))  # asks for nothing: scored as 100m cpu / 200Mi memory
    result = svc.prioritize({"Pod": empty, "NodeNames": ["n3", "n4", "zz"]}, 0.0)
    # n3: LeastAllocated 72 (see the plugin tests) x weight 2 = 144 of 200 -> 7 of 10
    # n4: 97 x 2 = 194 -> 9; an unknown node scores 0
    assert result == [
        {"Host": "n3", "Score": 7},
        {"Host": "n4", "Score": 9},
        {"Host": "zz", "Score": 0},
    ]


def test_bind_creates_the_binding_and_counts_the_pod() -> None:
    c, svc = setup()
    p = kube_pod(c)
    args = {
        "PodName": "web",
        "PodNamespace": "default",
        "PodUID": p["metadata"]["uid"],
        "Node": "n1",
    }
    assert svc.bind(args, 0.0) == {"Error": ""}
    assert c.get(names.POD, "web", "default")["spec"]["nodeName"] == "n1"
    assert svc.scheduler.snapshot.requested("n1", "cpu") == 2000
    again = svc.bind(args, 0.0)
    assert again["Error"] == "pod default/web is already bound to node n1"
    wrong = svc.bind({**args, "PodName": "web2"}, 0.0)
    assert "not found" in wrong["Error"]


def test_http_endpoints_speak_kube_scheduler_json() -> None:
    c, svc = setup()
    body = {"Pod": kube_pod(c), "Nodes": None, "NodeNames": ["n0", "n1"]}

    async def run() -> None:
        app = make_app(svc, lambda: 0.0)
        # as the runtime serves it: its health routes beside the extender's verbs
        app.router.add_routes(ComponentHost("scheduler").health_routes())
        client = TestClient(TestServer(app))
        await client.start_server()
        try:
            resp = await client.post(
                "/scheduler/filter",
                data=json.dumps(body),
                headers={"Content-Type": "application/json"},
            )
            assert resp.status == 200
            got = await resp.json()
            assert got["NodeNames"] == ["n1"]
            assert got["FailedNodes"] == {"n0": "Insufficient cpu"}
            resp = await client.post("/prioritize", data=json.dumps(body))
            scores = await resp.json()
            assert [s["Host"] for s in scores] == ["n0", "n1"]
            assert all(0 <= s["Score"] <= 10 for s in scores)
            resp = await client.post("/filter", data="{not json")
            assert resp.status == 400
            assert "not JSON" in (await resp.json())["Error"]
            resp = await client.post("/preempt", data="{}")
            assert resp.status == 404
            resp = await client.get("/healthz")
            assert await resp.text() == "ok"
            resp = await client.get("/metrics")
            assert "katalyst_scheduler_ticks_total" in await resp.text()
        finally:
            await client.close()

    asyncio.run(run())


RECLAIMED_PROFILE = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
  - plugins:
      filter:
        enabled: [{name: QoSAwareNodeResourcesFit}]
        disabled: [{name: NodeResourcesFit}]
      reserve:
        enabled: [{name: QoSAwareNodeResourcesFit}]
"""


def test_bind_refuses_a_node_whose_reclaimed_room_went_to_an_earlier_bind() -> None:
    # kube-scheduler filters both pods against the same free room, then binds them one
    # after the other: the second bind finds the room taken and is refused at Reserve
    c = MemoryCluster(VirtualClock())
    add_node(c, node("n0"))
    add_cnr(c, cnr("n0", reclaimed_cpu="3000", reclaimed_memory="8Gi"))
    svc = ExtenderService(Scheduler(c, load_config_text(RECLAIMED_PROFILE)))
    reclaimed = {names.RECLAIMED_MILLICPU: "2000", names.RECLAIMED_MEMORY: "1Gi"}
    pods = [add_pod(c, pod(n, reclaimed, qos="reclaimed_cores")) for n in ("a", "b")]
    for p in pods:
        assert svc.filter({"Pod": p, "NodeNames": ["n0"]}, 0.0)["NodeNames"] == ["n0"]
    binds = [
        svc.bind(
            {
                "PodName": p["metadata"]["name"],
                "PodNamespace": "default",
                "PodUID": p["metadata"]["uid"],
                "Node": "n0",
            },
            0.0,
        )
        for p in pods
    ]
    assert binds[0] == {"Error": ""}
    assert binds[1] == {"Error": "node n0: Insufficient reclaimed_millicpu"}
    assert "nodeName" not in c.get(names.POD, "b", "default")["spec"]
    assert svc.scheduler.snapshot.requested("n0", names.RECLAIMED_MILLICPU) == 2000


def test_filter_refuses_an_ill_typed_pod_and_keeps_serving() -> None:
    c, svc = setup()
    raw = pod("odd", {"cpu": "1"})
    raw["spec"]["affinity"] = "x"  # what kube-scheduler would never send, a client might
    result = svc.filter({"Pod": raw, "NodeNames": ["n1"]}, 0.0)
    # the decision uses the cluster's pod, never the caller's: this one is not there
    assert result["Error"] == "pod default/odd not found in the cluster"
    good = svc.filter({"Pod": kube_pod(c), "NodeNames": ["n1"]}, 0.0)
    assert good["NodeNames"] == ["n1"]


def test_a_fractional_dedicated_pod_counts_the_whole_cores_it_gets() -> None:
    from pykatalyst.scheduler.podinfo import pod_info

    raw = pod(
        "db",
        {"cpu": "1500m", "memory": "1Gi"},
        qos=names.QOS_DEDICATED_CORES,
        memory_enhancement={"numa_binding": "true"},
    )
    info = pod_info(raw)
    assert not info.problem and info.is_dedicated_numa
    assert info.request("cpu") == 2000


async def _client(app: Any) -> TestClient[Any, Any]:
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    return client


def test_http_bodies_over_the_limit_and_malformed_args_get_filter_results() -> None:
    c, svc = setup()
    kube_pod(c)

    async def run() -> None:
        client = await _client(make_app(svc, lambda: 0.0, max_body_bytes=4096))
        try:
            resp = await client.post("/filter", data=b"{" + b" " * 8192 + b"}")
            assert resp.status == 413
            got = await resp.json()
            assert set(got) >= {"Nodes", "NodeNames", "FailedNodes", "Error"}
            assert "over the extender's limit of 4096 bytes" in got["Error"]
            for bad in ({"Pod": 5}, {"Pod": {}, "NodeNames": "n1"}, {"Nodes": {"items": [1]}}):
                resp = await client.post("/filter", data=json.dumps(bad))
                assert resp.status == 400, bad
                assert (await resp.json())["Error"]
        finally:
            await client.close()

    asyncio.run(run())


def test_http_a_1mib_node_list_is_answered() -> None:
    c, svc = setup()
    body = {"Pod": kube_pod(c), "Nodes": {"items": [c.get(names.NODE, "n1")] * 400}}
    pad = {"metadata": {"annotations": {"pad": "x" * 3000}}}
    body["Nodes"]["items"] = [
        {**n, **pad, "metadata": {**n["metadata"], **pad["metadata"]}}
        for n in body["Nodes"]["items"]
    ]
    data = json.dumps(body)
    assert len(data) > 1024 * 1024

    async def run() -> None:
        client = await _client(make_app(svc, lambda: 0.0))
        try:
            resp = await client.post("/filter", data=data)
            assert resp.status == 200
            assert len((await resp.json())["Nodes"]["items"]) == 1
        finally:
            await client.close()

    asyncio.run(run())


def test_http_a_bearer_token_is_required_but_not_for_probes() -> None:
    c, svc = setup()
    body = json.dumps({"Pod": kube_pod(c), "NodeNames": ["n1"]})

    async def run() -> None:
        app = make_app(svc, lambda: 0.0, token="s3cret")
        app.router.add_routes(ComponentHost("scheduler").health_routes())
        client = await _client(app)
        try:
            assert (await client.post("/filter", data=body)).status == 401
            wrong = {"Authorization": "Bearer nope"}
            assert (await client.post("/bind", data="{}", headers=wrong)).status == 401
            good = {"Authorization": "Bearer s3cret"}
            resp = await client.post("/filter", data=body, headers=good)
            assert (await resp.json())["NodeNames"] == ["n1"]
            assert (await client.get("/healthz")).status == 200
        finally:
            await client.close()

    asyncio.run(run())
