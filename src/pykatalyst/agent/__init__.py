"""pykatalyst.agent: the node agent (pools, cpusets, headroom, reporting).

The main entry points, importable from here: `Agent`, `AgentConfig`, `AgentPlan`,
`EvictionInput` and `EvictionStage`. They are loaded on first use so that importing a
submodule (e.g. `agent.host`) does not pull in the whole agent.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Agent", "AgentConfig", "AgentPlan", "EvictionInput", "EvictionStage"]


def __getattr__(name: str) -> Any:
    if name in ("Agent", "EvictionInput", "EvictionStage"):
        from pykatalyst.agent import agent

        return getattr(agent, name)
    if name == "AgentConfig":
        from pykatalyst.agent.config import AgentConfig

        return AgentConfig
    if name == "AgentPlan":
        from pykatalyst.agent.plan import AgentPlan

        return AgentPlan
    raise AttributeError(f"module 'pykatalyst.agent' has no attribute {name!r}")
