"""`katalyst explain node|pod` on a cluster the real agent, eviction executor and scheduler
wrote: what a user reads back matches what those components did."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from pykatalyst.agent.agent import Agent
from pykatalyst.agent.config import AgentConfig
from pykatalyst.agent.enforcer import Enforcer
from pykatalyst.agent.eviction import (
    EvictionConfig,
    EvictionExecutor,
    EvictionManager,
    EvictionRecorder,
    EvictionSnapshot,
    ReclaimedCapacity,
)
from pykatalyst.agent.host.base import Knob
from pykatalyst.agent.plan import AgentPlan
from pykatalyst.api import names
from pykatalyst.api.timefmt import rfc3339
from pykatalyst.apiserver.http import kubeconfig_for
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cli.explain import ExplainSource
from pykatalyst.cli.explain_cluster import SILENT_AFTER_S, explain_node
from pykatalyst.cli.explain_pod import explain_pod
from pykatalyst.cli.main import app
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.runtime.apiserver import ApiServer
from pykatalyst.scheduler.scheduler import Scheduler
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology
from tests.agent.eviction_pods import eviction_pod
from tests.agent.inmemory_host import GIB, InMemoryHost, node_json, pod_json

TOPO = CPUTopology.synthetic(2, 12, 2, memory_per_numa=96 * GIB)
NODE = "node-1"
BOUND = {names.MEMORY_ENHANCEMENT_ANNOTATION: '{"numa_binding": "true"}'}
runner = CliRunner()


@dataclass
class World:
    clock: VirtualClock
    cluster: MemoryCluster
    host: InMemoryHost
    plan: AgentPlan
    uids: dict[str, str]

    def invoke(self, *args: str) -> Any:
        src = ExplainSource(self.cluster, self.clock)
        return runner.invoke(app, ["explain", *args], obj=src)

    def cpuset(self, name: str) -> CPUSet:
        cgroup = self.host.pods[self.uids[name]].containers["app"].cgroup
        value = self.host.knobs[cgroup][Knob.CPUSET_CPUS]
        assert isinstance(value, CPUSet)
        return value


def _configure(cluster: MemoryCluster) -> None:
    aqc = {
        "metadata": {"name": "colocation", "namespace": "default"},
        "spec": {"config": {"reclaimedResourceConfig": {"enableReclaim": True}}},
    }
    cluster.create(names.ADMIN_QOS_CONFIGURATION, aqc, "default")
    cnc = cluster.create(names.CUSTOM_NODE_CONFIG, {"metadata": {"name": NODE}})
    target = {
        "configType": {
            "group": names.CONFIG_GROUP,
            "version": "v1alpha1",
            "resource": names.ADMIN_QOS_CONFIGURATION.plural,
        },
        "configName": "colocation",
        "configNamespace": "default",
        "hash": "abc",
    }
    cnc["status"] = {"katalystCustomConfigList": [target]}
    cluster.update_status(names.CUSTOM_NODE_CONFIG, cnc)


def _evict(cluster: MemoryCluster, uid: str, now: float) -> None:
    """The eviction manager and executor, as the agent's eviction stage runs them."""
    pod = eviction_pod(uid, "default", "batch", names.QOS_RECLAIMED_CORES, reclaimed_milli_cpu=9000)
    plan = EvictionManager(NODE, EvictionConfig()).decide(
        EvictionSnapshot(now, NODE, (pod,), reclaimed=ReclaimedCapacity(1000, 100 * GIB))
    )
    EvictionExecutor(cluster, NODE, EvictionRecorder()).apply(plan)


