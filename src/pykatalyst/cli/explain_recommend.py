"""`katalyst explain pod`: the ResourceRecommends that cover the pod.

An RR covers a pod of its Deployment by Katalyst's own rule for reading usage: same
namespace, pod name `<deployment>-<hash>-<5 chars>`. For each, the report gives its
recommender, its conditions, the target of each of the pod's containers, when it was made,
and the terms behind it (the controller's `recommendation_terms` annotation: percentile,
half-life, margin, samples and span, estimate, OOM bump)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from pykatalyst.api import names
from pykatalyst.api.objects import Pod
from pykatalyst.cli.output import print_table
from pykatalyst.cluster.protocol import JSON, ApiError, Cluster


def covers(rr: Mapping[str, Any], pod: Pod) -> bool:
    ref = (rr.get("spec") or {}).get("targetRef") or {}
    if not isinstance(ref, Mapping) or ref.get("kind") != "Deployment":
        return False
    name = str(ref.get("name", ""))
    pattern = rf"{re.escape(name)}-[a-z0-9]+-[a-z0-9]{{5}}"
    return bool(name) and re.fullmatch(pattern, pod.name) is not None


def _terms(rr: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    text = ((rr.get("metadata") or {}).get("annotations") or {}).get(
        names.RECOMMENDATION_TERMS_ANNOTATION
    )
    if text is None:
        return {}, None
    try:
        body = json.loads(text)
        return dict(body.get("containers") or {}), body.get("time")
    except (ValueError, AttributeError):
        return {}, None


def resource_recommends_json(cluster: Cluster, pod: Pod, problems: list[str]) -> list[JSON]:
    try:
        items = cluster.list(names.RESOURCE_RECOMMEND, pod.namespace).items
    except ApiError as exc:
        problems.append(f"cannot list {names.RESOURCE_RECOMMEND.kind}s: {exc}")
        return []
    containers = [c.name for c in pod.containers()]
    out: list[JSON] = []
    for rr in items:
        if not covers(rr, pod):
            continue
        raw = rr.get("status")
        status: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        recs = (status.get("recommendResources") or {}).get("containerRecommendations") or []
        targets = {
            str(r.get("containerName")): (r.get("requests") or {}).get("target") or {}
            for r in recs
            if isinstance(r, Mapping) and r.get("containerName") in containers
        }
        terms, terms_time = _terms(rr)
        spec = rr.get("spec") if isinstance(rr.get("spec"), Mapping) else None
        policy = (spec or {}).get("resourcePolicy")
        algo = (policy.get("algorithmPolicy") if isinstance(policy, Mapping) else None) or {}
        out.append(
            {
                "name": rr["metadata"]["name"],
                "recommender": algo.get("recommender") or "default",
                "conditions": {
                    str(c.get("type")): {
                        "status": c.get("status"),
                        "reason": c.get("reason"),
                        "message": c.get("message"),
                    }
                    for c in status.get("conditions") or []
                    if isinstance(c, Mapping)
                },
                "last_recommendation_time": status.get("lastRecommendationTime"),
                "targets": targets,
                "terms": {c: t for c, t in terms.items() if c in containers},
                "terms_time": terms_time,
            }
        )
    return out


def _why(terms: Mapping[str, Any]) -> str:
    parts = []
    for resource in ("cpu", "memory"):
        t = terms.get(resource)
        if not isinstance(t, Mapping):
            continue
        text = (
            f"{resource}: p{float(t.get('percentile', 0)) * 100:g} × (1 + {t.get('margin')}) of "
            f"{t.get('samples')} samples over {t.get('span_hours')} h, half-life "
            f"{t.get('half_life_hours')} h"
        )
        if t.get("oom_bump") is not None:
            text += f", OOM bump to {t['oom_bump']:.0f} B"
        parts.append(text)
    return "; ".join(parts)


def print_recommends(items: list[JSON]) -> None:
    for rr in items:
        rows = [["recommender", rr["recommender"]]]
        for kind, c in sorted(rr["conditions"].items()):
            detail = f" ({c['reason']}: {c['message']})" if c.get("reason") else ""
            rows.append([kind, f"{c['status']}{detail}"])
        rows.append(["recommended at", rr["last_recommendation_time"] or "-"])
        for container, target in sorted(rr["targets"].items()):
            rows.append([f"target {container}", ", ".join(f"{k} {v}" for k, v in target.items())])
            why = _why(rr["terms"].get(container) or {})
            if why:
                rows.append([f"terms {container}", why])
        print_table(f"ResourceRecommend {rr['name']}", ["", "value"], rows)
