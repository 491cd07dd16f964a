"""What `katalyst explain node|pod` reads from a cluster, as JSON-ready reports.

Everything comes through the `Cluster` protocol: the Node, its CustomNodeResource (the
reclaimed figures, their terms, the NUMA zones, the cpu pools, the AgentReady heartbeat,
the taints), its CustomNodeConfig and the AdminQoSConfiguration that names, the pod, and
Events. Objects that cannot be read are reported with the error and never stop the rest
of the report; only a missing node, pod or CNR ends it (`ExplainError`).

The keys of these dicts are what `-o json` prints; docs/explain.md lists them.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from pykatalyst.api import names
from pykatalyst.api.crds import AdminQoSConfiguration, CustomNodeConfig
from pykatalyst.api.names import Kind
from pykatalyst.api.objects import CustomNodeResource, Node, Taint, TopologyZone
from pykatalyst.api.problems import one_line
from pykatalyst.api.timefmt import rfc3339
from pykatalyst.cli.explain_events import OUR_COMPONENTS, event_json, event_time, field_map
from pykatalyst.cluster.protocol import JSON, ApiError, Cluster, NotFound
from pykatalyst.controllers.backstop import BACKSTOP_TAINT, BackstopConfig, last_heartbeat
from pykatalyst.topology.cpuset import CPUSet

EVENT_LIMIT = 20
# How long a heartbeat may be missing before the backstop acts: past it, "silent".
SILENT_AFTER_S = BackstopConfig().taint_after_s
RESOURCES = {"cpu": names.RECLAIMED_MILLICPU, "memory": names.RECLAIMED_MEMORY}


class ExplainError(Exception):
    """What was asked about is not there (or cannot be read): the command says so, exit 1."""


def get_object(cluster: Cluster, kind: Kind, name: str, namespace: str | None = None) -> JSON:
    """The object, or ExplainError naming what is missing; other API errors likewise."""
    what = f"{kind.kind} {namespace + '/' if namespace else ''}{name}"
    try:
        return cluster.get(kind, name, namespace)
    except NotFound:
        raise ExplainError(f"{what} not found") from None
    except ApiError as exc:
        raise ExplainError(f"cannot read {what}: {exc}") from None


def json_annotation(obj: JSON, key: str) -> tuple[dict[str, Any] | None, str | None]:
    """A JSON-object annotation: (value, None), (None, None) when absent, or (None, error)."""
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(key)
    if raw is None:
        return None, None
    try:
        value = json.loads(raw)
    except (TypeError, json.JSONDecodeError) as exc:
        return None, f"annotation {key} is not JSON: {exc}"
    if not isinstance(value, dict):
        return None, f"annotation {key} must be a JSON object, got {type(value).__name__}"
    return value, None


# --- node ---------------------------------------------------------------------------------


def explain_node(cluster: Cluster, name: str, now: float, limit: int = EVENT_LIMIT) -> JSON:
    node = get_object(cluster, names.NODE, name)
    try:
        cnr = cluster.get(names.CUSTOM_NODE_RESOURCE, name)
    except NotFound:
        raise ExplainError(
            f"node {name} has no {names.CUSTOM_NODE_RESOURCE.kind}: "
            f"{names.AGENT_COMPONENT} has not reported from it (is the agent running there?)"
        ) from None
    except ApiError as exc:
        raise ExplainError(
            f"cannot read the {names.CUSTOM_NODE_RESOURCE.kind} {name}: {exc}"
        ) from None
    problems: list[str] = []
    return {
        "node": name,
        "time": rfc3339(now),
        "reclaimed": reclaimed_json(cnr, problems),
        "numa": numa_json(cnr, problems),
        "pools": pools_json(cnr, problems),
        "health": health_json(cnr, now),
        "taints": taints_json(node, cnr),
        "config": config_json(cluster, name, problems),
        "events": node_events(cluster, name, limit, problems),
        "problems": problems,
    }


def reclaimed_json(cnr: JSON, problems: list[str]) -> JSON:
    """The published reclaimed figures, each with the terms the agent wrote beside it."""
    # As published, unparsed: a malformed quantity is shown as it is, not fatal.
    resources = field_map(field_map(cnr, "status"), "resources")
    alloc, cap = field_map(resources, "allocatable"), field_map(resources, "capacity")
    terms, error = json_annotation(cnr, names.RECLAIMED_TERMS_ANNOTATION)
    if error:
        problems.append(error)
    out: JSON = {}
    for short, resource in RESOURCES.items():
        figure_terms = (terms or {}).get(resource)
        out[short] = {
            "resource": resource,
            "allocatable": str(alloc[resource]) if resource in alloc else None,
            "capacity": str(cap[resource]) if resource in cap else None,
            "terms": figure_terms if isinstance(figure_terms, dict) else None,
        }
    out["terms_time"] = (terms or {}).get("time")
    out["terms_error"] = error
    return out


def numa_zones(cnr: JSON, problems: list[str]) -> list[TopologyZone]:
    try:
        return CustomNodeResource(cnr).numa_zones()
    except ValueError as exc:
        problems.append(f"status.topologyZone cannot be read: {exc}")
        return []


def numa_json(cnr: JSON, problems: list[str]) -> list[JSON]:
    return [
        {
            "numa": z.name,
            "socket": z.parent,
            "allocatable": {k: str(v) for k, v in sorted(z.allocatable.items())},
            "capacity": {k: str(v) for k, v in sorted(z.capacity.items())},
            "allocations": [
                {"consumer": c, "requests": {k: str(v) for k, v in sorted(r.items())}}
                for c, r in z.allocations
            ],
        }
        for z in numa_zones(cnr, problems)
    ]


def published_pools(cnr: JSON) -> tuple[dict[str, str], list[JSON], str | None]:
    """(pool -> cpuset, pod entries, error) from the agent's cpu-pools annotation."""
    value, error = json_annotation(cnr, names.CPU_POOLS_ANNOTATION)
    if value is None:
        return {}, [], error
    pools = value.get("pools")
    pods = value.get("pods")
    if not isinstance(pools, dict) or not isinstance(pods, list):
        return (
            {},
            [],
            (
                f"annotation {names.CPU_POOLS_ANNOTATION}: expected "
                '{"pools": {name: cpuset}, "pods": [...]}'
            ),
        )
    entries = [p for p in pods if isinstance(p, dict)]
    return {str(k): str(v) for k, v in pools.items()}, entries, None


