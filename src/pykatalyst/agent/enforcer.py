"""The enforcer: the single writer of cgroup knobs.

It takes the desired knob state per cgroup (canonical units, see `host.base.Knob`), diffs
it against what the machine has, and writes only what differs, in an order the kernel
accepts while cpus, quotas and limits move between cgroups:

1. grow: cpusets that gain cpus/mems (a set that both gains and loses is first widened to
   the union of old and new), quotas and memory limits that rise; parents before children,
   ``cpuset.mems`` before ``cpuset.cpus``;
2. ``cpu.idle`` then shares (shares of a cgroup that is, or becomes, ``cpu.idle=1`` are
   skipped: the kernel ignores and refuses them there);
3. shrink: cpusets, quotas and limits that narrow; children before parents.

Moving a cpu from cgroup A to sibling B therefore adds it to B before taking it from A,
and a parent never drops a cpu a child still holds (cgroup v1 refuses with EBUSY).

Every outcome lands in a bounded journal (`explain`); a failing knob is reported once per
(cgroup, knob, error) rather than every pass; a vanished cgroup is forgotten. The desired
state is checkpointed (JSON, atomically replaced) before writing, so an agent that dies in
the middle of a pass re-diffs on its next start (`resume`) and converges.

Reading every knob of every cgroup on each pass costs more than the rest of a node agent's
tick on a busy node, so with `verify_period_s` the enforcer trusts what it last read or
wrote itself for that long: a cgroup whose knobs it believes it knows is not read again
until its period runs out, or a write to it fails. A knob changed behind its back (drift)
is then put back within one period instead of on the next pass.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from pykatalyst.agent.host.base import (
    ONE_SHOT_KNOBS,
    CpuQuota,
    Host,
    IoLatency,
    IoLimit,
    IoLimits,
    Knob,
    KnobValue,
    KnobWrite,
    WriteFailure,
)
from pykatalyst.cluster.clock import Clock, RealClock
from pykatalyst.topology.cpuset import CPUSet, CPUSetError

__all__ = [
    "CheckpointError",
    "DesiredState",
    "DesiredStateError",
    "EnforceReport",
    "Enforcer",
    "JournalEntry",
    "Outcome",
    "decode_desired",
    "encode_desired",
]

DesiredState = Mapping[str, Mapping[Knob, KnobValue]]
Outcome = Literal["applied", "failed", "vanished", "unsupported", "dry-run"]

CHECKPOINT_VERSION: Final = 1
# Knobs whose absence is the kernel's or the cgroup version's (cpu.idle before 5.15,
# memory.high on v1): missing once means missing everywhere. Other missing files are
# remembered per cgroup (io.weight and io.max: a v2 parent may not delegate io).
_MACHINE_WIDE: Final = frozenset(
    {
        Knob.CPU_IDLE,
        Knob.MEMORY_HIGH,
        Knob.MEMORY_LOW,
        Knob.MEMORY_MIN,
        Knob.MEMORY_RECLAIM,
        Knob.IO_LATENCY,
        Knob.NET_CLS_CLASSID,
    }
)


class DesiredStateError(ValueError):
    """A desired knob value the enforcer refuses to write (nothing was written)."""

    def __init__(self, cgroup: str, knob: Knob | None, value: object, reason: str) -> None:
        self.cgroup = cgroup
        self.knob = knob
        self.value = value
        where = cgroup if knob is None else f"{cgroup} {knob.value}"
        super().__init__(f"desired state of {where}: {reason}")


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read back."""


@dataclass(frozen=True, slots=True)
class JournalEntry:
    time: float
    cgroup: str
    knob: Knob
    value: KnobValue
    previous: KnobValue  # what the machine had (None also when unknown)
    outcome: Outcome
    reason: str = ""
    error: str = ""


@dataclass(frozen=True, slots=True)
class EnforceReport:
    """One enforcement pass.

    `failed` lists every failure of this pass; `new_failures` only those not reported
    before (log or raise Events for these). `notes` are warnings about writes that were
    made anyway (a memory limit below current usage makes the kernel reclaim or OOM-kill).
    """

    time: float
    dry_run: bool
    planned: tuple[KnobWrite, ...] = ()
    applied: tuple[KnobWrite, ...] = ()
    failed: tuple[WriteFailure, ...] = ()
    new_failures: tuple[WriteFailure, ...] = ()
    vanished: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    unsupported: tuple[Knob, ...] = field(default=())  # knobs this machine lacks (skipped)

    @property
    def ok(self) -> bool:
        return not self.failed


