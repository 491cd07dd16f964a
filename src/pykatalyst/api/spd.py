"""What a ServiceProfileDescriptor says about a pod, read as Katalyst reads it.

Three rules live here because both the SPD controller (which writes them) and the agent
(which honours them) need them, and neither imports the other:

- **Baseline sentinel.** The workload's active pods ordered by (creationTimestamp, name);
  with `baselinePercent` p strictly between 0 and 100 the sentinel is the pod at index
  ⌊(n−1)·p/100⌋, written as JSON `{"timeStamp","podName"}` to the SPD annotation
  `spd.katalyst.kubewharf.io/baselineSentinel` (per extended indicator, a JSON map of such
  sentinels in `…/extendedBaselineSentinel`). A pod is baseline when it sorts at or before
  the sentinel; p = 100 makes every pod baseline, p = 0 or no p none.
- **Business performance level.** Each `businessIndicator` against its current value in
  `status.businessStatus`: above its UpperBound Poor, below its LowerBound Perfect, else
  Good; the worst indicator wins. An indicator without a current value leaves the level
  unknown.
- **Reclaim gate.** A pod whose level is Poor, or that is baseline, lends nothing to
  reclaimed pods: the agent counts it at its requests, not its usage.

`merge_agg_metrics` is the status merge every producer of `status.aggMetrics` goes through:
entries are keyed by (scope, aggregator); entries of scopes nothing produces are dropped.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pykatalyst.api import names
from pykatalyst.api.timefmt import parse_rfc3339, rfc3339

PERFECT, GOOD, POOR, UNKNOWN = "Perfect", "Good", "Poor", "Unknown"
_RANK = {UNKNOWN: -1, PERFECT: 0, GOOD: 1, POOR: 2}
UPPER, LOWER = "UpperBound", "LowerBound"


@dataclass(frozen=True, slots=True, order=True)
class PodMeta:
    """A pod's place in the baseline order: creation time (whole seconds), then name."""

    created: float
    name: str

    def to_json(self) -> dict[str, str]:
        return {"timeStamp": rfc3339(self.created), "podName": self.name}

    def describe(self) -> str:
        return f"{self.name} (created {rfc3339(self.created)})"


def pod_meta(pod: Mapping[str, Any]) -> PodMeta:
    """A pod's (creationTimestamp, name); a pod without a readable time sorts first, as a
    zero metav1.Time does."""
    meta = pod.get("metadata") or {}
    text = meta.get("creationTimestamp")
    try:
        created = parse_rfc3339(text) if isinstance(text, str) else 0.0
    except ValueError:
        created = 0.0
    return PodMeta(created, str(meta.get("name", "")))


def sentinel(metas: Iterable[PodMeta], percent: int | None) -> PodMeta | None:
    """Katalyst's baseline sentinel: None for no percent, p ≥ 100, p ≤ 0 or no pods."""
    if percent is None or percent >= 100 or percent <= 0:
        return None
    ordered = sorted(metas)
    if not ordered:
        return None
    return ordered[(len(ordered) - 1) * percent // 100]


def sentinel_text(meta: PodMeta) -> str:
    """The annotation value, byte for byte as Katalyst's controller writes it."""
    return json.dumps(meta.to_json(), separators=(",", ":"))


def extended_sentinels_text(sentinels: Mapping[str, PodMeta]) -> str | None:
    """The extended-indicator annotation (a JSON map, keys sorted as Go writes them);
    None when there is none (the annotation is removed)."""
    if not sentinels:
        return None
    body = {k: sentinels[k].to_json() for k in sorted(sentinels)}
    return json.dumps(body, separators=(",", ":"))


def _parse_meta(raw: Any, where: str) -> PodMeta:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: expected a JSON object with timeStamp and podName")
    try:
        created = parse_rfc3339(str(raw.get("timeStamp", "")))
    except ValueError as exc:
        raise ValueError(f"{where}.timeStamp: {exc}") from None
    return PodMeta(created, str(raw.get("podName", "")))


def read_sentinel(spd: Mapping[str, Any]) -> PodMeta | None:
    """The SPD's baseline sentinel (None when it has none); ValueError when unreadable."""
    text = ((spd.get("metadata") or {}).get("annotations") or {}).get(
        names.SPD_BASELINE_SENTINEL_ANNOTATION
    )
    if text is None:
        return None
    try:
        raw = json.loads(text)
    except (TypeError, ValueError):
        raise ValueError(f"annotation {names.SPD_BASELINE_SENTINEL_ANNOTATION}: not JSON") from None
    return _parse_meta(raw, f"annotation {names.SPD_BASELINE_SENTINEL_ANNOTATION}")


def baseline_percent(spd: Mapping[str, Any]) -> int | None:
    """spec.baselinePercent (None when unset); ValueError when it is not an integer."""
    value = (spd.get("spec") or {}).get("baselinePercent")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"spec.baselinePercent: {value!r} is not an integer (accepted: 0-100)")
    return value


