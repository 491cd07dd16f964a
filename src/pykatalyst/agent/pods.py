"""What the agent knows about the pods on its node: cluster objects joined with the cgroups
the Host found.

A pod is read once, as its `PodDigest` (api/digest.py: identity, QoS declaration,
requests, deleting or finished), and the agent's `PodSpec` holds that digest with what only
the agent needs (containers, start time). Both are cached by (uid, resourceVersion): the
loop runs every few seconds over every pod, and a pod changes far less often than that.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from pykatalyst.agent.host.base import PodCgroup
from pykatalyst.api import names
from pykatalyst.api.digest import PROBLEM_INVALID_RESOURCES, DigestView, PodDigest, digest_pod
from pykatalyst.api.objects import Pod
from pykatalyst.api.qos import PodQoS
from pykatalyst.api.timefmt import parse_rfc3339
from pykatalyst.cluster.protocol import JSON

T = TypeVar("T")


DEFAULT_LEVEL = names.DEFAULT_QOS_LEVEL
CPU, MEMORY = names.RESOURCE_CPU, names.RESOURCE_MEMORY


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    name: str
    request_cores: float
    container_id: str | None  # from pod status, without the runtime:// prefix
    limit_cores: float = 0.0  # 0: no cpu limit
    memory_request: int = 0  # bytes


@dataclass(frozen=True, slots=True)
class PodSpec(DigestView):
    """The pod as the agent decides on it (immutable per resourceVersion): the one
    `PodDigest` every component reads, with what only the agent needs — its containers'
    cpu requests, limits and runtime ids, when it started, and the agent's word on why
    it is left alone (`error`)."""

    digest: PodDigest
    error: str | None  # why the agent leaves the pod alone (its digest's problem)
    containers: tuple[ContainerSpec, ...]
    started_at: float | None  # status.startTime, else creationTimestamp
    created_key: tuple[float, str]  # placement order for dedicated pods
    # The pod's own network namespace's addresses (status.podIPs), canonical; none for a
    # host-network pod, whose sockets are the node's. Strings that are not an address are
    # left out (the network policy classifies forwarded traffic by these).
    addresses: tuple[str, ...] = ()
    # Read off the digest once: the tick reads them for every pod, many times over.
    qos: PodQoS | None = field(init=False)  # None when the agent leaves the pod alone
    level: str = field(init=False)
    request_cores: float = field(init=False)
    memory_request: int = field(init=False)

    def __post_init__(self) -> None:
        qos = self.digest.qos if self.error is None else None
        object.__setattr__(self, "qos", qos)
        object.__setattr__(self, "level", qos.level if qos is not None else DEFAULT_LEVEL)
        object.__setattr__(self, "request_cores", self.digest.request(CPU) / 1000.0)
        object.__setattr__(self, "memory_request", self.digest.request(MEMORY))

    @property
    def main_container(self) -> ContainerSpec | None:
        """The container named by `kubernetes.io/main-container-name`, else the first;
        the others are its sidecars (Katalyst's rule)."""
        if not self.containers:
            return None
        wanted = self.digest.annotations.get(names.MAIN_CONTAINER_ANNOTATION)
        for c in self.containers:
            if c.name == wanted:
                return c
        return self.containers[0]

    @property
    def pool(self) -> str:
        qos = self.qos
        return qos.cpuset_pool if qos is not None else ""

    @property
    def finished(self) -> bool:
        return self.digest.terminal

    @property
    def spd_name(self) -> str:
        """Its ServiceProfileDescriptor (annotation), "" when none."""
        return self.digest.annotations.get(names.SPD_NAME_ANNOTATION, "")


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


def _containers(pod: Pod) -> tuple[ContainerSpec, ...]:
    """The containers' cpu requests and limits (raises ValueError when unreadable)."""
    ids = _container_ids(pod.status)
    out: list[ContainerSpec] = []
    for c in pod.containers():
        q = c.requests().get(names.RESOURCE_CPU)
        lim = c.limits().get(names.RESOURCE_CPU)
        mem = c.requests().get(names.RESOURCE_MEMORY)
        out.append(
            ContainerSpec(
                c.name,
                q.milli_value() / 1000.0 if q is not None else 0.0,
                ids.get(c.name),
                lim.milli_value() / 1000.0 if lim is not None else 0.0,
                mem.value() if mem is not None else 0,
            )
        )
    return tuple(out)


def pod_addresses(pod: Pod) -> tuple[str, ...]:
    """The pod's own addresses in canonical form (none on the host's network); what the
    status says that is not an IPv4 or IPv6 address is left out."""
    if pod.host_network:
        return ()
    out: list[str] = []
    for text in pod.pod_ips():
        try:
            out.append(str(ipaddress.ip_address(text)))
        except ValueError:
            continue
    return tuple(dict.fromkeys(out))


def parse_pod(obj: JSON, digest: PodDigest | None = None) -> PodSpec:
    """The agent's view of one pod over its digest (`digest_pod(obj)` unless given); a
    problem with the pod is recorded in `error`, never raised."""
    d = digest_pod(obj) if digest is None else digest
    if not d.readable:
        return PodSpec(d, d.problem, (), None, (math.inf, d.key))
    pod = Pod(obj)
    error = f"Pod {d.key}: {d.problem}" if d.problem else None
    containers: tuple[ContainerSpec, ...] = ()
    if d.problem_reason != PROBLEM_INVALID_RESOURCES:
        try:
            containers = _containers(pod)
        except ValueError as exc:
            error = error or f"Pod {d.key}: invalid resources: {exc}"
    started = _timestamp(pod.status.get("startTime"))
    created = _timestamp(pod.metadata.get("creationTimestamp"))
    return PodSpec(
        d,
        error,
        containers,
        started if started is not None else created,
        (created if created is not None else math.inf, d.key),
        pod_addresses(pod),
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


def nic_hold(s: PodSpec) -> tuple[int, str]:
    """A pod's net_bandwidth request (Mbps) and the NIC the scheduler chose for it."""
    selection = s.digest.annotations.get(names.NIC_SELECTION_RESULT_ANNOTATION)
    return s.digest.request(names.RESOURCE_NET_BANDWIDTH), str(selection or "")


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
