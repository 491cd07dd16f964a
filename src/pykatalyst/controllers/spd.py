"""ServiceProfileDescriptors: one per enabled workload, its baseline sentinels, its pods
stamped, its aggregated metrics kept to the scopes something produces.

Katalyst's `spd` controller, on the same objects:

- a Deployment or StatefulSet annotated `spd.katalyst.kubewharf.io/enable: "true"` gets an
  SPD of the same name (ownerReference to the workload, its labels, `targetRef` naming it,
  `baselinePercent` from `baseline_percent` per QoS level of the pod template, else 100:
  nothing of it can be reclaimed); the SPD goes when the annotation does;
- the pods of a workload an SPD targets carry `spd.katalyst.kubewharf.io/name: <spd>`;
- every SPD whose workload is known gets its baseline sentinel annotations (api/spd.py:
  active pods by creation time then name, index ⌊(n−1)·p/100⌋), per extended indicator too;
- `status.aggMetrics` keeps only entries of scopes something produces (`scopes`: the
  resource-portrait scope, written by the IHPA side) or of no scope.

Unlike Katalyst, an SPD a user wrote (no ownerReference to the workload) is never deleted
by the controller, and a pod's SPD annotation is removed only when the SPD it names is gone
(Katalyst strips it from every pod of a workload without the enable annotation, even the
ones its own webhook stamped). An SPD that breaks its schema is skipped with an
InvalidConfig Event naming the field; the others go on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from pykatalyst.api import config_fields, names, spd
from pykatalyst.api.names import Kind
from pykatalyst.api.qos import QoSError, qos_level
from pykatalyst.cluster.informer import InformerFactory
from pykatalyst.cluster.protocol import JSON, AlreadyExists, ApiError, Cluster, NotFound
from pykatalyst.cluster.selectors import label_selector_from_dict
from pykatalyst.cluster.skips import Skip, SkippedObjects, skip_reason

WORKLOAD_KINDS: tuple[Kind, ...] = (names.DEPLOYMENT, names.STATEFUL_SET)
SPD_KIND = names.SERVICE_PROFILE_DESCRIPTOR


class SPDConfig(BaseModel):
    """`baseline_percent`: the default baselinePercent of a new SPD per QoS level of its
    pod template (Katalyst's --spd-qos-baseline-percent); a level not listed gets 100.
    `scopes`: the aggMetrics scopes something produces."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    baseline_percent: dict[str, int] = Field(default_factory=dict)
    scopes: tuple[str, ...] = (names.SPD_SCOPE_RESOURCE_PORTRAIT,)


def parse_baseline_percent(text: str) -> dict[str, int]:
    """`shared_cores=50,dedicated_cores=100` (the flag's syntax) as a map; ValueError
    naming the item and what is accepted."""
    out: dict[str, int] = {}
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        level, sep, value = item.partition("=")
        if not sep or level not in names.QOS_LEVELS or not value.strip().isdigit():
            raise ValueError(
                f"spd baseline percent {item!r}: accepted: <qos level>=<0-100>, the level one "
                f"of {', '.join(names.QOS_LEVELS)}"
            )
        pct = int(value)
        if pct > 100:
            raise ValueError(f"spd baseline percent {item!r}: {pct} is over 100")
        out[level] = pct
    return out


@dataclass(frozen=True, slots=True)
class Workload:
    """A Deployment or StatefulSet as the controller reads it."""

    kind: Kind
    namespace: str
    name: str
    uid: str
    labels: Mapping[str, str]
    enabled: bool
    selector: Any  # LabelSelector | None (None: unreadable selector, matches nothing)
    template: Mapping[str, Any]

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.namespace, self.kind.kind, self.name)


