"""Where eviction decisions are remembered: a bounded in-memory log (for `katalyst
explain`), an optional JSON-lines file, and prometheus counters per plugin and reason.

Counters live in the `CollectorRegistry` handed in (a fresh one when none is), never in
the process-global registry, so several agents in one process (tests, the simulator) do
not collide.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import Iterable
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter

from pykatalyst.agent.eviction.types import EvictionRecord

log = logging.getLogger("pykatalyst.eviction")


class EvictionMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.victims = Counter(
            "katalyst_eviction_victims",
            "Pods evicted, by plugin and reason.",
            ["plugin", "reason"],
            registry=registry,
        )
        self.dry_run_victims = Counter(
            "katalyst_eviction_dryrun_victims",
            "Pods a dry-run plugin would have evicted, by plugin and reason.",
            ["plugin", "reason"],
            registry=registry,
        )
        self.conditions = Counter(
            "katalyst_eviction_conditions",
            "Condition transitions (set / cleared), by plugin and condition.",
            ["plugin", "condition", "transition"],
            registry=registry,
        )
        self.failures = Counter(
            "katalyst_eviction_failures",
            "Evictions the API server refused, by plugin and reason.",
            ["plugin", "reason"],
            registry=registry,
        )

    def count(self, record: EvictionRecord) -> None:
        if record.kind == "eviction":
            self.victims.labels(record.plugin, record.reason).inc()
        elif record.kind == "dry-run-eviction":
            self.dry_run_victims.labels(record.plugin, record.reason).inc()
        elif record.kind in ("condition-set", "condition-cleared"):
            transition = "set" if record.kind == "condition-set" else "cleared"
            self.conditions.labels(record.plugin, record.condition, transition).inc()
        elif record.kind == "eviction-failed":
            self.failures.labels(record.plugin, record.reason).inc()


class EvictionRecorder:
    """Keeps the last `limit` records, counts every record, and appends each to `path`
    (JSON lines) when one is given, so `katalyst explain --records` can read them."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        limit: int = 1000,
        path: str | Path | None = None,
    ) -> None:
        self.metrics = EvictionMetrics(registry if registry is not None else CollectorRegistry())
        self._records: deque[EvictionRecord] = deque(maxlen=limit)
        self.path = Path(path) if path is not None else None

    def add(self, records: Iterable[EvictionRecord]) -> None:
        new = list(records)
        for record in new:
            self._records.append(record)
            self.metrics.count(record)
            log.info("%s%s", "(dry run) " if record.dry_run else "", record.message)
        if self.path is not None and new:
            with self.path.open("a", encoding="utf-8") as fh:
                for record in new:
                    fh.write(json.dumps(record.to_json(), sort_keys=True) + "\n")

    def records(
        self, *, pod: str | None = None, node: str | None = None, plugin: str | None = None
    ) -> list[EvictionRecord]:
        return filter_records(self._records, pod=pod, node=node, plugin=plugin)

    def __len__(self) -> int:
        return len(self._records)


def filter_records(
    records: Iterable[EvictionRecord],
    *,
    pod: str | None = None,
    node: str | None = None,
    plugin: str | None = None,
) -> list[EvictionRecord]:
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


def read_records(path: str | Path) -> list[EvictionRecord]:
    """Records from a JSON-lines file written by `EvictionRecorder`."""
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
        out.append(EvictionRecord.from_json(raw))
    return out
