"""The `vpa` controller's decisions: a KatalystVerticalPodAutoscaler applied to its pods.

For each KVPA (v1alpha1 shape), as Katalyst's `vpa` and `vpa-status` sub-controllers do:

- the workload (`spec.targetRef`: Deployment, StatefulSet, ReplicaSet) gets
  `vpa.katalyst.kubewharf.io/name`; with `vpa.katalyst.kubewharf.io/retentionPolicy: retain`
  the KVPA gets an ownerReference to it (deleted with it), otherwise that reference goes;
- its pods are the workload's selector's (or `vpa.katalyst.kubewharf.io/selector`'s):
  `NoPodsMatched` says whether there are any;
- `podMatchingStrategy` picks the pods to change (All, ForFreshPod: created after the KVPA,
  ForHistoricalPod: before it); `Recreate` is refused (`RecommendationUpdated=False`,
  Illegal), as in Katalyst;
- each pod's targets are the status's pod-level recommendations over its container-level
  ones (`podApplyStrategy: Pod` drops the latter); they are written to
  `pod.kubernetes.io/resizeResources` (and `pod.kubernetes.io/resizePolicy`) and — what
  Katalyst leaves to a patched kubelet — applied by `controllers.resize`: a `pods/resize`
  patch, or an eviction when `BestEffortInplace` cannot resize in place;
- `RecommendationApplied` is True when the kubelet reports the targets for every active pod
  that has some (`status.containerStatuses[].resources`, not the spec), else False with
  Katalyst's message and, per pod, why.

`decide_kvpa` is pure; `controllers.vpa_controller` gathers and executes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from pykatalyst.api import names, vpa
from pykatalyst.api.timefmt import rfc3339
from pykatalyst.api.vpa import KVPA, KVPAError, Target
from pykatalyst.cluster.protocol import BadRequest
from pykatalyst.cluster.selectors import label_selector_from_dict, parse_label_selector
from pykatalyst.controllers import resize
from pykatalyst.controllers.resize import PodDecision, ResizeConfig, ResizeMemory

JSON = dict[str, Any]
WORKLOAD_KINDS: Final = {
    k.kind: k for k in (names.DEPLOYMENT, names.STATEFUL_SET, names.REPLICA_SET)
}
RECREATE_REFUSED: Final = "PodUpdatingStrategy mustn't be PodUpdatingStrategyRecreate"
# How many pods a condition message names before "and N more".
MESSAGE_PODS: Final = 5


@dataclass(frozen=True, slots=True)
class PodAction:
    """One pod's part of the plan: annotation changes (None: remove) and the decision."""

    key: str
    uid: str
    node: str
    decision: PodDecision
    annotations: Mapping[str, str | None] = field(default_factory=dict)

    def to_json(self) -> JSON:
        d = self.decision
        out: JSON = {"pod": self.key, "outcome": d.outcome, "reason": d.reason}
        out["message"] = d.message
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        return out


@dataclass(frozen=True, slots=True)
class KVPAOutcome:
    """What one KVPA needs: its workload's annotation, its ownerReferences, its status and
    its pods. `error` names the field of a KVPA that could not be read."""

    key: str
    uid: str
    error: str = ""
    workload: tuple[str, str] | None = None  # (kind, name) to annotate with the KVPA name
    owner_refs: list[JSON] | None = None  # the new metadata.ownerReferences, None: as is
    status: JSON | None = None  # the new status, None: as is
    pods: tuple[PodAction, ...] = ()
    notes: tuple[str, ...] = ()

    def to_json(self) -> JSON:
        out: JSON = {"kvpa": self.key}
        if self.error:
            out["error"] = self.error
        if self.pods:
            out["pods"] = [p.to_json() for p in self.pods]
        if self.notes:
            out["notes"] = list(self.notes)
        return out


# --- conditions -----------------------------------------------------------------------------


def set_condition(
    conditions: Sequence[Mapping[str, Any]],
    ctype: str,
    status: str,
    reason: str,
    message: str,
    now: float,
) -> list[JSON]:
    """The conditions with `ctype` set; its lastTransitionTime moves only when its status
    changes."""
    out: list[JSON] = []
    old: Mapping[str, Any] | None = None
    for c in conditions:
        if isinstance(c, Mapping) and c.get("type") == ctype:
            old = c
        elif isinstance(c, Mapping):
            out.append(dict(c))
    since = rfc3339(now)
    if old is not None and old.get("status") == status and old.get("lastTransitionTime"):
        since = str(old["lastTransitionTime"])
    new: JSON = {"type": ctype, "status": status, "reason": reason, "lastTransitionTime": since}
    if message:
        new["message"] = message
    out.append(new)
    return sorted(out, key=lambda c: str(c.get("type")))


