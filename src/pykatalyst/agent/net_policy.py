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

`decide` is pure; the host applies the shape (`Host.apply_net`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from pykatalyst.agent.config import NetworkConfig
from pykatalyst.agent.host.base import Knob, KnobValue, NetClass, NetMatch, NetShape

__all__ = ["MIN_RATE_BPS", "NetPlan", "NetPod", "capacity_bps", "classes", "decide"]

# HTB refuses a zero rate; a level given no guarantee gets this token rate.
MIN_RATE_BPS: Final = 8_000


@dataclass(frozen=True, slots=True)
class NetPod:
    """A pod as the network policy sees it: its level and its cgroups (pod first, then
    its containers'), relative to the hierarchy root."""

    key: str
    level: str
    cgroups: tuple[str, ...]
    addresses: tuple[str, ...] = ()  # its own network namespace's (none: host network)


@dataclass(frozen=True, slots=True)
class NetPlan:
    shape: NetShape | None  # None: the agent shapes nothing (network QoS off)
    knobs: Mapping[str, Mapping[Knob, KnobValue]] = field(default_factory=dict)
    terms: Mapping[str, Any] = field(default_factory=dict)


def capacity_bps(cfg: NetworkConfig) -> int:
    """What the device gives out: line rate x egress_ratio (Katalyst: x 0.94)."""
    return int(cfg.link_mbit * 1_000_000 * cfg.egress_ratio)


def classes(cfg: NetworkConfig) -> tuple[NetClass, ...]:
    cap = capacity_bps(cfg)
    out = [
        NetClass(
            level,
            lv.class_id,
            max(MIN_RATE_BPS, int(cap * lv.rate_ratio)),
            max(MIN_RATE_BPS, int(cap * lv.ceil_ratio)),
            lv.prio,
        )
        for level, lv in cfg.levels.items()
    ]
    return tuple(sorted(out, key=lambda c: (c.prio, c.classid)))


def decide(cfg: NetworkConfig, pods: Sequence[NetPod], cgroup_version: int) -> NetPlan:
    """The shape of the device and the per-pod classification for `pods`."""
    if not cfg.enabled:
        return NetPlan(None, terms={"enabled": False})
    if cgroup_version not in (1, 2):
        raise ValueError(f"cgroup_version: {cgroup_version!r}; accepted: 1 or 2")
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
        here = (cfg.levels[pod.level].prio, classid)
        for addr in pod.addresses:
            sources[addr] = min(sources.get(addr, here), here)
        if cgroup_version == 1:
            for cg in pod.cgroups:
                knobs[cg] = {Knob.NET_CLS_CLASSID: classid}
        elif pod.cgroups:
            matches.append(NetMatch(classid, pod.cgroups[0]))
    if cgroup_version == 1:
        matches = [NetMatch(c) for c in sorted(set(ids.values()))]
    matches += [NetMatch(cid, source=addr) for addr, (_, cid) in sorted(sources.items())]
    cls = classes(cfg)
    shape = NetShape(cfg.device, capacity_bps(cfg), ids[cfg.default_level], cls, tuple(matches))
    terms = {
        "enabled": True,
        "device": cfg.device,
        "capacity_bps": shape.capacity_bps,
        "formula": f"link {cfg.link_mbit} Mbit/s x egress_ratio {cfg.egress_ratio}",
        "classes": {
            c.level: {"classid": hex(c.classid), "rate_bps": c.rate_bps, "ceil_bps": c.ceil_bps}
            | {"prio": c.prio}
            for c in cls
        },
        "pods_by_level": counts,
        "match": "net_cls.classid" if cgroup_version == 1 else "socket cgroup (v2)",
        "forwarded_match": "source address (pods in their own network namespace)",
        "addresses_by_level": {
            lv: sum(1 for _, c in sources.values() if c == cid) for lv, cid in ids.items()
        },
    }
    return NetPlan(shape, knobs, terms)
