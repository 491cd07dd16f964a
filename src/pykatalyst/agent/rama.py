"""Katalyst's rama provision policy: a share pool sized by feedback, not by estimates.

Each indicator of a pool (cpu scheduling wait, cpu usage ratio, load per cpu) has a target
and a controller. Every tick the controller compares the indicator with its target on a log
scale and, outside a deadband, moves the pool's cpu requirement:

    err = ln(current) − ln(target)
    outside the deadband (current above target × (1 + upper) or below target × (1 − lower)):
        kp  = (err ≥ 0 ? kpp : kpn) × upper_bound      # gains scale with the region's size
        adj = kp·err + kd·||err| − |err_prev||           # kd signed by whether |err| grows
    total = clamp(total + adj, −adjustment_lower, +adjustment_upper)
    total = 0 first      when the knob changed since the last tick (a new starting point)
    requirement = clamp(knob + total, lower_bound, upper_bound)

`total` is the only memory, bounded on both sides and reset whenever the pool's size moves,
so it cannot wind up. The requirement is the largest over the indicators (the pool grows
for whichever indicator says it is short), and then goes through the same regulator as
canonical's (rounding, ramp limits, minimum ramp-down period).

Everything here is pure: `pid_adjust` returns the new state with the terms that explain it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pykatalyst.agent.config import PIDParams

Terms = dict[str, Any]


@dataclass(frozen=True, slots=True)
class PIDState:
    """What one indicator's controller remembers between ticks."""

    total: float = 0.0  # the adjustment accumulated since the knob last changed
    knob: float | None = None  # the knob value the total applies to
    error: float = 0.0  # ln(current / target) of the last tick


def pid_adjust(
    state: PIDState,
    params: PIDParams,
    knob: float,
    target: float,
    current: float,
    *,
    lower_bound: float,
    upper_bound: float,
) -> tuple[float, PIDState, Terms]:
    """The knob (a cpu requirement, reverse-acting: it grows while the indicator is above
    its target) after one step of the controller, its new state and the terms."""
    err = math.log(current) - math.log(target)
    err_raw = current - target
    rate = abs(err) - abs(state.error)
    terms: Terms = {
        "target": target,
        "current": round(current, 6),
        "error": round(err, 6),
        "knob": round(knob, 3),
    }
    high = err_raw > 0 and err_raw / target > params.deadband_upper_pct
    low = err_raw < 0 and err_raw / target < -params.deadband_lower_pct
    adjustment = 0.0
    if high or low:
        kp_sign = 1.0 if err >= 0 else -1.0
        kp = (params.kpp if err >= 0 else params.kpn) * upper_bound
        kd_sign = kp_sign if rate >= 0 else -kp_sign
        kd = params.kdp if kd_sign >= 0 else params.kdn
        p_term = kp * err
        d_term = kd_sign * kd * abs(rate)
        adjustment = p_term + d_term
        terms.update(kp=round(kp, 6), p=round(p_term, 6), d=round(d_term, 6))
    else:
        terms["deadband"] = (
            f"within target × (1 − {params.deadband_lower_pct}) .. "
            f"target × (1 + {params.deadband_upper_pct}): no change"
        )
    total = state.total
    if state.knob is None or state.knob != knob:
        if state.knob is not None:
            terms["reset"] = f"the knob moved from {state.knob:g} to {knob:g}: total restarts"
        total = 0.0
    # The accumulated adjustment is the controller's integral: bounded, so it never winds up.
    total = min(max(total + adjustment, -params.adjustment_lower), params.adjustment_upper)
    result = min(max(knob + total, lower_bound), upper_bound)
    terms.update(
        adjustment=round(adjustment, 6),
        i=round(total, 6),
        lower_bound=lower_bound,
        upper_bound=upper_bound,
        result=round(result, 6),
    )
    return result, PIDState(total, knob, err), terms


@dataclass(frozen=True, slots=True)
class RamaResult:
    requirement: float
    states: dict[str, PIDState]
    terms: Terms


def rama_requirement(
    knob: float,
    indicators: Mapping[str, float | None],
    targets: Mapping[str, float],
    params: Mapping[str, PIDParams],
    states: Mapping[str, PIDState],
    *,
    lower_bound: float,
    upper_bound: float,
) -> RamaResult | None:
    """One pool's requirement: the largest of its indicators' controllers. None when no
    indicator with a target has a usable (positive) measurement: the caller falls back to
    canonical, as Katalyst falls back to the next policy."""
    out: dict[str, PIDState] = {}
    terms: Terms = {"knob": knob, "indicators": {}}
    best: tuple[float, str] | None = None
    for name in sorted(targets):
        current = indicators.get(name)
        p = params.get(name)
        if p is None:
            terms["indicators"][name] = "no controller parameters: not controlled"
            continue
        if current is None or not current > 0:
            terms["indicators"][name] = "no measurement: not controlled this tick"
            if name in states:
                out[name] = states[name]
            continue
        value, st, t = pid_adjust(
            states.get(name, PIDState()),
            p,
            knob,
            targets[name],
            current,
            lower_bound=lower_bound,
            upper_bound=upper_bound,
        )
        out[name] = st
        terms["indicators"][name] = t
        if best is None or value > best[0]:
            best = (value, name)
    if best is None:
        return None
    terms["dominant"] = best[1]
    terms["requirement"] = round(best[0], 6)
    return RamaResult(best[0], out, terms)


def spd_targets(spd: Mapping[str, Any]) -> dict[str, float]:
    """A ServiceProfileDescriptor's system indicator targets: each indicator's UpperBound,
    else its LowerBound (Katalyst's order); non-positive values say nothing."""
    out: dict[str, float] = {}
    groups = (spd.get("spec") or {}).get("systemIndicator") or []
    for group in groups if isinstance(groups, list) else []:
        if not isinstance(group, Mapping):
            continue
        levels: dict[str, float] = {}
        for ind in group.get("indicators") or []:
            if isinstance(ind, Mapping) and isinstance(ind.get("value"), int | float):
                levels[str(ind.get("indicatorLevel", ""))] = float(ind["value"])
        value = levels.get("UpperBound", levels.get("LowerBound"))
        if value is not None and value > 0:
            out[str(group.get("name", ""))] = value
    return out


AVERAGED = frozenset({"cpu_usage_ratio", "cpu_load_ratio"})  # Katalyst's spd-avg getter


def region_targets(
    defaults: Mapping[str, float], pods: Mapping[str, Mapping[str, float]]
) -> tuple[dict[str, float], Terms]:
    """A pool's targets from its pods' SPDs (`pods`: pod -> its SPD's targets): a pod without
    one counts with the default; the pool takes the smallest (the averages for ratios)."""
    targets: dict[str, float] = {}
    terms: Terms = {}
    for name, default in sorted(defaults.items()):
        values = [t.get(name, default) for t in pods.values()]
        from_spd = sorted(p for p, t in pods.items() if name in t)
        if not values:
            targets[name] = default
        elif name in AVERAGED:
            targets[name] = sum(values) / len(values)
        else:
            targets[name] = min(values)
        if from_spd:
            how = "avg" if name in AVERAGED else "min"
            terms[name] = {"target": round(targets[name], 6), f"spd-{how} of": from_spd}
    return targets, terms
