"""The agent on fake kubelet cgroup trees (v1 cgroupfs, v2 systemd): the files follow the plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from pykatalyst.agent.agent import Agent
from pykatalyst.agent.config import AgentConfig
from pykatalyst.agent.enforcer import Enforcer
from pykatalyst.agent.host.fake import FakePod, container_id, make_kubelet_tree
from pykatalyst.api import names
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.memory import MemoryCluster
from pykatalyst.topology.cpuset import CPUSet
from tests.agent.inmemory_host import node_json, pod_json

DEDICATED = {names.MEMORY_ENHANCEMENT_ANNOTATION: '{"numa_binding": "true"}'}


@pytest.mark.parametrize(("version", "driver"), [(1, "cgroupfs"), (2, "systemd")])
def test_cpusets_and_limits_land_in_the_cgroup_files(
    tmp_path: Path, version: int, driver: str
) -> None:
    clock = VirtualClock(10_000)
    cluster = MemoryCluster(clock=clock)
    cluster.create(names.NODE, node_json("n1"))
    specs = [
        ("web", {"cpu": "2"}, "burstable"),
        (
            "batch",
            {
                "level": "reclaimed_cores",
                "cpu": None,
                "memory": None,
                "reclaimed_cpu": "2k",
                "reclaimed_memory": "1Gi",
            },
            "besteffort",
        ),
        (
            "db",
            {"level": "dedicated_cores", "cpu": "2", "memory": "1Gi", "annotations": DEDICATED},
            "guaranteed",
        ),
    ]
    uids: dict[str, str] = {}
    fakes = []
    for name, kw, qos in specs:
        obj = cluster.create(names.POD, pod_json(name, node="n1", **kw), "default")
        uid = obj["metadata"]["uid"]
        uids[name] = uid
        fakes.append(FakePod(uid, qos, with_sandbox=True))  # type: ignore[arg-type]
        cid = container_id(uid, "app")
        status = {"containerStatuses": [{"name": "app", "containerID": f"containerd://{cid}"}]}
        cluster.patch(names.POD, name, {"status": status}, "default", subresource="status")
    node = make_kubelet_tree(tmp_path, fakes, version=version, driver=driver)  # type: ignore[arg-type]
    host = node.host()
    agent = Agent("n1", cluster, host, clock, AgentConfig(), Enforcer(host, None, clock))
    plan = agent.reconcile(clock.now())
    for _ in range(8):
        clock.advance(5)
        plan = agent.reconcile(clock.now())

    def cpus(name: str) -> CPUSet:
        return CPUSet.parse(node.read(node.container_cgroup(uids[name], "app"), "cpuset.cpus"))

    share = plan.pool(names.POOL_SHARE)
    reclaim = plan.pool(names.POOL_RECLAIM)
    assert share is not None and reclaim is not None
    assert cpus("web") == share.cpuset
    assert cpus("batch") == reclaim.cpuset
    db = cpus("db")
    assert len(db) == 2 and db.isdisjoint(share.cpuset | reclaim.cpuset)
    # the sandbox's cgroup follows its pod (a v1 parent cannot narrow below a child)
    pod_dir = node.path(node.pod_cgroup(uids["web"]), "cpuset.cpus").parent
    children = [p for p in pod_dir.iterdir() if p.is_dir()]
    assert len(children) == 2
    for child in children:
        assert CPUSet.parse((child / "cpuset.cpus").read_text()) == share.cpuset
    memory_file = "memory.limit_in_bytes" if version == 1 else "memory.max"
    assert int(node.read(node.pod_cgroup(uids["batch"]), memory_file)) == 1 << 30
    assert node.read(node.pod_cgroup(uids["batch"]), "cpu.idle").strip() == "1"