def build_world() -> World:
    clock = VirtualClock(50_000)
    cluster = MemoryCluster(clock=clock)
    for name in (NODE, "node-2"):
        cluster.create(names.NODE, node_json(name))
    _configure(cluster)
    host = InMemoryHost(TOPO)
    agent = Agent(NODE, cluster, host, clock, AgentConfig(), Enforcer(host, None, clock))
    uids = {}
    pods: dict[str, dict[str, Any]] = {
        "web": {"cpu": "2"},
        "batch": {"level": "reclaimed_cores", "cpu": None, "memory": None, "reclaimed_cpu": "9k"},
        "db": {"level": "dedicated_cores", "cpu": "4", "memory": "1Gi", "annotations": BOUND},
        "bad": {"level": "gold_cores"},
    }
    for name, kw in pods.items():
        obj = cluster.create(names.POD, pod_json(name, **kw), "default")
        uids[name] = str(obj["metadata"]["uid"])
        host.add_pod(uids[name])
    plan = agent.reconcile(clock.now())
    for _ in range(80):
        clock.advance(5)
        plan = agent.reconcile(clock.now())
    _evict(cluster, uids["batch"], clock.now())
    waiting = pod_json("waiting", node="", cpu="64")
    cluster.create(names.POD, waiting, "default")
    Scheduler(cluster).run_until_idle(clock.now())
    return World(clock, cluster, host, plan, uids)


@pytest.fixture(scope="module")
def world() -> World:
    return build_world()


def node_report(world: World) -> dict[str, Any]:
    result = world.invoke("node", NODE, "-o", "json")
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


# --- node ---------------------------------------------------------------------------------


def test_node_shows_the_published_reclaimed_figures_with_their_terms(world: World) -> None:
    data = node_report(world)
    cnr = world.cluster.get(names.CUSTOM_NODE_RESOURCE, NODE)
    published = cnr["status"]["resources"]["allocatable"]
    cpu = data["reclaimed"]["cpu"]
    assert cpu["allocatable"] == published[names.RECLAIMED_MILLICPU]
    assert data["reclaimed"]["memory"]["capacity"] == published[names.RECLAIMED_MEMORY]
    # the terms are the agent's: the reclaim pool it measured is the pool it set
    reclaim = world.plan.pool(names.POOL_RECLAIM)
    assert reclaim is not None
    assert cpu["terms"]["reclaim_pool_cpus"] == reclaim.size
    assert cpu["terms"]["value"] == world.plan.reclaimed_cpu.reported
    assert "formula" in data["reclaimed"]["memory"]["terms"]
    assert data["reclaimed"]["terms_error"] is None


def test_node_shows_numa_zones_with_the_bound_pod(world: World) -> None:
    data = node_report(world)
    assert [z["numa"] for z in data["numa"]] == ["0", "1"]
    db_numa = TOPO.numa_of(min(world.cpuset("db")))
    zone = data["numa"][db_numa]
    assert [a["consumer"] for a in zone["allocations"]] == [f"default/db/{world.uids['db']}"]
    assert zone["allocations"][0]["requests"]["cpu"] == "4"
    other = data["numa"][1 - db_numa]
    assert other["allocations"] == []


def test_node_shows_the_pools_the_agent_enforced(world: World) -> None:
    data = node_report(world)
    pools = {p["name"]: p for p in data["pools"]}
    assert set(pools) == {p.name for p in world.plan.pools}
    for p in world.plan.pools:
        assert CPUSet.parse(pools[p.name]["cpuset"]) == p.cpuset
        assert pools[p.name]["size"] == p.size
    assert pools[names.POOL_SHARE]["pods"] == ["default/web"]
    assert "default/batch" in pools[names.POOL_RECLAIM]["pods"]
    # and the share pool is where the shared pod's containers really run
    assert CPUSet.parse(pools[names.POOL_SHARE]["cpuset"]) == world.cpuset("web")


def test_node_health_ages_with_the_clock(world: World) -> None:
    data = node_report(world)
    health = data["health"]
    assert health["status"] == "True" and health["age_s"] < SILENT_AFTER_S
    assert not health["silent"]
    # the same CNR read later by the clock, the agent having stopped meanwhile
    later_clock = VirtualClock(world.clock.now() + SILENT_AFTER_S + 60)
    src = ExplainSource(world.cluster, later_clock)
    result = runner.invoke(app, ["explain", "node", NODE, "-o", "json"], obj=src)
    later = json.loads(result.stdout)["health"]
    assert later["silent"] and later["age_s"] == pytest.approx(
        health["age_s"] + SILENT_AFTER_S + 60
    )
    assert later["last_heartbeat"] == health["last_heartbeat"]


