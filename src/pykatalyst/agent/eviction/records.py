"""Where eviction decisions are remembered: a bounded in-memory log (for `katalyst
explain`), an optional JSON-lines file (both `api.records.DecisionLog`, shared with the
backstop controller), and prometheus counters per plugin and reason.

Counters live in the `CollectorRegistry` handed in (a fresh one when none is), never in
the process-global registry, so several agents in one process (tests, the simulator) do
not collide.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter

from pykatalyst.agent.eviction.types import EvictionRecord
from pykatalyst.api.records import DecisionLog
from pykatalyst.api.records import filter_records as filter_records
from pykatalyst.api.records import read_records as read_records

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
        self.log = DecisionLog(limit, path)

    @property
    def path(self) -> Path | None:
        return self.log.path

    @path.setter
    def path(self, value: Path | None) -> None:
        self.log.path = value

    def add(self, records: Iterable[EvictionRecord]) -> None:
        for record in self.log.add(records):
            self.metrics.count(record)
            log.info("%s%s", "(dry run) " if record.dry_run else "", record.message)

    def records(
        self, *, pod: str | None = None, node: str | None = None, plugin: str | None = None
    ) -> list[EvictionRecord]:
        return self.log.records(pod=pod, node=node, plugin=plugin)

    def __len__(self) -> int:
        return len(self.log)
