"""VerticalPodAutoscalerRecommendation (VPARec) -> KVPA status, and the in-tree recommender.

Katalyst's `vparec` sub-controller, as pure decisions:

- a VPARec belongs to the KVPA its one ownerReference names (same namespace, same uid);
  that KVPA's `status.podResources` / `status.containerResources` become the VPARec's
  recommendations merged with the `current` figures the status had, and cropped by the
  KVPA's container policies (`uncappedTarget` the recommendation, `target` clipped to
  `[minAllowed, maxAllowed]` over `controlledResources`, `controlledValues` keeping
  requests, limits or both);
- the VPARec's status mirrors what reached the KVPA, with `RecommendationUpdatedToVPA`
  (Updated); a VPARec that cannot be read gets it False (Illegal) naming the field, and
  the KVPA is left as it was; one with no KVPA gets `NoVPAMatched`;
- the KVPA carries `vpa.katalyst.kubewharf.io/recName`, removed when no VPARec matches.

And the `resourceRecommend` sub-controller: a KVPA whose `algorithmPolicy.recommender` is
`pykatalyst` gets a VPARec with each container's cpu and memory requests (and limits) from
pykatalyst's recommender over the workload's usage (`decide_usage_recommend`, the same call
the ResourceRecommend controller makes); one whose recommender is
`AvgLoadToCpuRequest` gets a VPARec (its name, an ownerReference to it, its labels) with
one cpu request per container: the time-weighted mean of `pod_cpu_load_1min` over the
`avg` entry of its workload's SPD `status.aggMetrics` (Σ load·window / Σ window). A VPARec
whose KVPA is gone, or names no recommender, is deleted (Katalyst's cleanVPARec).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from pykatalyst.api import duration, names, vpa
from pykatalyst.api.quantity import Quantity, QuantityError
from pykatalyst.api.vpa import ContainerPolicy, KVPAError
from pykatalyst.controllers.kvpa import set_condition
from pykatalyst.controllers.rr_status import cpu_quantity, memory_quantity
from pykatalyst.controllers.usage_recommend import recommend_container, terms_text
from pykatalyst.recommend import (
    CurrentResources,
    OOMEvent,
    Recommendation,
    RecommendationNotReady,
    UsageSeries,
    get_recommender,
    match_oom_records,
)
from pykatalyst.recommend.ensemble import PykatalystSettings

JSON = dict[str, Any]
CPU_LOAD_METRIC: Final = "pod_cpu_load_1min"
AGGREGATOR_AVG: Final = "avg"
RECOMMENDER_PYKATALYST: Final = "pykatalyst"


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def owner_kvpa(rec: Mapping[str, Any], kvpas: Mapping[str, Mapping[str, Any]]) -> Any:
    """The KVPA (by name in the rec's namespace) its single ownerReference names with the
    same uid; else the reason there is none (a str)."""
    refs = [r for r in _meta(rec).get("ownerReferences") or [] if isinstance(r, Mapping)]
    if len(refs) != 1:
        return f"vpaRec has {'no owner' if not refs else 'more than one owner'}"
    kvpa = kvpas.get(str(refs[0].get("name")))
    if kvpa is None:
        return f"KVPA {refs[0].get('name')} not found"
    if _meta(kvpa).get("uid") != refs[0].get("uid"):
        return f"KVPA {refs[0].get('name')} uid mismatch: it may have been deleted"
    return kvpa


# --- VPARec spec -> KVPA status -------------------------------------------------------------


def _rec_part(entry: Mapping[str, Any], part: str, where: str) -> dict[str, Quantity] | None:
    raw = entry.get(part)
    if not isinstance(raw, Mapping):
        return None
    return vpa.read_resources(raw.get("resources"), f"{where}.{part}.resources", negative=True)


def _name(entry: Any, key: str, where: str) -> str:
    value = entry.get(key) if isinstance(entry, Mapping) else None
    if not isinstance(value, str) or not value:
        raise KVPAError(f"{where}.{key}", "required")
    return value


def _old_entries(status: Mapping[str, Any]) -> tuple[dict[tuple[str, str], Any], dict[str, Any]]:
    pods: dict[tuple[str, str], Any] = {}
    for pr in status.get("podResources") or []:
        if isinstance(pr, Mapping):
            for c in pr.get("containerRecommendations") or []:
                if isinstance(c, Mapping):
                    pods[(str(pr.get("podName")), str(c.get("containerName")))] = c
    containers = {
        str(c.get("containerName")): c
        for c in status.get("containerResources") or []
        if isinstance(c, Mapping)
    }
    return pods, containers


def kvpa_status_from(
    rec_spec: Mapping[str, Any],
    policies: Mapping[str, ContainerPolicy],
    old_status: Mapping[str, Any],
) -> tuple[list[JSON], list[JSON]]:
    """(podResources, containerResources) of the KVPA status from a VPARec spec; the first
    unreadable entry raises KVPAError naming it. Sorted by name, descending, as Katalyst."""
    old_pods, old_containers = _old_entries(old_status)
    by_pod: dict[str, list[JSON]] = {}
    for i, pr in enumerate(rec_spec.get("podRecommendations") or []):
        where = f"spec.podRecommendations[{i}]"
        pod = _name(pr, "podName", where)
        for j, c in enumerate(pr.get("containerRecommendations") or []):
            cw = f"{where}.containerRecommendations[{j}]"
            cname = _name(c, "containerName", cw)
            if any(e["containerName"] == cname for e in by_pod.get(pod, [])):
                continue  # Katalyst keeps the first
            entry = vpa.container_status(
                cname,
                _rec_part(c, "requests", cw),
                _rec_part(c, "limits", cw),
                policies.get(cname),
                old_pods.get((pod, cname)),
            )
            by_pod.setdefault(pod, []).append(entry)
    containers: dict[str, JSON] = {}
    for i, c in enumerate(rec_spec.get("containerRecommendations") or []):
        cw = f"spec.containerRecommendations[{i}]"
        cname = _name(c, "containerName", cw)
        if cname in containers:
            continue
        containers[cname] = vpa.container_status(
            cname,
            _rec_part(c, "requests", cw),
            _rec_part(c, "limits", cw),
            policies.get(cname),
            old_containers.get(cname),
        )
    pods_out: list[JSON] = []
    for pod in sorted(by_pod, reverse=True):
        entries = sorted(by_pod[pod], key=lambda e: str(e["containerName"]), reverse=True)
        pods_out.append({"podName": pod, "containerRecommendations": entries})
    return pods_out, [containers[k] for k in sorted(containers, reverse=True)]


def rec_status_from(kvpa_status: Mapping[str, Any]) -> tuple[list[JSON], list[JSON]]:
    """What reached the KVPA, as recommendations (the targets): the VPARec's status."""

    def conv(c: Mapping[str, Any]) -> JSON:
        out: JSON = {"containerName": c.get("containerName")}
        for part in ("requests", "limits"):
            sub = c.get(part)
            if isinstance(sub, Mapping):
                out[part] = {"resources": dict(sub.get("target") or {})}
        return out

    pods = [
        {
            "podName": pr.get("podName"),
            "containerRecommendations": [
                conv(c) for c in pr.get("containerRecommendations") or [] if isinstance(c, Mapping)
            ],
        }
        for pr in kvpa_status.get("podResources") or []
        if isinstance(pr, Mapping) and pr.get("podName")
    ]
    containers = [
        conv(c)
        for c in kvpa_status.get("containerResources") or []
        if isinstance(c, Mapping) and c.get("containerName")
    ]
    return pods, containers


# --- the plan -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecOutcome:
    """One VPARec: the KVPA status to write (None: as is), its own status, and the KVPA's
    recName annotation (kvpa name, value; value None removes it)."""

    key: str
    kvpa: str = ""
    kvpa_status: JSON | None = None
    rec_status: JSON | None = None
    error: str = ""

    def to_json(self) -> JSON:
        out: JSON = {"vparec": self.key, "kvpa": self.kvpa or None}
        if self.error:
            out["error"] = self.error
        return out


def decide_rec(
    rec: Mapping[str, Any], kvpas: Mapping[str, Mapping[str, Any]], now: float
) -> RecOutcome:
    """Pure: one VPARec's effect on its KVPA's status and on its own."""
    meta = _meta(rec)
    key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    status = rec.get("status") if isinstance(rec.get("status"), Mapping) else {}
    assert isinstance(status, Mapping)
    conds = list(status.get("conditions") or [])
    kvpa = owner_kvpa(rec, kvpas)
    if isinstance(kvpa, str):
        conds = set_condition(conds, vpa.COND_NO_VPA_MATCHED, "True", "NoVPAMatched", kvpa, now)
        return RecOutcome(key, rec_status={**status, "conditions": conds}, error=kvpa)
    conds = set_condition(conds, vpa.COND_NO_VPA_MATCHED, "False", "VPAMatched", "", now)
    kname = str(_meta(kvpa).get("name"))
    kstatus = kvpa.get("status") if isinstance(kvpa.get("status"), Mapping) else {}
    assert isinstance(kstatus, Mapping)
    spec = rec.get("spec") if isinstance(rec.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)
    try:
        policies = vpa.read_kvpa(kvpa).policies
        pods, containers = kvpa_status_from(spec, policies, kstatus)
    except KVPAError as exc:
        conds = set_condition(
            conds,
            vpa.COND_UPDATED_TO_VPA,
            "False",
            vpa.RECOMMENDATION_REASON_ILLEGAL,
            str(exc),
            now,
        )
        return RecOutcome(key, kname, rec_status={**status, "conditions": conds}, error=str(exc))
    new_k = {**kstatus, "podResources": pods, "containerResources": containers}
    kvpa_status = new_k if _strip(new_k) != _strip(kstatus) else None
    rpods, rconts = rec_status_from(new_k)
    conds = set_condition(
        conds, vpa.COND_UPDATED_TO_VPA, "True", vpa.RECOMMENDATION_REASON_UPDATED, "", now
    )
    new_rec = {
        **status,
        "podRecommendations": rpods,
        "containerRecommendations": rconts,
        "conditions": conds,
    }
    return RecOutcome(key, kname, kvpa_status, new_rec)


def _strip(status: Mapping[str, Any]) -> JSON:
    return {
        "podResources": status.get("podResources") or [],
        "containerResources": status.get("containerResources") or [],
    }


# --- AvgLoadToCpuRequest ----------------------------------------------------------------------


def avg_load_to_cpu(spd: Mapping[str, Any] | None) -> dict[str, Quantity]:
    """Katalyst's AvgLoadToCpuRequest: container -> cpu request, the window-weighted mean
    of `pod_cpu_load_1min` in the SPD's `avg` aggMetrics (millicpu, rounded down). Raises
    ValueError saying what is missing."""
    if spd is None:
        raise ValueError("invalid spd: the workload has no ServiceProfileDescriptor")
    status = spd.get("status") if isinstance(spd.get("status"), Mapping) else {}
    assert isinstance(status, Mapping)
    for agg in status.get("aggMetrics") or []:
        if not isinstance(agg, Mapping) or agg.get("aggregator") != AGGREGATOR_AVG:
            continue
        sums: dict[str, tuple[float, float]] = {}
        for item in agg.get("items") or []:
            if not isinstance(item, Mapping):
                continue
            try:
                window = duration.parse_duration(item.get("window") or 0)
            except duration.DurationError:
                continue
            for c in item.get("containers") or []:
                load = (
                    (c.get("usage") or {}).get(CPU_LOAD_METRIC) if isinstance(c, Mapping) else None
                )
                try:
                    value = Quantity.parse(str(load)).as_float() if load is not None else None
                except QuantityError:
                    value = None
                if value is None:
                    continue
                name = str(c.get("name"))
                integral, total = sums.get(name, (0.0, 0.0))
                sums[name] = (integral + int(value * window * 1000) / 1000, total + window)
        out = {n: Quantity.from_milli(int(i / t * 1000)) for n, (i, t) in sums.items() if t > 0}
        if not out:
            raise ValueError("failed to compute avg loads")
        return out
    raise ValueError("cannot find avg metrics")


@dataclass(frozen=True, slots=True)
class RecommendAction:
    """The in-tree recommender's writes: a VPARec to create or whose spec to set, or one
    to delete (`delete`)."""

    namespace: str
    name: str
    spec: JSON | None = None
    create: JSON | None = None
    delete: bool = False
    message: str = ""
    kvpa_uid: str = ""
    annotations: Mapping[str, str] | None = None  # set with the spec (the terms behind it)

    def to_json(self) -> JSON:
        what = "delete" if self.delete else "create" if self.create else "update"
        return {"vparec": f"{self.namespace}/{self.name}", "action": what, "message": self.message}


def recommend_spec(loads: Mapping[str, Quantity]) -> JSON:
    return {
        "containerRecommendations": [
            {"containerName": n, "requests": {"resources": {"cpu": str(q)}}}
            for n, q in sorted(loads.items())
        ]
    }


def new_rec(
    kvpa: Mapping[str, Any], spec: JSON, annotations: Mapping[str, str] | None = None
) -> JSON:
    meta = _meta(kvpa)
    kind = names.KATALYST_VERTICAL_POD_AUTOSCALER
    extra: JSON = {"annotations": dict(annotations)} if annotations else {}
    return {
        "apiVersion": names.VPA_RECOMMENDATION.api_version,
        "kind": names.VPA_RECOMMENDATION.kind,
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "labels": dict(meta.get("labels") or {}),
            **extra,
            "ownerReferences": [
                {
                    "apiVersion": kind.api_version,
                    "kind": kind.kind,
                    "name": meta.get("name"),
                    "uid": meta.get("uid"),
                }
            ],
        },
        "spec": spec,
    }


