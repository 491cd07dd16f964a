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


def split_limits(limits: Sequence[IoLimit], n: int) -> tuple[IoLimit, ...]:
    """Each of `n` cgroups' part of `limits` when they must not exceed them together: every
    figure divided by n, rounded down, at least 1 (the kernel's smallest limit)."""
    if n < 1:
        raise ValueError(f"n: {n!r}; accepted: an int >= 1")

    def part(v: int | None) -> int | None:
        return None if v is None else max(1, v // n)

    return tuple(
        IoLimit(lim.device, part(lim.rbps), part(lim.wbps), part(lim.riops), part(lim.wiops))
        for lim in limits
    )


def tighter(a: Sequence[IoLimit], b: Sequence[IoLimit]) -> IoLimits:
    """Both sets of limits at once: per device and figure, the smaller (None: unlimited)."""

    def low(x: int | None, y: int | None) -> int | None:
        return y if x is None else x if y is None else min(x, y)

    by_dev: dict[str, IoLimit] = {}
    for lim in (*a, *b):
        was = by_dev.get(lim.device)
        if was is None:
            by_dev[lim.device] = lim
            continue
        by_dev[lim.device] = IoLimit(
            lim.device,
            low(was.rbps, lim.rbps),
            low(was.wbps, lim.wbps),
            low(was.riops, lim.riops),
            low(was.wiops, lim.wiops),
        )
    return IoLimits.of(list(by_dev.values()))


def _below(cgroup: str, root: str | None) -> bool:
    return root is not None and cgroup.startswith(root.rstrip("/") + "/")


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
    cgroup it is on), so there the limits go on each container, and the root's limits,
    which no file on the root would enforce, are split evenly over the containers of the
    pods below it: each gets at most 1/n of each figure (and no more than its level's own
    limit), so that together they never exceed the root's."""
    desired: dict[str, dict[Knob, KnobValue]] = {}
    terms: dict[str, Any] = {}
    root_limits = root_io.limits if root_io is not None and version == 1 else ()
    below = [p for p in pods if _below(p[2], root)] if root_limits else []
    n_below = sum(len(p[3]) for p in below)
    share = split_limits(root_limits, n_below) if n_below else ()
    for key, level, cgroup, containers in pods:
        knobs = pod_io_knobs(level, levels, version)
        extra = share if _below(cgroup, root) else ()
        if not knobs and not extra:
            continue
        terms[key] = {"level": level, **_knob_terms(knobs)}
        if version == 1:
            own = knobs.pop(Knob.IO_MAX, None)
            limits = tighter(own.devices if isinstance(own, IoLimits) else (), extra)
            if limits.devices:
                for cg in containers:
                    desired[cg] = {Knob.IO_MAX: limits}
                terms[key]["io.max_on"] = (
                    "each container (cgroup v1 throttling binds only the leaf)"
                )
            if extra:
                terms[key]["io.max_per_container"] = _knob_terms({Knob.IO_MAX: limits})[
                    Knob.IO_MAX.value
                ]
                terms[key]["root_share"] = f"1/{n_below} of the reclaimed root's limits"
        if knobs:
            desired[cgroup] = knobs
    if root is not None:
        knobs = io_knobs(root_io, version)
        if version == 1 and knobs.pop(Knob.IO_MAX, None) is not None:
            terms[root] = {
                "io.max": (
                    f"not written on the root (cgroup v1 throttling is not hierarchical): "
                    f"split evenly over the {n_below} containers below it"
                    if n_below
                    else "not written: cgroup v1 throttling is not hierarchical, and no "
                    "container is below the root to split it over"
                )
            }
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
