"""The SPD ResourcePortrait indicator: predicted points in status.aggMetrics, only its own
scope written, refreshed once per resyncPeriod, failures reported and points kept."""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import numpy as np
import pytest

from pykatalyst.api import names
from pykatalyst.api.timefmt import parse_rfc3339
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.controllers.history import PrometheusHistory, SampleHistory
from pykatalyst.controllers.ihpa import IHPAController
from pykatalyst.controllers.portrait import PortraitIndicator
from pykatalyst.predict.client import PredictorError
from pykatalyst.predict.contract import PredictReply
from tests.controllers.test_ihpa import NOW, deployment, ihpa

SPD = names.SERVICE_PROFILE_DESCRIPTOR


def daily_history(end: float, n: int = 7 * 1440) -> list[tuple[float, float]]:
    t = end - 60 * n + 60 * np.arange(n)
    v = 2.0 + 1.0 * np.sin(2 * np.pi * t / 86400) + np.random.default_rng(0).normal(0, 0.05, n)
    return list(zip(t.tolist(), v.tolist(), strict=True))


def setup(other_scope: bool = False) -> MemoryCluster:
    c = MemoryCluster(clock=VirtualClock(NOW))
    d = c.create(names.DEPLOYMENT, deployment(), "default")
    c.patch(
        names.DEPLOYMENT,
        d["metadata"]["name"],
        {"status": {"replicas": 3}},
        "default",
        subresource="status",
    )
    c.create(names.INTELLIGENT_HPA, ihpa(), "default")
    IHPAController(c).run(NOW)
    if other_scope:
        other = {"aggregator": "avg", "scope": "SomeOtherPlugin", "items": []}
        c.patch(SPD, "web", {"status": {"aggMetrics": [other]}}, "default", subresource="status")
    return c


def scope(c: MemoryCluster, name: str = names.RESOURCE_PORTRAIT_SCOPE) -> dict[str, Any] | None:
    for agg in c.get(SPD, "web", "default").get("status", {}).get("aggMetrics", []):
        if agg.get("scope") == name:
            return dict(agg)
    return None


def test_predicted_points_land_in_the_portrait_scope_and_other_scopes_stay() -> None:
    c = setup(other_scope=True)
    hist = SampleHistory()
    hist.extend("default", "web", "cpu_utilization", daily_history(NOW))
    ind = PortraitIndicator(c, history=hist)
    plan = ind.reconcile(NOW)
    assert not plan.problems, plan.problems
    ind.apply(plan)
    agg = scope(c)
    assert agg is not None and agg["aggregator"] == "avg"
    items = agg["items"]
    # 120 minute points from the minute now is in; the one at or before now is dropped
    assert len(items) == 119
    times = [parse_rfc3339(i["timestamp"]) for i in items]
    assert all(t > NOW for t in times) and times == sorted(times)
    (container,) = items[0]["containers"]
    assert container["name"] == "ihpa-predict"
    assert set(container["usage"]) == {"cpu_utilization", "periodicity-cpu_utilization"}
    assert "seasonal" in plan.updates[0].explain
    assert scope(c, "SomeOtherPlugin") == {
        "aggregator": "avg",
        "scope": "SomeOtherPlugin",
        "items": [],
    }
    # not due again before resyncPeriod (3600 s) has passed since the first kept point
    assert ind.reconcile(NOW + 600).updates == ()
    assert len(ind.reconcile(NOW + 3700).updates) == 1


def test_the_ihpa_status_reads_the_predicted_points() -> None:
    c = setup()
    hist = SampleHistory()
    hist.extend("default", "web", "cpu_utilization", daily_history(NOW))
    ind = PortraitIndicator(c, history=hist)
    ind.apply(ind.reconcile(NOW))
    ctl = IHPAController(c)
    ctl.run(NOW + 150)
    status = c.get(names.INTELLIGENT_HPA, "web-ihpa", "default")["status"]
    assert status["desiredReplicas"] >= 1


