"""An AdminQoSConfiguration as Katalyst users write it: Go durations, Katalyst's field names,
fields pykatalyst does not implement; and a bad one, which changes nothing and says why."""

from __future__ import annotations

from typing import Any

from pykatalyst.agent.agent import Agent
from pykatalyst.agent.config import AgentConfig
from pykatalyst.agent.enforcer import Enforcer
from pykatalyst.agent.eviction import EvictionStage
from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.topology.machine import CPUTopology
from tests.agent.inmemory_host import GIB, InMemoryHost, node_json

TOPO = CPUTopology.synthetic(2, 12, 2, memory_per_numa=96 * GIB)
REF = "kube-system/default"


def _aqc(config: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": names.ADMIN_QOS_CONFIGURATION.api_version,
        "kind": names.ADMIN_QOS_CONFIGURATION.kind,
        "metadata": {"name": "default", "namespace": "kube-system"},
        "spec": {"config": config},
    }


KATALYST_STYLE = {
    "reclaimedResourceConfig": {"enableReclaim": False},
    "evictionConfig": {
        "cpuPressureEvictionConfig": {
            "enableLoadEviction": True,
            "loadEvictionCoolDownTime": "300s",
            "minSuppressionToleranceDuration": "5m",
        },
        "memoryPressureEvictionConfig": {
            "systemKswapdRateExceedDurationThreshold": 240,
            "enableRSSOveruseEviction": True,
            "gracePeriod": 30,
        },
    },
    "qrmPluginConfig": {"cpuPluginConfig": {"enableSuppression": True}},
}


class Node:
    def __init__(self, config: dict[str, Any]) -> None:
        self.clock = VirtualClock(50_000)
        self.cluster = MemoryCluster(clock=self.clock, namespaces=("default", "kube-system"))
        self.cluster.create(names.NODE, node_json("node-1"))
        self.cluster.create(names.ADMIN_QOS_CONFIGURATION, _aqc(config), "kube-system")
        host = InMemoryHost(TOPO)
        base = AgentConfig.model_validate(
            {"admin_qos_config": REF, "advisor": {"enable_reclaim": True}}
        )
        self.agent = Agent(
            "node-1", self.cluster, host, self.clock, base, Enforcer(host, None, self.clock)
        )
        self.stage = EvictionStage("node-1", self.cluster, base.eviction, admin_qos=REF)

    def update(self, config: dict[str, Any]) -> None:
        current = self.cluster.get(names.ADMIN_QOS_CONFIGURATION, "default", "kube-system")
        current["spec"]["config"] = config
        self.cluster.update(names.ADMIN_QOS_CONFIGURATION, current)
        self.clock.advance(60)

    def events(self, reason: str) -> list[dict[str, Any]]:
        items = self.cluster.list(names.EVENT, "kube-system").items
        return [e for e in items if e["reason"] == reason]


def test_a_katalyst_config_with_go_durations_takes_effect() -> None:
    node = Node(KATALYST_STYLE)
    plan = node.agent.reconcile()
    assert node.agent.config.advisor.enable_reclaim is False
    assert plan.reclaimed_cpu.reported == 0
    assert plan.config["state"] == "in force"
    node.stage.refresh_config(node.clock.now())
    live = node.stage.manager.config
    assert node.stage.config_warning is None
    assert live.load.enabled is True and live.load.cool_down_s == 300.0
    assert live.system_memory.kswapd_rate_exceed_duration_s == 240
    assert live.system_memory.deletion_grace_s == live.numa_memory.deletion_grace_s == 30


def test_fields_pykatalyst_does_not_implement_are_listed_once() -> None:
    node = Node(KATALYST_STYLE)
    plan = node.agent.reconcile()
    ignored = set(plan.config["not_implemented"])
    cfg = "spec.config."
    assert ignored == {
        cfg + "evictionConfig.cpuPressureEvictionConfig.minSuppressionToleranceDuration",
        cfg + "evictionConfig.memoryPressureEvictionConfig.enableRSSOveruseEviction",
        cfg + "qrmPluginConfig.cpuPluginConfig.enableSuppression",
    }
    (event,) = node.events("FieldsNotImplemented")
    assert event["involvedObject"]["kind"] == names.ADMIN_QOS_CONFIGURATION.kind
    assert event["involvedObject"]["apiVersion"] == names.ADMIN_QOS_CONFIGURATION.api_version
    assert "enableRSSOveruseEviction" in event["message"]
    node.clock.advance(60)
    node.agent.reconcile()
    assert len(node.events("FieldsNotImplemented")) == 1  # once per version of the object


def test_an_invalid_value_keeps_the_last_good_config_and_says_which_field() -> None:
    node = Node(KATALYST_STYLE)
    node.agent.reconcile()
    assert node.agent.config.advisor.enable_reclaim is False
    bad = {
        "reclaimedResourceConfig": {"enableReclaim": True},
        "evictionConfig": {"cpuPressureEvictionConfig": {"loadEvictionCoolDownTime": "soon"}},
    }
    node.update(bad)
    plan = node.agent.reconcile()
    # The last good config stays in force: reclaim stays off.
    assert node.agent.config.advisor.enable_reclaim is False
    field = "spec.config.evictionConfig.cpuPressureEvictionConfig.loadEvictionCoolDownTime"
    assert plan.config["state"] == "invalid"
    assert field in plan.config["error"] and "accepted: a Go duration" in plan.config["error"]
    assert any(field in w for w in plan.warnings)
    (event,) = node.events("InvalidConfig")
    assert field in event["message"] and event["type"] == "Warning"
    # Still visible on the next ticks, without a second Event.
    node.clock.advance(5)
    plan = node.agent.reconcile()
    assert any(field in w for w in plan.warnings)
    assert len(node.events("InvalidConfig")) == 1
    # Fixed: it takes effect.
    node.update({"reclaimedResourceConfig": {"enableReclaim": True}})
    plan = node.agent.reconcile()
    assert node.agent.config.advisor.enable_reclaim is True
    assert plan.config["state"] == "in force"


def test_the_agent_says_at_start_whether_it_reclaims(caplog: Any) -> None:
    import logging

    with caplog.at_level(logging.INFO, logger="pykatalyst.agent"):
        Node(KATALYST_STYLE)
    (line,) = [r.getMessage() for r in caplog.records if "reclaim" in r.getMessage()]
    assert "reclaim on (advisor.enable_reclaim=true)" in line
    assert "cpu.idle on reclaimed pods off (reclaimed_cpu_idle=false)" in line


def test_each_version_put_in_force_is_told_once_with_a_config_applied_event() -> None:
    node = Node({"reclaimedResourceConfig": {"enableReclaim": False}})
    node.agent.reconcile()
    (event,) = node.events(names.EVENT_REASON_CONFIG_APPLIED)
    assert event["type"] == "Normal" and event["source"]["host"] == "node-1"
    assert event["involvedObject"]["name"] == "default" and REF in event["message"]
    node.clock.advance(60)
    node.agent.reconcile()
    assert len(node.events(names.EVENT_REASON_CONFIG_APPLIED)) == 1  # nothing new
    node.update({"reclaimedResourceConfig": {"enableReclaim": True}})
    node.agent.reconcile()
    assert node.agent.config.advisor.enable_reclaim is True
    assert len(node.events(names.EVENT_REASON_CONFIG_APPLIED)) == 2  # a new version
