"""Egress QoS by level: which class each pod's traffic goes to, and each class's rates.

Katalyst's network plugin gives each QoS level a net class id
(``--network-resource-plugin-class-id-<level>``) and counts the egress capacity as the
line rate x 0.94. pykatalyst does the same and also shapes the device itself: one HTB
class per level, id = the level's class id, guaranteed ``rate_ratio`` of the capacity and
borrowing up to ``ceil_ratio`` of it, levels with a lower ``prio`` borrowing first. With
the defaults shared and dedicated traffic keeps its guaranteed rate and takes what it
needs of the rest before reclaimed traffic, which still gets 5 % when the link is full.

Pods on the host's network are classified by their sockets' cgroup:
- cgroup v1: ``net_cls.classid`` = the level's class id on the pod's cgroup and each of
  its containers' (a knob, written by the enforcer), and one rule per level matching it;
- cgroup v2 (no net_cls): one rule per pod matching its cgroup subtree.
A pod in a network namespace of its own reaches the device forwarded, its socket left
behind in its namespace: its packets are classified by their source, one rule per
address of the pod (and its cgroups get the class id as well, for what it sends on the
host's network).

Bandwidth pods (a ``net_bandwidth`` request, Mbps, and a ``nic_selection_result`` naming
the shaped device) get a class of their own under the root, next to the level classes:
guaranteed their request (HTB ``rate``) and borrowing up to the line rate (``ceil``; the
root class still caps everything at the capacity). What they are guaranteed comes out of
the capacity first; the level classes share what is left by their ``rate_ratio``, and the
reclaimed class may borrow only up to what is left (capacity - the guarantees), never less
than ``reclaimed_floor_ratio`` of the capacity. Where the requests add up to more than the
device can guarantee (a NIC that lost bandwidth, a config that counts less than the
scheduler did) each pod's guarantee is scaled down in proportion and the plan says so.
Pods whose selected NIC is not the shaped device stay in their level's class (the reason
says which NIC they hold).

`decide` is pure; the host applies the shape (`Host.apply_net`).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from pykatalyst.agent.config import NetworkConfig
from pykatalyst.agent.host.base import Knob, KnobValue, NetClass, NetMatch, NetShape
from pykatalyst.api import names

__all__ = [
    "MIN_RATE_BPS",
    "Bandwidth",
    "BandwidthClass",
    "NetPlan",
    "NetPod",
    "bandwidth",
    "capacity_bps",
    "classes",
    "decide",
]

# HTB refuses a zero rate; a level given no guarantee gets this token rate.
MIN_RATE_BPS: Final = 8_000
MBIT: Final = 1_000_000
# Minors of bandwidth pods' classes: above any level's default minor, below 0xffff.
POD_MINORS: Final = range(0x100, 0xFFFF)


@dataclass(frozen=True, slots=True)
class NetPod:
    """A pod as the network policy sees it: its level and its cgroups (pod first, then
    its containers'), relative to the hierarchy root."""

    key: str
    level: str
    cgroups: tuple[str, ...]
    addresses: tuple[str, ...] = ()  # its own network namespace's (none: host network)
    bandwidth_mbps: int = 0  # its net_bandwidth request
    nic: str = ""  # its nic_selection_result (the NIC's resource identifier)


@dataclass(frozen=True, slots=True)
class BandwidthClass:
    """The class of one bandwidth pod: guaranteed `rate_bps` (its request, or its share of
    what the device can guarantee), borrowing up to `ceil_bps`."""

    key: str
    classid: int
    request_bps: int
    rate_bps: int
    ceil_bps: int
    prio: int
    reason: str


@dataclass(frozen=True, slots=True)
class Bandwidth:
    """What the device guarantees bandwidth pods, and what is left for the levels."""

    pods: tuple[BandwidthClass, ...]
    left_bps: int  # capacity - the guarantees: what the level classes share
    reclaimed_ceil_bps: int  # what reclaimed traffic may borrow up to
    elsewhere: Mapping[str, str]  # bandwidth pods on another NIC: key -> reason
    terms: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class NetPlan:
    shape: NetShape | None  # None: the agent shapes nothing (network QoS off)
    knobs: Mapping[str, Mapping[Knob, KnobValue]] = field(default_factory=dict)
    terms: Mapping[str, Any] = field(default_factory=dict)


def capacity_bps(cfg: NetworkConfig) -> int:
    """What the device gives out: line rate x egress_ratio (Katalyst: x 0.94)."""
    return int(cfg.link_mbit * 1_000_000 * cfg.egress_ratio)


def classes(
    cfg: NetworkConfig, left_bps: int | None = None, reclaimed_ceil_bps: int | None = None
) -> tuple[NetClass, ...]:
    """One class per level: guaranteed its `rate_ratio` of what bandwidth pods leave
    (`left_bps`, the whole capacity without them), borrowing up to its `ceil_ratio` of the
    capacity; the reclaimed level no further than `reclaimed_ceil_bps`."""
    cap = capacity_bps(cfg)
    left = cap if left_bps is None else left_bps
    out = []
    for level, lv in cfg.levels.items():
        ceil = max(MIN_RATE_BPS, int(cap * lv.ceil_ratio))
        if level == names.QOS_RECLAIMED_CORES and reclaimed_ceil_bps is not None:
            ceil = max(MIN_RATE_BPS, min(ceil, reclaimed_ceil_bps))
        rate = min(max(MIN_RATE_BPS, int(left * lv.rate_ratio)), ceil)
        out.append(NetClass(level, lv.class_id, rate, ceil, lv.prio))
    return tuple(sorted(out, key=lambda c: (c.prio, c.classid)))


def _pod_classids(cfg: NetworkConfig, keys: Sequence[str]) -> dict[str, int]:
    """A class id per bandwidth pod, from its key (so the same pod keeps its class while
    others come and go), under the levels' tc major, clear of the levels' minors."""
    major = next(iter(cfg.levels.values())).class_id >> 16
    taken = {lv.class_id & 0xFFFF for lv in cfg.levels.values()}
    n = len(POD_MINORS)
    out: dict[str, int] = {}
    for key in sorted(keys)[: n - len(taken)]:
        i = zlib.crc32(key.encode()) % n
        while POD_MINORS[i] in taken:
            i = (i + 1) % n
        taken.add(POD_MINORS[i])
        out[key] = (major << 16) | POD_MINORS[i]
    return out


def _where(cfg: NetworkConfig, pod: NetPod) -> str:
    """Why a bandwidth pod gets no class of its own ("" when it gets one)."""
    if not cfg.bandwidth_classes:
        return "network.bandwidth_classes is off: it stays in its level's class"
    if pod.nic != cfg.device:
        held = f"NIC {pod.nic}" if pod.nic else "no NIC (no nic_selection_result)"
        return f"holds {held}; this agent shapes {cfg.device}: it stays in its level's class"
    if not (pod.cgroups or pod.addresses):
        return "neither its cgroup nor its address is known yet"
    return ""


def bandwidth(cfg: NetworkConfig, pods: Sequence[NetPod]) -> Bandwidth:
    """Each bandwidth pod's class on the shaped device and what is left for the levels."""
    cap = capacity_bps(cfg)
    line = int(cfg.link_mbit * MBIT)
    floor = max(MIN_RATE_BPS, int(cap * cfg.reclaimed_floor_ratio))
    here: list[NetPod] = []
    elsewhere: dict[str, str] = {}
    for pod in sorted(pods, key=lambda p: p.key):
        if pod.bandwidth_mbps > 0:
            why = _where(cfg, pod)
            if why:
                elsewhere[pod.key] = why
            else:
                here.append(pod)
    ids = _pod_classids(cfg, [p.key for p in here])
    requested = sum(p.bandwidth_mbps for p in here) * MBIT
    # every level class keeps HTB's token rate; the rest can be promised to bandwidth pods
    budget = max(cap - len(cfg.levels) * MIN_RATE_BPS, 0)
    scale = 1.0 if requested <= budget else budget / requested
    rates = {p.key: max(MIN_RATE_BPS, int(p.bandwidth_mbps * MBIT * scale)) for p in here}
    left = max(cap - sum(rates.values()), 0)
    reclaimed_ceil = max(floor, left)
    out = []
    for pod in here:
        if pod.key not in ids:
            elsewhere[pod.key] = "no class id left under the device's tc major"
            continue
        rate = rates[pod.key]
        ceil = reclaimed_ceil if pod.level == names.QOS_RECLAIMED_CORES else line
        out.append(
            BandwidthClass(
                pod.key,
                ids[pod.key],
                pod.bandwidth_mbps * MBIT,
                rate,
                max(rate, ceil),
                cfg.levels[pod.level].prio if pod.level in cfg.levels else 0,
                _reason(cfg, pod, rate, requested, budget),
            )
        )
    terms = {
        "requested_mbps": requested / MBIT,
        "guaranteed_mbps": round(sum(c.rate_bps for c in out) / MBIT, 3),
        "can_guarantee_mbps": round(budget / MBIT, 3),
        "left_for_levels_bps": left,
        "reclaimed_ceil_bps": reclaimed_ceil,
        "reclaimed_floor_bps": floor,
        "reclaimed_ceil_formula": "max(capacity - guarantees, capacity x reclaimed_floor_ratio "
        f"{cfg.reclaimed_floor_ratio})",
    }
    return Bandwidth(tuple(out), left, reclaimed_ceil, elsewhere, terms)


def _reason(cfg: NetworkConfig, pod: NetPod, rate: int, requested: int, budget: int) -> str:
    mbps = pod.bandwidth_mbps
    if requested <= budget:
        return f"guaranteed its request, {mbps} Mbps, on {cfg.device}"
    return (
        f"guaranteed {rate / MBIT:.1f} of its {mbps} Mbps on {cfg.device}: the requests there "
        f"add up to {requested / MBIT:g} Mbps, more than the {budget / MBIT:g} Mbps it can "
        "guarantee (each scaled down in proportion)"
    )


def decide(cfg: NetworkConfig, pods: Sequence[NetPod], cgroup_version: int) -> NetPlan:
    """The shape of the device and the per-pod classification for `pods`."""
    if not cfg.enabled:
        return NetPlan(None, terms={"enabled": False})
    if cgroup_version not in (1, 2):
        raise ValueError(f"cgroup_version: {cgroup_version!r}; accepted: 1 or 2")
    bw = bandwidth(cfg, pods)
    own = {c.key: c for c in bw.pods}
    ids = {level: lv.class_id for level, lv in cfg.levels.items()}
    knobs: dict[str, dict[Knob, KnobValue]] = {}
    matches: list[NetMatch] = []
    counts: dict[str, int] = {}
    # address -> (prio, classid): an address two pods claim (one going, one coming) goes
    # to the more protected class
    sources: dict[str, tuple[int, int]] = {}
    for pod in pods:
        classid = ids.get(pod.level)
        if classid is None or not (pod.cgroups or pod.addresses):
            continue
        counts[pod.level] = counts.get(pod.level, 0) + 1
        mine = own.get(pod.key)
        if mine is not None:
            classid = mine.classid
        here = (cfg.levels[pod.level].prio, classid)
        for addr in pod.addresses:
            sources[addr] = min(sources.get(addr, here), here)
        if cgroup_version == 1:
            for cg in pod.cgroups:
                knobs[cg] = {Knob.NET_CLS_CLASSID: classid}
        elif pod.cgroups:
            matches.append(NetMatch(classid, pod.cgroups[0]))
    if cgroup_version == 1:
        used = set(ids.values()) | {c.classid for c in bw.pods}
        matches = [NetMatch(c) for c in sorted(used)]
    matches += [NetMatch(cid, source=addr) for addr, (_, cid) in sorted(sources.items())]
    cls = classes(cfg, bw.left_bps, bw.reclaimed_ceil_bps) + tuple(
        NetClass(c.key, c.classid, c.rate_bps, c.ceil_bps, c.prio) for c in bw.pods
    )
    shape = NetShape(cfg.device, capacity_bps(cfg), ids[cfg.default_level], cls, tuple(matches))
    return NetPlan(shape, knobs, _terms(cfg, shape, bw, counts, sources, cgroup_version))


def _terms(
    cfg: NetworkConfig,
    shape: NetShape,
    bw: Bandwidth,
    counts: Mapping[str, int],
    sources: Mapping[str, tuple[int, int]],
    cgroup_version: int,
) -> dict[str, Any]:
    ids = {level: lv.class_id for level, lv in cfg.levels.items()}
    return {
        "enabled": True,
        "device": cfg.device,
        "capacity_bps": shape.capacity_bps,
        "formula": f"link {cfg.link_mbit} Mbit/s x egress_ratio {cfg.egress_ratio}",
        "classes": {
            c.level: {"classid": hex(c.classid), "rate_bps": c.rate_bps, "ceil_bps": c.ceil_bps}
            | {"prio": c.prio}
            for c in shape.classes
            if c.level in ids
        },
        "pods_by_level": dict(counts),
        "match": "net_cls.classid" if cgroup_version == 1 else "socket cgroup (v2)",
        "forwarded_match": "source address (pods in their own network namespace)",
        "addresses_by_level": {
            lv: sum(1 for _, c in sources.values() if c == cid) for lv, cid in ids.items()
        },
        "bandwidth": dict(bw.terms)
        | {
            "pods": {
                c.key: {
                    "classid": hex(c.classid),
                    "request_bps": c.request_bps,
                    "rate_bps": c.rate_bps,
                    "ceil_bps": c.ceil_bps,
                    "reason": c.reason,
                }
                for c in bw.pods
            },
            "not_shaped": dict(bw.elsewhere),
        },
    }
