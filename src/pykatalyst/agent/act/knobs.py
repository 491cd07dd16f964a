"""The knob writer of the agent's acting side: the plan's desired knobs to the enforcer.

`KnobWriter.apply(now, desired, resync_s)` calls the enforcer when the desired knobs changed
since the last pass, or when a drift resync is due, and turns what the enforcer did (its
`EnforceReport`) into a `WriteOutcome`: the plan's `enforce` terms, the write failures to
tell (once each, by the enforcer), its notes, and whether cgroups vanished (the agent then
looks for them again).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pykatalyst.agent.enforcer import EnforceReport
from pykatalyst.agent.host.base import Knob, KnobValue
from pykatalyst.agent.plan import knob_value_json
from pykatalyst.cluster.clock import is_due


class KnobEnforcer(Protocol):
    """What the agent needs of the enforcer (`agent.enforcer.Enforcer`)."""

    def apply(
        self,
        desired: Mapping[str, Mapping[Knob, KnobValue]],
        dry_run: bool = False,
        usage: Mapping[str, int] | None = None,
    ) -> EnforceReport: ...

    @property
    def checkpoint_path(self) -> Path | None:
        """Where the enforcer keeps its checkpoint (the cpu placement's sits beside it)."""
        ...


@dataclass(frozen=True, slots=True)
class WriteOutcome:
    """What one pass of `KnobWriter.apply` did, for the plan and the agent."""

    terms: dict[str, Any]
    failures: tuple[tuple[str, str], ...] = ()  # (cgroup, message): new failures only
    notes: tuple[str, ...] = ()
    vanished: bool = False


class KnobWriter:
    def __init__(self, enforcer: KnobEnforcer | None, dry_run: bool) -> None:
        self.enforcer = enforcer
        self.dry_run = dry_run
        self._last_desired: Mapping[str, Mapping[Knob, KnobValue]] | None = None
        self._last_enforce: float | None = None

    def apply(
        self, now: float, desired: Mapping[str, Mapping[Knob, KnobValue]], resync_s: float
    ) -> WriteOutcome:
        if self.enforcer is None:
            return WriteOutcome({"state": "no enforcer"})
        changed = desired != self._last_desired
        due = is_due(self._last_enforce, now, resync_s)
        if not (changed or due):
            return WriteOutcome({"state": "unchanged"})
        try:
            report = self.enforcer.apply(desired, dry_run=self.dry_run)
        except (OSError, ValueError) as exc:
            return WriteOutcome({"state": "error", "error": str(exc)}, notes=(f"enforcer: {exc}",))
        # Nothing is written in a dry run, so the next tick must plan the same writes again.
        self._last_desired = None if self.dry_run else desired
        self._last_enforce = now
        terms = self._terms(report)
        vanished = report.vanished
        if vanished:
            terms["vanished"] = list(vanished)
        failures = tuple(
            (f.write.cgroup, f"cannot write {f.write.knob.value} on {f.write.cgroup}: {f.error}")
            for f in report.new_failures
        )
        return WriteOutcome(terms, failures, report.notes, bool(vanished))

    def _terms(self, report: EnforceReport) -> dict[str, Any]:
        out: dict[str, Any] = {"state": "dry-run" if self.dry_run else "applied"}
        planned = report.planned
        out["writes"] = len(planned)
        if self.dry_run:
            out["would_write"] = [f"{w.cgroup}: {w.knob.value} = {_show(w.value)}" for w in planned]
        failed = report.failed
        out["failed"] = len(failed)
        if self.dry_run:
            out["dry-run_by_knob"] = _by_knob(w.knob for w in planned)
        else:
            out["applied_by_knob"] = _by_knob(w.knob for w in report.applied)
            out["failed_by_knob"] = _by_knob(f.write.knob for f in failed)
        return out


def _show(value: KnobValue) -> str:
    v = knob_value_json(value)
    return str(v) if not isinstance(v, dict) else ",".join(f"{k}={x}" for k, x in v.items())


def _by_knob(knobs: Iterable[Knob]) -> dict[str, int]:
    out: dict[str, int] = {}
    for k in knobs:
        out[k.value] = out.get(k.value, 0) + 1
    return out
