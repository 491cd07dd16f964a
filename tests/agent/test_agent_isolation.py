"""The agent's memory and disk I/O isolation on fake kubelet trees: what the configuration
asks for lands in the cgroup files, and the plan says why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pykatalyst.agent.agent import Agent
from pykatalyst.agent.enforcer import Enforcer
from tests.agent.inmemory_host import reclaiming
from tests.agent.test_agent_fake_tree import _node, _run

GI = 1024**3
CONFIG = {
    "memory_advisor": {
        "guard": True,
        "drop_cache": True,
        "protection": "min",
        "oom_priority": True,
    },
    "io": {
        "levels": {
            "reclaimed_cores": {
                "weight": 10,
                "limits": [{"device": "7:0", "write_bps": "10Mi"}],
            },
            "shared_cores": {"weight": 500, "latency": [{"device": "7:0", "target": "5ms"}]},
        },
        "reclaimed_root": {"weight": 10, "limits": [{"device": "7:0", "write_bps": "20Mi"}]},
    },
}


def _free(node_root: Path, numa: int, free: int) -> None:
    p = node_root / f"sys/devices/system/node/node{numa}/meminfo"
    lines = [
        f"Node {numa} MemFree:{free // 1024:>16} kB" if "MemFree" in line else line
        for line in p.read_text().splitlines()
    ]
    p.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("version", "driver", "root"),
    [
        (1, "cgroupfs", "kubepods/besteffort"),
        (2, "systemd", "kubepods.slice/kubepods-besteffort.slice"),
    ],
)
def test_memory_and_io_isolation_land_in_the_files(
    tmp_path: Path, version: int, driver: str, root: str
) -> None:
    cluster, clock, node, uids = _node(tmp_path, version, driver)
    host = node.host()
    for name in uids:
        node.add_task(node.container_cgroup(uids[name], "app"), 100 + len(name))
    batch = node.pod_cgroup(uids["batch"])
    node.set_memory(batch, 3 * GI, rss=GI, cache=2 * GI)
    node.set_memory(root, 3 * GI, rss=GI, cache=2 * GI)
    agent = Agent("n1", cluster, host, clock, reclaiming(CONFIG), Enforcer(host, None, clock))
    plan = _run(agent, clock, ticks=2)

    # memory guard: reclaimed use + (free − 4Gi floor) of the NUMA node that the
    # NUMA-bound dedicated pod leaves to everyone else
    db_plan = plan.pod("default/db")
    assert db_plan is not None and len(db_plan.numa_nodes) == 1
    (other,) = {0, 1} - set(db_plan.numa_nodes)
    limit = 3 * GI + (8 * GI - 4 * GI)
    limit_file = "memory.limit_in_bytes" if version == 1 else "memory.max"
    assert int(node.read(root, limit_file)) == limit
    if version == 2:
        assert int(node.read(root, "memory.high")) == int(limit * 0.95)
    assert plan.memory["guard"]["limit"] == limit

    # the OOM ladder on the containers' processes, the sandbox left to the kubelet
    def adj(name: str) -> int:
        return int((tmp_path / f"proc/{100 + len(name)}/oom_score_adj").read_text())

    assert adj("batch") == 1000 and adj("web") == 0 and adj("db") == -333
    # disk I/O: reclaimed pods yield first, the root caps them all together
    weight_file = "io.weight" if version == 2 else "blkio.bfq.weight"
    assert node.read(batch, weight_file).split()[-1] == "10"
    assert node.read(node.pod_cgroup(uids["web"]), weight_file).split()[-1] == "500"
    if version == 2:
        assert node.read(root, "io.max") == "7:0 rbps=max wbps=20971520 riops=max wiops=max"
        assert node.read(node.pod_cgroup(uids["web"]), "io.latency") == "7:0 target=5000"
        # protection: the dedicated pod's request is memory.min, up to kubepods
        db = node.pod_cgroup(uids["db"])
        assert node.read(db, "memory.min") == str(GI)
        assert node.read(db.rsplit("/", 1)[0], "memory.min") == str(GI)
    else:
        # v1 throttling binds only the cgroup a limit is on: each container gets it
        app = node.container_cgroup(uids["batch"], "app")
        assert node.read(app, "blkio.throttle.write_bps_device") == "7:0 10485760"
        assert node.read(root, "blkio.throttle.write_bps_device") == ""
    assert plan.io["default/batch"]["io.weight"] == 10

    # no pressure yet: nothing dropped. The bound pod's NUMA node runs short: not the
    # reclaimed pod's business; the other one does: its cache goes.
    assert "drop_cache" in plan.memory and plan.memory["drop_cache"] == []
    _free(tmp_path, db_plan.numa_nodes[0], GI)
    clock.advance(5)
    plan = agent.reconcile(clock.now())
    assert plan.memory["pressure"][f"numa{db_plan.numa_nodes[0]}"]["state"] == "drop_cache"
    assert plan.memory["drop_cache"] == []
    _free(tmp_path, other, GI)
    clock.advance(5)
    plan = agent.reconcile(clock.now())
    assert plan.memory["drop_cache"] == [
        {"pod": "default/batch", "cache": 2 * GI, "pressure": f"numa{other}"}
    ]
    dropped = ("memory.reclaim", str(2 * GI)) if version == 2 else ("memory.force_empty", "0")
    assert node.read(batch, dropped[0]) == dropped[1]
    json.dumps(plan.to_json())  # the explain output carries all of it


def test_without_the_config_nothing_new_is_written(tmp_path: Path) -> None:
    cluster, clock, node, uids = _node(tmp_path, 2, "systemd")
    host = node.host()
    agent = Agent("n1", cluster, host, clock, reclaiming(), Enforcer(host, None, clock))
    plan = _run(agent, clock, ticks=2)
    root = "kubepods.slice/kubepods-besteffort.slice"
    assert node.read(root, "memory.max") == "max"
    assert node.read(node.pod_cgroup(uids["db"]), "memory.min") == "0"
    assert plan.io == {} and "guard" not in plan.memory
    assert "oom" not in plan.memory and "protection" not in plan.memory
    # the pressure states are still worked out and shown
    assert set(plan.memory["pressure"]) == {"numa0", "numa1", "node"}
