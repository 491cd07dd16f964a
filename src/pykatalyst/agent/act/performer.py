"""`Performer`: one tick's plan applied to the node and the cluster.

In order: the cpu placement's checkpoint, the eviction stages' decisions, the egress
shape, the knobs, the CNR report, the Events. What each part did comes back in a
`Performed`, which the agent records in the plan; a `vanished` cgroup tells the gatherer
to walk the cgroup tree again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pykatalyst.agent.act.knobs import KnobEnforcer, KnobWriter
from pykatalyst.agent.agent_state import AgentState
from pykatalyst.agent.config import AgentConfig
from pykatalyst.agent.cpu_placement import CpuCheckpoint, CpuState
from pykatalyst.agent.decide import Notes
from pykatalyst.agent.host.base import Host, Knob, KnobValue, NetShape, PodCgroup
from pykatalyst.agent.inputs import TickInputs
from pykatalyst.agent.plan import AgentPlan, PlanEvent
from pykatalyst.agent.pods import PodSpec
from pykatalyst.agent.reporter import Reporter
from pykatalyst.api import names
from pykatalyst.cluster.events import EventRecorder, ObjectRef
from pykatalyst.cluster.protocol import Cluster

SentEvents = frozenset[tuple[str, str, str]]


@dataclass(frozen=True, slots=True)
class Performed:
    """What performing one plan did: the warnings and Events (the plan's and the
    performing's), the eviction actions (decided, then done), the `enforce` terms (the
    knobs written, the `network` shape), the `report` terms (the CNR), the Events sent so
    far, and whether a write found a cgroup gone."""

    warnings: tuple[str, ...]
    events: tuple[PlanEvent, ...]
    actions: tuple[object, ...]
    enforce: Mapping[str, Any]
    report: Mapping[str, Any]
    events_sent: SentEvents
    vanished: bool = False


class Performer:
    """Applies an `AgentPlan`: the only part of the agent that writes."""

    def __init__(
        self,
        node_name: str,
        cluster: Cluster,
        host: Host,
        config: AgentConfig,
        enforcer: KnobEnforcer | None,
        *,
        dry_run: bool = False,
        publish: bool = True,
        checkpoint: CpuCheckpoint | None = None,
    ) -> None:
        self.host = host
        self.dry_run = dry_run
        self.publish = publish
        self.checkpoint = checkpoint
        self.reporter = Reporter(node_name, cluster, config.reporter)
        self.events = EventRecorder(cluster, names.AGENT_COMPONENT, node_name)
        self.writer = KnobWriter(enforcer, dry_run)
        self.net_shape: NetShape | None = None  # the egress shape last applied
        self._net_error = ""

    def perform(self, inp: TickInputs, plan: AgentPlan, state: AgentState) -> Performed:
        """Perform the plan: the checkpoint, the eviction stages' decisions, the egress
        shape, the knobs, the CNR status, the Events."""
        notes = Notes(plan.warnings, plan.events, state.events_sent)
        self._save_cpu_state(state.placement, notes.warnings)
        actions = self._evict(inp, plan, notes.warnings)
        net_terms = self._shape(inp, plan, notes)
        enforce_terms, vanished = self._enforce(inp, plan.desired, notes)
        enforce_terms["network"] = net_terms
        report_terms = self._report(inp, plan)
        sent = self._emit_events(inp, notes)
        return Performed(
            tuple(notes.warnings),
            tuple(notes.events),
            tuple(actions),
            enforce_terms,
            report_terms,
            sent,
            vanished,
        )

    def _save_cpu_state(self, placement: CpuState, warnings: list[str]) -> None:
        ck = self.checkpoint
        if ck is None or self.dry_run:
            return
        try:
            ck.save(placement)
        except OSError as exc:
            warnings.append(f"cannot checkpoint the cpu placement to {ck.path}: {exc}")

    def _evict(self, inp: TickInputs, plan: AgentPlan, warnings: list[str]) -> list[object]:
        """Perform each stage's decision, in order: its decided actions, then what it did;
        a stage that raises is reported and skipped."""
        actions: list[object] = []
        for stage, decision in zip(inp.stages, plan.evictions, strict=True):
            actions.extend(decision.actions)
            try:
                actions.extend(stage.act(decision))
            except Exception as exc:  # a broken stage must not stop the loop
                warnings.append(f"eviction stage {stage.name}: {exc}")
        return actions

    def _enforce(
        self, inp: TickInputs, desired: Mapping[str, Mapping[Knob, KnobValue]], notes: Notes
    ) -> tuple[dict[str, Any], bool]:
        """Write the plan's knobs; the `enforce` terms, and whether a cgroup was gone."""
        outcome = self.writer.apply(inp.now, desired, inp.config.resync_s)
        if outcome.failures:
            by_cgroup = _pod_by_cgroup(inp.specs, inp.cgroups)
            for cgroup, msg in outcome.failures:
                s = by_cgroup.get(cgroup)
                if s is not None:
                    notes.once(s, "KnobWriteFailed", msg)
                else:
                    notes.warnings.append(msg)
        notes.warnings.extend(outcome.notes)
        return outcome.terms, outcome.vanished

    def _shape(self, inp: TickInputs, plan: AgentPlan, notes: Notes) -> dict[str, Any]:
        """Apply the egress plan's device shape when it differs from the one applied; each
        bandwidth pod told (an Event) what it is given once its shape is in force."""
        net = plan.net
        if net is None:
            return {}
        if net.shape is None and self.net_shape is None:
            return dict(net.terms)
        terms = dict(net.terms)
        if not self.dry_run and net.shape != self.net_shape:
            result = self.host.apply_net(net.shape)
            terms["commands"] = list(result.commands)
            if result.ok:
                self.net_shape = net.shape
            elif result.error != self._net_error:
                notes.warnings.append(f"network shaping: {result.error}")
            self._net_error = result.error
        if net.shape is not None and net.shape == self.net_shape:
            _bandwidth_events(net.terms, inp.specs, notes)
        return terms

    def _report(self, inp: TickInputs, plan: AgentPlan) -> dict[str, Any]:
        """Publish the plan's CNR status, node extended resources and overcommit advice."""
        if not self.publish or plan.cnr is None:
            return {"state": "not published (dry run)" if self.dry_run else "not published"}
        self.reporter.cfg = inp.config.reporter
        out = self.reporter.report(plan.cnr, inp.now)
        out["overcommit"] = self.reporter.publish_overcommit(
            plan.native_demand or {}, inp.config.overcommit, inp.now
        )
        out.update(plan.cnr_terms)
        return out

    def _emit_events(self, inp: TickInputs, notes: Notes) -> SentEvents:
        """Send the tick's Events; the Events sent so far, forgetting pods long gone."""
        specs = inp.specs
        sent = notes.sent
        if len(sent) > 4 * max(len(specs), 64):
            live = set(specs)
            sent = {k for k in sent if k[0] in live}
        if self.publish:
            for ev in notes.events:
                ns, _, name = ev.object_key.partition("/")
                uid = ev.uid
                if not uid:
                    spec = next((s for s in specs.values() if s.key == ev.object_key), None)
                    uid = spec.uid if spec else ""
                ref = ObjectRef(ev.object_kind, name, ns, uid, ev.api_version)
                self.events.record(ref, ev.type, ev.reason, ev.message, inp.now)
        return frozenset(sent)