def test_node_shows_the_taints_and_events_of_a_pressure_condition(world: World) -> None:
    data = node_report(world)
    cnr_taints = data["taints"]["cnr"]
    assert [t["key"] for t in cnr_taints] == [
        names.TAINT_PREFIX + names.CONDITION_RECLAIMED_RESOURCE_PRESSURE
    ]
    assert names.AGENT_COMPONENT in cnr_taints[0]["set_by"]
    reasons = [e["reason"] for e in data["events"]]
    assert "ConditionSet" in reasons
    assert names.EVENT_REASON_EVICT_CREATED in reasons  # a pod's Event, written from the node
    assert "InvalidQoS" in reasons
    cond = next(e for e in data["events"] if e["reason"] == "ConditionSet")
    assert cond["record"]["kind"] == "condition-set"
    assert cond["record"]["plugin"] == names.EVICTION_PLUGIN_RECLAIMED_RESOURCE


def test_node_shows_the_config_in_force(world: World) -> None:
    config = node_report(world)["config"]
    assert config["cnc"]["targets"][0]["name"] == "colocation"
    aqc = config["admin_qos"]
    assert aqc["name"] == "default/colocation" and aqc["error"] is None
    assert aqc["spec"]["config"]["reclaimedResourceConfig"]["enableReclaim"] is True
    # Since the agent's first tick, when it put the config in force.
    assert aqc["in_force_since"] == rfc3339(50_000)
    table = world.invoke("node", NODE)
    assert f"in force since {rfc3339(50_000)}" in " ".join(table.stdout.split())


def test_node_table_names_every_section(world: World) -> None:
    result = world.invoke("node", NODE)
    assert result.exit_code == 0, result.output
    for title in (
        "Reclaimed capacity of node node-1",
        "NUMA zones",
        "CPU pools",
        "Agent health",
        "Taints set by pykatalyst",
        "Configuration in force",
        "Recent pykatalyst Events",
    ):
        assert title in result.stdout
    assert "reclaim_pool_cpus" in result.stdout
    memory = world.plan.reclaimed_memory.reported
    assert memory is not None
    assert f"value = {int(memory)} ({memory / GIB:.2f}Gi)" in result.stdout  # bytes, and GiB
    assert "default/colocation" in result.stdout


def test_event_limit_keeps_the_most_recent(world: World) -> None:
    everything = explain_node(world.cluster, NODE, world.clock.now(), limit=0)["events"]
    last_two = explain_node(world.cluster, NODE, world.clock.now(), limit=2)["events"]
    assert len(everything) > 2
    assert last_two == everything[-2:]


@pytest.fixture
def corrupted(world: World) -> Iterator[World]:
    """The node's CNR with malformed annotations, put back afterwards."""
    cnr = world.cluster.get(names.CUSTOM_NODE_RESOURCE, NODE)
    saved = dict(cnr["metadata"]["annotations"])
    bad = {names.RECLAIMED_TERMS_ANNOTATION: "{not json", names.CPU_POOLS_ANNOTATION: "[1, 2]"}
    world.cluster.patch(names.CUSTOM_NODE_RESOURCE, NODE, {"metadata": {"annotations": bad}})
    try:
        yield world
    finally:
        world.cluster.patch(names.CUSTOM_NODE_RESOURCE, NODE, {"metadata": {"annotations": saved}})


def test_malformed_annotations_are_shown_not_fatal(corrupted: World) -> None:
    data = node_report(corrupted)
    assert data["reclaimed"]["terms_error"].startswith(
        f"annotation {names.RECLAIMED_TERMS_ANNOTATION} is not JSON"
    )
    assert data["reclaimed"]["cpu"]["terms"] is None
    assert data["reclaimed"]["cpu"]["allocatable"] is not None  # the figures still show
    assert data["pools"] == []
    assert any(names.CPU_POOLS_ANNOTATION in p for p in data["problems"])
    table = corrupted.invoke("node", NODE)
    assert table.exit_code == 0, table.output
    assert "is not JSON" in table.output
    pod = corrupted.invoke("pod", "default/web", "-o", "json")
    assert pod.exit_code == 0, pod.output
    assert json.loads(pod.stdout)["placement"]["pool"] is None


