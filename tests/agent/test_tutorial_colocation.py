"""Katalyst's colocation tutorial, reproduced on a synthetic 48-cpu, 2-NUMA machine.

The tutorial's node keeps a 4-core burst buffer for shared pods (reservedResourceForAllocate)
and publishes the rest as reclaimed cpu: 44 cores (a share pool at its 4-core minimum),
about 42 with a shared pod loaded to one core, about 40 with a load of three. A node with
no shared pod at all has no share pool (Katalyst's assembler sizes only the reserve and
reclaim pools then), so it publishes all 48. The figures here come out of the
canonical formulas (estimate, regulator, assembler, headroom, smoothing), driven on a
virtual clock.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from pykatalyst.agent.agent import Agent
from pykatalyst.agent.enforcer import Enforcer
from pykatalyst.agent.host.base import Knob
from pykatalyst.agent.plan import AgentPlan
from pykatalyst.api import names
from pykatalyst.api.quantity import Quantity
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.topology.machine import CPUTopology
from tests.agent.inmemory_host import GIB, InMemoryHost, node_json, pod_json, reclaiming

_HERE = Path(__file__).resolve()
EXAMPLES = [
    root / "shared" / "katalyst-examples" / "shared-normal-pod.yaml"
    for root in (_HERE.parents[2], _HERE.parents[3])
]


def tutorial_pod() -> dict[str, Any]:
    """Katalyst's own shared-normal-pod manifest when it is at hand (a 2-core shared pod),
    else the same pod written here."""
    for example in EXAMPLES:
        if example.exists():
            pod: dict[str, Any] = yaml.safe_load(example.read_text())
            pod["spec"]["nodeName"] = "node-1"
            return pod
    return pod_json("shared-normal-pod", cpu="2")


class Tutorial:
    def __init__(self) -> None:
        self.clock = VirtualClock(10_000)
        self.cluster = MemoryCluster(clock=self.clock)
        self.cluster.create(names.NODE, node_json("node-1"))
        topo = CPUTopology.synthetic(
            sockets=2, cores_per_socket=12, threads_per_core=2, memory_per_numa=96 * GIB
        )
        self.host = InMemoryHost(topo)
        cfg = reclaiming({"advisor": {"reserved_for_allocate_cpu": 4}})
        self.agent = Agent(
            "node-1",
            self.cluster,
            self.host,
            self.clock,
            cfg,
            Enforcer(self.host, None, self.clock),
        )

    def run(self, seconds: float) -> AgentPlan:
        plan = self.agent.reconcile(self.clock.now())
        for _ in range(int(seconds // 5)):
            self.clock.advance(5)
            plan = self.agent.reconcile(self.clock.now())
        return plan

    def cnr_reclaimed_millicpu(self) -> int:
        cnr = self.cluster.get(names.CUSTOM_NODE_RESOURCE, "node-1")
        q = cnr["status"]["resources"]["allocatable"][names.RECLAIMED_MILLICPU]
        return Quantity.parse(q).value()


@pytest.fixture(scope="module")
def story() -> dict[str, object]:
    t = Tutorial()
    empty = t.run(300)
    empty_cnr = t.cluster.get(names.CUSTOM_NODE_RESOURCE, "node-1")
    pod = t.cluster.create(names.POD, tutorial_pod(), "default")
    uid = pod["metadata"]["uid"]
    t.host.add_pod(uid)
    t.host.set_load(uid, 1.0)
    one = t.run(300)
    one_milli = t.cnr_reclaimed_millicpu()
    t.host.set_load(uid, 3.0)
    three = t.run(300)
    three_milli = t.cnr_reclaimed_millicpu()
    return {
        "t": t,
        "uid": uid,
        "empty": empty,
        "empty_cnr": empty_cnr,
        "one": one,
        "one_milli": one_milli,
        "three": three,
        "three_milli": three_milli,
    }


def test_a_node_without_shared_pods_reports_every_cpu(story: dict[str, object]) -> None:
    cnr = story["empty_cnr"]
    assert isinstance(cnr, dict)
    alloc = cnr["status"]["resources"]["allocatable"]
    assert alloc[names.RECLAIMED_MILLICPU] == "48k"
    assert cnr["status"]["resources"]["capacity"][names.RECLAIMED_MILLICPU] == "48k"
    plan = story["empty"]
    assert isinstance(plan, AgentPlan)
    share, reclaim = plan.pool(names.POOL_SHARE), plan.pool(names.POOL_RECLAIM)
    assert share is None and reclaim is not None and reclaim.size == 48


def test_load_of_one_core_gives_about_42k_and_a_share_pool_of_6(story: dict[str, object]) -> None:
    assert abs(int(story["one_milli"]) - 42_000) <= 500  # type: ignore[call-overload]
    plan = story["one"]
    assert isinstance(plan, AgentPlan)
    share, reclaim = plan.pool(names.POOL_SHARE), plan.pool(names.POOL_RECLAIM)
    assert share is not None and reclaim is not None
    assert share.size == 6
    assert reclaim.size == 42
    # the shared pod runs on the share pool, the reclaim pool holds the rest
    pod = plan.pod(str(story["uid"]))
    assert pod is not None and pod.cpuset == share.cpuset
    assert share.cpuset.isdisjoint(reclaim.cpuset)
    assert len(share.cpuset | reclaim.cpuset) == 48


def test_load_of_three_gives_about_40k_and_a_share_pool_of_8(story: dict[str, object]) -> None:
    assert abs(int(story["three_milli"]) - 40_000) <= 500  # type: ignore[call-overload]
    one, three = story["one"], story["three"]
    assert isinstance(one, AgentPlan) and isinstance(three, AgentPlan)
    share6, share8 = one.pool(names.POOL_SHARE), three.pool(names.POOL_SHARE)
    reclaim = three.pool(names.POOL_RECLAIM)
    assert share6 is not None and share8 is not None and reclaim is not None
    assert share8.size == 8 and reclaim.size == 40
    # growing keeps the cpus the pool had: nothing the pod ran on is taken away
    assert share6.cpuset.issubset(share8.cpuset)
    assert reclaim.cpuset == CPUTopology.synthetic(2, 12, 2).all_cpus - share8.cpuset


def test_share_pool_size_is_explained_by_its_terms(story: dict[str, object]) -> None:
    three = story["three"]
    assert isinstance(three, AgentPlan)
    share = three.pool(names.POOL_SHARE)
    assert share is not None
    # 3 busy threads: max(1.25 x 3 cores, load ~3) = 3.75, plus the 4-core burst buffer
    assert share.terms["requirement"] == pytest.approx(3.75, abs=0.05)
    assert share.terms["reserved_for_allocate"] == 4
    assert share.terms["size"] == 8


def test_the_cgroups_follow_the_pools(story: dict[str, object]) -> None:
    t = story["t"]
    assert isinstance(t, Tutorial)
    three = story["three"]
    assert isinstance(three, AgentPlan)
    share = three.pool(names.POOL_SHARE)
    assert share is not None
    pod = t.host.pods[str(story["uid"])]
    assert t.host.knobs[pod.containers["app"].cgroup][Knob.CPUSET_CPUS] == share.cpuset
    # cpusets go on containers only: the pod cgroup keeps what the kubelet gave it
    assert Knob.CPUSET_CPUS not in t.host.knobs.get(pod.cgroup, {})


def test_node_status_and_terms_annotation_publish_the_same_figure(
    story: dict[str, object],
) -> None:
    t = story["t"]
    assert isinstance(t, Tutorial)
    node = t.cluster.get(names.NODE, "node-1")
    cnr = t.cluster.get(names.CUSTOM_NODE_RESOURCE, "node-1")
    published = cnr["status"]["resources"]["allocatable"][names.RECLAIMED_MILLICPU]
    assert node["status"]["allocatable"][names.RECLAIMED_MILLICPU] == published
    terms = json.loads(cnr["metadata"]["annotations"][names.RECLAIMED_TERMS_ANNOTATION])
    cpu_terms = terms[names.RECLAIMED_MILLICPU]
    assert cpu_terms["reclaim_pool_cpus"] == 40
    assert round(cpu_terms["value"] * 1000) == Quantity.parse(published).value()
