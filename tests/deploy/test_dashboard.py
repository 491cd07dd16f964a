"""The Grafana dashboard (deploy/dashboards/pykatalyst.json) asks only for series the code
exports: every metric name in every panel's and variable's expression is one that the
agent's, scheduler's, controller's or webhook's registry serves, under the series names
Prometheus stores (a counter's `_total`, a histogram's `_bucket`/`_sum`/`_count`)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from pykatalyst.agent.eviction.records import EvictionMetrics
from pykatalyst.agent.metrics import AgentExporter
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.controllers.backstop import BackstopConfig, BackstopController
from pykatalyst.runtime.controller import ControllerRunner
from pykatalyst.runtime.host import ComponentHost
from pykatalyst.runtime.scheduler import scheduler_host
from pykatalyst.scheduler.scheduler import Scheduler
from pykatalyst.webhook.server import make_app
from pykatalyst.webhook.service import WebhookService

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "dashboards" / "pykatalyst.json"

# PromQL words that are not metric names.
KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
    "unless", "offset",
}  # fmt: skip
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "gauge": ("",),
    "info": ("_info",),
}


def _series(registry: CollectorRegistry) -> set[str]:
    out: set[str] = set()
    for family in registry.collect():
        out.update(family.name + s for s in SUFFIXES.get(family.type, ("",)))
    return out


def exported_series() -> set[str]:
    """Every series name the daemons' registries can serve."""
    clock = VirtualClock(1000.0)
    cluster = MemoryCluster(clock=clock)
    agent = ComponentHost("agent", clock=clock)
    AgentExporter(agent.registry)
    EvictionMetrics(agent.registry)
    sched = scheduler_host(
        Scheduler(cluster), clock, interval_s=1.0, schedule=True, report=lambda _o: None
    )
    controller = ControllerRunner(cluster, BackstopConfig(), period_s=30, clock=clock)
    BackstopController(cluster, BackstopConfig(), registry=controller.registry)
    webhook = ComponentHost("webhook", clock=clock)
    make_app(WebhookService(None), webhook.registry)
    out: set[str] = set()
    for registry in (agent.registry, sched.registry, controller.registry, webhook.registry):
        out |= _series(registry)
    return out


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range selectors
    text = re.sub(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)", "", text)  # grouping labels
    names = set()
    for m in re.finditer(r"(?<![\w$.])([a-zA-Z_:][\w:]*)(\s*\()?", text):
        word, call = m.group(1), m.group(2)
        if call or word in KEYWORDS:
            continue
        names.add(word)
    return names


def _expressions(dashboard: dict[str, Any]) -> list[str]:
    exprs = []
    for panel in dashboard["panels"]:
        exprs += [t["expr"] for t in panel.get("targets", [])]
    for var in dashboard["templating"]["list"]:
        query = var.get("query")
        if isinstance(query, dict):
            m = re.fullmatch(r"label_values\((\w+),\s*\w+\)", query["query"])
            assert m, query
            exprs.append(m.group(1))
    return exprs


def test_every_metric_the_dashboard_reads_is_exported() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exported = exported_series()
    used = set().union(*(metric_names(e) for e in _expressions(dashboard)))
    assert used, "the dashboard reads no metric"
    missing = sorted(used - exported)
    assert not missing, f"the dashboard reads series nothing exports: {missing}"


def test_the_dashboard_covers_pools_reclaimed_capacity_evictions_and_scheduling() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    used = set().union(*(metric_names(e) for e in _expressions(dashboard)))
    for name in (
        "cpu_advisor_pool_size",
        "headroom_report_result",
        "katalyst_eviction_victims_total",
        "scheduler_scheduling_attempt_duration_seconds_bucket",
    ):
        assert name in used
    node_var = [v for v in dashboard["templating"]["list"] if v["name"] == "node"]
    assert node_var and node_var[0]["multi"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_the_expression_reader_finds_names_and_only_names() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, node) (rate(a_b_bucket{node=~"$node", x="y{z}"}'
        "[$__rate_interval]))) / ignoring(k) c_total offset 5m + on(x) group_left d"
    )
    assert metric_names(expr) == {"a_b_bucket", "c_total", "d"}
    assert "nope_total" not in exported_series()
