"""What one tick of the node agent decides from, gathered before anything is decided.

`Agent.reconcile(now)` is three steps: gather a `TickInputs` (the node's pods and dynamic
config from the node-state holder, the effective `AgentConfig`, the pods parsed, one Host
sample), decide the tick's `AgentPlan` from it, then execute the plan (eviction stages,
the enforcer, the reporter, Events). An eviction stage sees an `EvictionInput`: the plan as
decided, the pods, the metrics and the sample, and the same `NodeView` the agent read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pykatalyst.agent.config import AgentConfig
from pykatalyst.agent.host.base import HostSample
from pykatalyst.agent.metrics import MetricStore
from pykatalyst.agent.node_state import NodeView
from pykatalyst.agent.plan import AgentPlan, PlanEvent
from pykatalyst.agent.state import PodSpec


@dataclass(frozen=True, slots=True)
class TickInputs:
    """One tick's inputs: `specs` are the node's pods that have not finished, parsed once
    per resourceVersion; `warnings` and `events` are what gathering them had to say (an
    unreadable config, a pod list that failed)."""

    now: float
    node: NodeView
    config: AgentConfig
    config_status: Mapping[str, Any]
    specs: Mapping[str, PodSpec]
    sample: HostSample
    warnings: tuple[str, ...] = ()
    events: tuple[PlanEvent, ...] = ()


@dataclass(frozen=True, slots=True)
class EvictionInput:
    """What an eviction stage sees: the tick's plan (already advised and allocated, not yet
    enforced), the pods on the node, the metric store, the raw sample, and the node's pods
    and dynamic config as the agent read them this tick (None outside an agent)."""

    now: float
    plan: AgentPlan
    pods: Mapping[str, PodSpec]
    metrics: MetricStore
    sample: HostSample
    node: NodeView | None = None


EvictionStage = Callable[[EvictionInput], Sequence[Any]]
