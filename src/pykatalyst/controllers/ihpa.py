"""The `ihpa` controller: each IntelligentHorizontalPodAutoscaler kept as Katalyst keeps it.

For every IHPA, each period (Katalyst resyncs every 30 s):
1. the target Deployment/StatefulSet gets `spd.katalyst.kubewharf.io/enable: "true"`;
2. the HPA `ihpa-<name>` (owned by the IHPA) is created or rewritten from the IHPA
   (`ihpaspec.desired_hpa`: metrics, behavior, Preview/Auto target, timeBounds crons);
3. the SPD named after the target carries the ResourcePortrait extended indicator the
   predictions come from (created, owned by the workload, if no SPD controller made one);
4. the VirtualWorkload `<name>` follows the target's scale as Katalyst syncs it
   (status.replicas <- spec.replicas, status.selector <- the target's selector, then
   spec.replicas <- the target's status.replicas);
5. the IHPA's status takes currentReplicas, currentMetrics and lastScaleTime from the
   HPA, and desiredReplicas from the latest predicted point.

An IHPA that cannot be acted on (its target is missing, a field is invalid) gets a Warning
Event naming the field, and its HPA is left as it was: the last good target stays.
`decide` is pure; `IHPAController.apply` only carries out the plan.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pykatalyst.api import names
from pykatalyst.api.names import Kind
from pykatalyst.cluster.events import EventRecorder, ObjectRef
from pykatalyst.cluster.informer import InformerFactory
from pykatalyst.cluster.protocol import JSON, AlreadyExists, ApiError, Cluster, NotFound
from pykatalyst.cluster.selectors import format_label_selector
from pykatalyst.controllers import ihpaspec
from pykatalyst.controllers.cronbounds import CronMode
from pykatalyst.controllers.history import HistorySource
from pykatalyst.controllers.ihpaspec import SpecError
from pykatalyst.controllers.portrait import PortraitIndicator, PortraitPlan
from pykatalyst.predict.client import Predictor

DEFAULT_RESYNC_S = 30.0
REASON_INVALID = "FailedBuildHPA"
REASON_NO_TARGET = "FailedGetScaleTarget"
REASON_BAD_CRON = "InvalidCronTab"


@dataclass(frozen=True, slots=True)
class IHPAConfig:
    """`cron_mode`: how timeBounds crons are read (`window`, the default, or Katalyst's
    one-minute `minute`)."""

    cron_mode: CronMode = CronMode.WINDOW


@dataclass(frozen=True, slots=True)
class IHPAInputs:
    """One IHPA and what it refers to, as read this period (None: not found)."""

    ihpa: Mapping[str, Any]
    target: Mapping[str, Any] | None
    hpa: Mapping[str, Any] | None
    vw: Mapping[str, Any] | None
    spd: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class Action:
    """One write: verb create | update | patch | patch-status; `body` is the object (create,
    update) or a merge patch."""

    verb: str
    kind: Kind
    namespace: str
    name: str
    body: Mapping[str, Any]
    why: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.verb,
            "kind": self.kind.kind,
            "namespace": self.namespace,
            "name": self.name,
            "why": self.why,
        }


@dataclass(frozen=True, slots=True)
class Problem:
    """A Warning Event on an IHPA."""

    namespace: str
    name: str
    uid: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class IHPAPlan:
    time: float
    ihpas: int
    actions: tuple[Action, ...]
    problems: tuple[Problem, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "ihpas": self.ihpas,
            "actions": [a.to_json() for a in self.actions],
            "problems": [f"{p.namespace}/{p.name}: {p.message}" for p in self.problems],
        }

    def summary(self) -> str:
        what = f"{len(self.actions)} writes" if self.actions else "nothing to do"
        bad = f", {len(self.problems)} problems" if self.problems else ""
        return f"ihpa: {self.ihpas} IHPAs; {what}{bad}"


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    m = (obj or {}).get("metadata")
    return m if isinstance(m, Mapping) else {}


def _section(obj: Mapping[str, Any] | None, key: str) -> Mapping[str, Any]:
    v = (obj or {}).get(key)
    return v if isinstance(v, Mapping) else {}


def selector_string(workload: Mapping[str, Any]) -> str:
    """The workload's spec.selector written as the scale subresource writes it."""
    return format_label_selector(_section(_section(workload, "spec"), "selector"))


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _workload_actions(ns: str, ref: ihpaspec.TargetRef, target: Mapping[str, Any]) -> list[Action]:
    annotations = _section(_meta(target), "annotations")
    if annotations.get(names.SPD_ENABLE_ANNOTATION) == names.SPD_ENABLED:
        return []
    patch = {"metadata": {"annotations": {names.SPD_ENABLE_ANNOTATION: names.SPD_ENABLED}}}
    kind = ihpaspec.workload_kind(ref)
    return [Action("patch", kind, ns, ref.name, patch, "enable the workload's SPD")]


