"""The HTTP face of a `MemoryCluster`: the Kubernetes REST API over aiohttp.

It translates requests into `MemoryCluster` calls and errors into `Status` JSON; all
semantics (versions, conflicts, selectors, admission, subresources) are the store's own.
That is enough for the official client and for `kubectl` (get, describe, create, apply,
edit, patch, delete, watch) to work against the embedded cluster. It is a local
development and test server: no authentication, no TLS, no protobuf, no server-side apply,
no paging (`limit`/`continue` are ignored: every list is complete).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final, TypeVar
from urllib.parse import urlparse

import yaml
from aiohttp import web

from pykatalyst import __version__
from pykatalyst.api.names import CRD, Kind
from pykatalyst.api.timefmt import parse_rfc3339
from pykatalyst.api.yamlio import load_yaml
from pykatalyst.cluster.memory import MemoryCluster, grace_seconds, resource_name
from pykatalyst.cluster.protocol import (
    JSON,
    ApiError,
    BadRequest,
    Gone,
    MethodNotAllowed,
    NotFound,
    PatchType,
    TooManyRequests,
    WatchEvent,
)
from pykatalyst.runtime.auth import bearer_middleware

_T = TypeVar("_T")
_log = logging.getLogger(__name__)

PATCH_TYPES: Final[dict[str, PatchType]] = {
    "application/merge-patch+json": "merge",
    "application/json-patch+json": "json",
    "application/strategic-merge-patch+json": "strategic",
}
APPLY_PATCH: Final = "application/apply-patch+yaml"
# The server ends a watch after this long unless the client asked for less, as the
# real one does (clients reconnect from their last resourceVersion).
DEFAULT_WATCH_SECONDS: Final = 1800
# How long a watch thread waits on the store before looking at the connection again.
_WATCH_POLL_SECONDS: Final = 0.5

# kube-apiserver's default --max-request-bytes is 3 MiB (etcd's object limit is 1.5 MiB).
DEFAULT_MAX_BODY_BYTES: Final = 3 * 1024 * 1024
# A client that sends its body slower than this is cut off with a 408.
DEFAULT_BODY_TIMEOUT_S: Final = 30.0
DEFAULT_MAX_WATCHES: Final = 200
DEFAULT_MAX_WATCHES_PER_CLIENT: Final = 100


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(raw: bytes | str) -> Any:
    """JSON as kube-apiserver's decoder reads it: NaN and Infinity are refused."""
    return json.loads(raw, parse_constant=_refuse_constant)


_SUBRESOURCES: Final[dict[tuple[str, str], tuple[str, ...]]] = {
    ("", "pods"): ("status", "binding", "eviction"),
}


class UnsupportedMediaType(ApiError):
    def __init__(self, message: str) -> None:
        super().__init__(message, "UnsupportedMediaType", 415)


def _status(code: int, message: str = "", details: Mapping[str, Any] | None = None) -> JSON:
    body: JSON = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "code": code,
    }
    if message:
        body["message"] = message
    if details:
        body["details"] = dict(details)
    return body