@dataclass(frozen=True, slots=True)
class RecommendInputs:
    kvpa: Mapping[str, Any]
    rec: Mapping[str, Any] | None
    spd: Mapping[str, Any] | None


def decide_recommend(inputs: RecommendInputs) -> RecommendAction | None:
    """Pure: the in-tree recommender's write for one KVPA naming it (None: nothing)."""
    meta = _meta(inputs.kvpa)
    ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    try:
        loads = avg_load_to_cpu(inputs.spd)
    except ValueError as exc:
        return RecommendAction(ns, name, message=str(exc), kvpa_uid=str(meta.get("uid") or ""))
    spec = recommend_spec(loads)
    if inputs.rec is None:
        return RecommendAction(ns, name, create=new_rec(inputs.kvpa, spec), message="created")
    if inputs.rec.get("spec") == spec:
        return None
    rname = str(_meta(inputs.rec).get("name"))
    return RecommendAction(ns, rname, spec=spec, message="cpu requests from the avg load")


# --- pykatalyst's recommender -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UsageInputs:
    """What pykatalyst's recommender reads for one KVPA: its VPARec (None: none yet), the
    workload's usage per container (None: the source failed and `error` says why), what
    the pod template declares per container, the OOM records, and when this controller
    last changed the VPARec's spec (None: not since it started)."""

    kvpa: Mapping[str, Any]
    rec: Mapping[str, Any] | None
    series: Mapping[str, UsageSeries] | None
    template: Mapping[str, CurrentResources]
    oom: Sequence[OOMEvent] = ()
    error: str = ""
    changed_at: float | None = None