class Failing:
    name = "failing"

    def predict(self, request: dict[str, Any]) -> PredictReply:
        raise PredictorError("http://predictor/openapi/tsa/predict: no reply within 1s")


def test_a_failing_predictor_is_an_event_on_the_spd_and_the_points_stay() -> None:
    c = setup()
    hist = SampleHistory()
    hist.extend("default", "web", "cpu_utilization", daily_history(NOW))
    good = PortraitIndicator(c, history=hist)
    good.apply(good.reconcile(NOW))
    before = scope(c)
    bad = PortraitIndicator(c, history=hist, predictor=Failing())
    plan = bad.reconcile(NOW + 7200)
    bad.apply(plan)
    assert scope(c) == before
    (ev,) = [
        e for e in c.list(names.EVENT, "default").items if e["reason"] == "ResourcePortraitFailed"
    ]
    assert (
        "no reply within" in ev["message"]
        and ev["involvedObject"]["kind"] == "ServiceProfileDescriptor"
    )


def test_a_write_from_a_stale_read_is_refused_so_other_scopes_are_not_lost() -> None:
    c = setup()
    hist = SampleHistory()
    hist.extend("default", "web", "cpu_utilization", daily_history(NOW))
    ind = PortraitIndicator(c, history=hist)
    plan = ind.reconcile(NOW)
    other = {"aggregator": "max", "scope": "WrittenMeanwhile", "items": []}
    c.patch(SPD, "web", {"status": {"aggMetrics": [other]}}, "default", subresource="status")
    ind.apply(plan)
    assert scope(c, "WrittenMeanwhile") is not None
    ind.apply(ind.reconcile(NOW + 1))
    assert scope(c, "WrittenMeanwhile") is not None and scope(c) is not None


class _Prom(BaseHTTPRequestHandler):
    seen: ClassVar[list[dict[str, list[str]]]] = []
    reject: ClassVar[bool] = False

    def do_GET(self) -> None:
        q = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
        type(self).seen.append(q)
        if type(self).reject:
            body = {"status": "error", "errorType": "bad_data", "error": "parse error at char 5"}
            code = 400
        else:
            end = float(q["end"][0])
            values = [[t, str(v)] for t, v in daily_history(end)]
            body = {
                "status": "success",
                "data": {"resultType": "matrix", "result": [{"metric": {}, "values": values}]},
            }
            code = 200
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def prom() -> Iterator[tuple[str, type[_Prom]]]:
    handler = type("Handler", (_Prom,), {"seen": [], "reject": False})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", handler
    server.shutdown()
    server.server_close()


def test_prometheus_history_uses_katalysts_preset_query(prom: Any) -> None:
    url, handler = prom
    c = setup()
    ind = PortraitIndicator(c, history=PrometheusHistory(url))
    ind.apply(ind.reconcile(NOW))
    queries = {q["query"][0] for q in handler.seen}
    assert (
        'sum(rate(container_cpu_usage_seconds_total{namespace="default",pod=~"web.*",container!=""}[1m0s]))'
        in queries
    )
    assert "sum(rate(x[1m]))" in queries  # the custom metric's own PromQL
    q = handler.seen[0]
    assert float(q["end"][0]) - float(q["start"][0]) == 10080 * 60 and q["step"] == ["60s"]
    assert scope(c) is not None


def test_a_query_prometheus_rejects_is_reported_with_its_reason(prom: Any) -> None:
    url, handler = prom
    handler.reject = True
    c = setup()
    ind = PortraitIndicator(c, history=PrometheusHistory(url))
    plan = ind.reconcile(NOW)
    ind.apply(plan)
    assert scope(c) is None
    assert "bad_data: parse error at char 5" in plan.problems[0].message


def test_without_any_history_the_event_says_where_history_comes_from() -> None:
    c = setup()
    ind = PortraitIndicator(c)
    plan = ind.reconcile(NOW)
    ind.apply(plan)
    assert scope(c) is None
    (problem,) = plan.problems
    assert "no history for cpu_utilization, qps from recorded samples" in problem.message
    assert "--spd-resource-portrait-indicator-plugin-prometheus-address" in problem.message
