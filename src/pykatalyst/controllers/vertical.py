"""The `vpa` controller: gather, decide (`controllers.vparec`, `controllers.kvpa`,
`controllers.resize`), execute.

One reconcile runs Katalyst's three sub-controllers in their order on one snapshot of the
informer caches: the in-tree recommenders (SPD -> VPARec for `AvgLoadToCpuRequest`; usage
from Prometheus -> VPARec for `pykatalyst`, every `vpa_interval_s`), vparec (VPARec -> KVPA
status) and vpa (KVPA -> workload, pods, status). The KVPA status vparec computes is handed to the
vpa decision in memory, so each KVPA gets one status write per reconcile.

The executor only applies the plan: VPARec creates/patches/deletes, KVPA metadata and
status, workload annotations, pod annotations, `pods/resize` patches and `pods/eviction`
(a PodDisruptionBudget's refusal is reported, and retried next time). Every resize, fallback
and refusal is an Event on the pod and on the KVPA, carrying its decision record, and is
counted in `katalyst_vpa_resizes_total{outcome,reason}`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter

from pykatalyst.api import names, vpa
from pykatalyst.api.records import DecisionRecord
from pykatalyst.cluster.events import EventRecorder, ObjectRef
from pykatalyst.cluster.informer import InformerFactory
from pykatalyst.cluster.protocol import (
    JSON,
    ApiError,
    BadRequest,
    Cluster,
    NotFound,
    TooManyRequests,
)
from pykatalyst.cluster.ratelimit import TokenBucket
from pykatalyst.controllers import kvpa as kv
from pykatalyst.controllers import oom_record, resize, vparec
from pykatalyst.controllers.kvpa import KVPAInputs, KVPAOutcome, PodAction
from pykatalyst.controllers.resize import ResizeConfig, ResizeMemory
from pykatalyst.controllers.resource_recommend import ResourceRecommendConfig, oom_events
from pykatalyst.controllers.usage_recommend import (
    SourceUnavailable,
    UsageSource,
    source_for,
    template_resources,
)
from pykatalyst.recommend import OOMEvent
from pykatalyst.recommend.ensemble import PykatalystSettings
from pykatalyst.recommend.prometheus import PrometheusError

PLUGIN: Final = "vpa"
EVENT_RESIZE: Final = "ResizeRequested"
EVENT_RESIZED: Final = "Resized"
EVENT_FALLBACK: Final = "ResizeFallbackEviction"
EVENT_BLOCKED: Final = "ResizeEvictionBlocked"
EVENT_REFUSED: Final = "ResizeRefused"
EVENT_INVALID: Final = "InvalidKVPA"
EVENT_RECOMMEND_FAILED: Final = "RecommendFailed"
WORKLOAD_INFORMERS: Final = (names.DEPLOYMENT, names.STATEFUL_SET, names.REPLICA_SET)


@dataclass(frozen=True, slots=True)
class VPAPlan:
    time: float
    recs: vparec.VPARecPlan
    kvpas: tuple[KVPAOutcome, ...] = ()
    notes: tuple[str, ...] = ()

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for o in self.kvpas:
            for p in o.pods:
                counts[p.decision.outcome] = counts.get(p.decision.outcome, 0) + 1
        what = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no pods to change"
        return f"vpa: {len(self.kvpas)} KVPAs, {len(self.recs.recs)} VPARecs; {what}"

    def to_json(self) -> JSON:
        return {
            "time": self.time,
            **self.recs.to_json(),
            "kvpas": [o.to_json() for o in self.kvpas],
            "notes": list(self.notes),
        }


@dataclass(frozen=True, slots=True)
class VPAResult:
    done: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()

    def to_json(self) -> JSON:
        return {"done": list(self.done), "failed": list(self.failed)}


@dataclass(slots=True)
class _Run:
    done: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _key(obj: Mapping[str, Any]) -> str:
    meta = _meta(obj)
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class VPAController:
    """`reconcile(now)` decides from informer caches; `apply(plan)` carries it out."""

    name = names.CONTROLLER_VPA

    def __init__(
        self,
        cluster: Cluster,
        config: ResizeConfig | None = None,
        *,
        registry: CollectorRegistry | None = None,
        rr_config: ResourceRecommendConfig | None = None,
        source: UsageSource | None = None,
        settings: PykatalystSettings | None = None,
        informers: InformerFactory | None = None,
    ) -> None:
        self.cluster = cluster
        self.config = config if config is not None else ResizeConfig()
        # pykatalyst's recommender: where usage comes from, how often, with what settings
        self.rr_config = rr_config if rr_config is not None else ResourceRecommendConfig()
        rc = self.rr_config
        self.source = (
            source
            if source is not None
            else source_for(rc.prometheus_url, rc.prometheus_timeout_s, rc.prometheus_base_filter)
        )
        self.settings = settings if settings is not None else PykatalystSettings()
        self._recommend_due: dict[str, float] = {}
        self._changed_at: dict[str, float] = {}
        shared = informers if informers is not None else InformerFactory(cluster)
        self._kvpas = shared.informer(names.KATALYST_VERTICAL_POD_AUTOSCALER)
        self._recs = shared.informer(names.VPA_RECOMMENDATION)
        self._spds = shared.informer(names.SERVICE_PROFILE_DESCRIPTOR)
        self._pods = shared.informer(names.POD)
        self._cnrs = shared.informer(names.CUSTOM_NODE_RESOURCE)
        self._workloads = {k.kind: shared.informer(k) for k in WORKLOAD_INFORMERS}
        self.events = EventRecorder(cluster, names.CONTROLLER_COMPONENT)
        self.memories: dict[str, ResizeMemory] = {}
        self._requested: set[str] = set()
        self._evictions = TokenBucket(self.config.evict_qps, self.config.burst)
        self.resizes = Counter(
            "katalyst_vpa_resizes",
            "Pod resizes by the vpa controller, by outcome (requested, completed, evicted, "
            "eviction_blocked, refused, failed) and reason.",
            ["outcome", "reason"],
            registry=registry if registry is not None else CollectorRegistry(),
        )

    # --- gather and decide --------------------------------------------------------------

    def _sync(self) -> None:
        for inf in (self._kvpas, self._recs, self._spds, self._pods, self._cnrs):
            inf.sync()
        for inf in self._workloads.values():
            inf.sync()

    def reconcile(self, now: float) -> VPAPlan:
        self._sync()
        kvpas = {_key(k): dict(k) for k in self._kvpas.list()}
        by_ns: dict[str, dict[str, Mapping[str, Any]]] = {}
        for k in kvpas.values():
            by_ns.setdefault(str(_meta(k).get("namespace")), {})[str(_meta(k).get("name"))] = k
        recs = self._recs.list()
        rec_plan = self._decide_recs(kvpas, by_ns, recs, now)
        for r in rec_plan.recs:
            if r.kvpa_status is not None:
                k = kvpas[f"{r.key.split('/')[0]}/{r.kvpa}"]
                k["status"] = r.kvpa_status
        static = frozenset(
            str(_meta(c).get("name"))
            for c in self._cnrs.list()
            if (_meta(c).get("annotations") or {}).get(names.CNR_OVERCOMMIT_CPU_MANAGER_ANNOTATION)
            == names.CPU_MANAGER_POLICY_STATIC
        )
        budget = self._evictions.available(now)
        outcomes: list[KVPAOutcome] = []
        memories: dict[str, ResizeMemory] = {}
        stored = {_key(k): k.get("status") for k in self._kvpas.list()}
        for key in sorted(kvpas):
            out, kept = kv.decide_kvpa(
                self._inputs(kvpas[key], static), self.memories, now, self.config, budget
            )
            if out.status is not None and out.status == stored.get(key):
                out = replace(out, status=None)  # unchanged: no write
            budget -= sum(1 for p in out.pods if p.decision.outcome == resize.EVICT)
            memories.update(kept)
            outcomes.append(out)
        self.memories = memories
        return VPAPlan(now, rec_plan, tuple(outcomes))

    def _decide_recs(
        self,
        kvpas: Mapping[str, Mapping[str, Any]],
        by_ns: Mapping[str, Mapping[str, Mapping[str, Any]]],
        recs: list[JSON],
        now: float,
    ) -> vparec.VPARecPlan:
        actions: list[vparec.RecommendAction] = list(vparec.stale_recs(recs, by_ns))
        rec_of: dict[str, JSON] = {}
        for rec in recs:
            owner = vparec.owner_kvpa(rec, by_ns.get(str(_meta(rec).get("namespace")), {}))
            if not isinstance(owner, str):
                rec_of[_key(owner)] = rec
        oom: list[OOMEvent] | None = None
        for key in set(self._recommend_due) - set(kvpas):
            self._recommend_due.pop(key, None)
            self._changed_at.pop(key, None)
        for key, k in kvpas.items():
            name = vparec.recommender_of(k)
            action: vparec.RecommendAction | None = None
            if name == vpa.RECOMMENDER_AVG_LOAD_TO_CPU:
                inputs = vparec.RecommendInputs(k, rec_of.get(key), self._spd_for(k))
                action = vparec.decide_recommend(inputs)
            elif name == vparec.RECOMMENDER_PYKATALYST and now >= self._recommend_due.get(key, 0):
                self._recommend_due[key] = now + self.rr_config.vpa_interval_s
                oom = oom if oom is not None else self._oom(now)
                action = self._usage_recommend(key, k, rec_of.get(key), oom, now)
            if action is not None:
                actions.append(action)
        outcomes = []
        for r in recs:
            out = vparec.decide_rec(r, by_ns.get(str(_meta(r).get("namespace")), {}), now)
            if out.rec_status is not None and out.rec_status == r.get("status"):
                out = replace(out, rec_status=None)  # unchanged: no write
            outcomes.append(out)
        rec_names: dict[str, str | None] = {}
        for key, k in kvpas.items():
            want = str(_meta(rec_of[key]).get("name")) if key in rec_of else None
            if (_meta(k).get("annotations") or {}).get(names.VPA_REC_NAME_ANNOTATION) != want:
                rec_names[key] = want
        return vparec.VPARecPlan(now, tuple(actions), tuple(outcomes), rec_names)

    def _oom(self, now: float) -> list[OOMEvent]:
        """Katalyst's OOM records (the ConfigMap the ResourceRecommend controller keeps) with
        the kills the pods show now; read only, never written here."""
        try:
            cm: JSON | None = self.cluster.get(
                names.CONFIG_MAP, names.OOM_RECORD_CONFIG_MAP, names.KUBE_SYSTEM_NAMESPACE
            )
        except ApiError:  # NotFound included: no records yet
            cm = None
        records = oom_record.read(cm, names.OOM_RECORD_KEY)
        return oom_events(oom_record.merge(records, oom_record.observed(self._pods.list()), now))

    def _usage_recommend(
        self,
        key: str,
        kvpa: Mapping[str, Any],
        rec: Mapping[str, Any] | None,
        oom: list[OOMEvent],
        now: float,
    ) -> vparec.RecommendAction | None:
        """Gather the workload's usage and decide its VPARec with pykatalyst's recommender."""
        ns = str(_meta(kvpa).get("namespace"))
        ref = (kvpa.get("spec") or {}).get("targetRef") or {}
        workload = self._workload(ns, ref) if isinstance(ref, Mapping) else None
        if workload is None:
            return None  # the vpa decision says so on the KVPA
        begin = now - min(self.settings.history_s, self.rr_config.max_history_s)
        series: Mapping[str, Any] | None = None
        error = ""
        try:
            series = self.source.read(ns, str(ref.get("name")), str(ref.get("kind")), begin, now)
        except (PrometheusError, SourceUnavailable) as exc:
            error = str(exc)
        inputs = vparec.UsageInputs(
            kvpa, rec, series, template_resources(workload), oom, error, self._changed_at.get(key)
        )
        action = vparec.decide_usage_recommend(inputs, self.settings, now)
        if action is not None and (action.spec is not None or action.create is not None):
            self._changed_at[key] = now
        return action

    def _spd_for(self, kvpa: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The SPD of the KVPA's workload: the one its annotation names, else the one
        whose targetRef is the workload."""
        ns = str(_meta(kvpa).get("namespace"))
        ref = (kvpa.get("spec") or {}).get("targetRef") or {}
        workload = self._workload(ns, ref)
        named = (_meta(workload or {}).get("annotations") or {}).get(names.SPD_NAME_ANNOTATION)
        if named:
            return self._spds.get(str(named), ns)
        for spd in self._spds.list():
            t = (spd.get("spec") or {}).get("targetRef") or {}
            if _meta(spd).get("namespace") == ns and (t.get("kind"), t.get("name")) == (
                ref.get("kind"),
                ref.get("name"),
            ):
                return spd
        return None

    def _workload(self, ns: str, ref: Mapping[str, Any]) -> Mapping[str, Any] | None:
        inf = self._workloads.get(str(ref.get("kind")))
        return inf.get(str(ref.get("name")), ns) if inf is not None else None

    def _inputs(self, kvpa: Mapping[str, Any], static: frozenset[str]) -> KVPAInputs:
        ns = str(_meta(kvpa).get("namespace"))
        ref = (kvpa.get("spec") or {}).get("targetRef") or {}
        workload = self._workload(ns, ref if isinstance(ref, Mapping) else {})
        pods: list[JSON] = []
        if workload is not None:
            try:
                sel, _ = kv.workload_selector(workload)
                pods = [
                    p
                    for p in self._pods.list()
                    if _meta(p).get("namespace") == ns and sel.matches(_meta(p).get("labels") or {})
                ]
            except BadRequest:
                pods = []
        return KVPAInputs(kvpa, workload, pods, static)

    # --- execute ------------------------------------------------------------------------

    def apply(self, plan: VPAPlan) -> VPAResult:
        run = _Run()
        self._apply_recommend(plan, run)
        self._apply_recs(plan, run)
        for out in plan.kvpas:
            self._apply_kvpa(out, plan.time, run)
        return VPAResult(tuple(run.done), tuple(run.failed))

    def run(self, now: float) -> tuple[VPAPlan, VPAResult]:
        plan = self.reconcile(now)
        return plan, self.apply(plan)

    def _try(self, run: _Run, what: str, fn: Any, *args: Any, **kw: Any) -> bool:
        try:
            fn(*args, **kw)
        except NotFound:
            return False
        except ApiError as exc:
            run.failed.append(f"{what}: {exc}")
            return False
        run.done.append(what)
        return True

    def _apply_recommend(self, plan: VPAPlan, run: _Run) -> None:
        kind = names.VPA_RECOMMENDATION
        for a in plan.recs.recommend:
            what = f"vparec {a.namespace}/{a.name}"
            if a.delete:
                self._try(run, f"delete {what}", self.cluster.delete, kind, a.name, a.namespace)
            elif a.create is not None:
                self._try(run, f"create {what}", self.cluster.create, kind, a.create, a.namespace)
            elif a.spec is not None:
                body: JSON = {"spec": a.spec}
                if a.annotations:
                    body["metadata"] = {"annotations": dict(a.annotations)}
                self._try(run, f"spec {what}", self.cluster.patch, kind, a.name, body, a.namespace)
            else:
                ref = self._kvpa_ref(f"{a.namespace}/{a.name}", a.kvpa_uid)
                reason = EVENT_RECOMMEND_FAILED
                self.events.record(ref, "Warning", reason, a.message, plan.time)

    def _apply_recs(self, plan: VPAPlan, run: _Run) -> None:
        kind = names.VPA_RECOMMENDATION
        for r in plan.recs.recs:
            ns, _, name = r.key.partition("/")
            if r.rec_status is not None:
                body = {"status": r.rec_status}
                self._try(
                    run,
                    f"status vparec {r.key}",
                    self.cluster.patch,
                    kind,
                    name,
                    body,
                    ns,
                    subresource="status",
                )
        for key, value in plan.recs.rec_names.items():
            ns, _, name = key.partition("/")
            body = {"metadata": {"annotations": {names.VPA_REC_NAME_ANNOTATION: value}}}
            self._try(
                run,
                f"recName kvpa {key}",
                self.cluster.patch,
                names.KATALYST_VERTICAL_POD_AUTOSCALER,
                name,
                body,
                ns,
            )

    def _kvpa_ref(self, key: str, uid: str) -> ObjectRef:
        ns, _, name = key.partition("/")
        kind = names.KATALYST_VERTICAL_POD_AUTOSCALER
        return ObjectRef(kind.kind, name, ns, uid, kind.api_version)

    def _apply_kvpa(self, out: KVPAOutcome, now: float, run: _Run) -> None:
        ns, _, name = out.key.partition("/")
        kind = names.KATALYST_VERTICAL_POD_AUTOSCALER
        if out.error:
            ref = self._kvpa_ref(out.key, out.uid)
            self.events.record(ref, "Warning", EVENT_INVALID, out.error, now)
        if out.workload is not None:
            wkind = kv.WORKLOAD_KINDS[out.workload[0]]
            body: JSON = {"metadata": {"annotations": {names.VPA_NAME_ANNOTATION: name}}}
            self._try(
                run,
                f"annotate {out.workload[0]} {ns}/{out.workload[1]}",
                self.cluster.patch,
                wkind,
                out.workload[1],
                body,
                ns,
            )
        if out.owner_refs is not None:
            body = {"metadata": {"ownerReferences": out.owner_refs}}
            self._try(run, f"owners kvpa {out.key}", self.cluster.patch, kind, name, body, ns)
        failed_pods = [p for p in out.pods if not self._apply_pod(out, p, now, run)]
        status = out.status
        if status is not None and failed_pods:
            status = {
                **status,
                "conditions": kv.set_condition(
                    status.get("conditions") or [],
                    vpa.COND_RECOMMENDATION_UPDATED,
                    "False",
                    vpa.REASON_ILLEGAL,
                    "failed to update pod annotations",
                    now,
                ),
            }
        if status is not None:
            self._try(
                run,
                f"status kvpa {out.key}",
                self.cluster.patch,
                kind,
                name,
                {"status": status},
                ns,
                subresource="status",
            )

    def _apply_pod(self, out: KVPAOutcome, p: PodAction, now: float, run: _Run) -> bool:
        ns, _, name = p.key.partition("/")
        if p.annotations:
            body: JSON = {"metadata": {"annotations": dict(p.annotations)}}
            if not self._try(
                run, f"annotate pod {p.key}", self.cluster.patch, names.POD, name, body, ns
            ):
                return False
        d = p.decision
        if d.outcome == resize.RESIZE and d.resize_body is not None:
            ok = self._try(
                run,
                f"resize pod {p.key}",
                self.cluster.patch,
                names.POD,
                name,
                dict(d.resize_body),
                ns,
                patch_type="strategic",
                subresource="resize",
            )
            self._tell(
                out, p, now, EVENT_RESIZE if ok else EVENT_REFUSED, "requested" if ok else "failed"
            )
            if ok:
                self._requested.add(p.uid)
            return ok
        if d.outcome == resize.EVICT:
            return self._evict(out, p, now, run)
        if d.outcome == resize.REFUSED:
            self._tell(out, p, now, EVENT_REFUSED, "refused")
        if d.outcome == resize.APPLIED and p.uid in self._requested:
            self._requested.discard(p.uid)
            self._tell(out, p, now, EVENT_RESIZED, "completed")
        return True

    def _evict(self, out: KVPAOutcome, p: PodAction, now: float, run: _Run) -> bool:
        ns, _, name = p.key.partition("/")
        try:
            self.cluster.evict(ns, name)
        except TooManyRequests as exc:
            self._tell(out, p, now, EVENT_BLOCKED, "eviction_blocked", extra=f": {exc.message}")
            return True
        except NotFound:
            return True
        except ApiError as exc:
            run.failed.append(f"evict pod {p.key}: {exc}")
            return False
        self._evictions.take(1)
        run.done.append(f"evict pod {p.key}")
        self._tell(out, p, now, EVENT_FALLBACK, "evicted")
        return True

    def _tell(
        self, out: KVPAOutcome, p: PodAction, now: float, reason: str, outcome: str, extra: str = ""
    ) -> None:
        d = p.decision
        message = f"{d.message}{extra}"
        record = DecisionRecord(
            time=now,
            node=p.node,
            kind=f"vpa-{outcome}",
            plugin=PLUGIN,
            reason=d.reason,
            message=message,
            object_key=p.key,
            object_uid=p.uid,
            signal=str(d.terms.get("kubelet", "")),
            observed=d.terms.get("deferred_s"),
            threshold=self.config.deferred_timeout_s if "deferred_s" in d.terms else None,
        )
        warn = outcome in ("refused", "failed", "evicted", "eviction_blocked")
        etype = "Warning" if warn else "Normal"
        self.events.record(
            ObjectRef.pod(p.key, p.uid), etype, reason, message, now, decision=record
        )
        kmsg = f"pod {p.key}: {message}"
        self.events.record(self._kvpa_ref(out.key, out.uid), etype, reason, kmsg, now)
        self.resizes.labels(outcome, d.reason).inc()
