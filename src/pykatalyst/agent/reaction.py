"""Reacting to a load step between reconciles: the share pools' fast watch.

A reconcile sizes the share pools from the pods' cpu usage since the previous reconcile, one
period (5 s) before; a step in load shows there diluted, and only at the next tick. The
watch reads, every `reaction.period_s` (0.5 s), the cumulative cpu time of the pods of each
share pool (one file per cgroup) and works out the pool's usage over that short window.
`decide` asks for an early reconcile when the pool must grow:

    fresh = usage_coefficient × Σ usage of the pool's pods over the window
    grow  = fresh > requirement × (1 + grow_band)            # beyond the band around the
                                                            # last sizing (hysteresis)
            and ceil(fresh + reserved_for_allocate) > |pool|  # the pool would gain a cpu
    at most one early reconcile per cooldown_s

Only growth is hurried (grow fast, shrink slow): a pool shrinks at the periodic reconcile,
through the regulator's limits (−2 cores per step, one shrink per 30 s). The early
reconcile sizes the pool from the window's usage — the watch stages it in the metric store —
not from the usage since the previous reconcile; its new requirement re-centres the band,
so a load that stays up asks for nothing more.

`decide` and `watched_pools` are pure; `ShareWatch` is the edge that reads the host.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pykatalyst.agent.config import ReactionConfig
from pykatalyst.api import names

if TYPE_CHECKING:
    from pykatalyst.agent.host.base import Host
    from pykatalyst.agent.metrics import MetricStore
    from pykatalyst.agent.plan import AgentPlan

Terms = dict[str, Any]


@dataclass(frozen=True, slots=True)
class WatchedPool:
    """A share pool as the last reconcile left it."""

    name: str
    size: int  # cpus it has
    requirement: float  # cores it was sized for (Σ of its pods' estimates)
    reserved: float  # the burst buffer added to the requirement
    paths: tuple[str, ...]  # the cgroups whose usage the advisor estimates the pods from


@dataclass(frozen=True, slots=True)
class WatchState:
    """What the watch remembers between readings."""

    time: float | None = None
    totals: Mapping[str, float] = field(default_factory=dict)  # cumulative cpu seconds
    last_trigger: float | None = None
    triggers: int = 0


@dataclass(frozen=True, slots=True)
class WatchDecision:
    """One reading's verdict: whether to reconcile now, and why."""

    time: float
    trigger: bool
    grow: tuple[str, ...]  # pools that must grow
    usage: Mapping[str, float]  # cores per cgroup over the window (what the reconcile uses)
    terms: Mapping[str, Terms]  # per pool
    reason: str


def window_usage(state: WatchState, now: float, totals: Mapping[str, float]) -> dict[str, float]:
    """Cores per cgroup between the previous reading and this one. A cgroup new to this
    reading, or whose counter went back (a new cgroup under the same path), has none."""
    if state.time is None or now <= state.time:
        return {}
    dt = now - state.time
    out: dict[str, float] = {}
    for path, total in totals.items():
        before = state.totals.get(path)
        if before is not None and total >= before:
            out[path] = (total - before) / dt
    return out


def _pool_verdict(
    pool: WatchedPool, usage: Mapping[str, float], cfg: ReactionConfig, coefficient: float
) -> tuple[bool, Terms]:
    seen = [usage[p] for p in pool.paths if p in usage]
    terms: Terms = {"size": pool.size, "requirement": round(pool.requirement, 3)}
    if not seen:
        terms["state"] = "no usage over the window yet"
        return False, terms
    fresh = coefficient * sum(seen)
    band = pool.requirement * (1.0 + cfg.grow_band)
    wanted = math.ceil(fresh + pool.reserved - 1e-9)
    terms.update(
        {
            "usage_cores": round(sum(seen), 3),
            "fresh_requirement": round(fresh, 3),
            "band_upper": round(band, 3),
            "wanted": wanted,
        }
    )
    return fresh > band and wanted > pool.size, terms


def decide(
    state: WatchState,
    now: float,
    totals: Mapping[str, float],
    pools: Sequence[WatchedPool],
    cfg: ReactionConfig,
    coefficient: float,
) -> tuple[WatchDecision, WatchState]:
    """The verdict on one reading of the pools' cumulative cpu time at `now`, and the
    state for the next reading."""
    usage = window_usage(state, now, totals)
    grow: list[str] = []
    terms: dict[str, Terms] = {}
    for pool in pools:
        wants, terms[pool.name] = _pool_verdict(pool, usage, cfg, coefficient)
        if wants:
            grow.append(pool.name)
    cooling = state.last_trigger is not None and now - state.last_trigger < cfg.cooldown_s
    trigger = bool(grow) and not cooling
    if not grow:
        reason = "every share pool within its band"
    elif cooling:
        reason = f"{', '.join(grow)} must grow; cooling down since the last early reconcile"
    else:
        reason = f"{', '.join(grow)} must grow: usage over the last window beyond the band"
    staged = {p: usage[p] for pool in pools if pool.name in grow for p in pool.paths if p in usage}
    decision = WatchDecision(now, trigger, tuple(grow), staged if trigger else {}, terms, reason)
    after = WatchState(
        now,
        dict(totals),
        now if trigger else state.last_trigger,
        state.triggers + (1 if trigger else 0),
    )
    return decision, after


def watched_pools(plan: AgentPlan) -> list[WatchedPool]:
    """The share pools of a plan with the cgroups of their pods (pods still ramping up are
    estimated at their request, whatever they use, and are left out)."""
    paths: dict[str, list[str]] = {}
    for pod in plan.pods:
        if pod.qos_level != names.QOS_SHARED_CORES or pod.ramping_up:
            continue
        if len(pod.containers) == 1:
            mine = [pod.cgroup] if pod.cgroup else []
        else:
            mine = [c.cgroup for c in pod.containers if c.cgroup]
        paths.setdefault(pod.pool, []).extend(mine)
    out = []
    for pool in plan.pools:
        terms = pool.terms
        if "requirement" not in terms or not paths.get(pool.name):
            continue
        out.append(
            WatchedPool(
                pool.name,
                pool.size,
                float(terms["requirement"]),
                float(terms.get("reserved_for_allocate", 0.0)),
                tuple(paths[pool.name]),
            )
        )
    return out


class ShareWatch:
    """The fast watch on a host: `observe` each reconcile's plan, `tick` between them."""

    def __init__(self, host: Host, metrics: MetricStore, cfg: ReactionConfig) -> None:
        self.host = host
        self.metrics = metrics
        self.cfg = cfg
        self.state = WatchState()
        self.pools: list[WatchedPool] = []
        self.active = False

    def observe(self, plan: AgentPlan, *, active: bool) -> None:
        """Watch the pools of `plan`; `active` False (pools not sized by usage) watches
        nothing."""
        self.active = active
        self.pools = watched_pools(plan) if active else []

    def tick(self, now: float, coefficient: float) -> WatchDecision:
        """Read the pools' cgroups; on a trigger, stage the window's usage for the
        reconcile that follows."""
        totals: dict[str, float] = {}
        for path in sorted({p for pool in self.pools for p in pool.paths}):
            total = self.host.cpu_usage_s(path)
            if total is not None:
                totals[path] = total
        decision, self.state = decide(self.state, now, totals, self.pools, self.cfg, coefficient)
        if decision.trigger:
            self.metrics.stage_usage(decision.usage)
        return decision
