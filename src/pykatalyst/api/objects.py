"""Typed views over Kubernetes JSON.

A view wraps the dict it is given (no copy), so reading is cheap and `to_json()` hands back
exactly what was read, unknown fields included. Writers return JSON merge patches instead of
changing the object, because components write to the cluster through patches anyway.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pykatalyst.api import names
from pykatalyst.api.qos import (
    PodQoS,
    QoSError,
    bounded_quantity,
    container_resources,
    parse_pod_qos,
)
from pykatalyst.api.quantity import Quantity

ResourceList = dict[str, Quantity]
TERMINAL_PHASES = ("Succeeded", "Failed")


def _map(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _str_map(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in _map(value).items()}


def _add(into: ResourceList, other: Mapping[str, Quantity]) -> None:
    for name, quantity in other.items():
        into[name] = into[name] + quantity if name in into else quantity


def _max(into: ResourceList, other: Mapping[str, Quantity]) -> None:
    for name, quantity in other.items():
        if name not in into or quantity > into[name]:
            into[name] = quantity


def _resource_list(value: Any) -> ResourceList:
    out: ResourceList = {}
    for name, raw in _map(value).items():
        out[str(name)] = bounded_quantity(raw)
    return out


class KubeObject:
    """Common metadata accessors of any Kubernetes object."""

    __slots__ = ("raw",)

    def __init__(self, raw: dict[str, Any]) -> None:
        if not isinstance(raw, dict):
            raise TypeError(f"expected a Kubernetes object (dict), got {type(raw).__name__}")
        self.raw = raw

    def to_json(self) -> dict[str, Any]:
        return self.raw

    @property
    def metadata(self) -> dict[str, Any]:
        return _map(self.raw.get("metadata"))

    @property
    def kind(self) -> str:
        return str(self.raw.get("kind", ""))

    @property
    def api_version(self) -> str:
        return str(self.raw.get("apiVersion", ""))

    @property
    def name(self) -> str:
        return str(self.metadata.get("name") or "")

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace") or "")

    @property
    def key(self) -> str:
        """`namespace/name`, or `name` for cluster-scoped objects."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @property
    def uid(self) -> str:
        return str(self.metadata.get("uid") or "")

    @property
    def resource_version(self) -> str:
        return str(self.metadata.get("resourceVersion") or "")

    @property
    def labels(self) -> dict[str, str]:
        return _str_map(self.metadata.get("labels"))

    @property
    def annotations(self) -> dict[str, str]:
        return _str_map(self.metadata.get("annotations"))

    @property
    def deletion_timestamp(self) -> str | None:
        value = self.metadata.get("deletionTimestamp")
        return str(value) if value else None

    @property
    def owner_references(self) -> list[dict[str, Any]]:
        return [o for o in _list(self.metadata.get("ownerReferences")) if isinstance(o, dict)]

    @property
    def spec(self) -> dict[str, Any]:
        return _map(self.raw.get("spec"))

    @property
    def status(self) -> dict[str, Any]:
        return _map(self.raw.get("status"))

    def conditions(self) -> list[dict[str, Any]]:
        return [c for c in _list(self.status.get("conditions")) if isinstance(c, dict)]

    def condition(self, type_: str) -> dict[str, Any] | None:
        for condition in self.conditions():
            if condition.get("type") == type_:
                return condition
        return None

    def annotation_patch(self, values: Mapping[str, str | None]) -> dict[str, Any]:
        """A merge patch setting annotations (None removes one)."""
        return {"metadata": {"annotations": dict(values)}}

    def label_patch(self, values: Mapping[str, str | None]) -> dict[str, Any]:
        """A merge patch setting labels (None removes one)."""
        return {"metadata": {"labels": dict(values)}}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.key!r})"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    effect: str
    value: str = ""
    qos_level: str = ""

    def to_json(self) -> dict[str, str]:
        out = {"key": self.key, "effect": self.effect}
        if self.value:
            out["value"] = self.value
        if self.qos_level:
            out["qosLevel"] = self.qos_level
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Taint:
        return cls(
            key=str(raw.get("key", "")),
            effect=str(raw.get("effect", "")),
            value=str(raw.get("value", "") or ""),
            qos_level=str(raw.get("qosLevel", "") or ""),
        )


class Container:
    """A container spec inside a pod."""

    __slots__ = ("init", "raw")

    def __init__(self, raw: dict[str, Any], *, init: bool = False) -> None:
        self.raw = raw
        self.init = init

    def to_json(self) -> dict[str, Any]:
        return self.raw

    @property
    def name(self) -> str:
        return str(self.raw.get("name", ""))

    @property
    def image(self) -> str:
        return str(self.raw.get("image", ""))

    @property
    def restart_policy(self) -> str | None:
        value = self.raw.get("restartPolicy")
        return str(value) if value else None

    @property
    def is_sidecar(self) -> bool:
        """An init container that keeps running next to the app containers."""
        return self.init and self.restart_policy == "Always"

    def requests(self) -> ResourceList:
        """Requests, defaulted from limits the way the API server defaults them."""
        reqs, _, problems = container_resources(self.raw, self.name)
        if problems:
            raise ValueError(str(problems[0]))
        return reqs

    def limits(self) -> ResourceList:
        _, lims, problems = container_resources(self.raw, self.name)
        if problems:
            raise ValueError(str(problems[0]))
        return lims


