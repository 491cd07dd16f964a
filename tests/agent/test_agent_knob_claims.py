"""What the README says the agent writes is what it writes; oom_priority is said ignored."""

from __future__ import annotations

import re
from pathlib import Path

from pykatalyst.agent.host.base import Knob
from pykatalyst.api import names
from tests.agent.test_agent_loop import DEDICATED, Node

README = Path(__file__).resolve().parents[2] / "README.md"

# the README's words for each knob
PHRASES = {
    "cpusets": {Knob.CPUSET_CPUS, Knob.CPUSET_MEMS},
    "cpu weights": {Knob.CPU_SHARES},
    "quota": {Knob.CPU_QUOTA},
    "`cpu.idle`": {Knob.CPU_IDLE},
    "memory limits": {Knob.MEMORY_LIMIT},
    "memory.high": {Knob.MEMORY_HIGH},
}


def claimed_knobs() -> set[Knob]:
    text = " ".join(README.read_text().split())
    m = re.search(r"A node agent\*\*(.*?)through real cgroups", text)
    assert m is not None, "README: the node agent bullet names what it writes"
    claim = m.group(1)
    return {k for phrase, knobs in PHRASES.items() if phrase in claim for k in knobs}


def test_the_readme_names_exactly_the_knobs_the_agent_writes() -> None:
    n = Node({"reclaimed_root_quota": True})
    n.pod("web", cpu="2")
    n.pod(
        "batch",
        level="reclaimed_cores",
        cpu=None,
        memory=None,
        reclaimed_cpu="2k",
        reclaimed_memory="1Gi",
        qos_class="besteffort",
    )
    n.pod("agent", level="system_cores", cpu="100m")
    n.pod("db", level="dedicated_cores", cpu="4", memory="1Gi", annotations=DEDICATED)
    n.run(60)
    written = {w.knob for w in n.host.writes}
    assert claimed_knobs() == written


def test_a_declared_oom_priority_is_reported_as_not_applied_once() -> None:
    n = Node()
    ann = {names.MEMORY_ENHANCEMENT_ANNOTATION: '{"oom_priority": "50"}'}
    n.pod("web", cpu="2", annotations=ann)
    n.pod("plain", cpu="1")
    n.run(30)
    events = n.events("OOMPriorityIgnored")
    assert len(events) == 1
    assert events[0]["involvedObject"]["name"] == "web"
    assert "oom_score_adj" in events[0]["message"]
