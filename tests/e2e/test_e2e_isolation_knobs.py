"""The agent's memory and disk knobs on the real node: with the `io` and `memory_advisor`
sections of its configuration switched on, a reclaimed pod started by the real kubelet gets
its QoS level's disk write limit on its container's cgroup (cgroup v1 throttling binds only
the cgroup a process is in) and its OOM priority as its processes' oom_score_adj; a shared
pod beside it gets no limit."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pykatalyst.api import names
from tests.e2e.conftest import Component, Kubectl, LocalNode, wait_until
from tests.e2e.pykatalyst_e2e import (
    example,
    fit_to_node,
    running_pods,
    start_agent,
    start_scheduler,
)

LIMIT = 4 * 2**20  # bytes per second written by each reclaimed container


def _root_device() -> str:
    st = os.stat("/")
    return f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"


def _container(local_node: LocalNode, pod: dict[str, Any]) -> tuple[Path, int]:
    """The blkio cgroup directory and the main process of the pod's one container."""
    uid = pod["metadata"]["uid"]
    sandboxes = local_node.crictl_json(
        "pods", "--label", f"io.kubernetes.pod.uid={uid}", "--state", "ready"
    )["items"]
    assert sandboxes, f"no ready sandbox for {pod['metadata']['name']}"
    (c,) = local_node.crictl_json("ps", "--pod", sandboxes[0]["id"])["containers"]
    info = local_node.crictl_json("inspect", c["id"])["info"]
    path = info["runtimeSpec"]["linux"]["cgroupsPath"].lstrip("/")
    return Path("/sys/fs/cgroup/blkio") / path, int(info["pid"])


def _throttle(cgroup: Path) -> str:
    return (cgroup / "blkio.throttle.write_bps_device").read_text().strip()


def test_a_reclaimed_pod_gets_its_levels_disk_limit_and_oom_priority(
    kubectl: Kubectl,
    local_node: LocalNode,
    namespace: str,
    components: Callable[..., Component],
    tmp_path: Path,
) -> None:
    if not Path("/sys/fs/cgroup/blkio").is_dir():
        pytest.skip("the node has no cgroup v1 blkio hierarchy (the check reads v1's files)")
    device = _root_device()
    config = {
        "io": {
            "levels": {
                names.QOS_RECLAIMED_CORES: {"limits": [{"device": device, "write_bps": "4Mi"}]}
            }
        },
        "memory_advisor": {"oom_priority": True},
    }
    start_agent(components, tmp_path, local_node.name, config=config)
    start_scheduler(components)
    batch = fit_to_node(example("reclaimed-normal-pod.yaml")[0], namespace)
    batch["metadata"]["annotations"][names.MEMORY_ENHANCEMENT_ANNOTATION] = json.dumps(
        {"oom_priority": "-50"}
    )
    res = batch["spec"]["containers"][0]["resources"]
    for part in ("requests", "limits"):
        res[part][names.RECLAIMED_MILLICPU] = "50"  # fits what background load leaves
    web = fit_to_node(example("shared-normal-pod.yaml")[0], namespace)
    for pod in (batch, web):
        kubectl.apply(pod)
    wanted = [batch["metadata"]["name"], web["metadata"]["name"]]
    live = wait_until("the pods Running", lambda: running_pods(kubectl, namespace, wanted), 120)
    batch_cg, batch_pid = _container(local_node, live[wanted[0]])
    web_cg, _ = _container(local_node, live[wanted[1]])

    wait_until(
        "the reclaimed container's write limit",
        lambda: _throttle(batch_cg) == f"{device} {LIMIT}",
        30,
        interval=1,
    )
    assert device not in _throttle(web_cg), "a shared pod got the reclaimed level's limit"
    # OOM priority -50, halfway up the reclaimed range, is oom_score_adj 500, where the
    # kubelet gave the best-effort pod 1000. (A shared pod's priorities map below 0, which
    # needs CAP_SYS_RESOURCE: not every node's agent has it, so it is not checked here.)
    wait_until(
        "the reclaimed pod's oom_score_adj",
        lambda: Path(f"/proc/{batch_pid}/oom_score_adj").read_text().strip() == "500",
        30,
        interval=1,
    )