def _hand_edited(have: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    """The fields the API server does not default differ: someone edited the HPA."""
    return (
        have.get("scaleTargetRef") != want["scaleTargetRef"]
        or have.get("maxReplicas") != want["maxReplicas"]
        or have.get("minReplicas", 1) != want.get("minReplicas", 1)
        or len(have.get("metrics") or []) != len(want["metrics"])
    )


def _hpa_action(desired: JSON, have: Mapping[str, Any] | None) -> Action | None:
    meta = desired["metadata"]
    ns, name = str(meta["namespace"]), str(meta["name"])
    kind = names.HORIZONTAL_POD_AUTOSCALER
    if have is None:
        return Action("create", kind, ns, name, desired, "the IHPA's HPA")
    want = meta["annotations"][names.IHPA_SPEC_HASH_ANNOTATION]
    have_meta = _meta(have)
    owners = have_meta.get("ownerReferences") or []
    same_owner = any(
        isinstance(o, Mapping) and o.get("uid") == meta["ownerReferences"][0]["uid"] for o in owners
    )
    if (
        _section(have_meta, "annotations").get(names.IHPA_SPEC_HASH_ANNOTATION) == want
        and same_owner
        and not _hand_edited(_section(have, "spec"), desired["spec"])
    ):
        return None
    obj = json.loads(json.dumps(dict(have)))
    obj["spec"] = desired["spec"]
    obj["metadata"].setdefault("annotations", {})[names.IHPA_SPEC_HASH_ANNOTATION] = want
    obj["metadata"]["ownerReferences"] = meta["ownerReferences"]
    return Action("update", kind, ns, name, obj, "the IHPA changed")


def _spd_action(
    ns: str,
    ref: ihpaspec.TargetRef,
    target: Mapping[str, Any],
    spd: Mapping[str, Any] | None,
    ihpas: Sequence[Mapping[str, Any]],
) -> Action | None:
    """The SPD's ResourcePortrait indicator: one config per IHPA source (the last IHPA
    of a workload wins, as each Katalyst plugin run overwrites it)."""
    config = ihpaspec.portrait_config(ihpas[-1])
    indicator = ihpaspec.portrait_indicator([config])
    kind = names.SERVICE_PROFILE_DESCRIPTOR
    if spd is None:
        tmeta = _meta(target)
        owner = {
            "apiVersion": "apps/v1",
            "kind": ref.kind,
            "name": ref.name,
            "uid": tmeta.get("uid", ""),
            "controller": True,
        }
        body = {
            "apiVersion": kind.api_version,
            "kind": kind.kind,
            "metadata": {"name": ref.name, "namespace": ns, "ownerReferences": [owner]},
            "spec": {"targetRef": ref.to_json(), "extendedIndicator": [indicator]},
        }
        return Action("create", kind, ns, ref.name, body, "the workload's SPD")
    extended = [
        e for e in _section(spd, "spec").get("extendedIndicator") or [] if isinstance(e, Mapping)
    ]
    current = [e for e in extended if e.get("name") == names.RESOURCE_PORTRAIT_INDICATOR]
    if current and current[0].get("indicators") == indicator["indicators"]:
        return None
    others = [dict(e) for e in extended if e.get("name") != names.RESOURCE_PORTRAIT_INDICATOR]
    patch = {
        "metadata": {"resourceVersion": _meta(spd).get("resourceVersion", "")},
        "spec": {"extendedIndicator": [*others, indicator]},
    }
    return Action("patch", kind, ns, ref.name, patch, "the ResourcePortrait indicator")


def _vw_actions(
    ihpa: Mapping[str, Any], target: Mapping[str, Any], vw: Mapping[str, Any] | None
) -> list[Action]:
    meta = _meta(ihpa)
    ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    kind = names.VIRTUAL_WORKLOAD
    selector = selector_string(target)
    target_status = _int(_section(target, "status").get("replicas"))
    target_spec = _int(_section(target, "spec").get("replicas"), 1)
    if vw is None:
        body = {
            "apiVersion": kind.api_version,
            "kind": kind.kind,
            "metadata": {
                "name": name,
                "namespace": ns,
                "ownerReferences": [ihpaspec.owner_reference(ihpa)],
            },
            "spec": {"replicas": target_status},
        }
        status = {"status": {"replicas": target_spec, "selector": selector}}
        return [
            Action("create", kind, ns, name, body, "the Preview stand-in"),
            Action("patch-status", kind, ns, name, status, "its status"),
        ]
    out: list[Action] = []
    spec_r = _int(_section(vw, "spec").get("replicas"))
    st = _section(vw, "status")
    if spec_r != _int(st.get("replicas"), -1) or st.get("selector") != selector:
        patch = {"status": {"replicas": spec_r, "selector": selector}}
        out.append(Action("patch-status", kind, ns, name, patch, "status follows spec"))
    if spec_r != target_status:
        patch = {"spec": {"replicas": target_status}}
        out.append(Action("patch", kind, ns, name, patch, "spec follows the target"))
    return out


def _status_action(
    ihpa: Mapping[str, Any],
    hpa: Mapping[str, Any] | None,
    desired: JSON,
    spd: Mapping[str, Any] | None,
    now: float,
) -> Action | None:
    if hpa is None or spd is None:
        return None  # Katalyst writes status only once both exist
    meta = _meta(ihpa)
    hst = _section(hpa, "status")
    status: JSON = dict(_section(ihpa, "status"))
    new: JSON = {
        "currentReplicas": _int(hst.get("currentReplicas")),
        "currentMetrics": hst.get("currentMetrics"),
        "lastScaleTime": hst.get("lastScaleTime"),
    }
    target = ihpaspec.target_ref(ihpa).name
    want = ihpaspec.desired_replicas(desired["spec"]["metrics"], target, spd, now)
    if want is not None:
        new["desiredReplicas"] = want
    changed = {k: v for k, v in new.items() if status.get(k) != v}
    if not changed:
        return None
    kind = names.INTELLIGENT_HPA
    ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    return Action("patch-status", kind, ns, name, {"status": changed}, "status from the HPA")


def _problem(ihpa: Mapping[str, Any], reason: str, message: str) -> Problem:
    meta = _meta(ihpa)
    return Problem(
        str(meta.get("namespace", "")),
        str(meta.get("name", "")),
        str(meta.get("uid", "")),
        reason,
        message,
    )


def decide_one(
    inp: IHPAInputs, now: float, config: IHPAConfig, same_target: Sequence[Mapping[str, Any]]
) -> tuple[list[Action], list[Problem]]:
    ihpa = inp.ihpa
    ns = str(_meta(ihpa).get("namespace", ""))
    try:
        ref = ihpaspec.target_ref(ihpa)
        if inp.target is None:
            raise LookupError(
                f"spec.autoscaler.scaleTargetRef: {ref.kind} {ns}/{ref.name} not found; "
                "the HPA keeps its last target"
            )
        template = _section(_section(inp.target, "spec"), "template")
        desired = ihpaspec.desired_hpa(ihpa, template, now, config.cron_mode)
    except SpecError as exc:
        return [], [_problem(ihpa, REASON_INVALID, f"{exc}; the HPA is left as it was")]
    except LookupError as exc:
        return [], [_problem(ihpa, REASON_NO_TARGET, str(exc))]
    problems = [_problem(ihpa, REASON_BAD_CRON, f"{w}; bound skipped") for w in desired.warnings]
    actions = _workload_actions(ns, ref, inp.target)
    hpa = _hpa_action(desired.hpa, inp.hpa)
    spd = _spd_action(ns, ref, inp.target, inp.spd, same_target)
    actions += [a for a in (hpa, spd) if a is not None]
    actions += _vw_actions(ihpa, inp.target, inp.vw)
    status = _status_action(ihpa, inp.hpa, desired.hpa, inp.spd, now)
    if status is not None:
        actions.append(status)
    return actions, problems


def decide(inputs: Sequence[IHPAInputs], now: float, config: IHPAConfig) -> IHPAPlan:
    """Pure: the writes that bring every IHPA's HPA, SPD indicator, VirtualWorkload and
    status in line, and the problems to report."""
    ordered = sorted(
        inputs, key=lambda i: (_meta(i.ihpa).get("namespace", ""), _meta(i.ihpa).get("name", ""))
    )
    by_target: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for inp in ordered:
        spec = _section(_section(inp.ihpa, "spec"), "autoscaler")
        key = (
            str(_meta(inp.ihpa).get("namespace", "")),
            str(_section(spec, "scaleTargetRef").get("name", "")),
        )
        by_target.setdefault(key, []).append(inp.ihpa)
    actions: list[Action] = []
    problems: list[Problem] = []
    seen_spd: set[tuple[str, str]] = set()
    for inp in ordered:
        spec = _section(_section(inp.ihpa, "spec"), "autoscaler")
        key = (
            str(_meta(inp.ihpa).get("namespace", "")),
            str(_section(spec, "scaleTargetRef").get("name", "")),
        )
        a, p = decide_one(inp, now, config, by_target[key])
        if key in seen_spd:  # one SPD write per workload per period
            a = [x for x in a if x.kind != names.SERVICE_PROFILE_DESCRIPTOR]
        if any(x.kind == names.SERVICE_PROFILE_DESCRIPTOR for x in a) or inp.spd is not None:
            seen_spd.add(key)
        actions += a
        problems += p
    return IHPAPlan(now, len(inputs), tuple(actions), tuple(problems))


@dataclass(frozen=True, slots=True)
class ApplyResult:
    done: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    events: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {"done": list(self.done), "failed": list(self.failed), "events": list(self.events)}


class IHPAController:
    """`reconcile(now)` reads the IHPAs and what they point at; `apply(plan)` writes."""

    name = names.CONTROLLER_IHPA

    def __init__(
        self,
        cluster: Cluster,
        config: IHPAConfig | None = None,
        events: EventRecorder | None = None,
        informers: InformerFactory | None = None,
    ) -> None:
        self.cluster = cluster
        self.config = config or IHPAConfig()
        self.events = events or EventRecorder(cluster, names.CONTROLLER_COMPONENT)
        shared = informers if informers is not None else InformerFactory(cluster)
        self._ihpas = shared.informer(names.INTELLIGENT_HPA)
        self._hpas = shared.informer(names.HORIZONTAL_POD_AUTOSCALER)
        self._vws = shared.informer(names.VIRTUAL_WORKLOAD)
        self._spds = shared.informer(names.SERVICE_PROFILE_DESCRIPTOR)
        self._workloads = {k: shared.informer(k) for k in names.WORKLOAD_KINDS}
        self._now = 0.0

    def gather(self) -> list[IHPAInputs]:
        for inf in (self._ihpas, self._hpas, self._vws, self._spds, *self._workloads.values()):
            inf.sync()
        out: list[IHPAInputs] = []
        for ihpa in self._ihpas.list():
            meta = _meta(ihpa)
            ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
            target: JSON | None = None
            spd: JSON | None = None
            try:
                ref = ihpaspec.target_ref(ihpa)
                target = self._workloads[ihpaspec.workload_kind(ref)].get(ref.name, ns)
                spd = self._spds.get(ref.name, ns)
            except SpecError:
                pass
            hpa = self._hpas.get(ihpaspec.hpa_name(name), ns)
            out.append(IHPAInputs(ihpa, target, hpa, self._vws.get(name, ns), spd))
        return out

    def reconcile(self, now: float) -> IHPAPlan:
        self._now = now
        return decide(self.gather(), now, self.config)

    def _write(self, a: Action) -> None:
        body = dict(a.body)
        if a.verb == "create":
            self.cluster.create(a.kind, body, a.namespace)
        elif a.verb == "update":
            self.cluster.update(a.kind, body)
        elif a.verb == "patch":
            self.cluster.patch(a.kind, a.name, body, a.namespace)
        else:
            self.cluster.patch(a.kind, a.name, body, a.namespace, subresource="status")

    def apply(self, plan: IHPAPlan) -> ApplyResult:
        done: list[str] = []
        failed: list[str] = []
        for a in plan.actions:
            what = f"{a.verb} {a.kind.kind} {a.namespace}/{a.name}"
            try:
                self._write(a)
                done.append(what)
            except (AlreadyExists, NotFound):
                continue  # the informers catch up next period
            except ApiError as exc:
                failed.append(f"{what}: {exc}")
        events: list[str] = []
        for p in plan.problems:
            ref = ObjectRef(
                names.INTELLIGENT_HPA.kind,
                p.name,
                p.namespace,
                p.uid,
                names.INTELLIGENT_HPA.api_version,
            )
            self.events.record(ref, "Warning", p.reason, p.message, plan.time)
            events.append(f"{p.namespace}/{p.name}: {p.reason}: {p.message}")
        return ApplyResult(tuple(done), tuple(failed), tuple(events))

    def run(self, now: float) -> tuple[IHPAPlan, ApplyResult]:
        plan = self.reconcile(now)
        return plan, self.apply(plan)


@dataclass(frozen=True, slots=True)
class HorizontalPlan:
    """One period of the `ihpa` controller: the resource portraits, then the IHPAs."""

    portrait: PortraitPlan
    ihpa: IHPAPlan

    def to_json(self) -> dict[str, Any]:
        return {"portrait": self.portrait.to_json(), **self.ihpa.to_json()}

    def summary(self) -> str:
        return f"{self.ihpa.summary()}; {self.portrait.summary()}"


class HorizontalScaling:
    """The `ihpa` controller as the runner drives it: the ResourcePortrait indicator (SPD
    predicted points) and the IHPA controller, one after the other each period."""

    name = names.CONTROLLER_IHPA

    def __init__(
        self,
        cluster: Cluster,
        config: IHPAConfig | None = None,
        *,
        history: HistorySource | None = None,
        predictor: Predictor | None = None,
        informers: InformerFactory | None = None,
    ) -> None:
        events = EventRecorder(cluster, names.CONTROLLER_COMPONENT)
        shared = informers if informers is not None else InformerFactory(cluster)
        self.portrait = PortraitIndicator(cluster, history, predictor, events, shared)
        self.ihpa = IHPAController(cluster, config, events, shared)

    def reconcile(self, now: float) -> HorizontalPlan:
        return HorizontalPlan(self.portrait.reconcile(now), self.ihpa.reconcile(now))

    def apply(self, plan: HorizontalPlan) -> ApplyResult:
        p_done, p_failed = self.portrait.apply(plan.portrait)
        r = self.ihpa.apply(plan.ihpa)
        return ApplyResult((*p_done, *r.done), (*p_failed, *r.failed), r.events)
