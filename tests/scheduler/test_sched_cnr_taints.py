"""CNR taints keep the pods of their QoS level away (pykatalyst's addition: Katalyst's
scheduler does not read them), unless the pod tolerates them."""

from __future__ import annotations

from typing import Any

from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.scheduler.config import load_config_text
from pykatalyst.scheduler.scheduler import Scheduler
from tests.scheduler.sched_helpers import add_cnr, add_node, add_pod, cnr, events_for, node, pod

PROFILE = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
  - plugins:
      filter:
        enabled: [{name: QoSAwareNodeResourcesFit}]
        disabled: [{name: NodeResourcesFit}]
"""
# what the agent's backstop writes when a node's agent goes silent
SILENT = {
    "key": "node.kubernetes.io/unschedulable",
    "effect": "NoSchedule",
    "qosLevel": "reclaimed_cores",
}
RECLAIMED = {names.RECLAIMED_MILLICPU: "1000", names.RECLAIMED_MEMORY: "1Gi"}


def cluster(taints: list[dict[str, str]]) -> MemoryCluster:
    c = MemoryCluster(VirtualClock())
    add_node(c, node("n0"))
    raw = cnr("n0")
    raw["spec"] = {"taints": taints}
    add_cnr(c, raw)
    return c


def reclaimed(name: str, tolerations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return pod(name, RECLAIMED, qos="reclaimed_cores", tolerations=tolerations)


def test_a_cnr_taint_keeps_new_reclaimed_pods_away() -> None:
    c = cluster([SILENT])
    sched = Scheduler(c, load_config_text(PROFILE))
    add_pod(c, reclaimed("batch"))
    [outcome] = sched.run_until_idle(0.0)
    assert outcome.node is None
    assert outcome.message == (
        "0/1 nodes are available: 1 node(s) had untolerated CNR taint "
        "{node.kubernetes.io/unschedulable: }."
    )
    assert [e["reason"] for e in events_for(c, "batch")] == ["FailedScheduling"]


def test_other_qos_levels_and_tolerating_pods_are_not_kept_away() -> None:
    c = cluster([SILENT])
    sched = Scheduler(c, load_config_text(PROFILE))
    add_pod(c, pod("web", {"cpu": "1"}, qos="shared_cores"))
    tolerate = [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]
    add_pod(c, reclaimed("tolerant", tolerations=tolerate))
    assert {o.pod: o.node for o in sched.run_until_idle(0.0)} == {
        "default/web": "n0",
        "default/tolerant": "n0",
    }


def test_removing_the_cnr_taint_wakes_the_waiting_reclaimed_pod() -> None:
    c = cluster([SILENT])
    sched = Scheduler(c, load_config_text(PROFILE))
    add_pod(c, reclaimed("batch"))
    assert [o.node for o in sched.run_until_idle(0.0)] == [None]
    current = c.get(names.CUSTOM_NODE_RESOURCE, "n0")
    current["spec"]["taints"] = []
    c.update(names.CUSTOM_NODE_RESOURCE, current)
    # long before the periodic flush: the change itself wakes the pod
    assert [o.node for o in sched.run_until_idle(10.0)] == ["n0"]


def test_a_prefer_no_schedule_cnr_taint_does_not_filter() -> None:
    c = cluster([{**SILENT, "effect": "PreferNoSchedule"}])
    sched = Scheduler(c, load_config_text(PROFILE))
    add_pod(c, reclaimed("batch"))
    assert [o.node for o in sched.run_until_idle(0.0)] == ["n0"]
