"""The eviction manager: thresholds held for their grace period become conditions (taints)
and, for hard thresholds, victims — chosen by one ranking, limited per round, never twice
for the same pressure while a victim is still terminating.

`decide_round(node, config, snapshot, memory) -> (EvictionPlan, EvictionMemory)` is the
whole decision, pure: from what the last rounds left (`EvictionMemory`: when each threshold
was first seen, which conditions are active, which victims are in flight, the plugins'
own history) it returns the round's plan and the memory for the next. It performs no I/O;
`EvictionExecutor` applies the plan to the cluster. `EvictionManager` holds the memory
for callers that keep one manager (`EvictionManager.decide(snapshot)`).

The response ladder is explicit and ordered:
1. throttle — the agent's advisor shrinks the reclaim pool (and with it reclaimed pods'
   cpus and the published reclaimed capacity) as shared pods need more; cpu hard
   thresholds wait until that shrink has held still for `throttle_settle_s` (or the pool
   is at its floor), so eviction only answers pressure that throttling did not absorb;
2. condition — a soft (or hard) threshold held for its grace period sets a condition
   whose taints keep new pods away; it stays for the transition period after it clears;
3. evict — a hard threshold held for its grace period picks the fewest ranked victims
   that cover the measured overage (one per round when the overage cannot be measured),
   at most `eviction_burst` per round.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from pykatalyst.agent.eviction.config import EvictionConfig
from pykatalyst.agent.eviction.plugins import (
    EvictionPlugin,
    LoadPressurePlugin,
    NicHealthPlugin,
    NumaMemoryPressurePlugin,
    PluginMemory,
    ReclaimedNumaResourcePressurePlugin,
    ReclaimedResourcePressurePlugin,
    SystemMemoryPressurePlugin,
)
from pykatalyst.agent.eviction.ranking import (
    minimal_prefix,
    protection,
    rank,
    skipped,
    usage_fn,
)
from pykatalyst.agent.eviction.types import (
    ActiveCondition,
    EvictionPlan,
    EvictionRecord,
    EvictionSnapshot,
    LadderState,
    Met,
    PodInfo,
    RankEntry,
    Threshold,
    Victim,
)
from pykatalyst.api import names
from pykatalyst.api.objects import Taint
from pykatalyst.cluster.clock import is_due

CPU_RESOURCES = (names.RESOURCE_CPU, names.RECLAIMED_MILLICPU)
RANKING_SHOWN = 5
USAGE_UNITS = {
    names.RESOURCE_MEMORY: "bytes",
    names.RECLAIMED_MEMORY: "bytes",
    names.RECLAIMED_MILLICPU: "millicpu",
    names.RESOURCE_CPU: "cores",
    names.RESOURCE_NET_BANDWIDTH: "Mbps",
}


@dataclass(frozen=True, slots=True)
class _InFlight:
    plugin: str
    pod: str
    since: float
    scope: str = ""  # the plugin and, for a per-NUMA threshold, its NUMA node


def _scope(t: Threshold) -> str:
    """What one victim relieves: a per-NUMA threshold its own node, others the plugin's.

    Waiting for a victim to go and the cool-down apply per scope, so that two NUMA nodes
    under pressure each get a victim in the same round, as in Katalyst (and two NICs
    down each their holders: a threshold may name its own scope).
    """
    if t.scope:
        return f"{t.plugin}/{t.scope}"
    return t.plugin if t.numa is None else f"{t.plugin}/numa{t.numa}"


@dataclass(frozen=True, slots=True)
class EvictionMemory:
    """What one eviction round leaves the next, as a value: when each threshold began to
    be met (soft, hard), the active conditions, the victims still terminating, the last
    victim per scope, the last round, the reclaim pool's last size and shrink, the ladder,
    and each plugin's history under the configuration it was built for."""

    soft_since: Mapping[str, float] = field(default_factory=dict)
    hard_since: Mapping[str, float] = field(default_factory=dict)
    conditions: Mapping[str, ActiveCondition] = field(default_factory=dict)
    inflight: Mapping[str, _InFlight] = field(default_factory=dict)
    last_victim: Mapping[str, float] = field(default_factory=dict)
    last_round: float | None = None
    reclaim_prev: int | None = None
    last_shrink: float | None = None
    ladder: LadderState | None = None
    config: EvictionConfig | None = None
    plugins: tuple[PluginMemory, ...] = ()

    @property
    def in_flight(self) -> dict[str, str]:
        """Victims still terminating: uid -> pod key."""
        return {uid: f.pod for uid, f in self.inflight.items()}