def condition_of(obj: Mapping[str, Any], ctype: str) -> Mapping[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == ctype:
            return c
    return None


# --- pods of a workload ---------------------------------------------------------------------


def workload_selector(workload: Mapping[str, Any]) -> tuple[Any, str]:
    """(selector, its text) of a workload's pods: `vpa.katalyst.kubewharf.io/selector` when
    set, else `spec.selector`. BadRequest when neither reads."""
    meta = workload.get("metadata") or {}
    text = (meta.get("annotations") or {}).get(names.VPA_SELECTOR_ANNOTATION)
    if isinstance(text, str) and text:
        return parse_label_selector(text), text
    raw = (workload.get("spec") or {}).get("selector")
    if not isinstance(raw, Mapping) or not raw:
        raise BadRequest("spec.selector: the workload has no pod selector")
    sel = label_selector_from_dict(raw)
    return sel, str(sel)


def active(pod: Mapping[str, Any]) -> bool:
    """Katalyst's PodIsActive: not being deleted and not finished."""
    meta = pod.get("metadata") or {}
    phase = (pod.get("status") or {}).get("phase")
    return not meta.get("deletionTimestamp") and phase not in ("Succeeded", "Failed")


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


# --- the decision ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KVPAInputs:
    """What one KVPA's decision reads (gathered from informer caches)."""

    kvpa: Mapping[str, Any]
    workload: Mapping[str, Any] | None
    pods: Sequence[Mapping[str, Any]]
    static_nodes: frozenset[str] = frozenset()


def decide_kvpa(
    inputs: KVPAInputs,
    memories: Mapping[str, ResizeMemory],
    now: float,
    cfg: ResizeConfig,
    max_evictions: int,
) -> tuple[KVPAOutcome, dict[str, ResizeMemory]]:
    """Pure: one KVPA's workload annotation, ownerReferences, status and pod actions, and
    the resize memories (by pod uid) to keep."""
    obj = inputs.kvpa
    meta = obj.get("metadata") or {}
    key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    uid = str(meta.get("uid") or "")
    status = obj.get("status") if isinstance(obj.get("status"), Mapping) else {}
    assert isinstance(status, Mapping)
    conds: list[JSON] = list(status.get("conditions") or [])
    try:
        kvpa = vpa.read_kvpa(obj)
    except KVPAError as exc:
        conds = set_condition(
            conds, vpa.COND_RECOMMENDATION_UPDATED, "False", vpa.REASON_ILLEGAL, str(exc), now
        )
        return KVPAOutcome(key, uid, str(exc), status=_status(status, conds)), {}
    workload = inputs.workload
    gone = _workload_problem(kvpa, workload)
    if gone:
        conds = set_condition(
            conds, vpa.COND_NO_PODS_MATCHED, "True", vpa.REASON_NO_PODS_MATCHED, gone, now
        )
        return KVPAOutcome(key, uid, status=_status(status, conds), notes=(gone,)), {}
    assert workload is not None
    return _with_workload(kvpa, inputs, workload, status, conds, memories, now, cfg, max_evictions)


def _workload_problem(kvpa: KVPA, workload: Mapping[str, Any] | None) -> str:
    if kvpa.target_kind not in WORKLOAD_KINDS:
        accepted = ", ".join(WORKLOAD_KINDS)
        return f"Unsupported targetRef kind: {kvpa.target_kind} (accepted: {accepted})"
    if workload is None:
        return f"TargetRef workload not found: {kvpa.target_kind} {kvpa.target_name}"
    return ""


def _status(old: Mapping[str, Any], conds: list[JSON], **parts: Any) -> JSON:
    out = {k: v for k, v in old.items() if k != "conditions"}
    out.update(parts)
    out["conditions"] = conds
    return out


def owner_refs(kvpa: KVPA, obj: Mapping[str, Any], workload: Mapping[str, Any]) -> list[JSON]:
    """The KVPA's ownerReferences: with `retentionPolicy: retain` one to the workload
    (the KVPA goes with it), else none to it."""
    wmeta = workload.get("metadata") or {}
    wuid = str(wmeta.get("uid") or "")
    refs = [
        dict(r)
        for r in (obj.get("metadata") or {}).get("ownerReferences") or []
        if isinstance(r, Mapping) and r.get("uid") != wuid
    ]
    retain = kvpa.annotations.get(names.VPA_RETENTION_POLICY_ANNOTATION)
    if retain == names.VPA_RETENTION_POLICY_RETAIN:
        kind = WORKLOAD_KINDS[kvpa.target_kind]
        refs.append(
            {
                "apiVersion": kind.api_version,
                "kind": kind.kind,
                "name": str(wmeta.get("name") or ""),
                "uid": wuid,
            }
        )
    return refs


def _with_workload(
    kvpa: KVPA,
    inputs: KVPAInputs,
    workload: Mapping[str, Any],
    status: Mapping[str, Any],
    conds: list[JSON],
    memories: Mapping[str, ResizeMemory],
    now: float,
    cfg: ResizeConfig,
    max_evictions: int,
) -> tuple[KVPAOutcome, dict[str, ResizeMemory]]:
    key, wmeta = kvpa.key, workload.get("metadata") or {}
    annotate = None
    if (wmeta.get("annotations") or {}).get(names.VPA_NAME_ANNOTATION) != kvpa.name:
        annotate = (kvpa.target_kind, kvpa.target_name)
    refs = owner_refs(kvpa, inputs.kvpa, workload)
    have = list((inputs.kvpa.get("metadata") or {}).get("ownerReferences") or [])
    new_refs = refs if refs != have else None
    conds = _matched_condition(inputs.pods, workload, conds, now)
    base = KVPAOutcome(key, kvpa.uid, workload=annotate, owner_refs=new_refs)
    if kvpa.updating == vpa.STRATEGY_RECREATE:
        conds = set_condition(
            conds,
            vpa.COND_RECOMMENDATION_UPDATED,
            "False",
            vpa.REASON_ILLEGAL,
            RECREATE_REFUSED,
            now,
        )
        return _replace(base, status=_status(status, conds), notes=(RECREATE_REFUSED,)), {}
    try:
        pod_level, container_level = vpa.status_targets(status)
    except KVPAError as exc:
        conds = set_condition(
            conds, vpa.COND_RECOMMENDATION_UPDATED, "False", vpa.REASON_ILLEGAL, str(exc), now
        )
        return _replace(base, error=str(exc), status=_status(status, conds)), {}
    if kvpa.apply == vpa.APPLY_POD:
        container_level = {}
    actions, kept = _pod_actions(
        kvpa, inputs, pod_level, container_level, memories, now, cfg, max_evictions
    )
    conds = set_condition(
        conds, vpa.COND_RECOMMENDATION_UPDATED, "True", vpa.REASON_UPDATED, "", now
    )
    conds = _applied_condition(actions, inputs.pods, conds, now)
    new_status = _status(status, conds, **_with_current(status, inputs.pods))
    return _replace(base, status=new_status, pods=tuple(actions)), kept


def _replace(base: KVPAOutcome, **kw: Any) -> KVPAOutcome:
    return replace(base, **kw)


def _matched_condition(
    pods: Sequence[Mapping[str, Any]], workload: Mapping[str, Any], conds: list[JSON], now: float
) -> list[JSON]:
    if pods:
        return set_condition(
            conds,
            vpa.COND_NO_PODS_MATCHED,
            "False",
            vpa.REASON_PODS_MATCHED,
            "Pods match this VPA object",
            now,
        )
    message = "No pods match this VPA object"
    with contextlib.suppress(BadRequest):
        message += f", label selector: {workload_selector(workload)[1]}"
    return set_condition(
        conds, vpa.COND_NO_PODS_MATCHED, "True", vpa.REASON_NO_PODS_MATCHED, message, now
    )


def _pod_actions(
    kvpa: KVPA,
    inputs: KVPAInputs,
    pod_level: Mapping[tuple[str, str], Target],
    container_level: Mapping[str, Target],
    memories: Mapping[str, ResizeMemory],
    now: float,
    cfg: ResizeConfig,
    max_evictions: int,
) -> tuple[list[PodAction], dict[str, ResizeMemory]]:
    actions: list[PodAction] = []
    kept: dict[str, ResizeMemory] = {}
    for pod in sorted(inputs.pods, key=pod_key):
        if not active(pod) or not vpa.pod_matches(kvpa, pod):
            continue
        targets = vpa.pod_targets(pod, pod_level, container_level)
        if not targets:
            continue
        meta = pod.get("metadata") or {}
        uid, node = str(meta.get("uid") or ""), str((pod.get("spec") or {}).get("nodeName") or "")
        decision = resize.decide_pod(
            pod,
            targets,
            kvpa.updating,
            memories.get(uid),
            now,
            cfg,
            static_node=node in inputs.static_nodes,
        )
        if decision.outcome == resize.EVICT:
            if max_evictions <= 0:
                decision = _held(decision)
            max_evictions -= 1
        if decision.memory is not None:
            kept[uid] = decision.memory
        actions.append(
            PodAction(pod_key(pod), uid, node, decision, _annotations(kvpa, pod, targets, decision))
        )
    return actions, kept


def _held(d: PodDecision) -> PodDecision:
    return replace(
        d, outcome=resize.WAITING, message=f"{d.message}; held back by the eviction rate limit"
    )


def _annotations(
    kvpa: KVPA, pod: Mapping[str, Any], targets: Mapping[str, Target], d: PodDecision
) -> dict[str, str | None]:
    """Katalyst's annotations, written when the pod's spec differs from the targets and the
    strategy is not Off (and never for targets refused as illegal)."""
    if d.outcome in (resize.OFF, resize.APPLIED) or d.reason == resize.WHY_ILLEGAL:
        return {}
    if not vpa.differs(pod, targets):
        return {}
    have = (pod.get("metadata") or {}).get("annotations") or {}
    want: dict[str, str | None] = {
        names.POD_RESIZE_RESOURCES_ANNOTATION: vpa.annotation_text(targets),
        names.POD_RESIZE_POLICY_ANNOTATION: vpa.resize_policy_text(pod, kvpa.policies) or None,
    }
    return {k: v for k, v in want.items() if have.get(k) != v}


def _applied_condition(
    actions: Sequence[PodAction], pods: Sequence[Mapping[str, Any]], conds: list[JSON], now: float
) -> list[JSON]:
    failed = [a for a in actions if a.decision.outcome != resize.APPLIED]
    n_active = sum(1 for p in pods if active(p))
    if not failed:
        return set_condition(
            conds, vpa.COND_RECOMMENDATION_APPLIED, "True", vpa.REASON_POD_SPEC_UPDATED, "", now
        )
    message = f"failed to update {len(failed)} pods, active {n_active} pods, total {len(pods)} pods"
    why = [f"{a.key}: {a.decision.message}" for a in failed[:MESSAGE_PODS]]
    if len(failed) > MESSAGE_PODS:
        why.append(f"and {len(failed) - MESSAGE_PODS} more")
    message += "; " + "; ".join(why)
    return set_condition(
        conds, vpa.COND_RECOMMENDATION_APPLIED, "False", vpa.REASON_POD_SPEC_NO_UPDATE, message, now
    )


def _with_current(status: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """`current` of each recommendation: the figures of the pods' specs for the resources
    the target names (container-level: the first active pod with that container)."""
    by_name = {str((p.get("metadata") or {}).get("name")): p for p in pods if active(p)}
    out: dict[str, Any] = {}
    containers = [dict(c) for c in status.get("containerResources") or [] if isinstance(c, Mapping)]
    for c in containers:
        src = next((p for p in by_name.values() if _container(p, c.get("containerName"))), None)
        _fill_current(c, src)
    if "containerResources" in status:
        out["containerResources"] = containers
    pods_out = []
    for pr in status.get("podResources") or []:
        if not isinstance(pr, Mapping):
            continue
        pr = dict(pr)
        recs = [dict(c) for c in pr.get("containerRecommendations") or [] if isinstance(c, Mapping)]
        for c in recs:
            _fill_current(c, by_name.get(str(pr.get("podName"))))
        pr["containerRecommendations"] = recs
        pods_out.append(pr)
    if "podResources" in status:
        out["podResources"] = pods_out
    return out


def _container(pod: Mapping[str, Any], name: Any) -> Mapping[str, Any] | None:
    return next((c for c in vpa.containers_of(pod) if c.get("name") == name), None)


def _fill_current(entry: JSON, pod: Mapping[str, Any] | None) -> None:
    container = _container(pod, entry.get("containerName")) if pod is not None else None
    if container is None:
        return
    req, lim = vpa.spec_resources(container)
    for part, have in (("requests", req), ("limits", lim)):
        sub = entry.get(part)
        if not isinstance(sub, Mapping):
            continue
        sub = dict(sub)
        names_ = list((sub.get("target") or {}).keys())
        sub["current"] = {r: str(have[r]) for r in sorted(names_) if r in have}
        entry[part] = sub
