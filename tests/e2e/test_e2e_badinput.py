"""Bad input through the real path: pods whose QoS annotations cannot be read get an Event
that says what is wrong, while the agent and the scheduler keep running and the other pods
are placed as usual."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pykatalyst.api import names
from tests.e2e.conftest import Component, Kubectl, LocalNode, wait_until
from tests.e2e.pykatalyst_e2e import (
    example,
    fit_to_node,
    running_pods,
    start_agent,
    start_scheduler,
)


def _events_for(kubectl: Kubectl, namespace: str, pod: str) -> list[dict[str, Any]]:
    items = kubectl.json("get", "events", "-n", namespace)["items"]
    return [e for e in items if e["involvedObject"].get("name") == pod]


def test_unreadable_qos_gets_an_event_and_harms_nobody(
    kubectl: Kubectl,
    local_node: LocalNode,
    namespace: str,
    components: Callable[..., Component],
    tmp_path: Path,
) -> None:
    agent = start_agent(components, tmp_path, local_node.name)
    scheduler = start_scheduler(components)
    shared = fit_to_node(example("shared-normal-pod.yaml")[0], namespace)
    # One for pykatalyst's scheduler, one that kube-scheduler places on the agent's node.
    bad_sched = copy.deepcopy(shared)
    bad_sched["metadata"]["name"] = "bad-for-scheduler"
    bad_sched["metadata"]["annotations"][names.QOS_LEVEL_ANNOTATION] = "gold_cores"
    bad_node = copy.deepcopy(bad_sched)
    bad_node["metadata"]["name"] = "bad-on-node"
    bad_node["spec"]["schedulerName"] = "default-scheduler"
    for p in (bad_sched, bad_node):
        kubectl.apply(p)

    def said(pod: str, source: str) -> dict[str, Any] | None:
        for e in _events_for(kubectl, namespace, pod):
            component = str(e.get("source", {}).get("component", ""))
            warning = e.get("type") == "Warning" and "gold_cores" in e.get("message", "")
            if warning and source in component:
                return e
        return None

    ev = wait_until("the scheduler's Event", lambda: said("bad-for-scheduler", "scheduler"), 60)
    assert names.QOS_LEVEL_ANNOTATION in ev["message"]
    ev = wait_until("the agent's Event", lambda: said("bad-on-node", "agent"), 90)
    assert names.QOS_LEVEL_ANNOTATION in ev["message"]

    kubectl.apply(shared)
    wait_until(
        "a valid pod placed beside them",
        lambda: running_pods(kubectl, namespace, [shared["metadata"]["name"]]),
        120,
    )
    assert agent.alive() and scheduler.alive()
