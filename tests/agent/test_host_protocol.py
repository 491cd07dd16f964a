"""Every Host implementation offers the whole protocol the agent and the enforcer use."""

from __future__ import annotations

from pathlib import Path

import pytest

from pykatalyst.agent.host.base import Host, Knob
from pykatalyst.agent.host.linux import LinuxHost
from pykatalyst.sim.host import SimHost
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology
from tests.agent.inmemory_host import InMemoryHost
from tests.fixtures.fake_node import make_kubelet_tree

MEMBERS = sorted(name for name in dir(Host) if not name.startswith("_") and name not in dir(object))


def _hosts(tmp_path: Path) -> dict[str, object]:
    topo = CPUTopology.synthetic(sockets=1, cores_per_socket=4, threads_per_core=2)
    make_kubelet_tree(tmp_path, version=2)
    return {
        "linux": LinuxHost(root=tmp_path, page_size=4096),
        "sim": SimHost(topo, 16 * 2**30, 2**30),
        "inmemory": InMemoryHost(topo),
    }


def test_the_protocol_has_what_callers_used_to_probe_for() -> None:
    assert {"page_size", "qos_cgroup", "memory_usage", "same_value", "knob_problem"} <= set(MEMBERS)


@pytest.mark.parametrize("kind", ["linux", "sim", "inmemory"])
def test_every_host_offers_every_member(tmp_path: Path, kind: str) -> None:
    host = _hosts(tmp_path)[kind]
    missing = [m for m in MEMBERS if not hasattr(host, m)]
    assert missing == []


def test_the_linux_host_keeps_memory_limits_in_whole_pages(tmp_path: Path) -> None:
    host = _hosts(tmp_path)["linux"]
    assert isinstance(host, LinuxHost)
    assert host.same_value(Knob.MEMORY_LIMIT, 4096 * 10 + 100, 4096 * 10)
    assert not host.same_value(Knob.MEMORY_LIMIT, 4096 * 11, 4096 * 10)
    assert host.qos_cgroup("besteffort") == "kubepods/besteffort"
    with pytest.raises(ValueError, match="qos_class"):
        host.qos_cgroup("gold")


def test_a_host_without_a_kubelet_layout_says_so(tmp_path: Path) -> None:
    for kind in ("sim", "inmemory"):
        host = _hosts(tmp_path / kind)[kind]
        assert host.qos_cgroup("besteffort") is None  # type: ignore[attr-defined]
        problem = host.knob_problem(Knob.CPUSET_CPUS, CPUSet())  # type: ignore[attr-defined]
        assert problem is not None