def _dumps(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def _json_response(doc: Any, status: int = 200) -> web.Response:
    return web.Response(body=_dumps(doc), status=status, content_type="application/json")


def _unauthorized(message: str) -> web.Response:
    return _error_response(ApiError(message, "Unauthorized", 401))


def _error_response(error: ApiError) -> web.Response:
    headers = {}
    if error.retry_after_seconds is not None:
        headers["Retry-After"] = str(max(1, round(error.retry_after_seconds)))
    return web.Response(
        body=_dumps(error.status()),
        status=error.code,
        content_type="application/json",
        headers=headers,
    )


# --- discovery ------------------------------------------------------------------------------


_VERBS: Final = ("create", "delete", "get", "list", "patch", "update", "watch")


def _resource_entries(cluster: MemoryCluster, group: str, version: str) -> list[JSON]:
    entries: list[JSON] = []
    for kind in sorted(cluster.registered_kinds(), key=lambda k: k.plural):
        if kind.group != group or kind.version != version:
            continue
        entry: JSON = {
            "name": kind.plural,
            "singularName": kind.kind.lower(),
            "namespaced": kind.namespaced,
            "kind": kind.kind,
            "verbs": list(_VERBS),
        }
        if kind.short_names:
            entry["shortNames"] = list(kind.short_names)
        if group and group.endswith("katalyst.kubewharf.io"):
            entry["categories"] = ["katalyst"]
        elif (group, kind.plural) == ("", "pods"):
            entry["categories"] = ["all"]  # `kubectl get all`
        entries.append(entry)
        subresources = list(_SUBRESOURCES.get((group, kind.plural), ()))
        if not subresources and cluster.has_status_subresource(kind):
            subresources = ["status"]
        for sub in subresources:
            sub_kind = {"binding": ("Binding", ["create"]), "eviction": ("Eviction", ["create"])}
            name, verbs = sub_kind.get(sub, (kind.kind, ["get", "patch", "update"]))
            sub_entry: JSON = {
                "name": f"{kind.plural}/{sub}",
                "singularName": "",
                "namespaced": kind.namespaced,
                "kind": name,
                "verbs": verbs,
            }
            if sub == "eviction":
                sub_entry["group"], sub_entry["version"] = "policy", "v1"
            entries.append(sub_entry)
    if not group and version == "v1":
        entries.append(
            {
                "name": "bindings",
                "singularName": "binding",
                "namespaced": True,
                "kind": "Binding",
                "verbs": ["create"],
            }
        )
    return entries


def _group_versions(cluster: MemoryCluster) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for kind in cluster.registered_kinds():
        versions = groups.setdefault(kind.group, [])
        if kind.version not in versions:
            versions.append(kind.version)
    return groups


# --- tables for `kubectl get` ---------------------------------------------------------------


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


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _pod_ready(pod: JSON, now: float) -> str:
    statuses = _get(pod, "status", "containerStatuses") or []
    total = len(_get(pod, "spec", "containers") or [])
    ready = sum(1 for s in statuses if isinstance(s, dict) and s.get("ready"))
    return f"{ready}/{total}"


def _pod_status(pod: JSON, now: float) -> str:
    if _get(pod, "metadata", "deletionTimestamp"):
        return "Terminating"
    for s in _get(pod, "status", "containerStatuses") or []:
        waiting = _get(s, "state", "waiting", "reason")
        if waiting:
            return str(waiting)
    return str(_get(pod, "status", "reason") or _get(pod, "status", "phase") or "Unknown")


def _pod_restarts(pod: JSON, now: float) -> int:
    statuses = _get(pod, "status", "containerStatuses") or []
    return sum(int(s.get("restartCount") or 0) for s in statuses if isinstance(s, dict))


def _node_status(node: JSON, now: float) -> str:
    ready = "Unknown"
    for cond in _get(node, "status", "conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            ready = "Ready" if cond.get("status") == "True" else "NotReady"
    if _get(node, "spec", "unschedulable"):
        ready += ",SchedulingDisabled"
    return ready


def _node_roles(node: JSON, now: float) -> str:
    labels = _get(node, "metadata", "labels") or {}
    prefix = "node-role.kubernetes.io/"
    roles = sorted(k[len(prefix) :] for k in labels if k.startswith(prefix) and k != prefix)
    return ",".join(roles) or "<none>"


def _node_ip(node: JSON, now: float) -> str:
    for addr in _get(node, "status", "addresses") or []:
        if isinstance(addr, dict) and addr.get("type") == "InternalIP":
            return str(addr.get("address", ""))
    return "<none>"


def _field(*path: str, default: Any = "<none>") -> Callable[[JSON, float], Any]:
    def cell(obj: JSON, now: float) -> Any:
        value = _get(obj, *path)
        return default if value is None or value == "" else value

    return cell


def _name(obj: JSON, now: float) -> str:
    return str(_get(obj, "metadata", "name") or "")


def _event_object(ev: JSON, now: float) -> str:
    kind = str(_get(ev, "involvedObject", "kind") or "").lower()
    return f"{kind}/{_get(ev, 'involvedObject', 'name') or ''}"


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
        Column(
            "Data",
            "integer",
            lambda o, now: len(o.get("data") or {}) + len(o.get("binaryData") or {}),
        ),
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
    versions = _get(crd, "spec", "versions") or []
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


def _table(
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


def _wants_table(request: web.Request) -> bool:
    accept = request.headers.get("Accept", "")
    for part in accept.split(","):
        params = {p.strip() for p in part.split(";")}
        if "as=Table" in params and "g=meta.k8s.io" in params:
            return True
    return False


# --- the application ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Target:
    kind: Kind
    namespace: str | None
    name: str | None
    subresource: str | None


class ApiServerApp:
    """The aiohttp application serving one MemoryCluster."""

    def __init__(
        self,
        cluster: MemoryCluster,
        max_watches: int = DEFAULT_MAX_WATCHES,
        routes: Iterable[web.RouteDef] = (),
        *,
        max_watches_per_client: int = DEFAULT_MAX_WATCHES_PER_CLIENT,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
        token: str | None = None,
    ) -> None:
        """Open watches are bounded in total and per client address (429 beyond); bodies
        over `max_body_bytes` get a 413, ones slower than `body_timeout_s` a 408; with
        `token`, every request but the probes needs `Authorization: Bearer <token>`."""
        self.cluster = cluster
        self.max_watches = max_watches
        self.max_watches_per_client = max_watches_per_client
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s
        # Store calls, and the waits of open watches, run in these threads, never on the
        # event loop: a watch holds one thread while it waits for events, so there are
        # threads beyond the watch bound for the other calls.
        self._executor = ThreadPoolExecutor(
            max_workers=max_watches + 16, thread_name_prefix="store"
        )
        self._watches: set[Any] = set()
        self._watchers: dict[str, int] = {}
        self._stopping = False
        middlewares = [bearer_middleware(token, _unauthorized)] if token else []
        self.app = web.Application(client_max_size=max_body_bytes, middlewares=middlewares)
        # Routes of the process serving this app (health, metrics) come before the API's.
        self.app.router.add_routes(list(routes))
        self.app.router.add_route("*", "/{path:.*}", self._dispatch)
        self.app.on_shutdown.append(self._on_shutdown)

    async def _on_shutdown(self, app: web.Application) -> None:
        self.stop_watches()

    def stop_watches(self) -> None:
        self._stopping = True
        for w in list(self._watches):
            w.close()
        self._executor.shutdown(wait=False, cancel_futures=True)

    # --- routing ------------------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._route(request)
        except ApiError as e:
            return _error_response(e)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as e:  # the client sees a 500 Status instead of a dropped socket
            _log.exception("%s %s failed", request.method, request.path_qs)
            return _error_response(ApiError(f"{type(e).__name__}: {e}", "InternalError", 500))

    async def _route(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        segments = [s for s in path.split("/") if s]
        method = request.method
        if path in ("/healthz", "/livez", "/readyz"):
            return web.Response(text="ok")
        if path == "/version":
            return _json_response(
                {
                    "major": "1",
                    "minor": "32",
                    "gitVersion": f"v1.32.0-pykatalyst-{__version__}",
                    "platform": "linux/amd64",
                }
            )
        if path == "/api":
            return _json_response(
                {
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [
                        {"clientCIDR": "0.0.0.0/0", "serverAddress": request.host}
                    ],
                }
            )
        if path == "/openapi/v3":
            return _json_response(self._openapi_root())
        if segments[:2] == ["openapi", "v3"] and len(segments) > 2:
            return _json_response(self._openapi_group_version(segments[2:]))
        if path == "/apis":
            return _json_response(self._group_list())
        if segments[:1] == ["api"] and len(segments) == 2:
            return self._resource_list("", segments[1])
        if segments[:1] == ["apis"] and len(segments) == 2:
            return self._group(segments[1])
        if segments[:1] == ["apis"] and len(segments) == 3:
            return self._resource_list(segments[1], segments[2])
        if segments[:1] == ["api"] and len(segments) > 2:
            return await self._resource("", segments[1], segments[2:], method, request)
        if segments[:1] == ["apis"] and len(segments) > 3:
            return await self._resource(segments[1], segments[2], segments[3:], method, request)
        raise NotFound(f"the server could not find the requested resource ({method} {path})")

    def _openapi_root(self) -> JSON:
        paths = {}
        for group, versions in _group_versions(self.cluster).items():
            for version in versions:
                gv = f"api/{version}" if not group else f"apis/{group}/{version}"
                paths[gv] = {"serverRelativeURL": f"/openapi/v3/{gv}"}
        return {"paths": paths}

    def _openapi_group_version(self, segments: list[str]) -> JSON:
        """Just enough OpenAPI v3 for kubectl to see that PATCH takes `fieldValidation`,
        so that it leaves validation to the server instead of asking for schemas. There
        are no schemas: this server does not reject unknown fields."""
        if segments[0] == "api" and len(segments) == 2:
            group, version = "", segments[1]
        elif segments[0] == "apis" and len(segments) == 3:
            group, version = segments[1], segments[2]
        else:
            raise NotFound(f"no OpenAPI document for {'/'.join(segments)}")
        if version not in _group_versions(self.cluster).get(group, []):
            raise NotFound(f"no OpenAPI document for {'/'.join(segments)}")
        prefix = f"/api/{version}" if not group else f"/apis/{group}/{version}"
        param = {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}
        paths: JSON = {}
        for kind in self.cluster.registered_kinds():
            if kind.group != group or kind.version != version:
                continue
            scope = "/namespaces/{namespace}" if kind.namespaced else ""
            gvk = {"group": group, "version": version, "kind": kind.kind}
            op = {"x-kubernetes-group-version-kind": gvk, "parameters": [param]}
            paths[f"{prefix}{scope}/{kind.plural}/{{name}}"] = {"patch": op, "put": op}
            paths[f"{prefix}{scope}/{kind.plural}"] = {"post": op}
        return {
            "openapi": "3.0.0",
            "info": {"title": "pykatalyst", "version": __version__},
            "paths": paths,
            "components": {"schemas": {}},
        }

    def _group_list(self) -> JSON:
        groups = []
        for group, versions in sorted(_group_versions(self.cluster).items()):
            if not group:
                continue
            gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
            groups.append({"name": group, "versions": gvs, "preferredVersion": gvs[0]})
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def _group(self, group: str) -> web.Response:
        for g in self._group_list()["groups"]:
            if g["name"] == group:
                return _json_response({"kind": "APIGroup", "apiVersion": "v1", **g})
        raise NotFound(f"the server could not find the requested resource (get {group})")

    def _resource_list(self, group: str, version: str) -> web.Response:
        if version not in _group_versions(self.cluster).get(group, []):
            gv = f"{group}/{version}" if group else version
            raise NotFound(f"the server could not find the requested resource ({gv})")
        return _json_response(
            {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": f"{group}/{version}" if group else version,
                "resources": _resource_entries(self.cluster, group, version),
            }
        )

    def _target(self, group: str, version: str, rest: list[str]) -> _Target:
        namespace: str | None = None
        if rest[0] == "namespaces" and (
            len(rest) >= 4 or (len(rest) == 3 and rest[2] not in ("status", "finalize"))
        ):
            namespace, rest = rest[1], rest[2:]
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else None
        subresource = rest[2] if len(rest) > 2 else None
        if len(rest) > 3:
            raise NotFound(f"the server could not find the requested resource ({'/'.join(rest)})")
        if group == "" and plural == "bindings":
            return _Target(Kind("", "v1", "Binding", "bindings", True), namespace, name, None)
        kind = self.cluster.lookup_kind(group, plural)
        if kind.version != version:
            raise NotFound(
                f"the server could not find the requested resource ({plural}.{group}/{version})"
            )
        if kind.namespaced is False and namespace is not None:
            raise NotFound(f"{resource_name(kind)} is not namespaced")
        if subresource is not None:
            allowed = _SUBRESOURCES.get((group, plural), ("status",))
            if subresource not in allowed:
                raise NotFound(
                    "the server could not find the requested resource "
                    f"({resource_name(kind)}/{subresource})"
                )
        return _Target(kind, namespace, name, subresource)

    async def _resource(
        self, group: str, version: str, rest: list[str], method: str, request: web.Request
    ) -> web.StreamResponse:
        t = self._target(group, version, rest)
        query = request.query
        if query.get("dryRun"):
            raise BadRequest("dryRun is not supported by this server")
        if t.kind.plural == "bindings":
            if method != "POST" or t.namespace is None:
                raise MethodNotAllowed(f"{method} is not supported on bindings")
            body = await self._body(request)
            pod = str(_get(body, "metadata", "name") or "")
            await self._store(self.cluster.bind, t.namespace, pod, _target_name(body))
            return _json_response(_status(201), 201)
        if t.name is None:
            if method == "GET":
                if query.get("watch") in ("1", "true", "True"):
                    return await self._watch(t, request)
                return await self._list(t, request)
            if method == "POST":
                body = await self._body(request)
                created = await self._store(self.cluster.create, t.kind, body, t.namespace)
                return _json_response(created, 201)
            raise MethodNotAllowed(
                f"{method} is not supported on the {resource_name(t.kind)} collection"
            )
        if t.subresource in ("binding", "eviction"):
            if method != "POST":
                raise MethodNotAllowed(f"{method} is not supported on pods/{t.subresource}")
            body = await self._body(request)
            ns = t.namespace or ""
            if t.subresource == "binding":
                await self._store(self.cluster.bind, ns, t.name, _target_name(body))
            else:
                grace = _get(body, "deleteOptions", "gracePeriodSeconds")
                seconds = None if grace is None else grace_seconds(grace, "gracePeriodSeconds")
                await self._store(self.cluster.evict, ns, t.name, seconds)
            return _json_response(_status(201), 201)
        if method == "GET":
            obj = await self._store(self.cluster.get, t.kind, t.name, t.namespace)
            if _wants_table(request) and t.subresource is None:
                rv = str(_get(obj, "metadata", "resourceVersion") or "")
                return _json_response(
                    _table(self.cluster, t.kind, [obj], rv, query.get("includeObject", ""))
                )
            return _json_response(obj)
        if method == "PUT":
            body = await self._body(request)
            if not isinstance(body, dict):
                raise BadRequest("the body of a PUT must be a JSON object")
            meta = body.setdefault("metadata", {})
            if not isinstance(meta, dict):
                raise BadRequest("metadata must be a JSON object")
            if meta.get("name", t.name) != t.name:
                raise BadRequest(
                    f"the name of the object ({meta.get('name')}) does not match the name on "
                    f"the URL ({t.name})"
                )
            meta["name"] = t.name
            if t.namespace is not None:
                if meta.get("namespace", t.namespace) != t.namespace:
                    raise BadRequest(
                        "the namespace of the provided object does not match the namespace "
                        "sent on the request"
                    )
                meta["namespace"] = t.namespace
            if t.subresource == "status":
                return _json_response(await self._store(self.cluster.update_status, t.kind, body))
            return _json_response(await self._store(self.cluster.update, t.kind, body))
        if method == "PATCH":
            content_type = request.content_type
            if content_type == APPLY_PATCH:
                raise UnsupportedMediaType(
                    "server-side apply is not supported by this server; use client-side "
                    "`kubectl apply` (the default) or a merge/strategic/JSON patch"
                )
            patch_type = PATCH_TYPES.get(content_type)
            if patch_type is None:
                raise UnsupportedMediaType(
                    f"the body of the request was in an unknown format {content_type!r} - "
                    f"accepted media types include: {', '.join(PATCH_TYPES)}"
                )
            patch = await self._body(request)
            return _json_response(
                await self._store(
                    self.cluster.patch,
                    t.kind,
                    t.name,
                    patch,
                    t.namespace,
                    patch_type,
                    t.subresource,
                )
            )
        if method == "DELETE":
            if t.subresource is not None:
                raise MethodNotAllowed(f"DELETE is not supported on {t.subresource}")
            grace = await self._grace_period(request)
            result = await self._store(self.cluster.delete, t.kind, t.name, t.namespace, grace)
            if result is not None:
                return _json_response(result)
            details = {"name": t.name, "group": t.kind.group, "kind": t.kind.plural}
            return _json_response(_status(200, details=details))
        raise MethodNotAllowed(f"{method} is not supported on {resource_name(t.kind)}")

    async def _store(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run a store call off the event loop: it takes the store's lock, and admission
        plugins may do I/O of their own (a webhook served on this very loop, say)."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, functools.partial(fn, *args))
        except RuntimeError as exc:  # the executor is shut down: the server is stopping
            if self._stopping:
                raise ApiError("the server is shutting down", "ServiceUnavailable", 503) from exc
            raise

    async def _read(self, request: web.Request) -> bytes:
        try:
            async with asyncio.timeout(self.body_timeout_s):
                return await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise ApiError(
                f"the request body is over this server's limit of {self.max_body_bytes} bytes",
                "RequestEntityTooLarge",
                413,
            ) from None
        except TimeoutError:
            raise ApiError(
                f"the request body did not arrive within {self.body_timeout_s:g}s",
                "Timeout",
                408,
            ) from None

    async def _body(self, request: web.Request) -> Any:
        raw = await self._read(request)
        if not raw:
            raise BadRequest("the request has no body")
        ctype = request.content_type
        if "json" not in ctype and "yaml" not in ctype and ctype != "application/octet-stream":
            raise UnsupportedMediaType(
                f"the body of the request was in an unknown format {ctype!r} - accepted media "
                "types include: application/json, application/yaml"
            )
        try:
            if "yaml" in request.content_type:
                return load_yaml(raw, "the request body")
            return parse_json(raw)
        except (ValueError, yaml.YAMLError) as e:
            raise BadRequest(f"the request body is not valid JSON: {e}") from None
        except RecursionError:
            raise BadRequest("the request body is nested too deeply") from None

    async def _grace_period(self, request: web.Request) -> int | None:
        value: Any = request.query.get("gracePeriodSeconds")
        raw = await self._read(request)
        if raw:
            try:
                options = parse_json(raw)
            except (ValueError, RecursionError):
                raise BadRequest("the DeleteOptions body is not valid JSON") from None
            if isinstance(options, dict) and options.get("gracePeriodSeconds") is not None:
                value = options["gracePeriodSeconds"]
        if value is None:
            return None
        if isinstance(value, str):
            try:
                value = int(value)
            except ValueError:
                raise BadRequest(f"gracePeriodSeconds: invalid value {value!r}") from None
        return grace_seconds(value, "gracePeriodSeconds")

    async def _list(self, t: _Target, request: web.Request) -> web.Response:
        q = request.query
        result = await self._store(
            self.cluster.list,
            t.kind,
            t.namespace,
            q.get("labelSelector") or None,
            q.get("fieldSelector") or None,
        )
        if _wants_table(request):
            return _json_response(
                _table(
                    self.cluster,
                    t.kind,
                    result.items,
                    result.resource_version,
                    q.get("includeObject", ""),
                )
            )
        return _json_response(
            {
                "kind": f"{t.kind.kind}List",
                "apiVersion": t.kind.api_version,
                "metadata": {"resourceVersion": result.resource_version},
                "items": result.items,
            }
        )

    async def _watch(self, t: _Target, request: web.Request) -> web.StreamResponse:
        q = request.query
        try:
            timeout = float(q.get("timeoutSeconds") or DEFAULT_WATCH_SECONDS)
        except ValueError:
            raise BadRequest(f"timeoutSeconds: invalid value {q.get('timeoutSeconds')!r}") from None
        bookmarks = q.get("allowWatchBookmarks") in ("1", "true", "True")
        as_table = _wants_table(request)
        include = q.get("includeObject", "")
        client = request.remote or "?"
        if sum(self._watchers.values()) >= self.max_watches:
            raise TooManyRequests(
                f"too many open watches on this server (at most {self.max_watches})",
                retry_after_seconds=1,
            )
        if self._watchers.get(client, 0) >= self.max_watches_per_client:
            raise TooManyRequests(
                f"too many open watches from {client} (at most {self.max_watches_per_client})",
                retry_after_seconds=1,
            )
        self._watchers[client] = self._watchers.get(client, 0) + 1
        try:
            return await self._stream(t, request, timeout, bookmarks, as_table, include)
        finally:
            left = self._watchers.pop(client, 1) - 1
            if left > 0:
                self._watchers[client] = left

    async def _stream(
        self,
        t: _Target,
        request: web.Request,
        timeout: float,
        bookmarks: bool,
        as_table: bool,
        include: str,
    ) -> web.StreamResponse:
        q = request.query
        first_table = True
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        gone: Gone | None = None
        watch: Any = None
        try:
            watch = await self._store(
                self.cluster.watch,
                t.kind,
                t.namespace,
                q.get("resourceVersion") or None,
                q.get("labelSelector") or None,
                q.get("fieldSelector") or None,
                bookmarks,
            )
        except Gone as e:
            gone = e  # a real server answers 200 and sends the 410 as the first event
        await response.prepare(request)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout)
        try:
            if gone is not None:
                await _write_event(response, "ERROR", gone.status())
                return response
            self._watches.add(watch)
            while not self._stopping:
                transport = request.transport
                if transport is None or transport.is_closing():
                    break
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    events: list[WatchEvent] = await loop.run_in_executor(
                        self._executor, watch.next_events, min(left, _WATCH_POLL_SECONDS)
                    )
                except Gone as e:
                    await _write_event(response, "ERROR", e.status())
                    break
                except RuntimeError:  # the executor was shut down
                    break
                for event in events:
                    obj = event.object
                    if as_table and event.type in ("ADDED", "MODIFIED", "DELETED"):
                        rv = str(_get(obj, "metadata", "resourceVersion") or "")
                        obj = _table(self.cluster, t.kind, [obj], rv, include)
                        if not first_table:
                            # as on a real server, only the first event carries the columns
                            obj["columnDefinitions"] = []
                        first_table = False
                    await _write_event(response, event.type, obj)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            if watch is not None:
                self._watches.discard(watch)
                watch.close()
        with contextlib.suppress(ConnectionResetError, RuntimeError):
            await response.write_eof()
        return response


async def _write_event(response: web.StreamResponse, etype: str, obj: JSON) -> None:
    await response.write(_dumps({"type": etype, "object": obj}) + b"\n")


def _target_name(binding: Any) -> str:
    name = _get(binding, "target", "name")
    if not isinstance(name, str):
        raise BadRequest("a Binding needs target.name (the node)")
    return name


def url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def kubeconfig_for(url: str, name: str = "katalyst-embedded", token: str | None = None) -> JSON:
    """A kubeconfig for `kubectl` / `--kubeconfig` pointing at this server, with its bearer
    token when it has one."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https"):
        raise ValueError(f"not an http(s) URL: {url!r}")
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": url}}],
        "users": [{"name": name, "user": {"token": token} if token else {}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
        "preferences": {},
    }