def read_workload(kind: Kind, obj: JSON) -> Workload:
    meta = obj.get("metadata") or {}
    raw_spec = obj.get("spec")
    spec: Mapping[str, Any] = raw_spec if isinstance(raw_spec, Mapping) else {}
    template = spec.get("template")
    ann = meta.get("annotations") or {}
    try:
        selector: Any = label_selector_from_dict(spec.get("selector"))
        if selector.empty:
            selector = None  # an empty selector selects nothing for a workload
    except (ApiError, AttributeError, TypeError):
        selector = None
    return Workload(
        kind,
        str(meta.get("namespace", "")),
        str(meta.get("name", "")),
        str(meta.get("uid", "")),
        {str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        ann.get(names.SPD_ENABLE_ANNOTATION) == "true",
        selector,
        template if isinstance(template, Mapping) else {},
    )


def default_baseline_percent(w: Workload, cfg: SPDConfig) -> int:
    """The QoS level of the workload's pod template picks the default; 100 otherwise."""
    try:
        level = qos_level({"metadata": w.template.get("metadata") or {}, "spec": {}})
    except (QoSError, ValueError):
        return 100
    return cfg.baseline_percent.get(level, 100)


@dataclass(frozen=True, slots=True)
class SPDAction:
    verb: str  # create | delete | annotate | status | stamp-pod
    kind: Kind
    namespace: str
    name: str
    body: Mapping[str, Any] | None = None
    why: str = ""

    def to_json(self) -> dict[str, Any]:
        out = {"action": self.verb, "kind": self.kind.kind, "name": f"{self.namespace}/{self.name}"}
        if self.why:
            out["why"] = self.why
        return out


@dataclass(frozen=True, slots=True)
class SPDPlan:
    time: float
    workloads: int
    spds: int
    actions: tuple[SPDAction, ...] = ()
    skips: tuple[Skip, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "workloads": self.workloads,
            "spds": self.spds,
            "actions": [a.to_json() for a in self.actions],
            "skipped": [s.to_json() for s in self.skips],
        }

    def summary(self) -> str:
        verbs = ("create", "delete", "annotate", "status", "stamp-pod")
        counts = {v: sum(1 for a in self.actions if a.verb == v) for v in verbs}
        what = ", ".join(f"{n} {v}" for v, n in counts.items() if n) or "nothing to do"
        return f"spd: {self.workloads} workloads, {self.spds} SPDs; {what}"


def _active(pod: Mapping[str, Any]) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not (pod.get("metadata") or {}).get(
        "deletionTimestamp"
    )


def pods_of(w: Workload, pods: Sequence[JSON]) -> list[JSON]:
    """The workload's pods: those of its namespace its selector matches."""
    if w.selector is None:
        return []
    return [
        p
        for p in pods
        if (p.get("metadata") or {}).get("namespace") == w.namespace
        and w.selector.matches((p.get("metadata") or {}).get("labels") or {})
    ]


def sentinel_annotations(s: JSON, pods: Sequence[JSON]) -> dict[str, str | None]:
    """The two sentinel annotations the SPD should carry (None: absent)."""
    spec = s.get("spec") or {}
    metas = [spd.pod_meta(p) for p in pods if _active(p)]
    percent = spec.get("baselinePercent")
    extended = spec.get("extendedIndicator") or []
    main: spd.PodMeta | None = None
    ext: dict[str, spd.PodMeta] = {}
    if percent is not None or extended:
        main = spd.sentinel(metas, percent)
        for ind in extended:
            found = spd.sentinel(metas, ind.get("baselinePercent"))
            if found is not None:
                ext[str(ind.get("name", ""))] = found
    return {
        names.SPD_BASELINE_SENTINEL_ANNOTATION: None if main is None else spd.sentinel_text(main),
        names.SPD_EXTENDED_BASELINE_SENTINEL_ANNOTATION: spd.extended_sentinels_text(ext),
    }


def new_spd(w: Workload, cfg: SPDConfig, pods: Sequence[JSON]) -> JSON:
    """The SPD Katalyst creates for an enabled workload, sentinels already computed."""
    body: JSON = {
        "apiVersion": SPD_KIND.api_version,
        "kind": SPD_KIND.kind,
        "metadata": {
            "name": w.name,
            "namespace": w.namespace,
            "labels": dict(w.labels),
            "ownerReferences": [
                {
                    "apiVersion": w.kind.api_version,
                    "kind": w.kind.kind,
                    "name": w.name,
                    "uid": w.uid,
                }
            ],
        },
        "spec": {
            "targetRef": {"apiVersion": w.kind.api_version, "kind": w.kind.kind, "name": w.name},
            "baselinePercent": default_baseline_percent(w, cfg),
        },
    }
    ann = {k: v for k, v in sentinel_annotations(body, pods).items() if v is not None}
    if ann:
        body["metadata"]["annotations"] = ann
    return body


def _target(s: JSON) -> tuple[str, str, str] | None:
    ref = (s.get("spec") or {}).get("targetRef") or {}
    ns = str((s.get("metadata") or {}).get("namespace", ""))
    if not ref.get("kind") or not ref.get("name"):
        return None
    return (ns, str(ref["kind"]), str(ref["name"]))


def _owner(s: JSON) -> tuple[str, str] | None:
    """The workload (kind, name) that owns an SPD the controller made."""
    for ref in (s.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("kind") in ("Deployment", "StatefulSet"):
            return str(ref["kind"]), str(ref.get("name", ""))
    return None


@dataclass(frozen=True, slots=True)
class SPDInputs:
    workloads: Sequence[Workload]
    spds: Sequence[JSON]  # the readable ones
    pods: Sequence[JSON]
    # every stored SPD (namespace, name), unreadable ones included: a pod naming one of
    # those keeps its annotation
    stored: frozenset[tuple[str, str]] = frozenset()


def decide(inp: SPDInputs, cfg: SPDConfig, now: float) -> SPDPlan:
    """Pure: the SPDs to create or delete, their annotations and aggMetrics, the pods to
    stamp."""
    by_key = {w.key: w for w in inp.workloads}
    by_target: dict[tuple[str, str, str], JSON] = {}
    for s in sorted(inp.spds, key=lambda s: str((s.get("metadata") or {}).get("name"))):
        t = _target(s)
        if t is not None:
            by_target.setdefault(t, s)
    actions: list[SPDAction] = []
    gone: set[tuple[str, str]] = set()
    for w in sorted(inp.workloads, key=lambda w: w.key):
        if w.enabled and w.key not in by_target:
            body = new_spd(w, cfg, pods_of(w, inp.pods))
            actions.append(SPDAction("create", SPD_KIND, w.namespace, w.name, body, _why(w)))
            by_target[w.key] = body
    for s in inp.spds:
        meta = s.get("metadata") or {}
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        owner = _owner(s)
        ow = by_key.get((ns, *owner)) if owner else None
        if owner is not None and (ow is None or not ow.enabled):
            why = "its workload is gone" if ow is None else f'{_enable()} is not "true" any more'
            actions.append(SPDAction("delete", SPD_KIND, ns, name, None, why))
            gone.add((ns, name))
            continue
        target = _target(s)
        tw = by_key.get(target) if target else None
        actions.extend(_sync_spd(s, tw, inp.pods, cfg))
    actions.extend(_stamps(inp, by_target, gone))
    return SPDPlan(now, len(inp.workloads), len(inp.spds), tuple(actions))


def _nn(obj: JSON) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def _enable() -> str:
    return names.SPD_ENABLE_ANNOTATION


def _why(w: Workload) -> str:
    return f'{w.kind.kind} {w.namespace}/{w.name} has {_enable()}="true"'


def _sync_spd(s: JSON, w: Workload | None, pods: Sequence[JSON], cfg: SPDConfig) -> list[SPDAction]:
    meta = s.get("metadata") or {}
    ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    out: list[SPDAction] = []
    if w is not None:
        want = sentinel_annotations(s, pods_of(w, pods))
        have = meta.get("annotations") or {}
        patch = {k: v for k, v in want.items() if have.get(k) != v}
        if patch:
            body = {"metadata": {"annotations": patch}}
            out.append(SPDAction("annotate", SPD_KIND, ns, name, body, "baseline sentinel"))
    agg = (s.get("status") or {}).get("aggMetrics") or []
    kept = spd.merge_agg_metrics(agg, [], cfg.scopes)
    if len(kept) != len(agg):
        dropped = sorted({spd.agg_key(e)[0] for e in agg} - {spd.agg_key(e)[0] for e in kept})
        why = f"aggMetrics of scopes nothing produces dropped: {', '.join(dropped)}"
        out.append(SPDAction("status", SPD_KIND, ns, name, {"status": {"aggMetrics": kept}}, why))
    return out


def _stamps(
    inp: SPDInputs, by_target: Mapping[tuple[str, str, str], JSON], gone: set[tuple[str, str]]
) -> list[SPDAction]:
    """Pods of a workload an SPD targets get its name; a pod naming an SPD that is gone
    loses it."""
    want: dict[tuple[str, str], str] = {}
    for w in inp.workloads:
        s = by_target.get(w.key)
        if s is not None:
            sname = str((s.get("metadata") or {}).get("name", ""))
            if (w.namespace, sname) not in gone:
                for p in pods_of(w, inp.pods):
                    want[(w.namespace, str(p["metadata"].get("name", "")))] = sname
    existing = {
        (
            str((s.get("metadata") or {}).get("namespace")),
            str((s.get("metadata") or {}).get("name")),
        )
        for s in inp.spds
    } | {(ns, str(s["metadata"]["name"])) for (ns, _, _), s in by_target.items()}
    out: list[SPDAction] = []
    for p in inp.pods:
        meta = p.get("metadata") or {}
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        have = (meta.get("annotations") or {}).get(names.SPD_NAME_ANNOTATION)
        target = want.get((ns, name))
        if target is not None and have != target:
            body = {"metadata": {"annotations": {names.SPD_NAME_ANNOTATION: target}}}
            out.append(SPDAction("stamp-pod", names.POD, ns, name, body, f"SPD {target}"))
        elif target is None and have and ((ns, have) in gone or (ns, have) not in existing):
            gone_body = {"metadata": {"annotations": {names.SPD_NAME_ANNOTATION: None}}}
            out.append(
                SPDAction("stamp-pod", names.POD, ns, name, gone_body, f"SPD {have} is gone")
            )
    return out


@dataclass(frozen=True, slots=True)
class SPDResult:
    done: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"done": list(self.done), "failed": list(self.failed)}


class SPDController:
    """`reconcile(now)` decides from informer caches; `apply(plan)` writes."""

    name = names.CONTROLLER_SPD

    def __init__(
        self,
        cluster: Cluster,
        config: SPDConfig | None = None,
        *,
        skips: SkippedObjects | None = None,
        informers: InformerFactory | None = None,
    ) -> None:
        self.cluster = cluster
        self.config = config if config is not None else SPDConfig()
        self.skips = skips
        shared = informers if informers is not None else InformerFactory(cluster)
        self._spds = shared.informer(SPD_KIND)
        self._pods = shared.informer(names.POD)
        self._workloads = {k.kind: shared.informer(k) for k in WORKLOAD_KINDS}
        self.unserved: set[str] = set()

    def _workload_objects(self) -> list[Workload]:
        out: list[Workload] = []
        for kind in WORKLOAD_KINDS:
            informer = self._workloads[kind.kind]
            try:
                informer.sync()
            except NotFound:
                self.unserved.add(kind.kind)  # an API server without apps/v1 (MemoryCluster)
                continue
            out.extend(read_workload(kind, o) for o in informer.list())
        return out

    def reconcile(self, now: float) -> SPDPlan:
        self._spds.sync()
        self._pods.sync()
        workloads = self._workload_objects()
        good: list[JSON] = []
        skips: list[Skip] = []
        stored = self._spds.list()
        for s in stored:
            body = {**s, "apiVersion": SPD_KIND.api_version, "kind": SPD_KIND.kind}
            problems = config_fields.config_problems(body)
            if problems:
                message = f"{SPD_KIND.kind} is invalid: {'; '.join(str(p) for p in problems)}"
                skips.append(Skip.of(SPD_KIND, s, skip_reason(s), message))
            else:
                good.append(s)
        if self.skips is not None:
            self.skips.report(skips, now)
        inputs = SPDInputs(workloads, good, self._pods.list(), frozenset(map(_nn, stored)))
        plan = decide(inputs, self.config, now)
        return SPDPlan(plan.time, plan.workloads, plan.spds, plan.actions, tuple(skips))

    def apply(self, plan: SPDPlan) -> SPDResult:
        done: list[str] = []
        failed: list[str] = []
        for a in plan.actions:
            what = f"{a.verb} {a.kind.kind} {a.namespace}/{a.name}"
            try:
                self._do(a)
            except (NotFound, AlreadyExists):
                continue
            except ApiError as exc:
                failed.append(f"{what}: {exc}")
                continue
            done.append(what)
        return SPDResult(tuple(done), tuple(failed))

    def _do(self, a: SPDAction) -> None:
        if a.verb == "create":
            self.cluster.create(a.kind, dict(a.body or {}), a.namespace)
        elif a.verb == "delete":
            self.cluster.delete(a.kind, a.name, a.namespace)
        elif a.verb == "status":
            self.cluster.patch(
                a.kind, a.name, dict(a.body or {}), a.namespace, subresource="status"
            )
        else:
            self.cluster.patch(a.kind, a.name, dict(a.body or {}), a.namespace)

    def run(self, now: float) -> tuple[SPDPlan, SPDResult]:
        plan = self.reconcile(now)
        return plan, self.apply(plan)