@dataclass(frozen=True, slots=True)
class _Step:
    phase: int
    key: tuple[Any, ...]
    write: KnobWrite
    previous: KnobValue


# What `_plan` reads for a knob the machine did not report.
_ABSENT: Final = object()


def _depth(cgroup: str) -> int:
    return cgroup.count("/") + 1


def _quota_ratio(q: CpuQuota | None) -> float:
    if q is None or q.quota_us is None:
        return float("inf")
    return q.quota_us / q.period_us


def _limit(v: KnobValue) -> float:
    return float("inf") if v is None else float(v)  # type: ignore[arg-type]


class Enforcer:
    """The single writer. `checkpoint` is a file path (its directory must exist) or None."""

    def __init__(
        self,
        host: Host,
        checkpoint: Path | None = None,
        clock: Clock | None = None,
        journal_size: int = 4096,
        verify_period_s: float = 0.0,
    ) -> None:
        if verify_period_s < 0:
            raise ValueError(
                f"verify_period_s: invalid value {verify_period_s!r}; accepted: seconds >= 0 "
                "(0 reads every cgroup on every pass)"
            )
        if isinstance(journal_size, bool) or not isinstance(journal_size, int) or journal_size < 0:
            raise ValueError(
                f"journal_size: invalid value {journal_size!r}; accepted: an entry count >= 0 "
                "(0 keeps no journal)"
            )
        self._host = host
        self._verify_period_s = verify_period_s
        # What each cgroup's knobs are believed to be, and when they were last read.
        self._known: dict[str, dict[Knob, KnobValue]] = {}
        self._read_at: dict[str, float] = {}
        self._clock: Clock = clock if clock is not None else RealClock()
        self._checkpoint = checkpoint
        self._journal: deque[JournalEntry] = deque(maxlen=journal_size)
        self._reported: set[tuple[str, Knob, str]] = set()
        self._unsupported: dict[Knob, str] = {}
        self._missing_at: set[tuple[str, Knob]] = set()
        self._desired: dict[str, dict[Knob, KnobValue]] = {}
        self._complete = True
        self.checkpoint_error: str | None = None
        if checkpoint is not None and checkpoint.exists():
            try:
                complete, desired = _load_checkpoint(checkpoint, host.knob_problem)
            except CheckpointError as e:
                # Not fatal: the next apply re-diffs against the machine anyway.
                self.checkpoint_error = str(e)
            else:
                self._desired = desired
                self._complete = complete

    # -- state -----------------------------------------------------------------------------

    @property
    def desired(self) -> dict[str, dict[Knob, KnobValue]]:
        """The last desired state (from the checkpoint until the first apply)."""
        return {cg: dict(k) for cg, k in self._desired.items()}

    @property
    def checkpoint_path(self) -> Path | None:
        """Where the desired state is checkpointed (the agent's state directory)."""
        return self._checkpoint

    @property
    def interrupted(self) -> bool:
        """The checkpoint says the last pass did not finish (the agent died mid-apply)."""
        return not self._complete

    @property
    def unsupported_knobs(self) -> dict[Knob, str]:
        return dict(self._unsupported)

    def explain(
        self, cgroup: str | None = None, knob: Knob | None = None, limit: int | None = None
    ) -> list[JournalEntry]:
        """Journal entries (oldest first), optionally for one cgroup and/or knob."""
        cg = None if cgroup is None else cgroup.strip("/")
        out = [
            e
            for e in self._journal
            if (cg is None or e.cgroup == cg) and (knob is None or e.knob is knob)
        ]
        return out if limit is None else out[-limit:]

    # -- planning --------------------------------------------------------------------------

    def plan(
        self, desired: DesiredState, usage: Mapping[str, int] | None = None
    ) -> list[KnobWrite]:
        """The writes that take the machine from its actual state to `desired`, in a safe
        order. Raises DesiredStateError (before reading anything) for an invalid value."""
        return [s.write for s in self._plan(_normalize(desired, self._host.knob_problem), usage)[0]]

    def _actual(self, cg: str, now: float | None) -> dict[Knob, KnobValue]:
        """The cgroup's knobs: believed ones while their period runs (`now` given), else
        read from the machine."""
        if now is not None and self._verify_period_s > 0:
            known = self._known.get(cg)
            if known is not None and 0 <= now - self._read_at[cg] < self._verify_period_s:
                return known
        actual = self._host.read_knobs(cg)
        if now is not None and self._verify_period_s > 0:
            self._known[cg] = dict(actual)
            self._read_at[cg] = now
        return actual

    def _plan(
        self,
        desired: dict[str, dict[Knob, KnobValue]],
        usage: Mapping[str, int] | None,
        now: float | None = None,
    ) -> tuple[list[_Step], list[str]]:
        same = self._host.same_value
        steps: list[_Step] = []
        notes: list[str] = []
        for cg in sorted(desired):
            knobs = desired[cg]
            actual = self._actual(cg, now)
            for knob, value in knobs.items():
                got = actual.get(knob, _ABSENT)
                if got is value or got == value:
                    continue  # as desired already (equal values are always the same)
                # A SCHED_IDLE group has no weight: the kernel refuses shares while cpu.idle
                # is 1.
                if (
                    knob in self._unsupported
                    or (cg, knob) in self._missing_at
                    or (
                        knob is Knob.CPU_SHARES
                        and knobs.get(Knob.CPU_IDLE, actual.get(Knob.CPU_IDLE)) == 1
                    )
                ):
                    continue
                has = knob in actual
                old = actual.get(knob)
                if has and same(knob, value, old):
                    continue
                steps.extend(self._steps_for(cg, _depth(cg), knob, value, old, has))
                if (
                    knob is Knob.MEMORY_LIMIT
                    and isinstance(value, int)
                    and _limit(value) < _limit(old)
                ):
                    used = self._usage(cg, usage)
                    if used is not None and value < used:
                        notes.append(
                            f"{cg}: memory limit {value} is below current usage {used}; "
                            "the kernel will reclaim or OOM-kill to meet it"
                        )
                        steps[-1] = _Step(
                            steps[-1].phase,
                            steps[-1].key,
                            KnobWrite(
                                cg,
                                knob,
                                value,
                                _join(steps[-1].write.reason, f"below usage {used}"),
                            ),
                            steps[-1].previous,
                        )
        steps.sort(key=lambda s: (s.phase, *s.key))
        return steps, notes

    def _usage(self, cg: str, usage: Mapping[str, int] | None) -> int | None:
        if usage is not None and cg in usage:
            return usage[cg]
        return self._host.memory_usage(cg)

    def _steps_for(
        self, cg: str, depth: int, knob: Knob, value: KnobValue, old: KnobValue, known: bool
    ) -> list[_Step]:
        reason = f"{_show(old) if known else '?'} -> {_show(value)}"
        grow_key = (depth, cg)
        shrink_key = (-depth, cg)
        if knob in (Knob.CPUSET_CPUS, Knob.CPUSET_MEMS):
            assert isinstance(value, CPUSet)
            # mems before cpus while growing, cpus before mems while shrinking.
            first, second = (0, 1) if knob is Knob.CPUSET_MEMS else (1, 0)
            if not isinstance(old, CPUSet):
                return [_Step(0, (*grow_key, first), KnobWrite(cg, knob, value, reason), old)]
            added, removed = value - old, old - value
            if added and removed:
                union = value | old
                return [
                    _Step(
                        0,
                        (*grow_key, first),
                        KnobWrite(cg, knob, union, f"{reason} (widen first)"),
                        old,
                    ),
                    _Step(2, (*shrink_key, second), KnobWrite(cg, knob, value, reason), union),
                ]
            if added:
                return [_Step(0, (*grow_key, first), KnobWrite(cg, knob, value, reason), old)]
            return [_Step(2, (*shrink_key, second), KnobWrite(cg, knob, value, reason), old)]
        write = KnobWrite(cg, knob, value, reason)
        if knob is Knob.CPU_QUOTA:
            assert isinstance(value, CpuQuota)
            prev = old if isinstance(old, CpuQuota) else None
            if prev is not None and _quota_ratio(value) < _quota_ratio(prev):
                return [_Step(2, (*shrink_key, 0), write, old)]
            return [_Step(0, (*grow_key, 2), write, old)]
        if knob in (Knob.MEMORY_LIMIT, Knob.MEMORY_HIGH):
            if known and _limit(value) < _limit(old):
                return [_Step(2, (*shrink_key, 1), write, old)]
            return [_Step(0, (*grow_key, 3), write, old)]
        return [_Step(1, (cg, knob.value), write, old)]

    # -- applying --------------------------------------------------------------------------

    def apply(
        self,
        desired: DesiredState,
        dry_run: bool = False,
        usage: Mapping[str, int] | None = None,
    ) -> EnforceReport:
        """Bring the machine to `desired` (or, with `dry_run`, only say what that takes).

        `usage` (cgroup -> memory bytes, e.g. from the pass's HostSample) lets the report
        flag memory limits set below what a cgroup uses.
        """
        now = self._clock.now()
        state = _normalize(desired, self._host.knob_problem)
        steps, notes = self._plan(state, usage, now)
        for cg in [cg for cg in self._known if cg not in state]:
            self._unknow(cg)
        planned = tuple(s.write for s in steps)
        unsupported = self._unsupported_knobs()
        if dry_run:
            for s in steps:
                self._record(now, s, "dry-run")
            return EnforceReport(
                now, True, planned=planned, notes=tuple(notes), unsupported=unsupported
            )

        changed_state = state != self._desired or not self._complete
        if planned or changed_state:
            self._save(state, complete=False, now=now)
        self._desired = state
        self._complete = False  # until the host has taken every write (or we died trying)
        result = self._host.apply(planned) if planned else None

        applied = () if result is None else result.applied
        by_write = {s.write: s for s in steps}
        self._took(now, applied, by_write)
        failed, new, vanished = self._sort_failures(
            now, () if result is None else result.failed, by_write
        )
        for cg in vanished:
            self._forget(cg)
        if planned or changed_state or vanished:
            self._save(self._desired, complete=True, now=now)
        self._complete = True
        return EnforceReport(
            now,
            False,
            planned=planned,
            applied=tuple(applied),
            failed=tuple(failed),
            new_failures=tuple(new),
            vanished=tuple(vanished),
            notes=tuple(notes),
            unsupported=self._unsupported_knobs(),
        )

    def _unsupported_knobs(self) -> tuple[Knob, ...]:
        """The knobs this machine lacks, in `Knob`'s order."""
        if not self._unsupported:
            return ()
        return tuple(k for k in Knob if k in self._unsupported)

    def _took(
        self, now: float, applied: Sequence[KnobWrite], by_write: Mapping[KnobWrite, _Step]
    ) -> None:
        """Record the writes the host took, and know their values from now on."""
        for w in applied:
            self._reported = {r for r in self._reported if (r[0], r[1]) != (w.cgroup, w.knob)}
            self._record(now, by_write.get(w), "applied", w)
            known = self._known.get(w.cgroup)
            if known is not None and w.knob not in ONE_SHOT_KNOBS:
                known[w.knob] = w.value

    def _sort_failures(
        self, now: float, failures: Sequence[WriteFailure], by_write: Mapping[KnobWrite, _Step]
    ) -> tuple[list[WriteFailure], list[WriteFailure], list[str]]:
        """Record the writes the host refused: (failed, first reported now, the cgroups
        found gone). An unsupported knob is reported once per machine (a machine-wide
        one) or per cgroup; another failure once per cgroup, knob and error."""
        vanished: list[str] = []
        failed: list[WriteFailure] = []
        new: list[WriteFailure] = []
        for f in failures:
            w = f.write
            self._unknow(w.cgroup)  # the kernel may hold anything now: read it next pass
            if f.vanished:
                self._record(now, by_write.get(w), "vanished", w, f.error)
                if w.cgroup not in vanished:
                    vanished.append(w.cgroup)
                continue
            failed.append(f)
            if f.unsupported:
                self._record(now, by_write.get(w), "unsupported", w, f.error)
                if w.knob in _MACHINE_WIDE:
                    if w.knob not in self._unsupported:
                        self._unsupported[w.knob] = f.error
                        new.append(f)
                elif (w.cgroup, w.knob) not in self._missing_at:
                    # e.g. a v2 cgroup whose parent does not delegate the cpuset controller
                    self._missing_at.add((w.cgroup, w.knob))
                    new.append(f)
                continue
            self._record(now, by_write.get(w), "failed", w, f.error)
            key = (w.cgroup, w.knob, str(f.errno) if f.errno is not None else f.error)
            if key not in self._reported:
                self._reported.add(key)
                new.append(f)
        return failed, new, vanished

    def resume(self, dry_run: bool = False) -> EnforceReport:
        """Re-apply the checkpointed desired state (after a restart, before the first plan
        of the new run is ready); a no-op pass when the machine already matches."""
        return self.apply(self.desired, dry_run=dry_run)

    def forget(self, cgroups: Iterable[str]) -> None:
        """Drop cgroups the agent no longer manages (their knobs are left as they are)."""
        for cg in cgroups:
            self._forget(cg.strip("/"))

    def _unknow(self, cg: str) -> None:
        self._known.pop(cg, None)
        self._read_at.pop(cg, None)

    def _forget(self, cg: str) -> None:
        self._unknow(cg)
        self._desired.pop(cg, None)
        self._reported = {r for r in self._reported if r[0] != cg}
        self._missing_at = {m for m in self._missing_at if m[0] != cg}

    def _record(
        self,
        now: float,
        step: _Step | None,
        outcome: Outcome,
        write: KnobWrite | None = None,
        error: str = "",
    ) -> None:
        if not self._journal.maxlen:
            return  # no journal kept
        w = write if write is not None else (step.write if step is not None else None)
        if w is None:
            return
        prev = step.previous if step is not None else None
        self._journal.append(
            JournalEntry(now, w.cgroup, w.knob, w.value, prev, outcome, w.reason, error)
        )

    def _save(
        self, state: Mapping[str, Mapping[Knob, KnobValue]], complete: bool, now: float
    ) -> None:
        if self._checkpoint is None:
            return
        doc = {
            "version": CHECKPOINT_VERSION,
            "saved_at": now,
            "complete": complete,
            "desired": encode_desired(state),
        }
        atomic_write(self._checkpoint, json.dumps(doc, sort_keys=True, indent=1))


