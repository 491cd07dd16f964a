"""What the agent knows about the pods on its node: cluster objects joined with the cgroups
the Host found.

Parsing a pod (QoS annotations, requests) is cached by (uid, resourceVersion): the loop
runs every few seconds over every pod, and a pod changes far less often than that.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from pykatalyst.agent.host.base import PodCgroup
from pykatalyst.api import names
from pykatalyst.api.limits import PodShapeError
from pykatalyst.api.objects import Pod
from pykatalyst.api.qos import PodQoS, QoSError, parse_pod_qos
from pykatalyst.api.timefmt import parse_rfc3339
from pykatalyst.cluster.protocol import JSON

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    name: str
    request_cores: float
    container_id: str | None  # from pod status, without the runtime:// prefix
    limit_cores: float = 0.0  # 0: no cpu limit


@dataclass(frozen=True, slots=True)
class PodSpec:
    """The parts of a pod the agent decides on (immutable per resourceVersion)."""

    uid: str
    namespace: str
    name: str
    resource_version: str
    qos: PodQoS | None
    error: str | None  # why the QoS declaration is refused
    request_cores: float
    memory_request: int
    reclaimed_milli_cpu: int
    reclaimed_memory: int
    containers: tuple[ContainerSpec, ...]
    started_at: float | None  # status.startTime, else creationTimestamp
    created_key: tuple[float, str]  # placement order for dedicated pods
    terminating: bool
    finished: bool
    spd_name: str = ""  # its ServiceProfileDescriptor (annotation), "" when none

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def level(self) -> str:
        return self.qos.level if self.qos is not None else names.DEFAULT_QOS_LEVEL

    @property
    def pool(self) -> str:
        return self.qos.cpuset_pool if self.qos is not None else ""


def _timestamp(text: object) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return parse_rfc3339(text)
    except ValueError:
        return None


def _container_ids(status: Mapping[str, object]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key in ("containerStatuses", "initContainerStatuses"):
        items = status.get(key)
        if not isinstance(items, list):
            continue
        for cs in items:
            if isinstance(cs, dict) and isinstance(cs.get("containerID"), str):
                cid = cs["containerID"]
                out[str(cs.get("name", ""))] = cid.split("://", 1)[-1]
    return out


def _unreadable(obj: object, exc: PodShapeError) -> PodSpec:
    """A pod that breaks the Pod schema: known by identity only, never managed."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    ident = {
        k: str(v) if isinstance(v, str) else ""
        for k, v in (meta.items() if isinstance(meta, Mapping) else ())
        if k in ("uid", "namespace", "name", "resourceVersion")
    }
    key = f"{ident.get('namespace', '')}/{ident.get('name', '')}"
    exc.object = f"Pod {key}"
    return PodSpec(
        uid=ident.get("uid", ""),
        namespace=ident.get("namespace", ""),
        name=ident.get("name", ""),
        resource_version=ident.get("resourceVersion", ""),
        qos=None,
        error=f"unreadable pod: {exc}",
        request_cores=0.0,
        memory_request=0,
        reclaimed_milli_cpu=0,
        reclaimed_memory=0,
        containers=(),
        started_at=None,
        created_key=(math.inf, key),
        terminating=False,
        finished=False,
    )


def parse_pod(obj: JSON) -> PodSpec:
    """Read one pod; a QoS or resource problem is recorded in `error`, never raised."""
    qos: PodQoS | None = None
    error: str | None = None
    try:
        qos = parse_pod_qos(obj)  # checks the pod's shape and limits first
    except PodShapeError as exc:
        return _unreadable(obj, exc)
    except QoSError as exc:
        exc.object = f"Pod {Pod(obj).key}"
        error = str(exc)
    pod = Pod(obj)
    request_cores = 0.0
    memory_request = reclaimed_cpu = reclaimed_mem = 0
    containers: list[ContainerSpec] = []
    ids = _container_ids(pod.status)
    try:
        request_cores = pod.request_milli_cpu() / 1000.0
        memory_request = pod.request_memory()
        reclaimed_cpu = pod.reclaimed_milli_cpu()
        reclaimed_mem = pod.reclaimed_memory()
        for c in pod.containers():
            q = c.requests().get(names.RESOURCE_CPU)
            lim = c.limits().get(names.RESOURCE_CPU)
            containers.append(
                ContainerSpec(
                    c.name,
                    q.milli_value() / 1000.0 if q is not None else 0.0,
                    ids.get(c.name),
                    lim.milli_value() / 1000.0 if lim is not None else 0.0,
                )
            )
    except ValueError as exc:
        error = error or f"Pod {pod.key}: invalid resources: {exc}"
        qos = None
    started = _timestamp(pod.status.get("startTime"))
    created = _timestamp(pod.metadata.get("creationTimestamp"))
    return PodSpec(
        uid=pod.uid,
        namespace=pod.namespace,
        name=pod.name,
        resource_version=pod.resource_version,
        qos=qos if error is None else None,
        error=error,
        request_cores=request_cores,
        memory_request=memory_request,
        reclaimed_milli_cpu=reclaimed_cpu,
        reclaimed_memory=reclaimed_mem,
        containers=tuple(containers),
        started_at=started if started is not None else created,
        created_key=(created if created is not None else math.inf, pod.key),
        terminating=pod.deletion_timestamp is not None,
        finished=pod.is_terminated,
        spd_name=str((pod.metadata.get("annotations") or {}).get(names.SPD_NAME_ANNOTATION, "")),
    )


class ParsedPods(Generic[T]):
    """Values parsed from pods by `parse`, kept by uid and re-parsed only when the pod's
    resourceVersion changes. Shared by the agent's loop and its eviction stage."""

    def __init__(self, parse: Callable[[JSON], T]) -> None:
        self._parse = parse
        self._items: dict[str, tuple[str, T]] = {}

    def refresh(self, objects: Iterable[JSON]) -> dict[str, T]:
        """The parsed value of every pod in `objects`; pods not among them are forgotten."""
        out: dict[str, T] = {}
        kept: dict[str, tuple[str, T]] = {}
        for obj in objects:
            meta = obj.get("metadata") if isinstance(obj, Mapping) else None
            if not isinstance(meta, Mapping):
                meta = {}
            uid = str(meta.get("uid", ""))
            rv = str(meta.get("resourceVersion", ""))
            hit = self._items.get(uid)
            if hit is None or hit[0] != rv:
                hit = (rv, self._parse(obj))
            kept[uid] = hit
            out[uid] = hit[1]
        self._items = kept
        return out


class PodCache(ParsedPods[PodSpec]):
    """Parsed pods by uid, re-parsed only when their resourceVersion changes."""

    def __init__(self) -> None:
        super().__init__(parse_pod)


@dataclass(frozen=True, slots=True)
class ContainerCgroups:
    """A pod's containers matched to their cgroups (by runtime id, else by name)."""

    pod: str | None
    containers: Mapping[str, str]


def match_cgroups(spec: PodSpec, found: PodCgroup | None) -> ContainerCgroups:
    if found is None:
        return ContainerCgroups(None, {})
    by_id = {c.container_id: c.cgroup for c in found.containers}
    by_name = {c.name: c.cgroup for c in found.containers}
    out: dict[str, str] = {}
    for c in spec.containers:
        cg = by_id.get(c.container_id or "") or by_name.get(c.name)
        if cg is not None:
            out[c.name] = cg
    return ContainerCgroups(found.cgroup, out)
