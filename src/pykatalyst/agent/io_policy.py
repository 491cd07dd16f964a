"""Disk I/O isolation per QoS level: weights, limits and latency targets.

The kernel shares a disk between sibling cgroups by their weights (v2 ``io.weight``, v1
``blkio.bfq.weight`` with the BFQ scheduler), caps a cgroup's bytes and operations per
second (v2 ``io.max``, v1 ``blkio.throttle.*``), and on v2 throttles the siblings of a
cgroup that misses its latency target (``io.latency``: peers with looser or no targets
yield first). The agent writes what the `io` section of its configuration gives each QoS
level on every pod of that level, and the reclaimed tier's own settings on the reclaimed
root, so that reclaimed pods are the first to be throttled and, all together, never get
more than the root allows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pykatalyst.agent.host.base import IoLatency, IoLimit, IoLimits, Knob, KnobValue


@dataclass(frozen=True, slots=True)
class LevelIo:
    """What one QoS level (or the reclaimed root) gets; None / empty: not written."""

    weight: int | None = None  # io.weight units, 1..10000 (100 is the kernel's default)
    limits: tuple[IoLimit, ...] = ()
    latency_us: Mapping[str, int] | None = None  # device -> target µs (cgroup v2)


def io_knobs(io: LevelIo | None, version: int) -> dict[Knob, KnobValue]:
    """The io knobs of a cgroup given what its level gets. Latency targets exist on cgroup
    v2 only and are left out on v1."""
    if io is None:
        return {}
    out: dict[Knob, KnobValue] = {}
    if io.weight is not None:
        out[Knob.IO_WEIGHT] = io.weight
    if io.limits:
        out[Knob.IO_MAX] = IoLimits.of(io.limits)
    if io.latency_us and version == 2:
        out[Knob.IO_LATENCY] = IoLatency.of(io.latency_us)
    return out


def pod_io_knobs(level: str, levels: Mapping[str, LevelIo], version: int) -> dict[Knob, KnobValue]:
    """The io knobs of a pod's cgroup from its QoS level's settings."""
    return io_knobs(levels.get(level), version)


def misordered(levels: Mapping[str, LevelIo], order: Sequence[str]) -> list[str]:
    """Levels whose weight is above that of a level after them in `order` (lowest QoS
    first): they would take a larger share of the disk than a higher level, the opposite of
    the ladder. Levels without a weight are skipped."""
    weights = [(lv, levels[lv].weight) for lv in order if lv in levels]
    known = [(lv, w) for lv, w in weights if w is not None]
    return [lv for i, (lv, w) in enumerate(known) if any(w > w2 for _, w2 in known[i + 1 :])]


def decide_io(
    pods: Sequence[tuple[str, str, str, tuple[str, ...]]],
    root: str | None,
    levels: Mapping[str, LevelIo],
    root_io: LevelIo | None,
    version: int,
) -> tuple[dict[str, dict[Knob, KnobValue]], dict[str, Any]]:
    """The io knobs of this pass: each pod (key, QoS level, pod cgroup, container cgroups)
    gets its level's, the reclaimed root the root's; the terms say which cgroup got what.

    cgroup v1's throttling is not hierarchical (a limit binds only the processes of the
    cgroup it is on), so there the limits go on each container and the root gets none."""
    desired: dict[str, dict[Knob, KnobValue]] = {}
    terms: dict[str, Any] = {}
    for key, level, cgroup, containers in pods:
        knobs = pod_io_knobs(level, levels, version)
        if not knobs:
            continue
        terms[key] = {"level": level, **_knob_terms(knobs)}
        limits = knobs.pop(Knob.IO_MAX, None) if version == 1 else None
        if knobs:
            desired[cgroup] = knobs
        if limits is not None:
            for cg in containers:
                desired[cg] = {Knob.IO_MAX: limits}
            terms[key]["io.max_on"] = "each container (cgroup v1 throttling binds only the leaf)"
    if root is not None:
        knobs = io_knobs(root_io, version)
        if version == 1 and knobs.pop(Knob.IO_MAX, None) is not None:
            terms[root] = {"io.max": "not written: cgroup v1 throttling is not hierarchical"}
        if knobs:
            desired[root] = knobs
            terms[root] = {"level": "reclaimed root", **terms.get(root, {}), **_knob_terms(knobs)}
    return desired, terms


def _knob_terms(knobs: Mapping[Knob, KnobValue]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for knob, v in knobs.items():
        if isinstance(v, IoLimits):
            out[knob.value] = [
                {k: getattr(lim, k) for k in ("device", "rbps", "wbps", "riops", "wiops")}
                for lim in v.devices
            ]
        elif isinstance(v, IoLatency):
            out[knob.value] = {d: f"{t}us" for d, t in v.targets}
        else:
            out[knob.value] = v
    return out