# -- desired state validation and encoding -------------------------------------------------


@functools.lru_cache(maxsize=32768)
def _clean_path(raw: str) -> str | None:
    """`raw` without its outer slashes, or None when it is not a relative cgroup path
    (empty, or with an empty, `.` or `..` part). Remembered: every pass checks the same
    paths (a node's few dozen; a simulated cluster's agents share one process)."""
    cg = raw.strip("/")
    if not cg or any(p in ("", ".", "..") for p in cg.split("/")):
        return None
    return cg


def _normalize(
    desired: DesiredState, knob_problem: Callable[[Knob, KnobValue], str | None]
) -> dict[str, dict[Knob, KnobValue]]:
    """Validated copy with clean cgroup paths; raises DesiredStateError naming the first bad
    entry, so that nothing is written for an invalid desired state."""
    out: dict[str, dict[Knob, KnobValue]] = {}
    for raw_cg, knobs in desired.items():
        if not isinstance(raw_cg, str):
            raise DesiredStateError(str(raw_cg), None, raw_cg, "the cgroup must be a path string")
        cg = _clean_path(raw_cg)
        if cg is None:
            raise DesiredStateError(
                raw_cg, None, raw_cg, "a cgroup path relative to the hierarchy root is required"
            )
        clean: dict[Knob, KnobValue] = out.setdefault(cg, {})
        for knob, value in knobs.items():
            if not isinstance(knob, Knob):
                raise DesiredStateError(cg, None, knob, f"unknown knob {knob!r}")
            problem = knob_problem(knob, value)
            if problem is not None:
                if isinstance(value, CPUSet) and value.is_empty():
                    problem = (
                        f"refusing to write an empty {knob.value}: "
                        "the cgroup's tasks would have nowhere to run"
                    )
                raise DesiredStateError(cg, knob, value, problem)
            clean[knob] = value
    return out