def policy_settings(base: PykatalystSettings, policy: ContainerPolicy | None) -> PykatalystSettings:
    """The settings for one container: the policy's minAllowed / maxAllowed (so an OOM
    bump never asks for more than maxAllowed) and its controlledValues."""
    if policy is None:
        return base
    update: dict[str, Any] = {
        "controlled_values": "RequestsOnly"
        if policy.controlled_values == vpa.VALUES_REQUESTS
        else "RequestsAndLimits"
    }
    for field_name, bounds, resource in (
        ("min_allowed_cpu", policy.min_allowed, names.RESOURCE_CPU),
        ("min_allowed_memory", policy.min_allowed, names.RESOURCE_MEMORY),
        ("max_allowed_cpu", policy.max_allowed, names.RESOURCE_CPU),
        ("max_allowed_memory", policy.max_allowed, names.RESOURCE_MEMORY),
    ):
        if resource in bounds:
            update[field_name] = bounds[resource].as_float()
    return base.model_copy(update=update)


def _figure(part: Any, resource: str) -> float | None:
    res = part.get("resources") if isinstance(part, Mapping) else None
    raw = res.get(resource) if isinstance(res, Mapping) else None
    try:
        return Quantity.parse(str(raw)).as_float() if raw is not None else None
    except QuantityError:
        return None


