"""`katalyst explain pod`, vertical part: the pod's KatalystVerticalPodAutoscaler, the
targets it has for the pod and where they came from, what the pod's spec and the kubelet
(`status.containerStatuses[].resources`) have, the kubelet's resize conditions, and why a
resize did or did not happen: the vpa controller's decision for the pod now (the same pure
`decide_pod` the controller runs) and its last resize Event."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pykatalyst.api import names, vpa
from pykatalyst.api.vpa import KVPAError, Target
from pykatalyst.cli.output import print_table
from pykatalyst.cluster.protocol import JSON, ApiError, Cluster
from pykatalyst.controllers import resize
from pykatalyst.controllers.kvpa import WORKLOAD_KINDS, workload_selector
from pykatalyst.controllers.resize import ResizeConfig
from pykatalyst.webhook.pods import workload_candidates

RESIZE_EVENTS = (
    "ResizeRequested",
    "Resized",
    "ResizeFallbackEviction",
    "ResizeEvictionBlocked",
    "ResizeRefused",
)


def _kvpa_for(cluster: Cluster, pod: Mapping[str, Any], ns: str) -> JSON | None:
    try:
        kvpas = cluster.list(names.KATALYST_VERTICAL_POD_AUTOSCALER, ns).items
    except ApiError:
        return None
    wanted = set(workload_candidates(pod))
    labels = (pod.get("metadata") or {}).get("labels") or {}
    for k in kvpas:
        ref = (k.get("spec") or {}).get("targetRef") or {}
        if (ref.get("kind"), ref.get("name")) in wanted or _selects(cluster, ns, ref, labels):
            return k
    return None


def _selects(cluster: Cluster, ns: str, ref: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether the workload `ref` names selects pods with these labels (as the vpa
    controller finds a KVPA's pods)."""
    kind = WORKLOAD_KINDS.get(str(ref.get("kind")))
    if kind is None:
        return False
    try:
        workload = cluster.get(kind, str(ref.get("name")), ns)
        return bool(workload_selector(workload)[0].matches(labels))
    except ApiError:
        return False


def _shapes(shapes: Mapping[str, tuple[Mapping[str, Any], Mapping[str, Any]]]) -> JSON:
    return {
        c: {
            "requests": {r: str(q) for r, q in sorted(req.items())},
            "limits": {r: str(q) for r, q in sorted(lim.items())},
        }
        for c, (req, lim) in shapes.items()
    }


def vertical_json(cluster: Cluster, pod: JSON, now: float, problems: list[str]) -> JSON | None:
    """The vertical-scaling part of `explain pod`; None when no KVPA targets the pod's
    workload."""
    meta = pod.get("metadata") or {}
    ns = str(meta.get("namespace") or "")
    obj = _kvpa_for(cluster, pod, ns)
    if obj is None:
        return None
    out: JSON = {"kvpa": f"{ns}/{(obj.get('metadata') or {}).get('name')}"}
    try:
        kvpa = vpa.read_kvpa(obj)
        pod_level, container_level = vpa.status_targets(obj.get("status") or {})
    except KVPAError as exc:
        out["why"] = f"the KVPA cannot be read: {exc}"
        return out
    if kvpa.apply == vpa.APPLY_POD:
        container_level = {}
    targets = vpa.pod_targets(pod, pod_level, container_level)
    out.update(
        strategy=kvpa.updating,
        matching=kvpa.matching,
        recommender=kvpa.recommender or None,
        source=_source(pod, pod_level, container_level),
        targets={c: t.to_json() for c, t in targets.items()},
        spec=_shapes(vpa.applied(pod, {})),
        kubelet=_shapes(resize.actual_shapes(pod)),
        conditions=[
            f"{c.get('type')}/{c.get('reason')}: {c.get('message', '')}"
            for c in (pod.get("status") or {}).get("conditions") or []
            if c.get("type") in (resize.COND_RESIZE_PENDING, resize.COND_RESIZE_IN_PROGRESS)
        ],
        kvpa_conditions=[
            f"{c.get('type')}={c.get('status')} ({c.get('reason')}) {c.get('message', '')}".strip()
            for c in (obj.get("status") or {}).get("conditions") or []
        ],
    )
    out["why"] = _why(kvpa, pod, targets, now, _static_node(cluster, pod))
    out["last_event"] = _last_event(cluster, pod, problems)
    terms = _rec_terms(cluster, obj, ns)
    if terms:
        out["terms"] = terms
    return out


