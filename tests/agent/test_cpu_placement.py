"""The cpu placement survives restarts: checkpointed, restored, or rebuilt from cgroups."""

from __future__ import annotations

import json
import logging
import random
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pykatalyst.agent.agent import Agent
from pykatalyst.agent.config import AgentConfig
from pykatalyst.agent.cpu_placement import (
    CPU_STATE_FILE,
    CpuCheckpoint,
    CpuState,
    CpuStateError,
    decode,
    encode,
)
from pykatalyst.agent.cpu_policy import DedicatedAssignment
from pykatalyst.agent.enforcer import Enforcer
from pykatalyst.agent.host.base import Knob
from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.protocol import ObjectList
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology
from tests.agent.inmemory_host import GIB, InMemoryHost, node_json, pod_json

TOPO = CPUTopology.synthetic(2, 12, 2, memory_per_numa=96 * GIB)
BOUND = {names.MEMORY_ENHANCEMENT_ANNOTATION: '{"numa_binding": "true"}'}


class ShuffledCluster(MemoryCluster):
    """A cluster whose lists come back in an order of the test's choosing."""

    rng: random.Random | None = None

    def list(self, *args: Any, **kwargs: Any) -> ObjectList:
        out = super().list(*args, **kwargs)
        if self.rng is not None:
            self.rng.shuffle(out.items)
        return out


class Machine:
    def __init__(self, state_dir: Path | None, cfg: dict[str, Any] | None = None) -> None:
        self.clock = VirtualClock(50_000)
        self.cluster = ShuffledCluster(clock=self.clock)
        self.cluster.create(names.NODE, node_json("node-1"))
        self.host = InMemoryHost(TOPO)
        self.state_dir = state_dir
        self.cfg = cfg or {}
        self.agent = self.start()

    def start(self, node: str = "node-1") -> Agent:
        ck = self.state_dir / "agent-enforcer.json" if self.state_dir is not None else None
        self.agent = Agent(
            node,
            self.cluster,
            self.host,
            self.clock,
            AgentConfig.model_validate(self.cfg),
            Enforcer(self.host, ck, self.clock),
        )
        return self.agent

    def dedicated(self, name: str, node: str = "node-1") -> str:
        obj = self.cluster.create(
            names.POD,
            pod_json(name, node=node, level="dedicated_cores", cpu="4", annotations=BOUND),
            "default",
        )
        uid = str(obj["metadata"]["uid"])
        self.host.add_pod(uid, qos_class="guaranteed")
        return uid

    def run(self) -> None:
        self.agent.reconcile(self.clock.now())
        self.clock.advance(5)
        self.agent.reconcile(self.clock.now())

    def cpuset(self, uid: str) -> CPUSet:
        v = self.host.knobs[self.host.pods[uid].containers["app"].cgroup][Knob.CPUSET_CPUS]
        assert isinstance(v, CPUSet)
        return v


def two_placed(
    state_dir: Path | None, cfg: dict[str, Any] | None = None
) -> tuple[Machine, str, str]:
    """`zeta` placed first, then the older `alpha`, bound to the node later: a fresh start
    that placed pods oldest first would swap them."""
    m = Machine(state_dir, cfg)
    alpha = m.dedicated("alpha", node="")
    m.clock.advance(5)
    zeta = m.dedicated("zeta")
    m.run()
    m.cluster.bind("default", "alpha", "node-1")
    m.run()
    assert m.cpuset(zeta).isdisjoint(m.cpuset(alpha))
    return m, zeta, alpha


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seeds=st.lists(st.integers(0, 2**32 - 1), min_size=10, max_size=10))
def test_restarts_in_any_pod_order_never_move_a_dedicated_pod(seeds: list[int]) -> None:
    with tempfile.TemporaryDirectory() as d:
        m, zeta, alpha = two_placed(Path(d))
        before = (m.cpuset(zeta), m.cpuset(alpha))
        for seed in seeds:
            m.cluster.rng = random.Random(seed)
            m.start()
            m.run()
            assert (m.cpuset(zeta), m.cpuset(alpha)) == before
        left = {p.name for p in Path(d).iterdir()}
        assert left == {"agent-enforcer.json", CPU_STATE_FILE}  # no temporary file left