def decide_round(
    node: str, config: EvictionConfig, snap: EvictionSnapshot, memory: EvictionMemory
) -> tuple[EvictionPlan, EvictionMemory]:
    """One round's plan and the memory it leaves, from the snapshot and the memory the
    last round left (`memory` is untouched). The plugins' history restarts when the
    configuration differs from the one they were built for."""
    mgr = EvictionManager(node, config)
    mgr.restore(memory)
    plan = mgr.decide(snap)
    return plan, mgr.memory()


def default_plugins(cfg: EvictionConfig) -> list[EvictionPlugin]:
    """The enabled inner plugins, in the order their thresholds are served."""
    out: list[EvictionPlugin] = []
    if cfg.reclaimed_resource.enabled:
        out.append(ReclaimedResourcePressurePlugin(cfg.reclaimed_resource))
        if cfg.reclaimed_resource.numa_enabled:
            out.append(ReclaimedNumaResourcePressurePlugin(cfg.reclaimed_resource))
    if cfg.system_memory.enabled:
        out.append(SystemMemoryPressurePlugin(cfg.system_memory))
    if cfg.numa_memory.enabled:
        out.append(NumaMemoryPressurePlugin(cfg.numa_memory))
    if cfg.load.enabled:
        out.append(LoadPressurePlugin(cfg.load))
    if cfg.network.enabled:
        out.append(NicHealthPlugin(cfg.network))
    return out


def _fmt(value: float, unit: str) -> str:
    if unit == "bytes":
        return f"{value / 2**30:.2f}Gi"
    if unit == "millicpu":
        return f"{value:.0f}m"
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return f"{text} {unit}".rstrip()