def _bandwidth_events(terms: Mapping[str, Any], valid: Mapping[str, PodSpec], notes: Notes) -> None:
    """An Event per bandwidth pod, once per thing said: its class on the shaped device
    (a Warning when it gets less than it asks), or why it has none."""
    bw = terms.get("bandwidth", {})
    by_key = {s.key: s for s in valid.values()}
    for key, c in bw.get("pods", {}).items():
        s = by_key.get(key)
        if s is not None:
            short = c["rate_bps"] < c["request_bps"]
            message = (
                f"egress class {c['classid']}: rate {c['rate_bps']} bit/s, ceil "
                f"{c['ceil_bps']} bit/s; {c['reason']}"
            )
            reason = (
                names.EVENT_REASON_NET_BANDWIDTH_SHORT
                if short
                else names.EVENT_REASON_NET_BANDWIDTH_GUARANTEED
            )
            notes.once(s, reason, message, "Warning" if short else "Normal")
    for key, why in bw.get("not_shaped", {}).items():
        s = by_key.get(key)
        if s is not None:
            notes.once(s, names.EVENT_REASON_NET_BANDWIDTH_NOT_SHAPED, why, "Normal")


def _pod_by_cgroup(
    specs: Mapping[str, PodSpec], cgroups: Mapping[str, PodCgroup]
) -> dict[str, PodSpec]:
    out: dict[str, PodSpec] = {}
    for uid, s in specs.items():
        pc = cgroups.get(uid)
        if pc is None:
            continue
        out[pc.cgroup] = s
        for c in pc.containers:
            out[c.cgroup] = s
    return out