def test_the_checkpoint_is_versioned_checksummed_and_names_the_placement(tmp_path: Path) -> None:
    m, zeta, alpha = two_placed(tmp_path)
    doc = json.loads((tmp_path / CPU_STATE_FILE).read_text())
    assert doc["version"] == 1 and doc["node"] == "node-1" and len(doc["checksum"]) == 64
    assert doc["state"]["dedicated"][zeta]["cpuset"] == str(m.cpuset(zeta))
    assert doc["state"]["dedicated"][alpha]["cpuset"] == str(m.cpuset(alpha))
    # two dedicated pods and no shared one: no share pool (Katalyst's)
    assert names.POOL_SHARE not in doc["state"]["pools"]


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda t: t.replace('"cpuset": "', '"cpuset": "1', 1), "checksum"),
        (lambda t: t[: len(t) // 2], "not JSON"),
        (lambda t: t.replace('"node": "node-1"', '"node": "node-9"'), "node-9"),
        (lambda t: t.replace('"version": 1', '"version": 7'), "version 7"),
    ],
)
def test_a_corrupt_or_foreign_checkpoint_is_refused_and_cgroups_are_believed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: Any, reason: str
) -> None:
    m, zeta, alpha = two_placed(tmp_path)
    before = (m.cpuset(zeta), m.cpuset(alpha))
    path = tmp_path / CPU_STATE_FILE
    path.write_text(damage(path.read_text()))
    with caplog.at_level(logging.WARNING, logger="pykatalyst.agent"):
        m.start()
    assert m.agent.cpu_state_error is not None and reason in m.agent.cpu_state_error
    assert any("refused" in r.message and reason in r.message for r in caplog.records)
    m.run()
    assert (m.cpuset(zeta), m.cpuset(alpha)) == before
    # and the checkpoint is good again
    assert decode(path.read_text(), "node-1", TOPO).dedicated[zeta].cpuset == before[0]


def test_without_a_checkpoint_a_restart_keeps_the_cpusets_the_cgroups_show() -> None:
    m, zeta, alpha = two_placed(None, {"cpu_state_path": None})
    before = (m.cpuset(zeta), m.cpuset(alpha))
    m.start()
    m.run()
    assert (m.cpuset(zeta), m.cpuset(alpha)) == before


def test_a_checkpoint_from_another_topology_is_foreign() -> None:
    state = CpuState({}, {}, {"share": CPUSet.parse("0-3")})
    text = encode(state, "n1", TOPO)
    other = CPUTopology.synthetic(2, 8, 2)
    with pytest.raises(CpuStateError, match="another cpu topology"):
        decode(text, "n1", other)


@st.composite
def states(draw: st.DrawFn) -> CpuState:
    cpus = list(TOPO.all_cpus)
    draw(st.randoms()).shuffle(cpus)
    n = draw(st.integers(0, 4))
    dedicated = {}
    for i in range(n):
        chunk = CPUSet.of(cpus[i * 4 : i * 4 + 4])
        dedicated[f"u{i}"] = DedicatedAssignment(
            f"u{i}", chunk, tuple(TOPO.numas_of(chunk)), draw(st.booleans())
        )
    snb = draw(st.dictionaries(st.text("abc", min_size=1), st.sampled_from(TOPO.numa_nodes)))
    pools = {"share": CPUSet.of(cpus[16:20])}
    return CpuState(dedicated, snb, pools)


@settings(max_examples=50, deadline=None)
@given(state=states(), flip=st.integers(0, 10_000))
def test_checkpoint_round_trips_and_any_changed_cpuset_is_refused(
    state: CpuState, flip: int
) -> None:
    text = encode(state, "n1", TOPO)
    back = decode(text, "n1", TOPO)
    assert {u: a.cpuset for u, a in back.dedicated.items()} == {
        u: a.cpuset for u, a in state.dedicated.items()
    }
    assert back.snb == state.snb and back.pools == state.pools
    doc = json.loads(text)
    doc["state"]["pools"]["share"] = str(CPUSet.of([flip % TOPO.num_cpus]))
    if doc["state"]["pools"]["share"] != str(state.pools["share"]):
        with pytest.raises(CpuStateError, match="checksum"):
            decode(json.dumps(doc), "n1", TOPO)


def test_save_writes_only_on_change_and_leaves_no_temp_file(tmp_path: Path) -> None:
    ck = CpuCheckpoint(tmp_path / "cpu.json", "n1", TOPO)
    state = CpuState({}, {}, {"share": CPUSet.parse("0-3")})
    assert ck.save(state) is True
    assert ck.save(state) is False
    assert [p.name for p in tmp_path.iterdir()] == ["cpu.json"]
    blocked = CpuCheckpoint(tmp_path / "missing-dir" / "cpu.json", "n1", TOPO)
    with pytest.raises(OSError):
        blocked.save(state)
    assert [p.name for p in tmp_path.iterdir()] == ["cpu.json"]
