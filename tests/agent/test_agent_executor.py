"""The executor hands the desired knobs to the enforcer only when they change or a drift
resync is due; a dry run writes nothing, so it plans the same writes every tick."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pykatalyst.agent.act import KnobWriter
from pykatalyst.agent.enforcer import EnforceReport
from pykatalyst.agent.host.base import Knob, KnobValue, KnobWrite


@dataclass
class CountingEnforcer:
    calls: list[bool] = field(default_factory=list)
    vanish: tuple[str, ...] = ()
    checkpoint_path: Path | None = None

    def apply(
        self,
        desired: Mapping[str, Mapping[Knob, KnobValue]],
        dry_run: bool = False,
        usage: Mapping[str, int] | None = None,
    ) -> EnforceReport:
        self.calls.append(dry_run)
        writes = tuple(KnobWrite(c, k, v) for c, ks in desired.items() for k, v in ks.items())
        return EnforceReport(0.0, dry_run, writes, () if dry_run else writes, vanished=self.vanish)


DESIRED = {"kubepods/pod1": {Knob.CPU_IDLE: 1}}


def test_unchanged_knobs_wait_for_the_resync() -> None:
    enforcer = CountingEnforcer()
    writer = KnobWriter(enforcer, dry_run=False)
    first = writer.apply(0, DESIRED, resync_s=30)
    assert first.terms["state"] == "applied" and first.terms["applied_by_knob"] == {"cpu.idle": 1}
    assert writer.apply(10, dict(DESIRED), resync_s=30).terms == {"state": "unchanged"}
    assert writer.apply(30, DESIRED, resync_s=30).terms["state"] == "applied"
    changed = {"kubepods/pod1": {Knob.CPU_IDLE: 0}}
    assert writer.apply(31, changed, resync_s=30).terms["state"] == "applied"
    assert len(enforcer.calls) == 3


def test_a_dry_run_plans_the_same_writes_every_tick() -> None:
    enforcer = CountingEnforcer()
    writer = KnobWriter(enforcer, dry_run=True)
    for t in (0, 1, 2):
        out = writer.apply(t, DESIRED, resync_s=300)
        assert out.terms["would_write"] == ["kubepods/pod1: cpu.idle = 1"]
    assert enforcer.calls == [True, True, True]


def test_vanished_cgroups_are_said_and_without_an_enforcer_nothing_happens() -> None:
    out = KnobWriter(CountingEnforcer(vanish=("kubepods/pod1",)), False).apply(0, DESIRED, 5)
    assert out.vanished and out.terms["vanished"] == ["kubepods/pod1"]
    assert KnobWriter(None, False).apply(0, DESIRED, 5).terms == {"state": "no enforcer"}