def test_malformed_quantities_in_the_cnr_status_are_shown_not_fatal(world: World) -> None:
    saved = world.cluster.get(names.CUSTOM_NODE_RESOURCE, NODE)["status"]
    zones = json.loads(json.dumps(saved["topologyZone"]))
    zones[0]["children"][0]["resources"]["capacity"]["cpu"] = "lots"
    bad = {
        "resources": {"allocatable": {names.RECLAIMED_MILLICPU: "plenty"}},
        "topologyZone": zones,
    }
    world.cluster.patch(names.CUSTOM_NODE_RESOURCE, NODE, {"status": bad}, subresource="status")
    try:
        node = world.invoke("node", NODE, "-o", "json")
        pod = world.invoke("pod", "default/db", "-o", "json")
    finally:
        world.cluster.patch(
            names.CUSTOM_NODE_RESOURCE, NODE, {"status": saved}, subresource="status"
        )
    assert node.exit_code == 0, node.output
    data = json.loads(node.stdout)
    assert data["reclaimed"]["cpu"]["allocatable"] == "plenty"  # as published
    assert data["numa"] == []
    assert any(p.startswith("status.topologyZone cannot be read") for p in data["problems"])
    assert pod.exit_code == 0, pod.output
    assert json.loads(pod.stdout)["placement"]["pool"] == names.POOL_DEDICATED


def test_a_missing_node_or_cnr_is_a_clear_error(world: World) -> None:
    missing = world.invoke("node", "node-9")
    assert missing.exit_code == 1
    assert "Node node-9 not found" in missing.output
    no_cnr = world.invoke("node", "node-2")
    assert no_cnr.exit_code == 1
    assert f"node node-2 has no {names.CUSTOM_NODE_RESOURCE.kind}" in no_cnr.output
    assert "Traceback" not in missing.output + no_cnr.output


def test_an_invalid_admin_qos_configuration_is_shown_with_its_error(world: World) -> None:
    bad = {"spec": {"config": {"reclaimedResourceConfig": {"enableReclaim": "perhaps"}}}}
    world.cluster.patch(names.ADMIN_QOS_CONFIGURATION, "colocation", bad, "default")
    try:
        result = world.invoke("node", NODE, "-o", "json")
        table = world.invoke("node", NODE)
    finally:
        good = {"spec": {"config": {"reclaimedResourceConfig": {"enableReclaim": True}}}}
        world.cluster.patch(names.ADMIN_QOS_CONFIGURATION, "colocation", good, "default")
    assert result.exit_code == 0, result.output
    aqc = json.loads(result.stdout)["config"]["admin_qos"]
    assert aqc["error"].startswith("invalid: spec.config.reclaimedResourceConfig.enableReclaim: ")
    assert "(got 'perhaps')" in aqc["error"]
    assert aqc["spec"] == bad["spec"]  # what is stored, shown as it is
    assert table.exit_code == 0 and "invalid:" in table.stdout


def test_a_pod_on_a_node_without_an_agent_says_so(world: World) -> None:
    world.cluster.create(names.POD, pod_json("stray", node="node-2"), "default")
    try:
        data = pod_report(world, "stray")
    finally:
        world.cluster.delete(names.POD, "stray", "default", grace_period_seconds=0)
    assert data["node"] == "node-2"
    assert data["placement"]["pool"] is None and data["placement"]["why"] is None
    assert data["problems"] == [
        f"node node-2 has no {names.CUSTOM_NODE_RESOURCE.kind}: no agent reports"
    ]


# --- pod ----------------------------------------------------------------------------------