def _show(v: KnobValue) -> str:
    if isinstance(v, CPUSet):
        return f"[{v}]"
    if isinstance(v, IoLimits):
        return show_io_limits(v)
    if isinstance(v, IoLatency):
        return ",".join(f"{d} target={t}us" for d, t in v.targets) or "none"
    if isinstance(v, CpuQuota):
        return f"{'max' if v.quota_us is None else v.quota_us}/{v.period_us}"
    return "max" if v is None else str(v)


def show_io_limits(v: IoLimits) -> str:
    def one(lim: IoLimit) -> str:
        keys = ("rbps", "wbps", "riops", "wiops")
        return f"{lim.device} " + " ".join(
            f"{k}={getattr(lim, k)}" for k in keys if getattr(lim, k) is not None
        )

    return ",".join(one(lim) for lim in v.devices) or "none"


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a else b


def _encode_value(knob: Knob, v: KnobValue) -> Any:
    if isinstance(v, CPUSet):
        return str(v)
    if isinstance(v, CpuQuota):
        return {"quota_us": v.quota_us, "period_us": v.period_us}
    if isinstance(v, IoLimits):
        return [
            {"device": x.device, "rbps": x.rbps, "wbps": x.wbps, "riops": x.riops, "wiops": x.wiops}
            for x in v.devices
        ]
    if isinstance(v, IoLatency):
        return {d: t for d, t in v.targets}
    return v