class EvictionManager:
    def __init__(
        self,
        node: str,
        config: EvictionConfig | None = None,
        plugins: Sequence[EvictionPlugin] | None = None,
    ) -> None:
        self.node = node
        self.config = config if config is not None else EvictionConfig()
        self.plugins: list[EvictionPlugin] = (
            list(plugins) if plugins is not None else default_plugins(self.config)
        )
        self._soft_since: dict[str, float] = {}
        self._hard_since: dict[str, float] = {}
        self._conditions: dict[str, ActiveCondition] = {}
        self._inflight: dict[str, _InFlight] = {}
        self._last_victim: dict[str, float] = {}
        self._last_round: float | None = None
        self._reclaim_prev: int | None = None
        self._last_shrink: float | None = None
        self._ladder: LadderState | None = None

    def set_config(self, config: EvictionConfig) -> None:
        """Take a new configuration; plugins are rebuilt (their history restarts)."""
        if config == self.config:
            return
        self.config = config
        self.plugins = default_plugins(config)

    @property
    def in_flight(self) -> dict[str, str]:
        """Victims still terminating: uid -> pod key."""
        return {uid: f.pod for uid, f in self._inflight.items()}

    def memory(self) -> EvictionMemory:
        """What the manager remembers, as a value (later rounds do not change it)."""
        return EvictionMemory(
            dict(self._soft_since),
            dict(self._hard_since),
            dict(self._conditions),
            dict(self._inflight),
            dict(self._last_victim),
            self._last_round,
            self._reclaim_prev,
            self._last_shrink,
            self._ladder,
            self.config,
            tuple(p.memory() for p in self.plugins),
        )

    def restore(self, memory: EvictionMemory) -> None:
        """Take up where `memory` left off (copied: it stays as it is); the plugins keep
        their history only under the configuration it was made with."""
        self._soft_since = dict(memory.soft_since)
        self._hard_since = dict(memory.hard_since)
        self._conditions = dict(memory.conditions)
        self._inflight = dict(memory.inflight)
        self._last_victim = dict(memory.last_victim)
        self._last_round = memory.last_round
        self._reclaim_prev = memory.reclaim_prev
        self._last_shrink = memory.last_shrink
        self._ladder = memory.ladder
        if memory.config == self.config and len(memory.plugins) == len(self.plugins):
            for plugin, held in zip(self.plugins, memory.plugins, strict=True):
                plugin.restore(held)

    # --- the round ------------------------------------------------------------------------

    def decide(self, snap: EvictionSnapshot) -> EvictionPlan:
        cfg = self.config
        now = snap.now
        if not cfg.enabled:
            return EvictionPlan(now, self.node, ran=False, notes=("eviction disabled",))
        if not is_due(self._last_round, now, cfg.sync_period_s, slack_s=1e-6):
            node_taints, cnr_taints = self._taints()
            return EvictionPlan(
                now,
                self.node,
                ran=False,
                conditions=tuple(self._conditions.values()),
                node_taints=node_taints,
                cnr_taints=cnr_taints,
                ladder=self._ladder,
            )
        self._last_round = now
        notes: list[str] = []
        records: list[EvictionRecord] = []
        pods = {p.uid: p for p in snap.pods}
        records.extend(self._forget_released(pods, now))
        ladder = self._advance_ladder(snap)

        thresholds, order = self._observe(snap, notes)
        effective = self._effective(thresholds, now, notes)
        records.extend(self._update_conditions(thresholds, effective, now))
        hard = [t for t in thresholds if effective.get(t.id) == Met.HARD]
        hard.sort(key=lambda t: (order.get(t.plugin, 0), t.key))
        victims = self._choose(snap, hard, ladder, pods, records, notes)
        node_taints, cnr_taints = self._taints()
        return EvictionPlan(
            time=now,
            node=self.node,
            ran=True,
            thresholds=tuple(thresholds),
            conditions=tuple(self._conditions.values()),
            node_taints=node_taints,
            cnr_taints=cnr_taints,
            victims=tuple(victims),
            records=tuple(records),
            ladder=ladder,
            notes=tuple(notes),
        )

    # --- steps ----------------------------------------------------------------------------

    def _observe(
        self, snap: EvictionSnapshot, notes: list[str]
    ) -> tuple[list[Threshold], dict[str, int]]:
        """Every plugin's thresholds, and each plugin's place in the order."""
        thresholds: list[Threshold] = []
        order: dict[str, int] = {}
        for i, plugin in enumerate(self.plugins):
            order[plugin.name] = i
            try:
                thresholds.extend(plugin.observe(snap))
            except Exception as exc:  # one broken plugin must not silence the others
                notes.append(f"plugin {plugin.name} failed: {exc}")
        return thresholds, order

    def _choose(
        self,
        snap: EvictionSnapshot,
        hard: Sequence[Threshold],
        ladder: LadderState,
        pods: dict[str, PodInfo],
        records: list[EvictionRecord],
        notes: list[str],
    ) -> list[Victim]:
        """The victims of the hard thresholds met, in order, within the round's burst."""
        cfg, now = self.config, snap.now
        victims: list[Victim] = []
        budget = cfg.eviction_burst
        chosen: set[str] = set()
        chosen_pods: list[PodInfo] = []
        for t in hard:
            dry = cfg.is_dry_run(t.plugin)
            why_not = self._blocked(t, dry, budget, ladder, pods, now)
            if why_not:
                notes.append(f"{t.id}: hard threshold met, no victim: {why_not}")
                continue
            usage = usage_fn(t.resource, t.numa)
            overage = t.overage
            if overage is not None:
                # Victims another threshold chose this round release their share here too.
                covered = sum(
                    usage(p) for p in chosen_pods if t.candidates is None or p.uid in t.candidates
                )
                if covered >= overage:
                    notes.append(f"{t.id}: hard threshold met, covered by this round's victims")
                    continue
                overage -= covered
            eligible = [p for p in snap.pods if self._eligible(p, t, chosen)]
            ranked = rank(eligible, usage)
            picks = minimal_prefix(ranked, overage, cfg.eviction_burst if dry else budget)
            if not picks:
                notes.append(f"{t.id}: hard threshold met, no victim: no eligible candidate")
                continue
            for place, (pod, _entry) in enumerate(picks):
                record = self._victim_record(t, pod, place, ranked, dry, now)
                victims.append(Victim(pod, t.plugin, t.id, t.deletion_grace_s, record, dry))
                records.append(record)
                chosen.add(pod.uid)
                if not dry:
                    chosen_pods.append(pod)
                    budget -= 1
                    self._inflight[pod.uid] = _InFlight(t.plugin, pod.key, now, _scope(t))
                    self._last_victim[_scope(t)] = now
        return victims

    def _forget_released(self, pods: dict[str, PodInfo], now: float) -> list[EvictionRecord]:
        released = []
        for uid, f in list(self._inflight.items()):
            pod = pods.get(uid)
            if pod is None:
                del self._inflight[uid]  # gone: its resources are back
                released.append(
                    EvictionRecord(
                        time=now,
                        node=self.node,
                        kind="eviction-succeeded",
                        plugin=f.plugin,
                        reason=names.EVENT_REASON_EVICT_SUCCEEDED,
                        message=f"{f.pod} evicted by {f.plugin} has left the node "
                        f"({now - f.since:g}s after its eviction)",
                        object_key=f.pod,
                        object_uid=uid,
                    )
                )
            elif not pod.terminating and now - f.since > self.config.inflight_timeout_s:
                del self._inflight[uid]  # the eviction never took (e.g. refused): retry later
        return released

    def _advance_ladder(self, snap: EvictionSnapshot) -> LadderState:
        cur = snap.reclaim_pool_cpus
        if cur is not None and self._reclaim_prev is not None and cur < self._reclaim_prev:
            self._last_shrink = snap.now
        if cur is not None:
            self._reclaim_prev = cur
        floor = snap.reclaim_pool_floor
        settled = (
            cur is None
            or (floor is not None and cur <= floor)
            or self._last_shrink is None
            or snap.now - self._last_shrink >= self.config.throttle_settle_s
        )
        self._ladder = LadderState(cur, floor, self._last_shrink, settled)
        return self._ladder

    def _effective(
        self, thresholds: Sequence[Threshold], now: float, notes: list[str]
    ) -> dict[str, Met]:
        """A threshold counts only once it has held for its grace period."""
        out: dict[str, Met] = {}
        seen: set[str] = set()
        for t in thresholds:
            tid = t.id
            seen.add(tid)
            if t.met >= Met.SOFT:
                self._soft_since.setdefault(tid, now)
            else:
                self._soft_since.pop(tid, None)
            if t.met == Met.HARD:
                self._hard_since.setdefault(tid, now)
            else:
                self._hard_since.pop(tid, None)
            eff = Met.NOT
            if t.met == Met.HARD and now - self._hard_since[tid] >= t.grace_period_s:
                eff = Met.HARD
            elif t.met >= Met.SOFT and now - self._soft_since[tid] >= t.grace_period_s:
                eff = Met.SOFT
            if t.met > eff:
                since = self._hard_since.get(tid) if t.met == Met.HARD else self._soft_since[tid]
                held = now - (since if since is not None else now)
                notes.append(
                    f"{tid}: {t.met.label} threshold held {held:g}s of its "
                    f"{t.grace_period_s:g}s grace period"
                )
            out[tid] = eff
        for memo in (self._soft_since, self._hard_since):
            for tid in [k for k in memo if k not in seen]:
                del memo[tid]
        return out

    def _update_conditions(
        self, thresholds: Sequence[Threshold], effective: dict[str, Met], now: float
    ) -> list[EvictionRecord]:
        records = []
        for t in thresholds:
            if effective.get(t.id, Met.NOT) < Met.SOFT or t.condition is None:
                continue
            name = t.condition.name
            dry = self.config.is_dry_run(t.plugin)
            current = self._conditions.get(name)
            if current is None:
                self._conditions[name] = ActiveCondition(t.condition, t.plugin, now, now, dry)
                records.append(self._condition_record(t, "condition-set", dry, now))
            else:
                self._conditions[name] = replace(
                    current, last_seen=now, dry_run=current.dry_run and dry
                )
        period = self.config.condition_transition_period_s
        for name, c in list(self._conditions.items()):
            if now - c.last_seen > period:
                del self._conditions[name]
                records.append(
                    EvictionRecord(
                        time=now,
                        node=self.node,
                        kind="condition-cleared",
                        plugin=c.plugin,
                        reason="ConditionCleared",
                        message=(
                            f"condition {name} cleared: not seen for {now - c.last_seen:g}s "
                            f"(transition period {period:g}s); its taints are removed"
                        ),
                        object_kind=names.NODE.kind,
                        object_key=self.node,
                        condition=name,
                        dry_run=c.dry_run,
                    )
                )
        return records

    def _condition_record(self, t: Threshold, kind: str, dry: bool, now: float) -> EvictionRecord:
        assert t.condition is not None
        where = "Node" if t.condition.scope == "node" else "CNR (reclaimed_cores only)"
        taints = ", ".join(
            f"{x.key}:{x.effect}" + (f" qosLevel={x.qos_level}" if x.qos_level else "")
            for x in t.condition.taints()
        )
        action = "would taint (dry run)" if dry else "taints"
        message = (
            f"condition {t.condition.name} set by {t.plugin}: {t.signal} = "
            f"{_fmt(t.observed, t.unit)} {t.operator} {t.met.label} threshold "
            f"{_fmt(t.threshold, t.unit)} ({t.window}); {action} the {where}: {taints}"
        )
        return EvictionRecord(
            time=now,
            node=self.node,
            kind=kind,
            plugin=t.plugin,
            reason="ConditionSet",
            message=message,
            object_kind=names.NODE.kind,
            object_key=self.node,
            signal=t.signal,
            observed=t.observed,
            threshold=t.threshold,
            operator=t.operator,
            unit=t.unit,
            window=t.window,
            grace_period_s=t.grace_period_s,
            met=t.met.label,
            condition=t.condition.name,
            dry_run=dry,
        )

    def _blocked(
        self,
        t: Threshold,
        dry: bool,
        budget: int,
        ladder: LadderState,
        pods: dict[str, PodInfo],
        now: float,
    ) -> str:
        if not dry and budget <= 0:
            return f"this round's eviction budget ({self.config.eviction_burst}) is spent"
        if t.resource in CPU_RESOURCES and not ladder.throttle_settled:
            return (
                "throttling first: the reclaim pool shrank "
                f"{now - (ladder.last_shrink or now):g}s ago "
                f"(settle {self.config.throttle_settle_s:g}s)"
            )
        if not dry:
            waiting = [
                f.pod for uid, f in self._inflight.items() if f.scope == _scope(t) and uid in pods
            ]
            if waiting:
                return f"waiting for {', '.join(sorted(waiting))} to terminate"
            last = self._last_victim.get(_scope(t))
            if last is not None and now - last < t.cool_down_s:
                return f"cooling down ({now - last:g}s of {t.cool_down_s:g}s since the last)"
        return ""

    def _eligible(self, p: PodInfo, t: Threshold, chosen: set[str]) -> bool:
        cfg = self.config
        return (
            not p.terminating
            and p.uid not in chosen
            and p.uid not in self._inflight
            and p.qos_level in t.victim_levels
            and (t.candidates is None or p.uid in t.candidates)
            and protection(p) is None
            and not skipped(p, cfg.skipped_annotations, cfg.skipped_labels)
        )

    def _victim_record(
        self,
        t: Threshold,
        pod: PodInfo,
        place: int,
        ranked: Sequence[tuple[PodInfo, RankEntry]],
        dry: bool,
        now: float,
    ) -> EvictionRecord:
        shown = tuple(e for _, e in ranked[: max(RANKING_SHOWN, place + 1)])
        since = self._hard_since.get(t.id, now)
        verb = "would evict (dry run)" if dry else "evicting"
        scope = t.key if t.numa is None else f"NUMA {t.numa}"
        usage_unit = USAGE_UNITS.get(t.resource, "")
        usage_name = t.resource.rsplit("/", 1)[-1]
        rank_text = "; ".join(
            f"#{i + 1} {e.pod} ({e.qos_level}, priority {e.priority}, "
            f"{usage_name} {_fmt(e.usage, usage_unit)})"
            for i, e in enumerate(shown)
        )
        overage = f"; overage {_fmt(t.overage, t.unit)} to release" if t.overage is not None else ""
        message = (
            f"{verb} {pod.key}: met threshold in scope: {scope} from plugin: {t.plugin}. "
            f"{t.signal} = {_fmt(t.observed, t.unit)} {t.operator} hard threshold "
            f"{_fmt(t.threshold, t.unit)} ({t.window}; held {now - since:g}s, grace "
            f"{t.grace_period_s:g}s){overage}. Ranked #{place + 1} of {len(ranked)} "
            f"candidates (reclaimed before shared, lower priority first, then the biggest "
            f"user): {rank_text}"
        )
        return EvictionRecord(
            time=now,
            node=self.node,
            kind="dry-run-eviction" if dry else "eviction",
            plugin=t.plugin,
            reason=f"{t.key} {t.met.label}",
            message=message,
            object_kind=names.POD.kind,
            object_key=pod.key,
            object_uid=pod.uid,
            signal=t.signal,
            observed=t.observed,
            threshold=t.threshold,
            operator=t.operator,
            unit=t.unit,
            window=t.window,
            grace_period_s=t.grace_period_s,
            met=t.met.label,
            condition=t.condition.name if t.condition else "",
            ranking=shown,
            dry_run=dry,
        )

    def _taints(self) -> tuple[tuple[Taint, ...], tuple[Taint, ...]]:
        node: list[Taint] = []
        cnr: list[Taint] = []
        for c in sorted(self._conditions.values(), key=lambda c: c.spec.name):
            if c.dry_run:
                continue
            (node if c.spec.scope == "node" else cnr).extend(c.spec.taints())
        return tuple(node), tuple(cnr)
