"""Decision records: why a pod was evicted or a node tainted, in one shape for everyone.

The agent's eviction manager and the controller's backstop both explain each action with a
`DecisionRecord`. The JSON form (`to_json` / `from_json`, one object per line in a records
file) is what `katalyst explain --records` reads, so it lives here, below the components:
they must not import each other, yet the reader has to understand both.

`DecisionLog` is the bounded in-memory history plus the optional JSON-lines file; counting
records into metrics stays with each component, whose metric names users depend on.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pykatalyst.api import names

# Figures are printed to a thousandth: more digits only hide the comparison that mattered.
_DIGITS = 3


def _round(value: float) -> float:
    return round(float(value), _DIGITS)


@dataclass(frozen=True, slots=True)
class RankEntry:
    """A candidate as ranked: its place and the key that put it there."""

    pod: str
    qos_level: str
    priority: int
    evict_score: float
    usage: float

    def to_json(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "qos_level": self.qos_level,
            "priority": self.priority,
            "evict_score": self.evict_score,
            "usage": _round(self.usage),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> RankEntry:
        return cls(
            str(raw.get("pod", "")),
            str(raw.get("qos_level", "")),
            int(raw.get("priority", 0)),
            float(raw.get("evict_score", 0.0)),
            float(raw.get("usage", 0.0)),
        )


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """Why something happened: kept in memory, written as an Event, counted in metrics.

    kind, from the agent: "eviction" | "dry-run-eviction" | "eviction-succeeded" |
    "eviction-failed" | "condition-set" | "condition-cleared"; from the backstop:
    "backstop-taint" | "backstop-untaint" | "backstop-eviction" (plugin "backstop").
    `object_kind`/`object_key` name what it is about: a Pod ("namespace/name") or a Node.
    """

    time: float
    node: str
    kind: str
    plugin: str
    reason: str
    message: str
    object_kind: str = names.POD.kind
    object_key: str = ""
    object_uid: str = ""
    signal: str = ""
    observed: float | None = None
    threshold: float | None = None
    operator: str = ""
    unit: str = ""
    window: str = ""
    grace_period_s: float | None = None
    met: str = ""
    condition: str = ""
    ranking: tuple[RankEntry, ...] = ()
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "time": self.time,
            "node": self.node,
            "kind": self.kind,
            "plugin": self.plugin,
            "reason": self.reason,
            "message": self.message,
            "object": f"{self.object_kind}/{self.object_key}",
            "uid": self.object_uid,
            "dry_run": self.dry_run,
        }
        for name in ("signal", "operator", "unit", "window", "met", "condition"):
            value = getattr(self, name)
            if value:
                out[name] = value
        for name in ("observed", "threshold", "grace_period_s"):
            value = getattr(self, name)
            if value is not None:
                out[name] = _round(value)
        if self.ranking:
            out["ranking"] = [r.to_json() for r in self.ranking]
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> DecisionRecord:
        """Read back what `to_json` wrote; absent fields take their defaults, so records
        written by older versions (or by hand) still read."""
        kind, _, key = str(raw.get("object", "/")).partition("/")
        ranking = tuple(
            RankEntry.from_json(r) for r in raw.get("ranking", []) or [] if isinstance(r, Mapping)
        )

        def num(name: str) -> float | None:
            v = raw.get(name)
            return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

        return cls(
            time=float(raw.get("time", 0.0)),
            node=str(raw.get("node", "")),
            kind=str(raw.get("kind", "")),
            plugin=str(raw.get("plugin", "")),
            reason=str(raw.get("reason", "")),
            message=str(raw.get("message", "")),
            object_kind=kind,
            object_key=key,
            object_uid=str(raw.get("uid", "")),
            signal=str(raw.get("signal", "")),
            observed=num("observed"),
            threshold=num("threshold"),
            operator=str(raw.get("operator", "")),
            unit=str(raw.get("unit", "")),
            window=str(raw.get("window", "")),
            grace_period_s=num("grace_period_s"),
            met=str(raw.get("met", "")),
            condition=str(raw.get("condition", "")),
            ranking=ranking,
            dry_run=bool(raw.get("dry_run", False)),
        )


def filter_records(
    records: Iterable[DecisionRecord],
    *,
    pod: str | None = None,
    node: str | None = None,
    plugin: str | None = None,
) -> list[DecisionRecord]:
    """Records about a pod (`namespace/name` or uid), a node, or from one plugin."""
    out = []
    for r in records:
        if pod is not None and pod not in (r.object_key, r.object_uid):
            continue
        if node is not None and r.node != node:
            continue
        if plugin is not None and r.plugin != plugin:
            continue
        out.append(r)
    return out


def append_records(path: str | Path, records: Iterable[DecisionRecord]) -> None:
    """Append records to a JSON-lines file, one object a line."""
    lines = [json.dumps(r.to_json(), sort_keys=True) + "\n" for r in records]
    if lines:
        with Path(path).open("a", encoding="utf-8") as fh:
            fh.writelines(lines)


def read_records(path: str | Path) -> list[DecisionRecord]:
    """Records from a JSON-lines file written by `append_records`; a line that is not a
    JSON object is refused with its line number."""
    out = []
    p = Path(path)
    for number, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{p}:{number}: not a JSON record: {exc.msg}") from None
        if not isinstance(raw, dict):
            raise ValueError(f"{p}:{number}: a record must be a JSON object")
        out.append(DecisionRecord.from_json(raw))
    return out


class DecisionLog:
    """The last `limit` records in memory and, when `path` is set, every record appended to
    that JSON-lines file (so the file outlives the process and the in-memory bound)."""

    def __init__(self, limit: int = 1000, path: str | Path | None = None) -> None:
        self._records: deque[DecisionRecord] = deque(maxlen=limit)
        self.path = Path(path) if path is not None else None

    def add(self, records: Iterable[DecisionRecord]) -> list[DecisionRecord]:
        new = list(records)
        self._records.extend(new)
        if self.path is not None:
            append_records(self.path, new)
        return new

    def records(
        self, *, pod: str | None = None, node: str | None = None, plugin: str | None = None
    ) -> list[DecisionRecord]:
        return filter_records(self._records, pod=pod, node=node, plugin=plugin)

    def __iter__(self) -> Iterator[DecisionRecord]:
        return iter(list(self._records))

    def __len__(self) -> int:
        return len(self._records)
