"""What the agent's /metrics shows an operator: its pools, the reclaimed capacity it
published and the terms behind it, and the enforcer's cgroup writes, under Katalyst's
names where Katalyst has them, parsed as Prometheus parses them."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from pykatalyst.agent.host.base import Knob
from pykatalyst.agent.metrics import AgentExporter, numeric_terms
from pykatalyst.api import names
from pykatalyst.api.quantity import Quantity
from tests.agent.test_agent_loop import DEDICATED, Node


def _samples(registry: CollectorRegistry) -> dict[str, list[Any]]:
    text = generate_latest(registry).decode()
    out: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append(s)
    return out


def _node_with_pods() -> Node:
    n = Node()
    n.pod("web", cpu="2")
    n.pod("db", level="dedicated_cores", cpu="4", memory="1Gi", annotations=DEDICATED)
    n.pod("batch", level="reclaimed_cores", cpu=None, memory=None, reclaimed_cpu="2k")
    return n


def test_pool_sizes_are_the_cpus_each_pool_holds_on_the_node() -> None:
    n = _node_with_pods()
    plan = n.run(60)
    registry = CollectorRegistry()
    AgentExporter(registry).observe(plan)
    got = {
        (s.labels["name"], s.labels["numa_id"]): s.value
        for s in _samples(registry)["cpu_advisor_pool_size"]
    }
    want = {
        (p.name, "-1" if p.numa is None else str(p.numa)): float(len(p.cpuset)) for p in plan.pools
    }
    assert got == want
    # a dedicated pod's 4 cpus are in no pool
    assert sum(got.values()) <= 48 - 4
    assert got[(names.POOL_SHARE, "-1")] >= 2


def test_the_published_reclaimed_capacity_is_what_the_cnr_says() -> None:
    n = _node_with_pods()
    plan = n.run(200)  # past the reporter's 120s sliding window
    registry = CollectorRegistry()
    AgentExporter(registry).observe(plan)
    samples = _samples(registry)
    reported = {s.labels["resourceName"]: s.value for s in samples["headroom_report_result"]}
    alloc = n.cluster.get(names.CUSTOM_NODE_RESOURCE, "node-1")["status"]["resources"][
        "allocatable"
    ]
    assert (
        reported[names.RECLAIMED_MILLICPU]
        == Quantity.parse(str(alloc[names.RECLAIMED_MILLICPU])).value()
    )
    assert (
        reported[names.RECLAIMED_MEMORY]
        == Quantity.parse(str(alloc[names.RECLAIMED_MEMORY])).value()
    )
    assert reported[names.RECLAIMED_MILLICPU] > 0
    terms = {
        s.labels["term"]
        for s in samples["katalyst_agent_reclaimed_term"]
        if s.labels["resource"] == names.RECLAIMED_MILLICPU
    }
    assert terms == set(numeric_terms(plan.reclaimed_cpu.terms))
    assert terms


def test_reclaim_switched_off_shows_zero_published() -> None:
    n = Node({"advisor": {"enable_reclaim": False}})
    n.pod("web", cpu="2")
    plan = n.run(200)
    registry = CollectorRegistry()
    AgentExporter(registry).observe(plan, n.agent.config.advisor.enable_reclaim)
    samples = _samples(registry)
    reported = {s.labels["resourceName"]: s.value for s in samples["headroom_report_result"]}
    assert reported == {names.RECLAIMED_MILLICPU: 0, names.RECLAIMED_MEMORY: 0}
    assert [s.value for s in samples["katalyst_agent_reclaim_enabled"]] == [0]
    # the formula still runs: what reclaim would give is there
    raw = {s.labels["resource"]: s.value for s in samples["katalyst_agent_reclaimed_headroom"]}
    assert raw[names.RECLAIMED_MILLICPU] > 0


def test_cgroup_writes_are_counted_per_knob_as_the_host_received_them() -> None:
    n = _node_with_pods()
    registry = CollectorRegistry()
    exporter = AgentExporter(registry)
    for _ in range(6):
        n.clock.advance(5)
        exporter.observe(n.agent.reconcile(n.clock.now()))
    counted = {
        s.labels["knob"]: s.value
        for s in _samples(registry)["katalyst_agent_cgroup_writes_total"]
        if s.labels["result"] == "applied"
    }
    written: dict[str, float] = {}
    for w in n.host.writes:
        written[w.knob.value] = written.get(w.knob.value, 0) + 1
    assert counted == written
    assert counted[Knob.CPUSET_CPUS.value] >= 3


def test_a_dry_run_agent_counts_what_it_would_write_and_writes_nothing() -> None:
    n = Node(dry_run=True)
    n.pod("web", cpu="2")
    registry = CollectorRegistry()
    AgentExporter(registry).observe(n.run(10))
    by_result = {
        s.labels["result"] for s in _samples(registry)["katalyst_agent_cgroup_writes_total"]
    }
    assert by_result == {"dry-run"}
    assert n.host.writes == []


scalars = st.one_of(
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.just("text"),
    st.none(),
)
keys = st.sampled_from(["a", "b", "c", "window", "share_cpus"])
terms_strategy = st.recursive(
    st.dictionaries(keys, scalars, max_size=4),
    lambda inner: st.dictionaries(keys, inner, max_size=3),
    max_leaves=12,
)


@given(terms_strategy)
def test_only_finite_numbers_become_terms_under_their_dotted_path(terms: dict[str, Any]) -> None:
    flat = numeric_terms(terms)
    for path, value in flat.items():
        node: Any = terms
        for part in path.split("."):
            node = node[part]
        assert not isinstance(node, bool) and isinstance(node, int | float)
        assert value == float(node)
    registry = CollectorRegistry()
    exporter = AgentExporter(registry)
    for path, value in flat.items():
        exporter.terms.labels("r", path).set(value)
    assert len(_samples(registry).get("katalyst_agent_reclaimed_term", [])) == len(flat)
