"""What one tick of the node agent hands the next, as a value: `AgentState`.

`decide(inputs, state)` (`agent/decide.py`) returns the next one; the agent keeps the
current one between ticks and swaps it after executing the plan. Nothing changes one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pykatalyst.agent.advisor import HeadroomSmoother, RegulatorState
from pykatalyst.agent.config import ReporterConfig
from pykatalyst.agent.cpu_placement import CpuState
from pykatalyst.agent.host.base import Knob, KnobValue
from pykatalyst.agent.plan import PodPlan
from pykatalyst.agent.rama import PIDState
from pykatalyst.agent.regions import IsolationState
from pykatalyst.topology.cpuset import CPUSet

# One pod's plan and its cgroups' knobs, with the inputs they were made from.
PlanCacheEntry = tuple[tuple[Any, ...], PodPlan, tuple[tuple[str, dict[Knob, KnobValue]], ...]]


def smoother(
    rc: ReporterConfig, cpu: bool, held: HeadroomSmoother | None = None
) -> HeadroomSmoother:
    """A headroom smoother with the reporter's window, steps and report floors, keeping
    `held`'s history."""
    base = held if held is not None else HeadroomSmoother(0, 0, 0, 0, 0, 0)
    return base.tuned(
        rc.sliding_window_s,
        rc.headroom_sync_period_s,
        rc.min_step_cpu if cpu else float(rc.min_step_memory),
        rc.max_step_cpu if cpu else float(rc.max_step_memory),
        rc.reserved_for_report_cpu if cpu else float(rc.reserved_for_report_memory),
        rc.min_reclaimed_for_report_cpu if cpu else float(rc.min_reclaimed_for_report_memory),
    )


@dataclass(frozen=True, slots=True)
class AgentState:
    """What one tick hands the next, as a value: the cpu placement, the regulators' and
    rama's controllers per pool, the provision step that last sized each pool, the
    isolated pods, the cpus lent to the reclaim pool, the headroom smoothers, the Events
    already sent, when each reclaimed pod's cache was last dropped, and the pods' plans
    with the inputs they came from. `decide` returns a new one; nothing changes one."""

    placement: CpuState = field(default_factory=CpuState)
    regulators: Mapping[str, RegulatorState] = field(default_factory=dict)
    dedicated_regulators: Mapping[str, RegulatorState] = field(default_factory=dict)
    rama: Mapping[str, Mapping[str, PIDState]] = field(default_factory=dict)
    steps: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    isolated: frozenset[str] = frozenset()
    isolation_states: Mapping[tuple[str, str], IsolationState] = field(default_factory=dict)
    borrowed: Mapping[str, CPUSet] = field(default_factory=dict)
    cpu_smoother: HeadroomSmoother = field(default_factory=lambda: smoother(ReporterConfig(), True))
    mem_smoother: HeadroomSmoother = field(
        default_factory=lambda: smoother(ReporterConfig(), False)
    )
    events_sent: frozenset[tuple[str, str, str]] = frozenset()
    dropped_at: Mapping[str, float] = field(default_factory=dict)
    plans: Mapping[str, PlanCacheEntry] = field(default_factory=dict)
    # what each eviction stage's last decision left the next (by the stage's place)
    stage_memory: tuple[object, ...] = ()