def _decode_value(knob: Knob, raw: Any) -> KnobValue:
    if knob in (Knob.CPUSET_CPUS, Knob.CPUSET_MEMS):
        if not isinstance(raw, str):
            raise CheckpointError(f"{knob.value}: expected a cpu list string, got {raw!r}")
        try:
            return CPUSet.parse(raw)
        except CPUSetError as e:
            raise CheckpointError(str(e)) from e
    if knob is Knob.CPU_QUOTA:
        if not isinstance(raw, dict) or "period_us" not in raw:
            raise CheckpointError(f"{knob.value}: expected {{quota_us, period_us}}, got {raw!r}")
        return CpuQuota(raw.get("quota_us"), raw["period_us"])
    if knob is Knob.IO_MAX:
        if not isinstance(raw, list) or not all(isinstance(x, dict) for x in raw):
            raise CheckpointError(f"{knob.value}: expected a list of device limits, got {raw!r}")
        try:
            return IoLimits.of([IoLimit(**x) for x in raw])
        except TypeError as e:
            raise CheckpointError(f"{knob.value}: {e}") from e
    if knob is Knob.IO_LATENCY:
        if not isinstance(raw, dict) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in raw.values()
        ):
            raise CheckpointError(f"{knob.value}: expected {{device: target_us}}, got {raw!r}")
        return IoLatency.of(raw)
    if raw is not None and not (isinstance(raw, int) and not isinstance(raw, bool)):
        raise CheckpointError(f"{knob.value}: expected an integer or null, got {raw!r}")
    return raw


