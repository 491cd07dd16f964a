"""The tables `kubectl get` prints: the columns of the built-in kinds, a CRD's
`additionalPrinterColumns`, and the `meta.k8s.io/v1` Table a server answers with when
the client asks for one (`Accept: ...;as=Table;g=meta.k8s.io`)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from aiohttp import web

from pykatalyst.api.names import CRD, Kind
from pykatalyst.api.timefmt import parse_rfc3339
from pykatalyst.cluster.protocol import JSON, NotFound

if TYPE_CHECKING:
    from pykatalyst.apiserver.memory import MemoryCluster


def human_duration(seconds: float) -> str:
    """The short ages kubectl prints (`45s`, `3m20s`, `5h`, `12d`)."""
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    d = h // 24
    if d < 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    if d < 730:
        return f"{d}d"
    return f"{d // 365}y"


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: str
    cell: Callable[[JSON, float], Any]
    priority: int = 0
    format: str = ""


def _age(obj: JSON, now: float) -> str:
    ts = (obj.get("metadata") or {}).get("creationTimestamp")
    if not ts:
        return "<unknown>"
    return human_duration(now - parse_rfc3339(str(ts)))


def dig(obj: Any, *path: str) -> Any:
    """The value at `path` in nested dicts, or None."""
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _pod_ready(pod: JSON, now: float) -> str:
    statuses = dig(pod, "status", "containerStatuses") or []
    total = len(dig(pod, "spec", "containers") or [])
    ready = sum(1 for s in statuses if isinstance(s, dict) and s.get("ready"))
    return f"{ready}/{total}"


def _pod_status(pod: JSON, now: float) -> str:
    if dig(pod, "metadata", "deletionTimestamp"):
        return "Terminating"
    for s in dig(pod, "status", "containerStatuses") or []:
        waiting = dig(s, "state", "waiting", "reason")
        if waiting:
            return str(waiting)
    return str(dig(pod, "status", "reason") or dig(pod, "status", "phase") or "Unknown")


def _pod_restarts(pod: JSON, now: float) -> int:
    statuses = dig(pod, "status", "containerStatuses") or []
    return sum(int(s.get("restartCount") or 0) for s in statuses if isinstance(s, dict))


def _node_status(node: JSON, now: float) -> str:
    ready = "Unknown"
    for cond in dig(node, "status", "conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            ready = "Ready" if cond.get("status") == "True" else "NotReady"
    if dig(node, "spec", "unschedulable"):
        ready += ",SchedulingDisabled"
    return ready


def _node_roles(node: JSON, now: float) -> str:
    labels = dig(node, "metadata", "labels") or {}
    prefix = "node-role.kubernetes.io/"
    roles = sorted(k[len(prefix) :] for k in labels if k.startswith(prefix) and k != prefix)
    return ",".join(roles) or "<none>"


def _node_ip(node: JSON, now: float) -> str:
    for addr in dig(node, "status", "addresses") or []:
        if isinstance(addr, dict) and addr.get("type") == "InternalIP":
            return str(addr.get("address", ""))
    return "<none>"


def _field(*path: str, default: Any = "<none>") -> Callable[[JSON, float], Any]:
    def cell(obj: JSON, now: float) -> Any:
        value = dig(obj, *path)
        return default if value is None or value == "" else value

    return cell


def _name(obj: JSON, now: float) -> str:
    return str(dig(obj, "metadata", "name") or "")


def _event_object(ev: JSON, now: float) -> str:
    kind = str(dig(ev, "involvedObject", "kind") or "").lower()
    return f"{kind}/{dig(ev, 'involvedObject', 'name') or ''}"


def _event_last_seen(ev: JSON, now: float) -> str:
    ts = ev.get("lastTimestamp") or ev.get("eventTime") or ev.get("firstTimestamp")
    if not ts:
        return _age(ev, now)
    return human_duration(now - parse_rfc3339(str(ts)))


def _configmap_data(cm: JSON, now: float) -> int:
    return len(cm.get("data") or {}) + len(cm.get("binaryData") or {})


NAME_COLUMN: Final = Column("Name", "string", _name, format="name")
AGE_COLUMN: Final = Column("Age", "string", _age)

BUILTIN_COLUMNS: Final[dict[tuple[str, str], tuple[Column, ...]]] = {
    ("", "pods"): (
        NAME_COLUMN,
        Column("Ready", "string", _pod_ready),
        Column("Status", "string", _pod_status),
        Column("Restarts", "integer", _pod_restarts),
        AGE_COLUMN,
        Column("IP", "string", _field("status", "podIP"), priority=1),
        Column("Node", "string", _field("spec", "nodeName"), priority=1),
        Column("Nominated Node", "string", _field("status", "nominatedNodeName"), priority=1),
    ),
    ("", "nodes"): (
        NAME_COLUMN,
        Column("Status", "string", _node_status),
        Column("Roles", "string", _node_roles),
        AGE_COLUMN,
        Column("Version", "string", _field("status", "nodeInfo", "kubeletVersion", default="")),
        Column("Internal-IP", "string", _node_ip, priority=1),
        Column("OS-Image", "string", _field("status", "nodeInfo", "osImage"), priority=1),
        Column(
            "Kernel-Version", "string", _field("status", "nodeInfo", "kernelVersion"), priority=1
        ),
    ),
    ("", "namespaces"): (
        NAME_COLUMN,
        Column("Status", "string", _field("status", "phase")),
        AGE_COLUMN,
    ),
    ("", "events"): (
        Column("Last Seen", "string", _event_last_seen),
        Column("Type", "string", _field("type")),
        Column("Reason", "string", _field("reason")),
        Column("Object", "string", _event_object),
        Column("Message", "string", _field("message", default="")),
    ),
    ("", "configmaps"): (
        NAME_COLUMN,
        Column("Data", "integer", _configmap_data),
        AGE_COLUMN,
    ),
    ("coordination.k8s.io", "leases"): (
        NAME_COLUMN,
        Column("Holder", "string", _field("spec", "holderIdentity", default="")),
        AGE_COLUMN,
    ),
    (CRD.group, CRD.plural): (
        NAME_COLUMN,
        Column("Created At", "date", _field("metadata", "creationTimestamp", default="")),
    ),
}

_JSONPATH_TOKEN = re.compile(r"\.((?:\\\.|[^.\[])+)|\[(\d+)\]")


def jsonpath_cell(obj: JSON, path: str) -> Any:
    """Evaluate the simple JSONPath of a CRD printer column (`.a.b\\.c[0].d`); anything
    it does not reach prints as empty, as kubectl does."""
    value: Any = obj
    pos = 0
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    while pos < len(path):
        m = _JSONPATH_TOKEN.match(path, pos)
        if m is None:
            return None
        pos = m.end()
        if m.group(1) is not None:
            if not isinstance(value, dict):
                return None
            value = value.get(m.group(1).replace("\\.", "."))
        else:
            index = int(m.group(2))
            if not isinstance(value, list) or index >= len(value):
                return None
            value = value[index]
        if value is None:
            return None
    return value


def _crd_columns(cluster: MemoryCluster, kind: Kind) -> tuple[Column, ...] | None:
    try:
        crd = cluster.get(CRD, f"{kind.plural}.{kind.group}")
    except NotFound:
        return None
    versions = dig(crd, "spec", "versions") or []
    version = next((v for v in versions if v.get("name") == kind.version), None)
    if version is None:
        return None
    columns = [NAME_COLUMN]
    for spec in version.get("additionalPrinterColumns") or []:
        path = str(spec.get("jsonPath", ""))
        ctype = str(spec.get("type", "string"))

        def cell(obj: JSON, now: float, path: str = path, ctype: str = ctype) -> Any:
            value = jsonpath_cell(obj, path)
            if ctype == "date" and isinstance(value, str):
                try:
                    return human_duration(now - parse_rfc3339(value))
                except ValueError:
                    return value
            if isinstance(value, dict | list):
                return json.dumps(value, separators=(",", ":"))
            return value

        columns.append(
            Column(
                str(spec.get("name", path)),
                "string" if ctype == "date" else ctype,
                cell,
                int(spec.get("priority", 0) or 0),
            )
        )
    if not any(c.name == "Age" for c in columns):
        columns.append(AGE_COLUMN)
    return tuple(columns)


def table(
    cluster: MemoryCluster,
    kind: Kind,
    items: Iterable[JSON],
    resource_version: str,
    include_object: str,
) -> JSON:
    columns = BUILTIN_COLUMNS.get((kind.group, kind.plural)) or _crd_columns(cluster, kind)
    if columns is None:
        columns = (NAME_COLUMN, AGE_COLUMN)
    now = cluster.clock.now()
    rows = []
    for obj in items:
        row: JSON = {"cells": [c.cell(obj, now) for c in columns]}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata") or {},
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": [
            {
                "name": c.name,
                "type": c.type,
                "format": c.format,
                "description": "",
                "priority": c.priority,
            }
            for c in columns
        ],
        "rows": rows,
    }


def wants_table(request: web.Request) -> bool:
    accept = request.headers.get("Accept", "")
    for part in accept.split(","):
        params = {p.strip() for p in part.split(";")}
        if "as=Table" in params and "g=meta.k8s.io" in params:
            return True
    return False
