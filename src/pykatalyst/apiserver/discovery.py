"""What the embedded API server says about itself: `/version`, `/api`, `/apis`, the
resource lists kubectl reads to map names to kinds, just enough OpenAPI v3, and the
resolution of a resource path to its kind, namespace, name and subresource."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from pykatalyst import __version__
from pykatalyst.api.names import Kind
from pykatalyst.apiserver.store import resource_name
from pykatalyst.cluster.protocol import JSON, NotFound

if TYPE_CHECKING:
    from pykatalyst.apiserver.memory import MemoryCluster

_VERBS: Final = ("create", "delete", "get", "list", "patch", "update", "watch")
SUBRESOURCES: Final[dict[tuple[str, str], tuple[str, ...]]] = {
    ("", "pods"): ("status", "binding", "eviction", "resize"),
}
BINDING: Final = Kind("", "v1", "Binding", "bindings", True)


def version_info() -> JSON:
    return {
        "major": "1",
        "minor": "32",
        "gitVersion": f"v1.32.0-pykatalyst-{__version__}",
        "platform": "linux/amd64",
    }


def api_versions(server_address: str) -> JSON:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


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
        subresources = list(SUBRESOURCES.get((group, kind.plural), ()))
        if not subresources and cluster.has_status_subresource(kind):
            subresources = ["status"]
        if cluster.has_scale_subresource(kind):
            subresources.append("scale")
        for sub in subresources:
            sub_kind = {
                "binding": ("Binding", ["create"]),
                "eviction": ("Eviction", ["create"]),
                "resize": (kind.kind, ["get", "patch"]),  # a resize is a patch here
                "scale": ("Scale", ["get", "patch", "update"]),
            }
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
            if sub == "scale":
                sub_entry["group"], sub_entry["version"] = "autoscaling", "v1"
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


def group_versions(cluster: MemoryCluster) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for kind in cluster.registered_kinds():
        versions = groups.setdefault(kind.group, [])
        if kind.version not in versions:
            versions.append(kind.version)
    return groups


@dataclass(frozen=True, slots=True)
class Target:
    """What a resource path names."""

    kind: Kind
    namespace: str | None
    name: str | None
    subresource: str | None


def openapi_root(cluster: MemoryCluster) -> JSON:
    paths = {}
    for group, versions in group_versions(cluster).items():
        for version in versions:
            gv = f"api/{version}" if not group else f"apis/{group}/{version}"
            paths[gv] = {"serverRelativeURL": f"/openapi/v3/{gv}"}
    return {"paths": paths}


def openapi_group_version(cluster: MemoryCluster, segments: list[str]) -> JSON:
    """Just enough OpenAPI v3 for kubectl to see that PATCH takes `fieldValidation`,
    so that it leaves validation to the server instead of asking for schemas. There
    are no schemas: this server does not reject unknown fields."""
    if segments[0] == "api" and len(segments) == 2:
        group, version = "", segments[1]
    elif segments[0] == "apis" and len(segments) == 3:
        group, version = segments[1], segments[2]
    else:
        raise NotFound(f"no OpenAPI document for {'/'.join(segments)}")
    if version not in group_versions(cluster).get(group, []):
        raise NotFound(f"no OpenAPI document for {'/'.join(segments)}")
    prefix = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    param = {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}
    paths: JSON = {}
    for kind in cluster.registered_kinds():
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


def group_list(cluster: MemoryCluster) -> JSON:
    groups = []
    for group, versions in sorted(group_versions(cluster).items()):
        if not group:
            continue
        gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        groups.append({"name": group, "versions": gvs, "preferredVersion": gvs[0]})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(cluster: MemoryCluster, group: str) -> JSON:
    for g in group_list(cluster)["groups"]:
        if g["name"] == group:
            return {"kind": "APIGroup", "apiVersion": "v1", **g}
    raise NotFound(f"the server could not find the requested resource (get {group})")


def resource_list(cluster: MemoryCluster, group: str, version: str) -> JSON:
    if version not in group_versions(cluster).get(group, []):
        gv = f"{group}/{version}" if group else version
        raise NotFound(f"the server could not find the requested resource ({gv})")
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": _resource_entries(cluster, group, version),
    }


def resolve(cluster: MemoryCluster, group: str, version: str, rest: list[str]) -> Target:
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
        return Target(BINDING, namespace, name, None)
    kind = cluster.lookup_kind(group, plural)
    if kind.version != version:
        raise NotFound(
            f"the server could not find the requested resource ({plural}.{group}/{version})"
        )
    if kind.namespaced is False and namespace is not None:
        raise NotFound(f"{resource_name(kind)} is not namespaced")
    if subresource is not None:
        allowed = (*SUBRESOURCES.get((group, plural), ("status",)), "scale")
        if subresource not in allowed:
            raise NotFound(
                "the server could not find the requested resource "
                f"({resource_name(kind)}/{subresource})"
            )
    return Target(kind, namespace, name, subresource)


def document(cluster: MemoryCluster, path: str, server_address: str) -> JSON | None:
    """The discovery document at `path`, or None when `path` is not a discovery path."""
    segments = [s for s in path.split("/") if s]
    if path == "/version":
        return version_info()
    if path == "/api":
        return api_versions(server_address)
    if path == "/openapi/v3":
        return openapi_root(cluster)
    if segments[:2] == ["openapi", "v3"] and len(segments) > 2:
        return openapi_group_version(cluster, segments[2:])
    if path == "/apis":
        return group_list(cluster)
    if segments[:1] == ["api"] and len(segments) == 2:
        return resource_list(cluster, "", segments[1])
    if segments[:1] == ["apis"] and len(segments) == 2:
        return api_group(cluster, segments[1])
    if segments[:1] == ["apis"] and len(segments) == 3:
        return resource_list(cluster, segments[1], segments[2])
    return None
