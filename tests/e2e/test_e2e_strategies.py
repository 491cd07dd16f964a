"""Katalyst's scheduling-strategies tutorial on the real API server: its
reclaimed-deployment.yaml (10 replicas, requests as written) over three fake nodes with a
CNR each, under its spread, binpack and custom policies, each run by its own
`katalyst scheduler --config` process."""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import (
    WORKLOAD_IMAGE,
    Component,
    Kubectl,
    component_kubeconfig,
    wait_until,
)
from tests.e2e.fake_nodes import FakeNodes, fake_nodes, renamed_config
from tests.scheduler.sched_helpers import EXAMPLES

__all__ = ["fake_nodes"]

# Room for six of the tutorial's pods (4k reclaimed millicpu, 16Gi reclaimed memory) each.
ROOM = {"reclaimed_cpu": "24k", "reclaimed_memory": "96Gi"}


@pytest.mark.parametrize("policy", ["spread", "binpack", "custom"])
def test_the_tutorial_deployment_under_each_policy(
    policy: str,
    kubectl: Kubectl,
    namespace: str,
    fake_nodes: FakeNodes,
    components: Callable[..., Component],
    tmp_path: Path,
) -> None:
    source = EXAMPLES / f"scheduler-policy-{policy}.yaml"
    manifest = EXAMPLES / "reclaimed-deployment.yaml"
    if not source.is_file() or not manifest.is_file():
        pytest.skip(f"Katalyst's examples are not beside the checkout ({EXAMPLES})")
    (deployment,) = [d for d in yaml.safe_load_all(manifest.read_text()) if d]
    nodes = [fake_nodes.add(f"n{i}", cnr_kwargs=ROOM) for i in range(3)]
    name = f"e2e-{policy}-{fake_nodes.run}"
    config = renamed_config(source, name, tmp_path / "policy.yaml")
    components(
        f"scheduler-{policy}",
        "scheduler", "--config", str(config), "--kubeconfig", component_kubeconfig("scheduler"),
    )  # fmt: skip
    dep = copy.deepcopy(deployment)
    dep["metadata"]["namespace"] = namespace
    spec = dep["spec"]["template"]["spec"]
    spec["schedulerName"] = name
    spec["terminationGracePeriodSeconds"] = 0
    template = fake_nodes.pod("x", namespace, {}, scheduler=name)["spec"]
    spec["tolerations"] = template["tolerations"]
    spec["affinity"] = template["affinity"]
    for c in spec["containers"]:
        c["image"], c["imagePullPolicy"] = WORKLOAD_IMAGE, "Never"
        c["command"] = ["sleep", "3600"]
    kubectl.apply(dep)

    def bound() -> dict[str, str] | None:
        placed = fake_nodes.placements(namespace)
        return placed if len(placed) == 10 and all(placed.values()) else None

    placed = wait_until("the 10 replicas bound", bound, 120)
    counts = sorted((Counter(placed.values()).get(n, 0) for n in nodes), reverse=True)
    if policy == "spread":
        assert counts == [4, 3, 3], placed
    else:
        assert counts == [6, 4, 0], placed