class Pod(KubeObject):
    """A Pod (or a pod template: both have metadata and spec)."""

    __slots__ = ()

    @property
    def node_name(self) -> str:
        return str(self.spec.get("nodeName", "") or "")

    @property
    def phase(self) -> str:
        return str(self.status.get("phase", "") or "")

    @property
    def priority(self) -> int:
        value = self.spec.get("priority")
        return int(value) if isinstance(value, int) else 0

    @property
    def priority_class_name(self) -> str:
        return str(self.spec.get("priorityClassName", "") or "")

    @property
    def scheduler_name(self) -> str:
        return str(self.spec.get("schedulerName", "") or "default-scheduler")

    @property
    def tolerations(self) -> list[dict[str, Any]]:
        return [t for t in _list(self.spec.get("tolerations")) if isinstance(t, dict)]

    @property
    def node_selector(self) -> dict[str, str]:
        return _str_map(self.spec.get("nodeSelector"))

    @property
    def affinity(self) -> dict[str, Any]:
        return _map(self.spec.get("affinity"))

    @property
    def is_terminated(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def host_network(self) -> bool:
        return self.spec.get("hostNetwork") is True

    def pod_ips(self) -> list[str]:
        """The addresses the status gives the pod (`podIPs`, else `podIP`), as written:
        unchecked strings, in order, without repeats."""
        ips = [e.get("ip") for e in _list(self.status.get("podIPs")) if isinstance(e, dict)]
        ips.append(self.status.get("podIP"))
        return list(dict.fromkeys(ip for ip in ips if isinstance(ip, str) and ip))

    def containers(self) -> list[Container]:
        return [Container(c) for c in _list(self.spec.get("containers")) if isinstance(c, dict)]

    def init_containers(self) -> list[Container]:
        return [
            Container(c, init=True)
            for c in _list(self.spec.get("initContainers"))
            if isinstance(c, dict)
        ]

    def all_containers(self) -> Iterator[Container]:
        yield from self.init_containers()
        yield from self.containers()

    def qos(self) -> PodQoS:
        """The pod's QoS; raises `QoSError` (with `.object` set) when it is invalid."""
        try:
            return parse_pod_qos(self.raw)
        except QoSError as exc:
            exc.object = f"Pod {self.key}"
            raise

    @property
    def qos_level(self) -> str:
        return self.qos().level

    def _effective(self, part: str) -> ResourceList:
        # kube-scheduler's rule: app containers and sidecars run together; each classic init
        # container runs alone next to the sidecars started before it; the pod needs the
        # larger of the two, plus its overhead.
        total: ResourceList = {}
        sidecars: ResourceList = {}
        init_peak: ResourceList = {}
        for container in self.containers():
            _add(total, container.requests() if part == "requests" else container.limits())
        for container in self.init_containers():
            own = container.requests() if part == "requests" else container.limits()
            if container.is_sidecar:
                _add(total, own)
                _add(sidecars, own)
                candidate = dict(sidecars)
            else:
                candidate = dict(own)
                _add(candidate, sidecars)
            _max(init_peak, candidate)
        _max(total, init_peak)
        _add(total, _resource_list(self.spec.get("overhead")))
        return total

    def requests(self) -> ResourceList:
        """Effective pod requests as kube-scheduler counts them."""
        return self._effective("requests")

    def limits(self) -> ResourceList:
        """Effective pod limits, by the same rule as requests."""
        return self._effective("limits")

    def request_milli_cpu(self) -> int:
        q = self.requests().get(names.RESOURCE_CPU)
        return q.milli_value() if q is not None else 0

    def request_memory(self) -> int:
        q = self.requests().get(names.RESOURCE_MEMORY)
        return q.value() if q is not None else 0

    def reclaimed_milli_cpu(self) -> int:
        """Reclaimed cpu asked for, in milli-cores (the resource's value is milli-cores);
        the legacy name's amount adds to the current name's, as the scheduler counts it."""
        return self._summed(names.RECLAIMED_MILLICPU, names.LEGACY_RECLAIMED_MILLICPU)

    def reclaimed_memory(self) -> int:
        return self._summed(names.RECLAIMED_MEMORY, names.LEGACY_RECLAIMED_MEMORY)

    def _summed(self, *resources: str) -> int:
        reqs = self.requests()
        return sum(q.value() for r in resources if (q := reqs.get(r)) is not None)

    def node_name_patch(self, node_name: str) -> dict[str, Any]:
        return {"spec": {"nodeName": node_name}}


class Node(KubeObject):
    __slots__ = ()

    def allocatable(self) -> ResourceList:
        return _resource_list(self.status.get("allocatable"))

    def capacity(self) -> ResourceList:
        return _resource_list(self.status.get("capacity"))

    def taints(self) -> list[Taint]:
        return [Taint.from_json(t) for t in _list(self.spec.get("taints")) if isinstance(t, dict)]

    @property
    def unschedulable(self) -> bool:
        return bool(self.spec.get("unschedulable", False))

    @property
    def ready(self) -> bool:
        condition = self.condition("Ready")
        return condition is not None and condition.get("status") == "True"

    def taints_patch(self, taints: list[Taint]) -> dict[str, Any]:
        """A merge patch replacing the node's taint list (merge patches replace lists)."""
        return {"spec": {"taints": [t.to_json() for t in taints]}}


@dataclass(frozen=True, slots=True)
class TopologyZone:
    """One zone of a CNR's topology tree (Socket, Numa, or a device), flattened."""

    type: str
    name: str
    parent: str
    allocatable: Mapping[str, Quantity]
    capacity: Mapping[str, Quantity]
    allocations: tuple[tuple[str, Mapping[str, Quantity]], ...]
    # the zone's `attributes` list as name -> value (a device's topology, its model)
    attributes: Mapping[str, str] = field(default_factory=dict)


def numa_zones_of(zones: Iterable[TopologyZone]) -> list[TopologyZone]:
    """The NUMA zones of a CNR's flattened zones, ordered by id."""
    numa = [z for z in zones if z.type == names.ZONE_NUMA]
    return sorted(numa, key=lambda z: (int(z.name) if z.name.isdigit() else 1 << 30, z.name))


def _walk_zones(nodes: list[Any], parent: str, out: list[TopologyZone]) -> None:
    """Flatten a CNR's zone tree into `out`, depth first. A module function, not a nested
    one: a nested function that calls itself is a reference cycle, left for the cyclic
    collector with everything it reached."""
    for zone in nodes:
        if not isinstance(zone, dict):
            continue
        res = _map(zone.get("resources"))
        allocations = tuple(
            (str(a.get("consumer", "")), _resource_list(a.get("requests")))
            for a in _list(zone.get("allocations"))
            if isinstance(a, dict)
        )
        name = str(zone.get("name", ""))
        out.append(
            TopologyZone(
                type=str(zone.get("type", "")),
                name=name,
                parent=parent,
                allocatable=_resource_list(res.get("allocatable")),
                capacity=_resource_list(res.get("capacity")),
                allocations=allocations,
                attributes={
                    str(a.get("name", "")): str(a.get("value", ""))
                    for a in _list(zone.get("attributes"))
                    if isinstance(a, dict)
                },
            )
        )
        _walk_zones(_list(zone.get("children")), name, out)


class CustomNodeResource(KubeObject):
    """The per-node CNR the agent publishes: reclaimed resources and NUMA topology."""

    __slots__ = ()

    @property
    def resources(self) -> dict[str, Any]:
        return _map(self.status.get("resources"))

    def allocatable(self) -> ResourceList:
        return _resource_list(self.resources.get("allocatable"))

    def capacity(self) -> ResourceList:
        return _resource_list(self.resources.get("capacity"))

    def reclaimed_milli_cpu(self) -> int:
        q = self.allocatable().get(names.RECLAIMED_MILLICPU)
        return q.value() if q is not None else 0

    def reclaimed_memory(self) -> int:
        q = self.allocatable().get(names.RECLAIMED_MEMORY)
        return q.value() if q is not None else 0

    def taints(self) -> list[Taint]:
        return [Taint.from_json(t) for t in _list(self.spec.get("taints")) if isinstance(t, dict)]

    @property
    def topology_policy(self) -> str:
        return str(self.status.get("topologyPolicy", "") or names.TOPOLOGY_POLICY_NONE)

    def zones(self) -> list[TopologyZone]:
        out: list[TopologyZone] = []
        _walk_zones(_list(self.status.get("topologyZone")), "", out)
        return out

    def numa_zones(self) -> list[TopologyZone]:
        """NUMA zones ordered by id, each with its socket as `parent`."""
        return numa_zones_of(self.zones())

    def resources_status_patch(
        self, allocatable: Mapping[str, Quantity], capacity: Mapping[str, Quantity]
    ) -> dict[str, Any]:
        return {
            "status": {
                "resources": {
                    "allocatable": {k: str(v) for k, v in allocatable.items()},
                    "capacity": {k: str(v) for k, v in capacity.items()},
                }
            }
        }
