"""The node agent's runner: `Agent.reconcile` as the one ticker of a ComponentHost, and
`/healthz`, `/readyz`, `/metrics` on Katalyst's agent port."""

from __future__ import annotations

from collections.abc import Callable

from pykatalyst.agent.agent import Agent
from pykatalyst.agent.plan import AgentPlan
from pykatalyst.cluster.clock import Clock
from pykatalyst.runtime.host import ComponentHost, Endpoint, HostStep

AGENT_PORT = 9316
"""katalyst-agent's metrics and health port."""

RECONCILE = "reconcile"


def agent_host(
    runner: Agent,
    clock: Clock,
    *,
    period_s: float,
    show: Callable[[AgentPlan], None],
    endpoint: Endpoint | None = None,
) -> ComponentHost:
    # The reconcile reads cgroups and /proc and calls the API server: it runs in a worker
    # thread so that probes and scrapes are answered during a slow tick on a dense node.
    # The servers share nothing with it but the metric registry, which is thread-safe.
    host = ComponentHost(
        "agent", clock=clock, reconcile_in_thread=True, stall_after_s=max(300.0, 10 * period_s)
    )

    def tick(now: float) -> AgentPlan:
        plan = runner.reconcile(now)
        show(plan)
        return plan

    host.every(RECONCILE, period_s, tick)
    if endpoint is not None:
        host.serve(endpoint)
    return host


def run_agent(
    runner: Agent,
    clock: Clock,
    *,
    period_s: float,
    once: bool,
    show: Callable[[AgentPlan], None],
    endpoint: Endpoint | None = None,
) -> int:
    """Reconcile every `period_s` until SIGTERM/SIGINT (exit 0). With `once`: one
    reconcile and no servers; exit 1 when it failed."""
    host = agent_host(
        runner, clock, period_s=period_s, show=show, endpoint=None if once else endpoint
    )

    def on_step(step: HostStep) -> int | None:
        if once:
            return 1 if step.errors else 0
        return None

    return host.run_sync(on_step=on_step)
