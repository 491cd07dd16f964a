"""The centralized backstop on a node whose agent stops heartbeating: CNR taint after 10
minutes, reclaimed pods evicted after 20, taint removed when the heartbeat resumes."""

from __future__ import annotations

import json
from pathlib import Path

from prometheus_client import CollectorRegistry
from typer.testing import CliRunner

from pykatalyst.agent.config import ReporterConfig
from pykatalyst.agent.reporter import Reporter, ReportInput
from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cli.main import app
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.protocol import JSON
from pykatalyst.controllers import BACKSTOP_TAINT, BackstopConfig, BackstopController
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology

TOPO = CPUTopology.synthetic(sockets=1, cores_per_socket=4, threads_per_core=1)


def pod(name: str, node: str, level: str, **spec: object) -> JSON:
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "annotations": {names.QOS_LEVEL_ANNOTATION: level},
        },
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}], **spec},
    }


class Cluster:
    def __init__(
        self,
        nodes: tuple[str, ...] = ("node-1",),
        labels: dict[str, dict[str, str]] | None = None,
        node_selector: str | None = None,
        **cfg: object,
    ) -> None:
        self.clock = VirtualClock(100_000)
        self.cluster = MemoryCluster(clock=self.clock)
        self.reporters = {}
        for n in nodes:
            meta = {"name": n, "labels": (labels or {}).get(n, {})}
            self.cluster.create(names.NODE, {"metadata": meta})
            self.reporters[n] = Reporter(n, self.cluster, ReporterConfig())
        self.registry = CollectorRegistry()
        self.controller = BackstopController(
            self.cluster,
            BackstopConfig.model_validate(cfg),
            registry=self.registry,
            node_selector=node_selector,
        )
        self.alive = set(nodes)

    def heartbeat(self) -> None:
        now = self.clock.now()
        for n in sorted(self.alive):
            self.reporters[n].report(ReportInput(TOPO, CPUSet(), 4.0, 8.0 * 2**30), now)

    def step(self, seconds: float) -> list[str]:
        """Advance in 5 s ticks: agents heartbeat, the controller reconciles and acts."""
        done: list[str] = []
        for _ in range(int(seconds // 5)):
            self.heartbeat()
            _, result = self.controller.run(self.clock.now())
            done.extend(result.done)
            self.clock.advance(5)
        return done

    def cnr_taints(self, node: str = "node-1") -> list[dict[str, str]]:
        cnr = self.cluster.get(names.CUSTOM_NODE_RESOURCE, node)
        return list(cnr.get("spec", {}).get("taints", []))

    def terminating(self) -> set[str]:
        return {
            p["metadata"]["name"]
            for p in self.cluster.list(names.POD).items
            if p["metadata"].get("deletionTimestamp")
        }


def test_silent_agent_taints_then_evicts_reclaimed_pods_only() -> None:
    c = Cluster()
    c.cluster.create(names.POD, pod("batch-1", "node-1", names.QOS_RECLAIMED_CORES))
    c.cluster.create(names.POD, pod("batch-2", "node-1", names.QOS_RECLAIMED_CORES))
    c.cluster.create(names.POD, pod("web", "node-1", names.QOS_SHARED_CORES))
    c.cluster.create(
        names.POD,
        pod(
            "agent-ish",
            "node-1",
            names.QOS_RECLAIMED_CORES,
            priorityClassName="system-node-critical",
        ),
    )
    assert c.step(60) == []
    c.alive.clear()  # the agent dies
    assert c.step(595) == []  # 10 minutes not yet over
    assert not c.cnr_taints()
    done = c.step(10)
    assert done == ["taint node-1"]
    assert c.cnr_taints() == [BACKSTOP_TAINT.to_json()]
    assert c.cnr_taints()[0] == {
        "key": "node.kubernetes.io/unschedulable",
        "effect": "NoSchedule",
        "qosLevel": "reclaimed_cores",
    }
    assert c.step(590) == []  # taint held, no eviction before 20 minutes
    assert c.terminating() == set()
    done = c.step(60)
    assert done[:2] == ["evict default/batch-1", "evict default/batch-2"]
    assert c.terminating() == {"batch-1", "batch-2"}  # never the shared or critical pod
    events = c.cluster.list(names.EVENT).items
    reasons = sorted(e["reason"] for e in events)
    assert reasons == [
        "AgentSilent",
        names.EVENT_REASON_EVICT_CREATED,
        names.EVENT_REASON_EVICT_CREATED,
    ]
    evicted = next(e for e in events if e["reason"] == names.EVENT_REASON_EVICT_CREATED)
    assert "silent for" in evicted["message"] and evicted["involvedObject"]["kind"] == "Pod"
    assert (
        c.registry.get_sample_value(
            "katalyst_backstop_actions_total", {"action": "eviction", "reason": "AgentSilent"}
        )
        == 2.0
    )


def test_a_node_selector_leaves_the_other_nodes_alone() -> None:
    c = Cluster(
        ("a-1", "b-1"), labels={"a-1": {"pool": "a"}, "b-1": {"pool": "b"}}, node_selector="pool=a"
    )
    for n in ("a-1", "b-1"):
        c.cluster.create(names.POD, pod(f"batch-{n}", n, names.QOS_RECLAIMED_CORES))
    c.step(10)
    c.alive.clear()  # both agents die
    done = c.step(1300)  # past taint-after and evict-after
    assert done == ["taint a-1", "evict default/batch-a-1"]
    assert c.cnr_taints("a-1") == [BACKSTOP_TAINT.to_json()] and c.cnr_taints("b-1") == []
    assert c.terminating() == {"batch-a-1"}
    assert c.registry.get_sample_value("agent_deployed_node_total") == 1.0


def test_evictions_are_rate_limited() -> None:
    c = Cluster(evict_after_s=0, taint_after_s=0, evict_qps=0.1)
    for i in range(4):
        c.cluster.create(names.POD, pod(f"batch-{i}", "node-1", names.QOS_RECLAIMED_CORES))
    c.heartbeat()
    c.alive.clear()
    c.clock.advance(1)
    done = c.step(30)  # 0.1/s: one at once, then one each 10 s
    assert [d for d in done if d.startswith("evict")] == [
        "evict default/batch-0",
        "evict default/batch-1",
        "evict default/batch-2",
    ]


def test_taint_goes_when_the_heartbeat_resumes() -> None:
    c = Cluster(taint_after_s=60, evict_after_s=3600)
    c.step(10)
    c.alive.clear()
    c.step(70)
    assert c.cnr_taints() == [BACKSTOP_TAINT.to_json()]
    c.alive.add("node-1")
    done = c.step(10)
    assert done == ["untaint node-1"]
    assert c.cnr_taints() == []


def test_other_taints_on_the_cnr_survive() -> None:
    c = Cluster(taint_after_s=60)
    c.step(5)
    other = {
        "key": "example.com/maintenance",
        "effect": "NoSchedule",
        "qosLevel": "reclaimed_cores",
    }
    c.cluster.patch(names.CUSTOM_NODE_RESOURCE, "node-1", {"spec": {"taints": [other]}})
    c.alive.clear()
    c.step(70)
    assert c.cnr_taints() == [other, BACKSTOP_TAINT.to_json()]
    c.alive.add("node-1")
    c.step(10)
    assert c.cnr_taints() == [other]


def test_many_silent_agents_at_once_hold_the_backstop_back() -> None:
    nodes = tuple(f"node-{i}" for i in range(5))
    c = Cluster(nodes, taint_after_s=60)
    c.step(5)
    c.alive -= {"node-0", "node-1"}  # 40 % of the nodes: the controller suspects itself
    c.step(70)
    plan = c.controller.reconcile(c.clock.now())
    assert not plan.actions
    assert any("holding" in n for n in plan.notes)
    assert all(not c.cnr_taints(n) for n in nodes)


def test_dry_run_records_but_changes_nothing() -> None:
    c = Cluster(taint_after_s=60, evict_after_s=60, dry_run=True)
    c.cluster.create(names.POD, pod("batch", "node-1", names.QOS_RECLAIMED_CORES))
    c.step(5)
    c.alive.clear()
    c.step(70)
    assert not c.cnr_taints() and c.terminating() == set()
    kinds = {r.kind for r in c.controller.records}
    assert kinds == {"backstop-taint", "backstop-eviction"}
    assert all(r.dry_run for r in c.controller.records)


def test_a_cnr_that_never_heard_from_its_agent_counts_from_its_creation() -> None:
    c = Cluster(taint_after_s=60)
    c.alive.clear()
    c.cluster.create(names.CUSTOM_NODE_RESOURCE, {"metadata": {"name": "node-1"}})
    assert c.step(55) == []
    assert c.step(10) == ["taint node-1"]


def test_backstop_records_read_back_by_katalyst_explain(tmp_path: Path) -> None:
    path = tmp_path / "backstop.jsonl"
    c = Cluster(taint_after_s=60, evict_after_s=120)
    c.controller.records_path = path
    c.cluster.create(names.POD, pod("batch", "node-1", names.QOS_RECLAIMED_CORES))
    c.step(5)
    c.alive.clear()
    c.step(130)
    result = CliRunner().invoke(app, ["explain", "--records", str(path), "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [r["kind"] for r in data] == ["backstop-taint", "backstop-eviction"]
    assert data[1]["object"] == "Pod/default/batch"
    assert data[1]["observed"] >= data[1]["threshold"] == 120


def test_one_records_file_from_agent_and_backstop_is_explained_together(tmp_path: Path) -> None:
    from pykatalyst.agent.eviction import EvictionRecord, EvictionRecorder
    from pykatalyst.api.records import DecisionRecord, read_records

    path = tmp_path / "records.jsonl"
    # Before its agent went silent, it had evicted one reclaimed pod itself.
    agent_record = EvictionRecord(
        time=100_010.0,
        node="node-1",
        kind="eviction",
        plugin=names.EVICTION_PLUGIN_RECLAIMED_RESOURCE,
        reason="reclaimed_millicpu hard",
        message="evicting default/early",
        object_key="default/early",
        signal="sum of reclaimed_millicpu requests",
        observed=6000.0,
        threshold=5000.0,
        operator=">",
        unit="m",
    )
    EvictionRecorder(path=path).add([agent_record])
    c = Cluster(taint_after_s=60, evict_after_s=120)
    c.controller.records_path = path
    c.cluster.create(names.POD, pod("batch", "node-1", names.QOS_RECLAIMED_CORES))
    c.step(5)
    c.alive.clear()
    c.step(130)

    back = read_records(path)
    assert all(type(r) is DecisionRecord for r in back)
    assert back[0] == agent_record
    assert [r.plugin for r in back] == [
        names.EVICTION_PLUGIN_RECLAIMED_RESOURCE,
        "backstop",
        "backstop",
    ]
    result = CliRunner().invoke(
        app, ["explain", "--records", str(path), "--node", "node-1", "-o", "json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [r["kind"] for r in data] == ["eviction", "backstop-taint", "backstop-eviction"]
    assert data[1]["signal"] == data[2]["signal"] and "AgentReady" in data[1]["signal"]
    table = CliRunner().invoke(app, ["explain", "--records", str(path)])
    assert table.exit_code == 0, table.output
    assert "6000" in table.output and "AgentSilent" not in table.output.split("6000")[0]


def test_backstop_counts_and_skips_pods_it_cannot_read() -> None:
    from pykatalyst.controllers.backstop import read_reclaimed_pod

    huge = '{"oom_priority": "' + "1" * 5000 + '"}'
    pod = {
        "metadata": {
            "name": "p",
            "namespace": "default",
            "annotations": {
                names.QOS_LEVEL_ANNOTATION: names.QOS_RECLAIMED_CORES,
                names.MEMORY_ENHANCEMENT_ANNOTATION: huge,
            },
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "a"}]},
    }
    assert read_reclaimed_pod(pod) == (None, "invalid-qos")
    pod["metadata"]["labels"] = ["x"]
    assert read_reclaimed_pod(pod) == (None, "unreadable")


def test_agents_ready_and_silent_are_counted_under_katalysts_names() -> None:
    c = Cluster(nodes=("node-1", "node-2", "node-3"))
    c.step(30)

    def gauge(name: str) -> float | None:
        labels = {} if name == "agent_deployed_node_total" else {"agentName": "katalyst-agent"}
        return c.registry.get_sample_value(name, labels)

    assert (gauge("agent_deployed_node_total"), gauge("agent_ready_total")) == (3, 3)
    assert gauge("agent_not_ready_total") == 0
    c.alive.discard("node-2")
    c.step(595)
    assert gauge("agent_not_ready_total") == 0  # silent, but not yet for taint_after
    c.step(10)
    assert (gauge("agent_ready_total"), gauge("agent_not_ready_total")) == (2, 1)
    c.alive.add("node-2")
    c.step(5)
    assert (gauge("agent_ready_total"), gauge("agent_not_ready_total")) == (3, 0)