def _rec_terms(cluster: Cluster, kvpa: Mapping[str, Any], ns: str) -> JSON:
    """Per container, why the KVPA's VPARec says what it says, as its recommender wrote it
    (the `recommendation_terms` annotation pykatalyst's recommender leaves): the model, its
    replay cost, the next cheapest and the notes. Empty when the VPARec has none."""
    meta = kvpa.get("metadata") or {}
    name = (meta.get("annotations") or {}).get(names.VPA_REC_NAME_ANNOTATION) or meta.get("name")
    try:
        rec = cluster.get(names.VPA_RECOMMENDATION, str(name), ns)
        text = ((rec.get("metadata") or {}).get("annotations") or {}).get(
            names.RECOMMENDATION_TERMS_ANNOTATION
        )
        containers = json.loads(text).get("containers") if isinstance(text, str) else None
    except (ApiError, ValueError, AttributeError):
        return {}
    out: JSON = {}
    for container, per in (containers if isinstance(containers, Mapping) else {}).items():
        if not isinstance(per, Mapping):
            continue
        out[str(container)] = {
            resource: _terms_line(t)
            for resource, t in per.items()
            if isinstance(t, Mapping) and resource != "recommender"
        }
    return out


def _terms_line(terms: Mapping[str, Any]) -> str:
    text = str(terms.get("model") or "")
    if isinstance(terms.get("cost"), int | float):
        text += f", cost {terms['cost']:.4g}"
    for r in (terms.get("runners_up") or [])[:1]:
        if isinstance(r, Mapping) and isinstance(r.get("cost"), int | float):
            text += f"; next {r.get('model')} (cost {r['cost']:.4g})"
    notes = terms.get("notes")
    if isinstance(notes, list) and notes:
        text += "; " + "; ".join(str(n) for n in notes)
    return text


def _static_node(cluster: Cluster, pod: Mapping[str, Any]) -> bool:
    """Whether the pod's node runs the kubelet's static cpu manager, as its CNR says (the
    agent's `overcommit_cpu_manager` annotation, as the vpa controller reads it)."""
    node = (pod.get("spec") or {}).get("nodeName")
    if not node:
        return False
    try:
        cnr = cluster.get(names.CUSTOM_NODE_RESOURCE, str(node))
    except ApiError:
        return False
    ann = (cnr.get("metadata") or {}).get("annotations") or {}
    return bool(
        ann.get(names.CNR_OVERCOMMIT_CPU_MANAGER_ANNOTATION) == names.CPU_MANAGER_POLICY_STATIC
    )


def _source(
    pod: Mapping[str, Any],
    pod_level: Mapping[tuple[str, str], Target],
    container_level: Mapping[str, Target],
) -> JSON:
    name = str((pod.get("metadata") or {}).get("name") or "")
    out: JSON = {}
    for c in vpa.containers_of(pod):
        cname = str(c.get("name") or "")
        if (name, cname) in pod_level:
            out[cname] = "status.podResources (this pod)"
        elif cname in container_level:
            out[cname] = "status.containerResources"
    return out


def _why(
    kvpa: vpa.KVPA,
    pod: Mapping[str, Any],
    targets: Mapping[str, Target],
    now: float,
    static_node: bool = False,
) -> str:
    if not vpa.pod_matches(kvpa, pod):
        return f"podMatchingStrategy {kvpa.matching}: this pod is left alone"
    if not targets:
        return "the KVPA has no recommendation for this pod's containers yet"
    if kvpa.updating == vpa.STRATEGY_RECREATE:
        return "podUpdatingStrategy Recreate is refused (as in Katalyst): nothing is applied"
    d = resize.decide_pod(
        pod, targets, kvpa.updating, None, now, ResizeConfig(), static_node=static_node
    )
    return f"{d.outcome}: {d.message}"


def _last_event(cluster: Cluster, pod: Mapping[str, Any], problems: list[str]) -> JSON | None:
    meta = pod.get("metadata") or {}
    selector = f"involvedObject.kind=Pod,involvedObject.name={meta.get('name')}"
    try:
        items = cluster.list(names.EVENT, str(meta.get("namespace")), field_selector=selector).items
    except ApiError as exc:
        problems.append(f"cannot list Events: {exc}")
        return None
    ours = [e for e in items if e.get("reason") in RESIZE_EVENTS]
    if not ours:
        return None
    last = max(ours, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
    return {
        "reason": last.get("reason"),
        "message": last.get("message"),
        "count": last.get("count"),
    }


def render_vertical(report: Mapping[str, Any]) -> None:
    v = report.get("vertical")
    if not v:
        return
    rows = [["KVPA", v["kvpa"]], ["why", str(v.get("why"))]]
    for key in ("strategy", "matching", "recommender"):
        if v.get(key):
            rows.append([key, str(v[key])])
    for key in ("targets", "spec", "kubelet", "source"):
        for c, value in (v.get(key) or {}).items():
            rows.append([f"{key} {c}", str(value)])
    for c, per in (v.get("terms") or {}).items():
        rows += [[f"why {c} {resource}", line] for resource, line in per.items()]
    rows += [["kubelet condition", c] for c in v.get("conditions") or []]
    rows += [["KVPA condition", c] for c in v.get("kvpa_conditions") or []]
    last = v.get("last_event")
    if last:
        rows.append(["last resize event", f"{last['reason']}: {last['message']}"])
    print_table(f"Vertical scaling of {report['pod']}", ["", "value"], rows)