def _pair(
    req: float | None, lim: float | None, d_req: float | None, d_lim: float | None
) -> tuple[float | None, float | None]:
    """One resource's current (request, limit): the last recommendation where it has a
    request (its limit, or the declared one in the declared ratio), else as declared."""
    if req is None:
        return d_req, d_lim
    if lim is None and d_lim is not None and d_req:
        lim = req * d_lim / d_req
    return req, lim if lim is not None else d_lim


def current_of(inputs: UsageInputs, container: str) -> CurrentResources | None:
    """What the container runs with now as far as the recommender is concerned: what the
    VPARec last recommended (the pods are resized to it), else what the template declares."""
    declared = inputs.template.get(container) or CurrentResources()
    spec = (inputs.rec or {}).get("spec")
    entries = spec.get("containerRecommendations") if isinstance(spec, Mapping) else None
    last = next(
        (
            e
            for e in entries or []
            if isinstance(e, Mapping) and e.get("containerName") == container
        ),
        None,
    )
    if last is None:
        return replace(declared, changed_at=inputs.changed_at)
    cpu = _pair(
        _figure(last.get("requests"), names.RESOURCE_CPU),
        _figure(last.get("limits"), names.RESOURCE_CPU),
        declared.cpu_request,
        declared.cpu_limit,
    )
    mem = _pair(
        _figure(last.get("requests"), names.RESOURCE_MEMORY),
        _figure(last.get("limits"), names.RESOURCE_MEMORY),
        declared.memory_request,
        declared.memory_limit,
    )
    return CurrentResources(cpu[0], mem[0], cpu[1], mem[1], inputs.changed_at, declared.throttled)