def pools_json(cnr: JSON, problems: list[str]) -> list[JSON]:
    pools, pods, error = published_pools(cnr)
    if error:
        problems.append(error)
    elif not pools:
        problems.append(
            f"no {names.CPU_POOLS_ANNOTATION} annotation: the agent on this node does not "
            "publish its pools (an older version?)"
        )
    value, _ = json_annotation(cnr, names.CPU_POOLS_ANNOTATION)
    steps = (value or {}).get("provision")
    steps = steps if isinstance(steps, dict) else {}
    out = []
    for name, cpuset in sorted(pools.items()):
        members = sorted(str(p.get("pod", "")) for p in pods if p.get("pool") == name)
        step = steps.get(name)
        out.append(
            {
                "name": name,
                "cpuset": cpuset,
                "size": _cpuset_size(cpuset),
                "pods": members,
                "sizing": step if isinstance(step, dict) else None,
            }
        )
    return out


def _cpuset_size(text: str) -> int | None:
    try:
        return len(CPUSet.parse(text))
    except ValueError:
        return None


def health_json(cnr: JSON, now: float) -> JSON:
    """The AgentReady heartbeat and its age: silent past the backstop's taint delay."""
    cond = CustomNodeResource(cnr).condition(names.CNR_CONDITION_AGENT_READY) or {}
    beat = last_heartbeat(cnr)
    age = None if beat is None else max(now - beat, 0.0)
    return {
        "condition": names.CNR_CONDITION_AGENT_READY,
        "status": cond.get("status"),
        "reason": cond.get("reason"),
        "message": cond.get("message"),
        "last_heartbeat": cond.get("lastHeartbeatTime"),
        "ready_since": cond.get("lastTransitionTime"),
        "age_s": age,
        "silent_after_s": SILENT_AFTER_S,
        "silent": age is None or age >= SILENT_AFTER_S,
    }


def _taint_json(t: Taint, set_by: str) -> JSON:
    return {**t.to_json(), "set_by": set_by}