def baseline_rule(meta: PodMeta, percent: int | None, found: PodMeta | None) -> tuple[bool, str]:
    """Whether the pod is baseline, and the rule that says so. A percent strictly between
    0 and 100 without a sentinel is an error (ValueError), as in Katalyst."""
    if percent is None:
        return False, "no spec.baselinePercent: no pod is baseline"
    if percent >= 100:
        return True, f"baselinePercent {percent}: every pod of the workload is baseline"
    if percent <= 0:
        return False, f"baselinePercent {percent}: no pod is baseline"
    if found is None:
        raise ValueError(
            f"baselinePercent {percent} but no {names.SPD_BASELINE_SENTINEL_ANNOTATION} "
            "annotation (the SPD controller has not written it yet)"
        )
    if meta <= found:
        return True, (
            f"baseline: {meta.describe()} sorts at or before the sentinel "
            f"{found.describe()} of baselinePercent {percent}"
        )
    return False, (
        f"not baseline: {meta.describe()} sorts after the sentinel {found.describe()} "
        f"of baselinePercent {percent}"
    )


@dataclass(frozen=True, slots=True)
class BusinessLevel:
    """The level, and per indicator what decided it; `error` when it cannot be known."""

    level: str
    terms: tuple[str, ...] = ()
    error: str = ""

    def describe(self) -> str:
        why = self.error or "; ".join(self.terms) or "no businessIndicator"
        return f"business performance level {self.level}: {why}"


def _targets(spd: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    groups = (spd.get("spec") or {}).get("businessIndicator") or []
    for i, group in enumerate(groups if isinstance(groups, list) else []):
        if not isinstance(group, Mapping):
            raise ValueError(f"spec.businessIndicator[{i}]: expected an object")
        bounds = out.setdefault(str(group.get("name", "")), {})
        for j, ind in enumerate(group.get("indicators") or []):
            value = ind.get("value") if isinstance(ind, Mapping) else None
            level = ind.get("indicatorLevel") if isinstance(ind, Mapping) else None
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"spec.businessIndicator[{i}].indicators[{j}].value: not a number")
            if level in (UPPER, LOWER):
                bounds[str(level)] = float(value)
    return out


def _currents(spd: Mapping[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    items = (spd.get("status") or {}).get("businessStatus") or []
    for item in items if isinstance(items, list) else []:
        current = item.get("current") if isinstance(item, Mapping) else None
        if isinstance(current, int | float) and not isinstance(current, bool):
            out[str(item.get("name", ""))] = float(current)
    return out


def business_level(spd: Mapping[str, Any]) -> BusinessLevel:
    """Katalyst's ServiceBusinessPerformanceLevel: the worst indicator's level."""
    try:
        targets = _targets(spd)
    except ValueError as exc:
        return BusinessLevel(UNKNOWN, error=str(exc))
    currents = _currents(spd)
    worst = UNKNOWN
    terms: list[str] = []
    for name, bounds in sorted(targets.items()):
        if name not in currents:
            return BusinessLevel(
                UNKNOWN,
                tuple(terms),
                f"indicator {name} has no current value in status.businessStatus",
            )
        value, upper, lower = currents[name], bounds.get(UPPER), bounds.get(LOWER)
        if upper is not None and value > upper:
            level, why = POOR, f"{name} {value:g} > UpperBound {upper:g}"
        elif lower is not None and value < lower:
            level, why = PERFECT, f"{name} {value:g} < LowerBound {lower:g}"
        else:
            level, why = GOOD, f"{name} {value:g} within its bounds"
        terms.append(why)
        if _RANK[level] > _RANK[worst]:
            worst = level
    return BusinessLevel(worst, tuple(terms))


def reclaim_rule(pod: PodMeta, spd: Mapping[str, Any]) -> str:
    """Why the pod (its `pod_meta`) lends nothing to reclaimed pods under this SPD, "" when
    it may lend.
    Katalyst's order: a Poor business level first, then baseline; an SPD that cannot be
    read on either count keeps the pod out of reclaim, as Katalyst's agent does."""
    level = business_level(spd)
    if level.level == POOR:
        return f"SPD {level.describe()}"
    if level.error:
        return f"SPD {level.describe()}: reclaim is off until it is known"
    try:
        baseline, why = baseline_rule(pod, baseline_percent(spd), read_sentinel(spd))
    except ValueError as exc:
        return f"SPD baseline unknown: {exc}: reclaim is off until it is known"
    return f"SPD {why}" if baseline else ""


def agg_key(entry: Mapping[str, Any]) -> tuple[str, str]:
    return str(entry.get("scope", "")), str(entry.get("aggregator", ""))


def produced(scope: str, scopes: Collection[str]) -> bool:
    """Whether something produces this scope: an empty scope always counts; otherwise the
    scope is a produced one or starts with one (Katalyst's rule)."""
    return not scope or scope in scopes or any(scope.startswith(s) for s in scopes)


def merge_agg_metrics(
    current: Sequence[Mapping[str, Any]],
    incoming: Sequence[Mapping[str, Any]],
    scopes: Collection[str],
) -> list[dict[str, Any]]:
    """status.aggMetrics after a producer's `incoming` entries: each replaces the items of
    the entry with the same (scope, aggregator) or is appended; then the entries of scopes
    nothing produces are dropped. Inputs are not changed."""
    out = [dict(e) for e in current if isinstance(e, Mapping)]
    for entry in incoming:
        for have in out:
            if agg_key(have) == agg_key(entry):
                have["items"] = entry.get("items")
                break
        else:
            out.append(dict(entry))
    return [e for e in out if produced(agg_key(e)[0], scopes)]