def encode_desired(state: Mapping[str, Mapping[Knob, KnobValue]]) -> dict[str, dict[str, Any]]:
    return {
        cg: {
            k.value: _encode_value(k, v)
            for k, v in sorted(knobs.items(), key=lambda i: i[0].value)
            if k not in ONE_SHOT_KNOBS
        }
        for cg, knobs in sorted(state.items())
    }


def decode_desired(
    raw: Any, knob_problem: Callable[[Knob, KnobValue], str | None]
) -> dict[str, dict[Knob, KnobValue]]:
    if not isinstance(raw, dict):
        raise CheckpointError(f"desired: expected an object, got {type(raw).__name__}")
    by_name = {k.value: k for k in Knob}
    out: dict[str, dict[Knob, KnobValue]] = {}
    for cg, knobs in raw.items():
        if not isinstance(knobs, dict):
            raise CheckpointError(f"desired[{cg!r}]: expected an object")
        entry: dict[Knob, KnobValue] = {}
        for name, value in knobs.items():
            knob = by_name.get(name)
            if knob is None:
                raise CheckpointError(
                    f"desired[{cg!r}]: unknown knob {name!r}; accepted: {', '.join(by_name)}"
                )
            entry[knob] = _decode_value(knob, value)
        out[cg] = entry
    try:
        return _normalize(out, knob_problem)
    except DesiredStateError as e:
        raise CheckpointError(str(e)) from e


def _load_checkpoint(
    path: Path, knob_problem: Callable[[Knob, KnobValue], str | None]
) -> tuple[bool, dict[str, dict[Knob, KnobValue]]]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: unreadable checkpoint: {e}") from e
    if not isinstance(doc, dict) or doc.get("version") != CHECKPOINT_VERSION:
        raise CheckpointError(f"{path}: not a version {CHECKPOINT_VERSION} enforcer checkpoint")
    try:
        desired = decode_desired(doc.get("desired", {}), knob_problem)
    except CheckpointError as e:
        raise CheckpointError(f"{path}: {e}") from e
    return bool(doc.get("complete", False)), desired


def atomic_write(path: Path, text: str) -> None:
    """Write-then-rename, so a crash leaves either the old file or the new one, whole;
    a failed write leaves no temporary file behind."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    with contextlib.suppress(OSError):
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