def pod_report(world: World, name: str) -> dict[str, Any]:
    result = world.invoke("pod", f"default/{name}", "-o", "json")
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def test_shared_pod_shows_its_qos_pool_and_real_cpuset(world: World) -> None:
    data = pod_report(world, "web")
    assert data["node"] == NODE
    assert data["qos"]["valid"] and data["qos"]["level"] == names.QOS_SHARED_CORES
    placement = data["placement"]
    assert placement["pool"] == names.POOL_SHARE
    assert CPUSet.parse(placement["cpuset"]) == world.cpuset("web")
    assert placement["why"] == "shared_cores: pool share (the default pool)"
    assert data["scheduling"] is None


def test_dedicated_pod_shows_exclusive_cpus_and_its_numa_node(world: World) -> None:
    data = pod_report(world, "db")
    assert data["qos"]["enhancements"][names.ENH_NUMA_BINDING] is True
    placement = data["placement"]
    assert CPUSet.parse(placement["cpuset"]) == world.cpuset("db")
    assert "exclusive cpus" in placement["why"] and "numa_binding" in placement["why"]
    numa = TOPO.numa_of(min(world.cpuset("db")))
    assert placement["numa"] == [{"numa": str(numa), "requests": {"cpu": "4", "memory": "1Gi"}}]


def test_evicted_pod_shows_the_eviction_with_its_plugin(world: World) -> None:
    data = pod_report(world, "batch")
    assert data["deleting"] is not None  # evicted: terminating for its grace period
    assert data["placement"]["pool"] == names.POOL_RECLAIM
    reclaim = world.plan.pool(names.POOL_RECLAIM)
    assert reclaim is not None
    why = data["placement"]["why"]
    assert why.startswith(f"reclaimed_cores: the reclaim pool ({reclaim.size} cpus now)")
    evictions = [e for e in data["events"] if e["reason"] == names.EVENT_REASON_EVICT_CREATED]
    assert len(evictions) == 1
    record = evictions[0]["record"]
    assert record["kind"] == "eviction" and record["object"] == "Pod/default/batch"
    assert record["plugin"] == names.EVICTION_PLUGIN_RECLAIMED_RESOURCE
    assert record["node"] == NODE
    table = world.invoke("pod", "default/batch")
    assert names.EVICTION_PLUGIN_RECLAIMED_RESOURCE in table.stdout
    assert "(terminating)" in table.stdout


def test_invalid_qos_pod_shows_the_error_and_is_left_as_placed(world: World) -> None:
    data = pod_report(world, "bad")
    qos = data["qos"]
    assert not qos["valid"]
    assert qos["errors"][0]["field"] == f"metadata.annotations[{names.QOS_LEVEL_ANNOTATION}]"
    assert qos["errors"][0]["value"] == "gold_cores"
    assert data["placement"]["why"].startswith("left as placed")
    assert [e["reason"] for e in data["events"]] == ["InvalidQoS"]
    table = world.invoke("pod", "default/bad")
    assert table.exit_code == 0
    assert "gold_cores" in table.stdout and "invalid" in table.stdout


def test_pending_pod_shows_the_schedulers_reasons(world: World) -> None:
    data = pod_report(world, "waiting")
    assert data["node"] is None and data["placement"] is None
    sched = data["scheduling"]
    assert sched["message"].startswith("0/2 nodes are available:")
    assert "Insufficient cpu" in sched["message"]
    assert sched["component"] == sched["scheduler"]  # the scheduler the pod asked for
    table = world.invoke("pod", "default/waiting")
    assert "Pending: 0/2 nodes are available" in table.stdout


def test_pending_pod_without_a_scheduler_verdict_says_so(world: World) -> None:
    world.cluster.create(names.POD, pod_json("fresh", node=""), "default")
    try:
        data = explain_pod(world.cluster, "default", "fresh", world.clock.now())
    finally:
        world.cluster.delete(names.POD, "fresh", "default", grace_period_seconds=0)
    assert data["scheduling"]["message"] is None
    assert "has not tried the pod yet" in data["scheduling"]["why"]