def taints_json(node: JSON, cnr: JSON) -> JSON:
    """The Node's taints under node.katalyst.kubewharf.io/ (the agent's pressure
    conditions) and the CNR's taints (the agent's, and the backstop's when it is silent)."""
    ours = [t for t in Node(node).taints() if t.key.startswith(names.TAINT_PREFIX)]
    cnr_taints = []
    for t in CustomNodeResource(cnr).taints():
        if t.key == BACKSTOP_TAINT.key and t.qos_level == BACKSTOP_TAINT.qos_level:
            by = f"{names.CONTROLLER_COMPONENT} (backstop: agent silent)"
        elif t.key.startswith(names.TAINT_PREFIX):
            by = f"{names.AGENT_COMPONENT} (pressure condition)"
        else:
            by = ""
        cnr_taints.append(_taint_json(t, by))
    return {
        "node": [_taint_json(t, f"{names.AGENT_COMPONENT} (pressure condition)") for t in ours],
        "cnr": cnr_taints,
    }


def config_json(cluster: Cluster, node: str, problems: list[str]) -> JSON:
    """The node's CustomNodeConfig and the AdminQoSConfiguration it points the agent to."""
    out: JSON = {"cnc": None, "admin_qos": None}
    try:
        raw = cluster.get(names.CUSTOM_NODE_CONFIG, node)
    except NotFound:
        out["note"] = (
            f"no {names.CUSTOM_NODE_CONFIG.kind} {node}: the agent runs on its own "
            "configuration (and the AdminQoSConfiguration its --config names, if any)"
        )
        return out
    except ApiError as exc:
        problems.append(f"cannot read {names.CUSTOM_NODE_CONFIG.kind} {node}: {exc}")
        return out
    try:
        cnc = CustomNodeConfig.from_json(raw)
    except ValidationError as exc:
        problems.append(f"{names.CUSTOM_NODE_CONFIG.kind} {node} is invalid: {one_line(exc)}")
        return out
    targets = [
        {
            "resource": t.config_type.resource,
            "namespace": t.config_namespace,
            "name": t.config_name,
            "hash": t.hash,
        }
        for t in cnc.status.katalyst_custom_config_list
    ]
    out["cnc"] = {"name": node, "targets": targets}
    aqc = next((t for t in targets if t["resource"] == names.ADMIN_QOS_CONFIGURATION.plural), None)
    if aqc is not None:
        out["admin_qos"] = _admin_qos(cluster, aqc["namespace"], aqc["name"])
    return out


def _admin_qos(cluster: Cluster, namespace: str, name: str) -> JSON:
    out: JSON = {"name": f"{namespace}/{name}", "spec": None, "error": None}
    try:
        raw = cluster.get(names.ADMIN_QOS_CONFIGURATION, name, namespace)
    except ApiError as exc:
        out["error"] = f"cannot read it: {exc} (the agent keeps its current configuration)"
        return out
    out["spec"] = raw.get("spec")
    try:
        AdminQoSConfiguration.from_json(raw)
    except ValidationError as exc:
        out["error"] = f"invalid: {one_line(exc)} (the agent keeps its current configuration)"
    return out


def _list_events(cluster: Cluster, namespace: str | None, selector: str) -> list[JSON]:
    return cluster.list(names.EVENT, namespace, field_selector=selector).items


def recent(events: list[JSON], limit: int) -> list[JSON]:
    """The `limit` most recent Events as JSON, oldest first."""
    ordered = sorted(events, key=lambda e: event_time(e) or 0.0)
    return [event_json(e) for e in (ordered[-limit:] if limit > 0 else ordered)]


def node_events(cluster: Cluster, node: str, limit: int, problems: list[str]) -> list[JSON]:
    """pykatalyst's Events about the Node, or written from it (`source.host`): the
    agent's conditions and evictions, the backstop's taints."""
    mine: list[JSON] = []
    for component in OUR_COMPONENTS:
        try:
            batch = _list_events(cluster, None, f"source={component}")
        except ApiError as exc:
            problems.append(f"cannot list the Events of {component}: {exc}")
            continue
        for ev in batch:
            obj = field_map(ev, "involvedObject")
            about_node = obj.get("kind") == names.NODE.kind and obj.get("name") == node
            if about_node or field_map(ev, "source").get("host") == node:
                mine.append(ev)
    return recent(mine, limit)