def _entry(container: str, r: Recommendation) -> JSON:
    req: dict[str, str] = {}
    lim: dict[str, str] = {}
    pairs = ((req, r.cpu_request, r.memory_request), (lim, r.cpu_limit, r.memory_limit))
    for out, cpu, mem in pairs:
        if cpu is not None:
            out[names.RESOURCE_CPU] = cpu_quantity(cpu)
        if mem is not None:
            out[names.RESOURCE_MEMORY] = memory_quantity(mem)
    entry: JSON = {"containerName": container, "requests": {"resources": req}}
    if lim:
        entry["limits"] = {"resources": lim}
    return entry


def decide_usage_recommend(
    inputs: UsageInputs, settings: PykatalystSettings, now: float
) -> RecommendAction | None:
    """Pure: pykatalyst's recommendation for one KVPA naming it, as its VPARec's spec (and
    the terms behind it as an annotation); a message alone when it cannot recommend (the
    source failed, or a container's history is too short); None when nothing changes."""
    meta = _meta(inputs.kvpa)
    ns, name, uid = (str(meta.get(k) or "") for k in ("namespace", "name", "uid"))
    if inputs.series is None:
        return RecommendAction(ns, name, message=f"usage: {inputs.error}", kvpa_uid=uid)
    try:
        parsed = vpa.read_kvpa(inputs.kvpa)
    except KVPAError:
        return None  # the vpa decision reports it on the KVPA
    engine = get_recommender(RECOMMENDER_PYKATALYST)
    entries: list[JSON] = []
    terms: dict[str, Any] = {}
    for container in sorted(inputs.template):
        policy = parsed.policies.get(container) or parsed.policies.get("*")
        series = inputs.series.get(container) or UsageSeries.of([], [], [])
        events = match_oom_records(inputs.oom, ns, parsed.target_name, container)
        try:
            r = recommend_container(
                engine,
                series,
                now,
                policy_settings(settings, policy),
                events,
                current_of(inputs, container),
            )
        except RecommendationNotReady as exc:
            message = f"container {container}: {exc.message}"
            return RecommendAction(ns, name, message=message, kvpa_uid=uid)
        entries.append(_entry(container, r))
        terms[container] = {"recommender": r.recommender, **r.to_json()["terms"]}
    if not entries:
        message = "the workload's pod template has no containers"
        return RecommendAction(ns, name, message=message, kvpa_uid=uid)
    spec: JSON = {"containerRecommendations": entries}
    ann = {names.RECOMMENDATION_TERMS_ANNOTATION: terms_text(terms, now)}
    if inputs.rec is None:
        return RecommendAction(ns, name, create=new_rec(inputs.kvpa, spec, ann), message="created")
    if inputs.rec.get("spec") == spec:
        return None
    rname = str(_meta(inputs.rec).get("name"))
    why = "requests and limits from pykatalyst's recommender"
    return RecommendAction(ns, rname, spec=spec, message=why, annotations=ann)


def stale_recs(
    recs: Sequence[Mapping[str, Any]], kvpas_by_ns: Mapping[str, Mapping[str, Mapping[str, Any]]]
) -> list[RecommendAction]:
    """Katalyst's cleanVPARec: VPARecs whose KVPA is gone, or names no recommender."""
    out = []
    for rec in recs:
        meta = _meta(rec)
        ns = str(meta.get("namespace") or "")
        kvpa = owner_kvpa(rec, kvpas_by_ns.get(ns, {}))
        gone = isinstance(kvpa, str) and "not found" in kvpa
        unnamed = not isinstance(kvpa, str) and not recommender_of(kvpa)
        if gone or unnamed:
            why = kvpa if isinstance(kvpa, str) else "its KVPA names no recommender"
            out.append(RecommendAction(ns, str(meta.get("name")), delete=True, message=why))
    return out


def recommender_of(kvpa: Mapping[str, Any]) -> str:
    rp = (kvpa.get("spec") or {}).get("resourcePolicy") or {}
    algo = rp.get("algorithmPolicy") if isinstance(rp, Mapping) else None
    return str((algo or {}).get("recommender") or "") if isinstance(algo, Mapping) else ""


@dataclass(frozen=True, slots=True)
class VPARecPlan:
    time: float
    recommend: tuple[RecommendAction, ...] = ()
    recs: tuple[RecOutcome, ...] = ()
    rec_names: Mapping[str, str | None] = field(default_factory=dict)  # kvpa key -> recName

    def to_json(self) -> JSON:
        return {
            "recommend": [a.to_json() for a in self.recommend],
            "vparecs": [r.to_json() for r in self.recs],
        }