def test_a_missing_pod_or_bad_key_is_a_clear_error(world: World) -> None:
    missing = world.invoke("pod", "default/nope")
    assert missing.exit_code == 1 and "Pod default/nope not found" in missing.output
    bad = world.invoke("pod", "nope")
    assert bad.exit_code == 1 and "NAMESPACE/NAME" in bad.output


# --- the command's layout -----------------------------------------------------------------


def test_file_options_do_not_mix_with_a_subcommand(world: World) -> None:
    result = world.invoke("--node", NODE, "node", NODE)
    assert result.exit_code == 2
    assert "file form" in result.output


def test_without_a_cluster_option_or_kubeconfig_it_says_what_to_give(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    result = runner.invoke(app, ["explain", "node", NODE])
    assert result.exit_code == 2
    assert "no cluster found" in result.output and "give --kubeconfig PATH" in result.output
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    result = runner.invoke(app, ["explain", "node", NODE])
    assert result.exit_code == 2
    assert f"$KUBECONFIG={tmp_path / 'none'}: no such file" in result.output


def test_over_http_through_a_kubeconfig_it_reads_the_same(world: World, tmp_path: Path) -> None:
    """The real client path: the same store served by the embedded API server."""
    with ApiServer(world.cluster, bookmark_seconds=0) as server:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(kubeconfig_for(server.url)))
        for args in (["node", NODE], ["pod", "default/batch"], ["pod", "default/waiting"]):
            http = runner.invoke(
                app, ["explain", *args, "--kubeconfig", str(kubeconfig), "-o", "json"]
            )
            assert http.exit_code == 0, http.output
            local = world.invoke(*args, "-o", "json")
            # the command's own clock differs (a real one over HTTP): so do time and ages
            assert _timeless(json.loads(http.stdout)) == _timeless(json.loads(local.stdout))
        missing = runner.invoke(
            app, ["explain", "pod", "default/nope", "--kubeconfig", str(kubeconfig)]
        )
        assert missing.exit_code == 1 and "not found" in missing.output


def _timeless(report: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in report.items() if k not in ("time", "health")}


def test_pod_cpu_burst_follows_the_admin_qos_configuration_of_its_node(world: World) -> None:
    # Katalyst's cpuBurstConfig, in the AdminQoSConfiguration the node's CustomNodeConfig
    # names: a dedicated pod whose policy is default bursts statically by 40 %; a shared
    # pod is closed, as it is not the node's only shared pod (web, and bad read as shared)
    assert pod_report(world, "db")["qos"]["cpu_burst"] == {
        "policy": names.CPU_BURST_POLICY_DEFAULT,
        "percent": 100,
        "source": "default/colocation",
    }
    burst = {"defaultCPUBurstPercent": 40, "enableDedicatedCoresDefaultCPUBurst": True}
    burst["enableSharedCoresDefaultCPUBurst"] = True
    patch = {"spec": {"config": {"fineGrainedResourceConfig": {"cpuBurstConfig": burst}}}}
    world.cluster.patch(names.ADMIN_QOS_CONFIGURATION, "colocation", patch, "default")
    try:
        db = pod_report(world, "db")["qos"]["cpu_burst"]
        web = pod_report(world, "web")["qos"]["cpu_burst"]
    finally:
        gone = {"spec": {"config": {"fineGrainedResourceConfig": None}}}
        world.cluster.patch(names.ADMIN_QOS_CONFIGURATION, "colocation", gone, "default")
    assert (db["policy"], db["percent"]) == (names.CPU_BURST_POLICY_STATIC, 40)
    assert (web["policy"], web["percent"]) == (names.CPU_BURST_POLICY_CLOSED, 40)
    # a pod on a node without a CustomNodeConfig: Katalyst's defaults
    world.cluster.create(names.POD, pod_json("alone", node="node-2"), "default")
    try:
        alone = pod_report(world, "alone")["qos"]["cpu_burst"]
    finally:
        world.cluster.delete(names.POD, "alone", "default", grace_period_seconds=0)
    assert alone["policy"] == names.CPU_BURST_POLICY_DEFAULT and alone["percent"] == 100
    assert alone["source"].startswith("Katalyst's defaults")
