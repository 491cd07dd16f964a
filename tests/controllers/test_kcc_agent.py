"""The agent reads the CustomNodeConfig the controllers write, and follows a changed
AdminQoSConfiguration without a restart."""

from __future__ import annotations

from pykatalyst.agent.agent import Agent
from pykatalyst.agent.config import AgentConfig
from pykatalyst.agent.enforcer import Enforcer
from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.controllers import BackstopConfig
from pykatalyst.runtime.controller import ControllerRunner
from pykatalyst.topology.machine import CPUTopology
from tests.agent.inmemory_host import GIB, InMemoryHost, node_json

AQC = names.ADMIN_QOS_CONFIGURATION
NS = "dyn-config"


def test_a_changed_admin_qos_config_reaches_the_running_agent() -> None:
    clock = VirtualClock(10_000)
    cluster = MemoryCluster(clock=clock)
    cluster.create(names.NAMESPACE, {"metadata": {"name": NS}})
    cluster.create(names.NODE, node_json("node-1"))
    topo = CPUTopology.synthetic(
        sockets=1, cores_per_socket=8, threads_per_core=1, memory_per_numa=32 * GIB
    )
    host = InMemoryHost(topo)
    base = AgentConfig()
    agent = Agent("node-1", cluster, host, clock, base, Enforcer(host, None, clock))
    runner = ControllerRunner(
        cluster, BackstopConfig(), period_s=5, controllers=("lifecycle", "kcc")
    )
    cluster.create(
        names.KATALYST_CUSTOM_CONFIG,
        {
            "metadata": {"name": "admin-qos", "namespace": NS},
            "spec": {
                "targetType": {"group": AQC.group, "version": AQC.version, "resource": AQC.plural}
            },
        },
        NS,
    )
    first = not base.advisor.enable_reclaim
    cluster.create(
        AQC,
        {
            "metadata": {"name": "default", "namespace": NS},
            "spec": {"config": {"reclaimedResourceConfig": {"enableReclaim": first}}},
        },
        NS,
    )

    def run(seconds: int) -> None:
        for _ in range(seconds):
            runner.step(clock.now())
            agent.reconcile(clock.now())
            clock.advance(1)

    run(40)
    entries = cluster.get(names.CUSTOM_NODE_CONFIG, "node-1")["status"]["katalystCustomConfigList"]
    assert [(e["configNamespace"], e["configName"]) for e in entries] == [(NS, "default")]
    assert agent.config.advisor.enable_reclaim is first
    cluster.patch(
        AQC,
        "default",
        {"spec": {"config": {"reclaimedResourceConfig": {"enableReclaim": not first}}}},
        NS,
    )
    run(40)
    assert agent.config.advisor.enable_reclaim is (not first)
